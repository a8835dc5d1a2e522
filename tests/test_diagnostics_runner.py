"""run_all and `resdom diagnose` on a tiny trained run: files, schema, CSV, summary, CLI errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from cli_helpers import invoke

from resdom.diagnostics.registry import diagnostic_names
from resdom.diagnostics.runner import format_summary, parse_what, run_all
from resdom.errors import ResdomError


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from resdom.data.prepare import prepare_split
    from resdom.models.config import make_model_config
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import fit

    torch.set_num_threads(1)
    split = prepare_split("synthetic:n_users=120,n_items=30,min_len=6,max_len=14,seed=3", "loo")
    out = tmp_path_factory.mktemp("run")
    fit(split, make_model_config(max_len=12, hidden=16, layers=2, heads=2, dropout=0.1, attn_dropout=0.1),
        TrainConfig(epochs=1, device="cpu", batch_size=64), out, progress=False)
    return out


def test_run_all_writes_every_file_with_the_schema(run_dir):
    summary = run_all(run_dir, alphas=(1.0, 0.5, 0.0), seeds=(0, 1), progress=False, batch_size=50)
    diag = run_dir / "diagnostics"
    for name in diagnostic_names():
        data = json.loads((diag / f"{name}.json").read_text())
        assert data["split"] == "test" and data["n_users"] > 0, name
        rows = list(csv.reader((diag / f"{name}.csv").open()))
        assert len(rows) > 1, name
    assert (diag / "mixing_per_position.csv").exists()
    sh = json.loads((diag / "shuffle.json").read_text())
    assert sh["seeds"] == [0, 1] and set(sh["perturbations"]["full"]) >= {
        "metrics", "metrics_std", "relative_change", "jaccard@10"}
    mix = json.loads((diag / "mixing.json").read_text())
    assert mix["stages"] == ["Attn", "+Res", "+LN"] and len(mix["layers"]) == 2
    assert set(mix["layers"][0]) == {"layer", "all", "last"} and set(mix["pooled"]) == {"all", "last"}
    al = json.loads((diag / "alpha.json").read_text())
    assert al["layers"] == "all" and [r["alpha"] for r in al["rows"]] == [1.0, 0.5, 0.0]
    assert set(al["rows"][0]) >= {"alpha", "mixing_all", "mixing_last", "HRLI@1", "HRL2I@1", "HR@10", "NDCG@10",
                                  "HR@10_unfiltered", "NDCG@10_unfiltered"}
    rec = json.loads((diag / "recovery.json").read_text())
    assert set(rec["test"]["offset_shares"]) == {"L-1", "L-2", "L-3"} and rec["K"] == 10
    assert json.loads((diag / "summary.json").read_text()) == summary
    assert summary["HRLI@1"] is not None and "mixing_pooled_all" in summary and "recovery" in summary
    text = format_summary(summary)
    assert "mixing ratio" in text and "alpha*" in text
    bands = json.loads((diag / "hrli.json").read_text())["by_frequency"]
    assert summary["HRLI@1_by_frequency"] == {b: {"n_users": v["n_users"], "HRLI@1": v["values"]["HRLI@1"]}
                                              for b, v in bands.items()}
    assert sum(v["n_users"] for v in bands.values()) == summary["n_users"]
    line = next(t for t in text.splitlines() if "by the last item's occurrences" in t)
    at = [line.index(f"{b}: ") for b in ("0", "1-4", "5-19", "20+")]
    assert at == sorted(at)  # in frequency order, whatever the JSON's key order
    hrli_rows = list(csv.DictReader((diag / "hrli.csv").open()))
    assert {r["band"] for r in hrli_rows} == {"all", *bands} and hrli_rows[0]["n_users"] == str(summary["n_users"])


def test_subset_keeps_the_other_figures_in_the_summary(run_dir):
    run_all(run_dir, what="hrli,mixing", progress=False)
    summary = run_all(run_dir, what="hrli", progress=False)
    assert "mixing_pooled_all" in summary and "HRLI@1" in summary
    other = run_all(run_dir, what="hrli", split="valid", progress=False)
    assert other["split"] == "valid" and "mixing_pooled_all" not in other  # mixing.json is for test


def test_parse_what():
    assert parse_what("all") == list(diagnostic_names()) == ["shuffle", "hrli", "mixing", "alpha", "recovery"]
    assert parse_what("recovery,hrli") == ["hrli", "recovery"]
    assert parse_what("HRLI, Mixing") == ["hrli", "mixing"] and parse_what("ALL") == parse_what("all")  # any case
    with pytest.raises(ResdomError, match="unknown diagnostic 'bogus'"):
        parse_what("hrli,bogus")


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    code = invoke(*args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_prints_summary_and_json(run_dir, monkeypatch, capsys):
    code, out, _ = _cli(monkeypatch, capsys, "diagnose", str(run_dir), "--what", "hrli,mixing", "--no-progress")
    assert code == 0 and "last-item hit rates" in out and "mixing ratio (norm_of_sums)" in out
    code, out, _ = _cli(monkeypatch, capsys, "diagnose", str(run_dir), "--what", "mixing", "--json",
                        "--definition", "sum_of_norms", "--split", "valid")
    assert code == 0 and json.loads(out)["mixing_definition"] == "sum_of_norms"


@pytest.mark.parametrize("args, message", [
    (["--what", "bogus"], "--what"),
    (["--split", "train"], "--part"),
    (["--definition", "mean"], "--definition"),
    (["--layers", "0,7", "--what", "alpha"], "--layers"),
])
def test_cli_user_errors_exit_2_with_one_line(run_dir, monkeypatch, capsys, args, message):
    code, _, err = _cli(monkeypatch, capsys, "diagnose", str(run_dir), *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_cli_missing_run_dir(tmp_path, monkeypatch, capsys):
    code, _, err = _cli(monkeypatch, capsys, "diagnose", str(tmp_path / "nope"))
    assert code == 2 and "run directory not found" in err


def test_a_second_diagnose_of_one_run_is_refused_while_the_first_writes(run_dir, monkeypatch, capsys):
    """Two calls at once would leave one call's files beside the other's (say --part valid and --part test) and a
    summary of either: the one that finds RUN_DIR/diagnostics locked says so in one line and writes nothing."""
    from resdom.io import directory_lock

    diag = run_dir / "diagnostics"
    diag.mkdir(exist_ok=True)
    with directory_lock(diag, "diagnosing"):
        before = {p.name: p.stat().st_mtime_ns for p in diag.iterdir()}  # the holder's lock file among them
        code, out, err = _cli(monkeypatch, capsys, "diagnose", str(run_dir), "--what", "hrli", "--no-progress")
        with pytest.raises(ResdomError, match="another process is already diagnosing there"):
            run_all(run_dir, what="hrli", progress=False)
    assert code == 2 and "another process is already diagnosing there" in err and len(err.strip().splitlines()) == 1
    assert not out and {p.name: p.stat().st_mtime_ns for p in diag.iterdir()} == before
    code, _, _ = _cli(monkeypatch, capsys, "diagnose", str(run_dir), "--what", "hrli", "--no-progress")
    assert code == 0  # released with the call


def test_the_lock_alone_is_no_result(tmp_path):
    """A diagnose that failed leaves diagnostics/.lock: no result that training afresh would replace."""
    from resdom.io import directory_lock
    from resdom.rundir import RunDir, holds_results

    with directory_lock(tmp_path / "diagnostics", "diagnosing"):
        pass
    assert not holds_results(RunDir(tmp_path))
    (tmp_path / "diagnostics" / "hrli.json").write_text("{}")
    assert holds_results(RunDir(tmp_path))


def test_a_killed_diagnoses_temporaries_are_no_result_and_the_next_diagnose_removes_them(run_dir, tmp_path):
    """A diagnose killed while writing leaves diagnostics/.NAME.*.tmp (and a killed torch.save's .tmp*): neither
    is a result that training afresh would replace, and the next diagnose (under the folder's lock) deletes them."""
    from resdom.rundir import RunDir, holds_results

    bare = tmp_path / "bare"
    (bare / "diagnostics").mkdir(parents=True)
    for name in (".hrli.json.x1y2.tmp", ".tmpabc"):
        (bare / "diagnostics" / name).write_text("half")
    assert not holds_results(RunDir(bare))
    (bare / "diagnostics" / "hrli.json").write_text("{}")
    assert holds_results(RunDir(bare))

    diag = run_dir / "diagnostics"
    diag.mkdir(exist_ok=True)
    (diag / ".hrli.json.x1y2.tmp").write_text("half")
    run_all(run_dir, what="hrli", progress=False)
    assert not any(p.name.endswith(".tmp") for p in diag.iterdir()) and (diag / "hrli.json").is_file()


def test_a_grid_summarising_a_run_again_is_refused_while_a_diagnose_writes_there(run_dir):
    """A resumed grid cell with every diagnostic in place writes summary.json again (``_resummarise``): under the
    diagnostics folder's lock, as ``run_all`` writes it, so a diagnose running there meanwhile is not left with a
    summary of files it is replacing; refused in one line while one holds it, done once it is released."""
    from resdom.io import directory_lock
    from resdom.pipeline.common import _resummarise
    from resdom.runs import checkpoint_id

    run_all(run_dir, what="hrli", progress=False)
    summary = run_dir / "diagnostics" / "summary.json"
    before = summary.read_bytes()
    with directory_lock(run_dir / "diagnostics", "diagnosing"):
        with pytest.raises(ResdomError, match="another process is already diagnosing there"):
            _resummarise(run_dir)
        assert summary.read_bytes() == before
    assert _resummarise(run_dir)["checkpoint"] == checkpoint_id(run_dir / "model.safetensors")


def test_the_per_user_evidence_alone_names_its_users_in_the_summary(run_dir, tmp_path, monkeypatch, capsys):
    """`diagnose RUN --what users` on a run with no diagnostic yet printed "split test, ? users": the summary read
    the users' count from the diagnostics' JSON files only; users.npz's header counts them too."""
    import shutil

    from resdom.diagnostics.evidence import read_header

    fresh = tmp_path / "run"
    shutil.copytree(run_dir, fresh, ignore=shutil.ignore_patterns("diagnostics"))
    code, out, _ = _cli(monkeypatch, capsys, "diagnose", str(fresh), "--what", "users", "--no-progress")
    n = (read_header(fresh / "diagnostics" / "users.npz") or {}).get("n_users")
    assert code == 0 and isinstance(n, int) and n > 0
    assert out.splitlines()[0] == f"split test, {n} users" and "?" not in out
    assert format_summary({"split": "test"}).splitlines()[0] == "split test"  # no count known: none printed


def test_the_summary_counts_users_with_separators_and_in_the_singular():
    """diagnose printed 'split test, 12345 users' and 'miss recovery (test, 1 users)' where data split prints 12,345
    and a count of one is '1 user'."""
    recovery = {"n_users": 1, "offset_shares": {"L-1": 0.0}, "recoverable_share": 0.0, "alpha_star": 1.0,
                "recovery_at_alpha_star": None, "HR@10_at_alpha_star": 1.0, "HR@10_at_alpha_1": 1.0,
                "max_recovery": None}
    bands = {"0": {"n_users": 1, "HRLI@1": 1.0}, "1-4": {"n_users": 12345, "HRLI@1": 0.5}}
    text = format_summary({"split": "test", "n_users": 12345, "recovery": recovery, "HRLI@1": 0.5,
                           "HRLI@1_by_frequency": bands})
    lines = text.splitlines()
    assert lines[0] == "split test, 12,345 users"
    assert "0:  1.000 (1 user)" in text and "1-4:  0.500 (12,345 users)" in text
    assert next(t for t in lines if t.startswith("miss recovery")).startswith("miss recovery (test, 1 user):")
    assert format_summary({"split": "valid", "n_users": 1}).splitlines()[0] == "split valid, 1 user"


def test_a_hand_edited_count_is_printed_as_it_is_not_a_traceback():
    """A summary.json whose n_users was edited to text printed it as such; the count helper must not raise on it."""
    import numpy as np

    from resdom.records import counted

    assert format_summary({"split": "test", "n_users": "40"}).splitlines()[0] == "split test, 40 users"
    assert counted(np.int64(1)) == "1 user" and counted(np.int64(1234), "item") == "1,234 items"
    assert counted(True) == "True users" and counted(2.5) == "2.5 users"
