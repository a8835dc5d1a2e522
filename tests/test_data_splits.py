"""Splits (spec §1): LOO and GTS by hand, against a slow time-to-split reference, and leakage properties."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from resdom.data.prepare import prepare_split
from resdom.data.sequences import Sequences, SplitData
from resdom.data.splits import quantile_threshold, split_gts, split_loo
from resdom.errors import ResdomError


def make(seqs: list[list[tuple[int, int]]]) -> Sequences:
    """Sequences from per-user lists of (item, time), times sorted per user (stable)."""
    seqs = [sorted(s, key=lambda x: x[1]) for s in seqs]
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    items = np.array([i for s in seqs for i, _ in s], dtype=np.int64)
    times = np.array([t for s in seqs for _, t in s], dtype=np.int64)
    return Sequences(offsets, items, times)


def as_dict(seqs: Sequences) -> dict[int, list[tuple[int, int]]]:
    out = {}
    for k in range(len(seqs)):
        a, b = seqs.offsets[k], seqs.offsets[k + 1]
        out[int(seqs.users[k])] = list(zip(seqs.items[a:b].tolist(), seqs.times[a:b].tolist()))
    return out


def eval_dict(ev) -> dict[int, tuple[list[tuple[int, int]], int]]:
    inputs = as_dict(ev.inputs)
    return {u: (inputs[u], int(t)) for u, t in zip(ev.inputs.users.tolist(), ev.targets)}


# ---------------------------------------------------------------------------------------------------------------
# LOO


def test_loo_by_hand() -> None:
    s = Sequences.from_lists([[1, 2], [3, 4, 5], [6, 7, 8, 9, 1]])
    p = split_loo(s)
    assert p.train.to_lists() == [[3], [6, 7, 8]]
    assert p.valid.inputs.to_lists() == [[3], [6, 7, 8]] and p.valid.targets.tolist() == [4, 9]
    assert p.test.inputs.to_lists() == [[3, 4], [6, 7, 8, 9]] and p.test.targets.tolist() == [5, 1]
    assert p.train.users.tolist() == p.test.inputs.users.tolist() == [1, 2]
    assert p.info["dropped_users"]["fewer_than_3_items"] == 1


seq_strategy = st.lists(
    st.lists(st.tuples(st.integers(1, 9), st.integers(0, 30)), min_size=0, max_size=12), min_size=1, max_size=25
)


@settings(max_examples=150, deadline=None)
@given(raw=seq_strategy)
def test_loo_invariants_and_no_leak(raw) -> None:
    full = make(raw)
    p = split_loo(full)
    seqs = as_dict(full)
    kept = [u for u, s in seqs.items() if len(s) >= 3]
    assert p.info["dropped_users"]["fewer_than_3_items"] == len(seqs) - len(kept)
    train, valid, test = as_dict(p.train), eval_dict(p.valid), eval_dict(p.test)
    assert sorted(train) == sorted(valid) == sorted(test) == kept
    for u in kept:
        s = seqs[u]
        assert train[u] == s[:-2]  # training input: never the valid or test target positions
        assert valid[u] == (s[:-2], s[-2][0])
        assert test[u] == (s[:-1], s[-1][0])


# ---------------------------------------------------------------------------------------------------------------
# GTS


def ref_time_split(seqs: dict[int, list[tuple[int, int]]], q: float):
    """time-to-split's split_by_time, literally: pandas-style linear quantile, second interaction <= T."""
    times = [t for s in seqs.values() for _, t in s]
    threshold = float(np.quantile(times, q))  # linear interpolation, as pandas' default
    evals = {u: (s[:-1], s[-1][0]) for u, s in seqs.items() if s and s[-1][1] > threshold and len(s) >= 2}
    kept = {u: [x for x in s if x[1] <= threshold] for u, s in seqs.items() if len(s) >= 2 and s[1][1] <= threshold}
    return threshold, kept, evals


def test_gts_by_hand() -> None:
    # times 1..10; q = 0.5 of [1,2,3,4,5,6,7,8,9,10] -> 5.5 (linear); T = 5 (real timestamp, same parts)
    s = make([[(1, 1), (2, 2), (3, 8)], [(4, 3), (5, 4), (6, 5)], [(7, 6), (8, 7), (9, 9), (1, 10)]])
    assert quantile_threshold(s.times, 0.5) == 5
    p = split_gts(s, 0.5)
    t = p.info["thresholds"]
    assert t["T_test"] == 5 and t["T_test_iso"] == "1970-01-01T00:00:05Z"
    # test: users 0 (last at 8) and 2 (last at 10); inputs all earlier interactions, also those after T_test
    assert eval_dict(p.test) == {0: ([(1, 1), (2, 2)], 3), 2: ([(7, 6), (8, 7), (9, 9)], 1)}
    # pool: user 0 [1,2], user 1 [3,4,5]; user 2 has nothing <= 5. T_val = lower 0.5-quantile of [1,2,3,4,5] = 3
    assert t["T_val"] == 3
    assert eval_dict(p.valid) == {1: ([(4, 3), (5, 4)], 6)}
    # train: pool <= 3 of users with a second interaction <= 3: user 0 [1, 2]; user 1 has one (3) -> dropped
    assert as_dict(p.train) == {0: [(1, 1), (2, 2)]}


def test_gts_ties_at_threshold_go_to_the_earlier_side() -> None:
    s = make([[(1, 1), (2, 5), (3, 5)], [(4, 5), (5, 5)], [(6, 1), (7, 2), (8, 9)]])
    # all times [1,1,2,5,5,5,5,9]; 0.5-quantile = 5 -> every t = 5 is "at or before"
    p = split_gts(s, 0.5)
    assert p.info["thresholds"]["T_test"] == 5
    assert sorted(eval_dict(p.test)) == [2]  # only user 2 ends after 5


@settings(max_examples=200, deadline=None)
@given(raw=seq_strategy, q=st.sampled_from([0.5, 0.7, 0.8, 0.9]), qv=st.sampled_from([0.5, 0.9]))
def test_gts_equals_time_to_split_reference(raw, q, qv) -> None:
    full = make(raw)
    if len(full.items) == 0:
        return
    seqs = as_dict(full)
    t_test, pool, test = ref_time_split(seqs, q)
    if not pool:
        with pytest.raises(ResdomError):
            split_gts(full, q, qv)
        return
    t_val, train, valid = ref_time_split(pool, qv)
    p = split_gts(full, q, qv)
    assert eval_dict(p.test) == test
    assert eval_dict(p.valid) == valid
    assert as_dict(p.train) == train
    th = p.info["thresholds"]
    times = full.times
    assert set(np.flatnonzero(times <= th["T_test"])) == set(np.flatnonzero(times <= t_test))


@settings(max_examples=150, deadline=None)
@given(raw=seq_strategy, q=st.sampled_from([0.6, 0.9]))
def test_gts_no_leak(raw, q) -> None:
    full = make(raw)
    if len(full.items) == 0:
        return
    try:
        p = split_gts(full, q)
    except ResdomError:
        return
    t_test, t_val = p.info["thresholds"]["T_test"], p.info["thresholds"]["T_val"]
    seqs = as_dict(full)
    # training input: only interactions at or before T_val, each a prefix of the user's history
    assert (p.train.times <= t_val).all() and (p.train.lengths >= 2).all()
    for u, s in as_dict(p.train).items():
        assert s == seqs[u][: len(s)]
    # validation: inputs within the pool (<= T_test), targets after T_val and after every input interaction
    assert (p.valid.inputs.times <= t_test).all()
    for u, (inp, target) in eval_dict(p.valid).items():
        pool_u = [x for x in seqs[u] if x[1] <= t_test]
        assert pool_u[-1][1] > t_val and (inp, target) == (pool_u[:-1], pool_u[-1][0])
    # test: target is the user's last interaction, after T_test; the input is everything before it
    for u, (inp, target) in eval_dict(p.test).items():
        assert seqs[u][-1][1] > t_test and (inp, target) == (seqs[u][:-1], seqs[u][-1][0])
        assert all(t <= seqs[u][-1][1] for _, t in inp)
    # no test target is in any training input position at or after its time (train ends at T_val < T_test)
    assert t_val <= t_test


def test_gts_needs_times_and_sorted_times() -> None:
    with pytest.raises(ResdomError, match="needs timestamps"):
        split_gts(Sequences.from_lists([[1, 2, 3]]))
    bad = Sequences(np.array([0, 3]), np.array([1, 2, 3]), np.array([3, 2, 1]))
    with pytest.raises(ResdomError, match="time order"):
        split_gts(bad)
    with pytest.raises(ResdomError, match="strictly between 0 and 1"):
        split_gts(make([[(1, 1), (2, 2)]]), quantile=1.0)


# ---------------------------------------------------------------------------------------------------------------
# prepare_split end to end (synthetic source) and the saved form


@pytest.mark.parametrize("protocol", ["loo", "gts"])
def test_prepare_split_manifest_and_roundtrip(protocol: str, tmp_path) -> None:
    split = prepare_split("synthetic:n_users=300,n_items=60,seed=2", protocol)
    m = split.manifest
    assert m["protocol"] == protocol and split.n_items == 60
    assert m["source"]["kind"] == "synthetic" and len(m["source"]["sha256"]) == 64
    assert {"train", "valid", "test"} <= set(m["counts"]) and m["tie_rule"]
    assert [s["step"] for s in m["preprocessing"]["steps"]][:2] == ["read", "order"]
    if protocol == "gts":
        assert m["thresholds"]["T_test_iso"].endswith("Z") and m["thresholds"]["T_val"] <= m["thresholds"]["T_test"]
    else:
        assert m["counts"]["test"]["users"] == 300
    assert split.train.times is not None and split.test.inputs.users is not None
    split.save(tmp_path / "s")
    back = SplitData.load(tmp_path / "s")
    assert back.manifest == m and back.n_items == split.n_items
    assert back.test.targets.tolist() == split.test.targets.tolist()
    assert back.train.to_lists() == split.train.to_lists()
    assert back.valid.inputs.users.tolist() == split.valid.inputs.users.tolist()


def test_split_cli_writes_arrays_and_manifest(tmp_path, monkeypatch, capsys) -> None:
    code = invoke("data", "split", "synthetic:n_users=200", "--protocol", "gts", "--quantile", "0.8",
                  "--out", str(tmp_path / "o"))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (tmp_path / "o" / "arrays.npz").exists() and (tmp_path / "o" / "manifest.json").exists()
    assert "T_test" in out and "train" in out and "test" in out
    assert SplitData.load(tmp_path / "o").manifest["quantile"] == 0.8
    assert "note:" not in err


def test_split_cli_says_when_the_valid_part_is_empty(tmp_path, capsys) -> None:
    """Twenty users with five early interactions and two with one late one: at the 0.98-quantile T_val equals
    T_test, the valid part is empty, and train would refuse the split; data split says so when it writes it (it
    said "valid 0 users" only), and a lower --valid-quantile gives validation users."""
    lines = ["user_id,item_id,timestamp"] + [f"u{u},i{(u + t) % 7},{t + 1}" for u in range(20) for t in range(5)]
    (tmp_path / "d.csv").write_text("\n".join(lines + ["u0,i3,1000", "u1,i4,1000"]) + "\n")
    args = ["data", "split", str(tmp_path / "d.csv"), "--protocol", "gts", "--quantile", "0.98"]
    assert invoke(*args, "--out", str(tmp_path / "a")) == 0
    out, err = capsys.readouterr()
    assert "valid         0 users" in out
    assert (f"note: the valid part is empty, so `resdom train {tmp_path / 'a'}` will refuse this split (early "
            "stopping and the best checkpoint need validation users); a lower --valid-quantile moves T_val "
            "earlier") in err
    assert invoke(*args, "--out", str(tmp_path / "my split")) == 0  # a command to paste: the folder quoted
    assert f"`resdom train '{tmp_path / 'my split'}'` will refuse" in capsys.readouterr().err
    assert invoke(*args, "--valid-quantile", "0.5", "--out", str(tmp_path / "b")) == 0
    assert "note: the valid part is empty" not in capsys.readouterr().err
    assert len(SplitData.load(tmp_path / "b").valid) == 20


_SMALL = "synthetic:n_users=40,n_items=25,min_len=5,max_len=10"


def _edited(tmp_path, protocol: str, edit) -> str:
    """A split of _SMALL saved under ``protocol`` whose manifest.json ``edit`` (a function of the dict) changed."""
    import json

    folder = tmp_path / f"{protocol}-split"
    prepare_split(_SMALL, protocol).save(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return str(folder)


@pytest.mark.parametrize(("protocol", "edit", "field"), [
    ("gts", lambda m: m.update(protocol="loo"), "protocol is loo but arrays.npz does not hold a leave-one-out"),
    ("gts", lambda m: m.update(protocol="none"), "protocol is none but arrays.npz holds 5 test users"),
    ("loo", lambda m: m.update(protocol="gts"), "protocol is gts but its thresholds (T_val, T_test) are missing"),
    ("loo", lambda m: m.update(protocol="gts", thresholds={"T_val": 1551278872, "T_test": 1557097873}),
     "protocol is gts but arrays.npz trains on interactions after T_val"),
    ("none", lambda m: m.update(protocol="loo"), "protocol is loo but arrays.npz does not hold a leave-one-out"),
    ("gts", lambda m: m.update(protocol="GTS"), "protocol is 'GTS', none of loo, gts, none"),
    ("gts", lambda m: m.update(n_items=99), "n_items is 99 but arrays.npz holds 25 items"),
    ("gts", lambda m: m["counts"]["valid"].update(users=50), "counts.valid.users is 50 but arrays.npz holds 5"),
    ("loo", lambda m: m["counts"]["train"].update(interactions="x"), "counts.train.interactions is 'x' but"),
    ("loo", lambda m: m.update(counts=[1]), "counts is not an object"),
    ("loo", lambda m: m.update(evaluation={"filter_seen": "no"}), "evaluation.filter_seen is not true or false"),
])
def test_load_refuses_a_manifest_that_describes_other_arrays(tmp_path, protocol, edit, field) -> None:
    """A hand-edited (or swapped) manifest.json that says another protocol, n_items, part counts or filter setting
    than arrays.npz holds was loaded as it was: train resolved the model's defaults by the wrong protocol (a gts
    split trained as loo, no word), printed the manifest's counts, and a filter_seen of "no" filtered."""
    folder = _edited(tmp_path, protocol, edit)
    with pytest.raises(ResdomError) as e:
        SplitData.load(folder)
    assert str(e.value).startswith(f"{folder}/manifest.json: {field}")


@pytest.mark.parametrize("protocol", ["loo", "gts", "none"])
def test_load_takes_every_protocol_as_written(tmp_path, protocol) -> None:
    assert SplitData.load(_edited(tmp_path, protocol, lambda m: None)).manifest["protocol"] == protocol


@pytest.mark.parametrize(("edit", "line"), [
    (lambda m: m.pop("protocol"), "manifest.json: protocol is None, none of loo, gts, none"),
    (lambda m: m.update(protocol=5), "manifest.json: protocol is 5, none of loo, gts, none"),
    (lambda m: m["changes"].update(split={"protocol": "gts"}), "manifest.json: changes or counts is not what "
     "`resdom data split` writes (no field 'users_dropped')"),
])
def test_train_refuses_a_saved_split_with_a_broken_manifest_in_one_line(tmp_path, capsys, edit, line) -> None:
    """A manifest.json without a protocol, or with one that is no string, or a changes section missing a field,
    ended `resdom train` in a KeyError traceback."""
    folder = _edited(tmp_path, "gts", edit)
    code = invoke("train", folder, "--set", "model.hidden=8", "--set", "model.layers=1", "--epochs", "1",
                  "--out", str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and f"error: {folder}/{line}" in err, err
    assert not (tmp_path / "run").exists()
