"""``--epochs N`` on a saved run resumes it up to N epochs, or is refused in one line (fewer epochs than
it has run; more after early stopping ended it), never silently ignored."""

from __future__ import annotations

import json

from cli_helpers import SMALL_SYNTHETIC, TINY_MODEL, one_line_error, run_cli


def _train(capsys, out: str, *extra: str) -> tuple[int, str, str]:
    return run_cli(capsys, "train", SMALL_SYNTHETIC, *TINY_MODEL, "--set", "train.threads=1", "--no-progress",
                   "--out", out, *extra)


def test_more_epochs_resume_and_fewer_are_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _train(capsys, "run", "--epochs", "1")
    assert code == 0 and "best epoch 1 of 1" in out, err
    code, out, err = _train(capsys, "run", "--epochs", "2")  # resumes: one more epoch
    assert code == 0 and " of 2 (max_epochs)" in out, err
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2]
    code, _, err = _train(capsys, "run", "--epochs", "1")
    one_line_error(code, err, "run: has trained 2 epochs already, more than the 1 asked now (train.epochs, --epochs)")
    code, out, err = _train(capsys, "run", "--epochs", "2")  # the same budget again: the finished run, as it is
    assert code == 0 and " of 2 (max_epochs)" in out, err


def test_more_epochs_after_early_stopping_are_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    # a learning rate too small to change any rank: no epoch beats the first, so patience 1 stops at epoch 2
    code, out, err = _train(capsys, "stopped", "--epochs", "5", "--set", "train.patience=1", "--set",
                            "train.lr=1e-12")
    assert code == 0 and "best epoch 1 of 2 (early_stopping)" in out, (out, err)
    code, _, err = _train(capsys, "stopped", "--epochs", "8", "--set", "train.patience=1", "--set",
                          "train.lr=1e-12")
    one_line_error(code, err, "stopped: early stopping ended this run at epoch 2", "so 8 epochs would train nothing")
