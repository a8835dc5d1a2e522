"""The results store: small, text-only records of finished reproduction cells, meant to be committed.

Layout (one cell = data set x model label x seed)::

    STORE/<dataset>/<label>/seed<k>/
        config.json      the run's resolved config (model, train, data without the bulky manifest parts) + "label"
        metrics.json     final valid / test metrics of the best checkpoint, best epoch, epochs run, how it stopped
        curve.jsonl      one line per epoch: loss, validation metrics, seconds (and the training monitor's numbers)
        cell.json        identity, checkpoint hash, compute (train / diagnose seconds, device, threads, CPU count and,
                         where the epochs recorded them (from 2026-12-07), the CPU models that trained them:
                         cpu_models), versions
        diagnostics/     every registered diagnostic's JSON (shuffle, hrli, mixing, alpha, recovery) and summary.json
        users.npz        the per-user evidence of the test split (``diagnostics.evidence``; <= 60 KB), where the
                         run has one

No weights, nothing pickled; every JSON (and users.npz's header) names the checkpoint it was computed on
(``resdom.runs.checkpoint_id``), so ``report.collect.read_run`` reads a cell like a run directory and leaves out
anything of another checkpoint.
A cell is exported only when the run is finished (its metrics and diagnostics are of the same checkpoint).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from resdom.diagnostics.evidence import read_header
from resdom.diagnostics.registry import diagnostic_names
from resdom.errors import ResdomError
from resdom.io import atomic_write_files, json_bytes
from resdom.limits import why_unread
from resdom.pipeline.common import is_finished
from resdom.report.collect import checkpoint_clash
from resdom.rundir import RunDir
from resdom.runs import checkpoint_id
from resdom.stored import cell_problem, curve_problem, metrics_problem

MAX_CELL_BYTES = 200_000
_MANIFEST_KEPT = ("dataset", "protocol", "quantile", "valid_quantile", "thresholds", "counts", "n_items", "n_users",
                  "tie_rule", "pool", "dropped_users")


def cell_dir(store: str | Path, dataset: str, label: str, seed: int) -> Path:
    return Path(store) / dataset / label / f"seed{seed}"


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ResdomError(f"{path}: cannot read it ({why_unread(e)})") from None


def _config_record(config: dict[str, Any], label: str) -> dict[str, Any]:
    data = dict(config.get("data", {}))
    manifest = data.pop("manifest", {}) or {}
    data["manifest"] = {k: manifest[k] for k in _MANIFEST_KEPT if k in manifest}
    source = manifest.get("source", {})
    if source:
        data["manifest"]["source"] = {k: source.get(k) for k in ("kind", "name", "format")} | {
            "files": [{k: f.get(k) for k in ("sha256", "upstream")} for f in source.get("files", [])]}
    return {"label": label, "model": config.get("model", {}), "train": config.get("train", {}), "data": data,
            "versions": config.get("versions", {})}


def run_curve(run: RunDir) -> list[dict[str, Any]]:
    """The epoch records of a finished run's ``metrics.jsonl``, checked as a cell's ``curve.jsonl`` is read
    (``stored.curve_problem``): a torn or damaged line, epochs repeated or out of order, a NaN loss is a ResdomError
    naming the file and line. It was copied into the store as it was, where the report then refused the cell's curve
    (or, in the grid's compute record, a JSONDecodeError naming no file)."""
    rows: list[Any] = []
    for line in run.log.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            rows.append(None)
    if problem := curve_problem(rows, str(run.log)):
        raise ResdomError(f"{problem}; the run's training curve is damaged: train the run anew (--force) to store it")
    return rows


def export_cell(run_dir: str | Path, store: str | Path, dataset: str, label: str, seed: int,
                compute: dict[str, Any] | None = None) -> Path:
    """Write the store record of the finished run ``run_dir``; returns the cell's folder.

    Refuses (ResdomError) a run whose metrics and diagnostics are not all of its current checkpoint, and a record
    over ``MAX_CELL_BYTES``. All files are written before the first is renamed into place.
    """
    run_dir = Path(run_dir)
    if not is_finished(run_dir):
        raise ResdomError(f"{run_dir}: not finished (final metrics and diagnostics of its current checkpoint are "
                          "needed before it can be stored)")
    run = RunDir(run_dir)
    checkpoint = checkpoint_id(run.model)
    metrics = _read(run.final)
    if problem := metrics_problem(metrics, str(run.final)):
        raise ResdomError(problem)
    config = _read(run.config)
    run_curve(run)  # checked: a torn or damaged line is refused here, not copied into the store
    curve = [line for line in run.log.read_text(encoding="utf-8").splitlines() if line.strip()]
    cell = RunDir(cell_dir(store, dataset, label, seed))
    files: dict[Path, bytes] = {
        cell.config: json_bytes(_config_record(config, label)),
        cell.final: json_bytes(metrics),
        cell.curve: ("\n".join(curve) + "\n").encode(),
        cell.cell: json_bytes({
            "dataset": dataset, "label": label, "model": config.get("model", {}).get("name"), "seed": seed,
            "checkpoint": checkpoint, "best_epoch": metrics.get("best_epoch"), "epochs_run": metrics.get("epochs_run"),
            "stopped": metrics.get("stopped"), "compute": compute or {}, "versions": config.get("versions", {}),
        }),
    }
    for name in (*diagnostic_names(), "summary"):
        path = run.diagnostic(name)
        if path.is_file():
            d = _read(path)
            # a cell's results are of the test split and the kept checkpoint, each file named as such: never a mix
            if problem := cell_problem(d, path.name, checkpoint, "model.safetensors"):
                raise ResdomError(f"{path}: {problem.removeprefix(path.name + ' ')}; rerun `resdom diagnose "
                                  "--part test` first")
            files[cell.diagnostic(name)] = json_bytes(d)

    if run.users.is_file():
        files[cell.cell_users] = _users_bytes(run.users, checkpoint)
    elif cell.cell_users.is_file() and (read_header(cell.cell_users) or {}).get("checkpoint") != checkpoint:
        cell.cell_users.unlink()  # an earlier checkpoint's evidence must not sit beside this one's record
    _check_unique(store, cell.dir, {"dataset": dataset, "label": label, "seed": seed}, checkpoint)
    size = sum(len(b) for b in files.values())
    if size > MAX_CELL_BYTES:
        raise ResdomError(f"{run_dir}: the store record would be {size:,} bytes (limit {MAX_CELL_BYTES:,})")
    atomic_write_files(files)
    return cell.dir


def _check_unique(store: str | Path, target: Path, identity: dict[str, Any], checkpoint: str) -> None:
    """A ResdomError when another cell of ``store`` names ``checkpoint`` but cannot be the same model as the cell
    ``identity`` (``report.collect.checkpoint_clash``: another data set, seed or trained model): a copied cell
    relabelled would count as one more."""
    for other in store_cells(store):
        if other.resolve() == target.resolve():
            continue
        try:
            theirs = json.loads(RunDir(other).cell.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # an unreadable cell is reported where it is read
        if not isinstance(theirs, dict) or theirs.get("checkpoint") != checkpoint:
            continue
        if checkpoint_clash(identity, theirs):
            raise ResdomError(f"{RunDir(other).cell}: names checkpoint {checkpoint} too (as {theirs.get('dataset')} / "
                              f"{theirs.get('label')} / seed {theirs.get('seed')}); one model cannot be both cells "
                              f"(a copied cell relabelled?), so {target} is not stored")


def _users_bytes(path: Path, checkpoint: str) -> bytes:
    """The bytes of the run's users.npz, refused (ResdomError) when it is unreadable or its header does not name the
    test split and ``checkpoint``."""
    header = read_header(path)
    if header is None:
        raise ResdomError(f"{path}: not a readable per-user evidence file; rerun `resdom diagnose --what users`")
    if problem := cell_problem(header, path.name, checkpoint, "model.safetensors"):
        raise ResdomError(f"{path}: {problem.removeprefix(path.name + ' ')}; rerun `resdom diagnose --what users` "
                          "first")
    return path.read_bytes()


def store_cells(store: str | Path) -> list[Path]:
    """The cell folders below ``store`` (those holding cell.json), sorted."""
    return sorted(p.parent for p in Path(store).rglob(RunDir(".").cell.name))


# ---------------------------------------------------------------------------------------------------------
# Generated blocks inside a hand-written document

_BLOCK = re.compile(r"(<!-- resdom:table (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /resdom:table -->)", re.S)


def fill_blocks(text: str, tables: dict[str, str], where: str = "document") -> str:
    """Replace the body of every ``<!-- resdom:table NAME -->`` ... ``<!-- /resdom:table -->`` block of ``text``
    with ``tables[NAME]``; a block naming an unknown table is a ResdomError."""
    def sub(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in tables:
            raise ResdomError(f"{where}: block names table {name!r}; known: {', '.join(sorted(tables))}")
        return m.group(1) + tables[name] + m.group(4)

    return _BLOCK.sub(sub, text)


_MARKER = re.compile(r"<!--\s*/?\s*resdom:table\b.*?-->")
_OPEN, _CLOSE = re.compile(r"<!-- resdom:table (?P<name>[\w-]+) -->"), "<!-- /resdom:table -->"


def check_blocks(text: str, known: Iterable[str], where: str = "document") -> None:
    """A ResdomError naming ``where`` and the line unless every block marker of ``text`` is well formed (each on a
    line of its own, ``<!-- resdom:table NAME -->`` then ``<!-- /resdom:table -->``, never nested) and names a
    table of ``known``: what ``fill_blocks`` would otherwise skip without a word or refuse half-way."""
    known = sorted(known)
    opened: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        for marker in _MARKER.findall(line):
            at = f"{where}:{number}"
            m = _OPEN.fullmatch(line)
            if line == _CLOSE:
                if opened is None:
                    raise ResdomError(f"{at}: a block end with no block open")
                opened = None
            elif m is None:
                raise ResdomError(f"{at}: malformed block marker {marker!r} (expected `<!-- resdom:table NAME -->` "
                                  "or `<!-- /resdom:table -->`, each on a line of its own)")
            elif opened is not None:
                raise ResdomError(f"{at}: block {m['name']!r} opens inside block {opened[1]!r} of line "
                                  f"{opened[0]}, which is not closed")
            elif m["name"] not in known:
                raise ResdomError(f"{at}: block names table {m['name']!r}; known: {', '.join(known)}")
            else:
                opened = (number, m["name"])
    if opened is not None:
        raise ResdomError(f"{where}:{opened[0]}: block {opened[1]!r} is never closed (no `{_CLOSE}` after it)")


def block_names(text: str) -> list[str]:
    return [m.group("name") for m in _BLOCK.finditer(text)]
