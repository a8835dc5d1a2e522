"""``resdom demo``: embedded synthetic data -> SASRec -> every diagnostic -> a report, offline, in minutes.

Layout of the output directory::

    OUT/run/          the SASRec run directory (resdom.runs), with diagnostics/
    OUT/report.html   the report (also report.md, figures/, tables/)

OUT holds the demo's marker (``resdom.rundir.MARKER``). A folder holding anything else is refused as --out (nothing
of the demo is written beside your files), unless ``--force``, which moves it aside (``OUT.replaced-K``) first.

Running it again resumes / reuses the run (on the split saved in ``OUT/run/data``): a finished training with the
same settings is not repeated; the diagnostics and the report are redone. A run trained with other settings (e.g.
``--epochs``) is trained again from scratch, the old one kept as ``OUT/run.replaced-K``, and the console says so. A
run directory made from another source is refused.

The data is ``synthetic:demo`` (``resdom.data.synthetic.PRESETS``): the next item is mostly one of a few items
similar to the last one, the first-order structure of real purchase data, so the trained SASRec shows what the
diagnostics are about: the last input item ranked first (unfiltered) for most users, a large mixing-ratio
drop from Attn to +Res, HRLI@1 falling as the residual is scaled down.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resdom.data.prepare import known_protocol, prepare_split
from resdom.data.sequences import SplitData
from resdom.data.stats import dataset_stats
from resdom.distributed import resolve_device
from resdom.errors import ResdomError
from resdom.experiments import recipe_protocol
from resdom.names import AUTO_PROTOCOL
from resdom.pipeline.common import train_and_diagnose
from resdom.records import counted
from resdom.report import build_report_files, read_run
from resdom.report.findings import finding_lines
from resdom.rundir import DEMO, RunDir, check_kind_folder, move_aside, output_lock, write_marker
from resdom.training.config import resolve_configs
from resdom.training.state import ResumeState, RunFiles, setup_differences


@dataclass
class DemoSettings:
    """What the demo trains. The defaults take well under a minute on one CPU core (README and docs/reports.md
    have timings).

    ``source``: ``synthetic:demo`` (the default), or any ``synthetic`` / ``synthetic:knob=value,...`` source
    (resdom.data.synthetic; tests use a few users).
    """

    source: str = "synthetic:demo"
    protocol: str = AUTO_PROTOCOL  # synthetic data has timestamps: gts
    epochs: int = 10
    patience: int = 3
    batch_size: int = 128
    lr: float = 2e-3
    seed: int = 17
    device: str = "auto"
    model: dict[str, Any] = field(default_factory=lambda: {"hidden": 64, "layers": 2, "heads": 2, "max_len": 50,
                                                           "dropout": 0.2, "attn_dropout": 0.2})


@dataclass
class DemoResult:
    """Where the demo wrote its outputs, its findings (printable lines) and timings in seconds."""

    out_dir: Path
    run_dir: Path
    report_html: Path
    findings: list[str]
    timings: dict[str, float]


DEMO_NAMES = ("run", "report.html", "report.md", "figures", "tables")  # what the demo writes into OUT (layout above)


def _earlier_demo(out_dir: Path, entries: list[str]) -> bool:
    """Whether ``out_dir`` (no marker) holds only what an earlier demo wrote (``DEMO_NAMES``, and runs it moved
    aside)."""
    return all(n in DEMO_NAMES or n.startswith("run.replaced-") for n in entries)


def _check_out(out_dir: Path, force: bool = False) -> bool:
    """``out_dir`` may be absent, empty or an earlier demo's (its marker, or only ``DEMO_NAMES``); a folder of other
    files is refused before anything is written into it, unless ``force`` (then True: it is moved aside)."""
    return check_kind_folder(out_dir, DEMO, "--out", force=force, legacy=_earlier_demo, writes=DEMO_NAMES)


def run_demo(out_dir: str | Path = "resdom-demo", settings: DemoSettings | None = None, progress: bool = True,
             echo: Callable[[str], None] = print, force: bool = False) -> DemoResult:
    """Prepare the synthetic data, train SASRec, run every diagnostic and write the report into ``out_dir``
    (``force``: a folder of other files there is moved aside first, ``OUT.replaced-K``)."""
    s = settings or DemoSettings()
    resolve_device(s.device, "--device")  # refused before the data is made
    out_dir = Path(out_dir)
    with output_lock(out_dir, lambda: _check_out(out_dir, force)) as aside:  # one demo at a time in a folder
        return _run_demo(out_dir, s, progress, echo, aside)


def _run_demo(out_dir: Path, s: DemoSettings, progress: bool, echo: Callable[[str], None],
              aside: Path | None) -> DemoResult:
    """``run_demo`` in ``out_dir``, locked (``aside``: where the folder it held was moved)."""
    if aside is not None:
        echo(f"--force: {out_dir} moved aside to {aside}")
    write_marker(out_dir, DEMO)  # before anything else: a demo killed half way is still known as one
    run_dir = out_dir / "run"
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    protocol = known_protocol(s.source, s.protocol) or s.protocol  # synthetic data is known: gts unless said
    chosen = ", chosen by the default protocol, auto: the data has timestamps" if s.protocol == AUTO_PROTOCOL else ""
    echo(f"[1/3] data: {s.source} ({protocol} split{chosen})")
    saved = RunDir(run_dir).data
    split = SplitData.load(saved) if SplitData.exists(saved) else prepare_split(s.source, protocol=protocol)
    made_from = (split.manifest.get("source") or {}).get("name")
    if SplitData.exists(saved) and made_from != s.source:
        raise ResdomError(f"{run_dir} was made from {made_from!r}, not {s.source!r} (an older demo?): "
                          f"delete {out_dir} or choose another --out")
    stats = split.manifest.get("dataset") or dataset_stats(split.train)
    timings["data_s"] = time.perf_counter() - t0
    echo(f"      {stats['users']:,} users, {stats['items']:,} items, {stats['interactions']:,} interactions; "
         f"{counted(len(split.test), 'test user')}")
    state = RunFiles(run_dir).read_state()
    train_values = {"epochs": s.epochs, "patience": s.patience, "batch_size": s.batch_size, "monitor_every": 1,
                    "lr": s.lr, "seed": s.seed}
    changed = _changed_settings(state, s)
    if state is not None and not changed:  # the same demo settings, another setup (an older resdom's recipe)
        recipe = recipe_protocol(str(split.manifest["protocol"]), split.manifest.get("has_timestamps"))
        configs = resolve_configs("sasrec", dict(s.model), {"device": s.device, **train_values}, source=s.source,
                                  n_items=split.n_items, protocol=recipe)
        changed = setup_differences(RunFiles(run_dir), state, *configs, split)
    if changed:
        echo(f"      {run_dir} holds a run trained with other settings ({'; '.join(changed)}): training it again "
             f"from scratch (the old run is kept as {move_aside(run_dir)})")
        state = None
    if state is not None and state.stopped:
        echo(f"[2/3] reusing the finished SASRec run (same settings, up to {s.epochs} epochs) and running every "
             f"diagnostic -> {run_dir}")
    else:
        what = "resuming" if state is not None else "training"
        echo(f"[2/3] {what} SASRec (up to {s.epochs} epochs) and running every diagnostic -> {run_dir}")
    out = train_and_diagnose(split, "sasrec", run_dir, source=s.source, protocol=str(split.manifest["protocol"]),
                             stats=stats,
                             model_values=dict(s.model),
                             train_values=train_values,
                             device=s.device, progress=progress)
    timings["train_s"], timings["diagnose_s"] = out["train_s"], out["diagnose_s"]
    echo(f"      {training_line(out['metrics'], s.epochs, s.patience)}")
    echo("[3/3] report")
    t1 = time.perf_counter()
    paths = build_report_files([run_dir], out_dir, title="resdom demo: SASRec on synthetic data")
    timings["report_s"] = time.perf_counter() - t1
    timings["total_s"] = time.perf_counter() - t0
    findings = finding_lines([read_run(run_dir)])
    assert paths.html is not None  # build_report with figures writes report.html
    return DemoResult(out_dir, run_dir, paths.html, findings, timings)


def training_line(metrics: dict[str, Any], epochs: int, patience: int) -> str:
    """How training ended, from its ``metrics.json``: early stopping (at which epoch, the best one kept) or the
    epoch budget."""
    run, best, metric = metrics.get("epochs_run"), metrics.get("best_epoch"), metrics.get("metric", "the metric")
    if metrics.get("stopped") == "early_stopping":
        return (f"early stopping ended training at epoch {run} of up to {epochs}: no better validation {metric} in "
                f"{patience} epochs; the best, epoch {best}, is kept")
    return f"trained all {run} of {epochs} epochs; the best by validation {metric}, epoch {best}, is kept"


def _changed_settings(state: ResumeState | None, s: DemoSettings) -> list[str]:
    """The demo settings that differ between a saved run's trainer state and ``s`` ("field saved -> wanted")."""
    if state is None:
        return []
    wanted = {"train": {"epochs": s.epochs, "patience": s.patience, "batch_size": s.batch_size, "lr": s.lr,
                        "seed": s.seed},
              "model": dict(s.model)}
    out = []
    for section, values in wanted.items():
        saved = getattr(state, section)
        out += [f"{key} {saved.get(key)!r} -> {value!r}" for key, value in values.items() if saved.get(key) != value]
    return out
