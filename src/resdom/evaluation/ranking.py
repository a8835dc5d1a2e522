"""Full-ranking primitives (spec §3), shared by evaluation and diagnostics.

Ranks are 0-based and pessimistic: every other item scoring >= the target ranks above it. Scores of
the padding item (column 0) and, when filtering, of items in the input are -inf; a target whose own
score is -inf (it was in the input and filtering is on) is not ranked at all: its rank is ``MISS``, a miss
at every K whatever the catalogue size (a catalogue of fewer than K items would otherwise count it as a hit),
with reciprocal rank 0.
All functions work on one user chunk at a time; ``user_chunk_size`` keeps (users x items) bounded.

``tiled_ranks`` ranks without the (users x items) matrix: it scores ``ITEM_TILE`` items at a time and counts each
tile while it sits in cache, the targets' own scores taken from the same tile products (those tiles are made
first and kept, ``tiled_chunk_size`` bounds them), so ties count exactly as in ``pessimistic_ranks`` of
``full_scores``. Its ranks equal theirs wherever the tile products equal the columns of the full product (MKL's
on x86: checked by ``tests/test_evaluation_ranking.py``).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from resdom.errors import ResdomError
from resdom.names import CUTOFFS

KS = CUTOFFS
SCORE_BUDGET = 32_000_000  # floats per (users x items) score chunk: 128 MB in float32
MISS = int(np.iinfo(np.int64).max // 4)  # rank of an item that cannot be recommended (filtered out, absent)
ITEM_TILE = 2048  # items per score tile of ``tiled_ranks``: a (users x tile) block stays in the core's cache


def exact(fn):
    """Run ``fn(hidden, ...)`` with autocast off on ``hidden``'s device: scores and ranks are float32 even inside a
    bfloat16 autocast region (a training step's), so evaluation and every diagnostic rank exactly as without it."""

    @functools.wraps(fn)
    def wrapped(hidden: torch.Tensor, *args, **kwargs):
        with torch.autocast(hidden.device.type, enabled=False):
            return fn(hidden, *args, **kwargs)

    return wrapped


def user_chunk_size(n_items: int, requested: int, budget: int = SCORE_BUDGET) -> int:
    """Largest user chunk <= requested whose score matrix (chunk, n_items + 1) fits in ``budget`` floats."""
    return max(1, min(requested, budget // (n_items + 1)))


def tiled_chunk_size(n_items: int, requested: int, k: int = 1, tile: int = ITEM_TILE,
                     budget: int = SCORE_BUDGET) -> int:
    """Largest user chunk B <= requested whose kept tiles in ``tiled_ranks`` (at most one per target, and no more
    than there are tiles: B * min(B * k, tiles) * tile floats, k items ranked per user) fit in ``budget`` floats."""
    n_tiles = -(-(n_items + 1) // tile)
    width = min(tile, n_items + 1)
    B = max(1, requested)
    while B > 1 and B * min(B * k, n_tiles) * width > budget:
        B -= max(1, B // 8)
    return B


Seen = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # (B, L) item ids (0: padding), or (rows, items) pairs


def seen_pairs(seen: Seen) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, items) int64, one pair a seen item: ``seen`` as it is where it is pairs already
    (``batches.history_pairs``: memory the batch's interactions, not users x its longest history), else each entry
    of the (B, L) matrix with its row (padding 0 included: column 0 is -inf anyway)."""
    if isinstance(seen, tuple):
        return seen
    return torch.arange(seen.shape[0], device=seen.device).repeat_interleave(seen.shape[1]), seen.reshape(-1)


def mask_seen(scores: torch.Tensor, seen: Seen | None) -> torch.Tensor:
    """``scores`` (B, N+1) with every seen item of each row at -inf, in place (``seen``: ``Seen``, None: none)."""
    if seen is None:
        return scores
    if isinstance(seen, tuple):
        scores[seen[0], seen[1]] = -math.inf
    else:
        scores.scatter_(1, seen, -math.inf)  # seen 0 (padding) hits column 0, already -inf
    return scores


class NonFiniteScores(ResdomError):
    """The model scores some item as NaN or infinity (broken weights, or weights so large their products overflow):
    the trainer says which epoch diverged instead."""


def _check_finite(scores: torch.Tensor) -> None:
    """NonFiniteScores unless every score of ``scores`` (B, n) is finite."""
    # a finite sum means every score is finite (one fast pass); else look at the scores themselves (a sum of
    # finite scores can overflow)
    if not bool(torch.isfinite(scores.sum())) and not bool(torch.isfinite(scores).all()):
        raise NonFiniteScores(
            "the model scores items as NaN or infinity, so no ranking of them means anything; its weights are "
            "broken (non-finite values, or overflow): retrain or re-import the run"
        )


@exact
def full_scores(hidden: torch.Tensor, item_emb: torch.Tensor, seen: Seen | None = None) -> torch.Tensor:
    """hidden (B, d), item_emb (N+1, d), seen (B, L) item ids or (rows, items) pairs (``Seen``) or None -> scores
    (B, N+1) float.

    Column 0 (padding) is -inf; with ``seen``, items in each row's input are -inf (seen-item filtering).
    A NaN or infinite score of a real item is a ResdomError: NaN compares false with everything, so ranking it
    would make every such target a hit at rank 0 (or -1).
    """
    scores = hidden @ item_emb.T
    _check_finite(scores[:, 1:])
    scores[:, 0] = -math.inf
    return mask_seen(scores, seen)


def pessimistic_ranks(scores: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """scores (B, N+1), items (B,) or (B, k) -> 0-based ranks of those items, same shape as ``items``.

    rank = number of other items with score >= the item's score (ties count against the item); an item
    whose own score is -inf (filtered out: it can never be recommended) gets ``MISS`` instead.

    Counted ``ITEM_TILE`` columns at a time, each compare into one float32 buffer made once (as ``tiled_ranks``):
    a compare into a (B, k, N+1) bool tensor cost about 3x as much on a CPU (10.6 against 3.7 ms for 256 x 12,102
    scores, one item a row), and a float sum of at most a tile of ones is exact.
    """
    flat = items.dim() == 1
    cols = items[:, None] if flat else items
    own = scores.gather(1, cols)  # (B, k)
    B, k, n = cols.shape[0], cols.shape[1], scores.shape[1]
    ranks = torch.full(cols.shape, -1, dtype=torch.int64, device=scores.device)
    hits = torch.empty(B * k * min(ITEM_TILE, n), dtype=torch.float32, device=scores.device)
    for lo in range(0, n, ITEM_TILE):
        s = scores[:, lo : lo + ITEM_TILE]
        out = hits[: B * k * s.shape[1]].view(B, k, s.shape[1])
        ranks += torch.ge(s[:, None, :], own[:, :, None], out=out).sum(-1).long()
    ranks = torch.where(own == -math.inf, torch.full_like(ranks, MISS), ranks)
    return ranks[:, 0] if flat else ranks


@exact
def tiled_ranks(hidden: torch.Tensor, item_emb: torch.Tensor, items: torch.Tensor,
                seen: Seen | None = None, tile: int = ITEM_TILE) -> torch.Tensor:
    """``pessimistic_ranks(full_scores(hidden, item_emb, seen), items)`` without the (B, N+1) score matrix.

    hidden (B, d), item_emb (N+1, d), items (B,) or (B, k), seen (B, L) item ids or pairs (``Seen``) or None ->
    ranks, shape of ``items``. The scores come ``tile`` items at a time (``hidden @ item_emb[lo:hi].T``, (B, tile)),
    padding and seen items at -inf, a non-finite score a ResdomError, as ``full_scores``; the tiles holding an item of
    ``items`` are made first and kept (their scores give each item's own score), then every tile is counted
    (scores >= own) while in cache. Memory: those kept tiles (``tiled_chunk_size``), one more, and a (B, k, tile)
    float32 buffer for the counts.
    """
    flat = items.dim() == 1
    cols = items[:, None] if flat else items  # (B, k)
    B, n = hidden.shape[0], item_emb.shape[0]
    starts = range(0, n, tile)
    where = torch.div(cols, tile, rounding_mode="floor")  # (B, k): the tile of each item
    if seen is not None:  # seen entries (row, item), grouped by tile: bounds[t]:bounds[t+1] are tile t's
        pair_rows, pair_items = seen_pairs(seen)
        seen_tile = torch.div(pair_items, tile, rounding_mode="floor")
        order = torch.argsort(seen_tile, stable=True)
        seen_rows = pair_rows[order]
        seen_items = pair_items[order]
        bounds = torch.searchsorted(seen_tile[order], torch.arange(len(starts) + 1, device=seen_tile.device)).tolist()

    # every score is finite when |h . e| <= max ||h|| * max ||e|| (Cauchy-Schwarz) stays far below the dtype's
    # largest value: then no tile needs its own check (a pass over it); else each tile is checked
    bound = hidden.float().norm(dim=1).max() * item_emb[1:].float().norm(dim=1).max() if B and n > 1 else 0.0
    check = not bool(bound < torch.finfo(hidden.dtype).max / 16)

    def scores_of(t: int) -> torch.Tensor:
        lo = starts[t]
        s = hidden @ item_emb[lo : lo + tile].T  # (B, tile)
        if check:
            _check_finite(s[:, 1:] if t == 0 else s)
        if t == 0:
            s[:, 0] = -math.inf
        if seen is not None and bounds[t + 1] > bounds[t]:
            a, b = bounds[t], bounds[t + 1]
            s[seen_rows[a:b], seen_items[a:b] - lo] = -math.inf
        return s

    own = hidden.new_empty(cols.shape)
    kept = {}
    for t in torch.unique(where).tolist():
        kept[t] = scores_of(t)
        rows, which = torch.nonzero(where == t, as_tuple=True)
        own[rows, which] = kept[t][rows, cols[rows, which] - starts[t]]
    count = torch.zeros(cols.shape, dtype=torch.int64, device=hidden.device)
    # 1.0 where a score >= the item's own, into a float buffer made once: torch's compare into a bool tensor is
    # about 4x slower on a CPU than into float, and a float sum of at most ``tile`` ones is exact
    hits = torch.empty(B * cols.shape[1] * min(tile, n), dtype=torch.float32, device=hidden.device)
    for t in range(len(starts)):
        s = kept.pop(t) if t in kept else scores_of(t)
        out = hits[: s.numel() * cols.shape[1]].view(B, cols.shape[1], s.shape[1])
        count += torch.ge(s[:, None, :], own[:, :, None], out=out).sum(-1).long()
    ranks = torch.where(own == -math.inf, torch.full_like(count, MISS), count - 1)  # filtered out: a miss
    return ranks[:, 0] if flat else ranks


def metrics_from_ranks(ranks: torch.Tensor, ks: tuple[int, ...] = KS) -> dict[str, float]:
    """ranks (n,) 0-based -> {"HR@K" for K in ks, "NDCG@K" for K in ks, "MRR"} in that order (``names.metric_key``),
    means over users (NDCG = 1/log2(rank+2)); a rank >= ``MISS`` adds 0 to every metric, MRR included."""
    missed = ranks >= MISS
    ranks = ranks.double()
    out: dict[str, float] = {}
    ks = tuple(sorted(ks))
    for k in ks:
        out[f"HR@{k}"] = ((ranks < k) & ~missed).double().mean().item()  # a miss never within K, however large
    for k in ks:
        out[f"NDCG@{k}"] = torch.where((ranks < k) & ~missed, 1.0 / torch.log2(ranks + 2.0), 0.0).mean().item()
    out["MRR"] = torch.where(missed, 0.0, 1.0 / (ranks + 1.0)).mean().item()
    return out
