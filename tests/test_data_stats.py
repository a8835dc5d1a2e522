"""dataset_stats (spec §1) on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from resdom.data.sequences import Sequences
from resdom.data.stats import dataset_stats, format_stats


def test_stats_by_hand() -> None:
    # 3 users (lengths 2, 3, 1) over items {1, 2, 5}: 6 interactions; times span 2 days + 12 hours
    seqs = Sequences(np.array([0, 2, 5, 6]), np.array([1, 2, 2, 5, 1, 5]),
                     np.array([0, 10, 86400, 2 * 86400, 3600, 2 * 86400 + 43200]))
    s = dataset_stats(seqs)
    assert (s["users"], s["items"], s["interactions"]) == (3, 3, 6)
    assert s["avg_length"] == 2.0 and s["max_length"] == 3 and s["min_length"] == 1
    assert s["density"] == pytest.approx(6 / 9)
    assert s["span_days"] == 2.5
    lines = format_stats(s)
    assert any(line.startswith("span days") and line.endswith("2.50") for line in lines)


def test_stats_without_times_and_empty_sequences() -> None:
    s = dataset_stats(Sequences.from_lists([[3, 3, 4], [], [4]]))
    assert (s["users"], s["items"], s["interactions"], s["min_length"]) == (2, 2, 4, 1)
    assert s["span_days"] is None and s["density"] == 1.0
    assert "-" in format_stats(s)[-1]
