"""Last-item hit rates (spec §4): ``HRLkI@K`` = share of evaluated users whose k-th most recent input item is in
the unfiltered top-K of the final-position prediction.

k = 1 is HRLI, k = 2 HRL2I, k = 3 HRL3I. Users with fewer than k input items count as misses. Rankings are
never filtered: with seen-item filtering every input item scores -inf and HRLI is identically 0, so the API
refuses ``filter_seen=True`` rather than report that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from resdom.data.sequences import EvalSet
from resdom.diagnostics.common import (
    DEFAULT_BATCH,
    all_users,
    batches,
    check_model,
    inference,
    jsonable,
    number_at,
    ranks_of,
    recent_items,
    scores_at,
)
from resdom.models.interface import Diagnosable, final_states

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def hrli_name(k: int, K: int) -> str:
    """"HRLI@K" for k = 1, "HRLkI@K" otherwise (docs/architecture.md)."""
    return f"HRLI@{K}" if k == 1 else f"HRL{k}I@{K}"


@dataclass
class HRLIResult:
    """values: {"HRLI@1": v, "HRL2I@1": v, ...} over ``n_users`` (unfiltered rankings)."""

    values: dict[str, float]
    n_users: int
    split: str | None = None

    TABLE_KEYS: ClassVar[tuple[str, ...]] = ("HRLI@1", "HRL2I@1", "HRL3I@1", "HRLI@10", "HRL2I@10")

    @classmethod
    def table_values(cls, d: dict[str, Any]) -> dict[str, float | None]:
        """The numbers of this result's ``to_dict()`` that the report's tables show, by table key."""
        return {k: number_at(d, "values", k) for k in cls.TABLE_KEYS}

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"split": self.split, "n_users": self.n_users, "filtered": False, "values": self.values})

    def to_frame(self) -> pd.DataFrame:
        """pandas DataFrame, one row per HRLkI@K: columns ``metric``, ``recency`` (k), ``cutoff`` (K), ``value``."""
        import pandas as pd

        rows = []
        for name, v in self.values.items():
            head, _, K = name.partition("@")
            k = head[3:-1] or "1"  # "HRLI" -> 1, "HRL2I" -> 2
            rows.append((name, int(k), int(K), v))
        return pd.DataFrame(rows, columns=["metric", "recency", "cutoff", "value"])

    def plot(self, model: str = "model") -> Figure:
        """Bars of HRLI@1, HRL2I@1, HRLI@10 and HRL2I@10 (a matplotlib Figure)."""
        from resdom.report.figures import result_figure

        return result_figure("hrli", self.to_dict(), model)


def hrli_from_ranks(ranks: np.ndarray, ks: Sequence[int], Ks: Sequence[int]) -> dict[str, float]:
    """ranks int (n, len(ks)): 0-based unfiltered rank of each user's k-th most recent item (MISS if absent)."""
    out = {}
    for col, k in enumerate(ks):
        for K in Ks:
            out[hrli_name(k, K)] = float((ranks[:, col] < K).mean()) if len(ranks) else float("nan")
    return out


def last_item_ranks(
    model: Diagnosable, evalset: EvalSet, index: np.ndarray, states: torch.Tensor, ks: Sequence[int]
) -> torch.Tensor:
    """states (B, d) final-position outputs of ``evalset[index]`` -> int64 (B, len(ks)) unfiltered ranks."""
    recent = np.stack([recent_items(evalset.inputs, index, k) for k in ks], 1)
    items = torch.from_numpy(recent).to(states.device)
    return ranks_of(scores_at(model, states, None), items)


def last_item_hit_rates(
    model: Diagnosable, evalset: EvalSet, ks: Sequence[int] = (1, 2, 3), Ks: Sequence[int] = (1, 5, 10),
    filter_seen: bool = False, batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None,
    progress: bool = False,
) -> HRLIResult:
    """HRLkI@K for every k in ``ks`` and K in ``Ks`` on the model's unfiltered final-position rankings."""
    if filter_seen:
        raise ValueError(
            "last-item hit rates need unfiltered rankings: with seen-item filtering every input item scores "
            "-inf, so HRLI would be identically 0 (call with filter_seen=False)"
        )
    if any(k < 1 for k in ks) or any(K < 1 for K in Ks):
        raise ValueError(f"k and K must be >= 1 (got ks={tuple(ks)}, Ks={tuple(Ks)})")
    model = check_model(model)
    parts = []
    with inference(model):
        for idx, items, _ in batches(model, evalset, batch_size, device, "hrli", progress):
            states = final_states(model, items)
            parts.append(last_item_ranks(model, evalset, idx, states, ks).cpu().numpy())
    ranks = all_users(np.concatenate(parts) if parts else np.zeros((0, len(ks)), dtype=np.int64), len(evalset))
    return HRLIResult(hrli_from_ranks(ranks, ks, Ks), len(evalset))
