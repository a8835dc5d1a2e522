"""study.reliance_dynamics (question 4): reading a synthetic store of curve.jsonl files (which cells count, which
are left out and why, malformed files refused in one line), the two-stage bootstrap against a slow replica of its
draws, the summary numbers against hand computations, the verdicts, Markdown and the figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from resdom.errors import ResdomError
from resdom.report.stats import holm, wilson
from resdom.study.dynamics import Dynamics
from resdom.study.reliance_dynamics import (
    MIN_CELLS,
    CellDynamics,
    cluster_bootstrap_means,
    dynamics_figure,
    dynamics_markdown,
    dynamics_table,
    read_curve,
    reliance_dynamics,
    store_dynamics,
    summarise,
    units_t,
)


def curve_rows(ndcg: list[float], hrli: list[float], every: int = 5, start: int = 1) -> list[dict]:
    """One row an epoch from ``start``; HRLI@1 monitored every ``every`` epochs, ``ndcg``/``hrli`` giving the
    values at the monitored epochs (NDCG@10 of an unmonitored epoch: the next monitored one's)."""
    rows = []
    n = len(ndcg) * every
    for e in range(start, n + 1):
        i = min(len(ndcg) - 1, (e - 1) // every)
        row: dict = {"epoch": e, "loss": 1.0, "valid": {"NDCG@10": ndcg[i], "HR@10": min(1.0, 2 * ndcg[i])}}
        if e % every == 0:
            row["monitor"] = {"n_users": 1024, "HRLI@1": hrli[i], "mixing_all": {"Attn": 0.8}}
        rows.append(row)
    return rows


def write_cell(store: Path, ds: str, label: str, seed: int, model: str, rows: list[dict] | None) -> Path:
    cell = store / ds / label / f"seed{seed}"
    cell.mkdir(parents=True)
    (cell / "cell.json").write_text(json.dumps({"dataset": ds, "label": label, "model": model, "seed": seed}))
    if rows is not None:
        (cell / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return cell


NDCG = [0.1, 0.5, 0.9, 1.0, 1.0, 1.0]  # plateau at epoch 20 (0.1 + 0.95 * 0.9 = 0.955)


def build_store(tmp_path: Path) -> Path:
    store = tmp_path / "results"
    # beauty-ts sasrec: HRLI@1 rises to the end; plateau 30, lag +10; at the NDCG plateau 0.7, last 0.8, max 0.8
    write_cell(store, "beauty-ts", "sasrec", 1, "sasrec", curve_rows(NDCG, [0.1, 0.4, 0.6, 0.7, 0.75, 0.8]))
    # seed 2: HRLI@1 peaks early then falls: plateau 10, lag -10; at the plateau 0.6, last 0.5, max 0.6
    write_cell(store, "beauty-ts", "sasrec", 2, "sasrec", curve_rows(NDCG, [0.1, 0.7, 0.6, 0.6, 0.55, 0.5]))
    # a remedy variant of sasrec counts; bert4rec does not
    write_cell(store, "beauty-ts", "sasrec-gate", 1, "sasrec", curve_rows(NDCG, [0.2, 0.4, 0.5, 0.55, 0.58, 0.62]))
    write_cell(store, "beauty-ts", "bert4rec", 1, "bert4rec", curve_rows(NDCG, [0.1] * 6))
    # toys-ts: a duorec cell; a resumed run (monitoring from epoch 25); one with two monitored epochs; none
    write_cell(store, "toys-ts", "duorec", 1, "duorec", curve_rows([0.2, 1.0, 1.0], [0.3, 0.5, 0.9]))
    late = curve_rows(NDCG + [1.0, 1.0], [0.1, 0.4, 0.6, 0.7, 0.75, 0.8, 0.8, 0.8])
    for r in late:
        if r["epoch"] < 25:
            r.pop("monitor", None)
    write_cell(store, "toys-ts", "duorec", 2, "duorec", late)
    write_cell(store, "toys-ts", "duorec", 3, "duorec", curve_rows([0.2, 1.0], [0.3, 0.5]))
    write_cell(store, "toys-ts", "sasrec", 1, "sasrec", None)
    return store


def test_store_dynamics_reads_the_cells(tmp_path: Path) -> None:
    cells, skipped = store_dynamics(build_store(tmp_path))
    assert [c.name for c in cells] == ["beauty-ts/sasrec/seed1", "beauty-ts/sasrec/seed2",
                                       "beauty-ts/sasrec-gate/seed1", "toys-ts/duorec/seed1"]
    s1, s2, gate, duo = (c.dynamics for c in cells)
    assert (s1.ndcg_plateau, s1.hrli_plateau, s1.lag) == (20, 30, 10)  # 0.1 + 0.95 * 0.7 = 0.765 first at 30
    assert (s1.hrli_at_ndcg_plateau, s1.hrli_last) == (0.7, 0.8)
    assert s1.change_after == pytest.approx(0.1) and s1.gain_after == pytest.approx(0.1)
    assert (s2.hrli_plateau, s2.lag) == (10, -10)
    assert s2.change_after == pytest.approx(-0.1) and s2.gain_after == 0.0
    assert gate.hrli_plateau == 30 and gate.change_after == pytest.approx(0.07)  # 0.2 + 0.95 * 0.42 = 0.599
    assert (duo.ndcg_plateau, duo.hrli_plateau, duo.lag) == (10, 15, 5)
    assert duo.change_after == pytest.approx(0.4) and cells[3].model == "duorec"
    reasons = {s.cell: s.reason for s in skipped}
    assert reasons == {
        "toys-ts/duorec/seed2": "monitoring starts at epoch 25, not within the first 5 epochs (a resumed run)",
        "toys-ts/duorec/seed3": "2 monitored epochs (3 needed)",
        "toys-ts/sasrec/seed1": "no curve.jsonl",
    }
    only_bert, _ = store_dynamics(build_store(tmp_path / "b"), models=("bert4rec",))
    assert [c.label for c in only_bert] == ["bert4rec"]


def test_malformed_files_are_one_clear_error(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    curve = store / "beauty-ts" / "sasrec" / "seed1" / "curve.jsonl"
    curve.write_text(curve.read_text() + "{not json\n")
    with pytest.raises(ResdomError, match=r"seed1/curve.jsonl:31: not JSON"):
        store_dynamics(store)
    curve.write_text('{"epoch": 5, "valid": {"NDCG@10": 0.1}, "monitor": {"HRLI@1": "high"}}\n')
    with pytest.raises(ResdomError, match="seed1/curve.jsonl: a monitored row lacks a number"):
        store_dynamics(store)
    curve.write_text("[1, 2]\n")
    with pytest.raises(ResdomError, match=":1: a curve row must be a JSON object"):
        read_curve(curve)
    curve.unlink()
    (store / "beauty-ts" / "sasrec" / "seed2" / "cell.json").write_text('{"model": 3}')
    with pytest.raises(ResdomError, match="seed2/cell.json: field 'model'"):
        store_dynamics(store)
    with pytest.raises(ResdomError, match="no such results store"):
        store_dynamics(tmp_path / "nowhere")


# --- the bootstrap --------------------------------------------------------------------------------------------------

def slow_cluster_bootstrap(values: np.ndarray, groups: list[str], n_boot: int, seed: int) -> np.ndarray:
    """Replicate by replicate, the draws in the implementation's order: the groups, then each drawn group's
    cells."""
    names = list(dict.fromkeys(groups))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        chosen = list(rng.integers(0, len(names), size=len(names))) if len(names) > 1 else [0]
        drawn = []
        for g in chosen:
            members = [i for i, x in enumerate(groups) if x == names[g]]
            for j in rng.integers(0, len(members), size=len(members)):
                drawn.append(values[members[j]])
        out.append(np.mean(drawn, axis=0))
    return np.array(out)


@pytest.mark.parametrize("groups", [["a"] * 5, ["a", "a", "b", "c", "c", "c", "b"]])
def test_cluster_bootstrap_matches_slow_replica(groups: list[str]) -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(size=(len(groups), 2))
    got = cluster_bootstrap_means(values, groups, n_boot=300, seed=4)
    np.testing.assert_allclose(got, slow_cluster_bootstrap(values, groups, 300, 4), atol=1e-12)
    with pytest.raises(ValueError):
        cluster_bootstrap_means(values, groups[:-1])


def test_two_stage_bootstrap_sees_the_spread_between_data_sets() -> None:
    # two data sets, 10 cells each, the cells alike within a data set: resampling the cells alone would say
    # nothing varies; resampling the data sets too does
    values = np.array([0.0] * 10 + [1.0] * 10)
    reps = cluster_bootstrap_means(values, ["x"] * 10 + ["y"] * 10, n_boot=400, seed=0)[:, 0]
    assert set(np.unique(reps)) == {0.0, 0.5, 1.0}
    assert np.mean(reps == 0.5) == pytest.approx(0.5, abs=0.08)


# --- summaries, verdicts, the table ---------------------------------------------------------------------------------

def cell(ds: str, label: str, seed: int, lag: int, change: float, gain: float | None = None) -> CellDynamics:
    gain = max(change, 0.0) if gain is None else gain
    d = Dynamics((5, 10, 15, 20), 10, 10 + lag, 0.5, 0.5 + gain, 0.5 + change)
    return CellDynamics(ds, label, seed, label.split("-")[0], d)


def test_summarise_by_hand() -> None:
    cells = [cell("a", "sasrec", s, lag, ch) for s, (lag, ch) in enumerate([(5, 0.02), (-5, 0.0), (10, 0.04)], 1)]
    row = summarise("a / sasrec", cells, n_boot=500, seed=3)
    assert row.n_cells == 3 and row.lag.mean == pytest.approx(10 / 3) and row.change.mean == pytest.approx(0.02)
    assert row.ndcg_plateau == 10 and row.hrli_plateau == pytest.approx(10 + 10 / 3)
    assert row.lag_positive == 2 and row.lag_share_ci == wilson(2, 3)
    reps = cluster_bootstrap_means(np.array([[5, 0.02, 0.02], [-5, 0.0, 0.0], [10, 0.04, 0.04]]), ["a"] * 3, 500, 3)
    assert (row.lag.lo, row.lag.hi) == pytest.approx(tuple(np.quantile(reps[:, 0], [0.025, 0.975])))
    assert row.p_rise is None and row.p_flat is None  # fewer than MIN_CELLS
    one = summarise("x", cells[:1])
    assert one.lag.lo is None and one.lag.text(1) == "+5.0"


def test_verdicts_and_holm() -> None:
    rng = np.random.default_rng(0)
    rising = [cell("a", "sasrec", s, 5, 0.05 + 0.005 * rng.normal()) for s in range(1, 7)]
    flat = [cell("b", "sasrec", s, 0, 0.0 + 0.002 * rng.normal()) for s in range(1, 7)]
    noisy = [cell("c", "sasrec", s, 0, x) for s, x in enumerate([0.2, -0.2, 0.15, -0.1, 0.0], 1)]
    few = [cell("d", "sasrec", s, 0, 0.3) for s in range(1, MIN_CELLS)]
    table = dynamics_table(rising + flat + noisy + few, n_boot=1000)
    by = {r.scope: r for r in table.rows}
    assert by["a / sasrec"].verdict == "keeps rising (> 0.01)"
    assert by["b / sasrec"].verdict == "does not keep rising (< 0.01)"
    assert by["c / sasrec"].verdict == "undecided"
    assert by["d / sasrec"].verdict == f"too few cells ({MIN_CELLS - 1} < {MIN_CELLS})"
    assert "all data sets / base models" not in by  # every label is its model's: no separate row
    overall = by["all data sets / all models"]
    assert overall.n_cells == 6 + 6 + 5 + MIN_CELLS - 1
    tested = [r for r in table.rows if r.p_rise is not None]
    assert [r.p_rise_holm for r in tested] == pytest.approx(holm([r.p_rise for r in tested]).tolist())
    assert [r.p_flat_holm for r in tested] == pytest.approx(holm([r.p_flat for r in tested]).tolist())
    # p_rise by hand from the row's own replicates (row index 0: seed 0)
    vals = np.array([[c.dynamics.lag, c.dynamics.change_after, c.dynamics.gain_after] for c in rising])
    reps = cluster_bootstrap_means(vals, ["a"] * 6, table.n_boot, 0)
    assert by["a / sasrec"].p_rise == (1 + np.sum(reps[:, 1] <= 0.01)) / (table.n_boot + 1)
    # the t-tests: their own Holm families, and each row's from units_t on its cells (data sets' means overall)
    assert [r.p_rise_t_holm for r in tested] == pytest.approx(holm([r.p_rise_t for r in tested]).tolist())
    assert [r.p_flat_t_holm for r in tested] == pytest.approx(holm([r.p_flat_t for r in tested]).tolist())
    assert (by["a / sasrec"].p_rise_t, by["a / sasrec"].p_flat_t) == units_t(vals[:, 1], ["a"] * 6, 0.01)


def test_units_t_by_hand() -> None:
    """Values 0.02, 0.03, 0.04 against 0.01: mean 0.03, sd 0.01, se 0.01/sqrt(3), t = 2 sqrt(3), df 2, whose upper
    tail is (1 - t / sqrt(2 + t^2)) / 2; over groups, the groups' means are the units."""
    p_rise, p_flat = units_t([0.02, 0.03, 0.04], ["a"] * 3, 0.01)
    t = 2 * math.sqrt(3)
    assert p_rise == pytest.approx((1 - t / math.sqrt(2 + t * t)) / 2, abs=1e-12)
    assert p_rise + p_flat == pytest.approx(1.0)
    grouped = units_t([0.0, 0.04, 0.03, 0.03, 0.04], ["a", "a", "b", "b", "c"], 0.01)  # means 0.02, 0.03, 0.04
    assert grouped == pytest.approx((p_rise, p_flat))
    assert units_t([0.05, 0.05], ["a", "a"], 0.01) == (0.0, 1.0)  # no spread: the side the mean lies on
    assert units_t([0.0, 0.0], ["a", "a"], 0.01) == (1.0, 0.0)
    with pytest.raises(ValueError, match="two units"):
        units_t([0.5], ["a"], 0.01)


def test_a_verdict_needs_the_t_test_too() -> None:
    """Five cells that rise by 0.02 to 0.2: the percentile bootstrap's p_rise is at its floor (no replicate at or
    below 0.01), the t-test over five spread values is not below 0.05, so the row stays undecided."""
    cells = [cell("a", "sasrec", s, 0, x) for s, x in enumerate([0.02, 0.03, 0.2, 0.025, 0.18], 1)]
    row = dynamics_table(cells, n_boot=1000).rows[0]
    assert row.p_rise_holm <= 2 / 1001 * 2 and row.p_rise_t_holm > 0.05 and row.verdict == "undecided"


def test_table_markdown_and_figure_on_a_store(tmp_path: Path) -> None:
    table = reliance_dynamics(build_store(tmp_path), n_boot=200)
    scopes = [r.scope for r in table.rows]
    assert scopes == ["beauty-ts / sasrec", "beauty-ts / sasrec-gate", "beauty-ts / all models", "toys-ts / duorec",
                      "all data sets / base models", "all data sets / all models"]
    base = table.rows[4]
    assert base.n_cells == 3 and base.lag.mean == pytest.approx((10 - 10 + 5) / 3)
    md = dynamics_markdown(table)
    assert "| 2 | beauty-ts / sasrec | 20.0 | 20.0 | +0.0 [" in md
    assert "| 1 | toys-ts / duorec (1 cell) | 10.0 | 15.0 | +5.0 | 1/1 [" in md and "+0.400 | +0.400 |" in md
    assert "Left out: toys-ts/duorec/seed2 (monitoring starts at epoch 25" in md
    assert md.count("too few cells") == len(table.rows)
    fig = dynamics_figure(table)
    assert fig.get_size_inches()[0] == pytest.approx(3.4) and fig.dpi <= 100
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["beauty-ts (n=3)", "toys-ts (n=1)", "y = x"]
    assert fig.legends[0].get_title().get_text() == "4 cells"
    xs = np.concatenate([c.get_offsets()[:, 0] for c in fig.axes[0].collections])
    assert sorted(np.round(xs)) == [10, 20, 20, 20]  # spread by at most 1.2 epochs around the true epochs
    with pytest.raises(ResdomError, match="no stored cell"):
        reliance_dynamics(build_store(tmp_path / "c"), models=("gru4rec",))


# --- from read runs: the document block and the report's figure ----------------------------------------------------

def store_runs(tmp_path: Path) -> list:
    """``build_store`` read by report.collect (each cell given a config.json naming its model, as the store writes)."""
    from resdom.pipeline.store import store_cells
    from resdom.report import read_runs

    store = build_store(tmp_path)
    for cell in store_cells(store):
        model = json.loads((cell / "cell.json").read_text())["model"]
        (cell / "config.json").write_text(json.dumps({"model": {"name": model}}))
    return read_runs(store_cells(store))


def test_runs_dynamics_equal_store_dynamics(tmp_path: Path) -> None:
    from resdom.study.reliance_dynamics import runs_dynamics

    cells, skipped = runs_dynamics(store_runs(tmp_path))
    want_cells, want_skipped = store_dynamics(tmp_path / "results")
    assert cells == want_cells and skipped == want_skipped
    assert [c.name for c in cells] == ["beauty-ts/sasrec/seed1", "beauty-ts/sasrec/seed2",
                                       "beauty-ts/sasrec-gate/seed1", "toys-ts/duorec/seed1"]


def test_block_by_hand(tmp_path: Path) -> None:
    from resdom.study.reliance_dynamics import CAPTION, answer_sentence, reliance_dynamics_block

    runs = store_runs(tmp_path)
    block = reliance_dynamics_block(runs)
    assert block.startswith(CAPTION + "\n\n| cells | scope |")
    assert "| 1 | toys-ts / duorec (1 cell) | 10.0 | 15.0 | +5.0 | 1/1 [" in block
    assert "Left out: toys-ts/duorec/seed2 (monitoring starts at epoch 25" in block
    # base models: beauty-ts sasrec seeds 1, 2 (lags +10, -10; changes +0.1, -0.1) and toys-ts duorec (+5; +0.4):
    # lag 5 / 3, positive in 2 of 3, change 0.4 / 3; all models add sasrec-gate (+10; +0.07)
    last = next(line for line in block.splitlines() if line.startswith("Answer"))
    assert block.rstrip().endswith("Training on past the plateau (yelp-ts with patience 30, `sasrec-p30`): not trained "
                                   "yet (queued in scripts/grid_session3.txt).")
    assert last.startswith("Answer, generated from the table: over the base models alone (3 cells, 2 data sets) the "
                           "lag (HRLI@1 plateau - NDCG@10 plateau) is +1.7 [")
    assert "epochs on average, positive in 2 of 3 cells, and HRLI@1 changes by +0.133 [" in last
    assert "over all models (4 cells, 2 data sets) the lag (HRLI@1 plateau - NDCG@10 plateau) is +3.8 [" in last
    overall = last.split("; over all models")[1]
    assert "positive in 3 of 4 cells, and HRLI@1 changes by +0.11" in overall  # (0.1 - 0.1 + 0.07 + 0.4) / 4
    assert float(overall.split("changes by ")[1].split(" ")[0]) == pytest.approx(0.1175, abs=0.00051)
    assert last.count("too few cells") == 2 and last.endswith(".")
    assert answer_sentence(dynamics_table([cell("a", "sasrec", 1, 5, 0.1)], n_boot=10)) == (
        "Answer, generated from the table: over all models (1 cell, 1 data set) the lag (HRLI@1 plateau - NDCG@10 "
        "plateau) is +5.0 epochs on average, positive in 1 of 1 cells, and HRLI@1 changes by +0.100 from the NDCG@10 "
        "plateau to the end of training: too few cells (1 < 5).")
    assert reliance_dynamics_block([]) == (
        "No run of sasrec, duorec, bsarec has a monitored training curve (HRLI@1 at three or more epochs from the "
        "first monitor interval on): nothing to compare yet.\n")


def test_report_figure_of_the_runs(tmp_path: Path) -> None:
    import io

    from PIL import Image

    from resdom.report.figures import PNG_DPI, all_figures
    from resdom.study import STUDY_FIGURE_KEYS, study_figures
    from resdom.study.reliance_dynamics import fig_reliance_dynamics

    runs = store_runs(tmp_path)
    fig = fig_reliance_dynamics(runs)
    assert fig is not None and fig.key == "reliance_dynamics" and fig.key in STUDY_FIGURE_KEYS
    assert fig.figure.legends[0].get_title().get_text() == "4 cells"
    image = Image.open(io.BytesIO(fig.png_bytes()))
    assert image.mode == "P" and image.info["dpi"][0] <= PNG_DPI + 0.5 and len(fig.png_bytes()) < 300_000
    assert "reliance_dynamics" in [f.key for f in study_figures(runs)]
    assert "reliance_dynamics" not in [f.key for f in all_figures(runs)]  # the generic report draws no study figure
    no_monitor = [r for r in runs if r.model == "bert4rec"]
    assert fig_reliance_dynamics(no_monitor) is None


def test_the_long_patience_sentence_sets_the_long_run_beside_its_base() -> None:
    """yelp-ts sasrec-p30 (lags +20 and +10, changes +0.10 and +0.05) beside sasrec (lag 0, change 0): the rows'
    own means; without the sasrec rows only the long run."""
    from resdom.study.reliance_dynamics import long_patience_sentence

    long = [cell("yelp-ts", "sasrec-p30", 1, 20, 0.10), cell("yelp-ts", "sasrec-p30", 2, 10, 0.05)]
    base = [cell("yelp-ts", "sasrec", 1, 0, 0.0)]
    text = long_patience_sentence(dynamics_table(base + long, n_boot=50))
    assert text.startswith("Training on past the plateau (yelp-ts with patience 30, `sasrec-p30`), 2 cells: "
                           "lag +15.0 [")
    assert "HRLI@1 change after the NDCG@10 plateau +0.075 [" in text
    assert "; `sasrec` at the store's patience (1 cell): lag +0.0, change after +0.000, largest rise after +0.000." \
        in text
    alone = long_patience_sentence(dynamics_table(long, n_boot=50))
    assert "`sasrec` at the store's patience" not in alone and alone.endswith(".")


def test_data_sets_of_the_scatter_differ_without_their_colour() -> None:
    """The plateau scatter told data sets apart by colour alone (every point a dot): unreadable to a reader who
    cannot tell the colours apart, and an 11th data set took the 1st one's colour. Each data set now has its own
    (colour, marker) pair, in the legend too."""
    from types import SimpleNamespace as NS

    from matplotlib.colors import to_hex

    cells = [NS(dataset=f"set{i:02d}", dynamics=NS(ndcg_plateau=10 + i, hrli_plateau=15)) for i in range(11)]
    fig = dynamics_figure(NS(cells=cells))
    looks = []
    for c in fig.axes[0].collections:
        marker = c.get_paths()[0].vertices.round(3).tobytes()  # the marker's shape
        looks.append((to_hex(c.get_facecolor()[0]), marker))
    assert len(looks) == 11 and len(set(looks)) == 11
    assert len({m for _, m in looks[:7]}) == 7  # markers differ on their own, not only the pairs
