"""Each model's training recipe against its reference code: the initial parameters' statistics, and a training-mode
forward and backward equal to a written-out reference forward with the same dropout masks (recorded once in
resdom's pass, replayed in the reference's, in the order the reference draws them).

`sasrec` under GTS is the reference paper's SASRecAnalyze (time-to-split ``src/models.py`` as published with the
paper, built on pmixer's SASRec): ``LN(Dropout(E * sqrt(d) + P))``, post-LN blocks of ``nn.MultiheadAttention``
(dropout on the attention weights; its stacked (3d, d) query/key/value matrix Xavier-uniform, zero biases, its output
projection an ``nn.Linear`` and so N(0, 0.02)), ``out_dropout`` on the attention output, a 1x1-convolution FFN
``Dropout(conv2(ReLU(Dropout(conv1(H)))))`` with its own residual and LayerNorm, no final LayerNorm.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import resdom.models.block as block_module
from resdom.experiments import RECIPE_VERSIONS, model_defaults, recipe_label
from resdom.models import build_model
from resdom.models.config import ModelConfig, make_model_config

N_ITEMS, D, HEADS, LAYERS, L = 3000, 64, 2, 2, 8


def paper_sasrec_config(**over: object) -> ModelConfig:
    values, _ = model_defaults("sasrec", "gts")
    return make_model_config(**{**values, "name": "sasrec", "n_items": N_ITEMS, "hidden": D, "heads": HEADS,
                          "layers": LAYERS, "max_len": L, **over})


class PaperSASRecInit(nn.Module):
    """The parameters of SASRecAnalyze as its constructor makes them (its modules and ``_init_weights``)."""

    def __init__(self) -> None:
        super().__init__()
        self.item_emb = nn.Embedding(N_ITEMS + 1, D, padding_idx=0)
        self.pos_emb = nn.Embedding(L, D)
        self.emb_layernorm = nn.LayerNorm(D, eps=1e-8)
        self.mha = nn.ModuleList(nn.MultiheadAttention(D, HEADS, 0.5) for _ in range(LAYERS))
        self.attn_post_lns = nn.ModuleList(nn.LayerNorm(D, eps=1e-8) for _ in range(LAYERS))
        self.conv1 = nn.ModuleList(nn.Conv1d(D, D, kernel_size=1) for _ in range(LAYERS))
        self.conv2 = nn.ModuleList(nn.Conv1d(D, D, kernel_size=1) for _ in range(LAYERS))
        self.ffn_post_lns = nn.ModuleList(nn.LayerNorm(D, eps=1e-8) for _ in range(LAYERS))
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)


def paired_parameters(model: nn.Module, ref: PaperSASRecInit) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(role, resdom tensor, reference tensor) for every parameter of both models."""
    pairs = [("item embeddings", model.item_emb.weight[1:], ref.item_emb.weight[1:]),
             ("padding row", model.item_emb.weight[0], ref.item_emb.weight[0]),
             ("positions", model.pos_emb.weight, ref.pos_emb.weight),
             ("input LN weight", model.emb_ln.weight, ref.emb_layernorm.weight),
             ("input LN bias", model.emb_ln.bias, ref.emb_layernorm.bias)]
    for i, blk in enumerate(model.blocks):
        a, mha = blk.attention, ref.mha[i]
        for j, lin in enumerate((a.query, a.key, a.value)):
            pairs.append((f"block {i} in_proj {j} weight", lin.weight, mha.in_proj_weight[j * D:(j + 1) * D]))
            pairs.append((f"block {i} in_proj {j} bias", lin.bias, mha.in_proj_bias[j * D:(j + 1) * D]))
        pairs += [(f"block {i} out_proj weight", a.out.weight, mha.out_proj.weight),
                  (f"block {i} out_proj bias", a.out.bias, mha.out_proj.bias),
                  (f"block {i} attention LN weight", blk.attn_ln.weight, ref.attn_post_lns[i].weight),
                  (f"block {i} attention LN bias", blk.attn_ln.bias, ref.attn_post_lns[i].bias),
                  (f"block {i} FFN 1 weight", blk.ffn.fc1.weight, ref.conv1[i].weight[..., 0]),
                  (f"block {i} FFN 1 bias", blk.ffn.fc1.bias, ref.conv1[i].bias),
                  (f"block {i} FFN 2 weight", blk.ffn.fc2.weight, ref.conv2[i].weight[..., 0]),
                  (f"block {i} FFN 2 bias", blk.ffn.fc2.bias, ref.conv2[i].bias),
                  (f"block {i} FFN LN weight", blk.ffn_ln.weight, ref.ffn_post_lns[i].weight),
                  (f"block {i} FFN LN bias", blk.ffn_ln.bias, ref.ffn_post_lns[i].bias)]
    return pairs


def excess_kurtosis(t: torch.Tensor) -> float:
    z = (t.flatten().double() - t.double().mean()) / t.double().std()
    return float((z**4).mean()) - 3.0


def test_sasrec_initialisation_matches_the_papers_statistics() -> None:
    torch.manual_seed(0)
    model = build_model(paper_sasrec_config())
    torch.manual_seed(1)
    ref = PaperSASRecInit()
    pairs = paired_parameters(model, ref)
    assert {id(p) for _, p, _ in pairs if p.dim() and p.requires_grad} | {id(model.item_emb.weight)} >= {
        id(p) for p in model.parameters()}, "a parameter of resdom's sasrec has no counterpart in the reference"
    assert model.final_ln is None  # the paper's last public code comments its final LayerNorm out
    for role, mine, theirs in pairs:
        mine, theirs = mine.detach(), theirs.detach()
        assert mine.shape == theirs.shape, role
        if float(theirs.std()) == 0.0:  # constants (biases 0, LayerNorm 1 / 0, the padding row): exactly equal
            assert torch.equal(mine, theirs), role
            continue
        # random draws: the same mean (0), spread and family. Two stds of n draws differ by about std / sqrt(n)
        # (1.6% at the 4,096 values of a projection, 4.4% at the 512 positions): 5 of those is the tolerance;
        # the excess kurtosis tells Xavier's uniform (-1.2) from a normal (0)
        n = mine.numel()
        assert abs(float(mine.mean())) < 5 * float(theirs.std()) / math.sqrt(n), role
        assert float(mine.std()) == pytest.approx(float(theirs.std()), rel=5 / math.sqrt(n)), role
        assert abs(excess_kurtosis(mine) - excess_kurtosis(theirs)) < 0.6, role
    xavier = math.sqrt(6.0 / (4 * D)) / math.sqrt(3.0)  # std of U(-b, b), b = sqrt(6 / (d + 3d))
    assert float(model.blocks[0].attention.query.weight.detach().std()) == pytest.approx(xavier, rel=0.05)


class MaskTape:
    """Records every dropout mask resdom draws (``resdom.models.block.dropout``), in order, and replays them."""

    def __init__(self) -> None:
        self.masks: list[tuple[float, torch.Tensor]] = []
        self.at = 0

    def record(self, x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        if not training or p == 0.0:
            return x
        keep = (torch.rand_like(x) >= p).to(x.dtype)
        self.masks.append((p, keep))
        return x * keep / (1.0 - p)

    def replay(self, x: torch.Tensor, p: float) -> torch.Tensor:
        assert self.at < len(self.masks), "the reference draws more dropout masks than resdom"
        p_drawn, keep = self.masks[self.at]
        self.at += 1
        assert (p_drawn, keep.shape) == (p, x.shape), "a dropout site differs in place or rate"
        return x * keep / (1.0 - p)


def written_out_attention(a: nn.Module, q_in: torch.Tensor, kv_in: torch.Tensor, tape: MaskTape, p: float,
                          masked: float = -math.inf) -> torch.Tensor:
    """Multi-head attention written out on resdom's projections ``a`` (queries from ``q_in``, keys and values from
    ``kv_in``, (B, T, d) each, causal): the weights' dropout mask replayed from ``tape``; the output projection's
    output, before any dropout on it. ``masked``: the score of a future key (BSARec's code adds -10000)."""
    B, T, _ = q_in.shape
    q, k, v = (nn.functional.linear(t, lin.weight, lin.bias).view(B, T, HEADS, D // HEADS).transpose(1, 2)
               for t, lin in ((q_in, a.query), (kv_in, a.key), (kv_in, a.value)))
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    weights = torch.softmax(((q @ k.transpose(-1, -2)) / math.sqrt(D // HEADS)).masked_fill(causal, masked), -1)
    ctx = (tape.replay(weights, p) @ v).transpose(1, 2).reshape(B, T, D)
    return nn.functional.linear(ctx, a.out.weight, a.out.bias)


def assert_same_gradients(model: nn.Module, mine: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float,
                          every_parameter_used: bool = False) -> None:
    """The gradients of one random linear read-out of ``mine`` and ``ref`` agree for every trainable parameter (a
    parameter a pass does not reach counts as a zero gradient; ``every_parameter_used``: resdom's pass reaches
    every one)."""
    weights = torch.randn_like(mine)
    params = [p for p in model.parameters() if p.requires_grad]
    g_mine = torch.autograd.grad((mine * weights).sum(), params, allow_unused=not every_parameter_used)
    g_ref = torch.autograd.grad((ref * weights).sum(), params, allow_unused=True)
    for p, a, b in zip(params, g_mine, g_ref):
        zero = torch.zeros_like(p)
        torch.testing.assert_close(zero if a is None else a, zero if b is None else b, rtol=rtol, atol=atol)


def paper_sasrec_forward(model: nn.Module, items: torch.Tensor, tape: MaskTape, p: float) -> torch.Tensor:
    """SASRecAnalyze's training forward written out on resdom's parameter tensors (no padding in ``items``):
    its masks taken from ``tape`` in the order the reference draws them."""
    T = items.shape[1]
    x = model.item_emb.weight[items] * math.sqrt(D) + model.pos_emb.weight[torch.arange(T)]
    x = tape.replay(x, p)  # emb_dropout
    x = nn.functional.layer_norm(x, (D,), model.emb_ln.weight, model.emb_ln.bias, 1e-8)
    for blk in model.blocks:
        attn = written_out_attention(blk.attention, x, x, tape, p)  # nn.MultiheadAttention: dropout on the weights
        attn = tape.replay(attn, p)  # AnalyzableMHA.out_dropout
        x = nn.functional.layer_norm(x + attn, (D,), blk.attn_ln.weight, blk.attn_ln.bias, 1e-8)
        y = nn.functional.linear(x, blk.ffn.fc1.weight, blk.ffn.fc1.bias)
        y = torch.relu(tape.replay(y, p))  # conv1 -> dropout1 -> ReLU
        y = tape.replay(nn.functional.linear(y, blk.ffn.fc2.weight, blk.ffn.fc2.bias), p)  # conv2 -> dropout2
        x = nn.functional.layer_norm(x + y, (D,), blk.ffn_ln.weight, blk.ffn_ln.bias, 1e-8)
    return x


def test_sasrec_training_pass_equals_the_papers_with_the_same_dropout_masks(monkeypatch) -> None:
    torch.manual_seed(0)
    cfg = paper_sasrec_config(n_items=50)
    assert cfg.dropout == cfg.attn_dropout == 0.5
    model = build_model(cfg).train()
    items = torch.randint(1, 51, (4, L))
    tape = MaskTape()
    monkeypatch.setattr(block_module, "dropout", tape.record)
    mine = model.encode(items)
    ref = paper_sasrec_forward(model, items, tape, cfg.dropout)
    assert tape.at == len(tape.masks) == 1 + 4 * LAYERS, "resdom draws a dropout mask the reference does not"
    torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-5)
    assert_same_gradients(model, mine, ref, rtol=1e-4, atol=1e-6, every_parameter_used=True)


def test_the_bsarec_code_base_sasrec_is_unchanged() -> None:
    """Under LOO `sasrec` is BSARec's code base: N(0, 0.02) projections, no dropout inside the FFN."""
    values, _ = model_defaults("sasrec", "loo")
    cfg = make_model_config(**{**values, "n_items": N_ITEMS, "max_len": L})
    assert (cfg.qkv_init, cfg.ffn_dropout) == ("normal", False)
    torch.manual_seed(0)
    model = build_model(cfg)
    assert float(model.blocks[0].attention.query.weight.detach().std()) == pytest.approx(0.02, rel=0.05)
    assert model.blocks[0].ffn.inner_dropout.p == 0.0


def test_every_model_has_a_recipe_version_recorded_in_its_runs(tmp_path) -> None:
    import resdom

    assert recipe_label("sasrec") == f"sasrec/{RECIPE_VERSIONS['sasrec']}" == "sasrec/3"
    # a configuration no later version changed records the version it trains as (the report reads them as one)
    gts, _ = model_defaults("sasrec", "gts")
    loo, _ = model_defaults("sasrec", "loo")
    assert recipe_label("sasrec", {**gts, "query_ln": False}) == "sasrec/2"
    assert recipe_label("sasrec", {**gts, "norm_first": True}) == "sasrec/2"  # sasrec-preln: retrained
    assert recipe_label("sasrec", {**gts, "query_ln": True}) == "sasrec/1"  # sasrec-tts: unchanged
    assert recipe_label("sasrec", loo) == "sasrec/1"  # BSARec's code base: N(0, 0.02), no FFN dropout
    assert recipe_label("duorec", {}) == "duorec/1"
    # ce_last's empty first prefix on a trimmed from_end model (sasrec 3, duorec 2); not with a query token, a
    # full window (no key-padding mask) or positions from the start
    last = {"objective": "ce_last", "positions": "from_end", "key_padding_mask": True, "readout": "last"}
    assert recipe_label("sasrec", last) == "sasrec/3" and recipe_label("duorec", last) == "duorec/2"
    assert recipe_label("sasrec", {**gts, **last, "query_ln": False}) == "sasrec/3"
    for other in ({"readout": "query"}, {"key_padding_mask": False}, {"positions": "from_start"},
                  {"objective": "ce_all"}):
        assert recipe_label("sasrec", {**last, **other}) == "sasrec/1" and recipe_label("duorec", {**last, **other}) \
            == "duorec/1"
    split = resdom.prepare_split("synthetic:n_users=60,n_items=30", protocol="gts")
    fitted = resdom.fit(split, "sasrec", epochs=1, out=tmp_path / "run", hidden=16, max_len=8, progress=False)
    import json

    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["versions"]["recipe"] == "sasrec/2"
    assert config["model"]["qkv_init"] == "xavier" and config["model"]["ffn_dropout"] is True
    assert fitted is not None
    resdom.fit(split, "duorec", epochs=1, out=tmp_path / "last", hidden=16, max_len=8, progress=False,
               objective="ce_last", positions="from_end", duorec_views="both")
    config = json.loads((tmp_path / "last" / "config.json").read_text())
    assert config["versions"]["recipe"] == "duorec/2" and config["train"]["objective"] == "ce_last"


def query_ln_forward(model: nn.Module, items: torch.Tensor, tape: MaskTape, p: float, kv_from_q: bool) -> torch.Tensor:
    """The query-LN SASRec of time-to-split (``kv_from_q=False``: ``MHA(Q, X, X)``, no dropout on its output) and
    the paper's DuoRec (``True``: ``AnalyzableMHA(Q, Q, Q)`` with ``out_dropout``), written out on resdom's
    parameters: ``Dropout(E * sqrt(d) + P)``; per block ``Q = LN_a(X)``, ``H = LN_f(Q + [Dropout](A))``,
    ``X' = H + Dropout(conv2(ReLU(Dropout(conv1(H)))))``; a final LayerNorm."""
    T = items.shape[1]
    x = tape.replay(model.item_emb.weight[items] * math.sqrt(D) + model.pos_emb.weight[torch.arange(T)], p)
    for blk in model.blocks:
        q_in = nn.functional.layer_norm(x, (D,), blk.attn_ln.weight, blk.attn_ln.bias, 1e-8)
        attn = written_out_attention(blk.attention, q_in, q_in if kv_from_q else x, tape, p)
        attn = tape.replay(attn, p) if kv_from_q else attn
        h = nn.functional.layer_norm(q_in + attn, (D,), blk.ffn_ln.weight, blk.ffn_ln.bias, 1e-8)
        y = torch.relu(tape.replay(nn.functional.linear(h, blk.ffn.fc1.weight, blk.ffn.fc1.bias), p))
        x = h + tape.replay(nn.functional.linear(y, blk.ffn.fc2.weight, blk.ffn.fc2.bias), p)
    return nn.functional.layer_norm(x, (D,), model.final_ln.weight, model.final_ln.bias, 1e-8)


@pytest.mark.parametrize(("label", "protocol", "kv_from_q", "sites"), [
    ("sasrec-tts", "gts", False, 3),  # time-to-split's SASRec: weights, FFN inner, FFN output
    ("duorec", "gts", True, 4),  # the paper's DuoRec: and out_dropout on the attention output
])
def test_query_ln_models_train_as_their_reference(monkeypatch, label: str, protocol: str, kv_from_q: bool,
                                                  sites: int) -> None:
    from resdom.experiments import model_variant

    model_name, variant = model_variant(label)
    values = {**model_defaults(model_name, protocol)[0], **variant}
    cfg = make_model_config(**{**values, "name": model_name, "n_items": 50, "hidden": D, "heads": HEADS,
                               "layers": LAYERS, "max_len": L, "dropout": 0.3, "attn_dropout": 0.3})
    torch.manual_seed(0)
    model = build_model(cfg).train()
    xavier = math.sqrt(6.0 / (4 * D)) / math.sqrt(3.0)
    for blk in model.blocks:  # nn.MultiheadAttention's initialisation: Xavier in_proj, N(0, 0.02) out_proj
        assert float(blk.attention.key.weight.detach().std()) == pytest.approx(xavier, rel=0.06)
        assert float(blk.attention.out.weight.detach().std()) == pytest.approx(0.02, rel=0.06)
        assert float(blk.ffn.fc1.weight.detach().std()) == pytest.approx(0.02, rel=0.06)
    items = torch.randint(1, 51, (4, L))
    tape = MaskTape()
    monkeypatch.setattr(block_module, "dropout", tape.record)
    mine = model.encode(items)
    ref = query_ln_forward(model, items, tape, 0.3, kv_from_q)
    assert tape.at == len(tape.masks) == 1 + sites * LAYERS
    torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-5)
    assert_same_gradients(model, mine, ref, rtol=1e-4, atol=1e-6)


def bsarec_forward(model: nn.Module, items: torch.Tensor, tape: MaskTape, p: float, a: float, c: int) -> torch.Tensor:
    """BSARec's ``BSARecModel`` (its ``_modules.py``) written out on resdom's parameters, no padding in ``items``:
    ``Dropout(LN(E + P))``; per block ``DSP = LN(X + Dropout(LPF(X) + beta (X - LPF(X))))``, ``GSP = LN(X +
    Dropout(MHA(X)))`` with dropout on the attention probabilities, ``H = a DSP + (1 - a) GSP``, ``X' = LN(H +
    Dropout(W_2 GELU(W_1 H)))``; every LayerNorm eps 1e-12; masks in the order its forward draws them."""
    T = items.shape[1]
    eps = model.emb_ln.eps
    x = model.item_emb.weight[items] + model.pos_emb.weight[torch.arange(T) + (model.cfg.max_len - T)]
    x = tape.replay(nn.functional.layer_norm(x, (D,), model.emb_ln.weight, model.emb_ln.bias, eps), p)
    for blk in model.blocks:
        f = blk.filter
        spec = torch.fft.rfft(x, dim=1, norm="ortho")
        spec[:, c // 2 + 1:, :] = 0
        low = torch.fft.irfft(spec, n=T, dim=1, norm="ortho")
        dsp = nn.functional.layer_norm(x + tape.replay(low + f.sqrt_beta**2 * (x - low), p), (D,), f.ln.weight,
                                       f.ln.bias, eps)
        attn = tape.replay(written_out_attention(blk.attention, x, x, tape, p, masked=-1e4), p)
        gsp = nn.functional.layer_norm(x + attn, (D,), blk.attn_ln.weight, blk.attn_ln.bias, eps)
        h = a * dsp + (1 - a) * gsp
        y = nn.functional.linear(nn.functional.gelu(nn.functional.linear(h, blk.ffn.fc1.weight, blk.ffn.fc1.bias)),
                                 blk.ffn.fc2.weight, blk.ffn.fc2.bias)
        x = nn.functional.layer_norm(h + tape.replay(y, p), (D,), blk.ffn_ln.weight, blk.ffn_ln.bias, eps)
    return x


def test_bsarec_initialises_and_trains_as_its_authors_code(monkeypatch) -> None:
    values, _ = model_defaults("bsarec", "loo", "beauty")
    cfg = make_model_config(**{**values, "name": "bsarec", "n_items": N_ITEMS, "hidden": D, "heads": HEADS,
                         "layers": LAYERS, "max_len": L, "dropout": 0.3, "attn_dropout": 0.3})
    torch.manual_seed(0)
    model = build_model(cfg).train()
    # its init_weights: Linear and Embedding N(0, 0.02) (the padding row too), biases 0, LayerNorm 1 / 0;
    # sqrt_beta ~ N(0, 1), one value for every layer (the encoder deep-copies one block)
    assert float(model.item_emb.weight[0].detach().abs().sum()) > 0
    for blk in model.blocks:
        for lin in (blk.attention.query, blk.attention.key, blk.attention.value, blk.attention.out, blk.ffn.fc1):
            assert float(lin.weight.detach().std()) == pytest.approx(0.02, rel=0.06)
            assert not lin.bias.detach().any()
        assert torch.equal(blk.filter.sqrt_beta, model.blocks[0].filter.sqrt_beta)
        assert blk.ffn.inner_dropout.p == 0.0 and blk.ffn.fc1.out_features == 4 * D
    assert 0.6 < float(model.blocks[0].filter.sqrt_beta.detach().std()) < 1.4
    small = build_model(cfg.model_copy(update={"n_items": 50})).train()
    items = torch.randint(1, 51, (4, L))
    tape = MaskTape()
    monkeypatch.setattr(block_module, "dropout", tape.record)
    mine = small.encode(items)
    ref = bsarec_forward(small, items, tape, 0.3, cfg.bsa_a, cfg.bsa_c)
    assert tape.at == len(tape.masks) == 1 + 4 * LAYERS
    torch.testing.assert_close(mine, ref, rtol=1e-4, atol=1e-5)
    assert_same_gradients(small, mine, ref, rtol=1e-3, atol=1e-5)
