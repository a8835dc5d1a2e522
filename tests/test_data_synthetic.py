"""Synthetic generator: seeded, fast, and the planted structure is there at the rates its knobs say."""

from __future__ import annotations

import numpy as np
import pytest

from resdom.data.prepare import load_interactions
from resdom.data.synthetic import SyntheticConfig, generate, parse_synthetic_source, planted_structure
from resdom.errors import ResdomError


def pairs(seqs, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """(x_{t-gap}, x_t) for every position t >= 2 of every sequence (so both signals are defined)."""
    src, dst = [], []
    for s in seqs.to_lists():
        s = np.array(s)
        src.append(s[2 - gap : len(s) - gap])
        dst.append(s[2:])
    return np.concatenate(src), np.concatenate(dst)


def test_defaults_are_seeded() -> None:
    a = generate(SyntheticConfig())
    b = generate(SyntheticConfig())
    assert np.array_equal(a.items, b.items) and np.array_equal(a.times, b.times)
    c = generate(SyntheticConfig(seed=1))
    assert not np.array_equal(a.items[:200], c.items[:200])
    assert len(a) == 3000 and a.items.min() >= 1 and a.items.max() <= 500
    assert a.lengths.min() >= 10 and a.lengths.max() <= 40
    same_user = np.repeat(np.arange(len(a)), a.lengths)
    step = np.diff(a.times)[same_user[1:] == same_user[:-1]]
    assert (step > 0).all()


def test_planted_mappings() -> None:
    cfg = SyntheticConfig(n_items=50, n_clusters=5)
    t = planted_structure(cfg)
    for succ in (t.succ_last, t.succ_skip2):
        assert sorted(succ[1:].tolist()) == list(range(1, 51))  # a permutation
        assert not np.any(succ[1:] == np.arange(1, 51))  # no fixed point
        x, seen = 1, set()
        while x not in seen:  # a single cycle through all items
            seen.add(x)
            x = int(succ[x])
        assert len(seen) == 50
    assert not np.any(t.succ_last[1:] == t.succ_skip2[1:])
    assert np.bincount(t.item_cluster[1:]).tolist() == [10] * 5
    assert planted_structure(cfg).succ_last.tolist() == t.succ_last.tolist()


def test_rates_match_the_knobs() -> None:
    cfg = SyntheticConfig()  # p_last 0.6, p_skip2 0.1, p_user 0.2, noise 0.1
    seqs, truth = generate(cfg), planted_structure(cfg)
    prev, nxt = pairs(seqs, 1)
    two, _ = pairs(seqs, 2)
    follows_last = (truth.succ_last[prev] == nxt).mean()
    follows_skip2 = (truth.succ_skip2[two] == nxt).mean()
    assert 0.58 < follows_last < 0.63  # 0.6 plus chance hits of the other sources
    assert 0.09 < follows_skip2 < 0.13
    users = np.repeat(np.arange(len(seqs)), seqs.lengths)
    in_cluster = (truth.item_cluster[seqs.items] == truth.user_cluster[users]).mean()
    assert in_cluster > 0.25  # 0.2 planted (more at t < 2) + 1/20 of everything else


def test_skip2_only_knobs_from_source_string() -> None:
    cfg = parse_synthetic_source("synthetic:p_skip2=0.8,p_last=0.0,n_users=2000,seed=3")
    assert (cfg.p_skip2, cfg.p_last, cfg.n_users, cfg.seed) == (0.8, 0.0, 2000, 3)
    seqs, truth = generate(cfg), planted_structure(cfg)
    prev, nxt = pairs(seqs, 1)
    two, _ = pairs(seqs, 2)
    assert (truth.succ_skip2[two] == nxt).mean() > 0.78
    assert (truth.succ_last[prev] == nxt).mean() < 0.05
    # the named source keeps the generator's ids (no k-core, no remap), so the truth applies to it
    loaded = load_interactions("synthetic:p_skip2=0.8,p_last=0.0,n_users=2000,seed=3")
    assert np.array_equal(loaded.items, seqs.items) and np.array_equal(loaded.times, seqs.times)


def test_repeat_knob() -> None:
    seqs = generate(SyntheticConfig(p_repeat=0.5, p_last=0.3, p_skip2=0.0, p_user=0.1, n_users=500))
    prev, nxt = pairs(seqs, 1)
    assert 0.47 < (prev == nxt).mean() < 0.54


@pytest.mark.parametrize(
    "source, needle",
    [
        ("synthetic:n_user=5", "unknown synthetic knob 'n_user'"),
        ("synthetic:p_last=abc", "p_last"),
        ("synthetic:p_last=0.7,p_user=0.5", "> 1"),
        ("synthetic:min_len=9,max_len=3", "min_len 9 > max_len 3"),
        ("synthetic:seed", "expected knob=value"),
        ("synthetic:n_users=40,n_items=25,n_users=50", "knob 'n_users' given twice"),  # the last one won
    ],
)
def test_bad_knobs(source: str, needle: str) -> None:
    with pytest.raises(ResdomError, match=needle):
        parse_synthetic_source(source)


def test_config_forbids_extra() -> None:
    with pytest.raises(Exception, match="extra"):
        SyntheticConfig(p_lats=0.1)  # type: ignore[call-arg]


def test_planted_structure_survives_the_split_and_is_learnable() -> None:
    """A first-order count model fit on the LOO training part predicts the test target from the last input
    item about p_last of the time; a skip-2 count model on the skip-2 data does the same from item L-2."""
    from resdom.data.prepare import prepare_split

    def hit_rate(source: str, gap: int) -> float:
        split = prepare_split(source, "loo")
        n = split.n_items + 1
        counts = np.zeros((n, n))
        for s in split.train.to_lists():
            for a, b in zip(s[:-gap], s[gap:]):
                counts[a, b] += 1
        inputs = split.test.inputs
        src = inputs.items[inputs.offsets[1:] - gap]
        return float((counts[src].argmax(axis=1) == split.test.targets).mean())

    assert hit_rate("synthetic:n_users=1500", 1) > 0.55  # p_last = 0.6
    assert hit_rate("synthetic:n_users=1500,p_last=0,p_skip2=0.7", 2) > 0.6


def test_near_knob_draws_ring_neighbours_of_the_last_item() -> None:
    cfg = SyntheticConfig(p_near=0.7, near_radius=2, p_last=0.0, p_skip2=0.0, p_user=0.2)
    seqs, truth = generate(cfg), planted_structure(cfg)
    assert sorted(truth.ring.tolist()) == list(range(1, 501))
    assert all(truth.ring[truth.ring_pos[i]] == i for i in range(1, 501))
    prev, nxt = pairs(seqs, 1)
    dist = (truth.ring_pos[nxt] - truth.ring_pos[prev]) % 500
    dist = np.minimum(dist, 500 - dist)
    near = (dist >= 1) & (dist <= 2)
    assert 0.69 < near.mean() < 0.74  # 0.7 planted + chance hits (4 of 500) of the other 30%
    shares = np.bincount(dist[near], minlength=3)[1:] / near.sum()
    assert abs(shares[0] - 0.5) < 0.02  # offsets 1 and 2 equally likely
    assert (prev == nxt).mean() < 0.01  # a neighbour is never the last item itself
    assert set(truth.near(int(truth.ring[0]), 2)) == {int(truth.ring[k]) for k in (-2, -1, 1, 2)}


def test_near_knob_off_leaves_the_other_draws_unchanged() -> None:
    """p_near has its own random stream: the same knobs with p_near = 0 give the same sequences whatever
    near_radius is, and a positive p_near leaves the times as they were."""
    base = generate(SyntheticConfig(n_users=300))
    assert np.array_equal(base.items, generate(SyntheticConfig(n_users=300, near_radius=5)).items)
    near = generate(SyntheticConfig(n_users=300, p_last=0.3, p_near=0.3))
    assert np.array_equal(base.times, near.times) and not np.array_equal(base.items, near.items)


def test_demo_preset() -> None:
    cfg = parse_synthetic_source("synthetic:demo")
    assert (cfg.p_near, cfg.near_radius, cfg.p_last, cfg.p_skip2, cfg.p_user) == (0.7, 2, 0.0, 0.0, 0.2)
    assert (cfg.n_users, cfg.n_items) == (3000, 500)
    over = parse_synthetic_source("synthetic:demo,n_users=200,p_user=0.1")
    assert (over.n_users, over.p_user, over.p_near) == (200, 0.1, 0.7)
    with pytest.raises(ResdomError, match="expected knob=value"):
        parse_synthetic_source("synthetic:n_users=5,demo")  # a preset comes first
    with pytest.raises(ResdomError, match="near_radius"):
        parse_synthetic_source("synthetic:demo,n_items=4")


def test_reader_options_on_generated_data_are_refused() -> None:
    """--format csv or --user-col x on synthetic data were ignored without a word."""
    with pytest.raises(ResdomError, match=r"^synthetic:n_users=30: generated data, read from no file, so fmt='csv', "
                                          r"user_col='x' cannot apply$"):
        load_interactions("synthetic:n_users=30", fmt="csv", user_col="x")
    with pytest.raises(ResdomError, match=r"so time_col='t' cannot apply$"):
        load_interactions("synthetic", time_col="t")
    assert len(load_interactions("synthetic:n_users=30", normalize_ids=True)) == 30
