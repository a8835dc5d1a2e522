"""Every diagnostic, registered in one place: one ``Diagnostic`` record each, in ``REGISTRY`` (canonical order).

A record says how to compute the diagnostic (``compute``), what it returns (``result``: a class with ``to_dict``,
the JSON file ``RUN_DIR/diagnostics/<name>.json``, and ``to_frame``, its CSV table), whether it needs attention
blocks (``needs_attention``: a model without them, GRU4Rec, skips it), which of the ``DiagnoseOptions`` it reads
(``options``), which parts of the split it reads and reports, its CSV files (``frames``), its headline numbers in
``summary.json`` (``headline``) and its lines of the terminal summary (``lines``). The runner
(``diagnostics.runner``: ``run_all``, the one diagnose loop ``compute``, the summary), the options (``--what``),
the API (``resdom.diagnose``, ``Diagnosis``) and the CLI (``resdom diagnose``) take the list of diagnostics and
everything above from here, so adding a diagnostic is its own module (compute function, result class) and one
record here (``register`` adds one at run time, as the tests do). A new option of its own is a field of
``diagnostics.options.DiagnoseOptions`` (and, for the CLI, a flag in ``cli/diagnose_cmd.py``).

The shuffles' metrics, the sweep's HR@10 / NDCG@10 and recovery follow the split's evaluation setting
(``SplitData.filter_seen``); the last-item hit rates never filter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from resdom.data.sequences import SplitData, item_counts
from resdom.diagnostics.alpha import AlphaResult, alpha_sweep
from resdom.diagnostics.hrli import HRLIResult, last_item_hit_rates
from resdom.diagnostics.mixing import MixingResult, mixing_ratios
from resdom.diagnostics.recovery import RecoveryResult, miss_recovery
from resdom.diagnostics.shuffle import MODES, ShuffleResult, position_shuffle
from resdom.models.interface import Diagnosable
from resdom.names import STAGES, band_names

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from resdom.diagnostics.options import DiagnoseOptions


@dataclass
class Context:
    """What a diagnostic's ``compute`` is given besides the model and the data: the part of the split chosen
    (valid | test), the validated options, where to compute, whether to draw progress bars, and ``shared``: a dict
    kept across the diagnostics of one call on one model (the alpha sweep leaves its target ranks there, under
    ``alpha_ranks`` and the part's name, and recovery reuses them instead of ranking the split at every alpha
    again)."""

    part: str
    options: DiagnoseOptions
    device: str | torch.device | None = None
    progress: bool = False
    shared: dict[str, Any] = field(default_factory=dict)

    def common(self) -> dict[str, Any]:
        """The keywords every diagnostic function takes: ``batch_size``, ``device``, ``progress``."""
        return {"batch_size": self.options.batch_size, "device": self.device, "progress": self.progress}


Compute = Callable[[Diagnosable, SplitData, Context], Any]


def _to_frame(result: Any) -> pd.DataFrame:
    return result.to_frame()


def _nothing(data: Mapping[str, Any]) -> dict[str, Any]:
    return {}


def _no_lines(summary: Mapping[str, Any]) -> list[str]:
    return []


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic.

    ``name``: its name (``--what``, the file ``<name>.json``); ``title``: what it measures, in a few words;
    ``compute(model, split, ctx) -> result``; ``result``: the result class; ``needs_attention``: it reads attention
    blocks (skipped for a model without them); ``options``: the ``DiagnoseOptions`` fields it reads; ``reads``: the
    parts of the split it reads (empty: the part chosen); ``reports``: the part its result always describes,
    whatever part is chosen (None: the part chosen, set on the result as ``split``); ``frames``: CSV file suffix ->
    the result's table (``<name><suffix>.csv``); ``headline(json) -> {key: value}``: its entries of
    ``summary.json``; ``lines(summary) -> [str]``: its lines of the terminal summary.
    """

    name: str
    title: str
    compute: Compute
    result: type
    needs_attention: bool = False
    options: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    reports: str | None = None
    frames: Mapping[str, Callable[[Any], pd.DataFrame]] = field(default_factory=lambda: {"": _to_frame})
    headline: Callable[[Mapping[str, Any]], dict[str, Any]] = _nothing
    lines: Callable[[Mapping[str, Any]], list[str]] = _no_lines

    def parts(self, part: str) -> tuple[str, ...]:
        """The parts of the split it reads when ``part`` is chosen."""
        return self.reads or (part,)


# ------------------------------------------------------------------------------------------------ terminal


def fmt(v: Any) -> str:
    """A number for the terminal summary: 3 decimals, ``n/a`` for None."""
    return "   n/a" if v is None else f"{v:6.3f}" if isinstance(v, float) else str(v)


def ordered(keys: Any, canonical: Sequence[str]) -> list[str]:
    """``keys`` with those in ``canonical`` first, in its order."""
    keys = list(keys)
    return [k for k in canonical if k in keys] + [k for k in keys if k not in canonical]


# ------------------------------------------------------------------------------------------------- shuffle


def _shuffle(model: Diagnosable, split: SplitData, ctx: Context) -> ShuffleResult:
    return position_shuffle(model, getattr(split, ctx.part), seeds=list(ctx.options.seeds),
                            filter_seen=split.filter_seen, **ctx.common())


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
    for k in ordered(s["shuffle_NDCG@10_change"], MODES):
        v = s["shuffle_NDCG@10_change"][k]
        change = "      n/a" if v is None else f"{100 * v:+8.1f}%"
        lines.append(f"  {k:<12} {change:>9} {fmt(s['shuffle_jaccard@10'][k]):>11}")
    return lines


# ---------------------------------------------------------------------------------------------------- hrli


def _hrli(model: Diagnosable, split: SplitData, ctx: Context) -> HRLIResult:
    return last_item_hit_rates(model, getattr(split, ctx.part), ks=list(ctx.options.recency),
                               Ks=list(ctx.options.cutoffs), train_counts=item_counts(split.train, split.n_items),
                               **ctx.common())


HRLI_HEADLINE = ("HRLI@1", "HRL2I@1", "HRL3I@1", "HRLI@10")


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
            f"{b}: {fmt(bands[b]['HRLI@1'])} ({bands[b]['n_users']:,} users)" for b in order))
    return lines


# -------------------------------------------------------------------------------------------------- mixing


def _mixing(model: Diagnosable, split: SplitData, ctx: Context) -> MixingResult:
    return mixing_ratios(model, getattr(split, ctx.part), definition=ctx.options.definition,
                         per_head=ctx.options.per_head, **ctx.common())


def _mixing_per_position(result: MixingResult) -> pd.DataFrame:
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


# --------------------------------------------------------------------------------------------------- alpha


def _alpha(model: Diagnosable, split: SplitData, ctx: Context) -> AlphaResult:
    o = ctx.options
    res = alpha_sweep(model, getattr(split, ctx.part), alphas=list(o.alphas), layers=o.layer_list(),
                      definition=o.definition, filter_seen=split.filter_seen, **ctx.common())
    ctx.shared.setdefault("alpha_ranks", {})[ctx.part] = res.target_ranks  # recovery reuses them
    return res


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
    lines = ["residual-scaling sweep:",
             "  " + f"{'alpha':>5}" + "".join(f"{'r ' + st:>9}" for st in stages)
             + "".join(f"{k:>9}" for k in ALPHA_COLUMNS)]
    for r in rows:
        lines.append("  " + f"{r['alpha']:5.2f}" + "".join(f"{fmt(r['mixing_all'][st]):>9}" for st in stages)
                     + "".join(f"{fmt(r[k]):>9}" for k in ALPHA_COLUMNS))
    return lines


# ------------------------------------------------------------------------------------------------ recovery


def _recovery(model: Diagnosable, split: SplitData, ctx: Context) -> RecoveryResult:
    o = ctx.options
    return miss_recovery(model, split.valid, split.test, alphas=list(o.alphas), layers=o.layer_list(),
                         known_ranks=ctx.shared.get("alpha_ranks"), filter_seen=split.filter_seen, **ctx.common())


def _recovery_headline(d: Mapping[str, Any]) -> dict[str, Any]:
    t, K = d["test"], d["K"]
    return {"recovery": {
        "alpha_star": d["alpha_star"], "recoverable_share": t["recoverable_share"],
        "offset_shares": t["offset_shares"], "n_users": t["n_users"],
        "recovery_at_alpha_star": d["test_at_alpha_star"].get("recovery"),
        "HR@10_at_alpha_star": d["test_at_alpha_star"].get(f"HR@{K}"),
        "HR@10_at_alpha_1": d["test_at_alpha_star"].get(f"HR@{K}_at_alpha_1"),
        "max_recovery": max((r["recovery"] for r in t["curve"] if r["recovery"] is not None), default=None)}}


def _recovery_lines(s: Mapping[str, Any]) -> list[str]:
    if "recovery" not in s:
        return []
    r = s["recovery"]
    shares = ", ".join(f"{k} {fmt(v)}" for k, v in r["offset_shares"].items())
    return [f"miss recovery (test, {r['n_users']} users): recoverable {fmt(r['recoverable_share'])} ({shares})",
            f"  alpha* {r['alpha_star']} (chosen on valid): recovery {fmt(r['recovery_at_alpha_star'])}, "
            f"HR@10 {fmt(r['HR@10_at_alpha_star'])} vs {fmt(r['HR@10_at_alpha_1'])} at alpha 1; "
            f"max recovery over alphas {fmt(r['max_recovery'])}"]


# ------------------------------------------------------------------------------------------------ registry


REGISTRY: dict[str, Diagnostic] = {}


def register(diagnostic: Diagnostic) -> Diagnostic:
    """Add ``diagnostic`` after the registered ones (a name already taken is a ValueError); returns it."""
    if diagnostic.name in REGISTRY or diagnostic.name in ("all", "summary"):
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


for _diagnostic in (
    Diagnostic("shuffle", "position shuffles", _shuffle, ShuffleResult, options=("seeds",),
               headline=_shuffle_headline, lines=_shuffle_lines),
    Diagnostic("hrli", "last-item hit rates", _hrli, HRLIResult, options=("recency", "cutoffs"),
               headline=_hrli_headline, lines=_hrli_lines),
    Diagnostic("mixing", "mixing ratios", _mixing, MixingResult, needs_attention=True,
               options=("definition", "per_head"), frames={"": _to_frame, "_per_position": _mixing_per_position},
               headline=_mixing_headline, lines=_mixing_lines),
    Diagnostic("alpha", "alpha sweep", _alpha, AlphaResult, needs_attention=True,
               options=("alphas", "layers", "definition"), headline=_alpha_headline, lines=_alpha_lines),
    Diagnostic("recovery", "miss recovery", _recovery, RecoveryResult, options=("alphas", "layers"),
               reads=("valid", "test"), reports="test", headline=_recovery_headline, lines=_recovery_lines),
):
    register(_diagnostic)
