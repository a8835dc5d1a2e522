"""`resdom report` of one's own runs: the generic report (resdom.report), its tables that have rows only, the run's
own coverage counting its diagnostics/users.npz, no block of the reproduction study (claims, the paper side by side,
remedies, probes, echo, queues); a results-store cell brings the study's blocks (resdom.study), which `resdom report`
chooses where it reads a store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import full_disk_after, invoke, run_cli

import resdom
from resdom.report import build_report, document_block_names, document_blocks
from resdom.study import build_report as build_study_report
from resdom.study import is_study

STUDY_FILES = {"claims.md", "fidelity.md", "echo.md", "probe_readout.md", "remedy_verdicts.md", "coverage.md",
               "published_accuracy.md", "five_models.md", "summary.md"}


def own_run(tmp_path: Path) -> Path:
    split = resdom.prepare_split("synthetic:n_users=80,n_items=30,seed=3", protocol="gts")
    run = tmp_path / "run"
    resdom.fit(split, "sasrec", out=run, epochs=1, hidden=8, heads=1, max_len=8, progress=False)
    assert invoke("diagnose", str(run), "--no-progress", "--device", "cpu") == 0
    return run


def test_a_report_of_ones_own_run_holds_only_what_applies(tmp_path: Path) -> None:
    run = own_run(tmp_path)
    assert (run / "diagnostics" / "users.npz").is_file()
    paths = build_report([run], tmp_path / "rep", figures=False)
    written = {p.name for p in paths.tables}
    assert not written & STUDY_FILES, written & STUDY_FILES
    assert {"accuracy.md", "hrli.md", "mixing.md", "shuffle.md", "recovery.md", "run_coverage.md"} <= written
    assert "remedies.md" not in written  # no remedy variant among the runs: no rows, not written
    coverage = (tmp_path / "rep" / "tables" / "run_coverage.md").read_text()
    assert "| alpha, hrli, mixing, recovery, shuffle, summary | yes |" in coverage and "in 1 of 1 run(s)" in coverage
    for f in (tmp_path / "rep" / "tables").glob("*.md"):
        text = f.read_text()
        assert "(no data)" not in text, f.name
        for word in ("issue", "queue", "scripts/", "grid"):
            assert word not in text.lower(), (f.name, word)


def test_a_store_cell_brings_the_studys_blocks(tmp_path: Path) -> None:
    run = own_run(tmp_path)
    assert not is_study([run])
    cell = tmp_path / "store" / "synthetic" / "sasrec" / "seed17"
    shutil.copytree(run, cell)
    checkpoint = json.loads((run / "diagnostics" / "hrli.json").read_text())["checkpoint"]
    (cell / "cell.json").write_text(json.dumps({"dataset": "synthetic", "label": "sasrec", "model": "sasrec",
                                                "seed": 17, "checkpoint": checkpoint}))
    assert is_study([cell]) and is_study([run, cell])
    written = {p.name for p in build_study_report([cell], tmp_path / "rep2", figures=False).tables}
    assert {"claims.md", "fidelity.md", "coverage.md"} <= written
    assert "run_coverage.md" not in written
    # the generic report of the same cell: no block of the study
    generic = {p.name for p in build_report([cell], tmp_path / "rep3", figures=False).tables}
    assert not generic & STUDY_FILES and "run_coverage.md" in generic


def test_resdom_report_chooses_the_study_for_a_store_and_the_generic_report_for_ones_own_runs(tmp_path: Path) -> None:
    run = own_run(tmp_path)
    cell = tmp_path / "store" / "synthetic" / "sasrec" / "seed17"
    shutil.copytree(run, cell)
    checkpoint = json.loads((run / "diagnostics" / "hrli.json").read_text())["checkpoint"]
    (cell / "cell.json").write_text(json.dumps({"dataset": "synthetic", "label": "sasrec", "model": "sasrec",
                                                "seed": 17, "checkpoint": checkpoint}))
    assert invoke("report", str(run), "--out", str(tmp_path / "titled"), "--tables-only", "--title", "T") == 2
    assert not (tmp_path / "titled").exists()  # --title titles what --tables-only leaves out: it was ignored
    assert invoke("report", str(run), "--out", str(tmp_path / "own"), "--tables-only") == 0
    own = {p.name for p in (tmp_path / "own" / "tables").glob("*.md")}
    assert "run_coverage.md" in own and not own & STUDY_FILES
    assert invoke("report", str(tmp_path / "store"), "--out", str(tmp_path / "cells"), "--tables-only") == 0
    cells = {p.name for p in (tmp_path / "cells" / "tables").glob("*.md")}
    assert STUDY_FILES <= cells and "run_coverage.md" not in cells


def test_the_generic_block_names_known_up_front_are_those_the_blocks_get(tmp_path: Path) -> None:
    """``document_block_names`` of the generic report (what `resdom report --doc` checks a document of one's own runs
    against) is exactly the set of names its ``document_blocks`` fills."""
    assert sorted(document_block_names()) == sorted(document_blocks([]))
    doc = tmp_path / "notes.md"
    doc.write_text("# mine\n<!-- resdom:table claims -->\n<!-- /resdom:table -->\n")
    assert invoke("report", str(own_run(tmp_path)), "--out", str(tmp_path / "rep"), "--doc", str(doc),
                  "--tables-only") == 2  # claims is a block of the study, not of one's own runs' report


@pytest.mark.slow
def test_the_pages_of_ones_own_run_show_only_the_figures_drawn(tmp_path: Path) -> None:
    from resdom.report.figures import figure_keys
    from resdom.report.html import MISSING, render_html, render_markdown

    run = own_run(tmp_path)
    paths = build_report([run], tmp_path / "rep")
    drawn = set(paths.figures)
    assert drawn and drawn < set(figure_keys())  # a one-epoch run: some figures have no data
    page, md = paths.html.read_text(), paths.markdown.read_text()  # type: ignore[union-attr]
    assert MISSING not in page and MISSING not in md
    for key in set(figure_keys()) - drawn:
        assert f'id="fig-{key}"' not in page
    # the study's page keeps a section for every figure, one without data saying so
    runs = paths.runs
    every = render_html(runs, [], paths.tables_data, "t", every_figure=True)
    assert every.count(MISSING) == len(figure_keys())
    assert render_markdown(runs, [], paths.tables_data, "t", every_figure=True).count(MISSING) == len(figure_keys())
    assert MISSING not in render_markdown(runs, [], paths.tables_data, "t")


def test_a_doc_that_is_a_folder_is_named_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = own_run(tmp_path)
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "rep"), "--doc", str(tmp_path))
    assert code == 2 and err.strip() == f"error: --doc {tmp_path}: is a folder; give a Markdown document"
    assert not (tmp_path / "rep").exists()


def test_force_never_moves_aside_the_runs_or_documents_the_report_reads(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = own_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(tmp_path), "--force")
    assert code == 2 and err.strip() == (f"error: --out {tmp_path}: holds the run directory {run}, which the report "
                                         "reads; choose a folder outside every run")
    assert (run / "config.json").is_file() and not list(tmp_path.parent.glob(f"{tmp_path.name}.replaced-*"))
    mine = tmp_path / "mine"
    mine.mkdir()
    doc = mine / "notes.md"
    doc.write_text("# mine\n")
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(mine), "--doc", str(doc), "--force")
    assert code == 2 and "holds the --doc" in err and doc.read_text() == "# mine\n"
    assert not list(tmp_path.glob("mine.replaced-*"))


def test_a_report_being_written_into_out_is_not_mixed_with_another(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Two `report --out` at once wrote their tables and figures over each other's, both exiting 0: the one that
    finds --out being written says so in one line and writes nothing; once the first is done, the report is
    written over as before."""
    from resdom.io import directory_lock

    run = own_run(tmp_path)
    capsys.readouterr()
    out = tmp_path / "rep"
    with directory_lock(out, "writing"):
        code, stdout, err = run_cli(capsys, "report", str(run), "--out", str(out), "--tables-only")
    assert code == 2 and err.strip() == (f"error: {out}: another process is already writing there; wait for it to "
                                         "finish or choose another --out")
    assert stdout == "" and [p.name for p in out.iterdir()] == [".lock"]
    assert run_cli(capsys, "report", str(run), "--out", str(out), "--tables-only")[0] == 0
    assert run_cli(capsys, "report", str(run), "--out", str(out), "--tables-only")[0] == 0


@pytest.mark.slow  # over 5 s of CPU: the fast subset stays under 2 minutes on 2 cores
def test_a_report_that_fails_half_way_leaves_its_folder_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A full disk after some of a report's files were written kept them beside the last report's others (new
    tables, old figures and pages): every file is now written before the first takes its place."""
    run = own_run(tmp_path)
    out = tmp_path / "rep"
    assert run_cli(capsys, "report", str(run), "--out", str(out))[0] == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert len([p for p in before if p.suffix == ".png"]) >= 2 and out / "report.html" in before
    hrli = json.loads((run / "diagnostics" / "hrli.json").read_text())
    hrli["values"]["HRLI@1"] = 0.5 if hrli["values"]["HRLI@1"] != 0.5 else 0.25  # the next report's tables differ
    (run / "diagnostics" / "hrli.json").write_text(json.dumps(hrli))
    n_ok = len([p for p in before if p.suffix in (".md", ".csv", ".tex", ".png", ".pdf")]) - 1  # the pages fail
    full_disk_after(monkeypatch, n_ok)
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(out))  # an earlier report: written over
    assert code == 2 and "no space left on device" in err and err.strip().count("\n") == 0, err
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before and not [p for p in out.rglob("*.tmp")]


def test_a_run_in_a_folder_whose_name_is_no_utf8_trains_loads_and_reports(tmp_path: Path) -> None:
    """A folder named in Latin-1 bytes (legal on Linux; Python holds its name with surrogates): training ran to its
    end and then could not read its own weights back ("the file is truncated or not a safetensors file": the
    safetensors reader takes only UTF-8 names), and a report quoting the path was a UnicodeEncodeError traceback."""
    import os

    folder = tmp_path / os.fsdecode(b"l\xe4uft")
    split = resdom.prepare_split("synthetic:n_users=80,n_items=30,seed=3", protocol="gts")
    fitted = resdom.fit(split, "sasrec", out=folder / "run", epochs=1, hidden=8, heads=1, max_len=8, progress=False)
    again = resdom.load_run(folder / "run", device="cpu")
    assert again.checkpoint == fitted.checkpoint and again.metrics["test"] == fitted.metrics["test"]
    assert invoke("diagnose", str(folder / "run"), "--what", "hrli", "--no-progress", "--device", "cpu") == 0
    paths = build_report([folder / "run"], folder / "rep")
    assert paths.html is not None and os.fsencode(paths.html).endswith(b"l\xe4uft/rep/report.html")
    assert b"l\xe4uft/run" in paths.html.read_bytes()  # the path as it is on disk


FIXTURE_RUNS = Path(__file__).resolve().parent / "fixtures" / "diagnostics"


@pytest.mark.parametrize("build", [build_report, build_study_report])
def test_the_apis_report_refuses_the_outputs_resdom_report_refuses(tmp_path: Path, build) -> None:
    """``build_report`` wrote report.html, figures/ and tables/ into the run directory it read (or a folder inside
    it), over a folder of the user's own files (its report.html replaced) and failed with a NotADirectoryError at
    a device (``/dev/null``): none of ``resdom report --out``'s checks. It makes them now, each a ResdomError naming
    ``out_dir``; ``overwrite=True`` moves a folder of other files aside, as --force does."""
    from resdom.errors import ResdomError
    from resdom.report import find_run_dirs

    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE_RUNS, runs)
    run = find_run_dirs(runs)[0]
    other = tmp_path / "other"
    other.mkdir()
    (other / "report.html").write_text("mine")
    refused = {run: "which the report reads", run / "sub": "which the report reads",
               runs: "holds the run directory", other: "overwrite=True to move it aside",
               run / "config.json": "is not a directory"}
    if Path("/dev/null").exists():
        refused[Path("/dev/null")] = "is not a directory"
    for out, needle in refused.items():
        with pytest.raises(ResdomError, match=f"^out_dir {out}: .*{needle}"):
            build([run], out, figures=False)
    assert (other / "report.html").read_text() == "mine" and not (run / "tables").exists()
    assert not (run / "sub").exists()
    build([run], other, figures=False, overwrite=True)
    assert (tmp_path / "other.replaced-1" / "report.html").read_text() == "mine"
    assert (other / "tables" / "tables.md").is_file()
    build([run], other, figures=False)  # an earlier report: written over, as resdom report does
