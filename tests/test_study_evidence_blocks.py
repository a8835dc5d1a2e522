"""study.evidence_blocks: the document blocks that rest on per-user statistics and Wilson intervals, on tiny
synthetic stores with hand-computed values."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resdom.report.collect import RunRecord
from resdom.report.tables import Column, aggregate, to_markdown
from resdom.study.evidence_blocks import (
    EVIDENCE_BLOCKS,
    answer,
    cold_items_markdown,
    echo_block,
    echo_evidence,
    echo_figures,
    evidence_blocks,
    five_models_markdown,
    proportions_markdown,
    remedy_spread_markdown,
    remedy_verdicts_markdown,
    spread_reading,
    wilson_text,
)

evidence_blocks_module = importlib.import_module("resdom.study.evidence_blocks")

U, N_ITEMS = 400, 500
NOTE = "no per-user evidence (retrain or re-diagnose: resdom diagnose RUN --what users)"


def wilson_by_hand(k: int, n: int) -> tuple[float, float]:
    """The roots in p of (k/n - p)^2 = z^2 p (1 - p) / n, the Wilson interval's definition."""
    z, x = 1.959963984540054, k / n
    a, b, c = 1 + z * z / n, -(2 * x + z * z / n), x * x
    disc = math.sqrt(b * b - 4 * a * c)
    return (-b - disc) / (2 * a), (-b + disc) / (2 * a)


def users_npz(cell: Path, target_rank: np.ndarray, last_rank: np.ndarray, last_freq: np.ndarray | None = None) -> None:
    n = target_rank.size
    head = {"version": 1, "split": "test", "n_users": n, "n_items": N_ITEMS, "alphas": [1.0], "rank_cap": 100}
    freq = np.full(n, 5) if last_freq is None else last_freq
    cell.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cell / "users.npz", header=np.array(json.dumps(head)), user=np.arange(n),
                        target_rank=target_rank, target_rank_unfiltered=target_rank, last_rank=last_rank,
                        last_seen=freq > 0, last_freq=freq, alpha_target_rank=np.minimum(target_rank, 100)[None],
                        alpha_last_rank=np.minimum(last_rank, 100)[None], recoverable=np.zeros(n, bool))


def run(root: Path, ds: str, model: str, seed: int, ndcg: float | None = None, hrli: float = 0.5,
        hrl2i: float = 0.01, n: int = U, **diags: Any) -> RunRecord:
    path = root / ds / model / f"seed{seed}"
    path.mkdir(parents=True, exist_ok=True)
    metrics = {} if ndcg is None else {"test": {"NDCG@10": ndcg}}
    return RunRecord(path, ds, model, seed, "gts", metrics=metrics,
                     diagnostics={"hrli": {"n_users": n, "values": {"HRLI@1": hrli, "HRL2I@1": hrl2i}}, **diags})



def test_paired_rows_show_the_means_of_the_seeds_they_compare(tmp_path: Path) -> None:
    """A paired variant with seeds 1-2 against a base with seeds 1-3: the difference is over seeds 1-2, so the base's
    cell gives its mean over those two after the store's three (else a variant above the base's store mean could
    show a negative difference); the variant's cell, over all its seeds, has no such tail."""
    first = lambda k: np.where(np.arange(U) < k, 1, 50)  # noqa: E731  rank 1 for the first k users, else 50
    runs = []
    for s, base_hits in ((1, 100), (2, 100), (3, 400)):
        runs.append(run(tmp_path, "d", "sasrec", s, base_hits / U, 1.0))
        users_npz(runs[-1].path, first(base_hits), np.ones(U, int))
    for s in (1, 2):
        runs.append(run(tmp_path, "d", "sasrec-gate", s, 0.5, 1.0))
        users_npz(runs[-1].path, first(200), np.ones(U, int))
    nd = next(line for line in remedy_verdicts_markdown(runs, n_boot=200).splitlines() if line.startswith("| d |"))
    cells = [c.strip() for c in nd.strip("|").split("|")]
    assert U == 400
    assert cells[2] == "0.5000 ± 0.0000 (2 seeds); base 0.5000 ± 0.4330 (3 seeds; 0.2500 over the 2 compared)"
    assert cells[4].startswith("higher: +0.2500 [") and "seeds 2 / 2, paired" in cells[4]


def test_answer() -> None:
    assert answer("higher", "lower") == "yes"
    assert answer("lower", "lower") == "no" and answer("equivalent (within ±5%)", "lower") == "no"
    assert answer("higher", "higher") == "no" and answer("undecided", "equivalent (within ±0.02)") == "no"
    assert answer("higher", "undecided") == "undecided" and answer("undecided", "lower") == "undecided"


def test_remedy_verdicts_from_per_user_evidence(tmp_path: Path) -> None:
    """base: 100 of 400 users' targets at rank 1 (NDCG@10 0.25), every last item at rank 1 (HRLI@1 1.0), two seeds;
    gate: 200 targets at rank 1 (0.5), 100 last items (0.25): higher at lower, "yes", difference +0.25 and -0.75
    exactly; preln: the base's ranks: difference 0 in every replicate, equivalent by TOST, "no"; pool: no users.npz:
    undecided, and the row says how to get the evidence."""
    first = lambda k: np.where(np.arange(U) < k, 1, 50)  # noqa: E731  rank 1 for the first k users, else 50
    runs = []
    for s in (1, 2):
        runs.append(run(tmp_path, "d", "sasrec", s, 0.25, 1.0))
        users_npz(runs[-1].path, first(100), np.ones(U, int))
        runs.append(run(tmp_path, "d", "sasrec-gate", s, 0.5, 0.25))
        users_npz(runs[-1].path, first(200), first(100))
        runs.append(run(tmp_path, "d", "sasrec-preln", s, 0.25, 1.0))
        users_npz(runs[-1].path, first(100), np.ones(U, int))
    runs.append(run(tmp_path, "d", "sasrec-pool", 1, 0.3, 0.2))
    md = remedy_verdicts_markdown(runs, n_boot=200)
    rows = {r[1]: r for r in ([c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()[2:]
                              if line.startswith("| d |"))}
    assert list(rows) == ["sasrec-gate", "sasrec-preln", "sasrec-pool"]  # REMEDY_LABELS order
    gate = rows["sasrec-gate"]
    assert gate[2] == "0.5000 ± 0.0000 (2 seeds); base 0.2500 ± 0.0000 (2 seeds)"
    assert gate[4].startswith("higher: +0.2500 [")
    assert "Holm p ≤0.010 bootstrap, <0.001 seeds' t; seeds 2 / 2" in gate[4]
    assert gate[5].startswith("lower: -0.7500 [") and gate[6] == "yes"
    preln = rows["sasrec-preln"]
    assert preln[4].startswith("equivalent (within ±5%): +0.0000 [+0.0000, +0.0000] (Holm p 1.000")
    assert preln[5].startswith("equivalent (within ±0.02): +0.0000") and preln[6] == "no"
    pool = rows["sasrec-pool"]
    assert pool[2] == "0.3000 (1 seed); base 0.2500 ± 0.0000 (2 seeds)"
    assert pool[4] == f"undecided: {NOTE}: d/sasrec-pool/seed1" and pool[5:] == ["undecided", "undecided"]
    assert "Holm across the 4 comparisons" in md and "800 replicates" in md  # raised: 10 * 4 / 0.05
    assert "level" not in md


def test_spread_reading_by_hand() -> None:
    """mean ± sample std: [1, 3] is 2 ± 1.414, [6, 8] is 7 ± 1.414: 5 apart > 2.83, beyond; [4, 6] is 5 ± 1.414:
    3 apart > 2.83, beyond; [3, 5] (4 ± 1.414): 2 apart, inside; exactly touching (|d| = std sum) is inside."""
    assert spread_reading([6, 8], [1, 3]) == "higher beyond the spreads"
    assert spread_reading([1, 3], [4, 6]) == "lower beyond the spreads"
    assert spread_reading([3, 5], [1, 3]) == "inside the spreads"
    assert spread_reading([2.0, 2.0], [1.0, 1.0]) == "higher beyond the spreads"  # no spread on either side
    assert spread_reading([1.0, 3.0], [2.0, 2.0]) == "inside the spreads"  # d 0
    assert spread_reading([5.0], [1.0, 3.0]) == "no spread (1 seed)"


def test_remedy_spread_from_the_store_means(tmp_path: Path) -> None:
    """base NDCG@10 0.10 / 0.12 (0.1100 ± 0.0141), HRLI@1 0.80 / 0.82; pool 0.05 / 0.07 (lower beyond: 0.05 apart >
    0.028), HRLI@1 0.20 / 0.22 (lower beyond); gate the base's numbers (inside both); mean3 one seed (no spread); a
    bsarec variant without its base is left out; a non-remedy model is not a variant."""
    runs = []
    for s, (nd, hr) in enumerate(((0.10, 0.80), (0.12, 0.82)), start=1):
        runs.append(run(tmp_path, "d", "sasrec", s, nd, hr))
        runs.append(run(tmp_path, "d", "sasrec-gate", s, nd, hr))
        runs.append(run(tmp_path, "d", "sasrec-pool", s, nd - 0.05, hr - 0.6))
    runs += [run(tmp_path, "d", "sasrec-mean3", 1, 0.3, 0.1), run(tmp_path, "d", "bsarec-pool", 1, 0.1, 0.1),
             run(tmp_path, "d", "gru4rec", 1, 0.1, 0.0)]
    md = remedy_spread_markdown(runs)
    para, note = md.strip().split("\n\n")
    assert para == (
        "**d** (base `sasrec`, 2 seeds: NDCG@10 0.1100 ± 0.0141, HRLI@1 0.810 ± 0.014): "
        "`gate` (2 seeds) NDCG@10 0.1100 ± 0.0141, inside the spreads, at HRLI@1 0.810 ± 0.014, inside the spreads; "
        "`mean3` (1 seed) NDCG@10 0.3000, no spread (1 seed), at HRLI@1 0.100, no spread (1 seed); "
        "`pool` (2 seeds) NDCG@10 0.0600 ± 0.0141, lower beyond the spreads, at HRLI@1 0.210 ± 0.014, lower beyond "
        "the spreads. Beyond the spreads: NDCG@10 lower for `pool`; HRLI@1 lower for `pool`.")
    assert note.startswith("Mean ± std over each cell's seeds") and "not a test" in note
    assert remedy_spread_markdown([run(tmp_path, "d", "sasrec", 1, 0.1, 0.8)]).startswith("No remedy variant")


def test_no_evidence_is_never_level(tmp_path: Path) -> None:
    runs = [run(tmp_path, "d", "sasrec", 1, 0.2, 0.8), run(tmp_path, "d", "sasrec-res0.5", 1, 0.2, 0.8),
            run(tmp_path, "d", "bsarec", 1, 0.2, 0.8)]
    blocks = evidence_blocks(runs, n_boot=50)
    assert set(blocks) == set(EVIDENCE_BLOCKS)
    for name in ("remedy_verdicts", "comparisons"):
        assert "level" not in blocks[name] and "equivalent (within" not in blocks[name].split("\n\n")[0]
    comp = blocks["comparisons"].splitlines()
    assert comp[2] == (f"| d | bsarec vs sasrec | NDCG@10 | 0.2000 (1 seed) | 0.2000 (1 seed) | {NOTE}: "
                       "d/sasrec/seed1, d/bsarec/seed1 | undecided |")
    assert comp[3].startswith("| d | bsarec vs sasrec | HRLI@1 | 0.800 (1 seed) | 0.800 (1 seed) |")
    assert "NDCG@10 ±5% of the baseline's mean; HRLI@1 ±0.02 (absolute)" in blocks["comparisons"]


def test_proportions_without_per_user_evidence_fall_back_to_wilson_by_hand(tmp_path: Path) -> None:
    """No users.npz: the stored counts' Wilson interval, marked. sasrec: HRLI@1 3 of 4 users (seed 1) and 2 of 4
    (seed 2): pooled 5 / 8; unseen last items 3 of 520 in seed 1 only; Rec(0.1): 3 of 10 and 5 of 20 recoverable
    misses: 8 / 30."""
    def recovery(n: int, rec: tuple[float, float, float]) -> dict[str, Any]:
        return {"recovery": {"test": {"recoverable": n, "curve": [{"alpha": a, "recovery": r, "HR@10": 0.1}
                                                                  for a, r in zip((0.1, 0.2, 0.3), rec)]}}}

    band = {"0": {"n_users": 520, "values": {"HRLI@1": 3 / 520, "HRLI@10": 4 / 520}},
            "1-4": {"n_users": 100, "values": {"HRLI@1": 0.5}}}
    s1 = run(tmp_path, "d", "sasrec", 1, 0.1, 0.75, 0.02, n=4, **recovery(10, (0.3, 0.2, 0.1)))
    s1.diagnostics["hrli"]["by_frequency"] = band
    s2 = run(tmp_path, "d", "sasrec", 2, 0.1, 0.5, 0.03, n=4, **recovery(20, (0.25, 0.5, 0.0)))
    bert = run(tmp_path, "d", "bert4rec", 1, 0.05, 0.02, 0.01, n=100)
    bert.diagnostics["hrli"]["by_frequency"] = {"0": {"n_users": 100, "values": {"HRLI@1": 0.0, "HRLI@10": 0.0}}}
    md = proportions_markdown([s1, s2, bert])
    row = next(line for line in md.splitlines() if line.startswith("| d | sasrec |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    lo, hi = wilson_by_hand(5, 8)
    assert cells[2] == "2" and cells[3] == f"0.625 [{lo:.3f}, {hi:.3f}] Wilson"
    lo, hi = wilson_by_hand(3, 520)
    assert cells[4] == f"3 / 520 = 0.006 [{lo:.3f}, {hi:.3f}] Wilson (n=1)"
    lo, hi = wilson_by_hand(8, 30)
    assert cells[5] == f"8 / 30 = 0.267 [{lo:.3f}, {hi:.3f}] Wilson" and cells[6].startswith("12 / 30 = 0.400 [")
    assert cells[7] == "1 / 30 = 0.033 [0.006, 0.167] Wilson"
    assert "| d | bert4rec | 1 seed | 0.020 [" in md and "0 / 100 = 0.000 [0.000, 0.037] Wilson" in md
    assert '"Wilson": a row whose cells lack users.npz' in md
    assert wilson_text(0, 100) == "0.000 [0.000, 0.037]"  # the upper end: 1 - (0.025)^(1/100)... by hand below
    assert wilson_by_hand(0, 100)[1] == pytest.approx(0.0370, abs=5e-5)

    cold = cold_items_markdown([s1, s2, bert])
    lo, hi = wilson_by_hand(3, 520)
    assert cold == ("Over the test users whose last input item never occurs in training, HRLI@1 is exactly 0 in 1 "
                    "of the 2 model cells that report it (2 models: sasrec, bert4rec; the remedy variants not "
                    "counted), and HRLI@10 in 1 of 2. It is not 0 "
                    f"in:\n- d `sasrec` seed 1: 3 of 520 such users (0.006, Wilson 95% [{lo:.3f}, {hi:.3f}])\n")

    five = five_models_markdown([s1, s2, bert])
    assert "| d | 0.625 / 0.025 (2 seeds) | – | – | 0.020 / 0.010 (1 seed) | – |" in five
    assert "HRLI@1 is 25 to 25 times their HRL2I@1" in five  # 0.625 / 0.025
    assert "at most 0.020 (`bert4rec` on d), within a factor of 2.0 of each other where both are above 0." in five


def test_echo_block_names_the_cells_it_can_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def read() -> list[RunRecord]:  # the runs as a report reads them now (a record keeps the evidence it found)
        return [run(tmp_path, "d", "sasrec", s, 0.1) for s in (1, 2)] + [run(tmp_path, "d", "duorec", 1, 0.1)]

    runs = read()
    head = echo_block(runs, n_boot=50)
    assert head == ("Per-user evidence (users.npz) exists today for 0 of the 3 stored model cells; the 3 without it "
                    "(d/sasrec/seed1, d/sasrec/seed2, d/duorec/seed1) say nothing here until they are retrained or "
                    "re-diagnosed (`scripts/rediagnose_cells.py --what users`).\n\n")
    rng = np.random.default_rng(0)
    echo = np.arange(U) % 2 == 0
    users_npz(runs[2].path, np.where(rng.random(U) < 0.3, 1, 50), np.where(echo, 1, 7), np.arange(U) % 30)
    runs = read()
    md = echo_block(runs, n_boot=50)
    assert md.startswith("Per-user evidence (users.npz) exists today for 1 of the 3 stored model cells; the 2 without "
                         "it (d/sasrec/seed1, d/sasrec/seed2) say nothing here until they are retrained")
    assert ("This answer rests on a minority of the cells and one seed a cell: read it as a first look, not a "
            "finding.") in md
    assert "| d | duorec | 1 seed | 200 / 200 |" in md
    for seed in (1, 2):  # every cell with evidence, two seeds of sasrec: no caveat, no list of cells without it
        users_npz(runs[seed - 1].path, np.where(rng.random(U) < 0.3, 1, 50), np.where(echo, 1, 7), np.arange(U) % 30)
    runs = read()
    md = echo_block(runs, n_boot=50)
    assert md.startswith("Per-user evidence (users.npz) exists today for 3 of the 3 stored model cells.\n\n")
    assert "first look" not in md and "| d | sasrec | 2 |" in md
    shared = echo_evidence(runs, n_boot=50)  # the bootstrap build_report makes once for the block and the figure
    assert shared is not None and echo_evidence(runs[:0], n_boot=50) is None

    def no_second_bootstrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("echo_table called again")

    monkeypatch.setattr(evidence_blocks_module, "echo_table", no_second_bootstrap)
    assert echo_block(runs, n_boot=50, table=shared) == md
    assert [f.key for f in echo_figures(runs, table=shared)] == ["echo"]


def test_single_seed_rows_are_marked(tmp_path: Path) -> None:
    runs = [run(tmp_path, "d", "sasrec", 1, 0.1), run(tmp_path, "d", "bsarec", 1, 0.1),
            run(tmp_path, "d", "bsarec", 2, 0.3)]
    md = to_markdown(aggregate(runs, [Column("NDCG@10", "NDCG@10", "metric")], "t", "T", ""))
    assert "| d | sasrec | 1 seed | 0.1000 |" in md and "| d | bsarec | 2 | 0.2000 ± 0.1414 |" in md


def test_coverage_counts_cells_evidence_and_the_seeds_asked(tmp_path: Path) -> None:
    """toys-ts: sasrec seeds 1-3 (1 and 2 with users.npz) and seed 6 (past the 5 asked: stored, not counted toward
    them), bert4rec seed 1 with users.npz; yelp-ts: sasrec seed 1; a side-check set with sasrec-tts only asks none."""
    from resdom.study.evidence_blocks import coverage_markdown

    def run(ds: str, label: str, seed: int, users: bool = False) -> RunRecord:
        path = tmp_path / ds / label / f"seed{seed}"
        path.mkdir(parents=True)
        if users:
            users_npz(path, np.ones(U, int), np.ones(U, int))
        return RunRecord(path, ds, label, seed, "gts")

    runs = [run("toys-ts", "sasrec", 1, True), run("toys-ts", "sasrec", 2, True), run("toys-ts", "sasrec", 3),
            run("toys-ts", "sasrec", 6, True), run("toys-ts", "bert4rec", 1, True), run("yelp-ts", "sasrec", 1),
            run("beauty-ts-itemties", "sasrec-tts", 1), run("toys-ts", "sasrec-gate", 1, True),
            run("toys-ts", "sasrec-gate", 2), run("toys-ts", "sasrec-query", 4, True), run("yelp-ts", "sasrec-pool", 1),
            run("toys-ts", "sasrec-celast", 1, True)]
    md = coverage_markdown(runs)
    lines = md.splitlines()
    assert lines[2] == "| beauty-ts-itemties | 1 | 0 of 1 | – | – | – | – |"
    # toys-ts asks 5 seeds of the one remedy variant stored there (gate), of the three probes and of the query
    # probe's same-objective base stored there (celast; the probe block compares the probe with it): 25
    assert lines[3] == ("| toys-ts | 9 | 7 of 9 | 3 of 5 (2 with evidence) | 0 of 5 | 0 of 5 | "
                        "4 of 25 (3 with evidence) |")
    assert lines[4] == "| yelp-ts | 2 | 0 of 2 | 1 of 3 (0 with evidence) | 0 of 3 | 0 of 3 | – |"
    # asked: 3 models x 5 on toys-ts + 3 models x 3 on yelp-ts = 24; stored with evidence within them: seeds 1, 2
    assert "Per-user evidence (users.npz) in 7 of 12 stored cells" in md and "2 of 24 are stored with their" in md
    assert ("probes (query, untied, projected) and their same-objective bases stored, 5 each on beauty-ts, toys-ts, "
            "3 of 25. The queue that trains the rest: `EVIDENCE=1 scripts/reproduce_queue.sh") in md
    # every asked seed stored with its evidence: the sentence says so rather than naming a queue for "the rest"
    tmp_path = tmp_path / "complete"
    done = [run("yelp-ts", m, k, True) for m in ("sasrec", "duorec", "bsarec") for k in (1, 2, 3)]
    md = coverage_markdown(done)
    assert "9 of 9 are stored with their evidence" in md and "the rest" not in md
    assert md.endswith("Every asked seed is stored with its evidence. The queue that trained them: "
                       "`EVIDENCE=1 scripts/reproduce_queue.sh scripts/grid_evidence.txt`.\n")
    assert "the rest" in coverage_markdown(done[1:])  # sasrec seed 1 missing


def test_comparison_figure_draws_each_tested_row_with_its_verdict(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """One line per (data set, model) with evidence, on each metric's panel: the difference and interval as a share
    of the baseline's NDCG@10 (%) and in HRLI@1; hollow where undecided, filled where the verdict is lower; a model
    without evidence draws nothing. The block and the figure share one bootstrap (``comparison_evidence``)."""
    from matplotlib.colors import to_hex

    from resdom.report.figures import model_color
    from resdom.study.evidence_blocks import comparison_evidence, comparison_figure, comparison_figures

    rng = np.random.default_rng(1)
    runs = []
    for seed in (1, 2, 3):
        for model, rate in (("sasrec", 0.8), ("bert4rec", 0.0)):
            r = run(tmp_path, "d", model, seed, 0.1)
            users_npz(r.path, rng.integers(1, 30, U), np.where(rng.random(U) < rate, 1, 9))
            runs.append(r)
    runs.append(run(tmp_path, "d", "gru4rec", 1, 0.1))  # no users.npz: no line
    table = comparison_evidence(runs, n_boot=200)
    fig = comparison_figure(table)
    ndcg_ax, hrli_ax = fig.axes
    assert [t.get_text() for t in ndcg_ax.get_yticklabels()] == ["d bert4rec"]
    rows = {r.comparison.metric: r for r in table.rows if r.diff is not None and r.comparison.other == "bert4rec"}
    for ax, metric, scale in ((ndcg_ax, "NDCG@10", 100 / rows["NDCG@10"].baseline_mean), (hrli_ax, "HRLI@1", 1.0)):
        r = rows[metric]
        ci, point = ax.lines[0], ax.lines[1]
        assert list(ci.get_xdata()) == pytest.approx([scale * r.diff.lo, scale * r.diff.hi])
        assert list(point.get_xdata()) == pytest.approx([scale * r.diff.estimate])
        filled = to_hex(point.get_markerfacecolor()) == to_hex(model_color("bert4rec"))
        assert filled == (r.verdict in ("higher", "lower")), (metric, r.verdict)
    assert rows["HRLI@1"].verdict == "lower" and rows["NDCG@10"].verdict == "undecided"
    assert comparison_figure(comparison_evidence(runs[-1:], n_boot=50)) is None

    def no_second_bootstrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("compare_table called again")

    monkeypatch.setattr(evidence_blocks_module, "compare_table", no_second_bootstrap)
    assert [f.key for f in comparison_figures(runs, table=table)] == ["comparisons"]
    assert "| d | bert4rec vs sasrec | HRLI@1 |" in evidence_blocks_module.comparisons_markdown(runs, table=table)


def test_proportions_resample_users_and_seeds_from_per_user_evidence(tmp_path: Path) -> None:
    """Three seeds of 400 users whose last-item hits repeat across seeds: the HRLI@1 cell is the pooled count and the
    bootstrap's interval over users and seeds (``stats.bootstrap_proportions``, widened to Wilson where that reaches
    further), wider than the Wilson interval over users x seeds; unseen last items (last_freq 0) and Rec(α) (the
    recoverable users hit within the top 10 at α) are counted from the same files, as hrli.json and recovery.json
    count them."""
    from resdom.report.stats import bootstrap_proportions

    rng = np.random.default_rng(12)
    n, alphas = 400, [1.0, 0.3, 0.2, 0.1]
    repeat = rng.random(n) < 0.8
    freq = np.where(np.arange(n) % 8 == 0, 0, 3)
    runs, hits, unseen, rec = [], [], [], []
    for seed in (1, 2, 3):
        last = np.where(repeat ^ (rng.random(n) < 0.03), 1, 4)
        target = rng.integers(1, 40, n)
        at = np.stack([np.minimum(target + (1.0 - a) * 10 * (rng.random(n) < 0.5), 21).astype(int) for a in alphas])
        recoverable = rng.random(n) < 0.3
        r = run(tmp_path, "d", "sasrec", seed, 0.1)
        r.path.mkdir(parents=True, exist_ok=True)
        head = {"version": 1, "split": "test", "n_users": n, "n_items": N_ITEMS, "alphas": alphas, "rank_cap": 21,
                "K": 10}
        np.savez_compressed(r.path / "users.npz", header=np.array(json.dumps(head)), user=np.arange(n),
                            target_rank=target, target_rank_unfiltered=target, last_rank=last, last_seen=freq > 0,
                            last_freq=freq, alpha_target_rank=at, alpha_last_rank=np.minimum(np.stack([last] * 4), 21),
                            recoverable=recoverable)
        runs.append(r)
        hits.append(last <= 1)
        unseen.append(freq == 0)
        rec.append([(at[alphas.index(a)] <= 10) & recoverable for a in (0.1, 0.2, 0.3)] + [recoverable])
    md = proportions_markdown(runs, n_boot=300)
    cells = [c.strip() for c in next(line for line in md.splitlines() if line.startswith("| d | sasrec |"))
             .strip("|").split("|")]
    H = np.array(hits, float)
    R = np.array([x[3] for x in rec], float)
    found = bootstrap_proportions([(H, None), (H, np.array(unseen, float))]
                                  + [(np.array([x[i] for x in rec], float), R) for i in range(3)], n_boot=300)
    k = int(H.sum())
    w_lo, w_hi = wilson_by_hand(k, H.size)
    _, lo, hi, _ = found[0]
    assert cells[3] == f"{k / H.size:.3f} [{min(lo, w_lo):.3f}, {max(hi, w_hi):.3f}]"
    assert hi - lo > 1.3 * (w_hi - w_lo)  # a user's hits repeat across seeds: fewer independent trials
    k_unseen, n_unseen = int((H * np.array(unseen)).sum()), int(np.sum(unseen))
    assert cells[4].startswith(f"{k_unseen:,} / {n_unseen:,} = ")
    for i in range(3):
        k_rec = int(sum(x[i].sum() for x in rec))
        _, lo, hi, _ = found[2 + i]
        w_lo, w_hi = wilson_by_hand(k_rec, int(R.sum()))
        assert cells[5 + i] == (f"{k_rec:,} / {int(R.sum()):,} = {k_rec / R.sum():.3f} "
                                f"[{min(lo, w_lo):.3f}, {max(hi, w_hi):.3f}]")
    assert "Wilson\"" not in md and "the same users in every drawn seed" in md


def test_a_data_set_named_with_html_is_text_in_the_blocks_sentences(tmp_path: Path) -> None:
    """The study blocks' sentences (remedy spreads, the five models' HRLI ratios, the echo block's cells without
    evidence) named a data set as it came: a store cell of a data set ``<img src=x onerror=alert(1)>`` put the tag
    into docs/results.md outside any table, where a Markdown viewer ran it (the tables escaped it). Now it is text,
    as in the tables."""
    ds = "<img src=x onerror=alert(1)>"
    runs = []
    for s, (nd, hr) in enumerate(((0.10, 0.80), (0.12, 0.82)), start=1):
        runs.append(run(tmp_path, ds, "sasrec", s, nd, hr))
        runs.append(run(tmp_path, ds, "sasrec-pool", s, nd - 0.05, hr - 0.6))
    runs += [run(tmp_path, ds, "gru4rec", 1, 0.1, 0.3, 0.2), run(tmp_path, ds, "duorec", 1, 0.1, 0.5, 0.0)]
    for md in (remedy_spread_markdown(runs), five_models_markdown(runs), echo_block(runs, n_boot=50)):
        assert ds not in md and "<img" not in md, md
        assert "&lt;img src=x onerror=alert(1)>" in md, md
