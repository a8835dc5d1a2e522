"""Data set statistics (spec §1): users, items, interactions, average and max length, density, span in days."""

from __future__ import annotations

from typing import Any

import numpy as np

from resdom.data.sequences import Sequences

SECONDS_PER_DAY = 86400


def dataset_stats(seqs: Sequences) -> dict[str, Any]:
    """Statistics of full per-user sequences.

    users: non-empty sequences; items: distinct item ids present; interactions: total length;
    avg_length / max_length / min_length over those users; density = interactions / (users * items);
    span_days = (latest - earliest timestamp) / 86400 (float; None without timestamps).
    """
    lengths = seqs.lengths
    lengths = lengths[lengths > 0]
    users = int(len(lengths))
    items = int(len(np.unique(seqs.items)))
    interactions = int(lengths.sum())
    span = None
    if seqs.times is not None and len(seqs.times):
        span = float(seqs.times.max() - seqs.times.min()) / SECONDS_PER_DAY
    return {
        "users": users,
        "items": items,
        "interactions": interactions,
        "avg_length": interactions / users if users else 0.0,
        "max_length": int(lengths.max(initial=0)),
        "min_length": int(lengths.min()) if users else 0,
        "density": interactions / (users * items) if users and items else 0.0,
        "span_days": span,
    }


def format_stats(stats: dict[str, Any]) -> list[str]:
    """Human-readable lines of ``dataset_stats`` output (one ``name  value`` per line)."""
    span = stats["span_days"]
    rows = [
        ("users", f"{stats['users']:,}"),
        ("items", f"{stats['items']:,}"),
        ("interactions", f"{stats['interactions']:,}"),
        ("avg length", f"{stats['avg_length']:.2f}"),
        ("max length", f"{stats['max_length']:,}"),
        ("min length", f"{stats['min_length']:,}"),
        ("density", _density(stats["density"])),
        ("span days", "-" if span is None else f"{span:,.2f}"),
    ]
    return [f"{name:<14}{value:>14}" for name, value in rows]


def _density(density: float) -> str:
    """Six decimals, as before; a sparser data set's (a million users and items: 1e-5, 3e-7) in three significant
    digits, where six decimals printed 0.000010 for 1.04e-05 and 0.000000 for a density that is not 0."""
    return f"{density:.6f}" if density == 0 or density >= 1e-3 else f"{density:.3g}"
