"""Samples and batches (training/batches.py) against slow per-user references."""

from __future__ import annotations

import numpy as np
import pytest

from resdom.data.sequences import Sequences
from resdom.training.batches import (
    bucket_by_length,
    build_samples,
    epoch_order,
    length_groups,
    make_batch,
    same_target_partners,
    sample_negatives,
    trained_rows,
)

SEQS = [[1, 2, 3, 4, 5, 6, 7], [8, 9], [3], [4, 5, 6], [9, 8, 7, 6, 5, 4, 3, 2, 1]]


def slow_all(seqs: list[list[int]], max_len: int) -> list[tuple[list[int], list[int]]]:
    out = []
    for s in seqs:
        if len(s) >= 2:
            w = s[-(max_len + 1):]
            out.append((w[:-1], w[1:]))
    return out


def slow_last(seqs: list[list[int]], max_len: int) -> list[tuple[list[int], int]]:
    out = []
    for s in seqs:
        w = s[-max_len:]
        for i in range(len(w)):
            out.append((w[:i], w[i]))
    return out


def left_pad(row: list[int], width: int) -> list[int]:
    return [0] * (width - len(row)) + row


@pytest.mark.parametrize("max_len", [1, 3, 50])
def test_all_layout_matches_reference(max_len: int) -> None:
    samples = build_samples(Sequences.from_lists(SEQS), max_len, "all")
    ref = slow_all(SEQS, max_len)
    assert len(samples) == len(ref)
    batch = make_batch(samples, np.arange(len(samples)), n_items=9)
    width = max(len(x) for x, _ in ref)
    assert batch.items.shape == (len(ref), width)  # trimmed to the longest input, not max_len
    for row, (x, y) in enumerate(ref):
        assert batch.items[row].tolist() == left_pad(x, width)
        assert batch.targets[row].tolist() == left_pad(y, width)


@pytest.mark.parametrize("max_len", [1, 3, 50])
def test_last_layout_every_prefix(max_len: int) -> None:
    samples = build_samples(Sequences.from_lists(SEQS), max_len, "last")
    ref = slow_last(SEQS, max_len)
    assert len(samples) == len(ref)
    batch = make_batch(samples, np.arange(len(samples)), n_items=9)
    width = max(1, max(len(x) for x, _ in ref))
    assert batch.items.shape == (len(ref), width)
    assert batch.targets.shape == (len(ref),)
    for row, (x, y) in enumerate(ref):
        assert batch.items[row].tolist() == left_pad(x, width)
        assert int(batch.targets[row]) == y
    # the first prefix of each user is an empty input (spec §6)
    assert sum(1 for x, _ in ref if not x) == len(SEQS)


def test_batch_subset_trims_width() -> None:
    samples = build_samples(Sequences.from_lists(SEQS), 50, "all")
    short = make_batch(samples, np.array([1]), n_items=9)  # user [8, 9]: one input item
    assert short.items.tolist() == [[8]] and short.targets.tolist() == [[9]]
    fixed = make_batch(samples, np.array([1]), n_items=9, fixed_width=4)
    assert fixed.items.tolist() == [[0, 0, 0, 8]]


def test_negatives_avoid_row_items() -> None:
    rng = np.random.default_rng(0)
    samples = build_samples(Sequences.from_lists(SEQS), 50, "all")
    batch = make_batch(samples, np.arange(len(samples)), n_items=30, rng=rng, negatives=True)
    neg, tgt, items = batch.negatives.numpy(), batch.targets.numpy(), batch.items.numpy()
    assert neg.shape == tgt.shape
    assert ((neg == 0) == (tgt == 0)).all()
    row_items = np.concatenate([items, tgt], 1)
    # with 30 items and <= 9 per row, a collision survives 5 draws with probability <= 0.3^5 per entry
    collisions = sum(int(np.isin(neg[r][tgt[r] > 0], row_items[r][row_items[r] > 0]).sum()) for r in range(len(neg)))
    assert collisions <= 1
    assert neg.max() <= 30


def test_negatives_are_uniform_over_the_rest() -> None:
    rng = np.random.default_rng(1)
    targets = np.ones((4000, 1), dtype=np.int64)
    neg = sample_negatives(rng, 5, targets, np.ones((4000, 1), dtype=np.int64))
    counts = np.bincount(neg.ravel(), minlength=6)
    assert counts[0] == 0 and counts[1] <= 4000 * 0.2**5 * 3 + 5
    assert np.all(np.abs(counts[2:] / 4000 - 0.25) < 0.03)


def test_same_target_partners() -> None:
    targets = np.array([5, 7, 5, 9, 5, 7, 1])
    rng = np.random.default_rng(3)
    for _ in range(20):
        p = same_target_partners(targets, rng)
        assert (targets[p] == targets).all()
        assert p[3] == 3 and p[6] == 6  # singletons pair with themselves
        others = [i for i in range(len(targets)) if i not in (3, 6)]
        assert all(p[i] != i for i in others)
    # every member of a group is drawn at some point
    seen = {int(same_target_partners(targets, np.random.default_rng(s))[0]) for s in range(50)}
    assert seen == {2, 4}


def test_sup_items_have_same_target() -> None:
    seqs = [[1, 2, 3], [4, 2, 3], [7, 1], [5, 6]]
    samples = build_samples(Sequences.from_lists(seqs), 50, "all")
    partners = same_target_partners(samples.last_targets, np.random.default_rng(0))
    batch = make_batch(samples, np.arange(4), n_items=7, partners=partners)
    assert batch.sup_items.tolist()[0] == [4, 2] and batch.sup_items.tolist()[1] == [1, 2]
    assert batch.sup_items.tolist()[3] == [0, 5]  # no other sample ends with 6: itself


@pytest.mark.parametrize("n,world", [(10, 1), (10, 2), (11, 2), (7, 3)])
def test_epoch_order_shards(n: int, world: int) -> None:
    shards = [epoch_order(n, np.random.default_rng(5), r, world) for r in range(world)]
    assert len({len(s) for s in shards}) == 1  # same number of steps on every rank
    union = np.concatenate(shards)
    assert set(union.tolist()) == set(range(n))
    assert len(union) == -(-n // world) * world
    assert (epoch_order(n, np.random.default_rng(5)) != epoch_order(n, np.random.default_rng(6))).any()


def test_bucket_by_length_is_a_permutation_with_homogeneous_batches() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 50, size=1000)
    order = rng.permutation(1000)
    bucketed = bucket_by_length(order, lengths, 10, 100, np.random.default_rng(1))
    assert sorted(bucketed.tolist()) == list(range(1000))
    spread = lambda o: np.mean([np.ptp(lengths[o[i : i + 10]]) for i in range(0, 1000, 10)])  # noqa: E731
    assert spread(bucketed) < spread(order) / 5  # a window of 1000 samples: batches of near-equal lengths
    same = bucket_by_length(order, lengths, 10, 100, np.random.default_rng(1))
    assert (same == bucketed).all()
    # batch order is shuffled: not sorted by length overall
    firsts = [lengths[bucketed[i]] for i in range(0, 1000, 10)]
    assert firsts != sorted(firsts)


def test_bucket_by_length_keeps_a_short_last_batch_last() -> None:
    """With a short final batch, every full batch must still come from one sorted run of a window."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 50, size=1005)
    bucketed = bucket_by_length(np.arange(1005), lengths, 10, 4, np.random.default_rng(2))
    assert sorted(bucketed.tolist()) == list(range(1005))
    assert set(bucketed[-5:].tolist()) == set(range(1000, 1005))  # the short batch: the last window's tail
    for b in range(100):
        batch = lengths[bucketed[b * 10 : (b + 1) * 10]]
        assert (np.diff(batch) >= 0).all()  # each full batch is a sorted slice, not two batches mixed


def padded_size(groups: list[np.ndarray], lengths: np.ndarray) -> int:
    return sum(len(g) * max(1, int(lengths[g].max())) for g in groups)


def slow_best_padded_size(lengths: list[int], k: int) -> int:
    """Every way of putting the samples into at most k groups (tiny inputs only)."""
    import itertools

    n, best = len(lengths), None
    for labels in itertools.product(range(k), repeat=n):
        groups = [np.array([i for i in range(n) if labels[i] == g]) for g in range(k)]
        size = padded_size([g for g in groups if len(g)], np.array(lengths))
        best = size if best is None else min(best, size)
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [2, 3])
def test_length_groups_are_optimal_and_a_permutation(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 30, size=7)
    idx = rng.permutation(7)
    groups = length_groups(idx, lengths, k)
    assert len(groups) <= k and all(len(g) for g in groups)
    assert sorted(np.concatenate(groups).tolist()) == sorted(idx.tolist())
    assert padded_size(groups, lengths) == slow_best_padded_size(lengths.tolist(), k)
    widths = [lengths[g].max() for g in groups]
    assert widths == sorted(widths)


def test_length_groups_hand_case_and_k1() -> None:
    lengths = np.array([50, 2, 3, 2, 49, 3, 1, 2])
    idx = np.arange(8)
    assert [g.tolist() for g in length_groups(idx, lengths, 1)] == [idx.tolist()]
    # two groups: the six short samples (width 3) and the two long ones (width 50): 6*3 + 2*50 = 118
    groups = length_groups(idx, lengths, 2)
    assert [sorted(g.tolist()) for g in groups] == [[1, 2, 3, 5, 6, 7], [0, 4]]
    assert padded_size(groups, lengths) == 118 < 8 * 50
    # a real batch of Beauty-like lengths: 256 samples mostly short, a few long
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.geometric(1 / 8, size=256), 50)
    big = np.arange(256)
    sizes = [padded_size(length_groups(big, lengths, k), lengths) for k in (1, 2, 4, 8)]
    assert sizes == sorted(sizes, reverse=True) and sizes[2] < sizes[0] / 2


@pytest.mark.parametrize("layout", ["all", "last", "window"])
@pytest.mark.parametrize("max_len", [1, 2, 4, 20])
def test_trained_rows_counts_every_interaction_some_sample_reads(layout, max_len) -> None:
    """Against the samples themselves: the rows some sample holds as input or target, per user (a protocol-none
    fit says how many interactions it trained on from these)."""
    seqs = Sequences.from_lists(SEQS)
    samples = build_samples(seqs, max_len, layout)
    read = np.zeros(len(seqs.items), dtype=bool)
    for a, b in zip(samples.start, samples.end):
        read[a:b + (1 if layout in ("all", "last") else 0)] = True  # window: the targets are the input itself
    user_of = np.repeat(np.arange(len(seqs)), seqs.lengths)
    expected = np.bincount(user_of[read], minlength=len(seqs))
    assert trained_rows(seqs, max_len, layout).tolist() == expected.tolist()
