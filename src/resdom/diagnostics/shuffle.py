"""Inference-time position shuffles (spec §4).

Perturbations act on the window the model reads (the last ``max_len`` items of each input):

- ``keep_last``: permute every real item except the last; ``full``: permute every real item;
- ``last_only``: keep only the last item; ``drop_last``: remove the last item (a one-item input becomes
  empty: the model's prediction from no history); ``reverse``: reverse the order.

Random permutations are seeded per user: the stream of user u under seed s is keyed by ``s + u`` (u from
``evalset.inputs.users``) and the item's position, through a counter-based hash (splitmix64), and the
window is sorted by those keys within each user. So a user's permutation depends only on (seed, user,
length), never on the batch size or the order of evaluation. Deterministic modes run once (std 0).

Metrics before and after use the same seen-item filter: the items of the user's original whole input (as
``resdom.evaluation.evaluate``), so only the model's input changes. Jaccard@10 compares the top-10 lists
(filtered when ``filter_seen``) before and after, per user, averaged. A list holds only items that can be
recommended (a finite score; ``evaluation.beyond.ordered_top``, equal scores by increasing id): a user with fewer
than 10 such items has a shorter list, never padding or a filtered-out item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics.common import (
    DEFAULT_BATCH,
    all_users,
    batches,
    check_model,
    inference,
    jsonable,
    ranks_of,
    scores_at,
    seen_items,
    window,
)
from resdom.evaluation.beyond import ordered_top
from resdom.evaluation.ranking import KS, metrics_from_ranks
from resdom.models.interface import Diagnosable, final_states
from resdom.records import SHUFFLE_MODES

if TYPE_CHECKING:
    import pandas as pd

MODES: tuple[str, ...] = SHUFFLE_MODES  # the perturbations, named in the record (resdom.records)
RANDOM_MODES = frozenset({"keep_last", "full"})
TOP = 10

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """Counter-based hash uint64 -> uint64 (splitmix64's finaliser), vectorised; arithmetic wraps mod 2^64."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def random_keys(users: np.ndarray, positions: np.ndarray, seed: int) -> np.ndarray:
    """uint64 keys, one per (user, position) pair, from the per-user stream ``seed + user``."""
    stream = _splitmix64((np.asarray(users, dtype=np.int64) + int(seed)).astype(np.uint64))
    return _splitmix64(stream ^ np.asarray(positions, dtype=np.int64).astype(np.uint64))


def perturb(inputs: Sequences, mode: str, seed: int = 0) -> Sequences:
    """The sequences perturbed by ``mode`` (one of MODES); users and order of sequences unchanged."""
    if mode not in MODES:
        raise ValueError(f"unknown shuffle mode {mode!r} (choose from {', '.join(MODES)})")
    users = inputs.users  # the random keys are per user
    lengths = inputs.lengths
    n = len(inputs)
    row = np.repeat(np.arange(n, dtype=np.int64), lengths)
    pos = np.arange(len(inputs.items), dtype=np.int64) - np.repeat(inputs.offsets[:-1], lengths)  # 0-based in row
    is_last = pos == np.repeat(lengths, lengths) - 1
    if mode in RANDOM_MODES:
        keys = random_keys(users[row], pos, seed)
        fixed = is_last if mode == "keep_last" else np.zeros_like(is_last)
        order = np.lexsort((keys, fixed, row))  # row first, then the kept last item last, then the key
        return Sequences(inputs.offsets.copy(), inputs.items[order], None, users.copy())
    if mode == "reverse":
        order = np.lexsort((-pos, row))
        return Sequences(inputs.offsets.copy(), inputs.items[order], None, users.copy())
    keep = is_last if mode == "last_only" else ~is_last
    new_len = np.minimum(lengths, 1) if mode == "last_only" else np.maximum(lengths - 1, 0)
    offsets = np.concatenate([[0], np.cumsum(new_len)]).astype(np.int64)
    return Sequences(offsets, inputs.items[keep], None, users.copy())


@dataclass
class ShuffleResult:
    """original: {metric: v}; perturbations[name] = {"metrics", "metrics_std", "relative_change", "jaccard@10"}."""

    seeds: list[int]
    filtered: bool
    original: dict[str, float]
    perturbations: dict[str, dict[str, Any]]
    n_users: int
    split: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"split": self.split, "n_users": self.n_users, "seeds": self.seeds, "filtered": self.filtered,
                         "original": self.original, "perturbations": self.perturbations})

    def to_frame(self) -> pd.DataFrame:
        """pandas DataFrame, one row per (perturbation, metric), "original" first: columns ``perturbation``,
        ``metric``, ``mean`` (over seeds), ``std``, ``relative_change`` ((p - o) / o), ``jaccard@10``."""
        import pandas as pd

        rows = [("original", m, v, 0.0, 0.0, 1.0) for m, v in self.original.items()]
        rows += [(name, m, v, p["metrics_std"][m], p["relative_change"][m], p["jaccard@10"])
                 for name, p in self.perturbations.items() for m, v in p["metrics"].items()]
        return pd.DataFrame(rows, columns=["perturbation", "metric", "mean", "std", "relative_change", "jaccard@10"])


def _ranks_and_top(
    model: Diagnosable, model_inputs: Sequences, evalset: EvalSet, filter_seen: bool, batch_size: int,
    device: str | torch.device | None, desc: str, progress: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(target ranks (n,), top-10 item ids (n, 10), 0 past a user's recommendable items) with ``model_inputs`` fed
    to the model in place of the originals; the seen filter uses the original inputs of ``evalset``."""
    fed = EvalSet(model_inputs, evalset.targets)
    ranks, tops, order = [], [], []
    for idx, items, targets in batches(model, fed, batch_size, device, desc, progress):
        seen = seen_items(evalset.inputs, idx, items.device) if filter_seen else None
        scores = scores_at(model, final_states(model, items), seen)
        ranks.append(ranks_of(scores, targets).cpu().numpy())
        tops.append(ordered_top(scores, TOP))
        order.append(idx)
    n, idx = len(evalset), np.concatenate(order)
    return all_users(np.concatenate(ranks), n, idx), all_users(np.concatenate(tops), n, idx)


def jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a, b int (n, k) top-k lists -> (n,) |A & B| / |A | B| per row (lists hold distinct items; 0 marks no item,
    as ``ordered_top`` pads a short list); two empty lists are the same list, 1."""
    inter = ((a[:, :, None] == b[:, None, :]) & (a[:, :, None] > 0)).sum((1, 2))
    union = (a > 0).sum(1) + (b > 0).sum(1) - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def position_shuffle(
    model: Diagnosable, evalset: EvalSet, modes: Sequence[str] = MODES, seeds: Sequence[int] = (0, 1, 2),
    filter_seen: bool = True, ks: tuple[int, ...] = KS, batch_size: int = DEFAULT_BATCH,
    device: str | torch.device | None = None, progress: bool = False,
) -> ShuffleResult:
    """Metrics of ``model`` on ``evalset`` with original and perturbed inputs (spec §4), means / std over seeds."""
    model = check_model(model)
    for m in modes:
        if m not in MODES:
            raise ValueError(f"unknown shuffle mode {m!r} (choose from {', '.join(MODES)})")
    if not seeds:
        raise ValueError("position_shuffle needs at least one seed")
    if len(evalset) == 0:
        raise ValueError("position_shuffle: empty evaluation set")
    base = window(evalset.inputs, model.max_len)
    with inference(model):
        r0, top0 = _ranks_and_top(model, base, evalset, filter_seen, batch_size, device, "shuffle: original", progress)
        original = metrics_from_ranks(torch.from_numpy(r0), ks)
        out: dict[str, dict[str, Any]] = {}
        for mode in modes:
            runs = []
            for seed in (seeds if mode in RANDOM_MODES else seeds[:1]):
                fed = perturb(base, mode, int(seed))
                r, top = _ranks_and_top(model, fed, evalset, filter_seen, batch_size, device,
                                        f"shuffle: {mode} seed {seed}", progress)
                runs.append((metrics_from_ranks(torch.from_numpy(r), ks), float(jaccard(top0, top).mean())))
            out[mode] = _summarise(original, runs)
    return ShuffleResult([int(s) for s in seeds], filter_seen, original, out, len(evalset))


def _summarise(original: dict[str, float], runs: list[tuple[dict[str, float], float]]) -> dict[str, Any]:
    names = list(original)
    vals = {m: np.array([r[0][m] for r in runs]) for m in names}
    mean = {m: float(v.mean()) for m, v in vals.items()}
    return {
        "metrics": mean,
        "metrics_std": {m: float(v.std()) for m, v in vals.items()},
        "relative_change": {m: (mean[m] - original[m]) / original[m] if original[m] else None for m in names},
        "jaccard@10": float(np.mean([r[1] for r in runs])),
        "n_seeds": len(runs),
    }
