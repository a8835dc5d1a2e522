"""The worked example of docs/adapters.md, executed: a plain PyTorch SASRec written outside resdom, wrapped by
an adapter, equals the original, records a decomposable block, honours alpha, and runs through evaluation and
the diagnostics."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.evaluation.evaluate import evaluate
from resdom.evaluation.ranking import full_scores, metrics_from_ranks, pessimistic_ranks
from resdom.models.interface import Diagnosable, recording, residual_scale

DOC = Path(__file__).resolve().parents[1] / "docs" / "adapters.md"
N_ITEMS, MAX_LEN = 30, 8


def _example() -> SimpleNamespace:
    """Execute the code between the example markers of docs/adapters.md; returns its namespace."""
    text = DOC.read_text()
    block = re.search(r"<!-- example:start -->\s*```python\n(.*?)```\s*<!-- example:end -->", text, re.S)
    assert block, "docs/adapters.md lost its example markers"
    namespace: dict = {"__name__": "adapters_example"}
    exec(compile(block.group(1), str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
    return SimpleNamespace(**namespace)


@pytest.fixture(scope="module")
def ex() -> SimpleNamespace:
    return _example()


@pytest.fixture(scope="module")
def models(ex: SimpleNamespace) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    theirs = ex.TheirSASRec(N_ITEMS, MAX_LEN, d=16, heads=2, layers=2).eval()
    with torch.no_grad():  # away from the default init, so a wrong bias or LayerNorm mapping shows
        for p in theirs.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return theirs, ex.TheirSASRecAdapter(theirs).eval()


@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    rng = np.random.default_rng(1)
    seqs = [rng.integers(1, N_ITEMS + 1, size=int(rng.integers(1, 12))).tolist() for _ in range(40)]
    return EvalSet(Sequences.from_lists(seqs), rng.integers(1, N_ITEMS + 1, size=40))


def _items() -> torch.Tensor:
    return torch.tensor([[0, 0, 0, 4, 9, 2], [7, 1, 3, 3, 8, 5], [0, 0, 0, 0, 0, 6]])


def test_adapter_is_diagnosable_and_equals_the_original(models) -> None:
    theirs, adapter = models
    assert isinstance(adapter, Diagnosable)
    items = _items()
    with torch.no_grad():
        ref, ours = theirs(items), adapter.encode(items)
    real = items > 0
    torch.testing.assert_close(ours[real], ref[real], rtol=1e-5, atol=1e-5)


def test_records_rebuild_the_block(models) -> None:
    _, adapter = models
    items = _items()
    with torch.no_grad(), recording(adapter) as store:
        adapter.encode(items)
    assert [len(layer) for layer in store] == [1, 1]
    for (rec,) in store:
        rebuilt = torch.einsum("bhij,bhjd->bid", rec.attn_weights, rec.head_values) + rec.out_bias
        torch.testing.assert_close(rebuilt, rec.attn_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(rec.z, rec.alpha * rec.x + rec.attn_out)
        ln = torch.nn.functional.layer_norm(rec.z, rec.z.shape[-1:], rec.ln_weight, rec.ln_bias, rec.ln_eps)
        torch.testing.assert_close(ln, rec.sublayer_out)
    assert all(b.recording is None for b in adapter.attention_blocks())


def test_residual_scale_acts_in_eval_mode_only_and_is_restored(models) -> None:
    _, adapter = models
    items = _items()
    with torch.no_grad():
        base = adapter.encode(items)
        with residual_scale(adapter, 0.2):
            scaled = adapter.encode(items)
            adapter.train()
            training = adapter.encode(items)
            adapter.eval()
        again = adapter.encode(items)
    assert not torch.allclose(scaled[:, -1], base[:, -1])
    torch.testing.assert_close(training, base)  # alpha = 1 while training (dropout: none in this model)
    torch.testing.assert_close(again, base)
    assert [b.alpha for b in adapter.attention_blocks()] == [1.0, 1.0]


def test_evaluation_of_the_adapter_is_the_original_models(models, evalset: EvalSet) -> None:
    theirs, adapter = models
    result = evaluate(adapter, evalset, batch_size=7)
    items = torch.from_numpy(evalset.inputs.padded(MAX_LEN))
    seen = torch.from_numpy(evalset.inputs.padded(1 << 30))
    with torch.no_grad():
        scores = full_scores(theirs(items)[:, -1], theirs.items.weight, seen)
    expected = metrics_from_ranks(pessimistic_ranks(scores, torch.from_numpy(evalset.targets)))
    assert result.n_users == len(evalset)
    for name, value in expected.items():
        assert math.isclose(result.metrics[name], value, abs_tol=1e-9), name


def test_diagnostics_run_on_the_adapter(models, evalset: EvalSet) -> None:
    from resdom.diagnostics import alpha_sweep, last_item_hit_rates, mixing_ratios, position_shuffle

    _, adapter = models
    mixing = mixing_ratios(adapter, evalset).to_dict()
    assert [layer["layer"] for layer in mixing["layers"]] == [0, 1]
    for stage in ("Attn", "+Res", "+LN"):
        assert 0.0 <= mixing["pooled"]["all"][stage] <= 1.0
    hrli = last_item_hit_rates(adapter, evalset)
    assert hrli.n_users == len(evalset) and 0.0 <= hrli.values["HRLI@1"] <= 1.0
    shuffle = position_shuffle(adapter, evalset, modes=("keep_last", "full"), seeds=(0,)).to_dict()
    assert set(shuffle["perturbations"]) == {"keep_last", "full"}
    sweep = alpha_sweep(adapter, evalset, alphas=(1.0, 0.0)).to_dict()
    rows = {row["alpha"]: row for row in sweep["rows"]}
    # without the residual, +Res has nothing of its own left: the mixing ratio there equals Attn's
    assert math.isclose(rows[0.0]["mixing_all"]["+Res"], rows[0.0]["mixing_all"]["Attn"], abs_tol=1e-6)
    assert rows[0.0]["mixing_all"]["+Res"] > rows[1.0]["mixing_all"]["+Res"]
    assert math.isclose(rows[1.0]["HR@10"], evaluate(adapter, evalset).metrics["HR@10"], abs_tol=1e-9)
