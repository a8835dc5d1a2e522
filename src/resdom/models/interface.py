"""The interface diagnostics use, and the only one they use (STYLE: TransformerLens-like named internals).

A model is diagnosable when it has:

- ``n_items`` (int) and ``max_len`` (int);
- ``encode(items) -> hidden``: items int64 (B, L), left-padded with 0 (last item at column L-1, so the
  prediction for the next item is read at column L-1 and "position L-k" is column L-1-k);
  hidden float (B, L, d), the final output states; the states at real positions must not depend on L
  (evaluation and the diagnostics call it at many widths: batches of similar length, each trimmed to its longest);
- ``item_embeddings() -> (n_items + 1, d)``: scores are ``hidden @ item_embeddings().T``; row 0 is padding;
- ``attention_blocks() -> Sequence[block]``, where each block has a float attribute ``alpha`` (the residual
  scale of its attention sub-layer, honoured in eval mode) and an attribute ``recording`` which is either
  None or a list that the block appends one ``BlockRecord`` to per forward pass. A model without attention
  (GRU4Rec) returns no blocks: the mixing ratio and the residual-scaling sweep do not apply to it.

Optional: ``readout(hidden, items) -> states`` (B, L, d), the prediction states: column c is the prediction
after the prefix that ends at column c. Without it the prediction states are ``hidden`` itself (the last output
state); resdom's remedies (docs/remedies.md) read the mean of the last k states or an attention pooling
instead. Evaluation, every diagnostic and the training objectives read predictions only through
``prediction_states`` / ``final_states`` below, never a column of ``encode`` directly.

Optional: ``readout_width() -> k`` with ``encode(items, last=k)``: the prediction at column L-1 reads only the
last k columns of ``encode`` (0: all), and ``encode`` can compute just those (``last_prediction_states`` asks
for them).

Optional: ``block_tokens(items) -> tokens`` (B, L'), the token ids of the positions its blocks see and record,
when the model adds tokens of its own (BERT4Rec appends ``[MASK]``: L' = L + 1, and ``encode`` returns the
states of the last L of them, so column L-1 is the [MASK] position where the prediction is read and column
L-1-k sits on the k-th most recent input item). Without it the blocks see ``items`` itself (``block_tokens``
below).

``recording(model)`` and ``residual_scale(model, alpha)`` below are the two ways diagnostics touch a model.
See docs/adapters.md for wrapping a model written outside resdom.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import torch

from resdom.checks import residual_scales
from resdom.models.block import BlockRecord


@runtime_checkable
class Diagnosable(Protocol):
    n_items: int
    max_len: int

    def encode(self, items: torch.Tensor) -> torch.Tensor: ...

    def item_embeddings(self) -> torch.Tensor: ...

    def attention_blocks(self) -> Sequence[Any]: ...


def block_tokens(model: Diagnosable, items: torch.Tensor) -> torch.Tensor:
    """The token ids (B, L') of the positions ``model``'s blocks see (and record) for the input ``items`` (B, L)."""
    fn = getattr(model, "block_tokens", None)
    return items if fn is None else fn(items)


def block_width(model: Diagnosable) -> int:
    """The most positions a block record of ``model`` covers: the width of ``block_tokens`` of a full window."""
    return int(block_tokens(model, torch.ones(1, model.max_len, dtype=torch.int64)).shape[1])


def state_tokens(model: Diagnosable, items: torch.Tensor) -> torch.Tensor:
    """(B, L): the token each column of ``encode(items)`` sits on (the last L of ``block_tokens``); 0 = padding."""
    return block_tokens(model, items)[:, -items.shape[1] :]


def prediction_states(model: Diagnosable, hidden: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """hidden = ``model.encode(items)`` (B, L, d) -> the prediction states (B, L, d): the model's ``readout``, else
    ``hidden`` itself. Column L-1 is the prediction for the item after ``items``; column L-1-k the readout of the
    prefix that ends k items earlier (miss recovery)."""
    fn = getattr(model, "readout", None)
    return hidden if fn is None else fn(hidden, items)


def last_prediction_states(model: Diagnosable, items: torch.Tensor, n: int = 1) -> torch.Tensor:
    """items (B, L) left-padded -> ``prediction_states`` (B, L, d), exact in the last ``n`` columns: a model with
    ``readout_width`` encodes only the columns those read (the rest are not meant to be read)."""
    width = getattr(model, "readout_width", None)
    k = 0 if width is None else width()
    encode: Callable[..., torch.Tensor] = model.encode  # with readout_width, also encode(items, last)
    hidden = encode(items) if k == 0 else encode(items, n + k - 1)
    return prediction_states(model, hidden, items)


def prefix_needs_own_pass(model: Diagnosable) -> bool:
    """Whether ``model``'s prediction for a prefix of its input is read from that prefix encoded alone, not from a
    column of the whole input's states: a learned query token appended after the input (``readout="query"``)
    gives the prediction only where it stands, after the last item, so the prediction after the prefix that ends
    k items earlier is ``final_states`` of that prefix (the item columns hold raw encoder states)."""
    return bool(getattr(getattr(model, "readout_part", None), "query_token", False))


def final_states(model: Diagnosable, items: torch.Tensor) -> torch.Tensor:
    """items (B, L) left-padded -> (B, d): the prediction for the next item (column L-1 of the prediction
    states of ``encode(items)``)."""
    return last_prediction_states(model, items)[:, -1]


def trained_scale(block: Any) -> float | torch.Tensor:
    """The residual scale a block was trained with: ``base_scale()`` (a float, or a detached 0-d / (d,) tensor
    for a learned gate); 1.0 for a block without one (an adapter's)."""
    fn = getattr(block, "base_scale", None)
    scale = 1.0 if fn is None else fn()
    if isinstance(scale, torch.Tensor):
        return float(scale.detach()) if scale.dim() == 0 else scale.detach()
    return float(scale)


class _Handed(list):
    """A block's ``recording`` list that keeps nothing: each appended record goes to ``sink(layer, record)``."""

    def __init__(self, layer: int, sink: Callable[[int, BlockRecord], None]) -> None:
        super().__init__()
        self.layer, self.sink = layer, sink

    def append(self, record: BlockRecord) -> None:
        self.sink(self.layer, record)


@contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """``model`` in eval mode inside (no dropout), each of its modules' train/eval mode as it was on exit: a model
    whose caller had put some modules in eval mode (frozen dropout or normalisation while fine-tuning) came back
    from an evaluation or a diagnosis with every module in train mode (``model.train(True)``)."""
    modules = list(model.modules()) if hasattr(model, "modules") else []
    modes = [m.training for m in modules]
    was_training = bool(getattr(model, "training", False))
    if hasattr(model, "eval"):
        model.eval()
    try:
        yield
    finally:
        if hasattr(model, "train"):
            model.train(was_training)
        for module, mode in zip(modules, modes):
            module.training = mode


@contextmanager
def recording(model: Diagnosable, weights: bool = True,
              sink: Callable[[int, BlockRecord], None] | None = None) -> Iterator[list[list[BlockRecord]]]:
    """Record every attention block while inside: ``store[layer]`` gets one BlockRecord per forward pass.

    ``weights=False`` asks for light records (``BlockRecord.attn_self`` instead of the (B, H, L, L) weights and the
    per-head values), enough for the norm-of-sums ratio; a block that cannot make them records in full.
    ``sink``: each record is handed to ``sink(layer, record)`` the moment its block makes it, during the forward
    pass, and ``store`` stays empty (no record outlives its consumer; a model that trims its records after the
    pass, ``SequentialRecommender.encode_tokens`` for a ``full_window`` model, hands them over untrimmed).
    On exit each block records as it did before (nested in another ``recording``: into the outer one's store).
    """
    blocks = list(model.attention_blocks())
    store: list[list[BlockRecord]] = [[] if sink is None else _Handed(n, sink) for n in range(len(blocks))]
    saved = [(getattr(block, "recording", None), getattr(block, "record_weights", None)) for block in blocks]
    for block, records in zip(blocks, store):
        block.recording = records
        if hasattr(block, "record_weights"):
            block.record_weights = weights
    try:
        yield store
    finally:  # as they were: an outer recording (a caller's, around a diagnosis of mixing) goes on recording
        for block, (kept, light) in zip(blocks, saved):
            block.recording = kept
            if light is not None:
                block.record_weights = light


@contextmanager
def residual_scale(model: Diagnosable, alpha: float, layers: Iterable[int] | None = None) -> Iterator[None]:
    """Set the inference-time residual scale to ``alpha`` in ``layers`` (default: all), restoring it on exit.

    ``alpha`` multiplies the scale the block was trained with (``trained_scale``: 1 for the base models, a < 1
    for ``AttentionConfig.residual_scale``, the learned gate for ``residual_gate``), so alpha = 1 is always the model
    as trained; the scale actually used is ``trained_scale(block) * alpha`` (what the BlockRecord holds).

    ``alpha`` follows the one rule of residual scales (``checks.residual_scales``: a number in [0, 1]); a ValueError
    for another, for a model without attention blocks (GRU4Rec) at an alpha other than 1 (nothing would be scaled,
    and every number read inside would be the unscaled model's), and for ``layers`` that name no block, or one
    that is not an integer or out of range."""
    try:
        (alpha,) = residual_scales((alpha,))
    except ValueError as e:
        raise ValueError(f"alpha: {e}") from None
    blocks = list(model.attention_blocks())
    if not blocks and alpha != 1.0:
        raise ValueError(f"alpha {alpha:g}: the model has no attention blocks whose residual could be scaled "
                         "(e.g. GRU4Rec); only alpha 1 applies to it")
    chosen = range(len(blocks)) if layers is None else list(layers)
    if layers is not None and not chosen:
        raise ValueError("layers: name at least one attention block (None: every block)")
    for i in chosen:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise ValueError(f"layers: a block is named by an integer (got {i!r})")
        if not 0 <= i < len(blocks):
            raise ValueError(f"layer {i} out of range: the model has {len(blocks)} attention blocks")
    saved = [b.alpha for b in blocks]
    try:
        for i in chosen:
            blocks[i].alpha = float(alpha)
        yield
    finally:
        for b, a in zip(blocks, saved):
            b.alpha = a
