"""The paper side by side (study.fidelity): intervals by hand, a store written here, the table's marks."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from resdom.report.stats import wilson
from resdom.study.fidelity import (
    PAPER_MIXING,
    fidelity_markdown,
    fidelity_rows,
    mean_t,
    pooled_proportion,
    recovery_summary,
)


def test_wilson_by_hand():
    lo, hi = wilson(5, 10)  # p = 0.5, z = 1.96: centre 0.5, half 1.96 * sqrt(0.025 + 0.0096) / 1.384
    z = 1.959963984540054
    half = z * math.sqrt(0.25 / 10 + z * z / 400) / (1 + z * z / 10)
    assert lo == pytest.approx(0.5 - half) and hi == pytest.approx(0.5 + half)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)  # the textbook value
    assert wilson(0, 20)[0] == 0.0 and wilson(20, 20)[1] == 1.0


def test_t_interval_by_hand_and_one_seed():
    est = mean_t([1.0, 2.0, 3.0])  # sd 1, t(0.975, 2) = 4.3026527 (tables: 4.303)
    assert est.value == 2.0 and est.hi - 2.0 == pytest.approx(4.3026527 / math.sqrt(3)) and est.seeds == 3
    one = mean_t([0.5])
    assert one.lo is None and one.covers(0.4) is None and one.text() == "0.500"


def test_prediction_interval_of_one_more_run_by_hand():
    from resdom.report.stats import prediction_interval

    lo, hi = prediction_interval([1.0, 2.0, 3.0])  # sd 1: 2 +- 4.3026527 * sqrt(1 + 1/3), wider than the mean's
    assert (lo, hi) == pytest.approx((2.0 - 4.3026527 * math.sqrt(4 / 3), 2.0 + 4.3026527 * math.sqrt(4 / 3)))
    assert hi - 2.0 == pytest.approx((mean_t([1.0, 2.0, 3.0]).hi - 2.0) * math.sqrt(3 + 1))
    assert prediction_interval([0.5]) is None and prediction_interval([0.5, 0.5]) == (0.5, 0.5)


def test_pooled_proportion_pools_counts_and_widens_to_the_seeds_spread():
    """(3, 10) and (7, 10): pooled 0.5; the seeds' rates 0.3 and 0.7 give a t interval (df 1) far wider than the
    Wilson interval of 10 / 20, so that is the interval (clipped to [0, 1]); seeds that agree keep Wilson's."""
    est = pooled_proportion([(3, 10), (7, 10)])
    spread = mean_t([0.3, 0.7])
    assert est.value == 0.5 and spread.lo < wilson(10, 20)[0]
    assert (est.lo, est.hi) == (max(0.0, spread.lo), min(1.0, spread.hi)) == (0.0, 1.0)
    agree = pooled_proportion([(50, 100), (50, 100), (51, 100)])
    assert (agree.lo, agree.hi) == wilson(151, 300)
    one = pooled_proportion([(3, 10)])
    assert (one.lo, one.hi) == wilson(3, 10)


def write_cell(root: Path, dataset: str, seed: int, attn: float, hrli: float, n: int, rec: list[float],
               recoverable: int) -> None:
    d = root / dataset / "sasrec" / f"seed{seed}" / "diagnostics"
    d.mkdir(parents=True)
    pooled = {"Attn": attn, "+Res": attn / 6, "+LN": attn / 6}
    (d / "mixing.json").write_text(json.dumps({"split": "test", "pooled": {"all": pooled, "last": pooled}}))
    (d / "hrli.json").write_text(json.dumps({"split": "test", "n_users": n, "values": {"HRLI@1": hrli}}))
    curve = [{"alpha": 1.0 - i / 10, "recovery": r} for i, r in enumerate(rec)]
    (d / "recovery.json").write_text(json.dumps({"split": "test", "test": {"curve": curve,
                                                                          "recoverable": recoverable}}))


def test_rows_from_a_store_and_their_marks(tmp_path):
    write_cell(tmp_path, "beauty-ts", 1, 0.80, 0.80, 100, [0.0, 0.1, 0.25], 40)
    write_cell(tmp_path, "beauty-ts", 2, 0.78, 0.76, 100, [0.0, 0.2, 0.15], 40)
    write_cell(tmp_path, "ml-1m-part", 1, 0.85, 0.5, 50, [0.0, 0.3], 10)
    (tmp_path / "yelp-ts" / "sasrec" / "seed1").mkdir(parents=True)  # not a paper data set: no row
    rows = fidelity_rows(tmp_path)
    assert [r["dataset"] for r in rows] == ["beauty-ts", "ml-1m-part"]
    beauty = rows[0]
    attn, paper = beauty["Attn"]
    assert attn.value == pytest.approx(0.79) and paper == PAPER_MIXING["Beauty"][0] and attn.seeds == 2
    hrli, _ = beauty["HRLI@1"]
    assert hrli.value == pytest.approx(0.78)  # (80 + 76) / 200
    rec, paper_rec = beauty["recovery_max"]
    assert rec.value == pytest.approx((10 + 8) / 80) and paper_rec is None  # the largest of each seed: 0.25, 0.2
    text = fidelity_markdown(rows)
    assert "not comparable" in text and "(1 seed)" in text
    assert "0.790 [" in text and "vs 0.776 (+0.014) ✓" in text  # 0.776 lies inside [0.663, 0.917]
    assert "ml-1m-part" in recovery_summary(rows)  # 0.3 of 10 users is the largest


# --- from read runs: the document block ------------------------------------------------------------------------------

def write_run(root: Path, dataset: str, seed: int, attn: float, hrli: float, n: int, best_recovery: float,
              recoverable: int, checkpoint: str = "c0", label: str = "sasrec") -> None:
    """A results-store cell that report.collect reads: cell.json naming a checkpoint of its own (two seeds never share
    one), diagnostics of that checkpoint (``checkpoint`` "c0") or of another one; +Res and +LN are
    Attn / 6."""
    cell = root / dataset / label / f"seed{seed}"
    (cell / "diagnostics").mkdir(parents=True)
    own = f"c0-{dataset}-{label}-{seed}"
    checkpoint = own if checkpoint == "c0" else checkpoint
    (cell / "cell.json").write_text(json.dumps({"dataset": dataset, "label": label, "model": "sasrec", "seed": seed,
                                                "checkpoint": own}))
    (cell / "config.json").write_text(json.dumps({"label": label, "model": {"name": "sasrec"}}))
    pooled = {"Attn": attn, "+Res": attn / 6, "+LN": attn / 6}
    diags = {"mixing": {"pooled": {"all": pooled, "last": pooled}},
             "hrli": {"n_users": n, "values": {"HRLI@1": hrli}},
             "recovery": {"test": {"curve": [{"alpha": 1.0, "recovery": 0.0}, {"alpha": 0.5, "recovery": best_recovery},
                                             {"alpha": 0.0, "recovery": best_recovery / 2}],
                                   "recoverable": recoverable}}}
    for name, d in diags.items():
        (cell / "diagnostics" / f"{name}.json").write_text(json.dumps({**d, "split": "test", "checkpoint": checkpoint}))


def hand_store(root: Path) -> list:
    from resdom.pipeline.store import store_cells
    from resdom.report import read_runs

    for seed, (attn, hrli, rec) in enumerate([(0.80, 0.80, 0.25), (0.81, 0.76, 0.20), (0.82, 0.84, 0.30)], 1):
        write_run(root, "beauty-ts", seed, attn, hrli, 100, rec, 40)
    write_run(root, "beauty-ts", 4, 0.10, 0.10, 100, 0.9, 40, checkpoint="old")  # of another checkpoint: left out
    write_run(root, "beauty-ts", 1, 0.5, 0.5, 100, 0.9, 40, label="sasrec-tts")  # another label: not the paper's
    write_run(root, "toys-ts", 1, 0.80, 0.50, 100, 0.10, 20)
    write_run(root, "ml-1m-part", 1, 0.85, 0.10, 50, 0.20, 10)
    write_run(root, "yelp-ts", 1, 0.85, 0.5, 50, 0.2, 10)  # not a data set of the paper's
    return read_runs(store_cells(root))


def test_rows_from_runs_by_hand(tmp_path):
    from resdom.study.fidelity import fidelity_rows_runs, not_held, outside

    rows = fidelity_rows_runs(hand_store(tmp_path))
    assert [(r["dataset"], r["seeds"], r["comparable"]) for r in rows] == [
        ("beauty-ts", 3, True), ("toys-ts", 1, True), ("ml-1m-part", 1, False)]
    attn, paper = rows[0]["Attn"]  # mean 0.81, sd 0.01, t(0.975, 2) = 4.3026527: half 4.3026527 * 0.01 / sqrt(3)
    assert attn.value == pytest.approx(0.81) and paper == 0.776
    assert (attn.lo, attn.hi) == pytest.approx((0.81 - 0.0248414, 0.81 + 0.0248414), abs=1e-6)
    res, _ = rows[0]["+Res"]  # 0.135 +- 4.3026527 * (0.01 / 6) / sqrt(3)
    assert res.value == pytest.approx(0.135) and res.hi == pytest.approx(0.135 + 0.0041402, abs=1e-6)
    hrli, paper_hrli = rows[0]["HRLI@1"]  # (80 + 76 + 84) / 300; the seeds' rates 0.80, 0.76, 0.84 (sd 0.04) give
    # 0.8 +- 4.3026527 * 0.04 / sqrt(3), wider than Wilson's interval of 240 / 300
    half = 4.3026527 * 0.04 / math.sqrt(3)
    assert hrli.value == pytest.approx(0.8) and paper_hrli == 0.78
    assert (hrli.lo, hrli.hi) == pytest.approx((0.8 - half, 0.8 + half), abs=1e-6) and hrli.lo < wilson(240, 300)[0]
    rec, _ = rows[0]["recovery_max"]  # the largest of each seed's curve: 10, 8 and 12 of 40 (rates sd 0.05)
    half = 4.3026527 * 0.05 / math.sqrt(3)
    assert rec.value == pytest.approx(30 / 120) and (rec.lo, rec.hi) == pytest.approx((0.25 - half, 0.25 + half),
                                                                                       abs=1e-6)
    assert rows[1]["Attn"][0].lo is None  # one seed: no interval over seeds
    assert (rows[1]["HRLI@1"][0].lo, rows[1]["HRLI@1"][0].hi) == wilson(50, 100)  # but a Wilson interval over users
    assert rows[2]["recovery_max"][1] == 0.28  # ML-1M's published recovery, on the not comparable row
    assert not_held(rows) == ["Sports", "Video", "ML-1M", "Diginetica", "Steam", "BeerAdvocate", "Zvuk"]
    # outside: beauty-ts Attn 0.776 < 0.785; +Res / +LN 0.119 < 0.1309; toys-ts HRLI@1 0.82 > 0.596; ml-1m-part not
    assert [(d, q, round(x, 3)) for d, q, x in outside(rows)] == [
        ("beauty-ts", "Attn", 0.034), ("beauty-ts", "+Res", 0.016), ("beauty-ts", "+LN", 0.016),
        ("toys-ts", "HRLI@1", -0.32)]


def test_rows_from_runs_equal_rows_from_the_store_folder(tmp_path):
    from resdom.study.fidelity import fidelity_rows_runs

    runs = hand_store(tmp_path)
    shutil.rmtree(tmp_path / "beauty-ts" / "sasrec" / "seed4")  # of another checkpoint: the folder reader reads it
    assert fidelity_markdown(fidelity_rows(tmp_path)) == fidelity_markdown(fidelity_rows_runs(runs))


def test_fidelity_block_by_hand(tmp_path):
    from resdom.study.fidelity import CAPTION, fidelity_block

    block = fidelity_block(hand_store(tmp_path))
    lines = block.splitlines()
    assert lines[0] == CAPTION and lines[1] == ""
    table = [x for x in lines if x.startswith("| ")]
    assert table[1].startswith("| beauty-ts (Beauty) | 3 | 0.810 [0.785, 0.835] vs 0.776 (+0.034) ✗ | "
                               "0.135 [0.131, 0.139] vs 0.119 (+0.016) ✗ |")
    assert "| 0.800 [" in table[1] and "] vs ~0.780 (+0.020) ✓ | 0.250 [" in table[1] and table[1].endswith(
        "] (paper: —) |")
    assert table[2].startswith("| toys-ts (Toys) | 1 (1 seed) | 0.800 vs 0.772 (+0.028) | ")
    assert table[3].startswith("| ml-1m-part (ML-1M): not comparable (a 2,999-user part of ML-1M) | 1 (1 seed) | ")
    assert table[4] == "| Sports: not held here | — | paper 0.775 | paper 0.126 | paper 0.122 | paper ~0.910 | — |"
    assert table[6] == ("| ML-1M: not held here | — | paper 0.856 | paper 0.395 | paper 0.386 | paper ~0.500 | "
                        "paper ~0.280 |")
    assert [x.split(":")[0] for x in table[7:]] == ["| Diginetica", "| Steam", "| BeerAdvocate", "| Zvuk"]
    assert ("Published values outside resdom's 95% interval (comparable data sets; resdom - paper): Attn on "
            "beauty-ts (+0.034); +Res on beauty-ts (+0.016); +LN on beauty-ts (+0.016); HRLI@1 on toys-ts (-0.320)."
            in lines)
    # one more run: Attn 0.81 +- 4.3026527 * 0.01 * sqrt(4 / 3) = [0.760, 0.860] holds 0.776; +Res and +LN
    # 0.135 +- 4.3026527 * (0.01 / 6) * sqrt(4 / 3) = [0.127, 0.143] do not hold 0.119; HRLI@1 0.80 +- 0.199 holds
    # 0.78; Beauty has no published recovery, toys-ts one seed, ml-1m-part is not comparable: 4 values, 2 outside
    assert lines[-2] == (
        "Of the 4 distinct published values of comparable data sets with two seeds or more, 2 lie outside even the "
        "95% prediction interval of one more resdom run under every same-day ordering held (mean ± t(n - 1) · SD · "
        "√(1 + 1/n) over the seeds' own values, the paper's numbers being single runs; resdom's mean [interval] vs "
        "the paper): +Res of Beauty (beauty-ts 0.135 [0.127, 0.143] vs 0.119), +LN of Beauty (beauty-ts 0.135 "
        "[0.127, 0.143] vs 0.119).")
    half = 4.3026527 * 0.05 / math.sqrt(3)
    assert lines[-1] == (f"The largest recovery over α on any data set held is 0.250 [{0.25 - half:.3f}, "
                         f"{0.25 + half:.3f}] (beauty-ts, 3 seeds, 95% interval), against the paper's \"up to about "
                         "46%\" over its nine data sets: outside the interval.")


def test_fidelity_block_without_paper_data_sets(tmp_path):
    from resdom.study.fidelity import fidelity_block

    block = fidelity_block([])
    assert block.count(": not held here |") == 9 and "outside resdom's" not in block.split("\n\n", 1)[1]
    assert block.rstrip().endswith("No cell holds a recovery curve yet.")


def test_published_accuracy_block_by_hand(tmp_path):
    """beauty-ts sasrec-tts over seeds 0.040 / 0.044 / 0.036 (HR@10): mean 0.040, t interval 0.040 ± 4.303 * 0.004 /
    sqrt(3), covering the published 0.0396; one gru4rec seed: no interval, no mark; a label time-to-split did not
    publish (sasrec) gets no row."""
    from resdom.report.collect import RunRecord
    from resdom.study.fidelity import published_accuracy_block

    def run(label: str, seed: int, hr: float, ndcg: float) -> RunRecord:
        return RunRecord(tmp_path / label / str(seed), "beauty-ts", label, seed, "gts",
                         metrics={"test": {"metrics": {"HR@10": hr, "NDCG@10": ndcg}}})

    runs = [run("sasrec-tts", 1, 0.040, 0.0230), run("sasrec-tts", 2, 0.044, 0.0232),
            run("sasrec-tts", 3, 0.036, 0.0228), run("gru4rec", 1, 0.0200, 0.0100), run("sasrec", 1, 0.5, 0.5)]
    md = published_accuracy_block(runs)
    half = 4.3026527 * 0.004 / math.sqrt(3)
    assert (f"| beauty-ts | sasrec-tts | 3 | 0.0400 [{0.04 - half:.4f}, {0.04 + half:.4f}] vs 0.0396 (+0.0004) ✓ | "
            "0.0230 [") in md
    ndcg = mean_t([0.0230, 0.0232, 0.0228])  # a tight interval above the published 0.0224: outside
    assert f"0.0230 [{ndcg.lo:.4f}, {ndcg.hi:.4f}] vs 0.0224 (+0.0006) ✗ |" in md
    assert "| beauty-ts | gru4rec | 1 seed | 0.0200 vs 0.0195 (+0.0005) | 0.0100 vs 0.0106 (-0.0006) |" in md
    assert "| sasrec |" not in md and md.count("\n| beauty-ts") == 2
    assert published_accuracy_block([run("sasrec", 1, 0.5, 0.5)]).startswith("No stored cell")
    # a cell without test metrics (its metrics.json left out as another checkpoint's) counts in no mean: it stopped
    # the report with KeyError 'HR@10'; the other seeds are the row's
    bare = RunRecord(tmp_path / "sasrec-tts" / "4", "beauty-ts", "sasrec-tts", 4, "gts")
    assert published_accuracy_block(runs + [bare]) == md
    assert published_accuracy_block([bare]).startswith("No stored cell")
    half_nd = run("sasrec-tts", 5, 0.040, 0.0230)
    half_nd.metrics["test"]["metrics"].pop("NDCG@10")
    assert "| beauty-ts | sasrec-tts | 1 seed | 0.0400 vs 0.0396 (+0.0004) | — |" in published_accuracy_block([half_nd])


def test_fidelity_block_adds_the_paper_stopping_cells_where_stored(tmp_path):
    """Cells of sasrec-v1024 (the paper's early stopping) get a second table and sentence; without them, none."""
    from resdom.report.collect import RunRecord
    from resdom.study.fidelity import fidelity_block

    def run(label: str, seed: int, attn: float) -> RunRecord:
        pooled = {"Attn": attn, "+Res": 0.119, "+LN": 0.119}
        diag = {"mixing": {"pooled": {"all": pooled}}, "hrli": {"n_users": 100, "values": {"HRLI@1": 0.78}},
                "recovery": {"test": {"curve": [{"alpha": 0.2, "recovery": 0.2}], "recoverable": 10}}}
        return RunRecord(tmp_path / label / str(seed), "beauty-ts", label, seed, "gts", diagnostics=diag)

    base = [run("sasrec", 1, 0.805), run("sasrec", 2, 0.806)]
    assert "sasrec-v1024" not in fidelity_block(base)
    md = fidelity_block(base + [run("sasrec-v1024", 1, 0.776), run("sasrec-v1024", 2, 0.777)])
    head, early = md.split("The same for `sasrec-v1024`", 1)
    assert "| beauty-ts (Beauty) | 2 |" in head and "| beauty-ts (Beauty) | 2 |" in early
    top = mean_t([0.805, 0.806])  # 0.8055 [0.799, 0.812]: the paper's 0.776 lies outside
    assert top.covers(0.776) is False and f"Attn on beauty-ts ({top.value - 0.776:+.3f})" in head
    est = mean_t([0.776, 0.777])
    assert f"| {est.text()} vs 0.776 (+{est.value - 0.776:.3f}) ✓ |" in early
    assert "Every published value of a comparable data set lies inside" in early  # Attn, +Res and HRLI@1 cover them
    # one more run of sasrec: Attn 0.8055 +- 12.7062 * 0.000707 * 1.2247 = [0.794496, 0.816504] misses 0.776; the
    # rest agree exactly with the paper (sd 0: an interval of one point, the published value on it)
    assert ("Of the 4 distinct published values of comparable data sets with two seeds or more, 1 lies outside even "
            "the 95% prediction interval") in head
    assert "): Attn of Beauty (beauty-ts 0.806 [0.794, 0.817] vs 0.776)." in head
    assert "with two seeds or more, 0 lie outside even the 95% prediction interval" in early


def test_the_itemties_sets_stand_beside_the_paper_data_set_they_cut(tmp_path):
    """beauty-ts-itemties (beauty-ts with same-day items in the review file's order, the order the paper's code
    keeps) gets a comparable row of its own against the paper's Beauty, after beauty-ts's; neither hides the other."""
    write_cell(tmp_path, "beauty-ts", 1, 0.80, 0.80, 100, [0.0, 0.2], 40)
    write_cell(tmp_path, "beauty-ts-itemties", 1, 0.776, 0.78, 100, [0.0, 0.3], 40)
    write_cell(tmp_path, "beauty-ts-itemties", 2, 0.778, 0.78, 100, [0.0, 0.3], 40)
    rows = fidelity_rows(tmp_path)
    assert [(r["dataset"], r["paper_dataset"], r["comparable"], r["seeds"]) for r in rows] == \
        [("beauty-ts", "Beauty", True, 1), ("beauty-ts-itemties", "Beauty", True, 2)]
    attn, paper = rows[1]["Attn"]
    assert attn.value == pytest.approx(0.777) and paper == PAPER_MIXING["Beauty"][0] and attn.covers(paper)
    assert "| beauty-ts-itemties (Beauty) | 2 |" in fidelity_markdown(rows)


def test_a_published_value_held_under_two_orderings_counts_once_and_is_tested_under_both(tmp_path):
    """Beauty's Attn (0.776) against beauty-ts (seeds 0.80, 0.81: outside one more run's interval) and
    beauty-ts-itemties (0.776, 0.778: inside): one distinct value, outside under one ordering only; each of the four
    Beauty values (Attn, +Res, +LN, HRLI@1) is counted once although two data sets hold it."""
    from resdom.study.fidelity import single_run_outside, single_run_sentence

    write_cell(tmp_path, "beauty-ts", 1, 0.80, 0.80, 100, [0.0, 0.2], 40)
    write_cell(tmp_path, "beauty-ts", 2, 0.81, 0.80, 100, [0.0, 0.2], 40)
    write_cell(tmp_path, "beauty-ts-itemties", 1, 0.776, 0.78, 100, [0.0, 0.3], 40)
    write_cell(tmp_path, "beauty-ts-itemties", 2, 0.778, 0.78, 100, [0.0, 0.3], 40)
    rows = fidelity_rows(tmp_path)
    values = single_run_outside(rows)
    assert sorted((v.paper_dataset, v.quantity, len(v.held)) for v in values) == [
        ("Beauty", q, 2) for q in sorted(("+LN", "+Res", "Attn", "HRLI@1"))]
    attn = next(v for v in values if v.quantity == "Attn")
    # 0.805 +- 12.706 * 0.00707 * 1.2247 = [0.695, 0.915] holds 0.776 as well: a wide interval from two seeds
    assert attn.outside() == [not (lo <= 0.776 <= hi) for _, _, lo, hi in attn.held]
    sentence = single_run_sentence(rows)
    assert sentence.startswith("Of the 4 distinct published values of comparable data sets with two seeds or more, ")
    assert "Beauty, whose same-day order the store holds both ways, have each value tested under both" in sentence


def test_recovery_at_the_alpha_chosen_on_validation_stands_beside_the_test_maximum(tmp_path):
    """The paper chooses α on the validation users; the sentence reports the test recovery there, pooled over seeds,
    with each seed's α*: 8 of 40 and 12 of 40 recovered at α* 0.4 and 0.3 -> 0.250, whose interval from two seeds
    (widened to the t interval over 0.2 and 0.3) reaches the paper's 46%."""
    from resdom.study.fidelity import recovery_summary

    for seed, k, alpha in ((1, 8, 0.4), (2, 12, 0.3)):
        write_cell(tmp_path, "beauty-ts", seed, 0.80, 0.80, 100, [0.0, 0.35], 40)
        path = tmp_path / "beauty-ts" / "sasrec" / f"seed{seed}" / "diagnostics" / "recovery.json"
        record = json.loads(path.read_text())
        record.update(alpha_star=alpha, test_at_alpha_star={"recovery": k / 40, "alpha": alpha})
        path.write_text(json.dumps(record))
    rows = fidelity_rows(tmp_path)
    est, alphas = rows[0]["recovery_star"]
    assert est.value == pytest.approx(20 / 80) and alphas == [0.4, 0.3]
    text = recovery_summary(rows)
    assert text.startswith("The largest recovery over α on any data set held is 0.350 [")
    assert est.covers(0.46) and (f"the test recovery is beauty-ts {est.text()} (α* 0.4, 0.3); the largest, "
                                 "beauty-ts's, has the paper's \"up to about 46%\" inside its interval.") in text


def test_a_seed_without_recoverable_misses_keeps_its_other_numbers(tmp_path):
    """A seed whose test part has no recoverable miss writes Recovery null at every α (and at α*): it has no recovery
    number, but its mixing and HRLI@1 count, and the table is made (it stopped the report with a TypeError)."""
    write_cell(tmp_path, "beauty-ts", 1, 0.80, 0.80, 100, [0.0, 0.1, 0.25], 40)
    write_cell(tmp_path, "beauty-ts", 2, 0.78, 0.76, 100, [None, None, None], 0)
    path = tmp_path / "beauty-ts" / "sasrec" / "seed2" / "diagnostics" / "recovery.json"
    record = json.loads(path.read_text())
    record.update(alpha_star=0.0, test_at_alpha_star={"recovery": None, "alpha": 0.0})
    path.write_text(json.dumps(record))
    rows = fidelity_rows(tmp_path)
    assert rows[0]["seeds"] == 2 and rows[0]["Attn"][0].value == pytest.approx(0.79)
    assert rows[0]["HRLI@1"][0].value == pytest.approx(0.78)
    rec = rows[0]["recovery_max"][0]
    assert rec.value == pytest.approx(10 / 40) and rec.seeds == 1 and rows[0]["recovery_star"][0] is None
    assert "beauty-ts" in fidelity_markdown(rows) and f"{rec.text()} (paper: —) (n=1)" in fidelity_markdown(rows)
