"""study.echo (question 3): the stratified difference against loops and hand-computed cases (one where confounding
by the last item's frequency flips the crude difference), the hierarchical bootstrap against a slow replica of its
draws, and the table, Markdown and figures on a synthetic store of users.npz files in the evidence writer's
format."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resdom.errors import ResdomError
from resdom.report.stats import Margin, holm
from resdom.study.echo import (
    FREQ_BINS,
    NO_DIFFERENCE,
    bin_names,
    check_bins,
    echo_bootstrap,
    echo_figure,
    echo_markdown,
    echo_strata_figure,
    echo_table,
    freq_strata,
    stratified_difference,
)

N_ITEMS, ALPHAS = 300, [0.0, 1.0]
CAPS = {"target_rank": 255, "target_rank_unfiltered": 255, "last_rank": 255, "alpha_target_rank": 21,
        "alpha_target_rank_unfiltered": 21, "alpha_last_rank": 2}


def write_cell(path: Path, target_rank: np.ndarray, last_rank: np.ndarray, last_freq: np.ndarray,
               users: np.ndarray | None = None) -> Path:
    """A users.npz as resdom.diagnostics.evidence writes it (header with caps, uint8 ranks capped, int32 ids)."""
    n = target_rank.size
    head = {"version": 1, "split": "test", "n_users": n, "n_items": N_ITEMS, "alphas": ALPHAS, "rank_cap": 21,
            "caps": CAPS, "K": 10, "offsets": [1], "filter_seen": True, "layers": "all"}
    tr = np.minimum(target_rank, 255).astype(np.uint8)
    lr = np.minimum(last_rank, 255).astype(np.uint8)
    arrays: dict[str, Any] = {
        "header": np.array(json.dumps(head, sort_keys=True)),
        "user": (np.arange(n) if users is None else users).astype(np.int32),
        "target_rank": tr, "target_rank_unfiltered": tr,
        "last_rank": lr, "last_seen": last_freq > 0, "last_freq": last_freq.astype(np.int32),
        "alpha_target_rank": np.asfortranarray(np.stack([np.minimum(tr, 21)] * 2)),
        "alpha_target_rank_unfiltered": np.asfortranarray(np.stack([np.minimum(tr, 21)] * 2)),
        "alpha_last_rank": np.asfortranarray(np.stack([np.minimum(lr, 2)] * 2)),
        "recoverable": np.zeros(n, bool),
    }
    path.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path / "users.npz", **arrays)
    return path / "users.npz"


# --- references -----------------------------------------------------------------------------------------------------

def mh_by_loops(echo: list[bool], hit: list[float], stratum: list[int]) -> float:
    """Mantel-Haenszel risk difference, one stratum at a time, from its definition."""
    num = den = 0.0
    for j in sorted(set(stratum)):
        e = [h for h, g, s in zip(hit, echo, stratum) if s == j and g]
        o = [h for h, g, s in zip(hit, echo, stratum) if s == j and not g]
        if not e or not o:
            continue
        w = len(e) * len(o) / (len(e) + len(o))
        num += w * (sum(e) / len(e) - sum(o) / len(o))
        den += w
    return num / den if den else math.nan


def test_bins() -> None:
    assert bin_names() == ["0", "1-4", "5-19", "20-99", "100+"]
    freq = np.array([0, 1, 4, 5, 19, 20, 99, 100, 5000])
    assert freq_strata(freq).tolist() == [0, 1, 1, 2, 2, 3, 3, 4, 4]
    for bad in [((1, 4), (5, None)), ((0, 4), (6, None)), ((0, 4), (5, 9)), ()]:
        with pytest.raises(ValueError):
            check_bins(bad)


def test_stratified_difference_against_loops() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(5, 60))
        echo = rng.random(n) < 0.4
        hit = (rng.random(n) < 0.3).astype(float)
        stratum = rng.integers(0, 5, n)
        got = stratified_difference(echo, hit, stratum, 5)[0]
        want = mh_by_loops(echo.tolist(), hit.tolist(), stratum.tolist())
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-12)


def test_hand_computed_case() -> None:
    # stratum 0: echo 2 users (1 hit), others 2 (0 hits): w = 1, diff 0.5
    # stratum 1: echo 1 (1 hit), others 3 (1 hit): w = 3/4, diff 2/3
    # stratum 2: echo only: drops out
    echo = [1, 1, 0, 0, 1, 0, 0, 0, 1]
    hit = [1, 0, 0, 0, 1, 1, 0, 0, 1]
    stratum = [0, 0, 0, 0, 1, 1, 1, 1, 2]
    rd, p1, p0 = stratified_difference(np.array(echo, bool), np.array(hit), np.array(stratum), 3)
    assert rd == pytest.approx((1 * 0.5 + 0.75 * 2 / 3) / 1.75)
    assert p1 == pytest.approx((1 * 0.5 + 0.75 * 1.0) / 1.75) and p0 == pytest.approx((0 + 0.75 / 3) / 1.75)
    assert math.isnan(stratified_difference(np.ones(4, bool), np.ones(4), np.zeros(4, int), 1)[0])


def confounded(scale: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Echo users sit mostly among rare last items, where everyone hits less; within each stratum they hit 0.1
    more than the others. Crude: echo 0.36, others 0.74 (-0.38); stratified: +0.1."""
    echo, hit, freq = [], [], []
    for freq_value, g, n, hits in [(0, 1, 90, 27), (0, 0, 10, 2), (150, 1, 10, 9), (150, 0, 90, 72)]:
        n, hits = n * scale, hits * scale
        echo += [g] * n
        hit += [1] * hits + [0] * (n - hits)
        freq += [freq_value] * n
    return np.array(echo, bool), np.array(hit, float), np.array(freq)


def test_confounding_flips_the_crude_difference() -> None:
    echo, hit, freq = confounded()
    crude = hit[echo].mean() - hit[~echo].mean()
    assert crude == pytest.approx(0.36 - 0.74)
    rd, p1, p0 = stratified_difference(echo, hit, freq_strata(freq), len(FREQ_BINS))
    assert rd == pytest.approx(0.1) and p1 - p0 == pytest.approx(0.1)
    echo, hit, freq = confounded(10)  # 2,000 users: enough to tell +0.1 from 0
    result, dropped = echo_bootstrap(echo[None], hit[None], freq_strata(freq), 5, n_boot=400, seed=1)
    assert dropped == 0 and result.estimate == pytest.approx(0.1)
    assert 0 < result.lo < 0.1 < result.hi < 0.2 and result.p_value < 0.01  # the crude -0.38 is far outside


# --- the bootstrap against a slow replica of its draws --------------------------------------------------------------

def slow_bootstrap(echo: np.ndarray, hit: np.ndarray, stratum: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Replicate by replicate: users drawn with replacement, the seeds drawn with replacement (after the users, as
    the implementation draws them in one chunk), each drawn seed's RD by loops, averaged over the drawn seeds."""
    S, U = echo.shape
    rng = np.random.default_rng(seed)
    users = rng.integers(0, U, size=(n_boot, U))
    seeds = rng.integers(0, S, size=(n_boot, S)) if S > 1 else np.zeros((n_boot, 1), int)
    out = []
    for r in range(n_boot):
        u = users[r]
        vals = [mh_by_loops(echo[s][u].tolist(), hit[s][u].tolist(), stratum[u].tolist()) for s in seeds[r]]
        out.append(np.mean(vals))
    return np.array(out)


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_bootstrap_matches_slow_replica(n_seeds: int) -> None:
    rng = np.random.default_rng(7)
    U = 40
    stratum = rng.integers(0, 3, U)
    echo = rng.random((n_seeds, U)) < 0.5
    hit = (rng.random((n_seeds, U)) < 0.4).astype(float)
    result, dropped = echo_bootstrap(echo, hit, stratum, 3, n_boot=150, seed=11)
    want = slow_bootstrap(echo, hit, stratum, 150, 11)
    assert dropped == int(np.isnan(want).sum())
    np.testing.assert_allclose(result.distribution, want[~np.isnan(want)], atol=1e-12)
    assert result.estimate == pytest.approx(np.mean([mh_by_loops(echo[s].tolist(), hit[s].tolist(),
                                                                 stratum.tolist()) for s in range(n_seeds)]))
    lo, hi = np.quantile(want[~np.isnan(want)], [0.025, 0.975])
    assert (result.lo, result.hi) == pytest.approx((lo, hi))
    assert result.n_seeds_a == n_seeds and result.n_users == U


def test_bootstrap_drops_undefined_replicates() -> None:
    # 6 users, a single echo user: many replicates miss it and have no difference
    echo = np.array([[1, 0, 0, 0, 0, 0]], bool)
    hit = np.array([[1, 0, 1, 0, 0, 0]], float)
    result, dropped = echo_bootstrap(echo, hit, np.zeros(6, int), 1, n_boot=300, seed=0)
    want = slow_bootstrap(echo, hit, np.zeros(6, int), 300, 0)
    assert dropped == int(np.isnan(want).sum()) > 0 and result.distribution.size == 300 - dropped
    with pytest.raises(ValueError, match=NO_DIFFERENCE):
        echo_bootstrap(np.ones((1, 6), bool), hit, np.zeros(6, int), 1)


# --- the table on a synthetic store ---------------------------------------------------------------------------------

def ranks_for(echo: np.ndarray, hit: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(target_rank, last_rank) realising ``echo`` (last_rank 1 or 2..255) and ``hit`` (target_rank <= 10)."""
    target = np.where(hit > 0, rng.integers(1, 11, hit.size), rng.integers(11, 400, hit.size))
    last = np.where(echo, 1, rng.integers(2, 300, echo.size))
    return target, last


def build_store(tmp_path: Path) -> Path:
    """beauty-ts: sasrec (3 seeds, the confounded users, the seeds' hits shuffled within groups and strata),
    gru4rec (1 seed, nobody echoes); toys-ts: sasrec seeds 1-2 with evidence, seed 3 without."""
    rng = np.random.default_rng(0)
    echo, hit, freq = confounded(10)
    store = tmp_path / "results"
    for s in (1, 2, 3):
        h = hit.copy()
        for g in (True, False):
            for f in (0, 150):
                idx = np.flatnonzero((echo == g) & (freq == f))
                h[idx] = rng.permutation(h[idx])
        target, last = ranks_for(echo, h, rng)
        write_cell(store / "beauty-ts" / "sasrec" / f"seed{s}", target, last, freq)
    target, last = ranks_for(np.zeros(echo.size, bool), hit, rng)
    write_cell(store / "beauty-ts" / "gru4rec" / "seed1", target, last, freq)
    for s in (1, 2):
        e = rng.random(120) < 0.6
        h = (rng.random(120) < np.where(e, 0.2, 0.3)).astype(float)
        target, last = ranks_for(e, h, rng)
        write_cell(store / "toys-ts" / "sasrec" / f"seed{s}", target, last, np.arange(120) % 40)
    (store / "toys-ts" / "sasrec" / "seed3").mkdir()
    (store / "toys-ts" / "bert4rec" / "seed1").mkdir(parents=True)  # no evidence at all: no row
    return store


def test_table_numbers(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    table = echo_table(store, n_boot=300, seed=5)
    keys = [(r.dataset, r.label) for r in table.rows]
    assert keys == [("beauty-ts", "gru4rec"), ("beauty-ts", "sasrec"), ("toys-ts", "sasrec")]
    gru, sas, toys = table.rows
    assert gru.diff is None and gru.verdict == f"undecided ({NO_DIFFERENCE} in every seed)"
    assert gru.group_users() == (0.0, 2000.0)
    # sasrec: hits shuffled within (group, stratum): every seed has the confounded counts
    assert sas.n_seeds == 3 and sas.n_users == 2000 and sas.group_users() == (1000.0, 1000.0)
    assert sas.crude() == pytest.approx((0.36, 0.74))
    assert sas.diff.estimate == pytest.approx(0.1) and sas.p1_std - sas.p0_std == pytest.approx(0.1)
    assert sas.n[0].tolist() == [[100, 900], [0, 0], [0, 0], [0, 0], [900, 100]]
    assert sas.margin == Margin(0.05) and sas.margin_abs == pytest.approx(0.05 * sas.p0_std)
    # toys: seeds 1-2 used, seed 3 named; numbers against loops on the files themselves
    assert toys.n_seeds == 2 and toys.missing == ["toys-ts/sasrec/seed3"]
    from resdom.report.compare import read_users
    evs = [read_users(store / "toys-ts" / "sasrec" / f"seed{s}" / "users.npz") for s in (1, 2)]
    want = np.mean([mh_by_loops((ev.last_rank == 1).tolist(), (ev.target_rank <= 10).astype(float).tolist(),
                                freq_strata(ev.last_freq).tolist()) for ev in evs])
    assert toys.diff.estimate == pytest.approx(want)
    crude_e = np.mean([(ev.target_rank[ev.last_rank == 1] <= 10).mean() for ev in evs])
    assert toys.crude()[0] == pytest.approx(crude_e)
    # Holm across the two rows with a difference; verdicts from the adjusted p-values
    assert [sas.p_holm, toys.p_holm] == pytest.approx(holm([sas.diff.p_value, toys.diff.p_value]).tolist())
    assert sas.verdict == "higher" and table.n_boot >= 300
    # the seeds' own RDs' t-test: sasrec's three seeds agree exactly (se 0, p 0); toys's two give df 1
    assert (sas.seeds.kind, sas.seeds.se, sas.seeds.p_value()) == ("paired", 0.0, 0.0)
    rds = [mh_by_loops((ev.last_rank == 1).tolist(), (ev.target_rank <= 10).astype(float).tolist(),
                       freq_strata(ev.last_freq).tolist()) for ev in evs]
    assert toys.seeds.df == 1.0 and toys.seeds.estimate == pytest.approx(want)
    assert toys.seeds.se == pytest.approx(abs(rds[0] - rds[1]) / 2)  # sd of two values / sqrt(2)
    assert [sas.p_seed_holm, toys.p_seed_holm] == pytest.approx(
        holm([sas.seeds.p_value(), toys.seeds.p_value()]).tolist())


def test_table_labels_and_errors(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    table = echo_table(store, datasets=["toys-ts"], labels=["sasrec", "duorec"], n_boot=100)
    assert [r.label for r in table.rows] == ["sasrec", "duorec"]
    assert table.rows[1].verdict == "undecided" and table.rows[1].missing == ["toys-ts/duorec (no cells)"]
    md = echo_markdown(table)
    assert ("| toys-ts | duorec | – | – | – | – | – | no per-user evidence (retrain or re-diagnose: "
            "resdom diagnose RUN --what users): toys-ts/duorec (no cells) | – | undecided |") in md
    with pytest.raises(ResdomError, match="no such results store"):
        echo_table(tmp_path / "nowhere")
    # a seed over other users cannot be resampled with the others
    ev_dir = store / "toys-ts" / "sasrec" / "seed3"
    write_cell(ev_dir, np.full(120, 3), np.full(120, 1), np.arange(120) % 40, users=np.arange(120) + 1)
    with pytest.raises(ResdomError, match="seed3/users.npz: its users"):
        echo_table(store, datasets=["toys-ts"], labels=["sasrec"])


def test_markdown_and_figures(tmp_path: Path) -> None:
    table = echo_table(build_store(tmp_path), n_boot=200)
    md = echo_markdown(table)
    lines = md.splitlines()
    assert lines[0].startswith("| data set | model | seeds | users: echo / others | HR@10: echo")
    sas = next(line for line in lines if line.startswith("| beauty-ts | sasrec |"))
    d = table.rows[1].diff
    assert "| 3 | 1,000 / 1,000 | 0.3600 | 0.7400 | -0.3800 |" in sas
    assert f"{d.estimate:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}]" in sas and sas.endswith("| higher |")
    assert "| toys-ts | sasrec | 2 (of 3) |" in md
    assert "0, 1-4, 5-19, 20-99, 100+" in md and "±5%" in md
    fig = echo_figure(table)
    assert fig.get_size_inches()[0] == pytest.approx(3.4) and fig.dpi <= 100
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["beauty-ts sasrec\nn=1,000 / 1,000", "toys-ts sasrec\nn=69 / 51"]
    assert list(fig.axes[0].get_yticks()) == [1, 0]  # the first row on top
    assert fig.legends[0].get_title().get_text() == "n = users echo / others"  # below the panel, not on it
    strata = echo_strata_figure(table.rows[1])
    texts = [t.get_text() for t in strata.axes[0].get_legend().get_texts()]
    assert texts == ["echo (top-1 = last item), n=1,000", "others, n=1,000"]
    xs, ys = strata.axes[0].lines[0].get_data()
    assert ys[0] == pytest.approx(0.3) and ys[4] == pytest.approx(0.9) and math.isnan(ys[1])


def test_echo_answer_lists_the_cells_of_each_verdict() -> None:
    """The answer sentence counts the rows with a stratified difference by verdict, names the cells of every verdict
    but "undecided", and counts the rows without a difference."""
    from types import SimpleNamespace

    from resdom.study.echo import echo_answer

    def row(ds: str, label: str, verdict: str, diff: object = 0.1) -> SimpleNamespace:
        return SimpleNamespace(dataset=ds, label=label, verdict=verdict, diff=diff)

    table = SimpleNamespace(k=10, rows=[row("a", "sasrec", "lower"), row("b", "sasrec", "undecided"),
                                        row("b", "duorec", "lower"), row("c", "sasrec", "equivalent"),
                                        row("c", "gru4rec", "undecided (no stratum holds both groups in a seed)",
                                            None)])
    assert echo_answer(table) == (
        "Answer, generated from the table: of the 4 cells with a stratified difference, the echoing users' filtered "
        "HR@10 against the others' with equally frequent last items is lower in 2 (a `sasrec`, b `duorec`); "
        "equivalent in 1 (c `sasrec`); undecided in 1. 1 cell has no stratum holding both groups (or no evidence).")
    assert echo_answer(SimpleNamespace(k=10, rows=[])).endswith("last items is not assessed.")


def test_study_figures_draw_a_long_or_odd_data_set_name_as_the_report_figures_do() -> None:
    """A data set named by a long path pushed the study's figures off the page (constrained layout gave up, with a
    warning) and an escape character in a name came out as a box: the study's figures now draw names as the
    report's do (``drawn_name``: cut around a "…", a control character as its code)."""
    import io
    import warnings
    from types import SimpleNamespace as NS

    from resdom.report.figures import drawn_name
    from resdom.study.reliance_dynamics import dynamics_figure

    long, odd = "/very/long/path/" * 120 + "data.csv", "a\x1bb"

    def row(ds: str, label: str) -> NS:
        return NS(dataset=ds, label=label, diff=NS(lo=-0.1, hi=0.1, estimate=0.0), crude=lambda: (0.3, 0.2),
                  group_users=lambda: (100.0, 120.0), n_seeds=2)

    cells = [NS(dataset=ds, dynamics=NS(ndcg_plateau=10, hrli_plateau=15)) for ds in (long, odd)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # constrained layout's "axes sizes collapsed to zero", a missing glyph
        echo = echo_figure(NS(rows=[row(long, "sasrec"), row(odd, "duorec")], k=10))
        dynamics = dynamics_figure(NS(cells=cells))
        for fig in (echo, dynamics):
            fig.savefig(io.BytesIO(), format="png")
    assert [t.get_text() for t in echo.axes[0].get_yticklabels()] == \
        [f"{drawn_name(long)} sasrec\nn=100 / 120", "a\\x1bb duorec\nn=100 / 120"]
    assert [t.get_text() for t in dynamics.legends[0].get_texts()][:2] == [f"{drawn_name(long)} (n=1)", "a\\x1bb (n=1)"]
