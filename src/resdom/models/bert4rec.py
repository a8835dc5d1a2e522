"""BERT4Rec (Sun et al., CIKM 2019) as in the reference paper's code base, time-to-split (spec §7).

time-to-split's ``BERT4Rec`` feeds an item embedding (N(0, 0.02), padding row zero) as ``inputs_embeds`` to a
Hugging Face ``BertModel`` and ties the output head to that embedding. The HF encoder, written out::

    X0 = Dropout(LN(E[token] + P[pos] + T_0))        # T_0: BERT's token-type embedding of type 0; LN eps 1e-12
    per layer (post-LN, as resdom's AttentionBlock):
      A  = MHA(X)                                     # bidirectional: every real key, padded keys masked
      H1 = LN(alpha * X + Dropout(A))                 # BertSelfOutput (alpha = 1 when training)
      X' = LN(H1 + Dropout(W_2 GELU(W_1 H1)))         # BertIntermediate + BertOutput: inner 2d, exact GELU

Dropout: hidden 0.5 (its grid), attention probabilities 0.1 (BertConfig's default: time-to-split does not set
``attention_probs_dropout_prob``). Learned positions, counted from the first real token.

Tokens: 0 = padding, 1..N = items, N + 1 = ``[MASK]``, an extra embedding row that is never ranked
(``item_embeddings()`` holds rows 0..N only). time-to-split instead shifts item ids up by one and uses id 1 as
the mask, and its CE runs over its whole vocabulary (padding and mask included); resdom's runs over the real
items, as every other objective.

Training (objective ``mlm``, sample layout ``window``): one sample per user, its last ``max_len`` training
items; ``training_states`` replaces each real position by ``[MASK]`` with probability ``mask_prob`` (0.2),
drawn from torch's generator (which the trainer seeds per epoch and rank, so a resumed run masks as the
uninterrupted one), and keeps labels at the masked positions only; CE over items 1..N there, the mean over the
batch's masked positions (a sample with nothing masked adds nothing). The masked batch is encoded in the trainer's
length groups (``encode_groups``: rows of similar length, each group cut to its longest row), the same states at
every real position as one pass over the padded batch, for about a third of the work on beauty-ts.

Prediction: the last ``max_len - 1`` input items, then ``[MASK]``; scores are read at ``[MASK]``. So this
model's ``max_len`` (the items evaluation and diagnostics feed it) is ``cfg.max_len - 1``; ``encode`` appends
``[MASK]`` and returns the states of the last L of its L + 1 positions: column L-1 is ``[MASK]`` (the
prediction), column L-1-k sits on the k-th most recent input item. The "last input item" (HRLI) is the one just
before ``[MASK]``. Block records cover all L + 1 positions (``block_tokens``).

Padding: resdom's inputs are left-padded. Positions count from the first real token (``positions =
"from_start"``) and padded keys are masked, so every real position's state is the one the right-padded original
computes (padding only moves to other columns, and no query attends to it).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from resdom.models.base import SequentialRecommender, TrainBatch
from resdom.models.block import AttentionMask, padding_mask_bias
from resdom.models.config import BERT4RecConfig


class BERT4Rec(SequentialRecommender):
    """Bidirectional post-LN encoder trained by masked-item CE, read at an appended ``[MASK]``."""

    name: ClassVar[str] = "bert4rec"
    default_objective: ClassVar[str] = "mlm"
    causal: ClassVar[bool] = False
    noncausal_reason: ClassVar[str] = (
        "its attention is bidirectional, so every position sees the later items of its input, including the very "
        "item it must predict (label leakage)")
    cfg: BERT4RecConfig
    train_layouts: ClassVar[tuple[str, ...]] = ("window", "last")

    def __init__(self, cfg: BERT4RecConfig) -> None:
        super().__init__(cfg)
        self.mask_id = cfg.n_items + 1
        self.max_len = cfg.max_len - 1  # input items; the [MASK] takes the last of cfg.max_len positions
        self.item_emb = nn.Embedding(cfg.n_items + 2, cfg.hidden, padding_idx=0)  # row N + 1: [MASK]
        self.token_type = nn.Parameter(torch.empty(cfg.hidden))  # BERT's token-type embedding of type 0
        with torch.no_grad():
            nn.init.normal_(self.item_emb.weight, 0.0, cfg.init_std)
            self.item_emb.weight[0].zero_()
            nn.init.normal_(self.token_type, 0.0, cfg.init_std)
        for block in self.layer_blocks():
            block.causal = False

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, L) -> Dropout(LN(E[token] + P[pos] + T_0)) (B, L, d) (``cfg.embedding`` picks the order)."""
        e = self.item_emb(tokens)
        if self.cfg.emb_scale:
            e = e * self.cfg.hidden**0.5
        return self.input_norm(e + self.pos_emb(self.position_ids(tokens)) + self.token_type)

    def mask_bias(self, tokens: torch.Tensor) -> AttentionMask:
        return padding_mask_bias(tokens)

    def block_tokens(self, items: torch.Tensor) -> torch.Tensor:
        """items (B, L) left-padded -> (B, L + 1): the items, then ``[MASK]`` (where the prediction is read)."""
        mask = torch.full((items.shape[0], 1), self.mask_id, dtype=items.dtype, device=items.device)
        return torch.cat([items, mask], dim=1)

    def encode(self, items: torch.Tensor, last: int = 0) -> torch.Tensor:
        """items (B, L) left-padded, L <= max_len -> (B, L, d): the states of the last L of the L + 1 positions of
        ``items`` + ``[MASK]``; column L-1 is ``[MASK]``. Longer inputs keep their last ``max_len`` items.
        ``last``: as in ``SequentialRecommender.encode``."""
        if items.shape[1] > self.max_len:
            items = items[:, -self.max_len :]
        return self.encode_tokens(self.block_tokens(items), min(last, items.shape[1]))[:, 1:]

    def item_embeddings(self) -> torch.Tensor:
        """(n_items + 1, d): rows 0..N of the tied embedding; the [MASK] row is never ranked."""
        return self.item_emb.weight[: self.n_items + 1]

    def mask_items(self, items: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """items (B, L) -> (input tokens, labels) (B, L): every real position becomes ``[MASK]`` with probability
        ``mask_prob``; labels hold ``labels`` there and 0 (no target) everywhere else."""
        real = items > 0
        masked = real & (torch.rand(items.shape, device=items.device) < self.cfg.mask_prob)
        tokens = torch.where(masked, torch.full_like(items, self.mask_id), items)
        return tokens, torch.where(masked, labels, torch.zeros_like(labels))

    def training_states(self, batch: TrainBatch) -> tuple[TrainBatch, torch.Tensor]:
        """Layout ``window`` (``mlm``): mask the window, encode it as it is (no appended [MASK]), labels at the
        masked positions. Layout ``last`` (``ce_last``): the prefix with [MASK] appended, read there."""
        if batch.targets.dim() == 1:
            return batch, self.encode(batch.items, self.readout_width())
        tokens, labels = self.mask_items(batch.items, batch.targets)
        return TrainBatch(tokens, labels), self.encode_batch(tokens)  # in the trainer's length groups

    def exact_length_groups(self) -> bool:
        """False: the masked-item loss is a mean over masked positions, which the trainer's group weights (real
        targets per group) do not count."""
        return False
