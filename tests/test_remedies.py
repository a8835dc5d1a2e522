"""Training-time remedies (docs/remedies.md): the fixed residual scale, the learned residual gate, readouts other
than the last state, and ``resdom remedies`` end to end on tiny synthetic data."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics.alpha import alpha_sweep
from resdom.diagnostics.decomposition import attention_terms, bias_terms, norm_of_sums, stages_of, sum_of_norms
from resdom.errors import ResdomError
from resdom.models import build_model, recording, residual_scale
from resdom.models.base import TrainBatch
from resdom.models.config import make_model_config
from resdom.models.interface import final_states, prediction_states, trained_scale
from resdom.training.objectives import LossContext, get_objective


def make_model(name: str = "sasrec", seed: int = 0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    values = dict(name=name, n_items=30, max_len=8, hidden=8, layers=2, heads=2, init_std=0.4, inner_mult=2,
                  dropout=0.0, attn_dropout=0.0)
    values.update(kw)
    return build_model(make_model_config(**values)).double()


def make_items(n: int = 6, seed: int = 0, max_len: int = 8) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, 31, size=int(rng.integers(1, max_len + 1))).tolist() for _ in range(n)]
    seqs[0] = [5]
    seqs[1] = rng.integers(1, 31, size=max_len).tolist()
    return torch.from_numpy(Sequences.from_lists(seqs).padded(max_len))


def set_gates(model: torch.nn.Module, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in model.attention_blocks():
            block.residual_gate.copy_(0.3 + torch.rand(block.residual_gate.shape, generator=g, dtype=torch.float64))


# ------------------------------------------------------------------------------------------------ config


def test_config_refuses_mixed_or_misplaced_remedies():
    from resdom.experiments import remedy_label
    from resdom.models.config import make_model_config
    from resdom.training.config import resolve_configs

    with pytest.raises(ResdomError, match="residual_gate"):
        make_model_config(n_items=5, residual_gate="scalar", residual_scale=0.5)
    with pytest.raises(ResdomError, match="model.readout_k"):
        make_model_config(n_items=5, readout_k=0)
    with pytest.raises(ResdomError, match="model.readout"):
        resolve_configs("gru4rec", {"readout": "pool"}, {}, n_items=5)
    with pytest.raises(ResdomError, match="model.readout"):
        resolve_configs("bert4rec", {"readout": "mean"}, {}, n_items=5)
    with pytest.raises(ResdomError, match="--variants"):
        remedy_label("sasrec", "nope")
    with pytest.raises(ResdomError, match="--variants"):
        remedy_label("bsarec", "preln")
    with pytest.raises(ResdomError, match="--model"):
        remedy_label("gru4rec", "gate")
    assert remedy_label("sasrec", "base") == "sasrec" and remedy_label("duorec", "gate") == "duorec-gate"


def test_defaults_change_nothing():
    """A model without remedies has no gate or readout parameter, and its prediction states are its states."""
    model = make_model().eval()
    names = [n for n, _ in model.named_parameters()]
    assert not any("residual_gate" in n or "readout" in n for n in names)
    items = make_items()
    with torch.no_grad():
        h = model.encode(items)
        assert torch.equal(prediction_states(model, h, items), h)
        torch.testing.assert_close(final_states(model, items), h[:, -1])  # final_states encodes column L-1 only
    assert all(trained_scale(b) == 1.0 and b.effective_alpha() == 1.0 for b in model.attention_blocks())


# ------------------------------------------------------------------------------------------------ residual scale


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True), dict(name="duorec", query_ln=True, final_ln=True),
                                dict(name="bsarec", bsa_a=0.6)], ids=["post-LN", "pre-LN", "query-LN", "bsarec"])
def test_fixed_scale_is_used_in_training_and_reported(kw):
    model = make_model(residual_scale=0.4, **kw)
    items = make_items()
    for training in (True, False):
        model.train(training)
        with torch.no_grad(), recording(model) as store:
            model.encode(items)
        for layer in store:
            rec = layer[0]
            assert rec.alpha == 0.4
            assert torch.allclose(rec.z, 0.4 * rec.x + rec.attn_out, atol=1e-12)  # no dropout: the real sum
    # dropout off: the training pass and the inference pass are the same function (the same scale)
    model.train(True)
    with torch.no_grad():
        train_out = model.encode(items)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(train_out, model.encode(items), atol=1e-12)
    # the sweep's alpha multiplies the trained scale, and the record says so
    with torch.no_grad(), residual_scale(model, 0.5), recording(model) as store:
        model.encode(items)
    assert all(layer[0].alpha == pytest.approx(0.2) for layer in store)
    assert all(b.alpha == 1.0 for b in model.attention_blocks())  # restored


def test_sweep_reports_the_trained_scale():
    model = make_model(residual_scale=0.5).eval()
    items = make_items(n=8)
    seqs = Sequences.from_lists([row[row > 0].tolist() for row in items])
    ev = EvalSet(seqs, np.arange(1, 9))
    d = alpha_sweep(model, ev, alphas=(1.0, 0.5)).to_dict()
    assert d["trained_scale"] == [0.5, 0.5] and d["scale_used"] == "trained_scale * alpha"
    base = alpha_sweep(make_model().eval(), ev, alphas=(1.0,)).to_dict()
    assert "trained_scale" not in base  # base models' output is unchanged


# ------------------------------------------------------------------------------------------------ the gate


@pytest.mark.parametrize("gate", ["scalar", "channel"])
@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True), dict(name="duorec", query_ln=True, final_ln=True)],
                         ids=["post-LN", "pre-LN", "query-LN"])
def test_gate_gradient_matches_finite_differences(gate, kw):
    model = make_model(residual_gate=gate, **kw).train()
    set_gates(model)
    items = make_items()
    targets = torch.from_numpy(np.random.default_rng(3).integers(1, 31, size=items.shape[0]))
    batch = TrainBatch(items, targets)
    objective = get_objective("ce_last")

    def loss() -> torch.Tensor:
        return objective.loss(model, batch, model.encode(items), LossContext())

    model.zero_grad()
    loss().backward()
    eps = 1e-6
    for block in model.attention_blocks():
        p = block.residual_gate
        assert p.grad is not None and p.grad.abs().max() > 0
        flat = p.data.view(-1)
        numeric = torch.zeros_like(flat)
        for c in range(flat.numel()):
            with torch.no_grad():
                old = flat[c].item()
                flat[c] = old + eps
                up = loss().item()
                flat[c] = old - eps
                down = loss().item()
                flat[c] = old
            numeric[c] = (up - down) / (2 * eps)
        assert torch.allclose(p.grad.view(-1), numeric, rtol=1e-5, atol=1e-8), (p.grad, numeric)


@pytest.mark.parametrize("gate", ["scalar", "channel"])
def test_gate_gradient_by_hand_single_block(gate):
    """dL/dg = sum_{b,i} <dL/dZ_i, R_i> (scalar) or sum_{b,i} dL/dZ_i * R_i (per channel): Z = g * R + A."""
    model = make_model(residual_gate=gate, layers=1).train()
    set_gates(model)
    block = model.attention_blocks()[0]
    items = make_items()
    kept = {}
    original = block.residual_sum

    def spy(x, mask_bias, last=0):
        z, parts = original(x, mask_bias, last)
        z.retain_grad()
        kept["z"], kept["r"] = z, block.residual_and_queries(x)[0]
        return z, parts

    block.residual_sum = spy
    model.zero_grad()
    (model.encode(items) ** 2).sum().backward()
    g_z, r = kept["z"].grad, kept["r"].detach()
    want = (g_z * r).sum() if gate == "scalar" else (g_z * r).sum((0, 1))
    assert torch.allclose(block.residual_gate.grad, want, atol=1e-10)


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True), dict(name="duorec", query_ln=True, final_ln=True),
                                dict(name="bsarec", bsa_a=0.6)], ids=["post-LN", "pre-LN", "query-LN", "bsarec"])
def test_diagnostics_read_the_trained_gate(kw):
    model = make_model(residual_gate="scalar", **kw)
    set_gates(model)
    items = make_items()
    model.eval()
    with torch.no_grad(), recording(model) as store:
        model.encode(items)
    for block, layer in zip(model.attention_blocks(), store):
        g = float(block.residual_gate.detach())
        assert trained_scale(block) == g and layer[0].alpha == g
    with torch.no_grad(), residual_scale(model, 0.5), recording(model) as store:
        model.encode(items)
    for block, layer in zip(model.attention_blocks(), store):
        assert layer[0].alpha == pytest.approx(0.5 * float(block.residual_gate.detach()))


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True), dict(name="duorec", query_ln=True, final_ln=True),
                                dict(name="bsarec", bsa_a=0.6)], ids=["post-LN", "pre-LN", "query-LN", "bsarec"])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_decomposition_rebuilds_the_block_with_a_channel_gate(kw, alpha):
    model = make_model(residual_gate="channel", **kw).eval()
    set_gates(model)
    items = make_items()
    real = items > 0
    with torch.no_grad(), residual_scale(model, alpha), recording(model) as store:
        model.encode(items)
    for block, layer in zip(model.attention_blocks(), store):
        rec = layer[0]
        assert isinstance(rec.alpha, torch.Tensor) and rec.alpha.shape == (8,)
        assert torch.allclose(rec.alpha, alpha * block.residual_gate.detach(), atol=1e-15)
        s = rec.branch_scale
        targets = {"Attn": s * rec.attn_out, "+Res": s * rec.z}
        if not rec.norm_first:
            targets["+LN"] = rec.sublayer_out - (rec.freq_out if rec.freq_out is not None else 0.0)
        for st, want in targets.items():
            rebuilt = attention_terms(rec, st).sum(2) + bias_terms(rec, st)
            assert (rebuilt - want)[real].abs().max().item() < 1e-10, st
        # the fast ratios equal the ratios of the materialised terms
        fast_ratios = {"norm_of_sums": norm_of_sums(rec, items), "sum_of_norms": sum_of_norms(rec, items)}
        for definition, fast in fast_ratios.items():
            for st in stages_of(rec):
                g = attention_terms(rec, st)  # (B, L, L, d)
                slow = torch.zeros_like(fast[st])
                for b in range(items.shape[0]):
                    for i in range(items.shape[1]):
                        keys = [j for j in range(i + 1) if items[b, j] > 0 and j != i]
                        if items[b, i] == 0 or not keys:
                            continue
                        own = g[b, i, i].norm()
                        if definition == "norm_of_sums":
                            other = g[b, i, keys].sum(0).norm()
                        else:
                            other = g[b, i, keys].norm(dim=-1).sum()
                        slow[b, i] = other / (other + own)
                assert torch.allclose(fast[st], slow, atol=1e-10), (definition, st)


# ------------------------------------------------------------------------------------------------ readouts


def slow_readout(model, hidden: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    out = hidden.clone()
    B, L, d = hidden.shape
    for b in range(B):
        for c in range(L):
            pos = [j for j in range(c + 1) if items[b, j] > 0]
            if not pos:
                continue
            if model.cfg.readout == "mean":
                out[b, c] = hidden[b, pos[-model.cfg.readout_k:]].mean(0)
            else:
                logits = torch.stack([hidden[b, j] @ model.readout_query / math.sqrt(d) for j in pos])
                w = logits.softmax(0)
                out[b, c] = sum(w[n] * hidden[b, j] for n, j in enumerate(pos))
    return out


@pytest.mark.parametrize("kw", [dict(readout="mean", readout_k=3), dict(readout="mean", readout_k=1),
                                dict(readout="mean", readout_k=20), dict(readout="pool")],
                         ids=["mean3", "mean1", "mean20", "pool"])
def test_readout_equals_slow_reference(kw):
    model = make_model(**kw).eval()
    if model.readout_query is not None:
        with torch.no_grad():
            model.readout_query.normal_(0.0, 1.0)
    items = make_items()
    items[2] = 0  # an empty prefix: keeps its own state
    with torch.no_grad():
        h = model.encode(items)
        got = prediction_states(model, h, items)
        assert torch.allclose(got, slow_readout(model, h, items), atol=1e-12)
        assert torch.allclose(final_states(model, items), got[:, -1])
    if kw.get("readout_k") == 1:
        assert torch.allclose(got[items > 0], h[items > 0])


@pytest.mark.parametrize("kw", [dict(readout="mean", readout_k=3), dict(readout="pool")], ids=["mean3", "pool"])
def test_pooled_prediction_depends_on_the_pooled_positions_only(kw):
    """The gradient of the final prediction with respect to the output states is nonzero exactly at the positions
    the readout pools: the last 3 real ones (mean3), every real one (pool); never padding."""
    model = make_model(**kw).eval()
    if model.readout_query is not None:
        with torch.no_grad():
            model.readout_query.normal_(0.0, 1.0)
    items = make_items()
    hidden = torch.randn(*items.shape, 8, dtype=torch.float64, requires_grad=True)
    prediction_states(model, hidden, items)[:, -1].sum().backward()
    touched = hidden.grad.abs().sum(-1) > 0
    for b in range(items.shape[0]):
        real = [j for j in range(items.shape[1]) if items[b, j] > 0]
        want = set(real[-3:]) if kw["readout"] == "mean" else set(real)
        assert set(torch.nonzero(touched[b]).flatten().tolist()) == want


@pytest.mark.parametrize("objective", ["ce_last", "ce_all"])
def test_objectives_train_the_readout(objective):
    model = make_model(readout="mean", readout_k=2).train()
    items = make_items()
    rng = np.random.default_rng(0)
    if objective == "ce_last":
        targets = torch.from_numpy(rng.integers(1, 31, size=items.shape[0]))
    else:
        targets = torch.from_numpy(rng.integers(1, 31, size=items.shape)) * (items > 0)
    batch = TrainBatch(items, targets)
    with torch.no_grad():
        h = model.encode(items)
        got = get_objective(objective).loss(model, batch, h, LossContext())
        p = slow_readout(model, h, items)
        states = p[:, -1] if objective == "ce_last" else p[targets > 0]
        t = targets if objective == "ce_last" else targets[targets > 0]
        want = torch.nn.functional.cross_entropy(states @ model.item_embeddings()[1:].T, t - 1)
    assert torch.allclose(got, want, atol=1e-12)


def test_duorec_contrast_reads_the_readout():
    model = make_model(name="duorec", readout="mean", readout_k=2, duorec_lambda=1.0).eval()
    items = make_items()
    with torch.no_grad():
        h = model.encode(items)
        z = slow_readout(model, h, items)[:, -1]
        from resdom.models.duorec import info_nce

        want = info_nce(z, z, model.cfg.duorec_tau)
        got = model.auxiliary_loss(TrainBatch(items, torch.ones(items.shape[0], dtype=torch.int64)), h)
    assert torch.allclose(got, want, atol=1e-12)


# ------------------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_remedies_end_to_end(tmp_path, capsys):
    from cli_helpers import invoke

    out = tmp_path / "grid"
    store = tmp_path / "store"
    code = invoke("remedies", "synthetic:demo", "--variants", "base,gate-channel,mean3", "--seeds", "1",
                  "--out", str(out), "--epochs", "1", "--device", "cpu", "-q", "--store", str(store),
                  "--set", "model.hidden=8", "--set", "model.max_len=10", "--set", "model.layers=1",
                  "--set", "model.heads=1", "--set", "train.threads=1")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    md = (out / "summary" / "tables" / "remedies.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| synthetic:demo")]
    assert [r.split("|")[2].strip() for r in rows] == ["sasrec", "sasrec-gate-channel", "sasrec-mean3"]
    assert (out / "summary" / "figures" / "remedies.png").is_file()
    assert (out / "summary" / "tables" / "remedies.csv").is_file()
    cfg = json.loads((store / "synthetic:demo" / "sasrec-mean3" / "seed1" / "config.json").read_text())
    assert cfg["model"]["readout"] == "mean" and cfg["model"]["readout_k"] == 3
    alpha = json.loads((out / "synthetic:demo" / "sasrec-gate-channel" / "seed1" / "diagnostics" / "alpha.json")
                       .read_text())
    assert len(alpha["trained_scale"]) == 1 and len(alpha["trained_scale"][0]) == 8
    header = [c.strip() for c in md.splitlines()[0].split("|")]
    scales = [r.split("|")[header.index("Residual scale")].strip() for r in rows]  # the gates' mean; 1 elsewhere
    assert scales == ["–", f"{sum(alpha['trained_scale'][0]) / 8:.2f}", "–"]
    assert invoke("remedies", "synthetic:demo", "--variants", "base,nope", "--out", str(out)) == 2
    assert "--variants: unknown variant 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("gate", ["scalar", "channel"])
def test_light_records_give_the_same_ratio_with_a_gate(gate):
    """The norm-of-sums ratio from a light record (self terms only) equals the full record's with a learned gate."""
    model = make_model(residual_gate=gate).eval()
    set_gates(model)
    items = make_items()
    with torch.no_grad(), residual_scale(model, 0.7):
        with recording(model) as full:
            model.encode(items)
        with recording(model, weights=False) as light:
            model.encode(items)
    for a, b in zip(full, light):
        assert b[0].attn_weights is None
        ra, rb = norm_of_sums(a[0], items), norm_of_sums(b[0], items)
        for st in ra:
            assert torch.allclose(ra[st], rb[st], atol=1e-10), st


def test_remedy_labels_resolve_on_the_base_protocol():
    from resdom.experiments import model_variant
    from resdom.pipeline.remedies import remedy_grid
    from resdom.training.config import resolve_configs

    spec = remedy_grid("synthetic:demo", "duorec", ["base", "preln", "gate-channel"], [1], "/tmp/unused")
    assert spec.models == ["duorec", "duorec-preln", "duorec-gate-channel"]
    name, values = model_variant("duorec-preln")
    cfg, _ = resolve_configs(name, values, {}, n_items=5, protocol="gts")
    assert cfg.norm_first and not cfg.query_ln and cfg.final_ln  # the paper's DuoRec, pre-LN blocks
    name, values = model_variant("bsarec-pool")
    cfg, _ = resolve_configs(name, values, {}, n_items=5, protocol="gts")
    assert cfg.readout == "pool" and cfg.bsa_a == make_model_config(name="bsarec").bsa_a
