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

import json
from pathlib import Path

from resdom.errors import ResdomError
from resdom.names import USERS


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
        return self.diagnostic(USERS, ".npz")

    def is_run(self) -> bool:
        """Whether the folder looks like a run directory or a results-store cell (a config or diagnostics)."""
        return self.config.is_file() or self.diagnostics.is_dir()


def _early_names() -> frozenset[str]:
    run = RunDir(".")
    return frozenset(p.name for p in (run.data, run.lock, run.error))


EARLY_NAMES = _early_names()  # what a run directory may hold before its config.json: the split, the lock, an error


def is_temporary(name: str) -> bool:
    """What an interrupted writer leaves (``resdom.io``'s ``.NAME.*.tmp`` and ``.tmp*``)."""
    return name.startswith(".") and (name.endswith(".tmp") or name.startswith(".tmp"))


def require_folder_path(path: str | Path, option: str = "--out") -> bool:
    """Whether the output folder ``path`` exists; a ResdomError naming ``option`` when it exists and is not a
    directory (a file: nothing would be written into it)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ResdomError(f"{option} {path}: exists and is not a directory (choose a folder name)")
    return path.exists()


def check_output_file(path: Path, option: str, first_line: str | tuple[str, ...], what: str) -> None:
    """Refuse ``path`` as an output file, in one line naming ``option``: a folder, a path through a file, or an
    existing file that is neither empty nor an earlier output of the same writer (its first line starts with
    ``first_line``, or one of them: a writer whose header changed names the old one too; ``what`` names such a
    file), so that no other file (the data, a list of ids, a config written by hand) is ever replaced."""
    heads = (first_line,) if isinstance(first_line, str) else tuple(first_line)
    if path.is_dir():
        raise ResdomError(f"{option} {path}: is a directory; give a file name")
    if any(p.exists() and not p.is_dir() for p in path.parents):
        raise ResdomError(f"{option} {path}: a folder on its path is a file")
    if not path.exists():
        return
    try:
        with path.open("rb") as f:
            first = f.readline(max(len(h.encode()) for h in heads) + 2)
    except OSError as e:
        raise ResdomError(f"{option} {path}: cannot be read ({e.strerror})") from None
    if first and not any(first.startswith(h.encode()) for h in heads):
        raise ResdomError(f"{option} {path}: exists and is not {what} (its first line does not begin "
                          f"'{heads[0]}'); choose another file name, or remove it first")


def first_names(names: list[str]) -> str:
    """The first three of ``names``, comma-separated, with ``...`` where there are more: what a refused folder holds."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def not_a_run_dir(path: Path) -> ResdomError:
    """The error for a run directory argument that is no directory: a file, or nothing at all."""
    return ResdomError(f"{path}: " + ("a file, not a run directory" if path.is_file() else "run directory not found"))


def _has_run_config(run: RunDir) -> bool:
    """Whether ``run.config`` is a resdom run's config.json (a JSON object with ``model`` and ``versions``)."""
    try:
        data = json.loads(run.config.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("model"), dict) and "versions" in data


def check_output_folder(path: str | Path, option: str = "--out", *, runs: bool, force: bool = False) -> None:
    """Refuse ``path`` as an output folder, with one line naming ``option``, when it cannot take the output.

    Refused: an existing file (or anything not a directory); a non-empty folder that is not a run directory
    (``runs=True``: a run is resumed / redone in place, but a folder of other files is never written into); with
    ``runs=False`` any non-empty folder unless ``force``, and even then one that is not a run directory (a writer
    that replaces a run removes its diagnostics/ and state/). A folder counts as a run when its config.json is a resdom
    run's (with ``model`` and ``versions``), or when it has no config.json and holds only what a run holds before
    writing one (``EARLY_NAMES``, a writer's temporaries); a folder of other files that happens to hold a
    ``config.json`` or ``metrics.json`` of its own does not."""
    path = Path(path)
    if not require_folder_path(path, option):
        return
    entries = sorted(p.name for p in path.iterdir())
    if not entries:
        return
    if not runs and not force:
        raise ResdomError(f"{path}: exists and is not empty (choose another {option}, or --force to overwrite)")
    if _has_run_config(RunDir(path)) or all(n in EARLY_NAMES or is_temporary(n) for n in entries):
        return
    others = [n for n in entries if n not in EARLY_NAMES and not is_temporary(n)]
    raise ResdomError(f"{option} {path}: exists, is not empty and is not a resdom run directory (it holds "
                      f"{first_names(others)}); choose another {option} or "
                      "an empty folder")

