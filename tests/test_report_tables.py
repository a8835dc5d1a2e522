"""Summary tables from the hand-made fixture runs: means and sample standard deviations checked by hand."""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from pathlib import Path

import pytest

from resdom.errors import ResdomError
from resdom.report import find_run_dirs, read_run, read_runs, summary_tables
from resdom.report.tables import (
    Column,
    Table,
    format_cell,
    mean_std,
    table_files,
    to_csv,
    to_html,
    to_latex,
    to_markdown,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "diagnostics"


@pytest.fixture(scope="module")
def tables() -> dict:
    return {t.name: t for t in summary_tables(read_runs(find_run_dirs(FIXTURES)))}


def _row(table, dataset: str, model: str) -> dict:
    return next(r for r in table.rows if r["dataset"] == dataset and r["model"] == model)


def test_mean_std_sample() -> None:
    assert mean_std([1.0]) == (1.0, None)
    m, s = mean_std([0.8, 0.9])
    assert m == pytest.approx(0.85) and s == pytest.approx(math.sqrt(0.005))


def test_identity_from_config_and_missing_keys() -> None:
    runs = read_runs(find_run_dirs(FIXTURES))
    assert [(r.dataset, r.model, r.seed) for r in runs] == [
        ("toyA", "sasrec", 1), ("toyA", "sasrec", 2), ("toyA", "bsarec", 1), ("toyB", "sasrec", None)]
    assert runs[-1].diag("recovery") == {}  # absent file: empty, not an error


def test_means_and_stds_by_hand(tables: dict) -> None:
    sas = _row(tables["hrli"], "toyA", "sasrec")
    assert sas["n"] == 2
    # HRLI@1: seeds 0.80 and 0.90 -> mean 0.85, sample std sqrt(2 * 0.05^2 / 1) = 0.0707
    assert sas["HRLI@1"][0] == pytest.approx(0.85) and sas["HRLI@1"][1] == pytest.approx(0.0707107, abs=1e-6)
    # HRL2I@1: 0.02 and 0.04 -> 0.03 +- 0.01414
    assert sas["HRL2I@1"] == pytest.approx((0.03, 0.0141421), abs=1e-6)
    mix = _row(tables["mixing"], "toyA", "sasrec")
    assert mix["mix_all_Attn"] == pytest.approx((0.85, 0.0707107), abs=1e-6)
    assert mix["mix_all_+Res"] == pytest.approx((0.25, 0.0707107), abs=1e-6)
    shuf = _row(tables["shuffle"], "toyA", "sasrec")
    # relative change of NDCG@10 under full: -0.40 and -0.60 -> -0.50 +- 0.1414
    assert shuf["shuf_full_rel_NDCG@10"] == pytest.approx((-0.5, 0.1414214), abs=1e-6)
    acc = _row(tables["accuracy"], "toyA", "sasrec")
    assert acc["HR@10"] == pytest.approx((0.32, 0.0282843), abs=1e-6)
    bsa = _row(tables["hrli"], "toyA", "bsarec")
    assert bsa["n"] == 1 and bsa["HRLI@1"] == (pytest.approx(0.6), None)
    # last item never in training: 40 of 200 users; HRLI@1 over them 0.4 x 0.80 and 0.4 x 0.90 -> 0.34 +- 0.0283;
    # over the 160 others (40 x 1.0 + 60 x 1.1 + 60 x 1.3) / 160 = 1.15 x HRLI@1, capped at 1 per band for 0.90
    assert sas["unseen_share"] == pytest.approx((0.2, 0.0))
    assert sas["HRLI@1_unseen"] == pytest.approx((0.34, 0.0282843), abs=1e-6)
    seen = [(40 * h + 60 * min(1.0, 1.1 * h) + 60 * min(1.0, 1.3 * h)) / 160 for h in (0.8, 0.9)]
    assert sas["HRLI@1_seen"][0] == pytest.approx(sum(seen) / 2, abs=1e-4)


def test_missing_stage_and_file_give_empty_cells(tables: dict) -> None:
    assert _row(tables["mixing"], "toyB", "sasrec")["mix_all_+LN"] is None
    assert all(r["dataset"] != "toyB" for r in tables["recovery"].rows)  # toyB has no recovery.json
    rec = _row(tables["recovery"], "toyA", "sasrec")
    # fixture curve: recovery(a) = 2 * res * (1 - a) ** 0.7 with res = 0.2 / 0.3 -> mean at a = 0.2 is 0.5 * 0.8 ** 0.7
    assert rec["rec_at_0.2"][0] == pytest.approx(0.5 * 0.8 ** 0.7, abs=2e-4)
    assert set(tables) == {"datasets", "mixing", "hrli", "shuffle", "recovery", "accuracy", "training", "remedies"}
    assert tables["remedies"].empty  # the fixtures hold no remedy variant
    train = _row(tables["training"], "toyA", "bsarec")  # fixture metrics: best epoch 4 of 5, stopped at the cap
    assert (train["best_epoch"], train["epochs_run"], train["early_stopped"], train["train_min"]) == (
        (4.0, None), (5.0, None), (0.0, None), None)
    assert [r["dataset"] for r in tables["datasets"].rows] == ["toyA", "toyB"]
    assert tables["datasets"].rows[1]["items"] == (40.0, None)


def test_writers(tables: dict, tmp_path: Path) -> None:
    md = to_markdown(tables["hrli"])
    assert "| toyA | sasrec | 2 | 0.850 ± 0.071 | 0.030 ± 0.014 |" in md
    assert "| toyA | bsarec | 1 seed | 0.600 | 0.050 |" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(tables["hrli"]))))
    first = rows[0]
    assert (first["dataset"], first["model"], first["n"]) == ("toyA", "sasrec", "2")
    assert float(first["HRLI@1_mean"]) == pytest.approx(0.85) and float(first["HRLI@1_std"]) == pytest.approx(0.0707107)
    assert rows[1]["HRLI@1_std"] == ""
    tex = to_latex(tables["shuffle"])
    assert r"\begin{tabular}{lllrrrrrrrr}" in tex and r"$\pm$" in tex and r"\%" in tex and r"$\Delta$" in tex
    assert "\\label{tab:shuffle}" in tex
    files = table_files(list(tables.values()), tmp_path)
    assert {p.suffix for p in files} == {".md", ".csv", ".tex"} and tmp_path / "tables.md" in files
    assert files[tmp_path / "shuffle.tex"] == tex and files[tmp_path / "shuffle.md"] == to_markdown(tables["shuffle"])


def test_seed_columns_show_every_seed() -> None:
    cols = [Column("best_epoch", "Best epoch", "each"), Column("early_stopped", "Ended by early stopping", "of"),
            Column("train_min", "Train min", "count")]
    table = Table("training", "Training", "", cols, [{
        "dataset": "d", "model": "sasrec", "n": 3, "best_epoch": (33.0, 9.17), "early_stopped": (2 / 3, 0.58),
        "train_min": (44.18, 17.63), "values": {"best_epoch": [25.0, 43.0, 31.0], "early_stopped": [1.0, 0.0, 1.0],
                                                "train_min": [63.8, 39.1, 29.6]}}])
    assert "| d | sasrec | 3 | 25 / 43 / 31 | 2 of 3 | 44 ± 18 |" in to_markdown(table)
    assert format_cell((6110.0, 0.0), "count") == "6,110" and format_cell((0.5, 0.0), "ratio") == "0.500 ± 0.000"
    assert "25 / 43 / 31 & 2 of 3 & 44 $\\pm$ 18" in to_latex(table)


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(ResdomError, match="run directory not found"):
        read_run(tmp_path / "nope")
    with pytest.raises(ResdomError, match="not a run directory"):
        read_run(tmp_path)
    (tmp_path / "diagnostics").mkdir()
    (tmp_path / "diagnostics" / "hrli.json").write_text("{broken")
    with pytest.raises(ResdomError, match="hrli.json: not valid JSON"):
        read_run(tmp_path)
    with pytest.raises(ResdomError, match="no run directories"):
        read_runs([])


def test_findings_wording_follows_the_numbers() -> None:
    from resdom.report.findings import _sentences

    base = {"mix_all_Attn": 0.8, "mix_all_+Res": 0.2, "mix_all_+LN": None, "HRLI@1": 0.85, "HRL2I@1": 0.03,
            "HRLI@10": None, "HRL2I@10": None, "rec_share": None, "alpha_star": None}
    s = _sentences(base)
    assert s[0] == "1. Mixing ratio drops from 0.800 at Attn to 0.200 at +Res: the residual swamps the context " \
                   "attention gathered."
    assert "far more often than the second to last" in s[1] and len(s) == 2
    s = _sentences({**base, "mix_all_+Res": 0.9, "HRLI@1": 0.0, "HRL2I@1": 0.01})
    assert "rises" in s[0] and "does not dominate" in s[0] and "neither recent input item" in s[1]
    s = _sentences({**base, "HRLI@1": 0.0, "HRL2I@1": 0.003, "HRLI@10": 0.995, "HRL2I@10": 0.01})
    assert s[1] == ("2. HRLI@1 = 0.000 vs HRL2I@1 = 0.003 (HRLI@10 = 0.995 vs HRL2I@10 = 0.010): the last input "
                    "item is rarely ranked first, but stays in the top-10 far more often than the second to last.")
    s = _sentences({**base, "unseen_share": 0.314, "HRLI@1_seen": 0.708})
    assert s[1].endswith("second to last; 31.4% of these users' last items never occur in training (HRLI@1 over "
                         "the others: 0.708).")
    assert _sentences({**base, "unseen_share": 0.001, "HRLI@1_seen": 0.85})[1] == _sentences(base)[1]  # too few
    # alpha* as swept: a sweep of quarters chose 0.25, printed 0.2 (one decimal, a scale never swept)
    rec = {**base, "rec_share": 0.02, "n_recovery": "100", "n_recoverable": "2", "alpha_swept": True, "rec_star": 0.5,
           "HR@10_at_star": 0.4, "HR@10": 0.41, "rec_at_0.1": None, "rec_at_0.2": None, "rec_at_0.3": None}
    assert "; α* = 0.25 (chosen on validation) recovers 50.0% with test HR@10 0.400 vs 0.410 at α=1." in \
        _sentences({**rec, "alpha_star": 0.25})[2]
    assert "α* = 0.3 (chosen" in _sentences({**rec, "alpha_star": 0.3})[2]
    assert "α* = 0.233 (chosen" in _sentences({**rec, "alpha_star": (0.3 + 0.2 + 0.2) / 3})[2]  # a mean over seeds
    # a run not diagnosed yet says so (was: its heading over nothing)
    none = {**base, "mix_all_Attn": None, "mix_all_+Res": None, "HRLI@1": None, "HRL2I@1": None}
    assert _sentences(none) == ["No finding yet: no run of this group has its mixing, HRLI or recovery diagnostics "
                                "(run `resdom diagnose RUN_DIR`, then the report again)."]


def test_every_table_column_comes_from_run_values() -> None:
    from resdom.report.values import diagnostic_values, run_values

    run = read_run(FIXTURES / "toyA_sasrec_seed1")
    values = run_values(run)
    for table in summary_tables([run]):
        if table.per_model:
            assert {c.key for c in table.columns} <= set(values), table.name
    # each diagnostic's reader: an empty file gives None for each of its keys, not an error
    for read in diagnostic_values().values():
        assert all(v is None for v in read({}).values())


def test_tables_list_remedy_variants_in_the_comparisons_order() -> None:
    """Models in the paper's order, the contrast models, then each model's variants as the remedies table orders
    them (not by path, which put sasrec-gate-channel before sasrec-gate), then anything else."""
    from resdom.experiments import REMEDY_LABELS
    from resdom.report.collect import model_order

    labels = ["other", "sasrec-pool", "sasrec-gate-channel", "gru4rec", "sasrec-gate", "duorec-mean3", "sasrec-tts",
              "sasrec", "sasrec-res0.5", "duorec-tts", "duorec"]
    assert sorted(labels, key=model_order) == ["sasrec", "sasrec-tts", "duorec", "duorec-tts", "gru4rec",
                                               "sasrec-res0.5", "sasrec-gate", "sasrec-gate-channel", "sasrec-pool",
                                               "duorec-mean3", "other"]
    variants = [m for m in REMEDY_LABELS if "-" in m]
    assert sorted(reversed(variants), key=model_order) == variants


def _copy_fixtures(tmp_path: Path) -> Path:
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(FIXTURES, root, ignore=shutil.ignore_patterns("*.py"))
    return root


def test_seeds_count_the_runs_averaged_and_a_missing_file_is_named_with_its_cause(tmp_path: Path) -> None:
    """toyA / sasrec has two seeds; without seed 2's metrics.json (and shuffle.json, whose unshuffled metrics stand in
    for it) and hrli.json the accuracy and hrli rows average one seed, say n = 1, and name seed 2 with
    "metrics.json missing" / "hrli.json missing" (not another checkpoint); the mixing row still averages both."""
    root = _copy_fixtures(tmp_path)
    (root / "toyA_sasrec_seed2" / "metrics.json").unlink()
    for name in ("hrli", "shuffle"):
        (root / "toyA_sasrec_seed2" / "diagnostics" / f"{name}.json").unlink()
    runs = read_runs(find_run_dirs(root))
    seed2 = next(r for r in runs if r.path.name == "toyA_sasrec_seed2")
    assert seed2.problems["metrics"] == "metrics.json missing" and seed2.stale == []
    tables = {t.name: t for t in summary_tables(runs)}
    acc, hrli, mix = (_row(tables[n], "toyA", "sasrec") for n in ("accuracy", "hrli", "mixing"))
    assert acc["n"] == 1 and acc["HR@10"] == (pytest.approx(0.30), None)  # seed 1's HR@10 alone
    assert hrli["n"] == 1 and mix["n"] == 2
    assert tables["accuracy"].notes == ["toyA / sasrec / seed 2: metrics.json missing (left out of every column)"]
    assert tables["hrli"].notes == ["toyA / sasrec / seed 2: hrli.json missing (left out of every column)"]
    assert tables["mixing"].notes == []
    md = to_markdown(tables["accuracy"])
    assert "| toyA | sasrec | 1 seed |" in md and "- toyA / sasrec / seed 2: metrics.json missing" in md
    assert "toyA / sasrec / seed 2: metrics.json missing" in to_latex(tables["accuracy"])
    from resdom.report.html import render_markdown

    report_md = render_markdown(runs, [], list(tables.values()), "t")  # the runs table names the cause too
    assert "metrics.json missing" in report_md and "another checkpoint" not in report_md


def test_a_cell_averaging_fewer_seeds_than_its_row_says_so(tmp_path: Path) -> None:
    """Seed 2 lacks one number of the hrli table (its bands): that cell says (n=1), the row's Seeds stay 2."""
    import json

    root = _copy_fixtures(tmp_path)
    path = root / "toyA_sasrec_seed2" / "diagnostics" / "hrli.json"
    d = json.loads(path.read_text())
    d.pop("by_frequency")
    path.write_text(json.dumps(d))
    table = next(t for t in summary_tables(read_runs(find_run_dirs(root))) if t.name == "hrli")
    row = _row(table, "toyA", "sasrec")
    assert row["n"] == 2 and len(row["values"]["unseen_share"]) == 1
    line = next(x for x in to_markdown(table).splitlines() if x.startswith("| toyA | sasrec |"))
    assert "| 2 |" in line and "(n=1)" in line
    assert table.notes == ["toyA / sasrec / seed 2: hrli.json holds no such number (left out of Unseen last, "
                           "HRLI@1 (seen), HRLI@1 (unseen))"]
    rows = list(csv.DictReader(io.StringIO(to_csv(table))))
    assert rows[0]["unseen_share_n"] == "1" and rows[0]["HRLI@1_n"] == "2"


def test_two_runs_of_one_data_set_label_and_seed_are_an_error(tmp_path: Path) -> None:
    import shutil

    root = _copy_fixtures(tmp_path)
    shutil.copytree(root / "toyA_sasrec_seed1", root / "again")
    with pytest.raises(ResdomError, match="are both toyA / sasrec / seed 1"):
        read_runs(find_run_dirs(root))


def test_the_label_comes_from_one_place(tmp_path: Path) -> None:
    """A results-store cell's identity is its cell.json; a config.json naming another label is refused."""
    import json

    root = _copy_fixtures(tmp_path)
    run = root / "toyA_sasrec_seed1"
    cell = {"dataset": "toyC", "label": "sasrec-tts", "seed": 7, "checkpoint": None}
    (run / "cell.json").write_text(json.dumps(cell))
    rec = read_run(run)
    assert (rec.dataset, rec.model, rec.seed) == ("toyC", "sasrec-tts", 7)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "label": "sasrec"}))
    with pytest.raises(ResdomError, match="label 'sasrec', but .*cell.json says 'sasrec-tts'"):
        read_run(run)


def test_a_run_trained_on_a_split_folder_is_named_after_the_splits_source(tmp_path: Path) -> None:
    """`resdom data split shop.csv --out split`, then `resdom train split ...`: config.json's data.source is the
    folder ("split") and data.prepared_split is set; the report names the data set "shop.csv" (the manifest's
    source name). A run trained on the file itself keeps data.source; no manifest name falls back to data.source."""
    import json

    root = _copy_fixtures(tmp_path)
    run = root / "toyA_sasrec_seed1"
    config = json.loads((run / "config.json").read_text())
    manifest = {"source": {"kind": "path", "name": "shop.csv", "format": "csv"}, "protocol": "loo"}
    split_run = {**config["data"], "source": "split", "prepared_split": "/tmp/x/split", "manifest": manifest}
    (run / "config.json").write_text(json.dumps({**config, "data": split_run}))
    assert read_run(run).dataset == "shop.csv"
    direct = {**config["data"], "source": "data/shop.csv", "manifest": {**manifest, "source": {"name": "other"}}}
    (run / "config.json").write_text(json.dumps({**config, "data": direct}))
    assert read_run(run).dataset == "data/shop.csv"
    nameless = {**split_run, "manifest": {"source": {"kind": "path"}}}
    (run / "config.json").write_text(json.dumps({**config, "data": nameless}))
    assert read_run(run).dataset == "split"


def test_a_store_cell_without_metrics_checks_its_diagnostics_against_cell_json(tmp_path: Path) -> None:
    """Without weights and without metrics.json, the checkpoint cell.json names decides: the diagnostics of that
    checkpoint stay, one of another checkpoint is named as such."""
    import json

    root = _copy_fixtures(tmp_path)
    run = root / "toyA_sasrec_seed1"
    (run / "metrics.json").unlink()
    (run / "cell.json").write_text(json.dumps({"dataset": "toyA", "label": "sasrec", "seed": 1, "checkpoint": "abc"}))
    for path in (run / "diagnostics").glob("*.json"):
        d = json.loads(path.read_text())
        path.write_text(json.dumps({**d, "checkpoint": "old" if path.stem == "mixing" else "abc"}))
    rec = read_run(run)
    assert rec.diag("hrli") and not rec.diag("mixing") and rec.stale == ["mixing"]
    assert rec.problems["metrics"] == "metrics.json missing"
    assert rec.problems["mixing"] == "mixing.json computed on another checkpoint (old, not abc of cell.json)"


def test_model_order_is_total_so_generated_text_does_not_depend_on_set_order() -> None:
    """Labels outside the known order (e.g. new probes) sort by name after the known ones: the cold-item sentence
    once listed them in a set's order, which changes from one interpreter to the next."""
    from resdom.report.collect import model_order

    labels = ["sasrec-untied", "sasrec-query", "sasrec", "sasrec-projected", "zzz", "aaa"]
    assert sorted(labels, key=model_order) == sorted(reversed(labels), key=model_order)
    assert sorted(labels, key=model_order)[0] == "sasrec"
    assert sorted(labels, key=model_order)[1:] == sorted(set(labels) - {"sasrec"})


def _early_stopped(root: Path, name: str, best: int) -> None:
    import json

    path = root / name / "metrics.json"
    metrics = json.loads(path.read_text()) | {"best_epoch": best, "epochs_run": best + 10, "stopped": "early_stopping"}
    path.write_text(json.dumps(metrics))


def test_an_early_peak_is_named_under_the_training_table(tmp_path: Path) -> None:
    """Every fixture run stopped at the cap (best epoch 4 of 5): no remark. Make toyA / sasrec / seed 2 and toyB
    early stopped: seed 2 (best 4 <= 5) is named with its NDCG@10 beside seed 1's, toyB (best 6, no other seed) is
    not; seed 1, best 4 too but stopped at the cap, is not an early peak either."""
    from resdom.report.html import render_markdown

    assert {t.name: t for t in summary_tables(read_runs(find_run_dirs(FIXTURES)))}["training"].remarks == []
    root = _copy_fixtures(tmp_path)
    _early_stopped(root, "toyA_sasrec_seed2", 4)
    _early_stopped(root, "toyB_sasrec_seed1", 6)
    runs = read_runs(find_run_dirs(root))
    tables = {t.name: t for t in summary_tables(runs)}
    line = "toyA / sasrec / seed 2: best epoch 4 of 14 run; test NDCG@10 0.1800 against 0.1600 for the other seed"
    assert tables["training"].remarks == [line]
    assert all(t.remarks == [] for name, t in tables.items() if name != "training")
    md = to_markdown(tables["training"])
    assert md.endswith("\n\nEarly peaks (averaged in like every seed; early stopping ended the run after a best epoch "
                       f"of at most 5 or below a third of the other seeds' median):\n- {line}\n")
    assert "| toyA | sasrec | 2 | 4 / 4 | 5 / 14 | 1 of 2 |" in md  # still averaged in
    assert f"Early peak: {line}" in to_latex(tables["training"])
    assert f"<li>{line}</li>" in to_html(tables["training"])
    assert line in render_markdown(runs, [], list(tables.values()), "t")


@pytest.mark.parametrize(("best2", "named"), [(12, True), (14, False)])
def test_an_early_peak_relative_to_the_other_seeds(tmp_path: Path, best2: int, named: bool) -> None:
    """Seed 1's best epoch 40: seed 2's 12 lies below a third of it (13.3) and is named, 14 is not; seed 1 is not
    (40 is not below a third of 12)."""
    root = _copy_fixtures(tmp_path)
    _early_stopped(root, "toyA_sasrec_seed1", 40)
    _early_stopped(root, "toyA_sasrec_seed2", best2)
    remarks = {t.name: t for t in summary_tables(read_runs(find_run_dirs(root)))}["training"].remarks
    assert remarks == (["toyA / sasrec / seed 2: best epoch 12 of 22 run; test NDCG@10 0.1800 against 0.1600 for "
                        "the other seed"] if named else [])


def test_a_name_with_a_pipe_or_a_line_break_stays_one_cell(tmp_path: Path) -> None:
    """A data set named after its file, ``shop|v2`` with a line break, split a Markdown row into more columns and
    lines; ``^`` and ``\\`` broke the LaTeX table. Maker: the fixture's toyB run renamed in its config.json."""
    import json

    from resdom.report.html import render_markdown
    from resdom.report.markdown import markdown_table, md_cell

    assert md_cell("a|b\r\nc") == "a\\|b c" and md_cell("a\\|b") == "a\\|b"  # escaped once, never twice
    assert markdown_table(["x", "y"], []) == "| x | y |\n|---|---|\n| (no data) |  |\n"
    root = _copy_fixtures(tmp_path)
    config = root / "toyB_sasrec_seed1" / "config.json"
    data = json.loads(config.read_text())
    data["data"]["source"] = "shop|v2\nnew^_\\x"
    config.write_text(json.dumps(data))
    runs = read_runs(find_run_dirs(root))
    tables = list(summary_tables(runs))
    for text in [to_markdown(t) for t in tables] + [render_markdown(runs, [], tables, "t")]:
        for block in re.split(r"\n(?!\|)[^\n]*", text):  # each table: its consecutive lines that begin with |
            widths = {len(re.findall(r"(?<!\\)\|", line)) for line in block.splitlines() if line.startswith("|")}
            assert len(widths) <= 1, block
        assert "shop\\|v2 new^_\\x" in text or "shop" not in text
    tex = "".join(to_latex(t) for t in tables)
    assert r"shop|v2 new\textasciicircum{}\_\textbackslash{}x" in tex


def test_runs_of_one_data_set_split_two_ways_are_two_rows(tmp_path: Path) -> None:
    """A loo and a gts run of toyA were averaged as two seeds of one row (their numbers are not comparable). Maker:
    the fixture's toyA / sasrec seed 2 relabelled loo, then gts at another quantile."""
    import json

    root = _copy_fixtures(tmp_path)
    config = root / "toyA_sasrec_seed2" / "config.json"
    data = json.loads(config.read_text())
    for protocol, quantile, names in (("loo", None, ["toyA (gts)", "toyA (loo)"]),
                                      ("gts", 0.8, ["toyA (gts 0.8)", "toyA (gts 0.9)"])):
        data["data"] = {**data["data"], "protocol": protocol, "quantile": quantile}
        config.write_text(json.dumps(data))
        if quantile is not None:  # seed 1 states its quantile, so that only the quantile differs
            one = root / "toyA_sasrec_seed1" / "config.json"
            first = json.loads(one.read_text())
            one.write_text(json.dumps({**first, "data": {**first["data"], "quantile": 0.9}}))
        runs = read_runs([root / "toyA_sasrec_seed1", root / "toyA_sasrec_seed2"])
        assert [r.dataset for r in runs] == names
        rows = {t.name: t for t in summary_tables(runs)}["accuracy"].rows
        assert [(r["dataset"], r["n"]) for r in rows] == [(name, 1) for name in names]
    assert [r.dataset for r in read_runs(find_run_dirs(FIXTURES))][:2] == ["toyA", "toyA"]  # one split: as it was


def _data(digest: str) -> dict:
    return {"source": {"kind": "path", "files": [{"sha256": digest * 64}]}}


@pytest.mark.parametrize("first, second, names", [
    ({}, {"evaluation": {"filter_seen": False}}, ["toyA (gts)", "toyA (gts, seen kept)"]),
    (_data("e"), _data("f"), ["toyA (gts, data {e})", "toyA (gts, data {f})"]),
    ({}, _data("f"), ["toyA", "toyA"]),  # seed 1 records no data: it cannot be told apart, and stays a seed
    (_data("e"), {**_data("e"), "evaluation": {"filter_seen": True}}, ["toyA", "toyA"]),  # filtering: the default
])
def test_runs_of_one_data_set_evaluated_or_made_otherwise_are_two_rows(tmp_path: Path, first: dict, second: dict,
                                                                        names: list[str]) -> None:
    """A run that keeps seen items at evaluation, or one made from another version of the data file (same name,
    another sha256), was averaged with the other seeds of its data set as one more seed. Maker: the fixture's toyA /
    sasrec seeds 1 and 2 given these split manifests."""
    import json

    root = _copy_fixtures(tmp_path)
    for seed, manifest in ((1, first), (2, second)):
        config = root / f"toyA_sasrec_seed{seed}" / "config.json"
        data = json.loads(config.read_text())
        data["data"]["manifest"] = manifest
        config.write_text(json.dumps(data))
    digest = {c: hashlib.sha256((c * 64).encode()).hexdigest()[:8] for c in "ef"}
    runs = read_runs([root / "toyA_sasrec_seed1", root / "toyA_sasrec_seed2"])
    assert sorted(r.dataset for r in runs) == sorted(n.format(**digest) for n in names)
    rows = {t.name: t for t in summary_tables(runs)}["accuracy"].rows
    assert sorted(r["n"] for r in rows) == ([2] if names == ["toyA", "toyA"] else [1, 1])


def test_runs_of_one_label_trained_by_two_recipes_are_two_rows(tmp_path: Path) -> None:
    """A seed of recipe sasrec/1 (no recipe recorded) and one of sasrec/2 were averaged as two seeds of one row,
    the mix the retraining of a recipe must never make. Maker: the fixture's toyA / sasrec seed 2 given recipe 2."""
    import json

    root = _copy_fixtures(tmp_path)
    config = root / "toyA_sasrec_seed2" / "config.json"
    data = json.loads(config.read_text())
    recipe2 = {"qkv_init": "xavier", "ffn_dropout": True}
    config.write_text(json.dumps({**data, "model": {**data["model"], **recipe2},
                                  "versions": {**data.get("versions", {}), "recipe": "sasrec/2"}}))
    runs = read_runs([root / "toyA_sasrec_seed1", root / "toyA_sasrec_seed2", root / "toyA_bsarec_seed1"])
    assert sorted(r.model for r in runs) == ["bsarec", "sasrec (recipe sasrec/1)", "sasrec (recipe sasrec/2)"]
    rows = {t.name: t for t in summary_tables(runs)}["accuracy"].rows
    assert sorted((r["model"], r["n"]) for r in rows) == [("bsarec", 1), ("sasrec (recipe sasrec/1)", 1),
                                                          ("sasrec (recipe sasrec/2)", 1)]


@pytest.mark.parametrize("model", [{"query_ln": True, "qkv_init": "xavier", "ffn_dropout": True},
                                   {"qkv_init": "normal", "ffn_dropout": False}])
def test_a_run_recorded_by_a_recipe_that_did_not_change_it_is_a_seed_of_the_same_row(tmp_path: Path,
                                                                                      model: dict) -> None:
    """A query-LN ``sasrec`` (sasrec-tts) or a LOO ``sasrec`` (BSARec's code base) trained after recipe sasrec/2
    recorded "sasrec/2" and stood in a row apart from its earlier seeds, although recipe 2 changed neither (the
    query-LN block always had Xavier projections and FFN dropout; LOO's has neither). Maker: the fixture's toyA /
    sasrec seed 2 given either configuration and "sasrec/2", seed 1 the same configuration and no recipe."""
    import json

    root = _copy_fixtures(tmp_path)
    for seed, versions in ((1, {}), (2, {"recipe": "sasrec/2"})):
        config = root / f"toyA_sasrec_seed{seed}" / "config.json"
        data = json.loads(config.read_text())
        config.write_text(json.dumps({**data, "model": {**data["model"], **model},
                                      "versions": {**data.get("versions", {}), **versions}}))
    runs = read_runs([root / "toyA_sasrec_seed1", root / "toyA_sasrec_seed2"])
    assert [r.model for r in runs] == ["sasrec", "sasrec"]
    assert [(r["model"], r["n"]) for r in {t.name: t for t in summary_tables(runs)}["accuracy"].rows] == \
        [("sasrec", 2)]


def test_a_run_folder_given_twice_is_counted_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """toyB / sasrec (no seed in its config.json) given as ``runs/toyB``, by its absolute path and through ``..``
    was averaged as three seeds (HR@10 0.2000 ± 0.0000, Seeds 3); a seeded run given inside its folder and again by
    its absolute path was refused as its own duplicate. Now each folder is read once."""
    root = _copy_fixtures(tmp_path)
    toy_b = root / "toyB_sasrec_seed1"
    again = [toy_b, toy_b.resolve(), toy_b / ".." / toy_b.name, (root / "toyA_sasrec_seed1").resolve()]
    runs = read_runs([*find_run_dirs(root), *again])
    assert len(runs) == 4 and [r.path for r in runs].count(toy_b) == 1
    rows = {(r["dataset"], r["model"]): r for r in {t.name: t for t in summary_tables(runs)}["accuracy"].rows}
    assert rows[("toyB", "sasrec")]["n"] == 1 and rows[("toyA", "sasrec")]["n"] == 2


@pytest.mark.slow  # the CLI's import, over 5 s on a loaded machine
def test_resdom_report_counts_a_run_folder_given_twice_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI said "report of 6 run(s)" of four folders (two given again by other spellings)."""
    from cli_helpers import invoke

    root = _copy_fixtures(tmp_path)
    toy_b = root / "toyB_sasrec_seed1"
    again = [toy_b, toy_b.resolve(), toy_b / ".." / toy_b.name, (root / "toyA_sasrec_seed1").resolve()]
    assert invoke("report", str(root), *map(str, again), "--out", str(tmp_path / "rep"), "--tables-only") == 0
    assert "report of 4 run(s)" in capsys.readouterr().out
    assert "| toyB | sasrec | 1 seed | 0.2000 | 0.1000 |" in (tmp_path / "rep" / "tables" / "accuracy.md").read_text()


def test_a_label_with_html_or_a_fence_is_shown_as_text_in_report_md(tmp_path: Path) -> None:
    """A data set file named ``shop\\n```\\n<script>...`` and a label ``<img onerror=...>`` (config.json): report.md
    passed both to a Markdown viewer as HTML (in every table cell and, the line break closing the findings' code
    fence, outside it); report.html escaped them. Now each label stays on one line of the fence and every ``<`` that
    opens a tag is ``&lt;`` in a cell or a line under a table; a ``p < 0.05`` is left as it is."""
    import json

    from resdom.report.findings import finding_lines
    from resdom.report.html import render_markdown
    from resdom.report.markdown import md_cell, md_text

    assert md_text("a<b>\nc</b> <!-- x --> p < 0.05 <?x") == "a&lt;b> c&lt;/b> &lt;!-- x --> p < 0.05 &lt;?x"
    assert md_cell("\\<script>|x") == "\\&lt;script>\\|x"  # a backslash before it cancels no escape
    root = _copy_fixtures(tmp_path)
    config = root / "toyB_sasrec_seed1" / "config.json"
    data = json.loads(config.read_text())
    data["data"] = {**data["data"], "source": "shop\n```\n<script>alert(1)</script>",
                    "label": "<img src=x onerror=alert(2)>ü" + "L" * 300}
    config.write_text(json.dumps(data))
    (root / "toyB_sasrec_seed1" / "diagnostics" / "mixing.json").unlink()  # a "Left out" line naming the run
    runs = read_runs(find_run_dirs(root))
    tables = summary_tables(runs)
    text = render_markdown(runs, [], tables, "t")
    fence = text.split("```\n", 2)[1]  # the findings' code block, up to its own closing fence
    assert fence == "\n".join(finding_lines(runs)) + "\n"
    assert "shop ``` <script>alert(1)</script> / <img" in fence
    outside = text.replace(fence, "")
    assert "<script" not in outside and "<img" not in outside
    assert "&lt;script>alert(1)&lt;/script> | &lt;img src=x onerror=alert(2)>ü" + "L" * 300 + " |" in outside
    assert all("<img" not in to_markdown(t) and "<script" not in to_markdown(t) for t in tables)


def test_a_run_without_validation_shows_no_best_epoch(tmp_path: Path) -> None:
    """A ``--protocol none`` run (no --holdout-users) keeps its last epoch: metrics.json's ``best_epoch`` is that
    epoch, which the training table showed as the "Best epoch (by validation NDCG@10)". Maker: the fixture's toyA /
    sasrec seed 2 given metrics.json ``valid`` of no user, as such a run writes it."""
    import json

    root = _copy_fixtures(tmp_path)
    path = root / "toyA_sasrec_seed2" / "metrics.json"
    metrics = json.loads(path.read_text())
    path.write_text(json.dumps({**metrics, "valid": {"metrics": {}, "n_users": 0}}))
    training = {t.name: t for t in summary_tables(read_runs(find_run_dirs(root)))}["training"]
    row = next(r for r in training.rows if (r["dataset"], r["model"]) == ("toyA", "sasrec"))
    assert row["values"]["best_epoch"] == [metrics_of(root / "toyA_sasrec_seed1")["best_epoch"]]
    assert len(row["values"]["epochs_run"]) == 2  # its epochs still count
    assert training.notes == ["toyA / sasrec / seed 2: no validation split (protocol none without --holdout-users): "
                              "the last epoch kept, no best epoch (left out of Best epoch)"]


def metrics_of(run: Path) -> dict:
    import json

    return json.loads((run / "metrics.json").read_text())


def test_an_alpha_star_off_the_two_decimal_grid_is_printed_as_swept(tmp_path: Path) -> None:
    """A recovery sweep on ``--alphas 1,0.5,0.25,0.125,0`` chose α* = 0.125: the recovery table printed it "0.12", a
    scale never swept (the findings already printed 0.125). A mean over seeds stays at 2 decimals (0.1 and 0.125:
    0.11), as does every α* of the 0.1 grid (0.10)."""
    import json

    from resdom.records import Column
    from resdom.report.tables import format_cell

    root = _copy_fixtures(tmp_path)
    path = root / "toyA_bsarec_seed1" / "diagnostics" / "recovery.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "alpha_star": 0.125}))
    recovery = {t.name: t for t in summary_tables(read_runs(find_run_dirs(root)))}["recovery"]
    column = next(c for c in recovery.columns if c.key == "alpha_star")
    row = next(r for r in recovery.rows if r["model"] == "bsarec")
    assert "| 0.125 |" in to_markdown(recovery) and format_cell(row["alpha_star"], column.kind) == "0.125"
    assert format_cell((0.1125, 0.0177), column.kind) == "0.11 ± 0.02"
    assert [format_cell((x, None), column.kind) for x in (0.1, 1.0, 0.5333333)] == ["0.10", "1.00", "0.53"]
    assert column == Column("alpha_star", "α*", "alpha")


def test_runs_of_one_file_preprocessed_two_ways_are_two_rows(tmp_path: Path) -> None:
    """A 10-core split and an unfiltered split of one file (``--k-core 10``: other users and items, other test
    users) were averaged as seeds of one row, under the data set statistics of whichever run came first. Maker: the
    fixture's toyA / sasrec seeds given manifests recording k_core 10 and none; a run recording no preprocessing
    (as every results-store cell) is told apart only where two versions are recorded beside it."""
    import json

    root = _copy_fixtures(tmp_path)
    for seed, k_core, users in ((1, 10, 41), (2, None, 60)):
        config = root / f"toyA_sasrec_seed{seed}" / "config.json"
        data = json.loads(config.read_text())
        data["data"]["manifest"] = {"preprocessing": {"config": {"k_core": k_core, "remap": True}}}
        data["data"]["stats"] = {**data["data"]["stats"], "users": users}
        config.write_text(json.dumps(data))
    runs = read_runs([root / "toyA_sasrec_seed1", root / "toyA_sasrec_seed2", root / "toyA_bsarec_seed1"])
    assert [r.dataset for r in runs] == ["toyA (gts, k_core 10)", "toyA (gts, k_core none)",
                                         "toyA (gts, preprocessing not recorded)"]
    tables = {t.name: t for t in summary_tables(runs)}
    assert [(r["dataset"], r["n"]) for r in tables["accuracy"].rows if r["model"] == "sasrec"] == [
        ("toyA (gts, k_core 10)", 1), ("toyA (gts, k_core none)", 1)]
    assert [r["users"][0] for r in tables["datasets"].rows][:2] == [41, 60]
    assert [r.dataset for r in read_runs([root / "toyA_sasrec_seed1", root / "toyA_bsarec_seed1"])] == ["toyA"] * 2


def test_an_unfinished_run_adds_no_training_seconds(tmp_path: Path) -> None:
    """A run killed before its metrics.json (its epoch log so far kept) had the seconds of those epochs averaged
    into the remedies table's Train s as one more seed (beside the finished runs' seconds); now only a finished
    run's epoch log counts, and the note names metrics.json, not a cell.json a run directory never has. Maker: the
    fixture's toyA / sasrec seed 2 without its metrics.json, beside a relabelled remedy variant (the table's rows)."""
    import json
    import shutil

    from resdom.report.tables import remedies_table, remedy_runs
    from resdom.report.values import run_values

    root = _copy_fixtures(tmp_path)
    (root / "toyA_sasrec_seed2" / "metrics.json").unlink()
    variant = root / "toyA_preln_seed1"
    shutil.copytree(root / "toyA_sasrec_seed1", variant)
    config = json.loads((variant / "config.json").read_text())
    (variant / "config.json").write_text(json.dumps({**config, "label": "sasrec-preln"}))
    runs = read_runs(find_run_dirs(root))
    by_seed = {(r.model, r.seed): r for r in runs}
    logged = [json.loads(line)["seconds"] for line in
              (root / "toyA_sasrec_seed1" / "metrics.jsonl").read_text().splitlines()]
    assert run_values(by_seed[("sasrec", 1)])["train_s"] == pytest.approx(sum(logged))
    assert run_values(by_seed[("sasrec", 2)])["train_s"] is None
    table = remedies_table(remedy_runs(runs))
    row = next(r for r in table.rows if r["model"] == "sasrec" and r["dataset"] == "toyA")
    assert row["values"]["train_s"] == [pytest.approx(sum(logged))] and len(row["values"]["HRLI@1"]) == 2
    assert "toyA / sasrec / seed 2: metrics.json missing (left out of Train s)" in table.notes


def test_a_span_under_a_day_is_not_printed_as_zero(tmp_path: Path) -> None:
    """A data set spanning 0.45 days (the bundled tiny.inter) showed "Span (days) 0"; a long one stays whole days
    (4,424), as the committed data set table prints it."""
    import json

    from resdom.report.tables import format_value

    root = _copy_fixtures(tmp_path)
    config = root / "toyB_sasrec_seed1" / "config.json"
    data = json.loads(config.read_text())
    data["data"]["stats"] = {**data["data"]["stats"], "span_days": 0.4504}
    config.write_text(json.dumps(data))
    text = to_markdown({t.name: t for t in summary_tables(read_runs(find_run_dirs(root)))}["datasets"])
    assert text.splitlines()[2].endswith("| 100 |") and text.splitlines()[3].endswith("| 0.45 |")
    assert format_value(4424.0, "days") == "4,424" and format_value(214.837, "days") == "215"
