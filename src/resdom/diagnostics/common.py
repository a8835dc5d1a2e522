"""Shared plumbing of the diagnostics: eval-mode inference, batches with progress, ranks, JSON-safe numbers.

Diagnostics touch a model only through ``resdom.models.interface`` (``encode``, ``item_embeddings``,
``attention_blocks``, ``recording``, ``residual_scale``) and ranking only through
``resdom.evaluation.ranking``. Ranks are 0-based and pessimistic; a rank >= K is a miss at K.

Under ``torch.distributed`` with W > 1 processes (and at least W users) ``batches`` yields only this rank's
users ``r::W`` (as ``resdom.evaluation.evaluate``). Batches come longest window first (similar lengths
together, each batch padded only to its own longest window); per-user results are put back together with
``all_users`` (in user order, all-gathered across ranks) and running sums with ``sum_over_ranks``, so every process
returns the numbers of one process.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from resdom.data.sequences import EvalSet, Sequences, ranges
from resdom.distributed import gather_users, rank_and_world, without_autocast
from resdom.evaluation.batches import (
    activation_chunk,
    history_pairs,
    in_user_order,
    iter_eval_batches,
    share,
    with_progress,
)
from resdom.evaluation.ranking import MISS, Seen, full_scores, pessimistic_ranks, tiled_ranks, user_chunk_size
from resdom.models.interface import Diagnosable, eval_mode

DEFAULT_BATCH = 256
# MISS (from ranking): the rank of an absent item (padding / too-short history) or a filtered-out one: never a hit


def check_model(model: Any) -> Diagnosable:
    """``model`` itself, after checking it implements the Diagnosable protocol (TypeError otherwise)."""
    if not isinstance(model, Diagnosable):
        raise TypeError(
            f"{type(model).__name__} is not diagnosable: it needs n_items, max_len, encode(), item_embeddings() "
            "and attention_blocks() (see resdom.models.interface)"
        )
    return model


def model_device(model: Diagnosable) -> torch.device:
    return model.item_embeddings().device


@contextmanager
def inference(model: Diagnosable) -> Iterator[None]:
    """Eval mode (no dropout, residual scale honoured), no autograd and float32 (a caller's autocast off:
    ``distributed.without_autocast``) inside; each module's train/eval mode is restored (``interface.eval_mode``)."""
    with eval_mode(model), torch.inference_mode(), without_autocast():
        yield


def shard(n: int) -> tuple[int, int]:
    """(rank, world) over which ``n`` users are split: torch.distributed's when it runs W > 1 processes and
    n >= W; else (0, 1), every process doing every user."""
    rank, world = rank_and_world()
    return (rank, world) if n >= world else (0, 1)


def batches(
    model: Diagnosable, evalset: EvalSet, batch_size: int, device: torch.device | str | None = None,
    desc: str = "", progress: bool = False,
) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
    """(example indices (B,), items int64 (B, L) left-padded, targets (B,)) on the model's device.

    Only this rank's users (``shard``), longest window first (``iter_eval_batches(by_length=True)``): per-user
    rows go back in user order through ``all_users`` with the example indices. The batch is capped so its
    (B, n_items + 1) score matrix stays within the ranking module's budget, and its forward pass's largest tensors
    (attention weights, the FFN) within ``batches.ACTIVATION_BUDGET`` (``activation_chunk``).
    """
    device = model_device(model) if device is None else torch.device(device)
    size = user_chunk_size(model.n_items, activation_chunk(model, evalset.inputs.lengths, batch_size))
    rank, world = shard(len(evalset))
    index = np.arange(rank, len(evalset), world, dtype=np.int64)
    it = iter_eval_batches(evalset, model.max_len, size, device, index, by_length=True)
    yield from with_progress(it, len(index), progress, share(desc, len(evalset), rank, world), unit="user",
                             size=_users)


def _users(batch: tuple[np.ndarray, torch.Tensor, torch.Tensor]) -> int:
    """The users of a batch of ``iter_eval_batches`` (what progress counts)."""
    return len(batch[0])


def all_users(local: np.ndarray, n: int, idx: np.ndarray) -> np.ndarray:
    """Per-user rows of this rank's users in ``batches`` order, ``idx`` their example indices (the batches'
    indices, concatenated) -> the rows of all ``n`` users, in user order (all-gathered across ranks)."""
    local = in_user_order(local, idx)
    rank, world = shard(n)
    return local if world == 1 else gather_users(torch.from_numpy(local), n, rank, world).numpy()


def sum_over_ranks(values: np.ndarray, n: int) -> np.ndarray:
    """float64 sums over this rank's share of ``n`` users -> sums over all of them (unchanged in one process)."""
    if shard(n)[1] == 1:
        return values
    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    if dist.get_backend() == "nccl":
        t = t.to(torch.device("cuda", torch.cuda.current_device()))
    dist.all_reduce(t)
    return t.cpu().numpy()


def scores_at(model: Diagnosable, states: torch.Tensor, seen: Seen | None) -> torch.Tensor:
    """states (B, d), seen (``ranking.Seen``) or None -> full scores (B, n_items + 1), padding and seen at -inf."""
    emb = model.item_embeddings()
    return full_scores(states.to(emb.dtype), emb, seen)


def rank_items(model: Diagnosable, states: torch.Tensor, items: torch.Tensor, seen: Seen | None
               ) -> torch.Tensor:
    """``ranks_of(scores_at(model, states, seen), items)`` without the (B, n_items + 1) score matrix
    (``ranking.tiled_ranks``): states (B, d), items (B,) or (B, k) -> ranks, absent items (id 0) MISS."""
    emb = model.item_embeddings()
    ranks = tiled_ranks(states.to(emb.dtype), emb, items, seen)
    return torch.where(items > 0, ranks, torch.full_like(ranks, MISS))


def ranks_of(scores: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """scores (B, N+1), items (B,) or (B, k) -> 0-based pessimistic ranks; absent items (id 0) and filtered-out
    ones (score -inf) get MISS."""
    ranks = pessimistic_ranks(scores, items)
    return torch.where(items > 0, ranks, torch.full_like(ranks, MISS))


def seen_items(inputs: Sequences, index: np.ndarray, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, items): every item of each selected user's whole input with its row, for seen-item filtering
    (``ranking.Seen``; ``batches.history_pairs``: memory the batch's interactions, not users x longest history).

    As ``resdom.evaluation.evaluate``: the whole input sequence, not only the ``max_len`` the model reads.
    """
    return history_pairs(inputs, index, device)


def recent_items(inputs: Sequences, index: np.ndarray, k: int) -> np.ndarray:
    """int64 (B,): the k-th most recent input item of each selected sequence (k = 1: the last), 0 if shorter."""
    ends = inputs.offsets[index + 1]
    lengths = ends - inputs.offsets[index]
    out = np.zeros(len(index), dtype=np.int64)
    ok = lengths >= k
    out[ok] = inputs.items[ends[ok] - k]
    return out


def window(inputs: Sequences, max_len: int) -> Sequences:
    """The last ``min(len, max_len)`` items of every sequence (what a model with ``max_len`` reads)."""
    ends = inputs.offsets[1:]
    lengths = np.minimum(inputs.lengths, max_len)
    starts = ends - lengths
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    flat = ranges(starts, lengths)
    times = inputs.times[flat] if inputs.times is not None else None
    return Sequences(offsets, inputs.items[flat], times, inputs.users.copy())


def real_mask(items: torch.Tensor) -> torch.Tensor:
    """items (B, L) -> bool (B, L): real (non-padding) positions."""
    return items > 0


def first_real(items: torch.Tensor) -> torch.Tensor:
    """items (B, L) left-padded -> bool (B, L): the first real position of each row (it attends only to itself)."""
    L = items.shape[1]
    lengths = (items > 0).sum(1)
    cols = torch.arange(L, device=items.device)
    return (cols[None, :] == (L - lengths)[:, None]) & (lengths[:, None] > 0)


def safe_div(num: float, den: float) -> float | None:
    """num / den, or None where den is 0 (JSON null rather than NaN)."""
    return None if den == 0 else float(num) / float(den)


def jsonable(obj: Any) -> Any:
    """Replace NaN / inf floats (not valid JSON) by None, recursively; numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
