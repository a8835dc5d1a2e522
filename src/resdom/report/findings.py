"""The three findings that matter, in words with their numbers, per (data set, model) (means over seeds).

1. the mixing-ratio drop from Attn to +Res (pooled over layers, all positions);
2. HRLI@1 against HRL2I@1 (and HRLI@1 with the residual scaled to the sweep's lowest alpha);
3. what lowering alpha recovers: Recovery(alpha) in 0.1-0.3 and at alpha*, with the HR@10 it costs.

Each finding says how many test users its numbers rest on (the diagnostics files' ``n_users``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from resdom.records import RECOVERY, RECOVERY_CURVE
from resdom.report.collect import RunRecord
from resdom.report.figures import group_runs, model_label
from resdom.report.values import RECOVERY_ALPHAS, run_values


def _mean(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


FINDING_FILES = ("mixing", "hrli", RECOVERY)  # the diagnostics the three findings read, one each


def group_findings(runs: list[RunRecord]) -> dict[str, Any]:
    """Mean over ``runs`` of the numbers behind the three findings, and the test users they rest on (``n_*``,
    strings). Each finding's numbers average the runs that hold its diagnostic (``seeds_<file>``: how many), so
    that a seed without it never moves one side of a sentence and not the other; finding 3's HR@10 at α = 1 is
    that of the same runs (recovery.json's own where it holds one, else metrics.json's), beside HR@10 at α*."""
    vals = {id(r): run_values(r) for r in runs}
    held = {name: [r for r in runs if r.diag(name)] for name in FINDING_FILES}

    def mean(name: str, key: str) -> float | None:
        return _mean([vals[id(r)].get(key) for r in held[name]])

    out: dict[str, Any] = {f"seeds_{name}": len(rs) for name, rs in held.items()}
    out.update({k: mean("mixing", k) for k in ("mix_all_Attn", "mix_all_+Res", "mix_all_+LN")})
    out.update({k: mean("hrli", k) for k in ("HRLI@1", "HRL2I@1", "HRLI@10", "HRL2I@10", "unseen_share",
                                             "HRLI@1_seen")})
    out.update({k: mean(RECOVERY, k) for k in ("rec_share", "alpha_star", "HR@10_at_star",
                                               *(f"rec_at_{a}" for a in RECOVERY_ALPHAS))})
    out.update({f"seeds_rec_at_{a}": sum(vals[id(r)].get(f"rec_at_{a}") is not None for r in held[RECOVERY])
                for a in RECOVERY_ALPHAS})  # a seed swept on another --alphas grid lacks some
    out["HR@10"] = _mean([_hr_at_alpha_1(r, vals[id(r)]) for r in held[RECOVERY]])
    out["rec_star"] = _mean([_recovery_at_star(r) for r in held[RECOVERY]])
    out["alpha_swept"] = any(isinstance(row, dict) and isinstance(row.get("alpha"), (int, float)) and row["alpha"] < 1
                             for r in held[RECOVERY] for row in _test_value(r, "curve") or [])
    lowest = [_hrli_at_lowest_alpha(r) for r in held["hrli"]]
    alphas = {a for a, _ in filter(None, lowest)}
    if len(alphas) == 1 and all(lowest):  # one alpha shared by every run of the finding, else no mean to speak of
        out["alpha_low"] = alphas.pop()
        out["HRLI@1_at_alpha_low"] = _mean([v for _, v in filter(None, lowest)])
    out["n_mixing"] = _count(runs, lambda r: r.diag("mixing").get("n_users"))
    out["n_hrli"] = _count(runs, lambda r: r.diag("hrli").get("n_users"))
    out["n_recovery"] = _count(runs, lambda r: _test_value(r, "n_users"))
    out["n_recoverable"] = _count(runs, lambda r: _test_value(r, "recoverable"))
    return out


def _hr_at_alpha_1(run: RunRecord, values: dict[str, float | None]) -> float | None:
    """The run's test HR@10 at α = 1: recovery.json's (``test_at_alpha_star``'s ``HR@10_at_alpha_1``), else
    metrics.json's."""
    own = run.diag(RECOVERY).get("test_at_alpha_star")
    x = own.get("HR@10_at_alpha_1") if isinstance(own, dict) else None
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else values.get("HR@10")


def _test_value(run: RunRecord, key: str) -> Any:
    test = run.diag(RECOVERY).get("test")
    return test.get(key) if isinstance(test, dict) else None


def _count(runs: list[RunRecord], get: Callable[[RunRecord], Any]) -> str | None:
    """The number of test users behind a finding: ``"398"``, a range ``"390–398"`` where seeds differ, None when
    no run says."""
    ns = {int(n) for n in (get(r) for r in runs)
          if isinstance(n, (int, float)) and not isinstance(n, bool)}
    if not ns:
        return None
    return f"{min(ns):,}" if len(ns) == 1 else f"{min(ns):,}–{max(ns):,}"


def _hrli_at_lowest_alpha(run: RunRecord) -> tuple[float, float] | None:
    """(alpha, HRLI@1) at the lowest alpha of the run's sweep, when below 1."""
    rows = [r for r in run.diag("alpha").get("rows", []) if isinstance(r, dict)
            and isinstance(r.get("alpha"), (int, float)) and isinstance(r.get("HRLI@1"), (int, float))]
    if not rows:
        return None
    low = min(rows, key=lambda r: float(r["alpha"]))
    return (round(float(low["alpha"]), 6), float(low["HRLI@1"])) if float(low["alpha"]) < 1.0 else None


def _recovery_at_star(run: RunRecord) -> float | None:
    rec = run.diag(RECOVERY)
    star = rec.get("alpha_star")
    curve = rec.get("test", {}).get("curve", []) if isinstance(rec.get("test"), dict) else []
    for row in curve:
        if isinstance(star, (int, float)) and abs(float(row.get("alpha", -9)) - float(star)) < 1e-6:
            value = row.get(RECOVERY_CURVE)
            return float(value) if isinstance(value, (int, float)) else None
    return None


def findings_by_group(runs: list[RunRecord]) -> list[tuple[str, list[str]]]:
    """``(heading, sentences)`` per (data set, model) group: mixing drop, HRLI vs HRL2I, recovery. The heading says
    how many seeds hold a finding's diagnostic (``mean of n seeds``); a finding resting on fewer says so."""
    out = []
    for (dataset, model), rs in group_runs(runs).items():
        n = sum(1 for r in rs if any(r.diag(name) for name in FINDING_FILES))  # the seeds the findings average
        head = " ".join(f"{dataset} / {model_label(model)}".splitlines())  # one line: report.md's fence holds
        head += f" (mean of {n} seeds)" if n > 1 else ""
        out.append((head, _sentences(group_findings(rs), n)))
    return out


def finding_lines(runs: list[RunRecord]) -> list[str]:
    """The findings as printable lines: a heading per group, then its numbered sentences indented."""
    lines: list[str] = []
    for head, sentences in findings_by_group(runs):
        lines.append(f"{head}:")
        lines.extend("  " + s for s in sentences)
    return lines


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


def _alpha(x: float) -> str:
    """A residual scale as the sweep holds it (``0.25``, ``0.3``; a mean over seeds to 3 decimals, ``0.233``): one
    decimal printed ``--alphas ...,0.25,...``'s alpha* as 0.2, a scale that was never swept."""
    return f"{round(float(x), 3):g}"


def _of_seeds(f: dict[str, Any], key: str) -> str:
    """`` (n=k)`` after a number of finding 3 that averages fewer of its seeds than the others (a seed whose sweep,
    another ``--alphas`` grid, lacks that α), as a table cell says it."""
    k = f.get(f"seeds_{key}")
    return f" (n={k})" if k is not None and 0 < k < f.get("seeds_recovery", k) else ""


def _fewer(sentence: str, k: int, n: int) -> str:
    """``sentence`` (ending in a full stop) saying it averages ``k`` of the group's ``n`` seeds where ``k < n``."""
    return sentence if k >= n else f"{sentence[:-1]} (mean of {k} of the {n} seeds: the others lack it)."


def _sentences(f: dict[str, Any], n: int = 1) -> list[str]:
    """The three findings, worded by what the numbers show (they need not agree with the paper); ``n``: the seeds
    of the heading, which a finding resting on fewer names."""
    out = []
    attn, res = f["mix_all_Attn"], f["mix_all_+Res"]
    if attn is not None and res is not None:
        ln = f" and {_fmt(f['mix_all_+LN'])} at +LN" if f["mix_all_+LN"] is not None else ""
        if f.get("n_mixing"):
            ln += f" (all positions of {f['n_mixing']} test users)"
        verb = "drops" if res < attn else "rises"
        meaning = ("the residual swamps the context attention gathered" if res < 0.5 * attn
                   else "the residual dilutes the context only mildly" if res < attn
                   else "the residual does not dominate here")
        out.append(_fewer(f"1. Mixing ratio {verb} from {_fmt(attn)} at Attn to {_fmt(res)} at +Res{ln}: {meaning}.",
                          f.get("seeds_mixing", n), n))
    hrli, hrl2i, hrli10, hrl2i10 = f["HRLI@1"], f["HRL2I@1"], f["HRLI@10"], f["HRL2I@10"]
    if hrli is not None and hrl2i is not None:
        inner = [f"HRLI@10 = {_fmt(hrli10)} vs HRL2I@10 = {_fmt(hrl2i10)}"] if hrli10 is not None else []
        if f.get("n_hrli"):
            inner.append(f"shares of {f['n_hrli']} test users")
        at10 = f" ({'; '.join(inner)})" if inner else ""
        if hrli >= 0.1 and hrli > 2 * hrl2i:
            meaning = "the top-1 item is the last input item far more often than the second to last"
        elif hrli10 is not None and hrli10 >= 0.1 and hrli10 > 2 * (hrl2i10 or 0.0):
            meaning = "the last input item is rarely ranked first, but stays in the top-10 far more often than the " \
                      "second to last"
        elif hrli < 0.1 and hrl2i < 0.1:
            meaning = "neither recent input item is often ranked high"
        else:
            meaning = "the last input item is not singled out"
        low = ""
        if f.get("HRLI@1_at_alpha_low") is not None:
            low = f"; with the residual scaled to α = {f['alpha_low']:g} HRLI@1 is {_fmt(f['HRLI@1_at_alpha_low'])}"
        cold = ""
        if (f.get("unseen_share") or 0.0) >= 0.005 and f.get("HRLI@1_seen") is not None:
            cold = (f"; {_fmt(f['unseen_share'], pct=True)} of these users' last items never occur in training "
                    f"(HRLI@1 over the others: {_fmt(f['HRLI@1_seen'])})")
        out.append(_fewer(f"2. HRLI@1 = {_fmt(hrli)} vs HRL2I@1 = {_fmt(hrl2i)}{at10}: {meaning}{low}{cold}.",
                          f.get("seeds_hrli", n), n))
    if f["rec_share"] is not None:
        of = f"{f['n_recovery']} test users" if f.get("n_recovery") else "test users"
        count = f" ({f['n_recoverable']} users)" if f.get("n_recoverable") is not None else ""
        if f.get("alpha_swept"):
            these = f"of these {f['n_recoverable']}, " if f.get("n_recoverable") is not None else ""
            band = ", ".join(f"{_fmt(f[f'rec_at_{a}'], pct=True)} at α={a}" + _of_seeds(f, f"rec_at_{a}")
                             for a in RECOVERY_ALPHAS)
            star = "" if f["alpha_star"] is None else (
                f"; α* = {_alpha(f['alpha_star'])} (chosen on validation) recovers {_fmt(f['rec_star'], pct=True)}"
                f" with test HR@10 {_fmt(f['HR@10_at_star'])} vs {_fmt(f['HR@10'])} at α=1")
            what = f"{these}lowering α recovers {band}{star}"
        else:  # GRU4Rec: no residual stream, the sweep holds alpha = 1 only
            what = "no α below 1 was swept (the model has no residual to scale)"
        out.append(_fewer(f"3. Recoverable misses (an earlier position hits the top-10, the last one misses) = "
                          f"{_fmt(f['rec_share'], pct=True)} of {of}{count}; {what}.", f.get("seeds_recovery", n), n))
    if not out:
        out.append("No finding yet: no run of this group has its mixing, HRLI or recovery diagnostics (run "
                   "`resdom diagnose RUN_DIR`, then the report again).")
    return out
