"""Issue 28 section 3: crafted or broken inputs end in one clear line (exit 2, no traceback), nothing the user
owns is overwritten, and nothing blows up (output folders, importer configs, rediagnose paths, the demo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke

from resdom.errors import ResdomError
from resdom.rundir import check_output_folder

SOURCE = "synthetic:n_users=40,n_items=25,min_len=5,max_len=10"
TINY = ["--set", "model.hidden=8", "--set", "model.layers=1", "--set", "model.max_len=8", "--device", "cpu"]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = invoke(*args)
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(code: int, err: str, *needles: str) -> str:
    """Assert a clean failure: exit 2, no traceback, one ``error:`` line holding every needle; returns it."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ----------------------------------------------------------------------------------------- output folders


def test_train_refuses_a_folder_of_other_files_and_leaves_it_untouched(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}')  # a user's own config.json, not a run's
    (folder / "notes.txt").write_text("keep me")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(folder), "--epochs", "1", *TINY)
    one_line_error(code, err, "--out", "not a resdom run directory", "notes.txt")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


@pytest.mark.parametrize("command", [["train", SOURCE, *TINY], ["data", "split", SOURCE], ["report", "RUNS"]])
def test_out_naming_an_existing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 command: list[str]) -> None:
    target = tmp_path / "afile"
    target.write_text("precious")
    runs = tmp_path / "runs"
    runs.mkdir()
    args = [str(runs) if a == "RUNS" else a for a in command]
    code, _, err = run_cli(capsys, *args, "--out", str(target))
    one_line_error(code, err, "--out", "exists and is not a directory")
    assert target.read_text() == "precious"


def test_output_folder_rules(tmp_path: Path) -> None:
    check_output_folder(tmp_path / "new", runs=True)  # absent: fine
    empty = tmp_path / "empty"
    empty.mkdir()
    check_output_folder(empty, runs=True)
    check_output_folder(empty, runs=False)
    partial = tmp_path / "partial"  # a run killed before its config.json: data/, a lock, a temporary
    (partial / "data").mkdir(parents=True)
    (partial / ".lock").write_text("")
    (partial / ".config.json.abc.tmp").write_text("")
    check_output_folder(partial, runs=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": {"name": "sasrec"}, "train": {}, "versions": {}}))
    (run / "recs.csv").write_text("user,item\n")  # a run with a file of the user's beside it is still a run
    check_output_folder(run, runs=True)
    with pytest.raises(ResdomError, match="exists and is not empty"):
        check_output_folder(run, runs=False)
    check_output_folder(run, runs=False, force=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("[1, 2]")
    with pytest.raises(ResdomError, match="not a resdom run directory .it holds config.json"):
        check_output_folder(other, runs=True)


def test_api_fit_refuses_a_folder_of_other_files(tmp_path: Path) -> None:
    import resdom

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "metrics.json").write_text("{}")
    (folder / "paper.tex").write_text("")
    split = resdom.prepare_split(SOURCE, protocol="loo")
    with pytest.raises(ResdomError, match="out .*not a resdom run directory"):
        resdom.fit(split, "sasrec", out=folder, epochs=1, hidden=8, layers=1, max_len=8, device="cpu")
    assert (folder / "metrics.json").read_text() == "{}"
