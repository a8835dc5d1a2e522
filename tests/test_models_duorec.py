"""DuoRec (spec §2): InfoNCE against a slow loop, the three views, gradients, the missing-view error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from resdom.errors import ResdomError
from resdom.models import TrainBatch, build_model, make_model_config
from resdom.models.duorec import info_nce


def slow_info_nce(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> float:
    """Loop over the 2N views: -log(exp(s_pos) / sum_{j != i} exp(s_ij)), s = dot / tau, averaged."""
    z = torch.cat([z1, z2]).double()
    n2 = z.shape[0]
    total = 0.0
    for i in range(n2):
        partner = (i + n2 // 2) % n2
        logits = {j: float(z[i] @ z[j]) / tau for j in range(n2) if j != i}
        denom = sum(math.exp(v) for v in logits.values())
        total += -(logits[partner] - math.log(denom))
    return total / n2


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_info_nce_matches_slow_loop(n: int, tau: float) -> None:
    torch.manual_seed(n)
    z1, z2 = torch.randn(n, 4), torch.randn(n, 4)
    assert info_nce(z1, z2, tau).item() == pytest.approx(slow_info_nce(z1, z2, tau), rel=1e-5, abs=1e-6)


def test_info_nce_hand_case() -> None:
    # N = 2 orthonormal pairs: each view's logits over the other three views are [1 (partner), 0, 0].
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    want = -math.log(math.e / (math.e + 2))
    assert info_nce(z1, z1.clone()).item() == pytest.approx(want, rel=1e-6)
    assert info_nce(z1[:1], z1[:1]).item() == pytest.approx(0.0, abs=1e-7)  # no negatives


def tiny(views: str, **kw: object) -> torch.nn.Module:
    torch.manual_seed(0)
    values = dict(name="duorec", n_items=20, max_len=8, hidden=16, heads=2, layers=2, duorec_views=views,
                  duorec_lambda=0.3, duorec_tau=0.7)
    values.update(kw)
    return build_model(make_model_config(**values))


ITEMS = torch.tensor([[0, 0, 3, 4, 5], [1, 2, 3, 4, 5], [0, 0, 0, 9, 8]])
SUP = torch.tensor([[0, 0, 0, 7, 6], [0, 11, 12, 13, 14], [0, 0, 0, 0, 2]])
TARGETS = torch.tensor([6, 6, 3])


def test_unsup_without_dropout_is_lambda_info_nce_of_identical_views() -> None:
    model = tiny("unsup", dropout=0.0, attn_dropout=0.0).train()
    hidden = model.encode(ITEMS)
    z = hidden[:, -1]
    loss = model.auxiliary_loss(TrainBatch(ITEMS, TARGETS), hidden)
    assert loss.item() == pytest.approx(0.3 * slow_info_nce(z.detach(), z.detach(), 0.7), rel=1e-5)


def test_unsup_uses_a_second_dropout_pass() -> None:
    model = tiny("unsup").train()
    hidden = model.encode(ITEMS)
    z = hidden[:, -1].detach()
    loss = model.auxiliary_loss(TrainBatch(ITEMS, TARGETS), hidden).item()
    assert loss != pytest.approx(0.3 * slow_info_nce(z, z, 0.7), rel=1e-4)  # z' differs from z


def test_sup_uses_the_same_target_sequence() -> None:
    model = tiny("sup", dropout=0.0, attn_dropout=0.0).train()
    hidden = model.encode(ITEMS)
    loss = model.auxiliary_loss(TrainBatch(ITEMS, TARGETS, sup_items=SUP), hidden)
    want = 0.3 * slow_info_nce(hidden[:, -1].detach(), model.encode(SUP)[:, -1].detach(), 0.7)
    assert loss.item() == pytest.approx(want, rel=1e-5)
    # the supervised term reads the training pass: a different `hidden` changes it
    other = model.auxiliary_loss(TrainBatch(ITEMS, TARGETS, sup_items=SUP), torch.zeros_like(hidden))
    assert other.item() != pytest.approx(loss.item(), rel=1e-3)


def test_both_contrasts_a_fresh_dropout_pass_with_the_supervised_view() -> None:
    model = tiny("both", dropout=0.0, attn_dropout=0.0).train()
    hidden = model.encode(ITEMS)
    batch = TrainBatch(ITEMS, TARGETS, sup_items=SUP)
    loss = model.auxiliary_loss(batch, hidden)
    want = 0.3 * slow_info_nce(hidden[:, -1].detach(), model.encode(SUP)[:, -1].detach(), 0.7)
    assert loss.item() == pytest.approx(want, rel=1e-5)
    # BSARec's us_x: the training pass itself is not in the term
    assert model.auxiliary_loss(batch, torch.zeros_like(hidden)).item() == pytest.approx(loss.item(), rel=1e-6)


@pytest.mark.parametrize("views", ["unsup", "sup", "both"])
def test_gradients_flow(views: str) -> None:
    model = tiny(views).train()
    batch = TrainBatch(ITEMS, TARGETS, sup_items=SUP)
    loss = model.auxiliary_loss(batch, model.encode(ITEMS))
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert grads["item_emb.weight"] is not None and grads["item_emb.weight"].abs().sum() > 0
    assert grads["blocks.0.attention.query.weight"].abs().sum() > 0
    assert grads["blocks.1.ffn.fc2.weight"].abs().sum() > 0


@pytest.mark.parametrize("views", ["sup", "both"])
def test_supervised_view_without_sup_items_is_a_clear_error(views: str) -> None:
    model = tiny(views)
    with pytest.raises(ResdomError, match=r"duorec_views=.*sup_items"):
        model.auxiliary_loss(TrainBatch(ITEMS, TARGETS), model.encode(ITEMS))


def test_sasrec_has_no_auxiliary_loss_and_duorec_is_sasrec_at_inference() -> None:
    torch.manual_seed(0)
    sas = build_model(make_model_config(name="sasrec", n_items=20, max_len=8, hidden=16))
    torch.manual_seed(0)
    duo = build_model(make_model_config(name="duorec", n_items=20, max_len=8, hidden=16))
    assert sas.auxiliary_loss(TrainBatch(ITEMS, TARGETS), sas.encode(ITEMS)) is None
    sas.eval()
    duo.eval()
    assert torch.allclose(sas.encode(ITEMS), duo.encode(ITEMS))


@pytest.mark.parametrize("model", ["duorec", "sasrec"])
def test_training_passes_in_length_groups_give_the_same_states_and_gradients(model: str) -> None:
    """``encode_groups`` (set by the trainer for DuoRec): rows encoded in groups of similar length, each cut to
    its own longest row, give the ungrouped states at every real position and the same loss gradients."""
    from resdom.training.objectives import LossContext, get_objective
    from resdom.training.trainer import TrainStep

    torch.manual_seed(0)
    cfg = make_model_config(name=model, n_items=30, max_len=12, hidden=16, layers=2, heads=2, dropout=0.0,
                            attn_dropout=0.0)
    net = build_model(cfg).double().train()
    rng = np.random.default_rng(0)
    lengths = [1, 2, 3, 5, 8, 12, 4, 9, 2, 7]
    items = torch.zeros(len(lengths), 12, dtype=torch.long)
    for r, n in enumerate(lengths):
        items[r, 12 - n:] = torch.from_numpy(rng.integers(1, 31, size=n))
    targets = torch.where(items > 0, torch.from_numpy(rng.integers(1, 31, size=items.shape)), 0)
    real = items > 0
    step = TrainStep(net, get_objective("ce_all"), LossContext())
    grads = {}
    for groups in (1, 3):
        net.encode_groups = groups
        h = net.encode(items)
        if groups == 1:
            whole = h
        else:
            assert torch.allclose(h[real], whole[real], atol=1e-12)
        net.zero_grad()
        step(items, targets, None, None).backward()
        grads[groups] = [p.grad.clone() for p in net.parameters() if p.grad is not None]
    assert len(grads[1]) == len(grads[3])
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(grads[1], grads[3]))
    net.eval()  # never in evaluation
    net.encode_groups = 3
    assert torch.equal(net.encode(items), net.encode_tokens(items))


# ---------------------------------------------------------------------------------------------------------
# The reference paper's DuoRec block (spec §6), against a literal written-out forward of that block


def paper_duorec_forward(model, right: torch.Tensor, alpha: float) -> torch.Tensor:
    """The paper's DuoRec encoder written out from its parameters, right padding, eval mode::

        X0 = (E[item] * sqrt(d) + P[pos]) * not_padding
        per block: Q = LN_a(X); A = MHA(Q, Q, Q) causal; H = LN_f(alpha * Q + A); X = (H + FFN(H)) * not_padding
        out = LN_last(X)
    MHA is torch's nn.MultiheadAttention with the block's projections copied in."""
    from torch import nn

    d = model.cfg.hidden
    pad = (right == 0).unsqueeze(-1)
    x = model.item_emb(right) * d**0.5 + model.pos_emb(torch.arange(right.shape[1]).expand_as(right))
    x = x.masked_fill(pad, 0.0)
    causal = ~torch.tril(torch.ones(right.shape[1], right.shape[1], dtype=torch.bool))
    for block in model.blocks:
        a = block.attention
        mha = nn.MultiheadAttention(d, model.cfg.heads, batch_first=True).double().eval()
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.cat([a.query.weight, a.key.weight, a.value.weight]))
            mha.in_proj_bias.copy_(torch.cat([a.query.bias, a.key.bias, a.value.bias]))
            mha.out_proj.weight.copy_(a.out.weight)
            mha.out_proj.bias.copy_(a.out.bias)
        q = torch.nn.functional.layer_norm(x, (d,), block.attn_ln.weight, block.attn_ln.bias, block.attn_ln.eps)
        att, _ = mha(q, q, q, attn_mask=causal)
        h = block.ffn_ln(alpha * q + att)
        ffn = block.ffn.fc2(torch.relu(block.ffn.fc1(h)))
        x = (h + ffn).masked_fill(pad, 0.0)
    return model.final_ln(x)


def paper_duorec(**kw: object) -> torch.nn.Module:
    torch.manual_seed(0)
    values = dict(name="duorec", n_items=40, max_len=10, hidden=16, layers=2, heads=2, query_ln=True,
                  query_ln_kv="query", final_ln=True, embedding="dropout", emb_scale=True, ln_eps=1e-8,
                  inner_mult=1, activation="relu", positions="from_start")
    values.update(kw)
    model = build_model(make_model_config(**values)).double().eval()
    with torch.no_grad():  # non-trivial biases and LayerNorm parameters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("alpha", [1.0, 0.4, 0.0])
def test_paper_duorec_block_equals_its_written_out_forward(alpha: float) -> None:
    from resdom.models import residual_scale
    from resdom.models.block import PaperDuoRecBlock

    model = paper_duorec()
    assert all(isinstance(b, PaperDuoRecBlock) for b in model.blocks)
    rng = np.random.default_rng(1)
    seqs = [rng.integers(1, 41, size=int(rng.integers(1, 11))).tolist() for _ in range(7)]
    from tests.test_models_query_ln import both_paddings

    left, right = both_paddings(seqs, 10)
    with torch.no_grad(), residual_scale(model, alpha):
        mine, theirs = model.encode(left), paper_duorec_forward(model, right, alpha)
        scores = mine[:, -1] @ model.item_embeddings().T  # (B, n_items + 1): the readout of the last column
        want = theirs[torch.arange(len(seqs)), torch.tensor([len(s) - 1 for s in seqs])] @ model.item_emb.weight.T
    for b, s in enumerate(seqs):
        n = len(s)
        assert torch.allclose(mine[b, -n:], theirs[b, :n], atol=1e-10), b
    assert torch.allclose(scores, want, atol=1e-9)


def test_paper_duorec_differs_from_the_time_to_split_block_on_the_same_weights() -> None:
    """keys and values from Q, not X: the same weights give other states (the bug this block fixes)."""
    paper = paper_duorec()
    tts = paper_duorec(query_ln_kv="input")
    tts.load_state_dict(paper.state_dict())
    items = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        assert (paper.encode(items) - tts.encode(items)).abs().max() > 1e-3


def test_paper_duorec_drops_out_the_attention_output_in_training_only() -> None:
    from resdom.models.block import PaperDuoRecBlock, QueryLNBlock

    x, mask = torch.randn(3, 6, 16, dtype=torch.float64), torch.zeros(3, 1, 6, 6, dtype=torch.float64)
    for kv, drops in (("query", True), ("input", False)):
        block = paper_duorec(query_ln_kv=kv, dropout=0.5, attn_dropout=0.0).blocks[0]
        assert isinstance(block, PaperDuoRecBlock if drops else QueryLNBlock)
        want = block.eval().attention_sublayer(x, mask)
        torch.manual_seed(1)
        got = block.train().attention_sublayer(x, mask)
        assert torch.allclose(got, want) != drops, kv  # out_dropout acts on A in the paper's block only


def test_paper_duorec_record_names_q_as_residual_and_keys_and_rebuilds_the_sum() -> None:
    from resdom.models import recording, residual_scale

    model = paper_duorec()
    items = torch.tensor([[0, 0, 3, 4, 5, 6], [0, 0, 0, 0, 7, 8]])
    with torch.no_grad(), residual_scale(model, 0.5), recording(model) as store:
        model.encode(items)
    rec, block = store[0][0], model.blocks[0]
    assert torch.equal(rec.x, rec.attn_in)  # the residual Q = LN_a(X) is also what keys and values read
    assert rec.alpha == 0.5 and torch.allclose(rec.z, 0.5 * rec.x + rec.attn_out)
    assert torch.allclose(rec.sublayer_out, block.ffn_ln(rec.z))


def test_gts_duorec_is_the_paper_block_and_duorec_tts_the_earlier_one() -> None:
    from resdom.experiments import model_variant
    from resdom.models.block import PaperDuoRecBlock, QueryLNBlock

    assert DUOREC_GTS_DEFAULTS()["query_ln_kv"] == "query"
    name, values = model_variant("duorec-tts")
    assert name == "duorec" and values["query_ln_kv"] == "input"
    paper = build_model(make_model_config(name="duorec", n_items=5, **{**DUOREC_GTS_DEFAULTS(), "max_len": 8}))
    earlier = build_model(make_model_config(name="duorec", n_items=5,
                                            **{**DUOREC_GTS_DEFAULTS(), **values, "max_len": 8}))
    assert type(paper.blocks[0]) is PaperDuoRecBlock and type(earlier.blocks[0]) is QueryLNBlock


def DUOREC_GTS_DEFAULTS() -> dict:
    from resdom.experiments import model_defaults

    return model_defaults("duorec", "gts")[0]


@pytest.mark.parametrize(("n", "limit"), [(1, 1), (5, 12), (7, 30), (6, 1)])
def test_info_nce_of_a_large_batch_is_made_a_block_at_a_time(n: int, limit: int, monkeypatch) -> None:
    """The contrastive term made the (2N, 2N) similarities of the whole batch at once (a batch of 50,000: 40 GB,
    and as much again for its softmax and gradient); past NCE_BLOCK_FLOATS it is made a block of rows at a time,
    the same loss and gradients (here with a bound of a few floats, blocks of 1 or 2 rows)."""
    import resdom.models.duorec as duorec

    g = torch.Generator().manual_seed(n)
    z1 = torch.randn(n, 4, generator=g, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(n, 4, generator=g, dtype=torch.float64, requires_grad=True)
    want = info_nce(z1, z2, 0.7)
    want_grads = torch.autograd.grad(want * 2.0, (z1, z2))
    monkeypatch.setattr(duorec, "NCE_BLOCK_FLOATS", limit)
    got = info_nce(z1, z2, 0.7)
    torch.testing.assert_close(got, want)
    for a, b in zip(torch.autograd.grad(got * 2.0, (z1, z2)), want_grads):
        torch.testing.assert_close(a, b)
    assert got.item() == pytest.approx(slow_info_nce(z1.detach(), z2.detach(), 0.7), rel=1e-9, abs=1e-12)
    assert torch.autograd.gradcheck(lambda a, b: info_nce(a, b, 0.7), (z1, z2))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # float32 inside, whatever the autocast dtype
        low = info_nce(z1.float(), z2.float(), 0.7)
    assert low.dtype == torch.float32 and low.item() == pytest.approx(want.item(), rel=1e-5)
