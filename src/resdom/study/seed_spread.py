"""Why do seeds disagree on HRLI@1? (docs/results.md, "Beyond the paper"). The seeds of one (data set, model) are
compared at the epochs early stopping selected and at one common epoch, from the stored training curves' HRLI@1
monitor. NumPy and matplotlib only (no torch).

A cell counts where it is one the question 4 block reads (``study.reliance_dynamics.monitored_runs``: a causal
model with HRLI@1 monitored from the first monitor interval on), its ``cell.json`` (else ``metrics.json``) names
the selected epoch, that epoch lies within its monitored epochs, and its ``hrli.json`` holds the test HRLI@1 of the
selected checkpoint. Per cell, ``h(e)``: the monitor's HRLI@1 (unfiltered, on a fixed validation subsample) linearly
interpolated between the monitored epochs. A group, one (data set, label) with ``MIN_SEEDS`` cells or more:

- ``sd_test``: the standard deviation over its seeds (ddof 1) of the stored test HRLI@1;
- ``sd_selected``: the same of ``h(best epoch)``, each seed read at the epoch it kept;
- ``sd_common``: the same of ``h(ē)``, every seed read at one epoch ``ē``: the mean of the group's selected epochs,
  moved to the nearest epoch every seed monitored where a seed's monitor stopped before it;
- ``widening = sd_selected - sd_common``: the spread the selected epochs add (> 0) or take away (< 0).

The rows over several groups (the base models; all models) give the mean of each over the groups, with a 95%
percentile interval from a two-stage bootstrap (data sets drawn with replacement, then their groups:
``study.reliance_dynamics.cluster_bootstrap_means``), and Pearson's r between ``sd_test`` and ``sd_selected``
over the groups (whether the monitor's reading stands for the test users'). Verdict on the mean widening against 0:
one-sided bootstrap tests and one-sided t-tests on the data sets' means (``units_t``), each family Holm-adjusted
across those rows; a verdict needs both: "the selected epoch widens the spread" where both adjusted p that it is
<= 0 fall below alpha, "narrows" likewise, else "undecided".

``seed_spread_block(runs)`` is the ``seed_spread`` block of docs/results.md (``study.document_blocks``) and
``fig_seed_spread`` (``report.figures``) draws ``spread_figure`` of the groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from resdom.experiments import CAUSAL_MODELS
from resdom.report.collect import RunRecord
from resdom.report.figures import SERIES_STYLES, ReportFigure, drawn_name, plain_text, series_look, styled
from resdom.report.markdown import markdown_lines
from resdom.report.stats import holm
from resdom.stored import number_at
from resdom.study.reliance_dynamics import (
    RELIANCE,
    Interval,
    Skipped,
    cluster_bootstrap_means,
    monitored_runs,
    units_t,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MIN_SEEDS = 3
FLOOR = 1e-3  # the figure's log scale: standard deviations below it are drawn at it


@dataclass(frozen=True)
class SeedCurve:
    """One cell: its selected epoch, its test HRLI@1 and its monitored HRLI@1 series."""

    dataset: str
    label: str
    seed: int
    model: str
    best_epoch: int
    test_hrli: float
    epochs: tuple[int, ...]
    hrli: tuple[float, ...]

    def at(self, epoch: float) -> float:
        """The monitor's HRLI@1 at ``epoch``, linearly interpolated between the monitored epochs."""
        if not self.epochs[0] <= epoch <= self.epochs[-1]:
            raise ValueError(f"epoch {epoch} outside the monitored epochs {self.epochs[0]}-{self.epochs[-1]}")
        return float(np.interp(epoch, self.epochs, self.hrli))


def monitor_series(curve: Sequence[dict[str, Any]]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(epochs, HRLI@1) of the curve's monitor rows, in epoch order."""
    points = sorted((int(r["epoch"]), float(r["monitor"][RELIANCE])) for r in curve
                    if isinstance(r.get("monitor"), dict) and RELIANCE in r["monitor"])
    return tuple(p[0] for p in points), tuple(p[1] for p in points)


def _best_epoch(r: RunRecord) -> int | None:
    for source in (r.cell, r.metrics):
        value = source.get("best_epoch") if source else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def runs_seed_curves(runs: Sequence[RunRecord], models: Sequence[str] = CAUSAL_MODELS) -> tuple[list[SeedCurve],
                                                                                          list[Skipped]]:
    """The cells of ``runs`` that count (module docstring), in the order data set, label, seed, and those of a
    causal model left out, with the reason."""
    cells, skipped = [], []
    for r, model, seed, got in monitored_runs(runs, models):  # question 4's cells only
        if isinstance(got, Skipped):
            skipped.append(got)
            continue
        epochs, hrli = monitor_series(r.curve)
        best, test = _best_epoch(r), number_at(r.diag("hrli"), "values", RELIANCE)
        if best is None:
            why = "no selected epoch in cell.json or metrics.json"
        elif not epochs[0] <= best <= epochs[-1]:
            why = f"selected epoch {best} outside its monitored epochs {epochs[0]}-{epochs[-1]}"
        elif test is None:
            why = f"no test {RELIANCE} ({r.why_empty('hrli')})"
        else:
            cells.append(SeedCurve(r.dataset, r.model, seed, model, best, test, epochs, hrli))
            continue
        skipped.append(Skipped(f"{r.dataset}/{r.model}/seed{seed}", why))
    return cells, skipped


@dataclass(frozen=True)
class Group:
    """One (data set, label): its seeds' spreads (module docstring)."""

    dataset: str
    label: str
    cells: tuple[SeedCurve, ...]

    @property
    def scope(self) -> str:
        return f"{self.dataset} / {self.label}"

    @property
    def mean_selected(self) -> float:
        return float(np.mean([c.best_epoch for c in self.cells]))

    @property
    def common_epoch(self) -> float:
        """The mean of the selected epochs, moved to the nearest epoch that every seed monitored."""
        lo, hi = max(c.epochs[0] for c in self.cells), min(c.epochs[-1] for c in self.cells)
        return float(min(hi, max(lo, self.mean_selected)))

    @property
    def sd_test(self) -> float:
        return float(np.std([c.test_hrli for c in self.cells], ddof=1))

    @property
    def sd_selected(self) -> float:
        return float(np.std([c.at(c.best_epoch) for c in self.cells], ddof=1))

    @property
    def sd_common(self) -> float:
        return float(np.std([c.at(self.common_epoch) for c in self.cells], ddof=1))

    @property
    def widening(self) -> float:
        return self.sd_selected - self.sd_common


def widest(groups: Sequence[Group]) -> Group:
    """The group whose selected epochs widen its spread most, among those read at the mean of their selected epochs
    itself (else among all)."""
    unmoved = [g for g in groups if g.common_epoch == g.mean_selected]
    return max(unmoved or groups, key=lambda g: g.widening)


def seed_groups(cells: Sequence[SeedCurve], min_seeds: int = MIN_SEEDS) -> list[Group]:
    """The (data set, label) groups of ``cells`` with ``min_seeds`` cells or more, in the cells' order."""
    keys = list(dict.fromkeys((c.dataset, c.label) for c in cells))
    groups = [Group(ds, lb, tuple(c for c in cells if (c.dataset, c.label) == (ds, lb))) for ds, lb in keys]
    return [g for g in groups if len(g.cells) >= min_seeds]


@dataclass
class SpreadRow:
    """The groups of one scope: means over the groups with intervals, r, p-values and the verdict."""

    scope: str
    groups: list[Group]
    sd_test: Interval
    sd_selected: Interval
    sd_common: Interval
    widening: Interval
    r_test_selected: float
    p_wider: float = math.nan  # bootstrap and t-test, unadjusted, then Holm-adjusted
    p_narrower: float = math.nan
    p_wider_t: float = math.nan
    p_narrower_t: float = math.nan
    adjusted: dict[str, float] = field(default_factory=dict)
    verdict: str = ""

    @property
    def datasets(self) -> list[str]:
        return list(dict.fromkeys(g.dataset for g in self.groups))


def _pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 2 or a.std() == 0 or b.std() == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])


def summarise(scope: str, groups: list[Group], n_boot: int = 2000, seed: int = 0) -> SpreadRow:
    """The row over ``groups`` (module docstring); p-values unadjusted, no verdict yet."""
    vals = np.array([[g.sd_test, g.sd_selected, g.sd_common, g.widening] for g in groups])
    names = [g.dataset for g in groups]
    reps = cluster_bootstrap_means(vals, names, n_boot, seed)
    means = vals.mean(axis=0)
    ivs = [Interval(float(means[j]), float(np.quantile(reps[:, j], 0.025)), float(np.quantile(reps[:, j], 0.975)))
           for j in range(4)]
    row = SpreadRow(scope, groups, ivs[0], ivs[1], ivs[2], ivs[3], r_test_selected=_pearson(vals[:, 0], vals[:, 1]))
    row.p_wider = (1 + int(np.sum(reps[:, 3] <= 0))) / (n_boot + 1)
    row.p_narrower = (1 + int(np.sum(reps[:, 3] >= 0))) / (n_boot + 1)
    if len(set(names)) >= 2:
        row.p_wider_t, row.p_narrower_t = units_t(vals[:, 3], names, 0.0)
    return row


def spread_verdict(row: SpreadRow, alpha: float = 0.05) -> str:
    a = row.adjusted
    if len(row.datasets) < 2:
        return "too few data sets (t-test on data sets' means)"
    if max(a["p_wider"], a["p_wider_t"]) < alpha:
        return "the selected epoch widens the spread"
    if max(a["p_narrower"], a["p_narrower_t"]) < alpha:
        return "the selected epoch narrows the spread"
    return "undecided"


@dataclass
class SpreadTable:
    groups: list[Group]
    rows: list[SpreadRow]
    skipped: list[Skipped]
    n_boot: int
    alpha: float
    few: list[tuple[str, int]] = field(default_factory=list)  # (scope, seeds) of the groups with too few seeds


def spread_table(cells: Sequence[SeedCurve], skipped: Sequence[Skipped] = (), n_boot: int = 2000, seed: int = 0,
                 alpha: float = 0.05) -> SpreadTable:
    """The groups of ``cells`` and the summary rows (the base models, where they differ from all; all models), Holm
    across the rows (each family on its own)."""
    every = seed_groups(cells, min_seeds=1)
    groups = [g for g in every if len(g.cells) >= MIN_SEEDS]
    few = [(g.scope, len(g.cells)) for g in every if len(g.cells) < MIN_SEEDS]
    scopes = []
    base = [g for g in groups if g.cells[0].model == g.label]
    if base and len(base) < len(groups):
        scopes.append(("all data sets / base models", base))
    if groups:
        scopes.append(("all data sets / all models", groups))
    rows = [summarise(s, gs, n_boot, seed + i) for i, (s, gs) in enumerate(scopes)]
    for name in ("p_wider", "p_narrower", "p_wider_t", "p_narrower_t"):
        values = [getattr(r, name) for r in rows]
        for r, p in zip(rows, holm(values) if rows else []):
            r.adjusted[name] = float(p)
    for r in rows:
        r.verdict = spread_verdict(r, alpha)
    return SpreadTable(groups, rows, list(skipped), n_boot, alpha, few)


# --- Markdown, figure, the document block ---------------------------------------------------------------------------

COLUMNS = ("scope", "seeds", "selected epochs", "common epoch", "SD test HRLI@1", "SD at the selected epochs",
           "SD at the common epoch", "widening")

CAPTION = (
    "Why do seeds disagree on HRLI@1? From every stored cell of a causal self-attention model with a monitored "
    "training curve, generated by `study.seed_spread`. Per (data set, label) with "
    f"{MIN_SEEDS} seeds or more: the standard deviation over seeds of the test HRLI@1 of the checkpoint each seed "
    "kept; of the monitor's HRLI@1 (unfiltered, a fixed validation subsample, linearly interpolated between the "
    "monitored epochs) at the epoch each seed kept; and of the same with every seed read at one common epoch, the "
    "mean of the selected epochs (or the nearest epoch every seed monitored). Widening: SD at the selected "
    "epochs - SD at the common epoch (> 0: where early stopping stops adds to the seeds' disagreement).")


def _groups_markdown(table: SpreadTable) -> list[str]:
    return markdown_lines(COLUMNS, [[g.scope, len(g.cells), ", ".join(str(c.best_epoch) for c in g.cells),
                                      f"{g.common_epoch:.1f}", f"{g.sd_test:.3f}", f"{g.sd_selected:.3f}",
                                      f"{g.sd_common:.3f}", f"{g.widening:+.3f}"] for g in table.groups])


SUMMARY_COLUMNS = ("scope", "groups", "data sets", "SD test HRLI@1 [95% CI]", "SD at the selected epochs [95% CI]",
                   "SD at the common epoch [95% CI]", "widening [95% CI]", "r (test, selected)", "verdict")


def spread_markdown(table: SpreadTable) -> str:
    """The groups' table, the summary table, a note on the method and the cells left out."""
    lines = _groups_markdown(table)
    lines += ["", *markdown_lines(SUMMARY_COLUMNS, [
        [r.scope, len(r.groups), len(r.datasets), r.sd_test.text(3, False), r.sd_selected.text(3, False),
         r.sd_common.text(3, False), r.widening.text(3), _r(r), r.verdict] for r in table.rows])]
    lines += ["", f"Means over the groups; 95% CI from a two-stage bootstrap (data sets, then their groups; "
                  f"{table.n_boot} replicates). r: Pearson's over the groups between the SD of the test HRLI@1 and "
                  f"the SD at the selected epochs. Verdict on the mean widening against 0 by one-sided bootstrap "
                  f"tests and one-sided t-tests on the data sets' means (df: data sets - 1), each Holm-adjusted "
                  f"across the {len(table.rows)} rows; a verdict needs both, alpha {table.alpha:g}."]
    if table.few:
        lines += ["", f"Fewer than {MIN_SEEDS} seeds, not shown: " + "; ".join(
            f"{scope} ({_count(n, 'seed')})" for scope, n in table.few) + "."]
    if table.skipped:
        lines += ["", "Left out: " + "; ".join(f"{s.cell} ({s.reason})" for s in table.skipped) + "."]
    return "\n".join(lines) + "\n"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _r(row: SpreadRow) -> str:
    return "n/a" if math.isnan(row.r_test_selected) else f"{row.r_test_selected:.2f}"


def answer_sentence(table: SpreadTable) -> str:
    """The answer from the summary rows, and the group the selected epochs split most."""
    parts = [f"over {'all models' if r.scope.endswith('all models') else 'the base models alone'} "
             f"({_count(len(r.groups), 'group')}, {_count(len(r.datasets), 'data set')}) the seeds' HRLI@1 spreads "
             f"by {r.sd_selected.text(3, False)} (SD) at the epochs they kept and by {r.sd_common.text(3, False)} "
             f"at one common epoch, a widening of {r.widening.text(3)}: {r.verdict} (the test HRLI@1's SD: "
             f"{r.sd_test.text(3, False)}, Pearson's r with the first over the groups {_r(r)})" for r in table.rows]
    if not parts:
        return ""
    top = widest(table.groups)
    epochs = ", ".join(str(c.best_epoch) for c in top.cells)
    return ("Answer, generated from the tables: " + "; ".join(parts) + f". Widened most (of the groups read at the "
            f"mean of their selected epochs): {top.scope}, selected epochs {epochs}: SD {top.sd_selected:.3f} at "
            f"those epochs, {top.sd_common:.3f} at epoch {top.common_epoch:.1f} (the figure's right panel).")


def seed_spread_block(runs: Sequence[RunRecord], models: Sequence[str] = CAUSAL_MODELS, n_boot: int = 2000) -> str:
    """The ``seed_spread`` block of docs/results.md: ``CAPTION``, the tables and notes of ``spread_markdown`` and
    ``answer_sentence``; one sentence where no group has enough seeds."""
    cells, skipped = runs_seed_curves(runs, models)
    table = spread_table(cells, skipped, n_boot)
    if not table.groups:
        return (f"No (data set, model) of {', '.join(models)} has {MIN_SEEDS} seeds with a monitored training curve "
                "and a selected epoch within it: nothing to compare yet.\n")
    return CAPTION + "\n\n" + spread_markdown(table) + "\n" + answer_sentence(table) + "\n"


@plain_text
def spread_figure(groups: Sequence[Group], width: float = 6.8, dpi: int = 100) -> Figure:
    """Left: per group, SD at the common epoch (x) against SD at the selected epochs (y), log scales (values below
    ``FLOOR`` drawn at it), one colour and marker per data set (``series_look``), the line y = x. Right: the
    ``widest`` group, each seed's monitored HRLI@1 against the epoch (a colour and line style each), its selected
    epoch marked (the seed's marker), the common epoch dashed. Not saved here."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, width * 0.55), dpi=dpi, layout="constrained")
    left, right = fig.subplots(1, 2)
    datasets = list(dict.fromkeys(g.dataset for g in groups))
    top = max((max(g.sd_selected, g.sd_common) for g in groups), default=FLOOR) * 1.5
    for i, ds in enumerate(datasets):
        mine = [g for g in groups if g.dataset == ds]
        left.scatter([max(FLOOR, g.sd_common) for g in mine], [max(FLOOR, g.sd_selected) for g in mine], s=14,
                     **series_look(i), alpha=0.85, lw=0, label=f"{drawn_name(ds)} ({_count(len(mine), 'model')})")
    left.plot([FLOOR, top], [FLOOR, top], color="0.4", lw=0.8, ls="--", label="y = x")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlim(FLOOR / 1.5, top)
    left.set_ylim(FLOOR / 1.5, top)
    left.set_xlabel("SD over seeds at one common epoch", fontsize=7)
    left.set_ylabel("SD over seeds at the selected epochs", fontsize=7)
    left.set_title("Seeds' spread in monitored HRLI@1", fontsize=7)
    if groups:
        g = widest(groups)
        for j, c in enumerate(g.cells):
            look = series_look(j)
            right.plot(c.epochs, c.hrli, color=look["color"], ls=SERIES_STYLES[j % len(SERIES_STYLES)], lw=1,
                       label=f"seed {c.seed} (kept {c.best_epoch})")
            right.plot([c.best_epoch], [c.at(c.best_epoch)], ls="none", ms=5, **look)
        right.axvline(g.common_epoch, color="0.4", lw=0.8, ls="--", label=f"common epoch {g.common_epoch:.1f}")
        right.set_xlabel("epoch", fontsize=7)
        right.set_ylabel("monitored HRLI@1", fontsize=7)
        right.legend(fontsize=5.5, loc="best")
        right.set_title(f"{drawn_name(g.dataset)} / {drawn_name(g.label)}: where each seed stopped", fontsize=7)
    for ax in (left, right):
        ax.tick_params(labelsize=7)
    fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncol=5, fontsize=5.5)
    return fig


@styled
def fig_seed_spread(runs: list[RunRecord]) -> ReportFigure | None:
    """Why seeds disagree on HRLI@1 (docs/results.md, ``study.seed_spread``): each (data set, model)'s spread over
    seeds at the selected epochs against at one common epoch, and the monitored curves of the group the selected
    epochs split most; None where no group has enough monitored seeds."""
    groups = seed_groups(runs_seed_curves(runs)[0])
    if not groups:
        return None
    return ReportFigure("seed_spread", "Why seeds disagree on HRLI@1: the selected epoch",
                        "Left: one point per data set and model with three seeds or more, the standard deviation over "
                        "seeds of the monitored HRLI@1 read at one common epoch (x) against read at the epoch each "
                        "seed kept (y); above the dashed line y = x, where early stopping stops adds to the seeds' "
                        "disagreement. Right: the group it adds most to, each seed's monitored HRLI@1 by epoch with "
                        "the epoch it kept (dot) and the common epoch (dashed).", spread_figure(groups))
