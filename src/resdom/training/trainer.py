"""The trainer: Adam, early stopping on a validation metric, the best checkpoint, resume, seeds, DDP.

``fit`` writes the run directory described in ``resdom.runs``. Reproducibility: the model is initialised
from ``seed``, and every epoch draws its randomness (sample order, negatives, same-target partners, dropout)
from generators seeded by ``(seed, epoch)``; no random state is carried from one epoch to the next.
Hence a run resumed from the state saved after epoch e (weights, Adam moments, early-stopping counters)
continues exactly as the uninterrupted run would have (on CPU; CUDA kernels may be nondeterministic).

Resume semantics: ``fit`` on a directory holding ``state/`` continues after the last saved epoch, provided
the model, data and training config match (``epochs``, ``device``, ``eval_batch_size``, ``threads`` may differ:
there is no learning-rate schedule, and the epochs draw nothing from them; but another device, or on CPU another
thread count, sums in another order, so the weights then differ in their last bits from an uninterrupted run's: a
resume on CPU with another thread count than the last epoch's says so). A finished run (stopped early, or
at its maximum number of epochs when ``epochs`` is not raised) returns its saved metrics without training.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from resdom import distributed
from resdom.checks import setting
from resdom.data.sequences import SplitData
from resdom.errors import ResdomError
from resdom.evaluation.batches import (
    PROGRESS_LINE_S,  # in a log, a line of batches done / total at most this often
    progress_bar,
)
from resdom.evaluation.evaluate import evaluate
from resdom.evaluation.ranking import NonFiniteScores
from resdom.experiments import recipe_label
from resdom.io import atomic_write_json, directory_lock, remove_temporaries, writing
from resdom.limits import visible
from resdom.models import SequentialRecommender, build_model
from resdom.models.base import TrainBatch
from resdom.models.config import ModelConfig
from resdom.rundir import RUN, check_output_folder, check_output_inputs, own_entries, write_marker
from resdom.runs import (
    checkpoint_id,
    data_fingerprint,
    data_fingerprints,
    load_checkpoint,
    save_checkpoint,
    source_commit,
    versions,
)
from resdom.training.batches import (
    SampleSet,
    bucket_by_length,
    build_samples,
    epoch_order,
    iter_batches,
    same_target_partners,
)
from resdom.training.config import TrainConfig, with_objective
from resdom.training.objectives import LossContext, Objective, get_objective, popularity_log_q
from resdom.training.state import EarlyStopping, ResumeState, RunFiles, check_resumable


@dataclass
class EpochEnd:
    """What an epoch hook (``fit(..., hooks=...)``) is given after an epoch's validation, before the epoch's record
    is written to ``metrics.jsonl``: the epoch, the model being trained (in whatever mode it is in: a hook that
    evaluates puts it in eval mode), the data, the training config, the device, and the record itself, to which
    the hook may add entries (the training monitor adds ``"monitor"``). On every rank under DDP."""

    epoch: int
    model: SequentialRecommender
    split: SplitData
    train_cfg: TrainConfig
    device: torch.device
    record: dict[str, Any]


EpochCallback = Callable[[int, dict[str, Any]], None]  # after the epoch's state is saved: cb(epoch, record)
EpochHook = Callable[[EpochEnd], None]  # before the epoch's record is written (diagnostics.monitor.epoch_monitor)


# ----------------------------------------------------------------------------------------------- seeds


def epoch_seed(seed: int, epoch: int, stream: int, rank: int = 0) -> int:
    """A 63-bit seed for one random stream of one epoch (stream 0: order, 1: negatives, 2: torch/dropout)."""
    return int(np.random.SeedSequence([seed, epoch, stream, rank]).generate_state(2, np.uint64)[0] >> np.uint64(1))


# --------------------------------------------------------------------------------------- train step

# train.precision -> (the autocast dtype, or None: float32, no autocast; what runs under it: "step" the training
# step's whole forward pass, "loss" the objective's loss only, the model's encoding in float32). "bf16" (the whole
# step) is measured by benchmarks/levers.py and not offered in train.precision: slower than bf16-loss
PRECISIONS: dict[str, tuple[torch.dtype | None, str]] = {
    "fp32": (None, ""), "bf16": (torch.bfloat16, "step"), "bf16-loss": (torch.bfloat16, "loss")}


class TrainStep(nn.Module):
    """model + objective as one module whose forward returns the loss, so DDP sees every parameter use."""

    def __init__(self, model: SequentialRecommender, objective: Objective, ctx: LossContext,
                 precision: str = "fp32") -> None:
        super().__init__()
        self.model, self.objective, self.ctx = model, objective, ctx
        self.low, self.scope = PRECISIONS[precision]  # low None: float32, no autocast at all

    def forward(self, items: torch.Tensor, targets: torch.Tensor, negatives: torch.Tensor | None,
                sup_items: torch.Tensor | None) -> torch.Tensor:
        """Tensors of a TrainBatch (see models.base) -> scalar loss (objective + the model's auxiliary loss).

        The model makes its own training inputs from the batch (``training_states``: a masked model masks there)."""
        if self.low is None:
            return self._loss(items, targets, negatives, sup_items)
        with torch.autocast(items.device.type, dtype=self.low, enabled=self.scope == "step"):  # this forward only
            return self._loss(items, targets, negatives, sup_items).float()

    def _loss(self, items: torch.Tensor, targets: torch.Tensor, negatives: torch.Tensor | None,
              sup_items: torch.Tensor | None) -> torch.Tensor:
        batch, hidden = self.model.training_states(TrainBatch(items, targets, negatives, sup_items))
        if self.scope == "loss":  # train.precision bf16-loss: the loss's item products only
            with torch.autocast(items.device.type, dtype=self.low):
                loss = self.objective.loss(self.model, batch, hidden, self.ctx)
        else:
            loss = self.objective.loss(self.model, batch, hidden, self.ctx)
        aux = self.model.auxiliary_loss(batch, hidden)
        return loss if aux is None else loss + aux


def backward_groups(step: nn.Module, parts: Sequence[TrainBatch], dist_ctx: distributed.DistContext) -> float:
    """Backpropagate one batch given as groups (``batches.length_groups``) -> the batch's loss.

    Each group's loss (a mean over its targets) is weighted by its share of the batch's targets, so the summed
    gradients are those of the whole batch's mean loss. Under DDP gradients are averaged over ranks once, at the
    last group's backward.
    """
    n_targets = [int((p.targets > 0).sum()) for p in parts]
    total = torch.zeros((), device=dist_ctx.device)
    for n, (part, share) in enumerate(zip(parts, n_targets)):
        last = n == len(parts) - 1
        with contextlib.nullcontext() if last or not dist_ctx.distributed else _no_sync(step):
            b = part.to(dist_ctx.device)
            loss = step(b.items, b.targets, b.negatives, b.sup_items)
            if len(parts) > 1:
                loss = loss * (share / max(sum(n_targets), 1))
            loss.backward()
        total += loss.detach()
    return float(total)  # one device sync per batch


def _no_sync(step: nn.Module) -> contextlib.AbstractContextManager[Any]:
    """DDP's ``no_sync`` of ``step`` (gradients kept local until a later backward): distributed, ``distributed.wrap``
    made it a DistributedDataParallel."""
    from torch.nn.parallel import DistributedDataParallel

    assert isinstance(step, DistributedDataParallel)
    return step.no_sync()


def _step_model(step: nn.Module) -> SequentialRecommender:
    """The model a TrainStep ``step`` trains (under DDP, ``step`` is the wrapper of the TrainStep)."""
    inner = getattr(step, "module", step)
    assert isinstance(inner, TrainStep)
    return inner.model


def _loss_context(split: SplitData, train_cfg: TrainConfig, objective: Objective) -> LossContext:
    log_q = None
    if objective.needs_popularity:
        counts = np.bincount(split.train.items, minlength=split.n_items + 1)[1:]
        log_q = popularity_log_q(torch.from_numpy(counts), train_cfg.negative_sampling)
    return LossContext(n_negatives=train_cfg.n_negatives, log_q=log_q)


# ---------------------------------------------------------------------------------------------- fit


def _progress_enabled(progress: bool | None, is_main: bool) -> bool:
    """tqdm bars: on rank 0, unless ``progress`` is False, and only on a terminal (a log gets plain lines)."""
    return is_main and progress is not False and sys.stderr.isatty()


class _NoBar:
    """What a hidden progress bar does: nothing. A tqdm made with ``disable=True`` starts tqdm's monitor thread all
    the same and never stops it, so a fit without bars (a notebook, a log, ``progress=False``) left a thread running
    in the caller's process."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **values: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _bar(show: bool, **options: Any) -> Any:
    """A tqdm bar where ``show``, else a ``_NoBar``."""
    if not show:
        return _NoBar()
    return progress_bar(**options)  # no tqdm monitor thread left behind


def _progress_lines(progress: bool | None, is_main: bool) -> bool:
    """One plain line per epoch on stderr where bars are not shown (output is a log or a pipe)."""
    return is_main and progress is not False and not sys.stderr.isatty()


def _evaluate(model: SequentialRecommender, split: SplitData, which: str, train_cfg: TrainConfig,
              device: torch.device) -> dict[str, Any]:
    """{"metrics": {...}, "n_users": n} of ``which``, full ranking, seen items filtered unless the data set keeps them
    (``SplitData.filter_seen``): "valid" | "test", or "stop", what early stopping reads each epoch: the validation
    users, or ``train.valid_users`` of them (a fixed random subset drawn with ``train.seed``)."""
    evalset = split.test if which == "test" else split.valid
    if which == "stop" and train_cfg.valid_users is not None:
        evalset = evalset.subset(train_cfg.valid_users, train_cfg.seed)
    if len(evalset) == 0:  # protocol none: nothing held out
        return {"metrics": {}, "n_users": 0}
    return evaluate(model, evalset, filter_seen=split.filter_seen, batch_size=train_cfg.eval_batch_size,
                    device=device).to_dict()


def _check_epochs(files: RunFiles, state: ResumeState, train_cfg: TrainConfig) -> None:
    """A changed epoch budget on a saved run (``train.epochs``, ``--epochs``): more than it has run resumes training
    up to it; fewer than it has run, or more after early stopping ended it, is refused in one line (the run's best
    checkpoint cannot be cut back, and a stopped run would train no further)."""
    saved = state.train.get("epochs") if isinstance(state.train, dict) else None
    if saved is None or train_cfg.epochs == saved:
        return
    if train_cfg.epochs < state.epoch:
        raise ResdomError(f"{files.dir}: has trained {state.epoch} epochs already, more than the {train_cfg.epochs} "
                          f"asked now (train.epochs, --epochs); give {state.epoch} to keep it as it is, more to train "
                          "it further, or train anew into another folder")
    if state.stopped == "early_stopping" and train_cfg.epochs > state.epoch:
        raise ResdomError(f"{files.dir}: early stopping ended this run at epoch {state.epoch} (no better validation "
                          f"{train_cfg.metric} in {train_cfg.patience} epochs), so {train_cfg.epochs} epochs would "
                          f"train nothing more; train anew into another folder (e.g. with a larger patience, "
                          f"{setting('train.patience')})")


def _resolve_model_config(model_cfg: ModelConfig, split: SplitData) -> ModelConfig:
    if model_cfg.n_items == 0:
        return model_cfg.model_copy(update={"n_items": split.n_items})
    if model_cfg.n_items != split.n_items:
        raise ResdomError(f"model.n_items: {model_cfg.n_items} but the data has {split.n_items} items")
    return model_cfg


def fit(
    split: SplitData,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    out_dir: str | Path,
    data_info: dict[str, Any] | None = None,
    *,
    callbacks: Sequence[EpochCallback] = (),
    progress: bool | None = None,
    hooks: Sequence[EpochHook] = (),
) -> dict[str, Any]:
    """Train on ``split.train`` with early stopping on ``split.valid``; evaluate the best model on both splits.

    Writes ``out_dir`` (see ``resdom.runs``) and returns what it writes to ``metrics.json``:
    ``{"valid": {"metrics", "n_users"}, "test": {...}, "best_epoch", "epochs_run", "stopped", ...}``.
    ``callbacks`` are called as ``cb(epoch, record)`` after each epoch's state is saved (an exception there
    interrupts the run; ``fit`` again resumes it). ``progress``: tqdm bars (default: when stderr is a TTY).
    ``hooks`` are called as ``hook(EpochEnd)`` after each epoch's validation, before its record is written, and may
    add to the record: ``resdom.fit`` and the pipelines pass the training monitor (``diagnostics.monitor.
    epoch_monitor``), which records ``train.monitor_every``'s numbers; setting ``monitor_every`` without a hook is
    refused. The caller's torch random state is as it was when ``fit`` returns (``distributed.callers_rng``); fits
    in several threads of one process run one at a time, each with the numbers it gives alone; the model is float32
    whatever the caller's default dtype (``distributed.float32_default``) and trains with autograd on and in
    ``train.precision`` inside a caller's ``torch.no_grad()``, ``torch.inference_mode()`` or ``torch.autocast``
    (``distributed.without_autocast``; the caller's modes are back on return).
    """
    check_output_folder(out_dir, "out", runs=True)  # never write into a folder of other files
    check_output_inputs(out_dir, "out", {"the split": split.folder}, read_whole=("the split",))  # nor the split's
    if train_cfg.monitor_every and not hooks:
        raise ResdomError("train.monitor_every: the trainer was given no epoch hook to record it (resdom.fit and "
                          "the pipelines pass resdom.diagnostics.monitor.epoch_monitor)")
    model_cfg = _resolve_model_config(model_cfg, split)
    train_cfg = with_objective(model_cfg, train_cfg)
    assert train_cfg.objective is not None  # with_objective sets it
    objective = get_objective(train_cfg.objective)
    files = RunFiles(Path(out_dir))
    fingerprint = data_fingerprint(split)
    dist_ctx = distributed.setup(train_cfg.device)
    try:
        # torch's random state and thread count are the process's: two fits at once in two threads drew each other's
        # dropout and reseeded each other mid-epoch, so a second thread's fit waits for the first (callers_rng's lock,
        # outermost: ``held`` gives the thread count back, and unlocks the folder, before another fit may start);
        # autograd on and autocast off whatever the caller's modes (a fit inside ``torch.no_grad()`` or
        # ``torch.inference_mode()`` failed at its first step: "element 0 of tensors does not require grad"; one
        # inside ``torch.autocast`` trained in bfloat16), the caller's back on return
        with distributed.callers_rng(dist_ctx.device), contextlib.ExitStack() as held, distributed.float32_default(), \
                torch.inference_mode(False), torch.enable_grad(), distributed.without_autocast():
            return _fit(split, model_cfg, train_cfg, objective, files, fingerprint, data_info or {}, dist_ctx,
                        callbacks, progress, held, hooks)
    finally:
        dist_ctx.close()


def _lock(files: RunFiles, held: contextlib.ExitStack, dist_ctx: distributed.DistContext,
          fresh: bool = False) -> None:
    """Rank 0 locks the run directory until ``fit`` returns (``held``); another process holding it is the same
    ResdomError on every rank. ``fresh``: the folder held no run when ``fit`` looked (it is locked only once the
    model is built, so a model too large writes nothing); it is looked at again under the lock, for a trainer (or an
    import) that made a run there meanwhile would otherwise be wiped by this one's fresh start, its resume state,
    checkpoint and metrics gone and its setup never compared with this one's."""
    def lock() -> None:
        held.enter_context(directory_lock(files.dir, "training"))
        if fresh and (files.state.exists() or own_entries(files.dir)):
            raise ResdomError(f"{files.dir}: another process wrote a run there while this one started; run the "
                              "command again to resume or finish it (or train into another folder)")

    distributed.on_main_rank(lock, dist_ctx.is_main, dist_ctx.world_size)


def _threads_note(files: RunFiles, state: ResumeState, device: torch.device) -> str | None:
    """A note where a run resumes on CPU with another torch thread count than its last saved epoch ran with (its
    record's ``threads``): CPU kernels split their sums by thread, so the weights then differ in their last bits from
    those of an uninterrupted run (another checkpoint id, metrics that may differ); None where the counts agree, the
    record says none, or the run trains on another device."""
    if device.type != "cpu":
        return None
    records = files.read_log(state.epoch)
    before = records[-1].get("threads") if records else None
    now = torch.get_num_threads()
    if not isinstance(before, int) or isinstance(before, bool) or before == now:
        return None
    return (f"note: {files.dir} resumes with {now} torch thread{'s' if now != 1 else ''} where epoch {state.epoch} ran "
            f"with {before}: CPU sums split by thread, so its weights will differ in their last bits from an "
            f"uninterrupted run's (another checkpoint id); {setting('train.threads', before)} (or "
            f"OMP_NUM_THREADS={before}) "
            "resumes it exactly")


@functools.lru_cache(maxsize=4)
def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The CPU's model name, as the system gives it: Linux's ``/proc/cpuinfo`` (its first ``model name``, or on
    ARM its ``Hardware`` / ``Model`` line), macOS's ``sysctl machdep.cpu.brand_string``, else
    ``platform.processor()``; None where none says more than nothing. Each epoch record names it (``cpu``):
    floating-point sums differ between CPU kinds in their last bits, so two runs of one seed agree bit for bit only
    on one kind, and a cell's minutes are read against it. Read once per process."""
    import platform
    import subprocess
    import sys

    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f.read(1 << 20).splitlines():
                key, _, value = line.partition(":")
                fields.setdefault(key.strip().lower(), value.strip())  # the first CPU's line
    except OSError:
        pass
    found = next((fields[k] for k in ("model name", "hardware", "model") if fields.get(k)), None)
    if found is None and sys.platform == "darwin":
        try:
            found = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                   timeout=5).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            found = None
    return " ".join((found or platform.processor() or "").split())[:200] or None


def _load_average() -> float | None:
    """The machine's 1-minute load average now (an epoch record's ``load``, read with its seconds); None where the
    platform has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _built(model_cfg: ModelConfig, device: torch.device) -> SequentialRecommender:
    """``build_model(model_cfg)`` on ``device``; weights that do not fit in memory are a ResdomError naming the
    sizes that set them, not an allocator's traceback."""
    try:
        return build_model(model_cfg).to(device)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if not isinstance(e, torch.OutOfMemoryError) and "allocate" not in str(e):
            raise
        raise ResdomError(f"model: its weights do not fit in memory on {device} (model.max_len {model_cfg.max_len}, "
                          f"model.hidden {model_cfg.hidden}, {model_cfg.n_items:,} items); lower "
                          f"{setting('model.max_len')} or {setting('model.hidden')}") from None


def _fit(split: SplitData, model_cfg: ModelConfig, train_cfg: TrainConfig, objective: Objective, files: RunFiles,
         fingerprint: str, data_info: dict[str, Any], dist_ctx: distributed.DistContext,
         callbacks: Sequence[EpochCallback], progress: bool | None, held: contextlib.ExitStack,
         hooks: Sequence[EpochHook] = ()) -> dict[str, Any]:
    """``held``: where rank 0 keeps the run directory's lock until ``fit`` returns."""
    device = dist_ctx.device
    if train_cfg.threads is not None:  # for this fit: the caller's own count comes back when it returns
        held.callback(torch.set_num_threads, torch.get_num_threads())
        torch.set_num_threads(train_cfg.threads)
    # a saved run: locked before its state is read, or another trainer's state, read mid-run, would be resumed or
    # finished (metrics.json, "stopped") beside it
    locked = files.dir.is_dir()
    if locked:
        _lock(files, held, dist_ctx)
    state = files.read_state()
    held_out = len(split.valid) > 0  # protocol none without a holdout: no early stopping, the last epoch is kept
    rewritten = False  # the checkpoint is of the epoch after the state's: trained again, that epoch must write it anew
    if state is not None:
        check_resumable(files, state, model_cfg, train_cfg, split)
        _check_epochs(files, state, train_cfg)
        if dist_ctx.is_main:
            _repair_data(files, split)
        dist_ctx.barrier()
        ends = state.stopped == "early_stopping" or state.epoch >= train_cfg.epochs
        # an interrupted run ended here without training (a lower --epochs): no epoch after the state's is trained
        # again to write over a checkpoint or log record a kill left of it
        ends_unfinished = ends and state.stopped is None
        rewritten = files.check_best_checkpoint(state, held_out, ends=ends_unfinished)
        if ends_unfinished:
            files.check_log(state)  # the finished run's curve
            if dist_ctx.is_main:  # the log without records past the state, config.json of the epochs it ends at
                _write_config(files, split, model_cfg, train_cfg, fingerprint, data_info, fresh=False)
            dist_ctx.barrier()
        if ends:
            return _finish(split, model_cfg, train_cfg, files, fingerprint, state, dist_ctx)
        files.check_log(state)  # the epochs to come are appended to it
    if not held_out and split.manifest.get("protocol") != "none":
        hint = " (a gts split: a lower --valid-quantile moves T_val earlier)" if split.manifest.get(
            "protocol") == "gts" else ""
        raise ResdomError(f"the split has no validation users: early stopping and the best checkpoint need them{hint}")
    samples = build_samples(split.train, model_cfg.max_len, objective.layout)
    if len(samples) == 0:
        raise ResdomError(f"no training samples for {objective.name}: every training sequence is too short")
    torch.manual_seed(train_cfg.seed)
    model = _built(model_cfg, device)  # before anything is written: a model too large to hold writes no run
    if not locked:
        _lock(files, held, dist_ctx, fresh=True)
    if dist_ctx.is_main:
        for folder in (files.dir, files.state_dir, files.data):  # what a killed trainer left half-written
            remove_temporaries(folder)
        _write_config(files, split, model_cfg, train_cfg, fingerprint, data_info, fresh=state is None)
        write_marker(files.dir, RUN)  # the folder is a run: resdom train / import may write here again
    dist_ctx.barrier()

    optimizer = torch.optim.Adam(model.parameters(), lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
    stopper = EarlyStopping()
    source = source_commit()
    start_epoch = 1
    if state is not None:
        files.load_state_tensors(state, model, optimizer)
        stopper = state.early_stopping
        start_epoch = state.epoch + 1
        if dist_ctx.is_main and (note := _threads_note(files, state, device)):
            print(visible(note), file=sys.stderr, flush=True)
    step = distributed.wrap(TrainStep(model, objective, _loss_context(split, train_cfg, objective),
                                      train_cfg.precision).to(device), dist_ctx)

    show, lines = _progress_enabled(progress, dist_ctx.is_main), _progress_lines(progress, dist_ctx.is_main)
    bar = _bar(show, total=train_cfg.epochs, initial=start_epoch - 1, desc="epochs", dynamic_ncols=True)
    stopped = None
    epoch = start_epoch - 1
    for epoch in range(start_epoch, train_cfg.epochs + 1):
        epoch_start = time.perf_counter()
        loss, n_seen, seconds = _train_epoch(step, optimizer, samples, split.n_items, model_cfg, train_cfg,
                                             objective, epoch, dist_ctx, show, lines)
        try:
            if not math.isfinite(loss):
                raise NonFiniteScores(f"loss {loss}")
            valid = _evaluate(model, split, "stop", train_cfg, device)
        except NonFiniteScores as e:  # the loss or the validation scores: NaN, or weights whose products overflow
            what = (f"loss {loss}" if not math.isfinite(loss)
                    else f"loss {loss:.4g}, but the model scores items as NaN or infinity")
            raise ResdomError(f"training diverged at epoch {epoch} ({what}); try a lower "
                              f"learning rate, {setting('train.lr')} (now {train_cfg.lr:g})") from e
        if held_out:
            value = valid["metrics"][train_cfg.metric]
            improved = stopper.update(value, epoch)
        else:  # nothing to select on: every epoch's model is saved, so the last one is kept
            value, improved = math.nan, True
        if rewritten and epoch == start_epoch and not improved:
            _stale_checkpoint(files, epoch, stopper)
        record = {"epoch": epoch, "loss": loss, "valid": valid["metrics"], "n_users": valid["n_users"],
                  "seconds": seconds, "samples_per_s": n_seen / seconds if seconds > 0 else None,
                  "best_epoch": stopper.best_epoch, "threads": torch.get_num_threads(),
                  "load": _load_average(), "cpu": cpu_model()}
        if not held_out:
            record["best_epoch"] = epoch
        if source is not None:
            record["source"] = source  # the commit that trained this epoch (a resumed run may change it)
        for hook in hooks if held_out else ():  # the training monitor adds "monitor" every monitor_every epochs
            hook(EpochEnd(epoch, model, split, train_cfg, device, record))
        if held_out and stopper.should_stop(train_cfg.patience):
            stopped = "early_stopping"
        elif epoch >= train_cfg.epochs:
            stopped = "max_epochs"
        if dist_ctx.is_main:
            if improved:
                save_checkpoint(files.model, model, _sidecar_extra(epoch, valid, fingerprint, train_cfg, split))
            # a torn last line is dropped on resume
            with writing(files.log), files.log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            files.save_state(ResumeState.of(epoch, stopper, stopped, model_cfg, train_cfg, fingerprint), model,
                             optimizer)
        dist_ctx.barrier()
        bar.update(1)
        if held_out:
            bar.set_postfix(loss=f"{loss:.4f}", **{train_cfg.metric: f"{value:.4f}"},
                            best=f"{stopper.best_value:.4f}@{stopper.best_epoch}")
        else:
            bar.set_postfix(loss=f"{loss:.4f}")
        if lines:
            selection = (f"valid {train_cfg.metric} {value:.4f} (best {stopper.best_value:.4f} at epoch "
                         f"{stopper.best_epoch})" if held_out else "nothing held out (protocol none)")
            seconds_taken = time.perf_counter() - epoch_start
            print(f"epoch {epoch}/{train_cfg.epochs}: loss {loss:.4f}, {selection}, {seconds_taken:.0f} s",
                  file=sys.stderr, flush=True)
        for cb in callbacks:
            cb(epoch, record)
        if stopped:
            break
    bar.close()
    state = ResumeState.of(epoch, stopper, stopped or "max_epochs", model_cfg, train_cfg, fingerprint)
    return _finish(split, model_cfg, train_cfg, files, fingerprint, state, dist_ctx)


def _stale_checkpoint(files: RunFiles, epoch: int, stopper: EarlyStopping) -> None:
    """The checkpoint of ``epoch``, written before a kill stopped that epoch short of its resume state, was not
    written anew by the epoch trained again: its validation fell short of the best (epoch ``stopper.best_epoch``)
    this time, as on a device, or a CPU thread count, that does not repeat the epoch bit for bit. The run would end
    with the killed attempt's checkpoint, not its best epoch's, which that checkpoint replaced: a ResdomError."""
    raise ResdomError(f"{files.model}: the checkpoint of epoch {epoch}, written before the run was interrupted, is "
                      f"not what epoch {epoch} trained again gives (its validation now falls short of epoch "
                      f"{stopper.best_epoch}'s: this device or thread count does not repeat it bit for bit), and the "
                      f"checkpoint of epoch {stopper.best_epoch} it replaced is gone; {files.restart_hint()}")


def _train_epoch(step: nn.Module, optimizer: torch.optim.Optimizer, samples: SampleSet, n_items: int,
                 model_cfg: ModelConfig, train_cfg: TrainConfig, objective: Objective, epoch: int,
                 dist_ctx: distributed.DistContext, show: bool, lines: bool = False) -> tuple[float, int, float]:
    """One pass over this rank's shard -> (mean loss over all ranks' batches, samples seen by all ranks, seconds).

    ``show``: a tqdm bar (a terminal); ``lines``: in a log, a plain line of batches done / total every
    ``PROGRESS_LINE_S`` seconds (a long epoch on a large catalogue is not minutes of silence).

    The global batch is ``batch_size``: each of W ranks takes ``batch_size // W`` samples per step. Each batch
    is cut into up to ``length_groups`` groups of similar length where that is exact (``backward_groups``);
    elsewhere the model's training passes encode its rows in that many groups (``SequentialRecommender.encode``).
    """
    seed, rank, world = train_cfg.seed, dist_ctx.rank, dist_ctx.world_size
    order_rng = np.random.default_rng(epoch_seed(seed, epoch, 0))  # same on every rank
    model = _step_model(step)
    partners = same_target_partners(samples.last_targets, order_rng) if model.needs_partners() else None
    order = epoch_order(len(samples), order_rng, rank, world)
    per_rank = max(1, train_cfg.batch_size // world)
    # a full-window model pays for max_len in every batch anyway: bucketing would only bias batches
    buckets = 0 if model.full_window() else train_cfg.length_buckets
    # exact only for an objective whose mean over targets the groups reproduce, on a model that allows it
    exact = objective.exact_in_groups and model.exact_length_groups()
    groups = train_cfg.length_groups if exact else 1
    # otherwise the model encodes its batch in length groups itself (DuoRec's InfoNCE needs the whole batch)
    model.encode_groups = 1 if exact else train_cfg.length_groups
    if buckets:
        order = bucket_by_length(order, samples.end - samples.start, per_rank, buckets, order_rng)
    neg_rng = np.random.default_rng(epoch_seed(seed, epoch, 1, rank))
    torch.manual_seed(epoch_seed(seed, epoch, 2, rank))  # dropout, ce_sampled negatives
    batches = iter_batches(samples, order, per_rank, n_items=n_items, groups=groups, rng=neg_rng,
                           negatives=objective.needs_negatives, partners=partners)
    step.train()
    total, count = 0.0, 0
    start = time.perf_counter()
    n_batches = -(-len(order) // per_rank)
    said = start
    with _bar(show, total=n_batches, desc=f"epoch {epoch}", leave=False, dynamic_ncols=True) as bar:
        for parts in batches:
            optimizer.zero_grad(set_to_none=True)
            total += backward_groups(step, parts, dist_ctx)
            optimizer.step()
            count += 1
            bar.update(1)
            if count % 20 == 0:
                bar.set_postfix(loss=f"{total / count:.4f}")
            if lines and time.perf_counter() - said >= PROGRESS_LINE_S:
                said = time.perf_counter()
                print(f"epoch {epoch}: batch {count}/{n_batches}, loss {total / count:.4f}, {said - start:.0f} s",
                      file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    total_all, count_all = dist_ctx.all_reduce_sum(total), dist_ctx.all_reduce_sum(count)
    return total_all / max(count_all, 1), len(order) * world, seconds


def _sidecar_extra(epoch: int, valid: dict[str, Any], fingerprint: str, train_cfg: TrainConfig,
                   split: SplitData) -> dict[str, Any]:
    return {"epoch": epoch, "metrics": valid["metrics"], "n_users": valid["n_users"], "split": "valid",
            "data_fingerprint": fingerprint, "train": train_cfg.model_dump(), "data": split.manifest}


def _repair_data(files: RunFiles, split: SplitData) -> None:
    """On resume, the run's data/ unreadable (a damaged disk, a file cut short, deleted by hand) is written again
    from ``split``, with a note: ``check_resumable`` has matched ``split`` to the data the run was trained on (the
    state's fingerprint), so it is the run's own split. Left as it was, training went on and the run failed at its
    end, where its split is read back, with advice (--force) that would discard the training."""
    try:
        SplitData.load(files.data)
        return
    except ResdomError as e:
        why = str(e).split(";")[0]
    print(visible(f"note: {why}; written again from the data given (the run's own: its fingerprint is the saved "
                  "state's)"), file=sys.stderr, flush=True)
    split.save(files.data)


def _write_config(files: RunFiles, split: SplitData, model_cfg: ModelConfig, train_cfg: TrainConfig,
                  fingerprint: str, data_info: dict[str, Any], fresh: bool) -> None:
    """config.json always (the resolved config); data/ and a fresh metrics log on a fresh start.

    metrics.json is removed in both cases: it is stale as soon as training goes on.
    """
    files.final.unlink(missing_ok=True)
    if fresh:
        split.save(files.data)
        for stale in (files.log, files.model, files.model.with_suffix(".json")):
            stale.unlink(missing_ok=True)
    else:  # drop records of epochs after the saved state (a kill between log and state)
        saved = files.read_state()
        files.trim_log(saved.epoch if saved is not None else 0)
    data = {**data_info, "fingerprint": fingerprint, "n_items": split.n_items, "manifest": split.manifest}
    model, train = model_cfg.model_dump(), train_cfg.model_dump()
    atomic_write_json(files.config, {"model": model, "train": train, "data": data,
                                     "versions": {**versions(), "recipe": recipe_label(model_cfg.name,
                                                                                       {**train, **model})}})


def _read_final(files: RunFiles) -> dict[str, Any]:
    try:
        final = json.loads(files.final.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}  # unreadable: recomputed from the best checkpoint
    return final if isinstance(final, dict) else {}


def _finish(split: SplitData, model_cfg: ModelConfig, train_cfg: TrainConfig, files: RunFiles, fingerprint: str,
            state: ResumeState, dist_ctx: distributed.DistContext) -> dict[str, Any]:
    """Evaluate the best checkpoint on valid and test; write metrics.json and the finished state (rank 0)."""
    if files.final.exists() and state.stopped and files.state.exists():
        saved = files.read_state()
        final = _read_final(files)
        # reused only when it names the checkpoint now in the run (older metrics.json files name none)
        if saved is not None and saved.stopped and saved.epoch == state.epoch and final.get(
                "checkpoint") == checkpoint_id(files.model):
            return final
    model, meta = load_checkpoint(files.model, expected=model_cfg, fingerprint=data_fingerprints(split))
    model.to(dist_ctx.device)
    valid = _evaluate(model, split, "valid", train_cfg, dist_ctx.device)
    test = _evaluate(model, split, "test", train_cfg, dist_ctx.device)
    result: dict[str, Any] = {"valid": valid, "test": test, "best_epoch": meta.get("epoch"), "epochs_run": state.epoch,
              "stopped": state.stopped or "max_epochs", "metric": train_cfg.metric,
              "objective": train_cfg.objective, "model": model_cfg.name, "checkpoint": checkpoint_id(files.model)}
    if dist_ctx.is_main:
        files.mark_stopped(result["stopped"])
        atomic_write_json(files.final, result)
    dist_ctx.barrier()
    return result
