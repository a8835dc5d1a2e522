"""study.probe_blocks: the blocks of docs/results.md's questions 1 and 2 (probe_readout, probe_embeddings), on tiny
synthetic stores with hand-computed values."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resdom.report.collect import RunRecord
from resdom.study.evidence_blocks import COVERAGE_QUEUE
from resdom.study.probe_blocks import (
    PROBE_BLOCKS,
    embeddings_answer,
    missing_cells,
    near_zero,
    probe_block,
    probe_blocks,
    probe_figures,
    probe_pairs,
    probe_table,
    probe_tables,
    probes_figure,
    readout_answer,
)
from tests.test_study_evidence_blocks import NOTE, U, users_npz, wilson_by_hand

probe_blocks_module = importlib.import_module("resdom.study.probe_blocks")


def mixing(res_all: float, res_last: float) -> dict[str, Any]:
    return {"pooled": {"all": {"Attn": 0.8, "+Res": res_all, "+LN": res_all},
                       "last": {"Attn": 0.9, "+Res": res_last, "+LN": res_last}}}


def cell(root: Path, ds: str, label: str, seed: int, ndcg: float, hrli: float, res: tuple[float, float],
         n: int = U) -> RunRecord:
    path = root / ds / label / f"seed{seed}"
    path.mkdir(parents=True, exist_ok=True)
    return RunRecord(path, ds, label, seed, "gts", metrics={"test": {"NDCG@10": ndcg}},
                     diagnostics={"hrli": {"n_users": n, "values": {"HRLI@1": hrli, "HRL2I@1": 0.01}},
                                  "mixing": mixing(*res)})


def first(k: int) -> np.ndarray:
    """Rank 1 for the first k of the U users, else 50 (past every cutoff)."""
    return np.where(np.arange(U) < k, 1, 50)


def rows(md: str, dataset: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
            if line.startswith(f"| {dataset} |")]


def test_near_zero_and_the_answers() -> None:
    """near 0: the Wilson upper end below 0.02 (0 of 1,000: upper 0.0038), not near 0: the lower end above it
    (50 of 100), else undecided (0 of 100: upper 0.037; no count)."""
    assert wilson_by_hand(0, 1000)[1] < 0.02 < wilson_by_hand(0, 100)[1]
    assert near_zero([(0, 500), (0, 500)]) == "yes" and near_zero([(50, 100)]) == "no"
    assert near_zero([(0, 100)]) == "undecided" and near_zero(None) == "undecided"
    # pooled 6 / 1000 alone would be near 0 (Wilson's upper end 0.013), but seeds at 0.000 and 0.012 spread it
    assert near_zero([(0, 500), (6, 500)]) == "undecided" and near_zero([(3, 500), (3, 500)]) == "yes"
    assert readout_answer("lower", "yes") == "yes"
    assert readout_answer("lower", "no") == "in part: lower, not near 0"
    assert readout_answer("lower", "undecided") == "in part: lower, near 0 undecided"
    assert readout_answer("equivalent (within ±0.02)", "yes") == "no" and readout_answer("higher", "no") == "no"
    assert readout_answer("undecided", "yes") == "undecided"
    assert embeddings_answer("lower") == "yes" and embeddings_answer("higher") == "no"
    assert embeddings_answer("equivalent (within ±0.02)") == "no" and embeddings_answer("undecided") == "undecided"


def test_readout_block_by_hand(tmp_path: Path) -> None:
    """toys-ts, two seeds each. sasrec: 100 of 400 targets at rank 1 (NDCG@10 0.25), every last item at rank 1
    (HRLI@1 1.0), +Res 0.10 / 0.14 (all) and 0.20 / 0.24 (last). sasrec-query: the same targets, no last item in the
    top 10 (HRLI@1 0): HRLI@1 lower by exactly 1.0 in every replicate, NDCG@10 difference 0 in every replicate
    (equivalent within ±5%); HRLI@1 0 of 800 users pooled: Wilson upper end 0.0048 < 0.02, near 0: the answer is
    "yes". beauty-ts has no query cell: not trained, undecided, named with the queue command."""
    runs = []
    for s, (ra, rl) in ((1, (0.10, 0.20)), (2, (0.14, 0.24))):
        runs.append(cell(tmp_path, "toys-ts", "sasrec", s, 0.25, 1.0, (ra, rl)))
        users_npz(runs[-1].path, first(100), np.ones(U, int))
        runs.append(cell(tmp_path, "toys-ts", "sasrec-query", s, 0.25, 0.0, (0.12, 0.30)))
        users_npz(runs[-1].path, first(100), np.full(U, 50))
    runs.append(cell(tmp_path, "beauty-ts", "sasrec", 1, 0.2, 0.8, (0.1, 0.1)))
    md = probe_block(runs, 1, n_boot=200)
    toys = rows(md, "toys-ts")
    nd, hr = toys[0], toys[1]
    assert nd[:5] == ["toys-ts", "sasrec-query vs sasrec", "NDCG@10", "0.2500 ± 0.0000 (2 seeds)",
                      "0.2500 ± 0.0000 (2 seeds)"]
    assert nd[5].startswith("+0.0000 [+0.0000, +0.0000] (Holm p 1.000 bootstrap, 1.000 seeds' t; seeds 2 / 2)")
    assert nd[6] == "equivalent (within ±5%)"
    assert hr[3] == "0.000 ± 0.000 (2 seeds)" and hr[4] == "1.000 ± 0.000 (2 seeds)"
    assert hr[5].startswith("-1.0000 [-1.0000, -1.0000] (Holm p ≤") and hr[6] == "lower"
    # the mixing table: probe / base side by side, mean ± std over the seeds (0.10, 0.14: mean 0.12, sample std
    # 0.028); the probe's HRLI@1 0 of 800 with its Wilson interval
    mix = toys[2]
    hi = wilson_by_hand(0, 2 * U)[1]
    assert mix == ["toys-ts", "sasrec-query / sasrec", "0.120 ± 0.000 (2 seeds) / 0.120 ± 0.028 (2 seeds)",
                   "0.300 ± 0.000 (2 seeds) / 0.220 ± 0.028 (2 seeds)", f"0 / 800 = 0.000 [0.000, {hi:.3f}] (2 seeds)",
                   "yes"]
    beauty = rows(md, "beauty-ts")
    assert beauty[0][3] == "–" and beauty[0][5] == "not trained yet (no cells of sasrec-query on beauty-ts)"
    assert beauty[0][6] == beauty[1][6] == "undecided" and beauty[2][-1] == "not trained yet"
    answer = md.split("Answer, generated from the verdicts: ", 1)[1].split("\n", 1)[0]
    assert answer.startswith("beauty-ts, `sasrec-query` against `sasrec`: undecided (not trained yet); toys-ts, "
                             "`sasrec-query` against `sasrec`: removes last-item reliance? yes (HRLI@1 lower than "
                             "`sasrec`'s (-1.0000 [-1.0000, -1.0000]); near 0: yes; NDCG@10 equivalent to `sasrec`'s "
                             "(within ±5%))")
    assert "Holm across the 2 comparisons" in md and "400 replicates" in md  # raised: 10 * 2 / 0.05
    assert ("Not in the store yet (5 seeds of each probe and base asked): beauty-ts/sasrec-query/seed1,2,3,4,5, "
            "beauty-ts/sasrec/seed2,3,4,5, toys-ts/sasrec-query/seed3,4,5, toys-ts/sasrec/seed3,4,5.") in md
    assert f"`{COVERAGE_QUEUE}`" in md and "level" not in md


def test_embeddings_block_and_missing_evidence(tmp_path: Path) -> None:
    """sasrec-untied on toys-ts: 200 of 400 targets at rank 1 (NDCG@10 0.5 against 0.25: higher by 0.25), 300 last
    items at rank 1 (HRLI@1 0.75 against 1.0: lower by 0.25): HRLI@1 falls, accuracy higher. sasrec-projected has a
    cell without users.npz: undecided, with the note that says how to get the evidence."""
    base = cell(tmp_path, "toys-ts", "sasrec", 1, 0.25, 1.0, (0.1, 0.2))
    users_npz(base.path, first(100), np.ones(U, int))
    untied = cell(tmp_path, "toys-ts", "sasrec-untied", 1, 0.5, 0.75, (0.11, 0.21))
    users_npz(untied.path, first(200), first(300))
    projected = cell(tmp_path, "toys-ts", "sasrec-projected", 1, 0.3, 0.9, (0.1, 0.2))
    md = probe_block([base, untied, projected], 2, n_boot=100)
    toys = rows(md, "toys-ts")
    assert [r[1] for r in toys[:4]] == ["sasrec-untied vs sasrec"] * 2 + ["sasrec-projected vs sasrec"] * 2
    assert toys[0][5].startswith("+0.2500 [") and toys[0][6] == "higher"
    assert toys[1][5].startswith("-0.2500 [") and toys[1][6] == "lower"
    assert toys[2][5] == f"{NOTE}: toys-ts/sasrec-projected/seed1" and toys[2][6] == toys[3][6] == "undecided"
    assert toys[4] == ["toys-ts", "sasrec-untied / sasrec", "0.110 (1 seed) / 0.100 (1 seed)",
                       "0.210 (1 seed) / 0.200 (1 seed)"]
    assert "Probe HRLI@1" not in md  # question 1's columns only
    answer = md.split("Answer, generated from the verdicts: ", 1)[1]
    assert "toys-ts, `sasrec-untied` against `sasrec`: does HRLI@1 fall? yes (HRLI@1 lower than `sasrec`'s " \
           "(-0.2500 [" in answer and "accuracy: NDCG@10 higher than `sasrec`'s (+0.2500 [" in answer
    assert ("toys-ts, `sasrec-projected` against `sasrec`: does HRLI@1 fall? undecided (HRLI@1 undecided (no "
            "per-user evidence in every cell yet)); accuracy: NDCG@10 undecided (no per-user evidence") in answer


def test_pairs_add_other_models_probes_only_where_they_ran(tmp_path: Path) -> None:
    """sasrec's probes on both data sets always; duorec-query where it has cells (toys-ts), not where only its base
    ran; labels that are not probes (sasrec-tts, sasrec-gate) never."""
    runs = [cell(tmp_path, "toys-ts", label, 1, 0.1, 0.5, (0.1, 0.1))
            for label in ("duorec", "duorec-query", "sasrec-tts", "sasrec-gate")]
    runs.append(cell(tmp_path, "beauty-ts", "duorec", 1, 0.1, 0.5, (0.1, 0.1)))
    assert probe_pairs(runs, 1) == [("beauty-ts", "sasrec", "sasrec-query"), ("toys-ts", "sasrec", "sasrec-query"),
                                    ("toys-ts", "duorec", "duorec-query")]
    assert probe_pairs(runs, 2) == [("beauty-ts", "sasrec", "sasrec-untied"), ("beauty-ts", "sasrec",
                                    "sasrec-projected"), ("toys-ts", "sasrec", "sasrec-untied"),
                                    ("toys-ts", "sasrec", "sasrec-projected")]
    assert missing_cells(runs, [("toys-ts", "duorec", "duorec-query")], target=2) == [
        "toys-ts/duorec-query/seed2", "toys-ts/duorec/seed2"]


def test_both_blocks_are_made_from_any_runs() -> None:
    blocks = probe_blocks([], n_boot=50)
    assert set(blocks) == set(PROBE_BLOCKS) == {"probe_readout", "probe_embeddings"}
    for text in blocks.values():
        assert "not trained yet" in text and "Answer, generated from the verdicts" in text


def test_the_query_probe_is_also_compared_with_its_base_trained_on_its_own_objective(tmp_path: Path) -> None:
    """Where sasrec-celast (SASRec trained ce_last, the query probe's objective) has cells, question 1 adds
    sasrec-query against it, after the comparison with sasrec; where it has none, nothing is added. Its rows are
    computed like any other: sasrec-celast at 200 of 400 targets on rank 1 (NDCG@10 0.5) against the probe's 100:
    lower by 0.25."""
    base = cell(tmp_path, "toys-ts", "sasrec", 1, 0.25, 1.0, (0.1, 0.2))
    users_npz(base.path, first(100), np.ones(U, int))
    probe = cell(tmp_path, "toys-ts", "sasrec-query", 1, 0.25, 0.0, (0.12, 0.3))
    users_npz(probe.path, first(100), np.full(U, 50))
    assert ("toys-ts", "sasrec-celast", "sasrec-query") not in probe_pairs([base, probe], 1)
    fair = cell(tmp_path, "toys-ts", "sasrec-celast", 1, 0.5, 1.0, (0.1, 0.2))
    users_npz(fair.path, first(200), np.ones(U, int))
    runs = [base, probe, fair]
    assert probe_pairs(runs, 1) == [("beauty-ts", "sasrec", "sasrec-query"), ("toys-ts", "sasrec", "sasrec-query"),
                                    ("toys-ts", "sasrec-celast", "sasrec-query")]
    assert all(p[1] == "sasrec" for p in probe_pairs(runs, 2))  # question 2's probes train ce_all as their base
    md = probe_block(runs, 1, n_boot=100)
    toys = rows(md, "toys-ts")
    assert [r[1] for r in toys[:4]] == ["sasrec-query vs sasrec"] * 2 + ["sasrec-query vs sasrec-celast"] * 2
    assert toys[2][5].startswith("-0.2500 [") and toys[2][6] == "lower"
    assert "toys-ts, `sasrec-query` against `sasrec-celast`: removes last-item reliance? yes" in md
    assert "toys-ts/sasrec-celast/seed2,3,4,5" in md


def test_the_figure_draws_each_probe_with_evidence_in_the_figure_units(tmp_path: Path) -> None:
    """The forest plot of both questions: one line per probe with evidence on both metrics (sasrec-untied; not
    sasrec-projected, whose cell lacks users.npz, nor the query probe, not trained). sasrec-untied against sasrec
    (the embeddings test's store): HRLI@1 -0.25 (absolute, margin ±0.02), NDCG@10 +0.25 on a base mean of 0.25:
    +100% of the base's mean (margin ±5%); the intervals are the table's, scaled alike."""
    base = cell(tmp_path, "toys-ts", "sasrec", 1, 0.25, 1.0, (0.1, 0.2))
    users_npz(base.path, first(100), np.ones(U, int))
    untied = cell(tmp_path, "toys-ts", "sasrec-untied", 1, 0.5, 0.75, (0.11, 0.21))
    users_npz(untied.path, first(200), first(300))
    runs = [base, untied, cell(tmp_path, "toys-ts", "sasrec-projected", 1, 0.3, 0.9, (0.1, 0.2))]
    tables = {q: probe_table(runs, q, n_boot=100)[1] for q in (1, 2)}
    fig = probes_figure(tables)
    assert fig is not None
    nd_ax, hr_ax = fig.axes  # PROBE_METRICS order: NDCG@10, HRLI@1
    assert [t.get_text() for t in nd_ax.get_yticklabels()] == ["Q2 toys-ts\nsasrec-untied vs sasrec (1 seed / 1 seed)"]

    def drawn(ax: Any) -> tuple[list[float], list[float], list[str]]:
        interval, point = [line.get_xdata() for line in ax.lines if len(line.get_xdata()) == 2][0], \
            [line.get_xdata() for line in ax.lines if len(line.get_xdata()) == 1 and line.get_marker() == "o"][0]
        return list(interval), list(point), [t.get_text() for t in ax.texts]

    nd, hr = (r.diff for r in tables[2].rows if r.comparison.dataset == "toys-ts" and r.comparison.other ==
              "sasrec-untied")
    assert nd is not None and hr is not None and nd.lo < nd.hi
    assert np.allclose(drawn(nd_ax)[0], [nd.lo * 400, nd.hi * 400]) and np.allclose(drawn(nd_ax)[1], [100.0])
    assert np.allclose(drawn(hr_ax)[0], [hr.lo, hr.hi]) and np.allclose(drawn(hr_ax)[1], [-0.25])
    assert drawn(nd_ax)[2] == ["higher"] and drawn(hr_ax)[2] == ["lower"]
    band = nd_ax.collections[0].get_paths()[0].vertices[:, 0]  # the shaded margin: ±5% of the base's mean
    assert np.isclose(band.min(), -5.0) and np.isclose(band.max(), 5.0)
    band = hr_ax.collections[0].get_paths()[0].vertices[:, 0]
    assert np.isclose(band.min(), -0.02) and np.isclose(band.max(), 0.02)
    assert [f.key for f in probe_figures(runs, n_boot=100)] == ["probes"]
    assert probe_figures(runs[:1] + runs[2:], n_boot=100) == []  # no probe with evidence: no figure


def test_the_blocks_and_the_figure_share_one_bootstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``probe_tables`` (what build_report makes once) gives the blocks and the figure without another bootstrap, and
    the blocks are those made without it."""
    base = cell(tmp_path, "toys-ts", "sasrec", 1, 0.25, 1.0, (0.1, 0.2))
    users_npz(base.path, first(100), np.ones(U, int))
    query = cell(tmp_path, "toys-ts", "sasrec-query", 1, 0.25, 0.0, (0.12, 0.3))
    users_npz(query.path, first(100), np.full(U, 50))
    runs = [base, query]
    alone, shared = probe_blocks(runs, n_boot=100), probe_tables(runs, n_boot=100)
    assert sorted(shared) == [1, 2] and {r.comparison.other for r in shared[1][1].rows} == {"sasrec-query"}

    def no_second_bootstrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("probe_table called again")

    monkeypatch.setattr(probe_blocks_module, "probe_table", no_second_bootstrap)
    assert probe_blocks(runs, n_boot=100, tables=shared) == alone
    assert [f.key for f in probe_figures(runs, tables=shared)] == ["probes"]
