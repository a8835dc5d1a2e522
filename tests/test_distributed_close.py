"""``DistContext.close``: a barrier before leaving the process group on the normal path (no rank tears its gloo
connections down while a peer still works), none with an exception in flight (a peer may wait elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed as dist

from resdom.distributed import DistContext


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
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
    assert calls == ["barrier", "destroy"] and not ctx.initialized
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
    assert calls == []


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
