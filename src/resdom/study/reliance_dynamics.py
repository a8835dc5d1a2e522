"""Does last-item reliance keep rising after accuracy stops? (question 4 of docs/results.md, "Beyond
the paper"). Over every stored cell of a causal self-attention model with a monitored training curve, the plateaus of
``study.dynamics`` summarised with intervals. NumPy and matplotlib only (no torch).

A cell (``STORE/<data set>/<label>/seed<k>/``) counts where its ``cell.json`` names a model of ``CAUSAL_MODELS``
(the models the paper's claims are about, their named variants included, as in ``study.claims``) and its
``curve.jsonl`` carries HRLI@1 ``monitor`` rows from the first monitor interval on (a run resumed with monitoring
switched on late has its first monitored epoch beyond the interval between its monitored epochs: skipped, named)
at three epochs or more. Per cell (``study.dynamics.cell_dynamics``):

- lag: ``plateau(HRLI@1) - plateau(validation NDCG@10)`` in epochs (the plateau: the first monitored epoch by
  which a series has made 95% of its rise);
- change after: HRLI@1 at the last monitored epoch - HRLI@1 at the NDCG@10 plateau (signed);
- largest rise after: the largest HRLI@1 from the NDCG@10 plateau on - HRLI@1 there (>= 0 by construction, and
  lifted by the monitor's noise: the largest of several noisy values; shown, not tested).

A group of cells (one (data set, label), one data set, all of them) is summarised by the mean of each over its
cells with a 95% percentile interval from a bootstrap: where the group spans several data sets, two-stage (data
sets drawn with replacement, then within each drawn data set its cells with replacement; the mean over every drawn
cell), else the cells drawn with replacement. The share of cells with lag > 0 gets a Wilson interval (cells taken
as independent). The verdict on "reliance keeps rising after accuracy stops" tests the mean change after against
a declared margin ``m`` (``GAIN_MARGIN``, 0.01 HRLI@1) on the same replicates: ``p_rise = (1 + #(c* <= m)) /
(n_boot + 1)`` and ``p_flat = (1 + #(c* >= m)) / (n_boot + 1)``, Holm-adjusted (each family separately) across the
rows of one table with a verdict. Even at five values the percentile bootstrap underprices their spread, so the
same two one-sided tests are also made as t-tests (``units_t``): on the cells' values, or where the group spans
several data sets on the data sets' means (df: units - 1), each family Holm-adjusted too; a verdict needs both:
"keeps rising" where the larger of the two adjusted p_rise < alpha, else "does not keep rising" likewise on p_flat,
else "undecided". Fewer than ``MIN_CELLS`` cells get no verdict: a percentile bootstrap of a mean of two to four
values is far too narrow.

``runs_dynamics(runs)`` reads the same from ``report.collect`` records (their curves), and
``reliance_dynamics_block(runs)`` is the ``reliance_dynamics`` block of docs/results.md (``study.document_blocks``):
``CAPTION`` (the definitions), the table, the cells left out and ``answer_sentence`` (generated from the table's
"all data sets" rows); ``report.figures.fig_reliance_dynamics`` draws its figure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from resdom.errors import ResdomError
from resdom.experiments import CAUSAL_MODELS, TRAINING_VARIANTS
from resdom.report.collect import RunRecord
from resdom.report.figures import ReportFigure, drawn_name, plain_text, series_look, styled
from resdom.report.markdown import markdown_lines
from resdom.report.stats import holm, paired_seed_test, wilson
from resdom.study.dynamics import Dynamics, cell_dynamics

if TYPE_CHECKING:
    from matplotlib.figure import Figure

GAIN_MARGIN = 0.01
MIN_CELLS = 5
CURVE_FILE = "curve.jsonl"
METRIC, RELIANCE = "NDCG@10", "HRLI@1"


# --- reading the store ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CellDynamics:
    """One stored cell's dynamics."""

    dataset: str
    label: str
    seed: int
    model: str
    dynamics: Dynamics

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.label}/seed{self.seed}"


@dataclass(frozen=True)
class Skipped:
    """A cell of a causal model left out, and why."""

    cell: str
    reason: str


def read_curve(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``curve.jsonl`` (blank lines skipped); a line that is not a JSON object is a ResdomError
    naming the file and line."""
    rows = []
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ResdomError(f"{path}: cannot be read ({e})") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise ResdomError(f"{path}:{i}: not JSON ({e})") from None
        if not isinstance(row, dict):
            raise ResdomError(f"{path}:{i}: a curve row must be a JSON object")
        rows.append(row)
    return rows


def cell_model(cell: Path) -> str | None:
    """The model name of a stored cell (``cell.json`` "model"); None where the cell has no cell.json."""
    path = cell / "cell.json"
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ResdomError(f"{path}: not readable JSON ({e})") from None
    model = meta.get("model") if isinstance(meta, dict) else None
    if not isinstance(model, str):
        raise ResdomError(f"{path}: field 'model' must be a string")
    return model


def curve_dynamics(path: Path) -> Dynamics | str:
    """The dynamics of the curve at ``path``, or the reason it has none (too few monitored epochs, monitoring
    started late)."""
    return rows_dynamics(read_curve(path), path)


def rows_dynamics(curve: list[dict[str, Any]], where: str | Path) -> Dynamics | str:
    """The dynamics of the curve rows ``curve`` (read from ``where``, named in errors), or the reason it has none."""
    try:
        d = cell_dynamics(curve, METRIC, RELIANCE)
    except (KeyError, TypeError, ValueError) as e:
        raise ResdomError(f"{where}: a monitored row lacks a number ({type(e).__name__}: {e})") from None
    if d is None:
        n = sum(isinstance(r.get("monitor"), dict) and RELIANCE in r["monitor"] for r in curve)
        return f"{n} monitored epoch{'s' * (n != 1)} (3 needed)"
    step = d.epochs[1] - d.epochs[0]
    if d.epochs[0] > step:
        return f"monitoring starts at epoch {d.epochs[0]}, not within the first {step} epochs (a resumed run)"
    return d


def run_model(r: RunRecord) -> str | None:
    """The model a read run trained: its ``cell.json`` "model", else its ``config.json`` model name."""
    model = r.cell.get("model") if r.cell else None
    if not isinstance(model, str):
        config_model = r.config.get("model")
        model = config_model.get("name") if isinstance(config_model, dict) else None
    return model if isinstance(model, str) else None


def monitored_runs(runs: Sequence[RunRecord], models: Sequence[str] = CAUSAL_MODELS) -> Iterator[
        tuple[RunRecord, str, int, Dynamics | Skipped]]:
    """(run, its model, its seed (0 where none), its dynamics or why it has none) for each run of ``models``, in the
    order data set, label, seed: the cells question 4 reads (and ``study.seed_spread`` after it)."""
    for r in sorted(runs, key=lambda r: (r.dataset, r.model, r.seed if r.seed is not None else -1)):
        model = run_model(r)
        if model is None or model not in models:
            continue
        seed = r.seed if r.seed is not None else 0
        got = rows_dynamics(r.curve, r.path) if r.curve else f"no {CURVE_FILE}"
        yield r, model, seed, Skipped(f"{r.dataset}/{r.model}/seed{seed}", got) if isinstance(got, str) else got


def runs_dynamics(runs: Sequence[RunRecord], models: Sequence[str] = CAUSAL_MODELS) -> tuple[list[CellDynamics],
                                                                                         list[Skipped]]:
    """``store_dynamics`` from read runs (``report.collect``; their ``curve``, the model of ``cell.json`` else of
    ``config.json``), in the order data set, label, seed."""
    cells, skipped = [], []
    for r, model, seed, got in monitored_runs(runs, models):
        if isinstance(got, Skipped):
            skipped.append(got)
        else:
            cells.append(CellDynamics(r.dataset, r.model, seed, model, got))
    return cells, skipped


def _seed_dirs(label_dir: Path) -> list[tuple[int, Path]]:
    out = []
    for p in label_dir.iterdir():
        if p.is_dir() and p.name.startswith("seed") and p.name[4:].isdigit():
            out.append((int(p.name[4:]), p))
    return sorted(out)


def store_dynamics(store: str | Path, models: Sequence[str] = CAUSAL_MODELS) -> tuple[list[CellDynamics],
                                                                                      list[Skipped]]:
    """Every cell of ``store`` whose model is one of ``models``: its dynamics, or why it has none."""
    store = Path(store)
    if not store.is_dir():
        raise ResdomError(f"{store}: no such results store")
    cells, skipped = [], []
    for ds_dir in sorted(p for p in store.iterdir() if p.is_dir()):
        for label_dir in sorted(p for p in ds_dir.iterdir() if p.is_dir()):
            for seed, cell in _seed_dirs(label_dir):
                model = cell_model(cell)
                if model is None or model not in models:
                    continue
                name = f"{ds_dir.name}/{label_dir.name}/seed{seed}"
                curve = cell / CURVE_FILE
                got = curve_dynamics(curve) if curve.is_file() else f"no {CURVE_FILE}"
                if isinstance(got, str):
                    skipped.append(Skipped(name, got))
                else:
                    cells.append(CellDynamics(ds_dir.name, label_dir.name, seed, model, got))
    return cells, skipped


# --- statistics -----------------------------------------------------------------------------------------------------

def cluster_bootstrap_means(values: np.ndarray, groups: Sequence[str], n_boot: int = 2000,
                            seed: int = 0) -> np.ndarray:
    """(n_boot, m) bootstrap replicates of the column means of ``values`` (C, m) over C cells: two-stage where
    ``groups`` (C,) has several distinct values (groups with replacement, then within each drawn group its cells
    with replacement; the mean over every drawn cell), else the cells with replacement."""
    vals = np.asarray(values, dtype=np.float64)
    vals = vals.reshape(len(vals), -1)
    if len(vals) == 0 or len(groups) != len(vals) or n_boot < 1:
        raise ValueError(f"{len(vals)} cells, {len(groups)} group names, n_boot {n_boot}: need cells, one group "
                         "name each, n_boot >= 1")
    names = list(dict.fromkeys(groups))
    members = [np.flatnonzero(np.asarray(groups) == g) for g in names]
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, vals.shape[1]))
    for r in range(n_boot):
        chosen = rng.integers(0, len(members), size=len(members)) if len(members) > 1 else [0]
        idx = np.concatenate([members[g][rng.integers(0, members[g].size, size=members[g].size)] for g in chosen])
        out[r] = vals[idx].mean(axis=0)
    return out


@dataclass(frozen=True)
class Interval:
    """A mean and its 95% bootstrap interval (None where there is one cell)."""

    mean: float
    lo: float | None
    hi: float | None

    def text(self, digits: int, signed: bool = True) -> str:
        f = f"{{:{'+' * signed}.{digits}f}}"
        return f.format(self.mean) + ("" if self.lo is None else f" [{f.format(self.lo)}, {f.format(self.hi)}]")


@dataclass
class DynamicsRow:
    """One group of cells: ``scope`` names it; p-values unadjusted and Holm-adjusted (None: no verdict)."""

    scope: str
    cells: list[CellDynamics]
    ndcg_plateau: float
    hrli_plateau: float
    lag: Interval
    lag_positive: int
    lag_share_ci: tuple[float, float]
    change: Interval
    gain_max: Interval
    p_rise: float | None = None
    p_flat: float | None = None
    p_rise_holm: float | None = None
    p_flat_holm: float | None = None
    p_rise_t: float | None = None  # the t-tests' (``units_t``)
    p_flat_t: float | None = None
    p_rise_t_holm: float | None = None
    p_flat_t_holm: float | None = None
    verdict: str = ""

    @property
    def n_cells(self) -> int:
        return len(self.cells)

    @property
    def datasets(self) -> list[str]:
        return list(dict.fromkeys(c.dataset for c in self.cells))


@dataclass
class DynamicsTable:
    rows: list[DynamicsRow]
    cells: list[CellDynamics]
    skipped: list[Skipped]
    margin: float
    n_boot: int
    alpha: float
    models: tuple[str, ...] = field(default=CAUSAL_MODELS)


def units_t(values: Sequence[float] | np.ndarray, groups: Sequence[str], margin: float) -> tuple[float, float]:
    """(p_rise, p_flat): one-sided t-tests of the mean of ``values`` against ``margin`` (``P(T >= t)`` and
    ``P(T <= t)``), over the values themselves, or where ``groups`` holds several names over each group's mean (the
    data sets, as the bootstrap's first stage draws them); df: units - 1. Units that do not vary at all: 0 or 1 by
    the side their mean lies on (0.5 each at the margin)."""
    vals = np.asarray(values, dtype=np.float64)
    names = list(dict.fromkeys(groups))
    units = vals if len(names) < 2 else np.array([vals[np.asarray(groups) == g].mean() for g in names])
    test = paired_seed_test(units)  # the one-sample t-test of the units' mean
    if test is None:
        raise ValueError("a t-test needs two units or more")
    return test.p_above(margin), test.p_below(margin)


def _interval(mean: float, reps: np.ndarray, n: int) -> Interval:
    if n < 2:
        return Interval(mean, None, None)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return Interval(mean, float(lo), float(hi))


def summarise(scope: str, cells: list[CellDynamics], margin: float = GAIN_MARGIN, n_boot: int = 2000,
              seed: int = 0) -> DynamicsRow:
    """The row of one group of cells (module docstring); the p-values are unadjusted, the verdict empty (set by
    ``dynamics_table`` after Holm's correction)."""
    vals = np.array([[c.dynamics.lag, c.dynamics.change_after, c.dynamics.gain_after] for c in cells], dtype=float)
    reps = cluster_bootstrap_means(vals, [c.dataset for c in cells], n_boot, seed)
    means = vals.mean(axis=0)
    n = len(cells)
    k = int(np.sum(vals[:, 0] > 0))
    row = DynamicsRow(scope, cells, float(np.mean([c.dynamics.ndcg_plateau for c in cells])),
                      float(np.mean([c.dynamics.hrli_plateau for c in cells])),
                      _interval(float(means[0]), reps[:, 0], n), k, wilson(k, n),
                      _interval(float(means[1]), reps[:, 1], n), _interval(float(means[2]), reps[:, 2], n))
    if n >= MIN_CELLS:
        row.p_rise = (1 + int(np.sum(reps[:, 1] <= margin))) / (n_boot + 1)
        row.p_flat = (1 + int(np.sum(reps[:, 1] >= margin))) / (n_boot + 1)
        row.p_rise_t, row.p_flat_t = units_t(vals[:, 1], [c.dataset for c in cells], margin)
    return row


def rise_verdict(row: DynamicsRow, margin: float, alpha: float = 0.05) -> str:
    """"keeps rising (> m)" / "does not keep rising (< m)" / "undecided" from the Holm-adjusted p-values of both
    tests (the bootstrap's and the t-test's: the larger decides); "too few cells" below ``MIN_CELLS``."""
    if row.p_rise_holm is None or row.p_flat_holm is None or row.p_rise_t_holm is None or row.p_flat_t_holm is None:
        return f"too few cells ({row.n_cells} < {MIN_CELLS})"
    if max(row.p_rise_holm, row.p_rise_t_holm) < alpha:
        return f"keeps rising (> {margin:g})"
    if max(row.p_flat_holm, row.p_flat_t_holm) < alpha:
        return f"does not keep rising (< {margin:g})"
    return "undecided"


def _groups(cells: list[CellDynamics]) -> list[tuple[str, list[CellDynamics]]]:
    """(scope, cells): each (data set, label); each data set with several labels; the base models (label = model)
    where they differ from all; all."""
    out: list[tuple[str, list[CellDynamics]]] = []
    datasets = list(dict.fromkeys(c.dataset for c in cells))
    for ds in datasets:
        mine = [c for c in cells if c.dataset == ds]
        labels = list(dict.fromkeys(c.label for c in mine))
        out += [(f"{ds} / {lb}", [c for c in mine if c.label == lb]) for lb in labels]
        if len(labels) > 1:
            out.append((f"{ds} / all models", mine))
    base = [c for c in cells if c.label == c.model]
    if base and len(base) < len(cells):
        out.append(("all data sets / base models", base))
    out.append(("all data sets / all models", cells))
    return out


def dynamics_table(cells: list[CellDynamics], skipped: Sequence[Skipped] = (), margin: float = GAIN_MARGIN,
                   n_boot: int = 2000, seed: int = 0, alpha: float = 0.05,
                   models: Sequence[str] = CAUSAL_MODELS) -> DynamicsTable:
    """The table over ``cells`` (rows from ``_groups``; row i bootstraps with seed ``seed + i``), Holm across the
    rows with a verdict (p_rise and p_flat each a family); ``n_boot`` is raised where needed so that Holm's
    smallest p can fall below alpha / 10."""
    if not cells:
        raise ResdomError("no stored cell of " + ", ".join(models) + " has a monitored curve")
    groups = _groups(cells)
    m = sum(len(g) >= MIN_CELLS for _, g in groups)
    n_boot = max(n_boot, math.ceil(10 * m / alpha))  # Holm's smallest p, m / (n_boot + 1), can fall below alpha / 10
    rows = [summarise(scope, group, margin, n_boot, seed + i) for i, (scope, group) in enumerate(groups)]
    tested = [r for r in rows if r.p_rise is not None]
    for name in ("p_rise", "p_flat", "p_rise_t", "p_flat_t"):  # four families, each adjusted on its own
        for r, p in zip(tested, holm([getattr(r, name) for r in tested]) if tested else []):
            setattr(r, f"{name}_holm", float(p))
    for r in rows:
        r.verdict = rise_verdict(r, margin, alpha)
    return DynamicsTable(rows, cells, list(skipped), margin, n_boot, alpha, tuple(models))


def reliance_dynamics(store: str | Path, models: Sequence[str] = CAUSAL_MODELS, margin: float = GAIN_MARGIN,
                      n_boot: int = 2000, seed: int = 0, alpha: float = 0.05,
                      keep: Callable[[CellDynamics], bool] | None = None) -> DynamicsTable:
    """Question 4 on a results store: ``store_dynamics`` then ``dynamics_table`` (``keep``: a further filter on
    the cells)."""
    cells, skipped = store_dynamics(store, models)
    if keep is not None:
        cells = [c for c in cells if keep(c)]
    return dynamics_table(cells, skipped, margin, n_boot, seed, alpha, models)


# --- Markdown and figure --------------------------------------------------------------------------------------------

COLUMNS = ("cells", "scope", "NDCG@10 plateau", "HRLI@1 plateau", "lag, epochs [95% CI]", "lag > 0 [95% CI]",
           "HRLI@1 change after [95% CI]", "largest rise after [95% CI]", "verdict")


def _cells(r: DynamicsRow) -> list[str]:
    lo, hi = r.lag_share_ci
    one = " (1 cell)" if r.n_cells == 1 else ""
    return [str(r.n_cells), r.scope + one, f"{r.ndcg_plateau:.1f}", f"{r.hrli_plateau:.1f}", r.lag.text(1),
            f"{r.lag_positive}/{r.n_cells} [{lo:.2f}, {hi:.2f}]", r.change.text(3), r.gain_max.text(3), r.verdict]


def dynamics_markdown(table: DynamicsTable) -> str:
    """The table as Markdown, a note on the method and the cells left out."""
    lines = markdown_lines(COLUMNS, [_cells(r) for r in table.rows])
    m = sum(r.p_rise is not None for r in table.rows)
    note = (f"Cells: stored cells of {', '.join(table.models)} (and their named variants) with HRLI@1 monitored "
            f"on a validation subsample from the first monitor interval on. Plateau: the first monitored epoch by "
            f"which validation NDCG@10 (HRLI@1) has made 95% of its rise, mean over cells. Lag: HRLI@1 plateau - "
            f"NDCG@10 plateau. Change after: HRLI@1 at the last monitored epoch - HRLI@1 at the NDCG@10 plateau; "
            f"largest rise after: the largest HRLI@1 from the NDCG@10 plateau on - HRLI@1 there (>= 0 by "
            f"construction, not tested). Means over cells; 95% CI from a bootstrap over cells ({table.n_boot} "
            f"replicates), two-stage by data set where a row spans several; lag > 0: share of cells with a Wilson "
            f"interval. The intervals are per row, not adjusted. Verdict on the mean change after against "
            f"±{table.margin:g} HRLI@1 by one-sided bootstrap tests and one-sided t-tests (on the cells, or on the "
            f"data sets' means where a row spans several; df: units - 1), each Holm-adjusted across the {m} rows "
            f"with {MIN_CELLS} cells or more; a verdict needs both, alpha {table.alpha:g}.")
    lines += ["", note]
    if table.skipped:
        lines += ["", "Left out: " + "; ".join(f"{s.cell} ({s.reason})" for s in table.skipped) + "."]
    return "\n".join(lines) + "\n"


@plain_text
def dynamics_figure(table: DynamicsTable, width: float = 3.4, dpi: int = 100) -> Figure:
    """Scatter of the NDCG@10 plateau epoch (x) against the HRLI@1 plateau epoch (y), one point per cell, one
    colour and marker per data set (``series_look``; n cells in the legend), the line y = x. Points sharing an epoch
    pair are spread by up to ±1.2 epochs (the epochs are multiples of the monitor interval). Not saved here."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, width * 1.3), dpi=dpi, layout="constrained")
    ax = fig.subplots()
    datasets = list(dict.fromkeys(c.dataset for c in table.cells))
    seen: dict[tuple[int, int], int] = {}
    top = 0
    for i, ds in enumerate(datasets):
        xs, ys = [], []
        for c in (c for c in table.cells if c.dataset == ds):
            key = (c.dynamics.ndcg_plateau, c.dynamics.hrli_plateau)
            j = seen.get(key, 0)
            seen[key] = j + 1
            angle = 2.4 * j
            r = 0.0 if j == 0 else min(1.2, 0.45 * np.sqrt(j))
            xs.append(key[0] + r * np.cos(angle))
            ys.append(key[1] + r * np.sin(angle))
            top = max(top, *key)
        ax.scatter(xs, ys, s=12, **series_look(i), alpha=0.8, lw=0, label=f"{drawn_name(ds)} (n={len(xs)})")
    lim = top + 5
    ax.plot([0, lim], [0, lim], color="0.4", lw=0.8, ls="--", label="y = x")
    ax.set_xlim(0, lim)
    ax.set_ylim(0, lim)
    ax.set_xlabel("validation NDCG@10 plateau (epoch)", fontsize=7)
    ax.set_ylabel("HRLI@1 plateau (epoch)", fontsize=7)
    ax.tick_params(labelsize=7)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=5.5,
               title=f"{len(table.cells)} cells", title_fontsize=6)
    ax.set_title("Plateau epochs (95% of the rise): reliance vs accuracy", fontsize=7)
    return fig


# --- the document block ---------------------------------------------------------------------------------------------

CAPTION = (
    "Question 4 of docs/results.md: does last-item reliance keep rising after accuracy stops? From every stored "
    "training curve (`curve.jsonl`) of a causal self-attention model, generated by `study.reliance_dynamics`. "
    "Both series are read at the monitored epochs only (every `train.monitor_every` epochs, 5 in the store: "
    "validation NDCG@10 over all validation users, and HRLI@1 of the training monitor, unfiltered, on a fixed "
    "subsample of up to 1,024 validation users), through the end of training (early stopping's patience included). "
    "A series' plateau epoch is the first monitored epoch by which it has made 95% of its rise from its first "
    "monitored value to its largest (a series that never rises above its first value plateaus there). Per cell: "
    "the lag, HRLI@1 plateau - NDCG@10 plateau (epochs; > 0: reliance settles after accuracy), and the change "
    "after, HRLI@1 at the last monitored epoch - HRLI@1 at the NDCG@10 plateau. Rows: each data set and label (\"(1 "
    "cell)\": one seed), each data set, the base models, all cells.")


def _seeds_word(n: int) -> str:
    return "1 cell" if n == 1 else f"{n} cells"


def answer_sentence(table: DynamicsTable) -> str:
    """The answer over all cells (and the base models alone where that row exists), from the table's own rows."""
    parts = []
    for r in table.rows:
        if not r.scope.startswith("all data sets"):
            continue
        who = "all models" if r.scope.endswith("all models") else "the base models alone"
        parts.append(f"over {who} ({_seeds_word(r.n_cells)}, {len(r.datasets)} data set"
                     f"{'s' * (len(r.datasets) != 1)}) the lag (HRLI@1 plateau - NDCG@10 plateau) is {r.lag.text(1)} "
                     f"epochs on average, positive in {r.lag_positive} of {r.n_cells} cells, and HRLI@1 changes by "
                     f"{r.change.text(3)} from the NDCG@10 plateau to the end of training: {r.verdict}")
    return "Answer, generated from the table: " + "; ".join(parts) + "." if parts else ""


# Question 4's long run: (data set, label) of a training variant with a longer patience, on the data set where the
# study asks for it; set against its model at the store's patience (model and patience: experiments.TRAINING_VARIANTS)
LONG_PATIENCE = ("yelp-ts", "sasrec-p30")
LONG_PATIENCE_QUEUE = "scripts/grid_session3.txt"


def long_patience_sentence(table: DynamicsTable, long: tuple[str, str] = LONG_PATIENCE) -> str:
    """What the cells trained with a longer patience say (their row beside the base label's), or that they are not
    trained yet."""
    ds, label = long
    base, values = TRAINING_VARIANTS[label]
    what = f"patience {values['patience']}"
    rows = {r.scope: r for r in table.rows}
    mine, theirs = rows.get(f"{ds} / {label}"), rows.get(f"{ds} / {base}")
    head = f"Training on past the plateau ({ds} with {what}, `{label}`)"
    if mine is None:
        return f"{head}: not trained yet (queued in {LONG_PATIENCE_QUEUE})."
    text = (f"{head}, {_seeds_word(mine.n_cells)}: lag {mine.lag.text(1)} epochs, HRLI@1 change after the NDCG@10 "
            f"plateau {mine.change.text(3)}, largest rise after {mine.gain_max.text(3)}")
    if theirs is not None:
        text += (f"; `{base}` at the store's patience ({_seeds_word(theirs.n_cells)}): lag {theirs.lag.text(1)}, "
                 f"change after {theirs.change.text(3)}, largest rise after {theirs.gain_max.text(3)}")
    return text + "."


def reliance_dynamics_block(runs: Sequence[RunRecord], models: Sequence[str] = CAUSAL_MODELS) -> str:
    """The ``reliance_dynamics`` block of docs/results.md: ``CAPTION``, the table of ``dynamics_table`` over the
    monitored cells of ``runs``, its note and the cells left out, and ``answer_sentence``; one sentence where no
    cell has a monitored curve."""
    cells, skipped = runs_dynamics(runs, models)
    if not cells:
        return (f"No run of {', '.join(models)} has a monitored training curve (HRLI@1 at three or more epochs from "
                "the first monitor interval on): nothing to compare yet.\n")
    table = dynamics_table(cells, skipped, models=models)
    return (CAPTION + "\n\n" + dynamics_markdown(table) + "\n" + answer_sentence(table) + "\n\n"
            + long_patience_sentence(table) + "\n")


@styled
def fig_reliance_dynamics(runs: list[RunRecord]) -> ReportFigure | None:
    """Question 4 (docs/results.md, ``study.reliance_dynamics``): the plateau epoch of validation NDCG@10 against
    that of HRLI@1, one point per monitored cell of a causal model; None where no run has a monitored curve."""
    cells, skipped = runs_dynamics(runs)
    if not cells:
        return None
    table = DynamicsTable([], cells, skipped, GAIN_MARGIN, 0, 0.05)  # the figure draws the cells only: no rows
    return ReportFigure("reliance_dynamics", "Reliance against accuracy: plateau epochs",
                        "One point per monitored cell (sasrec, duorec, bsarec and their variants): the first monitored "
                        "epoch by which validation NDCG@10 has made 95% of its rise (x) against the same for HRLI@1 "
                        "(y); above the dashed line y = x reliance settles after accuracy. Points sharing an epoch "
                        "pair are spread by up to 1.2 epochs; n: cells per data set.", dynamics_figure(table))
