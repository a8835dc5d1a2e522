"""The evaluation loop (spec §3): against a per-user slow reference, batch-size independence, filtering,
any Diagnosable, and sharding across two gloo processes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from gloo_helpers import spawn_gloo

import resdom.evaluation.evaluate as evaluate_module
from resdom.data.sequences import EvalSet, Sequences
from resdom.evaluation.evaluate import EvalResult, evaluate
from resdom.evaluation.ranking import MISS
from resdom.models import build_model, make_model_config

N_ITEMS, MAX_LEN = 40, 8


def make_evalset(seed: int = 0, n_users: int = 23) -> EvalSet:
    """Random histories of 1..15 items (some longer than max_len); a few targets repeat an earlier item."""
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, N_ITEMS + 1, size=int(rng.integers(1, 16))).tolist() for _ in range(n_users)]
    targets = rng.integers(1, N_ITEMS + 1, size=n_users)
    targets[:4] = [seqs[0][-1], seqs[1][0], seqs[2][0], seqs[3][-1]]  # in the input (maybe outside the window)
    return EvalSet(Sequences.from_lists(seqs), targets)


def make_model(name: str = "sasrec") -> torch.nn.Module:
    torch.manual_seed(3)
    return build_model(make_model_config(name=name, n_items=N_ITEMS, max_len=MAX_LEN, hidden=16, heads=2))


def slow_ranks(model: torch.nn.Module, evalset: EvalSet, filter_seen: bool) -> list[int]:
    """One user at a time: the last max_len items, unpadded; sort every item, count (ties against the target);
    a target in its own input with filtering cannot be recommended: MISS."""
    model.eval()
    out = []
    with torch.no_grad():
        for u in range(len(evalset)):
            seq = evalset.inputs.sequence(u)
            h = model.encode(torch.tensor(seq[-MAX_LEN:])[None])[0, -1]
            scores = (model.item_embeddings() @ h).tolist()
            seen = set(seq.tolist()) if filter_seen else set()
            target = int(evalset.targets[u])
            value = {j: -math.inf if (j == 0 or j in seen) else s for j, s in enumerate(scores)}
            order = sorted(value, key=lambda j: (-value[j], j == target))
            out.append(MISS if target in seen else order.index(target))
    return out


@pytest.mark.parametrize("name", ["sasrec", "bsarec"])
@pytest.mark.parametrize("filter_seen", [True, False])
def test_evaluate_matches_slow_reference(name: str, filter_seen: bool) -> None:
    model, evalset = make_model(name).double(), make_evalset()
    res = evaluate(model, evalset, filter_seen=filter_seen, batch_size=5, return_ranks=True)
    want = slow_ranks(model, evalset, filter_seen)
    assert res.ranks.tolist() == want
    assert res.n_users == 23
    if filter_seen:  # targets in their own input (also outside the max_len window) are misses
        assert res.ranks[:4].tolist() == [MISS] * 4
    from resdom.evaluation.ranking import metrics_from_ranks

    assert res.metrics == metrics_from_ranks(torch.tensor(want))


def test_result_is_independent_of_batch_size_and_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    model, evalset = make_model(), make_evalset(1, 37)
    base = evaluate(model, evalset, batch_size=256, return_ranks=True)
    for bs in (1, 4, 7):
        other = evaluate(model, evalset, batch_size=bs, return_ranks=True)
        assert np.array_equal(other.ranks, base.ranks), bs
        assert other.metrics == base.metrics
    monkeypatch.setattr(evaluate_module, "tiled_chunk_size", lambda n_items, requested: 2)
    assert np.array_equal(evaluate(model, evalset, return_ranks=True).ranks, base.ranks)


def test_mode_is_restored_and_ranks_are_optional() -> None:
    model, evalset = make_model(), make_evalset()
    model.train()
    res = evaluate(model, evalset)
    assert model.training and res.ranks is None
    model.eval()
    evaluate(model, evalset)
    assert not model.training
    d = res.to_dict()
    assert json.loads(json.dumps(d)) == d and d["n_users"] == 23 and set(d["metrics"]) >= {"HR@10", "NDCG@10", "MRR"}
    assert isinstance(res, EvalResult)


class ScoreById:
    """A Diagnosable that is not an nn.Module: every position's state scores item j as j (higher ids first)."""

    n_items, max_len = 5, 4

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], bool]] = []

    def encode(self, items: torch.Tensor) -> torch.Tensor:
        self.calls.append((tuple(items.shape), torch.is_grad_enabled()))
        return torch.arange(6.0).expand(items.shape[0], items.shape[1], 6)

    def item_embeddings(self) -> torch.Tensor:
        return torch.eye(6)

    def attention_blocks(self) -> list:
        return []


def test_hand_computed_case_and_filtering_ignores_padding() -> None:
    # A: [1] -> 5; B: [5, 4, 3, 2] -> 1; C: [2] -> 2 (its own input). A and C are left-padded beside B.
    evalset = EvalSet(Sequences.from_lists([[1], [5, 4, 3, 2], [2]]), np.array([5, 1, 2]))
    model = ScoreById()
    filtered = evaluate(model, evalset, ks=(1, 2), return_ranks=True)
    assert filtered.ranks.tolist() == [0, 0, MISS]  # padding filters nothing; C's target is filtered: a miss
    assert filtered.metrics["HR@1"] == pytest.approx(2 / 3)
    assert filtered.metrics["MRR"] == pytest.approx((1 + 1 + 0) / 3)
    unfiltered = evaluate(model, evalset, filter_seen=False, ks=(1, 2), return_ranks=True)
    assert unfiltered.ranks.tolist() == [0, 4, 3]
    assert unfiltered.metrics["NDCG@2"] == pytest.approx(1 / 3)
    assert all(not grad for _, grad in model.calls) and model.calls[0][0] == (3, 4)


def test_one_item_catalogue_filtered_targets_are_misses() -> None:
    """30 users whose every interaction is the one item: with filtering every target is in its own input, so
    no target can be recommended: HR@K 0 for every K (the padding column ranked below it made HR@5 1.0)."""
    torch.manual_seed(0)
    model = build_model(make_model_config(name="sasrec", n_items=1, max_len=4, hidden=8, heads=1))
    evalset = EvalSet(Sequences.from_lists([[1] * (2 + u % 3) for u in range(30)]), np.ones(30, dtype=np.int64))
    res = evaluate(model, evalset, return_ranks=True)
    assert res.ranks.tolist() == slow_ranks(model, evalset, True) == [MISS] * 30
    assert all(v == 0.0 for v in res.metrics.values()) and res.n_users == 30
    unfiltered = evaluate(model, evalset, filter_seen=False)  # the only item is everyone's top-1
    assert unfiltered.metrics["HR@1"] == 1.0 and unfiltered.metrics["MRR"] == 1.0


def test_empty_evalset() -> None:
    res = evaluate(make_model(), EvalSet(Sequences.from_lists([]), np.zeros(0, dtype=np.int64)))
    assert res.n_users == 0


def _ddp_worker(rank: int, world: int, tmp: str) -> None:
    from torch.nn.parallel import DistributedDataParallel

    model = make_model()
    model.load_state_dict(torch.load(f"{tmp}/model.pt"))
    wrapped = DistributedDataParallel(model)  # evaluate unwraps it
    res = evaluate(wrapped, make_evalset(2, 29), batch_size=4, return_ranks=True)
    Path(f"{tmp}/rank{rank}.json").write_text(json.dumps({**res.to_dict(), "ranks": res.ranks.tolist()}))


@pytest.mark.slow
def test_two_gloo_processes_match_one_process(tmp_path: Path) -> None:
    model = make_model()
    torch.save(model.state_dict(), tmp_path / "model.pt")
    single = evaluate(model, make_evalset(2, 29), batch_size=4, return_ranks=True)
    spawn_gloo(_ddp_worker, str(tmp_path))
    for rank in (0, 1):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["n_users"] == 29
        assert got["ranks"] == single.ranks.tolist()
        assert got["metrics"] == pytest.approx(single.metrics, abs=1e-12)
