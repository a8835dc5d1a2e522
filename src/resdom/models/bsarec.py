"""BSARec (Shin et al., AAAI 2024): attention mixed with a frequency-domain branch (spec §2 and §6).

Each layer (post-LN only)::

    LPF(X) = irfft(rfft(X, dim=seq, norm="ortho") with bins >= c//2+1 zeroed)    # computed as K @ X
    DSP    = LayerNorm(X + Dropout(LPF(X) + beta * (X - LPF(X))))       # beta = sqrt_beta**2, per channel
    GSP    = LayerNorm(alpha * X + Dropout(MHA(X)))                      # the attention sub-layer
    H1     = a * DSP + (1 - a) * GSP
    H2     = LayerNorm(H1 + Dropout(FFN(H1)))

as in the authors' code (``FrequencyLayer``, ``BSARecLayer``, ``FeedForward``): dropout sits on the filtered
signal before its residual, the attention sub-layer is the ordinary post-LN one, and beta is parameterised
as ``sqrt_beta ** 2`` with ``sqrt_beta ~ N(0, 1)``, the same initial value in every layer (their encoder
deep-copies one block). The filter is not causal and sees the whole window, padding included, so BSARec
always runs on the full ``max_len`` window, left-padded (spec §2: the padding side is part of the model).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import ClassVar

import torch
from torch import nn

from resdom.checks import residual_scales
from resdom.models.base import SequentialRecommender
from resdom.models.block import AttentionBlock, AttentionMask, Dropout, MaskLike, causal_mask_bias
from resdom.models.config import AttentionConfig, BSARecConfig


def low_pass_fft(x: torch.Tensor, c: int) -> torch.Tensor:
    """x (B, L, d) -> (B, L, d): keep the ``c`` lowest rfft bins along dim 1 (norm="ortho"), zero the rest."""
    spec = torch.fft.rfft(x, dim=1, norm="ortho")
    spec = torch.cat([spec[:, :c], torch.zeros_like(spec[:, c:])], dim=1)
    return torch.fft.irfft(spec, n=x.shape[1], dim=1, norm="ortho")


@functools.lru_cache(maxsize=32)
def low_pass_matrix(L: int, c: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    """(L, L) real K with ``low_pass_fft(x, c) = K @ x`` along dim 1: the filter applied to the identity (in
    float64, then cast). The filter is linear and fixed, so one small matrix product replaces two FFTs."""
    with torch.inference_mode(False):  # a cached K made under inference mode must still serve training
        eye = torch.eye(L, dtype=torch.float64)[None]  # x[0, s, j] = [s == j]: output column j is K[:, j]
        return low_pass_fft(eye, c)[0].to(dtype=dtype, device=device)


def low_pass(x: torch.Tensor, c: int, last: int = 0) -> torch.Tensor:
    """``low_pass_fft(x, c)`` (B, L, d) as ``K @ x`` (``low_pass_matrix``): the same values to float rounding, on
    CPU about 4x faster forward and backward at L 50; ``last`` > 0: its last ``last`` positions only."""
    K = low_pass_matrix(x.shape[1], c, x.dtype, str(x.device))
    return torch.matmul(K[-last:] if last else K, x)


class FrequencyLayer(nn.Module):
    """DSP = LayerNorm(s * X + Dropout(LPF(X) + beta * (X - LPF(X)))), beta = sqrt_beta**2 (d,).

    ``s`` (``residual``) is 1 as trained; in eval mode ``frequency_residual_scale`` sets it, the frequency
    branch's counterpart of the attention residual's inference-time alpha (docs/results.md, BSARec on video-ts).
    """

    def __init__(self, cfg: BSARecConfig) -> None:
        super().__init__()
        self.c = cfg.bsa_c // 2 + 1  # number of kept rfft bins (spec §2: bins >= c//2+1 zeroed)
        self.sqrt_beta = nn.Parameter(torch.randn(1, 1, cfg.hidden))
        self.dropout = Dropout(cfg.dropout)
        self.ln = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.residual = 1.0

    @property
    def beta(self) -> torch.Tensor:
        """(1, 1, d) the per-channel high-frequency gain."""
        return self.sqrt_beta**2

    def forward(self, x: torch.Tensor, last: int = 0) -> torch.Tensor:
        """x (B, L, d) -> DSP (B, L, d); with ``last`` > 0 DSP of the last ``last`` positions (the filter still
        reads all L)."""
        lpf = low_pass(x, self.c, last)
        if last:
            x = x[:, -last:]
        res = x if self.training or self.residual == 1.0 else self.residual * x
        return self.ln(res + self.dropout(lpf + self.beta * (x - lpf)))


@contextlib.contextmanager
def frequency_residual_scale(model: nn.Module, s: float) -> Iterator[None]:
    """Scale the residual X of every BSARec frequency branch (``FrequencyLayer``) by ``s`` in eval mode, restoring
    it on exit; with ``interface.residual_scale`` (the attention residual) it scales both routes by which X's own
    row reaches the sub-layer's output. A model without frequency branches is a ValueError, and so is an ``s`` that
    is not a residual scale (``checks.residual_scales``: a number in [0, 1])."""
    try:
        (s,) = residual_scales((s,))
    except ValueError as e:
        raise ValueError(f"frequency residual scale: {e}") from None
    layers = [m for m in model.modules() if isinstance(m, FrequencyLayer)]
    if not layers:
        raise ValueError("the model has no BSARec frequency branch")
    saved = [f.residual for f in layers]
    try:
        for f in layers:
            f.residual = float(s)
        yield
    finally:
        for f, r in zip(layers, saved):
            f.residual = r


class BSARecBlock(AttentionBlock):
    """An AttentionBlock whose attention sub-layer output is mixed with the frequency branch by ``a``.

    ``alpha`` scales the attention residual inside GSP (eval mode only); ``a`` (``cfg.bsa_a``) is fixed.
    Records: ``branch_scale = 1 - a``, ``freq_out = a * DSP``, ``sublayer_out = H1``; ``z`` and the LN
    are GSP's own, so ``H1 = freq_out + branch_scale * LN(z)``; ``attn_in`` is X (post-LN).
    """

    def __init__(self, cfg: BSARecConfig) -> None:
        super().__init__(cfg)
        self.filter = FrequencyLayer(cfg)
        self.a = float(cfg.bsa_a)

    def attention_sublayer(self, x: torch.Tensor, mask_bias: MaskLike, last: int = 0) -> torch.Tensor:
        """H1 (B, L, d) from X (B, L, d) (the last ``last`` positions where > 0); appends a BlockRecord when
        recording."""
        dsp = self.filter(x, last)
        z, parts = self.residual_sum(x, mask_bias, last)  # GSP's pre-LN sum: the shared attention residual
        h1 = self.a * dsp + (1.0 - self.a) * self.attn_ln(z)
        self.record(parts, sublayer_out=h1, branch_scale=1.0 - self.a, freq_out=self.a * dsp)
        return h1


class BSARec(SequentialRecommender):
    """BSARec: SequentialRecommender with BSARecBlocks, always run on the full left-padded window.

    Its own architecture under every protocol, with the published per-data-set settings and the padding row
    initialised as in its code (``experiments.PROTOCOL_DEFAULTS``, ``DATASET_PRESETS``); post-LN only
    (``experiments.MODEL_TRAITS``); trained with ``ce_last``: the filter is not causal.
    """

    name: ClassVar[str] = "bsarec"
    default_objective: ClassVar[str] = "ce_last"
    causal: ClassVar[bool] = False
    noncausal_reason: ClassVar[str] = (
        "its low-pass filter is not causal, so every position sees later items of the window, including the very "
        "item it must predict (label leakage, spec §2)")
    cfg: BSARecConfig

    def __init__(self, cfg: BSARecConfig) -> None:
        super().__init__(cfg)
        # The authors' encoder deep-copies one block, so every layer starts from the same sqrt_beta.
        blocks = self.layer_blocks()
        with torch.no_grad():
            for block in blocks[1:]:
                first = blocks[0]
                assert isinstance(block, BSARecBlock) and isinstance(first, BSARecBlock)  # make_block's
                block.filter.sqrt_beta.copy_(first.filter.sqrt_beta)

    def make_block(self, cfg: AttentionConfig) -> BSARecBlock:
        assert isinstance(cfg, BSARecConfig)
        return BSARecBlock(cfg)

    def mask_bias(self, tokens: torch.Tensor) -> AttentionMask:
        """The dense causal key-padding mask (``compact=False``): the filter mixes the outputs of padded positions
        into real ones, so padded queries must attend exactly as over the (B, 1, L, L) mask (``AttentionMask``)."""
        return causal_mask_bias(tokens, key_padding=self.key_padding, compact=False)

    def full_window(self) -> bool:
        """Always: the low-pass filter sees the whole padded window (spec §2). With the key-padding mask (the
        default) the dropped padding keys have weight 0, so the trimmed records rebuild every real position."""
        return True
