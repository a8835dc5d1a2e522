"""The first hour: what a new user runs first works as README says (each case reproduced, then the
right behaviour asserted). Own CSV files and saved splits train; logs get plain progress lines, not bars;
Ctrl-C says what was kept; files follow the umask; errors name the user's own option; metrics keep one order."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import typer
from cli_helpers import invoke, run_cli

from resdom.cli.main import _typer_app
from resdom.data.sequences import SplitData
from resdom.io import atomic_write_json
from resdom.names import metric_key
from resdom.runs import data_fingerprint

SOURCE = "synthetic:n_users=60,n_items=30,min_len=5,max_len=12"
TINY = ["--set", "model.hidden=16", "--set", "model.layers=1", "--set", "model.max_len=10", "--device", "cpu"]
GRID_SOURCE = "synthetic:n_users=60"  # --datasets is comma-separated: one knob only
CANONICAL = ["HR@1", "HR@5", "HR@10", "HR@20", "NDCG@1", "NDCG@5", "NDCG@10", "NDCG@20", "MRR"]


def user_error(code: int, err: str, *needles: str) -> None:
    """A user's mistake: exit 2, one line naming the culprit, no traceback."""
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


def write_csv(path: Path, n_users: int = 50) -> Path:
    """Interactions with the user's own column names (not user_id / item_id / timestamp)."""
    rng = np.random.default_rng(0)
    rows = ["customer,product,ts"]
    for u in range(n_users):
        t = 1_600_000_000 + 1_000 * u
        for _ in range(int(rng.integers(6, 11))):
            t += int(rng.integers(100, 100_000))
            rows.append(f"c{u},p{int(rng.integers(0, 20))},{t}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("first-hour") / "run"
    assert invoke("train", SOURCE, "--protocol", "loo", "--out", str(out), "--epochs", "2", *TINY) == 0
    return out


# ------------------------------------------------------------------------------- own data, saved splits


def test_csv_with_own_column_names_trains_end_to_end(tmp_path: Path, capsys) -> None:
    csv = write_csv(tmp_path / "shop.csv")
    run = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", str(csv), "--out", str(run), "--epochs", "1", *TINY)
    user_error(code, err, "missing column 'user_id'", "--user-col")  # before: train had no such option at all
    code, out, err = run_cli(capsys, "train", str(csv), "--user-col", "customer", "--item-col", "product",
                             "--time-col", "ts", "--k-core", "0", "--protocol", "gts", "--valid-quantile", "0.85",
                             "--out", str(run), "--epochs", "1", *TINY)
    assert code == 0, err
    assert "test (" in out and (run / "metrics.json").is_file()
    data = json.loads((run / "config.json").read_text())["data"]
    assert data["protocol"] == "gts" and data["manifest"]["valid_quantile"] == 0.85
    assert data["options"] == {"item_col": "product", "k_core": 0, "time_col": "ts", "user_col": "customer",
                               "valid_quantile": 0.85}
    assert data["manifest"]["preprocessing"]["config"]["k_core"] is None  # --k-core 0: off
    for command in (["data", "stats"], ["data", "split", "--out", str(tmp_path / "s")], ["train", "--out", str(run)]):
        code, _, err = run_cli(capsys, *command, str(csv), "--k-core", "-1")
        user_error(code, err, "--k-core: must be 0 (off) or more")  # before: a pydantic traceback
    for flag, value in (("--quantile", "1.5"), ("--valid-quantile", "0"), ("--quantile", "nan")):
        for command in (["data", "split", "--out", str(tmp_path / "q")], ["train", "--out", str(tmp_path / "q")]):
            code, _, err = run_cli(capsys, *command, str(csv), "--protocol", "gts", flag, value)
            user_error(code, err, f"{flag}: must lie strictly between 0 and 1")  # before: no option named
            assert not (tmp_path / "q").exists()


def test_train_on_a_saved_split_uses_exactly_that_split(tmp_path: Path, capsys) -> None:
    csv = write_csv(tmp_path / "shop.csv")
    prepared = tmp_path / "prepared" / "shop"
    cols = ["--user-col", "customer", "--item-col", "product", "--time-col", "ts"]
    code, _, err = run_cli(capsys, "data", "split", str(csv), *cols, "--protocol", "gts", "--out", str(prepared))
    assert code == 0, err
    run = tmp_path / "run"
    code, out, err = run_cli(capsys, "train", str(prepared), "--out", str(run), "--epochs", "1", *TINY)
    assert code == 0, err
    saved = SplitData.load(prepared)
    used = SplitData.load(run / "data")
    assert used.manifest == saved.manifest and data_fingerprint(used) == data_fingerprint(saved)
    for a, b in ((used.train, saved.train), (used.test.inputs, saved.test.inputs)):
        assert np.array_equal(a.items, b.items) and np.array_equal(a.offsets, b.offsets)
    assert np.array_equal(used.test.targets, saved.test.targets)
    config = json.loads((run / "config.json").read_text())["data"]
    assert config["fingerprint"] == data_fingerprint(saved) and config["protocol"] == "gts"
    assert config["prepared_split"] == str(prepared.resolve())
    # the same command again resumes / returns the finished run: the fingerprint still matches
    code, _, err = run_cli(capsys, "train", str(prepared), "--out", str(run), "--epochs", "1", *TINY)
    assert code == 0, err
    # options that would change a saved split are refused, naming the option
    code, _, err = run_cli(capsys, "train", str(prepared), "--out", str(tmp_path / "r2"), "--k-core", "3", *TINY)
    user_error(code, err, "--k-core", str(prepared), "resdom data split")
    code, _, err = run_cli(capsys, "train", str(prepared), "--out", str(tmp_path / "r2"), "--protocol", "loo", *TINY)
    user_error(code, err, "--protocol loo", "gts split")


def _option_names(*path: str) -> set[str]:
    command = typer.main.get_command(_typer_app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return {opt for p in command.params for opt in p.opts + p.secondary_opts}


def test_stats_split_and_train_share_one_set_of_data_options() -> None:
    data_opts = {"--data-dir", "--format", "--k-core", "--remove-repeats", "--keep-repeats", "--user-col",
                 "--item-col", "--time-col"}
    split_opts = {"--protocol", "--quantile", "--valid-quantile"}
    stats, split, train = _option_names("data", "stats"), _option_names("data", "split"), _option_names("train")
    assert data_opts <= stats and not split_opts & stats
    assert data_opts | split_opts <= split and data_opts | split_opts <= train


# ---------------------------------------------------------------------------------------------- progress


def test_logs_get_one_line_per_epoch_and_per_stage_not_bars(trained_run: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(run), "--epochs", "2", *TINY)
    assert code == 0, err
    lines = [x for x in err.splitlines() if x.startswith("epoch ")]
    assert [x.split(":")[0] for x in lines] == ["epoch 1/2", "epoch 2/2"], err
    assert "valid NDCG@10" in lines[0] and "\r" not in err and "it/s" not in err
    code, _, err = run_cli(capsys, "diagnose", str(trained_run), "--what", "hrli,mixing")
    assert code == 0, err
    assert [x.split(":")[0] for x in err.splitlines() if x.startswith("diagnose [")] == \
        ["diagnose [1/2] hrli", "diagnose [2/2] mixing"], err
    assert "\r" not in err and "it/s" not in err


@pytest.mark.slow
def test_reproduce_log_has_plain_lines_only(tmp_path: Path, capsys) -> None:
    out = tmp_path / "grid"
    code, stdout, err = run_cli(capsys, "reproduce", "--datasets", GRID_SOURCE, "--models", "sasrec", "--seeds", "1",
                                "--protocol", "loo", "--device", "cpu", "--epochs", "2", "--out", str(out))
    assert code == 0, stdout + err
    log = stdout + err
    assert "\r" not in log and "it/s" not in log and "%|" not in log  # no tqdm bar in a log
    assert "epoch 2/2" in err and "diagnose [5/5] recovery" in err
    assert len(log.splitlines()) < 40


# ------------------------------------------------------------------------------------------------ Ctrl-C


def test_ctrl_c_on_diagnose_says_what_was_kept(trained_run: Path, capsys, monkeypatch) -> None:
    import resdom.diagnostics.registry as registry

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(registry, "alpha_sweep", interrupted)
    code, _, err = run_cli(capsys, "diagnose", str(trained_run))
    assert code == 130 and "Traceback" not in err
    assert "interrupted" in err and "shuffle, hrli, mixing" in err, err
    assert f"resdom diagnose {trained_run} --what alpha,recovery" in err
    assert (trained_run / "diagnostics" / "mixing.json").is_file()


@pytest.mark.slow
def test_ctrl_c_on_reproduce_says_what_was_kept(tmp_path: Path, capsys, monkeypatch) -> None:
    import importlib

    import resdom.training.trainer as trainer

    real_fit = trainer.fit

    def fit(split, model_cfg, train_cfg, *args, **kwargs):
        if train_cfg.seed == 2:
            raise KeyboardInterrupt
        return real_fit(split, model_cfg, train_cfg, *args, **kwargs)

    monkeypatch.setattr(importlib.import_module("resdom.pipeline.common"), "fit", fit)  # the grid's trainer
    out = tmp_path / "grid"
    code, _, err = run_cli(capsys, "reproduce", "--datasets", GRID_SOURCE, "--models", "sasrec", "--seeds", "1,2",
                           "--protocol", "loo", "--device", "cpu", "--epochs", "1", "--out", str(out), "--quiet")
    assert code == 130 and "Traceback" not in err
    assert "interrupted" in err and "1 of 2 runs" in err and "run the same command" in err, err


@pytest.mark.slow
@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_ctrl_c_while_the_command_loads_is_one_line(sigint: str) -> None:
    """Ctrl-C in the seconds ``resdom`` spends importing torch and pandas printed a traceback of the import machinery;
    it is one line and exit status 130 (and where SIGINT was ignored, as for a job a shell started in the background,
    it stays ignored). Maker: an import hook that sends SIGINT as the CLI's train module loads."""
    import subprocess
    import sys

    script = f"""
import importlib.abc, os, signal, sys
if {sigint == "ignored"}:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "resdom.cli.train_cmd":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["resdom", "version"]
from resdom.cli.main import app
print("ignored" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else "handled")
app()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    if sigint == "ignored":
        assert done.returncode == 0 and done.stdout.startswith("ignored"), done.stderr
    else:
        assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_stopping_signal_while_the_command_loads_is_one_line(name: str) -> None:
    """SIGTERM (``kill``, ``timeout``, a scheduler) or SIGHUP in the seconds ``resdom`` spends importing torch ended
    it without a word (killed by the signal), where the same signal a moment later says "interrupted (SIGTERM)"; it
    is that line now, exit 128 + the signal, and the signal's own handling is back once the modules have loaded.
    Maker: an import hook that sends the signal as the CLI's train module loads."""
    import signal
    import subprocess
    import sys

    script = f"""
import importlib.abc, os, signal, sys
class Stop(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "resdom.cli.train_cmd":
            os.kill(os.getpid(), signal.{name})
        return None
sys.meta_path.insert(0, Stop())
import resdom.cli.main
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WORLD_SIZE": "1"})
    assert (done.returncode, done.stderr, done.stdout) == (128 + getattr(signal, name), f"interrupted ({name})\n", "")
    after = subprocess.run([sys.executable, "-c", "import signal, resdom.cli.main; print(signal.getsignal(signal."
                            f"{name}) is signal.SIG_DFL)"], capture_output=True, text=True, timeout=300)
    assert after.stdout == "True\n", after.stderr


def test_ctrl_c_while_the_command_line_is_read_is_one_line(capsys, monkeypatch) -> None:
    """Ctrl-C after the imports but before Click's own handling began (Typer building the command from the
    functions' signatures, seconds on a busy machine) printed a traceback of ``inspect``; it is one line, exit 130."""
    import typer.main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(typer.main, "get_command", interrupted)
    try:
        code, out, err = run_cli(capsys, "data", "list")
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the entry point (a traceback)")
    assert (code, out, err) == (130, "", "interrupted\n")


def test_ctrl_c_in_a_command_that_says_nothing_of_its_own_is_one_line(trained_run: Path, capsys,
                                                                      monkeypatch) -> None:
    """Ctrl-C in evaluate, recommend, report, data split ... (no message of their own) exited 130 without a word, a
    silent end the user could not tell from a crash; one "interrupted" line now, and train / diagnose / reproduce,
    which say what they kept, say it once, without the plain line after it."""
    import resdom.cli.recommend_cmd as recommend_cmd

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(recommend_cmd, "recommend_lists", interrupted)
    code, out, err = run_cli(capsys, "recommend", str(trained_run), "--device", "cpu")
    assert (code, out) == (130, "") and err.splitlines()[-1] == "interrupted" and "Traceback" not in err, err
    import resdom.diagnostics.registry as registry

    monkeypatch.setattr(registry, "alpha_sweep", interrupted)
    code, _, err = run_cli(capsys, "diagnose", str(trained_run), "--what", "alpha")
    assert code == 130 and [x.split(":")[0] for x in err.splitlines() if x.startswith("interrupted")] == \
        ["interrupted"], err  # its own line alone


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_ends_a_command_as_ctrl_c_does(name: str, tmp_path: Path, trained_run: Path, capsys,
                                                         monkeypatch) -> None:
    """SIGTERM (``kill``, ``timeout``, a scheduler) or SIGHUP (a closed terminal) killed train without a word: no line
    of what was kept or how to resume. They end a command as Ctrl-C does now, with the signal named, exit 128 + its
    number, and the handlers before are restored after the command. Maker: the handler in place while the command
    runs, called as the signal would call it (the old code had none: SIG_DFL, not callable)."""
    import signal

    import resdom.cli.recommend_cmd as recommend_cmd
    import resdom.cli.train_cmd as train_cmd

    signum = getattr(signal, name)
    if signal.getsignal(signum) is not signal.SIG_DFL:
        pytest.skip(f"{name} is handled by the test runner")

    def stopped(*args, **kwargs):
        handler = signal.getsignal(signum)
        assert callable(handler), f"{name} is not handled: it kills the command without a word"
        handler(signum, None)

    monkeypatch.setattr(train_cmd, "fit", stopped)
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", SOURCE, "--protocol", "loo", "--out", str(out), "--epochs", "2", *TINY)
    assert code == 128 + signum and "Traceback" not in err, err
    assert err.splitlines()[-1] == (f"interrupted ({name}): {out} keeps the state of the last finished epoch; run "
                                    "the same command to resume"), err
    monkeypatch.setattr(recommend_cmd, "recommend_lists", stopped)
    code, out_text, err = run_cli(capsys, "recommend", str(trained_run), "--device", "cpu")
    assert (code, out_text, err.splitlines()[-1]) == (128 + signum, "", f"interrupted ({name})"), err
    assert signal.getsignal(signum) is signal.SIG_DFL


@pytest.mark.slow
def test_output_to_a_closed_or_full_stdout_is_an_error_naming_it() -> None:
    """``resdom data list >&-`` exited 0 with its output lost, and ``> /dev/full`` said "output: no space left on
    device; ... (the run resumes: a training run continues ...)"; both are one line naming standard output, exit 2."""
    import subprocess
    import sys

    def run(**kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "resdom", "data", "list"], stderr=subprocess.PIPE, text=True,
                              timeout=300, **kwargs)

    closed = run(stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and closed.stderr.splitlines() == [
        "error: standard output: Bad file descriptor (closed: >&-?); the output is incomplete"], closed.stderr
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            done = run(stdout=full)
        assert done.returncode == 2 and done.stderr.splitlines() == [
            "error: standard output: No space left on device; the output is incomplete"], done.stderr


@pytest.mark.slow
def test_stdout_in_an_encoding_that_cannot_hold_the_text(tmp_path: Path) -> None:
    """A Latin-1 or ASCII standard output (an old cluster's locale, PYTHONIOENCODING, a C locale without UTF-8 mode):
    recommend / similar of ids outside Latin-1 ended in a UnicodeEncodeError traceback (and the other ids went out
    in Latin-1, another file than --out writes); data stats of a file named so, and resdom --help / remedies --help
    (their '±') on ASCII, too. The CSV now goes out as the bytes --out writes; a line for the user writes what its
    encoding cannot hold as its code."""
    import subprocess
    import sys

    import pandas as pd

    import resdom

    rows = [(f"usér-{u}", f"ítem-日本{(u * 7 + t) % 12}", float(t)) for u in range(30) for t in range(6)]
    frame = pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])
    (tmp_path / "日本.csv").write_text(frame.to_csv(index=False), encoding="utf-8")
    run = resdom.fit(resdom.prepare_split(frame, "loo"), "sasrec", out=tmp_path / "run", epochs=1, hidden=8,
                     layers=1, max_len=6, device="cpu", progress=False).directory

    def resdom_cli(encoding: str, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "resdom", *args], capture_output=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, "PYTHONIOENCODING": encoding})
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
        return done

    for command in ("recommend", "similar"):
        printed = resdom_cli("latin-1", command, str(run), "--device", "cpu", "-k", "2").stdout
        resdom_cli("latin-1", command, str(run), "--device", "cpu", "-k", "2", "--out", f"{command}.csv")
        assert printed == (tmp_path / f"{command}.csv").read_bytes() and "日本".encode() in printed
    assert "\\u65e5\\u672c.csv" in resdom_cli("latin-1", "data", "stats", "日本.csv").stdout.decode("latin-1")
    assert b"mean \\xb1 std" in resdom_cli("ascii", "remedies", "--help").stdout
    resdom_cli("ascii", "--help")


def test_a_printed_file_goes_to_a_text_only_stdout_too() -> None:
    """A printed file goes out as bytes where stdout has them (the test above); a program that calls ``app()`` with
    stdout an ``io.StringIO`` (no bytes under it) gets the text, not a TypeError."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert invoke("config", "show", "sasrec") == 0
    assert buf.getvalue().startswith("# resdom ")


@pytest.mark.slow
def test_a_locale_that_is_not_utf8_reads_resdoms_own_files() -> None:
    """Under a C locale without UTF-8 mode (open() reads ASCII there, Latin-1 under a Latin-1 locale) ``resdom config
    list`` ended in a UnicodeDecodeError traceback on a shipped configuration's '±'; every file resdom reads as
    text is UTF-8, whatever the locale."""
    import subprocess
    import sys

    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run([sys.executable, "-m", "resdom", "config", "list"], capture_output=True, timeout=300,
                          env=env)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    assert b"sasrec_loo" in done.stdout


def test_every_text_file_is_read_and_written_as_utf8() -> None:
    """The class of the test above: no read_text(), write_text() or open() in text mode in resdom's code leaves the
    encoding to the locale (the process's own streams, /proc and the lock file's one ASCII word aside)."""
    import ast

    allowed = {("cli/main.py", "open"): 2, ("io.py", "open"): 2}
    found: dict[tuple[str, str], int] = {}
    root = Path(__file__).resolve().parents[1] / "src" / "resdom"
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or any(k.arg == "encoding" for k in node.keywords):
                continue
            func, mode = node.func, next((k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(func, ast.Attribute) and func.attr in ("read_text", "write_text") and not node.args:
                name = func.attr
            elif isinstance(func, ast.Name) and func.id == "open":
                mode = mode or (node.args[1] if len(node.args) > 1 else None)
                name = "open"
            elif isinstance(func, ast.Attribute) and func.attr == "open" and (mode is not None or node.args):
                mode = mode or node.args[0]  # Path.open(mode); a zip member's open(name, "w") names no str first
                name = "open"
            else:
                continue
            if name == "open" and isinstance(mode, ast.Constant) and (not isinstance(mode.value, str)
                                                                      or "b" in mode.value):
                continue
            if name == "open" and mode is not None and not isinstance(mode, ast.Constant):
                continue
            key = (path.relative_to(root).as_posix(), name)
            found[key] = found.get(key, 0) + 1
    assert found == allowed, found


@pytest.mark.slow
def test_an_unwritable_matplotlib_folder_is_one_note(trained_run: Path, tmp_path: Path) -> None:
    """In a container whose HOME is read-only (or with MPLCONFIGDIR unwritable) every report printed matplotlib's
    "mkdir -p failed for path P: [Errno 20] Not a directory: 'P'" and a sentence of advice about it; now one note
    naming the folder and MPLCONFIGDIR, and the report with its figures as before. (Root writes anywhere: the folder
    lies below a file.)"""
    import subprocess
    import sys

    (tmp_path / "a-file").write_text("")
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "a-file" / "matplotlib")}
    done = subprocess.run([sys.executable, "-m", "resdom", "report", str(trained_run), "--out", str(tmp_path / "rep")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and (tmp_path / "rep" / "report.html").is_file(), done.stderr
    assert done.stderr.splitlines() == [
        f"note: matplotlib's cache folder (MPLCONFIGDIR {tmp_path / 'a-file' / 'matplotlib'}) is not writable: figures "
        "are drawn with a temporary one, made anew each run; set MPLCONFIGDIR to a writable folder to keep it"]


@pytest.mark.slow
def test_a_reader_that_went_away_ends_the_command_quietly_with_141(trained_run: Path) -> None:
    """``resdom recommend RUN | head -1``, ``resdom --help | head -1``: a broken pipe exited 1 without a word (Click's
    own handling), a status read as a failure of resdom. Now every command that writes to stdout ends quietly with
    141 (128 + SIGPIPE, as a Unix tool killed by SIGPIPE): nothing on stderr, no "Exception ignored" at exit; the
    same where stderr is the pipe too (``2>&1 | head -1``). Maker: a pipe whose reading end is closed."""
    import subprocess
    import sys

    commands = [["--help"], ["config", "show"], ["recommend", str(trained_run), "--device", "cpu"],
                ["evaluate", str(trained_run), "--device", "cpu"], ["data", "list"]]
    read, write = os.pipe()
    os.close(read)
    try:
        started = [subprocess.Popen([sys.executable, "-m", "resdom", *args], stdout=write, stderr=subprocess.PIPE,
                                    text=True) for args in commands]
        both = subprocess.Popen([sys.executable, "-m", "resdom", "config", "show"], stdout=write, stderr=write)
        done = [(args, p.communicate(timeout=300)[1], p.returncode) for args, p in zip(commands, started)]
        assert both.wait(timeout=300) == 141
    finally:
        os.close(write)
    for args, err, code in done:
        assert (code, err) == (141, ""), (args, code, err)


@pytest.mark.slow
def test_no_file_takes_the_descriptor_of_a_closed_stdout_or_stderr(tmp_path: Path) -> None:
    """With stdout and stderr closed (``>&- 2>&-``, a daemon's) the first file resdom opened became fd 1 or 2, where
    torch's C++ warnings and any library's prints then landed, and ``sys.stderr`` was None: diagnose and train
    failed at ``sys.stderr.isatty()`` (exit 1, nothing written). The descriptors hold placeholders now."""
    import subprocess
    import sys

    script = f"""
import sys
import resdom.cli.main
with open({str(tmp_path / "f")!r}, "w") as f:
    f.write(f"{{f.fileno()}} {{sys.stderr.isatty()}}")
"""

    def close_std() -> None:
        os.close(1)
        os.close(2)

    done = subprocess.run([sys.executable, "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, preexec_fn=close_std, timeout=300)
    fileno, isatty = (tmp_path / "f").read_text().split()
    assert done.returncode == 0 and int(fileno) > 2 and isatty == "False"


# ------------------------------------------------------------------------------------------------- umask


@pytest.fixture
def umask() -> Iterator[callable]:
    old = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_output_files_follow_the_umask(tmp_path: Path, umask) -> None:
    umask(0o022)
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert _mode(tmp_path / "a.json") == 0o644  # before: 0600, colleagues could not read reports
    umask(0o027)
    atomic_write_json(tmp_path / "b.json", {"x": 1})
    assert _mode(tmp_path / "b.json") == 0o640
    umask(0o002)
    code = invoke("data", "split", SOURCE, "--out", str(tmp_path / "split"))
    assert code == 0
    assert _mode(tmp_path / "split" / "arrays.npz") == 0o664 and _mode(tmp_path / "split" / "manifest.json") == 0o664


# ------------------------------------------------------------------------------------------- small fixes


def test_a_read_only_output_file_is_not_replaced(trained_run: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """An earlier output made read-only to keep it (chmod a-w) was replaced all the same, and left writable:
    resdom writes a new file and renames it into place, which a writable folder allows. Each file a command is
    told to write (recommend / similar --out, evaluate --per-user, config show --out, report --doc) is now
    refused in one line where its permissions forbid writing it, as ``>`` would. (Root writes anything: the
    permission is stubbed.)"""
    import resdom.rundir

    run, doc = str(trained_run), tmp_path / "doc.md"
    doc.write_text("# notes\n")
    written = {"--out": [("recommend", run, "--device", "cpu", "-k", "2"), ("similar", run, "--device", "cpu"),
                         ("config", "show", "sasrec")],
               "--per-user": [("evaluate", run, "--device", "cpu")]}
    cases = [(option, (*args, option, str(tmp_path / f"{args[0]}.out")), tmp_path / f"{args[0]}.out")
             for option, commands in written.items() for args in commands]
    cases.append(("--doc", ("report", run, "--out", str(tmp_path / "rep"), "--doc", str(doc)), doc))
    for _, args, _file in cases:
        assert run_cli(capsys, *args)[0] == 0, args
    kept = {file: file.read_bytes() for _, _, file in cases}
    real = os.access
    monkeypatch.setattr(resdom.rundir.os, "access",
                        lambda p, mode: real(p, mode) and not (mode & os.W_OK and Path(p) in kept))
    for option, args, file in cases:
        code, _, err = run_cli(capsys, *args)
        user_error(code, err, f"error: {option} {file}: is read-only (its permissions forbid writing it); make it "
                              "writable (chmod u+w) or choose another file")
        assert file.read_bytes() == kept[file]


def test_out_dash_prints_where_a_command_prints_one_file_and_is_refused_elsewhere(trained_run: Path, capsys,
                                                                                  tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """``--out -`` made a file (or folder) named ``-`` in the working folder. Where a command prints its one file
    without --out (recommend, similar, config show) it now prints it; every other output option (a folder, a
    second file beside a printed summary, a --doc refilled in place) refuses it in one line."""
    monkeypatch.chdir(tmp_path)
    code, printed, err = run_cli(capsys, "recommend", str(trained_run), "--device", "cpu", "-k", "2", "--out", "-")
    assert code == 0 and printed.startswith("user_id,item_id,score,rank\n"), err
    code, printed, err = run_cli(capsys, "similar", str(trained_run), "--device", "cpu", "-k", "2", "-o", "-")
    assert code == 0 and printed.startswith("target_item_id,item_id,score,rank\n"), err
    code, printed, err = run_cli(capsys, "config", "show", "sasrec", "--out", "-")
    assert code == 0 and printed.startswith("# resdom "), err
    refused = [("train", SOURCE, "--out", "-"), ("data", "split", SOURCE, "--out", "-"),
               ("report", str(trained_run), "--out", "-"), ("demo", "--out", "-"),
               ("evaluate", str(trained_run), "--device", "cpu", "--per-user", "-"),
               ("report", str(trained_run), "--out", "rep", "--doc", "-"),
               ("reproduce", "--datasets", GRID_SOURCE, "--out", "grid", "--store", "-")]
    for args in refused:
        option = args[args.index("-") - 1]
        code, _, err = run_cli(capsys, *args)
        user_error(code, err, f"{option} -: ", "not standard output")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", ["evaluate", "diagnose"])
def test_device_errors_name_the_commands_own_option(trained_run: Path, capsys, command: str) -> None:
    code, _, err = run_cli(capsys, command, str(trained_run), "--device", "tpu")
    user_error(code, err, "--device: unknown device 'tpu'")
    assert "train.device" not in err


@pytest.mark.parametrize("args", [["demo"], ["reproduce", "--datasets", "synthetic", "--models", "sasrec", "--seeds",
                                              "1,2"], ["remedies", "synthetic", "--variants", "gate,pool"]])
def test_pipelines_refuse_a_device_up_front(tmp_path: Path, capsys, args: list[str]) -> None:
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, *args, "--out", str(out), "--device", "tpu")
    user_error(code, err, "--device: unknown device 'tpu'")
    assert "FAILED" not in err and not out.exists()  # before: the demo made its data, the grids failed every cell


def test_alpha_summary_names_its_users(trained_run: Path, capsys) -> None:
    code, out, err = run_cli(capsys, "diagnose", str(trained_run), "--what", "alpha", "--alphas", "1,0.5")
    assert code == 0, err
    assert out.splitlines()[0] == "split test, 60 users", out  # before: "split test, ? users"


def test_metrics_keep_one_order_between_runs(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    args = ("train", SOURCE, "--out", str(run), "--epochs", "1", *TINY)
    code, first, err = run_cli(capsys, *args)
    assert code == 0, err
    code, again, err = run_cli(capsys, *args)  # finished: the saved metrics are printed
    assert code == 0, err
    metric_lines = [x for x in first.splitlines() if x.startswith(("valid", "test"))]
    assert metric_lines == [x for x in again.splitlines() if x.startswith(("valid", "test"))]
    names = metric_lines[1].split(": ", 1)[1].split()[::2]
    assert names == CANONICAL
    saved = json.loads((run / "metrics.json").read_text())
    assert list(saved["test"]["metrics"]) == CANONICAL
    assert list(json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["valid"]) == CANONICAL
    code, out, _ = run_cli(capsys, "evaluate", str(run))
    assert [x.split()[0] for x in out.splitlines()[1:]] == CANONICAL
    assert sorted(reversed(CANONICAL), key=metric_key) == CANONICAL


def test_failed_offline_download_leaves_no_empty_cache_folder(tmp_path: Path, capsys, monkeypatch) -> None:
    from resdom.data.download import ENV_CACHE_DIR, ENV_DATA_DIR, ENV_DOWNLOAD_BASE

    cache = tmp_path / "cache"
    monkeypatch.setenv(ENV_CACHE_DIR, str(cache))
    monkeypatch.setenv(ENV_DOWNLOAD_BASE, "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.delenv(ENV_DATA_DIR, raising=False)
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    code, _, err = run_cli(capsys, "data", "stats", "beauty")
    assert code == 2 and "Traceback" not in err and "download failed" in err and "--data-dir" in err
    assert not cache.exists(), sorted(str(p) for p in cache.rglob("*"))
    # a cache folder that existed before is kept (only what the download created goes)
    cache.mkdir()
    code, _, err = run_cli(capsys, "data", "stats", "beauty")
    assert code == 2 and cache.is_dir() and list(cache.iterdir()) == []
