"""The document blocks of questions 1 and 2 of docs/results.md, "Beyond the paper", from a report's
runs, after the pattern of ``study.evidence_blocks``. No torch.

``probe_readout``     question 1: does a learned query token appended after the prefix (``<model>-query``) remove
                      last-item reliance? The residual account predicts HRLI@1 near 0 with the +Res mixing ratio
                      unchanged.
``probe_embeddings``  question 2: untied (``<model>-untied``) and projected (``<model>-projected``) output item
                      embeddings: does HRLI@1 fall, and what happens to accuracy?

Each block has three parts:

1. the comparison table, one row per (data set, probe, metric): the probe against its base model on NDCG@10 and
   HRLI@1 (``study.probes``: margins ±5% of the base's NDCG@10, ±0.02 HRLI@1) with the store's means, the
   difference, its 95% interval, the Holm-adjusted p and the verdict (``report.compare.compare_table``: paired
   bootstrap over users with the seeds resampled, Holm across the table's rows with evidence, TOST for
   equivalence; a row whose cells lack ``users.npz``, or a probe not trained, is "undecided");
2. the +Res mixing ratio (norm of sums, pooled over layers; mixing.json's ``all`` and ``last`` scopes) of probe and
   base side by side, mean ± std over the stored seeds ("1 seed" where one): descriptive, not tested; for question
   1 also the probe's HRLI@1 pooled over its seeds with a 95% interval (``stats.pooled_interval``: Wilson's of the
   pooled counts, widened to the seeds' t interval where that reaches further), and whether that is "near 0"
   (``near_zero``: the interval's upper end below the HRLI@1 margin);
3. the answer, generated from the verdicts (``readout_answer``, ``embeddings_answer``): it claims only what the
   verdicts say, and says "undecided" where the evidence is missing or the interval too wide; then the cells the
   study asks for (``TARGET_SEEDS`` seeds of each probe and base) not in the store yet, with the queue command.

``probe_figures`` draws both blocks' comparisons as one forest plot (``probes``): each probe's difference from its
base with its 95% interval and the equivalence margin, HRLI@1 in its own units, NDCG@10 as a share of the base's mean.

Rows: every probe of ``study.probes.PROBE_BASE`` on ``PROBE_DATASETS`` (the question's subject, whether trained
or not), any other probe label with cells in the runs, and a probe against its base trained with the probe's own
objective (``SAME_OBJECTIVE_BASE``: ``sasrec-query`` against ``sasrec-celast``) where that base has cells.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from resdom.experiments import PROBE_MODELS
from resdom.report.collect import RunRecord
from resdom.report.compare import (
    UNDECIDED,
    Comparison,
    ComparisonRow,
    ComparisonTable,
    EvidenceIndex,
    compact_cells,
    compare_table,
    count_tested,
    verdict_text,
)
from resdom.report.figures import ReportFigure, drawn_name, plain_text
from resdom.report.markdown import markdown_table
from resdom.report.stats import pooled_interval
from resdom.report.tables import seeds_text
from resdom.study.evidence_blocks import (
    COVERAGE_QUEUE,
    N_BOOT,
    difference_text,
    hrli_count,
    method_note,
    side_means,
    store_mean,
)
from resdom.study.probes import PROBE_BASE, PROBE_DATASETS, PROBE_METRICS, SAME_OBJECTIVE_BASE

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn, not with the report
    from matplotlib.figure import Figure

QUESTION_VARIANTS: dict[int, tuple[str, ...]] = {1: ("query",), 2: ("untied", "projected")}
BLOCK_QUESTION: dict[str, int] = {"probe_readout": 1, "probe_embeddings": 2}
PROBE_BLOCKS: tuple[str, ...] = tuple(BLOCK_QUESTION)
TARGET_SEEDS = 5  # the seeds each probe and its base are asked for on beauty-ts and toys-ts
MIXING_KEYS: tuple[tuple[str, str], ...] = (("mix_all_+Res", "+Res (all)"), ("mix_last_+Res", "+Res (last)"))
HRLI_MARGIN = PROBE_METRICS["HRLI@1"].value
NOT_TRAINED = "not trained yet"
PROBE_FIGURE_KEYS: tuple[str, ...] = ("probes",)  # the report figure made here (``probe_figures``)


# --- which probes, which cells ----------------------------------------------------------------------------------------

def _by_label(runs: list[RunRecord]) -> dict[tuple[str, str], list[RunRecord]]:
    """The runs with results by (data set, label)."""
    out: dict[tuple[str, str], list[RunRecord]] = {}
    for r in runs:
        if r.diagnostics or r.metrics:
            out.setdefault((r.dataset, r.model), []).append(r)
    return out


def probe_pairs(runs: list[RunRecord], question: int) -> list[tuple[str, str, str]]:
    """(data set, base, probe) of ``question``: ``PROBE_BASE``'s probes on ``PROBE_DATASETS``, then every other
    probe of ``PROBE_MODELS`` with cells in ``runs``, and each probe against its ``SAME_OBJECTIVE_BASE`` where that
    has cells; sorted by data set, model, the question's variant order, base (the model itself first)."""
    variants = QUESTION_VARIANTS[question]
    groups = _by_label(runs)
    pairs = {(ds, PROBE_BASE, f"{PROBE_BASE}-{v}") for ds in PROBE_DATASETS for v in variants}
    for ds, label in groups:
        base, _, variant = label.partition("-")
        if base in PROBE_MODELS and variant in variants:
            pairs.add((ds, base, label))
    for ds, base, probe in list(pairs):
        fair = SAME_OBJECTIVE_BASE.get(probe.split("-", 1)[1])
        if fair and (ds, f"{base}-{fair}") in groups:
            pairs.add((ds, f"{base}-{fair}", probe))
    models = {m: i for i, m in enumerate(PROBE_MODELS)}
    return sorted(pairs, key=lambda p: (p[0], models.get(p[2].split("-", 1)[0], len(models)),
                                        variants.index(p[2].split("-", 1)[1]), p[1]))


def missing_cells(runs: list[RunRecord], pairs: list[tuple[str, str, str]], target: int = TARGET_SEEDS) -> list[str]:
    """``"<data set>/<label>/seed<k>"`` for every seed 1..``target`` of each pair's base and probe not in
    ``runs`` (each cell once, in the pairs' order, probe before base)."""
    have = {(r.dataset, r.model, r.seed) for r in runs if r.diagnostics or r.metrics}
    out: list[str] = []
    for ds, base, probe in pairs:
        for label in (probe, base):
            for k in range(1, target + 1):
                cell = f"{ds}/{label}/seed{k}"
                if (ds, label, k) not in have and cell not in out:
                    out.append(cell)
    return out


# --- the parts of a block ---------------------------------------------------------------------------------------------

def _difference(r: ComparisonRow, trained: bool) -> str:
    if not trained:
        return f"{NOT_TRAINED} (no cells of {r.comparison.other} on {r.comparison.dataset})"
    return difference_text(r)


def near_zero(counts: list[tuple[int, int]] | None, margin: float = HRLI_MARGIN) -> str:
    """Is HRLI@1 pooled over seeds ((k, n) a seed) near 0? "yes" where its 95% interval's (``stats.pooled_interval``)
    upper end is below ``margin``, "no" where its lower end is above it, else (or without counts) "undecided"."""
    if not counts:
        return UNDECIDED
    lo, hi = pooled_interval(counts)
    return "yes" if hi < margin else "no" if lo > margin else UNDECIDED


def _seed_hrli(runs: list[RunRecord]) -> list[tuple[int, int]] | None:
    """(users whose last item is ranked first, users) of HRLI@1 for each of ``runs`` that has the count."""
    have = [c for c in (hrli_count(r) for r in runs) if c is not None]
    return have or None


def _hrli_text(counts: list[tuple[int, int]] | None) -> str:
    if not counts:
        return "–"
    k, n = sum(c for c, _ in counts), sum(t for _, t in counts)
    lo, hi = pooled_interval(counts)
    return f"{k:,} / {n:,} = {k / n:.3f} [{lo:.3f}, {hi:.3f}] ({seeds_text(len(counts))})"


def mixing_markdown(runs: list[RunRecord], pairs: list[tuple[str, str, str]], question: int) -> str:
    """Per (data set, probe): the +Res mixing ratios (``MIXING_KEYS``) of probe and base side by side, mean ± std
    over the stored seeds; for question 1 also the probe's pooled HRLI@1 with its Wilson interval and
    ``near_zero``."""
    groups = _by_label(runs)
    rows = []
    for ds, base, probe in pairs:
        p_runs, b_runs = groups.get((ds, probe), []), groups.get((ds, base), [])
        cells = [ds, f"{probe} / {base}"]
        for key, _ in MIXING_KEYS:
            cells.append(f"{store_mean(p_runs, key)} / {store_mean(b_runs, key)}")
        if question == 1:
            count = _seed_hrli(p_runs)
            cells += [_hrli_text(count), near_zero(count) if p_runs else NOT_TRAINED]
        rows.append(cells)
    header = ["Data set", "Probe / base", *(f"{name}: probe / base" for _, name in MIXING_KEYS)]
    if question == 1:
        header += ["Probe HRLI@1 [Wilson 95%]", f"Near 0 (upper end < {HRLI_MARGIN:g})?"]
    return markdown_table(header, rows)


def _phrase(r: ComparisonRow, trained: bool) -> str:
    """What one verdict says, for the answer: "lower than `sasrec`'s (-0.5000 [-0.6000, -0.4000])", "equivalent to
    `sasrec`'s (within ±0.02)", "undecided (...)"."""
    base = f"`{r.comparison.baseline}`'s"
    if not trained:
        return f"{UNDECIDED} ({NOT_TRAINED})"
    if r.diff is None:
        return f"{UNDECIDED} (no per-user evidence in every cell yet)"
    interval = f"{r.diff.estimate:+.4f} [{r.diff.lo:+.4f}, {r.diff.hi:+.4f}]"
    if r.verdict in ("higher", "lower"):
        return f"{r.verdict} than {base} ({interval})"
    if r.verdict.startswith("equivalent"):
        return f"equivalent to {base} {r.verdict.removeprefix('equivalent ')}"
    return f"{UNDECIDED} ({interval}: the interval decides neither a difference nor equivalence)"


def readout_answer(hrli_verdict: str, near: str) -> str:
    """Does the query token remove last-item reliance? "yes" where HRLI@1 is lower than the base's and near 0;
    "in part" where lower but not near 0 (or near 0 undecided); "no" where HRLI@1 is higher or equivalent; else
    "undecided"."""
    if hrli_verdict == "lower":
        return "yes" if near == "yes" else ("in part: lower, not near 0" if near == "no"
                                            else "in part: lower, near 0 undecided")
    if hrli_verdict == "higher" or hrli_verdict.startswith("equivalent"):
        return "no"
    return UNDECIDED


def embeddings_answer(hrli_verdict: str) -> str:
    """Does HRLI@1 fall? "yes" (lower), "no" (higher or equivalent), else "undecided"."""
    if hrli_verdict == "lower":
        return "yes"
    if hrli_verdict == "higher" or hrli_verdict.startswith("equivalent"):
        return "no"
    return UNDECIDED


# --- the blocks -------------------------------------------------------------------------------------------------------

def probe_table(runs: list[RunRecord], question: int,
                n_boot: int = N_BOOT) -> tuple[list[tuple[str, str, str]], ComparisonTable]:
    """``question``'s (data set, base, probe) pairs and their comparison table: each pair on every metric of
    ``PROBE_METRICS`` (in that order) with its margin, Holm across the table."""
    pairs = probe_pairs(runs, question)
    comparisons = [Comparison(ds, base, probe, m, margin) for ds, base, probe in pairs
                   for m, margin in PROBE_METRICS.items()]
    return pairs, compare_table(EvidenceIndex.from_runs(runs), comparisons, n_boot=n_boot)


ProbeTables = dict[int, tuple[list[tuple[str, str, str]], ComparisonTable]]  # ``probe_table`` by question


def probe_tables(runs: list[RunRecord], n_boot: int = N_BOOT) -> ProbeTables:
    """``probe_table`` of every question (the bootstrap the blocks and the figure share: ``build_report`` makes it
    once)."""
    return {q: probe_table(runs, q, n_boot) for q in sorted(set(BLOCK_QUESTION.values()))}


def probe_block(runs: list[RunRecord], question: int, n_boot: int = N_BOOT,
                *, tables: ProbeTables | None = None) -> str:
    """The block of ``question`` (1: ``probe_readout``, 2: ``probe_embeddings``): the comparison table, the mixing
    table, the generated answer and the cells not yet trained (module docstring). ``tables``: ``probe_tables(runs,
    n_boot)``, ``question``'s table made here where not given."""
    pairs, table = tables[question] if tables else probe_table(runs, question, n_boot)
    groups = _by_label(runs)
    rows = []
    for r in table.rows:
        c = r.comparison
        trained = (c.dataset, c.other) in groups
        rows.append([c.dataset, f"{c.other} vs {c.baseline}", c.metric,
                     *side_means(groups.get((c.dataset, c.other), []), groups.get((c.dataset, c.baseline), []), r),
                     _difference(r, trained),
                     verdict_text(r)])
    m = count_tested(table.rows)
    header = ["Data set", "Comparison", "Metric", "Probe: store mean", "Base: store mean", "Difference [95% CI]",
              "Verdict"]
    note = method_note(table.n_boot, m, "probe - base", ", or whose probe is not trained,")
    text = markdown_table(header, rows) + "\n" + note + "\n\n"
    text += mixing_markdown(runs, pairs, question) + "\n" + _mixing_note(question) + "\n\n"
    text += _answer(table.rows, groups, question) + "\n"
    missing = missing_cells(runs, pairs)
    if missing:
        text += (f"\nNot in the store yet ({TARGET_SEEDS} seeds of each probe and base asked): "
                 f"{compact_cells(missing)}. The queue that trains them (with every other cell the study asks for): "
                 f"`{COVERAGE_QUEUE}`.\n")
    return text


def _mixing_note(question: int) -> str:
    note = ("+Res mixing ratio: norm of sums pooled over layers (mixing.json), at all real positions and at the last "
            "one; mean ± std over the stored seeds of the probe / of the base model; descriptive, not tested.")
    if question == 1:
        note += (" Probe HRLI@1: users whose last input item is the top-1 unfiltered item, pooled over the probe's "
                 f"seeds (users x seeds) with the Wilson 95% interval of the pooled counts, widened to the seeds' t "
                 f"interval where that reaches further; near 0: its upper end is below {HRLI_MARGIN:g} "
                 f"(the HRLI@1 margin), not near 0: its lower end is above it, else undecided.")
    return note


def per_pair(rows: list[ComparisonRow]) -> list[dict[str, ComparisonRow]]:
    """A ``probe_table``'s rows by (data set, base, probe), each ``{metric: row}`` (the table holds every pair's
    ``PROBE_METRICS`` rows one after another)."""
    n = len(PROBE_METRICS)
    return [{r.comparison.metric: r for r in rows[i:i + n]} for i in range(0, len(rows), n)]


def _answer(rows: list[ComparisonRow], groups: dict[tuple[str, str], list[RunRecord]], question: int) -> str:
    """The generated answer: per (data set, probe) what the HRLI@1 and NDCG@10 verdicts say."""
    parts = []
    for by in per_pair(rows):
        nd, hr = by["NDCG@10"], by["HRLI@1"]
        c = hr.comparison
        trained = (c.dataset, c.other) in groups
        head = f"{c.dataset}, `{c.other}` against `{c.baseline}`"
        if not trained:
            parts.append(f"{head}: {UNDECIDED} ({NOT_TRAINED})")
        elif question == 1:
            near = near_zero(_seed_hrli(groups[(c.dataset, c.other)]))
            parts.append(f"{head}: removes last-item reliance? {readout_answer(hr.verdict, near)} (HRLI@1 "
                         f"{_phrase(hr, trained)}; near 0: {near}; NDCG@10 {_phrase(nd, trained)})")
        else:
            parts.append(f"{head}: does HRLI@1 fall? {embeddings_answer(hr.verdict)} (HRLI@1 {_phrase(hr, trained)}); "
                         f"accuracy: NDCG@10 {_phrase(nd, trained)}")
    tail = (" The +Res mixing ratio (the prediction that it stays unchanged) is shown above, not tested."
            if question == 1 else "")
    return "Answer, generated from the verdicts: " + "; ".join(parts) + "." + tail


def probe_blocks(runs: list[RunRecord], n_boot: int = N_BOOT, *, tables: ProbeTables | None = None) -> dict[str, str]:
    """Markdown of ``probe_readout`` and ``probe_embeddings`` by name (``tables``: as ``probe_block``'s)."""
    return {name: probe_block(runs, q, n_boot, tables=tables) for name, q in BLOCK_QUESTION.items()}


# --- the figure -------------------------------------------------------------------------------------------------------

def _scaled(r: ComparisonRow) -> tuple[float, float, float, float]:
    """(estimate, lo, hi, margin) of a row with evidence in the figure's units: NDCG@10 (a relative margin) as % of
    the base's mean, HRLI@1 (an absolute margin) as it is."""
    d = r.diff
    assert d is not None and r.baseline_mean is not None and r.margin_abs is not None
    scale = 100.0 / abs(r.baseline_mean) if r.margin.relative and r.baseline_mean else 1.0
    return d.estimate * scale, d.lo * scale, d.hi * scale, r.margin_abs * scale


@plain_text
def probes_figure(tables: dict[int, ComparisonTable], width: float = 6.8, dpi: int = 100) -> Figure | None:
    """The forest plot of questions 1 and 2: one line per (question, data set, probe vs base) with evidence, one
    panel per metric of ``PROBE_METRICS``: the difference probe - base with its 95% bootstrap interval, the
    equivalence margin shaded around 0 and the verdict beside the line. None where no row has evidence."""
    from matplotlib.figure import Figure

    metrics = list(PROBE_METRICS)
    lines = [(q, by) for q, table in sorted(tables.items()) for by in per_pair(table.rows)
             if all(by[m].diff is not None for m in metrics)]
    if not lines:
        return None
    fig = Figure(figsize=(width, 1.3 + 0.32 * len(lines)), dpi=dpi, layout="constrained")
    axes = fig.subplots(1, len(metrics), sharey=True)
    ys = np.arange(len(lines))[::-1]
    for ax, metric in zip(axes, metrics):
        relative = PROBE_METRICS[metric].relative
        for y, (_, by) in zip(ys, lines):
            r = by[metric]
            est, lo, hi, margin = _scaled(r)
            ax.fill_between([-margin, margin], y - 0.3, y + 0.3, color="0.88", lw=0)
            ax.plot([lo, hi], [y, y], color="C0", lw=1.4)
            ax.plot([est], [y], "o", color="C0", ms=4)
            ax.annotate(r.verdict.split(" (")[0], (hi, y), xytext=(4, 0), textcoords="offset points", fontsize=6,
                        va="center", color="0.3")
        ax.axvline(0.0, color="0.5", lw=0.8, ls="--")
        ax.margins(x=0.25)
        ax.set_xlabel(f"{metric}: probe − base" + (" (% of the base's mean)" if relative else ""), fontsize=7)
    labels = []
    for q, by in lines:
        r = by[metrics[0]]
        c = r.comparison
        labels.append(f"Q{q} {drawn_name(c.dataset)}\n{drawn_name(c.other)} vs {drawn_name(c.baseline)} "
                      f"({seeds_text(r.n_seeds_other)} / "
                      f"{seeds_text(r.n_seeds_baseline)})")
    axes[0].set_yticks(ys, labels, fontsize=6)
    axes[0].fill_between([], [], color="0.88", label="equivalence margin")
    axes[0].plot([], [], "o-", color="C0", ms=4, label="difference, 95% CI")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=6, loc="outside lower center", ncol=2, frameon=False)
    return fig


def probe_figures(runs: list[RunRecord], n_boot: int = N_BOOT,
                  *, tables: ProbeTables | None = None) -> list[ReportFigure]:
    """The forest plot of questions 1 and 2 (``probes_figure``) as a report figure ``probes`` (``tables``: as
    ``probe_block``'s); none where no probe has per-user evidence beside its base."""
    fig = probes_figure({q: table for q, (_, table) in (tables or probe_tables(runs, n_boot)).items()})
    if fig is None:
        return []
    caption = ("Questions 1 and 2: each probe's test HRLI@1 and NDCG@10 minus its base model's over the same users "
               "(NDCG@10 as % of the base's mean), mean over seeds with the 95% paired bootstrap interval (seeds "
               "resampled), the equivalence margin shaded and the verdict of the blocks' tables (Holm within each "
               "question's table).")
    return [ReportFigure("probes", "Questions 1 and 2: the probes against their base", caption, fig)]
