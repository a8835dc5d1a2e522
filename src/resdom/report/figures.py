"""Report figures (matplotlib, no pyplot state; PNG and PDF). One fixed colour per model across every figure.

Every figure aggregates runs by (data set, model): the mean over seeds, with the standard deviation as error bars
or a shaded band where there are several seeds. Colours mark models (``MODEL_COLORS``), line styles mark data
sets, and in per-position plots line styles mark stages.

Readability: every figure says (in a note under it and in its caption) how many test users its numbers rest on;
lines that may coincide differ in marker and width, drawn widest first, so one never hides another; bars too
short to read carry their value.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from resdom.errors import ResdomError
from resdom.experiments import REMEDY_LABELS, remedy_variant
from resdom.io import atomic_write_bytes
from resdom.names import STAGES, band_names
from resdom.report.collect import RunRecord, model_order
from resdom.report.tables import remedy_runs
from resdom.report.values import run_values
from resdom.stored import number_at

# Okabe-Ito palette (colour-blind safe); fixed per model so every figure agrees.
MODEL_COLORS: dict[str, str] = {"sasrec": "#0072B2", "duorec": "#E69F00", "bsarec": "#009E73",
                                "bert4rec": "#D55E00", "gru4rec": "#CC79A7"}
_EXTRA_COLORS = ("#56B4E9", "#000000", "#F0E442", "#999999")
MODEL_LABELS: dict[str, str] = {"sasrec": "SASRec", "duorec": "DuoRec", "bsarec": "BSARec", "bert4rec": "BERT4Rec",
                                "gru4rec": "GRU4Rec"}
MODEL_MARKERS: dict[str, str] = {"sasrec": "o", "duorec": "s", "bsarec": "^", "bert4rec": "v", "gru4rec": "P"}
DATASET_STYLES = ("-", "--", ":", "-.")
STAGE_STYLES = {"Attn": "-", "+Res": "--", "+LN": ":"}
# +Res and +LN often coincide (the LayerNorm barely changes the ratio): +Res is drawn wide and pale under a thin,
# marked +LN, so both stay visible
STAGE_LOOKS: dict[str, dict[str, Any]] = {"Attn": {"linewidth": 2.2, "zorder": 3},
                                          "+Res": {"linewidth": 3.4, "alpha": 0.45, "zorder": 2},
                                          "+LN": {"linewidth": 1.2, "marker": "x", "markersize": 3.5, "markevery": 3,
                                                  "zorder": 4}}
SMALL_BAR = 0.08  # bars lower than this share of the axis height carry their value


def model_color(model: str) -> str:
    """The model's fixed colour; unknown models get a stable colour from their name."""
    if model in MODEL_COLORS:
        return MODEL_COLORS[model]
    return _EXTRA_COLORS[zlib.crc32(model.encode()) % len(_EXTRA_COLORS)]


def model_label(model: str) -> str:
    return MODEL_LABELS.get(model, model)


def model_marker(model: str) -> str:
    return MODEL_MARKERS.get(model, "D")


@dataclass
class ReportFigure:
    """A rendered figure: ``key`` (file stem), ``title``, one-sentence ``caption``, and the matplotlib figure."""

    key: str
    title: str
    caption: str
    figure: Figure
    _png: bytes | None = field(default=None, repr=False)

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``<key>.png`` (150 dpi) and ``<key>.pdf`` into ``out_dir``; returns ``{"png": p, "pdf": p}``."""
        out_dir = Path(out_dir)
        paths = {"png": out_dir / f"{self.key}.png", "pdf": out_dir / f"{self.key}.pdf"}
        atomic_write_bytes(paths["png"], self.png_bytes())
        atomic_write_bytes(paths["pdf"], self._render("pdf"))
        return paths

    @property
    def display_width(self) -> int:
        """Width in CSS pixels to show the PNG at (about 100 px per inch of figure), so fonts look alike."""
        return int(round(self.figure.get_figwidth() * 100))

    def png_bytes(self) -> bytes:
        """The PNG (150 dpi), rendered once and reused by the HTML page."""
        if self._png is None:
            self._png = self._render("png", dpi=150)
        return self._png

    def _render(self, fmt: str, **kw: Any) -> bytes:
        buf = io.BytesIO()
        self.figure.savefig(buf, format=fmt, **kw)
        return buf.getvalue()


# ---------------------------------------------------------------- grouping helpers


def group_runs(runs: list[RunRecord]) -> dict[tuple[str, str], list[RunRecord]]:
    """Runs keyed by (data set, model), in data-set then paper model order."""
    out: dict[tuple[str, str], list[RunRecord]] = {}
    for run in sorted(runs, key=lambda r: (r.dataset, model_order(r.model))):
        out.setdefault((run.dataset, run.model), []).append(run)
    return out


def _datasets(groups: dict[tuple[str, str], list[RunRecord]]) -> list[str]:
    return sorted({d for d, _ in groups})


def _models(groups: dict[tuple[str, str], list[RunRecord]]) -> list[str]:
    return sorted({m for _, m in groups}, key=lambda m: (model_order(m), m))


def _stats(values: list[float | None]) -> tuple[float, float] | None:
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return float(np.mean(xs)), float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0


class NotebookFigure(Figure):
    """A matplotlib Figure that a notebook shows (as a PNG) when it is a cell's value, without pyplot."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=100)
        return buf.getvalue()


MAX_COLUMNS = 4  # panels side by side; more data sets wrap onto further rows of panels


def _new_figure(n_panels: int, width_per: float = 4.2, height: float = 3.4, nrows: int = 1) -> tuple[Figure, Any]:
    """A figure of ``n_panels`` panels (one per data set, say), each a column of ``nrows`` axes -> (figure,
    ``axes``), ``axes[row, i]`` the axes of row ``row`` of panel ``i``. At most ``MAX_COLUMNS`` panels share a
    line; the next ones go below, each line of panels ``nrows`` axes high (the grid's unused cells are removed)."""
    n_panels = max(1, n_panels)
    ncols = min(n_panels, MAX_COLUMNS)
    lines = -(-n_panels // ncols)
    fig = NotebookFigure(figsize=(max(6.0, width_per * ncols), height * nrows * lines), layout="constrained")
    grid = fig.subplots(nrows * lines, ncols, squeeze=False)
    axes = np.empty((nrows, n_panels), dtype=object)
    for row in range(nrows):
        for i in range(n_panels):
            axes[row, i] = grid[(i // ncols) * nrows + row][i % ncols]
    for i in range(n_panels, lines * ncols):
        for row in range(nrows):
            fig.delaxes(grid[(i // ncols) * nrows + row][i % ncols])
    return fig, axes


def _model_legend(fig: Figure, models: list[str], extra: list[Any] | None = None, markers: bool = False) -> None:
    """Colour patches per model (``markers``: a line with the model's marker, for line plots), then ``extra``."""
    if markers:
        handles: list[Any] = [Line2D([], [], color=model_color(m), marker=model_marker(m), label=model_label(m))
                              for m in models]
    else:
        handles = [Patch(color=model_color(m), label=model_label(m)) for m in models]
    handles += extra or []
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 6), frameon=False)


def _users(groups: dict[tuple[str, str], list[RunRecord]], count: Callable[[RunRecord], Any]) -> dict[str, str]:
    """Test users behind each data set's numbers: ``{dataset: "398"}`` (a range where runs differ); data sets whose
    runs do not say are left out."""
    out: dict[str, set[int]] = {}
    for (dataset, _), rs in groups.items():
        for r in rs:
            n = count(r)
            if isinstance(n, (int, float)) and not isinstance(n, bool):
                out.setdefault(dataset, set()).add(int(n))
    return {d: f"{min(ns):,}" if len(ns) == 1 else f"{min(ns):,}–{max(ns):,}" for d, ns in sorted(out.items())}


def users_note(users: dict[str, str], split: str = "test") -> str:
    """``"398 test users"``; for several data sets ``"200 test users in each data set"`` or
    ``"200 (toyA), 150 (toyB) test users"``; "" when unknown. ``split``: whose users (test, validation)."""
    counts = set(users.values())
    if not counts:
        return ""
    if len(counts) == 1:
        return f"{counts.pop()} {split} users" + (" in each data set" if len(users) > 1 else "")
    return ", ".join(f"{n} ({d})" for d, n in users.items()) + f" {split} users"


def _note(fig: Figure, users: dict[str, str], what: str = "Shares of", split: str = "test") -> str:
    """Write the user count under the figure; returns the caption's sentence about it ("" when unknown)."""
    note = users_note(users, split)
    if not note:
        return ""
    fig.supxlabel(f"n = {note}", fontsize=8, color="#444444")
    return f" {what} {note}."


def _line_looks(i: int, n: int) -> dict[str, Any]:
    """Width and marker size of the i-th of n lines drawn in a panel: each narrower than the last and drawn above
    it, so a line that coincides with an earlier one leaves that one's edges visible."""
    if n <= 1:
        return {"linewidth": 1.8, "markersize": 4.5, "zorder": 2}
    return {"linewidth": max(0.8, 3.8 - 1.8 * i), "markersize": max(2.8, 8.0 - 2.5 * i), "zorder": 2 + i}


def _label_small_bars(ax: Any) -> None:
    """Write the value over every bar lower than ``SMALL_BAR`` of the axis height (a zero bar reads 0.000, a
    missing one stays blank)."""
    low, high = ax.get_ylim()
    limit = SMALL_BAR * (high - low)
    bars = [c for c in ax.containers if hasattr(c, "patches")]
    upright = len(bars) > 2  # narrow bars side by side: written upwards, so neighbours' values do not overlap
    for container in bars:
        labels = []
        for rect in container.patches:
            h = rect.get_height()
            labels.append(f"{h:.3f}" if np.isfinite(h) and abs(h) < limit else "")
        if any(labels):
            ax.bar_label(container, labels=labels, padding=2, fontsize=6 if upright else 7,
                         rotation=90 if upright else 0)


def _bars(ax: Any, groups: dict[tuple[str, str], list[RunRecord]], dataset: str, models: list[str],
          categories: list[str], value: Callable[[RunRecord, str], float | None]) -> None:
    """Grouped bars: one group per category, one bar per model (mean over seeds, std as error bar)."""
    width = 0.8 / max(1, len(models))
    x = np.arange(len(categories))
    for i, model in enumerate(models):
        runs = groups.get((dataset, model), [])
        if not runs:
            continue
        stats = [_stats([value(r, c) for r in runs]) for c in categories]
        means = [s[0] if s else np.nan for s in stats]
        errs = [s[1] if s else 0.0 for s in stats]
        ax.bar(x - 0.4 + width * (i + 0.5), means, width, yerr=errs if len(runs) > 1 else None,
               color=model_color(model), capsize=3, edgecolor="white", linewidth=0.5)
    ax.set_xticks(x, categories)
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.set_title(dataset)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


# ---------------------------------------------------------------- figures


def fig_mixing_stages(runs: list[RunRecord]) -> ReportFigure | None:
    """Mixing ratio (pooled over layers) per stage: bars = all positions, black diamonds = last position."""
    groups = {k: v for k, v in group_runs(runs).items() if any(r.diag("mixing") for r in v)}
    if not groups:
        return None
    datasets, models = _datasets(groups), _models(groups)
    stages = [s for s in STAGES if any(s in r.diag("mixing").get("stages", STAGES[:2]) for v in groups.values()
                                       for r in v)]
    fig, axes = _new_figure(len(datasets))
    for ax, dataset in zip(axes[0], datasets):
        _bars(ax, groups, dataset, models, stages, lambda r, s: number_at(r.diag("mixing"), "pooled", "all", s))
        width = 0.8 / max(1, len(models))
        for i, model in enumerate(models):
            rs = groups.get((dataset, model), [])
            last = [_stats([number_at(r.diag("mixing"), "pooled", "last", s) for r in rs]) for s in stages]
            xs = np.arange(len(stages)) - 0.4 + width * (i + 0.5)
            ax.plot(xs, [s[0] if s else np.nan for s in last], "D", color="black", markersize=4, linestyle="none")
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("stage of the attention block")
        ax.set_ylabel("mixing ratio (context share)")
        _label_small_bars(ax)
    _model_legend(fig, models, [Line2D([], [], marker="D", color="black", linestyle="none", markersize=4,
                                       label="last position")])
    users = _note(fig, _users(groups, lambda r: r.diag("mixing").get("n_users")), "Pooled over the positions of")
    return ReportFigure("mixing_by_stage", "Mixing ratio by stage",
                        "Bars give the share of each stage's output that comes from other positions (pooled over "
                        "layers, all positions; diamonds: last position): a drop from Attn to +Res means the "
                        "residual swamps the context that attention gathered." + users, fig)


def _alpha_rows(run: RunRecord) -> list[dict[str, Any]]:
    rows = run.diag("alpha").get("rows", [])
    return sorted((r for r in rows if isinstance(r, dict) and "alpha" in r), key=lambda r: float(r["alpha"]))


def _curve_stats(runs: list[RunRecord], rows_of: Callable[[RunRecord], list[dict[str, Any]]],
                 value: Callable[[dict[str, Any]], float | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Mean and std over runs of ``value(row)`` at each alpha that every run has."""
    per_run = []
    for r in runs:
        d = {round(float(row["alpha"]), 6): value(row) for row in rows_of(r)}
        per_run.append({a: v for a, v in d.items() if v is not None})
    per_run = [d for d in per_run if d]
    if not per_run:
        return None
    alphas = sorted(set.intersection(*(set(d) for d in per_run)))
    if not alphas:
        return None
    vals = np.array([[d[a] for a in alphas] for d in per_run], dtype=float)
    std = vals.std(axis=0, ddof=1) if len(vals) > 1 else np.zeros(len(alphas))
    return np.array(alphas), vals.mean(axis=0), std


def _line_panel(ax: Any, groups: dict[tuple[str, str], list[RunRecord]], datasets: list[str],
                rows_of: Callable[[RunRecord], list[dict[str, Any]]], value: Callable[[dict[str, Any]], float | None],
                ylabel: str) -> None:
    drawn, n = 0, len(groups)
    for (dataset, model), rs in groups.items():
        stats = _curve_stats(rs, rows_of, value)
        if stats is None:
            continue
        a, mean, std = stats
        style = DATASET_STYLES[datasets.index(dataset) % len(DATASET_STYLES)]
        ax.plot(a, mean, style, color=model_color(model), marker=model_marker(model), **_line_looks(drawn, n))
        drawn += 1
        if len(rs) > 1:
            ax.fill_between(a, mean - std, mean + std, color=model_color(model), alpha=0.15, linewidth=0)
    ax.set_xlabel("residual scale α")
    ax.set_ylabel(ylabel)
    ax.set_xlim(-0.02, 1.02)
    ax.grid(alpha=0.3)


def _dataset_handles(datasets: list[str]) -> list[Line2D]:
    if len(datasets) < 2:
        return []
    return [Line2D([], [], color="grey", linestyle=DATASET_STYLES[i % len(DATASET_STYLES)], label=d)
            for i, d in enumerate(datasets)]


Quantity = tuple[str, Callable[[dict[str, Any]], float | None]]  # (ylabel / title, value of a sweep row)


def _sweep_figure(groups: dict[tuple[str, str], list[RunRecord]], rows_of: Callable[[RunRecord], list[dict[str, Any]]],
                  quantities: list[Quantity], grid: tuple[int, int], width_per: float, height: float,
                  decorate: Callable[[Any], None] = lambda ax: None, extra: list[Any] | None = None) -> Figure:
    """Curves against alpha, one panel per quantity (``grid``: its panels' columns x rows), every data set in each
    panel with a line style of its own; or, where there are more data sets than line styles, a column of panels
    per data set (a row per quantity), so that no two data sets share a style. ``decorate``: drawn on each panel
    first; ``extra``: legend entries after the models'."""
    datasets, models = _datasets(groups), _models(groups)
    per_dataset = len(datasets) > len(DATASET_STYLES)
    if per_dataset:
        fig, axes = _new_figure(len(datasets), width_per=width_per, height=height, nrows=len(quantities))
        cells = [(axes[row, i], [d], q, f"{d}: {q[0]}") for i, d in enumerate(datasets)
                 for row, q in enumerate(quantities)]
    else:
        fig, axes = _new_figure(grid[0], width_per=width_per, height=height, nrows=grid[1])
        cells = [(ax, datasets, q, q[0]) for ax, q in zip(axes.flat, quantities)]
    for ax, shown, (label, value), title in cells:
        decorate(ax)
        _line_panel(ax, {k: v for k, v in groups.items() if k[0] in shown}, shown, rows_of, value, label)
        ax.set_title(title, fontsize=10)
    handles = [] if per_dataset else _dataset_handles(datasets)
    _model_legend(fig, models, handles + (extra or []), markers=True)
    return fig


def fig_alpha_sweep(runs: list[RunRecord]) -> ReportFigure | None:
    """Four panels against alpha: mixing ratio at +Res (all positions), HRLI@1, HR@10, NDCG@10."""
    groups = {k: v for k, v in group_runs(runs).items() if any(_alpha_rows(r) for r in v)}
    if not groups:
        return None
    quantities: list[Quantity] = [
        ("mixing ratio at +Res", lambda row: number_at(row, "mixing_all", "+Res")),
        ("HRLI@1", lambda row: number_at(row, "HRLI@1")),
        ("HR@10", lambda row: number_at(row, "HR@10")),
        ("NDCG@10", lambda row: number_at(row, "NDCG@10")),
    ]
    fig = _sweep_figure(groups, _alpha_rows, quantities, (2, 2), width_per=4.4, height=3.1)
    users = _note(fig, _users(groups, lambda r: r.diag("alpha").get("n_users")), "Each point rests on")
    return ReportFigure("alpha_sweep", "Residual scaling sweep",
                        "Each panel plots one quantity against the residual scale α applied at inference (α = 1 is "
                        "the trained model): reading right to left, lowering α should raise mixing, lower HRLI@1 "
                        "and cost some accuracy." + users, fig)


def fig_shuffle(runs: list[RunRecord]) -> ReportFigure | None:
    """Bars of HR@10 and NDCG@10 for original / keep_last / full shuffles, per data set."""
    groups = {k: v for k, v in group_runs(runs).items() if any(r.diag("shuffle") for r in v)}
    if not groups:
        return None
    datasets, models = _datasets(groups), _models(groups)
    cats = ["original", "keep_last", "full"]
    metrics = ["HR@10", "NDCG@10"]
    fig, axes = _new_figure(len(datasets), nrows=2, height=3.0)

    def value(metric: str) -> Callable[[RunRecord, str], float | None]:
        def f(r: RunRecord, cat: str) -> float | None:
            sh = r.diag("shuffle")
            if cat == "original":
                return number_at(sh, "original", metric)
            return number_at(sh, "perturbations", cat, "metrics", metric)
        return f

    for row, metric in enumerate(metrics):
        for ax, dataset in zip(axes[row], datasets):
            _bars(ax, groups, dataset, models, cats, value(metric))
            ax.set_ylabel(f"test {metric}")
            if row == 1:
                ax.set_xlabel("input order at inference")
            _label_small_bars(ax)
    _model_legend(fig, models)
    users = _note(fig, _users(groups, lambda r: r.diag("shuffle").get("n_users")), "Each bar rests on")
    return ReportFigure("shuffle", "Position shuffle",
                        "Test accuracy with the original input order, with all items but the last permuted "
                        "(keep_last) and with every item permuted (full): a small keep_last drop next to a large "
                        "full drop means the prediction rests on the last item." + users, fig)


def fig_hrli(runs: list[RunRecord]) -> ReportFigure | None:
    """Bars of HRLI@1, HRL2I@1, HRLI@10, HRL2I@10 per data set."""
    groups = {k: v for k, v in group_runs(runs).items() if any(r.diag("hrli") for r in v)}
    if not groups:
        return None
    datasets, models = _datasets(groups), _models(groups)
    cats = ["HRLI@1", "HRL2I@1", "HRLI@10", "HRL2I@10"]
    fig, axes = _new_figure(len(datasets))
    for ax, dataset in zip(axes[0], datasets):
        _bars(ax, groups, dataset, models, cats, lambda r, c: number_at(r.diag("hrli"), "values", c))
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share of test users")
        ax.set_xlabel("k-th most recent input item in the unfiltered top-K")
        _label_small_bars(ax)
    _model_legend(fig, models)
    users = _note(fig, _users(groups, lambda r: r.diag("hrli").get("n_users")), "Shares of")
    return ReportFigure("hrli", "Last-item hit rates",
                        "Share of test users whose most recent (HRLI) or second most recent (HRL2I) input item is "
                        "in the unfiltered top-K: a high HRLI next to a near-zero HRL2I means the model echoes "
                        "the last item specifically, not recent items in general." + users, fig)


def fig_reliance_by_model(runs: list[RunRecord]) -> ReportFigure | None:
    """The paper's Figure 2: HRLI@1 and HRL2I@1 side by side for each model (groups), one panel per data set
    holding the models that ran on it (a model keeps its colour in every panel)."""
    groups = {k: v for k, v in group_runs(runs).items() if any(r.diag("hrli") for r in v)}
    if not groups:
        return None
    datasets = _datasets(groups)
    ran = {d: _models({k: v for k, v in groups.items() if k[0] == d}) for d in datasets}  # each set's models
    cats = ["HRLI@1", "HRL2I@1"]
    looks = {"HRLI@1": {}, "HRL2I@1": {"alpha": 0.45, "hatch": "///"}}
    fig, axes = _new_figure(len(datasets), width_per=max(4.2, 0.9 * max(map(len, ran.values())) + 1.2))
    for ax, dataset in zip(axes[0], datasets):
        models = ran[dataset]
        x = np.arange(len(models))
        for j, cat in enumerate(cats):
            cells = [groups.get((dataset, m), []) for m in models]
            stats = [_stats([number_at(r.diag("hrli"), "values", cat) for r in c]) for c in cells]
            # an error bar only where there is a spread to show: none (NaN) for a model with one seed
            ax.bar(x - 0.2 + 0.4 * j, [s[0] if s else np.nan for s in stats], 0.4,
                   yerr=[s[1] if s and len(c) > 1 else np.nan for s, c in zip(stats, cells)],
                   color=[model_color(m) for m in models], edgecolor="white", linewidth=0.5, capsize=3,
                   **looks[cat])
        ax.set_xticks(x, [model_label(m) for m in models], rotation=30 if len(models) > 3 else 0)
        ax.set_xlim(-0.6, max(len(models), 3) - 0.4)  # a panel of one or two models keeps bars of usual width
        ax.set_ylim(0, 1.05)
        ax.set_title(dataset)
        ax.set_xlabel("model")
        ax.set_ylabel("share of test users (top-1)")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        _label_small_bars(ax)
    fig.legend(handles=[Patch(facecolor="grey", label="HRLI@1: last input item ranked first"),
                        Patch(facecolor="grey", alpha=0.45, hatch="///", label="HRL2I@1: second-to-last item")],
               loc="outside upper center", ncol=2, frameon=False)  # the models are named on the x axis
    users = _note(fig, _users(groups, lambda r: r.diag("hrli").get("n_users")), "Shares of")
    return ReportFigure("hrli_by_model", "Last-item reliance by model (the paper's Figure 2)",
                        "For each model, the share of test users whose last input item (solid) and second-to-last "
                        "input item (hatched) is ranked first, unfiltered: the causal self-attention models rank "
                        "the last item first far more often than the one before it, the contrast models (BERT4Rec, "
                        "GRU4Rec) should not." + users, fig)


def fig_hrli_by_frequency(runs: list[RunRecord]) -> ReportFigure | None:
    """HRLI@1 against the band of the last input item's training frequency (``hrli.json`` ``by_frequency``), one
    line per model (mean over seeds, error bars where seeds differ), and grey bars for the share of test users in
    each band; one panel per data set."""
    def bands(r: RunRecord) -> dict[str, Any]:
        b = r.diag("hrli").get("by_frequency")
        return b if isinstance(b, dict) else {}

    groups = {k: v for k, v in group_runs(runs).items() if any(bands(r) for r in v)}
    if not groups:
        return None
    datasets, models = _datasets(groups), _models(groups)
    names = band_names()
    x = np.arange(len(names))
    fig, axes = _new_figure(len(datasets))
    for ax, dataset in zip(axes[0], datasets):
        share = ax.twinx()
        shown = False
        for i, m in enumerate(models):
            rs = [r for r in groups.get((dataset, m), []) if bands(r)]
            if not rs:
                continue
            stats = [_stats([number_at(bands(r), b, "values", "HRLI@1") for r in rs]) for b in names]
            if not shown:  # the bands' user shares: the same test users for every model of a data set
                n = np.array([number_at(bands(rs[0]), b, "n_users") or 0 for b in names], dtype=float)
                share.bar(x, n / max(n.sum(), 1.0), 0.6, color="#dddddd", zorder=0)
                shown = True
            ax.errorbar(x + 0.06 * (i - (len(models) - 1) / 2), [st[0] if st else np.nan for st in stats],
                        yerr=[st[1] if st and len(rs) > 1 else np.nan for st in stats], color=model_color(m),
                        marker=model_marker(m), capsize=3, label=model_label(m), zorder=3)
        ax.set_zorder(share.get_zorder() + 1)
        ax.patch.set_visible(False)  # the lines over the share bars
        ax.set_xticks(x, names)
        ax.set_ylim(0, 1.05)
        share.set_ylim(0, 1.05)
        ax.set_title(dataset)
        ax.set_xlabel("training occurrences of the last input item")
        ax.set_ylabel("HRLI@1 (lines)")
        share.set_ylabel("share of test users (grey bars)", color="#777777")
        share.set_xlabel(ax.get_xlabel())  # the twin's x axis is not drawn; labelled for whoever reads the axes
        ax.grid(axis="y", alpha=0.3)
    _model_legend(fig, models, markers=True)
    users = _note(fig, _users(groups, lambda r: r.diag("hrli").get("n_users")), "Shares of")
    return ReportFigure("hrli_by_frequency", "Last-item reliance by the last item's training frequency",
                        "HRLI@1 over the test users whose last input item occurs 0, 1-4, 5-19 or 20+ times in the "
                        "training sequences (lines), and the share of test users in each band (grey bars): a last "
                        "item never seen in training (band 0: its embedding, trained only as a negative, points away "
                        "from the prediction states) is rarely ranked first, so a data set with many such users shows "
                        "a lower overall HRLI@1." + users, fig)


def _monitor_rows(run: RunRecord) -> list[dict[str, Any]]:
    """(epoch, monitor) of the epochs where the training monitor ran (``train.monitor_every``)."""
    return [{"epoch": r["epoch"], **r["monitor"]} for r in run.curve
            if isinstance(r.get("monitor"), dict) and isinstance(r.get("epoch"), int)]


def fig_reliance_curve(runs: list[RunRecord]) -> ReportFigure | None:
    """Last-item reliance against training epoch (the training monitor): HRLI@1, HRL2I@1 and the mixing ratio
    at +Res (last position), one line per model (mean over seeds at the epochs every seed reached), one
    column of panels per data set."""
    groups = {k: v for k, v in group_runs(runs).items() if any(_monitor_rows(r) for r in v)}
    if not groups:
        return None
    datasets, models = _datasets(groups), _models(groups)
    panels: list[tuple[str, Callable[[dict[str, Any]], float | None]]] = [
        ("HRLI@1", lambda row: number_at(row, "HRLI@1")),
        ("HRL2I@1", lambda row: number_at(row, "HRL2I@1")),
        ("mixing ratio at +Res (last)", lambda row: number_at(row, "mixing_last", "+Res")),
    ]
    # dotted in the HRLI@1 panel: over the users whose last item occurs in training (monitors that record it)
    seen: Callable[[dict[str, Any]], float | None] = lambda row: number_at(row, "HRLI@1_seen")  # noqa: E731
    fig, axes = _new_figure(len(datasets), width_per=4.4, height=2.6, nrows=len(panels))
    dotted = False
    for col, dataset in enumerate(datasets):
        keys = [(dataset, m) for m in models if (dataset, m) in groups]
        for row, (label, value) in enumerate(panels):
            ax = axes[row][col]
            series = [(value, {})] + ([(seen, {"linestyle": ":", "marker": None})] if row == 0 else [])
            for drawn, key in enumerate(keys):
                for fn, extra in series:
                    per_run = [{r["epoch"]: fn(r) for r in _monitor_rows(run)} for run in groups[key]]
                    per_run = [{e: v for e, v in d.items() if v is not None} for d in per_run]
                    per_run = [d for d in per_run if d]
                    if not per_run:
                        continue
                    epochs = sorted(set.intersection(*(set(d) for d in per_run)))
                    mean = [float(np.mean([d[e] for d in per_run])) for e in epochs]
                    ax.plot(epochs, mean, color=model_color(key[1]),
                            **{"marker": model_marker(key[1]), **_line_looks(drawn, len(keys)), **extra})
                    dotted = dotted or fn is seen
            ax.set_ylim(-0.02, 1.02)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(dataset)
            ax.set_xlabel("training epoch")
    extra = [Line2D([], [], color="grey", linestyle=":", label="HRLI@1 over last items seen in training")]
    _model_legend(fig, models, markers=True, extra=extra if dotted else None)
    users = _note(fig, _users(groups, lambda r: next((m.get("n_users") for m in _monitor_rows(r)), None)),
                  "Each point rests on", split="validation")
    return ReportFigure("reliance_curve", "Last-item reliance during training",
                        "HRLI@1, HRL2I@1 and the +Res mixing ratio at the last position of the current model on a "
                        "fixed validation subsample, every few epochs of training (dotted, where the monitor "
                        "recorded it: HRLI@1 over the users whose last item occurs in training): does reliance on "
                        "the last item appear as the model converges, and for which models?" + users, fig)


def _recovery_rows(run: RunRecord) -> list[dict[str, Any]]:
    test = run.diag("recovery").get("test", {})
    curve = test.get("curve", []) if isinstance(test, dict) else []
    return sorted((r for r in curve if isinstance(r, dict) and "alpha" in r), key=lambda r: float(r["alpha"]))


def fig_recovery(runs: list[RunRecord]) -> ReportFigure | None:
    """Recovery(alpha) and HR@10(alpha) on the test split; the band alpha in 0.1-0.3 shaded."""
    groups = {k: v for k, v in group_runs(runs).items() if any(_recovery_rows(r) for r in v)}
    if not groups:
        return None
    quantities: list[Quantity] = [("Recovery(α)", lambda row: number_at(row, "recovery")),
                                  ("HR@10", lambda row: number_at(row, "HR@10"))]
    fig = _sweep_figure(groups, _recovery_rows, quantities, (2, 1), width_per=4.6, height=3.4,
                        decorate=lambda ax: ax.axvspan(0.1, 0.3, color="grey", alpha=0.12, linewidth=0),
                        extra=[Patch(color="grey", alpha=0.2, label="α in 0.1–0.3")])
    users = _note(fig, _users(groups, _recovery_counts), "Computed on")
    return ReportFigure("recovery", "Miss recovery against α",
                        "Left (or top): the share of recoverable misses (targets that an earlier position ranked in "
                        "the top-10 but the final one missed) that the final position hits at residual scale α; "
                        "right (or below): HR@10 at the same α, the price paid." + users, fig)


def _recovery_counts(run: RunRecord) -> int | None:
    test = run.diag("recovery").get("test", {})
    n = test.get("n_users") if isinstance(test, dict) else None
    return n if isinstance(n, int) else run.diag("recovery").get("n_users")


def _per_position(run: RunRecord, layer: int) -> dict[str, Any] | None:
    entries = [e for e in run.diag("mixing").get("per_position", []) if isinstance(e, dict)]
    if not entries:
        return None
    layers = sorted(int(e.get("layer", 0)) for e in entries)
    want = layers[layer] if -len(layers) <= layer < len(layers) else layers[-1]
    return next(e for e in entries if int(e.get("layer", 0)) == want)


def fig_per_position(runs: list[RunRecord], layer: int = -1, max_offset: int = 50) -> ReportFigure | None:
    """Mixing ratio against distance from the last position, for one layer (default: the last), per stage."""
    groups = {k: v for k, v in group_runs(runs).items() if any(_per_position(r, layer) for r in v)}
    if not groups:
        return None
    datasets, models = _datasets(groups), _models(groups)
    fig, axes = _new_figure(len(datasets), width_per=4.8)
    layer_names = set()
    stages_seen: list[str] = []
    for ax, dataset in zip(axes[0], datasets):
        drawn = 0
        for model in models:
            entries = [e for e in (_per_position(r, layer) for r in groups.get((dataset, model), [])) if e]
            if not entries:
                continue
            layer_names |= {int(e.get("layer", 0)) for e in entries}
            # each further model narrower and above the one before, so equal curves of two models both show
            looks = {stage: {**STAGE_LOOKS[stage], "zorder": STAGE_LOOKS[stage]["zorder"] + 3 * drawn,
                             "linewidth": STAGE_LOOKS[stage]["linewidth"] * max(0.25, 1 - 0.65 * drawn)}
                     for stage in STAGES}
            drawn += 1
            for stage in STAGES:
                series = [np.asarray(e[stage], dtype=float) for e in entries if isinstance(e.get(stage), list)]
                if not series:
                    continue
                if stage not in stages_seen:
                    stages_seen.append(stage)
                n = min(min(len(s) for s in series), max_offset)
                mean = np.mean([s[:n] for s in series], axis=0)
                ax.plot(np.arange(n), mean, STAGE_STYLES[stage], color=model_color(model), **looks[stage])
        ax.set_title(dataset)
        ax.set_xlabel("offset from the last position (0 = last)")
        ax.set_ylabel("mixing ratio")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    stage_handles = [Line2D([], [], color="grey", linestyle=STAGE_STYLES[s], label=s, **STAGE_LOOKS[s])
                     for s in stages_seen]
    _model_legend(fig, models, stage_handles)
    which = ", ".join(str(x) for x in sorted(layer_names))
    users = _note(fig, _users(groups, lambda r: r.diag("mixing").get("n_users")), "Averaged over")
    return ReportFigure("mixing_per_position", f"Mixing ratio by position (layer {which})",
                        f"Mixing ratio of layer {which} at each position, counted back from the last one (0), per "
                        "stage (line style) and model (colour): the gap between the solid Attn line and the dashed "
                        "+Res line is the context the residual swamps at that position (the wide pale +Res line "
                        "shows under the thin marked +LN line where the two coincide)." + users, fig)


FIGURE_BUILDERS: list[Callable[[list[RunRecord]], ReportFigure | None]] = [
    fig_mixing_stages, fig_alpha_sweep, fig_shuffle, fig_hrli, fig_reliance_by_model, fig_hrli_by_frequency,
    fig_recovery, fig_per_position, fig_reliance_curve,
]
FIGURE_KEYS = ("mixing_by_stage", "alpha_sweep", "shuffle", "hrli", "hrli_by_model", "hrli_by_frequency", "recovery",
               "mixing_per_position", "reliance_curve")


def result_figure(name: str, data: dict[str, Any], model: str = "model", title: str = "") -> Figure:
    """The report's figure of one diagnostic result of one model, drawn from ``data`` (the result's ``to_dict()``).

    ``name``: shuffle, hrli, mixing (ratio by stage), mixing_per_position, alpha or recovery; ``model``: the
    legend's label (and colour, for resdom's own model names); ``title``: the panel title.
    """
    builders: dict[str, Callable[[list[RunRecord]], ReportFigure | None]] = {
        "shuffle": fig_shuffle, "hrli": fig_hrli, "mixing": fig_mixing_stages, "mixing_per_position": fig_per_position,
        "alpha": fig_alpha_sweep, "recovery": fig_recovery}
    if name not in builders:
        raise ResdomError(f"no figure named {name!r} (one of {', '.join(builders)})")
    kind = "mixing" if name == "mixing_per_position" else name
    record = RunRecord(path=Path("."), dataset=title, model=model, seed=None, protocol=None, diagnostics={kind: data})
    figure = builders[name]([record])
    if figure is None:
        raise ResdomError(f"{name}: the result holds nothing to plot")
    return figure.figure


def all_figures(runs: list[RunRecord]) -> list[ReportFigure]:
    """Every figure that the runs have data for, in report order. The remedy variants are drawn in the remedies
    figure only; the standard figures show the models (and the variants where nothing else ran)."""
    models = [r for r in runs if remedy_variant(r.model) is None] or runs
    figures = [build(models) for build in FIGURE_BUILDERS]
    figures.append(fig_remedies(remedy_runs(runs)))  # only where variants ran
    return [f for f in figures if f is not None]


def _zoom_on_points(ax: Any, points: list[dict[str, Any]], curve: tuple[np.ndarray, np.ndarray] | None,
                    share: float = 0.2) -> Any | None:
    """An inset in the lower right of ``ax`` that enlarges the points (``errorbar`` keywords) that land close to the
    first one (the base model's): those whose error bars fit, with the first's, in less than ``share`` of both axes'
    spans (variants on the base model's spot), and the part of the ``curve`` near them. Points further away stay
    where they are. Returns the inset, or None where fewer than two points are that close."""
    if len(points) < 2:
        return None
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()

    def box(ps: list[dict[str, Any]]) -> tuple[float, float, float, float]:
        return (min(p["x"] - p["xerr"] for p in ps), max(p["x"] + p["xerr"] for p in ps),
                min(p["y"] - p["yerr"] for p in ps), max(p["y"] + p["yerr"] for p in ps))

    def close(ps: list[dict[str, Any]]) -> bool:
        lo_x, hi_x, lo_y, hi_y = box(ps)
        return hi_x - lo_x < share * (x1 - x0) and hi_y - lo_y < share * (y1 - y0)

    points = [points[0], *(p for p in points[1:] if close([points[0], p]))]
    if len(points) < 2 or not close(points):
        return None
    lo_x, hi_x, lo_y, hi_y = box(points)
    pad_x = max(hi_x - lo_x, 0.01 * (x1 - x0)) * 0.3
    pad_y = max(hi_y - lo_y, 0.01 * (y1 - y0)) * 0.3
    inset = ax.inset_axes([0.45, 0.1, 0.52, 0.45])
    if curve is not None:
        inset.plot(*curve, "-", color="#999999", linewidth=1.2, marker=".", zorder=1)
    for p in points:
        inset.errorbar(**p)
    inset.set_xlim(lo_x - pad_x, hi_x + pad_x)
    inset.set_ylim(lo_y - pad_y, hi_y + pad_y)
    inset.tick_params(labelsize=6)
    ax.indicate_inset_zoom(inset, edgecolor="#999999")
    return inset


def fig_remedies(runs: list[RunRecord], order: list[str] | None = None) -> ReportFigure | None:
    """Accuracy against reliance (``resdom remedies``, docs/remedies.md): test NDCG@10 against HRLI@1, one point per
    variant label (mean over seeds, std as error bars), and the base model's inference-time alpha sweep as a curve on
    the same axes (mean over its seeds at each alpha; NDCG@10 filtered, HRLI@1 unfiltered, as the points). One panel
    per data set and base model (a variant's base: ``experiments.remedy_variant``); ``order``: the labels' legend
    order (default ``REMEDY_LABELS``). Drawn beside the standard figures where remedy variants ran (``all_figures``)."""
    def base_of(label: str) -> str:
        parts = remedy_variant(label)
        return label if parts is None else parts[0]

    groups = group_runs(runs)
    order = list(order or REMEDY_LABELS)
    labels = sorted({m for _, m in groups}, key=lambda m: (order.index(m) if m in order else len(order), m))
    points = {k: v for k, v in groups.items() if any(run_values(r)["HRLI@1"] is not None for r in v)}
    if not points:
        return None
    panels = sorted({(d, base_of(m)) for d, m in points}, key=lambda p: (p[0], model_order(p[1])))
    fig, axes = _new_figure(len(panels), width_per=7.0, height=4.0)
    for ax, (dataset, base) in zip(axes.flat, panels):
        curve, drawn = None, []
        if (dataset, base) in groups:
            x = _curve_stats(groups[(dataset, base)], _alpha_rows, lambda row: number_at(row, "HRLI@1"))
            y = _curve_stats(groups[(dataset, base)], _alpha_rows, lambda row: number_at(row, "NDCG@10"))
            if x is not None and y is not None and list(x[0]) == list(y[0]):
                curve = (x[1], y[1])
                ax.plot(*curve, "-", color="#999999", linewidth=1.4, marker=".", zorder=1,
                        label=f"{model_label(base)}: inference α sweep")
                for a, xi, yi in zip(x[0], x[1], y[1]):
                    if round(a * 10) % 5 == 0:  # label α = 0, 0.5, 1
                        ax.annotate(f"α={a:g}", (xi, yi), fontsize=7, color="#666666", textcoords="offset points",
                                    xytext=(3, -9))
        for i, label in enumerate(m for m in labels if base_of(m) == base):
            rs = points.get((dataset, label))
            if not rs:
                continue
            vals = [run_values(r) for r in rs]
            sx, sy = _stats([v["HRLI@1"] for v in vals]), _stats([v["NDCG@10"] for v in vals])
            if sx is None or sy is None:
                continue
            color = model_color(label) if label == base else colormaps["tab10"](i % 10)
            point = {"x": sx[0], "y": sy[0], "xerr": sx[1], "yerr": sy[1], "fmt": model_marker(base), "color": color,
                     "capsize": 3, "markersize": 6, "zorder": 3}
            ax.errorbar(**point, label=f"{label} (n={len(vals)})")
            drawn.append(point)
        ax.set_xlabel("HRLI@1 (reliance on the last item)")
        ax.set_ylabel("NDCG@10 (test)")
        ax.set_title(dataset if len({b for _, b in panels}) == 1 else f"{dataset}: {model_label(base)}")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)  # beside: hides no point
        _zoom_on_points(ax, drawn, curve)
    users = _note(fig, _users(points, lambda r: r.diag("hrli").get("n_users")), "Each point rests on")
    return ReportFigure("remedies", "Remedies: accuracy against last-item reliance",
                        "Each point is a training-time variant (mean over seeds, error bars one standard deviation); "
                        "the grey curve is the base model's inference-time residual scaling: a variant above and to "
                        "the left of the curve buys lower reliance at less accuracy cost than lowering α after "
                        "training. Where variants land close to the base model, the inset (lower right) enlarges the "
                        "framed area." + users, fig)
