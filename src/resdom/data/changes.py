"""What happened to the user's data on the way to a split, as counts (the manifest's ``changes``) and as the lines
every command that prepares data prints (``change_lines``): nothing about the data changes silently.

``changes`` (plain JSON)::

    read:     {"users", "items", "interactions", "format"}      as read, before anything else
    ids:      "exact" (labels kept as read) or "normalized" (normalize_ids)
    time:     {"kind": "timestamps" | "no_time" | "ignored" | "format_order", "fractional": bool,
               "equal_time_neighbours": n, "rule": the tie rule}
    repeats:  {"repeat_rows": rows repeating an earlier (user, item) pair, "consecutive": of them right after the
               same item, "removed": how many were removed (--remove-repeats; 0: all kept), "same_time": of them at
               the very time of an earlier one (only where there are any)}
    sample_users: {"n", "seed", "users", "items", "interactions"} left out by a user sample (only when sampling)
    k_core:   {"k", "users", "items", "interactions"} removed, or None (off)
    removed:  {"users", "items", "interactions"} removed by preprocessing in all
    notes:    what the reader noted (a rating column ignored, ...)
    protocol: {"rule": "auto", "protocol", "timestamps"}: the protocol the default, auto, chose (only then)
    split:    {"protocol", "users_dropped" (in no part), "users_partly_used", "interactions_unused" (in no part),
               "items_unused" (in no part, still in the catalogue), "reasons": the split's dropped_users}

The manifest's ``changes`` is descriptive: it is left out of the data fingerprint (``runs.data_fingerprint``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from resdom.checks import arg, naming_flags
from resdom.data.preprocess import Prepared, PreprocessConfig
from resdom.data.readers import RawInteractions
from resdom.data.sequences import Sequences
from resdom.limits import cut_message
from resdom.records import counted


def preprocessing_changes(raw: RawInteractions, read: dict[str, int], prepared: Prepared, cfg: PreprocessConfig,
                          no_time: bool, normalized: bool = False) -> dict[str, Any]:
    """The ``changes`` of reading and preprocessing (module docstring) of ``raw`` into ``prepared``."""
    order = next((s for s in prepared.steps if s["step"] == "order"), {})
    if raw.times is not None:
        kind = "timestamps" if cfg.sort_by_time else "ignored"
    elif any("ignored (no_time)" in n for n in raw.notes):
        kind = "ignored"
    else:
        kind = "no_time" if no_time else "format_order"
    time = {"kind": kind, "fractional": bool(raw.times is not None and raw.times.dtype.kind == "f"),
            "equal_time_neighbours": int(order.get("equal_time_neighbours", 0)), "rule": prepared.tie_rule}
    return {"read": {**read, "format": raw.fmt}, "ids": "normalized" if normalized else "exact", "time": time,
            **prepared.changes, "notes": list(raw.notes)}


def split_changes(info: dict[str, Any], seqs: Sequences, used: np.ndarray, used_items: np.ndarray,
                  n_items: int) -> dict[str, Any]:
    """The ``changes.split`` of a split of ``seqs``: ``used`` int (U,) the longest prefix of each user some part
    holds, ``used_items`` the items of those prefixes."""
    lengths = seqs.lengths
    dropped_by = _dropped_by(info, seqs, used)
    return {
        "protocol": info.get("protocol"),
        "users_dropped": int(((used == 0) & (lengths > 0)).sum()),
        "users_partly_used": int(((used > 0) & (used < lengths)).sum()),
        "interactions_unused": int((lengths - used).sum()),
        "items_unused": int(n_items - len(np.unique(used_items))),
        "reasons": info.get("dropped_users"),
        **({"dropped_by": dropped_by} if dropped_by else {}),
        **({"holdout_users": info["holdout_users"]} if info.get("holdout_users") else {}),
    }


def _dropped_by(info: dict[str, Any], seqs: Sequences, used: np.ndarray) -> dict[str, int]:
    """GTS: why each user in no part of the split is there, one reason per user, so the reasons add up to the users
    in no part (the manifest's ``dropped_users`` counts each step's rule over all users, some of whom another part
    holds). A user with one interaction is in no part: after T_test it is a test target without an input, at or
    before it a training sequence too short to learn from. {} for other protocols (their reasons add up)."""
    thresholds = info.get("thresholds")
    if info.get("protocol") != "gts" or not isinstance(thresholds, dict) or seqs.times is None:
        return {}
    lengths = seqs.lengths
    none = (used == 0) & (lengths > 0)
    last = np.zeros(len(seqs))
    last[lengths > 0] = seqs.times[seqs.offsets[1:][lengths > 0] - 1]
    after = last > thresholds["T_test"]
    out = {"one interaction, after T_test": int((none & after).sum()),
           "fewer than 2 interactions, all at or before T_test": int((none & ~after & (lengths < 2)).sum()),
           "too few at or before T_val": int((none & ~after & (lengths >= 2)).sum())}
    return {k: v for k, v in out.items() if v}


def _verb(count: int, verb: str) -> str:
    """``verb`` agreeing with ``count`` things: 1 row repeats, 2 rows repeat."""
    return f"{verb}s" if count == 1 else verb


def _time_line(time: dict[str, Any], fmt: str) -> str:
    kind = time.get("kind")
    if kind == "timestamps":
        ties = time.get("equal_time_neighbours", 0)
        frac = " (fractional seconds kept)" if time.get("fractional") else ""
        return (f"order: each user's interactions by timestamp{frac}; {counted(ties, 'pair')} of neighbours with equal "
                f"times {_verb(ties, 'keep')} file order" if "source order" in str(time.get("rule")) else
                f"order: each user's interactions by timestamp{frac}; {time.get('rule')}")
    if kind == "ignored":
        return f"order: timestamps ignored ({arg('no_time', True)}): each user's interactions in file row order"
    if kind == "no_time":
        return f"order: no timestamps ({arg('no_time', True)}): each user's interactions in file row order"
    return f"order: the {fmt} format has no timestamps: each user's interactions in file order"


def split_reasons(reasons: Any) -> str:
    """A split's ``dropped_users`` as words: ``fewer than 3 items: 2``, ``test: eval users with one interaction: 1``."""
    flat: list[str] = []

    def walk(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            name = f"{prefix}{k}".replace("_", " ")
            if isinstance(v, dict):
                walk(v, name + ": ")
            elif isinstance(v, int) and v:
                flat.append(f"{name}: {v:,}")

    if isinstance(reasons, dict):
        walk(reasons, "")
    return ", ".join(flat)


def change_lines(manifest: dict[str, Any], saved: bool = False) -> list[str]:
    """What happened to the data (the manifest's ``changes``), one line per stage; [] for a manifest without it.
    ``saved``: the manifest of a split read back from its folder (``resdom data split``), which no option changes:
    what the lines advise (another protocol, a lower quantile) is a new split of the data, not an option."""
    c = manifest.get("changes")
    if not isinstance(c, dict) or "read" not in c:
        return []
    r = c["read"]
    fmt = r.get("format", "?")
    ids = "ids kept exactly as read" if c.get("ids") == "exact" else f"ids normalized ({arg('normalize_ids', True)})"
    lines = [f"read {counted(r['interactions'], 'interaction')} of {counted(r['users'], 'user')} and "
             f"{counted(r['items'], 'item')} ({fmt}); {ids}"]
    lines += [f"note: {n}" for n in c.get("notes", []) if "no_time" not in n]
    lines.append(_time_line(c.get("time", {}), fmt))
    rep = c.get("repeats", {})
    fate = (f"{rep.get('removed', 0):,} consecutive removed ({arg('remove_repeats', True)})" if rep.get("removed")
            else "all kept")
    repeats = rep.get("repeat_rows", 0)
    same = rep.get("same_time")
    twice = f", {same:,} at the very time of an earlier one (an event logged twice?)" if same else ""
    lines.append(f"repeats: {counted(repeats, 'row')} {_verb(repeats, 'repeat')} an earlier (user, item) pair, "
                 f"{rep.get('consecutive', 0):,} of them right after the same item{twice}; {fate}")
    sample = c.get("sample_users")
    if sample:
        lines.append(f"user sample: {sample['n']:,} users drawn (seed {sample['seed']}); left out "
                     f"{counted(sample['users'], 'user')}, {counted(sample['items'], 'item')}, "
                     f"{counted(sample['interactions'], 'interaction')}")
    k = c.get("k_core")
    lines.append(f"k-core {k['k']}: removed {counted(k['users'], 'user')}, {counted(k['items'], 'item')}, "
                 f"{counted(k['interactions'], 'interaction')}" if k else "k-core: off (no user or item filtered)")
    chosen = c.get("protocol")
    if isinstance(chosen, dict):  # protocol "auto", resolved from the data (prepare.resolve_protocol)
        lines.append(f"protocol: {chosen.get('protocol')}, chosen by auto: the data has "
                     + ("timestamps (gts: train on the past, test on the future)" if chosen.get("timestamps") else
                        "no timestamps (loo: leave-one-out)")
                     + ("; split the data again to choose another protocol" if saved else
                        "; name another protocol to override"))
    s = c.get("split")
    if s:
        why = split_reasons(s.get("reasons"))
        if isinstance(s.get("dropped_by"), dict):  # GTS: one reason per user, adding up to the users in no part
            why = "; ".join(f"{k}: {v:,}" for k, v in s["dropped_by"].items())
        if s["users_dropped"] or s["interactions_unused"]:
            line = (f"{s.get('protocol')} split: {counted(s['users_dropped'], 'user')} in no part"
                    f"{' (' + why + ')' if why else ''}, {counted(s['interactions_unused'], 'interaction')} in no part")
            if s.get("users_partly_used"):
                line += f" ({counted(s['users_partly_used'])} partly)"
            line += "; kept for `recommend`"
        else:
            line = (f"{s.get('protocol')} split: every user and interaction in a part" if s.get("protocol") != "none"
                    else "none split: every user and interaction in training (nothing held out"
                    + (f" but the last item of {counted(s['holdout_users'], 'user')}, for early stopping" if
                       s.get("holdout_users") else "") + ")")
        lines.append(line)
        if s.get("items_unused"):
            lines.append(f"{counted(s['items_unused'], 'item')} in no part of the split (still in the catalogue)")
    small = small_parts(manifest)
    if small:
        lines.append(f"warning: only {' and '.join(counted(n, f'{part} user') for part, n in small)} (fewer than "
                     f"{SMALL_PART}): early stopping and the metrics rest on few users and will vary from split to "
                     f"split; {_steadier(manifest.get('protocol'), saved)}")
    return [cut_message(line) for line in lines]  # a manifest read from a folder may quote anything


SMALL_PART = 100  # fewer validation or test users than this: change_lines warns


def _steadier(protocol: Any, saved: bool = False) -> str:
    """What gives a split of few evaluation users steadier numbers: more data always; under gts also an earlier
    T_test (a lower quantile holds out every user active after it) or leave-one-out (a test user for every user with
    3 items or more, docs/choices.md); under loo every such user is already one. ``saved``: a saved split, which
    takes neither option: the data split again does (``resdom data split``, ``prepare_split``)."""
    if protocol == "gts":
        again = f"the data split again ({'`resdom data split`' if naming_flags() else 'prepare_split'}) with " \
            if saved else ""
        return (f"more data, {again}a lower {arg('quantile')} (an earlier T_test holds out more users) or "
                f"{arg('protocol', 'loo')} (every user with 3 items or more a test user) gives steadier numbers")
    return "more data gives steadier numbers (leave-one-out already tests every user with 3 items or more)"


def small_parts(manifest: dict[str, Any]) -> list[tuple[str, int]]:
    """[(part, users)] of a loo or gts split's validation and test sets with fewer than ``SMALL_PART`` users."""
    counts = manifest.get("counts")
    if manifest.get("protocol") not in ("loo", "gts") or not isinstance(counts, dict):
        return []
    names = {"valid": "validation", "test": "test"}
    return [(names[part], int(counts[part]["users"])) for part in ("valid", "test")
            if isinstance(counts.get(part), dict) and int(counts[part].get("users", 0)) < SMALL_PART]
