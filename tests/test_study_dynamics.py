"""Reliance against accuracy during training (study.dynamics): plateaus by hand, the cell reader."""

from __future__ import annotations

import pytest

from resdom.study.dynamics import cell_dynamics, plateau_epoch


def test_plateau_by_hand():
    # rise 0 -> 1: the first epoch at >= 0.95 is 15
    assert plateau_epoch([5, 10, 15, 20], [0.0, 0.5, 0.96, 1.0]) == 15
    assert plateau_epoch([5, 10, 15], [0.3, 0.2, 0.1]) == 5  # never rises: its first epoch
    assert plateau_epoch([5, 10, 15], [0.1, 0.2, 0.2], share=1.0) == 10
    with pytest.raises(ValueError):
        plateau_epoch([], [])


def row(epoch: int, ndcg: float, hrli: float | None) -> dict:
    r = {"epoch": epoch, "valid": {"NDCG@10": ndcg}}
    if hrli is not None:
        r["monitor"] = {"HRLI@1": hrli}
    return r


def test_cell_dynamics_reads_the_monitored_epochs_only():
    curve = [row(e, min(e, 10) / 100, (e / 40) if e % 5 == 0 else None) for e in range(1, 41)]
    d = cell_dynamics(curve)
    assert d.epochs == (5, 10, 15, 20, 25, 30, 35, 40)
    assert d.ndcg_plateau == 10  # NDCG@10 is flat from epoch 10
    assert d.hrli_plateau == 40  # HRLI@1 rises linearly to the end: 0.95 of its rise first at epoch 40
    assert d.lag == 30 and d.gain_after == pytest.approx(1.0 - 0.25)
    assert cell_dynamics(curve[:9]) is None  # one monitored epoch only


def test_gain_after_counts_only_what_comes_after_the_accuracy_plateau():
    # HRLI@1 peaks early (0.9 at epoch 5), then sits at 0.5; NDCG@10 plateaus at epoch 15
    curve = [row(5, 0.0, 0.9), row(10, 0.5, 0.5), row(15, 1.0, 0.5), row(20, 1.0, 0.5)]
    d = cell_dynamics(curve)
    assert d.ndcg_plateau == 15 and d.hrli_plateau == 5 and d.lag == -10 and d.gain_after == 0.0


def test_change_after_is_signed_and_read_at_the_last_monitored_epoch():
    # NDCG@10 plateaus at 15 (HRLI@1 0.6 there); HRLI@1 peaks at 0.7 (epoch 20) and ends at 0.55
    curve = [row(5, 0.0, 0.2), row(10, 0.5, 0.4), row(15, 1.0, 0.6), row(20, 1.0, 0.7), row(25, 1.0, 0.55),
             row(26, 1.0, None)]
    d = cell_dynamics(curve)
    assert d.hrli_last == 0.55 and d.change_after == pytest.approx(-0.05) and d.gain_after == pytest.approx(0.1)
