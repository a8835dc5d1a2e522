"""Length-sorted batches (``iter_eval_batches(by_length=True)``) in evaluation and every diagnostic: the same
per-user results as the batches in user order (the previous path), in user order, on synthetic inputs of
varied lengths, for every model kind (models without a key-padding mask pad to max_len inside ``encode``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import resdom.diagnostics.common as common
import resdom.evaluation.evaluate as evaluate_module
from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics import alpha_sweep, last_item_hit_rates, miss_recovery, mixing_ratios, position_shuffle
from resdom.evaluation.batches import in_user_order, iter_eval_batches, length_order
from resdom.evaluation.evaluate import evaluate
from resdom.models import build_model, make_model_config

N_ITEMS, MAX_LEN, BATCH = 50, 12, 7

MODELS: dict[str, dict[str, Any]] = {
    "sasrec": {},
    "sasrec-no-key-padding": {"key_padding_mask": False},  # pads to max_len inside encode
    "query-ln": {"name": "duorec", "query_ln": True, "final_ln": True, "zero_padding": True},
    "pre-ln-mean-readout": {"norm_first": True, "readout": "mean", "readout_k": 3},
    "bsarec": {"name": "bsarec", "heads": 1},  # always the full window
    "bert4rec": {"name": "bert4rec"},
    "gru4rec": {"name": "gru4rec"},
    "query-readout": {"readout": "query"},
    "paper-duorec": {"name": "duorec", "query_ln": True, "query_ln_kv": "query", "final_ln": True},
}


def make_evalset(seed: int = 0, n_users: int = 41) -> EvalSet:
    """Histories of 1..20 items (some longer than MAX_LEN, most shorter), in a random order of lengths."""
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, N_ITEMS + 1, size=int(rng.integers(1, 21))).tolist() for _ in range(n_users)]
    seqs[5], seqs[9] = [3], []  # a one-item history, an empty one (its state depends on the batch width)
    targets = rng.integers(1, N_ITEMS + 1, size=n_users)
    return EvalSet(Sequences.from_lists(seqs), targets)


def make_model(kind: str) -> torch.nn.Module:
    values = {"name": "sasrec", "n_items": N_ITEMS, "max_len": MAX_LEN, "hidden": 16, "heads": 2, **MODELS[kind]}
    if values["name"] == "gru4rec":
        del values["heads"]  # no attention heads
    torch.manual_seed(7)
    return build_model(make_model_config(**values)).eval()


def user_order_batches(*args: Any, **kwargs: Any) -> Iterator:
    """The previous path: batches in user order (the by_length flag ignored)."""
    return iter_eval_batches(*args, **{**kwargs, "by_length": False})


@pytest.fixture
def previous_path(monkeypatch: pytest.MonkeyPatch):
    """Call ``fn()`` with the batches in user order instead of by length."""

    def run(fn):
        with monkeypatch.context() as m:
            m.setattr(evaluate_module, "iter_eval_batches", user_order_batches)
            m.setattr(common, "iter_eval_batches", user_order_batches)
            return fn()

    return run


def test_length_order_is_a_stable_sort_longest_window_first() -> None:
    ev = EvalSet(Sequences.from_lists([[1], [1, 2, 3], [4] * 20, [5, 6], [7] * 15, [8, 9, 1]]), np.ones(6, int))
    # windows of MAX_LEN: 1, 3, 12, 2, 12, 3 -> the two 12s (user order), the two 3s, the 2, the 1
    assert length_order(ev, MAX_LEN, np.arange(6)).tolist() == [2, 4, 1, 5, 3, 0]
    assert length_order(ev, MAX_LEN, np.array([0, 2, 4])).tolist() == [2, 4, 0]


def test_length_sorted_batches_are_narrower_and_cover_every_user_once() -> None:
    ev = make_evalset(0, 200)
    widths = {flag: [] for flag in (False, True)}
    seen = {flag: [] for flag in (False, True)}
    for flag in widths:
        for idx, items, targets in iter_eval_batches(ev, MAX_LEN, BATCH, by_length=flag):
            widths[flag].append(items.numel())
            seen[flag].append(idx)
            trimmed = ev.inputs.padded(MAX_LEN, idx)
            assert items.shape[1] == (MAX_LEN if (ev.inputs.lengths[idx] == 0).any() else trimmed.shape[1])
            assert items[:, -trimmed.shape[1] :].tolist() == trimmed.tolist()
            assert not items[:, : -trimmed.shape[1]].any()
            assert targets.tolist() == ev.targets[idx].tolist()
    assert sorted(np.concatenate(seen[True]).tolist()) == list(range(len(ev)))
    assert sum(widths[True]) < 0.8 * sum(widths[False])  # padded cells: the point of sorting


def test_in_user_order_puts_rows_back() -> None:
    idx = np.array([4, 0, 3, 1, 2])
    rows = np.array([[40], [0], [30], [10], [20]])
    assert in_user_order(rows, idx).ravel().tolist() == [0, 10, 20, 30, 40]
    assert in_user_order(torch.from_numpy(rows), idx).ravel().tolist() == [0, 10, 20, 30, 40]


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("filter_seen", [True, False])
def test_evaluation_ranks_equal_the_user_order_path(kind: str, filter_seen: bool, previous_path) -> None:
    model, ev = make_model(kind), make_evalset()
    new = evaluate(model, ev, filter_seen=filter_seen, batch_size=BATCH, return_ranks=True)
    old = previous_path(lambda: evaluate(model, ev, filter_seen=filter_seen, batch_size=BATCH, return_ranks=True))
    assert new.ranks.tolist() == old.ranks.tolist()
    assert new.metrics == old.metrics


def every_diagnostic(model, ev, valid) -> dict[str, Any]:
    """Each diagnostic's result (as a dict) of ``model`` on ``ev`` (recovery selecting on ``valid``), at BATCH."""
    out = {"hrli": last_item_hit_rates(model, ev, batch_size=BATCH).to_dict(),
           "shuffle": position_shuffle(model, ev, seeds=(0,), batch_size=BATCH).to_dict(),
           "recovery": miss_recovery(model, valid, ev, alphas=(0.5, 1.0), batch_size=BATCH).to_dict()}
    if model.attention_blocks():
        out["mixing"] = mixing_ratios(model, ev, batch_size=BATCH).to_dict()
        out["alpha"] = alpha_sweep(model, ev, alphas=(0.5, 1.0), batch_size=BATCH).to_dict()
    return out


@pytest.mark.parametrize("kind", list(MODELS))
def test_diagnostics_equal_the_user_order_path(kind: str, previous_path) -> None:
    model, ev, valid = make_model(kind), make_evalset(0), make_evalset(1, 29)

    def run_all() -> dict[str, Any]:
        return every_diagnostic(model, ev, valid)

    new, old = run_all(), previous_path(run_all)
    assert new.keys() == old.keys()
    for name in ("hrli", "shuffle", "recovery"):  # rank-based: identical
        assert new[name] == old[name], name
    if "mixing" in new:  # float32 states to rounding (other batch widths), summed in another order
        assert_close(new["mixing"], old["mixing"])
        assert_close(new["alpha"], old["alpha"])


def assert_close(a: Any, b: Any, path: str = "") -> None:
    """Nested dicts / lists equal, numbers to 1e-6 relative (NaN equal to NaN)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-6, abs=1e-9, nan_ok=True), path
    else:
        assert a == b, path


@pytest.mark.parametrize("kind", ["bert4rec", "sasrec", "query-readout"])
def test_recovery_ranks_do_not_depend_on_the_batch_width(kind: str) -> None:
    """One user per batch (each as narrow as its own window) against one batch of all: BERT4Rec's offset k sits on
    the k-th most recent item, real for a user of exactly k items, even where the batch is only k wide."""
    from resdom.diagnostics.common import inference
    from resdom.diagnostics.recovery import position_ranks

    model, ev = make_model(kind), make_evalset()
    with inference(model):
        one = position_ranks(model, ev, batch_size=1)
        every = position_ranks(model, ev, batch_size=len(ev))
    assert one.tolist() == every.tolist()
    short = ev.inputs.lengths == 3
    assert short.any()
    hit_first_item = one[short, 3] < common.MISS  # offset 3 of a 3-item user: its first item (BERT4Rec), else none
    assert hit_first_item.all() if kind == "bert4rec" else not hit_first_item.any()


def test_activation_chunk_bounds_a_long_window_and_leaves_the_study_s_alone() -> None:
    """256 users at max length 1,000 held (256, heads, 1000, 1000) attention weights a block in the diagnostics
    that record them (2 GB; sum_of_norms could not allocate them under 6 GB) and a (256, 1000, 4d) FFN tensor
    (1 GB at d 1,024) in every forward pass: the chunk now shrinks to keep them within ACTIVATION_BUDGET floats."""
    from resdom.evaluation.batches import ACTIVATION_BUDGET, activation_chunk

    def model(**values: Any) -> torch.nn.Module:
        return build_model(make_model_config(**{"name": "sasrec", "n_items": 5, "hidden": 64, **values}))

    long = model(max_len=1000, heads=2)
    assert activation_chunk(long, np.array([3, 1000]), 256) == ACTIVATION_BUDGET // (1000 * 2000) == 64
    assert activation_chunk(long, np.array([3, 20]), 256) == 256  # short inputs: batches are trimmed to them
    wide = model(max_len=1000, hidden=1024, heads=1)
    assert activation_chunk(wide, np.array([1000]), 256) == ACTIVATION_BUDGET // (1000 * 4096)
    bsarec = build_model(make_model_config(name="bsarec", n_items=5, hidden=64, heads=1, max_len=1000))
    assert activation_chunk(bsarec, np.array([3]), 256) == ACTIVATION_BUDGET // (1000 * 1000)  # the whole window
    for heads in (1, 2, 4):  # the study's models (max length 50 to 200, d 64): the batch asked for
        assert activation_chunk(model(max_len=200, heads=heads), np.array([200]), 256) == 256


@pytest.mark.parametrize("kind", ["sasrec", "bsarec", "gru4rec"])
def test_capped_batches_give_the_same_results(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a budget that allows 3 users a batch, evaluation and every diagnostic batch 3 users at most and give
    the numbers of the batches asked for."""
    import resdom.evaluation.batches as batches_module

    model, ev, valid = make_model(kind), make_evalset(0), make_evalset(1, 29)

    def run_all() -> dict[str, Any]:
        return {"eval": evaluate(model, ev, batch_size=BATCH, return_ranks=True).ranks.tolist(),
                **every_diagnostic(model, ev, valid)}

    want = run_all()
    cfg = model.cfg
    per_user = MAX_LEN * max(getattr(cfg, "inner", 4 * cfg.hidden), getattr(cfg, "heads", 1) * MAX_LEN)
    budget = 3 * per_user + 1
    monkeypatch.setattr(batches_module, "ACTIVATION_BUDGET", budget)
    sizes = []
    real = iter_eval_batches

    def spy(*args: Any, **kwargs: Any) -> Iterator:
        for batch in real(*args, **kwargs):
            width = MAX_LEN if kind == "bsarec" else batch[1].shape[1]  # BSARec pads to max_len itself
            sizes.append(len(batch[0]))
            assert len(batch[0]) * width * max(getattr(cfg, "inner", 4 * cfg.hidden),
                                               getattr(cfg, "heads", 1) * width) <= budget
            yield batch

    monkeypatch.setattr(evaluate_module, "iter_eval_batches", spy)
    monkeypatch.setattr(common, "iter_eval_batches", spy)
    got = run_all()
    assert sizes and max(sizes) < BATCH
    for name in ("eval", "hrli", "shuffle", "recovery"):  # rank-based: identical
        assert got[name] == want[name], name
    if "mixing" in got:
        assert_close(got["mixing"], want["mixing"])
        assert_close(got["alpha"], want["alpha"])


def test_a_long_history_is_filtered_without_a_users_x_history_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen-item filtering padded every user of a chunk to the longest whole history in it: 256 users beside one
    of a million events made a (256, 1,000,000) matrix (2 GB, and as much again in its sorted copies), and
    evaluation stopped with a memory error under 6 GB. The seen items are now (row, item) pairs, as many as the
    chunk's interactions; every rank, list and diagnostic is the same."""
    from resdom.data.sequences import SplitData
    from resdom.evaluation.beyond import beyond_accuracy
    from resdom.evaluation.ranking import full_scores, tiled_ranks
    from resdom.recommend import recommend

    rng = np.random.default_rng(3)
    seqs = [rng.integers(1, N_ITEMS + 1, size=int(rng.integers(0, 9))).tolist() for _ in range(30)]
    seqs[4] = rng.integers(1, N_ITEMS + 1, size=3000).tolist()  # one long history
    ev = EvalSet(Sequences.from_lists(seqs), rng.integers(1, N_ITEMS + 1, size=30))
    model = make_model("sasrec")

    def run() -> dict[str, Any]:
        split = SplitData(ev.inputs, ev, ev, N_ITEMS, {"protocol": "loo"})
        return {"eval": evaluate(model, ev, batch_size=BATCH, return_ranks=True).ranks.tolist(),
                "beyond": beyond_accuracy(model, ev, ev.inputs, filter_seen=True, ks=(3,), batch_size=BATCH)[0],
                "recommend": recommend(model, split, k=4, history="test", batch_size=BATCH).to_dict("list"),
                "shuffle": position_shuffle(model, ev, seeds=(0,), batch_size=BATCH).to_dict(),
                "recovery": miss_recovery(model, ev, ev, alphas=(0.5, 1.0), batch_size=BATCH).to_dict(),
                "alpha": alpha_sweep(model, ev, alphas=(0.5, 1.0), batch_size=BATCH).to_dict()}

    widths = []
    real = Sequences.padded

    def padded(self: Sequences, max_len: int, index: np.ndarray | None = None) -> np.ndarray:
        out = real(self, max_len, index)
        widths.append(out.shape[1])
        return out

    monkeypatch.setattr(Sequences, "padded", padded)
    got = run()
    assert widths and max(widths) <= MAX_LEN  # what the model reads, never the whole history
    # against the (B, L) matrix of the whole history
    monkeypatch.setattr(Sequences, "padded", real)
    with torch.no_grad():
        h = torch.randn(30, 16)
        emb = model.item_embeddings()
        from resdom.evaluation.batches import history_pairs

        idx = np.arange(30)
        matrix = torch.from_numpy(ev.inputs.padded(1 << 62, idx))
        pairs = history_pairs(ev.inputs, idx)
        targets = torch.from_numpy(ev.targets)
        assert torch.equal(full_scores(h, emb, matrix), full_scores(h, emb, pairs))
        assert torch.equal(tiled_ranks(h, emb, targets, matrix, tile=7), tiled_ranks(h, emb, targets, pairs, tile=7))
    assert got["eval"] == evaluate(model, ev, batch_size=len(ev), return_ranks=True).ranks.tolist()
