"""SASRec / the attention block (spec §2): shapes, padding invariance, causality, residual scale, records."""

from __future__ import annotations

import pytest
import torch

from resdom.models import build_model, make_model_config, recording, residual_scale
from resdom.models.interface import Diagnosable


def tiny(name: str = "sasrec", **kw: object) -> torch.nn.Module:
    torch.manual_seed(0)
    values = dict(name=name, n_items=20, max_len=8, hidden=16, heads=2, layers=2)
    values.update(kw)
    return build_model(make_model_config(**values))


ITEMS = torch.tensor([[0, 0, 0, 3, 4, 5], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 7]])


@pytest.mark.parametrize("name", ["sasrec", "duorec", "bsarec"])
def test_forward_shapes(name: str) -> None:
    model = tiny(name)
    assert isinstance(model, Diagnosable)
    h = model.encode(ITEMS)
    assert h.shape == (3, 6, 16)
    assert model.item_embeddings().shape == (21, 16)
    assert (h @ model.item_embeddings().T).shape == (3, 6, 21)
    assert len(model.attention_blocks()) == 2
    assert torch.isfinite(h).all()


def test_longer_than_max_len_is_cut_to_the_window() -> None:
    model = tiny().eval()
    long = torch.arange(1, 13)[None]  # 12 items, max_len 8
    assert torch.allclose(model.encode(long), model.encode(long[:, -8:]))


@pytest.mark.parametrize("name", ["sasrec", "duorec"])
@pytest.mark.parametrize("positions", ["from_end", "from_start"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_left_padding_invariance(name: str, positions: str, norm_first: bool) -> None:
    model = tiny(name, positions=positions, norm_first=norm_first).eval()
    seq = torch.tensor([[3, 9, 4, 12]])
    for width in (5, 6, 8):
        padded = torch.nn.functional.pad(seq, (width - 4, 0))
        out = model.encode(padded)[:, -4:]
        assert torch.allclose(out, model.encode(seq), atol=1e-5), width
    # and alone vs in a batch trimmed to a longer neighbour
    batch = torch.tensor([[0, 0, 0, 0, 3, 9, 4, 12], [1, 2, 3, 4, 5, 6, 7, 8]])
    assert torch.allclose(model.encode(batch)[0, -4:], model.encode(seq)[0], atol=1e-5)


def test_causal_sasrec() -> None:
    model = tiny().eval()
    a = torch.tensor([[1, 2, 3, 4, 5, 6]])
    b = a.clone()
    b[0, 3] = 17  # change the item at column 3
    ha, hb = model.encode(a), model.encode(b)
    assert torch.allclose(ha[:, :3], hb[:, :3], atol=1e-6)
    assert not torch.allclose(ha[:, 3:], hb[:, 3:], atol=1e-4)


def test_pre_ln_and_post_ln_both_run_and_differ() -> None:
    post, pre = tiny(norm_first=False).eval(), tiny(norm_first=True).eval()
    hp, hq = post.encode(ITEMS), pre.encode(ITEMS)
    assert torch.isfinite(hp).all() and torch.isfinite(hq).all()
    assert not torch.allclose(hp, hq, atol=1e-3)
    # post-LN outputs are LayerNorm outputs: mean ~0 over d (LN weight 1, bias 0 at init)
    assert hp.mean(-1).abs().max() < 1e-5
    assert hq.mean(-1).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["sasrec", "bsarec"])
def test_residual_scale_acts_in_eval_mode_only(name: str) -> None:
    model = tiny(name, dropout=0.0, attn_dropout=0.0)
    model.train()
    base = model.encode(ITEMS)
    with residual_scale(model, 0.3):
        assert torch.allclose(model.encode(ITEMS), base)
    model.eval()
    assert torch.allclose(model.encode(ITEMS), base, atol=1e-6)  # no dropout: train == eval at alpha 1
    with residual_scale(model, 0.3):
        scaled = model.encode(ITEMS)
    assert not torch.allclose(scaled, base, atol=1e-3)
    assert all(b.alpha == 1.0 for b in model.attention_blocks())
    with residual_scale(model, 0.3, layers=[1]):
        assert [b.alpha for b in model.attention_blocks()] == [1.0, 0.3]
        one_layer = model.encode(ITEMS)
    assert not torch.allclose(one_layer, scaled, atol=1e-3)
    with pytest.raises(ValueError, match="out of range"):
        with residual_scale(model, 0.5, layers=[2]):
            pass


@pytest.mark.parametrize("alpha, layers, needle", [
    (float("nan"), None, "alpha: residual scales must lie in [0, 1] (got nan)"),
    (7.0, None, "alpha: residual scales must lie in [0, 1] (got 7)"),
    (True, None, "alpha: expected numbers in [0, 1]"),
    ("0.5", None, "alpha: expected numbers in [0, 1]"),
    (0.5, [], "layers: name at least one attention block"),
    (0.5, [True], "layers: a block is named by an integer (got True)"),
    (0.5, [0.0], "layers: a block is named by an integer (got 0.0)"),
])
def test_residual_scale_refuses_what_would_scale_nothing_or_nonsense(alpha, layers, needle) -> None:
    """A scale outside the one rule of residual scales, or layers that name no block, is a ValueError, never a pass
    whose numbers are the unscaled model's (or NaN); nothing is left set."""
    model = tiny("sasrec").eval()
    with pytest.raises(ValueError) as e:
        with residual_scale(model, alpha, layers=layers):
            pass
    assert needle in str(e.value)
    assert all(b.alpha == 1.0 for b in model.attention_blocks())


def test_residual_scale_refuses_a_model_without_attention_blocks_but_at_alpha_one() -> None:
    """GRU4Rec has no residual to scale: alpha 1 is the model as it is, any other alpha a ValueError (before, the
    pass silently gave the unscaled model's numbers)."""
    gru = build_model(make_model_config(name="gru4rec", n_items=20, max_len=8, hidden=8)).eval()
    with torch.no_grad(), residual_scale(gru, 1.0):
        gru.encode(ITEMS[:, -8:])
    with pytest.raises(ValueError, match="alpha 0.3: the model has no attention blocks"):
        with residual_scale(gru, 0.3):
            pass


def layer_norm(z: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    mu = z.mean(-1, keepdim=True)
    var = ((z - mu) ** 2).mean(-1, keepdim=True)
    return w * (z - mu) / torch.sqrt(var + eps) + b


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("alpha", [1.0, 0.7, 0.3, 0.0])
def test_attention_block_record_reconstruction(norm_first: bool, alpha: float) -> None:
    model = tiny(norm_first=norm_first).double().eval()
    with torch.no_grad():  # make biases non-zero so that b_O and b_V matter
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    plain = model.encode(ITEMS)
    with residual_scale(model, alpha), recording(model) as store, torch.no_grad():
        out = model.encode(ITEMS)
    assert [len(s) for s in store] == [1, 1]
    with residual_scale(model, alpha), torch.no_grad():
        assert torch.allclose(out, model.encode(ITEMS), atol=1e-12)  # recording changes nothing
    if alpha == 1.0:
        assert torch.allclose(out, plain, atol=1e-12)
    for layer, (rec,) in enumerate(store):
        block = model.attention_blocks()[layer]
        assert rec.alpha == alpha and rec.norm_first == norm_first
        B, H, L, _ = rec.attn_weights.shape
        assert (B, H, L) == (3, 2, 6) and rec.head_values.shape == (3, 2, 6, 16)
        # A_i = sum_h sum_j a^h_ij f^h(x_j) + b_O
        rebuilt = torch.einsum("bhij,bhjd->bid", rec.attn_weights, rec.head_values) + rec.out_bias
        assert torch.allclose(rebuilt, rec.attn_out, atol=1e-12)
        assert torch.allclose(rec.z, alpha * rec.x + rec.attn_out, atol=1e-12)
        if norm_first:
            assert rec.ln_weight is None and torch.allclose(rec.sublayer_out, rec.z)
            assert torch.allclose(rec.attn_in, block.attn_ln(rec.x))
        else:
            assert torch.allclose(rec.attn_in, rec.x)
            ln = layer_norm(rec.z, rec.ln_weight, rec.ln_bias, rec.ln_eps)
            assert torch.allclose(ln, rec.sublayer_out, atol=1e-10)
        # real queries: no weight on later keys or on padding keys, rows sum to 1 (padding rows are ignored)
        real = ITEMS > 0
        later = torch.ones(L, L, dtype=torch.bool).triu(1)[None, None] & real[:, None, :, None]
        assert rec.attn_weights[later.expand(B, H, L, L)].abs().max() == 0
        w = rec.attn_weights.transpose(1, 2)[real]  # (n_real, H, L)
        assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))
        pad_keys = (~real)[:, None, None, :].expand(B, H, L, L) & real[:, None, :, None]
        assert rec.attn_weights[pad_keys].abs().max() == 0
    # the chain: layer 1's input is layer 0's block output; the model output is layer 1's block output
    b0, b1 = model.attention_blocks()
    with torch.no_grad():
        assert torch.allclose(store[1][0].x, b0.ffn_sublayer(store[0][0].sublayer_out), atol=1e-12)
        assert torch.allclose(out, b1.ffn_sublayer(store[1][0].sublayer_out), atol=1e-12)


@pytest.mark.parametrize("key_padding", [True, False])
def test_mask_biases_against_a_loop(key_padding: bool) -> None:
    """causal_mask_bias: -10000 where key j > query i or (key padding) item j is padding, else 0;
    padding_mask_bias: -10000 where item j is padding."""
    from resdom.models.block import MASK_VALUE, causal_mask_bias, padding_mask_bias

    items = torch.tensor([[0, 0, 3, 1, 2], [4, 5, 0, 6, 7], [0, 0, 0, 0, 0]])
    causal = causal_mask_bias(items, key_padding=key_padding).dense().expand(3, 1, 5, 5)
    padding = padding_mask_bias(items).dense()
    assert causal.shape == padding.shape == (3, 1, 5, 5) and causal.dtype == padding.dtype == torch.float32
    for b in range(3):
        for i in range(5):
            for j in range(5):
                masked = j > i or (key_padding and items[b, j] == 0)
                assert causal[b, 0, i, j] == (MASK_VALUE if masked else 0.0)
                assert padding[b, 0, i, j] == (MASK_VALUE if items[b, j] == 0 else 0.0)


@pytest.mark.parametrize("positions", ["from_end", "from_start", "from_end_pad0"])
@pytest.mark.parametrize("name", ["sasrec", "duorec"])
def test_an_empty_rows_state_does_not_depend_on_the_batch_width(name: str, positions: str) -> None:
    """``ce_last``'s first prefix is padding only; it attends to its padded keys alike, and with ``from_end`` each
    has its own position: its state is the max_len window's at every batch width (it depended on the batch's
    longest row, 0.0074 apart at widths 1 and 5), and the other rows of its batch are as encoded alone."""
    torch.manual_seed(0)
    model = build_model(make_model_config(name=name, n_items=9, max_len=5, hidden=8, layers=1, heads=2,
                                          positions=positions)).double().eval()
    with torch.no_grad():
        full = model.encode(torch.zeros(1, 5, dtype=torch.int64))[0, -1]
        for width in (1, 3, 5):
            batch = torch.zeros(2, width, dtype=torch.int64)
            batch[1, -1] = 4  # a one-item row beside the empty one
            out = model.encode(batch)
            assert torch.allclose(out[0, -1], full, atol=1e-12), (width, float((out[0, -1] - full).abs().max()))
            alone = model.encode(torch.tensor([[0] * (5 - 1) + [4]]))[0, -1]
            assert torch.allclose(out[1, -1], alone, atol=1e-12)
