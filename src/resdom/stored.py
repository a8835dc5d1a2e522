"""Numbers read out of stored results (a diagnostic's ``to_dict()`` JSON, ``metrics.json``), torch-free: shared by
the report's tables (``report.values``) and the training monitor (``diagnostics.monitor``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from resdom.bounded import npy_array, open_zip, read_member
from resdom.errors import ResdomError


def number_at(d: Any, *path: str) -> float | None:
    """The number at ``d[path[0]][path[1]]...`` of a result's ``to_dict()``, or None where absent / not a number."""
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def seen_unseen(hrli: dict[str, Any]) -> dict[str, float | None]:
    """From ``hrli.json``'s ``by_frequency`` bands (the first band: last items never in training): the share of users
    whose last item never occurs in training (``unseen_share``), HRLI@1 over those (``HRLI@1_unseen``) and over the
    others (``HRLI@1_seen``, the user-weighted mean of the other bands); None where the bands are absent or empty."""
    out: dict[str, float | None] = {"unseen_share": None, "HRLI@1_unseen": None, "HRLI@1_seen": None}
    bands = hrli.get("by_frequency") if isinstance(hrli, dict) else None
    if not isinstance(bands, dict) or not bands:
        return out
    rows = [(number_at(b, "n_users") or 0, number_at(b, "values", "HRLI@1")) for b in bands.values()]
    (n_cold, cold), warm = rows[0], [(n, v) for n, v in rows[1:] if n]
    n_warm = sum(n for n, _ in warm)
    if n_cold + n_warm:
        out["unseen_share"] = n_cold / (n_cold + n_warm)
    out["HRLI@1_unseen"] = cold if n_cold else None
    if n_warm:
        out["HRLI@1_seen"] = sum(n * (v or 0.0) for n, v in warm) / n_warm
    return out


# ---------------------------------------------------------------------------------------------------------
# Checks of stored results on load (no silent mix of runs, checkpoints or splits): the report, the store and
# reproduce share them

CELL_SPLIT = "test"  # the split a run's or a cell's reported diagnostics describe
_RATES = ("HR@", "NDCG@", "MRR", "HRL", "HR_", "NDCG_", "Attn", "+Res", "+LN")  # names of values that are
# rates or ratios in [0, 1]: HR@K, ..., HRLI@K, HRL2I@K, the mixing ratio of each stage
_COUNTS = ("n_users", "best_epoch", "epochs_run", "recoverable", "n_seeds")
MAX_SECONDS = 366 * 24 * 3600  # a duration (a field ``seconds`` or ``*_seconds``) above a year is no measured one


def _cut(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def split_problem(data: dict[str, Any], file: str) -> str | None:
    """Why a diagnostic's JSON (or summary.json) ``data`` of ``file`` is not of the reported split
    (``CELL_SPLIT``): its ``split`` names another one, or none (every file resdom writes names its split, so a file
    that names none cannot be shown to be the test split's); None when it names that one."""
    if "split" not in data:
        return (f"{file} names no split (resdom's diagnostics name theirs; it cannot be shown to be the {CELL_SPLIT} "
                "split's)")
    split = data["split"]
    return None if split == CELL_SPLIT else f"{file} computed on the {_cut(split)} split, not {CELL_SPLIT}"


def checkpoint_problem(data: dict[str, Any], file: str, checkpoint: str | None, where: str = "the run") -> str | None:
    """Why a diagnostic's JSON (summary.json, metrics.json, users.npz's header) ``data`` of ``file`` is not of
    ``checkpoint``, the one ``where`` keeps: it names another checkpoint, or none while the run names one (a file
    written by hand or by another tool cannot be shown to be of the kept model); None when it names that one. A run
    that names no checkpoint at all (``checkpoint`` None: no weights, cell.json or metrics.json naming one, a folder
    made by hand) takes the files that name none either, and none that names one."""
    theirs = data.get("checkpoint")
    if theirs == checkpoint:
        return None
    if checkpoint is None:
        return f"{file} left out: nothing names {where}'s checkpoint"
    if theirs is None:
        return f"{file} names no checkpoint (it cannot be shown to be of {checkpoint}, the checkpoint of {where})"
    shown = theirs if isinstance(theirs, str) and len(theirs) <= 60 else _cut(theirs)
    return f"{file} computed on another checkpoint ({shown}, not {checkpoint} of {where})"


def cell_problem(data: dict[str, Any], file: str, checkpoint: str | None, where: str = "the run") -> str | None:
    """Why ``data`` of ``file`` (a diagnostic's JSON, summary.json or users.npz's header) is not one of a run's or a
    cell's results: not of ``checkpoint`` (``checkpoint_problem``), or not of the test split (``split_problem``);
    None when it names both."""
    return checkpoint_problem(data, file, checkpoint, where) or split_problem(data, file)


def users_header(path: str | Path) -> dict[str, Any] | None:
    """The header of the per-user evidence ``users.npz`` at ``path`` (``diagnostics.evidence``), read within the
    limits of ``resdom.limits``; None where it is absent or unreadable."""
    try:
        with open_zip(path) as z:
            header_npy = read_member(z, "header.npy", str(path), 1 << 20)
        header = json.loads(str(npy_array(header_npy, f"{path}:header.npy").item()))
    except (ResdomError, ValueError, RecursionError):
        return None
    return header if isinstance(header, dict) else None


def curve_problem(rows: list[Any], file: str) -> str | None:
    """Why ``rows`` (the lines of a cell's ``curve.jsonl``, one an epoch, each parsed or None where it is no JSON)
    cannot be read as its training curve: a line that is not a JSON object (torn or damaged), epochs that are not
    whole numbers in increasing order (one repeated or out of order), a loss that is not a finite non-negative
    number, or a value ``metrics_problem`` refuses (a NaN, a rate outside [0, 1], a negative duration);
    ``file:LINE: ...``. None when every row is in order."""
    last = 0
    for i, row in enumerate(rows, 1):
        where = f"{file}:{i}"
        if not isinstance(row, dict):
            return f"{where}: not a JSON object (a torn or damaged line)"
        epoch, loss = row.get("epoch"), row.get("loss")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch <= last:
            return (f"{where}: field epoch is {_cut(epoch)} after epoch {last}; epochs must be whole numbers in "
                    "increasing order")
        last = epoch
        if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool)
                                 or not math.isfinite(loss) or loss < 0):
            return f"{where}: field loss is {_cut(loss)}; a loss must be a finite non-negative number"
        if problem := metrics_problem(row, where):
            return problem
    return None


def metrics_problem(metrics: Any, file: str = "metrics.json", diagnostic: bool = False) -> str | None:
    """Why ``metrics`` (a metrics.json's content, or with ``diagnostic`` a diagnostic's JSON) cannot be read as
    numbers: a value that is not finite (NaN, infinity) anywhere, a rate (HR@K, NDCG@K, MRR, HRLI@K) outside [0, 1] or
    not a number, a count (n_users, best_epoch, epochs_run, recoverable, n_seeds) that is not a non-negative integer,
    a duration (``seconds``, ``*_seconds``: a cell's train_seconds) negative or above a year (``MAX_SECONDS``);
    ``file: field A.B is V (...)``, the value cut to a readable length. In a diagnostic's JSON a rate may be null (a
    band without users), and what lies under a key naming a change (``relative_change``, ``shuffle_NDCG@10_change``)
    is a relative change, no rate. None when every value is in range."""
    def walk(value: Any, at: str, rates: bool = True) -> str | None:
        if isinstance(value, dict):
            for key, v in value.items():
                found = walk(v, f"{at}.{key}" if at else str(key), rates and not (diagnostic and "change" in str(key)))
                if found:
                    return found
            return None
        if isinstance(value, list):
            for i, v in enumerate(value):
                found = walk(v, f"{at}[{i}]", rates)
                if found:
                    return found
            return None
        name = at.rsplit(".", 1)[-1]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and not math.isfinite(value):
            return f"{file}: field {at} is {_cut(value)}, not a finite number"
        blank = diagnostic and value is None
        if rates and name.startswith(_RATES) and not blank and (not number or not 0 <= value <= 1):
            return f"{file}: field {at} is {_cut(value)}; a rate must be a number in [0, 1]"
        if name in _COUNTS and value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                                      or value < 0):
            return f"{file}: field {at} is {_cut(value)}; it must be a non-negative integer"
        duration = any(part == "seconds" or part.endswith("_seconds") for part in at.split("."))
        if duration and value is not None and (not number or not 0 <= value <= MAX_SECONDS):
            return f"{file}: field {at} is {_cut(value)}; a duration must be seconds in [0, {MAX_SECONDS:,}]"
        return None

    if not isinstance(metrics, dict):
        return f"{file}: expected a JSON object, found {type(metrics).__name__}"
    return walk(metrics, "")
