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
from resdom.distributed import without_autocast
from resdom.evaluation.batches import activation_chunk, history_pairs, with_progress
from resdom.evaluation.ranking import SCORE_BUDGET, NonFiniteScores, Seen, full_scores, user_chunk_size
from resdom.models.interface import eval_mode, final_states

NEIGHBOURS = 10  # EchoNN@K: the last item's nearest neighbours counted as its echo


def unit_rows(item_emb: torch.Tensor) -> torch.Tensor:
    """item_emb (N+1, d) -> each row over its norm (float32; a zero row stays zero), what ``cosine_scores`` takes as
    ``unit`` so that a caller scoring many chunks normalises the catalogue once, not once a chunk. A NaN or
    infinite embedding is NonFiniteScores (torch.topk ranks NaN above every number: the lists came out short and
    cut at the wrong score)."""
    emb = item_emb.float()
    if not bool(torch.isfinite(emb[1:]).all()):
        raise NonFiniteScores("the model's item embeddings hold NaN or infinity, so no similarity between items "
                              "means anything; its weights are broken: retrain or re-import the run")
    return emb / emb.norm(dim=1, keepdim=True).clamp_min(1e-12)


def cosine_scores(item_emb: torch.Tensor, items: torch.Tensor, unit: torch.Tensor | None = None) -> torch.Tensor:
    """item_emb (N+1, d), items (B,) item ids 1..N -> cosine similarity (B, N+1) of each item to every item, the
    padding column and the item itself at -inf (an item is never its own neighbour). A zero embedding has cosine
    0 with every item; a NaN or infinite embedding is NonFiniteScores (``unit_rows``). ``unit``: ``unit_rows``
    of ``item_emb``, made once by a caller that scores many chunks (None: made here)."""
    if unit is None:
        unit = unit_rows(item_emb)
    scores = unit[items] @ unit.T
    scores[:, 0] = -math.inf
    scores[torch.arange(len(items), device=scores.device), items] = -math.inf
    return scores


def cosine_neighbours(item_emb: torch.Tensor, m: int, chunk: int = 1024) -> np.ndarray:
    """int64 (N+1, m): the ``m`` nearest items of every item id by cosine (highest first, equal cosines by
    increasing id; row 0, padding, is zeros); ``m`` is capped at N - 1 (``neighbours_of`` every id)."""
    return neighbours_of(item_emb, np.arange(item_emb.shape[0], dtype=np.int64), m, chunk)


def neighbours_of(item_emb: torch.Tensor, ids: np.ndarray, m: int, chunk: int = 1024,
                  unit: torch.Tensor | None = None, progress: bool = False) -> np.ndarray:
    """int64 (len(ids), min(m, N - 1)): the nearest items of each id of ``ids`` (0..N) by cosine, as
    ``cosine_neighbours`` lists them (id 0, padding: zeros). At most ``chunk`` ids at a time, fewer where their
    (chunk, N+1) cosines would pass ``ranking.SCORE_BUDGET``: only the items asked for are scored (evaluation's
    last items, not the whole catalogue against itself). ``progress``: of the ids (``with_progress``)."""
    n = item_emb.shape[0] - 1
    m = max(0, min(m, n - 1))
    ids = np.asarray(ids, dtype=np.int64)
    out = np.zeros((len(ids), m), dtype=np.int64)
    real = np.flatnonzero(ids > 0)
    if m == 0 or not len(real):
        return out
    if unit is None:
        unit = unit_rows(item_emb)
    chunk = user_chunk_size(n, chunk)
    n = len(real)
    for lo in with_progress(range(0, n, chunk), n, progress, "beyond: neighbours", unit="item",
                            size=lambda lo: min(chunk, n - lo)):
        rows = real[lo:lo + chunk]
        out[rows] = ordered_top(cosine_scores(item_emb, torch.from_numpy(ids[rows]).to(item_emb.device), unit), m)
    return out


def top_k(scores: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """scores (B, N+1) -> (row (m,), item (m,), score (m,)) of each row's ``k`` best finite scores, row by row,
    highest first, equal scores by increasing item id (ties at the K-th score resolved the same way).

    No sort of a whole row: ``torch.topk`` of k + 1 gives each row's K-th best score and the next; where the next is
    below a finite K-th score, exactly k items score at or above it and they are topk's own k (the common case:
    nothing but the top-K). Only the other rows (an item outside topk's k tied with the K-th score, fewer than k
    finite scores, a NaN) take the tie rule: every score above the K-th, then of those equal to it the lowest ids
    until the row has k, never -inf (a cumulative sum over those rows alone; over every row it cost more than the
    top-K itself). At most k candidates a row are sorted (a whole row of tied items, held as a (B, N) list of
    candidates and sorted, took 15 s and 2 GB for 31 rows of a million items)."""
    B, n = scores.shape
    k = min(k, n)
    if k < 1 or not B:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), np.zeros(0)
    vals, idx = torch.topk(scores, min(k + 1, n), dim=1)  # sorted: the K-th best score at k - 1, the next at k
    kth = vals[:, k - 1 : k]
    odd = ~torch.isfinite(kth[:, 0]) | torch.isnan(vals[:, :k]).any(1)
    if k < n:
        odd |= vals[:, k] == kth[:, 0]
    plain = ~odd
    parts = [(torch.arange(B, device=scores.device)[plain, None].expand(-1, k), idx[plain, :k], vals[plain, :k])]
    if bool(odd.any()):
        every = bool(odd.all())  # then no copy of the rows: the memory of the rule over every row, as before
        sub, at = (scores, kth) if every else (scores[odd], kth[odd])
        above = sub > at
        tied = (sub == at) & torch.isfinite(sub)
        room = k - above.sum(1, keepdim=True, dtype=torch.int32)
        r, i = torch.nonzero(above | (tied & (torch.cumsum(tied, 1, dtype=torch.int32) <= room)), as_tuple=True)
        parts.append((r if every else torch.nonzero(odd)[:, 0][r], i, sub[r, i]))
    rows, items = (torch.cat([p[j].reshape(-1) for p in parts]).cpu().numpy() for j in (0, 1))
    # float64 through torch: a bfloat16 model's scores too (numpy has no bfloat16)
    values = torch.cat([p[2].reshape(-1) for p in parts]).detach().cpu().to(torch.float64).numpy()
    order = np.lexsort((items, -values, rows))
    rows, items, values = rows[order], items[order], values[order]
    starts = np.searchsorted(rows, rows, side="left")
    keep = (np.arange(len(rows)) - starts) < k
    return rows[keep], items[keep], values[keep]


def ordered_top(scores: torch.Tensor, k: int) -> np.ndarray:
    """scores (B, N+1) -> int64 (B, k) item ids of each row's ``k`` best scores, highest first, equal scores by
    increasing item id; 0 where a row has fewer than ``k`` finite scores. The lists of ``top_k`` (no sort of a
    whole row); a row holding NaN or +inf (no caller's: ``ranking.full_scores`` and ``unit_rows`` refuse them) is
    listed as a stable descending sort lists it, those scores first, each as 0."""
    k = min(k, scores.shape[1])
    out = np.zeros((scores.shape[0], k), dtype=np.int64)
    if k < 1 or not scores.shape[0]:
        return out
    if not bool((scores.amax(1) < math.inf).all()):  # a NaN (amax propagates it) or +inf score somewhere
        values, order = torch.sort(scores, dim=1, descending=True, stable=True)  # stable: ties by increasing id
        items = order[:, :k].cpu().numpy().astype(np.int64)
        items[~torch.isfinite(values[:, :k]).cpu().numpy()] = 0
        return items
    rows, items, _ = top_k(scores, k)
    out[rows, np.arange(len(rows)) - np.searchsorted(rows, rows, side="left")] = items
    return out


def top_lists(hidden: torch.Tensor, item_emb: torch.Tensor, k: int, seen: Seen | None = None) -> np.ndarray:
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
    "Echo@k", "EchoNN@k" (0.0 or 1.0)} (``user_values`` with each user's neighbours ``neighbours[last]``)."""
    return user_values(lists, last, neighbours[last], counts, n_seq, k)


def user_values(lists: np.ndarray, last: np.ndarray, near: np.ndarray, counts: np.ndarray, n_seq: int,
                k: int) -> dict[str, np.ndarray]:
    """``per_user``'s values, ``near`` (n, m) the nearest items of each user's last item (0: none). Memory: a few
    (n, k) and (n, m) arrays, never one of (n, k, m)."""
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
    # each (user, item) pair as one number: a listed item is the last item or a neighbour of it where its pair is
    # among the user's (last, neighbours) pairs
    width = np.int64(max(int(counts.shape[0]), int(top.max(initial=0)) + 1, int(near.max(initial=0)) + 1))
    rows = np.arange(len(top), dtype=np.int64)[:, None] * width
    near_pairs = np.concatenate([last[:, None], near], axis=1) + rows  # (n, 1 + m)
    echo_nn = (np.isin(top + rows, near_pairs) & real).any(1)
    return {f"AvgPop@{k}": avg_pop, f"Novelty@{k}": novelty, f"Echo@{k}": echo.astype(np.float64),
            f"EchoNN@{k}": echo_nn.astype(np.float64)}


def summary(lists: np.ndarray, values: dict[str, np.ndarray], n_items: int, ks: tuple[int, ...]) -> dict[str, float]:
    """The set's beyond-accuracy metrics from the top lists and ``per_user``'s values, in the order Coverage@K,
    AvgPop@K, Novelty@K, Echo@K, EchoNN@K (K in increasing order within each); AvgPop@K and Novelty@K are NaN
    where no user has a list (module docstring)."""
    shown = {k: np.zeros(n_items + 1, dtype=bool) for k in ks}
    for k in ks:
        shown[k][lists[:, :k]] = True
    return summary_of(shown, values, n_items, ks)


def summary_of(shown: dict[int, np.ndarray], values: dict[str, np.ndarray], n_items: int,
               ks: tuple[int, ...]) -> dict[str, float]:
    """``summary`` from ``shown``: for each K a bool (n_items + 1,) marking the items in some user's top K (index 0,
    no item, is not counted)."""
    out: dict[str, float] = {}
    ks = tuple(sorted(ks))
    for k in ks:
        out[f"Coverage@{k}"] = float(int(shown[k][1:].sum()) / n_items) if n_items else 0.0
    for name in ("AvgPop", "Novelty", "Echo", "EchoNN"):
        for k in ks:
            v = values[f"{name}@{k}"]
            v = v[~np.isnan(v)]
            out[f"{name}@{k}"] = float(v.mean()) if len(v) else math.nan  # no user has a list: no mean
    return out


def beyond_accuracy(model: Any, evalset: EvalSet, train: Sequences, *, filter_seen: bool, ks: tuple[int, ...],
                    neighbours: int = NEIGHBOURS, batch_size: int = 256, device: str | torch.device = "cpu",
                    progress: bool = False) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """(the set's metrics, each user's values in evaluation-set order) of ``model``'s top-K lists on ``evalset``
    (module docstring), popularity counted on ``train``. ``model``: a Diagnosable already on ``device``, in eval
    mode under no_grad here (each module's mode restored: ``interface.eval_mode``)."""
    device = torch.device(device)
    n_items = int(model.n_items)
    kmax = min(max(ks), n_items)  # a list never holds more than the catalogue: K past it needs no wider array
    counts, n_seq = popularity(train.items, train.offsets, n_items)
    ends = evalset.inputs.offsets[1:]
    last = np.where(evalset.inputs.lengths > 0, evalset.inputs.items[np.maximum(ends - 1, 0)], 0)
    n = len(evalset)
    # one chunk of users at a time: its top lists, their values and the items they show, so memory is that of a
    # chunk (the lists of every user, users x K, and their (users, K, neighbours) comparison ran out of memory at
    # a large K); the neighbours of the distinct last items only (every item's against the whole catalogue took
    # catalogue^2 work: 72 s at 20,000 items for 200 users), once where they fit the score budget, else a chunk's
    values = {f"{name}@{k}": np.empty(n, dtype=np.float64) for k in sorted(ks)
              for name in ("AvgPop", "Novelty", "Echo", "EchoNN")}
    shown = {k: np.zeros(n_items + 1, dtype=bool) for k in ks}
    with eval_mode(model), torch.no_grad(), without_autocast():  # float32 even in a caller's autocast region
        item_emb = model.item_embeddings()
        unit = unit_rows(item_emb)
        distinct, inverse = np.unique(last, return_inverse=True)
        m = max(0, min(neighbours, n_items - 1))
        # the distinct last items against the whole catalogue: minutes at a million items, before any user
        table = (neighbours_of(item_emb, distinct, m, unit=unit, progress=progress)
                 if len(distinct) * m <= SCORE_BUDGET else None)
        chunk = user_chunk_size(n_items, activation_chunk(model, evalset.inputs.lengths, batch_size))
        for lo in with_progress(range(0, n, chunk), n, progress, "beyond", unit="user",
                                size=lambda lo: min(chunk, n - lo)):
            idx = np.arange(lo, min(n, lo + chunk), dtype=np.int64)
            items = torch.from_numpy(evalset.inputs.padded(int(model.max_len), idx)).to(device)
            seen = history_pairs(evalset.inputs, idx, device) if filter_seen else None
            lists = top_lists(final_states(model, items), item_emb, kmax, seen)
            near = table[inverse[idx]] if table is not None else neighbours_of(item_emb, last[idx], m, unit=unit)
            for k in ks:
                shown[k][lists[:, :k]] = True
                for key, v in user_values(lists, last[idx], near, counts, n_seq, k).items():
                    values[key][idx] = v
    return summary_of(shown, values, n_items, ks), values
