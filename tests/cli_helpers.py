"""Run the resdom CLI in-process as a user would: through ``cli.main.app``, where a ResdomError exits 2."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from resdom.cli.main import app

SMALL_SYNTHETIC = "synthetic:n_users=40,n_items=25,min_len=5,max_len=10"  # a data source that prepares in ms
TINY_MODEL = ["--set", "model.hidden=8", "--set", "model.layers=1", "--set", "model.max_len=8", "--device", "cpu"]


def invoke(*args: str) -> int:
    """Run ``resdom ARGS`` and return its exit status (output goes to the captured stdout / stderr)."""
    old = sys.argv
    sys.argv = ["resdom", *args]
    try:
        app()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    return 0


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``invoke(ARGS)``; returns (exit status, stdout, stderr) as captured by pytest's ``capsys``."""
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


def commands(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command under ``cmd`` (a group's subcommands too), by its words after ``resdom``."""
    out = [(path, cmd)]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += commands(sub, (*path, name))
    return out


def full_disk_after(monkeypatch: pytest.MonkeyPatch, n_ok: int) -> None:
    """Every ``resdom.io`` write after the first ``n_ok`` fails as on a full disk (at fsync, after the data went
    out)."""
    import errno
    import os

    import resdom.io as rio

    calls = {"n": 0}
    real = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] > n_ok:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(rio.os, "fsync", fsync)
