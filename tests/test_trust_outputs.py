"""Nothing written over that resdom did not write, and no silent mix.

Each test crafts its folder or file here (no committed binaries) and fails on the code before the change: a
command that wrote over a run, a store cell or a user's report, a symbolic link followed out of a run, diagnostics
of the valid split stored or reported as a cell's, resume state, split arrays and metrics that were taken as they
came, a copied cell counted as another seed, a malformed ``compute`` reported as a missing cell.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import SMALL_SYNTHETIC as SOURCE
from cli_helpers import TINY_MODEL as TINY
from cli_helpers import one_line_error, run_cli

from resdom.adapters.common import ImportData, write_run
from resdom.data.prepare import prepare_split
from resdom.data.sequences import SplitData
from resdom.diagnostics.runner import run_all
from resdom.errors import ResdomError
from resdom.io import atomic_write_json
from resdom.models import build_model, make_model_config
from resdom.pipeline.common import is_finished, missing_diagnostics
from resdom.pipeline.store import cell_dir, export_cell
from resdom.report.collect import read_run, read_runs
from resdom.rundir import MARKER, RunDir, check_output_folder, marked_kind
from resdom.runs import checkpoint_id
from resdom.training.state import STATE_FORMAT, RunFiles


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (relative path -> bytes): what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def split() -> SplitData:
    return prepare_split(SOURCE, protocol="loo")


def make_run(out: Path, split: SplitData) -> Path:
    """Maker: a run directory as `import-*` writes it (an untrained tiny SASRec; no training, milliseconds)."""
    torch.manual_seed(0)
    model = build_model(make_model_config(name="sasrec", n_items=split.n_items, max_len=8, hidden=8, layers=1,
                                          heads=1)).eval()
    labels = np.array([None, *range(1, split.n_items + 1)], dtype=object)
    return write_run(out, model, ImportData(split, labels, split.manifest), {"format": "test"})


def finish(run: Path) -> Path:
    """Maker: the run's final metrics.json, naming its checkpoint, and its epoch log (what a finished training
    leaves)."""
    metrics = {"valid": {"metrics": {"HR@10": 0.5, "NDCG@10": 0.25}, "n_users": 40},
               "test": {"metrics": {"HR@10": 0.4, "NDCG@10": 0.2}, "n_users": 40},
               "best_epoch": 1, "epochs_run": 1, "stopped": "max_epochs",
               "checkpoint": checkpoint_id(RunDir(run).model)}
    atomic_write_json(RunDir(run).final, metrics)
    RunDir(run).log.write_text(json.dumps({"epoch": 1, "loss": 1.0, "seconds": 0.1}) + "\n")
    return run


def make_cell(root: Path, dataset: str = "toy", label: str = "sasrec", seed: int = 1, checkpoint: str = "c0",
              **cell: object) -> Path:
    """Maker: a results-store cell as ``pipeline.store`` writes it (cell.json, config.json, metrics.json,
    diagnostics/, users.npz), its files all of ``checkpoint`` and the test split."""
    folder = cell_dir(root, dataset, label, seed)
    (folder / "diagnostics").mkdir(parents=True)
    (folder / "cell.json").write_text(json.dumps({"dataset": dataset, "label": label, "model": "sasrec",
                                                  "seed": seed, "checkpoint": checkpoint,
                                                  "compute": {"train_seconds": 60.0}, **cell}))
    (folder / "config.json").write_text(json.dumps({"label": label, "model": {"name": "sasrec"}, "train": {},
                                                    "versions": {}}))
    (folder / "metrics.json").write_text(json.dumps({"test": {"metrics": {"HR@10": 0.3, "NDCG@10": 0.1},
                                                              "n_users": 9}, "checkpoint": checkpoint}))
    (folder / "diagnostics" / "hrli.json").write_text(json.dumps({"values": {"HRLI@1": 0.5}, "n_users": 9,
                                                                  "split": "test", "checkpoint": checkpoint}))
    (folder / "users.npz").write_bytes(b"evidence")
    return folder


# ---------------------------------------------------------------------------------------------- data loss


def test_train_refuses_a_finished_run_without_state(tmp_path: Path, split: SplitData,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A finished run whose state/ was removed (or an imported run) was silently replaced by `train --out`: now
    refused, in one line that names --force."""
    run = finish(make_run(tmp_path / "run", split))
    before = files_of(run)
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(run), "--epochs", "1", *TINY)
    one_line_error(code, err, f"--out {run}: holds a finished run with no resume state", "--force")
    assert files_of(run) == before
    imported = make_run(tmp_path / "imported", split)  # imported weights, no metrics yet: replaced all the same
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(imported), "--epochs", "1", *TINY)
    one_line_error(code, err, "holds a trained or imported run with no resume state")


@pytest.mark.slow
def test_train_force_moves_the_old_run_aside_and_trains_anew(tmp_path: Path, split: SplitData,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """--force keeps the old run whole, renamed OUT.replaced-1, and trains anew (slow: it trains)."""
    run = finish(make_run(tmp_path / "run", split))
    before = files_of(run)
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(run), "--epochs", "1", *TINY, "--force")
    assert code == 0, err
    assert f"moved aside to {tmp_path / 'run.replaced-1'}" in err
    assert files_of(tmp_path / "run.replaced-1") == before  # nothing of the old run lost
    assert (run / "state" / "trainer.json").is_file() and marked_kind(run) == "run"


@pytest.mark.parametrize("force", [False, True])
def test_train_and_import_never_write_over_a_store_cell(tmp_path: Path, split: SplitData, force: bool,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A results-store cell has a run's config.json (model, versions): `train --out CELL` trained into it and
    `import-* --out CELL --force` deleted its diagnostics and metrics. Refused, --force or not."""
    cell = make_cell(tmp_path / "store")
    before = files_of(cell)
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(cell), "--epochs", "1", *TINY,
                           *(["--force"] if force else []))
    one_line_error(code, err, f"--out {cell}: is a results-store cell", "--force included")
    with pytest.raises(ResdomError, match="is a results-store cell"):
        make_run_at = write_run  # the importers' writer (import-recbole, -pmixer, -rectools)
        torch.manual_seed(0)
        model = build_model(make_model_config(name="sasrec", n_items=split.n_items, max_len=8, hidden=8, layers=1,
                                              heads=1))
        labels = np.array([None, *range(1, split.n_items + 1)], dtype=object)
        make_run_at(cell, model, ImportData(split, labels, split.manifest), {"format": "test"}, force=force)
    assert files_of(cell) == before


def test_import_force_moves_the_old_run_aside_with_its_diagnostics(tmp_path: Path, split: SplitData) -> None:
    """`import-* --out RUN --force` deleted the run's diagnostics/ and state/; now the old run is renamed, whole.
    A run written before markers existed (no marker) is still recognised as a run."""
    run = finish(make_run(tmp_path / "run", split))
    (run / MARKER).unlink(missing_ok=True)  # a run of an earlier resdom
    (run / "diagnostics").mkdir()
    (run / "diagnostics" / "hrli.json").write_text('{"split": "test"}')
    before = files_of(run)
    with pytest.raises(ResdomError, match="exists and is not empty .*--force to move it aside"):
        make_run(run, split)
    assert check_output_folder(run, runs=False, force=True) is True
    torch.manual_seed(0)
    model = build_model(make_model_config(name="sasrec", n_items=split.n_items, max_len=8, hidden=8, layers=1, heads=1))
    labels = np.array([None, *range(1, split.n_items + 1)], dtype=object)
    write_run(run, model, ImportData(split, labels, split.manifest), {"format": "test"}, force=True)
    assert files_of(tmp_path / "run.replaced-1") == before
    assert not (run / "diagnostics").exists() and marked_kind(run) == "run"


def test_report_never_writes_over_the_users_files(tmp_path: Path, split: SplitData,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`report --out DIR` overwrote report.md and tables/*.md the user wrote there. Refused; --force moves DIR
    aside; a report's own folder (its marker, or the report.md / tables/tables.md a report writes) is written
    again."""
    run = make_run(tmp_path / "run", split)
    mine = tmp_path / "notes"
    (mine / "tables").mkdir(parents=True)
    (mine / "report.md").write_text("# my own notes\n\nnot a resdom report\n")
    (mine / "tables" / "accuracy.md").write_text("| my | table |\n")
    before = files_of(mine)
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(mine), "--tables-only")
    one_line_error(code, err, f"--out {mine}: holds what a report does not write (report.md, tables)", "--force")
    assert files_of(mine) == before
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(mine), "--tables-only", "--force")
    assert code == 0, err
    assert files_of(tmp_path / "notes.replaced-1") == before
    assert run_cli(capsys, "report", str(run), "--out", str(mine), "--tables-only")[0] == 0  # its own: again
    (mine / "tables" / "tables.md").write_text("| my | table |\n")  # not the report's any more: refused
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(mine), "--tables-only")
    one_line_error(code, err, "holds what a report does not write (tables)")
    old = tmp_path / "old"  # a report folder of an earlier resdom: no marker, report.md as render_markdown wrote
    (old / "tables").mkdir(parents=True)
    (old / "report.md").write_text("# resdom report\n\n3 run(s).\n\n## Findings\n")
    (old / "measurements").mkdir()  # the user's own folder beside it is kept as it is
    (old / "measurements" / "m.json").write_text("{}")
    assert run_cli(capsys, "report", str(run), "--out", str(old), "--tables-only")[0] == 0
    assert (old / "measurements" / "m.json").read_text() == "{}"


@pytest.mark.parametrize("command, option", [("recommend", "--users"), ("recommend", "--sequences"),
                                             ("recommend", "--items"), ("recommend", "--exclude"),
                                             ("similar", "--items"), ("config", "--config")])
def test_an_output_file_is_never_one_of_the_commands_inputs(tmp_path: Path, split: SplitData, command: str,
                                                           option: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``recommend --users recs.csv --out recs.csv`` (a recommendations file is a valid list of users, and of
    sessions), ``similar --items sims.csv --out sims.csv`` and ``config show --config c.yaml --out c.yaml`` wrote
    the output over the file they read, as an earlier output of theirs may be replaced; refused, in one line naming
    both options, also through a link, and the file is left as it was."""
    run = make_run(tmp_path / "run", split)
    given = tmp_path / "given.csv"
    first = {"recommend": ["recommend", str(run), "--device", "cpu"], "similar": ["similar", str(run), "--device",
                                                                                 "cpu"]}.get(command)
    if first is not None:  # an earlier output of the same command, read back as the ids or sessions
        code, out, err = run_cli(capsys, *first)
        assert code == 0, err
        given.write_text(out)
        args = [*first, option, str(given)]
    else:
        given = tmp_path / "c.yaml"
        assert run_cli(capsys, "config", "show", "sasrec", "--out", str(given))[0] == 0
        args = ["config", "show", option, str(given)]
    before = given.read_bytes()
    link = tmp_path / "link"
    link.symlink_to(given)
    for out in (given, link):
        code, _, err = run_cli(capsys, *args, "--out", str(out))
        one_line_error(code, err, f"--out {out}: is the file {option} reads")
        assert given.read_bytes() == before


@pytest.mark.parametrize("command", ["recommend", "similar", "evaluate", "config"])
def test_an_output_file_is_never_a_device_a_fifo_or_a_system_link(tmp_path: Path, split: SplitData, command: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--out /dev/null`` or ``--out /dev/stdout`` renamed the new file onto the device or the system's link (as
    root /dev/null became a regular file, breaking the machine), and ``--out FIFO`` waited forever reading the
    FIFO's first line; each is refused in one line before anything is read or written. Made safely: a link in
    tmp_path to /dev/null (the old code replaced the link) and a FIFO held open with a header line in it."""
    import os

    run = make_run(tmp_path / "run", split)
    args = {"recommend": ["recommend", str(run), "--device", "cpu", "--out"],
            "similar": ["similar", str(run), "--device", "cpu", "--out"],
            "evaluate": ["evaluate", str(run), "--device", "cpu", "--per-user"],
            "config": ["config", "show", "sasrec", "--out"]}[command]
    link = tmp_path / "null.csv"
    link.symlink_to(os.devnull)
    code, _, err = run_cli(capsys, *args, str(link))
    one_line_error(code, err, f"{link}: a character device, not a regular file")
    assert link.is_symlink()
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # the old code's read of its first line returns this header
    try:
        os.write(held, b"user_id,item_id,score,rank\ntarget_item_id,item_id,score,rank\n# resdom \n")
        code, _, err = run_cli(capsys, *args, str(fifo))
    finally:
        os.close(held)
    one_line_error(code, err, f"{fifo}: a FIFO (named pipe), not a regular file")
    assert fifo.is_fifo()


def test_no_write_replaces_a_system_link_or_device() -> None:
    """What every atomic write refuses (checked without writing): /dev/stdout, /dev/fd/1 and /proc/self/fd/1 (links
    of the system, whatever stdout is), /dev/null (a device); a file in /dev/shm or anywhere else is a file."""
    from resdom.io import not_a_file_to_replace

    for path in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", "/dev/null"):
        assert not_a_file_to_replace(path) is not None, path
    assert not_a_file_to_replace("/dev/shm/recs.csv") is None and not_a_file_to_replace("recs.csv") is None


def test_diagnose_never_follows_a_diagnostics_link_out_of_the_run(tmp_path: Path, split: SplitData,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A `diagnostics` symlink in a run folder made diagnose delete and rewrite files in the folder it points
    to; refused, that folder untouched."""
    run = make_run(tmp_path / "run", split)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "hrli.json").write_text('{"checkpoint": "someone else\'s"}')  # discard_stale would delete it
    (elsewhere / "summary.json").write_text("{}")
    (run / "diagnostics").symlink_to(elsewhere)
    before = files_of(elsewhere)
    code, _, err = run_cli(capsys, "diagnose", str(run), "--what", "hrli", "--device", "cpu")
    one_line_error(code, err, "diagnostics is a symbolic link out of the folder", str(elsewhere))
    assert files_of(elsewhere) == before
    (run / "metrics.jsonl").symlink_to(elsewhere / "summary.json")  # the trainer appends to its epoch log
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(run), "--epochs", "1", *TINY, "--force")
    one_line_error(code, err, "is a symbolic link out of the folder")
    assert files_of(elsewhere) == before


def test_data_split_force_moves_the_other_split_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`data split --force` wrote the new split over another one; now the old split is kept, renamed."""
    out = tmp_path / "split"
    assert run_cli(capsys, "data", "split", SOURCE, "--out", str(out))[0] == 0
    loo = files_of(out)
    assert marked_kind(out) == "split"
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--protocol", "gts", "--out", str(out), "--force")
    assert code == 0, err
    assert files_of(tmp_path / "split.replaced-1") == loo
    assert SplitData.load(out).manifest["protocol"] == "gts"


def test_no_writer_takes_a_store_cell_or_another_commands_folder(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Every folder-writing command refuses a results-store cell, --force included; the demo and reproduce refuse
    one as --out too. A folder marked as another command's output is named as such."""
    from resdom.pipeline.demo import _check_out
    from resdom.pipeline.reproduce import GridSpec

    cell = make_cell(tmp_path / "store")
    other = make_cell(tmp_path / "other", checkpoint="c1")
    before = files_of(cell)
    for args in (["report", str(other), "--out", str(cell), "--force"],
                 ["data", "split", SOURCE, "--out", str(cell), "--force"]):
        code, _, err = run_cli(capsys, *args)
        assert code == 2 and ("results-store cell" in err or "is a run directory" in err), err
    with pytest.raises(ResdomError, match="is a results-store cell"):
        _check_out(cell, force=True)
    with pytest.raises(ResdomError, match="is a results-store cell"):
        GridSpec(datasets=[SOURCE], models=["sasrec"], seeds=[1], out=cell)
    assert files_of(cell) == before
    split = tmp_path / "split"
    assert run_cli(capsys, "data", "split", SOURCE, "--out", str(split))[0] == 0
    code, _, err = run_cli(capsys, "report", str(other), "--out", str(split))
    one_line_error(code, err, "holds a split saved by `resdom data split`, not a report written by `resdom report`")


# ------------------------------------------------------------------------------------ wrong answers, silent


@pytest.fixture()
def mixed_run(tmp_path: Path, split: SplitData) -> Path:
    """Maker: a finished run whose hrli.json is of the valid split and whose other files are of the test split:
    `diagnose --what hrli --split valid`, then a `diagnose --split test` of shuffle only (or one killed before it
    rewrote hrli.json)."""
    run = finish(make_run(tmp_path / "grid" / "toy" / "sasrec" / "seed1", split))
    run_all(run, what="hrli", split="valid", progress=False)
    run_all(run, what="shuffle", split="test", progress=False)
    assert json.loads(RunDir(run).diagnostic("hrli").read_text())["split"] == "valid"
    assert json.loads(RunDir(run).summary.read_text())["split"] == "test"
    return run


def test_store_and_reproduce_refuse_diagnostics_of_another_split(mixed_run: Path, tmp_path: Path) -> None:
    """The store export and reproduce checked only the checkpoint, so valid-split diagnostics became a cell's."""
    with pytest.raises(ResdomError, match=r"hrli.json: computed on the 'valid' split, not test; rerun `resdom "
                                          r"diagnose --part test`"):
        export_cell(mixed_run, tmp_path / "store", "toy", "sasrec", 1)
    assert not (tmp_path / "store").exists()
    assert "hrli" in missing_diagnostics(mixed_run)  # reproduce computes it again, on the test split
    run_all(mixed_run, what="mixing", split="valid", progress=False)  # the last diagnose: valid
    assert not is_finished(mixed_run)  # reproduce does not skip the cell as done


def test_report_leaves_out_diagnostics_of_another_split_and_says_which(mixed_run: Path) -> None:
    """A killed `diagnose --split test` after a valid-split run left a mix that the report showed together."""
    record = read_run(mixed_run)
    assert "hrli" not in record.diagnostics and "shuffle" in record.diagnostics
    assert record.why_empty("hrli") == "hrli.json computed on the 'valid' split, not test"


@pytest.mark.parametrize("dropped", ["split", "checkpoint"])
def test_a_diagnostic_naming_no_split_or_checkpoint_is_not_taken_as_the_cells(tmp_path: Path, split: SplitData,
                                                                             dropped: str) -> None:
    """A diagnostic's JSON without its split (or checkpoint) field was read as the test split's (a file naming no
    split was taken as the test split): now the store export refuses the run naming the file, reproduce computes it
    again, and the report leaves it out saying why. Maker: a finished, diagnosed run, the field removed from
    hrli.json."""
    run = finish(make_run(tmp_path / "run", split))
    run_all(run, what=["hrli", "shuffle"], split="test", progress=False)
    hrli = RunDir(run).diagnostic("hrli")
    data = json.loads(hrli.read_text())
    del data[dropped]
    hrli.write_text(json.dumps(data))
    with pytest.raises(ResdomError, match=f"hrli.json: names no {dropped} ") as e:
        export_cell(run, tmp_path / "store", "toy", "sasrec", 1)
    assert "\n" not in str(e.value) and not (tmp_path / "store").exists()
    assert "hrli" in missing_diagnostics(run) and "shuffle" not in missing_diagnostics(run)
    record = read_run(run)
    assert "hrli" not in record.diagnostics and "shuffle" in record.diagnostics
    assert record.why_empty("hrli").startswith(f"hrli.json names no {dropped} (")
    summary = RunDir(run).summary  # summary.json naming no split: the run is not a finished cell
    data = json.loads(summary.read_text())
    assert is_finished(run)
    del data[dropped]
    summary.write_text(json.dumps(data))
    assert not is_finished(run)


@pytest.mark.parametrize("header_change,needle", [
    ({"split": "valid"}, "users.npz computed on the 'valid' split, not test"),
    ({"checkpoint": None}, "users.npz names no checkpoint ("),
    ({"checkpoint": "0123456789abcdef"}, "users.npz computed on another checkpoint (0123456789abcdef, not "),
])
def test_per_user_evidence_of_another_split_or_checkpoint_is_left_out(tmp_path: Path, split: SplitData,
                                                                     header_change: dict, needle: str) -> None:
    """users.npz whose header names another split or checkpoint (or none) was read by the report as the run's (its
    proportions, the coverage of evidence), and its split was not checked by the store. Maker: a diagnosed run's
    users.npz rewritten with one header field changed."""
    from resdom.diagnostics.evidence import UserEvidence, read_users

    run = finish(make_run(tmp_path / "run", split))
    run_all(run, what=["hrli", "users"], split="test", progress=False)
    assert read_run(run).users_path == RunDir(run).users  # the honest one is the run's evidence
    header, arrays = read_users(RunDir(run).users)
    header = {k: v for k, v in {**header, **header_change}.items() if v is not None}
    RunDir(run).users.write_bytes(UserEvidence(header, arrays).to_bytes())
    record = read_run(run)
    assert record.users_path is None and record.why_empty("users").startswith(needle)
    assert "users" in missing_diagnostics(run)
    with pytest.raises(ResdomError, match="users.npz: "):
        export_cell(run, tmp_path / "store", "toy", "sasrec", 1)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("change,field", [
    ({"early_stopping": {"best_value": float("nan"), "best_epoch": 2, "bad_epochs": 0}}, "early_stopping.best_value"),
    ({"early_stopping": {"best_value": float("inf"), "best_epoch": 2, "bad_epochs": 0}}, "early_stopping.best_value"),
    ({"epoch": -3}, "field epoch is -3"),
    ({"epoch": 10**12}, "field epoch is 1000000000000"),
    ({"epoch": True}, "field epoch is True"),
    ({"early_stopping": {"best_value": 0.1, "best_epoch": -1, "bad_epochs": 0}}, "early_stopping.best_epoch"),
])
def test_resume_state_out_of_range_is_refused_naming_file_and_field(tmp_path: Path, change: dict,
                                                                     field: str) -> None:
    """A best_value of NaN resumed and kept the epoch-2 model for ever (nothing beats NaN); epoch -3 or 10^12 was
    taken. Maker: trainer.json as the trainer writes it, one value changed."""
    files = RunFiles(tmp_path / "run")
    state = {"format": STATE_FORMAT, "epoch": 3, "stopped": None, "model": {}, "train": {"epochs": 20},
             "data_fingerprint": "f", "optimizer_meta": {},
             "files": {"model": "model-0003.safetensors", "optimizer": "optimizer-0003.safetensors"},
             "early_stopping": {"best_value": 0.1, "best_epoch": 2, "bad_epochs": 1}}
    files.state_dir.mkdir(parents=True)
    files.state.write_text(json.dumps(state))
    assert files.read_state() is not None  # the honest one is read
    files.state.write_text(json.dumps({**state, **change}))
    with pytest.raises(ResdomError, match="trainer.json: field") as e:
        files.read_state()
    assert field in str(e.value) and "\n" not in str(e.value)


def test_negative_user_indices_in_a_split_are_refused(tmp_path: Path, split: SplitData) -> None:
    """A user index of -1 in arrays.npz made `recommend` label that row with the last user's id. Maker: a saved
    split, its test_users[0] set to -1."""
    split.save(tmp_path / "split")
    path = tmp_path / "split" / SplitData.ARRAYS
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["test_users"] = arrays["test_users"].copy()
    arrays["test_users"][0] = -1
    np.savez_compressed(path, **arrays)
    with pytest.raises(ResdomError, match=r"arrays.npz: .*test_users holds a negative user index \(-1\)"):
        SplitData.load(tmp_path / "split")
    # maker: the full sequences of a user the parts do not hold (``rest``), its index past the user labels
    from resdom.data.sequences import Sequences

    split.rest = Sequences.from_lists([[1, 2, 3]], users=np.array([len(split.user_labels) + 5]))
    try:
        split.save(tmp_path / "rest")
    finally:
        split.rest = None
    with pytest.raises(ResdomError, match=r"40 user labels for user indices up to 45"):
        SplitData.load(tmp_path / "rest")


@pytest.mark.parametrize("value,needle", [
    ("NaN", "field test.metrics.HR@10 is nan, not a finite number"),
    ("Infinity", "field test.metrics.HR@10 is inf, not a finite number"),
    ("7.5", "field test.metrics.HR@10 is 7.5; a rate must be a number in [0, 1]"),
    ('"0.3"', "field test.metrics.HR@10 is '0.3'; a rate must be a number in [0, 1]"),
])
def test_metrics_out_of_range_never_enter_the_tables(tmp_path: Path, value: str, needle: str) -> None:
    """metrics.json values NaN, inf or 7.5 entered the tables as numbers. Maker: a store cell's metrics.json with
    one value replaced (as text: JSON's NaN and Infinity)."""
    cell = make_cell(tmp_path / "store")
    text = (cell / "metrics.json").read_text().replace("0.3", value, 1)
    (cell / "metrics.json").write_text(text)
    with pytest.raises(ResdomError, match="metrics.json: field") as e:
        read_run(cell)
    assert needle in str(e.value) and str(cell / "metrics.json") in str(e.value)


@pytest.mark.parametrize("file, data, needle", [
    ("hrli.json", {"values": {"HRLI@1": 1e308}}, "field values.HRLI@1 is 1e+308; a rate must be a number in [0, 1]"),
    ("hrli.json", {"values": {"HRL2I@1": -0.5}}, "field values.HRL2I@1 is -0.5; a rate must be"),
    ("hrli.json", {"values": {"HRLI@1": "x"}}, "field values.HRLI@1 is 'x'; a rate must be"),
    ("hrli.json", {"n_users": -9}, "field n_users is -9; it must be a non-negative integer"),
    ("mixing.json", {"pooled": {"all": {"Attn": float("nan")}}}, "field pooled.all.Attn is nan, not a finite number"),
    ("mixing.json", {"pooled": {"all": {"+Res": 3.0}}}, "field pooled.all.+Res is 3.0; a rate must be"),
    ("shuffle.json", {"perturbations": {"full": {"relative_change": {"HR@10": float("inf")}}}}, "is inf, not a finite"),
])
def test_a_diagnostic_out_of_range_never_enters_a_table_or_figure(tmp_path: Path, file: str, data: dict,
                                                                   needle: str) -> None:
    """A diagnostic's JSON with an HRLI@1 of 1e308, a mixing ratio of NaN or a negative count was drawn and tabled
    as read (metrics.json alone was checked). Maker: a store cell with one diagnostic file's values replaced."""
    cell = make_cell(tmp_path / "store")
    (cell / "diagnostics" / file).write_text(json.dumps({"values": {"HRLI@1": 0.5}, "n_users": 9, "split": "test",
                                                         "checkpoint": "c0", **data}))
    with pytest.raises(ResdomError, match=f"{file}: field") as e:
        read_run(cell)
    assert needle in str(e.value) and str(cell / "diagnostics" / file) in str(e.value)


@pytest.mark.parametrize(("compute", "needle"), [
    ({"train_seconds": -600.0}, "field compute.train_seconds is -600.0; a duration must be seconds in [0, "),
    ({"train_seconds": 1e30}, "field compute.train_seconds is 1e+30; a duration must be seconds in [0, "),
    ({"train_seconds": 60.0, "diagnose_seconds": "x"}, "field compute.diagnose_seconds is 'x'; a duration must"),
])
def test_a_cell_with_negative_or_absurd_seconds_is_refused(tmp_path: Path, compute: dict, needle: str) -> None:
    """A cell.json whose compute section said -600 or 1e30 training seconds was tabled as read: "Train min -10" in
    the training table. Maker: a store cell with compute replaced; a diagnostic's seconds are checked alike."""
    cell = make_cell(tmp_path / "store", compute=compute)
    with pytest.raises(ResdomError) as e:
        read_run(cell)
    assert str(e.value).startswith(f"{cell / 'cell.json'}: {needle}")
    (cell / "cell.json").write_text(json.dumps({**json.loads((cell / "cell.json").read_text()),
                                                "compute": {"train_seconds": 0.0, "diagnose_seconds": None}}))
    assert read_run(cell).cell["compute"]["train_seconds"] == 0.0
    (cell / "diagnostics" / "hrli.json").write_text(json.dumps({"values": {"HRLI@1": 0.5}, "n_users": 9, "split":
                                                                "test", "checkpoint": "c0", "seconds": -1}))
    with pytest.raises(ResdomError, match="hrli.json: field seconds is -1; a duration"):
        read_run(cell)


_ROW = '{"epoch": %s, "loss": %s, "valid": {"NDCG@10": 0.1}, "seconds": 2.0}'


@pytest.mark.parametrize(("lines", "needle"), [
    ([_ROW % (1, 2.5), _ROW % (2, "NaN")], ":2: field loss is nan; a loss must be a finite non-negative number"),
    ([_ROW % (1, -2.5)], ":1: field loss is -2.5; a loss must be"),
    ([_ROW % (1, '"2.5"')], ":1: field loss is '2.5'; a loss must be"),
    ([_ROW % (2, 2.5), _ROW % (1, 2.4)], ":2: field epoch is 1 after epoch 2; epochs must be whole numbers in "
     "increasing order"),
    ([_ROW % (1, 2.5), _ROW % (1, 2.5)], ":2: field epoch is 1 after epoch 1"),
    ([_ROW % (1, 2.5), (_ROW % (2, 2.4))[:-9]], ":2: not a JSON object (a torn or damaged line)"),
    ([(_ROW % (1, 2.5)).replace("2.0}", "-3.0}")], ":1: field seconds is -3.0; a duration must be"),
])
def test_a_cell_curve_out_of_order_or_out_of_range_is_refused(tmp_path: Path, lines: list[str],
                                                              needle: str) -> None:
    """A cell's curve.jsonl with a NaN, negative or string loss, epochs repeated or out of order, or a torn line
    was read as it was (a torn line skipped without a word, an epoch counted twice in the summed seconds and the
    curves). Maker: a store cell with a written curve.jsonl."""
    cell = make_cell(tmp_path / "store")
    (cell / "curve.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ResdomError) as e:
        read_run(cell)
    assert str(e.value).startswith(f"{cell / 'curve.jsonl'}{needle}")
    (cell / "curve.jsonl").write_text("\n".join(_ROW % (k, 2.5 - k / 10) for k in (1, 2, 4)) + "\n")
    assert [r["epoch"] for r in read_run(cell).curve] == [1, 2, 4]


def test_a_diagnostic_may_hold_an_empty_band_and_a_negative_change() -> None:
    """What resdom writes passes: an HRLI band without users (null), a shuffle's relative change of -0.8."""
    from resdom.stored import metrics_problem

    data = {"by_frequency": {"0": {"n_users": 0, "values": {"HRLI@1": None}}},
            "perturbations": {"full": {"relative_change": {"NDCG@10": -0.8}}}, "shuffle_NDCG@10_change": {"full": -0.8}}
    assert metrics_problem(data, "x.json", diagnostic=True) is None
    assert metrics_problem(data, "x.json") is not None  # in metrics.json a null rate is refused


def test_a_copied_cell_relabelled_as_another_seed_is_refused(tmp_path: Path, split: SplitData) -> None:
    """A copy of a cell relabelled as another seed (one checkpoint id) counted as one more seed. Maker: seed1
    copied to seed2 with cell.json's seed changed. Two labels of one data set and seed may share a checkpoint (a
    variant that trained as its base did)."""
    store = tmp_path / "store"
    one = make_cell(store, seed=1)
    two = cell_dir(store, "toy", "sasrec", 2)
    shutil.copytree(one, two)
    cell = json.loads((two / "cell.json").read_text())
    (two / "cell.json").write_text(json.dumps({**cell, "seed": 2}))
    with pytest.raises(ResdomError, match=r"name one checkpoint \(c0\) as toy / sasrec / seed 1 and toy / sasrec / "
                                          "seed 2"):
        read_runs([one, two])
    make_cell(store, label="sasrec-p30", seed=1)  # another label, same data set and seed: a legitimate twin
    assert len(read_runs([one, cell_dir(store, "toy", "sasrec-p30", 1)])) == 2
    # the export refuses to store a run whose checkpoint another cell of the store names under another seed
    run = finish(make_run(tmp_path / "run", split))
    run_all(run, what="hrli", split="test", progress=False)
    ours = checkpoint_id(RunDir(run).model)
    make_cell(store, seed=7, checkpoint=ours)
    with pytest.raises(ResdomError, match=f"names checkpoint {ours} too .as toy / sasrec / seed 7"):
        export_cell(run, store, "toy", "sasrec", 3)
    assert not cell_dir(store, "toy", "sasrec", 3).exists()


@pytest.mark.parametrize("field,value,copy_of", [
    ("label", "duorec", "sasrec"),            # another model
    ("label", "sasrec-gate", "sasrec"),       # a remedy variant of the same model: another model too
    ("label", "sasrec-celast", "sasrec"),     # a training variant that trains otherwise (another objective)
    ("dataset", "toy-two", "sasrec"),         # another data set, same label and seed
    ("label", "bsarec", "sasrec-p30"),        # a variant's copy relabelled as another model
])
def test_a_copied_cell_relabelled_as_another_model_or_data_set_is_refused(tmp_path: Path, split: SplitData,
                                                                         field: str, value: str,
                                                                         copy_of: str) -> None:
    """A copy of a cell relabelled as another model label or data set (one checkpoint id) was taken as a cell of its
    own, as the relabelled seed once was. Maker: a cell copied to the folder of its new identity, cell.json's field
    changed. The store export refuses the same clash against a stored cell."""
    store = tmp_path / "store"
    one = make_cell(store, label=copy_of)
    identity = {"dataset": "toy", "label": copy_of, "seed": 1, field: value}
    two = cell_dir(store, identity["dataset"], identity["label"], 1)
    shutil.copytree(one, two)
    cell = json.loads((two / "cell.json").read_text())
    (two / "cell.json").write_text(json.dumps({**cell, field: value}))
    (two / "config.json").write_text(json.dumps({**json.loads((two / "config.json").read_text()),
                                                 "label": identity["label"]}))
    with pytest.raises(ResdomError, match=r"name one checkpoint \(c0\) as .* one model cannot be both") as e:
        read_runs([one, two])
    assert "\n" not in str(e.value)
    run = finish(make_run(tmp_path / "run", split))
    run_all(run, what="hrli", split="test", progress=False)
    ours = checkpoint_id(RunDir(run).model)
    make_cell(tmp_path / "s2", label=copy_of, checkpoint=ours)
    with pytest.raises(ResdomError, match=f"names checkpoint {ours} too"):
        export_cell(run, tmp_path / "s2", identity["dataset"], identity["label"], 1)
    assert not cell_dir(tmp_path / "s2", identity["dataset"], identity["label"], 1).exists()


def test_variants_that_train_their_base_run_may_share_its_checkpoint(tmp_path: Path) -> None:
    """The legitimate twins of one data set and seed: a training variant that sets only when training stops
    (sasrec-p30, sasrec-v1024) beside its base and beside each other."""
    store = tmp_path / "store"
    cells = [make_cell(store, label=label) for label in ("sasrec", "sasrec-p30", "sasrec-v1024")]
    assert [r.model for r in read_runs(cells)] == ["sasrec", "sasrec-p30", "sasrec-v1024"]


def test_a_malformed_compute_is_reported_as_what_it_is(tmp_path: Path) -> None:
    """A cell.json whose compute is not an object was reported as "cell.json missing"."""
    cell = make_cell(tmp_path / "store", compute="fast")
    why = read_run(cell).why_empty("cell")
    assert why == f"{cell / 'cell.json'}: field compute is 'fast', not an object"
    sound = read_run(make_cell(tmp_path / "other", compute={}))  # present but without the number
    assert sound.why_empty("cell") == "cell.json holds no such number"
    nan = make_cell(tmp_path / "nan", compute={"train_seconds": float("nan")})  # maker: JSON's NaN in compute
    with pytest.raises(ResdomError, match="cell.json: field compute.train_seconds is nan, not a finite number"):
        read_run(nan)


def test_reproduce_writes_no_cell_through_a_link_out_of_the_grid(tmp_path: Path) -> None:
    """A grid folder whose model folder (or data set folder) is a link out of --out: the cell is not trained there
    and not even its error.txt written; a linked data set folder refuses the grid up front."""
    from resdom.pipeline.reproduce import GridSpec, _DataCache, run_cell

    grid, elsewhere = tmp_path / "grid", tmp_path / "elsewhere"
    (grid / SOURCE).mkdir(parents=True)
    (elsewhere / "seed1").mkdir(parents=True)
    (elsewhere / "seed1" / "notes.txt").write_text("keep me")
    (grid / SOURCE / "sasrec").symlink_to(elsewhere)  # maker: the cell's model folder is a link out
    spec = GridSpec(datasets=[SOURCE], models=["sasrec"], seeds=[1], out=grid, device="cpu", epochs=1)
    outcome = run_cell(spec, _DataCache(spec), SOURCE, "sasrec", 1, progress=False)
    assert outcome.status == "failed" and "leads out of --out" in outcome.message
    assert files_of(elsewhere) == {"seed1/notes.txt": b"keep me"}
    shutil.rmtree(grid / SOURCE)
    (grid / SOURCE).symlink_to(elsewhere)  # maker: the data set folder is a link out
    with pytest.raises(ResdomError, match="is a symbolic link out of the folder"):
        GridSpec(datasets=[SOURCE], models=["sasrec"], seeds=[1], out=grid, device="cpu", epochs=1)


def test_force_never_moves_a_run_another_process_is_training(tmp_path: Path, split: SplitData) -> None:
    """--force moves a run aside only while no trainer holds its lock (it would go on writing into the renamed
    folder). Maker: the run's .lock held, as a running `resdom train` holds it."""
    from resdom.io import directory_lock
    from resdom.rundir import move_aside

    run = finish(make_run(tmp_path / "run", split))
    with directory_lock(run, "training"), pytest.raises(ResdomError, match="another process is writing there"):
        move_aside(run)
    assert run.is_dir() and not (tmp_path / "run.replaced-1").exists()
