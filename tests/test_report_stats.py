"""report.stats: per-user metrics, Wilson intervals, the paired hierarchical bootstrap, Holm, TOST and verdicts,
against hand-computed cases, slow literal references and small coverage simulations."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from resdom.report.stats import (
    BootstrapResult,
    Margin,
    SeedTest,
    bootstrap_diff,
    bootstrap_proportion,
    bootstrap_proportions,
    detectable_difference,
    equivalence_test,
    hit_at,
    holm,
    ndcg_at,
    pooled_interval,
    replicate_counts,
    seed_test,
    t_cdf,
    t_interval,
    t_ppf,
    verdict,
    wilson,
)

Z95, Z90, Z99 = 1.959963984540054, 1.6448536269514722, 2.5758293035489004
SRC = Path(__file__).resolve().parents[1] / "src" / "resdom" / "report"


# --- metrics ----------------------------------------------------------------------------------------------------

def test_metrics_from_ranks_by_hand() -> None:
    ranks = np.array([1, 2, 3, 10, 11, 500])
    assert hit_at(ranks, 10).tolist() == [1, 1, 1, 1, 0, 0]
    assert hit_at(ranks, 1).tolist() == [1, 0, 0, 0, 0, 0]
    expected = [1.0, 1 / math.log2(3), 0.5, 1 / math.log2(11), 0.0, 0.0]
    assert ndcg_at(ranks, 10) == pytest.approx(expected, abs=1e-15)
    assert ndcg_at([3], 10)[0] == 0.5  # 1 / log2(4)
    with pytest.raises(ValueError, match="1-based"):
        hit_at([0, 1], 10)


# --- Wilson -----------------------------------------------------------------------------------------------------

def _wilson_by_bisection(k: int, n: int, z: float) -> tuple[float, float]:
    """The score interval as the roots of n (p - pi)^2 = z^2 pi (1 - pi), one on each side of p = k / n."""
    p = k / n

    def f(pi: float) -> float:
        return n * (p - pi) ** 2 - z * z * pi * (1 - pi)

    def root(lo: float, hi: float) -> float:  # f(lo) and f(hi) of opposite signs
        for _ in range(200):
            mid = (lo + hi) / 2
            if (f(mid) > 0) == (f(lo) > 0):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    return (0.0 if k == 0 else root(0.0, p)), (1.0 if k == n else root(1.0, p))


def test_wilson_hand_values() -> None:
    assert wilson(3, 10) == pytest.approx((0.107791, 0.603222), abs=1e-6)  # 3/10: 0.1078 .. 0.6032
    assert wilson(50, 100) == pytest.approx((0.403832, 0.596168), abs=1e-6)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(Z95**2 / (10 + Z95**2), abs=1e-12)  # 0.2775
    lo, hi = wilson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(10 / (10 + Z95**2), abs=1e-12)  # 0.7225
    assert wilson(3, 520, conf=0.99)[0] < 3 / 520 < wilson(3, 520, conf=0.99)[1]


@pytest.mark.parametrize("conf,z", [(0.95, Z95), (0.90, Z90), (0.99, Z99)])
def test_wilson_matches_the_score_test_inversion(conf: float, z: float) -> None:
    for n in (1, 2, 7, 40, 520, 10000):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            assert wilson(k, n, conf) == pytest.approx(_wilson_by_bisection(k, n, z), abs=1e-9), (k, n, conf)


def test_wilson_rejects_nonsense() -> None:
    for k, n in ((1, 0), (-1, 5), (6, 5), (1.5, 5)):
        with pytest.raises(ValueError):
            wilson(k, n)
    with pytest.raises(ValueError):
        wilson(1, 5, conf=1.0)


# --- bootstrap ----------------------------------------------------------------------------------------------------

def _reference_bootstrap(a: list[np.ndarray], b: list[np.ndarray], n_boot: int, seed: int,
                         stat=np.mean, paired_seeds: bool = False) -> np.ndarray:
    """A replicate at a time, literally: draw U users, then each side's seeds, with the draws bootstrap_diff makes
    (one chunk: all users first, then the seeds of a, then of b; paired seeds: b takes a's seed indices)."""
    rng = np.random.default_rng(seed)
    n_users = a[0].size
    users = rng.integers(0, n_users, size=(n_boot, n_users))
    sa = rng.integers(0, len(a), size=(n_boot, len(a))) if len(a) > 1 else np.zeros((n_boot, 1), int)
    if paired_seeds:
        sb = sa
    else:
        sb = rng.integers(0, len(b), size=(n_boot, len(b))) if len(b) > 1 else np.zeros((n_boot, 1), int)
    out = np.empty(n_boot)
    for r in range(n_boot):
        va = np.mean([stat(a[s][users[r]]) for s in sa[r]])
        vb = np.mean([stat(b[s][users[r]]) for s in sb[r]])
        out[r] = va - vb
    return out


def test_replicate_counts_by_hand_and_against_a_counter() -> None:
    users = np.array([[0, 0, 2], [1, 2, 1], [2, 2, 2]])
    assert replicate_counts(users).tolist() == [[2, 0, 1], [0, 2, 1], [0, 0, 3]]
    draws = np.random.default_rng(3).integers(0, 40, size=(25, 40))
    slow = [[list(row).count(u) for u in range(40)] for row in draws]
    counts = replicate_counts(draws)
    assert counts.dtype == np.float64 and counts.tolist() == slow


@pytest.fixture
def paired() -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=60)
    return ([x + 0.3 + rng.normal(scale=0.4, size=60) for _ in range(3)],
            [x + rng.normal(scale=0.4, size=60) for _ in range(2)])


def test_bootstrap_matches_a_literal_replicate_loop(paired) -> None:
    a, b = paired
    r = bootstrap_diff(a, b, n_boot=300, seed=5)
    assert r.distribution == pytest.approx(_reference_bootstrap(a, b, 300, 5), abs=1e-12)
    assert r.estimate == pytest.approx(np.mean([x.mean() for x in a]) - np.mean([x.mean() for x in b]), abs=1e-14)
    assert (r.lo, r.hi) == pytest.approx(tuple(np.quantile(r.distribution, [0.025, 0.975])))
    med = bootstrap_diff(a, b, stat=np.median, n_boot=300, seed=5)
    assert med.distribution == pytest.approx(_reference_bootstrap(a, b, 300, 5, np.median), abs=1e-12)
    assert med.estimate == pytest.approx(np.mean([np.median(x) for x in a]) - np.mean([np.median(x) for x in b]))


def test_paired_seeds_match_a_literal_replicate_loop(paired) -> None:
    a, b = paired[0], paired[0][:2][::-1]
    r = bootstrap_diff(a[:2], b, n_boot=300, seed=5, paired_seeds=True)
    assert r.paired_seeds and not bootstrap_diff(a[:2], b, n_boot=10).paired_seeds
    assert r.distribution == pytest.approx(_reference_bootstrap(a[:2], b, 300, 5, paired_seeds=True), abs=1e-12)
    med = bootstrap_diff(a[:2], b, stat=np.median, n_boot=300, seed=5, paired_seeds=True)
    assert med.distribution == pytest.approx(_reference_bootstrap(a[:2], b, 300, 5, np.median, True), abs=1e-12)
    with pytest.raises(ValueError, match="same seeds"):
        bootstrap_diff(a, b, paired_seeds=True)


def test_paired_seeds_of_one_run_on_both_sides_give_exactly_zero() -> None:
    """The same per-user values on both sides (a stopping variant that kept the same checkpoint in every seed): with
    paired seeds every replicate is 0, so the interval is [0, 0], the difference untested (p 1) and equivalence
    holds at any margin; unpaired, the seeds' spread alone makes an interval around 0."""
    rng = np.random.default_rng(2)
    x = [rng.normal(size=80) + shift for shift in (0.0, 0.5, -0.4)]
    same = bootstrap_diff(x, x, n_boot=400, seed=1, paired_seeds=True)
    assert np.all(same.distribution == 0.0) and (same.estimate, same.lo, same.hi, same.p_value) == (0, 0, 0, 1)
    assert equivalence_test(same, 1e-6).p_value == pytest.approx(1 / 401)
    apart = bootstrap_diff(x, x, n_boot=400, seed=1)
    assert apart.lo < -0.1 and apart.hi > 0.1


def test_coverage_paired_seeds_with_a_shared_seed_effect() -> None:
    """Each seed's shift N(0, 0.2) is shared by both sides (one run per seed): pairing the seeds cancels it, so the
    interval keeps near-nominal coverage and is several times narrower than the unpaired one."""
    def make(rng):
        x = rng.normal(size=120)
        shifts = rng.normal(scale=0.2, size=5)
        return ([x + 0.2 + s + rng.normal(scale=0.5, size=120) for s in shifts],
                [x + s + rng.normal(scale=0.5, size=120) for s in shifts])

    rng = np.random.default_rng(12345)
    hits, ratio = 0, []
    for i in range(200):
        a, b = make(rng)
        p = bootstrap_diff(a, b, n_boot=400, seed=i, paired_seeds=True)
        hits += p.lo <= 0.2 <= p.hi
        if i < 20:
            u = bootstrap_diff(a, b, n_boot=400, seed=i)
            ratio.append((u.hi - u.lo) / (p.hi - p.lo))
    assert 0.90 <= hits / 200 <= 1.0  # measured 1.0 (2.4x narrower): conservative, as with no seed effect above
    assert np.median(ratio) > 2.0


def test_bootstrap_mean_fast_path_equals_the_generic_path(paired) -> None:
    a, b = paired
    fast = bootstrap_diff(a, b, n_boot=500, seed=3)
    slow = bootstrap_diff(a, b, stat=lambda x, axis: np.mean(x, axis=axis), n_boot=500, seed=3)
    assert fast.distribution == pytest.approx(slow.distribution, abs=1e-12)


def test_bootstrap_chunks_give_the_same_statistics(monkeypatch, paired) -> None:
    import resdom.report.stats as stats
    a, b = paired
    whole = bootstrap_diff(a, b, n_boot=2000, seed=1)
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", 60 * 7)  # 7 replicates a chunk
    chunked = bootstrap_diff(a, b, n_boot=2000, seed=1)
    assert chunked.distribution.shape == (2000,)
    assert abs(chunked.lo - whole.lo) < 0.05 and abs(chunked.hi - whole.hi) < 0.05


def test_bootstrap_p_value_hand_cases() -> None:
    x = np.linspace(0, 1, 40)
    same = bootstrap_diff([x], [x], n_boot=999)
    assert same.estimate == 0 and same.p_value == 1.0 and (same.lo, same.hi) == (0.0, 0.0)
    shifted = bootstrap_diff([x + 0.1], [x], n_boot=999)  # every replicate is +0.1
    assert shifted.estimate == pytest.approx(0.1) and shifted.p_value == pytest.approx(2 / 1000)
    assert np.all(np.isclose(shifted.distribution, 0.1))


def test_bootstrap_p_value_is_two_sided_with_the_plus_one_correction(paired) -> None:
    a, b = paired
    b = [x + 0.27 for x in b]  # a small difference: the replicates straddle 0
    r = bootstrap_diff(a, b, n_boot=1000, seed=2)
    below, above = np.sum(r.distribution <= 0), np.sum(r.distribution >= 0)
    assert 0 < below < 1000 and 0 < above < 1000
    assert r.p_value == pytest.approx(min(1.0, 2 * (1 + min(below, above)) / 1001))
    one = bootstrap_diff(a[0], b[0], n_boot=1000, seed=2)  # one seed a side: only users drawn, so swapping mirrors
    swapped = bootstrap_diff(b[0], a[0], n_boot=1000, seed=2)
    assert swapped.estimate == pytest.approx(-one.estimate) and swapped.p_value == pytest.approx(one.p_value)
    assert (swapped.lo, swapped.hi) == pytest.approx((-one.hi, -one.lo))


def test_bootstrap_is_paired_by_user() -> None:
    """A large user effect shared by both sides cancels: the interval is as wide as the paired differences' standard
    error, not as the unpaired one (which is ~10 times wider here)."""
    rng = np.random.default_rng(0)
    x = rng.normal(scale=3.0, size=400)
    a, b = x + 0.5 + rng.normal(scale=0.3, size=400), x + rng.normal(scale=0.3, size=400)
    r = bootstrap_diff([a], [b], n_boot=4000, seed=1)
    paired_width = 2 * Z95 * np.std(a - b) / math.sqrt(400)
    assert (r.hi - r.lo) == pytest.approx(paired_width, rel=0.1)
    assert (r.hi - r.lo) < 0.2 * 2 * Z95 * math.sqrt(np.var(a) + np.var(b)) / math.sqrt(400)


def test_bootstrap_seeds_and_flags() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=100)
    one = bootstrap_diff(x + 1, x, n_boot=200)  # a bare (U,) array is one seed
    assert one.single_seed and (one.n_seeds_a, one.n_seeds_b, one.n_users) == (1, 1, 100)
    assert one.n_boot == 200 and one.conf == 0.95
    mixed = bootstrap_diff([x + 1, x + 1.2], [x], n_boot=200)
    assert mixed.single_seed and (mixed.n_seeds_a, mixed.n_seeds_b) == (2, 1)
    multi = bootstrap_diff(np.stack([x + 1, x + 1.2]), [x, x + 0.1], n_boot=200)
    assert not multi.single_seed and (multi.n_seeds_a, multi.n_seeds_b) == (2, 2)
    # the seeds' spread enters: two seeds 0.2 apart give replicates at 1.0, 1.1 and 1.2 (users cancel exactly)
    assert set(np.round(mixed.distribution, 10)) == {1.0, 1.1, 1.2}
    assert one.ci(0.9) == pytest.approx((1.0, 1.0))


def test_bootstrap_is_deterministic_per_seed(paired) -> None:
    a, b = paired
    assert np.array_equal(bootstrap_diff(a, b, n_boot=100, seed=4).distribution,
                          bootstrap_diff(a, b, n_boot=100, seed=4).distribution)
    assert not np.array_equal(bootstrap_diff(a, b, n_boot=100, seed=4).distribution,
                              bootstrap_diff(a, b, n_boot=100, seed=5).distribution)


def test_bootstrap_rejects_unpaired_or_empty_input() -> None:
    with pytest.raises(ValueError, match="same users"):
        bootstrap_diff([np.zeros(5)], [np.zeros(6)])
    with pytest.raises(ValueError, match="same users"):
        bootstrap_diff([np.zeros(5), np.zeros(4)], [np.zeros(5)])
    with pytest.raises(ValueError, match="no seeds"):
        bootstrap_diff([], [np.zeros(5)])
    with pytest.raises(ValueError, match="finite"):
        bootstrap_diff([np.array([1.0, np.nan])], [np.zeros(2)])
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_diff([np.zeros(2)], [np.zeros(2)], n_boot=0)


# --- coverage -----------------------------------------------------------------------------------------------------

def _coverage(make, truth: float, n_sets: int = 200, n_boot: int = 400) -> float:
    """The share of ``n_sets`` simulated data sets whose 95% interval holds ``truth``; make(rng) -> (a, b)."""
    rng = np.random.default_rng(12345)
    hits = 0
    for i in range(n_sets):
        a, b = make(rng)
        r = bootstrap_diff(a, b, n_boot=n_boot, seed=i)
        hits += r.lo <= truth <= r.hi
    return hits / n_sets


def test_coverage_single_seed_continuous() -> None:
    def make(rng):
        x = rng.normal(size=150)
        return [x + 0.2 + rng.normal(scale=0.5, size=150)], [x + rng.normal(scale=0.5, size=150)]

    assert 0.90 <= _coverage(make, 0.2) <= 0.99  # measured 0.935 (nominal 0.95; sd of the estimate 0.015)


def test_coverage_single_seed_hits() -> None:
    """Hits (HR-like 0/1 per user) with a shared user difficulty; truth: P(N(0, 1.25) > c) for each side."""
    cut_a, cut_b = 0.6, 0.8
    dist = NormalDist(0, math.sqrt(1.25))
    truth = (1 - dist.cdf(cut_a)) - (1 - dist.cdf(cut_b))

    def make(rng):
        x = rng.normal(size=300)
        return ([(x + rng.normal(scale=0.5, size=300) > cut_a).astype(float)],
                [(x + rng.normal(scale=0.5, size=300) > cut_b).astype(float)])

    assert 0.90 <= _coverage(make, truth) <= 0.99  # measured 0.94


def _seeded(tau: float, n_seeds: int, flatten: bool):
    """Each side: S seeds, each with its own shift N(0, tau) and per-user noise; truth 0.2 over seeds and users.
    ``flatten``: average the seeds per user first (a users-only bootstrap that ignores the seeds)."""

    def make(rng):
        x = rng.normal(size=120)
        side = [[mu + x + rng.normal(scale=tau) + rng.normal(scale=0.5, size=120) for _ in range(n_seeds)]
                for mu in (0.2, 0.0)]
        return tuple(np.mean(s, axis=0) for s in side) if flatten else tuple(side)

    return make


def test_coverage_hierarchical_seeds() -> None:
    # a moderate seed effect: near nominal (measured 0.98)
    assert 0.90 <= _coverage(_seeded(0.05, 5, False), 0.2) <= 1.0
    # a seed effect larger than the users' noise: resampling the seeds keeps coverage up (5 seeds, percentile:
    # measured 0.89), a users-only bootstrap of the seed means collapses (measured 0.315)
    assert _coverage(_seeded(0.2, 5, False), 0.2) >= 0.8
    assert _coverage(_seeded(0.2, 5, True), 0.2) < 0.5
    # no seed effect: the per-seed user noise is counted by both levels, so the interval is conservative (0.99)
    assert _coverage(_seeded(0.0, 5, False), 0.2) >= 0.97


# --- the seeds' t-test -------------------------------------------------------------------------------------------

def _t_density_integral(t: float, df: float, n: int = 20000) -> float:
    """P(T <= t) by Simpson's rule over the density from 0 to |t| (slow, literal)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    xs = np.linspace(0.0, abs(t), n + 1)
    f = c * (1 + xs * xs / df) ** (-(df + 1) / 2)
    area = (xs[1] - xs[0]) / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return 0.5 + math.copysign(area, t)


@pytest.mark.parametrize("df", [1.0, 2.0, 2.7, 4.0, 9.5, 30.0])
@pytest.mark.parametrize("t", [-6.0, -2.1, -0.3, 0.0, 1.0, 4.4])
def test_t_cdf_against_closed_forms_and_the_integrated_density(t: float, df: float) -> None:
    assert t_cdf(t, df) == pytest.approx(_t_density_integral(t, df), abs=1e-9)
    if df == 1.0:
        assert t_cdf(t, df) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
    if df == 2.0:
        assert t_cdf(t, df) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


def test_t_cdf_table_values_and_limits() -> None:
    for q, df in ((12.7062047, 1), (4.30265273, 2), (2.77644511, 4), (2.22813885, 10)):  # two-sided 5% points
        assert 2 * t_cdf(-q, df) == pytest.approx(0.05, abs=1e-7)
    assert t_cdf(1.5, math.inf) == NormalDist().cdf(1.5)
    assert t_cdf(1.5, 1e7) == pytest.approx(NormalDist().cdf(1.5), abs=1e-6)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_cdf(1.0, 0.0)


def test_t_ppf_inverts_t_cdf_and_matches_tables() -> None:
    for q, df, table in ((0.975, 1, 12.7062047), (0.975, 2, 4.30265273), (0.975, 4, 2.77644511),
                         (0.975, 10, 2.22813885), (0.95, 3, 2.35336343)):
        assert t_ppf(q, df) == pytest.approx(table, abs=1e-7)
    for q in (0.01, 0.3, 0.5, 0.9):
        assert t_cdf(t_ppf(q, 2.7), 2.7) == pytest.approx(q, abs=1e-12)
    assert t_ppf(0.025, 3) == pytest.approx(-t_ppf(0.975, 3), abs=1e-10)
    with pytest.raises(ValueError, match="0 < q < 1"):
        t_ppf(1.0, 3)


def test_pooled_interval_widens_wilson_to_the_seeds_spread() -> None:
    """(30, 100) and (50, 100): Wilson's interval of 80 / 200 is [0.335, 0.469]; the seeds' rates 0.3 and 0.5 give
    0.4 +- 12.706 * 0.1414 / sqrt(2) = 0.4 +- 1.27, clipped to [0, 1]. Seeds that agree keep Wilson's interval; one
    seed is Wilson's."""
    assert pooled_interval([(30, 100), (50, 100)]) == (0.0, 1.0)
    assert pooled_interval([(40, 100), (40, 100), (41, 100)]) == pytest.approx(wilson(121, 300))
    assert pooled_interval([(3, 10)]) == pytest.approx(wilson(3, 10))
    rates = np.array([0.80, 0.76, 0.84])  # (80, 76, 84) of 100: t half 4.3027 * 0.04 / sqrt(3) = 0.0994
    lo, hi = pooled_interval([(80, 100), (76, 100), (84, 100)])
    assert (lo, hi) == pytest.approx((0.8 - 4.3026527 * rates.std(ddof=1) / math.sqrt(3),
                                      0.8 + 4.3026527 * rates.std(ddof=1) / math.sqrt(3)), abs=1e-6)


def test_t_interval_by_hand() -> None:
    """1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.3026527 (tables: 4.303); 99%: t(0.995, 2) = 9.9248432; one value has no
    interval; none is refused."""
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - 4.3026527 / math.sqrt(3), 2.0 + 4.3026527 / math.sqrt(3)))
    assert t_interval(np.array([1.0, 2.0, 3.0]), 0.99)[2] == pytest.approx(2.0 + 9.9248432 / math.sqrt(3))
    assert t_interval([0.5]) == (0.5, None, None)
    with pytest.raises(ValueError, match="one value"):
        t_interval([])


def test_seed_test_one_sided_p_by_hand() -> None:
    """t = (2 - 1) / 0.5 = 2, df 4: P(T >= 2) = 0.0580583 (closed form for df 4), the mirror 0.9419417; the two sum
    to 1, and TOST is the larger of p_above(-m) and p_below(m). Seeds that do not vary: the side the estimate lies
    on."""
    st = SeedTest(2.0, 0.5, 4.0, "paired")
    assert st.p_above(1.0) == pytest.approx(0.0580583, abs=1e-7)
    assert st.p_below(1.0) == pytest.approx(1 - 0.0580583, abs=1e-7)
    assert st.p_above() + st.p_below() == pytest.approx(1.0)
    assert st.p_equiv(3.0) == max(st.p_above(-3.0), st.p_below(3.0))
    flat = SeedTest(2.0, 0.0, 4.0, "paired")
    assert (flat.p_above(1.0), flat.p_below(1.0), flat.p_above(2.0), flat.p_below(3.0)) == (0.0, 1.0, 0.5, 0.0)


def test_seed_test_by_hand() -> None:
    u = np.zeros(4)  # users do not matter here: each seed's value is its users' mean
    # paired: differences 1, 2, 3 -> mean 2, sd 1, se 1/sqrt(3), t = 2 sqrt(3), df 2: p = 1 - t / sqrt(2 + t^2)
    a, b = [u + 1, u + 3, u + 5], [u, u + 1, u + 2]
    st = seed_test(a, b, paired_seeds=True)
    assert (st.kind, st.estimate, st.df) == ("paired", 2.0, 2.0) and st.se == pytest.approx(1 / math.sqrt(3))
    assert st.p_value() == pytest.approx(1 - 2 * math.sqrt(3) / math.sqrt(14), abs=1e-12)
    # Welch: a's seeds 1, 3 (var 2), b's 0, 0, 3 (var 3): se^2 = 2/2 + 3/3 = 2, df = 4 / (1/1 + 1/2) = 8/3
    st = seed_test([u + 1, u + 3], [u, u, u + 3])
    assert (st.kind, st.estimate) == ("welch", 1.0) and st.se == pytest.approx(math.sqrt(2))
    assert st.df == pytest.approx(8 / 3)
    assert st.p_value() == pytest.approx(2 * t_cdf(-1 / math.sqrt(2), 8 / 3), abs=1e-15)
    # pooled: one seed against 0, 1, 2 (var 1): se^2 = 1 * (1 + 1/3), df 2
    st = seed_test([u + 4], [u, u + 1, u + 2])
    assert (st.kind, st.estimate, st.df) == ("pooled", 3.0, 2.0) and st.se == pytest.approx(math.sqrt(4 / 3))
    # equivalence within +-m: the larger one-sided p
    m = 5.0
    assert st.p_equiv(m) == pytest.approx(max(1 - t_cdf((3 + m) / st.se, 2), t_cdf((3 - m) / st.se, 2)))
    assert seed_test([u + 1], [u]) is None and seed_test([u + 1], [u], paired_seeds=True) is None
    with pytest.raises(ValueError, match="same seeds"):
        seed_test([u, u], [u], paired_seeds=True)


def test_seed_test_of_seeds_that_do_not_vary() -> None:
    u = np.arange(5.0)
    same = seed_test([u, u + 1, u], [u, u + 1, u], paired_seeds=True)
    assert same.se == 0.0 and same.p_value() == 1.0 and same.p_equiv(1e-9) == 0.0
    shifted = seed_test([u + 1, u + 1], [u, u])  # both sides constant across seeds: a sure difference of 1
    assert shifted.se == 0.0 and shifted.p_value() == 0.0 and shifted.p_equiv(0.5) == 1.0


def test_requiring_the_seeds_test_keeps_the_error_rate_where_seeds_dominate() -> None:
    """No true difference, a seed effect (sd 0.2) far above the users' noise (se 0.025), 3 seeds a side: the
    bootstrap alone calls a difference in about a fifth of the data sets (measured 0.19 at 300); requiring the seeds'
    t-test too keeps it at most near the nominal 5%."""
    rng = np.random.default_rng(1)
    alone = both = 0
    for i in range(150):
        x = rng.normal(size=400)
        a, b = ([x + rng.normal(scale=0.2) + rng.normal(scale=0.5, size=400) for _ in range(3)] for _ in range(2))
        p_boot = bootstrap_diff(a, b, n_boot=400, seed=i).p_value
        alone += p_boot < 0.05
        both += max(p_boot, seed_test(a, b).p_value()) < 0.05
    assert alone / 150 > 0.1 and both / 150 <= 0.08


# --- Holm ---------------------------------------------------------------------------------------------------------

def _holm_rejects(p: list[float], alpha: float) -> set[int]:
    """Holm's procedure as published: walk up the sorted p-values, reject while p_(i) <= alpha / (m - i + 1)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out = set()
    for rank, i in enumerate(order):
        if p[i] > alpha / (len(p) - rank):
            break
        out.add(i)
    return out


def test_holm_hand_cases() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1, then monotone
    assert holm([0.02]) == pytest.approx([0.02])
    out = holm([0.01, np.nan, 0.04])  # NaN: no test, not counted
    assert out[0] == pytest.approx(0.02) and np.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert holm([]).shape == (0,)
    with pytest.raises(ValueError):
        holm([0.5, 1.5])


def test_holm_agrees_with_the_sequential_procedure() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        m = int(rng.integers(1, 12))
        p = np.round(rng.beta(0.4, 2.0, size=m), 3).tolist()  # rounding makes ties
        adj = holm(p)
        assert np.all(adj >= np.asarray(p) - 1e-15) and np.all(adj <= 1)
        for alpha in (0.01, 0.05, 0.1):
            assert {i for i in range(m) if adj[i] <= alpha} == _holm_rejects(p, alpha)


# --- equivalence and verdict ----------------------------------------------------------------------------------------

def _result(dist: np.ndarray) -> BootstrapResult:
    lo, hi = np.quantile(dist, [0.025, 0.975])
    return BootstrapResult(float(np.mean(dist)), float(lo), float(hi), 1.0, dist, 3, 3, 100)


def test_equivalence_hand_case() -> None:
    res = _result(np.arange(-50, 950) / 1000)  # -0.050 .. 0.949
    eq = equivalence_test(res, 0.9)
    assert eq.p_value == pytest.approx(51 / 1001)  # 50 replicates >= 0.9, none <= -0.9
    assert not eq.equivalent
    assert equivalence_test(res, 0.95).p_value == pytest.approx(1 / 1001) and equivalence_test(res, 0.95).equivalent
    assert (eq.lo, eq.hi) == pytest.approx(tuple(np.quantile(res.distribution, [0.05, 0.95])))
    with pytest.raises(ValueError):
        equivalence_test(res, 0.0)


def test_tost_agrees_with_the_90_percent_interval() -> None:
    rng = np.random.default_rng(8)
    decided = 0
    for _ in range(200):
        res = _result(rng.normal(rng.uniform(-0.05, 0.05), rng.uniform(0.005, 0.03), size=2000))
        margin = float(rng.uniform(0.01, 0.08))
        eq = equivalence_test(res, margin)
        lo, hi = res.ci(0.90)
        if min(abs(lo + margin), abs(hi - margin)) > 1e-3:  # away from the boundary
            decided += 1
            assert eq.equivalent == (-margin < lo and hi < margin)
    assert decided > 150


def test_margin() -> None:
    assert Margin(0.05).absolute(0.04) == pytest.approx(0.002) and Margin(0.05).text() == "5%"
    assert Margin(0.02, relative=False).absolute(0.7) == 0.02 and Margin(0.02, relative=False).text() == "0.02"
    with pytest.raises(ValueError):
        Margin(0.0)


def test_verdict_branches() -> None:
    assert verdict(0.01, 0.001, 0.2, "5%") == "higher"
    assert verdict(-0.01, 0.001, 0.001, "5%") == "lower"  # a difference wins over equivalence
    assert verdict(0.001, 0.4, 0.01, "5%") == "equivalent (within ±5%)"
    assert verdict(0.001, 0.4, 0.2, "5%") == "undecided"
    assert verdict(0.0, 0.9, None, "5%") == "undecided"  # no equivalence test, no equivalence
    assert verdict(0.01, 0.04, None, "0.02", alpha=0.01) == "undecided"
    allowed = {"higher", "lower", "equivalent (within ±5%)", "undecided"}
    for est in (-1.0, 0.0, 1.0):
        for p in (0.0, 0.049, 0.05, 0.5, 1.0):
            for q in (None, 0.0, 0.049, 0.05, 1.0):
                assert verdict(est, p, q, "5%") in allowed


def test_modules_import_no_torch() -> None:
    """stats.py and compare.py import only NumPy, the standard library and resdom.errors / resdom.report.stats /
    resdom.report.collect (where the evidence file of a run lies) / resdom.bounded (the bounded npz reader) /
    resdom.limits (values cut in messages) / resdom.report.markdown (the table writer), and importing them loads no
    torch."""
    import subprocess
    import sys

    allowed = {"numpy", "resdom.errors", "resdom.report.stats", "resdom.report.collect", "resdom.bounded", "__future__",
               "resdom.limits", "resdom.report.markdown",
               "json", "lzma",
               "math", "re", "zipfile", "zlib", "dataclasses", "pathlib", "typing", "collections.abc", "statistics"}
    for name in ("stats.py", "compare.py"):
        tree = ast.parse((SRC / name).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert imported <= allowed, (name, imported - allowed)
    code = "import sys, resdom.report.compare, resdom.report.stats; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


# --- power: the smallest detectable difference ------------------------------------------------------------------

def test_detectable_difference_by_hand() -> None:
    """(q(1 - alpha/2) + q(0.8)) SE: normal 1.959964 + 0.841621; t with 4 df 2.776445 + 0.940965 (tables)."""
    assert detectable_difference(1.0) == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    assert detectable_difference(0.01, 4.0) == pytest.approx(0.01 * (2.776445 + 0.940965), abs=1e-7)
    assert detectable_difference(2.0, math.inf, alpha=0.01, power=0.9) == pytest.approx(
        2.0 * (Z99 + NormalDist().inv_cdf(0.9)), abs=1e-9)
    assert detectable_difference(0.0, 3.0) == 0.0
    with pytest.raises(ValueError):
        detectable_difference(-1.0)
    with pytest.raises(ValueError):
        detectable_difference(1.0, 3.0, alpha=0.0)


def test_detectable_difference_has_its_power_in_simulation() -> None:
    """A z-test whose true difference is the detectable difference rejects in 80% of simulated data sets (up to the
    far tail's share, here nil); the paired t-test on 5 seeds at its own detectable difference (from the true SE)
    about as often: the formula is the usual approximation of the noncentral t, close at df 4."""
    rng = np.random.default_rng(11)
    se = 0.3
    d = detectable_difference(se)
    z = rng.normal(loc=d, scale=se, size=40000) / se
    assert np.mean(np.abs(z) > Z95) == pytest.approx(0.8, abs=0.01)
    sigma, n = 1.0, 5
    d = detectable_difference(sigma / math.sqrt(n), n - 1.0)
    x = rng.normal(loc=d, scale=sigma, size=(20000, n))
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
    assert np.mean(np.abs(t) > t_ppf(0.975, n - 1.0)) == pytest.approx(0.8, abs=0.04)


# --- a proportion over users and seeds ----------------------------------------------------------------------------

def _reference_proportion(hits: np.ndarray, eligible: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """A replicate at a time, literally, with bootstrap_proportion's draws (one chunk: the users, then the seeds):
    the pooled rate over the drawn seeds (with their repeats) of the drawn users (with theirs)."""
    rng = np.random.default_rng(seed)
    n_seeds, n_users = hits.shape
    users = rng.integers(0, n_users, size=(n_boot, n_users))
    seeds = rng.integers(0, n_seeds, size=(n_boot, n_seeds)) if n_seeds > 1 else np.zeros((n_boot, 1), int)
    out = np.empty(n_boot)
    for r in range(n_boot):
        k = n = 0
        for s in seeds[r]:  # a drawn seed, as often as drawn
            k += np.sum(hits[s, users[r]] * eligible[s, users[r]])  # its drawn users, as often as drawn
            n += np.sum(eligible[s, users[r]])
        out[r] = k / n if n else np.nan
    return out


def _correlated_hits(rng: np.random.Generator, n_seeds: int, n_users: int, p: float = 0.8,
                     flip: float = 0.05) -> np.ndarray:
    """Hits of the same users in each seed: a user's hit is drawn once with probability p, then each seed flips it
    with probability ``flip`` (a user's hits correlate across seeds)."""
    base = rng.random(n_users) < p
    return np.array([base ^ (rng.random(n_users) < flip) for _ in range(n_seeds)], dtype=float)


def test_bootstrap_proportion_matches_a_literal_replicate_loop() -> None:
    rng = np.random.default_rng(4)
    hits = _correlated_hits(rng, 3, 40)
    eligible = (rng.random((3, 40)) < 0.6).astype(float)
    est, lo, hi, dist = bootstrap_proportion(hits, eligible, n_boot=200, seed=9)
    assert est == (hits * eligible).sum() / eligible.sum()
    assert dist == pytest.approx(_reference_proportion(hits, eligible, 200, 9), abs=1e-12, nan_ok=True)
    assert (lo, hi) == pytest.approx(tuple(np.nanquantile(dist, [0.025, 0.975])))
    together = bootstrap_proportions([(hits, eligible), (hits, None)], n_boot=200, seed=9)
    assert together[0][1:3] == (lo, hi) and np.array_equal(together[0][3], dist, equal_nan=True)
    assert np.array_equal(together[1][3], bootstrap_proportion(hits, n_boot=200, seed=9)[3])
    one = bootstrap_proportion(hits[:1], n_boot=50, seed=2)[3]
    assert one == pytest.approx(_reference_proportion(hits[:1], np.ones((1, 40)), 50, 2), abs=1e-12)


def test_bootstrap_proportion_by_hand() -> None:
    """Two seeds, three users, every replicate a pooled count of what it drew: all hits give [1, 1]; the pooled
    estimate is sum k / sum n (3 of 5 eligible)."""
    hits = np.array([[1, 0, 1], [1, 1, 0]])
    eligible = np.array([[1, 1, 1], [1, 0, 1]])
    est, lo, hi, dist = bootstrap_proportion(hits, eligible, n_boot=100)
    assert est == pytest.approx(3 / 5)
    assert np.all((dist[~np.isnan(dist)] >= 0) & (dist[~np.isnan(dist)] <= 1))
    assert bootstrap_proportion(np.ones((2, 3)), n_boot=20)[1:3] == (1.0, 1.0)
    with pytest.raises(ValueError, match="0 or 1"):
        bootstrap_proportion(np.array([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="no eligible"):
        bootstrap_proportion(np.ones((1, 3)), np.zeros((1, 3)))


def test_bootstrap_proportion_is_wider_than_wilson_when_a_users_hits_correlate_across_seeds() -> None:
    """Five seeds of the same 2,000 users whose hits nearly repeat across seeds: users x seeds = 10,000 trials for
    Wilson, about 2,000 independent ones in truth; the bootstrap's interval is about sqrt(5) times as wide. With
    seeds that do not share their users' hits (independent draws) it is about Wilson's width or wider (seeds and
    users crossed: conservative)."""
    rng = np.random.default_rng(8)
    hits = _correlated_hits(rng, 5, 2000)
    _, lo, hi, _ = bootstrap_proportion(hits, n_boot=2000, seed=1)
    w_lo, w_hi = wilson(int(hits.sum()), hits.size)
    assert hi - lo > 1.8 * (w_hi - w_lo)
    independent = (rng.random((5, 2000)) < 0.8).astype(float)
    _, lo, hi, _ = bootstrap_proportion(independent, n_boot=2000, seed=1)
    w_lo, w_hi = wilson(int(independent.sum()), independent.size)
    assert hi - lo > 0.9 * (w_hi - w_lo)


def test_bootstrap_proportion_coverage_equals_the_slow_reference_and_beats_wilson() -> None:
    """A hand-made case, 120 simulated data sets of 3 seeds x 60 users whose hits correlate across seeds (true rate
    0.8 · 0.95 + 0.2 · 0.05 = 0.77): the interval from the slow literal loop and from bootstrap_proportion are the
    same in every data set, so their coverage is equal; it is near or above 95%, where Wilson's over users x seeds
    falls well short."""
    rng = np.random.default_rng(21)
    truth = 0.8 * 0.95 + 0.2 * 0.05
    fast = slow = wil = 0
    n = 120
    for i in range(n):
        hits = _correlated_hits(rng, 3, 60)
        _, lo, hi, _ = bootstrap_proportion(hits, n_boot=300, seed=i)
        ref = np.nanquantile(_reference_proportion(hits, np.ones_like(hits), 300, i), [0.025, 0.975])
        assert (lo, hi) == pytest.approx(tuple(ref), abs=1e-12)
        fast += lo <= truth <= hi
        slow += ref[0] <= truth <= ref[1]
        w_lo, w_hi = wilson(int(hits.sum()), hits.size)
        wil += w_lo <= truth <= w_hi
    assert fast == slow
    assert fast / n >= 0.9 and wil / n < 0.85
