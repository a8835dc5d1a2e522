"""Recompute diagnostics of stored cells with the checkout's code, on the checkpoint each cell names.

    python scripts/rediagnose_cells.py --what hrli [CELL ...] [--store results] [--runs 'runs/repro*'] [--dry-run]
    python scripts/rediagnose_cells.py --what users     # only add the per-user evidence (users.npz) to old cells
    python scripts/rediagnose_cells.py --what recovery,users --stale CELL   # only if an older resdom read it

For when a diagnostic learns something new (e.g. hrli's rates per band of the last item's training frequency):
for every cell in the store (or each CELL folder given), the run directory under ``--runs``
(``<runs>/<data set>/<label>/seed<k>``) whose checkpoint is the one the cell names is diagnosed again
(``--what``, one torch thread) and the cell is exported again from it (``pipeline.store.export_cell``; its
compute recomputed by ``cell_compute``, so the diagnostics' seconds are those of the files now there). The
per-user evidence (``users``) is computed too wherever the run directory lacks one of its checkpoint, so every
cell diagnosed again also gains ``users.npz``. A cell without such a run directory is left as it is and named.
Then regenerate the documents (the command in docs/results.md) and commit the cells with them.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import torch

from resdom.diagnostics.recovery import OFFSETS_READ
from resdom.diagnostics.runner import USERS, parse_what, run_all
from resdom.pipeline.common import missing_diagnostics
from resdom.pipeline.reproduce import cell_compute
from resdom.pipeline.store import export_cell, store_cells
from resdom.runs import checkpoint_id


def identity_problem(meta: object) -> str | None:
    """Why a cell.json's (dataset, label, seed) cannot name a folder under the grid and the store (a data set or
    label that is not one plain folder name: ``..``, a path, empty; a seed that is not an integer), or None."""
    if not isinstance(meta, dict):
        return "its cell.json is not a JSON object"
    for key in ("dataset", "label"):
        value = meta.get(key)
        if not isinstance(value, str) or value in ("", ".", "..") or any(c in value for c in "/\\\0"):
            return f"its {key} {value!r} is not a plain folder name"
    seed = meta.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        return f"its seed {seed!r} is not a non-negative integer"
    if not isinstance(meta.get("checkpoint"), str):
        return "it names no checkpoint"
    return None


def run_dir_of(cell: Path, meta: dict, runs: str) -> Path | None:
    """The run directory holding the checkpoint ``meta`` names, under any folder matching ``runs`` (never a
    folder outside it: ``meta`` must pass ``identity_problem``, and a link out of the grid folder is not
    followed)."""
    if identity_problem(meta) is not None:
        return None
    for root in sorted(glob.glob(runs)):
        run = Path(root) / meta["dataset"] / meta["label"] / f"seed{meta['seed']}"
        if not run.resolve().is_relative_to(Path(root).resolve()):
            continue
        model = run / "model.safetensors"
        if model.is_file() and checkpoint_id(model) == meta["checkpoint"]:
            return run
    return None


def stale_reading(cell: Path) -> bool:
    """Whether the cell's stored diagnostics hold a reading an older resdom made differently from the checkout's:
    a query-token model's (config ``model.readout`` "query") recovery.json without ``offsets_read`` read its
    offsets from raw item columns, one column late (``resdom.diagnostics.recovery``: they are prefix passes now).
    An unreadable or absent file is not stale: it is named where the cell is read."""
    try:
        config = json.loads((cell / "config.json").read_text())
        recovery = json.loads((cell / "diagnostics" / "recovery.json").read_text())
    except (OSError, ValueError):
        return False
    model = config.get("model") if isinstance(config, dict) else None
    return (isinstance(model, dict) and model.get("readout") == "query" and isinstance(recovery, dict)
            and OFFSETS_READ not in recovery)


def cell_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments every script over stored cells takes: CELL folders, ``--store``, ``--runs``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("cells", nargs="*", type=Path, help="cell folders (default: every cell of --store)")
    ap.add_argument("--store", default="results")
    ap.add_argument("--runs", default="runs/repro*", help="glob of grid folders holding the cells' run directories")
    return ap


def load_with_stored(cell: Path, run: Path, diagnostic: str) -> tuple[Any, dict]:
    """The run's fitted model (``resdom.api.load_run`` on the CPU) and the cell's stored ``<diagnostic>.json``,
    refused (SystemExit naming both checkpoints) where that file is of another checkpoint than the run's."""
    from resdom.api import load_run

    fitted = load_run(run, device="cpu")
    stored = json.loads((cell / "diagnostics" / f"{diagnostic}.json").read_text())
    if stored.get("checkpoint") != fitted.checkpoint:
        raise SystemExit(f"{cell}: {diagnostic}.json is of checkpoint {stored.get('checkpoint')}, the run's is "
                         f"{fitted.checkpoint}")
    return fitted, stored


def keep_measurements(path: Path, what: str, script: str, args: argparse.Namespace, cells: dict) -> None:
    """Write a script's measurements of stored cells to ``path`` (JSON: what they are, the command that made them
    from ``args``' cells, runs and json, today's date, and ``cells``)."""
    command = [f"python scripts/{script}", *map(str, args.cells), f"--runs '{args.runs}'", f"--json {path}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"what": what, "command": " ".join(command), "measured": date.today().isoformat(),
                                "cells": cells}, indent=1) + "\n")


def cells_with_runs(cells: list[Path], runs: str) -> Iterator[tuple[Path, dict, Path]]:
    """(cell, its cell.json, the run directory with its checkpoint) for each cell; a cell without one is named on
    stderr and skipped."""
    for cell in cells:
        if not (cell / "cell.json").is_file():
            print(f"{cell}: skipped (not a results-store cell: no cell.json)", file=sys.stderr)
            continue
        try:
            meta = json.loads((cell / "cell.json").read_text())
        except (OSError, ValueError) as e:
            print(f"{cell}: skipped (cell.json unreadable: {e})", file=sys.stderr)
            continue
        problem = identity_problem(meta)
        if problem is not None:
            print(f"{cell}: skipped ({problem})", file=sys.stderr)
            continue
        run = run_dir_of(cell, meta, runs)
        if run is None:
            print(f"{cell}: skipped (no run directory with its checkpoint under {runs})", file=sys.stderr)
            continue
        yield cell, meta, run


def with_evidence(what: list[str], run: Path) -> list[str]:
    """``what``, plus ``users`` where the run directory lacks per-user evidence of its current checkpoint."""
    return what if USERS in what or USERS not in missing_diagnostics(run) else [*what, USERS]


def main() -> int:
    ap = cell_arguments(__doc__.splitlines()[0])
    ap.add_argument("--what", required=True, help="comma-separated diagnostics (resdom diagnose --what)")
    ap.add_argument("--dry-run", action="store_true", help="only say which cells would be diagnosed again")
    ap.add_argument("--stale", action="store_true",
                    help="only the cells whose stored reading an older resdom made differently (stale_reading)")
    args = ap.parse_args()
    asked = parse_what(args.what, with_users=True)
    torch.set_num_threads(1)
    cells = args.cells or store_cells(args.store)
    for cell, meta, run in cells_with_runs([c for c in cells if stale_reading(c)] if args.stale else cells,
                                           args.runs):
        what = with_evidence(asked, run)
        print(f"{cell}: {', '.join(what)} from {run}", flush=True)
        if args.dry_run:
            continue
        run_all(run, what=what, device="cpu", progress=False)
        export_cell(run, args.store, meta["dataset"], meta["label"], meta["seed"], compute=cell_compute(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
