"""Summary tables that mirror the paper's, from a set of runs: mean and standard deviation over seeds.

Each table is one row per (data set, model) (the data-set table: one row per data set), built from the per-run
numbers of ``run_values``. The standard deviation is the sample one (ddof = 1) over the seeds present; with a
single seed it is left empty. Writers give Markdown (``mean ± std``), CSV (raw ``*_mean`` / ``*_std`` / ``n``
columns) and LaTeX (a ``tabular``).
"""

from __future__ import annotations

import csv
import html
import io
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resdom.experiments import REMEDY_LABELS, remedy_variant
from resdom.io import csv_text
from resdom.limits import visible
from resdom.records import REGISTRY, Column, TableSpec
from resdom.report.collect import RunRecord, model_order
from resdom.report.markdown import NO_DATA, markdown_lines, md_text
from resdom.report.values import NO_VALIDATION, no_validation, run_values, value_source


@dataclass
class Table:
    """An aggregated table: ``rows`` of ``{"dataset", "model", "n", key: (mean, std | None), "values": {key:
    [each run's value]}}``, ``n`` the seeds averaged (a cell over fewer says so); ``notes``: which runs of a row were
    left out of which columns, and why; ``remarks``: runs averaged in but to be read with care, and why."""

    name: str
    title: str
    caption: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    per_model: bool = True
    notes: list[str] = field(default_factory=list)
    remarks: list[str] = field(default_factory=list)  # runs to read with care (``early_peaks``), a line each

    @property
    def empty(self) -> bool:
        return not self.rows


# ---------------------------------------------------------------- aggregation


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof = 1; None for a single value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))


def aggregate(runs: list[RunRecord], columns: list[Column], name: str, title: str, caption: str) -> Table:
    """Group runs by (data set, model); each cell is (mean, std) over the runs that have the value. A row's ``n`` is
    the most seeds any of its cells averages; a run that some cells of its row lack while other runs have them is
    named in ``notes`` with the cause (``RunRecord.why_empty``)."""
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for run in runs:
        if run.error and not run.diagnostics and not run.metrics:
            continue
        groups.setdefault((run.dataset, run.model), []).append(run)
    table = Table(name, title, caption, columns)
    for (dataset, model), group in sorted(groups.items(), key=lambda kv: (kv[0][0], model_order(kv[0][1]))):
        vals = [run_values(r) for r in group]
        row: dict[str, Any] = {"dataset": dataset, "model": model, "values": {}}
        for col in columns:
            xs = [x for x in (v.get(col.key) for v in vals) if x is not None]
            row[col.key] = mean_std(xs) if xs else None
            row["values"][col.key] = xs
        row["n"] = max(len(xs) for xs in row["values"].values())
        if row["n"]:
            table.rows.append(row)
            table.notes += _left_out(group, vals, [c for c in columns if row["values"][c.key]])
    return table


def _left_out(group: list[RunRecord], vals: list[dict[str, float | None]], shown: list[Column]) -> list[str]:
    """``data set / label / seed k: cause (left out of: columns)`` for each run of ``group`` that lacks a value
    of ``shown`` (columns that other runs of the group have), one line per run and cause."""
    out: dict[tuple[str, str], list[str]] = {}
    for run, v in zip(group, vals):
        for col in shown:
            if v.get(col.key) is None:
                source = "metrics" if col.key == "train_s" and not run.cell else value_source(col.key)  # a run
                # directory's training seconds: its epoch log, of a finished run (metrics.json)
                cause = NO_VALIDATION if col.key == "best_epoch" and no_validation(run) else run.why_empty(source)
                out.setdefault((run.label, cause), []).append(col.label)
    lines = []
    for (label, cause), cols in out.items():
        which = "every column" if len(cols) == len(shown) else ", ".join(cols)
        lines.append(f"{label}: {cause} (left out of {which})")
    return lines


def diagnostic_tables() -> list[tuple[str, TableSpec]]:
    """(name, table) of every registered diagnostic that declares a report table, in the tables' ``order``."""
    return sorted(((d.name, d.table) for d in REGISTRY.values() if d.table is not None), key=lambda nt: nt[1].order)


def dataset_table(runs: list[RunRecord], extra_stats: dict[str, dict[str, Any]] | None = None) -> Table:
    """Data set statistics (spec §1), one row per data set, from each run's ``config.json`` ``data.stats``
    (or ``extra_stats[dataset]``)."""
    cols = [Column("users", "Users", "count"), Column("items", "Items", "count"),
            Column("interactions", "Interactions", "count"), Column("avg_length", "Avg. length", "num"),
            Column("max_length", "Max. length", "count"), Column("density", "Density", "sci"),
            Column("span_days", "Span (days)", "days")]
    stats: dict[str, dict[str, Any]] = {}
    for run in runs:
        if run.data_stats and run.dataset not in stats:
            stats[run.dataset] = run.data_stats
    stats.update(extra_stats or {})
    table = Table("datasets", "Data set statistics",
                  "One row per data set after preprocessing: users, items, interactions, sequence lengths, "
                  "density = interactions / (users x items), and the time span.", cols, per_model=False)
    for dataset in sorted(stats):
        s = stats[dataset]
        row: dict[str, Any] = {"dataset": dataset, "model": "", "n": 1}
        for c in cols:
            x = s.get(c.key)
            row[c.key] = (float(x), None) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
        table.rows.append(row)
    return table


def summary_tables(runs: list[RunRecord], extra_stats: dict[str, dict[str, Any]] | None = None) -> list[Table]:
    """All paper tables for ``runs``, in the paper's order: the data sets, each registered diagnostic's table (its
    record's ``table``, in their ``order``), accuracy, training and the remedies; tables with no data are kept but
    empty."""
    specs: list[tuple[str, str, str, list[Column]]] = [
        ("accuracy", "Accuracy",
         "Test HR@K and NDCG@K with full ranking over all items and seen items filtered.",
         [Column(k, k, "metric") for k in ("HR@10", "NDCG@10", "HR@20", "NDCG@20")]
         + [Column("n_users", "Users", "count")]),
        ("training", "Training",
         "Best epoch (by validation NDCG@10) and epochs run, each seed's in seed order; how many seeds early "
         "stopping ended (the others: the epoch cap); the summed training-pass minutes per seed, mean ± std "
         f"(results-store cells). Seeds whose best epoch came at most {EARLY_PEAK} epochs in, or before a third of "
         "the other seeds' median best epoch, are named under the table with their test NDCG@10.",
         [Column("best_epoch", "Best epoch", "each"), Column("epochs_run", "Epochs", "each"),
          Column("early_stopped", "Ended by early stopping", "of"), Column("train_min", "Train min", "count")]),
    ]
    tables = [dataset_table(runs, extra_stats)]
    tables += [aggregate(runs, list(t.columns), name, t.title, t.caption) for name, t in diagnostic_tables()]
    tables += [aggregate(runs, cols, name, title, caption) for name, title, caption, cols in specs]
    next(t for t in tables if t.name == "training").remarks = early_peaks(runs)
    return tables + [remedies_table(remedy_runs(runs))]


EARLY_PEAK = 5  # a best epoch at or before this one, then early stopping: validation peaked before training settled
EARLY_SHARE = 1 / 3  # or a best epoch below this share of the median best epoch of the other seeds of its row


def early_peaks(runs: list[RunRecord]) -> list[str]:
    """The runs early stopping ended after a best epoch of at most ``EARLY_PEAK`` or below ``EARLY_SHARE`` of the
    median best epoch of the other seeds of its data set and model (one early validation peak that the next
    epochs' patience did not see beaten), each with its test NDCG@10 beside the range of those other seeds': such a
    seed is averaged in like the others (the protocol's outcome), and the line lets a reader see how far it pulls
    the row."""
    groups: dict[tuple[str, str], list[tuple[RunRecord, dict[str, float | None]]]] = {}
    for run in runs:
        groups.setdefault((run.dataset, run.model), []).append((run, run_values(run)))
    lines = []
    for _, group in sorted(groups.items(), key=lambda kv: (kv[0][0], model_order(kv[0][1]))):
        for run, v in group:
            best, ran = v.get("best_epoch"), v.get("epochs_run")
            if best is None or v.get("early_stopped") != 1.0:
                continue
            bests = [b for r, w in group if r is not run and (b := w.get("best_epoch")) is not None]
            if best > EARLY_PEAK and not (bests and best < EARLY_SHARE * statistics.median(bests)):
                continue
            line = f"{run.label}: best epoch {best:.0f} of {ran:.0f} run"
            ndcg = v.get("NDCG@10")
            if ndcg is not None:
                line += f"; test NDCG@10 {ndcg:.4f}"
                others = [x for r, w in group if r is not run and (x := w.get("NDCG@10")) is not None]
                if others:
                    line += (f" against {min(others):.4f}" if len(others) == 1 else
                             f" against {min(others):.4f} to {max(others):.4f}") + \
                        f" for the other seed{'s' if len(others) > 1 else ''}"
            lines.append(line)
    return lines


def remedy_runs(runs: list[RunRecord]) -> list[RunRecord]:
    """The runs a remedies comparison reads: every training-time variant (``experiments.remedy_variant``)
    and, on each data set where a variant of a model ran, that model's own runs (the base)."""
    parts = {r.model: remedy_variant(r.model) for r in runs}
    bases = {(r.dataset, p[0]) for r in runs if (p := parts[r.model]) is not None}
    return [r for r in runs if parts[r.model] is not None or (r.dataset, r.model) in bases]


def remedies_table(runs: list[RunRecord], order: list[str] | None = None) -> Table:
    """The per-variant table of ``resdom remedies`` (docs/remedies.md): one row per (data set, variant label),
    rows in ``order`` (default ``experiments.REMEDY_LABELS``: each model, then its variants), mean ± std over
    seeds."""
    order = list(order or REMEDY_LABELS)
    cols = [Column("HR@10", "HR@10", "metric"), Column("NDCG@10", "NDCG@10", "metric"), Column("HRLI@1", "HRLI@1"),
            Column("HRL2I@1", "HRL2I@1"), Column("mix_all_+Res", "+Res (all)"), Column("mix_last_+Res", "+Res (last)"),
            Column("rec_share", "Recoverable"), Column("trained_scale", "Residual scale", "num"),
            Column("train_s", "Train s", "count")]
    table = aggregate(runs, cols, "remedies", "Remedies: accuracy and last-item reliance per variant",
                      "Test HR@10 / NDCG@10 (filtered, full ranking), HRLI@1 / HRL2I@1 (unfiltered), the pooled +Res "
                      "mixing ratio (norm of sums, all real positions and the last), the share of test users whose "
                      "miss is recoverable from positions L-1..L-3, the residual scale trained into the blocks (the "
                      "fixed scale, or the learned gates' mean over layers and channels; – for the base model's 1), "
                      "and the summed training-pass seconds; mean ± std over seeds (n).")
    rank = {m: i for i, m in enumerate(order)}
    table.rows.sort(key=lambda r: (r["dataset"], rank.get(r["model"], len(rank))))
    return table


# ---------------------------------------------------------------- formatting


def format_value(x: float, kind: str) -> str:
    if kind == "pct":
        return f"{100 * x:+.1f}%"
    if kind == "count":
        return f"{x:,.0f}"
    if kind == "num":
        return f"{x:.2f}"
    if kind == "days":  # a span of 0.45 days is not 0; 4,424 days to the day
        return f"{x:,.0f}" if x >= 10 else f"{x:.2f}"
    if kind == "alpha":  # 0.125 as swept, not 0.12; a mean over seeds such as 0.1667 to 2 decimals
        return f"{x:.3f}" if abs(x - round(x, 3)) < 1e-9 and abs(x - round(x, 2)) >= 1e-9 else f"{x:.2f}"
    if kind == "metric":
        return f"{x:.4f}"
    if kind == "sci":
        return f"{x:.2e}" if x < 0.01 else f"{x:.4f}"
    return f"{x:.3f}"


def format_cell(cell: tuple[float, float | None] | None, kind: str, pm: str = " ± ") -> str:
    """``mean ± std`` (``mean`` alone for one seed, and for a count that every seed shares; ``–`` when missing)."""
    if cell is None:
        return "–"
    mean, std = cell
    text = format_value(mean, kind)
    if std is not None and not (kind == "count" and std == 0):
        text += pm + (f"{100 * std:.1f}%" if kind == "pct" else format_value(std, "num" if kind == "alpha" else kind))
    return text


def cell_text(row: dict[str, Any], col: Column) -> str:
    """The text of one table cell: ``format_cell`` of the mean ± std, or the seeds' values for ``each`` / ``of``;
    ``(n=k)`` after a cell that averages fewer seeds than its row's ``n``."""
    xs = row.get("values", {}).get(col.key)
    if col.kind == "each" and xs:
        return " / ".join(format_value(x, "count") for x in xs)
    if col.kind == "of" and xs:
        return f"{sum(1 for x in xs if x)} of {len(xs)}"
    fewer = f" (n={len(xs)})" if xs and len(xs) < row.get("n", len(xs)) else ""
    return format_cell(row[col.key], col.kind) + fewer


def seeds_text(n: int) -> str:
    """``1 seed`` / ``3 seeds``: how many seeds a number averages."""
    return "1 seed" if n == 1 else f"{n} seeds"


def seeds_cell(n: int) -> str:
    """A Seeds column's entry: ``1 seed`` (single-seed rows are marked), else the count."""
    return "1 seed" if n == 1 else str(n)


def _headers(table: Table) -> list[str]:
    first = ["Data set", "Model", "Seeds"] if table.per_model else ["Data set"]
    return first + [c.label for c in table.columns]


def _lead(table: Table, row: dict[str, Any]) -> list[str]:
    return [row["dataset"], row["model"], seeds_cell(row["n"])] if table.per_model else [row["dataset"]]


REMARKS_LEAD = (f"Early peaks (averaged in like every seed; early stopping ended the run after a best epoch of at "
                f"most {EARLY_PEAK} or below a third of the other seeds' median):")


def to_markdown(table: Table) -> str:
    """A GitHub-flavoured Markdown table (header, then one line per row)."""
    rows = [_lead(table, row) + [cell_text(row, c) for c in table.columns] for row in table.rows]
    lines = markdown_lines(_headers(table), rows, NO_DATA)
    if table.notes:
        lines += ["", "Left out (a row's Seeds count only the runs averaged):",
                  *(f"- {md_text(x)}" for x in table.notes)]
    if table.remarks:
        lines += ["", REMARKS_LEAD, *(f"- {md_text(x)}" for x in table.remarks)]
    return "\n".join(lines) + "\n"


def html_text(text: str) -> str:
    """``text`` as HTML text or an attribute's value: escaped (``<``, ``&``, both quotes), and a control character
    (an escape sequence in a label, which ``cat report.html`` would send to a terminal; a NUL, which a browser drops)
    written as its code (``visible``: ``\\x1b``)."""
    return html.escape(visible(text))


def to_csv(table: Table) -> str:
    """Raw numbers: dataset, model, n, then ``<key>_mean``, ``<key>_std`` and ``<key>_n`` (the seeds averaged) per
    column (empty when missing)."""
    rows: list[list[Any]] = [["dataset", "model", "n"]
                             + [f"{c.key}_{s}" for c in table.columns for s in ("mean", "std", "n")]]
    for row in table.rows:
        out: list[Any] = [row["dataset"], row["model"], row["n"]]
        for c in table.columns:
            cell = row[c.key]
            n = len(row.get("values", {}).get(c.key, [])) if "values" in row else (0 if cell is None else 1)
            out += ["", "", n] if cell is None else [repr(cell[0]), "" if cell[1] is None else repr(cell[1]), n]
        rows.append(out)

    def write(end: str) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator=end).writerows(rows)
        return buf.getvalue()

    return csv_text(write)


_LATEX_ESCAPES = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}",
                  "α": r"$\alpha$", "Δ": r"$\Delta$", "–": "--", "±": r"$\pm$", "~": r"\textasciitilde{}",
                  "\\": r"\textbackslash{}", "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
                  "\n": " ", "\r": " "}


def latex_escape(text: str) -> str:
    """``text`` as LaTeX text: every character LaTeX reads as a command (a data set file named ``shop_v2^new``,
    a folder ``C:\\runs``) written as itself, a line break as a space, any other control character as its code
    (``visible``: a NUL or an escape character, which LaTeX refuses as an invalid character, is ``\\x00``)."""
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in visible(text))


def to_latex(table: Table) -> str:
    """A ``table`` environment with a ``tabular`` (booktabs rules), caption and label ``tab:<name>``."""
    header = _headers(table)
    n_lead = 3 if table.per_model else 1
    spec = "l" * n_lead + "r" * len(table.columns)
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(table.title)}. "
             rf"{latex_escape(table.caption)}}}", rf"\label{{tab:{table.name}}}", rf"\begin{{tabular}}{{{spec}}}",
             r"\toprule", " & ".join(latex_escape(h) for h in header) + r" \\", r"\midrule"]
    for row in table.rows:
        cells = [latex_escape(x) for x in _lead(table, row)]
        cells += [latex_escape(cell_text(row, c)) for c in table.columns]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [rf"\par\smallskip{{\footnotesize Left out: {latex_escape(x)}}}" for x in table.notes]
    lines += [rf"\par\smallskip{{\footnotesize Early peak: {latex_escape(x)}}}" for x in table.remarks]
    lines += [r"\end{table}"]
    return "\n".join(lines) + "\n"


def to_html(table: Table) -> str:
    """An HTML ``<table>`` (escaped text, numbers right-aligned)."""
    head = "".join(f"<th>{html_text(h)}</th>" for h in _headers(table))
    body = []
    for row in table.rows:
        lead = "".join(f"<td>{html_text(x)}</td>" for x in _lead(table, row))
        nums = "".join(f'<td class="num">{html_text(cell_text(row, c))}</td>' for c in table.columns)
        body.append(f"<tr>{lead}{nums}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(_headers(table))}">(no data)</td></tr>')
    notes = "".join(f"<li>{html_text(x)}</li>" for x in table.notes)
    remarks = "".join(f"<li>{html_text(x)}</li>" for x in table.remarks)
    return f'<table class="data" id="table-{table.name}"><thead><tr>{head}</tr></thead><tbody>' + "".join(body) + \
        "</tbody></table>" + (f'<p class="note">Left out:</p><ul class="note">{notes}</ul>' if notes else "") + \
        (f'<p class="note">{html_text(REMARKS_LEAD)}</p><ul class="note">{remarks}</ul>' if remarks else "")


def table_files(tables: list[Table], out_dir: str | Path) -> dict[Path, str]:
    """``<name>.md``, ``<name>.csv`` and ``<name>.tex`` per table in ``out_dir``, and ``tables.md`` with all of them:
    {path: text}, to write together (``report.write_report``)."""
    out_dir = Path(out_dir)
    files: dict[Path, str] = {}
    writers: list[tuple[str, Callable[[Table], str]]] = [("md", to_markdown), ("csv", to_csv), ("tex", to_latex)]
    for table in tables:
        for ext, fn in writers:
            files[out_dir / f"{table.name}.{ext}"] = fn(table)
    files[out_dir / "tables.md"] = "\n".join(f"## {t.title}\n\n{t.caption}\n\n{to_markdown(t)}" for t in tables)
    return files
