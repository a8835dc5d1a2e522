"""Reports from run directories: summary tables (Markdown, CSV, LaTeX), figures (PNG, PDF), an HTML page and its
Markdown twin. See docs/reports.md.

The generic report, for any user's runs and stores: accuracy, training, the data sets, every diagnostic's table and
figures (from its record in ``resdom.records``) and the coverage of what the runs hold. ``build_report(run_dirs,
out_dir)`` writes::

    OUT/report.html      self-contained (figures embedded as base64 PNG)
    OUT/report.md        Markdown twin (links figures/*.png)
    OUT/figures/         <key>.png and <key>.pdf per figure
    OUT/tables/          <name>.md / .csv / .tex per table with rows, tables.md with all of them, and run_coverage.md

``write_report`` writes what a report is given (tables, blocks, figures); the paper study (``resdom.study``) builds
its own blocks and figures on these functions. ``document_blocks(runs)`` gives the Markdown of every table by name,
for the ``<!-- resdom:table NAME -->`` blocks of a hand-written document (``resdom report --doc``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resdom.io import atomic_write_files, text_bytes
from resdom.report.collect import RunRecord, find_run_dirs, left_out, read_run, read_runs
from resdom.report.figures import MODEL_COLORS, ReportFigure, all_figures
from resdom.report.findings import finding_lines
from resdom.report.html import render_html, render_markdown
from resdom.report.markdown import markdown_table
from resdom.report.tables import Table, summary_tables, table_files, to_markdown

__all__ = ["MODEL_COLORS", "ReportFigure", "ReportPaths", "RunRecord", "Table", "build_report", "document_block_names",
           "document_blocks", "find_run_dirs", "finding_lines", "left_out", "read_run", "read_runs", "run_coverage",
           "summary_tables", "table_blocks", "write_report"]

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
                 extra_stats: dict[str, dict[str, Any]] | None = None, figures: bool = True) -> ReportPaths:
    """Read ``run_dirs`` and write the generic report into ``out_dir``: the summary tables that have rows,
    ``run_coverage``, the figures the runs have data for, ``report.html`` and ``report.md``; with ``figures=False``
    the tables only (``out_dir/tables/``).

    ``extra_stats``: data set statistics by data set name, for runs whose config.json lacks ``data.stats``.
    """
    runs = read_runs(list(run_dirs))
    every_table = summary_tables(runs, extra_stats)
    blocks = document_blocks(runs, every_table)
    return write_report(runs, out_dir, [t for t in every_table if not t.empty],
                        {COVERAGE_BLOCK: blocks[COVERAGE_BLOCK]}, blocks, title,
                        all_figures(runs) if figures else None)


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
