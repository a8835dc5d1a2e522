"""Full-ranking primitives (spec §3), shared by evaluation and diagnostics.

Ranks are 0-based and pessimistic: every other item scoring >= the target ranks above it. Scores of
the padding item (column 0) and, when filtering, of items in the input are -inf; a target whose own
score is -inf (it was in the input and filtering is on) therefore ranks last: a miss.
All functions work on one user chunk at a time; ``user_chunk_size`` keeps (users x items) bounded.
"""

from __future__ import annotations

import math

import torch

from resdom.errors import ResdomError
from resdom.names import CUTOFFS

KS = CUTOFFS
SCORE_BUDGET = 32_000_000  # floats per (users x items) score chunk: 128 MB in float32


def user_chunk_size(n_items: int, requested: int, budget: int = SCORE_BUDGET) -> int:
    """Largest user chunk <= requested whose score matrix (chunk, n_items + 1) fits in ``budget`` floats."""
    return max(1, min(requested, budget // (n_items + 1)))


def full_scores(hidden: torch.Tensor, item_emb: torch.Tensor, seen: torch.Tensor | None = None) -> torch.Tensor:
    """hidden (B, d), item_emb (N+1, d), seen (B, L) item ids or None -> scores (B, N+1) float.

    Column 0 (padding) is -inf; with ``seen``, items in each row's input are -inf (seen-item filtering).
    A NaN or infinite score of a real item is a ResdomError: NaN compares false with everything, so ranking it
    would make every such target a hit at rank 0 (or -1).
    """
    scores = hidden @ item_emb.T
    # a finite sum means every score is finite (one fast pass); else look at the scores themselves (a sum of
    # finite scores can overflow)
    if not bool(torch.isfinite(scores[:, 1:].sum())) and not bool(torch.isfinite(scores[:, 1:]).all()):
        raise ResdomError(
            "the model scores items as NaN or infinity, so no ranking of them means anything; its weights are "
            "broken (non-finite values, or overflow): retrain or re-import the run"
        )
    scores[:, 0] = -math.inf
    if seen is not None:
        scores.scatter_(1, seen, -math.inf)  # seen 0 (padding) hits column 0, already -inf
    return scores


def pessimistic_ranks(scores: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """scores (B, N+1), items (B,) or (B, k) -> 0-based ranks of those items, same shape as ``items``.

    rank = number of other items with score >= the item's score (ties count against the item).
    """
    flat = items.dim() == 1
    cols = items[:, None] if flat else items
    own = scores.gather(1, cols)  # (B, k)
    # int32 accumulation: about 2x faster than summing bools into int64 on CPU (counts <= N + 1 < 2^31)
    ranks = (scores[:, None, :] >= own[:, :, None]).sum(-1, dtype=torch.int32).to(torch.int64) - 1
    return ranks[:, 0] if flat else ranks


def metrics_from_ranks(ranks: torch.Tensor, ks: tuple[int, ...] = KS) -> dict[str, float]:
    """ranks (n,) 0-based -> {"HR@K" for K in ks, "NDCG@K" for K in ks, "MRR"} in that order (``names.metric_key``),
    means over users (NDCG = 1/log2(rank+2))."""
    ranks = ranks.double()
    out: dict[str, float] = {}
    ks = tuple(sorted(ks))
    for k in ks:
        out[f"HR@{k}"] = (ranks < k).double().mean().item()
    for k in ks:
        out[f"NDCG@{k}"] = torch.where(ranks < k, 1.0 / torch.log2(ranks + 2.0), 0.0).mean().item()
    out["MRR"] = (1.0 / (ranks + 1.0)).mean().item()
    return out
