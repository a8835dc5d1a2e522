"""Splits (spec §1): leave-one-out and the global temporal split (time-to-split, Gusak et al., RecSys 2025), and
``none``: nothing held out (fit on all data, to recommend; an optional small monitoring slice).

Both take full per-user sequences (oldest first) and return training sequences, validation and test
``EvalSet``s and a manifest fragment (thresholds, counts per part, dropped users). Every part keeps
``users`` (the user index into the full sequences, for per-user seeding) and ``times`` where present.

Thresholds: ``T = quantile q of all timestamps`` is taken as the order statistic at floor(q * (n - 1))
(numpy ``method="lower"``). Because parts are cut with ``t <= T`` ("ties at a threshold go to the earlier
side"), this gives exactly the same parts as pandas' default linear interpolation, which time-to-split uses,
and the threshold is a real timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from resdom.checks import arg
from resdom.data.sequences import EvalSet, Sequences, ranges, seq_counts, split_counts
from resdom.errors import ResdomError


@dataclass
class SplitParts:
    """train (Sequences), valid / test (EvalSet) and ``info``: the split's manifest fragment."""

    train: Sequences
    valid: EvalSet
    test: EvalSet
    info: dict[str, Any]


def heads(seqs: Sequences, lengths: np.ndarray) -> Sequences:
    """The first ``lengths[i]`` items (and times) of each sequence ``i``; ``lengths`` int (n,), 0 <= l <= len."""
    lengths = np.asarray(lengths, dtype=np.int64)
    flat = ranges(seqs.offsets[:-1], lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    times = seqs.times[flat] if seqs.times is not None else None
    return Sequences(offsets, seqs.items[flat], times, seqs.users.copy())


def last_items(seqs: Sequences) -> np.ndarray:
    """int64 (n,): the last item of each (non-empty) sequence."""
    return seqs.items[seqs.offsets[1:] - 1]


def split_loo(seqs: Sequences) -> SplitParts:
    """Leave-one-out (BSARec): train ``seq[:-2]``; valid input ``seq[:-2]`` target ``seq[-2]``; test input
    ``seq[:-1]`` target ``seq[-1]``. Users with fewer than 3 items are dropped (counted in ``info``)."""
    keep = np.flatnonzero(seqs.lengths >= 3)
    full = seqs.take(keep)
    n = full.lengths
    train = heads(full, n - 2)
    test_inputs = heads(full, n - 1)
    valid = EvalSet(train, full.items[full.offsets[:-1] + n - 2])
    test = EvalSet(test_inputs, last_items(full))
    info = {
        "protocol": "loo",
        "thresholds": None,
        "dropped_users": {"fewer_than_3_items": int(len(seqs) - len(keep))},
    }
    return SplitParts(train, valid, test, info)


def split_none(seqs: Sequences, holdout_users: int = 0, seed: int = 0) -> SplitParts:
    """Nothing held out (protocol ``none``: fit on everything, to recommend in production): train is every
    user's whole sequence; valid and test are empty, unless ``holdout_users`` > 0: then that many users (drawn
    with ``seed`` among those with 2 items or more; all of them where fewer) have their last item held out as a
    small validation slice (input ``seq[:-1]``, target ``seq[-1]``, their training sequence ``seq[:-1]``), on
    which training stops early and keeps its best epoch. Without it training runs ``epochs`` and keeps the last."""
    holdout_users = int(holdout_users)
    eligible = np.flatnonzero(seqs.lengths >= 2)
    if holdout_users > 0 and len(eligible) > holdout_users:
        chosen = np.sort(np.random.default_rng(seed).choice(eligible, size=holdout_users, replace=False))
    else:
        chosen = eligible if holdout_users > 0 else np.zeros(0, dtype=np.int64)
    lengths = seqs.lengths.copy()
    lengths[chosen] -= 1
    train = heads(seqs, lengths)
    held = seqs.take(chosen)
    valid = EvalSet(heads(held, held.lengths - 1), last_items(held) if len(held) else np.zeros(0, dtype=np.int64))
    empty = Sequences(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64),
                      None if seqs.times is None else seqs.times[:0], np.zeros(0, dtype=np.int64))
    info: dict[str, Any] = {"protocol": "none", "thresholds": None, "holdout_users": int(len(chosen)),
                            "holdout_seed": int(seed), "dropped_users": {}}
    return SplitParts(train, valid, EvalSet(empty, np.zeros(0, dtype=np.int64)), info)


def quantile_threshold(times: np.ndarray, q: float) -> int | float:
    """The q-quantile of ``times`` as a real timestamp (order statistic floor(q * (n - 1))): an int for integer
    times, a float for fractional ones (never rounded: the cut ``t <= T`` must see the very timestamp)."""
    if not 0.0 < q < 1.0:
        raise ResdomError(f"quantile must be strictly between 0 and 1, got {q}")
    if len(times) == 0:
        raise ResdomError("no timestamps to take a quantile of")
    return np.quantile(times, q, method="lower").item()


def _count_at_or_before(seqs: Sequences, threshold: int | float) -> np.ndarray:
    """int64 (n,): per sequence, how many interactions have time <= threshold (= a prefix, times sorted)."""
    assert seqs.times is not None  # time_split's sequences have times
    row_user = np.repeat(np.arange(len(seqs)), seqs.lengths)
    return np.bincount(row_user, weights=seqs.times <= threshold, minlength=len(seqs)).astype(np.int64)


def time_split(seqs: Sequences, q: float) -> tuple[int | float, Sequences, EvalSet, dict[str, int]]:
    """One time-to-split step on ``seqs`` (times sorted within each sequence).

    T = quantile q of all timestamps. Eval users: last interaction after T; target = last item, input = all
    earlier ones (also those after T); users whose input would be empty are dropped. Kept part: interactions
    at or before T of users whose second interaction is at or before T (>= 2 interactions, so trainable).
    Returns (T, kept part, eval set, counts of dropped users).
    """
    assert seqs.times is not None  # split_gts refuses sequences without times, and the kept part keeps them
    threshold = quantile_threshold(seqs.times, q)
    n = seqs.lengths
    last_time = seqs.times[seqs.offsets[1:] - 1]
    after = (n > 0) & (last_time > threshold)
    eval_idx = np.flatnonzero(after & (n >= 2))
    full = seqs.take(eval_idx)
    evalset = EvalSet(heads(full, full.lengths - 1), last_items(full))
    before = _count_at_or_before(seqs, threshold)
    keep_idx = np.flatnonzero(before >= 2)
    kept = heads(seqs.take(keep_idx), before[keep_idx])
    dropped = {
        "eval_users_with_one_interaction": int((after & (n < 2)).sum()),
        "users_with_fewer_than_2_before_threshold": int(((before < 2) & (n > 0)).sum()),
    }
    return threshold, kept, evalset, dropped


def split_gts(seqs: Sequences, quantile: float = 0.9, valid_quantile: float | None = None) -> SplitParts:
    """Global temporal split (spec §1): test by ``time_split(q)`` on all data; validation "by time" is the
    same rule inside the training pool with ``T_val`` = quantile of the pool's timestamps (``valid_quantile``,
    default ``quantile``); the model trains on the pool at or before ``T_val`` (users with >= 2 there)."""
    if seqs.times is None:
        raise ResdomError(f"the global temporal split needs timestamps; this source has none (use "
                          f"{arg('protocol', 'loo')})")
    _check_time_sorted(seqs)
    q_val = quantile if valid_quantile is None else valid_quantile
    t_test, pool, test, dropped_test = time_split(seqs, quantile)
    if len(pool) == 0:
        raise ResdomError(f"no user has 2 interactions at or before T_test = {_iso(t_test)}; raise the quantile")
    t_val, train, valid, dropped_val = time_split(pool, q_val)
    info = {
        "protocol": "gts",
        "quantile": quantile,
        "valid_quantile": q_val,
        "thresholds": {
            "T_test": t_test, "T_test_iso": _iso(t_test),
            "T_val": t_val, "T_val_iso": _iso(t_val),
            "rule": "order statistic floor(q*(n-1)) of all timestamps (same parts as pandas linear quantile); "
                    "ties at a threshold go to the earlier side (t <= T)",
        },
        "pool": seq_counts(pool),
        "dropped_users": {"test": dropped_test, "valid": dropped_val},
    }
    return SplitParts(train, valid, test, info)


def _check_time_sorted(seqs: Sequences) -> None:
    assert seqs.times is not None  # split_gts refused sequences without times
    same = np.ones(len(seqs.items), dtype=bool)  # same[j]: row j belongs to the same sequence as row j - 1
    starts = seqs.offsets[1:-1]
    same[starts[starts < len(same)]] = False
    bad = np.flatnonzero(same[1:] & (seqs.times[1:] < seqs.times[:-1]))
    if len(bad):
        raise ResdomError("the global temporal split needs each user's interactions in time order (sort_by_time)")


def _iso(ts: float) -> str:
    value = int(ts) if float(ts).is_integer() else float(ts)  # fractional seconds shown as such
    return datetime.fromtimestamp(value, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def part_counts(parts: SplitParts) -> dict[str, dict[str, int]]:
    """Counts of users / items / interactions per part (``sequences.split_counts``)."""
    return split_counts(parts.train, parts.valid, parts.test)
