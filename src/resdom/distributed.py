"""Devices, ranks and gathering, in one place: ``--device auto|cpu|cuda|mps``, torchrun's process group,
DistributedDataParallel when WORLD_SIZE > 1, and the per-user gather of sharded evaluation and diagnostics.

Under ``torchrun --nproc_per_node N``, every process trains on its shard of the samples; rank 0 evaluates
and writes every file while the others wait at a barrier. Backend: gloo on CPU, nccl on CUDA.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from resdom.checks import closest_hint, launch_env
from resdom.errors import ResdomError
from resdom.limits import RENDEZVOUS_SECONDS
from resdom.names import DEVICES

_left_group = False  # set once this process has destroyed a process group it joined (``DistContext.close``)


@dataclass
class DistContext:
    """rank / world_size (1 outside torchrun), the torch device of this process, and whether we initialised."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    initialized: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_reduce_sum(self, value: float) -> float:
        """Sum of ``value`` over ranks."""
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.to(self.device)
        dist.all_reduce(t)
        return float(t.item())

    def close(self) -> None:
        """Leave the process group we joined. Called from a ``finally``: on the way out of normal work every rank
        first waits for the others at a barrier, so none tears its connections down while a peer still works (gloo
        may abort a process whose peer closed early); with an exception in flight there is no barrier (a peer may
        wait in another collective) and torchrun reports the failure."""
        if self.initialized and dist.is_initialized():
            try:
                if sys.exc_info()[0] is None:
                    dist.barrier()
            finally:
                dist.destroy_process_group()
                self.initialized = False
                global _left_group
                _left_group = True


def raise_everywhere(problem: str | None, world: int) -> None:
    """Raise rank 0's ``problem`` (a ResdomError's message; None: there is none) as a ResdomError on every rank: a
    refusal only rank 0 can see (a lock it holds for all) ends every process with the same line, where the others
    died in gloo's traceback at their next collective."""
    if world > 1:
        box = [problem]
        dist.broadcast_object_list(box, src=0)
        problem = box[0]
    if problem is not None:
        raise ResdomError(problem)


def on_main_rank(action: Callable[[], object], is_main: bool, world: int) -> None:
    """Run ``action`` on rank 0 alone (taking a lock it holds for every rank); a ResdomError it raises is raised on
    every rank with the same message (``raise_everywhere``)."""
    problem = None
    if is_main:
        try:
            action()
        except ResdomError as e:
            problem = str(e)
    raise_everywhere(problem, world)


def left_group() -> bool:
    """Whether this process joined a process group and has left it (the CLI then ends with ``leave``)."""
    return _left_group


def leave(code: int | str | None = 0) -> None:
    """End a process that has left its process group: flush stdout and stderr, then ``os._exit`` without the
    interpreter's teardown. gloo can abort there ("terminate called without an active exception") after every
    rank has closed cleanly and written every file, which made torchrun report a failure for a finished run.
    ``code`` as ``sys.exit`` takes it: None is 0, a string is printed to stderr and exits 1."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a pipe the reader has left
            pass
    os._exit(code or 0)


@contextlib.contextmanager
def callers_rng(device: torch.device | None = None) -> Iterator[None]:
    """Give the caller's torch random state back as it was on entry, whatever runs inside seeds or draws: ``fit``
    seeds torch with ``train.seed`` (and again each epoch), loading a model draws initial weights it then overwrites.
    A library call leaves its caller's random numbers alone: the CPU generator, each CUDA device's, and the MPS one.

    CUDA not yet used by the process still has a state: the seeds a ``torch.manual_seed`` queued for its first use.
    A call on ``device`` CUDA starts CUDA first (the caller's queued seeds applied, as its own first use would) and
    keeps the state that made; any other call puts the caller's queued seeds back (``torch.manual_seed`` inside
    had replaced them: a caller who seeded torch, fitted on the CPU, then drew on the GPU got the fit's numbers).

    The state is the process's, so such calls in several threads run one at a time (``_RANDOM_STATE``): a
    ``load_run`` in one thread put its saved state back in the middle of a ``fit`` in another (``resdom.fit``
    loads its best model after training, so two fits in two threads gave the second other weights). ``fit`` holds
    it for its whole run, the torch thread count it sets given back inside it: one fit at a time a process."""
    with _RANDOM_STATE:
        if device is not None and torch.device(device).type == "cuda":
            torch.cuda.init()
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        queued = None if cuda else _queued_cuda_seeds()
        mps = _mps_state()
        try:
            with torch.random.fork_rng(devices=cuda, device_type="cuda"):
                yield
        finally:
            if queued is not None and not torch.cuda.is_initialized():
                vars(torch.cuda._lazy_seed_tracker).update(queued)
            if mps is not None:
                torch.mps.set_rng_state(mps)


def _queued_cuda_seeds() -> dict[str, Any] | None:
    """The seeds queued for CUDA's first use (``torch.cuda._lazy_seed_tracker``'s fields, copied); None where this
    torch keeps them otherwise."""
    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    fields = getattr(tracker, "__dict__", None)
    if not isinstance(fields, dict) or not {"manual_seed_all_cb", "manual_seed_cb", "call_order"} <= set(fields):
        return None
    return {k: list(v) if isinstance(v, list) else v for k, v in fields.items()}


def _mps_state() -> torch.Tensor | None:
    """The MPS generator's state where MPS is available (``torch.manual_seed`` seeds it too); None elsewhere."""
    mps = getattr(torch.backends, "mps", None)
    return torch.mps.get_rng_state() if mps is not None and mps.is_available() else None


_RANDOM_STATE = threading.RLock()  # held by callers_rng: one call at a time draws on and gives back the state


@contextlib.contextmanager
def float32_default() -> Iterator[None]:
    """torch's defaults as resdom's models are made with inside (dtype float32, tensors on the CPU until moved), the
    caller's back on exit. A caller's ``torch.set_default_dtype(torch.float64)`` built a float64 model that trained
    to other weights and numbers than ``resdom train``'s for the same configuration (``train.precision`` bf16 is
    autocast over float32 weights); a ``torch.set_default_device`` of another device ("cuda", "meta") built the
    model there and made every tensor made without a device there too, so a fit or load on ``device="cpu"`` failed
    inside torch. float32 matrix products in full precision too (``full_precision_matmuls``)."""
    dtype, device = torch.get_default_dtype(), torch.get_default_device()
    torch.set_default_dtype(torch.float32)
    if device.type != "cpu":
        torch.set_default_device(None)  # the CPU, without the device mode a "cpu" default would add to every op
    give_back = full_precision_matmuls()
    try:
        yield
    finally:
        give_back()
        torch.set_default_dtype(dtype)
        if device.type != "cpu":
            torch.set_default_device(device)


def full_precision_matmuls() -> Callable[[], None]:
    """float32 matrix products in full precision, as ``resdom train`` computes them (torch's default); returns what
    puts the caller's setting back. A caller's ``torch.set_float32_matmul_precision("medium")`` or ``"high"`` (advice
    for GPUs that notebooks follow: bfloat16 or TF32 products) trained other weights than ``resdom train``'s, on the
    CPU as on a GPU. Set as the caller set it: through ``set_float32_matmul_precision`` where that reads back (the
    per-backend ``fp32_precision`` of newer torch, written beside it, would make torch refuse the caller's next
    ``get_float32_matmul_precision`` as a mix of the two), else through each backend's ``matmul.fp32_precision``."""
    try:
        legacy: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:  # the caller set the per-backend precisions (torch refuses to sum them up)
        legacy = None
    if legacy is not None:
        torch.set_float32_matmul_precision("highest")
        return lambda: torch.set_float32_matmul_precision(legacy)
    found = (getattr(getattr(torch.backends, name, None), "matmul", None) for name in ("cuda", "mkldnn"))
    backends: list[Any] = [m for m in found if hasattr(m, "fp32_precision")]
    kept = [(m, m.fp32_precision) for m in backends]
    for m in backends:
        m.fp32_precision = "ieee"

    def give_back() -> None:
        for m, value in kept:
            m.fp32_precision = value

    return give_back


AUTOCAST_DEVICES = ("cpu", "cuda", "mps")  # the device types whose autocast a caller's region may have turned on


@contextlib.contextmanager
def without_autocast() -> Iterator[None]:
    """A caller's ``torch.autocast`` region turned off inside (the caller's back on exit), on every device type
    where it is on: resdom computes in float32 (``train.precision`` bf16 is the trainer's own autocast, entered
    inside this). In a caller's bfloat16 region ``fit`` trained other weights than ``resdom train`` for the same
    configuration, ``recommend`` and the diagnostics gave other scores and numbers, and ``similar_items`` failed
    inside numpy ("unsupported ScalarType BFloat16")."""
    with contextlib.ExitStack() as stack:
        for device_type in AUTOCAST_DEVICES:
            if torch.is_autocast_enabled(device_type):
                stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


def resolve_device(name: str, option: str = "train.device") -> torch.device:
    """``auto`` -> cuda, then mps, then cpu; an explicit device that is not available is a ResdomError naming
    ``option`` (the setting the user gave it with: ``train.device``, or a command's ``--device``); in any case
    (``CPU``), a near miss named with the closest (``cpuu``: did you mean cpu?)."""
    name = name.strip().lower() if isinstance(name, str) else name
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ResdomError(f"{option}: 'cuda' requested but torch sees no CUDA device")
    if name == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise ResdomError(f"{option}: 'mps' requested but it is not available")
    if name not in DEVICES:
        hint = ""
        if str(name).startswith("cuda:"):  # one GPU of several: the process sees only the ones it is given
            hint = f"; to use GPU {name[5:]}, run with CUDA_VISIBLE_DEVICES={name[5:]} and the device 'cuda'"
        close = "" if hint else closest_hint(name, DEVICES)  # cuda:1 is no misspelling of cuda
        raise ResdomError(f"{option}: unknown device {name!r} ({close}{', '.join(DEVICES[:-1])} or {DEVICES[-1]})"
                          f"{hint}")
    return torch.device(name)


def world_size() -> int:
    """The number of processes torchrun started (``WORLD_SIZE``; 1 outside torchrun); a ResdomError where the
    launcher's variables are garbage or disagree (``checks.launch_env``)."""
    return launch_env()[1]


def setup(device: str = "auto", option: str = "train.device") -> DistContext:
    """Resolve the device (``option``: as in ``resolve_device``); under torchrun (WORLD_SIZE > 1) join the process
    group (once per process)."""
    _, world, local_rank = launch_env()
    base = resolve_device(device, option)
    if world <= 1:
        return DistContext(0, 1, base, False)
    if base.type == "cuda":
        torch.cuda.set_device(local_rank)
        base = torch.device("cuda", local_rank)
    initialized = False
    if not dist.is_initialized():
        _join("nccl" if base.type == "cuda" else "gloo", world)
        initialized = True
    return DistContext(dist.get_rank(), dist.get_world_size(), base, initialized)


def _join(backend: str, world: int) -> None:
    """``init_process_group`` through torch's ``env://`` rendezvous, whose wait for the other processes is bounded
    by ``RESDOM_MAX_RENDEZVOUS_SECONDS``: a process given ``RANK=0 WORLD_SIZE=2 MASTER_ADDR=...`` by hand, with no
    peer, waited 30 minutes (torch's default) without a word. The group's collectives keep torch's timeout."""
    from datetime import timedelta

    from torch.distributed.constants import default_pg_timeout
    from torch.distributed.rendezvous import rendezvous

    seconds = RENDEZVOUS_SECONDS.value
    where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    try:
        store, rank, size = next(rendezvous("env://", timeout=timedelta(seconds=seconds)))
    except (RuntimeError, ValueError) as e:  # torch's DistStoreError / DistNetworkError, or a port out of range
        detail = " ".join(str(e).split())[:200]
        raise ResdomError(f"WORLD_SIZE={world}: the processes did not all join at {where} within {seconds} s "
                          f"({detail}); start them together with torchrun, or raise {RENDEZVOUS_SECONDS.env}") from None
    store.set_timeout(default_pg_timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size)


def wrap(module: torch.nn.Module, ctx: DistContext) -> torch.nn.Module:
    """``module`` inside DistributedDataParallel when distributed, else unchanged."""
    if not ctx.distributed:
        return module
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


def rank_and_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) when torch.distributed is not in use."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_users(local: torch.Tensor, n: int, rank: int, world: int) -> torch.Tensor:
    """All ranks' rows (rank r holds users r::world, in order) -> (n, ...) on the CPU, in user order.

    ``local``: (len(range(rank, n, world)), ...) of any dtype the backend can all_gather.
    """
    per_rank = -(-n // world)
    comm_device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    padded = torch.zeros((per_rank, *local.shape[1:]), dtype=local.dtype, device=comm_device)
    padded[: len(local)] = local.to(comm_device)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    full = torch.empty((n, *local.shape[1:]), dtype=local.dtype)
    for r, part in enumerate(parts):
        full[r::world] = part[: len(range(r, n, world))].cpu()
    return full
