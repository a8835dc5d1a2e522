"""study.seed_spread (why seeds disagree on HRLI@1): interpolation and the three spreads against hand computations,
which cells count and why others are left out, the summary rows (means, r, verdicts), the block and the figure."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from resdom.study.seed_spread import (
    CAPTION,
    Group,
    SeedCurve,
    answer_sentence,
    runs_seed_curves,
    seed_groups,
    seed_spread_block,
    spread_markdown,
    spread_table,
    summarise,
    widest,
)


def curve(ds: str, label: str, seed: int, best: int, hrli: list[float], test: float = 0.5, every: int = 5,
          model: str | None = None) -> SeedCurve:
    epochs = tuple(every * (i + 1) for i in range(len(hrli)))
    return SeedCurve(ds, label, seed, model or label, best, test, epochs, tuple(hrli))


RISE = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]  # HRLI@1 = epoch / 50 at epochs 5, 10, ..., 30


def test_the_monitor_is_interpolated_between_monitored_epochs_and_not_beyond() -> None:
    c = curve("a", "sasrec", 1, 12, [0.2, 0.6, 0.7])
    assert c.at(5) == 0.2 and c.at(10) == 0.6
    assert c.at(12) == pytest.approx(0.6 + 2 / 5 * 0.1)
    assert c.at(7.5) == pytest.approx(0.4)
    for outside in (4, 15.5):
        with pytest.raises(ValueError, match="outside the monitored epochs 5-15"):
            c.at(outside)


def test_one_trajectory_stopped_at_three_epochs_is_all_selection() -> None:
    """Three seeds on one curve, kept at epochs 10, 20, 30: at their own epochs 0.2, 0.4, 0.6 (SD 0.2); at the
    common epoch 20 all 0.4 (SD 0)."""
    g = Group("a", "sasrec", tuple(curve("a", "sasrec", s, b, RISE, test=t)
                                   for s, b, t in ((1, 10, 0.25), (2, 20, 0.45), (3, 30, 0.55))))
    assert g.mean_selected == 20 and g.common_epoch == 20
    assert g.sd_selected == pytest.approx(0.2)
    assert g.sd_common == pytest.approx(0.0)
    assert g.widening == pytest.approx(0.2)
    assert g.sd_test == pytest.approx(statistics.stdev([0.25, 0.45, 0.55]))


def test_seeds_apart_at_every_epoch_are_no_selection_and_the_common_epoch_stays_where_all_monitored() -> None:
    """Curves offset by 0.1 and kept at one epoch: no widening. A seed whose monitor stops at 15 moves the common
    epoch (mean 20) to 15."""
    offset = Group("a", "sasrec", tuple(curve("a", "sasrec", s, 20, [v + 0.1 * s for v in RISE]) for s in (1, 2, 3)))
    assert offset.sd_selected == pytest.approx(0.1) and offset.sd_common == pytest.approx(0.1)
    assert offset.widening == pytest.approx(0.0, abs=1e-12)
    short = Group("a", "sasrec", (curve("a", "sasrec", 1, 10, RISE[:3]), curve("a", "sasrec", 2, 20, RISE),
                                  curve("a", "sasrec", 3, 30, RISE)))
    assert short.mean_selected == 20 and short.common_epoch == 15
    assert short.sd_common == pytest.approx(0.0)
    assert widest([short, offset]) is offset  # short is read away from its mean: named only where no other is


def test_groups_need_three_seeds() -> None:
    cells = [curve("a", "sasrec", s, 10, RISE) for s in (1, 2, 3)] + [curve("a", "duorec", s, 10, RISE)
                                                                        for s in (1, 2)]
    assert [(g.scope, len(g.cells)) for g in seed_groups(cells)] == [("a / sasrec", 3)]


def group(ds: str, label: str, widening: float, model: str | None = None) -> list[SeedCurve]:
    """Three seeds on RISE (HRLI@1 = epoch / 50) kept at 20 - s, 20 and 20 + s epochs, s = 50 * ``widening``
    rounded: SD ``widening`` at the selected epochs (where s is whole), 0 at the common epoch 20."""
    step = widening * 50
    return [curve(ds, label, s, round(20 + k * step), RISE, model=model) for s, k in ((1, -1), (2, 0), (3, 1))]


WIDENINGS = {"a": 0.1, "b": 0.2, "c": 0.1, "d": 0.16, "e": 0.12}


def test_summary_rows_means_r_and_verdicts() -> None:
    cells = [c for ds, w in WIDENINGS.items() for c in group(ds, "sasrec", w)]
    cells += group("a", "sasrec-gate", 0.0, model="sasrec")
    table = spread_table(cells, n_boot=400)
    assert [r.scope for r in table.rows] == ["all data sets / base models", "all data sets / all models"]
    base, every = table.rows
    assert [g.scope for g in base.groups] == [f"{ds} / sasrec" for ds in WIDENINGS]
    assert base.sd_selected.mean == pytest.approx(sum(WIDENINGS.values()) / 5)
    assert every.widening.mean == pytest.approx(sum(WIDENINGS.values()) / 6)
    assert base.sd_common.mean == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(every.r_test_selected)  # every test HRLI@1 is 0.5: no spread, no r
    assert base.widening.lo <= base.widening.mean <= base.widening.hi
    md = spread_markdown(table)
    assert "| r (test, selected) | verdict |" in md and "| n/a | the selected epoch widens the spread |" in md
    assert base.verdict == every.verdict == "the selected epoch widens the spread"
    # Holm across the two rows: each adjusted p at least its unadjusted one
    assert all(r.adjusted["p_wider"] >= r.p_wider and r.adjusted["p_wider_t"] >= r.p_wider_t for r in table.rows)


def test_mixed_signs_are_undecided_and_one_data_set_gets_no_verdict() -> None:
    shift = [curve("b", "sasrec", s, b, [v + 0.1 * s for v in RISE]) for s, b in ((1, 25), (2, 20), (3, 15))]
    assert Group("b", "sasrec", tuple(shift)).widening == pytest.approx(-0.1)  # kept where the offsets cancel
    table = spread_table(group("a", "sasrec", 0.1) + shift, n_boot=400)
    assert table.rows[-1].verdict == "undecided"
    one = summarise("x", seed_groups(group("a", "sasrec", 0.1)), n_boot=50)
    assert math.isnan(one.p_wider_t)
    assert spread_table(group("a", "sasrec", 0.1), n_boot=50).rows[0].verdict.startswith("too few data sets")
    assert spread_table(shift[:2]).rows == []


def test_r_is_pearson_over_the_groups() -> None:
    cells = []
    for i, (w, tests) in enumerate(((0.1, (0.2, 0.3, 0.4)), (0.2, (0.1, 0.3, 0.5)), (0.05, (0.3, 0.3, 0.35)))):
        for c, t in zip(group(f"d{i}", "sasrec", w), tests):
            cells.append(SeedCurve(c.dataset, c.label, c.seed, c.model, c.best_epoch, t, c.epochs, c.hrli))
    row = spread_table(cells, n_boot=50).rows[0]
    sd_test = [statistics.stdev(t) for t in ((0.2, 0.3, 0.4), (0.1, 0.3, 0.5), (0.3, 0.3, 0.35))]
    sd_sel = [g.sd_selected for g in row.groups]
    assert row.r_test_selected == pytest.approx(float(np.corrcoef(sd_test, sd_sel)[0, 1]))


# --- from read runs ---------------------------------------------------------------------------------------------------

def write_cell(store: Path, ds: str, label: str, seed: int, model: str, best: int | None, hrli: list[float],
               test: float | None) -> Path:
    cell = store / ds / label / f"seed{seed}"
    (cell / "diagnostics").mkdir(parents=True)
    meta = {"dataset": ds, "label": label, "model": model, "seed": seed}
    if best is not None:
        meta["best_epoch"] = best
    (cell / "cell.json").write_text(json.dumps(meta))
    (cell / "config.json").write_text(json.dumps({"model": {"name": model}}))
    rows = []
    for e in range(1, 5 * len(hrli) + 1):
        row: dict = {"epoch": e, "valid": {"NDCG@10": min(1.0, e / 20)}}
        if e % 5 == 0:
            row["monitor"] = {"HRLI@1": hrli[e // 5 - 1]}
        rows.append(row)
    (cell / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if test is not None:
        (cell / "diagnostics" / "hrli.json").write_text(json.dumps({"split": "test", "values": {"HRLI@1": test}}))
    return cell


def read_store(tmp_path: Path) -> list:
    from resdom.pipeline.store import store_cells
    from resdom.report import read_runs

    store = tmp_path / "results"
    for s, b, t in ((1, 10, 0.2), (2, 20, 0.4), (3, 30, 0.6)):
        write_cell(store, "a", "sasrec", s, "sasrec", b, RISE, t)
    write_cell(store, "a", "sasrec", 4, "sasrec", 40, RISE, 0.5)  # kept after its monitor's last epoch
    write_cell(store, "a", "sasrec", 5, "sasrec", None, RISE, 0.5)
    write_cell(store, "a", "sasrec", 6, "sasrec", 10, RISE, None)
    write_cell(store, "a", "gru4rec", 1, "gru4rec", 10, RISE, 0.1)  # not a causal self-attention model
    return read_runs(store_cells(store))


def test_cells_of_the_runs_and_the_reasons_others_are_left_out(tmp_path: Path) -> None:
    cells, skipped = runs_seed_curves(read_store(tmp_path))
    assert [(c.seed, c.best_epoch, c.test_hrli) for c in cells] == [(1, 10, 0.2), (2, 20, 0.4), (3, 30, 0.6)]
    reasons = {s.cell: s.reason for s in skipped}
    assert reasons["a/sasrec/seed4"] == "selected epoch 40 outside its monitored epochs 5-30"
    assert reasons["a/sasrec/seed5"] == "no selected epoch in cell.json or metrics.json"
    assert reasons["a/sasrec/seed6"].startswith("no test HRLI@1 (")
    assert not any("gru4rec" in name for name in reasons)
    assert cells[1].epochs == (5, 10, 15, 20, 25, 30) and cells[1].hrli == tuple(RISE)


def test_runs_without_seeds_stay_apart(tmp_path: Path) -> None:
    """A user's three runs of one model with no seed in their config are three runs, not one read three times."""
    from resdom.report.collect import RunRecord

    def run(i: int, best: int) -> RunRecord:
        rows = [{"epoch": e, "valid": {"NDCG@10": 0.1}, **({"monitor": {"HRLI@1": e / 50}} if e % 5 == 0 else {})}
                for e in range(1, 31)]
        return RunRecord(tmp_path / f"run{i}", "a", "sasrec", None, "gts", config={"model": {"name": "sasrec"}},
                         metrics={"best_epoch": best}, diagnostics={"hrli": {"values": {"HRLI@1": 0.1 * i}}},
                         curve=rows)

    cells, skipped = runs_seed_curves([run(1, 10), run(2, 20), run(3, 30)])
    assert skipped == [] and sorted(c.best_epoch for c in cells) == [10, 20, 30]
    assert seed_groups(cells)[0].sd_selected == pytest.approx(0.2)


def test_the_block_and_its_answer(tmp_path: Path) -> None:
    runs = read_store(tmp_path)
    block = seed_spread_block(runs, n_boot=50)
    assert block.startswith(CAPTION + "\n\n| scope | seeds | selected epochs |")
    assert "| a / sasrec | 3 | 10, 20, 30 | 20.0 | 0.200 | 0.200 | 0.000 | +0.200 |" in block
    assert "Left out: a/sasrec/seed4 (selected epoch 40 outside" in block
    table = spread_table(group("a", "sasrec", 0.1) + group("b", "duorec", 0.1)[:2], n_boot=10)
    assert "\n\nFewer than 3 seeds, not shown: b / duorec (2 seeds).\n" in spread_markdown(table)
    last = block.rstrip().splitlines()[-1]
    assert last.startswith("Answer, generated from the tables: over all models (1 group, 1 data set) the seeds' "
                           "HRLI@1 spreads by 0.200 [0.200, 0.200] (SD) at the epochs they kept and by 0.000 ")
    assert last.endswith("Widened most (of the groups read at the mean of their selected epochs): a / sasrec, "
                         "selected epochs 10, 20, 30: SD 0.200 at those epochs, 0.000 at epoch 20.0 (the figure's "
                         "right panel).")
    assert ("too few data sets (t-test on data sets' means) (the test HRLI@1's SD: 0.200 [0.200, 0.200], Pearson's "
            "r with the first over the groups n/a)") in last
    assert answer_sentence(spread_table([])) == ""
    assert seed_spread_block([]) == ("No (data set, model) of sasrec, duorec, bsarec has 3 seeds with a monitored "
                                     "training curve and a selected epoch within it: nothing to compare yet.\n")


def test_the_figure(tmp_path: Path) -> None:
    from resdom.report.figures import all_figures
    from resdom.study import STUDY_FIGURE_KEYS, study_figures
    from resdom.study.seed_spread import fig_seed_spread

    runs = read_store(tmp_path)
    fig = fig_seed_spread(runs)
    assert fig is not None and fig.key == "seed_spread" and fig.key in STUDY_FIGURE_KEYS
    left, right = fig.figure.axes
    assert left.get_xscale() == "log" and right.get_title() == "a / sasrec: where each seed stopped"
    # each seed's curve and kept epoch differ from the others' without their colour: a line style, a marker
    curves = [line for line in right.get_lines() if line.get_label().startswith("seed ")]
    kept = [line for line in right.get_lines() if line.get_linestyle() == "None"]
    assert len(curves) == len(kept) == 3
    assert len({line.get_linestyle() for line in curves}) == 3 and len({line.get_marker() for line in kept}) == 3
    assert len(fig.png_bytes()) < 300_000
    assert "seed_spread" in [f.key for f in study_figures(runs)]
    assert "seed_spread" not in [f.key for f in all_figures(runs)]  # the generic report draws no study figure
    assert fig_seed_spread([r for r in runs if r.seed in (1, 2)]) is None
