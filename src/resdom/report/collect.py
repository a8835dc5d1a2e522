"""Read run directories into plain records for tables and figures (no torch, no model loading).

A run's identity (data set, model label, seed) comes from one place, ``run_identity``: a results-store cell's
``cell.json``, else the run's ``config.json`` (``{"data": {"source", "label"}, "model": {"name"}, "train":
{"seed"}}``; every key optional, falling back to something readable such as the directory name; a run trained on
a split folder is named after the split's source, ``dataset_name``). Diagnostics are
the JSON files of docs/architecture.md ("Diagnostics output"); a missing file leaves that part of the report empty
rather than failing, and ``RunRecord.problems`` says why a part is empty ("metrics.json missing", "hrli.json
computed on another checkpoint ...").
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from resdom import names
from resdom.errors import ResdomError
from resdom.experiments import (
    NAMED_VARIANTS,
    RECIPE_VERSIONS,
    REMEDY_LABELS,
    TRAINING_VARIANTS,
    recipe_version,
    shares_runs,
)
from resdom.io import read_jsonl, sha256_file
from resdom.limits import short
from resdom.names import USERS
from resdom.records import older_reading
from resdom.rundir import RunDir, not_a_run_dir
from resdom.stored import (
    cell_problem,
    checkpoint_problem,
    curve_problem,
    metrics_problem,
    users_header,
)


def users_file(folder: str | Path) -> Path:
    """A run's per-user evidence: ``users.npz`` at the top of a results-store cell, else ``diagnostics/users.npz``
    of a run directory (where ``resdom diagnose`` writes it)."""
    top = Path(folder) / "users.npz"
    return top if top.is_file() else Path(folder) / "diagnostics" / "users.npz"


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
    stale: list[str] = field(default_factory=list)  # results left out: of another checkpoint or split
    problems: dict[str, str] = field(default_factory=dict)  # part ("metrics", a diagnostic) -> why it is empty
    cell: dict[str, Any] = field(default_factory=dict)  # a results-store cell's cell.json (compute, identity)
    curve: list[dict[str, Any]] = field(default_factory=list)  # the epoch log (metrics.jsonl / a cell's curve.jsonl)

    @cached_property
    def users_path(self) -> Path | None:
        """The run's per-user evidence, where it is of the test split and the kept checkpoint (``usable_users``)."""
        return usable_users(self.path)

    @property
    def label(self) -> str:
        """``dataset / model / seed k`` for legends and tables."""
        seed = f"seed {self.seed}" if self.seed is not None else self.path.name
        return f"{self.dataset} / {self.model} / {seed}"

    def diag(self, name: str) -> dict[str, Any]:
        return self.diagnostics.get(name, {})

    def why_empty(self, part: str) -> str:
        """Why ``part`` ("metrics" or a diagnostic's name) holds no numbers: its entry of ``problems``, else that its
        file is missing or holds none."""
        if part in self.problems:
            return self.problems[part]
        file = file_name(part)
        if part == "cell" and self.cell:
            return f"{file} holds no such number"
        return f"{file} holds no such number" if part == "metrics" or part in self.diagnostics else f"{file} missing"

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
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except json.JSONDecodeError as e:
        raise ResdomError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    except UnicodeDecodeError:
        raise ResdomError(f"{path}: not valid JSON (not UTF-8 text)") from None
    except OSError as e:
        raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None
    if not isinstance(obj, dict):
        raise ResdomError(f"{path}: expected a JSON object, found {type(obj).__name__}")
    return obj


def _maybe(path: Path) -> dict[str, Any]:
    return read_json(path) if path.is_file() else {}


def file_name(part: str) -> str:
    """The file of ``part``: metrics.json, or a diagnostic's ``<name>.json`` (``RunDir.diagnostic``)."""
    return "metrics.json" if part == "metrics" else f"{part}.json"


def read_diagnostics(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Every diagnostic's JSON file of ``run_dir`` (``diagnostics/<name>.json``, whatever diagnostics wrote them)
    by name, in name order, ``summary`` last."""
    folder = RunDir(run_dir).diagnostics
    paths = sorted(folder.glob("*.json"), key=lambda p: (p.stem == "summary", p.stem)) if folder.is_dir() else []
    return {p.stem: read_json(p) for p in paths if not p.name.startswith(".")}


def _section(d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d[key]`` where it is an object, else {} (a section of a JSON file that may be missing or malformed)."""
    value = d.get(key)
    return value if isinstance(value, dict) else {}


def dataset_name(data: dict[str, Any]) -> str | None:
    """The data set a run's ``config.json`` ``data`` section names: for a run trained on a split folder saved by
    ``resdom data split`` (``data.prepared_split`` set, ``data.source`` the folder) the source the split was made
    from (its manifest's ``source.name``, e.g. ``shop.csv``), else ``data.source`` (or ``data.name``); None where
    none is given."""
    source = _section(_section(data, "manifest"), "source")
    name = source.get("name")
    if data.get("prepared_split") and isinstance(name, str) and name:
        return name
    name = data.get("source") or data.get("name")
    return str(name) if name else None


def run_identity(run_dir: Path, config: dict[str, Any], cell: dict[str, Any]) -> tuple[str, str, int | None]:
    """(data set, model label, seed) of a run, the one place the report takes them from: a results-store cell's
    ``cell.json`` (the grid's cell, as the store wrote it), else ``config.json`` (``data.source``, ``data.label``
    (a grid label such as ``sasrec-tts``) or ``model.name``, ``train.seed``; the data set by ``dataset_name``). A
    label that config.json gives otherwise than cell.json is a ResdomError naming both files."""
    model, train, data = _section(config, "model"), _section(config, "train"), _section(config, "data")
    labels = {str(x) for x in (config.get("label"), data.get("label")) if x}
    if cell:
        dataset, label, seed = cell.get("dataset"), cell.get("label"), cell.get("seed")
        if not isinstance(dataset, str) or not isinstance(label, str) or not isinstance(seed, int):
            raise ResdomError(f"{RunDir(run_dir).cell}: needs \"dataset\", \"label\" (strings) and \"seed\" (an "
                              "integer)")
        if labels - {label}:
            raise ResdomError(f"{RunDir(run_dir).config}: label {sorted(labels - {label})[0]!r}, but "
                              f"{RunDir(run_dir).cell} says {label!r}")
        return dataset, label, seed
    if len(labels) > 1:
        raise ResdomError(f"{RunDir(run_dir).config}: two labels, {' and '.join(map(repr, sorted(labels)))}")
    seed = train.get("seed")
    return (dataset_name(data) or run_dir.parent.parent.name or "data",
            str(next(iter(labels), None) or model.get("name") or "model"),
            int(seed) if isinstance(seed, (int, float)) and not isinstance(seed, bool) else None)


def read_run(run_dir: str | Path) -> RunRecord:
    """Read one run directory. Raises ResdomError when it is not a directory or has nothing to report."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise not_a_run_dir(run_dir)
    files = RunDir(run_dir)
    config = _maybe(files.config)
    diagnostics = read_diagnostics(run_dir)
    metrics = _maybe(files.final)
    if not config and not metrics and not any(diagnostics.values()):
        raise ResdomError(f"{run_dir}: not a run directory (no config.json, metrics.json or diagnostics/)")
    if metrics and (problem := metrics_problem(metrics, str(files.final))):
        raise ResdomError(problem)  # a NaN or a hit rate of 7.5 never enters a table as a number
    for name, d in diagnostics.items():  # nor an HRLI@1 of 1e308 or -0.5 a figure
        if d and (problem := metrics_problem(d, str(files.diagnostic(name)), diagnostic=True)):
            raise ResdomError(problem)
    cell = _maybe(files.cell)
    problems = {part: f"{file_name(part)} {'missing' if part == 'metrics' else 'empty'}"
                for part, d in [("metrics", metrics), *diagnostics.items()] if not d}
    if "compute" in cell and not isinstance(cell["compute"], dict):
        problems["cell"] = f"{files.cell}: field compute is {short(cell['compute'], 80)}, not an object"
    elif cell and (problem := metrics_problem(cell, str(files.cell))):
        raise ResdomError(problem)  # a NaN train_seconds never enters the cost table as a number
    stale = _drop_stale(run_dir, metrics, diagnostics, cell, problems)
    if why := users_problem(run_dir):  # another model's or split's per-user evidence: never this run's
        problems[USERS], stale = why, [*stale, USERS]
    dataset, label, seed = run_identity(run_dir, config, cell)
    data = _section(config, "data")
    error_path = files.error
    return RunRecord(
        path=run_dir,
        dataset=dataset,
        model=label,
        seed=seed,
        protocol=data.get("protocol"),
        config=config,
        metrics=metrics,
        diagnostics={k: v for k, v in diagnostics.items() if v},
        data_stats=_data_stats(data),
        error=error_path.read_text(encoding="utf-8", errors="replace").strip() if error_path.is_file() else None,
        stale=stale,
        problems=problems,
        cell=cell,
        curve=read_cell_curve(files.curve) if files.curve.is_file() else read_jsonl(files.log),
    )


def read_cell_curve(path: Path) -> list[dict[str, Any]]:
    """The rows of a cell's ``curve.jsonl``, one an epoch; a torn or damaged line, epochs out of order or repeated,
    a NaN, negative or non-numeric loss (``stored.curve_problem``) is a ResdomError naming the file and line (a run's
    own metrics.jsonl, which a kill may leave torn, is read by ``io.read_jsonl``)."""
    rows: list[Any] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            rows.append(None)
    if problem := curve_problem(rows, str(path)):
        raise ResdomError(problem)
    return rows


def kept_checkpoint(run_dir: Path, cell: dict[str, Any], metrics: dict[str, Any]) -> tuple[str | None, str]:
    """The checkpoint of a run or a cell and the file that names it: that of its ``model.safetensors``, or for a
    results-store cell (no weights) the one its ``cell.json`` names, else the one ``metrics.json`` names (None:
    none of them)."""
    weights = RunDir(run_dir).model
    if weights.is_file():
        return sha256_file(weights)[:16], "model.safetensors"
    if cell.get("checkpoint"):
        return cell["checkpoint"], "cell.json"
    named = metrics.get("checkpoint")
    return (named if isinstance(named, str) and named else None), "metrics.json"


def _drop_stale(run_dir: Path, metrics: dict[str, Any], diagnostics: dict[str, dict[str, Any]],
                cell: dict[str, Any], problems: dict[str, str]) -> list[str]:
    """Empty (in place) the results that are not of the run's kept checkpoint (``kept_checkpoint``) and, for a
    diagnostic, of the test split, each file naming both (``stored.cell_problem``); returns their names and writes
    why into ``problems``."""
    current, where = kept_checkpoint(run_dir, cell, metrics)
    stale = []

    def problem(file: str, data: dict[str, Any], split: bool) -> str | None:
        if current is None and data.get("checkpoint") is not None:
            return (f"{file} left out: nothing names the run's checkpoint (no model.safetensors, cell.json or "
                    "metrics.json)")
        return (cell_problem if split else checkpoint_problem)(data, file, current, where)

    if metrics and (why := problem("metrics.json", metrics, split=False)):
        problems["metrics"] = why
        metrics.clear()
        stale.append("metrics")
    for name, d in diagnostics.items():
        if d and (why := problem(f"{name}.json", d, split=True)):  # a valid-split run's file: never mixed in
            problems[name] = why
            d.clear()
            stale.append(name)
    return stale


def usable_users(run_dir: str | Path) -> Path | None:
    """The run's or the cell's per-user evidence (``users_file``) where its header names the test split and the
    kept checkpoint (``kept_checkpoint``); None where there is none, or it is of another split or checkpoint (or
    names none), so that no table or test reads another model's users as this one's (``users_problem`` says why)."""
    return None if users_problem(run_dir) else (users_file(run_dir) if users_file(run_dir).is_file() else None)


def users_problem(run_dir: str | Path) -> str | None:
    """Why the run's ``users.npz`` is not its evidence (``usable_users``): unreadable, or not of the test split and
    the kept checkpoint; None where it is (or there is none)."""
    run_dir = Path(run_dir)
    path = users_file(run_dir)
    if not path.is_file():
        return None
    header = users_header(path)
    if header is None:
        return f"{path.name} left out: its header cannot be read"
    files = RunDir(run_dir)
    cell = _maybe_object(files.cell)
    current, where = kept_checkpoint(run_dir, cell, _maybe_object(files.final))
    return cell_problem(header, path.name, current, where)


def _maybe_object(path: Path) -> dict[str, Any]:
    """The JSON object at ``path``; {} where it is absent or no readable object (``read_run`` says why)."""
    try:
        return read_json(path) if path.is_file() else {}
    except ResdomError:
        return {}


def _data_stats(data: dict[str, Any]) -> dict[str, Any]:
    """``data.stats`` of config.json, else the statistics in the split manifest (``data.manifest.dataset``)."""
    for candidate in (data.get("stats"), (data.get("manifest") or {}).get("dataset")):
        if isinstance(candidate, dict) and candidate:
            return candidate
    return {}


def read_runs(run_dirs: Sequence[str | Path]) -> list[RunRecord]:
    """Read several run directories (sorted by data set, model, seed); a folder given twice (under two spellings,
    ``runs/a`` and ``/abs/runs/a``, or through a link: ``same_folders``) is read once; an empty list, and two runs
    of the same (data set, label, seed), are ResdomErrors (the second would be averaged as another seed)."""
    if not run_dirs:
        raise ResdomError("no run directories given")
    runs = _split_apart([read_run(d) for d in same_folders(run_dirs)])
    seen: dict[tuple[str, str, int], RunRecord] = {}
    for r in runs:
        if r.seed is None:
            continue
        other = seen.setdefault((r.dataset, r.model, r.seed), r)
        if other is not r:
            raise ResdomError(f"{other.path} and {r.path} are both {r.label}: report one of them (a results-store "
                              "cell and the run directory it was exported from, say)")
    check_checkpoints(runs)
    return sorted(runs, key=lambda r: (r.dataset, model_order(r.model), r.seed if r.seed is not None else -1,
                                       str(r.path)))


def same_folders(paths: Sequence[str | Path]) -> list[Path]:
    """``paths`` in order, each folder once: one given again under another spelling (relative and absolute, with
    ``..``, a trailing slash or through a symbolic link) is dropped, so that a run is never counted as two seeds (a
    run without a seed) or refused as its own duplicate."""
    seen: set[Path] = set()
    out = []
    for p in map(Path, paths):
        try:
            key = p.resolve()
        except (OSError, RuntimeError):  # a loop of links: read_run says what is wrong with it
            key = p.absolute()
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


@dataclass(frozen=True)
class _Split:
    """What a run's numbers depend on besides its model: the split's protocol, quantile (gts), whether seen items
    are filtered at evaluation (a split's ``evaluation.filter_seen``; absent: filtered), the data it was made
    from (the sha256 of its source files, DataFrame or synthetic configuration; None where not recorded) and how
    that data was preprocessed (the manifest's ``preprocessing.config``, e.g. ``k_core``; None where not
    recorded): a 10-core and an unfiltered split of one file are other users and items."""

    protocol: str | None
    quantile: float | None
    filter_seen: bool
    data: str | None
    preprocessing: tuple[tuple[str, str], ...] | None = None


def _split_of(run: RunRecord) -> _Split:
    """The split a run was trained and evaluated on, from its config.json."""
    data = _section(run.config, "data")
    manifest = _section(data, "manifest")
    quantile = manifest.get("quantile", data.get("quantile"))
    source = _section(manifest, "source")
    files = source.get("files")
    found = [f.get("sha256") for f in files if isinstance(f, dict)] if isinstance(files, list) \
        else [source.get("sha256")]
    digests = [d for d in found if isinstance(d, str) and d]
    steps = _section(_section(manifest, "preprocessing"), "config")
    return _Split(run.protocol,
                  float(quantile) if run.protocol == "gts" and isinstance(quantile, (int, float)) else None,
                  _section(manifest, "evaluation").get("filter_seen", True) is not False,
                  hashlib.sha256("\n".join(digests).encode()).hexdigest()[:8] if digests else None,
                  tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in steps.items())) if steps else None)


def _recipe_of(run: RunRecord) -> str:
    """The training recipe a run trained by: the one it records (``versions.recipe``; a run from before recipes were
    recorded trained its model's first), or an earlier one where no later version changed what its configuration
    trains (``experiments.recipe_label``: a query-LN ``sasrec`` run recorded ``sasrec/2`` trains as ``sasrec/1``)."""
    model = _section(run.config, "model")
    name = str(model.get("name") or run.model)
    recorded = f"{name}/1"
    for source in (run.cell, run.config):
        recipe = _section(source, "versions").get("recipe")
        if isinstance(recipe, str) and recipe:
            recorded = recipe
            break
    owner, _, version = recorded.rpartition("/")
    if owner != name or name not in RECIPE_VERSIONS or not version.isdigit():
        return recorded
    return f"{name}/{min(int(version), recipe_version(name, {**_section(run.config, 'train'), **model}))}"


def _split_apart(runs: list[RunRecord]) -> list[RunRecord]:
    """``runs`` with the data set of each run named with its split where runs of one data set were split in
    different ways (``toyA (loo)``, ``toyA (gts)``; ``toyA (gts 0.8)`` where only the quantile differs; ``toyA (gts,
    seen kept)`` beside a run that filters seen items; ``toyA (gts, data 1a2b3c4d)`` where the data file differs: the
    first 8 hex digits of its sha256), and the model of each run named with its training recipe where runs of one
    data set and label were trained by different recipes (``sasrec (recipe sasrec/1)``): their numbers are not seeds
    of one row (a loo and a gts seed were averaged as two seeds, and so were a seed of each recipe). A run that
    does not record its data is told apart by its data only from runs that record two versions of it."""
    groups: dict[str, list[_Split]] = {}
    splits = [_split_of(r) for r in runs]
    for r, split in zip(runs, splits):
        groups.setdefault(r.dataset, []).append(split)
    for r, split in zip(runs, splits):
        kinds = groups[r.dataset]
        datas = {k.data for k in kinds if k.data is not None}
        preps = {k.preprocessing for k in kinds if k.preprocessing is not None}
        if len({(k.protocol, k.quantile, k.filter_seen) for k in kinds}) == 1 and len(datas) <= 1 and len(preps) <= 1:
            continue
        parts = [split.protocol or "split not recorded"]
        if split.quantile is not None and len({k.quantile for k in kinds if k.protocol == split.protocol}) > 1:
            parts[0] += f" {split.quantile:g}"
        if not split.filter_seen and len({k.filter_seen for k in kinds}) > 1:
            parts.append("seen kept")
        if len(datas) > 1:
            parts.append(f"data {split.data}" if split.data else "data not recorded")
        if len(preps) > 1:  # the settings that differ between the splits, as the manifest records them
            shared = set.intersection(*(set(p) for p in preps)) if preps else set()
            differ = sorted({key for p in preps for key, value in p if (key, value) not in shared})
            mine = {key: "none" if value == "null" else value for key, value in split.preprocessing or ()}
            parts.append(", ".join(f"{key} {mine.get(key, 'not recorded')}" for key in differ)
                         if split.preprocessing else "preprocessing not recorded")
        r.dataset = f"{r.dataset} ({', '.join(parts)})"
    recipes: dict[tuple[str, str], set[str]] = {}
    for r in runs:
        recipes.setdefault((r.dataset, r.model), set()).add(_recipe_of(r))
    for r in runs:
        if len(recipes[(r.dataset, r.model)]) > 1:
            r.model = f"{r.model} (recipe {_recipe_of(r)})"
    return runs


def run_checkpoint(run: RunRecord) -> str | None:
    """The checkpoint a run's results name: its cell.json's, else its metrics.json's (None: neither names one)."""
    named = run.cell.get("checkpoint") or run.metrics.get("checkpoint")
    return named if isinstance(named, str) and named else None


def checkpoint_clash(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two runs or cells (``dataset``, ``label``, ``seed``) that name one checkpoint cannot both be real. A
    model is trained on one data set from one seed, so two data sets or two seeds never share it; two labels of one
    data set and seed share it only when both train the same run and differ in when it stops (``trained_run``:
    sasrec-p30 where patience 30 never ran out is sasrec's run). Anything else is a copied cell relabelled as
    another seed, data set or model, which would be counted as one more."""
    return (a.get("dataset") != b.get("dataset") or a.get("seed") != b.get("seed")
            or trained_run(str(a.get("label"))) != trained_run(str(b.get("label"))))


def trained_run(label: str) -> str:
    """The label whose run ``label``'s trains, seed for seed: its base for a ``TRAINING_VARIANTS`` label that
    sets only when training stops (``experiments.shares_runs``), else ``label`` itself."""
    base = TRAINING_VARIANTS[label][0] if label in TRAINING_VARIANTS else label
    return base if shares_runs(label, base) else label


def check_checkpoints(runs: list[RunRecord]) -> None:
    """A ResdomError naming both when two runs name one checkpoint that cannot be one model's (``checkpoint_clash``:
    another data set, seed or trained model)."""
    by_checkpoint: dict[str, list[RunRecord]] = {}
    for r in runs:
        checkpoint = run_checkpoint(r)
        if checkpoint is not None:
            by_checkpoint.setdefault(checkpoint, []).append(r)
    for checkpoint, group in by_checkpoint.items():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if checkpoint_clash(*({"dataset": x.dataset, "label": x.model, "seed": x.seed} for x in (a, b))):
                    raise ResdomError(f"{a.path} and {b.path} name one checkpoint ({checkpoint}) as {a.label} and "
                                      f"{b.label}: one model cannot be both (a copied cell relabelled?); report "
                                      "one of them")


# the paper's order SASRec, DuoRec, BSARec, the contrast models (``names.MODELS``), each with its named reference
# variants beside it (time-to-split's SASRec after SASRec: ``experiments.NAMED_VARIANTS``, then its training variants:
# ``TRAINING_VARIANTS``), then the remedy variants in their comparison's order (``experiments.REMEDY_LABELS``)
MODEL_ORDER: tuple[str, ...] = tuple(label for model in names.MODELS for label in (
    model, *(named for named, (base, _) in {**NAMED_VARIANTS, **TRAINING_VARIANTS}.items() if base == model)))
FULL_MODEL_ORDER: tuple[str, ...] = (*MODEL_ORDER, *(label for label in REMEDY_LABELS if label not in MODEL_ORDER))


def model_order(name: str) -> tuple[int, str]:
    """Sort key of a model label: its place in ``FULL_MODEL_ORDER``, anything else after, ties by name (so an order
    never depends on the order of a set or of the folders read)."""
    return (FULL_MODEL_ORDER.index(name) if name in FULL_MODEL_ORDER else len(FULL_MODEL_ORDER)), name


def left_out(runs: list[RunRecord]) -> dict[Path, dict[str, str]]:
    """Per run (by path), what the report leaves out of it and why: results of another checkpoint, a missing
    metrics.json, and a diagnostic that other runs of the same (data set, model) have but this one lacks (a model
    without attention blocks has no mixing or alpha files in any run: not named): ``{path: {part: cause}}``."""
    present: dict[tuple[str, str], set[str]] = {}
    for r in runs:
        present.setdefault((r.dataset, r.model), set()).update(r.diagnostics)
    out: dict[Path, dict[str, str]] = {}
    for r in runs:
        parts = ["metrics"] if "metrics" in r.problems else []
        parts += sorted({*r.stale, *(present[(r.dataset, r.model)] - set(r.diagnostics))} - {"metrics"},
                        key=lambda p: (p == "summary", p))
        if parts and not r.error:
            out[r.path] = {p: r.why_empty(p) for p in parts}
    return out


def older_readings(r: RunRecord) -> list[str]:
    """What a run's diagnostics of its kept checkpoint hold in an older resdom's meaning (``records.older_reading``),
    one line each naming the file and how to read it anew; the report shows them as they are (a results-store
    cell's numbers stay what the store holds) and the command says so."""
    readout = _section(r.config, "model").get("readout")
    notes = []
    for name, data in r.diagnostics.items():
        note = older_reading(name, data, str(RunDir(r.path).diagnostic(name)), readout)
        if note is not None and r.cell:  # a cell holds no weights to diagnose
            notes.append(note.split("; run `resdom diagnose")[0] + "; diagnose the run it was stored from again")
        elif note is not None:
            notes.append(note.replace("resdom diagnose RUN", f"resdom diagnose {shlex.quote(str(r.path))}"))
    return notes


def find_run_dirs(root: str | Path) -> list[Path]:
    """Run directories below ``root`` (those holding config.json or diagnostics/), sorted; ``root`` itself if it is
    one."""
    root = Path(root)
    if RunDir(root).is_run():
        return [root]
    found = {p.parent for p in root.rglob(RunDir(".").config.name)} | {
        p.parent for p in root.rglob(RunDir(".").diagnostics.name) if p.is_dir()}
    return sorted(p for p in found if "summary" not in p.relative_to(root).parts)
