"""Advice that works when followed: an option a message or a note tells the user to give exists on the command that
printed it (or on the command the message names), with that spelling, and the command then gets further."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from resdom.cli.main import _typer_app
from tests.cli_helpers import SMALL_SYNTHETIC, TINY_MODEL, commands, one_line_error, run_cli

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*[a-z]")
NAMED_COMMAND = re.compile(r"resdom ((?:data |config )?[a-z-]+)")


def _options() -> dict[str, set[str]]:
    """Each command's long options, by its words after ``resdom`` (``data split``)."""
    return {" ".join(path): {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
            for path, cmd in commands(typer.main.get_command(_typer_app)) if path}


def assert_advice_exists(command: str, text: str) -> None:
    """Every ``--option`` in ``text`` (lines printed by ``resdom COMMAND``) is an option of that command, or of a
    command the same line names (``resdom data split``)."""
    options = _options()
    for line in text.splitlines():
        named = [c for c in NAMED_COMMAND.findall(line) if c in options]
        for flag in FLAG.findall(line):
            owners = [c for c in (command, *named) if flag in options[c]]
            assert owners, f"resdom {command} advises {flag}, which it has not: {line}"


def test_a_saved_splits_notes_advise_a_new_split_not_options_the_command_refuses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`resdom train SPLIT` (and `data stats SPLIT`) of a gts split with few users repeated the split's notes: "a
    lower --quantile ... or --protocol loo gives steadier numbers", "name another protocol to override"; train then
    refused both on a saved split ("leave the option out or split the data again") and data stats has neither. The
    notes of a saved split now advise splitting the data again, which takes them."""
    split = tmp_path / "split"
    code, _, err = run_cli(capsys, "data", "split", SMALL_SYNTHETIC, "--out", str(split))
    assert code == 0, err
    assert "a lower --quantile" in err and "name another protocol to override" in err  # a fresh split: options work
    assert_advice_exists("data split", err)
    for command in (["data", "stats"], ["train"]):
        extra = ["--out", str(tmp_path / "run"), "--epochs", "1", *TINY_MODEL] if command == ["train"] else []
        code, _, err = run_cli(capsys, *command, str(split), *extra)
        assert code == 0, err
        assert "split the data again to choose another protocol" in err, err
        assert "the data split again (`resdom data split`) with a lower --quantile" in err, err
        assert_advice_exists(" ".join(command), err)
    code, _, err = run_cli(capsys, "train", str(split), "--quantile", "0.5", "--out", str(tmp_path / "run2"))
    one_line_error(code, err, "split the data again")  # why the advice is a new split
    code, _, err = run_cli(capsys, "data", "split", SMALL_SYNTHETIC, "--quantile", "0.5", "--out",
                           str(tmp_path / "split2"))
    assert code == 0, err  # followed: the new split takes it


def test_out_of_memory_advises_only_options_of_the_command_that_ran_out() -> None:
    """torch's out-of-memory line said "lower train.batch_size (or --batch-size) or model.max_len" whatever the
    command: `resdom train --batch-size 64` is "no such option" (train sets its batches with --set), and a trained
    run's model.max_len is no option of evaluate, diagnose or recommend. Each command's line now names what lowers
    the memory among its own options."""
    import torch

    from resdom.cli.main import command_words, out_of_memory_line

    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has ...")
    for command in _options():
        line = out_of_memory_line(error, command)
        assert line is not None and line.startswith("out of memory (CUDA out of memory, tried to allocate 20.00 GiB)")
        assert_advice_exists(command, line)
    assert "--set train.batch_size=N" in (out_of_memory_line(error, "train") or "")
    assert "--batch-size" in (out_of_memory_line(error, "diagnose") or "")
    assert command_words(["data", "split", "x.csv", "--out", "s"]) == "data split"
    assert command_words(["train", "x.csv", "--out", "run"]) == "train"


def test_a_setting_the_cli_advises_is_given_with_set_and_works(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`resdom train` advised settings as bare assignments: "train.threads=1 (or OMP_NUM_THREADS=1) resumes it
    exactly", "try a lower train.lr"; typed as said, `resdom train ... train.threads=1` is "unexpected extra
    argument". The CLI now says --set train.threads=1 / --set train.lr=N (Python: threads=1, lr=N), and the run
    then trains."""
    run = tmp_path / "run"
    base = ["train", SMALL_SYNTHETIC, "--out", str(run), *TINY_MODEL, "--no-progress"]
    code, _, err = run_cli(capsys, *base, "--epochs", "1", "--set", "train.lr=1e30")
    line = one_line_error(code, err, "training diverged", "try a lower learning rate, --set train.lr=N (now 1e+30)")
    assert_advice_exists("train", line)
    code, _, err = run_cli(capsys, *base, "--epochs", "1", "--set", "train.lr=1e-3", "--set", "train.threads=1")
    assert code == 0, err  # followed: the same folder trains
    code, _, err = run_cli(capsys, *base, "--epochs", "2", "--set", "train.threads=2")
    assert code == 0 and "--set train.threads=1 (or OMP_NUM_THREADS=1) resumes it exactly" in err, err
    assert_advice_exists("train", err)
    code, _, err = run_cli(capsys, *base, "--epochs", "3", "--set", "train.threads=1")
    assert code == 0, err  # the advised option is taken on resume


def test_python_fit_advises_no_cli_flag_it_has_not(tmp_path: Path) -> None:
    """resdom.fit(split, out=RUN) into a run of another setup said "use another out directory, or rerun `resdom
    train` with --force": fit has no force, and `resdom train` would train another configuration than the call's.
    From Python it now says to rename the folder (what --force does); the CLI's line is unchanged."""
    import resdom
    from resdom.errors import ResdomError

    split = resdom.prepare_split(SMALL_SYNTHETIC, "loo")
    run = tmp_path / "run"
    resdom.fit(split, "sasrec", out=run, device="cpu", progress=False, epochs=1, hidden=8, layers=1, max_len=8)
    with pytest.raises(ResdomError) as e:
        resdom.fit(split, "sasrec", out=run, device="cpu", progress=False, epochs=1, hidden=16, layers=1, max_len=8)
    message = str(e.value)
    assert "use another out directory" in message and f"rename {run} (as `resdom train --force`" in message
    assert "rerun `resdom train` with --force" not in message


def test_an_interrupted_diagnose_names_the_command_that_computes_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during `diagnose RUN --what shuffle,alpha --seeds 3 --part valid` said "run `resdom diagnose RUN
    --what alpha` with the same other options": with --seeds 3 that command is refused (only shuffle reads it),
    and a folder name with a space split in two. It now names the whole command, its other options less those no
    diagnostic left reads, the path quoted; run as printed, it computes the rest."""
    import shlex

    import resdom.diagnostics.runner as runner

    run = tmp_path / "my run"
    code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--out", str(run), "--epochs", "1", *TINY_MODEL,
                           "--no-progress")
    assert code == 0, err
    real = runner.compute_of

    def stop_at_alpha(d: object) -> object:
        if getattr(d, "name", None) == "alpha":
            def stop(*args: object) -> None:
                raise KeyboardInterrupt
            return stop
        return real(d)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "compute_of", stop_at_alpha)
    code, _, err = run_cli(capsys, "diagnose", str(run), "--what", "shuffle,alpha", "--seeds", "3", "--alphas",
                           "1,0.5", "--part", "valid", "--device", "cpu", "--no-progress")
    assert code != 0 and "keeps the diagnostics finished before the interruption (shuffle)" in err, err
    command = re.search(r"run `([^`]*)`", err)
    assert command is not None, err
    words = shlex.split(command.group(1))
    assert words[:2] == ["resdom", "diagnose"] and words[2] == str(run), words
    assert "--seeds" not in words and words[words.index("--alphas") + 1] == "1,0.5", words
    assert words[words.index("--part") + 1] == "valid" and words[words.index("--what") + 1] == "alpha", words
    monkeypatch.setattr(runner, "compute_of", real)
    code, _, err = run_cli(capsys, *words[1:], "--no-progress")
    assert code == 0, err  # followed as printed: the rest is computed


def test_a_training_interrupted_under_force_says_to_resume_without_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in `resdom train DATA --out RUN --force` said "run the same command to resume"; the same command,
    --force included, moved the interrupted run aside and trained from epoch 1. It now says to run it without
    --force, which resumes."""
    import resdom.api

    run = tmp_path / "run"
    base = ["train", SMALL_SYNTHETIC, "--out", str(run), "--epochs", "2", *TINY_MODEL, "--no-progress"]
    real = resdom.api.epoch_monitor

    def stop_in_epoch_2(end: object) -> None:
        if getattr(end, "epoch", 0) == 2:
            raise KeyboardInterrupt
        real(end)  # type: ignore[arg-type]

    monkeypatch.setattr(resdom.api, "epoch_monitor", stop_in_epoch_2)
    code, _, err = run_cli(capsys, *base, "--force")
    assert code != 0 and "run the same command without --force to resume" in err, err
    monkeypatch.setattr(resdom.api, "epoch_monitor", real)
    code, _, err = run_cli(capsys, *base)
    assert code == 0 and "moved aside" not in err, err
    assert not list(tmp_path.glob("run.replaced-*/state"))  # the interrupted run was resumed, not moved aside


def test_the_advice_on_a_protocol_none_run_works_when_followed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`diagnose RUN` of a protocol none run said "split it with --holdout-users N and diagnose --part valid";
    followed, diagnose --part valid failed again on recovery, which reports test users whatever the part, with the
    same advice; and a run that had a monitoring slice was told to make one. evaluate said the same "split it"
    (no command of that name takes --holdout-users: train does). Each line now names what works for that run, and
    it does; from Python, the API's keywords."""
    import resdom
    from resdom.errors import ResdomError

    bare, held = tmp_path / "none", tmp_path / "held"
    for run, extra in ((bare, []), (held, ["--holdout-users", "10"])):
        code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--protocol", "none", *extra, "--out", str(run),
                               "--epochs", "1", *TINY_MODEL, "--no-progress")
        assert code == 0, err
    fast = ["--device", "cpu", "--no-progress"]
    line = one_line_error(*run_cli(capsys, "diagnose", str(bare), *fast)[::2],
                          "train with --protocol none --holdout-users N", "--part valid --what "
                          "shuffle,hrli,mixing,alpha,users")
    assert_advice_exists("diagnose", line.replace("train with --protocol", "resdom train --protocol"))
    line = one_line_error(*run_cli(capsys, "diagnose", str(held), "--part", "valid", *fast)[::2],
                          "recovery needs users", "or diagnose it with --part valid --what "
                          "shuffle,hrli,mixing,alpha,users)")
    code, _, err = run_cli(capsys, "diagnose", str(held), "--part", "valid", "--what",
                           "shuffle,hrli,mixing,alpha,users", *fast)
    assert code == 0, err  # followed
    one_line_error(*run_cli(capsys, "evaluate", str(bare))[::2], "train with --protocol none --holdout-users N")
    one_line_error(*run_cli(capsys, "evaluate", str(held))[::2], "evaluate it with --part valid")
    code, _, err = run_cli(capsys, "evaluate", str(held), "--part", "valid")
    assert code == 0, err  # followed
    fitted = resdom.load_run(held, device="cpu")
    with pytest.raises(ResdomError) as e:
        resdom.diagnose(fitted, part="valid")
    assert "diagnose it with part='valid', what='shuffle,hrli,mixing,alpha'" in str(e.value)
    assert "--" not in str(e.value)
    with pytest.raises(ResdomError) as e:
        resdom.evaluate(fitted)
    assert "evaluate part='valid'" in str(e.value) and "--" not in str(e.value)


def test_a_recorded_split_note_on_a_saved_split_advises_a_new_split(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`resdom train SPLIT --config RUN/config.json` of a saved loo split, the config recording a gts split, said
    "give --protocol gts --quantile 0.9 to split as it did"; train refuses both on a saved split. It now says to
    split the data again with them (`resdom data split`)."""
    gts, loo = tmp_path / "gts", tmp_path / "loo"
    code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--out", str(gts), "--epochs", "1", *TINY_MODEL,
                           "--no-progress")
    assert code == 0, err
    code, _, err = run_cli(capsys, "data", "split", SMALL_SYNTHETIC, "--protocol", "loo", "--out", str(loo))
    assert code == 0, err
    code, _, err = run_cli(capsys, "train", str(loo), "--config", str(gts / "config.json"), "--out",
                           str(tmp_path / "run"), "--epochs", "1", "--device", "cpu", "--no-progress")
    assert code == 0, err
    assert "split the data again, `resdom data split` with --protocol gts --quantile 0.9, to split as it did" in err
    assert_advice_exists("train", err)


def test_a_run_early_stopping_ended_names_patience_as_the_command_takes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """More epochs on a run early stopping ended said "train anew into another folder (e.g. with a larger
    train.patience)": a bare train.patience=3 is an extra argument to `resdom train`; it now says --set
    train.patience=N, which trains."""
    stopped = ["train", SMALL_SYNTHETIC, "--out", str(tmp_path / "stopped"), *TINY_MODEL, "--no-progress",
               "--set", "train.lr=1e-12"]
    code, out, err = run_cli(capsys, *stopped, "--epochs", "5", "--set", "train.patience=1")
    assert code == 0 and "(early_stopping)" in out, (out, err)
    code, _, err = run_cli(capsys, *stopped, "--epochs", "8", "--set", "train.patience=1")
    line = one_line_error(code, err, "e.g. with a larger patience, --set train.patience=N)")
    assert_advice_exists("train", line)
