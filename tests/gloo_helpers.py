"""Run a test's worker in two gloo processes and keep gloo's teardown out of the verdict.

The tests compare what each rank computed with one process. Tearing a gloo group down
(``destroy_process_group`` or interpreter exit with the group alive) has aborted a rank now
and then on the CI machine (SIGABRT, "terminate called without an active exception") after
both ranks had written their results; it never reproduced here. So a worker, once its result
is written, waits for its peer at a barrier and leaves with ``os._exit(0)``: no rank closes its
connections while the other still needs them, and no C++ destructor runs. A worker that raises
still exits non-zero with its traceback, and ``mp.spawn`` reports it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch.distributed as dist
import torch.multiprocessing as mp


def _entry(rank: int, worker: Callable[[int, int, str], None], world: int, tmp: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=world)
    worker(rank, world, tmp)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_gloo(worker: Callable[[int, int, str], None], tmp: str, world: int = 2) -> None:
    """Run ``worker(rank, world, tmp)`` in ``world`` processes joined in one gloo group (file rendezvous in ``tmp``)."""
    mp.spawn(_entry, args=(worker, world, tmp), nprocs=world, join=True)
