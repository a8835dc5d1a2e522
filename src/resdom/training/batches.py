"""Training samples and batches (spec §2 "Training objectives", spec §6), built with array operations only.

A *sample* is a span of the flat training item array: its input is ``items[start:end]`` (oldest first) and
its target(s) come right after it. Two layouts:

- ``all`` (``ce_all``, ``bce``, ``ce_sampled``): one sample per user with >= 2 training items: the last
  ``max_len + 1`` items, input = all but the last, targets = the next item at every input position.
- ``last`` (``ce_last``): every prefix of each user's last ``max_len`` training items is a sample
  (BSARec / RecBole style; the first prefix has an empty input), target = the item after the prefix;
- ``window`` (``mlm``, BERT4Rec): one sample per user with >= 1 training item: its last ``max_len`` items,
  targets = the same items (the model masks some and keeps labels there, ``training_states``).

Batches are left-padded (last item at column L-1) and trimmed to their longest real input, except where a
fixed width is asked for (BSARec: its FFT sees the whole padded window, spec §2). A batch may be cut into a few
groups of similar input length (``length_groups``), each trimmed to its own longest input: the trainer
accumulates their gradients, so the update is that of the whole batch at a fraction of the padding.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from resdom.data.sequences import Sequences, ranges
from resdom.models.base import TrainBatch

Layout = Literal["all", "last", "window"]
NEGATIVE_ROUNDS = 4  # bce: resampling rounds for negatives that hit an item of the row (see sample_negatives)


@dataclass
class SampleSet:
    """Training samples as spans of ``items``: sample i has input ``items[start[i]:end[i]]``.

    items: int64 (T,) the flat training item array. start, end: int64 (S,), 0 <= end - start <= max_len.
    layout ``all``: targets of sample i are ``items[start[i]+1 : end[i]+1]``; ``last``: the target is ``items[end[i]]``;
    ``window``: the targets are the input itself.
    """

    items: np.ndarray
    start: np.ndarray
    end: np.ndarray
    layout: Layout

    def __len__(self) -> int:
        return len(self.start)

    @property
    def last_targets(self) -> np.ndarray:
        """int64 (S,): each sample's final target: the item after its input (its only target for ``last``, its final
        one for ``all``); for ``window`` its own last item."""
        return self.items[self.end - 1] if self.layout == "window" else self.items[self.end]


def build_samples(train: Sequences, max_len: int, layout: Layout) -> SampleSet:
    """All training samples of ``train`` for ``layout`` (see the module docstring). Vectorised over users."""
    ends = train.offsets[1:]
    n = train.lengths
    if layout == "all":
        keep = n >= 2
        end = ends[keep] - 1
        start = np.maximum(train.offsets[:-1][keep], end - max_len)
    elif layout == "last":
        m = np.minimum(n, max_len)  # the last m training items; each is the target of one prefix
        first = ends - m
        end = ranges(first, m)
        start = np.repeat(first, m)
    elif layout == "window":
        keep = n >= 1
        end = ends[keep]
        start = np.maximum(train.offsets[:-1][keep], end - max_len)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    return SampleSet(train.items, start.astype(np.int64), end.astype(np.int64), layout)


def trained_rows(train: Sequences, max_len: int, layout: Layout) -> np.ndarray:
    """int64 (n,): how many of each training sequence's interactions some sample of ``layout`` reads, as input or
    target (``build_samples``): its last ``max_len + 1`` for ``all`` (none of a one-item sequence: it has no
    target), its last ``max_len`` for ``last`` and ``window``; the older ones are never trained on."""
    n = train.lengths
    if layout == "all":
        return np.where(n >= 2, np.minimum(n, max_len + 1), 0).astype(np.int64)
    if layout in ("last", "window"):
        return np.minimum(n, max_len).astype(np.int64)
    raise ValueError(f"unknown layout {layout!r}")


def _spans(items: np.ndarray, start: np.ndarray, end: np.ndarray, width: int, shift: int = 0) -> np.ndarray:
    """int64 (B, width): ``items[start+shift : end+shift]`` per row, left-padded with 0 (the last ``width`` kept)."""
    lengths = np.minimum(end - start, width)
    cols = np.arange(width) - width  # -width .. -1
    pos = (end + shift)[:, None] + cols[None, :]
    valid = cols[None, :] >= -lengths[:, None]
    out = np.zeros((len(start), width), dtype=np.int64)
    out[valid] = items[pos[valid]]
    return out


def batch_width(samples: SampleSet, idx: np.ndarray, fixed_width: int | None) -> int:
    """Width of a batch: ``fixed_width`` if given, else the longest input in the batch (at least 1)."""
    if fixed_width is not None:
        return fixed_width
    return max(1, int((samples.end[idx] - samples.start[idx]).max(initial=0)))


def sample_negatives(
    rng: np.random.Generator, n_items: int, targets: np.ndarray, row_items: np.ndarray
) -> np.ndarray:
    """bce negatives: int64 like ``targets`` (B, L), uniform over 1..n_items, 0 where ``targets`` is 0.

    The original SASRec draws a random item not in the user's sequence. Cheap approximation: draw uniformly
    and redraw, up to NEGATIVE_ROUNDS times, the draws that hit an item of the row (its input and targets,
    which cover the user's whole training sequence when it fits in max_len + 1 items). With N items and a
    row of m distinct items, a negative still collides with probability (m/N)^(rounds+1).
    """
    neg = rng.integers(1, n_items + 1, size=targets.shape, dtype=np.int64)
    for _ in range(NEGATIVE_ROUNDS):
        hit = (neg[:, :, None] == row_items[:, None, :]).any(-1) & (targets > 0)
        count = int(hit.sum())
        if not count:
            break
        neg[hit] = rng.integers(1, n_items + 1, size=count, dtype=np.int64)
    return np.where(targets > 0, neg, 0)


def same_target_partners(targets: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """int64 (S,): for each sample, a random *other* sample with the same target (itself if it has none).

    DuoRec's supervised view (spec §2). Vectorised: group by target via a stable sort, draw a uniform
    position in the group that skips the sample's own.
    """
    S = len(targets)
    if S == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(targets, kind="stable")
    sorted_t = targets[order]
    group_start = np.concatenate([[0], np.flatnonzero(np.diff(sorted_t)) + 1])
    group_size = np.diff(np.concatenate([group_start, [S]]))
    gid = np.repeat(np.arange(len(group_start)), group_size)
    own = np.arange(S) - group_start[gid]
    size = group_size[gid]
    r = np.floor(rng.random(S) * np.maximum(size - 1, 0)).astype(np.int64)  # 0 .. size-2
    r = np.where(r >= own, r + 1, r)
    partner_sorted = np.where(size > 1, group_start[gid] + r, np.arange(S))
    partners = np.empty(S, dtype=np.int64)
    partners[order] = order[partner_sorted]
    return partners


def make_batch(
    samples: SampleSet,
    idx: np.ndarray,
    *,
    n_items: int,
    fixed_width: int | None = None,
    rng: np.random.Generator | None = None,
    negatives: bool = False,
    partners: np.ndarray | None = None,
) -> TrainBatch:
    """The TrainBatch of samples ``idx`` (B,).

    items (B, L) left-padded; targets (B, L) (0 at padding) for layouts ``all`` and ``window`` or (B,) for ``last``;
    negatives (B, L) when asked (needs ``rng``); sup_items (B, L2) = inputs of ``partners[idx]`` when given.
    """
    start, end = samples.start[idx], samples.end[idx]
    width = batch_width(samples, idx, fixed_width)
    items = _spans(samples.items, start, end, width)
    if samples.layout == "all":
        targets = _spans(samples.items, start, end, width, shift=1)
    elif samples.layout == "window":
        targets = items.copy()
    else:
        targets = samples.items[end]
    neg = None
    if negatives:
        if samples.layout != "all" or rng is None:
            raise ValueError("negatives need the 'all' layout and an rng")
        neg = torch.from_numpy(sample_negatives(rng, n_items, targets, np.concatenate([items, targets], 1)))
    sup = None
    if partners is not None:
        pidx = partners[idx]
        sup = torch.from_numpy(
            _spans(samples.items, samples.start[pidx], samples.end[pidx], batch_width(samples, pidx, fixed_width))
        )
    return TrainBatch(torch.from_numpy(items), torch.from_numpy(np.asarray(targets)), neg, sup)


def epoch_order(n_samples: int, rng: np.random.Generator, rank: int = 0, world: int = 1) -> np.ndarray:
    """This rank's shard of a seeded permutation of the samples.

    With ``world`` > 1 the permutation is padded by wrapping around (as torch's DistributedSampler) so every
    rank gets ``ceil(S / world)`` samples and takes the same number of steps; rank r takes ``perm[r::world]``.
    All ranks must pass generators in the same state.
    """
    perm = rng.permutation(n_samples).astype(np.int64)
    if world > 1:
        per_rank = -(-n_samples // world)
        pad = per_rank * world - n_samples
        if pad:
            perm = np.concatenate([perm, perm[:pad]])
        perm = perm[rank::world]
    return perm


def bucket_by_length(
    order: np.ndarray, lengths: np.ndarray, batch_size: int, window: int, rng: np.random.Generator
) -> np.ndarray:
    """Length bucketing: within each window of ``window`` batches of ``order``, sort samples by input length,
    cut into batches, then shuffle all batches. int64 (len(order),), a permutation of ``order``.

    Batches are trimmed to their longest input, so similar lengths together cost less padding; the window
    keeps the order random at the scale of the epoch. ``lengths``: int64 (S,) input length of every sample.
    """
    span = batch_size * window
    parts = []
    for s in range(0, len(order), span):
        chunk = order[s : s + span]
        parts.append(chunk[np.argsort(lengths[chunk], kind="stable")])
    ordered = np.concatenate(parts) if parts else order
    n_full = len(ordered) // batch_size  # a short last batch stays last, so later batches keep their bounds
    full = ordered[: n_full * batch_size].reshape(n_full, batch_size)[rng.permutation(n_full)]
    return np.concatenate([full.reshape(-1), ordered[n_full * batch_size :]])


def length_groups(idx: np.ndarray, lengths: np.ndarray, k: int) -> list[np.ndarray]:
    """Cut one batch ``idx`` into at most ``k`` groups of similar input length (each trimmed to its own longest
    input when made into a TrainBatch), minimising the padded size ``sum_g |g| * max(lengths in g)``.

    Exact, by dynamic programming over the distinct lengths (an optimal cut never separates equal lengths):
    k-1 vectorised (U, U) steps for U distinct lengths (U <= max_len + 1, whatever the batch size). Groups come
    out in increasing length, together a permutation of ``idx``; ``k`` = 1 gives ``[idx]``.
    """
    if k <= 1 or len(idx) <= 1:
        return [idx]
    order = idx[np.argsort(lengths[idx], kind="stable")]
    width, counts = np.unique(np.maximum(lengths[order], 1), return_counts=True)  # padded width of each length
    U = len(width)
    before = np.concatenate([[0], np.cumsum(counts)])  # before[u]: samples shorter than width[u]
    u = np.arange(1, U + 1)
    a = np.arange(U)
    w = width.astype(np.float64)
    # group_cost[a, u-1]: lengths a..u-1 in one group, padded to width[u-1] (inf where the group would be empty)
    group_cost = (before[None, 1:] - before[:U, None]) * w[None, :]
    group_cost[a[:, None] >= u[None, :]] = np.inf
    cost = np.concatenate([[0.0], before[1:] * w])  # first u lengths in one group
    last_starts = []
    for _ in range(k - 1):
        # the last group holds lengths a..u-1; lengths 0..a-1 are grouped as well as possible
        split_cost = cost[:U, None] + group_cost
        start = split_cost.argmin(0)
        cost = np.concatenate([[0.0], split_cost[start, a]])
        last_starts.append(start)
    bounds = [U]
    for start in reversed(last_starts):
        if bounds[-1] == 0:
            break
        bounds.append(int(start[bounds[-1] - 1]))
    cuts = before[sorted(set(bounds) | {0})]
    return [order[x:y] for x, y in zip(cuts[:-1], cuts[1:])]


def iter_batches(
    samples: SampleSet,
    order: np.ndarray,
    batch_size: int,
    *,
    n_items: int,
    groups: int = 1,
    fixed_width: int | None = None,
    rng: np.random.Generator | None = None,
    negatives: bool = False,
    partners: np.ndarray | None = None,
) -> Iterator[list[TrainBatch]]:
    """Consecutive batches of ``batch_size`` samples taken from ``order`` (the last one may be smaller), each as
    a list of up to ``groups`` TrainBatches of similar input length (``length_groups``)."""
    lengths = samples.end - samples.start
    for s in range(0, len(order), batch_size):
        yield [make_batch(samples, g, n_items=n_items, fixed_width=fixed_width, rng=rng, negatives=negatives,
                          partners=partners) for g in length_groups(order[s : s + batch_size], lengths, groups)]
