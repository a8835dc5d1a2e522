"""Read run directories into plain records for tables and figures (no torch, no model loading).

A run's identity (data set, model, seed, protocol) comes from its ``config.json``
(``{"model": {"name"}, "train": {"seed"}, "data": {"source", "protocol"}}``); every key is optional and falls
back to something readable (the directory name). Diagnostics are the JSON files of docs/architecture.md
("Diagnostics output"); a missing file leaves that part of the report empty rather than failing.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resdom import names
from resdom.errors import ResdomError
from resdom.io import read_jsonl, sha256_file
from resdom.rundir import RunDir

DIAGNOSTICS = (*names.DIAGNOSTICS, "summary")


@dataclass
class RunRecord:
    """One run directory, read: identity, final metrics, diagnostics (each a dict, empty when absent)."""

    path: Path
    dataset: str
    model: str
    seed: int | None
    protocol: str | None
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, dict[str, Any]] = field(default_factory=dict)
    data_stats: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    stale: list[str] = field(default_factory=list)  # results left out: computed on another checkpoint
    cell: dict[str, Any] = field(default_factory=dict)  # a results-store cell's cell.json (compute, identity)
    curve: list[dict[str, Any]] = field(default_factory=list)  # the epoch log (metrics.jsonl / a cell's curve.jsonl)

    @property
    def label(self) -> str:
        """``dataset / model / seed k`` for legends and tables."""
        seed = f"seed {self.seed}" if self.seed is not None else self.path.name
        return f"{self.dataset} / {self.model} / {seed}"

    def diag(self, name: str) -> dict[str, Any]:
        return self.diagnostics.get(name, {})

    def test_metrics(self) -> dict[str, float]:
        """Final test metrics from ``metrics.json`` (tolerates ``{"test": {...}}`` and ``{"test": {"metrics"}}``),
        falling back to the unshuffled metrics of ``shuffle.json``."""
        test = self.metrics.get("test", {})
        if isinstance(test, dict) and isinstance(test.get("metrics"), dict):
            test = test["metrics"]
        if isinstance(test, dict) and any(k.startswith(("HR@", "NDCG@")) for k in test):
            return {k: v for k, v in test.items() if isinstance(v, (int, float))}
        return dict(self.diag("shuffle").get("original", {}))


def read_json(path: Path) -> dict[str, Any]:
    """Parse ``path``; a malformed file is a ResdomError naming it."""
    try:
        obj = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ResdomError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(obj, dict):
        raise ResdomError(f"{path}: expected a JSON object, found {type(obj).__name__}")
    return obj


def _maybe(path: Path) -> dict[str, Any]:
    return read_json(path) if path.is_file() else {}


def read_run(run_dir: str | Path) -> RunRecord:
    """Read one run directory. Raises ResdomError when it is not a directory or has nothing to report."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ResdomError(f"{run_dir}: run directory not found")
    files = RunDir(run_dir)
    config = _maybe(files.config)
    diagnostics = {name: _maybe(files.diagnostic(name)) for name in DIAGNOSTICS}
    metrics = _maybe(files.final)
    if not config and not metrics and not any(diagnostics.values()):
        raise ResdomError(f"{run_dir}: not a run directory (no config.json, metrics.json or diagnostics/)")
    stale = _drop_stale(run_dir, metrics, diagnostics)
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    seed = train.get("seed")
    error_path = files.error
    return RunRecord(
        path=run_dir,
        dataset=str(data.get("source") or data.get("name") or run_dir.parent.parent.name or "data"),
        model=str(config.get("label") or data.get("label") or model.get("name") or "model"),
        seed=int(seed) if isinstance(seed, (int, float)) else None,
        protocol=data.get("protocol"),
        config=config,
        metrics=metrics,
        diagnostics={k: v for k, v in diagnostics.items() if v},
        data_stats=_data_stats(data),
        error=error_path.read_text().strip() if error_path.is_file() else None,
        stale=stale,
        cell=_maybe(files.cell),
        curve=read_jsonl(files.curve if files.curve.is_file() else files.log),
    )


def _drop_stale(run_dir: Path, metrics: dict[str, Any], diagnostics: dict[str, dict[str, Any]]) -> list[str]:
    """Empty (in place) the results computed on another checkpoint than the run's ``model.safetensors``; returns
    their names. A run directory without weights (a results-store cell) is checked against ``metrics.json``'s
    checkpoint instead."""
    weights = RunDir(run_dir).model
    current = sha256_file(weights)[:16] if weights.is_file() else metrics.get("checkpoint")
    stale = []
    if metrics and weights.is_file() and metrics.get("checkpoint") != current:
        metrics.clear()
        stale.append("metrics")
    for name, d in diagnostics.items():
        if d and d.get("checkpoint") != current:
            d.clear()
            stale.append(name)
    return stale


def _data_stats(data: dict[str, Any]) -> dict[str, Any]:
    """``data.stats`` of config.json, else the statistics in the split manifest (``data.manifest.dataset``)."""
    for candidate in (data.get("stats"), (data.get("manifest") or {}).get("dataset")):
        if isinstance(candidate, dict) and candidate:
            return candidate
    return {}


def read_runs(run_dirs: list[str | Path]) -> list[RunRecord]:
    """Read several run directories (sorted by data set, model, seed); an empty list is a ResdomError."""
    if not run_dirs:
        raise ResdomError("no run directories given")
    runs = [read_run(d) for d in run_dirs]
    return sorted(runs, key=lambda r: (r.dataset, model_order(r.model), r.seed if r.seed is not None else -1,
                                       str(r.path)))


MODEL_ORDER = (names.MODELS[0], "sasrec-tts", *names.MODELS[1:])  # the paper's order, variants beside


def model_order(name: str) -> int:
    """Sort key: the paper's order SASRec (time-to-split's beside it), DuoRec, BSARec, the contrast models, then the
    remedy variants in their comparison's order (``training.config.REMEDY_LABELS``), then anything else."""
    order = _full_model_order()
    return order.index(name) if name in order else len(order)


@functools.cache
def _full_model_order() -> tuple[str, ...]:
    from resdom.training.config import REMEDY_LABELS  # imported here: it loads the models (torch)

    return (*MODEL_ORDER, *(label for label in REMEDY_LABELS if label not in MODEL_ORDER))


def find_run_dirs(root: str | Path) -> list[Path]:
    """Run directories below ``root`` (those holding config.json or diagnostics/), sorted; ``root`` itself if it is
    one."""
    root = Path(root)
    if RunDir(root).is_run():
        return [root]
    found = {p.parent for p in root.rglob(RunDir(".").config.name)} | {
        p.parent for p in root.rglob(RunDir(".").diagnostics.name) if p.is_dir()}
    return sorted(p for p in found if "summary" not in p.relative_to(root).parts)
