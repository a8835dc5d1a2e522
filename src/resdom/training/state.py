"""The trainer's resume state, apart from the training loop: what is saved after every epoch and read back.

``RUN_DIR/state/trainer.json`` (``ResumeState``: the epoch, the early-stopping counters, how the run stopped, the
resolved model and train config, the data's fingerprint, the names of the weight files and the optimiser's
non-tensor state; format ``STATE_FORMAT``) is written last, after the weights and Adam moments of that epoch
(``state/model-EEEE.safetensors``, ``state/optimizer-EEEE.safetensors``): it is the commit point, so a kill at any
moment leaves the previous epoch's state whole. A run resumes only with the same model, data and training config
(``check_resumable``; the ``RESUMABLE_FIELDS`` may differ).
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeGuard

import torch
from torch import nn

from resdom.checks import NumbersModel, arg, naming_flags
from resdom.data.sequences import SplitData
from resdom.errors import ResdomError
from resdom.io import atomic_write_files, atomic_write_json, atomic_write_text, read_jsonl, safetensors_bytes
from resdom.limits import short
from resdom.models.config import ModelConfig, drop_flat_defaults
from resdom.rundir import RunDir, holds_results
from resdom.runs import (
    WEIGHTS_KEY,
    checkpoint_id,
    content_id,
    data_fingerprint,
    data_fingerprints,
    fitted_weights,
    not_this_format,
    read_safetensors,
    read_sidecar,
)
from resdom.training.config import RESUMABLE_FIELDS, TrainConfig

STATE_FORMAT = "resdom-trainer-state/1"


@dataclass
class EarlyStopping:
    """Track the best validation value (higher is better) and the epochs since it improved."""

    best_value: float = -math.inf
    best_epoch: int = 0
    bad_epochs: int = 0

    def update(self, value: float, epoch: int) -> bool:
        """Record epoch ``epoch``'s value; True when it is a new best (strictly greater)."""
        if value > self.best_value:
            self.best_value, self.best_epoch, self.bad_epochs = value, epoch, 0
            return True
        self.bad_epochs += 1
        return False

    def should_stop(self, patience: int) -> bool:
        return self.bad_epochs >= patience


@dataclass
class ResumeState:
    """The state saved after ``epoch`` (``state/trainer.json``): the early-stopping counters, how the run stopped
    (None: not yet), what it was trained on (the resolved model and train config as plain data, the data's
    fingerprint) and, once saved, the names of its weight files (``files``), their content hashes (``checksums``,
    ``runs.checkpoint_id``'s, and ``BEST_CHECKPOINT``'s, the run's best checkpoint then; absent from states saved
    before them) and the optimiser's non-tensor state (``optimizer_meta``)."""

    epoch: int
    early_stopping: EarlyStopping = field(default_factory=EarlyStopping)
    stopped: str | None = None
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    data_fingerprint: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    optimizer_meta: dict[str, Any] = field(default_factory=dict)
    checksums: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, epoch: int, stopper: EarlyStopping, stopped: str | None, model_cfg: ModelConfig,
           train_cfg: TrainConfig, fingerprint: str) -> ResumeState:
        return cls(epoch, EarlyStopping(**asdict(stopper)), stopped, model_cfg.model_dump(), train_cfg.model_dump(),
                   fingerprint)

    def to_json(self) -> dict[str, Any]:
        """``trainer.json``'s content (``STATE_FORMAT``)."""
        return {"epoch": self.epoch, "early_stopping": asdict(self.early_stopping), "stopped": self.stopped,
                "model": self.model, "train": self.train, "data_fingerprint": self.data_fingerprint,
                "files": self.files, "optimizer_meta": self.optimizer_meta, "checksums": self.checksums,
                "format": STATE_FORMAT}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResumeState:
        """The state of a ``trainer.json`` (KeyError, TypeError or ValueError where it is malformed)."""
        checksums = data.get("checksums") or {}
        if not all(isinstance(data[k], dict) for k in ("files", "optimizer_meta")) or not isinstance(checksums, dict):
            raise TypeError("files, optimizer_meta and checksums must be objects")
        return cls(int(data["epoch"]), EarlyStopping(**data["early_stopping"]), data.get("stopped"),
                   dict(data.get("model") or {}), dict(data.get("train") or {}), data.get("data_fingerprint"),
                   dict(data["files"]), dict(data["optimizer_meta"]), dict(checksums))


MAX_EPOCH = 10**6  # an epoch beyond any training budget (TrainConfig.epochs) is a damaged file's


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def state_problem(state: dict[str, Any]) -> str | None:
    """Why a ``trainer.json``'s values cannot be resumed from (None: they can): ``epoch`` a whole number in
    [0, the saved train.epochs] (a run never saves past its budget), ``early_stopping.best_value`` a finite number
    (or -inf before any epoch improved it: best_epoch 0), ``best_epoch`` and ``bad_epochs`` whole numbers in
    [0, MAX_EPOCH]. A NaN best value would never be beaten (NaN compares false), so the run would keep an early epoch's
    model for ever."""
    epoch = state.get("epoch")
    budget = (state.get("train") or {}).get("epochs") if isinstance(state.get("train"), dict) else None
    high = budget if _whole(budget) and 0 < budget <= MAX_EPOCH else MAX_EPOCH
    if not _whole(epoch) or not 0 <= epoch <= high:
        return f"field epoch is {str(epoch)[:40]!s}, not a whole number in [0, {high}]"
    stopping = state.get("early_stopping")
    if not isinstance(stopping, dict):
        return "field early_stopping is not an object"
    for key in ("best_epoch", "bad_epochs"):
        value = stopping.get(key, 0)
        if not _whole(value) or not 0 <= value <= MAX_EPOCH:
            return f"field early_stopping.{key} is {str(value)[:40]}, not a whole number in [0, {MAX_EPOCH}]"
    best = stopping.get("best_value", -math.inf)
    if isinstance(best, bool) or not isinstance(best, (int, float)) or math.isnan(best) or best == math.inf \
            or (best == -math.inf and stopping.get("best_epoch", 0) != 0):
        return f"field early_stopping.best_value is {str(best)[:40]}, not a finite number"
    return None


BEST_CHECKPOINT = "checkpoint"  # trainer.json's checksums: the run's model.safetensors when the state was saved


def state_files(epoch: int) -> dict[str, str]:
    """The weight files of the state saved after ``epoch``, in ``state/`` (``trainer.json``'s ``files``)."""
    return {"model": f"model-{epoch:04d}.safetensors", "optimizer": f"optimizer-{epoch:04d}.safetensors"}


ADAM_STATE = frozenset({"step", "exp_avg", "exp_avg_sq"})  # what Adam keeps per parameter (amsgrad is never on)


def _plain(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)  # a tuple and the list JSON made of it are the same


def param_groups_problem(meta: dict[str, Any], optimizer: torch.optim.Optimizer) -> str | None:
    """Why the saved parameter groups (``optimizer_meta.param_groups``) cannot continue ``optimizer``, made from this
    run's train config (None: they can): each must hold the config's values, for ``load_state_dict`` would put a
    saved lr or betas in place of the config's (a field torch added since the run was saved is not compared)."""
    fresh = optimizer.state_dict()["param_groups"]
    groups = meta.get("param_groups")
    if not isinstance(groups, list) or len(groups) != len(fresh) or not all(isinstance(g, dict) for g in groups):
        return f"field optimizer_meta.param_groups is not {len(fresh)} parameter group(s)"
    for i, (saved, now) in enumerate(zip(groups, fresh)):
        for key in sorted(set(saved) & set(now)):
            if _plain(saved[key]) != _plain(now[key]):
                return (f"field optimizer_meta.param_groups[{i}].{key} is {_plain(saved[key])[:80]}, not this run's "
                        f"{_plain(now[key])[:80]}")
    scalars = meta.get("scalars", {})
    if not isinstance(scalars, dict):
        return "field optimizer_meta.scalars is not an object"
    for name, value in scalars.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"field optimizer_meta.scalars.{name[:80]} is {str(value)[:80]}, not a finite number"
    return None


def adam_state_problem(tensors: dict[str, torch.Tensor], scalars: dict[str, Any],
                       optimizer: torch.optim.Optimizer) -> str | None:
    """Why the saved Adam state (``flatten_optimizer``'s tensors ``state.<param>.<key>`` and scalars
    ``<param>.<key>``) cannot continue ``optimizer`` (None: it can): each parameter's state must be ``ADAM_STATE``,
    the moments of the parameter's shape and dtype, the step a float32 scalar, all finite. ``load_state_dict`` checks
    none of it: a moment of another shape fails at the next step, one of another dtype is cast silently."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    held: dict[int, set[str]] = {}
    for name in (*tensors, *(f"state.{k}" for k in scalars)):
        _, index, key = (name.split(".", 2) + ["", ""])[:3]
        if not index.isdigit() or int(index) >= len(params) or key not in ADAM_STATE:
            return f"{name[:80]!r} is not Adam state of this model's {len(params)} parameters"
        held.setdefault(int(index), set()).add(key)
    for name, t in tensors.items():
        _, index, key = name.split(".", 2)
        param = params[int(index)]
        want: tuple[tuple[int, ...], torch.dtype] = (((), torch.float32) if key == "step"
                                                     else (tuple(param.shape), param.dtype))
        if (tuple(t.shape), t.dtype) != want:
            return f"tensor {name!r} is {t.dtype} of shape {tuple(t.shape)}, not {want[1]} of shape {want[0]}"
        if not bool(torch.isfinite(t).all()):
            return f"tensor {name!r} holds NaN or infinite values"
    for param_id, keys in sorted(held.items()):
        if keys != ADAM_STATE:
            return f"parameter {param_id}'s Adam state lacks {', '.join(sorted(ADAM_STATE - keys))}"
    return None


def flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Optimizer state -> (named tensors ``state.<param>.<key>``, JSON data: param groups and non-tensor state)."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for pid, st in sd["state"].items():
        for key, value in st.items():
            if torch.is_tensor(value):
                tensors[f"state.{pid}.{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars[f"{pid}.{key}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    """Inverse of ``flatten_optimizer``: a state dict for ``optimizer.load_state_dict``."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = value
    for name, value in meta.get("scalars", {}).items():
        pid, key = name.split(".", 1)
        state.setdefault(int(pid), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


class RunFiles(RunDir):
    """A run directory (layout in ``resdom.rundir``) as the trainer writes it, and the resume state in ``state/``."""

    def restart_hint(self) -> str:
        """How to start over: --force (from Python, which has no such option: moving the folder aside, as --force
        does), or deleting state/ where that leaves a folder training may start afresh in (not where the run holds
        results: its final metrics, diagnostics, imported weights)."""
        if naming_flags():
            force = (f"rerun `resdom train` with --force to keep this run aside ({self.dir.name}.replaced-K) and "
                     "train anew")
        else:
            force = f"rename {self.dir} (as `resdom train --force` keeps it aside) and train anew"
        if holds_results(self):
            return force
        return f"delete {self.state_dir} to restart the run from epoch 1, or {force}"

    def read_state(self) -> ResumeState | None:
        """The saved ``trainer.json`` (None: no resume state); a malformed one is a ResdomError saying how to
        restart."""
        if not self.state.exists():
            return None
        try:
            state = json.loads(self.state.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ResdomError(f"{self.state}: resume state is truncated or not valid JSON ({e}); "
                              f"{self.restart_hint()}") from None
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ResdomError(f"{self.state}: {not_this_format(found, STATE_FORMAT, 'trainer state')}; "
                              f"{self.restart_hint()}")
        missing = [k for k in ("epoch", "files", "optimizer_meta", "early_stopping") if k not in state]
        if missing:
            raise ResdomError(f"{self.state}: resume state lacks {', '.join(missing)}; {self.restart_hint()}")
        try:
            resumed = ResumeState.from_json(state)
        except (KeyError, TypeError, ValueError) as e:
            raise ResdomError(f"{self.state}: malformed resume state ({e}); {self.restart_hint()}") from None
        problem = state_problem(state)
        if problem:
            raise ResdomError(f"{self.state}: {problem}; {self.restart_hint()}")
        if resumed.files != state_files(resumed.epoch):  # an edited epoch or file name: not what was saved together
            raise ResdomError(f"{self.state}: field files is {_plain(resumed.files)[:200]}, not the files of epoch "
                              f"{resumed.epoch} ({_plain(state_files(resumed.epoch))}); {self.restart_hint()}")
        return resumed

    def save_state(self, state: ResumeState, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Weights and Adam moments for ``state.epoch``, then ``trainer.json`` (the commit point), then prune."""
        epoch = state.epoch
        self.state_dir.mkdir(parents=True, exist_ok=True)
        weights = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        opt_tensors, opt_meta = flatten_optimizer(optimizer)
        files = state_files(epoch)
        blobs = {"model": safetensors_bytes(weights), "optimizer": safetensors_bytes(opt_tensors)}
        atomic_write_files({self.state_dir / files[key]: blob for key, blob in blobs.items()})
        checksums = {key: content_id(blob) for key, blob in blobs.items()}
        if self.model.is_file():  # the best checkpoint as this state selected it (check_best_checkpoint)
            checksums[BEST_CHECKPOINT] = checkpoint_id(self.model)
        atomic_write_json(self.state, replace(state, files=files, optimizer_meta=opt_meta,
                                              checksums=checksums).to_json())
        for old in self.state_dir.glob("*.safetensors"):
            if old.name not in files.values():
                old.unlink(missing_ok=True)

    def mark_stopped(self, stopped: str) -> None:
        """Record in ``trainer.json`` how the finished run stopped (where there is one)."""
        if self.state.exists():
            saved = json.loads(self.state.read_text(encoding="utf-8"))
            saved["stopped"] = stopped
            atomic_write_json(self.state, saved)

    def load_state_tensors(self, state: ResumeState, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """The weights and optimiser state ``state`` (``read_state``) names, into ``model`` and ``optimizer``."""
        paths = {key: self.state_dir / name for key, name in state.files.items()}
        for key in ("model", "optimizer"):
            if key not in paths or not paths[key].is_file():
                raise ResdomError(f"{self.state}: its {key} file {paths.get(key, '?')} is missing; "
                                  f"{self.restart_hint()}")
        for key, saved in state.checksums.items():  # a file of another run or epoch copied in, of the same shapes
            if key in paths and checkpoint_id(paths[key]) != saved:
                raise ResdomError(f"{paths[key]}: not the file {self.state.name} was saved with (content "
                                  f"{checkpoint_id(paths[key])}, saved {str(saved)[:40]}); {self.restart_hint()}")
        weights = read_safetensors(paths["model"], self.restart_hint())
        opt = read_safetensors(paths["optimizer"], self.restart_hint())
        try:
            weights = fitted_weights(weights, model.state_dict(), str(paths["model"]), "weights do not fit the model",
                                     exact=True)
        except ResdomError as e:
            raise ResdomError(f"{e}; {self.restart_hint()}") from None
        problem = param_groups_problem(state.optimizer_meta, optimizer)
        if problem:
            raise ResdomError(f"{self.state}: {problem}; {self.restart_hint()}")
        problem = adam_state_problem(opt, state.optimizer_meta.get("scalars", {}), optimizer)
        if problem:
            raise ResdomError(f"{paths['optimizer']}: {problem}; {self.restart_hint()}")
        try:
            model.load_state_dict(weights)
            optimizer.load_state_dict(unflatten_optimizer(opt, state.optimizer_meta))
        except (RuntimeError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:  # a damaged meta too
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ResdomError(f"{self.state_dir}: resume state does not fit the model ({first}); "
                              f"{self.restart_hint()}") from None

    def check_best_checkpoint(self, state: ResumeState, held_out: bool, ends: bool = False) -> bool:
        """The run's checkpoint (``model.safetensors``) must be the one the state selected: of its best epoch (the
        last one where nothing is held out), or of the epoch after it (a kill between the checkpoint and the state;
        that epoch is trained again and writes it anew). Otherwise resuming would train on and fail at the end, or end
        with another checkpoint's metrics; so would weights that are not those its sidecar describes (a damaged file:
        the best epoch's weights are read only at the end, after every remaining epoch was trained). ``ends``: the run
        ends at the state's epoch without training (an interrupted run given fewer epochs than it was started with): a
        checkpoint of the epoch after it is then never written anew, and the run would end with a model of an epoch it
        did not run (best epoch 3 of 2), so it is refused, naming the epochs that resume it. True where the checkpoint
        is of the epoch after the state's (written before a kill): the trainer checks that the epoch, trained again,
        writes it anew."""
        if state.epoch == 0:
            return False
        best = state.early_stopping.best_epoch if held_out else state.epoch
        if not self.model.is_file():
            raise ResdomError(f"{self.model}: the checkpoint of this run's best epoch ({best}) is missing, so the "
                              f"resumed run could not end with it; {self.restart_hint()}")
        sidecar = read_sidecar(self.model)
        epoch = sidecar.get("epoch")
        if WEIGHTS_KEY in sidecar and checkpoint_id(self.model) != sidecar[WEIGHTS_KEY]:  # sidecars before it: not
            raise ResdomError(f"{self.model}: not the weights {self.model.with_suffix('.json').name} describes "
                              f"(checkpoint {checkpoint_id(self.model)}, the sidecar's {short(sidecar[WEIGHTS_KEY])}: "
                              "damaged, or another run's copied in), so the resumed run could not end with it; "
                              f"{self.restart_hint()}")
        kept = state.checksums.get(BEST_CHECKPOINT)  # states saved before it: not checked
        if epoch != state.epoch + 1 and kept is not None and checkpoint_id(self.model) != kept:
            raise ResdomError(f"{self.model}: not the checkpoint {self.state.name} was saved with (content "
                              f"{checkpoint_id(self.model)}, saved {short(kept)}: a checkpoint of another run copied "
                              f"in?), so the resumed run would end with it; {self.restart_hint()}")
        if ends and epoch == state.epoch + 1:
            raise ResdomError(f"{self.model.with_suffix('.json')}: a checkpoint of epoch {epoch}, an epoch interrupted "
                              f"before its resume state was saved (epoch {state.epoch}'s is); the checkpoint of the "
                              f"best epoch {best} is gone, so the run cannot end at {state.epoch} epochs: give "
                              f"{arg('epochs', epoch)} or more to resume it, or {self.restart_hint()}")
        if epoch not in (best, state.epoch + 1):
            raise ResdomError(f"{self.model.with_suffix('.json')}: a checkpoint of epoch {str(epoch)[:40]}, but the "
                              f"resume state's best epoch is {best} (a checkpoint of another run copied in?); "
                              f"{self.restart_hint()}")
        return epoch == state.epoch + 1 and epoch != best

    def check_log(self, state: ResumeState) -> None:
        """``metrics.jsonl`` must hold one record of each epoch the state saved (the trainer appends an epoch's record
        before its state): a log that lost records would end as a training curve, epoch times and compute without
        them."""
        epochs = [rec.get("epoch") for rec in self.read_log(state.epoch)]
        if epochs != list(range(1, state.epoch + 1)):
            held = ", ".join(map(str, epochs[:8])) + (", ..." if len(epochs) > 8 else "") if epochs else "none"
            raise ResdomError(f"{self.log}: holds the records of epochs {held}, not one of each epoch 1..{state.epoch} "
                              f"the resume state saved; {self.restart_hint()}")

    def trim_log(self, up_to_epoch: int) -> None:
        """Rewrite ``metrics.jsonl`` (where there is one) with the records of epochs <= ``up_to_epoch`` only
        (``read_log``): a kill between an epoch's record and its state leaves a record, or a torn line, of an epoch
        the state does not hold."""
        if self.log.exists():
            kept = self.read_log(up_to_epoch)
            atomic_write_text(self.log, "".join(json.dumps(r) + "\n" for r in kept))

    def read_log(self, up_to_epoch: int) -> list[dict[str, Any]]:
        """metrics.jsonl records of epochs <= up_to_epoch (a torn last line is dropped, and so is a record whose epoch
        is not a whole number: a damaged one)."""
        return [rec for rec in read_jsonl(self.log) if _whole(rec.get("epoch")) and rec["epoch"] <= up_to_epoch]


# what follows from the data's settings (its sizes, the split's thresholds, the steps' counts): named after them
_CONSEQUENCES = ("counts", "dataset", "pool", "dropped_users", "preprocessing.steps", "thresholds", "n_users",
                 "n_items")


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """The values of nested JSON ``value`` by dotted path (``source.files[0].sha256``)."""
    if isinstance(value, dict):
        return {k: v for key, sub in value.items()
                for k, v in _leaves(sub, f"{path}.{key}" if path else str(key)).items()}
    if isinstance(value, list):
        return {k: v for i, sub in enumerate(value) for k, v in _leaves(sub, f"{path}[{i}]").items()}
    return {path: value}


def manifest_differences(files: RunDir, manifest: dict[str, Any], limit: int = 3) -> list[str]:
    """What differs between the data a run was started on (its ``config.json``'s ``data.manifest``, written when it
    started) and ``manifest``, the split made now: up to ``limit`` fields as ``data.manifest.FIELD: SAVED saved vs NOW
    now``, the data's settings (protocol, quantile, source file hashes, preprocessing) before what follows from them
    (counts, thresholds). Left out as ``data_fingerprint`` leaves them out: ``changes`` and where source files were
    found. [] where config.json is missing or unreadable (the fingerprint alone is named then)."""
    try:
        saved = json.loads(files.config.read_text(encoding="utf-8"))["data"]["manifest"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(saved, dict):
        return []

    def settings(m: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in _leaves({k: v for k, v in m.items() if k != "changes"}).items()
                if not k.endswith((".path", ".origin"))}

    before, now = settings(saved), settings(manifest)

    def shown(values: dict[str, Any], key: str) -> str:
        return short(values[key], 80) if key in values else "absent"

    keys = sorted((k for k in set(before) | set(now) if k not in before or k not in now or before[k] != now[k]),
                  key=lambda k: (k.startswith(_CONSEQUENCES), k))
    return [f"data.manifest.{k}: {shown(before, k)} saved vs {shown(now, k)} now" for k in keys[:limit]]


def check_resumable(files: RunFiles, state: ResumeState, model_cfg: ModelConfig, train_cfg: TrainConfig,
                    split: SplitData) -> None:
    """The saved run must be the same experiment (its data: either fingerprint of ``runs.data_fingerprints``); name
    every differing field otherwise (``setup_differences``)."""
    diffs = setup_differences(files, state, model_cfg, train_cfg, split)
    if diffs:
        # the same data, other settings: its own config.json resumes it with the settings it was trained with (a
        # run of an older resdom, whose recipe today's defaults no longer are, included)
        own = (f"resume it as it was trained with --config {shlex.quote(str(files.config))}; "
               if naming_flags() and not diffs[0].startswith("data fingerprint") and files.config.is_file() else "")
        raise ResdomError(
            f"{files.dir}: holds a run with another setup ({'; '.join(diffs)}); {own}use another {arg('out')} "
            f"directory, or {files.restart_hint()}"
        )


def setup_differences(files: RunFiles, state: ResumeState, model_cfg: ModelConfig, train_cfg: TrainConfig,
                      split: SplitData) -> list[str]:
    """What differs between the saved run and the one ``model_cfg``, ``train_cfg`` and ``split`` would train, one
    "FIELD: SAVED saved vs NOW now" each ([]: the same experiment, which resumes): a caller that replaces such a
    run itself (the demo) asks before the trainer refuses it."""
    diffs = []
    if state.data_fingerprint not in data_fingerprints(split):
        changed = manifest_differences(files, split.manifest)
        diffs.append(f"data fingerprint {state.data_fingerprint} saved vs {data_fingerprint(split)} now"
                     + (f": {'; '.join(changed)}" if changed else ""))
    # a state saved before each model had its own configuration class holds every model's fields: the other
    # models' fields at their defaults are not this model's
    same_model = model_cfg.name == state.model.get("name", "sasrec")
    saved_model = drop_flat_defaults(model_cfg.name, state.model) if same_model else state.model
    sections: tuple[tuple[str, dict[str, Any], dict[str, Any], frozenset[str], type[NumbersModel]], ...] = (
        ("model", saved_model, model_cfg.model_dump(), frozenset(), type(model_cfg)),
        ("train", state.train, train_cfg.model_dump(), RESUMABLE_FIELDS, TrainConfig),
    )
    for section, saved, now, free, cls in sections:
        # a field added to resdom after the run was saved holds its default there
        saved = {**{k: f.default for k, f in cls.model_fields.items() if k in now and k not in saved}, **saved}
        for key in sorted(set(saved) | set(now)):
            if key not in free and saved.get(key) != now.get(key):
                diffs.append(f"{section}.{key}: {saved.get(key)!r} saved vs {now.get(key)!r} now")
    return diffs
