"""Checkpoints (safetensors weights plus a JSON sidecar; nothing pickled) and loading a run directory whose
layout ``resdom.rundir.RunDir`` owns."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, load_file

from resdom.bounded import check_model_description, load_json, refuse_special
from resdom.data.sequences import SplitData
from resdom.distributed import callers_rng, float32_default
from resdom.errors import ResdomError
from resdom.io import atomic_write_files, is_locked, json_bytes, safetensors_bytes, sha256_file
from resdom.limits import short
from resdom.models import SequentialRecommender, build_model
from resdom.models.config import ModelConfig, read_model_config
from resdom.rundir import RunDir, not_a_run_dir
from resdom.version import __version__

CHECKPOINT_FORMAT = "resdom-checkpoint/1"


def model_to_load(cfg: ModelConfig) -> SequentialRecommender:
    """``build_model(cfg)`` for weights loaded into it next (a saved run's, an imported model's): its initial weights
    are drawn without moving the caller's torch random state (``distributed.callers_rng``), so loading a run leaves
    the caller's random numbers as they were. Its weights are ordinary tensors inside a caller's
    ``torch.inference_mode()`` too (inference tensors there: a model loaded or fitted in such a block could not be
    trained afterwards, "Inference tensors cannot be saved for backward")."""
    with callers_rng(), float32_default(), torch.inference_mode(False):  # float32 as trained, whatever the default
        return build_model(cfg)


def source_commit(package_dir: str | Path | None = None) -> str | None:
    """The commit of the source tree resdom runs from, where one is recorded: the file ``SOURCE_COMMIT`` in the
    package directory (``scripts/reproduce_cells.sh`` writes it into the frozen copy its cells train from);
    None otherwise."""
    path = Path(package_dir or Path(__file__).parent) / "SOURCE_COMMIT"
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def versions() -> dict[str, str]:
    import numpy

    found = {"resdom": __version__, "torch": torch.__version__, "numpy": numpy.__version__,
             "python": platform.python_version()}
    commit = source_commit()
    return found if commit is None else {**found, "source": commit}


def data_fingerprint(split: SplitData) -> str:
    """A short hash identifying a prepared split (its manifest and item count). Left out: the manifest's ``changes``
    (a description of what preparing the data removed, ``data.changes``: it follows from the rest) and where each
    source file was found (its ``path`` and ``origin``: the file is named by its sha256), so the same data in another
    folder or on another machine has the same fingerprint and its runs resume there."""
    manifest = {k: v for k, v in split.manifest.items() if k != "changes"}
    source = manifest.get("source")
    if isinstance(source, dict) and isinstance(source.get("files"), list):
        files = [{k: v for k, v in f.items() if k not in ("path", "origin")} if isinstance(f, dict) else f
                 for f in source["files"]]
        manifest["source"] = {**source, "files": files}
        if source.get("kind") == "path":  # the user's own file: its name is where it was found
            manifest["source"].pop("name", None)
    return _hash_manifest(manifest, split.n_items)


def data_fingerprints(split: SplitData) -> tuple[str, str]:
    """The fingerprints a run of ``split`` may carry: today's (``data_fingerprint``), and the one runs and checkpoints
    saved before 2026-12-03 carry (the same hash with the source files' paths in it), so those still load and
    resume where their data has not moved."""
    legacy = _hash_manifest({k: v for k, v in split.manifest.items() if k != "changes"}, split.n_items)
    return data_fingerprint(split), legacy


def _hash_manifest(manifest: dict[str, Any], n_items: int) -> str:
    blob = json.dumps({"manifest": manifest, "n_items": n_items}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


ID_DIGITS = 16  # hex digits of sha256 that name a weights file (checkpoint_id, content_id)


def checkpoint_id(path: str | Path) -> str:
    """A content hash (16 hex digits of sha256) of a weights file: what every stored result names as the checkpoint
    it was computed on, so a result of an older model is never mistaken for one of the current model."""
    try:
        return sha256_file(path)[:ID_DIGITS]
    except OSError as e:
        raise ResdomError(f"{path}: cannot read the checkpoint ({e.strerror})") from None


def content_id(data: bytes) -> str:
    """``checkpoint_id`` of a weights file's content, before it is written."""
    return hashlib.sha256(data).hexdigest()[:ID_DIGITS]


def save_checkpoint(path: str | Path, model: SequentialRecommender, extra: dict[str, Any] | None = None) -> None:
    """Write ``path`` (.safetensors) and its sidecar ``path.with_suffix('.json')``, together atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    weights = safetensors_bytes(tensors, metadata={"format": CHECKPOINT_FORMAT})
    sidecar = {"format": CHECKPOINT_FORMAT, "model": model.cfg.model_dump(), "versions": versions()}
    sidecar.update(extra or {})
    sidecar[WEIGHTS_KEY] = content_id(weights)  # the checkpoint_id of the weights it describes
    atomic_write_files({path: weights, path.with_suffix(".json"): json_bytes(sidecar)})


WEIGHTS_KEY = "weights"  # the sidecar's checkpoint_id of its weights file: another model's weights are refused


def read_safetensors(path: str | Path, what_to_do: str) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a truncated, empty or foreign file is a ResdomError naming it and
    ending with ``what_to_do``."""
    try:
        try:
            str(path).encode("utf-8")
        except UnicodeEncodeError:  # a name that is no UTF-8 (Latin-1 bytes): safetensors' own reader refuses it
            return load(Path(path).read_bytes())
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise ResdomError(f"{path}: cannot read the weights, the file is truncated or not a safetensors file "
                          f"({e}); {what_to_do}") from None


def check_finite(state: dict[str, torch.Tensor], where: str) -> None:
    """ResdomError naming the first floating-point tensor of ``state`` holding NaN or infinity.

    Such weights score items as NaN, and NaN compares false with every score: each target would rank first.
    """
    for name, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ResdomError(f"{where}: weight {name!r} holds {bad} NaN or infinite value(s) of {t.numel()}; "
                              "a model with such weights cannot be evaluated (did its training diverge?)")


def weights_problems(state: dict[str, torch.Tensor], own: dict[str, torch.Tensor], *, exact: bool = False,
                     extra: bool = False) -> list[str]:
    """What keeps ``state`` from loading into a model whose own state dict is ``own`` (empty: nothing): tensors
    missing, unexpected (unless ``extra``), of another shape, or of another dtype. A floating-point tensor may be of
    another floating-point dtype (a float16 or bfloat16 checkpoint is read in the model's float32) unless ``exact``
    (a resume state must continue the very numbers it saved); an integer or boolean tensor where the model holds
    floating-point weights is never a checkpoint of it (``load_state_dict`` would cast it silently)."""
    missing, unexpected = sorted(set(own) - set(state)), [] if extra else sorted(set(state) - set(own))
    shape = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    dtype = [k for k in own if k in state and k not in shape and state[k].dtype != own[k].dtype and (
        exact or not (state[k].is_floating_point() and own[k].is_floating_point()))]
    parts = []
    if missing:
        parts.append(f"missing {missing[:3]}")
    if unexpected:
        parts.append(f"unexpected {unexpected[:3]}")
    if shape:
        parts.append(f"shape mismatch {[(k, tuple(state[k].shape), tuple(own[k].shape)) for k in shape[:3]]}")
    if dtype:
        parts.append(f"dtype mismatch {[(k, str(state[k].dtype), str(own[k].dtype)) for k in dtype[:3]]}")
    return parts


def fitted_weights(state: dict[str, torch.Tensor], own: dict[str, torch.Tensor], where: str,
                   what: str = "weights do not fit the model", *, exact: bool = False,
                   extra: bool = False) -> dict[str, torch.Tensor]:
    """``state``'s tensors of ``own``'s names in ``own``'s dtypes, checked (``weights_problems``, then
    ``check_finite`` on the converted values: a float64 value past float32's range becomes infinite); a
    ResdomError ``"{where}: {what} (...)"`` otherwise."""
    parts = weights_problems(state, own, exact=exact, extra=extra)
    if parts:
        raise ResdomError(f"{where}: {what} ({'; '.join(parts)})")
    converted = {k: state[k].to(own[k].dtype) for k in own}
    check_finite(converted, where)
    return converted


def not_this_format(found: object, expected: str, what: str) -> str:
    """Why a file of format ``found`` is not read as a resdom ``what`` of format ``expected`` (``name/version``):
    another version of the same format is a file another resdom wrote, and the message says so."""
    name = expected.rsplit("/", 1)[0]
    if isinstance(found, str) and found.startswith(f"{name}/"):
        return (f"a resdom {what} of format {short(found)}, written by another version of resdom; this one "
                f"({__version__}) reads {expected}")
    return f"not a resdom {what} (format {short(found)})"


def read_sidecar(path: str | Path) -> dict[str, Any]:
    side = Path(path).with_suffix(".json")
    if not side.exists():
        raise ResdomError(f"{side}: checkpoint sidecar missing (expected beside {Path(path).name})")
    refuse_special(side)
    try:
        text = side.read_bytes()
    except OSError as e:
        raise ResdomError(f"{side}: cannot read it ({e.strerror})") from None
    meta = load_json(text, str(side), "the file is truncated or corrupt: retrain or re-import the run")
    if not isinstance(meta, dict):
        meta = {"format": f"a JSON {type(meta).__name__}"}
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ResdomError(f"{side}: {not_this_format(meta.get('format'), CHECKPOINT_FORMAT, 'checkpoint')}")
    if not isinstance(meta.get("model"), dict):
        raise ResdomError(f"{side}: the sidecar has no model config; retrain or re-import the run")
    return meta


def load_checkpoint(
    path: str | Path, expected: ModelConfig | None = None, fingerprint: str | tuple[str, ...] | None = None
) -> tuple[SequentialRecommender, dict[str, Any]]:
    """Build the model from the sidecar's config and load the weights; returns (model in eval mode, sidecar).

    ``expected``: the config the caller means to use; any architecture difference is an error naming the
    fields. ``fingerprint``: the data set the caller means to use (``data_fingerprint``).
    """
    path = Path(path)
    if not path.exists():
        raise ResdomError(f"{path}: checkpoint not found")
    meta = read_sidecar(path)
    cfg = read_model_config(meta["model"], f"{path.with_suffix('.json')}: model")  # its own form or the flat one
    refuse_special(path)
    check_model_description(cfg.model_dump(), f"{path.with_suffix('.json')}: model", path.stat().st_size)
    if expected is not None:
        diff = {k for k, v in expected.model_dump().items() if cfg.model_dump().get(k) != v}
        if diff:
            detail = ", ".join(f"{k}: checkpoint {getattr(cfg, k)!r} vs config {getattr(expected, k)!r}"
                               for k in sorted(diff))
            raise ResdomError(f"{path}: checkpoint does not match the config ({detail})")
    accepted = (fingerprint,) if isinstance(fingerprint, str) else fingerprint
    if accepted is not None and meta.get("data_fingerprint") not in (None, *accepted):
        raise ResdomError(
            f"{path}: checkpoint was trained on another data set (fingerprint {meta.get('data_fingerprint')}"
            f" vs {accepted[0]})"
        )
    model = model_to_load(cfg)
    state = read_safetensors(path, f"retrain (delete {path.parent / 'state'} and rerun `resdom train`) or re-import "
                                   "the run")
    state = fitted_weights(state, model.state_dict(), str(path), "weights do not fit the model in its sidecar")
    if WEIGHTS_KEY in meta and meta[WEIGHTS_KEY] != checkpoint_id(path):  # sidecars before it: not checked
        raise ResdomError(f"{path}: not the weights {path.with_suffix('.json').name} describes (checkpoint "
                          f"{checkpoint_id(path)}, the sidecar's {short(meta[WEIGHTS_KEY])}: a weights file of another "
                          "run or model copied in?); copy the run's own pair, or retrain or re-import the run")
    model.load_state_dict(state)
    model.eval()
    return model, meta


def read_config(path: Path) -> dict[str, Any]:
    """A run's ``config.json`` ({} where absent); a file that is not a JSON object is a ResdomError naming it."""
    if not path.exists():
        return {}
    fix = "the file is damaged: delete it (evaluate and diagnose do without it; resuming `resdom train` rewrites it)"
    refuse_special(path)
    try:
        config = load_json(path.read_bytes(), str(path), fix)
    except OSError as e:  # no permission, an I/O error: not a damaged file to delete
        raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None
    if not isinstance(config, dict):
        raise ResdomError(f"{path}: expected a JSON object, found {type(config).__name__}; {fix}")
    return config


@dataclass
class Run:
    """A trained run, loaded for evaluation or diagnosis."""

    directory: Path
    model: SequentialRecommender
    split: SplitData
    config: dict[str, Any]
    sidecar: dict[str, Any]
    checkpoint: str  # checkpoint_id of model.safetensors
    training: bool = False  # a trainer holds the run directory: the checkpoint is the best one *so far*
    interrupted: str | None = None  # "E of N": no trainer holds it, but its training stopped before it ended

    def training_note(self) -> str | None:
        """A one-line note for the user when the run is still training or its training was interrupted, else
        None."""
        so_far = f"these results are of its best checkpoint so far (epoch {self.sidecar.get('epoch', '?')}, " \
                 f"{self.checkpoint})"
        if self.training:
            return f"note: {self.directory} is still training; {so_far} and go stale when it improves"
        if self.interrupted:
            return (f"note: {self.directory}'s training was interrupted (epoch {self.interrupted} saved, no final "
                    f"metrics); {so_far}: the `resdom train` command that made it, run again, continues it")
        return None


def interrupted_at(files: RunDir) -> str | None:
    """``"E of N"`` where the run's resume state (``state/trainer.json``) says its training has not ended (it would
    hold how it stopped), else None: no state (an imported run, a state deleted), or one unreadable (the note is
    advice; ``resdom train`` is what reads it whole)."""
    try:
        if not files.state.is_file() or files.state.stat().st_size > 2**20:  # a FIFO, a crafted giant: no note
            return None
        state = json.loads(files.state.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(state, dict) or state.get("stopped") is not None or not isinstance(state.get("train"), dict):
        return None
    return f"{str(state.get('epoch'))[:20]} of {str(state['train'].get('epochs'))[:20]}"


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> Run:
    """Load a run directory's best model (eval mode, on ``device``), its split and its config."""
    files = RunDir(run_dir)
    run_dir = files.dir
    if not run_dir.is_dir():
        raise not_a_run_dir(run_dir)
    ckpt = files.model
    if not ckpt.exists():
        if SplitData.exists(run_dir) and (run_dir.parent / ckpt.name).is_file():
            raise ResdomError(f"{run_dir}: the data of the run {run_dir.parent}; give the run itself")
        if SplitData.exists(run_dir) and not files.config.exists():  # `data split`'s folder
            raise ResdomError(f"{run_dir}: a prepared split (resdom data split), not a run: train a model on it "
                              f"first (resdom train {run_dir} --out RUN), then give RUN")
        raise ResdomError(f"{run_dir}: no {ckpt.name} (has training finished at least one epoch?)")
    split = SplitData.load(files.data)
    if split.n_items != read_sidecar(ckpt)["model"].get("n_items"):
        raise ResdomError(f"{ckpt}: checkpoint item count does not match {files.data} ({split.n_items} items)")
    for attempt in range(3):  # a trainer may replace the best checkpoint meanwhile: the hash must be of what was loaded
        before = checkpoint_id(ckpt)
        try:
            model, meta = load_checkpoint(ckpt, fingerprint=data_fingerprints(split))
        except ResdomError:  # a pair read half before a trainer replaced it (its two renames): read the new pair
            if attempt < 2 and (checkpoint_id(ckpt) != before or is_locked(run_dir)):
                time.sleep(0.1)
                continue
            raise
        if checkpoint_id(ckpt) == before:
            break
    config = read_config(files.config)
    section = config.get("model")
    stated: dict[str, Any] = section if isinstance(section, dict) else {}
    own = meta["model"]  # as written beside the weights by the same resdom (no migration of older forms between)
    for key in sorted(stated):  # a hand-edited config.json, or another run's
        if key in own and stated[key] != own[key]:
            raise ResdomError(f"{files.config}: model.{key} is {short(stated[key])} but the checkpoint's "
                              f"{files.sidecar.name} says {short(own[key])}; the config is not of this checkpoint: "
                              "copy the run's own config.json, or retrain or re-import the run")
    training = is_locked(run_dir)
    with torch.inference_mode(False):  # moved to another device: ordinary tensors still (model_to_load)
        model = model.to(device)
    return Run(run_dir, model, split, config, meta, before, training=training,
               interrupted=None if training else interrupted_at(files))
