"""Shared parts of the causal self-attention recommenders: embeddings, tied output, the encoder stack."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
from torch import nn

from resdom.models.block import BLOCKS, AttentionBlock, AttentionMask, Dropout, causal_mask_bias, trim_record
from resdom.models.config import AttentionConfig, CausalConfig


@dataclass
class TrainBatch:
    """One training batch. All tensors int64, inputs left-padded with 0.

    items:     (B, L) input sequences.
    targets:   (B, L) next item at each position (0 = no target) for ``ce_all`` / ``bce``;
               (B,) the item after the sequence for ``ce_last``.
    negatives: same shape as targets, one sampled negative per target (``bce`` only).
    sup_items: (B, L2) for DuoRec's supervised view: another training input with the same target.
    """

    items: torch.Tensor
    targets: torch.Tensor
    negatives: torch.Tensor | None = None
    sup_items: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> TrainBatch:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=True)

        return TrainBatch(move(self.items), move(self.targets),
                          None if self.negatives is None else move(self.negatives),
                          None if self.sup_items is None else move(self.sup_items))


# ------------------------------------------------------------------------------------------ parts chosen by type
# Each part is chosen once, when the model is built, from its configuration; the forward pass calls the part.


def positions_from_end(items: torch.Tensor, capacity: int) -> torch.Tensor:
    """BSARec's left padding: the last column is position ``capacity - 1``, whatever the batch width (B, L)."""
    L = items.shape[1]
    return (torch.arange(L, device=items.device) + (capacity - L)).expand_as(items)


def positions_from_end_pad0(items: torch.Tensor, capacity: int) -> torch.Tensor:
    """pmixer's SASRec.pytorch: the last column is position ``capacity``, padding is position 0 (B, L)."""
    L = items.shape[1]
    return (torch.arange(L, device=items.device) + (capacity - L) + 1) * (items > 0)


def positions_from_start(items: torch.Tensor, capacity: int) -> torch.Tensor:
    """Right padding's positions: the first real item is position 0, padding 0 too (B, L)."""
    L = items.shape[1]
    lengths = (items > 0).sum(1, keepdim=True)
    return (torch.arange(L, device=items.device)[None, :] - (L - lengths)).clamp(min=0)


# ``AttentionConfig.positions`` -> (position ids of a left-padded batch, extra rows of the position table)
POSITIONS: dict[str, tuple[Callable[[torch.Tensor, int], torch.Tensor], int]] = {
    "from_end": (positions_from_end, 0), "from_end_pad0": (positions_from_end_pad0, 1),
    "from_start": (positions_from_start, 0),
}
# ``AttentionConfig.embedding`` -> the input's LayerNorm and dropout on E + P: f(ln, dropout, x)
InputNorm = Callable[[nn.Module, nn.Module, torch.Tensor], torch.Tensor]


def ln_then_dropout(ln: nn.Module, drop: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return drop(ln(x))


def dropout_then_ln(ln: nn.Module, drop: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return ln(drop(x))


def dropout_only(ln: nn.Module, drop: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return drop(x)


INPUT_NORMS: dict[str, InputNorm] = {"ln_dropout": ln_then_dropout, "dropout_ln": dropout_then_ln,
                                     "dropout": dropout_only}


class Readout:
    """The prediction state after each prefix (``CausalConfig.readout``, docs/remedies.md): here the state at the
    prefix's last column itself (``last``). ``width``: how many of the last columns of ``encode`` the prediction at
    column L-1 reads (0: all); ``query_token``: whether a learned query token is appended after the prefix."""

    width: int = 1
    query_token: bool = False

    def __call__(self, hidden: torch.Tensor, items: torch.Tensor, query: torch.Tensor | None) -> torch.Tensor:
        """hidden (B, L, d), items (B, L) left-padded, query (d,) or None -> prediction states (B, L, d)."""
        return hidden


class MeanReadout(Readout):
    """The mean of the states of the last ``k`` real positions <= c; a column with no real position at or before
    it keeps its own state."""

    def __init__(self, k: int) -> None:
        self.k = self.width = k

    def __call__(self, hidden: torch.Tensor, items: torch.Tensor, query: torch.Tensor | None) -> torch.Tensor:
        k = self.k
        w = (items > 0).to(hidden.dtype)[..., None]
        sums = (hidden * w).cumsum(1)
        counts = w.cumsum(1)
        if k < hidden.shape[1]:
            sums = torch.cat([sums[:, :k], sums[:, k:] - sums[:, :-k]], 1)
            counts = torch.cat([counts[:, :k], counts[:, k:] - counts[:, :-k]], 1)
        return torch.where(counts > 0, sums / counts.clamp_min(1.0), hidden)


class PoolReadout(Readout):
    """sum_j w_cj h_j over the real positions j <= c, ``w_c = softmax_j(q . h_j / sqrt(d))`` with q the model's
    learned ``readout_query``; a column with no real position at or before it keeps its own state."""

    width = 0

    def __call__(self, hidden: torch.Tensor, items: torch.Tensor, query: torch.Tensor | None) -> torch.Tensor:
        assert query is not None, "a pooling readout needs the model's readout_query"
        real = items > 0
        L = hidden.shape[1]
        allowed = real[:, None, :] & torch.ones(L, L, dtype=torch.bool, device=items.device).tril()[None]
        logits = (hidden @ query.to(hidden.dtype)) / math.sqrt(hidden.shape[-1])  # (B, L)
        logits = logits[:, None, :].expand(-1, L, -1).masked_fill(~allowed, torch.finfo(hidden.dtype).min)
        pooled = logits.softmax(-1) @ hidden  # (B, L, d)
        return torch.where(allowed.any(-1, keepdim=True), pooled, hidden)


class QueryReadout(Readout):
    """The state of a learned query token appended after the prefix: ``encode`` already returns it at column L-1."""

    query_token = True


def readout_part(cfg: AttentionConfig) -> Readout:
    """The readout ``cfg`` asks for (a model without a readout choice reads the last state)."""
    if not isinstance(cfg, CausalConfig):
        return Readout()
    if cfg.readout == "mean":
        return MeanReadout(cfg.readout_k)
    return {"last": Readout, "pool": PoolReadout, "query": QueryReadout}[cfg.readout]()


class SequentialRecommender(nn.Module):
    """Embeddings -> blocks -> (final LN). Subclasses may override ``make_block`` and ``auxiliary_loss``.

    A model carries its own traits, so that training and diagnostics never ask for a model by name:
    ``default_objective``; ``causal`` (False: a position's output sees later positions, so an all-position
    objective would leak labels; ``noncausal_reason`` says why); ``needs_partners()`` (batches need
    ``sup_items``); ``exact_length_groups()`` (a batch may be cut into length groups with the same update);
    ``train_layouts`` (the sample layouts of ``training.batches`` it can train from). Its fields are those of its
    configuration class (``models.config``); its reference code base's defaults and its presets are plain data in
    ``resdom.experiments`` (``model_defaults``), torch-free. The parts the configuration chooses (the block, the
    positions, the input norm, the readout, the output embeddings) are picked once, here. Hooks a model may
    override:
    ``training_states(batch)`` (its training inputs and states from a TrainBatch: BERT4Rec masks there),
    ``mask_bias(tokens)`` (the attention mask), ``block_tokens(items)`` (the tokens its blocks see and record,
    when it adds some: BERT4Rec's appended [MASK]).
    """

    name: ClassVar[str] = ""
    default_objective: ClassVar[str] = "ce_all"
    causal: ClassVar[bool] = True
    noncausal_reason: ClassVar[str] = ""
    train_layouts: ClassVar[tuple[str, ...]] = ("all", "last")

    def __init__(self, cfg: AttentionConfig) -> None:
        super().__init__()
        if cfg.n_items < 1:
            raise ValueError("ModelConfig.n_items must be set from the data (>= 1)")
        self.cfg = cfg
        self.n_items, self.max_len = cfg.n_items, cfg.max_len
        # the parts chosen by the configuration, once: positions, input norm, readout, output, key-padding mask
        self._positions, extra_rows = POSITIONS[cfg.positions]
        self._input_norm = INPUT_NORMS[cfg.embedding]
        self.readout_part = readout_part(cfg)
        causal = cfg if isinstance(cfg, CausalConfig) else None
        output = "tied" if causal is None else causal.output
        self.key_padding = True if causal is None else causal.key_padding_mask
        # readout="query": row N + 1 is the learned query token, appended after the input and never ranked
        self.query_id = cfg.n_items + 1 if self.readout_part.query_token else None
        if self.query_id is not None:
            self.max_len = cfg.max_len - 1  # input items; the query token takes the last of cfg.max_len positions
        self.item_emb = nn.Embedding(cfg.n_items + 1 + (self.query_id is not None), cfg.hidden, padding_idx=0)
        self.out_emb = nn.Embedding(cfg.n_items + 1, cfg.hidden, padding_idx=0) if output == "untied" else None
        self.out_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False) if output == "projected" else None
        self.pos_emb = nn.Embedding(cfg.max_len + extra_rows, cfg.hidden)
        self.emb_ln = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.emb_dropout = Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([self.make_block(cfg) for _ in range(cfg.layers)])
        final_eps = cfg.ln_eps if cfg.final_ln_eps is None else cfg.final_ln_eps
        self.final_ln = nn.LayerNorm(cfg.hidden, eps=final_eps) if cfg.final_ln else None
        # readout="pool": the one query vector of the attention pooling (zero: the pooling starts as a plain mean)
        self.readout_query = nn.Parameter(torch.zeros(cfg.hidden)) if isinstance(self.readout_part, PoolReadout) \
            else None
        self.apply(self._init_weights)
        for block in self.layer_blocks():
            block.reset_parameters()

    def make_block(self, cfg: AttentionConfig) -> AttentionBlock:
        """One layer: the block ``cfg.block`` names (``models.block.BLOCKS``)."""
        return BLOCKS[cfg.block](cfg)

    def layer_blocks(self) -> list[AttentionBlock]:
        """The layers, ``blocks``, as what ``make_block`` built them (an nn.ModuleList types its entries nn.Module)."""
        return cast("list[AttentionBlock]", list(self.blocks))

    def _init_weights(self, module: nn.Module) -> None:
        # spec §6: Linear and Embedding N(0, 0.02), biases 0, LayerNorm 1 / 0.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, self.cfg.init_std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None and not self.cfg.init_padding:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def position_ids(self, items: torch.Tensor) -> torch.Tensor:
        """(B, L) position ids for a left-padded batch (``AttentionConfig.positions``, chosen at construction)."""
        return self._positions(items, self.cfg.max_len)

    def embed(self, items: torch.Tensor) -> torch.Tensor:
        """items (B, L) -> input states (B, L, d)."""
        e = self.item_emb(items)
        if self.cfg.emb_scale:
            e = e * math.sqrt(self.cfg.hidden)
        return self.input_norm(e + self.pos_emb(self.position_ids(items)))

    def input_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The input's LayerNorm and dropout (``cfg.embedding``, chosen at construction) on E + P (B, L, d)."""
        return self._input_norm(self.emb_ln, self.emb_dropout, x)

    encode_groups: int = 1  # training passes in up to this many length groups (``encode``; set by the trainer)

    def full_window(self) -> bool:
        """True when outputs depend on padding, so inputs are left-padded to ``max_len`` before the blocks:
        without a key-padding mask padded keys are attended to; BSARec's filter sees the whole window."""
        return not self.key_padding

    def _empty_row_sees_the_window(self, items: torch.Tensor) -> bool:
        """Whether ``items`` holds a row of padding only (``ce_last``'s first prefix) whose state depends on the
        batch's width: it attends to all its padded keys alike, and with ``positions="from_end"`` each of them has
        a position of its own, so its state is that of the ``max_len`` window only where the window is run (with
        one position for all padding, or from the start, every width gives the same)."""
        return getattr(self.cfg, "positions", None) == "from_end" and items.shape[1] < self.cfg.max_len \
            and bool((items == 0).all(1).any())

    def encode(self, items: torch.Tensor, last: int = 0) -> torch.Tensor:
        """items int64 (B, L) left-padded, L <= max_len -> hidden states (B, L, d).

        Results do not depend on L (batch trimming): where ``full_window()``, the blocks run on the padded
        ``max_len`` window and the states and block records of the caller's L columns are returned. In training
        with ``encode_groups`` > 1 (set by the trainer where it cannot cut the batch itself: a batch-wide loss
        such as DuoRec's InfoNCE) the rows are encoded in groups of similar length (``encode_in_groups``).
        ``last`` > 0: only the states of the last ``last`` columns are computed, the same values (the final
        block runs its queries there only, ``AttentionBlock.forward``); the other columns are 0, unless the
        blocks record (records cover every position). For a caller that reads no other column
        (``readout_width``).
        """
        if self.query_id is not None:  # the states of the last L of the L + 1 positions: column L-1 is the query
            if items.shape[1] > self.max_len:
                items = items[:, -self.max_len:]
            return self.encode_tokens(self.block_tokens(items), min(last, items.shape[1]))[:, 1:]
        return self.encode_batch(items, last)

    def encode_batch(self, tokens: torch.Tensor, last: int = 0) -> torch.Tensor:
        """``encode_tokens(tokens, last)``, in ``encode_groups`` length groups where training asks for them (the same
        states at real positions; never on a full window, whose states depend on the padding)."""
        if self.training and self.encode_groups > 1 and not self.full_window() and tokens.shape[0] > 1:
            return self.encode_in_groups(tokens, self.encode_groups, last)
        return self.encode_tokens(tokens, last)

    def readout_width(self) -> int:
        """How many of the last columns of ``encode`` the prediction at column L-1 reads: 1 (``readout="last"``),
        ``readout_k`` (``mean``), 0 = all (``pool``). ``encode(items, last=readout_width())`` is enough for it."""
        return self.readout_part.width

    def encode_in_groups(self, items: torch.Tensor, groups: int, last: int = 0) -> torch.Tensor:
        """``encode_tokens`` per group of rows of similar length (rows sorted by length, cut into ``groups``
        equal parts), each cut to its own longest row: the same states at real positions, since the states do
        not depend on the width, for a fraction of the padded work. Padded positions carry no state anyone reads
        (0 left of a group's width)."""
        B, L = items.shape
        lengths = (items > 0).sum(1)
        order = torch.argsort(lengths, stable=True)
        parts = []
        for rows in torch.tensor_split(order, min(groups, B)):
            width = max(int(lengths[rows].max()), 1)
            parts.append(nn.functional.pad(self.encode_tokens(items[rows, -width:], last), (0, 0, L - width, 0)))
        return torch.cat(parts)[torch.argsort(order)]

    def mask_bias(self, tokens: torch.Tensor) -> AttentionMask:
        """The additive attention mask for the token ids ``tokens`` (B, L): causal (and key padding), in parts that
        broadcast (``block.AttentionMask``; its ``dense()`` is the (B, 1, L, L) tensor)."""
        return causal_mask_bias(tokens, key_padding=self.key_padding)

    def block_tokens(self, items: torch.Tensor) -> torch.Tensor:
        """The token ids (B, L') of the positions the blocks see (and record) for the input ``items`` (B, L):
        the items themselves, or (``readout="query"``) the items then the query token; BERT4Rec appends its
        [MASK]."""
        if self.query_id is None:
            return items
        query = torch.full((items.shape[0], 1), self.query_id, dtype=items.dtype, device=items.device)
        return torch.cat([items, query], dim=1)

    def encode_tokens(self, items: torch.Tensor, last: int = 0) -> torch.Tensor:
        """The encoder itself: token ids (B, L) left-padded, L <= cfg.max_len positions -> states (B, L, d)
        (``last`` > 0: only the last ``last`` columns computed; see ``encode``)."""
        capacity = self.cfg.max_len  # rows of the position table
        if items.shape[1] > capacity:
            items = items[:, -capacity:]
        width = items.shape[1]
        blocks = self.layer_blocks()
        recorded = [len(b.recording) if b.recording is not None else 0 for b in blocks]
        if self.full_window() or self._empty_row_sees_the_window(items):
            items = nn.functional.pad(items, (capacity - width, 0))
        mask_bias = self.mask_bias(items)
        h = self.embed(items)
        real = (items > 0).unsqueeze(-1).to(h.dtype) if self.cfg.zero_padding else None
        last = 0 if any(b.recording is not None for b in blocks) else min(last, width)  # records: all
        for n, block in enumerate(blocks):
            h = h if real is None else h * real
            h = block(h, mask_bias, last) if last and n == len(blocks) - 1 else block(h, mask_bias)
        if last:
            h, real = h[:, -last:], None if real is None else real[:, -last:]
        h = h if real is None else h * real
        h = self.final_ln(h) if self.final_ln is not None else h
        if last:
            return nn.functional.pad(h, (0, 0, width - last, 0))
        if items.shape[1] != width:
            for block, n in zip(blocks, recorded):
                if block.recording is not None:
                    block.recording[n:] = [trim_record(r, width) for r in block.recording[n:]]
        return h[:, -width:]

    def forward(self, items: torch.Tensor) -> torch.Tensor:
        return self.encode(items)

    def readout(self, hidden: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """hidden = encode(items) (B, L, d), items (B, L) left-padded -> prediction states (B, L, d).

        Column c is the prediction after the prefix that ends at column c (``cfg.readout``, docs/remedies.md):
        ``last`` the state at c itself (``hidden``, unchanged); ``mean`` the mean of the states of the last
        ``readout_k`` real positions <= c; ``pool`` sum_j w_cj h_j over the real positions j <= c, with
        ``w_c = softmax_j(q . h_j / sqrt(d))`` and q the learned ``readout_query``. A column with no real position
        at or before it (an empty prefix) keeps its own state.
        """
        return self.readout_part(hidden, items, self.readout_query)

    def item_embeddings(self) -> torch.Tensor:
        """(n_items + 1, d): the output layer; scores = hidden @ item_embeddings().T. ``cfg.output``: the input
        embeddings (tied), a table of their own (untied), or the input embeddings projected, ``E W^T``
        (projected); a query token's row is never ranked."""
        if self.out_emb is not None:
            return self.out_emb.weight
        emb = self.item_emb.weight[: self.n_items + 1]
        return emb if self.out_proj is None else self.out_proj(emb)

    def attention_blocks(self) -> Sequence[nn.Module]:
        return list(self.blocks)

    def training_states(self, batch: TrainBatch) -> tuple[TrainBatch, torch.Tensor]:
        """(the batch the objective scores, its states): what the model trains on, made from a TrainBatch of
        ``training.batches``. Here the batch itself and ``encode(batch.items)``; BERT4Rec masks the input."""
        last = self.readout_width() if batch.targets.dim() == 1 else 0  # layout "last": only column L-1 is read
        return batch, self.encode(batch.items, last)

    def auxiliary_loss(self, batch: TrainBatch, hidden: torch.Tensor) -> torch.Tensor | None:
        """Extra training loss beyond the objective (DuoRec's InfoNCE); hidden is encode(batch.items)."""
        return None

    def needs_partners(self) -> bool:
        """Whether training batches must carry ``sup_items`` (another training input with the same target)."""
        return False

    def exact_length_groups(self) -> bool:
        """Whether a batch's loss is the target-weighted mean of its length groups' losses: the model trims
        batches (not ``full_window``) and has no batch-wide auxiliary loss."""
        return not self.full_window() and type(self).auxiliary_loss is SequentialRecommender.auxiliary_loss
