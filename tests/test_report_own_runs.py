"""`resdom report` of one's own runs: the generic tables only (those with rows), the run's own coverage counting its
diagnostics/users.npz, no block of the reproduction study (claims, the paper side by side, remedies, probes, echo,
queues); a results-store cell brings the study's blocks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_helpers import invoke

import resdom
from resdom.report import build_report, is_study, read_runs

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
    assert not is_study(read_runs([run]))
    cell = tmp_path / "store" / "synthetic" / "sasrec" / "seed17"
    shutil.copytree(run, cell)
    checkpoint = json.loads((run / "diagnostics" / "hrli.json").read_text())["checkpoint"]
    (cell / "cell.json").write_text(json.dumps({"dataset": "synthetic", "label": "sasrec", "model": "sasrec",
                                                "seed": 17, "checkpoint": checkpoint}))
    assert is_study(read_runs([cell]))
    written = {p.name for p in build_report([cell], tmp_path / "rep2", figures=False).tables}
    assert {"claims.md", "fidelity.md", "coverage.md"} <= written
