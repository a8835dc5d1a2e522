"""Reports from run directories: summary tables (Markdown, CSV, LaTeX), figures (PNG, PDF), an HTML page and its
Markdown twin. See docs/reports.md.

``build_report(run_dirs, out_dir)`` writes::

    OUT/report.html      self-contained (figures embedded as base64 PNG)
    OUT/report.md        Markdown twin (links figures/*.png)
    OUT/figures/         <key>.png and <key>.pdf per figure
    OUT/tables/          <name>.md / .csv / .tex per table, and tables.md with all of them; claims.md, the
                         paper's claims checked per (data set, causal model) (report.claims), the blocks
                         of report.evidence_blocks (remedy_verdicts.md, comparisons.md, proportions.md, ...),
                         fidelity.md (report.fidelity), reliance_dynamics.md (report.reliance_dynamics),
                         seed_spread.md (report.seed_spread),
                         probe_readout.md and probe_embeddings.md (report.probe_blocks)

``document_blocks(runs)`` gives the Markdown of every table by name, for the ``<!-- resdom:table NAME -->`` blocks
of a hand-written document (``resdom report --doc``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resdom.io import atomic_write_text
from resdom.report.claims import claims_markdown
from resdom.report.collect import RunRecord, find_run_dirs, left_out, read_run, read_runs
from resdom.report.compare import ComparisonTable
from resdom.report.echo import EchoTable
from resdom.report.evidence_blocks import (
    EVIDENCE_BLOCKS,
    comparison_evidence,
    comparison_figures,
    echo_evidence,
    echo_figures,
    evidence_blocks,
)
from resdom.report.fidelity import fidelity_block, published_accuracy_block
from resdom.report.figures import MODEL_COLORS, ReportFigure, all_figures
from resdom.report.findings import finding_lines
from resdom.report.html import render_html, render_markdown
from resdom.report.probe_blocks import ProbeTables, probe_blocks, probe_figures, probe_tables
from resdom.report.reliance_dynamics import reliance_dynamics_block
from resdom.report.seed_spread import seed_spread_block
from resdom.report.summary import summary_markdown
from resdom.report.tables import Table, summary_tables, to_markdown, write_tables

__all__ = ["MODEL_COLORS", "ReportFigure", "ReportPaths", "RunRecord", "Table", "build_report", "document_block_names",
           "document_blocks", "find_run_dirs", "finding_lines", "left_out", "read_run", "read_runs", "summary_tables"]


# blocks built from the runs beside the summary tables: the paper side by side, docs/results.md's questions 4, 1 and 2,
# why seeds disagree on HRLI@1, and the summary of every block's conclusions (``report.summary``)
BEYOND_TABLES = ("fidelity", "published_accuracy", "reliance_dynamics", "seed_spread", "probe_readout",
                 "probe_embeddings", "summary")


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


def build_report(run_dirs: list[str | Path], out_dir: str | Path, title: str = "resdom report",
                 extra_stats: dict[str, dict[str, Any]] | None = None, figures: bool = True) -> ReportPaths:
    """Read ``run_dirs`` and write tables, figures, ``report.html`` and ``report.md`` into ``out_dir``; with
    ``figures=False`` the tables only (``out_dir/tables/``: what a results-store commit carries).

    ``extra_stats``: data set statistics by data set name, for runs whose config.json lacks ``data.stats``.
    """
    out_dir = Path(out_dir)
    runs = read_runs(list(run_dirs))
    study = is_study(runs)
    every_table = summary_tables(runs, extra_stats)
    # a user's own runs: the tables that have rows only
    tables = every_table if study else [t for t in every_table if not t.empty]
    table_paths = write_tables(tables, out_dir / "tables")
    # the bootstraps the blocks and figures share
    echo, probes, comparisons = ((echo_evidence(runs), probe_tables(runs), comparison_evidence(runs)) if study
                                 else (None, None, None))
    blocks = document_blocks(runs, every_table, echo=echo, probes=probes, comparisons=comparisons)
    # the study's blocks (the claims, the per-user statistics, the paper side by side, its questions); one's own
    # runs: their coverage
    written = {n: blocks[n] for n in ("claims", *EVIDENCE_BLOCKS, *BEYOND_TABLES)} if study else {
        "run_coverage": run_coverage(runs)}
    for name, text in written.items():
        atomic_write_text(out_dir / "tables" / f"{name}.md", text)
        table_paths.append(out_dir / "tables" / f"{name}.md")
    if not figures:
        return ReportPaths(out_dir, None, None, {}, table_paths, finding_lines(runs), tables, blocks, runs)
    drawn = all_figures(runs)
    if study:
        drawn += comparison_figures(runs, table=comparisons)  # the comparisons block at a glance
        drawn += echo_figures(runs, table=echo)  # question 3 of "Beyond the paper": the echo's cost
        drawn += probe_figures(runs, tables=probes)  # questions 1 and 2
    fig_paths = {f.key: f.save(out_dir / "figures") for f in drawn}
    html_path, md_path = out_dir / "report.html", out_dir / "report.md"
    atomic_write_text(html_path, render_html(runs, drawn, tables, title))
    atomic_write_text(md_path, render_markdown(runs, drawn, tables, title))
    return ReportPaths(out_dir, html_path, md_path, fig_paths, table_paths, finding_lines(runs), tables, blocks, runs)


def is_study(runs: list[RunRecord]) -> bool:
    """Whether the reproduction study's blocks apply to ``runs``: they are cells of a results store (``resdom
    reproduce --store``, the paper's grid). A report of one's own runs gets the generic tables only: accuracy,
    training, every diagnostic's table with rows, and ``run_coverage``."""
    return any(r.cell for r in runs)


def run_coverage(runs: list[RunRecord]) -> str:
    """The ``run_coverage`` block: per run, its data set, model and seed, which diagnostics it holds (of its kept
    checkpoint) and whether its per-user evidence (``users.npz``) is there, for run folders and store cells alike."""
    rows = ["| Run | Data set | Model | Seed | Diagnostics | Per-user evidence |", "|---|---|---|---|---|---|"]
    for r in runs:
        names = ", ".join(sorted(n for n, d in r.diagnostics.items() if d)) or "none"
        rows.append(f"| {r.path} | {r.dataset} | {r.model} | {r.seed if r.seed is not None else '–'} | {names} | "
                    f"{'yes' if r.users_path.is_file() else 'no'} |")
    have = sum(r.users_path.is_file() for r in runs)
    return "\n".join(rows) + f"\n\nPer-user evidence (users.npz) in {have} of {len(runs)} run(s).\n"


def document_block_names() -> tuple[str, ...]:
    """The names ``document_blocks`` gives a table under, whatever the runs (a summary table with no data is kept
    empty): what a ``<!-- resdom:table NAME -->`` block may name."""
    return (*(t.name for t in summary_tables([])), "claims", *EVIDENCE_BLOCKS, *BEYOND_TABLES)


def document_blocks(runs: list[RunRecord], tables: list[Table] | None = None, *, echo: EchoTable | None = None,
                    probes: ProbeTables | None = None, comparisons: ComparisonTable | None = None) -> dict[str, str]:
    """Markdown by block name: every summary table of ``runs`` (``tables`` if already built), ``claims``, the
    blocks of ``report.evidence_blocks`` (``EVIDENCE_BLOCKS``: remedy_verdicts, comparisons, proportions, ...),
    ``fidelity`` and ``published_accuracy`` (``report.fidelity``), ``reliance_dynamics``
    (``report.reliance_dynamics``), ``seed_spread`` (``report.seed_spread``), ``probe_readout`` and
    ``probe_embeddings`` (``report.probe_blocks``), and ``summary`` (``report.summary``, from all of these).
    ``echo``, ``probes``, ``comparisons``: the echo, probe and comparison bootstraps (``echo_evidence``,
    ``probe_tables``, ``comparison_evidence``), made here where not given."""
    tables = summary_tables(runs) if tables is None else tables
    blocks = {**{t.name: to_markdown(t) for t in tables}, "claims": claims_markdown(runs),
              **evidence_blocks(runs, echo=echo, comparisons=comparisons),
              "fidelity": fidelity_block(runs),
              "published_accuracy": published_accuracy_block(runs),
              "reliance_dynamics": reliance_dynamics_block(runs),
              "seed_spread": seed_spread_block(runs),
              **probe_blocks(runs, tables=probes)}
    return {**blocks, "summary": summary_markdown(blocks)}
