"""The causal self-attention block (spec §2) and its named internals.

Post-LN (default)::

    A  = MHA(X)
    Z  = alpha * X + Dropout(A)          # alpha: residual scale (below)
    H1 = LayerNorm(Z)
    H2 = LayerNorm(H1 + Dropout(FFN(H1)))

Pre-LN (``PreLNBlock``): ``Z = alpha * X + Dropout(MHA(LN(X)))``, ``H1 = Z``, ``H2 = H1 + Dropout(FFN(LN(H1)))``.
The query-LN blocks (``QueryLNBlock``, ``PaperDuoRecBlock``) and BSARec's (``models.bsarec.BSARecBlock``) are the
other variants; a model's configuration names its block once (``AttentionConfig.block``), and ``BLOCKS`` maps that
name to the class the model is built from.

The residual scale of a pass (``effective_alpha``) is the trained scale ``base_scale()`` (1; or
``AttentionConfig.residual_scale``; or the learned gate of ``residual_gate``, a scalar or a (d,) vector), times the
inference-time ``alpha`` (1 unless a diagnostic sets it through ``interface.residual_scale``) in eval mode.

Diagnostics read a block only through ``BlockRecord`` (what one forward pass computed, by name) and the
``alpha`` attribute; see ``resdom.models.interface``. Recording is off by default and then costs one
attribute check per block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from resdom.models.config import AttentionConfig

MASK_VALUE = -10000.0  # additive mask as in BSARec's code: (1 - m) * -10000
SELF_TERMS_GATHER_BELOW = 0.5  # MultiHeadAttention.with_self_terms gathers the queries that see themselves below
# this share of the batch (mostly padding), else computes every query and zeroes the rest (no gathers)


@dataclass
class BlockRecord:
    """What one attention sub-layer computed in one forward pass, by name.

    Shapes: B batch, H heads, L positions, d hidden.
      x:            (B, L, d) what the residual carries: X of the block (LN_a(X) in the query-LN block).
      attn_in:      (B, L, d) what attention's keys and values read: X (post-LN, query-LN) or LN(X) (pre-LN).
      attn_weights: (B, H, L, L) a^h_ij (rows i query, columns j key), before dropout.
      head_values:  (B, H, L, d) f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h, b_O excluded.
      out_bias:     (d,) b_O.
      attn_out:     (B, L, d) MHA output A (with b_O), before dropout.
      alpha:        residual scale used in this pass: a float, or a (d,) tensor (per-channel residual gate).
      z:            (B, L, d) the pre-LN sum alpha * X + A.
      ln_weight, ln_bias, ln_eps: the LayerNorm applied to Z (post-LN); None for pre-LN.
      sublayer_out: (B, L, d) H1, the attention sub-layer's output (for BSARec the mixed output).
      branch_scale: factor on the attention branch in H1 (BSARec: 1 - a; otherwise 1).
      freq_out:     (B, L, d) BSARec's frequency-branch contribution a * DSP; None otherwise.
      norm_first:   True for pre-LN blocks (no +LN stage).
      causal:       True when query i attends to keys j <= i only; False for a bidirectional block (BERT4Rec),
                    where every real key is attended to and the first real position is not special.
      attn_self:    (B, L, d) the self terms sum_h a^h_ii f^h(x_i) (0 where a query's own key is masked:
                    padding, whose ratio is 0 by definition). A *light* record (``recording(model,
                    weights=False)``, enough for the norm-of-sums ratio) has it and leaves ``attn_weights`` and
                    ``head_values`` None: no (B, H, L, L) tensor, and on CPU the fused attention kernel runs.
    """

    x: torch.Tensor
    attn_in: torch.Tensor
    attn_weights: torch.Tensor | None
    head_values: torch.Tensor | None
    out_bias: torch.Tensor
    attn_out: torch.Tensor
    alpha: float | torch.Tensor
    z: torch.Tensor
    ln_weight: torch.Tensor | None
    ln_bias: torch.Tensor | None
    ln_eps: float | None
    sublayer_out: torch.Tensor
    branch_scale: float = 1.0
    freq_out: torch.Tensor | None = None
    norm_first: bool = False
    causal: bool = True
    attn_self: torch.Tensor | None = None  # (B, L, d) sum_h a^h_ii f^h(x_i): all a light record keeps


def recorded_scale(alpha: float | torch.Tensor) -> float | torch.Tensor:
    """A residual scale as a BlockRecord holds it: a float, or a detached (d,) tensor for a per-channel gate."""
    if isinstance(alpha, torch.Tensor):
        return float(alpha.detach()) if alpha.dim() == 0 else alpha.detach()
    return float(alpha)


def trim_record(rec: BlockRecord, width: int) -> BlockRecord:
    """The record of the last ``width`` positions (queries and keys) of a wider, left-padded pass.

    Used when a model without a key-padding mask pads its input to max_len internally: the attention paid to
    the dropped padding keys stays inside ``attn_out`` and ``z`` but has no g_ij term of its own.
    """
    cut = lambda t: t[:, -width:]  # noqa: E731
    return replace(
        rec, x=cut(rec.x), attn_in=cut(rec.attn_in),
        attn_weights=None if rec.attn_weights is None else rec.attn_weights[:, :, -width:, -width:],
        head_values=None if rec.head_values is None else rec.head_values[:, :, -width:],
        attn_self=None if rec.attn_self is None else cut(rec.attn_self), attn_out=cut(rec.attn_out), z=cut(rec.z),
        sublayer_out=cut(rec.sublayer_out), freq_out=None if rec.freq_out is None else cut(rec.freq_out),
    )


@dataclass(frozen=True)
class AttentionMask:
    """An additive attention mask (``MASK_VALUE`` where a query may not see a key, else 0) kept in parts that
    broadcast, so a batch of B windows of L positions costs O(B * L) memory, not a (B, 1, L, L) tensor.

    ``causal``: key j > query i is masked; ``padding`` (B, 1, 1, L): ``MASK_VALUE`` at padded keys, else 0 (None:
    no key masked for padding); ``full`` (B, 1, Lq, L): a dense mask instead of the parts (the fallback, below);
    ``rows``: the mask of the last ``rows`` query rows only (0: all L); ``length``: L. ``dense()`` is the
    (B, 1, Lq, L) tensor the parts stand for: ``MASK_VALUE`` where either part masks (not the sum of the two).

    Attention over the parts (``attend``, ``flash``, ``add_to``) equals attention over ``dense()`` bit for bit at
    every query that sees at least one key (every real query: it sees its own key), checked in
    ``tests/test_models_masks.py``. A query whose every key is masked (a padded query under a causal key-padding
    mask) attends, over the dense mask, to every key (all of them at -10000), and over the parts to keys 0..i only
    (the later ones are cut off as -inf). Its output is read by no model whose real positions never see padded
    ones, except for an input of padding alone (its last column is read): ``causal_mask_bias`` makes a dense mask
    for a batch that holds one, and for a model that reads padded positions (``compact=False``: BSARec, whose
    filter mixes every position of the window).
    """

    causal: bool
    length: int
    padding: torch.Tensor | None = None
    full: torch.Tensor | None = None
    rows: int = 0

    def last(self, n: int) -> AttentionMask:
        """The mask of the last ``n`` query rows (keys unchanged)."""
        if self.full is not None:
            return replace(self, full=self.full[:, :, -n:])
        return replace(self, rows=n)

    def dense(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> torch.Tensor:
        """(B, 1, Lq, L) (B = 1 without a padding part): ``MASK_VALUE`` where key j > query i (causal; with ``rows``
        the query rows are the last Lq of L) or key j is padding, else 0."""
        if self.full is not None:
            return self.full.to(dtype=dtype or self.full.dtype, device=device or self.full.device)
        L, n = self.length, self.rows or self.length
        if self.padding is not None:
            dtype, device = dtype or self.padding.dtype, device or self.padding.device
        out = torch.zeros(1, 1, n, L, dtype=dtype or torch.float32, device=device)
        if self.causal:
            out.masked_fill_(self._future(out.device), MASK_VALUE)
        if self.padding is not None:
            out = out.expand(self.padding.shape[0], 1, n, L).masked_fill((self.padding < 0).to(out.device),
                                                                         MASK_VALUE)
        return out

    def _future(self, device: torch.device | str | None) -> torch.Tensor:
        """bool (Lq, L): key j after query row i (rows counted from the end when ``rows``)."""
        L, n = self.length, self.rows or self.length
        return torch.arange(L, device=device)[None, :] > torch.arange(L - n, L, device=device)[:, None]

    def bias(self, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """The mask as one additive tensor (B, 1, Lq, L) (B = 1 without a padding part): ``full``, else the padding
        part plus -inf at future keys (the weights of ``dense()``, see above)."""
        if self.full is not None:
            return self.full.to(dtype=dtype, device=device)
        out = torch.zeros(1, 1, self.rows or self.length, self.length, dtype=dtype, device=device)
        if self.causal:
            out.masked_fill_(self._future(device), -math.inf)
        return out if self.padding is None else out + self.padding.to(dtype=dtype, device=device)

    def add_to(self, scores: torch.Tensor) -> torch.Tensor:
        """Attention scores (B, H, Lq, L) plus ``bias()``, in place when in parts (no (B, 1, L, L) tensor)."""
        if self.full is not None:
            return scores + self.full.to(scores.dtype)
        if self.padding is not None:
            scores = scores.add_(self.padding.to(scores.dtype))
        return scores.masked_fill_(self._future(scores.device), -math.inf) if self.causal else scores

    def own_key(self) -> torch.Tensor:
        """(B, Lq) (B = 1 without a padding part): the bias of each query's own key (the diagonal of the last Lq
        key columns of ``dense()``)."""
        if self.full is not None:
            L = self.full.shape[-1]
            return torch.diagonal(self.full[..., L - self.full.shape[-2] :], dim1=-2, dim2=-1)[:, 0]
        if self.padding is None:
            return torch.zeros(1, self.rows or self.length)
        pad = self.padding[:, 0, 0]  # the causal part's diagonal is 0
        return pad[:, -self.rows :] if self.rows else pad

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
        """``F.scaled_dot_product_attention`` (B, H, Lq, dh) over this mask, without a (B, 1, L, L) tensor where it
        can: padding alone broadcast over queries; on CPU a causal mask alone as ``is_causal`` and a causal
        key-padding mask through the fused kernel's causal flag with the padding part broadcast (no dropout there:
        CPU training with attention dropout forms the weights itself); else ``bias()``."""
        if self.full is None and not self.rows:
            if not self.causal:
                pad = None if self.padding is None else self.padding.to(q.dtype)
                return F.scaled_dot_product_attention(q, k, v, attn_mask=pad, dropout_p=dropout_p)
            if q.device.type == "cpu" and self.padding is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
            if q.device.type == "cpu" and dropout_p == 0.0:
                return self.flash(q, k, v, 1.0 / math.sqrt(q.shape[-1]))[0]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias(q.dtype, q.device), dropout_p=dropout_p)

    def flash(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """CPU only: the fused kernel's (output (B, H, Lq, dh), log-sum-exp of each row (B, Lq, H)) over this mask
        (its causal flag and the padding part where they say it all, else ``bias()``)."""
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        if self.full is None and not self.rows:
            pad = None if self.padding is None else self.padding.to(q.dtype)
            return op(q, k, v, 0.0, self.causal, attn_mask=pad, scale=scale)
        return op(q, k, v, 0.0, False, attn_mask=self.bias(q.dtype, q.device), scale=scale)


MaskLike = AttentionMask | torch.Tensor  # what blocks take: an AttentionMask, or a dense (B, 1, Lq, L) additive mask


def as_mask(mask: MaskLike) -> AttentionMask:
    """An AttentionMask as it is; a dense additive (B, 1, Lq, L) tensor as the mask it holds."""
    return mask if isinstance(mask, AttentionMask) else AttentionMask(causal=False, length=mask.shape[-1], full=mask)


def key_padding_bias(items: torch.Tensor) -> torch.Tensor:
    """(B, 1, 1, L): ``MASK_VALUE`` at padded keys (item 0), else 0."""
    return torch.zeros(items.shape[0], 1, 1, items.shape[1], device=items.device).masked_fill_(
        (items == 0)[:, None, None, :], MASK_VALUE)


def causal_mask_bias(items: torch.Tensor, key_padding: bool = True, compact: bool = True) -> AttentionMask:
    """The mask of a causal block over ``items`` (B, L): ``MASK_VALUE`` where key j > query i or (``key_padding``)
    key j is padding, else 0 (``AttentionMask.dense()`` is that (B, 1, L, L) tensor).

    ``key_padding=False``: the causal part only (padded keys are attended to, as with nn.MultiheadAttention
    given only a causal ``attn_mask``). The parts broadcast (O(B * L) memory); dense instead where a query with
    every key masked is read: ``compact=False``, or a batch with an input of padding alone (see AttentionMask).
    """
    L = items.shape[1]
    if not key_padding:
        return AttentionMask(causal=True, length=L)
    mask = AttentionMask(causal=True, length=L, padding=key_padding_bias(items))
    if not compact or bool((items == 0).all(1).any()):
        return AttentionMask(causal=True, length=L, full=mask.dense())
    return mask


def padding_mask_bias(items: torch.Tensor) -> AttentionMask:
    """The mask of a bidirectional block: ``MASK_VALUE`` where key j is padding, else 0 (every query attends to
    every real key, before and after it); broadcast over queries, (B, 1, 1, L)."""
    return AttentionMask(causal=False, length=items.shape[1], padding=key_padding_bias(items))


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout``, but on CPU the mask is drawn with ``torch.rand`` (about 2x faster than ``bernoulli_``
    there, forward and backward together; CUDA keeps the fused kernel). The mask is made in place in the
    uniform draws (no boolean tensor to convert)."""
    if not training or p == 0.0 or x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    return x * torch.rand_like(x).ge_(p).mul_(1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """nn.Dropout with the CPU mask of ``dropout``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


class MultiHeadAttention(nn.Module):
    """``MHA(X)_i = sum_h sum_j a^h_ij (x_j W_V^h + b_V^h) W_O^h + b_O`` with scaled dot-product weights."""

    def __init__(self, hidden: int, heads: int, attn_dropout: float) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.attn_dropout = attn_dropout

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        B, L, _ = t.shape
        return t.view(B, L, self.heads, self.head_dim).transpose(1, 2)  # (B, H, L, dh)

    def with_self_terms(self, x: torch.Tensor, mask_bias: MaskLike,
                        kv: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(A (B, L, d), sum_h a^h_ii f^h(x_i) (B, L, d)) without the (B, H, L, L) weights where that can be done:
        on CPU in eval mode the fused kernel returns each row's log-sum-exp, so a^h_ii = exp(s^h_ii - lse^h_i);
        elsewhere the explicit weights are formed and only their diagonal kept."""
        kv = x if kv is None else kv
        lin = self.query(x), self.key(kv), self.value(kv)  # (B, L, d) each, contiguous
        q, k, v = (self._split(t) for t in lin)
        scale = 1.0 / math.sqrt(self.head_dim)
        mask = as_mask(mask_bias)
        if x.device.type == "cpu" and not (self.training and self.attn_dropout > 0):
            ctx, lse = mask.flash(q, k, v, scale)
            out = self.out(ctx.transpose(1, 2).flatten(2))
            B, L, d = out.shape
            own_bias = mask.own_key().to(q.dtype).expand(B, L).reshape(-1)  # the mask's diagonal; heads share it
            sees = own_bias > MASK_VALUE / 2  # (B * L,): the queries that see their own key (else a^h_ii = 0)
            lse_rows = lse.transpose(1, 2).reshape(B * L, self.heads)
            if float(sees.float().mean()) < SELF_TERMS_GATHER_BELOW:  # mostly padding: those queries only
                rows = torch.nonzero(sees).flatten()  # flat (b, i) of those queries
                qs, ks, vs = (t.reshape(B * L, d).index_select(0, rows).view(-1, self.heads, self.head_dim)
                              for t in lin)
                s_ii = (qs * ks).sum(-1) * scale + own_bias.index_select(0, rows)[:, None]  # (N, H)
                a_ii = (s_ii - lse_rows.index_select(0, rows)).exp()
                own = (a_ii[..., None].to(vs.dtype) * vs).flatten(1) @ self.out.weight.T
                return out, out.new_zeros(B * L, d).index_copy_(0, rows, own).view(B, L, d)  # b_O excluded
            qs, ks, vs = (t.reshape(B * L, self.heads, self.head_dim) for t in lin)  # every query (length batches)
            s_ii = (qs * ks).sum(-1) * scale + own_bias[:, None]  # (B * L, H)
            a_ii = (s_ii - lse_rows).exp_().masked_fill_(~sees[:, None], 0.0)
            own = (a_ii[..., None].to(vs.dtype) * vs).flatten(1) @ self.out.weight.T
            return out, own.view(B, L, d)  # sum_h a^h_ii (v^h_i W_O^h), b_O excluded
        weights = mask.add_to(q @ k.transpose(-1, -2) * scale).softmax(-1)
        ctx = dropout(weights, self.attn_dropout if self.training else 0.0, self.training) @ v
        diag = torch.diagonal(weights, dim1=-2, dim2=-1)
        out = self.out(ctx.transpose(1, 2).flatten(2))
        own_values = (diag[..., None] * v).transpose(1, 2).flatten(2)  # (B, L, d): heads side by side
        return out, own_values @ self.out.weight.T  # sum_h a^h_ii (v^h_i W_O^h), b_O excluded

    def forward(
        self, x: torch.Tensor, mask_bias: MaskLike, record: bool = False,
        kv: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """x (B, L, d), mask_bias (an AttentionMask, or its dense (B, 1, L, L) tensor) -> (A (B, L, d), weights
        (B,H,L,L) | None, f^h (B,H,L,d) | None).

        Queries come from ``x``, keys and values from ``kv`` (default ``x``); f^h is of the values' input.
        """
        kv = x if kv is None else kv
        q, k, v = self._split(self.query(x)), self._split(self.key(kv)), self._split(self.value(kv))
        p = self.attn_dropout if self.training else 0.0
        mask = as_mask(mask_bias)
        # SDPA unless recording, or training with dropout on CPU, where its bernoulli mask costs 2x the pass
        if not record and (p == 0.0 or x.device.type != "cpu"):
            ctx = mask.attend(q, k, v, p)
            return self.out(ctx.transpose(1, 2).flatten(2)), None, None
        scores = mask.add_to(q @ k.transpose(-1, -2) / math.sqrt(self.head_dim))
        weights = scores.softmax(-1)
        ctx = dropout(weights, p, self.training) @ v
        out = self.out(ctx.transpose(1, 2).flatten(2))
        if not record:
            return out, None, None
        # W_O^h: columns h*dh:(h+1)*dh of out.weight, as (H, dh, d)
        w_o = self.out.weight.T.reshape(self.heads, self.head_dim, -1)
        head_values = torch.einsum("bhjk,hkd->bhjd", v, w_o)
        return out, weights, head_values


class FeedForward(nn.Module):
    """Linear(d, inner) -> GELU (exact, erf) or ReLU -> [Dropout] -> Linear(inner, d)."""

    def __init__(self, hidden: int, inner: int, activation: str, inner_dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, inner), nn.Linear(inner, hidden)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.inner_dropout = Dropout(inner_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.inner_dropout(self.act(self.fc1(x))))


class AttentionBlock(nn.Module):
    """One post-LN transformer block with a settable residual scale ``alpha`` on the attention sub-layer.

    The sub-layer is ``residual_sum`` (the one residual line of the code base, shared by every block variant)
    followed by ``sublayer_output``; variants change what the residual carries (``residual_and_queries``), what
    follows the sum, or mix in another branch (BSARec), never the residual line itself.
    """

    def __init__(self, cfg: AttentionConfig) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(cfg.hidden, cfg.heads, cfg.attn_dropout)
        self.attn_ln = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.ffn = FeedForward(cfg.hidden, cfg.inner, cfg.activation,
                               inner_dropout=cfg.dropout if cfg.ffn_dropout else 0.0)
        self.xavier_qkv = cfg.qkv_init == "xavier"
        self.ffn_ln = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.dropout = Dropout(cfg.dropout)
        self.attn_out_dropout: nn.Module = self.dropout  # dropout on A before the sum (none in the query-LN block)
        self.alpha = 1.0  # inference-time residual scale, a factor on base_scale() in eval mode only (spec §2)
        self.fixed_scale = float(cfg.residual_scale)
        gate_shape = {"none": None, "scalar": (), "channel": (cfg.hidden,)}[cfg.residual_gate]
        self.residual_gate = None if gate_shape is None else nn.Parameter(torch.ones(gate_shape))
        self.recording: list[BlockRecord] | None = None  # set by interface.recording()
        self.record_weights = True  # False: light records (the self terms only), set by interface.recording()
        self.causal = True  # what the model's mask lets a query see (recorded); False in BERT4Rec's blocks

    def base_scale(self) -> float | torch.Tensor:
        """The trained residual scale: the learned gate (a 0-d or (d,) parameter), else the fixed scale (1 by
        default)."""
        return self.fixed_scale if self.residual_gate is None else self.residual_gate

    def effective_alpha(self) -> float | torch.Tensor:
        """The residual scale of this pass: base_scale() in training, base_scale() * alpha in eval mode."""
        base = self.base_scale()
        if self.training or self.alpha == 1.0:
            return base
        return base * self.alpha

    def residual_and_queries(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(what the residual carries, what attention's queries read): (X, X) here, (X, LN(X)) pre-LN.
        Keys and values read the queries' input, except in the query-LN block (the raw X)."""
        return x, x

    def key_values(self, x: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        return queries

    def residual_sum(self, x: torch.Tensor, mask_bias: MaskLike, last: int = 0
                     ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Z = alpha * R + Dropout(MHA(Q, KV)) from X (B, L, d), and the record's fields of this pass.

        ``last`` > 0: Z of the last ``last`` positions only (B, last, d): queries and residual there, keys and
        values everywhere (``forward``)."""
        r, q = self.residual_and_queries(x)
        kv = self.key_values(x, q)
        if last:
            if self.recording is not None:
                raise ValueError("a block records every position: last=0 while recording")
            r, q, mask_bias = r[:, -last:], q[:, -last:], as_mask(mask_bias).last(last)
        weights = head_values = own = None
        if self.recording is not None and not self.record_weights:
            a, own = self.attention.with_self_terms(q, mask_bias, kv=kv)
        else:
            a, weights, head_values = self.attention(q, mask_bias, self.recording is not None, kv=kv)
        alpha = self.effective_alpha()
        z = alpha * r + self.attn_out_dropout(a)  # the residual connection
        return z, {"x": r, "attn_in": kv, "attn_weights": weights, "head_values": head_values, "attn_self": own,
                   "out_bias": self.attention.out.bias, "attn_out": a, "alpha": recorded_scale(alpha), "z": z}

    def sum_norm(self) -> nn.LayerNorm | None:
        """The LayerNorm applied to Z (the +LN stage); None for pre-LN blocks."""
        return self.attn_ln

    def record(self, parts: dict[str, Any], **extra: Any) -> None:
        """Append this pass's BlockRecord when recording."""
        if self.recording is not None:
            ln = self.sum_norm()
            self.recording.append(BlockRecord(
                **parts, ln_weight=None if ln is None else ln.weight, ln_bias=None if ln is None else ln.bias,
                ln_eps=None if ln is None else ln.eps, norm_first=ln is None, causal=self.causal, **extra))

    def attention_sublayer(self, x: torch.Tensor, mask_bias: MaskLike, last: int = 0) -> torch.Tensor:
        """H1 from X (B, L, d): LN(Z) (post-LN) or Z (pre-LN); appends a BlockRecord when recording."""
        z, parts = self.residual_sum(x, mask_bias, last)
        ln = self.sum_norm()
        h1 = z if ln is None else ln(z)
        self.record(parts, sublayer_out=h1)
        return h1

    def ffn_sublayer(self, h1: torch.Tensor) -> torch.Tensor:
        return self.ffn_ln(h1 + self.dropout(self.ffn(h1)))

    def forward(self, x: torch.Tensor, mask_bias: MaskLike, last: int = 0) -> torch.Tensor:
        """x (B, L, d), mask_bias (``causal_mask_bias``) -> (B, L, d); with ``last`` > 0 the output of the last ``last``
        positions only (B, last, d), the same values: every other step of a block is position-wise, so only
        the attention's keys and values need the earlier positions."""
        return self.ffn_sublayer(self.attention_sublayer(x, mask_bias, last))

    def reset_parameters(self) -> None:
        """Initialisation beyond the model-wide one (``SequentialRecommender._init_weights``): with
        ``qkv_init="xavier"``, ``nn.MultiheadAttention``'s Xavier-uniform over the stacked (3d, d) query/key/value
        matrix (biases stay 0; the output projection keeps N(0, init_std), being an ``nn.Linear`` there)."""
        if self.xavier_qkv:
            a = self.attention
            bound = math.sqrt(6.0 / (4 * a.query.in_features))  # fan_in d + fan_out 3d
            for lin in (a.query, a.key, a.value):
                nn.init.uniform_(lin.weight, -bound, bound)


class PreLNBlock(AttentionBlock):
    """The pre-LN block: ``Z = alpha * X + Dropout(MHA(LN(X)))``, ``H1 = Z``, ``H2 = H1 + Dropout(FFN(LN(H1)))``.
    The same modules as the post-LN block, in the same order (``attn_ln`` before attention, ``ffn_ln`` before the
    FFN); no LayerNorm after the sum, so no +LN stage."""

    def residual_and_queries(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.attn_ln(x)

    def sum_norm(self) -> None:
        return None

    def ffn_sublayer(self, h1: torch.Tensor) -> torch.Tensor:
        return h1 + self.dropout(self.ffn(self.ffn_ln(h1)))


class QueryLNBlock(AttentionBlock):
    """time-to-split's SASRec block (spec §6, "a third block"; the paper's DuoRec block is ``PaperDuoRecBlock``)::

        Q  = LN_a(X)
        A  = MHA(query = Q, key = X, value = X)
        H  = LN_f(alpha * Q + A)                     # the residual is Q = LN_a(X), not X
        X' = H + Dropout(W_2 Dropout(ReLU(W_1 H)))   # the FFN's own residual, no LayerNorm after it

    As ``nn.MultiheadAttention`` there: dropout on the attention weights only, and the query/key/value
    projections initialised Xavier-uniform over the stacked (3d, d) matrix. Records: ``x`` = LN_a(X) (the
    residual term), ``attn_in`` = X (keys and values: f^h comes from the raw X), the LayerNorm is LN_f.
    ``attn_ln`` is LN_a, ``ffn_ln`` is LN_f.
    """

    def __init__(self, cfg: AttentionConfig) -> None:
        super().__init__(cfg)
        self.ffn = FeedForward(cfg.hidden, cfg.inner, cfg.activation, inner_dropout=cfg.dropout)
        self.attn_out_dropout = nn.Identity()
        self.xavier_qkv = True

    def residual_and_queries(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.attn_ln(x)
        return q, q

    def key_values(self, x: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        return x

    def sum_norm(self) -> nn.LayerNorm:
        return self.ffn_ln

    def ffn_sublayer(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.dropout(self.ffn(h))


class PaperDuoRecBlock(QueryLNBlock):
    """The reference paper's DuoRec block (spec §6): the query-LN block with keys and values from Q as well::

        Q  = LN_a(X)
        A  = MHA(query = Q, key = Q, value = Q)
        H  = LN_f(alpha * Q + Dropout(A))            # out_dropout on A (training only)
        X' = H + Dropout(W_2 Dropout(ReLU(W_1 H)))

    Records: ``x`` = ``attn_in`` = Q (the residual and what the heads read, so f^h(x_j) comes from Q_j and the
    diagonal term is g_ii = alpha * Q_i + sum_h a^h_ii f^h(Q_i)); the LayerNorm of the +LN stage is LN_f.
    ``QueryLNBlock`` (keys and values from the raw X, no dropout on A) is time-to-split's SASRec block.
    """

    def __init__(self, cfg: AttentionConfig) -> None:
        super().__init__(cfg)
        self.attn_out_dropout = self.dropout

    def key_values(self, x: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        return queries


# The blocks a configuration can name (``AttentionConfig.block``): the model builds each of its layers from one.
BLOCKS: dict[str, type[AttentionBlock]] = {
    "post_ln": AttentionBlock, "pre_ln": PreLNBlock, "query_ln": QueryLNBlock, "query_ln_qkv": PaperDuoRecBlock,
}
