"""Report figures (matplotlib, no pyplot state; PNG and PDF). One fixed colour per model across every figure.

Every figure answers one question with one statistic (named in its title, axis and caption) and aggregates runs
by (data set, model): the mean over the seeds that have the numbers, with one sample standard deviation as error
bars or a shaded band where there are several seeds (the legend says so, and gives each model's number of
seeds, n). One panel per data set, at most ``MAX_COLUMNS`` side by side, the whole figure at most
``PAGE_WIDTH`` inches wide (a paper's text width) at ``PNG_DPI``; the PNG is a 256-colour palette image, so a
figure stays small enough to commit. Colours mark models (``MODEL_COLORS``); in per-position plots line styles
mark stages.

Readability: every figure says (in a note under it and in its caption) how many test users its numbers rest on;
lines that may coincide differ in marker and width, drawn widest first, so one never hides another; bars too
short to read carry their value; rates that span orders of magnitude (HRLI@1 next to HRL2I@1) use a log axis.
"""

from __future__ import annotations

import functools
import io
import textwrap
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from resdom.errors import ResdomError
from resdom.experiments import REMEDY_LABELS, remedy_variant, studied_variant
from resdom.io import warnings_filter
from resdom.limits import visible
from resdom.names import STAGES, band_names
from resdom.records import ALPHA, RECOVERY_CURVE, REGISTRY, resolve
from resdom.report.collect import RunRecord, model_order
from resdom.report.tables import remedy_runs
from resdom.report.values import run_values
from resdom.stored import number_at

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

# matplotlib's warning, once per figure and character, where a label holds a character its font lacks (an emoji, a
# control character in a data set's name): the character is drawn as a box, the warning (which quotes it raw, an
# escape sequence included) is not printed
MISSING_GLYPH = r"Glyph \d+ .* missing from"


# Okabe-Ito palette (colour-blind safe); fixed per model so every figure agrees.
@functools.cache
def mpl() -> Any:
    """The parts of matplotlib the figures draw with, imported when the first figure is drawn: importing the report
    imports no matplotlib. ``NotebookFigure``: a matplotlib Figure that a notebook shows (as a PNG) when it is a
    cell's value, without pyplot."""
    from matplotlib import colormaps, rc_context
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, NullFormatter

    class NotebookFigure(Figure):
        def _repr_png_(self) -> bytes:
            buf = io.BytesIO()
            with warnings_filter("ignore", UserWarning, MISSING_GLYPH):
                self.savefig(buf, format="png", dpi=PNG_DPI)
            return buf.getvalue()

    return SimpleNamespace(colormaps=colormaps, rc_context=rc_context, Line2D=Line2D, Patch=Patch,
                           FuncFormatter=FuncFormatter, NullFormatter=NullFormatter, NotebookFigure=NotebookFigure)


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
LOG_FLOOR = 0.001  # the bottom of a log axis of rates; a lower rate (0 included) sits on it and carries its value
PNG_DPI = 100
PAGE_WIDTH = 7.0  # inches: a two-column paper's text width; no figure is wider
COLUMN_WIDTH = 3.5  # inches: one paper column, the width of a one-panel figure
PANEL_HEIGHT = 2.3  # inches
MAX_COLUMNS = 3  # panels side by side; more data sets wrap onto further lines of panels
STYLE = {"font.size": 7, "axes.titlesize": 8, "axes.labelsize": 7, "legend.fontsize": 7, "figure.titlesize": 8,
         "lines.markersize": 4, "text.parse_math": False}  # a "$" in a data set or model name is a dollar sign
TICK_SIZE = 6.5
SPREAD = "±1 SD over seeds"  # what every error bar and band shows
# the mark on a bar that rests on one seed (no error bar can show a spread there); a line of one seed keeps its
# colour and marker with a hollow face
ONE_SEED_LOOK: dict[str, Any] = {"marker": "o", "markersize": 3.5, "markerfacecolor": "white",
                                 "markeredgecolor": "black", "markeredgewidth": 0.8, "linestyle": "none"}
ONE_SEED_FACE: dict[str, Any] = {"markerfacecolor": "white"}


# the study's scatter plots and seed curves: one (colour, marker) per data set or seed, so that points and lines stay
# apart without their colour (a reader who cannot tell them, a grey print) and an 11th data set does not take the
# first one's look (10 colours, 7 markers: the pair repeats after 70)
SERIES_MARKERS = ("o", "s", "^", "v", "D", "P", "X")
SERIES_STYLES = ("-", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))  # not "--": the study's reference lines are dashed


def series_look(i: int) -> dict[str, Any]:
    """The colour and marker of the ``i``-th data set or seed of a study figure (``SERIES_MARKERS``)."""
    return {"color": f"C{i % 10}", "marker": SERIES_MARKERS[i % len(SERIES_MARKERS)]}


def model_color(model: str) -> str:
    """The model's fixed colour; unknown models get a stable colour from their name."""
    if model in MODEL_COLORS:
        return MODEL_COLORS[model]
    return _EXTRA_COLORS[zlib.crc32(model.encode()) % len(_EXTRA_COLORS)]


def model_label(model: str) -> str:
    return MODEL_LABELS.get(model, model)


NAME_CHARS = 40  # the most characters of a data set's or model's name a figure draws


def drawn_name(name: str) -> str:
    """A data set's or model's name as a figure draws it: a control character as its code (``visible``: an escape
    character is ``\\x1b``, not a box), and a name longer than ``NAME_CHARS`` (a data set named by a long path)
    cut to its head and its end around a ``…``: drawn whole, a 10,000-character name pushed every panel of the
    figure off the page (and constrained layout gave up, with a warning). The tables and captions name it whole."""
    name = visible(name)
    return name if len(name) <= NAME_CHARS else f"{name[:NAME_CHARS * 2 // 3]}…{name[-(NAME_CHARS // 3 - 1):]}"


def _model_name(model: str) -> str:
    """``model_label`` as a figure draws it (``drawn_name``)."""
    return drawn_name(model_label(model))


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

    def __post_init__(self) -> None:
        for ax in self.figure.axes:  # ticks are made at drawing time: their size is set here, not by STYLE
            ax.tick_params(labelsize=TICK_SIZE)

    def files(self, out_dir: str | Path) -> dict[Path, bytes]:
        """``<key>.png`` (``PNG_DPI``, palette) and ``<key>.pdf`` in ``out_dir``: {path: content}, to write together
        with the rest of a report (``report.write_report``). The same figure gives the same bytes: the PDF holds no
        creation date (matplotlib stamps the time of drawing), so a report drawn again churns no file in git."""
        out_dir = Path(out_dir)
        return {out_dir / f"{self.key}.png": self.png_bytes(),
                out_dir / f"{self.key}.pdf": self._render("pdf", metadata={"CreationDate": None})}

    @property
    def display_width(self) -> int:
        """Width in CSS pixels to show the PNG at (about 100 px per inch of figure), so fonts look alike."""
        return int(round(self.figure.get_figwidth() * 100))

    def png_bytes(self) -> bytes:
        """The PNG (``PNG_DPI``, 256-colour palette), rendered once and reused by the HTML page."""
        if self._png is None:
            self._png = palette_png(self._render("png", dpi=PNG_DPI))
        return self._png

    def _render(self, fmt: str, **kw: Any) -> bytes:
        buf = io.BytesIO()
        with warnings_filter("ignore", UserWarning, MISSING_GLYPH):
            self.figure.savefig(buf, format=fmt, **kw)
        return buf.getvalue()


def palette_png(png: bytes) -> bytes:
    """``png`` as a 256-colour palette PNG (a figure's few flat colours and their anti-aliasing survive; about a
    third of the bytes of the RGBA image)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True, dpi=(PNG_DPI, PNG_DPI))
    return buf.getvalue()


# one rc_context block at a time in this process (rc_settings)
_RC = threading.RLock()


@contextmanager
def rc_settings(values: dict[str, Any]) -> Iterator[None]:
    """matplotlib's ``rc_context(values)``, one such block at a time in the process. rc_context saves the process's
    rcParams on entry and puts that copy back on exit: figures drawn in two threads at once (two ``Diagnosis.plot``
    or ``build_report``) each put back the copy it saved, the second one with the first one's ``STYLE`` in it, so
    resdom's small fonts (``font.size`` 7) and ``text.parse_math`` False stayed in the caller's rcParams."""
    with _RC, mpl().rc_context(values):
        yield


def plain_text(build: Callable[..., Any]) -> Callable[..., Any]:
    """Build the figure with every text as written: a ``$`` in a data set or model name is a dollar sign, not the
    start of mathtext (``a$\\frac$`` raised a ParseException; ``$5 and $10`` came out in italics). ``STYLE``
    holds the same setting."""
    @functools.wraps(build)
    def build_plain(*args: Any, **kwargs: Any) -> Any:
        with rc_settings({"text.parse_math": False}):
            return build(*args, **kwargs)
    return build_plain


def styled(build: Callable[..., ReportFigure | None]) -> Callable[..., ReportFigure | None]:
    """Build the figure under ``STYLE`` (small fonts for panels a few inches wide): the decorator of every figure
    builder, the study's included."""
    @functools.wraps(build)
    def build_styled(*args: Any, **kwargs: Any) -> ReportFigure | None:
        with rc_settings(STYLE):
            return build(*args, **kwargs)
    return build_styled


# ---------------------------------------------------------------- grouping helpers


def group_runs(runs: list[RunRecord]) -> dict[tuple[str, str], list[RunRecord]]:
    """Runs keyed by (data set, model), in data-set then paper model order."""
    out: dict[tuple[str, str], list[RunRecord]] = {}
    for run in sorted(runs, key=lambda r: (r.dataset, model_order(r.model))):
        out.setdefault((run.dataset, run.model), []).append(run)
    return out


def groups_with(runs: list[RunRecord], has: Callable[[RunRecord], Any]) -> dict[tuple[str, str], list[RunRecord]]:
    """``group_runs`` of the runs for which ``has`` is true (those holding the numbers a figure draws): a group's
    length is then the number of seeds its means average."""
    return group_runs([r for r in runs if has(r)])


def _datasets(groups: dict[tuple[str, str], list[RunRecord]]) -> list[str]:
    return sorted({d for d, _ in groups})


def _models(groups: dict[tuple[str, str], list[RunRecord]]) -> list[str]:
    return sorted({m for _, m in groups}, key=lambda m: (model_order(m), m))


def _stats(values: list[float | None]) -> tuple[float, float, int] | None:
    """(mean, sample SD, count) of the values present (None where none is). The SD of a single value is NaN, not
    0: an error bar of it is not drawn (a bar of zero width, with its caps, claimed a spread of none), and its bar
    or point takes the one-seed mark, as the tables print no SD there (``tables.mean_std``). A group of three
    seeds of which one holds the value has one value, whatever the legend's n."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return float(np.mean(xs)), float(np.std(xs, ddof=1)) if len(xs) > 1 else float("nan"), len(xs)


def _new_figure(n_panels: int, height: float = PANEL_HEIGHT, nrows: int = 1,
                columns: int = MAX_COLUMNS) -> tuple[Figure, Any]:
    """A figure of ``n_panels`` panels (one per data set, say), each a column of ``nrows`` axes -> (figure,
    ``axes``), ``axes[row, i]`` the axes of row ``row`` of panel ``i``. At most ``columns`` panels share a line;
    the next ones go below, each line of panels ``nrows`` axes high (the grid's unused cells are removed). The
    figure is ``PAGE_WIDTH`` wide with a full line of panels, ``COLUMN_WIDTH`` with one panel."""
    n_panels = max(1, n_panels)
    ncols = min(n_panels, columns)
    lines = -(-n_panels // ncols)
    width = max(COLUMN_WIDTH, PAGE_WIDTH * ncols / max(columns, 1))
    fig = mpl().NotebookFigure(figsize=(width, height * nrows * lines + 0.5), layout="constrained")
    grid = fig.subplots(nrows * lines, ncols, squeeze=False)
    axes = np.empty((nrows, n_panels), dtype=object)
    for row in range(nrows):
        for i in range(n_panels):
            axes[row, i] = grid[(i // ncols) * nrows + row][i % ncols]
    for i in range(n_panels, lines * ncols):
        for row in range(nrows):
            fig.delaxes(grid[(i // ncols) * nrows + row][i % ncols])
    return fig, axes


def seeds_text(groups: dict[tuple[str, str], list[RunRecord]], model: str) -> str:
    """``n=3``: the seeds behind ``model``'s numbers in ``groups`` (``n=1–3`` where data sets differ)."""
    ns = sorted({len(rs) for (_, m), rs in groups.items() if m == model}) or [0]
    return f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}–{ns[-1]}"


def spread_handles(groups: dict[tuple[str, str], list[RunRecord]], kind: str = "bars",
                   hollow: bool = False) -> list[Any]:
    """The legend entries saying what the error bars (``kind`` "bars") or bands ("band") show, where some model has
    several seeds (none otherwise: nothing is drawn; "none": a figure without either), and what the hollow mark of
    a bar or line point resting on one seed means, where some model has one or ``hollow`` (a bar whose value only
    one of its seeds holds carries the mark: ``_figure_hollow``)."""
    single = [_one_seed_handle()] if hollow or any(len(rs) == 1 for rs in groups.values()) else []
    if kind == "none" or not any(len(rs) > 1 for rs in groups.values()):
        return single
    if kind == "band":
        return [mpl().Patch(color="grey", alpha=0.25, label=f"band: {SPREAD}"), *single]
    return [mpl().Line2D([], [], color="black", marker="|", markersize=8, linestyle="none",
                         label=f"error bar: {SPREAD}"), *single]


def _one_seed_face(n_seeds: int) -> dict[str, Any]:
    """The line keywords of a line resting on ``n_seeds`` seeds: ``ONE_SEED_FACE`` for one, none otherwise."""
    return ONE_SEED_FACE if n_seeds == 1 else {}


def _figure_hollow(fig: Figure) -> bool:
    """Whether some bar or line point of ``fig`` carries the hollow one-seed mark (``ONE_SEED_LOOK`` over a bar,
    ``ONE_SEED_FACE`` on a line)."""
    return any(line.get_markerfacecolor() == "white" for ax in fig.axes for line in ax.get_lines())


def _one_seed_handle() -> Line2D:
    """The legend entry of the hollow mark on a bar (``_bar_values``) or the hollow markers of a line
    (``ONE_SEED_FACE``) that rest on one seed."""
    handle: Line2D = mpl().Line2D([], [], **ONE_SEED_LOOK, label="hollow: one seed, no spread")
    return handle


def _model_legend(fig: Figure, models: list[str], extra: list[Any] | None = None, markers: bool = False,
                  groups: dict[tuple[str, str], list[RunRecord]] | None = None) -> None:
    """Colour patches per model (``markers``: a line with the model's marker, for line plots), each with its number
    of seeds where ``groups`` are given, then ``extra``."""
    def label(m: str) -> str:
        return f"{_model_name(m)} ({seeds_text(groups, m)})" if groups is not None else _model_name(m)

    if markers:
        handles: list[Any] = [mpl().Line2D([], [], color=model_color(m), marker=model_marker(m), label=label(m))
                              for m in models]
    else:
        handles = [mpl().Patch(color=model_color(m), label=label(m)) for m in models]
    _figure_legend(fig, handles + (extra or []))


LEGEND_ROWS = 6  # the most legend rows a figure of its usual height (``_new_figure``) holds beside its panels
LEGEND_ROW = 0.16  # inches: a row of the legend at STYLE's legend font size (about 0.155 drawn)
LEGEND_ROOM = 2  # the legend rows that the usual height is made for


def _figure_legend(fig: Figure, handles: list[Any]) -> None:
    """The legend above the panels, in as many columns as its longest entry lets fit the figure's width; the figure
    grows by each row beyond ``LEGEND_ROOM`` where there are more than ``LEGEND_ROWS`` (thirty models in one panel's
    legend squeezed the panels to nothing: constrained layout gave up, with a warning)."""
    longest = max((len(h.get_label()) for h in handles), default=1)
    entry = 0.45 + 0.052 * longest  # inches: the key, the gap and the label at STYLE's legend font size
    ncol = max(1, min(len(handles), int(fig.get_figwidth() // entry)))
    rows = -(-len(handles) // ncol)
    if rows > LEGEND_ROWS:
        fig.set_figheight(fig.get_figheight() + LEGEND_ROW * (rows - LEGEND_ROOM))
    fig.legend(handles=handles, loc="outside upper center", ncol=ncol, frameon=False)


def _users(groups: dict[tuple[str, str], list[RunRecord]], count: Callable[[RunRecord], Any] | str
           ) -> dict[str, str]:
    """Test users behind each data set's numbers: ``{dataset: "398"}`` (a range where runs differ); data sets whose
    runs do not say are left out. ``count(run)``, or a diagnostic's name: the ``n_users`` of its file."""
    read = count if callable(count) else (lambda r, name=count: r.diag(name).get("n_users"))
    out: dict[str, set[int]] = {}
    for (dataset, _), rs in groups.items():
        for r in rs:
            n = read(r)
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
    shown = users_note({drawn_name(d): n for d, n in users.items()}, split)  # the caption names each data set whole
    fig.supxlabel(textwrap.fill(f"{what} {shown}", width=int(fig.get_figwidth() / 0.055)), fontsize=7,
                  color="#444444")  # users; the legend's n counts seeds
    return f" {what} {note}."


def _line_looks(i: int, n: int) -> dict[str, Any]:
    """Width and marker size of the i-th of n lines drawn in a panel: each narrower than the last and drawn above
    it, so a line that coincides with an earlier one leaves that one's edges visible."""
    if n <= 1:
        return {"linewidth": 1.4, "markersize": 3.5, "zorder": 2}
    return {"linewidth": max(0.7, 2.8 - 1.2 * i), "markersize": max(2.2, 5.5 - 1.6 * i), "zorder": 2 + i}


def _label_small_bars(ax: Any) -> None:
    """Write the value over every bar lower than ``SMALL_BAR`` of the axis height (of its log span on a log axis;
    a bar's value, not its clipped height, as ``_bar_values`` kept it: a zero bar reads 0.000, a missing one stays
    blank)."""
    low, high = ax.get_ylim()
    log = ax.get_yscale() == "log"

    def small(h: float) -> bool:
        if log:
            return bool(np.log(max(h, low) / low) < SMALL_BAR * np.log(high / low))
        return bool(abs(h) < SMALL_BAR * (high - low))

    bars = [c for c in ax.containers if hasattr(c, "patches")]
    upright = sum(len(c.patches) for c in bars) > 6  # narrow bars: written upwards, so neighbours' values stay apart
    for container in bars:
        values = getattr(container, "resdom_values", [rect.get_height() for rect in container.patches])
        labels = [f"{h:.3f}" if np.isfinite(h) and small(h) else "" for h in values]
        if any(labels):
            ax.bar_label(container, labels=labels, padding=2, fontsize=5.5 if upright else 6,
                         rotation=90 if upright else 0)


def _log_rates(ax: Any) -> None:
    """A log y axis from ``LOG_FLOOR`` to 1 for rates (shares of users) that span orders of magnitude."""
    ax.set_yscale("log")
    ax.set_ylim(LOG_FLOOR, 1.6)
    ax.yaxis.set_major_formatter(mpl().FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(mpl().NullFormatter())


def _bar_values(ax: Any, x: Any, means: list[float], width: float, log: bool, one_seed: Any = False,
                **kw: Any) -> Any:
    """``ax.bar`` of ``means``; on a log axis a value below ``LOG_FLOOR`` (0 included) is drawn at the floor. The
    container keeps the values themselves (``resdom_values``) for ``_label_small_bars``. ``one_seed`` (one flag, or
    one per bar): the bars that rest on a single seed get a hollow mark on top (``ONE_SEED_LOOK``)."""
    heights = [max(m, LOG_FLOOR) if log and np.isfinite(m) else m for m in means]
    container = ax.bar(x, heights, width, **kw)
    container.resdom_values = list(means)
    flags = np.broadcast_to(np.asarray(one_seed, dtype=bool), np.shape(heights))
    xs = np.broadcast_to(x, np.shape(heights))
    marked = [(xi, h) for xi, h, f in zip(xs, heights, flags) if f and np.isfinite(h)]
    if marked:
        ax.plot(*zip(*marked), **ONE_SEED_LOOK, zorder=4)  # the legend explains the mark (_figure_hollow)
    return container


def _bars(ax: Any, groups: dict[tuple[str, str], list[RunRecord]], dataset: str, models: list[str],
          categories: list[str], value: Callable[[RunRecord, str], float | None], log: bool = False) -> None:
    """Grouped bars: one group per category, one bar per model (mean over seeds, one SD as error bar where there
    are several seeds); ``log``: on a log axis of rates (``_log_rates``)."""
    if log:
        _log_rates(ax)
    width = 0.8 / max(1, len(models))
    x = np.arange(len(categories))
    for i, model in enumerate(models):
        runs = groups.get((dataset, model), [])
        if not runs:
            continue
        stats = [_stats([value(r, c) for r in runs]) for c in categories]
        means = [s[0] if s else np.nan for s in stats]
        errs = [s[1] if s else np.nan for s in stats]  # NaN: no error bar (one value, or none)
        _bar_values(ax, x - 0.4 + width * (i + 0.5), means, width, log,
                    one_seed=[s is not None and s[2] == 1 for s in stats],
                    yerr=errs if any(np.isfinite(errs)) else None,
                    color=model_color(model), capsize=2, edgecolor="white", linewidth=0.5, error_kw={"lw": 0.8})
    ax.set_xticks(x, categories)
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.set_title(drawn_name(dataset))
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _bar_panels(groups: dict[tuple[str, str], list[RunRecord]], categories: list[str],
                value: Callable[[RunRecord, str], float | None], xlabel: str, ylabel: str, log: bool = False,
                decorate: Callable[[Any, str, list[str]], None] = lambda ax, dataset, models: None,
                extra: list[Any] | None = None) -> Figure:
    """Grouped bars of ``value(run, category)``: a panel per data set, a bar per model in each category (mean over
    seeds, an error bar of one SD). ``decorate(ax, dataset, models)``: drawn on each panel after the bars, before
    the small bars get their values; ``extra``: legend entries before the error bar's."""
    datasets, models = _datasets(groups), _models(groups)
    fig, axes = _new_figure(len(datasets))
    for ax, dataset in zip(axes[0], datasets):
        _bars(ax, groups, dataset, models, categories, value, log=log)
        decorate(ax, dataset, models)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        _label_small_bars(ax)
    _model_legend(fig, models, [*(extra or []), *spread_handles(groups, hollow=_figure_hollow(fig))], groups=groups)
    return fig


# ---------------------------------------------------------------- figures


@styled
def fig_mixing_stages(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """Mixing ratio (pooled over layers) per stage: bars = all positions, black diamonds = last position."""
    groups = groups_with(runs, lambda r: any(number_at(r.diag(name), "pooled", "all", s) is not None for s in STAGES))
    if not groups:
        return None
    stages = [s for s in STAGES if any(s in r.diag(name).get("stages", STAGES[:2]) for v in groups.values()
                                       for r in v)]

    def last_position(ax: Any, dataset: str, models: list[str]) -> None:  # diamonds over the bars
        width = 0.8 / max(1, len(models))
        for i, model in enumerate(models):
            rs = groups.get((dataset, model), [])
            last = [_stats([number_at(r.diag(name), "pooled", "last", s) for r in rs]) for s in stages]
            xs = np.arange(len(stages)) - 0.4 + width * (i + 0.5)
            ax.plot(xs, [s[0] if s else np.nan for s in last], "D", color="black", markersize=3, linestyle="none")
        ax.set_ylim(0, 1.05)

    fig = _bar_panels(groups, stages, lambda r, s: number_at(r.diag(name), "pooled", "all", s),
                      "stage of the attention block", "mixing ratio (context share)", decorate=last_position,
                      extra=[mpl().Line2D([], [], marker="D", color="black", linestyle="none", markersize=3,
                                    label="last position")])
    users = _note(fig, _users(groups, name), "Pooled over the positions of")
    return ReportFigure("mixing_by_stage", "Mixing ratio by stage",
                        "Bars give the mixing ratio, the share of each stage's output that comes from other "
                        "positions (pooled over layers, all positions; diamonds: last position), mean over seeds: a "
                        "drop from Attn to +Res means the residual swamps the context that attention gathered."
                        + users, fig)


def _alpha_rows(name: str) -> Callable[[RunRecord], list[dict[str, Any]]]:
    """The rows of a run's alpha sweep (the diagnostic ``name``'s file), by alpha."""
    def rows_of(run: RunRecord) -> list[dict[str, Any]]:
        rows = run.diag(name).get("rows", [])
        return sorted((r for r in rows if isinstance(r, dict) and "alpha" in r), key=lambda r: float(r["alpha"]))
    return rows_of


def _curve_stats(runs: list[RunRecord], rows_of: Callable[[RunRecord], list[dict[str, Any]]],
                 value: Callable[[dict[str, Any]], float | None]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """(alphas, mean, std, n): mean and std over the ``n`` runs that hold ``value(row)`` (a run without it is left
    out), at each alpha that every one of them has."""
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
    return np.array(alphas), vals.mean(axis=0), std, len(vals)


def _line_panel(ax: Any, groups: dict[tuple[str, str], list[RunRecord]], datasets: list[str],
                rows_of: Callable[[RunRecord], list[dict[str, Any]]], value: Callable[[dict[str, Any]], float | None],
                ylabel: str) -> None:
    """One line per (data set, model) of a share against α (mean over seeds) with a band of one SD where there
    are several seeds, the band kept inside [0, 1] where every value of these curves lies."""
    drawn, n = 0, len(groups)
    for (dataset, model), rs in groups.items():
        stats = _curve_stats(rs, rows_of, value)
        if stats is None:
            continue
        a, mean, std, seeds = stats  # seeds: the runs that hold the values (hollow markers and no band for one)
        style = DATASET_STYLES[datasets.index(dataset) % len(DATASET_STYLES)]
        ax.plot(a, mean, style, color=model_color(model), marker=model_marker(model), **_line_looks(drawn, n),
                **_one_seed_face(seeds))
        drawn += 1
        if seeds > 1:
            ax.fill_between(a, np.clip(mean - std, 0.0, 1.0), np.clip(mean + std, 0.0, 1.0), color=model_color(model),
                            alpha=0.15, linewidth=0)
    ax.set_xlabel("residual scale α")
    ax.set_ylabel(ylabel)
    ax.set_xlim(-0.02, 1.02)
    ax.grid(alpha=0.3)


def _dataset_handles(datasets: list[str]) -> list[Line2D]:
    if len(datasets) < 2:
        return []
    return [mpl().Line2D([], [], color="grey", linestyle=DATASET_STYLES[i % len(DATASET_STYLES)], label=drawn_name(d))
            for i, d in enumerate(datasets)]


Quantity = tuple[str, Callable[[dict[str, Any]], float | None]]  # (ylabel / title, value of a sweep row)
ALPHA_QUANTITIES: dict[str, Quantity] = {
    "mixing": ("mixing ratio at +Res", lambda row: number_at(row, "mixing_all", "+Res")),
    "hrli": ("HRLI@1", lambda row: number_at(row, "HRLI@1")),
    "accuracy": ("test HR@10", lambda row: number_at(row, "HR@10")),
}


def _curves_by_dataset(groups: dict[tuple[str, str], list[RunRecord]],
                       rows_of: Callable[[RunRecord], list[dict[str, Any]]], quantity: Quantity,
                       decorate: Callable[[Any], None] = lambda ax: None, extra: list[Any] | None = None) -> Figure:
    """One statistic against alpha: a panel per data set, a line per model (mean over seeds, a band of one SD).
    ``decorate``: drawn on each panel first; ``extra``: legend entries after the models' and the band's."""
    datasets, models = _datasets(groups), _models(groups)
    fig, axes = _new_figure(len(datasets))
    for ax, dataset in zip(axes[0], datasets):
        decorate(ax)
        _line_panel(ax, {k: v for k, v in groups.items() if k[0] == dataset}, [dataset], rows_of, quantity[1],
                    quantity[0])
        ax.set_title(drawn_name(dataset))
    _model_legend(fig, models, spread_handles(groups, "band", hollow=_figure_hollow(fig)) + (extra or []),
                  markers=True, groups=groups)
    return fig


@styled
def _alpha_figure(runs: list[RunRecord], name: str, which: str, title: str, caption: str) -> ReportFigure | None:
    rows_of = _alpha_rows(name)
    groups = groups_with(runs, rows_of)
    if not groups:
        return None
    fig = _curves_by_dataset(groups, rows_of, ALPHA_QUANTITIES[which])
    users = _note(fig, _users(groups, name), "Each point rests on")
    return ReportFigure(f"alpha_{which}", title, caption + users, fig)


def fig_alpha_mixing(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """Does lowering alpha raise mixing? The +Res mixing ratio (all positions) against alpha."""
    return _alpha_figure(runs, name, "mixing", "Residual scaling: mixing ratio at +Res against α",
                         "The mixing ratio at +Res (share of the block output from other positions, pooled over "
                         "layers and all positions; mean over seeds) against the residual scale α applied at "
                         "inference (α = 1: the trained model): reading right to left, lowering α should raise it.")


def fig_alpha_hrli(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """Does lowering alpha lower the reliance on the last item? HRLI@1 against alpha."""
    return _alpha_figure(runs, name, "hrli", "Residual scaling: HRLI@1 against α",
                         "HRLI@1 (share of test users whose last input item is ranked first, unfiltered; mean over "
                         "seeds) against the residual scale α applied at inference: reading right to left, lowering "
                         "α should lower it.")


def fig_alpha_accuracy(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """What does lowering alpha cost? Test HR@10 (filtered) against alpha."""
    return _alpha_figure(runs, name, "accuracy", "Residual scaling: test HR@10 against α",
                         "Test HR@10 (full ranking, seen items filtered; mean over seeds) against the residual scale "
                         "α applied at inference: the accuracy that lowering α costs.")


@styled
def fig_alpha_sweep(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """The three alpha-sweep statistics of one model side by side (mixing at +Res, HRLI@1, test HR@10), for the
    API's plot of one result (``result_figure("alpha", ...)``); data sets, where several, as line styles."""
    rows_of = _alpha_rows(name)
    groups = groups_with(runs, rows_of)
    if not groups:
        return None
    datasets, models = _datasets(groups), _models(groups)
    fig, axes = _new_figure(len(ALPHA_QUANTITIES))
    for ax, (label, value) in zip(axes[0], ALPHA_QUANTITIES.values()):
        _line_panel(ax, groups, datasets, rows_of, value, label)
        ax.set_title(label)
    _model_legend(fig, models, _dataset_handles(datasets) + spread_handles(groups, "band", hollow=_figure_hollow(fig)),
                  markers=True, groups=groups)
    users = _note(fig, _users(groups, name), "Each point rests on")
    return ReportFigure("alpha_sweep", "Residual scaling sweep",
                        "The mixing ratio at +Res, HRLI@1 and test HR@10 against the residual scale α applied at "
                        "inference (α = 1 is the trained model): reading right to left, lowering α should raise "
                        "mixing, lower HRLI@1 and cost some accuracy." + users, fig)


@styled
def fig_shuffle(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """Bars of test NDCG@10 for the original / keep_last / full input orders, per data set."""
    def value(r: RunRecord, cat: str) -> float | None:
        sh = r.diag(name)
        if cat == "original":
            return number_at(sh, "original", "NDCG@10")
        return number_at(sh, "perturbations", cat, "metrics", "NDCG@10")

    orders = ["original", "keep_last", "full"]
    groups = groups_with(runs, lambda r: any(value(r, c) is not None for c in orders))  # the seeds with a number
    if not groups:
        return None
    fig = _bar_panels(groups, orders, value, "input order at inference", "test NDCG@10")
    users = _note(fig, _users(groups, name), "Each bar rests on")
    return ReportFigure("shuffle", "Position shuffle: test NDCG@10",
                        "Test NDCG@10 (mean over seeds) with the original input order, with all items but the last "
                        "permuted (keep_last) and with every item permuted (full): a small keep_last drop next to a "
                        "large full drop means the prediction rests on the last item." + users, fig)


@styled
def fig_hrli(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """Bars of HRLI@1, HRL2I@1, HRLI@10, HRL2I@10 per data set, on a log axis (HRL2I is often 100 times smaller)."""
    rates = ["HRLI@1", "HRL2I@1", "HRLI@10", "HRL2I@10"]
    groups = groups_with(runs, lambda r: any(number_at(r.diag(name), "values", c) is not None for c in rates))
    if not groups:
        return None
    fig = _bar_panels(groups, rates,
                      lambda r, c: number_at(r.diag(name), "values", c), "rate (unfiltered top-K)",
                      "share of test users (log)", log=True,
                      decorate=lambda ax, dataset, models: ax.tick_params(axis="x", labelrotation=30))
    users = _note(fig, _users(groups, name), "Shares of")
    return ReportFigure("hrli", "Last-item hit rates",
                        "Share of test users whose most recent (HRLI) or second most recent (HRL2I) input item is "
                        "in the unfiltered top-K (mean over seeds, log scale; a rate below 0.001 sits on the axis "
                        "with its value): a high HRLI next to a far lower HRL2I means the model echoes the last item "
                        "specifically, not recent items in general." + users, fig)


@styled
def fig_reliance_by_model(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """The paper's Figure 2: HRLI@1 and HRL2I@1 side by side for each model (groups), one panel per data set
    holding the models that ran on it (a model keeps its colour in every panel), on a log axis."""
    cats = ["HRLI@1", "HRL2I@1"]
    groups = groups_with(runs, lambda r: any(number_at(r.diag(name), "values", c) is not None for c in cats))
    if not groups:
        return None
    datasets = _datasets(groups)
    ran = {d: _models({k: v for k, v in groups.items() if k[0] == d}) for d in datasets}  # each set's models
    looks = {"HRLI@1": {}, "HRL2I@1": {"alpha": 0.45, "hatch": "///"}}
    fig, axes = _new_figure(len(datasets))
    for ax, dataset in zip(axes[0], datasets):
        _log_rates(ax)
        models = ran[dataset]
        x = np.arange(len(models))
        for j, cat in enumerate(cats):
            cells = [groups.get((dataset, m), []) for m in models]
            stats = [_stats([number_at(r.diag(name), "values", cat) for r in c]) for c in cells]
            # an error bar only where there is a spread to show: none (NaN) for a value of one seed
            _bar_values(ax, x - 0.2 + 0.4 * j, [s[0] if s else np.nan for s in stats], 0.4, True,
                        one_seed=[s is not None and s[2] == 1 for s in stats],
                        yerr=[s[1] if s else np.nan for s in stats],
                        color=[model_color(m) for m in models], edgecolor="white", linewidth=0.5, capsize=2,
                        error_kw={"lw": 0.8}, **looks[cat])
        ax.set_xticks(x, [_model_name(m) for m in models], rotation=30 if len(models) > 3 else 0)
        ax.set_xlim(-0.6, max(len(models), 3) - 0.4)  # a panel of one or two models keeps bars of usual width
        ax.set_title(drawn_name(dataset))
        ax.set_xlabel("model")
        ax.set_ylabel("share of test users, top-1 (log)")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        _label_small_bars(ax)
    models = _models(groups)
    seeds = [mpl().Patch(color=model_color(m), label=f"{_model_name(m)} ({seeds_text(groups, m)})") for m in models]
    _figure_legend(fig, [mpl().Patch(facecolor="grey", label="HRLI@1: last input item ranked first"),
                         mpl().Patch(facecolor="grey", alpha=0.45, hatch="///", label="HRL2I@1: second-to-last item"),
                         *spread_handles(groups, hollow=_figure_hollow(fig)), *seeds])  # models: on the x axis too
    users = _note(fig, _users(groups, name), "Shares of")
    return ReportFigure("hrli_by_model", "Last-item reliance by model (the paper's Figure 2)",
                        "For each model, the share of test users whose last input item (solid) and second-to-last "
                        "input item (hatched) is ranked first, unfiltered (mean over seeds, log scale; a rate below "
                        "0.001 sits on the axis with its value): the causal self-attention models rank the last item "
                        "first far more often than the one before it, the contrast models (BERT4Rec, GRU4Rec) should "
                        "not." + users, fig)


@styled
def fig_hrli_by_frequency(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """HRLI@1 against the band of the last input item's training frequency (``hrli.json`` ``by_frequency``), one
    line per model (mean over seeds, error bars where seeds differ), and grey bars for the share of test users in
    each band; one panel per data set."""
    def bands(r: RunRecord) -> dict[str, Any]:
        b = r.diag(name).get("by_frequency")
        return b if isinstance(b, dict) else {}

    groups = groups_with(runs, bands)
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
                        yerr=[st[1] if st else np.nan for st in stats], color=model_color(m),
                        marker=model_marker(m), capsize=2, label=_model_name(m), zorder=3, elinewidth=0.8,
                        **_one_seed_face(len(rs)))
        ax.set_zorder(share.get_zorder() + 1)
        ax.patch.set_visible(False)  # the lines over the share bars
        ax.set_xticks(x, names)
        ax.set_ylim(0, 1.05)
        share.set_ylim(0, 1.05)
        ax.set_title(drawn_name(dataset))
        ax.set_xlabel("training occurrences of the last input item")
        ax.set_ylabel("HRLI@1 (lines)")
        share.set_ylabel("share of test users (grey)", color="#777777")
        share.set_xlabel(ax.get_xlabel())  # the twin's x axis is not drawn; labelled for whoever reads the axes
        ax.grid(axis="y", alpha=0.3)
    _model_legend(fig, models, spread_handles(groups), markers=True, groups=groups)
    users = _note(fig, _users(groups, name), "Shares of")
    return ReportFigure("hrli_by_frequency", "Last-item reliance by the last item's training frequency",
                        "HRLI@1 over the test users whose last input item occurs 0, 1-4, 5-19 or 20+ times in the "
                        "training sequences (lines, mean over seeds), and the share of test users in each band (grey "
                        "bars): a last item never seen in training (band 0: its embedding, trained only as a negative, "
                        "points away from the prediction states) is rarely ranked first, so a data set with many such "
                        "users shows "
                        "a lower overall HRLI@1." + users, fig)


def _monitor_rows(run: RunRecord) -> list[dict[str, Any]]:
    """(epoch, monitor) of the epochs where the training monitor ran (``train.monitor_every``)."""
    return [{"epoch": r["epoch"], **r["monitor"]} for r in run.curve
            if isinstance(r.get("monitor"), dict) and isinstance(r.get("epoch"), int)]


Series = tuple[Callable[[dict[str, Any]], float | None], dict[str, Any]]  # (value of a monitor row, line looks)


def _epoch_figure(groups: dict[tuple[str, str], list[RunRecord]], series: list[Series], ylabel: str,
                  log: bool) -> tuple[Figure, set[int]]:
    """Training-monitor statistics against epoch: a panel per data set, per model a line per ``series`` (mean over
    seeds at the epochs every seed reached); ``log``: a log axis of rates. -> (figure, the indices of the series
    drawn somewhere)."""
    datasets, models = _datasets(groups), _models(groups)
    fig, axes = _new_figure(len(datasets))
    drawn_series: set[int] = set()
    for ax, dataset in zip(axes[0], datasets):
        if log:
            _log_rates(ax)
        keys = [(dataset, m) for m in models if (dataset, m) in groups]
        for drawn, key in enumerate(keys):
            for i, (fn, extra) in enumerate(series):
                per_run = [{r["epoch"]: fn(r) for r in _monitor_rows(run)} for run in groups[key]]
                per_run = [{e: v for e, v in d.items() if v is not None} for d in per_run]
                per_run = [d for d in per_run if d]
                if not per_run:
                    continue
                epochs = sorted(set.intersection(*(set(d) for d in per_run)))
                mean = [float(np.mean([d[e] for d in per_run])) for e in epochs]
                if log:
                    mean = [max(v, LOG_FLOOR) for v in mean]  # a zero rate sits on the axis
                ax.plot(epochs, mean, color=model_color(key[1]),
                        **{"marker": model_marker(key[1]), **_line_looks(drawn, len(keys)), **extra,
                           **_one_seed_face(len(per_run))})
                drawn_series.add(i)
        if not log:
            ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.set_title(drawn_name(dataset))
        ax.set_xlabel("training epoch")
    return fig, drawn_series


def _monitor_users(groups: dict[tuple[str, str], list[RunRecord]]) -> dict[str, str]:
    return _users(groups, lambda r: next((m.get("n_users") for m in _monitor_rows(r)), None))


@styled
def fig_reliance_curve(runs: list[RunRecord]) -> ReportFigure | None:
    """Last-item reliance against training epoch (the training monitor): HRLI@1 (solid) and HRL2I@1 (dashed) on a
    log axis, one line each per model (mean over seeds at the epochs every seed reached), a panel per data set;
    dotted where the monitor recorded it: HRLI@1 over the users whose last item occurs in training."""
    groups = groups_with(runs, _monitor_rows)
    if not groups:
        return None
    series: list[Series] = [
        (lambda row: number_at(row, "HRLI@1"), {}),
        (lambda row: number_at(row, "HRL2I@1"), {"linestyle": "--", "alpha": 0.7}),
        (lambda row: number_at(row, "HRLI@1_seen"), {"linestyle": ":", "marker": None}),
    ]
    fig, drawn = _epoch_figure(groups, series, "share of validation users, top-1 (log)", log=True)
    extra = [mpl().Line2D([], [], color="grey", label="HRLI@1: last input item ranked first"),
             mpl().Line2D([], [], color="grey", linestyle="--", label="HRL2I@1: second-to-last item")]
    if 2 in drawn:
        extra.append(mpl().Line2D([], [], color="grey", linestyle=":", label="HRLI@1 over last items seen in training"))
    _model_legend(fig, _models(groups), extra + spread_handles(groups, "none", hollow=_figure_hollow(fig)),
                  markers=True, groups=groups)
    users = _note(fig, _monitor_users(groups), "Each point rests on", split="validation")
    return ReportFigure("reliance_curve", "Last-item reliance during training: HRLI@1 and HRL2I@1",
                        "HRLI@1 (solid) and HRL2I@1 (dashed) of the current model on a fixed validation subsample, "
                        "every few epochs of training, mean over seeds at the epochs every seed reached, log scale "
                        "(dotted, where the monitor recorded it: HRLI@1 over the users whose last item occurs in "
                        "training): does reliance on the last item, and not on the one before it, appear as the "
                        "model converges, and for which models?" + users, fig)


@styled
def fig_mixing_curve(runs: list[RunRecord]) -> ReportFigure | None:
    """The +Res mixing ratio at the last position against training epoch (the training monitor), one line per
    model, a panel per data set."""
    groups = groups_with(runs, lambda r: any(number_at(m, "mixing_last", "+Res") is not None
                                             for m in _monitor_rows(r)))
    if not groups:
        return None
    fig, _ = _epoch_figure(groups, [(lambda row: number_at(row, "mixing_last", "+Res"), {})],
                           "mixing ratio at +Res (last)", log=False)
    _model_legend(fig, _models(groups), spread_handles(groups, "none", hollow=_figure_hollow(fig)), markers=True,
                  groups=groups)
    users = _note(fig, _monitor_users(groups), "Each point rests on", split="validation")
    return ReportFigure("mixing_curve", "Residual dominance during training: mixing ratio at +Res",
                        "The mixing ratio at +Res at the last position (pooled over layers) of the current model on "
                        "a fixed validation subsample, every few epochs of training, mean over seeds: is the "
                        "residual's dominance there from the first epochs, before the model relies on the last item?"
                        + users, fig)


def _recovery_rows(name: str) -> Callable[[RunRecord], list[dict[str, Any]]]:
    """The rows of a run's test Recovery(alpha) curve (the diagnostic ``name``'s file), by alpha."""
    def rows_of(run: RunRecord) -> list[dict[str, Any]]:
        test = run.diag(name).get("test", {})
        curve = test.get("curve", []) if isinstance(test, dict) else []
        return sorted((r for r in curve if isinstance(r, dict) and "alpha" in r), key=lambda r: float(r["alpha"]))
    return rows_of


@styled
def fig_recovery(runs: list[RunRecord], name: str) -> ReportFigure | None:
    """Recovery(alpha) on the test split, a panel per data set; the band alpha in 0.1-0.3 shaded (its price in
    accuracy: ``fig_alpha_accuracy``)."""
    rows_of = _recovery_rows(name)
    groups = groups_with(runs, rows_of)
    if not groups:
        return None
    fig = _curves_by_dataset(groups, rows_of, ("Recovery(α)", lambda row: number_at(row, RECOVERY_CURVE)),
                             decorate=lambda ax: ax.axvspan(0.1, 0.3, color="grey", alpha=0.12, linewidth=0),
                             extra=[mpl().Patch(color="grey", alpha=0.2, label="α in 0.1–0.3")])
    users = _note(fig, _users(groups, lambda run: _recovery_counts(run, name)), "Computed on")
    return ReportFigure(name, "Miss recovery: Recovery(α)",
                        "Recovery(α): the share of recoverable misses (targets that an earlier position ranked in "
                        "the top-10 but the final one missed) that the final position hits at residual scale α, mean "
                        "over seeds; what lowering α costs in HR@10 is the figure before." + users, fig)


def _recovery_counts(run: RunRecord, name: str) -> int | None:
    test = run.diag(name).get("test", {})
    n = test.get("n_users") if isinstance(test, dict) else None
    return n if isinstance(n, int) else run.diag(name).get("n_users")


def _per_position(run: RunRecord, name: str, layer: int) -> dict[str, Any] | None:
    entries = [e for e in run.diag(name).get("per_position", []) if isinstance(e, dict)]
    if not entries:
        return None
    layers = sorted(int(e.get("layer", 0)) for e in entries)
    want = layers[layer] if -len(layers) <= layer < len(layers) else layers[-1]
    return next(e for e in entries if int(e.get("layer", 0)) == want)


@styled
def fig_per_position(runs: list[RunRecord], name: str, layer: int = -1, max_offset: int = 50) -> ReportFigure | None:
    """Mixing ratio against distance from the last position, for one layer (default: the last), per stage."""
    groups = groups_with(runs, lambda r: _per_position(r, name, layer))
    if not groups:
        return None
    datasets, models = _datasets(groups), _models(groups)
    fig, axes = _new_figure(len(datasets))
    layer_names = set()
    stages_seen: list[str] = []
    for ax, dataset in zip(axes[0], datasets):
        drawn = 0
        for model in models:
            entries = [e for e in (_per_position(r, name, layer) for r in groups.get((dataset, model), [])) if e]
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
        single = [_model_name(m) for m in models if len(groups.get((dataset, m), [])) == 1]
        if single:  # lines without markers: the panel names the models that rest on one seed
            ax.text(0.98, 0.97, "one seed: " + ", ".join(single), transform=ax.transAxes, ha="right", va="top",
                    fontsize=5.5, color="#555555")
        ax.set_title(drawn_name(dataset))
        ax.set_xlabel("offset from the last position (0 = last)")
        ax.set_ylabel("mixing ratio")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    stage_handles = [mpl().Line2D([], [], color="grey", linestyle=STAGE_STYLES[s], label=s, **STAGE_LOOKS[s])
                     for s in stages_seen]
    _model_legend(fig, models, stage_handles, groups=groups)
    which = ", ".join(str(x) for x in sorted(layer_names))
    users = _note(fig, _users(groups, name), "Averaged over")
    return ReportFigure("mixing_per_position", f"Mixing ratio by position (layer {which})",
                        f"Mixing ratio of layer {which} at each position, counted back from the last one (0), per "
                        "stage (line style) and model (colour), mean over seeds: the gap between the solid Attn line "
                        "and the dashed +Res line is the context the residual swamps at that position (the wide pale "
                        "+Res line shows under the thin marked +LN line where the two coincide)." + users, fig)


# the report's figures that read no diagnostic's file (the training monitor's curves), after the diagnostics' figures
# (their records' ``figures``: resdom.records); each with its place among them
CURVE_FIGURES: tuple[tuple[str, Callable[[list[RunRecord]], ReportFigure | None], int], ...] = (
    ("reliance_curve", fig_reliance_curve, 110), ("mixing_curve", fig_mixing_curve, 120))
# drawn by all_figures where their data are; linked from the documents, not shown by report.html / report.md
EXTRA_FIGURE_KEYS = ("remedies",)


def _builders() -> list[tuple[str, Callable[[list[RunRecord]], ReportFigure | None]]]:
    """(key, build(runs)) of every figure report.html and report.md show, in their order: each registered
    diagnostic's figures (its record's ``figures``, a builder of ``(runs, name)``) and the training curves'."""
    placed: list[tuple[int, str, Callable[[list[RunRecord]], ReportFigure | None]]] = []
    for d in REGISTRY.values():
        for spec in d.figures:
            placed.append((spec.order, spec.key, functools.partial(resolve(spec.build), name=d.name)))
    placed += [(order, key, build) for key, build, order in CURVE_FIGURES]
    return [(key, build) for _, key, build in sorted(placed, key=lambda p: p[0])]


def figure_keys() -> tuple[str, ...]:
    """The keys of the figures report.html and report.md show, in their order (a section each, "no data" where a
    figure is not drawn)."""
    return tuple(key for key, _ in _builders())


def result_figure(name: str, data: dict[str, Any], model: str = "model", title: str = "") -> Figure:
    """The report's figure of one diagnostic result of one model, drawn from ``data`` (the result's ``to_dict()``).

    ``name``: a plot a diagnostic's record names (``plots``: shuffle, hrli, mixing (ratio by stage),
    mixing_per_position, alpha (its three statistics side by side), recovery); ``model``: the legend's label (and
    colour, for resdom's own model names); ``title``: the panel title.
    """
    plots = {plot: (d.name, build) for d in REGISTRY.values() for plot, build in d.plots.items()}
    if name not in plots:
        raise ResdomError(f"no figure named {name!r} (one of {', '.join(plots)})")
    kind, build = plots[name]
    record = RunRecord(path=Path("."), dataset=title, model=model, seed=None, protocol=None, diagnostics={kind: data})
    figure = resolve(build)([record], kind)
    if figure is None:
        raise ResdomError(f"{name}: the result holds nothing to plot")
    return cast("Figure", figure.figure)


def all_figures(runs: list[RunRecord]) -> list[ReportFigure]:
    """Every figure that the runs have data for, in report order. The standard figures show the models and their
    named variants (``sasrec-tts``); remedy variants, probes and training variants (``experiments.studied_variant``)
    only where nothing else ran: they are drawn in the remedies figure and the figures of their own blocks."""
    models = [r for r in runs if not studied_variant(r.model)] or runs
    figures = [build(models) for _, build in _builders()]
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
        def err(p: dict[str, Any], key: str) -> float:  # NaN: a point of one seed, drawn without an error bar
            return float(np.nan_to_num(p[key]))

        return (min(p["x"] - err(p, "xerr") for p in ps), max(p["x"] + err(p, "xerr") for p in ps),
                min(p["y"] - err(p, "yerr") for p in ps), max(p["y"] + err(p, "yerr") for p in ps))

    def close(ps: list[dict[str, Any]]) -> bool:
        lo_x, hi_x, lo_y, hi_y = box(ps)
        return bool(hi_x - lo_x < share * (x1 - x0) and hi_y - lo_y < share * (y1 - y0))

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


@styled
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
    fig, axes = _new_figure(len(panels), height=3.0, columns=2)
    for ax, (dataset, base) in zip(axes.flat, panels):
        curve, drawn = None, []
        if (dataset, base) in groups:
            x = _curve_stats(groups[(dataset, base)], _alpha_rows(ALPHA), lambda row: number_at(row, "HRLI@1"))
            y = _curve_stats(groups[(dataset, base)], _alpha_rows(ALPHA), lambda row: number_at(row, "NDCG@10"))
            if x is not None and y is not None and list(x[0]) == list(y[0]):
                curve = (x[1], y[1])
                ax.plot(*curve, "-", color="#999999", linewidth=1.4, marker=".", zorder=1,
                        label=f"{_model_name(base)}: inference α sweep")
                # label α = 1 (the trained model), 0 and 0.5, each only where it keeps clear of those before it
                # (15% of the curve's span on either axis): the points of α near 1 bunch together
                span_x, span_y = float(np.ptp(x[1])) or 1.0, float(np.ptp(y[1])) or 1.0
                placed: list[tuple[float, float]] = []
                for a, xi, yi in sorted(zip(x[0], x[1], y[1]), key=lambda p: (-p[0] if p[0] == 1 else p[0])):
                    if round(a * 10) % 5 == 0 and all(abs(xi - px) > 0.15 * span_x or abs(yi - py) > 0.15 * span_y
                                                      for px, py in placed):
                        ax.annotate(f"α={a:g}", (xi, yi), fontsize=7, color="#666666", textcoords="offset points",
                                    xytext=(4, 3))
                        placed.append((xi, yi))
        for i, label in enumerate(m for m in labels if base_of(m) == base):
            rs = points.get((dataset, label))
            if not rs:
                continue
            vals = [v for v in (run_values(r) for r in rs) if v["HRLI@1"] is not None and v["NDCG@10"] is not None]
            sx, sy = _stats([v["HRLI@1"] for v in vals]), _stats([v["NDCG@10"] for v in vals])
            if sx is None or sy is None:
                continue
            color = model_color(label) if label == base else mpl().colormaps["tab10"](i % 10)
            point = {"x": sx[0], "y": sy[0], "xerr": sx[1], "yerr": sy[1], "fmt": model_marker(base), "color": color,
                     "capsize": 2, "markersize": 4, "zorder": 3}
            ax.errorbar(**point, label=f"{label} (n={len(vals)})")
            drawn.append(point)
        ax.set_xlabel("HRLI@1 (reliance on the last item)")
        ax.set_ylabel("NDCG@10 (test)")
        name = drawn_name(dataset)
        ax.set_title(name if len({b for _, b in panels}) == 1 else f"{name}: {_model_name(base)}")
        several = any(np.isfinite(p["xerr"]) for p in drawn)  # some point of several seeds has error bars
        spread = [mpl().Line2D([], [], color="black", marker="|", markersize=8, linestyle="none",
                         label=f"error bar: {SPREAD}")] if several else []
        handles, _ = ax.get_legend_handles_labels()
        ax.legend(handles=handles + spread, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2,
                  frameon=False)  # below the panel: hides no point
        _zoom_on_points(ax, drawn, curve)
    users = _note(fig, _users(points, "hrli"), "Each point rests on")
    return ReportFigure("remedies", "Remedies: accuracy against last-item reliance",
                        "Test NDCG@10 against HRLI@1: each point is a training-time variant (mean over its n seeds, "
                        "error bars one standard deviation); "
                        "the grey curve is the base model's inference-time residual scaling: a variant above and to "
                        "the left of the curve buys lower reliance at less accuracy cost than lowering α after "
                        "training. Where variants land close to the base model, the inset (lower right) enlarges the "
                        "framed area." + users, fig)
