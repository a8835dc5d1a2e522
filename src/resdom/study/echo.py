"""Does the echo cost accuracy under filtered evaluation? (question 3 of docs/results.md, "Beyond the
paper"). A pure function of the per-user evidence (``users.npz``, read by ``report.compare``); NumPy and matplotlib
only (no torch).

In one cell (a data set, a model label, a seed) a test user *echoes* when the model's top-1 unfiltered item is the
user's last input item (``last_rank == 1``); the others are every other user, those without a last item included.
The outcome is the filtered HR@K (``target_rank <= K``, K = 10): the last item itself is filtered out there, so an
echoing user's top-1 slot is given up. The last item's training frequency (``last_freq``) confounds the crude
comparison (popular last items are echoed more and predict differently), so the users are split into frequency
strata (``FREQ_BINS``: 0, 1-4, 5-19, 20-99, 100+) and the groups are compared within strata.

The statistic, per seed, is the Mantel-Haenszel risk difference echo - others over the strata j::

    n1_j, n0_j   users of stratum j who echo / do not;  x1_j, x0_j   of them, hits (filtered HR@K)
    w_j = n1_j n0_j / (n1_j + n0_j)                       (0 where a group is empty: the stratum drops out)
    RD  = sum_j w_j (x1_j / n1_j - x0_j / n0_j) / sum_j w_j

with the standardised rates ``p1 = sum_j w_j x1_j / n1_j / W`` and ``p0`` likewise (``RD = p1 - p0``; ``p0`` is the
others' rate a relative margin refers to). RD is undefined where no stratum holds both groups. A label's value is
the mean of RD over its seeds. Its 95% interval is a bootstrap over users with the seeds resampled hierarchically,
as ``report.stats.bootstrap_diff`` does: each replicate draws the seeds with replacement and U users with
replacement (the same users for every seed: the cells of a data set hold the same users), recomputes each drawn
seed's RD on those users (groups and strata recomputed) and averages. A replicate whose RD is undefined is dropped
(``EchoRow.dropped`` counts them). With two seeds or more, the seeds' own RDs also get a t-test (``report.stats.
paired_seed_test``: the bootstrap underprices a few seeds' spread). p-values, the TOST equivalence test against a
declared margin, Holm's correction across the rows of one table and the verdict (both tests) are those of
``report.compare.set_verdicts``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from resdom.errors import ResdomError
from resdom.report.compare import (
    UNDECIDED,
    EvidenceIndex,
    TestedRow,
    UserEvidence,
    as_index,
    default_margin,
    metric_values,
    no_evidence_note,
    row_p_text,
    set_verdicts,
    verdict_text,
)
from resdom.report.figures import drawn_name, plain_text
from resdom.report.markdown import markdown_lines
from resdom.report.stats import (
    BootstrapResult,
    Margin,
    equivalence_test,
    paired_seed_test,
    replicate_chunks,
)

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn, not with the report
    from matplotlib.figure import Figure

K = 10
# (lo, hi) inclusive training-frequency bins of the last input item; hi None: no upper end
FREQ_BINS: tuple[tuple[int, int | None], ...] = ((0, 0), (1, 4), (5, 19), (20, 99), (100, None))
NO_DIFFERENCE = "no stratum holds both groups"


# --- strata and the stratified difference ---------------------------------------------------------------------------

def bin_names(bins: Sequence[tuple[int, int | None]] = FREQ_BINS) -> list[str]:
    """``["0", "1-4", "5-19", "20-99", "100+"]`` for ``FREQ_BINS``."""
    return [f"{lo}+" if hi is None else str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in bins]


def check_bins(bins: Sequence[tuple[int, int | None]]) -> None:
    """Bins must cover 0, 1, 2, ... exactly once, in order: (0, a), (a + 1, b), ..., (z, None)."""
    ok = len(bins) > 0 and bins[0][0] == 0 and bins[-1][1] is None
    for (lo, hi), (nlo, _) in zip(bins, bins[1:]):
        ok = ok and hi is not None and lo <= hi and nlo == hi + 1
    if not ok:
        raise ValueError(f"frequency bins {list(bins)} must cover 0, 1, 2, ... in order, the last open-ended")


def freq_strata(last_freq: np.ndarray, bins: Sequence[tuple[int, int | None]] = FREQ_BINS) -> np.ndarray:
    """(U,) int: the index of each user's ``last_freq`` bin in ``bins``."""
    check_bins(bins)
    edges = np.array([lo for lo, _ in bins[1:]])
    return np.searchsorted(edges, np.asarray(last_freq), side="right")


def _rd_from_counts(n: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(RD, p1, p0) from per-stratum counts ``n``, hits ``x``, each (..., J, 2) with [..., 1] the echo group;
    NaN where no stratum holds both groups."""
    n1, n0, x1, x0 = n[..., 1], n[..., 0], x[..., 1], x[..., 0]
    tot = n1 + n0
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(tot > 0, n1 * n0 / np.where(tot > 0, tot, 1), 0.0)
        p1 = np.where(n1 > 0, x1 / np.where(n1 > 0, n1, 1), 0.0)
        p0 = np.where(n0 > 0, x0 / np.where(n0 > 0, n0, 1), 0.0)
        W = w.sum(axis=-1)
        s1 = np.where(W > 0, (w * p1).sum(axis=-1) / np.where(W > 0, W, 1), np.nan)
        s0 = np.where(W > 0, (w * p0).sum(axis=-1) / np.where(W > 0, W, 1), np.nan)
    return s1 - s0, s1, s0


def stratum_counts(echo: np.ndarray, hit: np.ndarray, stratum: np.ndarray,
                   n_strata: int) -> tuple[np.ndarray, np.ndarray]:
    """Users ``n`` and hits ``x`` per (stratum, group): two (n_strata, 2) arrays, group 1 the echo group."""
    code = np.asarray(stratum) * 2 + np.asarray(echo, dtype=np.int64)
    n = np.bincount(code, minlength=2 * n_strata).reshape(n_strata, 2).astype(np.float64)
    x = np.bincount(code, weights=np.asarray(hit, dtype=np.float64), minlength=2 * n_strata).reshape(n_strata, 2)
    return n, x


def stratified_difference(echo: np.ndarray, hit: np.ndarray, stratum: np.ndarray,
                          n_strata: int) -> tuple[float, float, float]:
    """(RD, p1, p0) of one seed: the Mantel-Haenszel risk difference echo - others over the strata and the two
    standardised rates (module docstring); NaN where no stratum holds both groups. ``echo``, ``hit``, ``stratum``:
    (U,) bool, 0/1, int in [0, n_strata)."""
    n, x = stratum_counts(echo, hit, stratum, n_strata)
    rd, p1, p0 = _rd_from_counts(n, x)
    return float(rd), float(p1), float(p0)


# --- the hierarchical bootstrap -------------------------------------------------------------------------------------


def echo_bootstrap(echo: np.ndarray, hit: np.ndarray, stratum: np.ndarray, n_strata: int, n_boot: int = 2000,
                   seed: int = 0, conf: float = 0.95) -> tuple[BootstrapResult, int]:
    """The bootstrap of the mean over seeds of the stratified difference (module docstring) -> (result, dropped).

    ``echo``, ``hit``: (S, U) per seed; ``stratum``: (U,), the same for every seed. ``result.distribution`` holds
    the defined replicates only; ``dropped`` counts the undefined ones. The p-value is ``report.stats``'s
    (two-sided, +1 corrected) on the defined replicates. Raises ValueError where the estimate itself is undefined."""
    E, H = np.atleast_2d(np.asarray(echo, dtype=bool)), np.atleast_2d(np.asarray(hit, dtype=np.float64))
    S, U = E.shape
    if H.shape != (S, U) or np.shape(stratum) != (U,) or U == 0 or n_boot < 1:
        raise ValueError(f"echo {E.shape}, hit {H.shape} must be (S, U), stratum {np.shape(stratum)} (U,), "
                         f"U > 0, n_boot >= 1 (got {n_boot})")
    per_seed = [stratified_difference(E[s], H[s], stratum, n_strata)[0] for s in range(S)]
    estimate = float(np.mean(per_seed))
    if math.isnan(estimate):
        raise ValueError(NO_DIFFERENCE)
    code = np.asarray(stratum)[None, :] * 2 + E.astype(np.int64)  # (S, U)
    onehot = [np.eye(2 * n_strata)[code[s]] for s in range(S)]  # (U, 2J) each
    # per seed: users, then hits, per (stratum, group), all seeds in one (U, S * 4J) matrix, so that a chunk's
    # replicate counts are multiplied once (integer sums: exact in any order)
    basis = np.concatenate([np.concatenate([onehot[s], onehot[s] * H[s][:, None]], axis=1) for s in range(S)], axis=1)
    dist = np.empty(n_boot)
    for at, weights, counts in replicate_chunks(np.random.default_rng(seed), n_boot, U, S):
        n_rep = counts.shape[0]
        sums = (counts @ basis).reshape(n_rep, S, 2, n_strata, 2)  # (replicate, seed, users | hits, J, group)
        rd = np.empty((n_rep, S))
        for s in range(S):
            rd[:, s] = _rd_from_counts(sums[:, s, 0], sums[:, s, 1])[0]
        # a seed drawn 0 times does not count, even where its RD is undefined
        dist[at] = np.where(weights > 0, weights * np.nan_to_num(rd, nan=0.0), 0.0).sum(axis=1)
        undefined = ((weights > 0) & np.isnan(rd)).any(axis=1)
        dist[at][undefined] = np.nan
    kept = dist[~np.isnan(dist)]
    dropped = n_boot - kept.size
    if kept.size == 0:
        raise ValueError(NO_DIFFERENCE + " in any bootstrap replicate")
    lo, hi = np.quantile(kept, [(1 - conf) / 2, (1 + conf) / 2])
    below, above = int(np.sum(kept <= 0)), int(np.sum(kept >= 0))
    p = min(1.0, 2 * (1 + min(below, above)) / (kept.size + 1))
    return BootstrapResult(estimate, float(lo), float(hi), p, kept, S, S, U, conf), dropped


# --- the table ------------------------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class EchoRow(TestedRow):
    """One (data set, label): per seed s, ``n[s]``/``x[s]`` (J, 2) users and hits per (stratum, group), group 1
    the echo group; the crude rates (mean over seeds of each group's HR@K), the stratified difference's bootstrap,
    p-values (Holm across the table's rows) and the verdict. ``diff`` is None where the difference is undefined
    (the verdict says why) or the label has no evidence; ``missing`` names the seed cells without users.npz."""

    dataset: str
    label: str
    n: np.ndarray  # (S, J, 2)
    x: np.ndarray  # (S, J, 2)
    n_users: int = 0
    p1_std: float | None = None  # standardised rates, mean over seeds
    p0_std: float | None = None
    dropped: int = 0
    missing: list[str] = field(default_factory=list)

    @property
    def n_seeds(self) -> int:
        return int(self.n.shape[0])

    def group_users(self) -> tuple[float, float]:
        """(echo, others): users per group, mean over seeds."""
        per = self.n.sum(axis=1)  # (S, 2)
        return float(per[:, 1].mean()), float(per[:, 0].mean())

    def crude(self) -> tuple[float, float]:
        """(echo, others): each group's HR@K over all its users, mean over seeds (NaN where a group is empty in
        every seed; a seed where it is empty does not count)."""
        n, x = self.n.sum(axis=1), self.x.sum(axis=1)  # (S, 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = x / n
        return float(np.nanmean(rate[:, 1])) if np.any(n[:, 1]) else math.nan, \
            float(np.nanmean(rate[:, 0])) if np.any(n[:, 0]) else math.nan


@dataclass
class EchoTable:
    rows: list[EchoRow]
    bins: tuple[tuple[int, int | None], ...]
    k: int
    n_boot: int
    alpha: float


def _labels(index: EvidenceIndex, datasets: Sequence[str] | None,
            labels: Sequence[str] | None) -> list[tuple[str, str]]:
    """(data set, label) pairs: the given ones, or every label with a users.npz in a seed cell (of ``datasets``:
    None, every data set)."""
    if labels is not None:
        names = datasets if datasets is not None else sorted({ds for ds, _ in index.cells})
        return [(ds, lb) for ds in names for lb in labels]
    return [(ds, lb) for ds, lb in index.labels_with_evidence() if datasets is None or ds in datasets]


def _arrays(evidence: list[UserEvidence], k: int,
            bins: Sequence[tuple[int, int | None]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(echo (S, U) bool, hit (S, U) float, stratum (U,)) of one label's seed cells, checked to be pairable."""
    first = evidence[0]
    for ev in evidence[1:]:
        if not np.array_equal(ev.user, first.user) or not np.array_equal(ev.last_freq, first.last_freq):
            raise ResdomError(f"{ev.path}: its users or their last items' training frequencies differ from "
                              f"{first.path}'s; the seeds cannot be resampled together")
    echo = np.stack([metric_values(ev, "HRLI@1") > 0 for ev in evidence])
    hit = np.stack([metric_values(ev, f"HR@{k}") for ev in evidence])
    return echo, hit, freq_strata(first.last_freq, bins)


def _row(ds: str, label: str, evidence: list[UserEvidence], missing: list[str], k: int,
         bins: Sequence[tuple[int, int | None]], margin: Margin, n_boot: int, seed: int,
         alpha: float) -> tuple[EchoRow, bool]:
    """One row and whether it has a bootstrap (it then awaits Holm's correction for its verdict)."""
    J = len(bins)
    if not evidence:
        return EchoRow(dataset=ds, label=label, verdict=UNDECIDED, n=np.zeros((0, J, 2)), x=np.zeros((0, J, 2)),
                       margin=margin, missing=missing), False
    echo, hit, stratum = _arrays(evidence, k, bins)
    counts = [stratum_counts(echo[s], hit[s], stratum, J) for s in range(len(evidence))]
    row = EchoRow(dataset=ds, label=label, n=np.stack([c[0] for c in counts]), x=np.stack([c[1] for c in counts]),
                  margin=margin, n_users=int(echo.shape[1]), missing=missing)
    per_seed = np.array([_rd_from_counts(n, x) for n, x in counts])  # (S, 3)
    if np.isnan(per_seed[:, 0]).any():
        why = NO_DIFFERENCE + (" in every seed" if np.isnan(per_seed[:, 0]).all() else " in a seed")
        row.verdict = f"{UNDECIDED} ({why})"
        return row, False
    row.diff, row.dropped = echo_bootstrap(echo, hit, stratum, J, n_boot, seed)
    row.p1_std, row.p0_std = float(per_seed[:, 1].mean()), float(per_seed[:, 2].mean())
    row.margin_abs = margin.absolute(row.p0_std)
    row.p_equiv = equivalence_test(row.diff, row.margin_abs, alpha).p_value if row.margin_abs > 0 else None
    row.seeds = paired_seed_test(per_seed[:, 0])
    return row, True


def echo_table(store: str | Path | EvidenceIndex, datasets: Sequence[str] | None = None,
               labels: Sequence[str] | None = None, k: int = K,
               bins: Sequence[tuple[int, int | None]] = FREQ_BINS, margin: Margin | None = None,
               n_boot: int = 2000, seed: int = 0, alpha: float = 0.05) -> EchoTable:
    """Question 3 on the store's per-user evidence: one row per (data set, label), every label with a
    ``users.npz`` where ``labels`` is None (``datasets`` None: every data set). The seeds with evidence are used
    (``missing`` names the others). ``margin``: the equivalence margin of the stratified difference (default
    ``compare.default_margin("HR@K")``, ±5% of the others' standardised HR@K). Row i's bootstrap uses seed
    ``seed + i``; Holm across the rows with a bootstrap; ``n_boot`` is raised so Holm's smallest p can fall below
    alpha / 5."""
    check_bins(bins)
    if not isinstance(store, EvidenceIndex) and not Path(store).is_dir():
        raise ResdomError(f"{store}: no such results store")
    index = as_index(store)
    margin = margin or default_margin(f"HR@{k}")
    pairs = _labels(index, datasets, labels)
    n_boot = max(n_boot, math.ceil(10 * max(1, len(pairs)) / alpha))
    rows, done = [], []
    for i, (ds, lb) in enumerate(pairs):
        evidence, missing = index.evidence(ds, lb)
        row, has = _row(ds, lb, evidence, missing, k, bins, margin, n_boot, seed + i, alpha)
        rows.append(row)
        if has:
            done.append(row)
    set_verdicts(done, alpha)
    return EchoTable(rows, tuple(bins), k, n_boot, alpha)


# --- Markdown and figures -------------------------------------------------------------------------------------------

COLUMNS = ("data set", "model", "seeds", "users: echo / others", "HR@{k}: echo", "HR@{k}: others", "crude difference",
           "stratified difference [95% CI]", "Holm p", "verdict")


def _n(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _rate(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:.4f}"


def _cells(r: EchoRow) -> list[str]:
    seeds = "1 seed" if r.n_seeds == 1 else f"{r.n_seeds}"
    seeds += f" (of {r.n_seeds + len(r.missing)})" if r.missing and r.n_seeds else ""
    head = [r.dataset, r.label, seeds if r.n_seeds else "–"]
    if not r.n_seeds:
        return head + ["–"] * 4 + [no_evidence_note(r.missing), "–", r.verdict]
    ne, no = r.group_users()
    ce, co = r.crude()
    crude = "–" if math.isnan(ce) or math.isnan(co) else f"{ce - co:+.4f}"
    head += [f"{_n(ne)} / {_n(no)}", _rate(ce), _rate(co), crude]
    if r.diff is None:
        return head + ["–", "–", r.verdict]
    d = r.diff
    return head + [f"{d.estimate:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}]", row_p_text(r), verdict_text(r)]


def echo_markdown(table: EchoTable) -> str:
    """The table as Markdown, with a note on the method (the strata, the margin, the bootstrap, Holm)."""
    cols = [c.format(k=table.k) for c in COLUMNS]
    lines = markdown_lines(cols, [_cells(r) for r in table.rows])
    m = sum(r.diff is not None for r in table.rows)
    margins = sorted({r.margin.text() for r in table.rows})
    dropped = sum(r.dropped for r in table.rows)
    note = (f"Echo: the top-1 unfiltered item is the user's last input item (HRLI@1 = 1); others: every other test "
            f"user. HR@{table.k}: filtered. Users per group and HR@{table.k} per group: mean over seeds. Stratified "
            f"difference: echo - others, Mantel-Haenszel risk difference over the last item's training-frequency "
            f"strata {', '.join(bin_names(table.bins))}, mean over seeds; 95% CI from a bootstrap over users with "
            f"the seeds resampled (per row, not adjusted; {table.n_boot} replicates"
            + (f", {dropped} with an undefined difference dropped" if dropped else "")
            + f"); seeds' t: a t-test on the seeds' own differences (df S - 1; none from one seed). Holm across the "
            f"{m} rows with a difference, for each test. Verdict at alpha {table.alpha:g}: higher/lower where both "
            f"Holm-adjusted p are below it; else equivalent by two one-sided tests (Holm-adjusted, both tests) within "
            f"±{' / '.join(margins)} of the others' standardised HR@{table.k}; else undecided, with the smallest "
            f"difference both tests would detect with 80% power at alpha {table.alpha:g} / {m} (Holm's strictest "
            "step), from the row's bootstrap SD and seeds' t: \"detects ±d\".")
    return "\n".join(lines) + "\n\n" + note + "\n"


def echo_answer(table: EchoTable) -> str:
    """The answer sentence of question 3, from the verdicts only: per verdict the cells that got it, among the rows
    with a stratified difference, and how many rows have none."""
    tested = [r for r in table.rows if r.diff is not None]
    by: dict[str, list[str]] = {}
    for r in tested:
        by.setdefault(r.verdict.split(" (", 1)[0], []).append(f"{r.dataset} `{r.label}`")
    parts = [f"{v} in {len(by[v])}" + (f" ({', '.join(by[v])})" if v != "undecided" else "")
             for v in ("lower", "higher", "equivalent", "undecided") if v in by]
    untested = len(table.rows) - len(tested)
    return (f"Answer, generated from the table: of the {_cells_word(len(tested))} with a stratified difference, the "
            f"echoing users' filtered HR@{table.k} against the others' with equally frequent last items is "
            + ("; ".join(parts) if parts else "not assessed") + "."
            + (f" {_cells_word(untested)} {'has' if untested == 1 else 'have'} no stratum holding both groups (or no "
               "evidence)." if untested else ""))


def _cells_word(n: int) -> str:
    return f"{n} cell" + ("" if n == 1 else "s")


def _pooled(row: EchoRow) -> tuple[np.ndarray, np.ndarray]:
    """(J, 2) users per seed (mean over seeds) and pooled HR (hits / users over seeds; NaN where none)."""
    n, x = row.n.sum(axis=0), row.x.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return n / max(1, row.n_seeds), np.where(n > 0, x / np.where(n > 0, n, 1), np.nan)


@plain_text
def echo_figure(table: EchoTable, width: float = 3.4, dpi: int = 100) -> Figure:
    """A forest plot, one line per (data set, label) with a difference: the stratified difference echo - others in
    filtered HR@K with its 95% CI (filled) and the crude difference (hollow); the row label gives the users per
    group (echo / others, mean over seeds). Not saved here."""
    from matplotlib.figure import Figure

    rows = [r for r in table.rows if r.diff is not None]
    fig = Figure(figsize=(width, 1.4 + 0.28 * max(1, len(rows))), dpi=dpi, layout="constrained")
    ax = fig.subplots()
    ys = np.arange(len(rows))[::-1]
    for y, r in zip(ys, rows):
        diff = r.diff
        assert diff is not None  # rows with a difference only
        ax.plot([diff.lo, diff.hi], [y, y], color="C0", lw=1.2)
        ce, co = r.crude()
        ax.plot([ce - co], [y], "o", mfc="none", mec="C3", ms=4)
        ax.plot([diff.estimate], [y], "o", color="C0", ms=4)
    ax.axvline(0.0, color="0.5", lw=0.8, ls="--")
    labels = []
    for r in rows:
        ne, no = r.group_users()
        one = " (1 seed)" if r.n_seeds == 1 else ""
        labels.append(f"{drawn_name(r.dataset)} {drawn_name(r.label)}{one}\nn={_n(ne)} / {_n(no)}")
    ax.set_yticks(ys, labels, fontsize=6)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel(f"filtered HR@{table.k}: echo − others", fontsize=7)
    ax.plot([], [], "o-", color="C0", ms=4, label="stratified (MH) diff., 95% CI")
    ax.plot([], [], "o", mfc="none", mec="C3", ms=4, label="crude diff.")
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, fontsize=6, loc="outside lower center", ncol=2, title="n = users echo / others",
               title_fontsize=6, frameon=False)  # below the panel: it never hides a row
    ax.set_title(f"Does the echo cost filtered HR@{table.k}?\n(strata: last item's training frequency)",
                 fontsize=7)
    return fig


@plain_text
def echo_strata_figure(row: EchoRow, k: int = K, bins: Sequence[tuple[int, int | None]] = FREQ_BINS,
                       width: float = 3.4, dpi: int = 100) -> Figure:
    """One row's filtered HR@K per frequency stratum for the two groups (pooled over seeds), n per group in the
    legend. Not saved here."""
    from matplotlib.figure import Figure
    users, rate = _pooled(row)
    names = bin_names(bins)
    fig = Figure(figsize=(width, 2.4), dpi=dpi, layout="constrained")
    ax = fig.subplots()
    xs = np.arange(len(names))
    ne, no = row.group_users()
    ax.plot(xs, rate[:, 1], "o-", color="C3", ms=4, label=f"echo (top-1 = last item), n={_n(ne)}")
    ax.plot(xs, rate[:, 0], "s--", color="C0", ms=4, label=f"others, n={_n(no)}")
    ax.set_xticks(xs, names, fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("last item's training frequency", fontsize=7)
    ax.set_ylabel(f"filtered HR@{k}", fontsize=7)
    seeds = "1 seed" if row.n_seeds == 1 else f"{row.n_seeds} seeds, n per seed"
    ax.legend(fontsize=6, title=f"{drawn_name(row.dataset)} {drawn_name(row.label)} ({seeds})", title_fontsize=6)
    ax.set_title(f"Filtered HR@{k} by last-item frequency stratum", fontsize=7)
    return fig
