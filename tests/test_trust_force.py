"""Every writing command: what each one refuses as its output, and what ``--force`` does.

One table of every command that writes a folder (``train``, ``import-pmixer`` for the importers, ``report``, ``data
split``, ``diagnose``, ``reproduce``, ``remedies``, ``demo``) or a file (``evaluate --per-user``, ``recommend --out``,
``similar --out``, ``config show --out``), each run in this process on the same crafted targets: a results-store cell,
a store (a folder holding cells), a folder of the user's own files, with and without ``--force``. Every refusal is
one ``error:`` line and leaves the target's files as they were; where ``--force`` replaces a folder, the old one is
found whole at ``OUT.replaced-1``. The commands that would train after ``--force`` has moved the folder aside
(``reproduce``, ``remedies``, ``demo``) are stopped right after it by a stub: the move is what is tested here (their
training is tested in tests/test_pipeline_demo.py)."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import SMALL_SYNTHETIC as SOURCE
from cli_helpers import TINY_MODEL as TINY
from cli_helpers import one_line_error, run_cli
from test_adapters_pmixer import HEADS, MAXLEN, _data_file, _pmixer
from test_trust_outputs import files_of, finish, make_cell, make_run

from resdom.data.prepare import prepare_split
from resdom.errors import ResdomError
from resdom.rundir import check_output_folder


@dataclass
class Env:
    """What the commands read: a run (for evaluate, recommend, similar, diagnose), a cell to report, a pmixer state
    dict and its data."""

    run: Path
    cell: Path
    pmixer: Path
    pmixer_data: Path


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    run = make_run(tmp_path / "inputs" / "run", prepare_split(SOURCE, protocol="loo"))
    data, seqs = _data_file(tmp_path / "inputs" / "data.txt", np.random.default_rng(7))
    state = tmp_path / "inputs" / f"SASRec.epoch=1.lr=0.001.layer=2.head=2.hidden=16.maxlen={MAXLEN}.pth"
    torch.save(_pmixer(False, int(max(max(s) for s in seqs.values())), 0).state_dict(), state)
    return Env(run, make_cell(tmp_path / "inputs" / "cells"), state, data)


# name -> (arguments writing to TARGET, takes --force, --force moves a folder of the user's files aside)
FOLDER_WRITERS: dict[str, tuple[Callable[[Env, str], list[str]], bool, bool]] = {
    "train": (lambda e, t: ["train", SOURCE, "--out", t, "--epochs", "1", *TINY], True, False),
    "import-pmixer": (lambda e, t: ["import-pmixer", str(e.pmixer), "--data", str(e.pmixer_data), "--out", t,
                                    "--heads", str(HEADS), "--k-core", "0"], True, False),
    "report": (lambda e, t: ["report", str(e.cell), "--out", t, "--tables-only"], True, True),
    "data split": (lambda e, t: ["data", "split", SOURCE, "--out", t], True, False),
    "diagnose": (lambda e, t: ["diagnose", t, "--device", "cpu"], False, False),
    "reproduce": (lambda e, t: ["reproduce", "--datasets", "synthetic", "--models", "sasrec", "--seeds", "1",
                                "--epochs", "1", "--device", "cpu", "--out", t], True, True),
    "remedies": (lambda e, t: ["remedies", SOURCE, "--variants", "base", "--seeds", "1", "--epochs", "1", "--device",
                               "cpu", "--out", t], True, True),
    "demo": (lambda e, t: ["demo", "--out", t, "--epochs", "1", "--device", "cpu"], True, True),
}
FILE_WRITERS: dict[str, Callable[[Env, str], list[str]]] = {
    "evaluate --per-user": lambda e, f: ["evaluate", str(e.run), "--per-user", f, "--device", "cpu"],
    "recommend --out": lambda e, f: ["recommend", str(e.run), "--out", f, "-k", "2", "--device", "cpu"],
    "similar --out": lambda e, f: ["similar", str(e.run), "--items", "1", "--out", f, "--device", "cpu"],
    "config show --out": lambda e, f: ["config", "show", "sasrec", "--out", f],
}


def user_folder(path: Path) -> Path:
    """Maker: a folder of the user's own files (notes and a folder of their own)."""
    (path / "mine").mkdir(parents=True)
    (path / "notes.txt").write_text("keep me")
    (path / "mine" / "data.csv").write_text("a,b\n1,2\n")
    return path


def stop_after_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stub: the grid's cells and the demo's data stop with one error right after --out was prepared (moved aside
    or not), so nothing trains."""
    reproduce, demo = (importlib.import_module(f"resdom.pipeline.{m}") for m in ("reproduce", "demo"))

    def stopped(*args: object, **kwargs: object) -> None:
        raise ResdomError("stub: stopped after --out was prepared")

    monkeypatch.setattr(reproduce, "_DataCache", lambda spec: stopped())
    monkeypatch.setattr(demo, "prepare_split", stopped)


@pytest.mark.parametrize("name", FOLDER_WRITERS)
def test_every_folder_writer_keeps_cells_stores_and_the_users_files(name: str, env: Env, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    args, takes_force, moves = FOLDER_WRITERS[name]
    force = ["--force"] if takes_force else []
    stop_after_out(monkeypatch)
    # a results-store cell, --force included: refused, its files as they were
    store = tmp_path / "store"
    cell = make_cell(store, label="gru4rec")
    before = files_of(store)
    code, _, err = run_cli(capsys, *args(env, str(cell)), *force)
    one_line_error(code, err, str(cell))
    assert files_of(store) == before and sorted(p.name for p in tmp_path.iterdir()) == ["inputs", "store"]
    # a whole store (a folder holding cells) with --force: never moved aside, nothing written into it
    code, _, err = run_cli(capsys, *args(env, str(store)), *force)
    one_line_error(code, err, str(store))
    assert files_of(store) == before and not any(".replaced-" in p.name for p in tmp_path.iterdir())
    assert sorted(p.name for p in store.rglob("*") if p.name.startswith(".")) == []
    # a folder of the user's files: refused without --force
    mine = user_folder(tmp_path / "mine")
    mine_files = files_of(mine)
    code, _, err = run_cli(capsys, *args(env, str(mine)))
    one_line_error(code, err, str(mine))
    assert files_of(mine) == mine_files and sorted(os.listdir(mine)) == ["mine", "notes.txt"]
    if not takes_force:
        return
    # with --force: moved aside whole (report, reproduce, remedies, demo) or refused (a run's or a split's writer)
    code, out, err = run_cli(capsys, *args(env, str(mine)), "--force")
    if moves:
        assert f"moved aside to {tmp_path / 'mine.replaced-1'}" in out + err, out + err
        assert files_of(tmp_path / "mine.replaced-1") == mine_files
        assert not (mine / "notes.txt").exists() and not (mine / "mine").exists()
    else:
        one_line_error(code, err, str(mine))
        assert files_of(mine) == mine_files and not (tmp_path / "mine.replaced-1").exists()


@pytest.mark.parametrize("name", FILE_WRITERS)
def test_every_file_writer_keeps_cells_and_the_users_files(name: str, env: Env, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    args = FILE_WRITERS[name]
    store = tmp_path / "store"
    cell = make_cell(store)
    before = files_of(store)
    for target in (cell / "out.csv", cell / "diagnostics" / "out.csv"):  # a new file inside a cell
        code, _, err = run_cli(capsys, *args(env, str(target)))
        one_line_error(code, err, f"{target}: is inside a results-store cell ({cell})")
        assert files_of(store) == before
    mine = tmp_path / "mine.csv"
    mine.write_text("my own,file\n1,2\n")
    code, _, err = run_cli(capsys, *args(env, str(mine)))
    one_line_error(code, err, str(mine))
    assert mine.read_text() == "my own,file\n1,2\n"


@pytest.mark.parametrize("rank", [0, 1])
def test_under_torchrun_only_rank_0_moves_the_run_aside_and_the_others_wait(rank: int, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str],
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`train --force` under torchrun: every rank went on to train at once, so a rank other than 0 read the old
    run (its state, or "a finished run with no resume state") while rank 0 moved it aside. Now every rank joins
    the process group first, rank 0 alone moves the folder, and all meet at a barrier before training. Maker: a
    finished run with no state; a fake rank environment (RANK, WORLD_SIZE 2) and a fake group that records the
    order of what happens (the real two-process run: the slow test below)."""
    train_cmd = importlib.import_module("resdom.cli.train_cmd")
    run = make_run(tmp_path / "run", prepare_split(SOURCE, protocol="loo"))
    before = files_of(run)
    events: list[object] = []

    class Group:
        def barrier(self) -> None:
            events.append("barrier")

        def close(self) -> None:
            events.append("close")

    def joined(device: str, option: str) -> Group:
        events.append(("join", device))
        return Group()

    def fit(split: object, model_cfg: object, train: object, out: Path, **kwargs: object) -> None:
        events.append(("fit", (tmp_path / "run.replaced-1").is_dir(), Path(out).exists()))
        raise ResdomError("stub: stopped where training starts")

    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # as torchrun sets them (the group itself is the stub above)
    monkeypatch.setenv("MASTER_PORT", "29500")
    def checked(*args: object, **kwargs: object) -> bool:
        events.append("check")
        return check_output_folder(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(train_cmd, "setup", joined)
    monkeypatch.setattr(train_cmd, "fit", fit)
    monkeypatch.setattr(train_cmd, "check_output_folder", checked)
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(run), "--epochs", "1", *TINY, "--force")
    one_line_error(code, err, "stub: stopped where training starts")
    if rank == 0:  # moved aside before the barrier releases the others
        assert events == ["check", ("join", "cpu"), "barrier", ("fit", True, False), "close"]
        assert files_of(tmp_path / "run.replaced-1") == before and "moved aside" in err
    else:  # nothing moved by this rank, nor even looked at before the barrier (fit looks after it)
        assert events == [("join", "cpu"), "barrier", ("fit", False, True), "close"]
        assert files_of(run) == before and "moved aside" not in err


@pytest.mark.slow
def test_torchrun_force_moves_the_run_aside_once(tmp_path: Path) -> None:
    """A real `torchrun --nproc_per_node 2 -m resdom train --force` on CPU (gloo) over a finished run with no state:
    exit 0, the old run kept whole as OUT.replaced-1 (no OUT.replaced-2), a new run trained in OUT, one message."""
    import subprocess
    import sys

    run = make_run(tmp_path / "run", prepare_split(SOURCE, protocol="loo"))
    before = files_of(run)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "resdom", "train", SOURCE, "--out", str(run), "--epochs", "1", *TINY, "--force",
                           "--no-progress"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert files_of(tmp_path / "run.replaced-1") == before and not (tmp_path / "run.replaced-2").exists()
    assert proc.stderr.count("moved aside to") == 1
    assert json.loads((run / "metrics.json").read_text())["epochs_run"] == 1


def test_a_folder_too_large_to_check_for_cells_is_not_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--force moves a folder aside only once it is shown to hold no store cell; a folder past MAX_SCANNED entries
    (here lowered to 5) cannot be, and stays where it is. Maker: a folder of 10 files."""
    from resdom import rundir

    big = tmp_path / "big"
    big.mkdir()
    for i in range(10):
        (big / f"f{i}.txt").write_text("x")
    monkeypatch.setattr(rundir, "MAX_SCANNED", 5)
    with pytest.raises(ResdomError, match="holds more than 5 entries, too many to check that none is a results-store"):
        rundir.move_aside(big)
    assert big.is_dir() and len(list(big.iterdir())) == 10


# --- output folders against the command's own inputs ---------------------------------------------------------------


def test_force_never_moves_aside_the_folder_holding_what_the_command_reads(env: Env, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`train RUN/data.csv --out RUN --force` moved the run aside with the data file in it (the new run's config
    named a source that was gone; the same command again: no such file), and so did an import whose checkpoint, or
    a train whose --config, lay in the run it replaced. Now each is one line naming --out and the input, and the
    run stays whole. Maker: a finished run holding a saved split, a pmixer state dict and its own config.json."""
    split = prepare_split(SOURCE, protocol="loo")
    run = finish(make_run(tmp_path / "run", split))
    split.save(run / "mysplit")
    state = run / env.pmixer.name
    state.write_bytes(env.pmixer.read_bytes())
    before = files_of(run)
    link = tmp_path / "link"
    link.symlink_to(run)
    (tmp_path / "x").mkdir()
    for args, needle in (
        (["train", str(run / "mysplit"), "--out", str(run)], f"holds SOURCE {run / 'mysplit'}"),
        (["train", str(link / "mysplit"), "--out", str(tmp_path / "x" / ".." / "run")], "holds SOURCE"),
        (["train", SOURCE, "--config", str(run / "config.json"), "--out", str(run)], "holds --config"),
        (["import-pmixer", str(state), "--data", str(env.pmixer_data), "--out", str(run), "--heads", str(HEADS),
          "--k-core", "0"], f"holds STATE_DICT {state}"),
    ):
        if args[0] == "train":
            args += ["--epochs", "1", *TINY]
        code, _, err = run_cli(capsys, *args, "--force")
        one_line_error(code, err, "--out", "--force would move aside")
        assert needle in err, err
        assert files_of(run) == before and not (tmp_path / "run.replaced-1").exists()


def test_train_and_data_split_never_write_into_the_split_they_read(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`train SPLIT --out SPLIT/run` trained a run into the split folder it read (which `data split --out SPLIT`
    then refused as a folder of other files), and `data split SPLIT --out SPLIT/x` saved a split inside the split.
    Now --out equal to or inside the split read (through a link or `..` too) is one line naming both."""
    split = tmp_path / "split"
    prepare_split(SOURCE, protocol="loo").save(split)
    before = files_of(split)
    (tmp_path / "link").symlink_to(split)
    for args in (["train", str(split), "--out", str(split / "run"), "--epochs", "1", *TINY],
                 ["train", str(tmp_path / "link"), "--out", str(split / ".." / "split" / "r"), "--epochs", "1", *TINY],
                 ["data", "split", str(split), "--out", str(split)],
                 ["data", "split", str(split), "--out", str(tmp_path / "link" / "x")]):
        code, _, err = run_cli(capsys, *args)
        one_line_error(code, err, "--out", "SOURCE", "which the command reads")
        assert files_of(split) == before and sorted(os.listdir(split)) == sorted(before)
    # a folder of raw data is read at its top only: an output folder inside it is harmless, and allowed
    raw = tmp_path / "raw"
    raw.mkdir()
    rows = [f"{u},{(u * i) % 20 + 1},{u * 100 + i}" for u in range(1, 31) for i in range(1, 7)]
    (raw / "interactions.csv").write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    for out in ("one", "two"):  # the second reads the folder with the first split inside it
        code, _, err = run_cli(capsys, "data", "split", str(raw), "--out", str(raw / out))
        assert code == 0, err


def test_a_grid_keeps_its_data_and_stays_out_of_its_store(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`reproduce --data-dir OUT/raw --out OUT --force` moved the raw data aside with OUT (every cell then failed:
    no data), and `--out STORE/x --store STORE` put the grid's runs among the store's cells (with --out
    STORE/DATASET the cells were exported into the grid, which then refused to resume: 'holds a results-store
    cell'). Both are refused now, before anything moves."""
    stop_after_out(monkeypatch)
    grid = ["reproduce", "--datasets", "synthetic", "--models", "sasrec", "--seeds", "1", "--epochs", "1",
            "--device", "cpu"]
    out = user_folder(tmp_path / "out")
    (out / "raw").mkdir()
    before = files_of(out)
    code, _, err = run_cli(capsys, *grid, "--out", str(out), "--data-dir", str(out / "raw"), "--force")
    one_line_error(code, err, f"--out {out}: holds --data-dir {out / 'raw'}")
    assert files_of(out) == before and not (tmp_path / "out.replaced-1").exists()
    for variable, named in (("RESDOM_DATA_DIR", "$RESDOM_DATA_DIR"), ("RESDOM_CACHE_DIR", "the download cache")):
        with monkeypatch.context() as m:  # where the data is found without --data-dir: kept too
            m.setenv(variable, str(out / "raw"))
            code, _, err = run_cli(capsys, *grid, "--out", str(out), "--force")
            one_line_error(code, err, f"--out {out}: holds {named} {out / 'raw'}")
    assert files_of(out) == before and not (tmp_path / "out.replaced-1").exists()
    store = tmp_path / "store"
    make_cell(store)
    (out / "store").symlink_to(store)  # the store through a link in --out: moved away with it by --force
    code, _, err = run_cli(capsys, *grid, "--out", str(out), "--store", str(out / "store"), "--force")
    one_line_error(code, err, f"--out {out}: holds --store {out / 'store'}")
    (out / "store").unlink()
    assert files_of(out) == before and not (tmp_path / "out.replaced-1").exists()
    for inside in (store / "grid", store / "synthetic"):
        code, _, err = run_cli(capsys, *grid, "--out", str(inside), "--store", str(store))
        one_line_error(code, err, f"--out {inside}: is inside --store {store}")
        assert not inside.exists()
    same = tmp_path / "same"  # one folder as both, through a link: said to be it, not to lie inside it
    same.mkdir()
    (tmp_path / "same-link").symlink_to(same)
    code, _, err = run_cli(capsys, *grid, "--out", str(same), "--store", str(tmp_path / "same-link"))
    one_line_error(code, err, f"--store {tmp_path / 'same-link'}: is --out {same};")


def test_report_doc_is_never_a_file_the_report_writes_nor_inside_a_run(env: Env, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`report RUN --out REP --doc REP/tables/tables.md` read the old tables.md as the document, wrote the new
    one, then wrote the old text back over it: a stale table under a fresh report. Now a --doc among the files the
    report writes, or inside a run it reads (a cell: never written), is one line naming it."""
    rep = tmp_path / "rep"
    code, _, err = run_cli(capsys, "report", str(env.cell), "--out", str(rep), "--tables-only")
    assert code == 0, err
    stale = rep / "tables" / "tables.md"
    stale.write_text(stale.read_text() + "a stale line\n")
    inside = env.cell / "notes.md"
    inside.write_text("# notes\n")
    cell_files = files_of(env.cell)
    for doc, needle in ((stale, "is a file the report writes in --out"), (inside, f"is inside {env.cell}")):
        code, _, err = run_cli(capsys, "report", str(env.cell), "--out", str(rep), "--tables-only", "--doc",
                               str(doc))
        one_line_error(code, err, f"--doc {doc}", needle)
    assert stale.read_text().endswith("a stale line\n") and files_of(env.cell) == cell_files


@pytest.mark.parametrize("name", [n for n in FOLDER_WRITERS if n != "diagnose"])
def test_no_folder_writer_makes_a_new_folder_inside_a_cell(name: str, env: Env, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`train SOURCE --out CELL/diagnostics/run`, `data split --out CELL/x`, `report --out CELL/rep` and the
    others wrote a whole new folder into a results-store cell (only the cell itself was refused as --out, while a
    file inside one always was); so did every writer run from inside a cell with a relative --out. Now a folder
    inside a cell, as spelled, through a link or from the working folder, is one line naming the cell."""
    args, _, _ = FOLDER_WRITERS[name]
    stop_after_out(monkeypatch)
    store = tmp_path / "store"
    cell = make_cell(store)
    (tmp_path / "link").symlink_to(cell)
    before = files_of(store)
    for target in (cell / "sub", cell / "diagnostics" / "run", tmp_path / "link" / "sub"):
        code, _, err = run_cli(capsys, *args(env, str(target)))
        one_line_error(code, err, f"{target}: is inside a results-store cell")
    monkeypatch.chdir(cell / "diagnostics")
    code, _, err = run_cli(capsys, *args(env, "new"))
    one_line_error(code, err, f"new: is inside a results-store cell ({cell})")
    assert files_of(store) == before and sorted(p.name for p in cell.rglob("*")) == sorted(
        ["cell.json", "config.json", "metrics.json", "diagnostics", "hrli.json", "users.npz"])


def test_fitted_save_and_a_file_writer_from_inside_a_cell_are_refused(env: Env, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Fitted.save(CELL/sub) wrote a run into a cell, and `recommend --out recs.csv` run from inside a cell wrote
    its file there (the check looked only at the folders named in the path). Both are refused now."""
    import resdom

    cell = make_cell(tmp_path / "store")
    before = files_of(cell)
    with pytest.raises(ResdomError, match="is inside a results-store cell"):
        resdom.load_run(env.run).save(cell / "sub")
    monkeypatch.chdir(cell)
    code, _, err = run_cli(capsys, *FILE_WRITERS["recommend --out"](env, "recs.csv"))
    one_line_error(code, err, f"--out recs.csv: is inside a results-store cell ({cell})")
    assert files_of(cell) == before and not (cell / "sub").exists()


@pytest.mark.parametrize("name", [n for n, (_, takes_force, _) in FOLDER_WRITERS.items() if takes_force])
def test_force_never_moves_the_working_folder_aside(name: str, env: Env, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`report RUN --out .` in a folder of one's own files was a ValueError traceback ('.' has an empty name),
    with or without --force, and so was `train --out .` in a finished run; `--out ../HERE --force` moved the
    working folder aside under the user's shell and wrote the output into a new folder of its old name. Now --force
    never moves the working folder (or one above it) aside, in one line, and a refusal there offers no --force.
    Makers: a folder of the user's files for the writers that move one aside, a finished run for train and the
    importers, a split of another source for data split."""
    args, _, moves = FOLDER_WRITERS[name]
    stop_after_out(monkeypatch)
    if moves:
        here = user_folder(tmp_path / "here")
    elif name == "data split":
        here = tmp_path / "here"
        prepare_split("synthetic:n_users=30,n_items=20,min_len=5,max_len=9", protocol="loo").save(here)
    else:
        here = finish(make_run(tmp_path / "here", prepare_split(SOURCE, protocol="loo")))
    before = files_of(here)
    below = [] if name == "data split" else [(here / "below", "..")]  # a split folder holds nothing else
    for cwd, _ in below:
        cwd.mkdir()
    for cwd, target in ((here, "."), (here, "../here"), *below):
        monkeypatch.chdir(cwd)
        code, _, err = run_cli(capsys, *args(env, target), "--force")
        one_line_error(code, err, f"--out {Path(target)}: is ", "working folder, which is never moved aside")
        code, _, err = run_cli(capsys, *args(env, target))
        assert "--force" not in one_line_error(code, err, f"{Path(target)}")
    for cwd, _ in below:
        cwd.rmdir()
    assert files_of(here) == before and sorted(p.name for p in tmp_path.iterdir()) == ["here", "inputs"]


def test_force_never_moves_aside_a_link_to_what_the_command_reads(env: Env, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`report OUT/link-to-run --out OUT --force` moved OUT aside with the link in it, then failed 'run directory
    not found', leaving an empty OUT and the user's folder renamed; a --doc reached through a link in OUT was
    written as a new file in the new OUT, the user's document left as it was, 'refilled'. The run and the document
    lay elsewhere, so only their resolved paths had been looked at. Now a path reached through the folder --force
    would move is refused as one inside it."""
    out = user_folder(tmp_path / "out")
    (out / "run").symlink_to(env.run)
    doc = tmp_path / "doc.md"
    doc.write_text("# mine\n")
    (out / "doc.md").symlink_to(doc)
    split = tmp_path / "split"
    prepare_split(SOURCE, protocol="loo").save(split)
    run = finish(make_run(tmp_path / "finished", prepare_split(SOURCE, protocol="loo")))
    (run / "split").symlink_to(split)
    for args, moved, needle in (
        (["report", str(out / "run"), "--out", str(out), "--tables-only"], out, "holds the run directory"),
        (["report", str(env.run), "--out", str(out), "--tables-only", "--doc", str(out / "doc.md")], out,
         "holds --doc"),
        (["train", str(run / "split"), "--out", str(run), "--epochs", "1", *TINY], run, "holds SOURCE"),
    ):
        before = files_of(moved)
        code, _, err = run_cli(capsys, *args, "--force")
        one_line_error(code, err, f"--out {moved}: {needle}", "--force would move aside")
        assert files_of(moved) == before and not Path(f"{moved}.replaced-1").exists()
    assert doc.read_text() == "# mine\n"


def test_force_where_the_working_folder_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The working-folder check of --force asked os.getcwd(), a FileNotFoundError in a shell whose folder was
    removed; there is then no working folder to keep, and a run given by its full path is moved aside as ever."""
    run = finish(make_run(tmp_path / "run", prepare_split(SOURCE, protocol="loo")))

    def gone() -> str:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "getcwd", gone)
    assert check_output_folder(run, "--out", runs=True, force=True) is True
    with pytest.raises(ResdomError, match=r"or --force to move it aside to .*run\.replaced-1 and train anew"):
        check_output_folder(run, "--out", runs=True)
