"""Numbers read out of stored results (a diagnostic's ``to_dict()`` JSON, ``metrics.json``), torch-free: shared by
the report's tables (``report.values``) and the training monitor (``diagnostics.monitor``)."""

from __future__ import annotations

from typing import Any


def number_at(d: Any, *path: str) -> float | None:
    """The number at ``d[path[0]][path[1]]...`` of a result's ``to_dict()``, or None where absent / not a number."""
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def seen_unseen(hrli: dict[str, Any]) -> dict[str, float | None]:
    """From ``hrli.json``'s ``by_frequency`` bands (the first band: last items never in training): the share of users
    whose last item never occurs in training (``unseen_share``), HRLI@1 over those (``HRLI@1_unseen``) and over the
    others (``HRLI@1_seen``, the user-weighted mean of the other bands); None where the bands are absent or empty."""
    out: dict[str, float | None] = {"unseen_share": None, "HRLI@1_unseen": None, "HRLI@1_seen": None}
    bands = hrli.get("by_frequency") if isinstance(hrli, dict) else None
    if not isinstance(bands, dict) or not bands:
        return out
    rows = [(number_at(b, "n_users") or 0, number_at(b, "values", "HRLI@1")) for b in bands.values()]
    (n_cold, cold), warm = rows[0], [(n, v) for n, v in rows[1:] if n]
    n_warm = sum(n for n, _ in warm)
    if n_cold + n_warm:
        out["unseen_share"] = n_cold / (n_cold + n_warm)
    out["HRLI@1_unseen"] = cold if n_cold else None
    if n_warm:
        out["HRLI@1_seen"] = sum(n * (v or 0.0) for n, v in warm) / n_warm
    return out
