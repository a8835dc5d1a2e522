"""The interface diagnostics use, and the only one they use (STYLE: TransformerLens-like named internals).

A model is diagnosable when it has:

- ``n_items`` (int) and ``max_len`` (int);
- ``encode(items) -> hidden``: items int64 (B, L), left-padded with 0 (last item at column L-1, so the
  prediction for the next item is read at column L-1 and "position L-k" is column L-1-k);
  hidden float (B, L, d), the final output states;
- ``item_embeddings() -> (n_items + 1, d)``: scores are ``hidden @ item_embeddings().T``; row 0 is padding;
- ``attention_blocks() -> Sequence[block]``, where each block has a float attribute ``alpha`` (the residual
  scale of its attention sub-layer, honoured in eval mode) and an attribute ``recording`` which is either
  None or a list that the block appends one ``BlockRecord`` to per forward pass.

``recording(model)`` and ``residual_scale(model, alpha)`` below are the two ways diagnostics touch a model.
See docs/adapters.md for wrapping a model written outside resdom.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import torch

from resdom.models.block import BlockRecord


@runtime_checkable
class Diagnosable(Protocol):
    n_items: int
    max_len: int

    def encode(self, items: torch.Tensor) -> torch.Tensor: ...

    def item_embeddings(self) -> torch.Tensor: ...

    def attention_blocks(self) -> Sequence[Any]: ...


@contextmanager
def recording(model: Diagnosable) -> Iterator[list[list[BlockRecord]]]:
    """Record every attention block while inside: ``store[layer]`` gets one BlockRecord per forward pass."""
    blocks = list(model.attention_blocks())
    store: list[list[BlockRecord]] = [[] for _ in blocks]
    for block, records in zip(blocks, store):
        block.recording = records
    try:
        yield store
    finally:
        for block in blocks:
            block.recording = None


@contextmanager
def residual_scale(model: Diagnosable, alpha: float, layers: Iterable[int] | None = None) -> Iterator[None]:
    """Set the attention residual scale to ``alpha`` in ``layers`` (default: all), restoring it on exit."""
    blocks = list(model.attention_blocks())
    chosen = range(len(blocks)) if layers is None else list(layers)
    for i in chosen:
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
