"""The reproduction study of Kozaki et al. (RecSys 2026) on top of the generic report: what ``resdom report`` adds
when it reads results-store cells (``resdom reproduce --store``, the paper's grid). See docs/reports.md and
docs/results.md.

A layer of its own above ``resdom.report`` (docs/architecture.md, "Layers"): it reads runs through the report's
public functions (``report.collect`` records, ``report.values``, ``report.tables``, ``report.figures``,
``report.compare`` and ``report.stats``) and the experiment settings; the report never imports it. Torch-free, as the
report.

``build_report(run_dirs, out_dir)`` writes what the generic report writes, every summary table kept (a table with no
data says so), and beside them in ``OUT/tables/``: claims.md, the paper's claims checked per (data set, causal
model) (``study.claims``), the blocks of ``study.evidence_blocks`` (remedy_verdicts.md, comparisons.md,
proportions.md, ...), fidelity.md and published_accuracy.md (``study.fidelity``), reliance_dynamics.md
(``study.reliance_dynamics``), seed_spread.md (``study.seed_spread``), probe_readout.md and probe_embeddings.md
(``study.probe_blocks``) and summary.md (``study.summary``); and their figures.

``document_blocks(runs)`` gives the Markdown of every block by name, for the ``<!-- resdom:table NAME -->`` blocks of
docs/results.md and docs/remedies.md (``resdom report results --doc docs/results.md --doc docs/remedies.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from resdom.report import (
    ReportFigure,
    ReportPaths,
    RunRecord,
    Table,
    checked_report,
    read_runs,
    summary_tables,
    table_blocks,
    write_report,
)
from resdom.report.compare import ComparisonTable
from resdom.report.figures import all_figures
from resdom.rundir import RunDir
from resdom.study.claims import claims_markdown
from resdom.study.echo import EchoTable
from resdom.study.evidence_blocks import (
    EVIDENCE_BLOCKS,
    comparison_evidence,
    comparison_figures,
    echo_evidence,
    echo_figures,
    evidence_blocks,
)
from resdom.study.fidelity import fidelity_block, published_accuracy_block
from resdom.study.probe_blocks import ProbeTables, probe_blocks, probe_figures, probe_tables
from resdom.study.reliance_dynamics import fig_reliance_dynamics, reliance_dynamics_block
from resdom.study.seed_spread import fig_seed_spread, seed_spread_block
from resdom.study.summary import summary_markdown

__all__ = ["BEYOND_TABLES", "STUDY_FIGURE_KEYS", "build_report", "build_report_files", "document_block_names",
           "document_blocks", "is_study", "study_figures"]

# blocks built from the runs beside the summary tables: the paper side by side, docs/results.md's questions 4, 1 and 2,
# why seeds disagree on HRLI@1, and the summary of every block's conclusions (``study.summary``)
BEYOND_TABLES = ("fidelity", "published_accuracy", "reliance_dynamics", "seed_spread", "probe_readout",
                 "probe_embeddings", "summary")
# the study's figures drawn beside the generic ones where their data are (``study_figures``); linked from the
# documents, not shown by report.html / report.md
STUDY_FIGURE_KEYS = ("reliance_dynamics", "seed_spread")


def is_study(run_dirs: list[Path]) -> bool:
    """Whether the reproduction study applies to ``run_dirs``: one of them is a results-store cell (holds
    ``cell.json``: ``resdom reproduce --store``, the paper's grid). What ``resdom report`` chooses the study by; a
    report of one's own runs is the generic report (``resdom.report``)."""
    return any(RunDir(d).cell.is_file() for d in run_dirs)


def build_report(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "resdom report",
                 extra_stats: dict[str, dict[str, Any]] | None = None, figures: bool = True,
                 overwrite: bool = False) -> ReportPaths:
    """Read ``run_dirs`` and write the study's report into ``out_dir``: every summary table, the study's blocks
    (``document_blocks``) as ``tables/<name>.md``, and the generic figures with the study's; with
    ``figures=False`` the tables only (``out_dir/tables/``: what a results-store commit carries).

    ``extra_stats``: data set statistics by data set name, for runs whose config.json lacks ``data.stats``.
    ``out_dir`` is checked as ``resdom report --out`` checks it (``report.checked_report``; ``overwrite``: a folder
    of other files is moved aside to ``OUT.replaced-K``).
    """
    return checked_report(run_dirs, out_dir, overwrite, lambda out: build_report_files(run_dirs, out, title,
                                                                                     extra_stats, figures))


def build_report_files(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "resdom report",
                       extra_stats: dict[str, dict[str, Any]] | None = None, figures: bool = True) -> ReportPaths:
    """``build_report`` into a folder its caller has checked and holds (``resdom report``)."""
    runs = read_runs(list(run_dirs))
    every_table = summary_tables(runs, extra_stats)
    # the bootstraps the blocks and figures share
    echo, probes, comparisons = echo_evidence(runs), probe_tables(runs), comparison_evidence(runs)
    blocks = document_blocks(runs, every_table, echo=echo, probes=probes, comparisons=comparisons)
    written = {n: blocks[n] for n in ("claims", *EVIDENCE_BLOCKS, *BEYOND_TABLES)}
    drawn = None
    if figures:
        drawn = [*all_figures(runs), *study_figures(runs),
                 *comparison_figures(runs, table=comparisons),  # the comparisons block at a glance
                 *echo_figures(runs, table=echo),  # question 3 of "Beyond the paper": the echo's cost
                 *probe_figures(runs, tables=probes)]  # questions 1 and 2
    return write_report(runs, out_dir, every_table, written, blocks, title, drawn, every_figure=True)


def study_figures(runs: list[RunRecord]) -> list[ReportFigure]:
    """The study's figures of ``runs`` that have data (``STUDY_FIGURE_KEYS``): reliance against accuracy (where
    monitored curves of causal models are) and the seeds' spread (where a causal model has enough monitored seeds)."""
    return [f for f in (fig_reliance_dynamics(runs), fig_seed_spread(runs)) if f is not None]


def document_block_names() -> tuple[str, ...]:
    """The names ``document_blocks`` gives a block under, whatever the runs (a summary table with no data is kept
    empty): what a ``<!-- resdom:table NAME -->`` block of a study document may name."""
    return (*(t.name for t in summary_tables([])), "claims", *EVIDENCE_BLOCKS, *BEYOND_TABLES)


def document_blocks(runs: list[RunRecord], tables: list[Table] | None = None, *, echo: EchoTable | None = None,
                    probes: ProbeTables | None = None, comparisons: ComparisonTable | None = None) -> dict[str, str]:
    """Markdown by block name: every summary table of ``runs`` (``tables`` if already built), ``claims``, the
    blocks of ``study.evidence_blocks`` (``EVIDENCE_BLOCKS``: remedy_verdicts, comparisons, proportions, ...),
    ``fidelity`` and ``published_accuracy`` (``study.fidelity``), ``reliance_dynamics``
    (``study.reliance_dynamics``), ``seed_spread`` (``study.seed_spread``), ``probe_readout`` and
    ``probe_embeddings`` (``study.probe_blocks``), and ``summary`` (``study.summary``, from all of these).
    ``echo``, ``probes``, ``comparisons``: the echo, probe and comparison bootstraps (``echo_evidence``,
    ``probe_tables``, ``comparison_evidence``), made here where not given."""
    tables = summary_tables(runs) if tables is None else tables
    blocks = {**table_blocks(tables), "claims": claims_markdown(runs),
              **evidence_blocks(runs, echo=echo, comparisons=comparisons),
              "fidelity": fidelity_block(runs),
              "published_accuracy": published_accuracy_block(runs),
              "reliance_dynamics": reliance_dynamics_block(runs),
              "seed_spread": seed_spread_block(runs),
              **probe_blocks(runs, tables=probes)}
    return {**blocks, "summary": summary_markdown(blocks)}
