"""One record per diagnostic, in one place (``REGISTRY``, canonical order): torch-free, so that the runner, the
options, the API, the CLI and the report all read the same record.

A ``Diagnostic`` record declares everything about a diagnostic: its name (``--what``, the JSON file
``RUN_DIR/diagnostics/<name>.json``), its title, how to compute it (``compute``), its result class (``result``),
whether it needs attention blocks, the options it reads, the parts of the split it reads and reports, its CSV files
(``frames``), its headline entries in ``summary.json`` and lines of the terminal summary, the numbers the report's
tables read from its JSON (``values``), its report table (``table``: title, caption, columns) and its figures
(``figures``: in the report, ``plots``: ``Diagnosis.plot``). Adding a diagnostic is its own module (the compute
function and result class) and one record here (``register`` adds one at run time, as the tests do).

The parts that need torch or matplotlib are named, not imported: ``compute``, ``result`` and the figure builders are
``"module:attribute"`` references (or the objects themselves), resolved on first use by ``resolve``, so importing
this module (and the report, which reads it) loads neither. A figure builder takes ``(runs, name)``: the report's run
records and the diagnostic's name, whose JSON it reads.

The shuffles' metrics, the sweep's HR@10 / NDCG@10 and recovery follow the split's evaluation setting
(``SplitData.filter_seen``); the last-item hit rates never filter.
"""

from __future__ import annotations

import importlib
import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from resdom.names import STAGES, band_names
from resdom.stored import number_at, seen_unseen

Ref = str | Callable[..., Any]  # "module:attribute", or the object itself
Values = Callable[[Mapping[str, Any]], dict[str, float | None]]


def resolve(ref: Any) -> Any:
    """The object a ``"module:attribute"`` reference names (imported on first use); any other value unchanged."""
    if not isinstance(ref, str):
        return ref
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Column:
    """A table column: ``key`` into the per-run values, a header ``label``, and a display ``kind``: ``ratio``
    (3 decimals), ``metric`` (4 decimals: HR@K, NDCG@K), ``pct`` (signed percent, 1 decimal), ``count``
    (integer), ``num`` (2 decimals), ``alpha`` (a residual scale: 2 decimals, 3 where the mean is a 3-decimal scale
    such as ``--alphas``' 0.125, which 2 printed as 0.12, never swept), ``days`` (whole days from 10 on, else 2
    decimals: a 0.45-day span is not 0), ``sci``, all as mean ± std; ``each`` (every
    seed's integer, in seed order: ``25 / 43 / 31``) and ``of`` (a 0/1 flag as ``2 of 3`` seeds)."""

    key: str
    label: str
    kind: str = "ratio"


@dataclass(frozen=True)
class TableSpec:
    """A diagnostic's table in the report (``<name>.md/.csv/.tex``, named after the diagnostic): ``title``,
    ``caption``, ``columns`` (keys of its ``values``); ``order``: its place among the report's tables (the tables
    of the diagnostics come first, lowest order first, then accuracy, training and the rest)."""

    title: str
    caption: str
    columns: tuple[Column, ...]
    order: int = 100


@dataclass(frozen=True)
class FigureSpec:
    """A report figure of a diagnostic: ``key`` (its file stem), ``build``: a reference to ``(runs, name) ->
    ReportFigure | None``; ``order``: its place among the report's figures."""

    key: str
    build: Ref
    order: int = 100


def _nothing(data: Mapping[str, Any]) -> dict[str, Any]:
    return {}


def _no_lines(summary: Mapping[str, Any]) -> list[str]:
    return []


def _no_values(data: Mapping[str, Any]) -> dict[str, float | None]:
    return {}


def _to_frame(result: Any) -> Any:
    return result.to_frame()


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic.

    ``name``: its name (``--what``, the file ``<name>.json``); ``title``: what it measures, in a few words;
    ``compute``: a reference to ``compute(model, split, ctx) -> result`` (``ctx``: a
    ``diagnostics.options.Context``); ``result``: a reference to the result class (``to_dict``: the JSON file;
    ``to_frame``: its table); ``needs_attention``: it reads attention blocks (skipped for a model without them);
    ``options``: the ``DiagnoseOptions`` fields it reads; ``reads``: the parts of the split it reads (empty: the part
    chosen); ``reports``: the part its result always describes, whatever part is chosen (None: the part chosen, set
    on the result as ``split``); ``frames``: CSV file suffix -> the result's table (``<name><suffix>.csv``);
    ``headline(json) -> {key: value}``: its entries of ``summary.json``; ``lines(summary) -> [str]``: its lines of the
    terminal summary; ``values(json) -> {key: number}``: the numbers the report's tables read from its file;
    ``table``: its report table (None: none); ``figures``: its report figures; ``plots``: plot name -> figure
    builder, for ``Diagnosis.plot`` (one result of one model).
    """

    name: str
    title: str
    compute: Ref
    result: Ref
    needs_attention: bool = False
    options: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    reports: str | None = None
    frames: Mapping[str, Callable[[Any], Any]] = field(default_factory=lambda: {"": _to_frame})
    headline: Callable[[Mapping[str, Any]], dict[str, Any]] = _nothing
    lines: Callable[[Mapping[str, Any]], list[str]] = _no_lines
    values: Values = _no_values
    table: TableSpec | None = None
    figures: tuple[FigureSpec, ...] = ()
    plots: Mapping[str, Ref] = field(default_factory=dict)

    def parts(self, part: str) -> tuple[str, ...]:
        """The parts of the split it reads when ``part`` is chosen."""
        return self.reads or (part,)


# ------------------------------------------------------------------------------------------------ registry


REGISTRY: dict[str, Diagnostic] = {}
RESERVED = ("all", "summary", "users")  # --what all; summary.json; users.npz (the per-user evidence)


def register(diagnostic: Diagnostic) -> Diagnostic:
    """Add ``diagnostic`` after the registered ones (a name already taken is a ValueError); returns it."""
    if diagnostic.name in REGISTRY or diagnostic.name in RESERVED:
        raise ValueError(f"a diagnostic named {diagnostic.name!r} is already registered or reserved")
    REGISTRY[diagnostic.name] = diagnostic
    return diagnostic


@contextmanager
def registered(diagnostic: Diagnostic) -> Iterator[Diagnostic]:
    """``register(diagnostic)`` for the duration of a ``with`` block (tests)."""
    register(diagnostic)
    try:
        yield diagnostic
    finally:
        REGISTRY.pop(diagnostic.name, None)


def diagnostic_names() -> tuple[str, ...]:
    """The names of the registered diagnostics, in canonical order (what ``--what all`` runs)."""
    return tuple(REGISTRY)


def get(name: str) -> Diagnostic:
    """The record of diagnostic ``name``; KeyError naming the registered ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown diagnostic {name!r} (one of {', '.join(REGISTRY)})") from None


# ------------------------------------------------------------------------------------------------ terminal


def fmt(v: Any) -> str:
    """A number for the terminal summary: 3 decimals, ``n/a`` for None."""
    return "   n/a" if v is None else f"{v:6.3f}" if isinstance(v, float) else str(v)


def counted(n: Any, noun: str = "user") -> str:
    """A count for the terminal: ``1 user``, ``12,345 users`` (as ``resdom data split`` counts them); ``noun``:
    ``test user``, ``session``, ``item``, ...; what is not a whole number (a hand-edited file's) as it is."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        return f"{n} {noun}s"
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def ordered(keys: Any, canonical: Sequence[str]) -> list[str]:
    """``keys`` with those in ``canonical`` first, in its order."""
    keys = list(keys)
    return [k for k in canonical if k in keys] + [k for k in keys if k not in canonical]


FIGURES = "resdom.report.figures"  # the module of the built-in diagnostics' figure builders


# ------------------------------------------------------------------------------------------------- shuffle


SHUFFLE_MODES: tuple[str, ...] = ("keep_last", "full", "last_only", "drop_last", "reverse")  # the perturbations
SHUFFLE_METRICS: tuple[str, ...] = ("HR@10", "NDCG@10")
SHUFFLE_SHOWN: tuple[str, ...] = ("keep_last", "full")  # the perturbations the tables show


def _shuffle_headline(d: Mapping[str, Any]) -> dict[str, Any]:
    return {"original": {k: d["original"].get(k) for k in ("HR@10", "NDCG@10")},
            "shuffle_NDCG@10_change": {k: p["relative_change"].get("NDCG@10") for k, p in d["perturbations"].items()},
            "shuffle_jaccard@10": {k: p["jaccard@10"] for k, p in d["perturbations"].items()}}


def _shuffle_lines(s: Mapping[str, Any]) -> list[str]:
    if "shuffle_NDCG@10_change" not in s:
        return []
    o = s["original"]
    lines = [f"shuffles (original HR@10 {fmt(o.get('HR@10'))}, NDCG@10 {fmt(o.get('NDCG@10'))}):",
             f"  {'perturbation':<12} {'dNDCG@10':>9} {'Jaccard@10':>11}"]
    for k in ordered(s["shuffle_NDCG@10_change"], SHUFFLE_MODES):
        v = s["shuffle_NDCG@10_change"][k]
        change = "      n/a" if v is None else f"{100 * v:+8.1f}%"
        lines.append(f"  {k:<12} {change:>9} {fmt(s['shuffle_jaccard@10'][k]):>11}")
    return lines


def shuffle_values(d: Mapping[str, Any]) -> dict[str, float | None]:
    """``shuffle.json`` -> ``shuf_orig_<metric>``, ``shuf_<mode>_<metric>``, ``shuf_<mode>_rel_<metric>`` (relative
    change) and ``shuf_<mode>_jacc`` (Jaccard@10 with the original top-10)."""
    v: dict[str, float | None] = {}
    for m in SHUFFLE_METRICS:
        v[f"shuf_orig_{m}"] = number_at(d, "original", m)
        for p in SHUFFLE_SHOWN:
            v[f"shuf_{p}_{m}"] = number_at(d, "perturbations", p, "metrics", m)
            v[f"shuf_{p}_rel_{m}"] = number_at(d, "perturbations", p, "relative_change", m)
    for p in SHUFFLE_SHOWN:
        v[f"shuf_{p}_jacc"] = number_at(d, "perturbations", p, "jaccard@10")
    return v


SHUFFLE_TABLE = TableSpec(
    "Position shuffle",
    "Test NDCG@10 with the original order, with all items but the last permuted (keep_last) and with all "
    "items permuted (full), and the relative change of NDCG@10 and HR@10.",
    (Column("shuf_orig_NDCG@10", "NDCG@10", "metric"), Column("shuf_keep_last_NDCG@10", "keep_last", "metric"),
     Column("shuf_full_NDCG@10", "full", "metric"), Column("shuf_keep_last_rel_NDCG@10", "ΔNDCG keep_last", "pct"),
     Column("shuf_full_rel_NDCG@10", "ΔNDCG full", "pct"), Column("shuf_keep_last_rel_HR@10", "ΔHR keep_last", "pct"),
     Column("shuf_full_rel_HR@10", "ΔHR full", "pct"), Column("shuf_full_jacc", "Jaccard@10 full")),
    order=30)


# ---------------------------------------------------------------------------------------------------- hrli


HRLI_HEADLINE = ("HRLI@1", "HRL2I@1", "HRL3I@1", "HRLI@10")
HRLI_KEYS: tuple[str, ...] = ("HRLI@1", "HRL2I@1", "HRL3I@1", "HRLI@10", "HRL2I@10")  # the rates the report reads


def _hrli_headline(d: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: d["values"].get(k) for k in HRLI_HEADLINE}
    if isinstance(d.get("by_frequency"), dict):
        out["HRLI@1_by_frequency"] = {b: {"n_users": v["n_users"], "HRLI@1": v["values"].get("HRLI@1")}
                                      for b, v in d["by_frequency"].items()}
    return out


def _hrli_lines(s: Mapping[str, Any]) -> list[str]:
    if "HRLI@1" not in s:
        return []
    lines = ["last-item hit rates (unfiltered): " + "  ".join(f"{k} {fmt(s.get(k))}" for k in HRLI_HEADLINE)]
    if "HRLI@1_by_frequency" in s:
        bands = s["HRLI@1_by_frequency"]
        order = [b for b in band_names() if b in bands] + [b for b in bands if b not in band_names()]
        lines.append("  HRLI@1 by the last item's occurrences in training: " + "  ".join(
            f"{b}: {fmt(bands[b]['HRLI@1'])} ({counted(bands[b]['n_users'])})" for b in order))
    return lines


def hrli_values(d: Mapping[str, Any]) -> dict[str, float | None]:
    """``hrli.json`` -> the rates of ``HRLI_KEYS``, and where the bands are known the share of users whose last item
    never occurs in training (``unseen_share``) and HRLI@1 over those (``HRLI@1_unseen``) and the others
    (``HRLI@1_seen``)."""
    return {**{k: number_at(d, "values", k) for k in HRLI_KEYS}, **seen_unseen(dict(d))}


HRLI_TABLE = TableSpec(
    "Last-item hit rates",
    "Share of test users whose most recent (HRLI) or second most recent (HRL2I) input item is in the "
    "unfiltered top-K; then the share of test users whose last input item never occurs in the training "
    "sequences (unseen), and HRLI@1 over the users whose last item was seen in training and over the others.",
    (*(Column(k, k) for k in ("HRLI@1", "HRL2I@1", "HRLI@10", "HRL2I@10")),
     Column("unseen_share", "Unseen last"), Column("HRLI@1_seen", "HRLI@1 (seen)"),
     Column("HRLI@1_unseen", "HRLI@1 (unseen)")),
    order=20)


# -------------------------------------------------------------------------------------------------- mixing


def _mixing_per_position(result: Any) -> Any:
    return result.to_frame(per_position=True)


def _mixing_headline(d: Mapping[str, Any]) -> dict[str, Any]:
    out = {"mixing_definition": d["definition"], "mixing_pooled_all": d["pooled"]["all"],
           "mixing_pooled_last": d["pooled"]["last"]}
    if "frequency_branch" in d:
        out["frequency_share_all"] = d["frequency_branch"]["pooled"]["all"]["frequency_share"]
    return out


def _mixing_lines(s: Mapping[str, Any]) -> list[str]:
    if "mixing_pooled_all" not in s:
        return []
    stages = ordered(s["mixing_pooled_all"], STAGES)
    lines = [f"mixing ratio ({s.get('mixing_definition')}), pooled over layers:",
             "  " + " " * 6 + "".join(f"{st:>8}" for st in stages)]
    for scope in ("all", "last"):
        vals = s[f"mixing_pooled_{scope}"]
        lines.append(f"  {scope:<6}" + "".join(f"{fmt(vals[st]):>8}" for st in stages))
    if "frequency_share_all" in s:
        lines.append(f"  frequency-branch share of the mixed norm: {fmt(s['frequency_share_all'])}")
    return lines


def mixing_values(d: Mapping[str, Any]) -> dict[str, float | None]:
    """``mixing.json`` -> ``mix_<scope>_<stage>``: the pooled ratios at all real positions and at the last one."""
    return {f"mix_{w}_{st}": number_at(d, "pooled", w, st) for w in ("all", "last") for st in STAGES}


MIXING_TABLE = TableSpec(
    "Mixing ratio by stage",
    "Share of the attention-block output that comes from other positions (spec §4, norm of sums), pooled over "
    "layers, at all real positions and at the last one; 1 = all context, 0 = all self.",
    tuple(Column(f"mix_{w}_{s}", f"{s} ({w})") for w in ("all", "last") for s in ("Attn", "+Res", "+LN")),
    order=10)


# --------------------------------------------------------------------------------------------------- alpha


ALPHA = "alpha"  # the name, for the modules that read its results (the remedies figure)
ALPHA_COLUMNS = ("HRLI@1", "HRL2I@1", "HR@10", "NDCG@10")


def _alpha_headline(d: Mapping[str, Any]) -> dict[str, Any]:
    if not d.get("rows"):
        return {}
    return {"alpha_sweep": [{**{k: r.get(k) for k in ("alpha", *ALPHA_COLUMNS)}, "mixing_all": r["mixing_all"]}
                            for r in d["rows"]]}


def _alpha_lines(s: Mapping[str, Any]) -> list[str]:
    if "alpha_sweep" not in s:
        return []
    rows = s["alpha_sweep"]
    stages = ordered(rows[0]["mixing_all"], STAGES) if rows else []
    # each alpha as swept (0.125, 0.005), as recovery's alpha* names it: two decimals printed 0.12 and 0.01
    alphas = [f"{r['alpha']:.2f}" if round(r["alpha"], 2) == r["alpha"] else f"{r['alpha']:g}" for r in rows]
    width = max([5, *map(len, alphas)])
    lines = ["residual-scaling sweep:",
             "  " + f"{'alpha':>{width}}" + "".join(f"{'r ' + st:>9}" for st in stages)
             + "".join(f"{k:>9}" for k in ALPHA_COLUMNS)]
    for a, r in zip(alphas, rows, strict=True):
        lines.append("  " + f"{a:>{width}}" + "".join(f"{fmt(r['mixing_all'][st]):>9}" for st in stages)
                     + "".join(f"{fmt(r[k]):>9}" for k in ALPHA_COLUMNS))
    return lines


def alpha_values(d: Mapping[str, Any]) -> dict[str, float | None]:
    """``alpha.json`` -> ``trained_scale``: the residual scale trained into the blocks (per layer: a number, or one
    per channel; remedy variants only), its mean over layers and channels (None where the file has none)."""
    scale = d.get("trained_scale")
    flat = [float(x) for layer in scale or [] for x in (layer if isinstance(layer, list) else [layer])]
    return {"trained_scale": sum(flat) / len(flat) if flat else None}


# ------------------------------------------------------------------------------------------------ recovery


RECOVERY = "recovery"  # the name, for the modules that read its results (the per-user evidence, findings)
RECOVERY_ALPHAS: tuple[float, ...] = (0.1, 0.2, 0.3)  # the alphas the paper's recovery table reports
RECOVERY_CURVE = "recovery"  # a recovery curve row's key of Recovery(alpha) (recovery.json "test" "curve")


def select_alpha(curve: list[dict[str, float]], K: int = 10, eps: float = 0.01) -> float:
    """alpha* of a Recovery(alpha) curve (rows ``{"alpha", "recovery", "HR@K"}``), the paper's rule: among the alphas
    with HR@K(alpha) >= (1 - eps) HR@K(1) (the HR guard), the highest recovery; over the alphas in increasing
    order the first one reaching it wins, so ties go to the smaller alpha. An undefined recovery (empty
    recoverable set: NaN / None) counts as 0, so with nothing recoverable alpha* is the smallest alpha that passes
    the guard. alpha = 1 always passes its own guard; 1 is returned only where nothing passes (HR@K(1) undefined).
    (Here, with the recovery record, torch-free, so that a stored recovery.json's alpha* can be checked against its
    own curve: ``older_reading``; ``diagnostics.recovery`` selects with it.)
    """
    base = [row for row in curve if row["alpha"] == 1.0]
    if not base:
        raise ValueError("the recovery curve needs alpha = 1.0 (the HR guard's reference)")
    floor = (1.0 - eps) * base[0][f"HR@{K}"]
    best, best_rec = 1.0, -math.inf
    for row in sorted(curve, key=lambda r: r["alpha"]):
        rec = row[RECOVERY_CURVE]
        rec = 0.0 if rec is None or not math.isfinite(rec) else float(rec)
        if row[f"HR@{K}"] >= floor and rec > best_rec:  # strict: an equal recovery later (larger alpha) loses
            best, best_rec = row["alpha"], rec
    return best


def older_reading(name: str, data: dict[str, Any], file: str, readout: Any = None) -> str | None:
    """Why a diagnostic's JSON ``data`` (``name``.json, named ``file``) holds a number this resdom defines
    otherwise, written by an older resdom and read now with the new meaning; None where it holds none. Two such
    changes leave a trace in the file: recovery's alpha* by the older tie rule (to the larger alpha; before
    2026-12-02), which its own validation curve selects otherwise now, and recovery's offsets of a model with a
    query token (``readout`` "query") read from raw item columns (before 2026-12-07: no ``offsets_read``)."""
    if name != RECOVERY:
        return None
    again = "; run `resdom diagnose RUN --what recovery` again for the current reading"
    valid = data.get("valid")
    try:
        chosen = select_alpha(valid["curve"], int(data.get("K", 10)), float(data.get("eps", 0.01))) \
            if isinstance(valid, dict) else None
    except (KeyError, TypeError, ValueError):
        chosen = None  # no curve to check it against (metrics_problem checks the numbers)
    star = data.get("alpha_star")
    if chosen is not None and isinstance(star, (int, float)) and not math.isclose(chosen, star):
        return (f"{file}: alpha* {star} is not what its validation curve selects by the current tie rule "
                f"({chosen}): written by a resdom before 2026-12-02, whose ties went to the larger alpha{again}")
    if readout == "query" and "offsets_read" not in data:
        return (f"{file}: a query-token model's offsets read from raw item columns, one column late (a resdom "
                f"before 2026-12-07){again}")
    return None


def _recovery_headline(d: Mapping[str, Any]) -> dict[str, Any]:
    t, K = d["test"], d["K"]
    return {RECOVERY: {
        "alpha_star": d["alpha_star"], "recoverable_share": t["recoverable_share"],
        "offset_shares": t["offset_shares"], "n_users": t["n_users"],
        "recovery_at_alpha_star": d["test_at_alpha_star"].get(RECOVERY_CURVE),
        "HR@10_at_alpha_star": d["test_at_alpha_star"].get(f"HR@{K}"),
        "HR@10_at_alpha_1": d["test_at_alpha_star"].get(f"HR@{K}_at_alpha_1"),
        "max_recovery": max((r[RECOVERY_CURVE] for r in t["curve"] if r[RECOVERY_CURVE] is not None), default=None)}}


def _recovery_lines(s: Mapping[str, Any]) -> list[str]:
    if RECOVERY not in s:
        return []
    r = s[RECOVERY]
    shares = ", ".join(f"{k} {fmt(v)}" for k, v in r["offset_shares"].items())
    return [f"miss recovery (test, {counted(r['n_users'])}): recoverable {fmt(r['recoverable_share'])} "
            f"({shares})",
            f"  alpha* {r['alpha_star']} (chosen on valid): recovery {fmt(r['recovery_at_alpha_star'])}, "
            f"HR@10 {fmt(r['HR@10_at_alpha_star'])} vs {fmt(r['HR@10_at_alpha_1'])} at alpha 1; "
            f"max recovery over alphas {fmt(r['max_recovery'])}"]


def recovery_values(d: Mapping[str, Any]) -> dict[str, float | None]:
    """``recovery.json`` -> ``rec_share`` (recoverable share of test users), ``rec_L-k`` per offset,
    ``rec_at_<alpha>`` (Recovery at each of ``RECOVERY_ALPHAS``), ``alpha_star`` and ``HR@10_at_star``."""
    v: dict[str, float | None] = {"rec_share": number_at(d, "test", "recoverable_share")}
    for off in ("L-1", "L-2", "L-3"):
        v[f"rec_{off}"] = number_at(d, "test", "offset_shares", off)
    curve = d.get("test", {}).get("curve", []) if isinstance(d.get("test"), dict) else []
    at = {round(float(row["alpha"]), 6): row for row in curve
          if isinstance(row, dict) and isinstance(row.get("alpha"), (int, float))}
    for a in RECOVERY_ALPHAS:
        v[f"rec_at_{a}"] = number_at(at.get(round(a, 6)), RECOVERY_CURVE)
    v["alpha_star"] = number_at(d, "alpha_star")
    v["HR@10_at_star"] = number_at(d, "test_at_alpha_star", "HR@10")
    return v


RECOVERY_TABLE = TableSpec(
    "Miss recovery",
    "Recoverable misses (final position misses the top-10, position L-k hits) as a share of test users, per "
    "offset, and Recovery(alpha) = share of the recoverable set hit at residual scale alpha.",
    (Column("rec_share", "Recoverable"), Column("rec_L-1", "L-1"), Column("rec_L-2", "L-2"), Column("rec_L-3", "L-3"),
     *(Column(f"rec_at_{a}", f"Rec(α={a})") for a in RECOVERY_ALPHAS),
     Column("alpha_star", "α*", "alpha"), Column("HR@10_at_star", "HR@10 at α*", "metric")),
    order=40)


# --------------------------------------------------------------------------------------------- the records


COMPUTE = "resdom.diagnostics.registry"  # the module of the built-in diagnostics' compute functions

for _diagnostic in (
    Diagnostic("shuffle", "position shuffles", f"{COMPUTE}:compute_shuffle",
               "resdom.diagnostics.shuffle:ShuffleResult", options=("seeds",),
               headline=_shuffle_headline, lines=_shuffle_lines, values=shuffle_values, table=SHUFFLE_TABLE,
               figures=(FigureSpec("shuffle", f"{FIGURES}:fig_shuffle", 50),),
               plots={"shuffle": f"{FIGURES}:fig_shuffle"}),
    Diagnostic("hrli", "last-item hit rates", f"{COMPUTE}:compute_hrli",
               "resdom.diagnostics.hrli:HRLIResult", options=("recency", "cutoffs"),
               headline=_hrli_headline, lines=_hrli_lines, values=hrli_values, table=HRLI_TABLE,
               figures=(FigureSpec("hrli", f"{FIGURES}:fig_hrli", 60),
                        FigureSpec("hrli_by_model", f"{FIGURES}:fig_reliance_by_model", 70),
                        FigureSpec("hrli_by_frequency", f"{FIGURES}:fig_hrli_by_frequency", 80)),
               plots={"hrli": f"{FIGURES}:fig_hrli"}),
    Diagnostic("mixing", "mixing ratios", f"{COMPUTE}:compute_mixing",
               "resdom.diagnostics.mixing:MixingResult", needs_attention=True, options=("definition", "per_head"),
               frames={"": _to_frame, "_per_position": _mixing_per_position},
               headline=_mixing_headline, lines=_mixing_lines, values=mixing_values, table=MIXING_TABLE,
               figures=(FigureSpec("mixing_by_stage", f"{FIGURES}:fig_mixing_stages", 10),
                        FigureSpec("mixing_per_position", f"{FIGURES}:fig_per_position", 100)),
               plots={"mixing": f"{FIGURES}:fig_mixing_stages",
                      "mixing_per_position": f"{FIGURES}:fig_per_position"}),
    Diagnostic(ALPHA, "alpha sweep", f"{COMPUTE}:compute_alpha",
               "resdom.diagnostics.alpha:AlphaResult", needs_attention=True,
               options=("alphas", "layers", "definition"),
               headline=_alpha_headline, lines=_alpha_lines, values=alpha_values,
               figures=(FigureSpec("alpha_mixing", f"{FIGURES}:fig_alpha_mixing", 20),
                        FigureSpec("alpha_hrli", f"{FIGURES}:fig_alpha_hrli", 30),
                        FigureSpec("alpha_accuracy", f"{FIGURES}:fig_alpha_accuracy", 40)),
               plots={ALPHA: f"{FIGURES}:fig_alpha_sweep"}),
    Diagnostic(RECOVERY, "miss recovery", f"{COMPUTE}:compute_recovery",
               "resdom.diagnostics.recovery:RecoveryResult", options=("alphas", "layers"),
               reads=("valid", "test"), reports="test",
               headline=_recovery_headline, lines=_recovery_lines, values=recovery_values, table=RECOVERY_TABLE,
               figures=(FigureSpec(RECOVERY, f"{FIGURES}:fig_recovery", 90),),
               plots={RECOVERY: f"{FIGURES}:fig_recovery"}),
):
    register(_diagnostic)
