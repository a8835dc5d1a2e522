"""Several processes on the CPU (torchrun, gloo) give what one process gives, and say it once."""

from __future__ import annotations

import pytest
from cli_helpers import one_line_error, run_cli


def _launched(monkeypatch: pytest.MonkeyPatch, rank: int, local_rank: int) -> None:
    for name, value in {"WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(local_rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(name, value)


def test_a_mistake_every_process_sees_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``torchrun --nproc_per_node 2 -m resdom evaluate RUN --batch-size 0`` printed the same error line twice (each
    process its own); the first process of the machine says it, the others exit 2 without a word."""
    args = ("evaluate", str(tmp_path), "--batch-size", "0")
    _launched(monkeypatch, 1, 1)
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out == "" and err == ""
    _launched(monkeypatch, 0, 0)
    one_line_error(*run_cli(capsys, *args)[::2], "--batch-size")
    _launched(monkeypatch, 2, 0)  # the first process of a second machine: its own terminal or log
    monkeypatch.setenv("WORLD_SIZE", "4")
    one_line_error(*run_cli(capsys, *args)[::2], "--batch-size")
    monkeypatch.setenv("LOCAL_RANK", "5")  # variables no launcher sets: which process is first is unknown, each says it
    one_line_error(*run_cli(capsys, *args)[::2], "--batch-size")

