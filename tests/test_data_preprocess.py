"""Preprocessing (spec §1): k-core (fixed point, equals a slow reference), repeats, stable tie order, remapping."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import one_line_error, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from resdom.data.preprocess import PreprocessConfig, consecutive_repeat_mask, kcore_mask, order_rows, preprocess
from resdom.data.readers import RawInteractions
from resdom.errors import ResdomError


def raw(users, items, times=None) -> RawInteractions:
    return RawInteractions(np.asarray(users, dtype=np.int64), np.asarray(items, dtype=np.int64),
                           None if times is None else np.asarray(times, dtype=np.int64), "test", [])


def slow_kcore(pairs: list[tuple[int, int]], k: int) -> list[bool]:
    """Reference: remove one offending user or item at a time until none is left (the k-core is unique)."""
    alive = [True] * len(pairs)
    changed = True
    while changed:
        changed = False
        ucount: dict[int, int] = {}
        icount: dict[int, int] = {}
        for (u, i), a in zip(pairs, alive):
            if a:
                ucount[u] = ucount.get(u, 0) + 1
                icount[i] = icount.get(i, 0) + 1
        for r, ((u, i), a) in enumerate(zip(pairs, alive)):
            if a and (ucount[u] < k or icount[i] < k):
                alive[r] = False
                changed = True
                break  # one row at a time: a different order than the vectorised rounds
    return alive


pairs_strategy = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 9)), min_size=0, max_size=120)


@settings(max_examples=150, deadline=None)
@given(pairs=pairs_strategy, k=st.integers(1, 5))
def test_kcore_is_the_fixed_point_of_the_reference(pairs, k) -> None:
    users = np.array([p[0] for p in pairs], dtype=np.int64)
    items = np.array([p[1] for p in pairs], dtype=np.int64)
    keep, _ = kcore_mask(users, items, k)
    assert keep.tolist() == slow_kcore(pairs, k)
    # every survivor has >= k interactions, and applying it again removes nothing (fixed point)
    u, i = users[keep], items[keep]
    if len(u):
        assert np.bincount(u)[np.unique(u)].min() >= k and np.bincount(i)[np.unique(i)].min() >= k
    again, _ = kcore_mask(u, i, k)
    assert again.all()


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 4)), min_size=1, max_size=80),
       k=st.integers(0, 3), repeats=st.booleans())
def test_preprocess_output_is_a_fixed_point(pairs, k, repeats) -> None:
    cfg = PreprocessConfig(k_core=k, remove_repeats=repeats)
    try:
        p = preprocess(raw([a for a, _ in pairs], [b for _, b in pairs]), cfg)
    except ResdomError:
        assert k > 0  # everything removed by the k-core
        return
    s = p.sequences
    users = np.repeat(np.arange(len(s)), s.lengths)
    if repeats:
        assert consecutive_repeat_mask(users, s.items).all()
    if k:
        assert kcore_mask(users, s.items - 1, k)[0].all()
    assert sorted(np.unique(s.items).tolist()) == list(range(1, p.n_items + 1))
    # preprocessing its own output again changes nothing
    again = preprocess(raw(users, s.items), cfg).sequences
    assert again.to_lists() == s.to_lists()


def test_stable_tie_order_and_rule_recorded() -> None:
    # user 7: times 5 3 3 1 for items 40 41 42 43 -> 43 (1), 41 (3), 42 (3, after 41: source order), 40 (5)
    p = preprocess(raw([7, 7, 7, 7, 2], [40, 41, 42, 43, 44], [5, 3, 3, 1, 9]), PreprocessConfig(k_core=0))
    labels = p.item_labels
    assert [labels[i] for i in p.sequences.sequence(1)] == [43, 41, 42, 40]
    assert p.sequences.times.tolist() == [9, 1, 3, 3, 5]
    order_step = next(s for s in p.steps if s["step"] == "order")
    assert order_step["equal_time_neighbours"] == 1 and "equal timestamps keep source order" in order_step["rule"]
    assert "source order" in p.tie_rule


def test_order_rows_is_stable_on_reversed_ties() -> None:
    users = np.array([0, 0, 0, 0])
    times = np.array([2, 2, 2, 1])
    assert order_rows(users, times).tolist() == [3, 0, 1, 2]
    assert order_rows(np.array([1, 0, 1, 0]), None).tolist() == [1, 3, 0, 2]


def test_ties_by_item_order_equal_times_by_increasing_raw_item_id() -> None:
    users, times = np.array([0, 0, 0, 0, 1, 1]), np.array([2, 2, 2, 1, 5, 5])
    items = np.array([7, 3, 5, 9, 2, 1])
    assert order_rows(users, times, items).tolist() == [3, 1, 2, 0, 5, 4]
    p = preprocess(raw([0, 0, 0, 0, 1, 1], [47, 43, 45, 49, 42, 41], [2, 2, 2, 1, 5, 5]),
                   PreprocessConfig(k_core=None, ties="item"))
    labels = p.item_labels
    assert [labels[i] for i in p.sequences.sequence(0)] == [49, 43, 45, 47]
    assert [labels[i] for i in p.sequences.sequence(1)] == [41, 42]
    assert "increasing raw item id" in p.tie_rule
    assert next(s for s in p.steps if s["step"] == "order")["rule"] == p.tie_rule
    with pytest.raises(ResdomError, match="no timestamps"):
        preprocess(raw([0, 0], [1, 2]), PreprocessConfig(k_core=None, ties="item"))


def test_ties_by_item_order_string_ids_by_their_text_not_first_appearance() -> None:
    # string ids are numbered by first appearance: "zz" then "b" then "a"; the tie rule is the ids' own order
    items = np.array(["zz", "b", "a", "x", "y", "z"], dtype=object)
    r = RawInteractions(np.array([0, 0, 0, 1, 1, 1]), items, np.array([1, 5, 5, 3, 3, 3]), "test", [])
    p = preprocess(r, PreprocessConfig(k_core=None, ties="item"))
    seqs = [[p.item_labels[i] for i in p.sequences.sequence(u)] for u in range(2)]
    assert seqs == [["zz", "a", "b"], ["x", "y", "z"]]
    swapped = RawInteractions(r.users, items[[0, 2, 1, 5, 4, 3]], r.times, "test", [])
    p = preprocess(swapped, PreprocessConfig(k_core=None, ties="item"))  # the file's order does not matter
    assert [[p.item_labels[i] for i in p.sequences.sequence(u)] for u in range(2)] == seqs


def test_consecutive_repeats() -> None:
    users = np.array([0, 0, 0, 0, 1, 1])
    items = np.array([5, 5, 6, 5, 5, 5])
    assert consecutive_repeat_mask(users, items).tolist() == [True, False, True, True, True, False]
    p = preprocess(raw(users, items), PreprocessConfig(k_core=0, remove_repeats=True))
    assert p.sequences.to_lists() == [[1, 2, 1], [1]]
    step = next(s for s in p.steps if s["step"] == "remove_consecutive_repeats")
    assert step["removed_interactions"] == 2
    kept = preprocess(raw(users, items), PreprocessConfig(k_core=0))
    assert next(s for s in kept.steps if s["step"] == "remove_consecutive_repeats")["consecutive_repeats_kept"] == 2


def test_repeat_removal_and_kcore_alternate_until_stable() -> None:
    # k=2: item 9 appears once -> removed; then user 0's 5 9 5 becomes 5 5 -> a repeat to remove -> 5 alone,
    # which then fails the 2-core for user 0.
    users = [0, 0, 0, 1, 1, 2, 2]
    items = [5, 9, 5, 5, 6, 5, 6]
    p = preprocess(raw(users, items), PreprocessConfig(k_core=2, remove_repeats=True))
    assert [[p.item_labels[i] for i in s] for s in p.sequences.to_lists()] == [[5, 6], [5, 6]]
    assert p.user_labels.tolist() == [1, 2]


def test_remap_identity_on_contiguous_ids_and_kept_raw_ids() -> None:
    p = preprocess(raw([1, 1, 2, 2], [3, 1, 2, 3]), PreprocessConfig(k_core=0))
    assert p.sequences.to_lists() == [[3, 1], [2, 3]] and p.n_items == 3
    gap = preprocess(raw([1, 1, 2], [30, 10, 20]), PreprocessConfig(k_core=0))
    assert gap.sequences.to_lists() == [[3, 1], [2]] and gap.item_labels[1:].tolist() == [10, 20, 30]
    off = preprocess(raw([1, 1, 2], [30, 10, 20]), PreprocessConfig(k_core=0, remap=False))
    assert off.sequences.to_lists() == [[30, 10], [20]] and off.n_items == 30
    with pytest.raises(ResdomError, match="0 is padding"):
        preprocess(raw([1], [0]), PreprocessConfig(k_core=0, remap=False))


def test_preprocess_large_random_input() -> None:
    rng = np.random.default_rng(0)
    n = 300_000
    r = raw(rng.integers(0, 50_000, n), rng.zipf(1.3, n) % 40_000, rng.integers(0, 10**9, n))
    p = preprocess(r, PreprocessConfig(k_core=5, remove_repeats=True))  # about 1 s here
    assert p.sequences.lengths.min() >= 5


def test_a_k_core_that_removes_everything_names_itself_in_the_callers_words(tmp_path, capsys) -> None:
    """The message listed every preprocessing field in Python's words (``k_core=100, remove_repeats=False,
    sort_by_time=True, remap=True, ties=source, ...``), on the command line too."""
    with pytest.raises(ResdomError, match=r"no interactions left after preprocessing \(k_core=100: no set of users "
                       r"and items has 100 interactions each, so the k-core removed them all; a lower k keeps some\)$"):
        preprocess(raw([0, 0, 1, 1], [1, 2, 1, 2]), PreprocessConfig(k_core=100))
    (tmp_path / "f.csv").write_text("user_id,item_id,timestamp\nu,a,1\nu,b,2\nv,a,3\n")
    code, _, err = run_cli(capsys, "data", "stats", str(tmp_path / "f.csv"), "--k-core", "3", "--remove-repeats")
    one_line_error(code, err, "(--k-core 3: no set of users and items has 3 interactions each, repeats removed, so")
    assert "sort_by_time" not in err


def test_repeats_at_the_very_time_of_an_earlier_row_are_counted() -> None:
    """The same (user, item, time) twice (an event logged twice) was counted among the repeats only: nothing said
    that a repeat was no later visit. With seen items filtered such a target is a miss by construction."""
    from resdom.data.changes import change_lines

    # user 0: a@1, b@2, a@1 again (a duplicate), a@3 (a later visit); user 1: c@5 twice
    p = preprocess(raw([0, 0, 0, 0, 1, 1], [1, 2, 1, 1, 3, 3], [1, 2, 1, 3, 5, 5]), PreprocessConfig())
    assert p.changes["repeats"] == {"repeat_rows": 3, "consecutive": 2, "removed": 0, "same_time": 2}
    line = next(x for x in change_lines({"changes": {"read": {"users": 2, "items": 3, "interactions": 6},
                                                     **p.changes}}) if x.startswith("repeats:"))
    assert line == ("repeats: 3 rows repeat an earlier (user, item) pair, 2 of them right after the same item, 2 at "
                    "the very time of an earlier one (an event logged twice?); all kept")
    later = preprocess(raw([0, 0, 0], [1, 2, 1], [1, 2, 3]), PreprocessConfig())
    assert "same_time" not in later.changes["repeats"]  # only where there are any: earlier manifests unchanged
    untimed = preprocess(raw([0, 0], [1, 1]), PreprocessConfig())
    assert "same_time" not in untimed.changes["repeats"]
