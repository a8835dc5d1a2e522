"""Position shuffles (spec §4): perturbations, per-user seeding, batch-size independence, hand cases."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics.common import window
from resdom.diagnostics.shuffle import MODES, jaccard, perturb, position_shuffle
from resdom.evaluation.evaluate import evaluate
from resdom.models import build_model
from resdom.models.config import make_model_config


def seqs(n: int = 40, seed: int = 0) -> Sequences:
    rng = np.random.default_rng(seed)
    lists = [rng.integers(1, 50, size=int(rng.integers(1, 15))).tolist() for _ in range(n)]
    return Sequences.from_lists(lists, users=np.arange(100, 100 + n))


def model(seed: int = 0, max_len: int = 10) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = build_model(make_model_config(n_items=49, max_len=max_len, hidden=16, layers=2, heads=2, init_std=0.3))
    return m.eval()


@pytest.mark.parametrize("mode", ["keep_last", "full", "reverse"])
def test_permutations_preserve_the_multiset(mode):
    s = seqs()
    for seed in (0, 5):
        p = perturb(s, mode, seed)
        assert np.array_equal(p.offsets, s.offsets) and np.array_equal(p.users, s.users)
        for a, b in zip(s.to_lists(), p.to_lists()):
            assert Counter(a) == Counter(b)
            if mode == "keep_last":
                assert a[-1] == b[-1]
            if mode == "reverse":
                assert b == a[::-1]


def test_deterministic_modes():
    s = seqs()
    last_only = perturb(s, "last_only").to_lists()
    drop_last = perturb(s, "drop_last").to_lists()
    for a, lo, dl in zip(s.to_lists(), last_only, drop_last):
        assert lo == [a[-1]] and dl == a[:-1]


def test_random_modes_shuffle_and_depend_on_seed():
    s = seqs()
    p0, p0b, p1 = perturb(s, "full", 0), perturb(s, "full", 0), perturb(s, "full", 1)
    assert np.array_equal(p0.items, p0b.items)  # same seed, same result
    assert not np.array_equal(p0.items, s.items) and not np.array_equal(p0.items, p1.items)
    # keep_last moves some non-last item in a long sequence
    k = perturb(s, "keep_last", 0)
    long = [i for i in range(len(s)) if len(set(s.sequence(i)[:-1].tolist())) > 3]
    assert any(not np.array_equal(k.sequence(i), s.sequence(i)) for i in long)


def test_seeding_is_per_user_not_per_batch():
    """A user's permutation depends on (seed, user id, length) only: not on which other users are present."""
    s = seqs()
    full = perturb(s, "full", 3)
    sub_index = np.array([7, 2, 30])
    sub = perturb(s.take(sub_index), "full", 3)
    for j, i in enumerate(sub_index):
        assert np.array_equal(sub.sequence(j), full.sequence(i))


def test_permutations_are_uniformish():
    """Over many users, the position of a given element is spread (no systematic bias of the hash keys)."""
    n = 4000
    s = Sequences.from_lists([[1, 2, 3, 4]] * n, users=np.arange(n))
    p = np.array(perturb(s, "full", 0).to_lists())
    share = (p[:, 0] == 1).mean()
    assert abs(share - 0.25) < 0.03


def test_shuffle_result_is_independent_of_batch_size():
    ev = EvalSet(seqs(), np.random.default_rng(1).integers(1, 50, size=40))
    m = model()
    a = position_shuffle(m, ev, seeds=(0, 1), batch_size=3).to_dict()
    b = position_shuffle(m, ev, seeds=(0, 1), batch_size=64).to_dict()
    assert a == b
    assert set(a["perturbations"]) == set(MODES)
    assert a["n_users"] == 40 and a["filtered"] is True


def test_original_matches_the_evaluation_loop():
    ev = EvalSet(seqs(), np.random.default_rng(1).integers(1, 50, size=40))
    m = model(max_len=6)  # shorter than many inputs: the window and the whole-input filter both matter
    res = position_shuffle(m, ev, modes=("reverse",), seeds=(0,))
    want = evaluate(m, ev, filter_seen=True).metrics
    for k, v in want.items():
        assert res.original[k] == pytest.approx(v, abs=1e-12)


def test_model_reading_only_the_last_item_ignores_keep_last():
    """A block with a zero value path passes only each position's own input on: the prediction depends on the
    last item alone (positions count from the end), so keep_last changes nothing and last_only neither."""
    ev = EvalSet(seqs(), np.random.default_rng(2).integers(1, 50, size=40))
    m = model()
    with torch.no_grad():
        for block in m.attention_blocks():
            block.attention.value.weight.zero_()
            block.attention.value.bias.zero_()
    res = position_shuffle(m, ev, modes=("keep_last", "last_only", "full"), seeds=(0, 1))
    for mode in ("keep_last", "last_only"):
        p = res.perturbations[mode]
        assert p["jaccard@10"] == 1.0
        assert all(v == 0.0 for v in p["relative_change"].values() if v is not None)
    assert res.perturbations["full"]["jaccard@10"] < 1.0


def test_window_keeps_the_last_items():
    s = Sequences.from_lists([[1, 2, 3, 4, 5], [6], [7, 8]])
    assert window(s, 3).to_lists() == [[3, 4, 5], [6], [7, 8]]


def test_jaccard_by_hand():
    a = np.array([[1, 2, 3, 4], [1, 2, 3, 4]])
    b = np.array([[4, 3, 2, 1], [1, 2, 5, 6]])
    assert jaccard(a, b).tolist() == [1.0, 2 / 6]


def test_jaccard_counts_only_listed_items():
    """0 pads a list shorter than 10 (a user with fewer recommendable items): it is no item, in neither set."""
    a = np.array([[1, 2, 3, 0], [1, 2, 0, 0], [0, 0, 0, 0]])
    b = np.array([[3, 2, 1, 0], [2, 5, 6, 0], [0, 0, 0, 0]])
    assert jaccard(a, b).tolist() == [1.0, 1 / 4, 1.0]


def test_top_lists_hold_only_recommendable_items():
    """A catalogue of 12 items and inputs of 5 distinct items: 7 items can be recommended, so every top-10 list is
    those 7 whatever the order of the input, and Jaccard@10 is 1 (the filtered-out items and the padding, tied at
    -inf, used to fill the lists in an arbitrary order)."""
    rng = np.random.default_rng(4)
    lists = [rng.permutation(np.arange(1, 13))[:5].tolist() for _ in range(30)]
    ev = EvalSet(Sequences.from_lists(lists, users=np.arange(30)), rng.integers(1, 13, size=30))
    torch.manual_seed(0)
    m = build_model(make_model_config(n_items=12, max_len=10, hidden=16, layers=2, heads=2, init_std=0.3)).eval()
    res = position_shuffle(m, ev, seeds=(0, 1))
    assert all(p["jaccard@10"] == 1.0 for p in res.perturbations.values())


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown shuffle mode"):
        perturb(seqs(), "sideways")
