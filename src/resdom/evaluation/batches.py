"""Batches of evaluation examples, shared by evaluation and diagnostics.

``iter_eval_batches(..., by_length=True)`` (what evaluation and every diagnostic use) feeds the users longest
window first, so that each batch holds users of similar length and is left-padded only to its own longest
window: most of a batch of mixed lengths is padding otherwise. Every user's inputs, and so every per-user
result, are those of any other batching (a user's states do not depend on the batch width, see
``SequentialRecommender.encode``); callers put their per-user rows back in user order with ``in_user_order``.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch

from resdom.data.sequences import EvalSet, Sequences, ranges

Rows = TypeVar("Rows", np.ndarray, torch.Tensor)
T = TypeVar("T")
PROGRESS_LINE_S = 30.0  # in a log (no terminal), a progress line at most this often (training's epochs too)
ACTIVATION_BUDGET = 128_000_000  # floats of the largest tensor of one batch's forward pass: 512 MB in float32


def activation_chunk(model: object, lengths: np.ndarray, requested: int, budget: int | None = None) -> int:
    """Largest user chunk <= ``requested`` whose forward pass keeps its largest tensors within ``budget`` floats:
    the FFN's (B, L, inner) and the attention weights (B, heads, L, L), L the longest window of inputs of
    ``lengths`` (the model's ``max_len`` where it sees the whole window, ``full_window()``, or an input is empty:
    ``iter_eval_batches`` gives its batch the whole window). A user's states and
    every per-user result do not depend on the chunk; 256 users at max length 1,000 held 2 GB of attention
    weights a block (and d 1,024 a 1 GB FFN tensor), each batch. The registered data sets' models are far inside
    (256 users at max length 200, 4 heads: 41M floats), so their chunks are those asked for. ``budget``: None
    for ``ACTIVATION_BUDGET``."""
    budget = ACTIVATION_BUDGET if budget is None else budget
    cfg = getattr(model, "cfg", None)
    hidden = int(getattr(cfg, "hidden", 0) or 0)
    inner = int(getattr(cfg, "inner", 0) or 4 * hidden)
    heads = int(getattr(cfg, "heads", 1) or 1)
    max_len = int(getattr(model, "max_len", 1))
    full = getattr(model, "full_window", None)
    lengths = np.asarray(lengths)
    whole = (callable(full) and full()) or bool((lengths == 0).any())  # an empty input's batch is max_len wide
    width = max_len if whole else min(max_len, int(np.max(lengths, initial=1)))
    width = max(1, width)
    per_user = width * max(inner, hidden, heads * width, 1)
    return max(1, min(requested, budget // per_user))


def history_pairs(inputs: Sequences, idx: np.ndarray, device: str | torch.device = "cpu"
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, items) int64: every item of each selected user's whole input with its row in ``idx`` (0..B-1), the
    seen items that filtering removes (``ranking.Seen``). Memory: the batch's interactions; the (B, longest
    history) matrix it replaces held 2 GB for 256 users beside one of a million events."""
    starts = inputs.offsets[idx]
    lengths = inputs.offsets[np.asarray(idx) + 1] - starts
    rows = np.repeat(np.arange(len(idx), dtype=np.int64), lengths)
    items = inputs.items[ranges(starts, lengths)].astype(np.int64, copy=False)
    return torch.from_numpy(rows).to(device), torch.from_numpy(items).to(device)


def with_progress(batches: Iterable[T], total: int, progress: bool, desc: str, unit: str = "user",
                  size: Callable[[T], int] | None = None, clock: Callable[[], float] | None = None,
                  every: float | None = None) -> Iterator[T]:
    """``batches`` with progress where ``progress``, counted in ``unit`` (``size(batch)`` of them a batch; None: 1),
    ``total`` in all: on a terminal a tqdm bar; in a log (stderr is no terminal: nohup, a batch scheduler) a plain
    line at most every ``every`` seconds of ``clock`` (None: ``PROGRESS_LINE_S``, ``time.monotonic``), such as
    "recommend: 40,000/100,000 users (40%), 12 s", and a last one at the end where one was printed. Otherwise the
    batches as they are (no tqdm imported: a hidden bar starts tqdm's monitor thread, never stopped). The one
    helper of every long loop of evaluation, the diagnostics, recommend and similar: a log saw nothing of them
    until the end."""
    stream = sys.stderr
    if not progress or total < 2 or stream is None:
        return iter(batches)
    count = size if size is not None else _one
    if _terminal(stream):
        return _bar(batches, total, desc, unit, count)
    return _lines(batches, total, desc, unit, count, clock or time.monotonic,
                  PROGRESS_LINE_S if every is None else every)


def share(desc: str, n: int, rank: int, world: int) -> str:
    """``desc`` of a loop over this rank's users ``rank::world`` of ``n`` (evaluation and the diagnostics under
    torchrun): rank 0 alone shows progress, and its count is of its own share, so the line says so ("evaluate
    [rank 0 of 2, 30 of 60 users]: 15/30 users (50%)"), where it read as all the users. One process: ``desc``."""
    if world <= 1:
        return desc
    return f"{desc} [rank {rank} of {world}, {len(range(rank, n, world)):,} of {n:,} users]"


def _one(batch: object) -> int:
    return 1


def _terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _bar(batches: Iterable[T], total: int, desc: str, unit: str, size: Callable[[T], int]) -> Iterator[T]:
    with progress_bar(total=total, desc=desc, unit=unit, leave=False) as bar:
        for batch in batches:
            yield batch
            bar.update(size(batch))  # the batch's work is done when the next one is asked for


def _lines(batches: Iterable[T], total: int, desc: str, unit: str, size: Callable[[T], int],
           clock: Callable[[], float], every: float) -> Iterator[T]:
    start = said = clock()
    done, printed = 0, False
    for batch in batches:
        yield batch
        done += size(batch)
        now = clock()
        if now - said >= every and done < total:
            printed = _say(_line(desc, done, total, unit, now - start)) or printed
            said = now
    if printed:  # the log shows the loop finished, and in how long
        _say(_line(desc, done, total, unit, clock() - start))


def _line(desc: str, done: int, total: int, unit: str, seconds: float) -> str:
    return f"{desc}: {done:,}/{total:,} {unit}s ({100 * done // max(total, 1)}%), {seconds:.0f} s"


def _say(line: str) -> bool:
    """``line`` on stderr, now; a stderr that is gone (closed, a broken pipe) stops no computation."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        return False
    return True


def progress_bar(iterable: Any = None, **options: Any) -> Any:
    """A ``tqdm.auto`` bar that starts no monitor thread: every bar of resdom (training's, evaluation's, the
    diagnostics'). tqdm's monitor (it redraws a bar stalled between two updates) is a thread of the process that
    tqdm never stops once started (4.70 no longer stops it with the last bar), so a fit or a diagnosis with bars on a
    terminal left a ``tqdm_monitor`` thread running in the caller's process."""
    return _bar_class()(iterable, **options)


@functools.cache
def _bar_class() -> Any:
    from tqdm.auto import tqdm

    class Bar(tqdm):  # type: ignore[misc, valid-type]
        monitor_interval = 0

    return Bar


def length_order(evalset: EvalSet, max_len: int, index: np.ndarray) -> np.ndarray:
    """``index`` (n,) reordered by the length of each user's window ``min(len, max_len)``, longest first; users of
    the same length keep their order (a stable sort)."""
    lengths = np.minimum(evalset.inputs.lengths[index], max_len)
    return index[np.argsort(-lengths, kind="stable")]


def iter_eval_batches(
    evalset: EvalSet, max_len: int, batch_size: int, device: str | torch.device = "cpu",
    index: np.ndarray | None = None, by_length: bool = False,
) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
    """Yield (example indices (B,), items int64 (B, L) left-padded, targets int64 (B,)) over ``evalset``.

    Inputs are the last ``max_len`` items, L trimmed to the longest in the batch; a batch with an empty input is
    ``max_len`` wide, since the state of an input of padding alone depends on the width (its attention spreads
    over the padded keys), and so would depend on which users share its batch. ``index`` restricts to a
    subset (e.g. this rank's shard), in that order; ``by_length``: in ``length_order`` instead (similar lengths
    together, the narrowest batches), so the example indices yielded are that permutation of ``index``.
    """
    order = np.arange(len(evalset), dtype=np.int64) if index is None else np.asarray(index, dtype=np.int64)
    if by_length:
        order = length_order(evalset, max_len, order)
    lengths = evalset.inputs.lengths
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        padded = evalset.inputs.padded(max_len, idx)
        if padded.shape[1] < max_len and (lengths[idx] == 0).any():  # an empty input: the full window (below)
            padded = np.pad(padded, ((0, 0), (max_len - padded.shape[1], 0)))
        targets = torch.from_numpy(evalset.targets[idx]).to(device)
        yield idx, torch.from_numpy(padded).to(device), targets


def in_user_order(rows: Rows, idx: np.ndarray) -> Rows:
    """rows (n, ...) of the examples ``idx`` (n,) (the example indices batches yielded, concatenated) -> the same
    rows by increasing example index: the order of an ascending ``index`` (every caller's: all users, or one
    rank's ``r::W``), whatever order the batches came in."""
    order = np.argsort(np.asarray(idx, dtype=np.int64), kind="stable")
    if isinstance(rows, torch.Tensor):
        return rows[torch.from_numpy(order).to(rows.device)]
    return rows[order]
