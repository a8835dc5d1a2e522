"""The full-ranking evaluation loop (spec §3).

Each user's prediction is read at the last column of the left-padded input (``interface.final_states``: the
model's readout of ``encode(items)``, by default ``encode(items)[:, -1]``) and
scored against every item; ranks are 0-based and pessimistic (``ranking.py``). With ``filter_seen`` every
item of the user's whole input sequence scores -inf, not only the last ``max_len`` items the model reads (as
in BSARec's code, which removes the whole history), so a target that is in its own input is not ranked: a miss
at every K, whatever the catalogue size, with reciprocal rank 0 (``ranking.MISS``). Users are processed in
chunks of similar input length (longest first,
each chunk left-padded to its own longest window: ``batches.iter_eval_batches(by_length=True)``), ranked a tile
of items at a time (``ranking.tiled_ranks``: no (users x items) matrix; the kept tiles stay within
``ranking.SCORE_BUDGET``); ranks come back in evaluation-set order.
Under ``torch.distributed`` with more than one process, users are sharded ``index[rank::world]`` and the ranks
gathered, so every process returns the metrics of the whole set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.nn import parallel as nn_parallel

from resdom.data.sequences import EvalSet
from resdom.distributed import gather_users, rank_and_world
from resdom.evaluation.batches import (
    activation_chunk,
    history_pairs,
    in_user_order,
    iter_eval_batches,
    share,
    with_progress,
)
from resdom.evaluation.ranking import KS, metrics_from_ranks, tiled_chunk_size, tiled_ranks
from resdom.models.interface import eval_mode, final_states

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class EvalResult:
    """metrics: {"HR@K", "NDCG@K", "MRR"} means over ``n_users`` (and the beyond-accuracy metrics where asked,
    ``evaluation.beyond``); ranks: int64 (n_users,) 0-based, in evaluation-set order, when requested; users: one
    row per evaluated user (a pandas DataFrame: ``resdom.evaluate`` fills it), None otherwise."""

    metrics: dict[str, float]
    n_users: int
    ranks: np.ndarray | None = None
    users: pd.DataFrame | None = None

    def __repr__(self) -> str:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in list(self.metrics.items())[:4])
        more = f", ... {len(self.metrics) - 4} more" if len(self.metrics) > 4 else ""
        return f"EvalResult({self.n_users:,} users: {shown}{more})"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data: ``{"metrics": {...}, "n_users": n}`` (ranks are left out)."""
        return {"metrics": dict(self.metrics), "n_users": int(self.n_users)}

    def to_frame(self) -> pd.DataFrame:
        """A pandas DataFrame, one row per metric: columns ``metric``, ``value``, ``n_users``."""
        import pandas as pd

        return pd.DataFrame([{"metric": k, "value": v, "n_users": self.n_users} for k, v in self.metrics.items()])


def _unwrap(model: Any) -> Any:
    """The model inside a DistributedDataParallel / DataParallel wrapper (they hide ``encode``)."""
    return model.module if isinstance(model, (nn_parallel.DistributedDataParallel, nn_parallel.DataParallel)) else model


def _users(batch: tuple[np.ndarray, torch.Tensor, torch.Tensor]) -> int:
    """The users of a batch of ``iter_eval_batches`` (what progress counts)."""
    return len(batch[0])


def _local_ranks(
    model: Any, evalset: EvalSet, index: np.ndarray, filter_seen: bool, batch_size: int, device: torch.device,
    progress: bool = False,
) -> torch.Tensor:
    """Ranks int64 (len(index),) of the targets of ``evalset[index]``, in ``index`` order."""
    chunk = tiled_chunk_size(model.n_items, activation_chunk(model, evalset.inputs.lengths, batch_size))
    item_emb = model.item_embeddings()
    out, order = [], []
    it = iter_eval_batches(evalset, model.max_len, chunk, device, index, by_length=True)
    rank, world = rank_and_world()
    desc = share("evaluate", len(evalset), rank, world)
    for idx, items, targets in with_progress(it, len(index), progress, desc, unit="user", size=_users):
        hidden = final_states(model, items)  # (B, d): prediction at the last column (the model's readout)
        seen = history_pairs(evalset.inputs, idx, device) if filter_seen else None
        out.append(tiled_ranks(hidden, item_emb, targets, seen).cpu())  # as pessimistic_ranks of full_scores
        order.append(idx)
    return in_user_order(torch.cat(out), np.concatenate(order)) if out else torch.zeros(0, dtype=torch.int64)


def evaluate(
    model: Any,
    evalset: EvalSet,
    *,
    filter_seen: bool = True,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    ks: tuple[int, ...] = KS,
    return_ranks: bool = False,
    progress: bool = False,
) -> EvalResult:
    """Full-ranking HR@K, NDCG@K (K in ``ks``) and MRR of ``model`` on ``evalset``.

    ``model``: any Diagnosable (``encode``, ``item_embeddings``, ``n_items``, ``max_len``), already on
    ``device``; it runs in eval mode under no_grad and its train/eval mode is restored afterwards.
    ``batch_size`` is the most users per chunk (lowered for large catalogs); results do not depend on it.
    ``progress``: on stderr, a bar of the users on a terminal, plain lines in a log (``with_progress``).
    """
    device = torch.device(device)
    inner = _unwrap(model)
    rank, world = rank_and_world()
    n = len(evalset)
    index = np.arange(rank, n, world, dtype=np.int64)
    with eval_mode(inner), torch.no_grad(), torch.autocast(device.type, enabled=False):  # float32 in autocast too
        ranks = _local_ranks(inner, evalset, index, filter_seen, batch_size, device, progress)
    if world > 1:
        ranks = gather_users(ranks, n, rank, world)
    return EvalResult(
        metrics=metrics_from_ranks(ranks, tuple(ks)),
        n_users=n,
        ranks=ranks.numpy() if return_ranks else None,
    )

