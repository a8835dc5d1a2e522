"""Ranking primitives (spec §3) against a slow reference: sort everything, count; metrics by hand."""

from __future__ import annotations

import math

import pytest
import torch

from resdom.errors import ResdomError
from resdom.evaluation.ranking import (
    ITEM_TILE,
    MISS,
    SCORE_BUDGET,
    full_scores,
    metrics_from_ranks,
    pessimistic_ranks,
    tiled_chunk_size,
    tiled_ranks,
    user_chunk_size,
)


def slow_rank(scores: list[float], target: int, seen: set[int]) -> int:
    """0-based pessimistic rank of ``target`` among items 1..N: sort all, ties put the target last; a filtered
    target (in ``seen``) cannot be recommended: MISS."""
    if target in seen:
        return MISS
    value = {j: (-math.inf if (j == 0 or j in seen) else s) for j, s in enumerate(scores)}
    order = sorted(value, key=lambda j: (-value[j], j == target))
    return order.index(target)


def integer_case(seed: int, B: int = 40, N: int = 30, d: int = 3, L: int = 6):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randint(-2, 3, (B, d), generator=g).double()  # integer scores: many ties
    emb = torch.randint(-2, 3, (N + 1, d), generator=g).double()
    seen = torch.randint(0, N + 1, (B, L), generator=g)  # 0 = padding
    targets = torch.randint(1, N + 1, (B,), generator=g)
    return hidden, emb, seen, targets


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("filtered", [False, True])
def test_pessimistic_ranks_match_slow_reference_with_ties(seed: int, filtered: bool) -> None:
    hidden, emb, seen, targets = integer_case(seed)
    raw = hidden @ emb.T
    scores = full_scores(hidden, emb, seen if filtered else None)
    ranks = pessimistic_ranks(scores, targets)
    n_ties = 0
    for b in range(len(targets)):
        seen_b = set(seen[b].tolist()) - {0} if filtered else set()
        t = int(targets[b])
        assert int(ranks[b]) == slow_rank(raw[b].tolist(), t, seen_b)
        n_ties += int((raw[b, 1:] == raw[b, t]).sum()) - 1
    assert n_ties > 0  # the case really has ties


def test_ranks_of_several_items_per_row() -> None:
    hidden, emb, seen, targets = integer_case(5)
    scores = full_scores(hidden, emb)
    cols = torch.stack([targets, seen[:, 0].clamp(min=1), seen[:, 1].clamp(min=1)], 1)
    many = pessimistic_ranks(scores, cols)
    assert many.shape == (40, 3)
    for k in range(3):
        assert torch.equal(many[:, k], pessimistic_ranks(scores, cols[:, k]))


@pytest.mark.parametrize("seed", [0, 1])
def test_pessimistic_ranks_over_several_tiles_match_the_slow_reference(seed: int, monkeypatch) -> None:
    """More items than a tile (ITEM_TILE columns counted at a time, the last tile partial), integer scores full of
    ties, -0.0 beside 0.0, seen items filtered (MISS), several items a row: the slow reference's ranks. The count
    compared a (users x k x items) bool tensor at once: about 3x the time of a compare into a float buffer a tile
    at a time on a CPU, and 4 (alpha) or 2 (shuffle) such passes a batch; no compare is wider than a tile now."""
    hidden, emb, seen, targets = integer_case(seed, B=12, N=2 * ITEM_TILE + 37, d=2)
    raw = hidden @ emb.T
    zero = raw == 0
    raw[zero] = torch.where(torch.rand(raw.shape) < 0.5, -1.0, 1.0).double()[zero] * 0.0  # -0.0 == 0.0
    scores = raw.clone()
    scores[:, 0] = -math.inf
    scores.scatter_(1, seen, -math.inf)
    cols = torch.stack([targets, seen[:, 0].clamp(min=1), torch.ones_like(targets)], 1)
    widest: list[int] = []
    real_ge, real_dunder = torch.ge, torch.Tensor.__ge__

    def ge(*args, **kwargs):
        out = real_ge(*args, **kwargs)
        widest.append(out.numel())
        return out

    def dunder(self, other):
        out = real_dunder(self, other)
        widest.append(out.numel())
        return out

    monkeypatch.setattr(torch, "ge", ge)
    monkeypatch.setattr(torch.Tensor, "__ge__", dunder)
    many = pessimistic_ranks(scores, cols)
    monkeypatch.undo()
    assert max(widest) <= 12 * 3 * ITEM_TILE
    for b in range(12):
        seen_b = set(seen[b].tolist()) - {0}
        for j in range(3):
            assert int(many[b, j]) == slow_rank(raw[b].tolist(), int(cols[b, j]), seen_b), (b, j)
        assert int(pessimistic_ranks(scores, cols[:, 0])[b]) == int(many[b, 0])


def test_full_scores_masks_padding_and_seen_items_only() -> None:
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    emb = torch.tensor([[5.0, 5.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    seen = torch.tensor([[0, 0, 2], [0, 0, 0]])  # row 1 is all padding
    s = full_scores(hidden, emb, seen)
    assert s[0].tolist() == [-math.inf, 1.0, -math.inf, 5.0]
    assert s[1].tolist() == [-math.inf, 2.0, 4.0, 6.0]


@pytest.mark.parametrize("N", [30, 3, 1])
def test_target_in_its_own_input_is_a_miss_when_filtering(N: int) -> None:
    """Also in a catalogue smaller than K (3 or 1 items): the filtered target is not "in the top 5" below the
    other items and the padding column; it is a miss at every K, with reciprocal rank 0."""
    hidden = torch.ones(1, 2)
    emb = torch.zeros(N + 1, 2)
    t = min(3, N)
    emb[t] = 1.0  # item t is the best item and the target
    seen = torch.tensor([[0, t]])
    target = torch.tensor([t])
    assert pessimistic_ranks(full_scores(hidden, emb), target).item() == 0
    rank = pessimistic_ranks(full_scores(hidden, emb, seen), target).item()
    assert rank == MISS == slow_rank(emb.sum(1).tolist(), t, {t})
    assert all(v == 0.0 for v in metrics_from_ranks(torch.tensor([rank])).values())
    # a filtered target beside an unfiltered one ranked last (below every other item): only the latter counts
    two = metrics_from_ranks(torch.tensor([rank, N - 1]), ks=(1, 5, 40))
    assert two["HR@40"] == 0.5 and two["HR@5"] == (0.5 if N <= 5 else 0.0) and two["MRR"] == pytest.approx(0.5 / N)


def test_all_equal_scores_rank_last() -> None:
    scores = full_scores(torch.zeros(1, 2), torch.randn(6, 2))  # every real item scores 0
    assert pessimistic_ranks(scores, torch.tensor([2])).item() == 4  # the other 4 real items tie above


def test_metrics_hand_computed() -> None:
    ranks = torch.tensor([0, 1, 4, 10, 25])
    m = metrics_from_ranks(ranks, ks=(1, 5, 10, 20))
    assert m["HR@1"] == pytest.approx(1 / 5)
    assert m["HR@5"] == pytest.approx(3 / 5)
    assert m["HR@10"] == pytest.approx(3 / 5)
    assert m["HR@20"] == pytest.approx(4 / 5)
    assert m["NDCG@1"] == pytest.approx(1 / 5)
    assert m["NDCG@5"] == pytest.approx((1 + 1 / math.log2(3) + 1 / math.log2(6)) / 5)
    assert m["NDCG@20"] == pytest.approx((1 + 1 / math.log2(3) + 1 / math.log2(6) + 1 / math.log2(12)) / 5)
    assert m["MRR"] == pytest.approx((1 + 1 / 2 + 1 / 5 + 1 / 11 + 1 / 26) / 5)
    assert set(m) == {"HR@1", "HR@5", "HR@10", "HR@20", "NDCG@1", "NDCG@5", "NDCG@10", "NDCG@20", "MRR"}


def test_a_miss_is_never_a_hit_however_large_the_cutoff(tmp_path, capsys) -> None:
    """HR@5000000000000000000 read 1.0000 on a run whose filtered targets are misses (rank MISS < K); a cutoff past
    int64 was an OverflowError traceback. A miss now counts 0 at every K, and K is at most MAX_CUTOFF everywhere it is
    given (the CLI, the API, the diagnostics' options)."""
    import numpy as np
    from cli_helpers import SMALL_SYNTHETIC, invoke

    import resdom
    from resdom.checks import MAX_CUTOFF
    from resdom.diagnostics.hrli import hrli_from_ranks
    from resdom.diagnostics.options import DiagnoseOptions

    ranks = torch.tensor([0, MISS, 3])
    m = metrics_from_ranks(ranks, ks=(10, 5 * 10**18))
    assert m["HR@10"] == m["HR@5000000000000000000"] == pytest.approx(2 / 3)
    assert m["NDCG@5000000000000000000"] == pytest.approx((1 + 1 / math.log2(5)) / 3)
    assert hrli_from_ranks(np.array([[0], [MISS]]), (1,), (5 * 10**18,)) == {"HRLI@5000000000000000000": 0.5}
    assert MAX_CUTOFF < MISS
    from resdom.models import build_model
    from resdom.models.config import make_model_config

    split = resdom.prepare_split(SMALL_SYNTHETIC)
    model = build_model(make_model_config(name="sasrec", n_items=split.n_items, hidden=8, layers=1, heads=1,
                                          max_len=8))
    with pytest.raises(ResdomError, match="cutoffs: every value must be an integer from 1 to 2,147,483,647"):
        resdom.evaluate(model, split, cutoffs=(10, 10**19))
    with pytest.raises(Exception, match="every value must be at most 2,147,483,647"):
        DiagnoseOptions(cutoffs=(1, 2**40))
    assert invoke("evaluate", str(tmp_path / "run"), "--cutoffs", "10,99999999999999999999999") == 2
    assert "--cutoffs: must be at most 2,147,483,647 (got 99999999999999999999999)" in capsys.readouterr().err


def test_user_chunk_size_bounds_the_score_matrix() -> None:
    assert user_chunk_size(100, 256) == 256
    assert user_chunk_size(1_000_000, 256, budget=10_000_000) == 9
    assert user_chunk_size(10**9, 256) == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tile", [1, 4, 7, 31, 64])
@pytest.mark.parametrize("filtered", [False, True])
def test_tiled_ranks_equal_the_full_score_matrix_with_ties(seed: int, tile: int, filtered: bool) -> None:
    """Integer scores (many exact ties), tiles of one item, uneven last tiles, one tile of all: the ranks of
    ``pessimistic_ranks(full_scores(...))``, for one item and several items per row, absent items (0) too."""
    hidden, emb, seen, targets = integer_case(seed)
    seen_ = seen if filtered else None
    want = pessimistic_ranks(full_scores(hidden, emb, seen_), targets)
    assert torch.equal(tiled_ranks(hidden, emb, targets, seen_, tile=tile), want)
    several = torch.stack([targets, seen[:, 0], torch.zeros_like(targets)], 1)  # seen items and padding too
    want = pessimistic_ranks(full_scores(hidden, emb, seen_), several)
    assert torch.equal(tiled_ranks(hidden, emb, several, seen_, tile=tile), want)


@pytest.mark.parametrize("n_items", [100, 5000, 20_000])
def test_tiled_ranks_equal_the_previous_path_at_the_default_tile(n_items: int) -> None:
    """float32 scores of a trained-like size (tiles of ``ITEM_TILE`` items): the same ranks as the full product,
    with seen items and duplicated item rows (exact ties across tiles)."""
    g = torch.Generator().manual_seed(n_items)
    emb = torch.randn(n_items + 1, 32, generator=g) * 0.2
    emb[n_items // 2 :: 997] = emb[1]  # the same item many times, in several tiles
    hidden = torch.randn(60, 32, generator=g)
    targets = torch.randint(1, n_items + 1, (60,), generator=g)
    targets[:5] = 1
    seen = torch.randint(0, n_items + 1, (60, 40), generator=g)
    seen[7, 3] = targets[7]  # a target in its own input
    for s in (None, seen):
        want = pessimistic_ranks(full_scores(hidden, emb, s), targets)
        assert torch.equal(tiled_ranks(hidden, emb, targets, s), want)
    assert ITEM_TILE < 20_000 + 1  # several tiles in the largest case


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_tiled_ranks_count_exactly_in_other_dtypes(dtype: torch.dtype) -> None:
    """The per-tile counts are float32 sums of ones (exact to 2^24): a bfloat16 model (whose own sums would lose
    counts above 256) and a float64 one get the pessimistic ranks of the tile products themselves (the products
    the ranking scores with; in float64 they may round apart from one full product), a whole tile of ties too."""
    g = torch.Generator().manual_seed(3)
    emb = (torch.randn(5001, 16, generator=g) * 0.3).to(dtype)
    emb[ITEM_TILE : 2 * ITEM_TILE] = emb[ITEM_TILE]  # a whole tile of one score: a full tile's count
    hidden = torch.randn(20, 16, generator=g).to(dtype)
    targets = torch.randint(1, 5001, (20,), generator=g)
    targets[:4] = ITEM_TILE
    tiles = torch.cat([hidden @ emb[lo : lo + ITEM_TILE].T for lo in range(0, 5001, ITEM_TILE)], 1)
    tiles[:, 0] = -math.inf  # the padding item, as full_scores
    want = pessimistic_ranks(tiles, targets)
    assert torch.equal(tiled_ranks(hidden, emb, targets), want)
    assert (want[:4] >= ITEM_TILE - 1).all()  # the ties count against the item


def test_tiled_ranks_refuse_non_finite_scores() -> None:
    hidden, emb = torch.ones(3, 2), torch.ones(40, 2)
    emb[33, 0] = math.nan
    with pytest.raises(ResdomError, match="NaN or infinity"):
        tiled_ranks(hidden, emb, torch.tensor([1, 2, 3]), tile=8)
    emb[33, 0], emb[0, 0] = 1.0, math.nan  # the padding row is never ranked
    assert tiled_ranks(hidden, emb, torch.tensor([1, 2, 3]), tile=8).tolist() == [38, 38, 38]
    big = torch.full((3, 2), 2e19)  # finite weights whose scores overflow float32
    with pytest.raises(ResdomError, match="NaN or infinity"):
        tiled_ranks(big, torch.full((40, 2), 2e19), torch.tensor([1, 2, 3]), tile=8)
    emb = torch.full((40, 2), 1e18)  # a bound above the check's threshold, every score finite: checked, ranked
    emb[5] = 2e18
    assert tiled_ranks(big, emb, torch.tensor([1, 5, 3]), tile=8).tolist() == [38, 0, 38]


def test_tiled_chunk_size_bounds_the_kept_tiles() -> None:
    assert tiled_chunk_size(12_000, 256) == 256  # 6 tiles of 2048 items at most
    b = tiled_chunk_size(1_000_000, 256)
    assert b * b * ITEM_TILE <= SCORE_BUDGET < (b + 20) ** 2 * ITEM_TILE
    assert tiled_chunk_size(1_000_000, 256, k=3) < b
    assert tiled_chunk_size(10**9, 256) == b  # no matrix of all items: the chunk does not shrink further


def test_diagnostics_rank_items_equal_ranks_of_the_score_matrix() -> None:
    """``diagnostics.common.rank_items`` (tiled) against ``ranks_of(scores_at(...))`` (the previous path), absent
    items MISS, filtered and not."""
    from types import SimpleNamespace

    from resdom.diagnostics.common import rank_items, ranks_of, scores_at

    hidden, emb, seen, targets = integer_case(4, N=5000)
    model = SimpleNamespace(item_embeddings=lambda: emb)
    items = torch.stack([targets, seen[:, 1], torch.zeros_like(targets)], 1)
    for s in (None, seen):
        assert torch.equal(rank_items(model, hidden, items, s), ranks_of(scores_at(model, hidden, s), items))
