"""Reports from run directories: summary tables (Markdown, CSV, LaTeX), figures (PNG, PDF), an HTML page and its
Markdown twin. See docs/reports.md.

The generic report, for any user's runs and stores: accuracy, training, the data sets, every diagnostic's table and
figures (from its record in ``resdom.records``) and the coverage of what the runs hold. ``build_report(run_dirs,
out_dir)`` writes::

    OUT/report.html      self-contained (figures embedded as base64 PNG)
    OUT/report.md        Markdown twin (links figures/*.png)
    OUT/figures/         <key>.png and <key>.pdf per figure
    OUT/tables/          <name>.md / .csv / .tex per table with rows, tables.md with all of them, and run_coverage.md

``build_report`` checks ``out_dir`` as ``resdom report --out`` does (``checked_report``); ``build_report_files`` writes
into a folder its caller checked and holds (the CLI, the demo, a grid's summary). ``write_report`` writes what a
report is given (tables, blocks, figures); the paper study (``resdom.study``) builds
its own blocks and figures on these functions. ``document_blocks(runs)`` gives the Markdown of every table by name,
for the ``<!-- resdom:table NAME -->`` blocks of a hand-written document (``resdom report --doc``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resdom.checks import flag, path_argument
from resdom.errors import ResdomError
from resdom.io import atomic_write_files, text_bytes
from resdom.report.collect import RunRecord, find_run_dirs, left_out, read_run, read_runs
from resdom.report.figures import MODEL_COLORS, ReportFigure, all_figures
from resdom.report.findings import finding_lines
from resdom.report.html import render_html, render_markdown
from resdom.report.markdown import markdown_table
from resdom.report.tables import Table, summary_tables, table_files, to_markdown
from resdom.rundir import REPORT, check_kind_folder, check_output_inputs, output_lock, require_folder_path, write_marker

__all__ = ["MODEL_COLORS", "REPORT_WRITES", "ReportFigure", "ReportPaths", "RunRecord", "Table", "build_report",
           "build_report_files", "check_report_folder", "checked_report", "document_block_names", "document_blocks",
           "earlier_report", "find_run_dirs", "finding_lines", "left_out", "mark_report", "read_run", "read_runs",
           "refuse_run_folders", "run_coverage", "summary_tables", "table_blocks", "write_report"]

COVERAGE_BLOCK = "run_coverage"


@dataclass
class ReportPaths:
    """Where a report was written."""

    out_dir: Path
    html: Path | None  # None: tables only
    markdown: Path | None
    figures: dict[str, dict[str, Path]] = field(default_factory=dict)
    tables: list[Path] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    tables_data: list[Table] = field(default_factory=list)
    blocks: dict[str, str] = field(default_factory=dict)  # document_blocks of the same runs, for ``--doc``
    runs: list[RunRecord] = field(default_factory=list)


def build_report(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "resdom report",
                 extra_stats: dict[str, dict[str, Any]] | None = None, figures: bool = True,
                 overwrite: bool = False) -> ReportPaths:
    """Read ``run_dirs`` and write the generic report into ``out_dir``: the summary tables that have rows,
    ``run_coverage``, the figures the runs have data for, ``report.html`` and ``report.md``; with ``figures=False``
    the tables only (``out_dir/tables/``).

    ``extra_stats``: data set statistics by data set name, for runs whose config.json lacks ``data.stats``.
    ``out_dir`` is checked as ``resdom report --out`` checks it (``checked_report``): a folder that is, is inside or
    holds one of ``run_dirs``, a file or device, a results-store cell, or a folder of other files (unless
    ``overwrite``: then it is moved aside to ``OUT.replaced-K``, nothing deleted) is a ResdomError; an earlier
    report there is written over.
    """
    return checked_report(run_dirs, out_dir, overwrite, lambda out: build_report_files(run_dirs, out, title,
                                                                                     extra_stats, figures))


def build_report_files(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "resdom report",
                       extra_stats: dict[str, dict[str, Any]] | None = None, figures: bool = True) -> ReportPaths:
    """``build_report`` into a folder its caller has checked and holds (``resdom report``, the demo, a grid's
    summary: ``checked_report``'s checks are theirs)."""
    runs = read_runs(list(run_dirs))
    every_table = summary_tables(runs, extra_stats)
    blocks = document_blocks(runs, every_table)
    return write_report(runs, out_dir, [t for t in every_table if not t.empty],
                        {COVERAGE_BLOCK: blocks[COVERAGE_BLOCK]}, blocks, title,
                        all_figures(runs) if figures else None)


REPORT_WRITES = ("figures", "tables", "report.html", "report.md")  # what a report writes in its folder


def checked_report(run_dirs: Sequence[str | Path], out_dir: str | Path, overwrite: bool,
                   build: Callable[[Path], ReportPaths], option: str = "out_dir") -> ReportPaths:
    """``build(out)`` after the checks ``resdom report`` makes of its ``--out`` (``refuse_run_folders``,
    ``check_report_folder``, no input moved aside with the folder), under the folder's lock, then the report's
    marker: the Python API's report writers refuse what the CLI refuses, with a ResdomError naming ``option``."""
    out = path_argument(out_dir, option)
    overwrite = flag(overwrite, "overwrite")
    runs = [path_argument(r, "run_dirs") for r in run_dirs]
    refuse_run_folders(out, runs, option)

    def check() -> bool:
        try:
            return check_report_folder(out, option, overwrite)
        except ResdomError as e:  # the way out is the API's parameter, not the CLI's flag
            raise ResdomError(str(e).replace("--force", "overwrite=True")) from None

    check_output_inputs(out, option, {"the run directory": tuple(runs)}, replaced=check())
    with output_lock(out, check, option):
        paths = build(out)
        mark_report(out, paths)
    return paths


def refuse_run_folders(out: Path, runs: Sequence[Path], option: str) -> None:
    """A ResdomError naming ``option`` where the report folder ``out`` is not a folder (``require_folder_path``), or
    is, lies inside or holds one of the ``runs`` it reads (its files would land among a run's, or a cell's; moved
    aside, the runs would go with it)."""
    require_folder_path(out, option)
    target = out.resolve()
    inside = next((r for r in runs if r.resolve() == target or r.resolve() in target.parents), None)
    if inside is not None:
        raise ResdomError(f"{option} {out}: is {'the run directory' if inside.resolve() == target else 'inside'}"
                          f" {inside}, which the report reads; choose a folder outside every run")
    held = next((r for r in runs if target in r.resolve().parents), None)
    if held is not None:
        raise ResdomError(f"{option} {out}: holds the run directory {held}, which the report reads; choose a folder "
                          "outside every run")


def check_report_folder(out: Path, option: str, force: bool) -> bool:
    """``check_kind_folder`` for a report: only an earlier report (marked, or one written before markers:
    ``earlier_report``) is written over; anything else is refused, or with ``force`` to be moved aside (True)."""
    return check_kind_folder(out, REPORT, option, force=force, legacy=earlier_report, writes=REPORT_WRITES)


def mark_report(out: Path, paths: ReportPaths) -> None:
    """The report's marker in ``out``, naming what it wrote; a tables-only folder gets none (it is known by its
    tables/tables.md: a store commit carries no marker)."""
    if paths.html is not None:
        write_marker(out, REPORT, [*paths.tables, *(p for f in paths.figures.values() for p in f.values()),
                                   *(p for p in (paths.html, paths.markdown) if p is not None)])


def _head(path: Path, lines: int) -> list[str]:
    """The first ``lines`` lines of the regular file ``path`` ([] where it is none or cannot be read)."""
    if not path.is_file():
        return []
    try:
        with path.open("rb") as f:
            return f.read(4096).decode("utf-8", errors="replace").split("\n")[:lines]
    except OSError:
        return []


def earlier_report(out: Path, entries: list[str]) -> bool:
    """Whether ``out`` (no marker) holds a report written without one (before reports left one, or tables only):
    its report.md begins as ``render_markdown`` writes it (``# TITLE``, a blank line, ``N run(s).``), or its
    tables/tables.md as ``report.tables.table_files`` makes it (the data set statistics first)."""
    head = _head(out / "report.md", 3)
    if (len(head) == 3 and head[0].startswith("# ") and head[1] == ""
            and re.fullmatch(r"\d+ run\(s\)\.", head[2]) is not None):
        return True
    return _head(out / "tables" / "tables.md", 1) == ["## Data set statistics"]


def write_report(runs: list[RunRecord], out_dir: str | Path, tables: list[Table], written: dict[str, str],
                 blocks: dict[str, str], title: str, figures: list[ReportFigure] | None,
                 every_figure: bool = False) -> ReportPaths:
    """Write a report of ``runs`` into ``out_dir``: ``tables`` (``tables/<name>.md / .csv / .tex`` and
    ``tables/tables.md``), each block of ``written`` as ``tables/<name>.md``, and unless ``figures`` is None those
    figures (``figures/``), ``report.html`` and ``report.md`` (which show ``tables``, and a section per figure drawn;
    ``every_figure``: a section for every figure the report knows, one without data saying so). ``blocks``: the
    Markdown by block name that ``--doc`` fills documents with, kept in the returned paths."""
    out_dir = Path(out_dir)
    files: dict[Path, str | bytes] = {**table_files(tables, out_dir / "tables"),
                                      **{out_dir / "tables" / f"{name}.md": text for name, text in written.items()}}
    table_paths = list(files)
    html_path = md_path = None
    fig_paths: dict[str, dict[str, Path]] = {}
    if figures is not None:
        for f in figures:
            drawn = f.files(out_dir / "figures")
            fig_paths[f.key] = {path.suffix[1:]: path for path in drawn}
            files.update(drawn)
        html_path, md_path = out_dir / "report.html", out_dir / "report.md"
        files[html_path] = render_html(runs, figures, tables, title, every_figure)
        files[md_path] = render_markdown(runs, figures, tables, title, every_figure=every_figure)
    # every file written before the first is renamed into place: a full disk or an error half-way leaves the
    # folder as it was, never the tables of this report beside the figures of the last one
    atomic_write_files({path: text_bytes(text) if isinstance(text, str) else text for path, text in files.items()})
    return ReportPaths(out_dir, html_path, md_path, fig_paths, table_paths, finding_lines(runs), tables, blocks, runs)


def run_coverage(runs: list[RunRecord]) -> str:
    """The ``run_coverage`` block: per run, its data set, model and seed, which diagnostics it holds (of its kept
    checkpoint) and whether its per-user evidence (``users.npz``) is there, for run folders and store cells alike."""
    rows = [[r.path, r.dataset, r.model, r.seed if r.seed is not None else "–",
             ", ".join(sorted(n for n, d in r.diagnostics.items() if d)) or "none",
             "yes" if r.users_path is not None else "no"] for r in runs]
    have = sum(r.users_path is not None for r in runs)
    return (markdown_table(["Run", "Data set", "Model", "Seed", "Diagnostics", "Per-user evidence"], rows, empty=None)
            + f"\nPer-user evidence (users.npz) in {have} of {len(runs)} run(s).\n")


def table_blocks(tables: list[Table]) -> dict[str, str]:
    """The Markdown of every table by its name (a table with no data included: "(no data)")."""
    return {t.name: to_markdown(t) for t in tables}


def document_block_names() -> tuple[str, ...]:
    """The names ``document_blocks`` gives a table under, whatever the runs (a summary table with no data is kept
    empty): what a ``<!-- resdom:table NAME -->`` block may name."""
    return (*(t.name for t in summary_tables([])), COVERAGE_BLOCK)


def document_blocks(runs: list[RunRecord], tables: list[Table] | None = None) -> dict[str, str]:
    """Markdown by block name: every summary table of ``runs`` (``tables`` if already built) and ``run_coverage``."""
    tables = summary_tables(runs) if tables is None else tables
    return {**table_blocks(tables), COVERAGE_BLOCK: run_coverage(runs)}
