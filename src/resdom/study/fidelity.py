"""The paper side by side: its published numbers beside resdom's results store (docs/results.md, "Fidelity").

A pure function of the stored JSON (no torch). For each data set the paper reports and the store holds, the
SASRec cells' (``sasrec``, the paper's GTS SASRec) numbers over seeds beside the published ones:

- mixing ratios (norm of sums, every position, pooled over layers' mean: ``mixing.json`` ``pooled.all``) at
  Attn / +Res / +LN: the mean over seeds with a t interval over seeds (95%; none from one seed);
- HRLI@1 (``hrli.json``): the pooled proportion over seeds with its Wilson interval (95%), widened to the t
  interval over the seeds' own proportions where that reaches further (``pooled_proportion``);
- the largest recovery over the alpha sweep (``recovery.json``, test curve): pooled recovered / recoverable
  users over seeds with the same interval.

A published value outside resdom's interval is flagged. Since each published number is one run, the block also sets
it against the 95% prediction interval of one more resdom run (``stats.prediction_interval`` over the seeds' own
values: mixing ratios, HRLI@1 rates, recovery rates; two seeds or more): ``single_run_sentence``. ``ml-1m-part``
(2,999 of ML-1M's 6,040 users) is labelled not comparable. The paper's data sets no comparable cell covers are
listed with the published values only ("not held here"). ``fidelity_block(runs)`` is the ``fidelity`` block of
docs/results.md (``study.document_blocks``), read from ``report.collect`` records (results of another checkpoint
left out); ``fidelity_rows(store)`` reads a store folder directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resdom.errors import ResdomError
from resdom.records import RECOVERY, RECOVERY_CURVE
from resdom.report.collect import RunRecord
from resdom.report.markdown import markdown_lines, markdown_table
from resdom.report.stats import pooled_interval, prediction_interval, t_interval

# The reference paper's published SASRec numbers (Kozaki et al., RecSys 2026): mixing ratios (norm of sums)
# Attn / +Res / +LN per data set; HRLI@1 read from its figure (approximate); residual scaling recovers "up to
# about 46%" of final-position misses (ML-1M about 28%).
PAPER_MIXING: dict[str, tuple[float, float, float]] = {
    "Beauty": (0.776, 0.119, 0.119), "Sports": (0.775, 0.126, 0.122), "Toys": (0.772, 0.123, 0.123),
    "Video": (0.798, 0.169, 0.169), "ML-1M": (0.856, 0.395, 0.386), "Diginetica": (0.721, 0.150, 0.149),
    "Steam": (0.794, 0.317, 0.276), "BeerAdvocate": (0.959, 0.301, 0.287), "Zvuk": (0.941, 0.267, 0.265),
}
PAPER_HRLI1: dict[str, float] = {"Beauty": 0.78, "Sports": 0.91, "Toys": 0.82, "ML-1M": 0.50}
PAPER_RECOVERY_MAX: dict[str, float] = {"ML-1M": 0.28}
PAPER_RECOVERY_UP_TO = 0.46
# resdom data set -> (the paper's data set, comparable); the -itemties sets are the same data with same-day items in
# the review file's order, the order time-to-split (and so the paper's code) keeps (docs/spec.md §1)
DATASETS: dict[str, tuple[str, bool]] = {
    "beauty-ts": ("Beauty", True), "beauty-ts-itemties": ("Beauty", True), "sports-ts": ("Sports", True),
    "sports-ts-itemties": ("Sports", True), "toys-ts": ("Toys", True),
    "video-ts": ("Video", True), "ml-1m-part": ("ML-1M", False), "ml-1m": ("ML-1M", True),
    "diginetica": ("Diginetica", True), "steam": ("Steam", True), "beeradvocate": ("BeerAdvocate", True),
    "zvuk": ("Zvuk", True),
}
NOT_COMPARABLE: dict[str, str] = {"ml-1m-part": "a 2,999-user part of ML-1M"}
STAGES = ("Attn", "+Res", "+LN")
QUANTITY = {"Attn": "Attn", "+Res": "+Res", "+LN": "+LN", "HRLI@1": "HRLI@1", "recovery_max": "largest recovery"}


@dataclass(frozen=True)
class Estimate:
    """A value with its 95% interval (None: no interval, e.g. one seed) and the number of seeds behind it."""

    value: float
    lo: float | None
    hi: float | None
    seeds: int

    def covers(self, x: float) -> bool | None:
        return None if self.lo is None or self.hi is None else self.lo <= x <= self.hi

    def text(self, digits: int = 3) -> str:
        f = f"{{:.{digits}f}}"
        ci = "" if self.lo is None else f" [{f.format(self.lo)}, {f.format(self.hi)}]"
        return f"{f.format(self.value)}{ci}"


def mean_t(values: list[float]) -> Estimate:
    """Mean over seeds with a two-sided 95% t interval (none from one seed)."""
    return Estimate(*t_interval(values), len(values))


def pooled_proportion(counts: list[tuple[int, int]]) -> Estimate:
    """Successes / trials pooled over seeds, with ``stats.pooled_interval`` (Wilson's of the pooled counts, widened
    to the t interval over the seeds' own proportions where that reaches further)."""
    k, n = sum(c for c, _ in counts), sum(t for _, t in counts)
    return Estimate(k / n, *pooled_interval(counts), len(counts))


def read_cell(cell: Path) -> dict[str, Any] | None:
    """The numbers the fidelity table uses from one store cell (None where a diagnostic is missing)."""
    diag = cell / "diagnostics"
    try:
        mixing = json.loads((diag / "mixing.json").read_text(encoding="utf-8"))
        hrli = json.loads((diag / "hrli.json").read_text(encoding="utf-8"))
        recovery = json.loads((diag / "recovery.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return cell_numbers(mixing, hrli, recovery)


def cell_numbers(mixing: dict[str, Any], hrli: dict[str, Any], recovery: dict[str, Any]) -> dict[str, Any] | None:
    """The fidelity numbers of one cell from its ``mixing``, ``hrli`` and ``recovery`` JSON (None where one is empty):
    ``mixing`` {stage: pooled ratio over all positions}, ``hrli1`` (users whose last item ranks first, users) and
    ``recovery_max`` (recovered users at the best α of the test curve, recoverable users)."""
    if not mixing or not hrli or not recovery:
        return None
    pooled = mixing["pooled"]["all"] if isinstance(mixing.get("pooled"), dict) else _mean_layers(mixing)
    n = int(hrli["n_users"])
    curve = recovery["test"]["curve"]
    recoverable = int(recovery["test"]["recoverable"])
    # an empty recoverable set has no Recovery (null at every alpha): no recovery number, the cell's other ones kept
    best = max((float(p[RECOVERY_CURVE]) for p in curve if p[RECOVERY_CURVE] is not None), default=0.0)
    at_star = recovery.get("test_at_alpha_star")  # alpha chosen on the validation users, as the paper chooses it
    star = None if not at_star or at_star[RECOVERY_CURVE] is None else (
        round(float(at_star[RECOVERY_CURVE]) * recoverable), recoverable, float(recovery["alpha_star"]))
    return {"mixing": {s: float(pooled[s]) for s in STAGES},
            "hrli1": (round(float(hrli["values"]["HRLI@1"]) * n), n),
            "recovery_max": (round(best * recoverable), recoverable), "recovery_star": star}


def _mean_layers(mixing: dict[str, Any]) -> dict[str, float]:
    layers = [layer["all"] for layer in mixing["layers"]]
    return {s: sum(layer[s] for layer in layers) / len(layers) for s in STAGES}


def fidelity_rows(store: Path, model: str = "sasrec") -> list[dict[str, Any]]:
    """One row per data set the paper reports that the store holds ``model`` cells of: resdom's estimates beside
    the published values, the differences, and whether the published value lies inside resdom's interval."""
    cells = {name: [c for c in (read_cell(p) for p in sorted((store / name / model).glob("seed*"))) if c is not None]
             for name in DATASETS}
    return _rows(cells)


def fidelity_rows_runs(runs: list[RunRecord], model: str = "sasrec") -> list[dict[str, Any]]:
    """``fidelity_rows`` from read runs (``report.collect``: results of another checkpoint already left out): the
    runs labelled ``model`` of each data set the paper reports, in seed order."""
    cells: dict[str, list[dict[str, Any]]] = {}
    for name in DATASETS:
        mine = sorted((r for r in runs if r.dataset == name and r.model == model), key=lambda r: r.seed or 0)
        numbers = (_numbers_of(r) for r in mine)
        cells[name] = [c for c in numbers if c is not None]
    return _rows(cells)


def _numbers_of(run: RunRecord) -> dict[str, Any] | None:
    try:
        return cell_numbers(run.diag("mixing"), run.diag("hrli"), run.diag(RECOVERY))
    except (KeyError, TypeError, ValueError) as e:
        raise ResdomError(f"{run.path}: a diagnostic lacks a number the fidelity table needs "
                          f"({type(e).__name__}: {e})") from None


def _rows(cells_by_dataset: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for name, cells in cells_by_dataset.items():
        if not cells:
            continue
        paper, comparable = DATASETS[name]
        row: dict[str, Any] = {"dataset": name, "paper_dataset": paper, "comparable": comparable,
                               "seeds": len(cells), "runs": {}}  # runs: each quantity's value per seed
        for i, stage in enumerate(STAGES):
            row["runs"][stage] = [c["mixing"][stage] for c in cells]
            row[stage] = (mean_t(row["runs"][stage]), PAPER_MIXING[paper][i])
        row["HRLI@1"] = (pooled_proportion([c["hrli1"] for c in cells]), PAPER_HRLI1.get(paper))
        row["runs"]["HRLI@1"] = [k / n for k, n in (c["hrli1"] for c in cells)]
        rec = [c["recovery_max"] for c in cells if c["recovery_max"][1] > 0]
        row["recovery_max"] = (pooled_proportion(rec) if rec else None, PAPER_RECOVERY_MAX.get(paper))
        row["runs"]["recovery_max"] = [k / n for k, n in rec]
        star = [c["recovery_star"] for c in cells if c.get("recovery_star") and c["recovery_star"][1] > 0]
        row["recovery_star"] = (pooled_proportion([(k, n) for k, n, _ in star]) if star else None,
                                [a for _, _, a in star])
        rows.append(row)
    return rows


def not_held(rows: list[dict[str, Any]]) -> list[str]:
    """The paper's data sets (its order) that no comparable row of ``rows`` covers."""
    held = {r["paper_dataset"] for r in rows if r["comparable"]}
    return [d for d in PAPER_MIXING if d not in held]


def _cell(est: Estimate | None, paper: float | None, approx: bool = False, digits: int = 3) -> str:
    if est is None:
        return "—"
    if paper is None:
        return f"{est.text(digits)} (paper: —)"
    inside = est.covers(paper)
    mark = "" if inside is None else (" ✓" if inside else " ✗")
    sign = "~" if approx else ""
    return f"{est.text(digits)} vs {sign}{paper:.{digits}f} ({est.value - paper:+.{digits}f}){mark}"


def _name(r: dict[str, Any]) -> str:
    if r["comparable"]:
        return f"{r['dataset']} ({r['paper_dataset']})"
    return f"{r['dataset']} ({r['paper_dataset']}): not comparable ({NOT_COMPARABLE.get(r['dataset'], 'another cut')})"


def _paper_only(value: float | None, approx: bool = False) -> str:
    return "—" if value is None else f"paper {'~' if approx else ''}{value:.3f}"


def fidelity_markdown(rows: list[dict[str, Any]], missing: list[str] | None = None) -> str:
    """The fidelity table: resdom (95% interval) vs the paper (difference); ✓ where the published value lies inside
    resdom's interval, ✗ where it does not (no mark where there is no interval: mixing from one seed); a cell over
    fewer seeds than its row says ``(n=k)``. ``missing``:
    the paper's data sets to list as "not held here" rows with the published values only."""
    table = []
    for r in rows:
        seeds = f"{r['seeds']}" + (" (1 seed)" if r["seeds"] == 1 else "")
        cells = [_cell(*r[s]) for s in STAGES]
        for quantity in ("HRLI@1", "recovery_max"):
            est, paper = r[quantity]
            fewer = est is not None and est.seeds < r["seeds"]  # a seed without recoverable misses has no recovery
            cells.append(_cell(est, paper, approx=True) + (f" (n={est.seeds})" if fewer else ""))
        table.append([_name(r), seeds, *cells])
    for paper in missing or []:
        cells = [_paper_only(v) for v in PAPER_MIXING[paper]]
        cells += [_paper_only(PAPER_HRLI1.get(paper), True), _paper_only(PAPER_RECOVERY_MAX.get(paper), True)]
        table.append([f"{paper}: not held here", "—", *cells])
    header = ["data set (paper's)", "seeds", "Attn", "+Res", "+LN", "HRLI@1", "largest recovery over α"]
    return "\n".join(markdown_lines(header, table))


def outside(rows: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    """(data set, quantity, resdom - paper) wherever a comparable row's interval excludes the published value."""
    out = []
    for r in rows:
        if not r["comparable"]:
            continue
        for key in (*STAGES, "HRLI@1", "recovery_max"):
            est, paper = r[key]
            if est is not None and paper is not None and est.covers(paper) is False:
                out.append((r["dataset"], key, est.value - paper))
    return out


def recovery_summary(rows: list[dict[str, Any]]) -> str:
    """One sentence: the largest recovery over the data sets held against the paper's "up to about 46%"."""
    held = [(r["recovery_max"][0], r["dataset"]) for r in rows if r["recovery_max"][0] is not None]
    if not held:
        return "No cell holds a recovery curve yet."
    best, name = max(held, key=lambda t: t[0].value)
    inside = best.lo <= PAPER_RECOVERY_UP_TO <= best.hi
    seeds = "1 seed" if best.seeds == 1 else f"{best.seeds} seeds"
    line = (f"The largest recovery over α on any data set held is {best.text()} ({name}, {seeds}, "
            f"95% interval), against the paper's \"up to about {PAPER_RECOVERY_UP_TO:.0%}\" over its nine data "
            f"sets: {'inside' if inside else 'outside'} the interval.")
    chosen = [(r["dataset"], *r["recovery_star"]) for r in rows if r.get("recovery_star", (None,))[0] is not None]
    if not chosen:
        return line
    each = "; ".join(f"{d} {est.text()} (α* {', '.join(f'{a:g}' for a in alphas)})" for d, est, alphas in chosen)
    name, top, _ = max(chosen, key=lambda t: t[1].value)
    where = ("has the paper's \"up to about {:.0%}\" inside its interval" if top.covers(PAPER_RECOVERY_UP_TO)
             else "lies below the paper's \"up to about {:.0%}\"" if top.value < PAPER_RECOVERY_UP_TO
             else "lies above the paper's \"up to about {:.0%}\"").format(PAPER_RECOVERY_UP_TO)
    return line + (" With α chosen as the paper's `alpha_selection` chooses it, on the validation users (the largest "
                   "validation Recovery(α) whose HR@10 stays within 1% of α = 1's; α* per seed), the test recovery "
                   f"is {each}; the largest, {name}'s, {where}.")


CAPTION = (
    "resdom's `sasrec` (the paper's post-LN SASRec, GTS) beside the paper's published SASRec numbers, generated from "
    "the store (`study.fidelity`). Mixing ratios: norm of sums over all positions, pooled over layers "
    "(`mixing.json` `pooled.all`), mean over seeds with a 95% t interval over seeds (none from one seed). HRLI@1: "
    "users whose last input item ranks first, pooled over seeds, with the 95% Wilson interval of the pooled counts "
    "(each seed's users counted once per seed), widened to the 95% t interval over the seeds' own rates where that "
    "reaches further (the pooled counts alone leave out how much seeds differ); the paper's values are read from "
    "its figure (~). Largest recovery over α: per seed the largest Recovery(α) of the test curve (α chosen on test: "
    "an upper bound on what residual scaling recovers), recovered / recoverable users pooled over seeds, the same "
    "interval; the paper gives a value "
    "per data set only for ML-1M (~0.28) and \"up to about 46%\" over its nine data sets. Each cell: resdom "
    "[95% interval] vs the paper (resdom - paper); ✓ the published value lies inside resdom's interval, ✗ outside "
    "(the intervals are of resdom's mean; the paper's number is one published value whose own seed-to-seed spread "
    "they do not include: the second sentence under the table sets it against the 95% prediction interval of one "
    "more resdom run instead). "
    "Data sets the paper reports that the store does not hold are listed with the published values only.")


def outside_sentence(rows: list[dict[str, Any]]) -> str | None:
    """The published values outside resdom's interval in ``rows`` as one sentence (None without rows)."""
    off = outside(rows)
    if off:
        return ("Published values outside resdom's 95% interval (comparable data sets; resdom - paper): "
                + "; ".join(f"{QUANTITY.get(q, q)} on {d} ({diff:+.3f})" for d, q, diff in off) + ".")
    if rows:
        return ("Every published value of a comparable data set lies inside resdom's 95% interval (or has none to "
                "compare).")
    return None


@dataclass(frozen=True)
class OneMoreRun:
    """One distinct published value (the paper's data set and quantity) against the 95% prediction interval of one
    more resdom run, under each same-day ordering the store holds of that data set: ``held`` is (data set, resdom's
    mean, lo, hi) per ordering."""

    paper_dataset: str
    quantity: str
    paper: float
    held: tuple[tuple[str, float, float, float], ...]

    def outside(self) -> list[bool]:
        return [not lo <= self.paper <= hi for _, _, lo, hi in self.held]


def single_run_outside(rows: list[dict[str, Any]]) -> list[OneMoreRun]:
    """Every distinct published value of comparable rows with a prediction interval of one more run (two seeds or
    more), tested under every ordering held: Beauty's Attn is one value, set against beauty-ts and
    beauty-ts-itemties alike, not two."""
    found: dict[tuple[str, str], list[tuple[str, float, float, float]]] = {}
    papers: dict[tuple[str, str], float] = {}
    for r in rows:
        if not r["comparable"]:
            continue
        for key in (*STAGES, "HRLI@1", "recovery_max"):
            paper, runs = r[key][1], r["runs"][key]
            interval = prediction_interval(runs)
            if paper is None or interval is None:
                continue
            papers[(r["paper_dataset"], key)] = paper
            found.setdefault((r["paper_dataset"], key), []).append((r["dataset"], sum(runs) / len(runs), *interval))
    return [OneMoreRun(d, q, papers[(d, q)], tuple(held)) for (d, q), held in found.items()]


def single_run_sentence(rows: list[dict[str, Any]]) -> str | None:
    """The distinct published values that lie outside even the 95% prediction interval of one more resdom run (the
    paper's numbers are single runs) under every same-day ordering held, and those outside under some only, as one
    sentence; None where no published value has such an interval."""
    values = single_run_outside(rows)
    if not values:
        return None
    n = len(values)
    every = [v for v in values if all(v.outside())]
    some = [v for v in values if any(v.outside()) and not all(v.outside())]
    twice = sorted({v.paper_dataset for v in values if len(v.held) > 1})
    how = ("mean ± t(n - 1) · SD · √(1 + 1/n) over the seeds' own values, the paper's numbers being single runs; "
           "resdom's mean [interval] vs the paper")
    if twice:
        how += (f"; {' and '.join(twice)}, whose same-day order the store holds both ways, "
                "have each value tested under both")
    head = (f"Of the {n} distinct published value{'s' * (n != 1)} of comparable data sets with two seeds or more, "
            f"{len(every)} lie{'s' * (len(every) == 1)} outside even the 95% prediction interval of one more resdom "
            f"run under every same-day ordering held")
    if some:
        head += f", {len(some)} more under one ordering only"
    head += f" ({how})"

    def named(v: OneMoreRun) -> str:
        held = "; ".join(f"{d} {m:.3f} [{lo:.3f}, {hi:.3f}]" for d, m, lo, hi in v.held)
        return f"{QUANTITY.get(v.quantity, v.quantity)} of {v.paper_dataset} ({held} vs {v.paper:.3f})"

    if not every and not some:
        return head + "."
    parts = [", ".join(named(v) for v in every)] if every else []
    if some:
        parts.append("under one ordering only: " + ", ".join(named(v) for v in some))
    return head + ": " + "; ".join(parts) + "."


# The paper's early stopping (validation NDCG@10 on a fixed sample of 1,024 validation users): the training variant
# whose cells the block sets beside the paper too, a candidate cause of the differences (experiments.TRAINING_VARIANTS)
PAPER_STOPPING = "sasrec-v1024"


def fidelity_block(runs: list[RunRecord], model: str = "sasrec", stopping: str = PAPER_STOPPING) -> str:
    """The ``fidelity`` block of docs/results.md: ``CAPTION``, the table (``fidelity_rows_runs`` of ``runs``, then the
    paper's data sets not held), the published values outside resdom's interval, and ``recovery_summary``; where
    ``runs`` hold cells of ``stopping`` (the model trained with the paper's early stopping), the same table and
    sentence for them."""
    rows = fidelity_rows_runs(runs, model)
    lines = [CAPTION, "", fidelity_markdown(rows, not_held(rows)), ""]
    lines += [s for s in (outside_sentence(rows), single_run_sentence(rows)) if s]
    lines.append(recovery_summary(rows))
    early = fidelity_rows_runs(runs, stopping)
    if early:
        lines += ["", f"The same for `{stopping}`, `{model}` trained with the paper's early stopping (validation "
                  "NDCG@10 on a fixed sample of 1,024 validation users instead of all of them):", "",
                  fidelity_markdown(early), ""]
        lines += [s for s in (outside_sentence(early), single_run_sentence(early)) if s]
    return "\n".join(lines) + "\n"


# --- the paper's code base: time-to-split's published accuracy (docs/spec.md §8) --------------------------------------

# time-to-split's published test HR@10 / NDCG@10 (GTS, q = 0.9, validation by time; full ranking, seen items
# filtered) at the grid point resdom's labels follow: its own SASRec (query-LN block, max length 128: `sasrec-tts`),
# BERT4Rec and GRU4Rec. The `-itemties` data sets are the same data with same-day items in the review file's order.
PUBLISHED_ACCURACY: dict[tuple[str, str], tuple[float, float]] = {
    ("beauty-ts", "sasrec-tts"): (0.0396, 0.0224), ("beauty-ts-itemties", "sasrec-tts"): (0.0396, 0.0224),
    ("beauty-ts", "bert4rec"): (0.0180, 0.0095), ("beauty-ts", "gru4rec"): (0.0195, 0.0106),
    ("sports-ts", "sasrec-tts"): (0.0339, 0.0205), ("sports-ts-itemties", "sasrec-tts"): (0.0339, 0.0205),
    ("sports-ts", "bert4rec"): (0.0152, 0.0080), ("sports-ts", "gru4rec"): (0.0196, 0.0102),
}
ACCURACY_METRICS = ("HR@10", "NDCG@10")


def published_accuracy_block(runs: list[RunRecord]) -> str:
    """The ``published_accuracy`` block of docs/results.md: per (data set, label) of ``PUBLISHED_ACCURACY`` with
    stored cells, resdom's test HR@10 and NDCG@10 (mean over seeds, 95% t interval over seeds, none from one seed)
    beside the published values, with the difference and ✓ / ✗ as in the fidelity table. A cell without a test
    metric (metrics.json missing, or left out as another checkpoint's) counts in neither mean; a value over fewer
    seeds than its row says ``(n=k)``, a row with none is not shown."""
    table = []
    for (dataset, label), published in PUBLISHED_ACCURACY.items():
        mine = [r.test_metrics() for r in runs if (r.dataset, r.model) == (dataset, label)]
        values = {m: [float(t[m]) for t in mine if isinstance(t.get(m), (int, float))] for m in ACCURACY_METRICS}
        n = max(len(v) for v in values.values())
        if not n:
            continue
        cells = [(_cell(mean_t(values[m]), value, digits=4) + (f" (n={len(values[m])})" if len(values[m]) < n
                                                                else "")) if values[m] else "—"
                 for m, value in zip(ACCURACY_METRICS, published)]
        table.append([dataset, label, "1 seed" if n == 1 else str(n), *cells])
    if not table:
        return "No stored cell of a model and data set that time-to-split published.\n"
    return (markdown_table(["data set", "model", "seeds", "HR@10", "NDCG@10"], table)
            + "\nresdom's test HR@10 / NDCG@10 (full ranking, seen items filtered; mean over seeds "
            "with a 95% t interval over seeds, none from one seed) vs time-to-split's published value (resdom - "
            "published); ✓ the published value lies inside resdom's interval, ✗ outside, no mark without an "
            "interval. Generated from the store (`study.fidelity.published_accuracy_block`).\n")
