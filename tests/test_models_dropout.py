"""The CPU dropout (mask from torch.rand) and the explicit attention path it takes while training."""

from __future__ import annotations

import math

import pytest
import torch

from resdom.models.block import Dropout, MultiHeadAttention, causal_mask_bias, dropout


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_zeroes_a_fraction_p_and_scales_the_rest(p: float) -> None:
    torch.manual_seed(0)
    x = torch.rand(400_000) + 1.0  # no zeros of its own
    y = dropout(x, p, training=True)
    kept = y != 0
    assert abs((~kept).float().mean().item() - p) < 0.003  # 6 sigma at n = 4e5
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))


def test_dropout_gradient_is_the_mask_times_scale() -> None:
    torch.manual_seed(1)
    x = torch.randn(1000, requires_grad=True)
    y = dropout(x, 0.5, training=True)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y != 0).float() * 2.0)


def test_dropout_is_identity_in_eval_and_at_p0_and_matches_mask_from_seed() -> None:
    x = torch.randn(3, 5)
    assert torch.equal(dropout(x, 0.5, training=False), x)
    assert torch.equal(dropout(x, 0.0, training=True), x)
    module = Dropout(0.3)
    module.eval()
    assert torch.equal(module(x), x)
    module.train()
    torch.manual_seed(5)
    got = module(x)
    torch.manual_seed(5)
    mask = torch.rand_like(x) >= 0.3
    torch.testing.assert_close(got, x * mask / 0.7)


def test_training_attention_with_dropout_follows_the_formula() -> None:
    """Training on CPU with attention dropout: A = Dropout(softmax(QK^T/sqrt(dh) + mask)) V W_O + b_O."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(hidden=8, heads=2, attn_dropout=0.5)
    mha.train()
    x = torch.randn(3, 4, 8)
    items = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4], [0, 0, 0, 5]])
    bias = causal_mask_bias(items).dense()
    torch.manual_seed(9)
    got, _, _ = mha(x, bias)
    torch.manual_seed(9)
    split = lambda t: t.view(3, 4, 2, 4).transpose(1, 2)  # noqa: E731
    q, k, v = split(mha.query(x)), split(mha.key(x)), split(mha.value(x))
    w = (q @ k.transpose(-1, -2) / math.sqrt(4) + bias).softmax(-1)
    w = w * (torch.rand_like(w) >= 0.5) * 2.0
    want = mha.out((w @ v).transpose(1, 2).reshape(3, 4, 8))
    torch.testing.assert_close(got, want)
