"""Beyond-accuracy metrics of the top-K lists evaluation ranks (``evaluate(..., beyond=True)``), and the cosine
neighbours of items by the model's own output embeddings (``similar_items``, the echo of near neighbours).

For each user the top-K list is the K best-scored items of the full ranking evaluation uses (the prediction at the
last column, padding and, when filtering, every input item at -inf; equal scores by increasing item id, as
``resdom recommend`` lists them). Over the users of one evaluation set, with K in ``cutoffs``:

- ``Coverage@K``: distinct items in any user's top-K / the catalogue's items (``n_items``);
- ``AvgPop@K``: the mean over users of the mean training popularity of their top-K items (popularity: how many
  training sequences hold the item, ``split.train``);
- ``Novelty@K``: the mean over users of the mean of ``-log2(share)`` over their top-K items, ``share`` = the share
  of training sequences that hold the item (RecTools' MeanInvUserFreq); an item no training sequence holds counts
  as held by one, so its novelty is ``log2(n_sequences)``, the largest finite value;
- ``Echo@K``: the share of users whose top-K holds their last input item (always 0 when seen items are filtered:
  the last item is an input item; ``resdom diagnose``'s HRLI@K is the unfiltered one);
- ``EchoNN@K``: the share of users whose top-K holds their last input item or one of its ``neighbours`` nearest
  items by cosine over the model's output item embeddings (the item itself excluded, ``cosine_neighbours``).

A list shorter than K (fewer recommendable items) averages over the items it has; an empty list adds nothing
to the means of AvgPop and Novelty (they are over users with a list; NaN where no user has one: a popularity of
nothing is no number) and counts as no echo.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.evaluation.ranking import NonFiniteScores, full_scores, user_chunk_size
from resdom.models.interface import final_states

NEIGHBOURS = 10  # EchoNN@K: the last item's nearest neighbours counted as its echo


def cosine_scores(item_emb: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """item_emb (N+1, d), items (B,) item ids 1..N -> cosine similarity (B, N+1) of each item to every item, the
    padding column and the item itself at -inf (an item is never its own neighbour). A zero embedding has cosine
    0 with every item; a NaN or infinite embedding is NonFiniteScores (torch.topk ranks NaN above every number: the
    lists came out short and cut at the wrong score)."""
    emb = item_emb.float()
    if not bool(torch.isfinite(emb[1:]).all()):
        raise NonFiniteScores("the model's item embeddings hold NaN or infinity, so no similarity between items "
                              "means anything; its weights are broken: retrain or re-import the run")
    unit = emb / emb.norm(dim=1, keepdim=True).clamp_min(1e-12)
    scores = unit[items] @ unit.T
    scores[:, 0] = -math.inf
    scores[torch.arange(len(items), device=scores.device), items] = -math.inf
    return scores


def cosine_neighbours(item_emb: torch.Tensor, m: int, chunk: int = 1024) -> np.ndarray:
    """int64 (N+1, m): the ``m`` nearest items of every item id by cosine (highest first, equal cosines by
    increasing id; row 0, padding, is zeros); ``m`` is capped at N - 1. At most ``chunk`` items at a time, fewer
    where their (chunk, N+1) cosines would pass ``ranking.SCORE_BUDGET``."""
    n = item_emb.shape[0] - 1
    m = max(0, min(m, n - 1))
    out = np.zeros((n + 1, m), dtype=np.int64)
    if m == 0:
        return out
    chunk = user_chunk_size(n, chunk)
    for lo in range(1, n + 1, chunk):
        ids = torch.arange(lo, min(n + 1, lo + chunk), device=item_emb.device)
        out[lo:lo + len(ids)] = ordered_top(cosine_scores(item_emb, ids), m)
    return out


def ordered_top(scores: torch.Tensor, k: int) -> np.ndarray:
    """scores (B, N+1) -> int64 (B, k) item ids of each row's ``k`` best scores, highest first, equal scores by
    increasing item id; 0 where a row has fewer than ``k`` finite scores."""
    k = min(k, scores.shape[1])
    values, order = torch.sort(scores, dim=1, descending=True, stable=True)  # stable: ties by increasing id
    items = order[:, :k].cpu().numpy().astype(np.int64)
    items[~torch.isfinite(values[:, :k]).cpu().numpy()] = 0
    return items


def top_lists(hidden: torch.Tensor, item_emb: torch.Tensor, k: int, seen: torch.Tensor | None = None) -> np.ndarray:
    """int64 (B, k): each user's top-``k`` item ids under the full ranking (``ranking.full_scores``), 0 padding a
    list shorter than ``k``."""
    return ordered_top(full_scores(hidden, item_emb, seen), k)


def popularity(train_items: np.ndarray, train_offsets: np.ndarray, n_items: int) -> tuple[np.ndarray, int]:
    """(int64 (n_items + 1,): how many training sequences hold each item, the number of training sequences)."""
    n_seq = len(train_offsets) - 1
    if n_seq == 0:
        return np.zeros(n_items + 1, dtype=np.int64), 0
    seq_of = np.repeat(np.arange(n_seq), np.diff(train_offsets))
    pairs = np.unique(seq_of * (n_items + 1) + train_items)  # each (sequence, item) once
    return np.bincount(pairs % (n_items + 1), minlength=n_items + 1).astype(np.int64), n_seq


def per_user(lists: np.ndarray, last: np.ndarray, neighbours: np.ndarray, counts: np.ndarray, n_seq: int,
             k: int) -> dict[str, np.ndarray]:
    """The per-user values at cutoff ``k`` of top lists ``lists`` (n, >= k; 0: no item), last input items ``last``
    (n,), neighbour table ``neighbours`` (N+1, m): {"AvgPop@k", "Novelty@k" (NaN for an empty list),
    "Echo@k", "EchoNN@k" (0.0 or 1.0)}."""
    top = lists[:, :k]
    real = top > 0
    n_real = real.sum(1)
    pop = np.where(real, counts[top], 0).astype(np.float64)
    share = np.maximum(counts[top], 1) / max(n_seq, 1)
    nov = np.where(real, -np.log2(share), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        avg_pop = np.where(n_real > 0, pop.sum(1) / n_real, np.nan)
        novelty = np.where(n_real > 0, nov.sum(1) / n_real, np.nan)
    echo = ((top == last[:, None]) & real).any(1)
    near = np.concatenate([last[:, None], neighbours[last]], axis=1)  # (n, 1 + m)
    echo_nn = ((top[:, :, None] == near[:, None, :]) & real[:, :, None]).any((1, 2))
    return {f"AvgPop@{k}": avg_pop, f"Novelty@{k}": novelty, f"Echo@{k}": echo.astype(np.float64),
            f"EchoNN@{k}": echo_nn.astype(np.float64)}


def summary(lists: np.ndarray, values: dict[str, np.ndarray], n_items: int, ks: tuple[int, ...]) -> dict[str, float]:
    """The set's beyond-accuracy metrics from the top lists and ``per_user``'s values, in the order Coverage@K,
    AvgPop@K, Novelty@K, Echo@K, EchoNN@K (K in increasing order within each); AvgPop@K and Novelty@K are NaN
    where no user has a list (module docstring)."""
    out: dict[str, float] = {}
    ks = tuple(sorted(ks))
    for k in ks:
        shown = np.unique(lists[:, :k])
        out[f"Coverage@{k}"] = float(len(shown[shown > 0]) / n_items) if n_items else 0.0
    for name in ("AvgPop", "Novelty", "Echo", "EchoNN"):
        for k in ks:
            v = values[f"{name}@{k}"]
            v = v[~np.isnan(v)]
            out[f"{name}@{k}"] = float(v.mean()) if len(v) else math.nan  # no user has a list: no mean
    return out


def beyond_accuracy(model: Any, evalset: EvalSet, train: Sequences, *, filter_seen: bool, ks: tuple[int, ...],
                    neighbours: int = NEIGHBOURS, batch_size: int = 256,
                    device: str | torch.device = "cpu") -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """(the set's metrics, each user's values in evaluation-set order) of ``model``'s top-K lists on ``evalset``
    (module docstring), popularity counted on ``train``. ``model``: a Diagnosable already on ``device``, in eval
    mode under no_grad here (its mode restored)."""
    device = torch.device(device)
    n_items = int(model.n_items)
    kmax = min(max(ks), n_items)  # a list never holds more than the catalogue: K past it needs no wider array
    counts, n_seq = popularity(train.items, train.offsets, n_items)
    was_training = bool(getattr(model, "training", False))
    if hasattr(model, "eval"):
        model.eval()
    try:
        with torch.no_grad():
            item_emb = model.item_embeddings()
            near = cosine_neighbours(item_emb, neighbours)
            chunk = user_chunk_size(n_items, batch_size)
            history = max(1, int(evalset.inputs.lengths.max(initial=1)))
            lists = np.zeros((len(evalset), kmax), dtype=np.int64)
            for lo in range(0, len(evalset), chunk):
                idx = np.arange(lo, min(len(evalset), lo + chunk), dtype=np.int64)
                items = torch.from_numpy(evalset.inputs.padded(int(model.max_len), idx)).to(device)
                seen = torch.from_numpy(evalset.inputs.padded(history, idx)).to(device) if filter_seen else None
                top = top_lists(final_states(model, items), item_emb, kmax, seen)
                lists[idx, :top.shape[1]] = top
    finally:
        if was_training:
            model.train(True)
    ends = evalset.inputs.offsets[1:]
    last = np.where(evalset.inputs.lengths > 0, evalset.inputs.items[np.maximum(ends - 1, 0)], 0)
    values: dict[str, np.ndarray] = {}
    for k in sorted(ks):
        values.update(per_user(lists, last, near, counts, n_seq, k))
    return summary(lists, values, n_items, ks), values
