"""The document blocks whose claims rest on statistics (the comparisons; question 3 of docs/results.md), from the
runs of a report:

``comparisons``   docs/results.md: every model against ``sasrec`` on the same data set, test NDCG@10 and HRLI@1
``remedy_verdicts`` docs/remedies.md: every remedy variant against its base model, NDCG@10 and HRLI@1, and the
                  answer to "higher NDCG@10 at lower HRLI@1?"
``remedy_spread`` docs/remedies.md: the same pairs read by the seeds' spread (descriptive, no test)
``proportions``   docs/results.md: HRLI@1, HRLI@1 over unseen last items and Recovery(alpha) with Wilson intervals
``cold_items``    docs/results.md: the sentence on HRLI@1 over last items never seen in training, counted per cell
``five_models``   docs/results.md: HRLI@1 / HRL2I@1 of the five models per data set, and the sentences on them
``echo``          docs/results.md: question 3, does the echo cost filtered HR@10 (``study.echo``)

A comparison's difference, 95% interval, Holm-adjusted p and verdict come from the per-user evidence of the cells
(``users.npz``, ``report.compare``): a paired bootstrap over users with each side's seeds resampled, Holm across the
comparisons of one table, "equivalent (within ±m)" only where two one-sided tests pass the declared margin
(``MARGINS``), "identical" where both sides are the same checkpoints seed for seed (not a test), else "undecided",
with the smallest difference the row's tests detect. A variant that starts where its base starts, seed for seed
(``experiments.shares_start``: the same initial weights and data order), is compared with it paired: seed against
seed, the users paired within a seed. A row whose cells lack ``users.npz`` has no difference and the verdict
"undecided", and says how to get the evidence. The store's means beside it (mean over every seed the store holds, as
the other tables show them) are descriptive only.

Proportions are pooled over a row's seeds, with a 95% interval from a bootstrap of the cells' per-user evidence that
resamples seeds and users together (``stats.bootstrap_proportions``: a user's hits correlate across seeds, so
users x seeds are not independent trials), never narrower than the Wilson interval of the pooled counts; a row whose
cells lack users.npz falls back to that Wilson interval on the stored counts, marked "Wilson". A row or cell over one
seed says "1 seed".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from resdom.experiments import (
    CAUSAL_MODELS,
    MODEL_TRAITS,
    MODEL_VARIANTS,
    PROBES,
    REMEDY_LABELS,
    model_variant,
    remedy_variant,
    shares_start,
)
from resdom.records import RECOVERY, RECOVERY_CURVE
from resdom.report.collect import RunRecord, model_order
from resdom.report.compare import (
    SEEDS_TEST,
    UNDECIDED,
    Comparison,
    ComparisonRow,
    ComparisonTable,
    EvidenceIndex,
    compare_table,
    count_tested,
    default_margin,
    read_users,
    row_p_text,
    verdict_text,
)
from resdom.report.figures import ReportFigure, drawn_name, model_color, plain_text
from resdom.report.markdown import markdown_table, md_text
from resdom.report.stats import IDENTICAL, bootstrap_proportions, wilson
from resdom.report.tables import format_cell, format_value, mean_std, seeds_cell, seeds_text
from resdom.report.values import RECOVERY_ALPHAS, run_values
from resdom.stored import number_at
from resdom.study.claims import is_causal
from resdom.study.echo import EchoTable, echo_answer, echo_figure, echo_markdown, echo_table
from resdom.study.probes import PROBE_BASE, SAME_OBJECTIVE_BASE

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn, not with the report
    from matplotlib.figure import Figure

BASELINE = "sasrec"
METRICS: tuple[str, ...] = ("NDCG@10", "HRLI@1")
FIVE_MODELS: tuple[str, ...] = tuple(MODEL_TRAITS)  # the three causal models and the two contrast models
N_BOOT = 2000
EVIDENCE_FIGURE_KEYS: tuple[str, ...] = ("comparisons", "echo")  # the report figures made here (``*_figures``)


def margins_text() -> str:
    """The declared equivalence margins of ``METRICS`` (``compare.default_margin``), for the captions."""
    parts = []
    for m in METRICS:
        margin = default_margin(m)
        parts.append(f"{m} ±{margin.text()}" + (" of the baseline's mean" if margin.relative else " (absolute)"))
    return "; ".join(parts)


def _groups(runs: list[RunRecord], keep: Callable[[str], bool]) -> dict[tuple[str, str], list[RunRecord]]:
    """The runs with results by (data set, model label), for the labels ``keep`` accepts; sorted by data set, then
    the models' report order."""
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for r in runs:
        if keep(r.model) and (r.diagnostics or r.metrics):
            groups.setdefault((r.dataset, r.model), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][0], model_order(kv[0][1]), kv[0][1])))


def store_mean(runs: list[RunRecord], key: str, compared: tuple[int, float | None] = (0, None)) -> str:
    """``mean ± std (n seeds)`` of ``key`` over ``runs`` (the store's numbers, every seed that has it); where a
    comparison used fewer of those seeds (``compared``: its seed count and its mean over them, paired seeds keep only
    the seeds both sides have), that mean after it, ``0.0301 ± 0.0011 (5 seeds; 0.0309 over the 3 compared)``, so
    that the difference's sign can be read off the two means it is the difference of."""
    xs = [x for x in (run_values(r).get(key) for r in runs) if x is not None]
    if not xs:
        return "–"
    n, mean = compared
    tail = f"; {format_value(mean, _kind(key))} over the {n} compared" if mean is not None and 0 < n < len(xs) else ""
    return f"{mean_text(xs, key)} ({seeds_text(len(xs))}{tail})"


def side_means(runs_other: list[RunRecord], runs_base: list[RunRecord], r: ComparisonRow) -> tuple[str, str]:
    """The two store-mean cells of row ``r`` (``store_mean``, each with the mean over the seeds ``r`` compared)."""
    return (store_mean(runs_other, r.comparison.metric, (r.n_seeds_other, r.other_mean)),
            store_mean(runs_base, r.comparison.metric, (r.n_seeds_baseline, r.baseline_mean)))


def _kind(key: str) -> str:
    """The digits the tables give ``key``: a metric's four, a ratio's three."""
    return "metric" if key.startswith(("HR@", "NDCG@")) else "ratio"


def mean_text(xs: list[float], key: str) -> str:
    """``mean ± std`` of the values ``xs`` of ``key``, in the digits the tables give ``key``."""
    return format_cell(mean_std(xs), _kind(key))




def difference_text(r: ComparisonRow) -> str:
    """``+0.0012 [-0.0003, +0.0025] (Holm p 0.210; seeds 3 / 1)``: the seeds each side's mean is over, other's
    first; or the note of a row without evidence."""
    if r.diff is None:
        return r.note
    d = r.diff
    seeds = f"{r.n_seeds_other} / {r.n_seeds_baseline}"
    if d.paired_seeds:
        seeds += ", paired"
    if r.identical:
        return f"{d.estimate:+.4f}: the same checkpoint in each seed, not tested (seeds {seeds})"
    return f"{d.estimate:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}] (Holm p {row_p_text(r)}; seeds {seeds})"


PAIRED_NOTE = ("; seeds \"paired\": seed k of both sides starts from the same initial weights and draws the same "
               "data order (`experiments.shares_start`: a remedy variant and its base, or one run stopped by two "
               "rules), so the seeds both have are compared seed against seed: one seed draw for both sides in the "
               "bootstrap, the seeds' differences in the seeds' t")


def method_note(n_boot: int, m: int, difference: str = "other - baseline", undecided: str = "",
                paired: bool = False, identical: bool = False) -> str:
    """The note under a comparison table: how the difference (``difference``, e.g. "probe - base"), its interval
    and the verdict are made; ``undecided``: a further case a row is undecided in (", or whose probe is ...");
    ``paired``: some row pairs its seeds (``PAIRED_NOTE``); ``identical``: some row is "identical"."""
    return (f"Difference: {difference} over the same test users, mean over seeds of the mean over users, from each "
            f"cell's per-user evidence (users.npz); 95% CI from a paired bootstrap over users with each side's seeds "
            f"resampled ({n_boot} replicates; per comparison, not adjusted){PAIRED_NOTE if paired else ''}. With a "
            "few seeds the bootstrap underprices the seeds' spread, so each row also has a t-test on the seeds' own "
            f"means (\"seeds' t\": {SEEDS_TEST}; none with one seed on both sides). Holm across the {m} comparisons "
            "of this table that have evidence, for each test (so an interval can exclude 0 while the verdict stays "
            "undecided). Verdict at alpha 0.05: higher / lower where both Holm-adjusted p are below 0.05; "
            f"equivalent only where two one-sided tests (Holm-adjusted) pass the declared margin ({margins_text()}) "
            f"under both; else undecided, with the smallest difference both tests would detect with 80% power at "
            f"alpha 0.05 / {m} (Holm's strictest step), from the row's own bootstrap SD and seeds' t (its SE and "
            f"df): \"detects ±d\". A row without per-user evidence in every cell{undecided} is undecided."
            + (" Identical: both sides are the same checkpoint in every seed compared (no test, not among the "
               f"{m} comparisons)." if identical else "")
            + " Seeds: how many seeds each side's mean over users averages, the first side's first. Store means: "
              "mean ± std over every stored seed, descriptive only; where a row compares fewer of them (paired: the "
              "seeds both sides have), the side's mean over those follows (\"over the k compared\"), the two "
              "means the difference is of.")


# --- model against model (docs/results.md) --------------------------------------------------------------------------

def _is_model(label: str) -> bool:
    """A model the results page compares: a causal model or a contrast model, not a remedy variant."""
    return model_variant(label)[0] in MODEL_TRAITS and remedy_variant(label) is None


def model_comparisons(runs: list[RunRecord]) -> list[Comparison]:
    """Every model label against ``BASELINE`` on each data set that has it, on each of ``METRICS``."""
    groups = _groups(runs, _is_model)
    out = []
    for ds, label in groups:
        if label != BASELINE and (ds, BASELINE) in groups:
            out += [Comparison(ds, BASELINE, label, m, paired_seeds=shares_start(label, BASELINE)) for m in METRICS]
    return out


def comparison_evidence(runs: list[RunRecord], n_boot: int = N_BOOT) -> ComparisonTable:
    """The tested rows of the ``comparisons`` block (the bootstraps its block and figure share: ``build_report``
    makes them once)."""
    return compare_table(EvidenceIndex.from_runs(runs), model_comparisons(runs), n_boot=n_boot)


def comparisons_markdown(runs: list[RunRecord], n_boot: int = N_BOOT, *, table: ComparisonTable | None = None) -> str:
    """The ``comparisons`` block: one row per (data set, model, metric), the model against ``BASELINE``
    (``table``: ``comparison_evidence(runs, n_boot)``, made here where not given)."""
    groups = _groups(runs, _is_model)
    table = comparison_evidence(runs, n_boot) if table is None else table
    rows = []
    for r in table.rows:
        c = r.comparison
        rows.append([c.dataset, f"{c.other} vs {c.baseline}", c.metric,
                     *side_means(groups[(c.dataset, c.other)], groups[(c.dataset, c.baseline)], r),
                     difference_text(r), verdict_text(r)])
    m = count_tested(table.rows)
    header = ["Data set", "Comparison", "Metric", "Model: store mean", "sasrec: store mean",
              "Difference [95% CI]", "Verdict"]
    paired = any(r.diff is not None and r.diff.paired_seeds for r in table.rows)
    identical = any(r.identical for r in table.rows)
    return markdown_table(header, rows) + "\n" + method_note(table.n_boot, m, paired=paired,
                                                             identical=identical) + "\n"


@plain_text
def comparison_figure(table: ComparisonTable, width: float = 6.8, dpi: int = 100) -> Figure | None:
    """A forest plot of the ``comparisons`` block, one line per (data set, model) with evidence: NDCG@10 as a share
    of the baseline's (left) and HRLI@1 (right), other - baseline with its 95% bootstrap interval, coloured by model;
    a filled dot where the verdict is higher / lower, a diamond where equivalent, a hollow dot where undecided. None
    where no row has evidence. Not saved here."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    by: dict[tuple[str, str], dict[str, ComparisonRow]] = {}
    for r in table.rows:
        if r.diff is not None:
            by.setdefault((r.comparison.dataset, r.comparison.other), {})[r.comparison.metric] = r
    if not by:
        return None
    keys = list(by)
    fig = Figure(figsize=(width, 1.3 + 0.17 * len(keys)), dpi=dpi, layout="constrained")
    axes = fig.subplots(1, len(METRICS), sharey=True)
    ys = np.arange(len(keys))[::-1]
    for ax, metric in zip(axes, METRICS):
        scale = 100.0 if default_margin(metric).relative else 1.0
        for y, key in zip(ys, keys):
            row = by[key].get(metric)
            if row is None or row.diff is None:
                continue
            other = key[1]
            base = abs(row.baseline_mean) if scale != 1.0 and row.baseline_mean else 1.0
            lo, est, hi = (scale * x / base for x in (row.diff.lo, row.diff.estimate, row.diff.hi))
            color = model_color(model_variant(other)[0])
            ax.plot([lo, hi], [y, y], color=color, lw=1.0)
            marker = "D" if row.verdict.startswith("equivalent") else "s" if row.verdict == IDENTICAL else "o"
            look = {"marker": marker, "ms": 3.5, "color": color, "mfc": color if row.verdict != UNDECIDED else "white"}
            ax.plot([est], [y], linestyle="none", **look)
        ax.axvline(0.0, color="0.5", lw=0.8, ls="--")
        ax.set_xlabel(f"{metric}: model − {BASELINE}" + (f" (% of {BASELINE}'s)" if scale != 1.0 else ""),
                      fontsize=7)
        ax.tick_params(axis="x", labelsize=6.5)
    one = {key: any(r.n_seeds_other == 1 for r in rows.values()) for key, rows in by.items()}
    axes[0].set_yticks(ys, [f"{drawn_name(ds)} {drawn_name(other)}" + (" (1 seed)" if one[(ds, other)] else "")
                            for ds, other in keys],
                       fontsize=6)
    handles = [Line2D([], [], marker="o", ls="none", color="0.3", ms=3.5, label="higher / lower"),
               Line2D([], [], marker="D", ls="none", color="0.3", ms=3.5, label="equivalent"),
               Line2D([], [], marker="s", ls="none", color="0.3", ms=3.5, label="identical"),
               Line2D([], [], marker="o", ls="none", color="0.3", mfc="white", ms=3.5, label="undecided")]
    fig.legend(handles=handles, fontsize=6, loc="outside lower center", ncol=4, frameon=False,
               title="verdict (bootstrap and seeds' t, Holm)", title_fontsize=6)
    fig.suptitle(f"Models against {BASELINE}: difference and 95% interval", fontsize=8)
    return fig


def comparison_figures(runs: list[RunRecord], n_boot: int = N_BOOT, *,
                       table: ComparisonTable | None = None) -> list[ReportFigure]:
    """The ``comparisons`` block as a report figure ``comparisons`` (``comparison_figure``; ``table``: as for
    ``comparisons_markdown``); none where no row has evidence."""
    fig = comparison_figure(comparison_evidence(runs, n_boot) if table is None else table)
    if fig is None:
        return []
    caption = (f"Every model against {BASELINE} on the same data set, from the cells' per-user evidence: test NDCG@10 "
               f"(as a share of {BASELINE}'s) and HRLI@1, difference with its 95% bootstrap interval over users and "
               "seeds; the marker gives the verdict of the comparisons block.")
    return [ReportFigure("comparisons", "Models against SASRec", caption, fig)]


# --- remedy against base (docs/remedies.md) -------------------------------------------------------------------------

def answer(ndcg_verdict: str, hrli_verdict: str) -> str:
    """Does a variant beat its base's accuracy at a lower HRLI@1? "yes" where NDCG@10 is higher and HRLI@1 lower;
    "no" where NDCG@10 is lower or equivalent, or HRLI@1 higher or equivalent (either settles it); else
    "undecided" ("identical" settles it as equivalence does)."""
    if ndcg_verdict == "higher" and hrli_verdict == "lower":
        return "yes"
    settled_no = ndcg_verdict in ("lower", IDENTICAL) or ndcg_verdict.startswith("equivalent") \
        or hrli_verdict in ("higher", IDENTICAL) or hrli_verdict.startswith("equivalent")
    return "no" if settled_no else UNDECIDED


def remedy_comparisons(runs: list[RunRecord]) -> list[Comparison]:
    """Each remedy variant against its base model on the same data set, on each of ``METRICS``; in
    ``experiments.REMEDY_LABELS`` order within a data set; paired where the variant starts where its base starts
    (``experiments.shares_start``)."""
    groups = _groups(runs, lambda label: True)
    rank = {m: i for i, m in enumerate(REMEDY_LABELS)}
    out = []
    for ds, label in sorted(groups, key=lambda k: (k[0], rank.get(k[1], len(rank)), k[1])):
        parts = remedy_variant(label)
        if parts is not None and (ds, parts[0]) in groups:
            out += [Comparison(ds, parts[0], label, m, paired_seeds=shares_start(label, parts[0])) for m in METRICS]
    return out


def remedy_verdicts_markdown(runs: list[RunRecord], n_boot: int = N_BOOT) -> str:
    """The ``remedy_verdicts`` block: per (data set, variant) the store's means of both, the difference in NDCG@10
    and in HRLI@1 with its interval and verdict, and the answer (``answer``)."""
    groups = _groups(runs, lambda label: True)
    table = compare_table(EvidenceIndex.from_runs(runs), remedy_comparisons(runs), n_boot=n_boot)
    rows = []
    for nd, hr in zip(table.rows[::2], table.rows[1::2]):  # METRICS: (NDCG@10, HRLI@1) per variant, in that order
        c = nd.comparison
        var, base = groups[(c.dataset, c.other)], groups[(c.dataset, c.baseline)]
        cells = [c.dataset, c.other]
        for r in (nd, hr):
            cells.append("{}; base {}".format(*side_means(var, base, r)))
        for r in (nd, hr):
            cells.append(verdict_text(r) + ("" if r.diff is None else f": {difference_text(r)}"))
        cells.append(answer(nd.verdict, hr.verdict))
        if nd.diff is None and hr.diff is None:
            cells[-3] = f"{UNDECIDED}: {nd.note}"  # one note for the row: both metrics lack the same cells
        rows.append(cells)
    m = count_tested(table.rows)
    paired = any(r.diff is not None and r.diff.paired_seeds for r in table.rows)
    identical = any(r.identical for r in table.rows)
    header = ["Data set", "Variant", "Test NDCG@10: store mean", "HRLI@1: store mean", "NDCG@10: verdict, difference "
              "[95% CI]", "HRLI@1: verdict, difference [95% CI]", "Higher NDCG@10 at lower HRLI@1?"]
    return markdown_table(header, rows) + "\n" + method_note(table.n_boot, m, "variant - base", paired=paired,
                                                             identical=identical) + "\n"


def _variant_name(label: str) -> str:
    """The variant's name of a remedy variant's label ("sasrec-gate" -> "gate")."""
    variant = remedy_variant(label)
    if variant is None:
        raise ValueError(f"{label}: not a remedy variant")
    return variant[1]


def spread_reading(variant: list[float], base: list[float]) -> str:
    """How a variant's seeds sit against its base's, descriptively (no test): ``"higher beyond the spreads"`` /
    ``"lower beyond the spreads"`` where the two ranges mean ± std (sample std over seeds) do not overlap, else
    ``"inside the spreads"``; ``"no spread (1 seed)"`` where a side has one seed."""
    (mv, sv), (mb, sb) = mean_std(variant), mean_std(base)
    if sv is None or sb is None:
        return "no spread (1 seed)"
    if abs(mv - mb) <= sv + sb:
        return "inside the spreads"
    return ("higher" if mv > mb else "lower") + " beyond the spreads"


def remedy_spread_markdown(runs: list[RunRecord]) -> str:
    """The ``remedy_spread`` block: per data set and base model, each remedy variant's test NDCG@10 and HRLI@1 (mean
    ± std over its seeds) read against the base's by the seeds' spread (``spread_reading``), and which variants lie
    beyond it. Descriptive: the ``remedy_verdicts`` block holds the tests."""
    groups = _groups(runs, lambda label: True)
    values = {k: {m: [x for x in (run_values(r).get(m) for r in rs) if x is not None] for m in METRICS}
              for k, rs in groups.items()}
    by_base: dict[tuple[str, str], list[str]] = {}  # (data set, base) -> its variants, in REMEDY_LABELS order
    for c in remedy_comparisons(runs):
        if c.metric == METRICS[0]:
            by_base.setdefault((c.dataset, c.baseline), []).append(c.other)
    paragraphs = []
    for (ds, base), variants in by_base.items():
        if any(not values[(ds, base)][m] for m in METRICS):
            continue
        parts: list[str] = []
        beyond: dict[tuple[str, str], list[str]] = {(m, d): [] for m in METRICS for d in ("higher", "lower")}
        for label in variants:
            var = values[(ds, label)]
            if any(not var[m] for m in METRICS):
                continue
            readings = [(m, spread_reading(var[m], values[(ds, base)][m])) for m in METRICS]
            for m, reading in readings:
                if reading.endswith("beyond the spreads"):
                    beyond[(m, reading.split()[0])].append(f"`{_variant_name(label)}`")
            parts.append(f"`{_variant_name(label)}` ({seeds_text(len(groups[(ds, label)]))}) " + ", at ".join(
                f"{m} {mean_text(var[m], m)}, {reading}" for m, reading in readings))
        if not parts:
            continue
        base_text = ", ".join(f"{m} {mean_text(values[(ds, base)][m], m)}" for m in METRICS)
        found = [f"{m} {d} for {', '.join(v)}" for (m, d), v in beyond.items() if v]
        paragraphs.append(
            f"**{md_text(ds)}** (base `{base}`, {seeds_text(len(groups[(ds, base)]))}: {base_text}): "
            + "; ".join(parts) + ". Beyond the spreads: " + ("; ".join(found) if found else "none") + ".")
    if not paragraphs:
        return "No remedy variant and its base model are stored on the same data set yet.\n"
    note = ("Mean ± std over each cell's seeds (sample std); \"beyond the spreads\": the variant's range mean ± std "
            "and the base's do not overlap, else \"inside the spreads\" (one seed: no spread). A description of the "
            "seeds, not a test: the verdict table above is the test.")
    return "\n\n".join(paragraphs) + "\n\n" + note + "\n"


# --- proportions with Wilson intervals (docs/results.md) ------------------------------------------------------------

def _count(rate: float | None, n: float | None) -> tuple[int, int] | None:
    """(k, n) with k = rate x n, where that is a whole number (a stored rate over n users); None otherwise."""
    if rate is None or n is None or n < 1 or n != int(n):
        return None
    k = rate * n
    return (round(k), int(n)) if abs(k - round(k)) < 1e-6 * max(1.0, n) else None


def hrli_count(run: RunRecord) -> tuple[int, int] | None:
    """(users whose last input item is ranked first, test users) from ``hrli.json``."""
    d = run.diag("hrli")
    return _count(number_at(d, "values", "HRLI@1"), number_at(d, "n_users"))


def unseen_counts(run: RunRecord, key: str = "HRLI@1") -> tuple[int, int] | None:
    """(users with ``key`` hit, users) among those whose last item never occurs in training: ``hrli.json``'s
    ``by_frequency`` band ``"0"``; None where the file has no bands or that band has no users."""
    band = (run.diag("hrli").get("by_frequency") or {}).get("0")
    n = number_at(band, "n_users")
    return None if not n else _count(number_at(band, "values", key), n)


def recovery_count(run: RunRecord, alpha: float) -> tuple[int, int] | None:
    """(recoverable misses hit at ``alpha``, recoverable misses) from ``recovery.json``'s test curve."""
    test = run.diag(RECOVERY).get("test")
    if not isinstance(test, dict):
        return None
    at = [row for row in test.get("curve", []) if isinstance(row, dict)
          and isinstance(row.get("alpha"), (int, float)) and abs(float(row["alpha"]) - alpha) < 1e-9]
    return _count(number_at(at[0], RECOVERY_CURVE), number_at(test, "recoverable")) if at else None


def _pooled(counts: list[tuple[int, int] | None]) -> tuple[int, int, int] | None:
    """(k, n, seeds) summed over the seeds that have a count."""
    have = [c for c in counts if c is not None]
    return (sum(k for k, _ in have), sum(n for _, n in have), len(have)) if have else None


def wilson_text(k: int, n: int, counts: bool = False) -> str:
    """``0.830 [0.825, 0.835]``: the proportion and its Wilson 95% interval (``counts``: ``3 / 520 = 0.006 [0.002,
    0.017]``)."""
    lo, hi = wilson(k, n)
    text = f"{k:,} / {n:,} = " if counts else ""
    return text + f"{k / n:.3f} [{lo:.3f}, {hi:.3f}]"


def user_rates(runs: list[RunRecord]) -> list[tuple[np.ndarray, np.ndarray | None] | None] | None:
    """Per-user (hits, eligible) arrays, (S, U) over the runs' seeds, of the proportions block's columns in order
    (HRLI@1; HRLI@1 over users whose last item never occurs in training, ``last_freq`` 0: hrli.json's band 0;
    Rec(α) at each of ``RECOVERY_ALPHAS``: the recoverable misses hit within the top K at α, recovery.json's
    count; None for a column whose α the evidence lacks), from each run's ``users.npz``; None where a run has
    none or the runs' users differ."""
    evs = []
    for r in runs:
        path = r.users_path
        if path is None:
            return None
        evs.append(read_users(path))
    if any(not np.array_equal(ev.user, evs[0].user) for ev in evs[1:]):
        return None
    hit = np.stack([ev.last_rank <= 1 for ev in evs]).astype(float)
    out: list[tuple[np.ndarray, np.ndarray | None] | None] = [
        (hit, None), (hit, np.stack([ev.last_freq == 0 for ev in evs]).astype(float))]
    for a in RECOVERY_ALPHAS:
        at = [[i for i, x in enumerate(ev.header["alphas"]) if abs(float(x) - a) < 1e-9] for ev in evs]
        if any(not i for i in at):
            out.append(None)
            continue
        k = [int(ev.header.get("K", 10)) for ev in evs]
        out.append((np.stack([ev.alpha_target_rank[i[0]] <= kk for ev, i, kk in zip(evs, at, k)]).astype(float),
                    np.stack([ev.recoverable for ev in evs]).astype(float)))
    return out


def interval_text(k: int, n: int, lo: float, hi: float, counts: bool = False) -> str:
    """``0.830 [0.790, 0.860]`` (``counts``: ``3 / 520 = 0.006 [...]``): a pooled rate and its interval, widened to
    the Wilson interval of the pooled counts where that reaches further."""
    w_lo, w_hi = wilson(k, n)
    text = f"{k:,} / {n:,} = " if counts else ""
    return text + f"{k / n:.3f} [{min(lo, w_lo):.3f}, {max(hi, w_hi):.3f}]"


def proportions_markdown(runs: list[RunRecord], n_boot: int = N_BOOT) -> str:
    """The ``proportions`` block: per (data set, model) HRLI@1, HRLI@1 over unseen last items and Recovery at
    ``RECOVERY_ALPHAS``, each pooled over the seeds with its 95% interval from a bootstrap of users and seeds
    together (``user_rates``, ``stats.bootstrap_proportions``), or, where a cell lacks per-user evidence, the Wilson
    interval of the stored counts (marked)."""
    rows = []
    fallback = False
    for (ds, label), rs in _groups(runs, _is_model).items():
        rates = user_rates(rs)
        if rates is not None:
            usable = [x for x in rates if x is not None and (x[1] is None or x[1].sum() > 0)]
            found = iter(bootstrap_proportions(usable, n_boot=n_boot))
            texts = []
            for i, rate in enumerate(rates):
                if rate is None or (rate[1] is not None and rate[1].sum() == 0):  # no such α, or no such user
                    texts.append("–")
                    continue
                h, e = rate
                _, lo, hi, _ = next(found)
                k, n = int((h * (1 if e is None else e)).sum()), int(h.size if e is None else e.sum())
                texts.append(interval_text(k, n, lo, hi, counts=i > 0))
            rows.append([ds, label, seeds_cell(len(rs)), *texts])
            continue
        cells = [_pooled([hrli_count(r) for r in rs]), _pooled([unseen_counts(r) for r in rs])]
        cells += [_pooled([recovery_count(r, a) for r in rs]) for a in RECOVERY_ALPHAS]
        if all(c is None for c in cells):
            continue
        fallback = True
        n = max(c[2] for c in cells if c is not None)
        texts = ["–" if c is None else wilson_text(c[0], c[1], counts=i > 0) + " Wilson"
                 + (f" (n={c[2]})" if c[2] < n else "") for i, c in enumerate(cells)]
        rows.append([ds, label, seeds_cell(n), *texts])
    header = ["Data set", "Model", "Seeds", "HRLI@1 [95%, users and seeds resampled]",
              "HRLI@1, last item unseen in training", *(f"Rec(α={a}) of the recoverable misses"
                                                         for a in RECOVERY_ALPHAS)]
    note = (f"Each rate pooled over the row's seeds (users x seeds), from the cells' per-user evidence (users.npz); "
            f"95% interval: the percentile interval of {n_boot} bootstrap replicates that draw the seeds with "
            "replacement and then the users with replacement, the same users in every drawn seed (a user's hits "
            "correlate across seeds, so users x seeds are not independent trials), widened to the Wilson interval "
            "of the pooled counts where that reaches further (at a count of 0 every replicate is 0). "
            + ("\"Wilson\": a row whose cells lack users.npz, the Wilson interval of the stored counts alone, "
               "which leaves the seed-to-seed spread and the users' correlation across seeds out (a cell over fewer "
               "seeds than the row says n=k). " if fallback else "")
            + "HRLI@1: the last input item is the top-1 unfiltered item. Unseen: users whose last input item never "
            "occurs in the training sequences (hrli.json by_frequency band 0). Rec(α): recoverable misses (the "
            "final position misses the top-10, one of L-1..L-3 hits) hit at residual scale α (recovery.json).")
    return markdown_table(header, rows) + "\n" + note + "\n"


# --- cold last items: the sentence (docs/results.md) ----------------------------------------------------------------

def cold_items_markdown(runs: list[RunRecord]) -> str:
    """The ``cold_items`` block: over the users whose last input item never occurs in training, in how many cells
    HRLI@1 (and HRLI@10) is exactly 0, and every cell where it is not, with its counts and Wilson interval."""
    cells: list[tuple[RunRecord, tuple[int, int], tuple[int, int] | None]] = []
    for r in runs:
        if _is_model(r.model) and (c1 := unseen_counts(r, "HRLI@1")) is not None:
            cells.append((r, c1, unseen_counts(r, "HRLI@10")))
    if not cells:
        return "No stored cell reports HRLI@1 by the last item's training frequency (hrli.json by_frequency).\n"
    zero = [r for r, c1, _ in cells if c1[0] == 0]
    zero10 = [r for r, _, c10 in cells if c10 is not None and c10[0] == 0]
    n10 = sum(c10 is not None for _, _, c10 in cells)
    models = sorted({r.model for r, _, _ in cells}, key=model_order)
    lines = [f"Over the test users whose last input item never occurs in training, HRLI@1 is exactly 0 in "
             f"{len(zero)} of the {len(cells)} model cells that report it ({len(models)} models: {', '.join(models)}; "
             f"the remedy variants not counted), and HRLI@10 in {len(zero10)} of {n10}."]
    exceptions = [(r, c1) for r, c1, _ in cells if c1[0] > 0]
    if exceptions:
        lines.append(" It is not 0 in:")
        for r, (k, n) in exceptions:
            lo, hi = wilson(k, n)
            lines.append(f"\n- {r.dataset} `{r.model}` seed {r.seed}: {k} of {n} such users ({k / n:.3f}, Wilson 95% "
                         f"[{lo:.3f}, {hi:.3f}])")
        lines.append("\n")
    else:
        lines.append("\n")
    return "".join(lines)


# --- the five models (docs/results.md) ------------------------------------------------------------------------------

def _mean_of(runs: list[RunRecord], key: str) -> tuple[float, int] | None:
    xs = [x for x in (run_values(r).get(key) for r in runs) if x is not None]
    return (sum(xs) / len(xs), len(xs)) if xs else None


def five_models_markdown(runs: list[RunRecord]) -> str:
    """The ``five_models`` block: HRLI@1 / HRL2I@1 (mean over seeds, seeds marked) per data set and model of
    ``FIVE_MODELS``, for the data sets where a contrast model and a causal model ran; then the sentences: the causal
    models' HRLI@1 as a multiple of their HRL2I@1, and the contrast models' largest rate and their two rates'
    largest ratio."""
    groups = _groups(runs, lambda label: label in FIVE_MODELS)
    datasets = sorted({ds for ds, m in groups if MODEL_TRAITS[m].contrast}
                      & {ds for ds, m in groups if is_causal(m)})
    rows, ratios, contrast, never = [], [], [], []
    for ds in datasets:
        row = [ds]
        for m in FIVE_MODELS:
            rs = groups.get((ds, m), [])
            h1, h2 = _mean_of(rs, "HRLI@1"), _mean_of(rs, "HRL2I@1")
            if h1 is None or h2 is None:
                row.append("–")
                continue
            row.append(f"{h1[0]:.3f} / {h2[0]:.3f} ({seeds_text(min(h1[1], h2[1]))})")
            if is_causal(m) and h2[0] > 0:
                ratios.append((h1[0] / h2[0], ds, m))
            elif is_causal(m):
                never.append(f"`{m}` on {md_text(ds)}")
            else:
                contrast.append((h1[0], h2[0], ds, m))
        rows.append(row)
    text = markdown_table(["HRLI@1 / HRL2I@1", *FIVE_MODELS], rows)
    if ratios:
        lo, hi = min(ratios), max(ratios)
        text += (f"\nThe causal models' HRLI@1 is {lo[0]:.0f} to {hi[0]:.0f} times their HRL2I@1 (least: `{lo[2]}` on "
                 f"{md_text(lo[1])}; most: `{hi[2]}` on {md_text(hi[1])})"
                 + (f"; HRL2I@1 is 0 for {', '.join(never)}" if never else "") + ".")
    if contrast:
        top = max((max(a, b), ds, m) for a, b, ds, m in contrast)
        spread = [max(a, b) / min(a, b) for a, b, _, _ in contrast if min(a, b) > 0]
        within = f", within a factor of {max(spread):.1f} of each other where both are above 0" if spread else ""
        text += f" The contrast models' two rates are at most {top[0]:.3f} (`{top[2]}` on {md_text(top[1])}){within}."
    return text + ("\n" if ratios or contrast else "")


# --- coverage: the cells and seeds the study asks for (docs/results.md, Status) ---------------------------------------

# the study asks 5 seeds of SASRec / DuoRec / BSARec on these data sets, 3 of every model elsewhere
MAIN_SEEDS: dict[str, int] = {"beauty-ts": 5, "toys-ts": 5}
OTHER_SEEDS = 3
COVERAGE_QUEUE = "EVIDENCE=1 scripts/reproduce_queue.sh scripts/grid_evidence.txt"
# and, on MAIN_SEEDS' data sets, 5 seeds of every remedy comparison (each SASRec remedy variant
# stored there) and of each probe of questions 1 and 2
SASREC_PROBES: tuple[str, ...] = tuple(f"{PROBE_BASE}-{p}" for p in PROBES if f"{PROBE_BASE}-{p}" in MODEL_VARIANTS)


def asked_variants(labels: set[str]) -> list[str]:
    """The SASRec remedy variants among ``labels`` (a data set's stored labels), in REMEDY_LABELS order, then every
    SASRec probe (asked whether stored or not), then each probe's same-objective base among ``labels`` (the probe
    blocks compare the probe with it wherever it has cells, so its seeds are asked there as the probe's)."""
    remedies = [lb for lb in REMEDY_LABELS if lb in labels and (rv := remedy_variant(lb)) and rv[0] == PROBE_BASE]
    bases = [f"{PROBE_BASE}-{b}" for b in dict.fromkeys(SAME_OBJECTIVE_BASE.values()) if f"{PROBE_BASE}-{b}" in labels]
    return remedies + list(SASREC_PROBES) + bases


def coverage_markdown(runs: list[RunRecord]) -> str:
    """The ``coverage`` block: per data set, the stored cells and how many carry their per-user evidence
    (users.npz), and for each causal model (SASRec, DuoRec, BSARec) its seeds stored against the seeds asked
    (``MAIN_SEEDS``, else ``OTHER_SEEDS``; none on a data set where no causal model itself ran, such as a side check
    of another tie rule), with how many of them carry evidence, and on ``MAIN_SEEDS``' data sets the same over
    SASRec's remedy variants stored there and its probes (``asked_variants``); then one sentence over the store."""
    cells = [r for r in runs if r.seed is not None]
    evidence = {(r.dataset, r.model, r.seed) for r in cells if r.users_path is not None}
    rows, asked_total, stored_total, variants_asked, variants_stored = [], 0, 0, 0, 0
    for ds in sorted({r.dataset for r in cells}):
        mine = [r for r in cells if r.dataset == ds]
        with_ev = sum((ds, r.model, r.seed) in evidence for r in mine)
        row = [ds, str(len(mine)), f"{with_ev} of {len(mine)}"]
        asked = MAIN_SEEDS.get(ds, OTHER_SEEDS)
        if not any(r.model in CAUSAL_MODELS for r in mine):  # a side check's data set (another tie rule): none asked
            rows.append(row + ["–"] * (len(CAUSAL_MODELS) + 1))
            continue
        for m in CAUSAL_MODELS:
            seeds = sorted({r.seed for r in mine if r.model == m and r.seed is not None and r.seed <= asked})
            ev = sum((ds, m, k) in evidence for k in seeds)
            row.append(f"{len(seeds)} of {asked} ({ev} with evidence)" if seeds else f"0 of {asked}")
            asked_total += asked
            stored_total += ev
        if ds in MAIN_SEEDS:
            variants = asked_variants({r.model for r in mine})
            stored = {(r.model, r.seed) for r in mine if r.model in variants and r.seed is not None and r.seed <= asked}
            ev = sum((ds, m, k) in evidence for m, k in stored)
            n = asked * len(variants)
            row.append(f"{len(stored)} of {n} ({ev} with evidence)")
            variants_asked, variants_stored = variants_asked + n, variants_stored + ev
        else:
            row.append("–")
        rows.append(row)
    header = ["Data set", "cells", "with users.npz", *(f"{m}: seeds stored of asked" for m in CAUSAL_MODELS),
              f"{PROBE_BASE} remedies and probes: seeds stored of asked"]
    text = markdown_table(header, rows)
    n_ev = sum((r.dataset, r.model, r.seed) in evidence for r in cells)
    probes = ", ".join(v.removeprefix(f"{PROBE_BASE}-") for v in SASREC_PROBES)
    text += (f"\nPer-user evidence (users.npz) in {n_ev} of {len(cells)} stored cells; of the seeds the study asks of "
             f"{', '.join(CAUSAL_MODELS)} ({max(MAIN_SEEDS.values())} on {', '.join(sorted(MAIN_SEEDS))}, "
             f"{OTHER_SEEDS} on every other data set), {stored_total} of {asked_total} are stored with their evidence; "
             f"of those it asks of {PROBE_BASE}'s remedy variants stored, its probes ({probes}) and their "
             f"same-objective bases stored, "
             f"{max(MAIN_SEEDS.values())} each on {', '.join(sorted(MAIN_SEEDS))}, {variants_stored} of "
             f"{variants_asked}. "
             + ("Every asked seed is stored with its evidence. The queue that trained them"
                if (stored_total, variants_stored) == (asked_total, variants_asked) and n_ev == len(cells)
                else "The queue that trains the rest") + f": `{COVERAGE_QUEUE}`.\n")
    return text


# --- question 3: the echo (docs/results.md) -------------------------------------------------------------------------

def echo_evidence(runs: list[RunRecord], n_boot: int = N_BOOT) -> EchoTable | None:
    """``study.echo``'s table over the model cells of ``runs`` with per-user evidence (the bootstrap the ``echo``
    block and figure share: ``build_report`` makes it once); None where no cell has any."""
    index = EvidenceIndex.from_runs([r for r in runs if _is_model(r.model)])
    return echo_table(index, n_boot=n_boot) if index.labels_with_evidence() else None


def echo_block(runs: list[RunRecord], n_boot: int = N_BOOT, *, table: EchoTable | None = None) -> str:
    """The ``echo`` block: how many cells have per-user evidence today and which do not, then ``study.echo``'s
    table over those that do (``table``: ``echo_evidence(runs, n_boot)``, made here where not given). Read as a
    first look where under half of the cells have it."""
    index = EvidenceIndex.from_runs([r for r in runs if _is_model(r.model)])
    have = {key: [k for k, c in seeds if index.users_at(c) is not None] for key, seeds in index.cells.items()}
    without = [md_text(f"{ds}/{lb}/seed{k}") for (ds, lb), seeds in index.cells.items() for k, c in seeds
               if k not in have[(ds, lb)]]
    n_ev = sum(len(ks) for ks in have.values())
    total = n_ev + len(without)
    one_each = n_ev > 0 and all(len(ks) <= 1 for ks in have.values())
    head = f"Per-user evidence (users.npz) exists today for {n_ev} of the {total} stored model cells"
    if without:
        head += (f"; the {len(without)} without it ({', '.join(without)}) say nothing here until they are retrained or "
                 "re-diagnosed (`scripts/rediagnose_cells.py --what users`)")
    head += "."
    thin = (["a minority of the cells"] if 2 * n_ev < total else []) + (["one seed a cell"] if one_each else [])
    if n_ev and thin:
        head += f" This answer rests on {' and '.join(thin)}: read it as a first look, not a finding."
    head += "\n\n"
    if not n_ev:
        return head
    table = echo_table(index, n_boot=n_boot) if table is None else table
    return head + echo_markdown(table) + "\n" + echo_answer(table) + "\n"


def echo_figures(runs: list[RunRecord], n_boot: int = N_BOOT, *, table: EchoTable | None = None) -> list[ReportFigure]:
    """The question-3 forest plot (``study.echo.echo_figure``) as a report figure ``echo`` (``table``: as for
    ``echo_block``); none where no cell has per-user evidence with both groups."""
    table = echo_evidence(runs, n_boot) if table is None else table
    if table is None or not any(r.diff is not None for r in table.rows):
        return []
    caption = ("Question 3: filtered HR@10 of users whose top-1 unfiltered item is their last input item minus the "
               "others', within strata of the last item's training frequency (Mantel-Haenszel), 95% bootstrap "
               "interval; n = users per group.")
    return [ReportFigure("echo", "Does the echo cost filtered HR@10?", caption, echo_figure(table))]


# --- all blocks -----------------------------------------------------------------------------------------------------

EVIDENCE_BLOCKS: tuple[str, ...] = ("coverage", "remedy_verdicts", "remedy_spread", "comparisons", "proportions",
                                    "cold_items", "five_models", "echo")


def evidence_blocks(runs: list[RunRecord], n_boot: int = N_BOOT, *, echo: EchoTable | None = None,
                    comparisons: ComparisonTable | None = None) -> dict[str, str]:
    """Markdown of every block of ``EVIDENCE_BLOCKS`` by name (``echo``, ``comparisons``: as the ``table`` of
    ``echo_block``, ``comparisons_markdown``)."""
    return {"coverage": coverage_markdown(runs),
            "remedy_verdicts": remedy_verdicts_markdown(runs, n_boot),
            "remedy_spread": remedy_spread_markdown(runs),
            "comparisons": comparisons_markdown(runs, n_boot, table=comparisons),
            "proportions": proportions_markdown(runs, n_boot),
            "cold_items": cold_items_markdown(runs),
            "five_models": five_models_markdown(runs),
            "echo": echo_block(runs, n_boot, table=echo)}
