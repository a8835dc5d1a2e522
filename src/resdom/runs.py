"""Run directories and checkpoints: safetensors weights plus a JSON sidecar; nothing pickled.

Layout of ``RUN_DIR`` (written by training, read by evaluate / diagnose / report)::

    config.json        resolved config: {"model": ModelConfig, "train": TrainConfig, "data": {...}}
    data/              the prepared split (arrays.npz + manifest.json), so a run is self-contained
    model.safetensors  best weights (by validation metric)
    model.json         sidecar: model config, data fingerprint, versions, epoch, metrics
    metrics.jsonl      one JSON line per epoch
    metrics.json       final metrics per split, with the number of evaluated users
    state/             resume state (last epoch's weights, optimiser, trainer state)
    diagnostics/       outputs of ``resdom diagnose``
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from resdom.data.sequences import SplitData
from resdom.errors import ResdomError
from resdom.io import atomic_write_json, is_locked, sha256_file
from resdom.models import SequentialRecommender, build_model
from resdom.models.config import ModelConfig

CHECKPOINT_FORMAT = "resdom-checkpoint/1"


def versions() -> dict[str, str]:
    import numpy

    import resdom

    return {"resdom": resdom.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version()}


def data_fingerprint(split: SplitData) -> str:
    """A short hash identifying a prepared split (its manifest and item count)."""
    blob = json.dumps({"manifest": split.manifest, "n_items": split.n_items}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def checkpoint_id(path: str | Path) -> str:
    """A content hash (16 hex digits of sha256) of a weights file: what every stored result names as the checkpoint
    it was computed on, so a result of an older model is never mistaken for one of the current model."""
    try:
        return sha256_file(path)[:16]
    except OSError as e:
        raise ResdomError(f"{path}: cannot read the checkpoint ({e.strerror})") from None


def save_checkpoint(path: str | Path, model: SequentialRecommender, extra: dict[str, Any] | None = None) -> None:
    """Write ``path`` (.safetensors) and its sidecar ``path.with_suffix('.json')``, each atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata={"format": CHECKPOINT_FORMAT})
    tmp.replace(path)
    sidecar = {"format": CHECKPOINT_FORMAT, "model": model.cfg.model_dump(), "versions": versions()}
    sidecar.update(extra or {})
    atomic_write_json(path.with_suffix(".json"), sidecar)


def read_sidecar(path: str | Path) -> dict[str, Any]:
    side = Path(path).with_suffix(".json")
    if not side.exists():
        raise ResdomError(f"{side}: checkpoint sidecar missing (expected beside {Path(path).name})")
    try:
        meta = json.loads(side.read_text())
    except json.JSONDecodeError as e:
        raise ResdomError(f"{side}: not valid JSON ({e})") from None
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ResdomError(f"{side}: not a resdom checkpoint (format {meta.get('format')!r})")
    return meta


def load_checkpoint(
    path: str | Path, expected: ModelConfig | None = None, fingerprint: str | None = None
) -> tuple[SequentialRecommender, dict[str, Any]]:
    """Build the model from the sidecar's config and load the weights; returns (model in eval mode, sidecar).

    ``expected``: the config the caller means to use; any architecture difference is an error naming the
    fields. ``fingerprint``: the data set the caller means to use (``data_fingerprint``).
    """
    path = Path(path)
    if not path.exists():
        raise ResdomError(f"{path}: checkpoint not found")
    meta = read_sidecar(path)
    cfg = ModelConfig(**meta["model"])
    if expected is not None:
        diff = {k for k, v in expected.model_dump().items() if cfg.model_dump().get(k) != v}
        if diff:
            detail = ", ".join(f"{k}: checkpoint {getattr(cfg, k)!r} vs config {getattr(expected, k)!r}"
                               for k in sorted(diff))
            raise ResdomError(f"{path}: checkpoint does not match the config ({detail})")
    if fingerprint is not None and meta.get("data_fingerprint") not in (None, fingerprint):
        raise ResdomError(
            f"{path}: checkpoint was trained on another data set (fingerprint {meta.get('data_fingerprint')}"
            f" vs {fingerprint})"
        )
    model = build_model(cfg)
    state = load_file(str(path))
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    bad = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or bad:
        parts = []
        if missing:
            parts.append(f"missing {missing[:3]}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:3]}")
        if bad:
            parts.append(f"shape mismatch {[(k, tuple(state[k].shape), tuple(own[k].shape)) for k in bad[:3]]}")
        raise ResdomError(f"{path}: weights do not fit the model in its sidecar ({'; '.join(parts)})")
    model.load_state_dict(state)
    model.eval()
    return model, meta


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

    def training_note(self) -> str | None:
        """A one-line note for the user when the run is still training, else None."""
        if not self.training:
            return None
        return (f"note: {self.directory} is still training; these results are of its best checkpoint so far "
                f"(epoch {self.sidecar.get('epoch', '?')}, {self.checkpoint}) and go stale when it improves")


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> Run:
    """Load a run directory's best model (eval mode, on ``device``), its split and its config."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ResdomError(f"{run_dir}: run directory not found")
    ckpt = run_dir / "model.safetensors"
    if not ckpt.exists():
        raise ResdomError(f"{run_dir}: no model.safetensors (has training finished at least one epoch?)")
    split = SplitData.load(run_dir / "data")
    if split.n_items != read_sidecar(ckpt)["model"].get("n_items"):
        raise ResdomError(f"{ckpt}: checkpoint item count does not match {run_dir / 'data'} ({split.n_items} items)")
    for _ in range(3):  # a trainer may replace the best checkpoint meanwhile: the hash must be of what was loaded
        before = checkpoint_id(ckpt)
        model, meta = load_checkpoint(ckpt, fingerprint=data_fingerprint(split))
        if checkpoint_id(ckpt) == before:
            break
    config_path = run_dir / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    return Run(run_dir, model.to(device), split, config, meta, before, training=is_locked(run_dir))
