"""``resdom report``, ``resdom demo`` and ``resdom reproduce`` (see docs/reports.md)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from resdom.cli.train_cmd import parse_set
from resdom.cli.values import interrupted, progress_option, quiet_alias, say
from resdom.errors import ResdomError
from resdom.experiments import CAUSAL_MODELS, REMEDIES, REMEDY_MODELS
from resdom.io import atomic_write_text
from resdom.names import AUTO_PROTOCOL
from resdom.pipeline.common import is_finished
from resdom.pipeline.demo import DemoSettings, run_demo
from resdom.pipeline.remedies import remedies as run_remedies
from resdom.pipeline.remedies import remedy_grid
from resdom.pipeline.reproduce import GridSpec
from resdom.pipeline.reproduce import reproduce as run_grid
from resdom.pipeline.store import block_names, check_blocks, fill_blocks
from resdom.report import (
    REPORT_WRITES,
    build_report_files,
    check_report_folder,
    document_block_names,
    find_run_dirs,
    left_out,
    mark_report,
    refuse_run_folders,
)
from resdom.report.collect import older_readings, same_folders
from resdom.rundir import (
    check_output_inputs,
    is_link_loop,
    output_lock,
    refuse_read_only,
    refuse_standard_output,
    require_folder_path,
)
from resdom.study import build_report_files as build_study_report
from resdom.study import document_block_names as study_block_names
from resdom.study import is_study


def _split_list(value: str, option: str) -> list[str]:
    """The items of a comma-separated list; an empty one between commas (``1,,2``: a value left out?) is refused,
    a comma at the end is not."""
    items = [x.strip() for x in value.split(",")]
    if items and not items[-1] and len(items) > 1:
        items.pop()
    if not any(items):
        raise ResdomError(f"{option}: give a comma-separated list (got {value!r})")
    if not all(items):
        raise ResdomError(f"{option}: an empty item in {value!r} (a value left out between commas?)")
    return items


def _split_sources(value: str, option: str) -> list[str]:
    """``_split_list`` where a synthetic source keeps its knobs: ``synthetic:n_users=40,n_items=25,beauty-ts`` is
    two data sets (an item ``knob=value`` after a synthetic source is one of its knobs, as ``resdom train`` reads
    it)."""
    out: list[str] = []
    for item in _split_list(value, option):
        if out and out[-1].startswith("synthetic:") and _KNOB.fullmatch(item):
            out[-1] += f",{item}"
        else:
            out.append(item)
    return out


_KNOB = re.compile(r"\w+\s*=.*")


def _seeds(value: str) -> list[int]:
    out = []
    for x in _split_list(value, "--seeds"):
        try:
            out.append(int(x))
        except ValueError:
            raise ResdomError(f"--seeds: {x!r} is not an integer") from None
        if out[-1] < 0:
            raise ResdomError(f"--seeds: {x!r} is negative")
    return out


def report(
    run_dirs: list[Path] = typer.Argument(..., help="run directories, or folders holding run directories"),
    out: Path = typer.Option(..., "--out", "-o", help="output folder for report.html, report.md, figures, tables"),
    title: str | None = typer.Option(None, help="title of report.html and report.md (default: resdom report)"),
    docs: list[Path] = typer.Option(None, "--doc", help="a Markdown document whose `<!-- resdom:table NAME -->` "
                                    "blocks are refilled with these tables (e.g. docs/results.md from the results "
                                    "store); repeat for several"),
    tables_only: bool = typer.Option(False, "--tables-only", help="write the tables (OUT/tables/ and the --doc "
                                     "blocks) only: no figures, no report.html / report.md"),
    force: bool = typer.Option(False, "--force", help="--out holds something other than an earlier report: move it "
                               "aside (OUT.replaced-K) and write the report anew; a results-store cell is refused "
                               "even then"),
) -> None:
    """Tables, figures and an HTML + Markdown report from one or more run directories (or results-store cells: the
    reproduction study's report, its blocks and figures beside the generic ones)."""
    require_folder_path(out, "--out")
    if title is not None and tables_only:  # it titles report.html and report.md, which --tables-only leaves out
        raise ResdomError("--title: titles report.html and report.md, which --tables-only does not write; give one "
                          "of them")
    found: list[Path] = []
    for d in run_dirs:
        if not d.exists():
            raise ResdomError(f"{d}: no such directory")
        runs = find_run_dirs(d)
        if not runs:
            raise ResdomError(f"{d}: no run directory here (none holds config.json or diagnostics/)")
        found = same_folders([*found, *runs])  # a folder given twice, or inside another given one: read once
    target = out.resolve()
    refuse_run_folders(out, found, "--out")  # the report's files among a run's; a run moved aside with --out
    # only an earlier report is written over: a folder of the user's files needs --force, which moves it aside
    def check() -> bool:
        return check_report_folder(out, "--out", force)

    replace = check()
    # results-store cells get the reproduction study's report (resdom.study); one's own runs the generic one
    study = is_study(found)
    known = study_block_names() if study else document_block_names()
    texts = {d: _document(d, known) for d in docs or []}  # every document checked before anything is written
    for d in texts:
        _check_doc_place(d, out, found)
    held_doc = next((d for d in docs or [] if target in d.resolve().parents), None)
    if replace and held_doc is not None:
        raise ResdomError(f"--out {out}: holds the --doc {held_doc}, which --force would move aside with it; "
                          "choose another --out")
    # --force would move aside what the report reads with the folder: a run or --doc in it, or a link there to one
    check_output_inputs(out, "--out", {"the run directory": tuple(found), "--doc": tuple(docs or [])},
                        replaced=replace)
    with output_lock(out, check) as aside:  # one report at a time there: checked again under the lock
        if aside is not None:
            say(f"--force: {out} moved aside to {aside}", err=True)
        named = "resdom report" if title is None else title
        paths = (build_study_report if study else build_report_files)(found, out, title=named,
                                                                      figures=not tables_only)
        mark_report(out, paths)
    say(f"report of {len(found)} run(s): {paths.html or out / 'tables'}")
    if texts:
        filled = {d: fill_blocks(text, paths.blocks, where=str(d)) for d, text in texts.items()}
        for d, text in filled.items():
            atomic_write_text(d, text)
            say(f"  {d}: {len(block_names(text))} table block(s) refilled")
    missing = left_out(paths.runs)
    for r in paths.runs:
        for cause in missing.get(r.path, {}).values():
            say(f"  left out of {r.label}: {cause}", err=True)
        for note in older_readings(r):  # shown as stored, but of an older resdom's meaning: said so
            say(f"  note: {note}", err=True)
    if not tables_only:
        say(f"  markdown: {paths.markdown}; figures: {out / 'figures'}; tables: {out / 'tables'}")


def _check_doc_place(doc: Path, out: Path, runs: list[Path]) -> None:
    """A ResdomError where the --doc ``doc`` is a file the report writes in ``out`` (refilled after it, the document
    read before would write the report's new file back over with the old) or lies inside one of the ``runs`` it
    reads (nothing is written into a run or a results-store cell)."""
    target = doc.resolve()
    written = [(out / name).resolve() for name in REPORT_WRITES]
    if any(target == w or w in target.parents for w in written):
        raise ResdomError(f"--doc {doc}: is a file the report writes in --out {out}; give a document outside "
                          f"{', '.join(REPORT_WRITES)}")
    run = next((r for r in runs if r.resolve() in target.parents), None)
    if run is not None:
        raise ResdomError(f"--doc {doc}: is inside {run}, which the report reads; give a document outside every run")


def _document(path: Path, known: tuple[str, ...]) -> str:
    """The text of a ``--doc`` document, its table blocks checked against ``known`` (``check_blocks``); a
    ResdomError otherwise."""
    refuse_standard_output(path, "--doc", "a document")
    if path.is_dir():
        raise ResdomError(f"--doc {path}: is a folder; give a Markdown document")
    if not path.is_file():
        raise ResdomError(f"--doc {path}: {'a loop of symbolic links' if is_link_loop(path) else 'no such document'}")
    refuse_read_only(path, "--doc")  # refilled in place
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ResdomError(f"--doc {path}: cannot be read as UTF-8 text ({e})") from None
    check_blocks(text, known, where=str(path))
    return text


def demo(
    out: Path = typer.Option(Path("resdom-demo"), "--out", "-o", help="output folder"),
    epochs: int = typer.Option(None, min=1, help="maximum training epochs (default: the demo's budget)"),
    device: str = typer.Option("auto", help="auto (cuda, then mps, then cpu), cpu, cuda or mps"),
    progress: bool = progress_option(),
    quiet: bool = quiet_alias(),
    force: bool = typer.Option(False, "--force", help="--out holds files the demo did not write: move it aside "
                               "(OUT.replaced-K) and start anew"),
) -> None:
    """Synthetic data -> SASRec -> every diagnostic -> report, offline, in under a minute on a laptop CPU."""
    settings = DemoSettings(device=device)
    if epochs is not None:
        settings.epochs = epochs
    result = run_demo(out, settings, progress=progress and not quiet, echo=say, force=force)
    t = result.timings
    say(f"\ndone in {t['total_s']:.0f} s (training {t['train_s']:.0f} s, diagnostics {t['diagnose_s']:.0f} s)")
    say(f"report: {result.report_html.resolve()}")
    say("\nfindings:")
    for line in result.findings:
        say(line)


# The grid's defaults, from the experiment settings: the causal self-attention models (not the contrast models, by
# their traits), and every remedy but the milder residual scale 0.75; listed with spaces, so the help wraps them whole
# in 80 columns (the lists are read with the spaces stripped).
GRID_MODELS = ", ".join(CAUSAL_MODELS)
DEFAULT_VARIANTS = ", ".join(v for v in REMEDIES if v != "res0.75")
# A cell's maximum epochs without --epochs: its model's default for the cell's protocol (experiments.PROTOCOL_DEFAULTS,
# as `resdom train` resolves it: 300 for sasrec under gts, 200 under loo), not TrainConfig's bare field default.
GRID_EPOCHS_HELP = ("maximum epochs per run (default: each model's for its protocol, as `resdom train`; `resdom config "
                    "show MODEL` prints it); early stopping may end a run sooner")
GRID_FORCE_HELP = ("--out holds something other than a grid: move it aside (OUT.replaced-K) and start anew; a "
                   "folder holding a results-store cell is refused even then")


def reproduce(
    datasets: str = typer.Option("beauty-ts, toys-ts", help="comma-separated data set names (a synthetic source "
                                 "keeps its knobs, as in synthetic:seed=2)"),
    models: str = typer.Option(GRID_MODELS, help="comma-separated models or variants (any case; "
                               "`resdom config list`)"),
    seeds: str = typer.Option("1, 2, 3", help="comma-separated training seeds"),
    out: Path = typer.Option(..., "--out", "-o", help="grid folder: a folder per data set, model and seed (DATASET / "
                             "MODEL / seedK) and summary/"),
    data_dir: str = typer.Option(None, "--data-dir", help="folder holding the raw data (else $RESDOM_DATA_DIR, cache)"),
    protocol: str = typer.Option(AUTO_PROTOCOL, help="auto (each data set's: gts where it has timestamps, loo where "
                                 "not), gts (global temporal split) or loo (leave-one-out); any case"),
    quantile: float = typer.Option(0.9, help="GTS test-time quantile"),
    device: str = typer.Option("auto", help="auto (cuda, then mps, then cpu), cpu, cuda or mps"),
    epochs: int = typer.Option(None, min=1, help=GRID_EPOCHS_HELP),
    progress: bool = progress_option(),
    quiet: bool = quiet_alias(),
    store: Path = typer.Option(None, "--store", help="results store: each finished cell is exported to STORE / "
                               "DATASET / MODEL / seedK (small text files, meant to be committed)"),
    monitor_every: int = typer.Option(5, "--monitor-every", min=0, help="record HRLI@1, HRL2I@1 and the mixing "
                                      "ratio on 1,024 validation users every N epochs (0 = off)"),
    force: bool = typer.Option(False, "--force", help=GRID_FORCE_HELP),
) -> None:
    """Train and diagnose the grid data sets x models x seeds (resumable), then write summary tables and report.

    Models: sasrec, duorec, bsarec, the contrast models bert4rec and gru4rec (the paper's Figure 2:
    --models sasrec,duorec,bsarec,bert4rec,gru4rec), or a named variant (sasrec-tts: time-to-split's SASRec, max
    length 128)."""
    spec = GridSpec(_split_sources(datasets, "--datasets"), _split_list(models, "--models"), _seeds(seeds), out,
                    data_dir=data_dir, protocol=protocol, quantile=quantile, device=device, epochs=epochs,
                    store=store, train_values={"monitor_every": monitor_every}, force=force)
    result = _interruptible(run_grid, spec, progress and not quiet)
    counts = {s: sum(o.status == s for o in result.outcomes) for s in ("done", "skipped", "failed")}
    say(f"\n{counts['done']} trained, {counts['skipped']} already finished, {counts['failed']} failed")
    _echo_failed(result.failed)
    if result.report_html is not None:
        say(f"summary: {result.report_html} (tables in {result.summary_dir / 'tables'})")
    if result.failed:
        sys.exit(1)


def remedies(
    dataset: str = typer.Argument(..., help="data set name (e.g. beauty-ts, synthetic:demo)"),
    variants: str = typer.Option(DEFAULT_VARIANTS, help=f"comma-separated variants (docs/remedies.md): "
                                 f"{', '.join(REMEDIES)}"),
    model: str = typer.Option(REMEDY_MODELS[0], help=f"the base model: {', '.join(REMEDY_MODELS)} (any case)"),
    seeds: str = typer.Option("1, 2, 3", help="comma-separated training seeds"),
    out: Path = typer.Option(..., "--out", "-o", help="grid folder: a folder per data set, variant and seed "
                             "(DATASET / LABEL / seedK) and summary/"),
    data_dir: str = typer.Option(None, "--data-dir", help="folder holding the raw data (else $RESDOM_DATA_DIR, cache)"),
    protocol: str = typer.Option(AUTO_PROTOCOL, help="auto (each data set's: gts where it has timestamps, loo where "
                                 "not), gts (global temporal split) or loo (leave-one-out); any case"),
    device: str = typer.Option("auto", help="auto (cuda, then mps, then cpu), cpu, cuda or mps"),
    epochs: int = typer.Option(None, min=1, help=GRID_EPOCHS_HELP),
    set_values: list[str] = typer.Option(None, "--set", help="extra settings for every variant, model.FIELD=VALUE or "
                                         "train.FIELD=VALUE (e.g. --set model.hidden=16)"),
    progress: bool = progress_option(),
    quiet: bool = quiet_alias(),
    store: Path = typer.Option(None, "--store", help="results store: each finished cell is exported to STORE / "
                               "DATASET / LABEL / seedK"),
    force: bool = typer.Option(False, "--force", help=GRID_FORCE_HELP),
) -> None:
    """Train each training-time remedy variant of MODEL with its protocol, diagnose it, and compare: a per-variant
    table (accuracy, HRLI, +Res mixing, recoverable misses, training time; mean ± std over seeds) and a figure of
    NDCG@10 against HRLI@1 beside the base model's inference-time alpha sweep (docs/remedies.md)."""
    values = parse_set(set_values or [])
    model_values, train_values = values.get("model", {}), values.get("train", {})
    spec = remedy_grid(dataset, model, _split_list(variants, "--variants"), _seeds(seeds), out, data_dir=data_dir,
                       protocol=protocol, device=device, epochs=epochs, store=store, train_values=train_values,
                       model_values=model_values, force=force)
    result = _interruptible(run_remedies, spec, progress and not quiet)
    _echo_failed(result.grid.failed)
    if result.table_md is not None:
        say(f"remedies table: {result.table_md}")
    if result.figure is not None:
        say(f"remedies figure: {result.figure}")
    if result.grid.failed:
        sys.exit(1)


T = TypeVar("T")


def _interruptible(run: Callable[..., T], spec: GridSpec, progress: bool) -> T:
    """``run(spec, progress=..., echo=say)``; Ctrl-C: what the grid kept and how to go on, exit 130."""
    try:
        return run(spec, progress=progress, echo=say)
    except KeyboardInterrupt:
        raise interrupted(_grid_interrupted_message(spec)) from None


def _echo_failed(failed: list[Any]) -> None:
    """A line for each failed cell of a grid (its error.txt has the traceback)."""
    for o in failed:
        say(f"  failed: {o.dataset} / {o.model} / seed {o.seed}: {o.message} (see {o.run_dir}/error.txt)")


def _grid_interrupted_message(spec: GridSpec) -> str:
    """What an interrupted ``reproduce`` kept and how to go on: finished runs stay, the interrupted one resumes."""
    cells = spec.cells()
    done = sum(is_finished(spec.run_dir(d, m, s), spec.epochs) for d, m, s in cells)
    return (f"interrupted: {spec.out} keeps the {done} of {len(cells)} runs that finished (trained and diagnosed) "
            "and the interrupted run's last finished epoch; run the same command to go on (finished runs are "
            "skipped, the interrupted one resumes, then the summary is written)")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
    app.command("demo")(demo)
    app.command("reproduce")(reproduce)
    app.command("remedies")(remedies)
