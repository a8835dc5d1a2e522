"""Attention masks in parts that broadcast (``block.AttentionMask``): the previous path was the dense (B, 1, L, L)
mask (``AttentionMask.dense()``, still what a block does when handed a tensor). Attention over the parts equals
attention over the dense mask bit for bit at every real query, in every path (SDPA, the CPU fused kernel with its
log-sum-exp, the explicit weights of recording and CPU dropout, the last rows only), forward and backward; whole
models give the same states at real positions, and where padded rows are read (BSARec, an input of padding alone)
the mask is dense."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics import mixing_ratios
from resdom.models import build_model, make_model_config, recording
from resdom.models.block import (
    MASK_VALUE,
    AttentionMask,
    MultiHeadAttention,
    as_mask,
    causal_mask_bias,
    key_padding_bias,
    padding_mask_bias,
)
from resdom.models.interface import state_tokens


def left_padded(lengths: list[int], L: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(Sequences.from_lists([rng.integers(1, 30, size=n).tolist() for n in lengths]).padded(L))


ITEMS = left_padded([37, 1, 12, 30, 5, 37, 2], 37)  # no empty row: the masks stay in parts
MASKS = {
    "causal+padding": lambda items: causal_mask_bias(items),
    "causal": lambda items: causal_mask_bias(items, key_padding=False),
    "padding": lambda items: padding_mask_bias(items),
}


def dense_of(mask: AttentionMask, batch: int) -> torch.Tensor:
    return mask.dense().expand(batch, -1, -1, -1)


@pytest.mark.parametrize("key_padding", [True, False])
@pytest.mark.parametrize("rows", [0, 1, 3])
def test_dense_is_the_previous_mask(key_padding: bool, rows: int) -> None:
    """-10000 where key j > query i or (key padding) key j is padding; the last ``rows`` query rows of it."""
    items = left_padded([4, 1, 6, 2], 6)
    mask = causal_mask_bias(items, key_padding=key_padding)
    assert mask.full is None  # in parts
    got = dense_of(mask.last(rows) if rows else mask, 4)
    L = 6
    for b in range(4):
        for n, i in enumerate(range(L - (rows or L), L)):
            for j in range(L):
                masked = j > i or (key_padding and items[b, j] == 0)
                assert got[b, 0, n, j] == (MASK_VALUE if masked else 0.0)
    own = (mask.last(rows) if rows else mask).own_key()
    diag = torch.diagonal(got[..., L - got.shape[-2] :], dim1=-2, dim2=-1)[:, 0]
    assert torch.equal(own.expand_as(diag), diag)


def test_a_long_window_costs_o_of_l() -> None:
    """256 users at L = 1000: the mask holds B * L numbers (the dense one would hold B * L * L: 1 GB)."""
    items = left_padded([1000, 3, 500] * 85 + [7], 1000)
    mask = causal_mask_bias(items)
    assert mask.full is None and mask.padding.numel() == 256 * 1000
    assert padding_mask_bias(items).padding.numel() == 256 * 1000
    assert causal_mask_bias(items, key_padding=False).padding is None


def test_an_input_of_padding_alone_or_compact_false_gives_the_dense_mask() -> None:
    items = left_padded([3, 0, 5], 5)
    for batch, mask in ((items, causal_mask_bias(items)), (ITEMS, causal_mask_bias(ITEMS, compact=False))):
        assert mask.full is not None and mask.padding is None
        parts = AttentionMask(True, batch.shape[1], padding=key_padding_bias(batch))
        assert torch.equal(mask.dense(), parts.dense())
        assert torch.equal(as_mask(mask.dense()).dense(), mask.dense())


def real_rows(kind: str, items: torch.Tensor) -> torch.Tensor:
    """bool (B, L): the queries compared bit for bit (every one where no query has all its keys masked)."""
    return items > 0 if kind == "causal+padding" else torch.ones_like(items, dtype=torch.bool)


def mha(dtype: torch.dtype = torch.float32, dropout: float = 0.0) -> MultiHeadAttention:
    torch.manual_seed(0)
    m = MultiHeadAttention(hidden=16, heads=2, attn_dropout=dropout).to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return m


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", list(MASKS))
def test_attention_over_parts_equals_the_dense_mask_at_real_queries(kind: str, dtype: torch.dtype) -> None:
    m = mha(dtype).eval()
    mask = MASKS[kind](ITEMS)
    dense = dense_of(mask, len(ITEMS))
    real = real_rows(kind, ITEMS)
    x = torch.randn(*ITEMS.shape, 16, dtype=dtype)
    with torch.no_grad():
        for record in (False, True):  # SDPA / the fused kernel; the explicit weights of recording
            new, old = m(x, mask, record), m(x, dense, record)
            assert torch.equal(new[0][real], old[0][real]), record
            if record:
                assert torch.equal(new[1].transpose(1, 2)[real], old[1].transpose(1, 2)[real])
        (a_new, own_new), (a_old, own_old) = m.with_self_terms(x, mask), m.with_self_terms(x, dense)
        assert torch.equal(a_new[real], a_old[real]) and torch.equal(own_new[real], own_old[real])
        for n in (1, 4):  # the last n query rows (the final block's ``last``)
            new, old = m(x[:, -n:], mask.last(n), kv=x)[0], m(x[:, -n:], dense[:, :, -n:], kv=x)[0]
            assert torch.equal(new[real[:, -n:]], old[real[:, -n:]])


@pytest.mark.parametrize("kind", list(MASKS))
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_training_gradients_equal_the_dense_mask(kind: str, dropout: float) -> None:
    """A loss that reads real queries only (as every objective): the same loss and gradients (dropout drawn
    alike: the explicit CPU path with attention dropout, SDPA and the fused kernel without)."""
    real = real_rows(kind, ITEMS)
    mask = MASKS[kind](ITEMS)
    x0 = torch.randn(*ITEMS.shape, 16)
    grads = []
    for m_ in (mask, dense_of(mask, len(ITEMS))):
        m = mha(dropout=dropout).train()
        x = x0.clone().requires_grad_()
        torch.manual_seed(3)
        out = m(x, m_)[0]
        loss = (out * real[..., None]).square().sum()
        loss.backward()
        grads.append([loss.detach(), x.grad, *(p.grad for p in m.parameters())])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


MODELS: dict[str, dict[str, Any]] = {
    "sasrec": {},
    "sasrec-no-key-padding": {"key_padding_mask": False},
    "pre-ln": {"norm_first": True},
    "query-ln": {"query_ln": True, "final_ln": True, "zero_padding": True},
    "duorec": {"name": "duorec"},
    "bert4rec": {"name": "bert4rec"},
    "bsarec": {"name": "bsarec"},
    "query-readout": {"readout": "query"},
    "paper-duorec": {"name": "duorec", "query_ln": True, "query_ln_kv": "query", "final_ln": True},
}


def model(kind: str) -> torch.nn.Module:
    torch.manual_seed(1)
    cfg = {"name": "sasrec", "n_items": 30, "max_len": 12, "hidden": 16, "heads": 2, "init_std": 0.3, **MODELS[kind]}
    return build_model(make_model_config(**cfg)).eval()


def with_dense_masks(m: torch.nn.Module) -> Any:
    """The previous path: the model's blocks handed the dense (B, 1, L, L) mask."""
    mask_bias = m.mask_bias
    m.mask_bias = lambda tokens: dense_of(mask_bias(tokens), tokens.shape[0])
    return m


@pytest.mark.parametrize("kind", list(MODELS))
def test_models_encode_as_with_the_dense_mask(kind: str) -> None:
    """Real positions bit for bit (every position for a model without key padding, BSARec, and a batch with an
    input of padding alone), the final column included; the light records' self terms too."""
    items = left_padded([11, 1, 4, 8, 2], 11)
    empty = left_padded([3, 0, 5], 5)
    new, old = model(kind), with_dense_masks(model(kind))
    with torch.no_grad():
        for batch in (items, empty):
            a, b = new.encode(batch), old.encode(batch)
            tokens = state_tokens(new, batch)
            # every position: no padded query at all, or a dense mask (a row of padding alone, BSARec)
            every = kind in ("sasrec-no-key-padding", "bsarec", "bert4rec") or bool((tokens == 0).all(1).any())
            keep = torch.ones_like(tokens, dtype=torch.bool) if every else tokens > 0
            assert torch.equal(a[keep], b[keep]), batch.shape
            assert torch.equal(a[:, -1], b[:, -1])
        with recording(new, weights=False) as s_new, recording(old, weights=False) as s_old:
            new.encode(items), old.encode(items)
        real = new.block_tokens(items) > 0 if hasattr(new, "block_tokens") else items > 0
        for (r_new,), (r_old,) in zip(s_new, s_old):
            assert torch.equal(r_new.attn_self[real], r_old.attn_self[real])


@pytest.mark.parametrize("kind", ["sasrec", "query-ln", "bert4rec"])
def test_mixing_ratio_equals_the_dense_mask(kind: str) -> None:
    ev = EvalSet(Sequences.from_lists([[1, 2, 3], [4], list(range(1, 20)), [5, 6, 7, 8, 9]]), np.array([1, 2, 3, 4]))
    a = mixing_ratios(model(kind), ev).to_dict()
    b = mixing_ratios(with_dense_masks(model(kind)), ev).to_dict()
    assert a == b


@pytest.mark.parametrize("kind", ["sasrec", "query-ln", "bert4rec", "bsarec", "paper-duorec"])
def test_mixing_without_gathers_equals_the_gathered_path(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Length-sorted batches are mostly real positions: the self terms and the norm-of-sums ratios are computed at
    every position and the rest zeroed, instead of gathering the positions that have one (the previous path, still
    taken for a batch that is mostly padding): the same numbers."""
    import resdom.diagnostics.decomposition as decomposition
    import resdom.models.block as block

    rng = np.random.default_rng(0)  # windows of 12, 11, 12, 9, 10 and 1 items: most positions real
    ev = EvalSet(Sequences.from_lists([rng.integers(1, 30, size=n).tolist() for n in (15, 11, 20, 9, 10, 1)]),
                 np.array([1, 2, 3, 4, 5, 6]))
    items = torch.from_numpy(ev.inputs.padded(12))

    def self_terms() -> list[torch.Tensor]:
        m = model(kind)
        with torch.no_grad(), recording(m, weights=False) as store:
            m.encode(items)
        return [layer[0].attn_self for layer in store]

    plain, plain_terms = mixing_ratios(model(kind), ev).to_dict(), self_terms()
    monkeypatch.setattr(block, "SELF_TERMS_GATHER_BELOW", 1.01)
    monkeypatch.setattr(decomposition, "RATIO_GATHER_BELOW", 1.01)
    assert mixing_ratios(model(kind), ev).to_dict() == plain
    for a, b in zip(self_terms(), plain_terms):  # every position, 0 where the own key is masked
        assert torch.equal(a, b)
