"""Statistics for comparisons on per-user evidence (spec §3, "Comparing two models"): per-user metrics
from ranks, Wilson intervals for proportions, a paired bootstrap over users with the seeds resampled hierarchically,
the seeds' own t-test, Holm's correction, equivalence by two one-sided tests (TOST) and the verdict of a comparison.
Pure NumPy and the standard library (no torch).

Conventions. A model's evidence is one per-user array per seed, all over the same users in the same order (shape
``(S, U)``: S seeds, U users). Its value under a statistic ``stat`` (a NumPy-style reduction called as
``stat(x, axis=-1)``, default ``np.mean``) is the mean over seeds of ``stat`` over users. A difference ``a - b`` is
paired by user: one bootstrap replicate draws each model's seeds with replacement (independently: the seeds of two
models are not paired), then U users with replacement, the same user indices for both models, and takes the
difference of the two values. With one seed on a side only the users are resampled there
(``BootstrapResult.single_seed`` flags it). ``paired_seeds``: seed k of both sides is one training run (a variant
that changes only when training stops, ``experiments.shares_runs``), so one draw of seed indices serves both sides,
as the users' draw does, and what the run shares cancels in the difference. The confidence interval is the
percentile interval of the replicates; the p-value (two-sided, for "no difference") is
``2 min(P(d* <= 0), P(d* >= 0))`` with the +1 correction, ``(1 + count) / (n_boot + 1)``, capped at 1; its floor is
``2 / (n_boot + 1)``.

Calibration (tests/test_report_stats.py, 200 simulated data sets each, nominal 95%): one seed a side, 0.935
(continuous) and 0.94 (hits); five seeds with a moderate seed effect 0.98; five seeds whose seed effect exceeds the
users' noise 0.89 (a few seeds estimate the seed variance poorly; a users-only bootstrap there: 0.315); five seeds
with no seed effect 0.99: users and seeds are crossed, and resampling both counts the per-seed user noise twice, so
the interval is then conservative (wider than needed). With three seeds a side whose seed effect dominates and no
true difference, the bootstrap's p falls below 0.05 in 0.19 of 300 simulated data sets: a few seeds' spread is
underpriced. ``SeedTest`` (a t-test on the seeds' own values) prices it at its small-sample worth, and a verdict
needs both tests (``joint_verdict``): 0.04 in the same simulation.

Equivalence ("level") is a claim of its own: the difference lies within a declared margin ``±m``. It is tested by two
one-sided tests on the same replicates, ``p = max(1 + #(d* <= -m), 1 + #(d* >= m)) / (n_boot + 1)``; at level
alpha, ``p < alpha`` is the ``1 - 2 alpha`` percentile interval (90% for alpha 0.05) lying inside ``(-m, m)`` (up to
the +1 correction and the interpolation between replicates at the interval's ends).
``verdict`` never says "level": a difference is "higher"/"lower" (Holm-adjusted p below alpha), else "equivalent
(within ±m)" (TOST p below alpha), else "undecided". Two sides that are the same checkpoints seed for seed are
"identical" (``IDENTICAL``): not a test, and never counted as equivalence.

Power. ``detectable_difference`` is the smallest true difference a test detects with probability ``power`` (80%) at
two-sided level alpha: ``(q(1 - alpha/2) + q(power)) · SE``, q the quantile of the test's distribution (Student's t
with the test's df; the normal for the bootstrap, whose SE is its replicates' standard deviation). An "undecided"
row states it (``report.compare``).

A proportion over users and seeds (``bootstrap_proportion``): the users are the same in every seed, and a user's
hits correlate across seeds, so counting users x seeds as independent trials (a Wilson interval of the pooled counts)
is too narrow. One replicate draws the seeds with replacement and then the users with replacement, the same users in
every drawn seed (``bootstrap_diff``'s scheme), and takes the pooled rate over what it drew.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

Reduction = Callable[..., np.ndarray]  # stat(x, axis=-1): reduces the last axis, like np.mean or np.median

_CHUNK_ELEMENTS = 1 << 22  # replicates x users drawn at once (32 MiB of int64 indices)


# --- per-user metrics from 1-based ranks --------------------------------------------------------------------------

def _ranks(rank: np.ndarray | Sequence[int]) -> np.ndarray:
    r = np.asarray(rank)
    if r.size and (not np.issubdtype(r.dtype, np.number) or np.min(r) < 1):
        raise ValueError("ranks are 1-based numbers >= 1")
    return r


def hit_at(rank: np.ndarray | Sequence[int], k: int) -> np.ndarray:
    """HR@k per user: ``1.0`` where the 1-based ``rank <= k``, else ``0.0``. Same shape as ``rank``.

    HRLI@k is ``hit_at(last_rank, k)``: the last input item ranked within the top k."""
    return (_ranks(rank) <= k).astype(np.float64)


def ndcg_at(rank: np.ndarray | Sequence[int], k: int) -> np.ndarray:
    """NDCG@k per user (one relevant item): ``1 / log2(rank + 1)`` where the 1-based ``rank <= k``, else ``0.0``."""
    r = _ranks(rank).astype(np.float64)
    return np.where(r <= k, 1.0 / np.log2(r + 1.0), 0.0)


# --- Wilson interval ----------------------------------------------------------------------------------------------

def _z(conf: float) -> float:
    if not 0.0 < conf < 1.0:
        raise ValueError(f"confidence level {conf} is not in (0, 1)")
    return NormalDist().inv_cdf(0.5 + conf / 2.0)


def wilson(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n`` at confidence ``conf``: ``(lo, hi)``, within [0, 1].

    ``(p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with ``z`` the normal ``(1 + conf) / 2`` quantile;
    ``lo`` is exactly 0 at ``k = 0`` and ``hi`` exactly 1 at ``k = n``."""
    if n <= 0 or k < 0 or k > n or k != int(k) or n != int(n):
        raise ValueError(f"wilson needs whole numbers 0 <= k <= n, n > 0 (got k={k}, n={n})")
    z = _z(conf)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


# --- paired, hierarchical bootstrap -------------------------------------------------------------------------------

@dataclass(frozen=True)
class BootstrapResult:
    """The bootstrap of a difference ``a - b``.

    ``distribution``: (n_boot,) the replicates of the difference; ``lo``/``hi``: the ``conf`` percentile interval;
    ``p_value``: two-sided, for no difference (module docstring)."""

    estimate: float
    lo: float
    hi: float
    p_value: float
    distribution: np.ndarray
    n_seeds_a: int
    n_seeds_b: int
    n_users: int
    conf: float = 0.95
    paired_seeds: bool = False

    @property
    def single_seed(self) -> bool:
        """True when a side has a single seed: its seed-to-seed variation is not in the interval."""
        return self.n_seeds_a == 1 or self.n_seeds_b == 1

    @property
    def n_boot(self) -> int:
        return int(self.distribution.size)

    def ci(self, conf: float) -> tuple[float, float]:
        """The percentile interval of the replicates at another confidence level."""
        _z(conf)
        lo, hi = np.quantile(self.distribution, [(1 - conf) / 2, (1 + conf) / 2])
        return float(lo), float(hi)


def _as_seeds(x: Sequence[np.ndarray] | np.ndarray, name: str) -> np.ndarray:
    """``x`` as a float (S, U) array: a list of S per-user arrays, a (S, U) array, or one (U,) array (one seed)."""
    if isinstance(x, np.ndarray) and x.ndim == 1:
        x = [x]
    if len(x) == 0:
        raise ValueError(f"{name}: no seeds")
    arrays = [np.asarray(s, dtype=np.float64) for s in x]
    if any(s.ndim != 1 for s in arrays) or len({s.size for s in arrays}) != 1:
        raise ValueError(f"{name}: every seed needs a 1-D array over the same users "
                         f"(shapes {[s.shape for s in arrays]})")
    out = np.stack(arrays)
    if out.shape[1] == 0:
        raise ValueError(f"{name}: no users")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name}: values must be finite")
    return out


def seed_weights(rng: np.random.Generator, n_rep: int, n_seeds: int) -> np.ndarray:
    """(n_rep, S) each replicate's seed multiplicities over S, from S draws with replacement (one seed: all 1)."""
    if n_seeds == 1:
        return np.ones((n_rep, 1))
    draws = rng.integers(0, n_seeds, size=(n_rep, n_seeds))
    weights: np.ndarray = (draws[:, :, None] == np.arange(n_seeds)).sum(axis=1) / n_seeds
    return weights


def replicate_chunks(rng: np.random.Generator, n_boot: int, n_users: int,
                     n_seeds: int) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """The replicates of a bootstrap over seeds and users, in chunks of at most ``_CHUNK_ELEMENTS`` user draws:
    (the chunk's replicates as a slice of ``range(n_boot)``, the seeds' weights (n_rep, n_seeds), the users' counts
    (n_rep, n_users)), the users drawn before the seeds in every chunk (the draw order fixes the numbers)."""
    chunk = max(1, min(n_boot, _CHUNK_ELEMENTS // n_users))
    for start in range(0, n_boot, chunk):
        n_rep = min(chunk, n_boot - start)
        users = rng.integers(0, n_users, size=(n_rep, n_users))
        weights = seed_weights(rng, n_rep, n_seeds)
        yield slice(start, start + n_rep), weights, replicate_counts(users)


def replicate_counts(users: np.ndarray) -> np.ndarray:
    """(n_rep, U) float: how often each replicate's draw (users: (n_rep, U) indices into U users) holds each user."""
    n_rep, n_users = users.shape
    counts = np.empty((n_rep, n_users))
    for r in range(n_rep):  # a row at a time: its histogram of U bins stays in cache (1.7x one flat bincount)
        counts[r] = np.bincount(users[r], minlength=n_users)
    return counts


def _user_stats(sides: Sequence[np.ndarray], users: np.ndarray, stat: Reduction) -> list[np.ndarray]:
    """Per side (S, U) of ``sides``, (n_rep, S): ``stat`` of each seed's values over each replicate's users (users:
    (n_rep, U) indices, the same for every side: the bootstrap is paired)."""
    if stat is np.mean:  # counts @ values: the same numbers as the gather below, without (n_rep, U) per seed; the
        # replicates' user counts are made once for all sides
        counts = replicate_counts(users)
        return [counts @ values.T / users.shape[1] for values in sides]
    return [np.stack([np.asarray(stat(v[users], axis=-1), dtype=np.float64) for v in values], axis=1)
            for values in sides]


def bootstrap_diff(a: Sequence[np.ndarray] | np.ndarray, b: Sequence[np.ndarray] | np.ndarray,
                   stat: Reduction = np.mean, n_boot: int = 2000, seed: int = 0,
                   conf: float = 0.95, paired_seeds: bool = False) -> BootstrapResult:
    """Paired bootstrap of ``value(a) - value(b)`` over users, seeds resampled hierarchically (module docstring).

    ``a``, ``b``: one per-user array (U,) per seed (a list, or a (S, U) array; a single (U,) array is one seed), the
    same U users in the same order on both sides; S may differ between a and b unless ``paired_seeds`` (row k of
    both sides is seed k's one run: the same seed draw for both). ``stat(x, axis=-1)``: the statistic over users
    (default the mean). Deterministic for a given ``seed``."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1 (got {n_boot})")
    A, B = _as_seeds(a, "a"), _as_seeds(b, "b")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"a has {A.shape[1]} users, b {B.shape[1]}: a paired bootstrap needs the same users")
    if paired_seeds and A.shape[0] != B.shape[0]:
        raise ValueError(f"a has {A.shape[0]} seeds, b {B.shape[0]}: paired seeds need the same seeds on both sides")
    _z(conf)
    n_users = A.shape[1]
    estimate = float(np.mean(stat(A, axis=-1)) - np.mean(stat(B, axis=-1)))
    rng = np.random.default_rng(seed)
    dist = np.empty(n_boot)
    chunk = max(1, min(n_boot, _CHUNK_ELEMENTS // n_users))
    for start in range(0, n_boot, chunk):
        n_rep = min(chunk, n_boot - start)
        users = rng.integers(0, n_users, size=(n_rep, n_users))
        wa = seed_weights(rng, n_rep, A.shape[0])
        wb = wa if paired_seeds else seed_weights(rng, n_rep, B.shape[0])
        sa, sb = _user_stats((A, B), users, stat)
        va, vb = (wa * sa).sum(axis=1), (wb * sb).sum(axis=1)
        dist[start:start + n_rep] = va - vb
    lo, hi = np.quantile(dist, [(1 - conf) / 2, (1 + conf) / 2])
    below, above = int(np.sum(dist <= 0)), int(np.sum(dist >= 0))
    p = min(1.0, 2 * (1 + min(below, above)) / (n_boot + 1))
    return BootstrapResult(estimate, float(lo), float(hi), p, dist, A.shape[0], B.shape[0], n_users, conf,
                           paired_seeds)


# --- the seeds' own test ------------------------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz, as in Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float, y: float | None = None) -> float:
    """The regularised incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1; ``y``: 1 - x where the caller
    has it without cancellation (x near 1)."""
    y = 1.0 - x if y is None else y
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` > 0 degrees of freedom (not necessarily whole; inf: the normal)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    if math.isinf(df):
        return NormalDist().cdf(t)
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))
    return tail if t < 0 else 1.0 - tail


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (bisection on ``t_cdf`` to 1e-12)."""
    if not 0 < q < 1:
        raise ValueError(f"a quantile needs 0 < q < 1 (got {q})")
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > q:
        lo *= 2.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    while hi - lo > 1e-12 * max(1.0, abs(lo)):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < q else (lo, mid)
    return (lo + hi) / 2.0


def t_interval(values: Sequence[float] | np.ndarray, conf: float = 0.95) -> tuple[float, float | None, float | None]:
    """(mean, lo, hi): the mean of ``values`` (e.g. one number per seed) with its two-sided t interval, df n - 1;
    lo and hi None for a single value."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("a mean needs one value or more")
    m = float(v.mean())
    if v.size < 2:
        return m, None, None
    half = t_ppf((1 + conf) / 2, v.size - 1.0) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return m, m - half, m + half


def prediction_interval(values: Sequence[float] | np.ndarray, conf: float = 0.95) -> tuple[float, float] | None:
    """(lo, hi): the two-sided t prediction interval of one more value drawn as ``values`` were (e.g. one more
    seed's run), ``mean ± t((1 + conf) / 2, n - 1) · SD · sqrt(1 + 1/n)``; None for fewer than two values."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return None
    half = t_ppf((1 + conf) / 2, v.size - 1.0) * float(v.std(ddof=1)) * math.sqrt(1.0 + 1.0 / v.size)
    return float(v.mean()) - half, float(v.mean()) + half


def pooled_interval(counts: Sequence[tuple[int, int]], conf: float = 0.95) -> tuple[float, float]:
    """The interval of a rate pooled over seeds, (successes, trials) a seed: the Wilson interval of the pooled
    counts, widened to the t interval over the seeds' own rates (``t_interval``, two seeds or more) where that
    reaches further, clipped to [0, 1]. The pooled counts take every seed's users as new draws, so alone they leave
    out how much the seeds differ."""
    lo, hi = wilson(sum(k for k, _ in counts), sum(n for _, n in counts), conf)
    _, t_lo, t_hi = t_interval([k / n for k, n in counts], conf)
    if t_lo is not None and t_hi is not None:
        lo, hi = max(0.0, min(lo, t_lo)), min(1.0, max(hi, t_hi))
    return float(lo), float(hi)


@dataclass(frozen=True)
class SeedTest:
    """A t-test of ``value(a) - value(b)`` on the seeds' own values (each seed's ``stat`` over the users): the
    bootstrap draws from the few seeds at hand as if they were all there are, so where the seeds differ more than the
    users' noise its interval is too narrow (module docstring, calibration); this test prices the seed-to-seed spread
    at its small-sample worth. ``kind``: "paired" (seed k of both sides is one run: the seeds' differences, df S - 1),
    "welch" (unequal variances, Satterthwaite's df), or "pooled" (one side has a single seed: the other side's
    variance stands for both, df S - 1). ``se`` 0: the seeds do not vary at all (e.g. the same checkpoints)."""

    estimate: float
    se: float
    df: float
    kind: str

    def p_value(self) -> float:
        """Two-sided, for no difference."""
        if self.se == 0.0:
            return 1.0 if self.estimate == 0.0 else 0.0
        return min(1.0, 2.0 * t_cdf(-abs(self.estimate) / self.se, self.df))

    def p_above(self, margin: float = 0.0) -> float:
        """One-sided, for ``difference > margin``: ``P(T >= t)``, t = (estimate - margin) / se. Seeds that do not vary
        at all: 0 or 1 by the side the estimate lies on (0.5 at the margin)."""
        if self.se == 0.0:
            return 0.0 if self.estimate > margin else 1.0 if self.estimate < margin else 0.5
        return 1.0 - t_cdf((self.estimate - margin) / self.se, self.df)

    def p_below(self, margin: float = 0.0) -> float:
        """One-sided, for ``difference < margin`` (``p_above``'s mirror)."""
        if self.se == 0.0:
            return 0.0 if self.estimate < margin else 1.0 if self.estimate > margin else 0.5
        return t_cdf((self.estimate - margin) / self.se, self.df)

    def p_equiv(self, margin: float) -> float:
        """Two one-sided tests of ``-margin < difference < margin``: the larger one-sided p."""
        if not margin > 0:
            raise ValueError(f"an equivalence margin must be > 0 (got {margin})")
        if self.se == 0.0:
            return 0.0 if abs(self.estimate) < margin else 1.0
        return max(self.p_above(-margin), self.p_below(margin))


def paired_seed_test(differences: Sequence[float] | np.ndarray) -> SeedTest | None:
    """The "paired" ``SeedTest`` of per-seed differences (each seed's own difference, e.g. of one run stopped by two
    rules, or of two groups of users within one cell): their mean, its standard error, df S - 1; None for one seed.
    The same is the one-sample t-test of any values' mean (``p_above``/``p_below`` against a margin)."""
    d = np.asarray(differences, dtype=np.float64)
    if d.size < 2:
        return None
    return SeedTest(float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), d.size - 1.0, "paired")


def seed_test(a: Sequence[np.ndarray] | np.ndarray, b: Sequence[np.ndarray] | np.ndarray,
              stat: Reduction = np.mean, paired_seeds: bool = False) -> SeedTest | None:
    """The ``SeedTest`` of ``a - b`` (per-user arrays per seed, as ``bootstrap_diff``); None where both sides have a
    single seed (no seed-to-seed spread to measure)."""
    A, B = _as_seeds(a, "a"), _as_seeds(b, "b")
    ma, mb = (np.asarray(stat(X, axis=-1), dtype=np.float64) for X in (A, B))
    estimate = float(ma.mean() - mb.mean())
    if paired_seeds:
        if ma.size != mb.size:
            raise ValueError(f"a has {ma.size} seeds, b {mb.size}: paired seeds need the same seeds on both sides")
        return paired_seed_test(ma - mb)
    if ma.size == 1 and mb.size == 1:
        return None
    if ma.size == 1 or mb.size == 1:
        many = mb if ma.size == 1 else ma
        var = float(many.var(ddof=1))
        return SeedTest(estimate, math.sqrt(var * (1.0 / ma.size + 1.0 / mb.size)), many.size - 1.0, "pooled")
    va, vb = float(ma.var(ddof=1)) / ma.size, float(mb.var(ddof=1)) / mb.size
    se2 = va + vb
    df = se2 * se2 / (va * va / (ma.size - 1) + vb * vb / (mb.size - 1)) if se2 > 0 else math.inf
    return SeedTest(estimate, math.sqrt(se2), df, "welch")


# --- multiplicity, equivalence, verdict ---------------------------------------------------------------------------

def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of ``pvalues`` (same shape, same order). NaN entries (no test) stay NaN and do not
    count among the m tests: the i-th smallest of m p-values becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    flat, res = p.ravel(), out.ravel()
    valid = np.flatnonzero(~np.isnan(flat))
    if np.any((flat[valid] < 0) | (flat[valid] > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    m = valid.size
    order = valid[np.argsort(flat[valid], kind="stable")]
    running = 0.0
    for j, idx in enumerate(order):
        running = max(running, min(1.0, (m - j) * flat[idx]))
        res[idx] = running
    return res.reshape(p.shape)


@dataclass(frozen=True)
class Margin:
    """An equivalence margin: ``value`` as a fraction of the baseline's value (``relative``, e.g. 0.05 for ±5% of
    NDCG@10) or in the metric's own units (absolute, e.g. 0.02 for a proportion)."""

    value: float
    relative: bool = True

    def __post_init__(self) -> None:
        if not self.value > 0:
            raise ValueError(f"an equivalence margin must be > 0 (got {self.value})")

    def absolute(self, baseline: float) -> float:
        """The margin in the metric's units, for a baseline value ``baseline``."""
        return self.value * abs(baseline) if self.relative else self.value

    def text(self) -> str:
        """``5%`` (relative) or ``0.02`` (absolute), as the verdict names it."""
        return f"{100 * self.value:g}%" if self.relative else f"{self.value:g}"


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests of ``|difference| < margin`` on bootstrap replicates.

    ``p_value``: the larger one-sided p; ``lo``/``hi``: the ``1 - 2 alpha`` percentile interval."""

    margin: float
    p_value: float
    lo: float
    hi: float
    alpha: float

    @property
    def equivalent(self) -> bool:
        """Unadjusted decision at ``alpha`` (``verdict`` uses the Holm-adjusted p of a table)."""
        return self.p_value < self.alpha


def equivalence_test(result: BootstrapResult, margin: float, alpha: float = 0.05) -> Equivalence:
    """TOST of ``-margin < difference < margin`` (``margin`` in the metric's units, > 0) on ``result``'s replicates:
    ``p = max(1 + #(d* <= -margin), 1 + #(d* >= margin)) / (n_boot + 1)``."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be > 0 (got {margin})")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5) (got {alpha})")
    d = result.distribution
    worst = max(int(np.sum(d <= -margin)), int(np.sum(d >= margin)))
    p = min(1.0, (1 + worst) / (d.size + 1))
    lo, hi = result.ci(1 - 2 * alpha)
    return Equivalence(float(margin), p, lo, hi, alpha)


def holm_or_none(pvalues: Sequence[float | None]) -> list[float | None]:
    """``holm`` of the p-values that are not None (a row without that test); None stays None."""
    adjusted: Sequence[float] | np.ndarray = holm([np.nan if p is None else p for p in pvalues]) if len(pvalues) else []
    return [None if np.isnan(p) else float(p) for p in adjusted]


def joint_verdict(estimate: float, p_diff: float, p_seed: float | None, p_equiv: float | None,
                  p_seed_equiv: float | None, margin_text: str, alpha: float = 0.05) -> str:
    """``verdict`` where a row has the bootstrap's and the seeds' test (each p Holm-adjusted in its own family): a
    difference needs both p below alpha, equivalence both TOSTs; without a seeds' test (None) the bootstrap's alone."""
    if p_seed is not None:
        p_diff = max(p_diff, p_seed)
    if p_equiv is not None and p_seed_equiv is not None:
        p_equiv = max(p_equiv, p_seed_equiv)
    return verdict(estimate, p_diff, p_equiv, margin_text, alpha)


IDENTICAL = "identical"  # the verdict of two sides that are the same checkpoints in every seed compared


def detectable_difference(se: float, df: float = math.inf, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true difference a two-sided test at level ``alpha`` detects with probability ``power``:
    ``(q(1 - alpha / 2) + q(power)) · se``, q the quantile of Student's t with ``df`` degrees of freedom (``inf``: the
    normal). The far tail's chance of rejecting (on the wrong side) is left out, as is usual."""
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1) (got {alpha}, {power})")
    if not se >= 0:
        raise ValueError(f"a standard error must be >= 0 (got {se})")
    if math.isinf(df):
        q = NormalDist().inv_cdf
        return (q(1 - alpha / 2) + q(power)) * se
    return (t_ppf(1 - alpha / 2, df) + t_ppf(power, df)) * se


def bootstrap_proportion(hits: Sequence[np.ndarray] | np.ndarray,
                         eligible: Sequence[np.ndarray] | np.ndarray | None = None, n_boot: int = 2000, seed: int = 0,
                         conf: float = 0.95) -> tuple[float, float, float, np.ndarray]:
    """(estimate, lo, hi, replicates) of a rate pooled over seeds: ``sum(hits · eligible) / sum(eligible)`` over
    every seed and user, with the percentile interval of a bootstrap that resamples seeds and users together (module
    docstring). ``hits``, ``eligible``: (S, U), the same U users in every seed (``eligible``: the users the rate
    counts in each seed, e.g. a seed's recoverable misses; None: every user). A replicate whose draw holds no
    eligible user has no rate and is left out (NaN in ``replicates``). Deterministic for a given ``seed``."""
    return bootstrap_proportions([(hits, eligible)], n_boot, seed, conf)[0]


def bootstrap_proportions(rates: Sequence[tuple[Sequence[np.ndarray] | np.ndarray,
                                                Sequence[np.ndarray] | np.ndarray | None]],
                          n_boot: int = 2000, seed: int = 0, conf: float = 0.95
                          ) -> list[tuple[float, float, float, np.ndarray]]:
    """``bootstrap_proportion`` of several rates over the same seeds and users, (hits, eligible) each, from one set of
    draws: each rate gets what ``bootstrap_proportion`` gives it alone with the same ``seed``."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1 (got {n_boot})")
    _z(conf)
    pairs = []
    for hits, eligible in rates:
        H = _as_seeds(hits, "hits")
        E = np.ones_like(H) if eligible is None else _as_seeds(eligible, "eligible")
        if E.shape != H.shape:
            raise ValueError(f"hits {H.shape} and eligible {E.shape} differ in shape")
        if np.any((H != 0) & (H != 1)) or np.any((E != 0) & (E != 1)):
            raise ValueError("hits and eligible hold 0 or 1 per user")
        if E.sum() == 0:
            raise ValueError("no eligible user in any seed")
        pairs.append((H * E, E))
    if not pairs:
        return []
    if len({K.shape for K, _ in pairs}) != 1:
        raise ValueError("every rate needs the same seeds and users")
    n_seeds, n_users = pairs[0][0].shape
    dists = [np.empty(n_boot) for _ in pairs]
    for at, w, counts in replicate_chunks(np.random.default_rng(seed), n_boot, n_users, n_seeds):
        for (K, E), dist in zip(pairs, dists):
            num, den = ((w * (counts @ X.T)).sum(axis=1) for X in (K, E))
            with np.errstate(invalid="ignore", divide="ignore"):
                dist[at] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    out = []
    for (K, E), dist in zip(pairs, dists):
        lo, hi = np.nanquantile(dist, [(1 - conf) / 2, (1 + conf) / 2])
        out.append((float(K.sum() / E.sum()), float(lo), float(hi), dist))
    return out


def verdict(estimate: float, p_diff: float, p_equiv: float | None, margin_text: str, alpha: float = 0.05) -> str:
    """The verdict of one comparison from its (Holm-adjusted) p-values.

    ``"higher"``/``"lower"`` (the sign of ``estimate``) when ``p_diff < alpha``; else ``"equivalent (within
    ±<margin_text>)"`` when the equivalence test ran (``p_equiv`` not None) and ``p_equiv < alpha``; else
    ``"undecided"``. A significant difference wins over equivalence (a small, real difference is still a
    difference; its interval shows its size). Never "level": no equivalence test, no equivalence."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1) (got {alpha})")
    if p_diff < alpha and estimate != 0:
        return "higher" if estimate > 0 else "lower"
    if p_equiv is not None and p_equiv < alpha:
        return f"equivalent (within ±{margin_text})"
    return "undecided"
