"""GRU4Rec (Hidasi et al., ICLR 2016) as in the reference paper's code base, time-to-split (spec §7).

time-to-split's ``GRU4Rec``: an item embedding (input size = hidden size, N(0, 0.02), padding row zero), an
``nn.GRU`` (batch first, unidirectional, its layers and dropout; PyTorch's own initialisation), and a head tied
to the embedding; trained with CE at every position (resdom's ``ce_all``), read at the last real position.
Defaults (its grid point 32): d 64, 1 layer, dropout 0.1 (``nn.GRU`` applies dropout between layers only, so
with one layer it does nothing, as there), max length 128.

Padding: time-to-split right-pads, so the GRU reads the real items first and padding only after them. resdom's
inputs are left-padded (last item at column L-1); ``encode`` right-aligns each row before the GRU and moves
the outputs back, so the state at every real position is the right-padded original's and depends only on
the items up to it. States at padded columns are 0 (an empty input predicts from a zero state).

No attention: ``attention_blocks()`` is empty, so the mixing ratio and the residual-scaling sweep do not apply
(the diagnostics refuse them in one line); HRLI, shuffles and recovery (alpha-free) do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn

from resdom.models.base import Readout, SequentialRecommender
from resdom.models.config import GRU4RecConfig


class GRU4Rec(SequentialRecommender):
    """Item embedding -> nn.GRU -> tied output. Shares the traits and training of SequentialRecommender, not its
    attention stack (its ``__init__`` builds only the embedding and the GRU)."""

    name: ClassVar[str] = "gru4rec"
    cfg: GRU4RecConfig  # type: ignore[assignment]  # not an attention configuration

    def __init__(self, cfg: GRU4RecConfig) -> None:
        nn.Module.__init__(self)  # not SequentialRecommender.__init__: no positions, no attention blocks
        if cfg.n_items < 1:
            raise ValueError("ModelConfig.n_items must be set from the data (>= 1)")
        self.cfg = cfg
        self.n_items, self.max_len = cfg.n_items, cfg.max_len
        self.item_emb = nn.Embedding(cfg.n_items + 1, cfg.hidden, padding_idx=0)
        self.query_id = self.out_emb = self.out_proj = None  # tied output, read at the last item (the base's hooks)
        self.readout_part, self.readout_query = Readout(), None
        self.gru = nn.GRU(cfg.hidden, cfg.hidden, num_layers=cfg.layers, batch_first=True,
                          dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        with torch.no_grad():
            nn.init.normal_(self.item_emb.weight, 0.0, cfg.init_std)
            self.item_emb.weight[0].zero_()

    def encode(self, items: torch.Tensor, last: int = 0) -> torch.Tensor:
        """items (B, L) left-padded -> (B, L, d): the GRU's output at each real position (0 at padding). ``last``
        changes nothing: the recurrence computes every earlier state anyway."""
        if items.shape[1] > self.max_len:
            items = items[:, -self.max_len :]
        B, L = items.shape
        if L == 0:
            return torch.zeros(B, 0, self.cfg.hidden, device=items.device)
        real = items > 0
        shift = (L - real.sum(1))[:, None]  # padded columns of each row
        cols = torch.arange(L, device=items.device)[None, :]
        right = items.gather(1, (cols + shift) % L)  # right-aligned: the real items first, padding after
        out, _ = self.gru(self.item_emb(right))
        back = ((cols - shift) % L)[..., None].expand(B, L, out.shape[-1])
        return out.gather(1, back) * real[..., None]

    def full_window(self) -> bool:
        return False

    def attention_blocks(self) -> Sequence[nn.Module]:
        return []
