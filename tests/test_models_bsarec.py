"""BSARec (spec §2): the low-pass filter, the layer against a slow numpy reference, records, the window."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from resdom.models import ModelConfig, build_model, make_model_config, recording, residual_scale
from resdom.models.block import causal_mask_bias
from resdom.models.bsarec import BSARecBlock, frequency_residual_scale, low_pass, low_pass_fft, low_pass_matrix


def cfg(**kw: object) -> ModelConfig:
    values = dict(name="bsarec", n_items=20, max_len=8, hidden=16, heads=2, layers=2, bsa_a=0.7, bsa_c=3)
    values.update(kw)
    return make_model_config(**values)


def dft_low_pass(x: np.ndarray, keep: int) -> np.ndarray:
    """x (L, d) -> (L, d): explicit-loop DFT (orthonormal), keep bins 0..keep-1 of the half spectrum, invert."""
    L = x.shape[0]
    out = np.zeros_like(x)
    for k in range(min(keep, L // 2 + 1)):
        coef = sum(x[s] * np.exp(-2j * math.pi * k * s / L) for s in range(L)) / math.sqrt(L)  # (d,)
        weight = 1.0 if k == 0 or (L % 2 == 0 and k == L // 2) else 2.0  # conjugate bin counted twice
        for t in range(L):
            out[t] += weight * (coef * np.exp(2j * math.pi * k * t / L)).real / math.sqrt(L)
    return out


@pytest.mark.parametrize("L", [5, 8, 50])
@pytest.mark.parametrize("keep", [1, 2, 3, 5, 30])
def test_low_pass_matches_explicit_dft(L: int, keep: int) -> None:
    x = torch.randn(2, L, 3, dtype=torch.float64)
    got = low_pass(x, keep).numpy()
    for b in range(2):
        np.testing.assert_allclose(got[b], dft_low_pass(x[b].numpy(), keep), atol=1e-10)


@pytest.mark.parametrize("L", [5, 50])
@pytest.mark.parametrize("keep", [1, 3, 30])
def test_low_pass_matrix_is_the_fft_filter(L: int, keep: int) -> None:
    """``low_pass`` (one product with ``low_pass_matrix``) equals the two-FFT filter of the authors' code in value
    and gradient, float32 too; ``last`` gives its last rows."""
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        x = torch.randn(3, L, 4, dtype=dtype, requires_grad=True)
        w = torch.randn(3, L, 4, dtype=dtype)
        (g_fft,) = torch.autograd.grad((low_pass_fft(x, keep) * w).sum(), x)
        (g_mat,) = torch.autograd.grad((low_pass(x, keep) * w).sum(), x)
        torch.testing.assert_close(low_pass(x, keep), low_pass_fft(x, keep), atol=tol, rtol=tol)
        torch.testing.assert_close(g_mat, g_fft, atol=tol, rtol=tol)
        torch.testing.assert_close(low_pass(x, keep, last=2), low_pass_fft(x, keep)[:, -2:], atol=tol, rtol=tol)
    assert low_pass_matrix(L, keep).dtype == torch.float32 and low_pass_matrix(L, keep).shape == (L, L)


def test_a_filter_first_built_under_inference_mode_still_trains() -> None:
    """The filter matrix is cached: one first built while diagnosing (inference mode) serves training after."""
    low_pass_matrix.cache_clear()
    with torch.inference_mode():
        low_pass(torch.randn(2, 7, 3), 2)
    x = torch.randn(2, 7, 3, requires_grad=True)
    (grad,) = torch.autograd.grad(low_pass(x, 2).sum(), x)
    (want,) = torch.autograd.grad(low_pass_fft(x, 2).sum(), x)
    torch.testing.assert_close(grad, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("keep", [1, 2, 5])
def test_low_pass_of_constant_sequence_is_identity(keep: int) -> None:
    x = torch.randn(3, 1, 4, dtype=torch.float64).expand(3, 9, 4)
    assert torch.allclose(low_pass(x, keep), x, atol=1e-12)
    # and a pure high frequency is removed entirely by a DC-only filter
    alternating = torch.tensor([(-1.0) ** t for t in range(8)], dtype=torch.float64)[None, :, None]
    assert low_pass(alternating, 1).abs().max() < 1e-12


def np_ln(z: np.ndarray, ln: torch.nn.LayerNorm) -> np.ndarray:
    mu = z.mean(-1, keepdims=True)
    var = ((z - mu) ** 2).mean(-1, keepdims=True)
    return ln.weight.detach().numpy() * (z - mu) / np.sqrt(var + ln.eps) + ln.bias.detach().numpy()


def np_linear(x: np.ndarray, lin: torch.nn.Linear) -> np.ndarray:
    return x @ lin.weight.detach().numpy().T + lin.bias.detach().numpy()


def slow_bsarec_layer(block: BSARecBlock, x: np.ndarray, items: np.ndarray, alpha: float, c: int,
                      freq_residual: float = 1.0) -> np.ndarray:
    """One sequence: x (L, d), items (L,) -> the block output (L, d), written out from spec §2 (eval mode), the
    frequency branch's residual scaled by ``freq_residual``."""
    L, d = x.shape
    keep = c // 2 + 1  # bins >= c//2+1 zeroed
    beta = block.filter.sqrt_beta.detach().numpy().reshape(d) ** 2
    lpf = dft_low_pass(x, keep)
    dsp = np_ln(freq_residual * x + lpf + beta * (x - lpf), block.filter.ln)
    att = block.attention
    H, dh = att.heads, att.head_dim
    q, k, v = np_linear(x, att.query), np_linear(x, att.key), np_linear(x, att.value)
    ctx = np.zeros((L, d))
    for h in range(H):
        cols = slice(h * dh, (h + 1) * dh)
        for i in range(L):
            s = np.array([q[i, cols] @ k[j, cols] / math.sqrt(dh) for j in range(L)])
            s = s + np.array([0.0 if (j <= i and items[j] > 0) else -10000.0 for j in range(L)])
            w = np.exp(s - s.max())
            w /= w.sum()
            ctx[i, cols] = w @ v[:, cols]
    gsp = np_ln(alpha * x + np_linear(ctx, att.out), block.attn_ln)
    h1 = block.a * dsp + (1 - block.a) * gsp
    inner = np_linear(h1, block.ffn.fc1)
    gelu = 0.5 * inner * (1 + np.vectorize(math.erf)(inner / math.sqrt(2)))
    return np_ln(h1 + np_linear(gelu, block.ffn.fc2), block.ffn_ln)


@pytest.mark.parametrize("bsa_c", [1, 3, 5, 9])
@pytest.mark.parametrize(("alpha", "freq_residual"), [(1.0, 1.0), (0.4, 1.0), (0.4, 0.4), (1.0, 0.0)])
def test_bsarec_layer_matches_slow_reference(bsa_c: int, alpha: float, freq_residual: float) -> None:
    torch.manual_seed(1)
    block = BSARecBlock(cfg(bsa_c=bsa_c)).double().eval()
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    block.alpha = alpha
    block.filter.residual = freq_residual
    items = torch.tensor([[0, 0, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]])
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    with torch.no_grad():
        got = block(x, causal_mask_bias(items).dense(torch.float64)).numpy()
    for b in range(2):
        want = slow_bsarec_layer(block, x[b].numpy(), items[b].numpy(), alpha, bsa_c, freq_residual)
        np.testing.assert_allclose(got[b], want, atol=1e-9)


def test_beta_is_sqrt_beta_squared_and_shared_at_init() -> None:
    torch.manual_seed(0)
    model = build_model(cfg(layers=3))
    betas = [b.filter.sqrt_beta for b in model.attention_blocks()]
    assert all(torch.equal(betas[0], b) for b in betas[1:])  # deep-copied block in the reference code
    assert betas[0].shape == (1, 1, 16) and betas[0].std() > 0.3  # N(0, 1), not the 0.02 init
    f = model.attention_blocks()[0].filter
    with torch.no_grad():
        f.sqrt_beta.fill_(-2.0)
    assert torch.allclose(f.beta, torch.full((1, 1, 16), 4.0))
    x = torch.randn(1, 8, 16)
    f.eval()
    lpf = low_pass(x, f.c)
    assert torch.allclose(f(x), f.ln(x + lpf + 4.0 * (x - lpf)), atol=1e-6)


@pytest.mark.parametrize("key_padding_mask", [True, False])
def test_encode_runs_on_full_window_and_is_trimming_invariant(key_padding_mask: bool) -> None:
    torch.manual_seed(0)
    model = build_model(cfg(key_padding_mask=key_padding_mask)).eval()
    items = torch.tensor([[0, 0, 3, 4, 5], [1, 2, 3, 4, 5]])
    out = model.encode(items)
    assert out.shape == (2, 5, 16)
    for width in (6, 8):
        padded = torch.nn.functional.pad(items, (width - 5, 0))
        assert torch.allclose(model.encode(padded)[:, -5:], out, atol=1e-6)
    with recording(model) as store:  # two passes: each record trimmed to its own caller's width
        model.encode(items)
        model.encode(items[:, -3:])
    assert [r.x.shape[1] for r in store[0]] == [5, 3] and [r.z.shape[1] for r in store[1]] == [5, 3]


def test_frequency_branch_is_not_causal() -> None:
    torch.manual_seed(0)
    model = build_model(cfg()).eval()
    a = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    b = a.clone()
    b[0, 6] = 19
    assert not torch.allclose(model.encode(a)[:, :6], model.encode(b)[:, :6], atol=1e-5)


def layer_norm(z: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    mu = z.mean(-1, keepdim=True)
    return w * (z - mu) / torch.sqrt(((z - mu) ** 2).mean(-1, keepdim=True) + eps) + b


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_bsarec_record_reconstruction(alpha: float) -> None:
    torch.manual_seed(0)
    model = build_model(cfg()).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    items = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])  # L = 6 < max_len = 8
    real = items > 0
    with residual_scale(model, alpha), recording(model) as store, torch.no_grad():
        out = model.encode(items)
    blocks = model.attention_blocks()
    for layer, (rec,) in enumerate(store):
        assert rec.x.shape == (2, 6, 16) and rec.attn_weights.shape == (2, 2, 6, 6)  # the caller's columns
        assert rec.branch_scale == pytest.approx(0.3) and rec.alpha == alpha and not rec.norm_first
        rebuilt = torch.einsum("bhij,bhjd->bid", rec.attn_weights, rec.head_values) + rec.out_bias
        assert torch.allclose(rebuilt[real], rec.attn_out[real], atol=1e-12)
        assert torch.allclose(rec.z, alpha * rec.x + rec.attn_out, atol=1e-12)
        gsp = layer_norm(rec.z, rec.ln_weight, rec.ln_bias, rec.ln_eps)
        assert torch.allclose(rec.freq_out + rec.branch_scale * gsp, rec.sublayer_out, atol=1e-10)
        if layer == 0:
            with torch.no_grad():
                assert torch.allclose(store[1][0].x, blocks[0].ffn_sublayer(rec.sublayer_out), atol=1e-12)
    with torch.no_grad():
        assert torch.allclose(out, blocks[1].ffn_sublayer(store[1][0].sublayer_out), atol=1e-12)


def test_frequency_residual_scale_acts_in_eval_only_and_restores() -> None:
    """``frequency_residual_scale`` sets every layer's frequency residual for the ``with`` block only, changes
    nothing at s = 1 nor in training mode, and refuses a model without a frequency branch."""
    torch.manual_seed(0)
    model = build_model(cfg()).eval()
    items = torch.tensor([[0, 0, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        base = model.encode(items)
        with frequency_residual_scale(model, 1.0):
            assert torch.equal(model.encode(items), base)
        with frequency_residual_scale(model, 0.0):
            assert [b.filter.residual for b in model.blocks] == [0.0, 0.0]
            scaled = model.encode(items)
        assert [b.filter.residual for b in model.blocks] == [1.0, 1.0]
        assert not torch.allclose(scaled, base)
        model.train()
        torch.manual_seed(5)
        trained = model.encode(items)
        with frequency_residual_scale(model, 0.0):
            torch.manual_seed(5)
            assert torch.equal(model.encode(items), trained)
    with pytest.raises(ValueError, match="no BSARec frequency branch"):
        with frequency_residual_scale(build_model(make_model_config(name="sasrec", n_items=20, max_len=8)), 0.5):
            pass
    for bad in (float("nan"), 2.0, True):
        with pytest.raises(ValueError, match="frequency residual scale: "):
            with frequency_residual_scale(model, bad):
                pass
    assert [b.filter.residual for b in model.blocks] == [1.0, 1.0]
