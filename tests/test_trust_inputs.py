"""Broken inputs: non-finite weights or scores are never ranked, impossible timestamps are refused with
file and line, and a damaged file or a full disk ends with one line naming the file (exit 2, no traceback),
leaving nothing half-written; orphaned temporaries are removed; option values are checked alike everywhere."""

from __future__ import annotations

import errno
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import SMALL_SYNTHETIC as SOURCE
from cli_helpers import TINY_MODEL as TINY
from cli_helpers import full_disk_after, invoke, one_line_error, run_cli

import resdom.io as rio
from resdom.adapters.common import ImportData, load_weights, write_run
from resdom.data.prepare import prepare_split
from resdom.data.readers import TIME_MAX, TIME_MIN, read_interactions
from resdom.data.sequences import SplitData
from resdom.diagnostics import last_item_hit_rates
from resdom.errors import ResdomError
from resdom.evaluation.evaluate import evaluate
from resdom.evaluation.ranking import full_scores
from resdom.models import build_model, make_model_config
from resdom.runs import load_checkpoint


def tiny_model(n_items: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(make_model_config(name="sasrec", n_items=n_items, max_len=8, hidden=8, layers=1, heads=1)).eval()


@pytest.fixture(scope="module")
def split() -> SplitData:
    return prepare_split(SOURCE, protocol="loo")


def make_run(out: Path, split: SplitData, nan_at: tuple[int, int] | None = None) -> Path:
    """A run directory (no training): ``write_run`` of an untrained model, optionally with one NaN weight."""
    model = tiny_model(split.n_items)
    if nan_at is not None:
        with torch.no_grad():
            model.item_embeddings()[nan_at] = float("nan")
    labels = np.array([None, *range(1, split.n_items + 1)], dtype=object)
    return write_run(out, model, ImportData(split, labels, split.manifest), {"format": "test"})


@pytest.fixture()
def run_dir(tmp_path: Path, split: SplitData) -> Path:
    return make_run(tmp_path / "run", split)


# ------------------------------------------------------------------------------------- non-finite scores


def test_nan_scores_are_refused_not_ranked_first(split: SplitData) -> None:
    hidden, emb = torch.randn(3, 8), torch.randn(6, 8)
    emb[0] = float("nan")  # the padding row is masked anyway: not an error
    assert torch.isinf(full_scores(hidden, emb)[:, 0]).all()
    emb[4, 2] = float("nan")
    with pytest.raises(ResdomError, match="NaN or infinity"):
        full_scores(hidden, emb)
    hidden[1, 0] = float("inf")
    with pytest.raises(ResdomError, match="NaN or infinity"):
        full_scores(hidden, torch.randn(6, 8))
    # every score finite (2.9e38) while their sum overflows: ranked, not refused
    big = full_scores(torch.full((2, 1), 1.7e19), torch.full((6, 1), 1.7e19))
    assert torch.isfinite(big[:, 1:]).all() and torch.isinf(big[:, 1:].sum())

    model = tiny_model(split.n_items)
    with torch.no_grad():
        model.item_embeddings()[5, 0] = float("nan")
    # before: HR@1 = 1.0 and NDCG@10 = inf (NaN compares false, so the target ranked -1)
    with pytest.raises(ResdomError, match="NaN or infinity"):
        evaluate(model, split.test)
    with pytest.raises(ResdomError, match="NaN or infinity"):  # diagnostics rank through the same primitive
        last_item_hit_rates(model, split.test)


def test_nan_weights_in_a_run_are_refused_at_load(tmp_path: Path, split: SplitData,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "nan", split, nan_at=(3, 1))
    with pytest.raises(ResdomError, match="item_emb.weight' holds 1 NaN"):
        load_checkpoint(run / "model.safetensors")
    for args in (["evaluate", str(run)], ["diagnose", str(run), "--what", "hrli", "--no-progress"]):
        code, out, err = run_cli(capsys, *args)
        one_line_error(code, err, "model.safetensors", "NaN")
        assert "HR@" not in out


def test_an_import_into_a_folder_being_written_is_refused(tmp_path: Path, split: SplitData) -> None:
    """Two imports (or an import and a trainer) into one empty --out at once wrote their files over each other's;
    the importer now holds the folder's lock and the second is refused in one line, writing nothing."""
    from resdom.io import directory_lock

    out = tmp_path / "run"
    with directory_lock(out, "training"), pytest.raises(
            ResdomError, match=f"^{out}: another process is already training there; wait for it to finish or choose "
                               "another --out$"):
        make_run(out, split)
    assert [p.name for p in out.iterdir()] == [".lock"]
    make_run(out, split)  # free once released
    assert (out / "config.json").is_file()


def test_importers_refuse_non_finite_weights() -> None:
    model = tiny_model(10)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    load_weights(model, state, "ok.pth")
    name = next(k for k in state if k.endswith("attention.query.weight"))
    state[name][0, 0] = float("inf")
    with pytest.raises(ResdomError, match=rf"bad\.pth: weight '{name}' holds 1 NaN or infinite"):
        load_weights(model, state, "bad.pth")


def test_cli_import_pmixer_refuses_nan_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_adapters_pmixer import HEADS, _data_file, _pmixer

    data, seqs = _data_file(tmp_path / "data.txt", np.random.default_rng(1))
    state = _pmixer(False, int(max(max(s) for s in seqs.values())), 0).state_dict()
    state["attention_layers.0.in_proj_weight"][0, 0] = float("nan")
    torch.save(state, tmp_path / "sasrec.pth")
    code, _, err = run_cli(capsys, "import-pmixer", str(tmp_path / "sasrec.pth"), "--data", str(data), "--out",
                           str(tmp_path / "run"), "--heads", str(HEADS), "--k-core", "0")
    one_line_error(code, err, "sasrec.pth", "NaN or infinite")
    assert not (tmp_path / "run" / "model.safetensors").exists()


# ---------------------------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize("bad", ["1e20", "-1e12", "100000000000000000000", "-1000000000000", "1700000000000"])
def test_timestamps_outside_the_range_are_refused_with_file_and_line(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "inter.txt"
    path.write_text(f"1 10 1000\n1 11 2000\n2 10 {bad}\n2 12 3000\n")
    code, out, err = run_cli(capsys, "data", "stats", str(path), "--format", "interactions")
    one_line_error(code, err, f"{path}:3 (column 3)", repr(bad), str(TIME_MAX))
    assert "span" not in out
    csv = tmp_path / "inter.csv"
    csv.write_text(f"user_id,item_id,timestamp\n1,10,1000\n2,10,{bad}\n")
    code, _, err = run_cli(capsys, "data", "split", str(csv), "--out", str(tmp_path / "split"))
    one_line_error(code, err, f"{csv}:3", "outside the supported range")
    assert not (tmp_path / "split").exists()


@pytest.mark.parametrize("kind", ["parquet", "dataframe"])
def test_typed_timestamp_columns_that_are_not_times_are_refused(tmp_path: Path, kind: str) -> None:
    """A typed column (Parquet, a DataFrame) of true/false values or durations is not a time (pandas would read True
    as 1 s and '3 days' as its nanoseconds); milliseconds are named as the plain number the column holds."""
    import pandas as pd

    from resdom.data.prepare import load_prepared

    def read(times: list) -> None:  # noqa: ANN001
        df = pd.DataFrame({"user_id": [1, 1, 1, 2, 2, 2], "item_id": [10, 20, 30, 10, 20, 30], "timestamp": times})
        if kind == "parquet":
            df.to_parquet(tmp_path / "t.parquet")
        load_prepared(df if kind == "dataframe" else str(tmp_path / "t.parquet"), k_core=0)

    where = "DataFrame: row 1" if kind == "dataframe" else f"{tmp_path / 't.parquet'}: row 1"
    with pytest.raises(ResdomError, match=rf"^{re.escape(where)}: column 'timestamp' holds true/false values, not "):
        read([True, False, True, False, True, True])
    with pytest.raises(ResdomError, match=rf"^{re.escape(where)}: column 'timestamp' holds durations \(e\.g\. "
                                          r"'1 days 00:00:00'\), not times"):
        read(list(pd.to_timedelta([1, 2, 3, 4, 5, 6], unit="D")))
    with pytest.raises(ResdomError, match=rf"^{re.escape(where)} \(column 'timestamp'\): timestamp 1600000000000 "
                                          r"is outside the supported range"):
        read([1600000000000 + k for k in range(6)])
    read(list(pd.to_datetime([f"2020-01-0{k}" for k in range(1, 7)]).tz_localize("Europe/Berlin")))  # dates: read


def test_timestamps_at_the_range_ends_are_read(tmp_path: Path) -> None:
    path = tmp_path / "inter.txt"
    path.write_text(f"1 10 {TIME_MIN}\n1 11 {TIME_MAX}\n2 10 {float(TIME_MAX) - 0.5}\n")
    raw = read_interactions([path], "interactions")
    assert raw.times.tolist() == [TIME_MIN, TIME_MAX, TIME_MAX - 0.5]  # fractions kept, never floored


# ---------------------------------------------------------------------------------------- damaged files


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_damaged_weights_or_sidecar_is_one_line(run_dir: Path, damage: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("model.safetensors", "model.json"):
        path = run_dir / name
        original = path.read_bytes()
        path.write_bytes(b"" if damage == "empty" else original[: len(original) // 2])
        code, out, err = run_cli(capsys, "evaluate", str(run_dir))
        one_line_error(code, err, str(path))
        assert out == ""
        path.write_bytes(original)
    assert run_cli(capsys, "evaluate", str(run_dir))[0] == 0


def test_weights_of_another_model_with_the_same_shapes_are_refused(tmp_path: Path, split: SplitData,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A model.safetensors of another run of the same shapes, copied beside a run's model.json, was evaluated,
    diagnosed and recommended from without a word (the sidecar's epoch and validation metrics describe other
    weights); the sidecar now names its weights' checkpoint. Maker: two untrained runs, one's weights copied into
    the other; a sidecar without the field (written before it) is not checked."""
    ours, other = make_run(tmp_path / "ours", split), tiny_model(split.n_items)
    with torch.no_grad():
        other.item_embeddings()[3, 1] += 1.0
    labels = np.array([None, *range(1, split.n_items + 1)], dtype=object)
    theirs = write_run(tmp_path / "theirs", other, ImportData(split, labels, split.manifest), {"format": "test"})
    (ours / "model.safetensors").write_bytes((theirs / "model.safetensors").read_bytes())
    for args in (["evaluate", str(ours)], ["diagnose", str(ours), "--what", "hrli", "--no-progress"],
                 ["recommend", str(ours), "--users", "1"]):
        code, out, err = run_cli(capsys, *args)
        one_line_error(code, err, str(ours / "model.safetensors"), "not the weights model.json describes")
        assert "HR@" not in out
    sidecar = json.loads((ours / "model.json").read_text())
    sidecar.pop("weights")
    (ours / "model.json").write_text(json.dumps(sidecar))
    assert run_cli(capsys, "evaluate", str(ours))[0] == 0
    assert run_cli(capsys, "evaluate", str(theirs))[0] == 0


@pytest.mark.parametrize(("key", "value"), [("n_items", 99), ("hidden", 16), ("name", "bsarec")])
def test_config_json_of_another_model_is_one_line(run_dir: Path, key: str, value: object,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A run's config.json whose model section says another n_items, width or model than its checkpoint (hand-edited,
    or another run's copied in) was passed over: evaluate and diagnose printed the checkpoint's numbers under it."""
    config = json.loads((run_dir / "config.json").read_text())
    assert config["model"][key] != value
    (run_dir / "config.json").write_text(json.dumps({**config, "model": {**config["model"], key: value}}))
    for args in (["evaluate", str(run_dir)], ["diagnose", str(run_dir), "--what", "hrli", "--no-progress"]):
        code, out, err = run_cli(capsys, *args)
        one_line_error(code, err, f"{run_dir / 'config.json'}: model.{key} is {value!r} but the checkpoint's "
                       "model.json says")
        assert "HR@" not in out
    (run_dir / "config.json").write_text(json.dumps(config))
    assert run_cli(capsys, "evaluate", str(run_dir))[0] == 0


def test_config_json_that_is_not_json_is_one_line(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run_dir / "config.json").write_text('{"model": {"name": "sas')
    code, _, err = run_cli(capsys, "evaluate", str(run_dir))
    one_line_error(code, err, str(run_dir / "config.json"), "not valid JSON")
    code, _, err = run_cli(capsys, "diagnose", str(run_dir), "--what", "hrli", "--no-progress")
    one_line_error(code, err, "config.json")


def test_json_files_that_are_not_utf8_text_are_one_line_or_redone(trained: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A run's JSON file of bytes that are not UTF-8 (disk damage, a copy gone wrong): the report names it in one
    line, diagnose redoes what it finds damaged and a resumed train refuses a log that lost its epochs in one line;
    all three were UnicodeDecodeError tracebacks (the readers caught JSONDecodeError only)."""
    assert run_cli(capsys, "diagnose", str(trained), "--what", "hrli", "--no-progress")[0] == 0
    damaged = b"\xff\xfe{"
    for name in ("metrics.json", "diagnostics/hrli.json", "diagnostics/summary.json"):
        path = trained / name
        original = path.read_bytes()
        path.write_bytes(damaged)
        code, _, err = run_cli(capsys, "report", str(trained), "--out", str(tmp_path / "rep"))
        one_line_error(code, err, f"{path}: not valid JSON (not UTF-8 text)")
        path.write_bytes(original)
    (trained / "diagnostics" / "hrli.json").write_bytes(damaged)
    assert run_cli(capsys, "diagnose", str(trained), "--what", "hrli", "--no-progress")[0] == 0
    assert json.loads((trained / "diagnostics" / "hrli.json").read_text())["checkpoint"]
    (trained / "metrics.jsonl").write_bytes(damaged + b"\n")  # resuming reads the epoch log: it lost epoch 1's
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
    one_line_error(code, err, str(trained / "metrics.jsonl"), "epoch 1..1")


@pytest.mark.parametrize("damage", ["empty", "truncated", "flipped", "manifest"])
def test_corrupt_split_is_one_line(run_dir: Path, damage: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = run_dir / "data" / "arrays.npz"
    data = bytearray(path.read_bytes())
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "flipped":  # inside the first compressed array: a CRC or zlib error
        data[len(data) // 4] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        path = run_dir / "data" / "manifest.json"
        path.write_text("{")
    with pytest.raises(ResdomError, match=str(path)):
        SplitData.load(run_dir / "data")
    code, _, err = run_cli(capsys, "evaluate", str(run_dir))
    one_line_error(code, err, str(path), "prepare it again")


# ------------------------------------------------------------------------------------- resume and disks


@pytest.fixture()
def trained(tmp_path: Path) -> Path:
    out = tmp_path / "trained"
    assert invoke("train", SOURCE, "--out", str(out), "--epochs", "1", *TINY) == 0
    return out


@pytest.mark.parametrize("which", ["model", "optimizer", "trainer.json"])
def test_truncated_resume_state_names_the_file_and_the_way_out(
    trained: Path, which: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    state = trained / "state"
    path = state / "trainer.json" if which == "trainer.json" else state / f"{which}-0001.safetensors"
    path.write_bytes(path.read_bytes()[:40])
    before = {p.name: p.read_bytes() for p in trained.iterdir() if p.is_file() and p.name != ".lock"}
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
    one_line_error(code, err, str(path), "--force")
    after = {p.name: p.read_bytes() for p in trained.iterdir() if p.is_file() and p.name != ".lock"}
    assert after.keys() <= before.keys()  # nothing new, nothing half-written (metrics.json may be gone: stale)
    assert {k: after[k] for k in ("model.safetensors", "model.json")} == {
        k: before[k] for k in ("model.safetensors", "model.json")}
    # the advice works: --force keeps the run aside, whole, and trains anew (deleting state/ alone leaves a finished
    # run where trainer.json failed before metrics.json was dropped: training afresh would replace it, so that
    # needs --force too)
    assert run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY, "--force")[0] == 0
    assert json.loads((trained / "metrics.json").read_text())["epochs_run"] == 2
    assert (trained.parent / "trained.replaced-1" / "model.safetensors").read_bytes() == before["model.safetensors"]


def test_orphaned_temporaries_are_removed_by_the_next_training(trained: Path) -> None:
    orphans = [trained / "state" / ".tmpk2j3", trained / "state" / ".model-0002.safetensors.tmp",
               trained / ".model.safetensors.tmp", trained / ".config.json.x81k.tmp", trained / "data" / ".a.npz.tmp"]
    for p in orphans:
        p.write_bytes(b"\0" * 64)
    assert invoke("train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY) == 0
    assert not [p for p in orphans if p.exists()]
    assert (trained / "state" / "trainer.json").exists() and (trained / ".lock").exists()


def _temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp")]


@pytest.mark.parametrize("n_ok", [0, 4, 7])
def test_full_disk_during_training_is_one_line_and_the_run_resumes(
    tmp_path: Path, n_ok: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    full_disk_after(monkeypatch, n_ok)
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(out), "--epochs", "2", *TINY)
    one_line_error(code, err, "no space left on device", "free space and rerun")
    assert not _temporaries(out)
    if (out / "model.safetensors").exists():  # weights and sidecar are written together, or not at all
        load_checkpoint(out / "model.safetensors")
    monkeypatch.undo()
    assert run_cli(capsys, "train", SOURCE, "--out", str(out), "--epochs", "2", *TINY)[0] == 0
    assert json.loads((out / "metrics.json").read_text())["epochs_run"] == 2


def test_full_disk_during_report_is_one_line(run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    full_disk_after(monkeypatch, 1)
    code, _, err = run_cli(capsys, "report", str(run_dir), "--out", str(tmp_path / "report"))
    one_line_error(code, err, str(tmp_path / "report"), "no space left on device")
    assert not _temporaries(tmp_path / "report")
    # rerun as the line says: the figures/ and tables/ folders the failed write had made were left empty, and the
    # rerun was refused as a folder holding 'what a report does not write (figures, tables)'
    assert not (tmp_path / "report" / "figures").exists() and not (tmp_path / "report" / "tables").exists()
    monkeypatch.undo()
    code, _, err = run_cli(capsys, "report", str(run_dir), "--out", str(tmp_path / "report"))
    assert code == 0 and (tmp_path / "report" / "report.html").is_file(), err


@pytest.mark.slow  # over 5 s of CPU: the fast subset stays under 2 minutes on 2 cores
def test_a_file_size_limit_is_one_line_and_leaves_nothing_half_written(tmp_path: Path) -> None:
    """`ulimit -f` (RLIMIT_FSIZE): Python ignores SIGXFSZ, so the write fails with EFBIG, which was a traceback
    from every writer (a split, a run, a report, a CSV, a config file). Now one line naming the file, exit 2, and
    no output file or temporary left behind."""
    import resource
    import subprocess
    import sys

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    for args, written in ((["config", "show", "sasrec", "--out", "sasrec.yaml"], "sasrec.yaml"),
                          (["data", "split", SOURCE, "--out", "split"], "split/arrays.npz")):
        done = subprocess.run([sys.executable, "-m", "resdom", *args], cwd=tmp_path, preexec_fn=limited,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            f"error: {written}: file too large for this process's file size limit (ulimit -f) or the filesystem; "
            "raise the limit or write elsewhere and rerun (the run resumes: a training run continues from its last "
            "saved epoch)")
        assert not (tmp_path / written).exists() and not _temporaries(tmp_path)


@pytest.mark.parametrize("n_ok", [0, 1, 2])
def test_full_disk_during_diagnose_leaves_each_result_whole(run_dir: Path, n_ok: int, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A diagnostic's JSON file and its CSV tables are one result: a full disk between them left alpha.json of the
    new --alphas beside alpha.csv of the old ones, and one after them left summary.json of the old ones. Maker: alpha
    at 1,0.5, then at 1,0 with the disk full after ``n_ok`` writes."""
    args = ("diagnose", str(run_dir), "--what", "alpha", "--no-progress", "--alphas")
    assert run_cli(capsys, *args, "1,0.5")[0] == 0
    full_disk_after(monkeypatch, n_ok)
    code, _, err = run_cli(capsys, *args, "1,0")
    one_line_error(code, err, "no space left on device")
    monkeypatch.undo()
    rows = json.loads((run_dir / "diagnostics" / "alpha.json").read_text())["rows"]
    table = (run_dir / "diagnostics" / "alpha.csv").read_text().splitlines()
    alpha = table[0].split(",").index("alpha")
    written = {1.0, 0.5} if n_ok < 2 else {1.0, 0.0}  # two writes: alpha's table and JSON, then summary.json failed
    assert {r["alpha"] for r in rows} == {float(line.split(",")[alpha]) for line in table[1:]} == written
    assert not _temporaries(run_dir / "diagnostics")
    # no summary of the files as they were (it was of alpha 1,0.5 beside 1,0); the next diagnose writes it anew
    assert not (run_dir / "diagnostics" / "summary.json").exists()
    assert run_cli(capsys, *args, "1,0")[0] == 0
    summary = json.loads((run_dir / "diagnostics" / "summary.json").read_text())
    assert {r["alpha"] for r in summary["alpha_sweep"]} == {1.0, 0.0}


def test_atomic_write_files_leaves_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.bin", tmp_path / "b.json"
    rio.atomic_write_files({a: b"old a", b: b"old b"})
    full_disk_after(monkeypatch, 1)
    with pytest.raises(ResdomError, match=f"{b}: no space left"):
        rio.atomic_write_files({a: b"new a", b: b"new b"})
    assert (a.read_bytes(), b.read_bytes()) == (b"old a", b"old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.json"]


def test_atomic_write_files_leaves_no_folder_it_made_where_it_fails(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed write removes the folders it made for its files (a report's figures/ and tables/ were left empty,
    and an output folder holding them was no longer the report's to write again); folders that were there, or that
    hold a file, stay."""
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "mine.txt").write_text("mine")
    files = {tmp_path / "new" / "deep" / "a.bin": b"a", tmp_path / "kept" / "sub" / "b.bin": b"b",
             tmp_path / "kept" / "c.bin": b"c"}
    for n_ok in (0, 1, 2):
        full_disk_after(monkeypatch, n_ok)
        with pytest.raises(ResdomError, match="no space left"):
            rio.atomic_write_files(files)
        monkeypatch.undo()
        assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["kept", "kept/mine.txt"]
    rio.atomic_write_files(files)
    assert all(p.read_bytes() == data for p, data in files.items())


def test_other_os_errors_are_not_disguised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(rio.os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output"):
        rio.atomic_write_bytes(tmp_path / "x", b"x")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_one_may_not_write_in_is_named_not_the_temporary_file(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`config show --out ro/x` in a read-only folder said "ro/.x.simrnq1j.tmp: Permission denied": a file the user
    never named. (Root writes anywhere: the refusal is the system's mkstemp, stubbed.)"""
    def mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".x.abc.tmp"))

    monkeypatch.setattr(rio.tempfile, "mkstemp", mkstemp)
    with pytest.raises(ResdomError, match=f"^{tmp_path / 'x'}: Permission denied \\(cannot write in {tmp_path}\\)$"):
        rio.atomic_write_bytes(tmp_path / "x", b"x")
    assert list(tmp_path.iterdir()) == []


def test_a_file_one_may_not_read_is_said_so_not_called_damaged(run_dir: Path, split: SplitData, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A colleague's run whose config.json one may not read was "the file is damaged: delete it", its metrics.json
    (resdom.load_run) "delete it or train the run again", a split's unreadable manifest.json "run `resdom data split`
    again"; an unreadable data file said "cannot read ("[Errno 13] Permission denied: 'FILE'")", the path twice; a
    file in a folder one may not look into was named "FOLDER/FILE/arrays.npz". Each is now the file (or folder) and
    the system's words, no advice to delete or redo what is not damaged. (Root reads anything: the refusal is
    stubbed.)"""
    import builtins

    import resdom

    (run_dir / "metrics.json").write_text("{}")
    data = tmp_path / "data.csv"
    data.write_text("user_id,item_id\nu1,i1\n")
    split_dir = tmp_path / "split"
    split.save(split_dir)
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    refused = {run_dir / "config.json", run_dir / "metrics.json", split_dir / "manifest.json", data,
               hidden / "arrays.npz"}
    real_read_bytes, real_read_text, real_is_file = Path.read_bytes, Path.read_text, Path.is_file

    def refuse(path: Path) -> None:
        if path in refused:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))

    def read_bytes(self: Path) -> bytes:
        refuse(self)
        return real_read_bytes(self)

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        refuse(self)
        return real_read_text(self, *args, **kwargs)

    def is_file(self: Path) -> bool:  # a stat: refused only inside a folder one may not look into
        if self.parent == hidden:
            refuse(self)
        return real_is_file(self)

    real_builtin_open = builtins.open

    def open_(file: object, *args: object, **kwargs: object) -> object:
        if isinstance(file, (str, Path)):
            refuse(Path(file))
        return real_builtin_open(file, *args, **kwargs)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(Path, "is_file", is_file)
    monkeypatch.setattr(builtins, "open", open_)
    code, _, err = run_cli(capsys, "diagnose", str(run_dir), "--what", "hrli", "--no-progress")
    assert one_line_error(code, err) == f"error: {run_dir / 'config.json'}: cannot read it (Permission denied)"
    refused.discard(run_dir / "config.json")
    with pytest.raises(ResdomError) as e:
        resdom.load_run(run_dir, device="cpu")
    assert str(e.value) == f"{run_dir / 'metrics.json'}: cannot read it (Permission denied)"
    code, _, err = run_cli(capsys, "data", "stats", str(split_dir))
    assert one_line_error(code, err) == (f"error: {split_dir / 'manifest.json'}: cannot read the split's manifest "
                                         "(Permission denied)")
    code, _, err = run_cli(capsys, "data", "stats", str(data))
    assert one_line_error(code, err) == f"error: {data}: cannot read it (Permission denied)"
    code, _, err = run_cli(capsys, "data", "stats", str(hidden))
    assert one_line_error(code, err) == f"error: {hidden}: Permission denied"


def test_an_archive_one_may_not_read_is_not_called_damaged(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose data/arrays.npz one may not read said "not a readable prepared split (not a readable zip file
    (PermissionError: "[Errno 13] Permission denied: 'PATH'")); prepare it again (...)": the file is whole, only
    not the user's to read. Now the system's words naming it. (Root reads anything: the refusal is stubbed.)"""
    import resdom.bounded

    arrays = run_dir / "data" / "arrays.npz"
    real = resdom.bounded.zipfile.ZipFile

    def zip_file(file: object, *args: object, **kwargs: object) -> object:
        if isinstance(file, (str, Path)) and Path(file) == arrays:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(resdom.bounded.zipfile, "ZipFile", zip_file)
    code, _, err = run_cli(capsys, "recommend", str(run_dir), "--device", "cpu")
    assert one_line_error(code, err) == f"error: {arrays}: Permission denied"


def test_a_run_one_may_not_write_in_is_named_not_its_lock_file(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """diagnose (or train, import, report) into a folder one may not write in, a colleague's run, said
    "RUN/diagnostics/.lock: Permission denied": a file the user never named. The folder is named now, as a write
    into it is (``io.writing``). (Root writes anything: the refusal is stubbed.)"""
    import builtins

    real = builtins.open

    def no_lock(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        if Path(str(file)).name == rio.LOCK and "a" in mode:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_lock)
    code, _, err = run_cli(capsys, "diagnose", str(run_dir), "--what", "hrli", "--no-progress")
    assert one_line_error(code, err) == f"error: {run_dir / 'diagnostics'}: Permission denied (cannot write in it)"
    monkeypatch.undo()

    def no_folder(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", no_folder)
    with pytest.raises(ResdomError, match=f"^{run_dir / 'new'}: Permission denied \\(cannot write in {run_dir}\\)$"):
        with rio.directory_lock(run_dir / "new", "writing"):
            pass


def test_is_locked_asks_without_write_access(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """evaluate / recommend of a run the user may read but not write (a colleague's) failed with ".lock: Permission
    denied": the lock was opened for appending only to ask whether a trainer holds it."""
    import builtins

    real = builtins.open

    def read_only(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        if any(c in mode for c in "wax+"):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real(file, mode, *args, **kwargs)

    with rio.directory_lock(tmp_path, "training"):
        monkeypatch.setattr(builtins, "open", read_only)
        assert rio.is_locked(tmp_path)
        monkeypatch.undo()
    monkeypatch.setattr(builtins, "open", read_only)
    assert not rio.is_locked(tmp_path)


# ------------------------------------------------------------------------------------------- option values


@pytest.mark.parametrize(
    "args,needles",
    [
        (["diagnose", "RUN", "--alphas", "1,0.5,1.5"], ("--alphas", "[0, 1]", "1.5")),
        (["diagnose", "RUN", "--alphas", "-0.1"], ("--alphas", "-0.1")),
        (["diagnose", "RUN", "--alphas", "nan"], ("--alphas", "nan")),
        (["diagnose", "RUN", "--alphas", "1,x"], ("--alphas", "numbers")),
        (["diagnose", "RUN", "--batch-size", "0"], ("--batch-size", "at least 1")),
        (["diagnose", "RUN", "--batch-size", "-3"], ("--batch-size", "-3")),
        (["evaluate", "RUN", "--batch-size", "0"], ("--batch-size", "at least 1")),
        (["evaluate", "RUN", "--batch-size", "-1"], ("--batch-size", "-1")),
        (["train", SOURCE, "--out", "NEW", "--set", "train.batch_size=0"], ("train.batch_size",)),
        (["train", SOURCE, "--out", "NEW", "--set", "train.eval_batch_size=-2"], ("train.eval_batch_size",)),
    ],
)
def test_alphas_and_batch_sizes_are_checked_in_every_command(
    run_dir: Path, tmp_path: Path, args: list[str], needles: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(run_dir) if a == "RUN" else str(tmp_path / "new") if a == "NEW" else a for a in args]
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    code, out, err = run_cli(capsys, *args)
    one_line_error(code, err, *needles)
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before  # refused before any work
    assert not (tmp_path / "new").exists()


def test_alphas_in_range_are_accepted(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "diagnose", str(run_dir), "--what", "alpha", "--alphas", "1,0.25,0",
                           "--no-progress", "--json")
    assert code == 0, err
    rows = json.loads((run_dir / "diagnostics" / "alpha.json").read_text())["rows"]
    assert [r["alpha"] for r in rows] == [1.0, 0.25, 0.0]


@pytest.mark.parametrize("meta", [{"param_groups": 5}, {"param_groups": [], "scalars": []}, {"scalars": {"x": 1}},
                                  [], {"param_groups": [{"params": "abc"}]}])
def test_a_malformed_optimizer_meta_is_one_line(trained: Path, meta: object,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """trainer.json's optimizer_meta of the wrong shape (a number, a list, a name without its parameter id) is one
    line naming the state and the way out, never a traceback."""
    capsys.readouterr()
    path = trained / "state" / "trainer.json"
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "optimizer_meta": meta}))
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
    one_line_error(code, err, "state", "--force")


def _edit_tensors(path: Path, edit: str) -> None:
    """``path``'s safetensors with its first tensor (by name) edited: ``nan``, ``shape``, ``drop``, ``extra``,
    ``nudge`` (another value, all else the same), or a dtype name (every floating-point tensor in that dtype)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    first = sorted(tensors)[0]
    if edit == "nan":
        tensors[first] = tensors[first].clone().float()
        tensors[first].view(-1)[0] = float("nan")
    elif edit == "shape":
        tensors[first] = torch.zeros(3, 3)
    elif edit == "drop":
        del tensors[first]
    elif edit == "extra":
        tensors["state.999.exp_avg"] = torch.zeros(2)
    elif edit == "nudge":
        tensors[first] = tensors[first] + 0.5
    else:
        tensors = {k: v.to(getattr(torch, edit)) if v.is_floating_point() else v for k, v in tensors.items()}
    save_file(tensors, str(path))


@pytest.mark.parametrize("edit", ["nan", "shape", "drop", "extra", "float16", "bfloat16", "int32", "float64"])
@pytest.mark.parametrize("which", ["model", "optimizer"])
def test_resume_state_tensors_that_would_not_continue_the_run_are_one_line(
    trained: Path, which: str, edit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state's weights and Adam moments must be what the trainer saved: of the model's names, shapes and dtypes
    (float32), finite. A moment of another shape or a missing one was a traceback at the next step (RuntimeError,
    KeyError), another dtype (float16, an integer) was cast silently and the run went on from other numbers, and a NaN
    ended as "training diverged; try a lower train.lr". Maker: state/*-0001.safetensors of a 1-epoch run, edited,
    and trainer.json without its checksums (as saved before them: the checksums would refuse any edit first)."""
    capsys.readouterr()
    path = trained / "state" / f"{which}-0001.safetensors"
    _edit_tensors(path, edit)
    state = json.loads((trained / "state" / "trainer.json").read_text())
    (trained / "state" / "trainer.json").write_text(json.dumps({k: v for k, v in state.items() if k != "checksums"}))
    before = {p.name: p.read_bytes() for p in trained.iterdir() if p.is_file() and p.name != ".lock"}
    code, out, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
    said = {"nan": "NaN", "shape": "shape", "drop": "missing" if which == "model" else "lacks",
            "extra": "unexpected" if which == "model" else "is not Adam state"}
    dtype = "dtype mismatch" if which == "model" else f"is torch.{edit}"
    one_line_error(code, err, str(path), said.get(edit, dtype), "--force")
    assert "diverged" not in err and "best epoch" not in out
    assert json.loads((trained / "state" / "trainer.json").read_text())["epoch"] == 1
    assert (trained / "model.safetensors").read_bytes() == before["model.safetensors"]


@pytest.mark.parametrize("which", ["model", "optimizer"])
def test_resume_state_files_of_other_content_are_refused(trained: Path, which: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A state file of the same names, shapes and dtypes but other values (another run's, or another epoch's, copied
    in) resumed silently from those values. trainer.json holds the files' content hashes; a state saved before them
    resumes unchecked. Maker: a 1-epoch run's state file with one tensor moved by 0.5."""
    capsys.readouterr()
    path = trained / "state" / f"{which}-0001.safetensors"
    _edit_tensors(path, "nudge")
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
    one_line_error(code, err, str(path), "not the file trainer.json was saved with", "--force")
    state = json.loads((trained / "state" / "trainer.json").read_text())
    (trained / "state" / "trainer.json").write_text(json.dumps({k: v for k, v in state.items() if k != "checksums"}))
    assert run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)[0] == 0


@pytest.mark.parametrize(("field", "value"), [("lr", 0.5), ("lr", "x"), ("betas", [0.5, 0.5]), ("weight_decay", 1.0),
                                              ("params", [0])])
def test_resume_state_param_groups_other_than_the_config_are_one_line(
    trained: Path, field: str, value: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """The optimiser's saved parameter groups replace the new optimiser's in ``load_state_dict``: an edited lr in
    trainer.json trained the rest of the run at that rate while config.json said train.lr 0.001 (a string was a
    TypeError traceback at the first step). Maker: trainer.json of a 1-epoch run, one field of its group changed."""
    capsys.readouterr()
    path = trained / "state" / "trainer.json"
    state = json.loads(path.read_text())
    state["optimizer_meta"]["param_groups"][0][field] = value
    path.write_text(json.dumps(state))
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
    one_line_error(code, err, str(path), f"param_groups[0].{field}", "--force")


@pytest.mark.parametrize("files", [{"epoch": 2}, {"files": {"model": "../model.safetensors"}},
                                   {"files": {"optimizer": "/etc/hostname"}}])
def test_resume_state_naming_other_files_than_its_epochs_is_one_line(
    trained: Path, files: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    """trainer.json's epoch and its weight files are saved together: an epoch edited to 2 resumed the weights of
    epoch 1 as if after epoch 2 (the run silently one epoch short), and a file name outside state/ was read (the
    run's best checkpoint, any file). Maker: trainer.json of a 1-epoch run, its epoch or a file name changed."""
    capsys.readouterr()
    path = trained / "state" / "trainer.json"
    state = json.loads(path.read_text())
    state["train"]["epochs"] = 3
    if "epoch" in files:
        state["epoch"] = files["epoch"]
    state["files"].update(files.get("files", {}))
    path.write_text(json.dumps(state))
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "3", *TINY)
    one_line_error(code, err, str(path), "not the files of epoch", "--force")


@pytest.mark.parametrize("damage", ["no weights", "another epoch"])
def test_resume_without_the_best_checkpoint_is_refused_before_training(
    trained: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose model.safetensors is gone (or whose sidecar names another epoch than the state's best) trained
    every remaining epoch, then failed at the final evaluation with "checkpoint not found", its state now at the last
    epoch: no rerun could finish it. It is refused before training, the state as it was. Maker: a 1-epoch run, its
    weights deleted or its sidecar's epoch set to 5."""
    capsys.readouterr()
    if damage == "no weights":
        (trained / "model.safetensors").unlink()
    else:
        meta = json.loads((trained / "model.json").read_text())
        (trained / "model.json").write_text(json.dumps({**meta, "epoch": 5}))
    code, out, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "3", *TINY)
    one_line_error(code, err, str(trained / "model"), "--force")
    assert "epoch 2/3" not in err and json.loads((trained / "state" / "trainer.json").read_text())["epoch"] == 1


@pytest.mark.parametrize("damage", ["deleted", "first record lost", "epoch not a number"])
def test_resume_with_a_log_that_lost_epochs_is_refused(trained: Path, damage: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """metrics.jsonl lost (or its record of epoch 1 lost or damaged) resumed silently, and the finished run's
    training curve, epoch times and compute lacked the epochs before the interruption (an epoch of "x" was a
    TypeError traceback). Maker: a 1-epoch run, its log deleted or its line edited."""
    capsys.readouterr()
    log = trained / "metrics.jsonl"
    if damage == "deleted":
        log.unlink()
    elif damage == "first record lost":
        log.write_text("")
    else:
        log.write_text(log.read_text().replace('"epoch": 1,', '"epoch": "x",'))
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
    one_line_error(code, err, str(log), "epoch 1..1", "--force")


def test_files_of_another_resdom_version_say_so(trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sidecar or trainer state of a later format version (a run made by a newer resdom) was "not a resdom
    checkpoint" / "not a resdom trainer state", as if of some other program. Maker: a run's formats bumped to /2."""
    capsys.readouterr()
    for path, name in ((trained / "state" / "trainer.json", "resdom-trainer-state"),
                       (trained / "model.json", "resdom-checkpoint")):
        original = path.read_text()
        path.write_text(original.replace(f'"{name}/1"', f'"{name}/2"'))
        code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
        one_line_error(code, err, str(path), f"'{name}/2', written by another version of resdom", f"{name}/1")
        if name != "resdom-checkpoint":
            path.write_text(original)
    code, _, err = run_cli(capsys, "evaluate", str(trained))
    one_line_error(code, err, str(trained / "model.json"), "written by another version of resdom")


@pytest.mark.parametrize("finished", [True, False])
def test_the_way_out_of_another_setup_works(trained: Path, finished: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """A run of another setup said "delete RUN/state to start over": on a finished run that was refused next ("holds
    a finished run with no resume state ... --force"), its resume state gone for nothing. The advice is --force
    there, and deleting state/ only where training may then start afresh. Maker: a 1-epoch run, finished or with its
    final metrics removed (an interrupted one), trained again with another hidden size."""
    capsys.readouterr()
    if not finished:
        (trained / "metrics.json").unlink()
    other = [a if a != "model.hidden=8" else "model.hidden=16" for a in TINY]
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "1", *other)
    line = one_line_error(code, err, "another setup", "--force")
    assert (f"delete {trained / 'state'}" in line) is not finished
    if not finished:  # the advice works
        shutil.rmtree(trained / "state")
        assert run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "1", *other)[0] == 0


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "float16", "bfloat16", "float64"])
def test_checkpoint_weights_of_another_dtype(run_dir: Path, split: SplitData, dtype: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """An integer or boolean model.safetensors (its sidecar naming it) was cast to float32 by ``load_state_dict``
    and evaluated, diagnosed and recommended from without a word: NDCG@10 0.0000 of truncated weights. Such a file
    is refused in one line; a float16, bfloat16 or float64 one is read in float32 and scores as its values do.
    Maker: an untrained run's weights rounded to float16 (exact in every dtype here), then saved in ``dtype``."""
    from safetensors.torch import load_file, save_file

    from resdom.runs import WEIGHTS_KEY, checkpoint_id

    weights, sidecar = run_dir / "model.safetensors", run_dir / "model.json"
    rounded = {k: v.half().float() for k, v in load_file(str(weights)).items()}
    save_file(rounded, str(weights))
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, WEIGHTS_KEY: checkpoint_id(weights)}))
    code, expected, err = run_cli(capsys, "evaluate", str(run_dir))
    assert code == 0, err
    save_file({k: v.to(getattr(torch, dtype)) for k, v in rounded.items()}, str(weights))
    sidecar.write_text(json.dumps({**meta, WEIGHTS_KEY: checkpoint_id(weights)}))
    code, out, err = run_cli(capsys, "evaluate", str(run_dir))
    if dtype.startswith("float") or dtype == "bfloat16":
        assert (code, out) == (0, expected), err
    else:
        one_line_error(code, err, str(weights), "dtype mismatch", f"torch.{dtype}")
        assert out == ""
        with pytest.raises(ResdomError, match="dtype mismatch"):
            cast = {k: v.to(getattr(torch, dtype)) for k, v in rounded.items()}
            load_weights(tiny_model(split.n_items), cast, "x.pth")


@pytest.mark.parametrize("damage", ["bit flipped", "truncated"])
def test_resume_with_a_damaged_best_checkpoint_is_refused_before_training(
    trained: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The best checkpoint's weights are read only when the run ends: a damaged model.safetensors (one byte of its
    weights flipped, or cut short) trained every remaining epoch, then failed at the final evaluation with its state
    at the end, so no rerun could finish it (or, where a later epoch improved, went on past it unnoticed). Its weights
    are checked against the sidecar's hash before training. Maker: a 1-epoch run's weights file damaged."""
    capsys.readouterr()
    path = trained / "model.safetensors"
    data = bytearray(path.read_bytes())
    if damage == "bit flipped":
        data[-3] ^= 0x01
    else:
        del data[len(data) // 2:]
    path.write_bytes(bytes(data))
    code, out, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "3", *TINY)
    one_line_error(code, err, str(path), "not the weights model.json describes", "--force")
    assert "epoch 2/3" not in err and json.loads((trained / "state" / "trainer.json").read_text())["epoch"] == 1


@pytest.mark.parametrize("damage", ["bit flipped", "deleted"])
def test_resume_with_a_damaged_data_folder_writes_it_again_and_ends_as_an_undamaged_twin(
    trained: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's data/ is read back only when the run ends: one damaged (a flipped byte) or deleted trained every
    remaining epoch, then failed with advice (--force) that would discard the training. The data given matches the
    saved state's fingerprint, so data/ is written again from it, with a note, and the run ends as a twin resumed with
    its data/ intact does (the same checkpoint and metrics). Maker: a 1-epoch run's data/arrays.npz damaged."""
    import shutil

    from resdom.data.sequences import SplitData
    from resdom.runs import checkpoint_id

    twin = trained.parent / "twin"
    shutil.copytree(trained, twin)
    path = trained / "data" / "arrays.npz"
    if damage == "bit flipped":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    else:
        path.unlink()
    capsys.readouterr()
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "2", *TINY)
    assert code == 0, err
    assert f"note: {path}:" in err and "written again from the data given" in err
    assert run_cli(capsys, "train", SOURCE, "--out", str(twin), "--epochs", "2", *TINY)[0] == 0
    assert SplitData.load(trained / "data").manifest == SplitData.load(twin / "data").manifest
    assert checkpoint_id(trained / "model.safetensors") == checkpoint_id(twin / "model.safetensors")
    ours, theirs = (json.loads((r / "metrics.json").read_text()) for r in (trained, twin))
    assert ours["test"] == theirs["test"] and ours["best_epoch"] == theirs["best_epoch"]


def test_an_import_killed_before_its_config_can_be_written_again(
    tmp_path: Path, split: SplitData, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import (or ``Fitted.save``) writes the split and the checkpoint before config.json: one killed between
    them left a folder that was "not a resdom run directory", refused by every rerun, --force included, until deleted
    by hand. It counts as a run now: refused without --force (naming it), moved aside and written anew with it. A
    folder of the same names whose model.json is no resdom sidecar is still not a run. Maker: write_run with the
    config.json write raising KeyboardInterrupt (a kill)."""
    import resdom.adapters.common as common

    written = common.atomic_write_json

    def killed(path: Path, obj: object) -> None:
        if Path(path).name == "config.json":
            raise KeyboardInterrupt
        written(path, obj)

    out = tmp_path / "run"
    monkeypatch.setattr(common, "atomic_write_json", killed)
    with pytest.raises(KeyboardInterrupt):
        make_run(out, split)
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == [".lock", "data", "model.json", "model.safetensors"]
    with pytest.raises(ResdomError, match=r"run: exists and is not empty \(choose another --out, or --force"):
        make_run(out, split)
    labels = np.array([None, *range(1, split.n_items + 1)], dtype=object)
    write_run(out, tiny_model(split.n_items), ImportData(split, labels, split.manifest), {"format": "test"}, force=True)
    assert (out / "config.json").is_file() and (tmp_path / "run.replaced-1" / "model.safetensors").is_file()
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "run.replaced-1", other)
    (other / "model.json").write_text("{}")
    with pytest.raises(ResdomError, match="is not a resdom run directory"):
        write_run(other, tiny_model(split.n_items), ImportData(split, labels, split.manifest), {}, force=True)


def test_resume_with_another_runs_checkpoint_of_the_same_epoch_is_refused(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """model.safetensors and model.json of another run (another seed), of the same best epoch, copied in: the
    sidecar's epoch was all the resume compared, so the run trained on and, where no later epoch improved, ended with
    the other run's model as its own. trainer.json holds the hash of the checkpoint it selected. Maker: a 1-epoch
    run's checkpoint pair replaced by that of the same run trained with seed 5."""
    capsys.readouterr()
    other = tmp_path / "other"
    assert invoke("train", SOURCE, "--out", str(other), "--epochs", "1", "--seed", "5", *TINY) == 0
    for name in ("model.safetensors", "model.json"):
        shutil.copy(other / name, trained / name)
    code, out, err = run_cli(capsys, "train", SOURCE, "--out", str(trained), "--epochs", "3", *TINY)
    one_line_error(code, err, str(trained / "model.safetensors"), "not the checkpoint trainer.json was saved with",
                   "--force")
    assert json.loads((trained / "state" / "trainer.json").read_text())["epoch"] == 1
