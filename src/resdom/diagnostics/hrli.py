"""Last-item hit rates (spec §4): ``HRLkI@K`` = share of evaluated users whose k-th most recent input item is in
the unfiltered top-K of the final-position prediction.

k = 1 is HRLI, k = 2 HRL2I, k = 3 HRL3I. Users with fewer than k input items count as misses. Rankings are
never filtered: with seen-item filtering every input item scores -inf and HRLI is identically 0, so the API
refuses ``filter_seen=True`` rather than report that.

Given the items' training frequencies (``train_counts``: how often each item occurs in the training sequences),
the same rates are also reported per band of the user's last input item's frequency (``FREQUENCY_BANDS``: never
in training, 1-4, 5-19, 20 or more times). A last item the model never saw in training has an embedding that
was trained only as a negative (or not at all), so what the residual carries from it scores low: under a
temporal split, where the last input items include items that appear only after the training period, the
overall HRLI@1 mixes these cold items with warm ones (docs/results.md, video-ts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from resdom.data.sequences import EvalSet
from resdom.diagnostics.common import (
    DEFAULT_BATCH,
    MISS,
    all_users,
    batches,
    check_model,
    inference,
    jsonable,
    rank_items,
    recent_items,
)
from resdom.models.interface import Diagnosable, final_states
from resdom.names import FREQUENCY_BANDS, band_names

if TYPE_CHECKING:
    import pandas as pd


def hrli_name(k: int, K: int) -> str:
    """"HRLI@K" for k = 1, "HRLkI@K" otherwise (docs/architecture.md)."""
    return f"HRLI@{K}" if k == 1 else f"HRL{k}I@{K}"


@dataclass
class HRLIResult:
    """values: {"HRLI@1": v, "HRL2I@1": v, ...} over ``n_users`` (unfiltered rankings). ``by_frequency``: the same
    per band of the last input item's training frequency, ``{band: {"n_users": n, "values": {...}}}`` (every band
    of ``FREQUENCY_BANDS``, users without an input item in none), or None when the frequencies were not given."""

    values: dict[str, float]
    n_users: int
    split: str | None = None
    by_frequency: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"split": self.split, "n_users": self.n_users, "filtered": False, "values": self.values}
        if self.by_frequency is not None:
            d["by_frequency"] = self.by_frequency
        return jsonable(d)

    def to_frame(self) -> pd.DataFrame:
        """pandas DataFrame, one row per HRLkI@K and last-item band: columns ``metric``, ``recency`` (k), ``cutoff``
        (K), ``band`` ("all", or a band of the last item's training frequency), ``n_users``, ``value``."""
        import pandas as pd

        groups = [("all", self.n_users, self.values)]
        groups += [(band, b["n_users"], b["values"]) for band, b in (self.by_frequency or {}).items()]
        rows = []
        for band, n, values in groups:
            for name, v in values.items():
                head, _, K = name.partition("@")
                k = head[3:-1] or "1"  # "HRLI" -> 1, "HRL2I" -> 2
                rows.append((name, int(k), int(K), band, n, v))
        return pd.DataFrame(rows, columns=["metric", "recency", "cutoff", "band", "n_users", "value"])


def hrli_from_ranks(ranks: np.ndarray, ks: Sequence[int], Ks: Sequence[int]) -> dict[str, float]:
    """ranks int (n, len(ks)): 0-based unfiltered rank of each user's k-th most recent item (MISS if absent)."""
    out = {}
    for col, k in enumerate(ks):
        for K in Ks:
            hit = (ranks[:, col] < K) & (ranks[:, col] < MISS)  # an absent item never within K, however large
            out[hrli_name(k, K)] = float(hit.mean()) if len(ranks) else float("nan")
    return out


def hrli_by_frequency(ranks: np.ndarray, last_counts: np.ndarray, ks: Sequence[int], Ks: Sequence[int],
                      edges: Sequence[int] = FREQUENCY_BANDS) -> dict[str, dict[str, Any]]:
    """``hrli_from_ranks`` per band of ``last_counts`` (n,): each user's last input item's training frequency, -1
    for a user without input items (in no band)."""
    return {name: {"n_users": int(mask.sum()), "values": hrli_from_ranks(ranks[mask], ks, Ks)}
            for name, mask in band_masks(last_counts, edges).items()}


def band_masks(last_counts: np.ndarray, edges: Sequence[int] = FREQUENCY_BANDS) -> dict[str, np.ndarray]:
    """{band name: bool mask (n,)} of the users whose last input item's training frequency (``last_counts``) lies
    in each band (-1, a user without input items, in none)."""
    return {name: (last_counts >= lo) & (last_counts < hi if hi is not None else True)
            for name, lo, hi in zip(band_names(tuple(edges)), edges, [*edges[1:], None])}


def last_item_ranks(
    model: Diagnosable, evalset: EvalSet, index: np.ndarray, states: torch.Tensor, ks: Sequence[int]
) -> torch.Tensor:
    """states (B, d) final-position outputs of ``evalset[index]`` -> int64 (B, len(ks)) unfiltered ranks."""
    recent = np.stack([recent_items(evalset.inputs, index, k) for k in ks], 1)
    items = torch.from_numpy(recent).to(states.device)
    return rank_items(model, states, items, None)


def last_item_hit_rates(
    model: Diagnosable, evalset: EvalSet, ks: Sequence[int] = (1, 2, 3), Ks: Sequence[int] = (1, 5, 10),
    filter_seen: bool = False, batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None,
    progress: bool = False, train_counts: np.ndarray | None = None,
) -> HRLIResult:
    """HRLkI@K for every k in ``ks`` and K in ``Ks`` on the model's unfiltered final-position rankings;
    ``train_counts`` (n_items + 1,): each item's number of occurrences in the training sequences
    (``data.sequences.item_counts``), for the rates per band of the last item's frequency."""
    if filter_seen:
        raise ValueError(
            "last-item hit rates need unfiltered rankings: with seen-item filtering every input item scores "
            "-inf, so HRLI would be identically 0 (call with filter_seen=False)"
        )
    if any(k < 1 for k in ks) or any(K < 1 for K in Ks):
        raise ValueError(f"k and K must be >= 1 (got ks={tuple(ks)}, Ks={tuple(Ks)})")
    model = check_model(model)
    parts, order = [], []
    with inference(model):
        for idx, items, _ in batches(model, evalset, batch_size, device, "hrli", progress):
            states = final_states(model, items)
            parts.append(last_item_ranks(model, evalset, idx, states, ks).cpu().numpy())
            order.append(idx)
    local = np.concatenate(parts) if parts else np.zeros((0, len(ks)), dtype=np.int64)
    ranks = all_users(local, len(evalset), np.concatenate(order) if order else np.zeros(0, dtype=np.int64))
    bands = None
    if train_counts is not None:
        last = recent_items(evalset.inputs, np.arange(len(evalset)), 1)
        counts = np.where(last > 0, np.asarray(train_counts)[last], -1)
        bands = hrli_by_frequency(ranks, counts, ks, Ks)
    return HRLIResult(hrli_from_ranks(ranks, ks, Ks), len(evalset), by_frequency=bands)
