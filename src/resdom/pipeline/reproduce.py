"""``resdom reproduce``: the grid data sets x models x seeds, one run directory each, then the summary.

Layout::

    DIR/<dataset>/dataset.json           data set statistics (computed once)
    DIR/<dataset>/<model>/seed<k>/       a run directory (resdom.runs); error.txt when it failed
    DIR/summary/                         report.html, report.md, figures/, tables/, grid.json

Resumable: a finished run (metrics and diagnostics written) is skipped (only its per-user evidence, users.npz,
is computed where it lacks one, without training); an interrupted one resumes through
``fit`` (it continues from its saved state, on the split saved in the run directory). A failed run writes its
message to ``error.txt`` and the grid goes on.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from resdom.data.download import data_folders
from resdom.data.prepare import check_quantile, check_source, known_protocol, prepare_split, protocol_name
from resdom.data.registry import DATASETS
from resdom.data.sequences import SplitData
from resdom.data.stats import dataset_stats
from resdom.diagnostics.evidence import read_header
from resdom.diagnostics.registry import diagnostic_names
from resdom.diagnostics.runner import run_all
from resdom.distributed import resolve_device
from resdom.errors import OptionError, ResdomError
from resdom.experiments import canonical_label, model_labels, model_variant, variant_train_values
from resdom.io import atomic_write_json
from resdom.names import AUTO_PROTOCOL, USERS
from resdom.pipeline.common import is_finished, missing_diagnostics, record_failure, train_and_diagnose
from resdom.pipeline.store import export_cell, run_curve
from resdom.report import build_report_files, read_runs
from resdom.report.findings import finding_lines
from resdom.rundir import (
    GRID,
    RunDir,
    cell_below,
    check_kind_folder,
    check_links,
    check_output_inputs,
    output_lock,
    refuse_cell,
    require_folder_path,
    write_marker,
)
from resdom.training.config import MAX_SEED, resolve_configs

SUMMARY, DATASET_JSON = "summary", "dataset.json"  # DIR/summary/, DIR/<dataset>/dataset.json
_SIZE_FIELDS = frozenset({"max_len", "hidden", "layers", "heads"})  # a variant's size, not what it is
SUMMARY_WRITES = frozenset({"grid.json", "report.html", "report.md", "figures", "tables"})  # what DIR/summary/ holds


def known_labels() -> tuple[str, ...]:
    """What ``--models`` accepts: the models and the named variants of ``experiments.MODEL_VARIANTS``."""
    return model_labels()


def earlier_grid(out: Path, entries: list[str]) -> bool:
    """Whether ``out`` (no marker) holds a grid written before grids left one: folders only, each ``summary/``
    (its grid.json and what else a summary writes) or a data set folder holding ``dataset.json`` and model folders of
    ``seed<k>`` folders (module docstring)."""
    def model_folder(p: Path) -> bool:
        return p.is_dir() and all(
            c.is_dir() and re.fullmatch(r"seed\d+", c.name) for c in p.iterdir())

    def dataset_folder(p: Path) -> bool:
        return p.is_dir() and all(
            (c.name == DATASET_JSON and c.is_file()) or model_folder(c) for c in p.iterdir())

    def summary_folder(p: Path) -> bool:  # a grid writes grid.json first; a summary/ of other files is not its
        names = {c.name for c in p.iterdir()}
        return not names or ("grid.json" in names and names <= SUMMARY_WRITES)

    return all((out / n).is_dir() and (summary_folder(out / n) if n == SUMMARY else dataset_folder(out / n))
               for n in entries)


@dataclass
class GridSpec:
    """The grid and how to train it. ``epochs`` None = each cell's model default for its protocol
    (``experiments.PROTOCOL_DEFAULTS`` through ``resolve_configs``, as ``resdom train``; early stopping decides)."""

    datasets: list[str]
    models: list[str]
    seeds: list[int]
    out: Path
    data_dir: str | None = None
    protocol: str = AUTO_PROTOCOL  # each data set's: gts where it has timestamps, loo where not (protocol_of)
    quantile: float = 0.9
    device: str = "auto"
    epochs: int | None = None
    train_values: dict[str, Any] = field(default_factory=dict)
    model_values: dict[str, Any] = field(default_factory=dict)
    store: Path | None = None  # the results store (resdom.pipeline.store): each finished cell is exported there
    dataset_flag: str = "--datasets"  # how the command takes the data sets, for its messages (remedies: DATASET)
    force: bool = False  # --out holds something other than a grid: move it aside (OUT.replaced-K), start anew
    replace: bool = field(default=False, init=False)  # set by the check of --out: ``reproduce`` moves it aside

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.models = [canonical_label(m, "--models") for m in self.models]  # "SASRec" -> "sasrec"
        for name, values in ((self.dataset_flag, self.datasets), ("--models", self.models), ("--seeds", self.seeds)):
            if not values:
                raise ResdomError(f"{name}: give at least one value")
            if len(set(values)) != len(values):
                raise ResdomError(f"{name}: repeated value in {','.join(map(str, values))}")
        self.store = Path(self.store) if self.store is not None else None
        self.protocol = protocol_name(self.protocol, "--protocol")  # any case
        if self.protocol == "none":
            raise ResdomError("--protocol: none holds out no test users, which the grid evaluates and diagnoses; "
                              "choose auto, gts or loo")
        resolve_device(self.device, "--device")  # one refusal up front, not one failed cell after another
        self.quantile = check_quantile(self.quantile, "--quantile")
        bad = [d for d in self.datasets if not d or "/" in d or d.startswith(".")]
        if bad:
            raise ResdomError(f"{self.dataset_flag}: {bad[0]!r} is not a data set name (see `resdom data list`)")
        for dataset in self.datasets:  # one refusal up front, not one failed cell after another
            try:
                check_source(dataset)
            except ResdomError as e:
                raise ResdomError(f"{self.dataset_flag}: {e}") from None
        self._check_out()
        bad_seeds = [s for s in self.seeds if not 0 <= s <= MAX_SEED]
        if bad_seeds:
            raise ResdomError(f"--seeds: every seed must lie in [0, 2^62] (got {bad_seeds[0]})")
        self._check_configs()

    def _check_out(self) -> None:
        """``out`` may be absent, empty, or a grid (its marker, or written before markers: folders only, laid out as
        a grid, ``earlier_grid``); anything else is refused before anything is written, unless ``force``: then it
        is moved aside when the grid starts (``replace``). A folder holding results-store cells (a store given as
        --out) is refused, --force included, and so is --store inside --out."""
        if self.out.is_dir():
            refuse_cell(self.out, "--out")
            check_links(self.out, (*self.datasets, SUMMARY), "--out")  # nothing written through a link out
        cell = cell_below(self.out) if self.out.is_dir() else None
        if cell is not None:
            raise ResdomError(f"--out {self.out}: holds a results-store cell ({cell}); a grid's runs are not cells "
                              "and --force never moves a cell aside: give the store as --store and another --out")
        if self.store is not None:  # a file there (or above it) failed every cell after its training
            require_folder_path(self.store, "--store")
        if self.store is not None and (self.store.resolve() == self.out.resolve()
                                       or self.out.resolve() in self.store.resolve().parents):
            where = "is" if self.store.resolve() == self.out.resolve() else "is inside"
            raise ResdomError(f"--store {self.store}: {where} --out {self.out}; the store's cells would sit among "
                              "the grid's runs: choose a store outside the grid")
        if self.store is not None and self.store.resolve() in self.out.resolve().parents:
            raise ResdomError(f"--out {self.out}: is inside --store {self.store}; the grid's runs would sit among the "
                              "store's cells (and its cells inside the grid): choose an --out outside the store")
        self.replace = check_kind_folder(self.out, GRID, "--out", force=self.force, legacy=earlier_grid,
                                         writes=(*self.datasets, SUMMARY))
        # a store reached through a link in --out would be written into the new --out once the old one moved aside
        check_output_inputs(self.out, "--out", {**data_folders(self.data_dir), "--store": self.store},
                            replaced=self.replace)

    def _check_configs(self) -> None:
        """Resolve every cell's configuration (as ``train_and_diagnose`` will) before any is trained: a bad
        --set value is one refusal naming it, not one failed cell after another."""
        given = {f"model.{k}": f"--set model.{k}" for k in self.model_values}
        given |= {f"train.{k}": f"--set train.{k}" for k in self.train_values} | {"train.epochs": "--epochs"}
        for label in self.models:
            self._check_variant_values(label)
        for dataset in self.datasets:
            for label in self.models:
                model, model_values, train_values = self.cell_values(label, self.seeds[0])
                try:
                    resolve_configs(model, model_values, {"device": self.device, **train_values}, source=dataset,
                                    n_items=1, protocol=self.protocol_of(dataset))
                except OptionError as e:
                    raise ResdomError(f"{e.renamed(given)} ({label} on {dataset})") from None
                except ResdomError as e:
                    raise ResdomError(f"{e} ({label} on {dataset})") from None

    def _check_variant_values(self, label: str) -> None:
        """A --set or --epochs value of a field that the variant ``label`` sets itself is refused: it would win, and
        the cell would be trained as another variant under this one's label (``sasrec-res0.5`` with residual scale
        0.3 in the remedies table). Sizes (``_SIZE_FIELDS``: sasrec-tts's max length 128) may be set: a small grid
        shrinks every cell alike; the seed, device and epochs are the grid's own options."""
        grid_owned = {"seed": "--seeds", "device": "--device"} | ({"epochs": "--epochs"} if self.epochs else {})
        owned = next((k for k in self.train_values if k in grid_owned), None)
        if owned is not None:  # the grid's own option won in silence (cell seed1 trained with seed 1, not the --set)
            raise ResdomError(f"--set train.{owned}={self.train_values[owned]}: the grid's cells take their {owned} "
                              f"from {grid_owned[owned]}; give it there")
        _, variant = model_variant(label)
        given = [(f"model.{k}", v, variant[k]) for k, v in self.model_values.items()
                 if k in variant and k not in _SIZE_FIELDS and v != variant[k]]
        own = variant_train_values(label)
        train = {**self.train_values, **({"epochs": self.epochs} if self.epochs is not None else {})}
        given += [(f"train.{k}", v, own[k]) for k, v in train.items() if k in own and v != own[k]]
        if given:
            name, value, fixed = given[0]
            flag = "--epochs" if name == "train.epochs" else f"--set {name}"
            raise ResdomError(f"{flag}={value}: {label} sets {name.partition('.')[2]}={fixed} itself (the cells would "
                              f"be trained as another variant under its label); leave {flag} out or drop {label}")

    def cell_values(self, label: str, seed: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """(model, model values, train values) of the cells of ``label`` and ``seed``: the variant's values, then
        the grid's (--set, --epochs)."""
        model, variant = model_variant(label)
        train_values = {**variant_train_values(label), **self.train_values, "seed": seed}
        if self.epochs is not None:
            train_values["epochs"] = self.epochs
        return model, {**variant, **self.model_values}, train_values

    def protocol_of(self, dataset: str) -> str:
        """The protocol of ``dataset``'s cells: --protocol, or what auto resolves to for it (gts where the data set
        has timestamps, loo where not: the paper grid's time-stamped data sets keep gts); a file's own, known once
        it is read, is gts until then (its configuration is checked with gts's defaults)."""
        return known_protocol(dataset, self.protocol) or "gts"

    def cell_protocol(self, dataset: str, split: SplitData) -> str:
        """The protocol a cell of ``dataset`` trains under (its configuration's defaults): ``protocol_of``'s where
        it is known before the data is read, else the one ``split`` resolved."""
        return known_protocol(dataset, self.protocol) or str(split.manifest.get("protocol"))

    def cells(self) -> list[tuple[str, str, int]]:
        return [(d, m, s) for d in self.datasets for m in self.models for s in self.seeds]

    def run_dir(self, dataset: str, model: str, seed: int) -> Path:
        return self.out / dataset / model / f"seed{seed}"


@dataclass
class RunOutcome:
    """What happened to one cell of the grid: ``done``, ``skipped`` (already finished) or ``failed``."""

    dataset: str
    model: str
    seed: int
    run_dir: str
    status: str
    seconds: float = 0.0
    message: str = ""
    stored: str = ""  # the cell's folder in the results store, when it was exported


@dataclass
class GridResult:
    outcomes: list[RunOutcome]
    summary_dir: Path
    report_html: Path | None
    findings: list[str]

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]


class _DataCache:
    """Prepare each data set's split and statistics at most once, and only when a run needs them."""

    def __init__(self, spec: GridSpec) -> None:
        self.spec = spec
        self.splits: dict[str, SplitData | BaseException] = {}

    def stats(self, dataset: str, split: SplitData) -> dict[str, Any]:
        """Statistics of the whole data set (from the split's manifest), saved once to DIR/<dataset>/dataset.json."""
        path = self.spec.out / dataset / DATASET_JSON
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # absent, or damaged: made again
            pass
        stats = split.manifest.get("dataset") or dataset_stats(split.train)
        atomic_write_json(path, stats)
        return stats

    def split(self, dataset: str, run_dir: Path) -> SplitData:
        """The run's own saved split when it has one (resume), else the data set's prepared split."""
        if SplitData.exists(RunDir(run_dir).data):
            return SplitData.load(RunDir(run_dir).data)
        if dataset not in self.splits:
            try:
                protocol = known_protocol(dataset, self.spec.protocol) or AUTO_PROTOCOL
                self.splits[dataset] = prepare_split(dataset, protocol=protocol,
                                                     quantile=self.spec.quantile,
                                                     data_dir=self.spec.data_dir if dataset in DATASETS else None)
            except Exception as e:  # remembered: every run of this data set fails with the same message
                self.splits[dataset] = e
        got = self.splits[dataset]
        if isinstance(got, BaseException):
            raise got
        return got


def run_cell(spec: GridSpec, cache: _DataCache, dataset: str, label: str, seed: int, progress: bool) -> RunOutcome:
    """Train and diagnose one cell unless it is finished, then store it (``spec.store``); a failure is recorded,
    never raised."""
    run_dir = spec.run_dir(dataset, label, seed)
    outcome = RunOutcome(dataset, label, seed, str(run_dir), "skipped")
    if spec.out.resolve() not in run_dir.resolve().parents:  # a link out of the grid: nothing written, not error.txt
        outcome.status = "failed"
        outcome.message = f"{run_dir}: leads out of --out {spec.out} (a symbolic link); not written"
        return outcome
    t0 = time.perf_counter()
    try:
        if not is_finished(run_dir, spec.epochs):
            run_dir.mkdir(parents=True, exist_ok=True)
            split = cache.split(dataset, run_dir)
            model, model_values, train_values = spec.cell_values(label, seed)
            train_and_diagnose(split, model, run_dir, source=dataset, protocol=spec.cell_protocol(dataset, split),
                               stats=cache.stats(dataset, split), model_values=model_values,
                               train_values=train_values, device=spec.device, progress=progress, label=label)
            outcome.status = "done"
        elif USERS in missing_diagnostics(run_dir):  # finished before the per-user evidence: add it, no training

            run_all(run_dir, what=USERS, device=str(resolve_device(spec.device)), progress=progress)
        if spec.store is not None:
            outcome.stored = str(export_cell(run_dir, spec.store, dataset, label, seed,
                                             compute=cell_compute(run_dir)))
    except Exception as e:
        outcome.status, outcome.message = "failed", record_failure(run_dir, e)
    outcome.seconds = time.perf_counter() - t0
    return outcome


def cell_compute(run_dir: Path) -> dict[str, Any]:
    """What a cell cost: epochs, summed epoch seconds (training passes, without validation), the diagnostics'
    summed seconds (each file records its own), device, threads, the machine's CPU count and, where the epochs
    recorded them, the CPU models that trained them (``cpu_models``), the source commits that trained them
    (``sources``) and the machine's load while they ran (``load``: the least and the most 1-minute load average at
    an epoch's end), so that a cell's minutes can be read against how busy the machine was."""
    import os
    import platform

    files = RunDir(run_dir)
    epochs = run_curve(files)  # a torn or damaged line: one line naming it
    train = json.loads(files.config.read_text(encoding="utf-8")).get("train", {})
    diag = {}
    for name in diagnostic_names():  # each diagnostic's file says how long it took, whichever session computed it
        path = files.diagnostic(name)
        if path.is_file():
            diag[name] = json.loads(path.read_text(encoding="utf-8")).get("seconds") or 0.0
    if files.users.is_file():  # the per-user evidence's header too

        diag[USERS] = (read_header(files.users) or {}).get("seconds") or 0.0
    return {"epochs": len(epochs), "train_seconds": round(sum(r.get("seconds") or 0.0 for r in epochs), 1),
            "diagnose_seconds": round(sum(diag.values()), 1),
            "device": train.get("device"), "threads": _threads(train, epochs), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), **_cpu_models(epochs), **_sources(epochs), **_load(epochs)}


def _cpu_models(epochs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``{"cpu_models": [...]}``: the CPUs the epochs were trained on, in order of first use (each epoch record
    names its machine's, ``trainer.cpu_model``; a run resumed on another machine has two); {} when none did (cells
    trained before the epochs recorded it: the CPU that exports or diagnoses a cell again need not be the one that
    trained it, so it is never guessed)."""
    seen = list(dict.fromkeys(r["cpu"] for r in epochs if r.get("cpu")))
    return {"cpu_models": seen} if seen else {}


def _sources(epochs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``{"sources": [...]}``: the source commits the epochs were trained by, in order of first use (each epoch
    record says where it was recorded, ``runs.source_commit``); {} when none was."""
    seen = list(dict.fromkeys(r["source"] for r in epochs if r.get("source")))
    return {"sources": seen} if seen else {}


def _load(epochs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """``{"load": [least, most]}``: the 1-minute load averages the epochs recorded at their ends; {} when none did
    (cells trained before the epochs recorded it)."""
    seen = [r["load"] for r in epochs if r.get("load") is not None]
    return {"load": [min(seen), max(seen)]} if seen else {}


def _threads(train: dict[str, Any], epochs: list[dict[str, Any]]) -> int | str | None:
    """The torch threads the epochs ran with (each epoch record says; a resumed run may differ: "1-2")."""
    seen = sorted({r["threads"] for r in epochs if r.get("threads")})
    if not seen:
        return train.get("threads")
    return seen[0] if len(seen) == 1 else f"{seen[0]}-{seen[-1]}"


def _eta(done_s: list[float], left: int) -> str:
    if not done_s or not left:
        return ""
    s = sum(done_s) / len(done_s) * left
    return f", about {s / 60:.0f} min left" if s >= 60 else f", about {s:.0f} s left"


def reproduce(spec: GridSpec, progress: bool = True, echo: Callable[[str], None] = print) -> GridResult:
    """Run the whole grid (resumably), then write the summary report into ``spec.out / "summary"``.

    One grid at a time in ``spec.out``: it is locked (``rundir.output_lock``) until the summary is written, and
    checked again under the lock. Two grids there at once failed each other's cells ("another process is already
    training there", an ``error.txt`` in a run the other one was training) and wrote two summaries over each
    other; the second is now refused in one line naming --out."""
    def check() -> bool:  # --force: what --out held is kept, renamed, and the grid starts in an empty folder
        spec._check_out()
        return spec.replace

    with output_lock(spec.out, check) as aside:
        if aside is not None:
            echo(f"--force: {spec.out} moved aside to {aside}")
        spec.replace = False
        return _reproduce(spec, progress, echo)


def _reproduce(spec: GridSpec, progress: bool, echo: Callable[[str], None]) -> GridResult:
    """``reproduce``'s grid and summary, with ``spec.out`` locked."""
    cells = spec.cells()
    cache = _DataCache(spec)
    outcomes: list[RunOutcome] = []
    worked: list[float] = []
    write_marker(spec.out, GRID)
    echo(f"grid: {len(spec.datasets)} data set(s) x {len(spec.models)} model(s) x {len(spec.seeds)} seed(s) = "
         f"{len(cells)} runs -> {spec.out}")
    for i, (dataset, model, seed) in enumerate(cells, start=1):
        tag = f"[{i}/{len(cells)}] {dataset} / {model} / seed {seed}"
        if not is_finished(spec.run_dir(dataset, model, seed), spec.epochs):
            echo(f"{tag}: training and diagnostics ...")
        outcome = run_cell(spec, cache, dataset, model, seed, progress)
        outcomes.append(outcome)
        if outcome.status == "done":
            worked.append(outcome.seconds)
        left = sum(1 for d, m, s in cells[i:] if not is_finished(spec.run_dir(d, m, s), spec.epochs))
        detail = {"skipped": "already finished, skipped", "done": f"done in {outcome.seconds:.0f} s",
                  "failed": f"FAILED: {outcome.message}"}[outcome.status]
        stored = f"; stored in {outcome.stored}" if outcome.stored else ""
        echo(f"{tag}: {detail}{stored}{_eta(worked, left)}")
    summary_dir = spec.out / SUMMARY
    record = {k: v for k, v in asdict(spec).items()  # a message's wording and --force: not the grid
              if k not in ("dataset_flag", "force", "replace")}
    atomic_write_json(summary_dir / "grid.json", {"spec": {**record, "out": str(spec.out)},
                                                  "outcomes": [asdict(o) for o in outcomes]})
    finished = [Path(o.run_dir) for o in outcomes if RunDir(o.run_dir).final.is_file()]
    # failed cells that got as far as writing their config are listed in the report's run table, with the error
    usable = [Path(o.run_dir) for o in outcomes
              if RunDir(o.run_dir).final.is_file() or RunDir(o.run_dir).config.is_file()]
    if not finished:
        echo(f"no run finished; nothing to summarise (see {summary_dir / 'grid.json'})")
        return GridResult(outcomes, summary_dir, None, [])
    stats = {d: json.loads((spec.out / d / DATASET_JSON).read_text(encoding="utf-8")) for d in spec.datasets
             if (spec.out / d / DATASET_JSON).is_file()}
    paths = build_report_files(usable, summary_dir, title=f"resdom reproduce: {', '.join(spec.datasets)} "
                         f"({'/'.join(sorted({spec.protocol_of(d).upper() for d in spec.datasets}))})",
                         extra_stats=stats)
    return GridResult(outcomes, summary_dir, paths.html, finding_lines(read_runs(finished)))
