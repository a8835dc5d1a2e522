"""The layout of a run directory: the one place that names its files (no torch here, so reports stay light).

    config.json        resolved config: {"model": ModelConfig, "train": TrainConfig, "data": {...}, "versions"}
    data/              the prepared split (SplitData.save: arrays.npz + manifest.json), so a run is self-contained
    model.safetensors  best weights (by validation metric); model.json its sidecar (config, fingerprint, epoch)
    metrics.jsonl      one JSON line per epoch
    metrics.json       final metrics per split, with the number of evaluated users and the checkpoint hash
    state/             resume state (state/trainer.json, the last epoch's weights and optimiser)
    diagnostics/       <name>.json (+ .csv) of ``resdom diagnose``, summary.json, and users.npz (the per-user
                       evidence, ``diagnostics.evidence``)
    error.txt          the message of a failed grid cell (pipeline.reproduce)
    .lock              held by the process training there

A results-store cell (``pipeline.store``) uses the same names for what it shares with a run directory, plus
``cell.json`` (identity, checkpoint, compute) and ``curve.jsonl`` (the epoch log), keeps the per-user evidence at
its top (``users.npz``, ``cell_users``), and holds no weights.
"""

from __future__ import annotations

from pathlib import Path


class RunDir:
    """Paths of one run directory."""

    def __init__(self, path: str | Path) -> None:
        self.dir = Path(path)
        self.config = self.dir / "config.json"
        self.data = self.dir / "data"
        self.model = self.dir / "model.safetensors"
        self.sidecar = self.model.with_suffix(".json")
        self.log = self.dir / "metrics.jsonl"
        self.final = self.dir / "metrics.json"
        self.state_dir = self.dir / "state"
        self.state = self.state_dir / "trainer.json"
        self.diagnostics = self.dir / "diagnostics"
        self.error = self.dir / "error.txt"
        self.lock = self.dir / ".lock"
        # a results-store cell only (pipeline.store): identity and compute, and the training curve
        self.cell = self.dir / "cell.json"
        self.curve = self.dir / "curve.jsonl"
        self.cell_users = self.dir / "users.npz"

    def diagnostic(self, name: str, suffix: str = ".json") -> Path:
        """``diagnostics/<name><suffix>`` (e.g. ``hrli.json``, ``mixing_per_position.csv``)."""
        return self.diagnostics / f"{name}{suffix}"

    @property
    def summary(self) -> Path:
        return self.diagnostic("summary")

    @property
    def users(self) -> Path:
        """``diagnostics/users.npz``: the per-user evidence of a run directory (a cell keeps it as ``cell_users``)."""
        return self.diagnostic("users", ".npz")

    def is_run(self) -> bool:
        """Whether the folder looks like a run directory or a results-store cell (a config or diagnostics)."""
        return self.config.is_file() or self.diagnostics.is_dir()
