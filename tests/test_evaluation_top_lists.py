"""Top-K lists without sorting whole rows: ``beyond.top_k`` and ``beyond.ordered_top`` (the shuffle's top-10, the
beyond-accuracy lists, cosine neighbours, ``recommend`` and ``similar_items``) against a slow obvious reference.

The rule: each row's K best finite scores, highest first, equal scores by increasing item id; -inf (padding,
filtered-out items) never listed; a row with fewer than K finite scores has a shorter list (``ordered_top``: 0 in
the rest). Tested where ties abound: integer scores, whole rows equal, -0.0 beside 0.0, rows with fewer items
than K, none at all."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import resdom.diagnostics.shuffle as shuffle
from resdom.data.sequences import EvalSet, Sequences
from resdom.evaluation import beyond
from resdom.evaluation.beyond import neighbours_of, ordered_top, top_k
from resdom.models import build_model
from resdom.models.config import make_model_config


def _reference(scores: torch.Tensor, k: int) -> list[list[tuple[int, float]]]:
    """Each row's (item, score) list by the rule, in plain Python: the finite scores sorted by (-score, item)."""
    out = []
    for row in scores.tolist():
        pairs = sorted((-s, i) for i, s in enumerate(row) if math.isfinite(s))
        out.append([(i, -s) for s, i in pairs[:k]])
    return out


def _benchmark_tasks():
    """benchmarks/tasks.py, which keeps the code the top-K replaced (``sorted_top``, ``top_k_every_row``) to time it."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "tasks.py"
    spec = importlib.util.spec_from_file_location("bench_tasks_top_lists", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_OLD = _benchmark_tasks()
_old_ordered_top = _OLD.sorted_top  # ordered_top as it was: a stable descending sort of every whole row
_old_top_k = _OLD.top_k_every_row  # top_k as it was: the tie rule (a cumulative sum) over every whole row


def _tied_scores() -> torch.Tensor:
    """(40, 300) scores full of ties: integers 0..2, column 0 (padding) -inf, some items filtered out (-inf)."""
    gen = torch.Generator().manual_seed(7)
    scores = torch.randint(0, 3, (40, 300), generator=gen).float()
    scores[:, 0] = -math.inf
    scores[torch.rand(40, 300, generator=gen) < 0.2] = -math.inf  # filtered-out (seen) items
    scores[1, 5:] = -math.inf  # 4 recommendable items: fewer than most K
    scores[2] = -math.inf  # none
    scores[3] = 1.0  # one tie across the row
    scores[3, 0] = -math.inf
    scores[4] = torch.where(torch.arange(300) % 2 == 0, torch.tensor(-0.0), torch.tensor(0.0))  # -0.0 == 0.0
    scores[4, 0] = -math.inf
    scores[5] = torch.randn(300, generator=gen)  # no ties at all
    scores[5, 0] = -math.inf
    return scores


KS = (1, 3, 10, 298, 299, 300, 305)


@pytest.mark.parametrize("k", KS)
def test_lists_equal_the_slow_reference_where_scores_tie(k) -> None:
    scores = _tied_scores()
    want = _reference(scores, k)
    got = ordered_top(scores.clone(), k)
    assert got.shape == (40, min(k, 300))
    for r, pairs in enumerate(want):
        items = [i for i, _ in pairs]
        assert got[r].tolist() == items + [0] * (got.shape[1] - len(items)), r
    rows, items, values = top_k(scores.clone(), k)
    assert rows.tolist() == [r for r, pairs in enumerate(want) for _ in pairs]
    assert items.tolist() == [i for pairs in want for i, _ in pairs]
    assert values.tolist() == [s for pairs in want for _, s in pairs]
    assert np.array_equal(got, _old_ordered_top(scores, k))  # the full sort's lists, bit for bit


def test_no_rows_or_no_k_give_empty_lists() -> None:
    assert ordered_top(torch.zeros(0, 5), 3).shape == (0, 3)
    assert ordered_top(torch.zeros(2, 5), 0).shape == (2, 0)
    assert all(len(a) == 0 for a in top_k(torch.zeros(0, 5), 3))


def test_a_nan_or_infinite_row_is_listed_as_the_full_sort_lists_it() -> None:
    """No caller passes one (full_scores and unit_rows refuse them); the lists stay those of the sort they replace."""
    scores = _tied_scores()[:8].clone()
    scores[0, 7] = math.nan
    scores[1, 2] = math.inf
    scores[6, 3:9] = math.inf
    for k in (1, 3, 10):
        assert np.array_equal(ordered_top(scores.clone(), k), _old_ordered_top(scores, k))
        for got, want in zip(top_k(scores.clone(), k), _old_top_k(scores, k)):
            assert np.array_equal(got, want)


def test_no_whole_row_is_sorted_and_no_cumsum_without_ties(monkeypatch) -> None:
    """ordered_top sorted every (users x items) score matrix in full (the shuffle's top-10 of every batch, the
    beyond-accuracy lists, the cosine neighbours) where a top-K suffices (27x at 256 users x 12,101 items,
    benchmarks/RESULTS.md, section topk); top_k ran a cumulative sum over every whole row to break ties at
    the K-th score even where none tie. Now neither: only rows with ties at the K-th score are summed."""
    def refused(*args, **kwargs):
        raise AssertionError("a whole row sorted")

    summed: list[tuple[int, ...]] = []
    real_cumsum = torch.cumsum
    monkeypatch.setattr(torch, "sort", refused)
    monkeypatch.setattr(torch, "cumsum", lambda t, *a, **kw: summed.append(tuple(t.shape)) or real_cumsum(t, *a, **kw))
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(64, 500, generator=gen)
    scores[:, 0] = -math.inf
    ordered_top(scores.clone(), 10)
    top_k(scores.clone(), 10)
    assert summed == []
    tied = _tied_scores()
    ordered_top(tied, 10)
    assert len(summed) == 1 and summed[0][0] < tied.shape[0]  # the tied rows only
    neighbours_of(torch.randn(50, 8, generator=gen), np.arange(1, 50), 5)


def _tied_model(n_items: int = 40):
    """A small SASRec whose items share three output embeddings: whole groups of items score exactly alike."""
    torch.manual_seed(0)
    m = build_model(make_model_config(n_items=n_items, max_len=8, hidden=16, layers=2, heads=2, init_std=0.3)).eval()
    with torch.no_grad():
        emb = m.item_embeddings()
        emb[1:] = emb[1:4][torch.arange(n_items) % 3]
    return m


def test_shuffle_and_beyond_give_the_numbers_of_the_full_sort(monkeypatch) -> None:
    """The shuffle's Jaccard@10 and the beyond-accuracy metrics of a model whose items tie in groups: the same
    numbers with the old full sort patched back in (seen items filtered: users with fewer items than 10)."""
    n_items = 40
    m = _tied_model(n_items)
    rng = np.random.default_rng(3)
    lists = [rng.choice(np.arange(1, n_items + 1), size=int(rng.integers(1, 35)), replace=False).tolist()
             for _ in range(50)]
    ev = EvalSet(Sequences.from_lists(lists, users=np.arange(50)), rng.integers(1, n_items + 1, size=50))
    train = Sequences.from_lists(lists)

    def run() -> tuple:
        res = shuffle.position_shuffle(m, ev, seeds=(0, 1), batch_size=16).to_dict()
        with torch.no_grad():
            acc = beyond.beyond_accuracy(m, ev, train, filter_seen=True, ks=(5, 10, 50), batch_size=16)
        return res, acc[0], {k: v.tolist() for k, v in acc[1].items()}

    new = run()
    monkeypatch.setattr(shuffle, "ordered_top", _old_ordered_top)
    monkeypatch.setattr(beyond, "ordered_top", _old_ordered_top)
    old = run()
    assert repr(new) == repr(old)  # NaN (no list) compares equal as text


@pytest.mark.parametrize("seed", range(12))
def test_random_mixes_of_tied_and_untied_rows_equal_the_reference(seed) -> None:
    """Rows drawn from a few values (ties, -0.0 beside 0.0, -inf) and rows of distinct scores, mixed in one matrix,
    at K below, at and past the row length: both the rows topk lists alone and those the tie rule lists."""
    gen = torch.Generator().manual_seed(seed)
    B, n = int(torch.randint(1, 30, (1,), generator=gen)), int(torch.randint(1, 60, (1,), generator=gen))
    few = torch.tensor([-math.inf, -0.0, 0.0, 1.0, 2.5])[torch.randint(0, 5, (B, n), generator=gen)]
    distinct = torch.randn(B, n, generator=gen)
    scores = torch.where(torch.rand(B, 1, generator=gen) < 0.5, few, distinct)
    for k in (1, 2, 5, max(1, n - 1), n, n + 3):
        want = _reference(scores, k)
        got = ordered_top(scores.clone(), k)
        for r, pairs in enumerate(want):
            items = [i for i, _ in pairs]
            assert got[r].tolist() == items + [0] * (got.shape[1] - len(items)), (k, r)
        rows, items, values = top_k(scores.clone(), k)
        assert items.tolist() == [i for pairs in want for i, _ in pairs], k
        assert rows.tolist() == [r for r, pairs in enumerate(want) for _ in pairs], k
