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


LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.parametrize(("env", "message"), [
    ({"WORLD_SIZE": "abc"}, "error: WORLD_SIZE='abc': expected a whole number (torchrun sets RANK"),
    ({"RANK": "abc"}, "error: RANK='abc': expected a whole number"),
    ({"LOCAL_RANK": "x"}, "error: LOCAL_RANK='x': expected a whole number"),
    ({"WORLD_SIZE": "0"}, "error: WORLD_SIZE=0: expected a whole number >= 1"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "error: RANK=-1: expected a whole number >= 0"),
    ({"RANK": "1"}, "error: RANK=1 is not below WORLD_SIZE=1 (unset)"),
    ({"RANK": "1", "WORLD_SIZE": "1"}, "error: RANK=1 is not below WORLD_SIZE=1 (torchrun"),
    ({"LOCAL_RANK": "3"}, "error: LOCAL_RANK=3 is not below WORLD_SIZE=1 (unset)"),
    ({"RANK": "5", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
     "error: RANK=5 is not below WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "error: WORLD_SIZE=2 asks for 2 processes, but MASTER_ADDR and MASTER_PORT are "
     "not set: start them with torchrun"),
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, "but MASTER_PORT is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"},
     "error: MASTER_PORT='99999': expected a port number from 1 to 65535"),
])
def test_a_garbage_or_inconsistent_launch_environment_is_one_line(env: dict[str, str], message: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """torchrun's variables set by hand: ``WORLD_SIZE=abc`` was a ValueError traceback, ``RANK=5 WORLD_SIZE=2`` torch's
    rendezvous traceback, and ``RANK=1`` alone a silent non-main process that trained and printed nothing."""
    from cli_helpers import one_line_error, run_cli

    from resdom.errors import ResdomError

    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "r"
    code, _, err = run_cli(capsys, "train", "synthetic:n_users=40,n_items=25", "--out", str(out), "--epochs", "1",
                           "--device", "cpu", "--no-progress")
    one_line_error(code, err, message)
    assert not out.exists()
    code, _, err = run_cli(capsys, "diagnose", str(tmp_path / "no-run"), "--device", "cpu")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    with pytest.raises(ResdomError, match=message.removeprefix("error: ").split(" (torchrun")[0].replace("(", r"\(")
                       .replace(")", r"\)")):
        distributed.setup("cpu")


def test_a_consistent_launch_environment_of_one_process_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert distributed.setup("cpu").world_size == 1 and distributed.world_size() == 1
    for name in ("RANK", "LOCAL_RANK"):
        monkeypatch.setenv(name, "0")
    monkeypatch.setenv("WORLD_SIZE", " 1 ")
    ctx = distributed.setup("cpu")
    assert (ctx.rank, ctx.world_size, ctx.initialized) == (0, 1, False)


def test_a_launch_whose_peers_never_join_ends_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``RANK=0 WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=...`` set by hand with no second process waited 30 minutes
    (torch's timeout) without a word; the rendezvous is bounded by RESDOM_MAX_RENDEZVOUS_SECONDS."""
    import socket

    from cli_helpers import one_line_error, run_cli

    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)),
                        ("RESDOM_MAX_RENDEZVOUS_SECONDS", "2")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    code, _, err = run_cli(capsys, "train", "synthetic:n_users=40,n_items=25", "--out", str(tmp_path / "r"),
                           "--epochs", "1", "--device", "cpu", "--no-progress", "--set", "model.hidden=8")
    one_line_error(code, err, f"error: WORLD_SIZE=2: the processes did not all join at 127.0.0.1:{port} within 2 s",
                   "raise RESDOM_MAX_RENDEZVOUS_SECONDS")
    assert not dist.is_initialized()


def _refusal_worker(rank: int, world: int, tmp: str) -> None:
    """Rank 0 alone finds the run directory locked: every rank raises its line (rank 1 died in gloo's traceback
    at its next collective, "Connection reset by peer", beside rank 0's one line)."""
    from resdom.errors import ResdomError

    try:
        distributed.raise_everywhere("run: another process is already training there" if rank == 0 else None, world)
    except ResdomError as e:
        Path(f"{tmp}/rank{rank}.txt").write_text(str(e))
    distributed.raise_everywhere(None, world)  # nothing to refuse: nothing raised


@pytest.mark.slow
def test_a_refusal_only_rank_0_sees_ends_every_rank_with_its_line(tmp_path: Path) -> None:
    from gloo_helpers import spawn_gloo

    spawn_gloo(_refusal_worker, str(tmp_path))
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == [
        "run: another process is already training there"] * 2


def test_raise_everywhere_in_one_process() -> None:
    from resdom.errors import ResdomError

    distributed.raise_everywhere(None, 1)
    with pytest.raises(ResdomError, match="^locked$"):
        distributed.raise_everywhere("locked", 1)
