"""Norm-based decomposition (spec §4): the terms rebuild the block, the fast path equals a slow reference,
hand-checkable cases, aggregation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics.decomposition import (
    attention_terms,
    bias_terms,
    head_ratios,
    norm_of_sums,
    self_terms,
    stages_of,
    sum_of_norms,
)
from resdom.diagnostics.mixing import mixing_ratios
from resdom.experiments import model_labels, model_variant
from resdom.models import build_model, recording, residual_scale
from resdom.models.config import make_model_config
from resdom.models.interface import block_tokens, trained_scale


def make_model(name: str = "sasrec", heads: int = 2, norm_first: bool = False, seed: int = 0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    block = {"norm_first": norm_first} if norm_first else {}  # bsarec has no block choice
    cfg = make_model_config(name=name, n_items=30, max_len=8, hidden=8, layers=2, heads=heads, init_std=0.4,
                            inner_mult=2, **block, **kw)
    model = build_model(cfg).double().eval()
    with torch.no_grad():  # non-trivial biases and LayerNorm parameters, so the bias terms matter
        for name_, p in model.named_parameters():
            if name_.endswith("bias") or "ln" in name_:
                p.add_(0.3 * torch.randn_like(p))
    return model


def make_evalset(n: int = 9, seed: int = 0, max_len: int = 12) -> EvalSet:
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, 31, size=int(rng.integers(1, max_len + 1))).tolist() for _ in range(n)]
    seqs[0] = [5]  # a one-item input
    return EvalSet(Sequences.from_lists(seqs), rng.integers(1, 31, size=n))


def records(model, items: torch.Tensor, alpha: float = 1.0):
    with torch.no_grad(), residual_scale(model, alpha), recording(model) as store:
        model.encode(items)
    return [layer[0] for layer in store]


def batch_items(model, evalset: EvalSet) -> torch.Tensor:
    return torch.from_numpy(evalset.inputs.padded(model.max_len))


# ---------------------------------------------------------------------------------------------------------
# Slow reference: every g_ij built one by one from the module's own weights where possible


def slow_terms(rec, b: int, i: int, items: torch.Tensor) -> dict[str, dict[int, torch.Tensor]]:
    """{stage: {j: g_ij}} for real keys j <= i of row b, by explicit loops over heads."""
    H = rec.attn_weights.shape[1]
    s = rec.branch_scale
    out: dict[str, dict[int, torch.Tensor]] = {st: {} for st in stages_of(rec)}
    for j in range(i + 1):
        if items[b, j] == 0:
            continue
        g = sum(rec.attn_weights[b, h, i, j] * rec.head_values[b, h, j] for h in range(H)) * s
        out["Attn"][j] = g
        res = g + (s * rec.alpha * rec.x[b, i] if i == j else 0.0)
        out["+Res"][j] = res
        if not rec.norm_first:
            zi = rec.z[b, i]
            sd = torch.sqrt(((zi - zi.mean()) ** 2).mean() + rec.ln_eps)
            out["+LN"][j] = rec.ln_weight * (res - res.mean()) / sd
    return out


def slow_ratios(rec, items: torch.Tensor, definition: str) -> dict[str, torch.Tensor]:
    B, L = items.shape
    out = {st: torch.zeros(B, L, dtype=torch.float64) for st in stages_of(rec)}
    for b in range(B):
        for i in range(L):
            if items[b, i] == 0:
                continue
            for st, terms in slow_terms(rec, b, i, items).items():
                own = terms[i]
                others = [g for j, g in terms.items() if j != i]
                if not others:
                    continue  # the first real position: r = 0
                if definition == "norm_of_sums":
                    no, ns = torch.linalg.norm(sum(others)), torch.linalg.norm(own)
                    out[st][b, i] = no / (no + ns) if no + ns > 0 else 0.0
                else:
                    so = sum(torch.linalg.norm(g) for g in others)
                    out[st][b, i] = so / (so + torch.linalg.norm(own)) if so + torch.linalg.norm(own) > 0 else 0.0
    return out


VARIANTS = [
    pytest.param(dict(name="sasrec", heads=1), id="post-LN-1head"),
    pytest.param(dict(name="sasrec", heads=2), id="post-LN-2heads"),
    pytest.param(dict(name="sasrec", heads=4, norm_first=True), id="pre-LN-4heads"),
    pytest.param(dict(name="bsarec", heads=2, bsa_a=0.6, bsa_c=3), id="bsarec"),
    pytest.param(dict(name="duorec", heads=2, query_ln=True, final_ln=True, query_ln_kv="input"), id="query-LN"),
    pytest.param(dict(name="duorec", heads=2, query_ln=True, final_ln=True, query_ln_kv="query"), id="paper-DuoRec"),
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_decomposition_rebuilds_block_output(variant, alpha):
    model = make_model(**variant)
    ev = make_evalset()
    items = batch_items(model, ev)
    real = items > 0
    for rec in records(model, items, alpha):
        assert rec.alpha == alpha
        s = rec.branch_scale
        targets = {"Attn": s * rec.attn_out, "+Res": s * rec.z}
        if not rec.norm_first:
            freq = rec.freq_out if rec.freq_out is not None else 0.0
            targets["+LN"] = rec.sublayer_out - freq
        assert set(targets) == set(stages_of(rec))
        for st, want in targets.items():
            rebuilt = attention_terms(rec, st).sum(2) + bias_terms(rec, st)
            err = (rebuilt - want)[real].abs().max().item()
            assert err < 1e-10, (st, err)
        # the record's z is the real pre-LN sum, and (post-LN) its LayerNorm is the sub-layer output
        assert torch.allclose(rec.z, alpha * rec.x + rec.attn_out, atol=1e-12)


def test_rebuild_uses_the_modules_own_value_path():
    """head_values are f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h: recomputed from the module's parameters."""
    model = make_model(heads=2)
    items = batch_items(model, make_evalset())
    rec = records(model, items)[0]
    att = model.attention_blocks()[0].attention
    v = att.value(rec.attn_in)  # (B, L, d)
    dh = v.shape[-1] // 2
    for h in range(2):
        f = v[..., h * dh:(h + 1) * dh] @ att.out.weight[:, h * dh:(h + 1) * dh].T
        assert torch.allclose(f, rec.head_values[:, h], atol=1e-12)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("definition", ["norm_of_sums", "sum_of_norms"])
def test_fast_path_equals_slow_reference(variant, definition):
    model = make_model(**variant)
    items = batch_items(model, make_evalset(n=6, seed=1))
    assert (items == 0).any(), "the batch must contain padding"
    for alpha in (1.0, 0.3):
        for rec in records(model, items, alpha):
            fast = norm_of_sums(rec, items) if definition == "norm_of_sums" else sum_of_norms(rec, items)
            slow = slow_ratios(rec, items, definition)
            for st in stages_of(rec):
                assert torch.allclose(fast[st], slow[st], atol=1e-10), (st, (fast[st] - slow[st]).abs().max())
                assert fast[st][items == 0].abs().max() == 0


def test_attention_terms_in_chunks_equal_the_whole():
    model = make_model(heads=2)
    items = batch_items(model, make_evalset(n=7, seed=2))
    rec = records(model, items)[1]
    for st in stages_of(rec):
        whole = attention_terms(rec, st)
        parts = torch.cat([attention_terms(rec, st, slice(q, q + 3)) for q in range(0, items.shape[1], 3)], 1)
        assert torch.allclose(whole, parts, atol=1e-12)


def test_one_position_sequences_give_zero():
    model = make_model(heads=2)
    ev = EvalSet(Sequences.from_lists([[3], [7], [12]]), np.array([1, 2, 3]))
    for definition in ("norm_of_sums", "sum_of_norms"):
        res = mixing_ratios(model, ev, definition=definition, per_head=True)
        for row in res.layers:
            assert all(v == 0.0 for v in row["all"].values()) and all(v == 0.0 for v in row["last"].values())
        assert all(v == 0.0 for h in res.per_head for v in h["all"])


def test_alpha_zero_makes_res_equal_attn():
    model = make_model(heads=2)
    items = batch_items(model, make_evalset())
    for rec in records(model, items, alpha=0.0):
        for fn in (norm_of_sums, sum_of_norms):
            r = fn(rec, items)
            assert torch.allclose(r["Attn"], r["+Res"], atol=1e-12)


def test_zero_value_path_gives_zero_everywhere():
    model = make_model(heads=2)
    with torch.no_grad():
        for block in model.attention_blocks():
            block.attention.value.weight.zero_()
            block.attention.value.bias.zero_()
    items = batch_items(model, make_evalset())
    for rec in records(model, items):
        for fn in (norm_of_sums, sum_of_norms):
            for st, r in fn(rec, items).items():
                assert r.abs().max().item() == 0.0, st


def test_single_head_per_head_ratio_equals_attn_stage():
    model = make_model(heads=1)
    items = batch_items(model, make_evalset())
    for rec in records(model, items):
        for definition, fn in (("norm_of_sums", norm_of_sums), ("sum_of_norms", sum_of_norms)):
            assert torch.allclose(head_ratios(rec, items, definition)[:, 0], fn(rec, items)["Attn"], atol=1e-12)


@pytest.mark.parametrize("definition", ["norm_of_sums", "sum_of_norms"])
def test_per_head_matches_slow_reference(definition):
    model = make_model(heads=2)
    items = batch_items(model, make_evalset(n=5, seed=3))
    rec = records(model, items)[0]
    hr = head_ratios(rec, items, definition)
    for b in range(items.shape[0]):
        for i in range(items.shape[1]):
            keys = [j for j in range(i) if items[b, j] > 0]
            if items[b, i] == 0 or not keys:
                assert hr[:, :, i][b].abs().max() == 0
                continue
            for h in range(2):
                terms = [rec.attn_weights[b, h, i, j] * rec.head_values[b, h, j] for j in keys]
                own = (rec.attn_weights[b, h, i, i] * rec.head_values[b, h, i]).norm()
                no = sum(terms).norm() if definition == "norm_of_sums" else sum(t.norm() for t in terms)
                want = no / (no + own)
                assert abs(hr[b, h, i].item() - want.item()) < 1e-10


def test_aggregation_and_batch_size_independence():
    model = make_model(heads=2)
    ev = make_evalset(n=11, seed=4)
    a = mixing_ratios(model, ev, batch_size=3)
    b = mixing_ratios(model, ev, batch_size=100)
    items = batch_items(model, ev)
    real = items > 0
    recs = records(model, items)
    per_layer = [norm_of_sums(r, items) for r in recs]
    for layer in range(2):
        for st in ("Attn", "+Res", "+LN"):
            want_all = per_layer[layer][st][real].mean().item()
            want_last = per_layer[layer][st][:, -1].mean().item()
            assert abs(a.layers[layer]["all"][st] - want_all) < 1e-12
            assert abs(b.layers[layer]["all"][st] - want_all) < 1e-12
            assert abs(a.layers[layer]["last"][st] - want_last) < 1e-12
    for st in ("Attn", "+Res", "+LN"):
        pooled = torch.stack([p[st][real] for p in per_layer]).mean().item()
        assert abs(a.pooled["all"][st] - pooled) < 1e-12
        prof = a.per_position[0]
        # offset 0 is the last column; offset o is column L-1-o, averaged over users with a real item there
        col = items.shape[1] - 1 - 2
        assert abs(prof[st][2] - per_layer[0][st][:, col][real[:, col]].mean().item()) < 1e-12
    d = a.to_dict()
    assert d["stages"] == ["Attn", "+Res", "+LN"] and d["n_users"] == 11 and "per_position" in d


def test_pre_ln_has_no_ln_stage_and_bsarec_reports_frequency_branch():
    pre = mixing_ratios(make_model(norm_first=True), make_evalset())
    assert pre.stages == ["Attn", "+Res"] and pre.frequency_branch is None
    bsa = mixing_ratios(make_model(name="bsarec", bsa_a=0.6), make_evalset())
    fb = bsa.frequency_branch
    assert fb is not None and 0 < fb["pooled"]["all"]["frequency_share"] < 1
    assert len(fb["layers"]) == 2


def test_float32_model_runs_and_stays_in_range():
    torch.manual_seed(0)
    cfg = make_model_config(n_items=30, max_len=8, hidden=8, layers=2, heads=2)
    model = build_model(cfg).eval()
    res = mixing_ratios(model, make_evalset(), definition="sum_of_norms")
    for row in res.layers:
        assert all(0.0 <= v <= 1.0 for v in row["all"].values())


def test_unknown_definition_is_refused():
    with pytest.raises(ValueError, match="definition"):
        mixing_ratios(make_model(), make_evalset(), definition="bogus")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_light_records_give_the_full_records_self_terms_and_ratios(variant, dtype):
    """recording(weights=False) keeps only sum_h a^h_ii f^h(x_i) (fused kernel on CPU): the same self terms and the
    same norm-of-sums ratios as the full record, and no (B, H, L, L) tensor."""
    model = make_model(**variant).to(dtype)
    items = batch_items(model, make_evalset())
    with torch.no_grad(), recording(model) as full_store:
        full_out = model.encode(items)
    with torch.no_grad(), recording(model, weights=False) as light_store:
        light_out = model.encode(items)
    tol = 1e-10 if dtype == torch.float64 else 2e-5  # float32: the fused kernel sums in another order
    real = items > 0  # (padding rows, all of whose keys are masked at -10000, differ in float32: they never count)
    assert torch.allclose(full_out[real], light_out[real], atol=tol)
    for full, light in zip([s[0] for s in full_store], [s[0] for s in light_store]):
        assert light.attn_weights is None and light.head_values is None and light.attn_self is not None
        assert torch.allclose(self_terms(full)[real], self_terms(light)[real], atol=tol)
        a, b = norm_of_sums(full, items), norm_of_sums(light, items)
        for st in a:
            assert torch.allclose(a[st], b[st], atol=tol * 10), st  # padding: 0 in both
    assert all(getattr(b, "record_weights", True) for b in model.attention_blocks())  # restored
    got = mixing_ratios(model, make_evalset()).to_dict()["pooled"]  # the light path, against the slow loop
    slow = {st: [] for st in stages_of(full_store[0][0])}
    for rec in [s[0] for s in full_store]:
        for st, r in slow_ratios(rec, items, "norm_of_sums").items():
            slow[st].append(r[items > 0].mean().item())
    for st, rs in slow.items():
        assert got["all"][st] == pytest.approx(sum(rs) / len(rs), abs=max(tol * 100, 1e-6)), st


def _stored_records_mixing(model, evalset: EvalSet, definition: str, per_head: bool, batch_size: int) -> dict:
    """The previous path of ``mixing_ratios``: every block's record stored during the pass, added after it."""
    from resdom.diagnostics.common import batches, inference
    from resdom.diagnostics.mixing import MixingAccumulator
    from resdom.models.interface import block_tokens, block_width

    acc = MixingAccumulator(len(model.attention_blocks()), block_width(model), definition, per_head)
    light = definition == "norm_of_sums" and not per_head
    with inference(model), recording(model, weights=not light) as store:
        for _, items, _ in batches(model, evalset, batch_size, None, "mixing", False):
            model.encode(items)
            acc.add([layer.pop() for layer in store], block_tokens(model, items))
    return acc.result().to_dict()


STREAM_CASES = [*VARIANTS, pytest.param(dict(name="bert4rec", heads=2), id="bert4rec"),
                pytest.param(dict(name="sasrec", heads=2, key_padding_mask=False), id="full-window")]


@pytest.mark.parametrize("variant", STREAM_CASES)
@pytest.mark.parametrize("definition,per_head", [("norm_of_sums", False), ("norm_of_sums", True),
                                                 ("sum_of_norms", False)])
def test_streamed_records_equal_stored_records_bit_for_bit(variant, definition, per_head):
    """mixing_ratios consumes each record as its block makes it (``RecordStream``): the very numbers of storing the
    batch's records and adding them after the pass, trimmed full-window records included."""
    model = make_model(**variant)
    ev = make_evalset(n=13, seed=5)
    got = mixing_ratios(model, ev, definition, per_head, batch_size=4).to_dict()
    assert got == _stored_records_mixing(model, ev, definition, per_head, batch_size=4)
    assert all(b.recording is None for b in model.attention_blocks())


def test_record_stream_refuses_a_block_recording_twice_in_one_pass():
    from resdom.diagnostics.mixing import MixingAccumulator, RecordStream

    model = make_model()
    items = batch_items(model, make_evalset())
    stream = RecordStream(model, MixingAccumulator(2, model.max_len))
    with torch.no_grad(), recording(model, weights=False, sink=stream) as store:
        stream.start(items)
        model.encode(items)
        with pytest.raises(ValueError, match="more than once"):
            model.encode(items)
    assert store == [[], []]
    stream.start(items)  # a batch whose pass made no records
    with pytest.raises(ValueError, match="one record from each"):
        stream.finish()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("gather_below", [0.0, 1.1])  # every position / the gathered positions with a ratio
def test_norm_of_sums_in_row_chunks_equals_one_chunk_bit_for_bit(variant, gather_below, monkeypatch):
    """norm_of_sums works through the positions in chunks of RATIO_ROWS rows (every step row-wise): the same bits
    as all rows at once, with chunks that do not divide the rows."""
    from resdom.diagnostics import decomposition

    model = make_model(**variant)
    items = batch_items(model, make_evalset(n=13, seed=6))
    monkeypatch.setattr(decomposition, "RATIO_GATHER_BELOW", gather_below)
    for light in (True, False):
        with torch.no_grad(), recording(model, weights=not light) as store:
            model.encode(items)
        for rec in [s[0] for s in store]:
            monkeypatch.setattr(decomposition, "RATIO_ROWS", 10**9)
            whole = norm_of_sums(rec, items)
            monkeypatch.setattr(decomposition, "RATIO_ROWS", 7)
            chunked = norm_of_sums(rec, items)
            assert whole.keys() == chunked.keys()
            assert all(torch.equal(whole[st], chunked[st]) for st in whole)


ATTENTION_LABELS = [label for label in model_labels() if model_variant(label)[0] != "gru4rec"]


@pytest.mark.parametrize("label", ATTENTION_LABELS)
def test_every_labels_records_rebuild_its_blocks_real_output(label):
    """For every model label with attention blocks (remedies, probes, BERT4Rec's [MASK], BSARec's branch): the
    +LN (pre-LN: +Res) terms plus the bias terms, the frequency branch added back, then the block's own FFN
    sub-layer give the output the block really returned (a forward hook, not the record), at every real position
    of a padded batch, at alpha 1 and 0.4; and the record's scale is the trained scale times alpha."""
    name, values = model_variant(label)
    torch.manual_seed(0)
    model = build_model(make_model_config(**{**values, "name": name, "n_items": 30, "max_len": 6, "hidden": 8,
                                             "layers": 2, "heads": 2, "init_std": 0.4})).double().eval()
    with torch.no_grad():  # non-trivial biases, LayerNorms and gates
        for name_, p in model.named_parameters():
            if name_.endswith("bias") or "ln" in name_ or "gate" in name_:
                p.add_(0.3 * torch.randn_like(p))
    items = torch.tensor([[0, 0, 0, 0, 0, 5], [0, 0, 3, 4, 7, 2], [1, 2, 3, 4, 5, 6]])[:, -model.max_len:]
    blocks = list(model.attention_blocks())
    outputs: list[torch.Tensor] = []
    for alpha in (1.0, 0.4):
        outputs.clear()
        hooks = [b.register_forward_hook(lambda _m, _i, out: outputs.append(out)) for b in blocks]
        try:
            with torch.no_grad(), residual_scale(model, alpha), recording(model) as store:
                model.encode(items)
        finally:
            for h in hooks:
                h.remove()
        tokens = block_tokens(model, items)
        for block, out, (rec,) in zip(blocks, outputs, store):
            width = rec.z.shape[1]
            real, out = tokens[:, -width:] > 0, out[:, -width:]
            stage = stages_of(rec)[-1]
            h1 = attention_terms(rec, stage).sum(2) + bias_terms(rec, stage)
            if rec.freq_out is not None:
                h1 = h1 + rec.freq_out
            with torch.no_grad():
                err = (block.ffn_sublayer(h1) - out)[real].abs().max().item()
            assert err < 1e-10, (stage, err)
            want = trained_scale(block) * alpha
            assert torch.allclose(torch.as_tensor(rec.alpha), torch.as_tensor(want), atol=1e-12)
