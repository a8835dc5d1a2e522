"""Batches of evaluation examples, shared by evaluation and diagnostics."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from resdom.data.sequences import EvalSet


def iter_eval_batches(
    evalset: EvalSet, max_len: int, batch_size: int, device: str | torch.device = "cpu",
    index: np.ndarray | None = None,
) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
    """Yield (example indices (B,), items int64 (B, L) left-padded, targets int64 (B,)) over ``evalset``.

    Inputs are the last ``max_len`` items, L trimmed to the longest in the batch. ``index`` restricts to a
    subset (e.g. this rank's shard), in that order.
    """
    order = np.arange(len(evalset), dtype=np.int64) if index is None else np.asarray(index, dtype=np.int64)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        items = torch.from_numpy(evalset.inputs.padded(max_len, idx)).to(device)
        targets = torch.from_numpy(evalset.targets[idx]).to(device)
        yield idx, items, targets
