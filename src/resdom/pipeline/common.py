"""Shared steps of the demo and the reproduction grid: resolve configs, train (resumably), diagnose, and record
a failure in the run directory."""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any

from resdom.data.sequences import SplitData
from resdom.diagnostics.evidence import read_header
from resdom.diagnostics.monitor import epoch_monitor
from resdom.diagnostics.registry import diagnostic_names
from resdom.diagnostics.runner import run_all, summarise
from resdom.distributed import resolve_device
from resdom.errors import ResdomError
from resdom.experiments import recipe_protocol
from resdom.io import atomic_write_json, atomic_write_text, directory_lock
from resdom.names import USERS
from resdom.rundir import RunDir, is_cell
from resdom.runs import checkpoint_id
from resdom.stored import CELL_SPLIT, cell_problem
from resdom.training.config import resolve_configs
from resdom.training.trainer import fit


def is_finished(run_dir: Path, epochs: int | None = None) -> bool:
    """True when the run has final metrics and diagnostics, both of the checkpoint now in ``run_dir`` (and, when
    ``epochs`` is given, was trained with that epoch budget)."""
    try:
        files = RunDir(run_dir)
        metrics = json.loads(files.final.read_text(encoding="utf-8"))
        summary = json.loads(files.summary.read_text(encoding="utf-8"))
        config = json.loads(files.config.read_text(encoding="utf-8"))
        current = checkpoint_id(files.model)
    except (OSError, ValueError, ResdomError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return False
    if not metrics.get("checkpoint") == summary.get("checkpoint") == current:
        return False  # computed on another checkpoint than the one now in the run directory
    if summary.get("split") != CELL_SPLIT:
        return False  # the diagnostics were last run on another split (`diagnose --part valid`): not the cell's
    return epochs is None or config.get("train", {}).get("epochs") == epochs


def train_and_diagnose(split: SplitData, model: str, run_dir: Path, *, source: str, protocol: str,
                       stats: dict[str, Any] | None = None, model_values: dict[str, Any] | None = None,
                       train_values: dict[str, Any] | None = None, device: str = "auto",
                       progress: bool = True, label: str | None = None) -> dict[str, Any]:
    """Train ``model`` on ``split`` into ``run_dir`` (resuming whatever is there), then run every diagnostic.

    ``label``: the name reports give the run (a ``experiments.MODEL_VARIANTS`` label; default ``model``).

    Returns ``{"metrics": <metrics.json>, "diagnostics": <summary.json>, "train_s", "diagnose_s"}``.
    """
    stats = stats if stats is not None else split.manifest.get("dataset", {})
    recipe = recipe_protocol(protocol, split.manifest.get("has_timestamps"))  # none: the measured protocol's
    model_cfg, train_cfg = resolve_configs(model, model_values, {"device": device, **(train_values or {})},
                                           source=source, n_items=split.n_items, protocol=recipe)
    t0 = time.perf_counter()
    metrics = fit(split, model_cfg, train_cfg, run_dir,
                  data_info={"source": source, "protocol": protocol, "stats": stats, "label": label or model},
                  progress=progress, hooks=(epoch_monitor,))
    t1 = time.perf_counter()

    missing = missing_diagnostics(run_dir)  # a resumed cell keeps what was computed on its current checkpoint
    summary = run_all(run_dir, what=missing, split="test", device=str(resolve_device(device)),
                      progress=progress) if missing else _resummarise(run_dir)
    t2 = time.perf_counter()
    RunDir(run_dir).error.unlink(missing_ok=True)
    return {"metrics": metrics, "diagnostics": summary, "train_s": t1 - t0, "diagnose_s": t2 - t1}


def missing_diagnostics(run_dir: Path) -> list[str]:
    """The registered diagnostics whose file in ``run_dir`` is absent, of another checkpoint or split or names
    none, and ``users`` where the per-user evidence (users.npz) is (``run_all``'s ``what`` names)."""
    files = RunDir(run_dir)
    current = checkpoint_id(files.model)
    missing = []
    for name in diagnostic_names():
        try:
            data = json.loads(files.diagnostic(name).read_text(encoding="utf-8"))
            ok = cell_problem(data, name, current) is None  # another split's or checkpoint's (or unnamed): redone
        except (OSError, ValueError, AttributeError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            ok = False
        if not ok:
            missing.append(name)
    if cell_problem(read_header(files.users) or {}, USERS, current) is not None:
        missing.append(USERS)
    return missing


def _resummarise(run_dir: Path) -> dict[str, Any]:
    """summary.json again from the diagnostics files of the current checkpoint (none is recomputed), under the
    diagnostics folder's lock as ``run_all`` writes it (a diagnose running there meanwhile is refused in one line,
    not left with a summary of files it is replacing)."""
    files = RunDir(run_dir)
    with directory_lock(files.diagnostics, "diagnosing", "stop it"):
        old: Any = {}
        try:
            old = json.loads(files.summary.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            pass
        summary = summarise(files.diagnostics, "test", checkpoint_id(files.model))
        if isinstance(old, dict) and old.get("checkpoint") == summary["checkpoint"] and "seconds" in old:
            summary["seconds"] = old["seconds"]
        atomic_write_json(files.summary, summary)  # computed from files of this very checkpoint: nothing stale
    return summary


def record_failure(run_dir: Path, error: BaseException) -> str:
    """Write ``run_dir/error.txt`` (one-line message, then the traceback; not into a results-store cell); returns
    the one-line message."""
    message = str(error) if isinstance(error, ResdomError) else f"{type(error).__name__}: {error}"
    message = " ".join(message.split()) or type(error).__name__
    detail = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if not is_cell(run_dir):  # a results-store cell where a run was expected: nothing written into its evidence
        atomic_write_text(RunDir(run_dir).error, f"{message}\n\n{detail}")
    return message
