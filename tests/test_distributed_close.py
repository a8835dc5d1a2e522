"""``DistContext.close``: a barrier before leaving the process group on the normal path (no rank tears its gloo
connections down while a peer still works), none with an exception in flight (a peer may wait elsewhere). A CLI
process that left its group ends with ``distributed.leave`` (``os._exit`` with the command's exit status, no
interpreter teardown where gloo may abort a finished run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed as dist

import resdom.distributed as distributed
from resdom.cli.main import app
from resdom.distributed import DistContext


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(distributed, "_left_group", False)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "barrier", lambda: seen.append("barrier"))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: seen.append("destroy"))
    return seen


def test_close_waits_for_every_rank_then_leaves(calls: list[str]) -> None:
    ctx = DistContext(0, 2, initialized=True)
    try:
        pass
    finally:
        ctx.close()
    assert calls == ["barrier", "destroy"] and not ctx.initialized and distributed.left_group()
    ctx.close()  # once only
    assert calls == ["barrier", "destroy"]


def test_close_with_an_exception_in_flight_leaves_without_a_barrier(calls: list[str]) -> None:
    ctx = DistContext(1, 2, initialized=True)
    with pytest.raises(ValueError):
        try:
            raise ValueError("rank 1 failed")
        finally:
            ctx.close()
    assert calls == ["destroy"]


def test_close_leaves_a_group_it_did_not_join(calls: list[str]) -> None:
    DistContext(0, 2, initialized=False).close()  # the caller's process group (e.g. a script's) stays
    assert calls == [] and not distributed.left_group()


class _Exited(Exception):
    pass


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``os._exit`` recorded (and raised as _Exited, so the test process goes on)."""
    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise _Exited

    monkeypatch.setattr(distributed.os, "_exit", fake_exit)
    return codes


@pytest.mark.parametrize(("argv", "code"), [(["version"], 0), (["config", "show", "--set", "train.epoch=3"], 2)])
def test_cli_ends_with_os_exit_after_leaving_a_group(monkeypatch: pytest.MonkeyPatch, exits: list[int],
                                                     capsys: pytest.CaptureFixture[str], argv: list[str],
                                                     code: int) -> None:
    """After a command left torchrun's group: the exit status it would have had, through os._exit, output flushed."""
    monkeypatch.setattr(distributed, "_left_group", True)
    monkeypatch.setattr("sys.argv", ["resdom", *argv])
    with pytest.raises(_Exited):
        app()
    assert exits == [code]
    out, err = capsys.readouterr()
    assert ("resdom " in out) if code == 0 else err.startswith("error: ")


def test_cli_exits_normally_without_a_group(monkeypatch: pytest.MonkeyPatch, exits: list[int]) -> None:
    monkeypatch.setattr(distributed, "_left_group", False)
    monkeypatch.setattr("sys.argv", ["resdom", "version"])
    with pytest.raises(SystemExit) as e:
        app()
    assert e.value.code in (0, None) and exits == []


def test_leave_maps_exit_codes_as_sys_exit(exits: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    for code in (None, 0, 3, "a message"):
        with pytest.raises(_Exited):
            distributed.leave(code)
    assert exits == [0, 0, 3, 1] and capsys.readouterr().err == "a message\n"


def _failing_worker(rank: int, world: int, tmp: str) -> None:
    if rank == 1:
        raise ValueError("rank 1 failed on purpose")


@pytest.mark.slow
def test_spawn_gloo_reports_a_failing_worker(tmp_path: Path) -> None:
    """The tests' gloo helper leaves with os._exit(0) only after the worker returned: a raise still fails the test."""
    import torch.multiprocessing as mp
    from gloo_helpers import spawn_gloo

    with pytest.raises(mp.ProcessRaisedException, match="rank 1 failed on purpose"):
        spawn_gloo(_failing_worker, str(tmp_path))
