"""The shared real data (../shared/data/raw): MANIFEST.md counts through the CLI, GTS dates, speed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import invoke

from resdom.data.prepare import load_prepared, prepare_split

pytestmark = pytest.mark.slow

# MANIFEST.md "Known facts": users, items, interactions, span in days (None: no timestamps)
MANIFEST = {
    "beauty": (22363, 12101, 198502, None),
    "sports": (35598, 18357, 296337, None),
    "toys": (19412, 11924, 167597, None),
    "yelp": (30431, 20033, 316354, None),
    "lastfm": (1090, 3646, 52551, None),
    "beauty-ts": (22363, 12101, 198502, 4424),
    "sports-ts": (35598, 18357, 296337, 4521),
    "toys-ts": (19412, 11924, 167597, 5108),
    "yelp-ts": (30431, 20033, 316354, None),
    "ml-100k": (943, 1682, 100000, None),
    "video-ts": (24303, 10672, 231780, 5395),
}


def cli_json(args: list[str], monkeypatch, capsys) -> dict:
    code = invoke(*args)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("name", list(MANIFEST))
def test_data_stats_gives_manifest_counts(name: str, shared_raw: Path, monkeypatch, capsys) -> None:
    stats = cli_json(["data", "stats", name, "--json", "--data-dir", str(shared_raw)], monkeypatch, capsys)
    users, items, interactions, span = MANIFEST[name]
    assert (stats["users"], stats["items"], stats["interactions"]) == (users, items, interactions)
    if span is not None:
        assert stats["span_days"] == span
    if name == "beauty":
        assert round(stats["avg_length"], 2) == 8.88 and stats["min_length"] == 5
    if name == "video-ts":  # ids from 0 in the file: remapped to 1..N, relative days read as seconds
        assert round(stats["avg_length"], 2) == 9.54 and stats["min_length"] == 5
    assert stats["source"]["files"][0]["origin"] == "data-dir"


def test_ml1m_part_and_yelp_repeats(shared_raw: Path) -> None:
    _, m = load_prepared("ml-1m-part", shared_raw)
    assert m["dataset"]["interactions"] == 487650 and m["dataset"]["users"] == 2999
    _, m = load_prepared("yelp", shared_raw)
    rep = next(s for s in m["preprocessing"]["steps"] if s["step"] == "remove_consecutive_repeats")
    assert rep == {"step": "remove_consecutive_repeats", "applied": False, "consecutive_repeats_kept": 3873}
    _, m = load_prepared("yelp", shared_raw, remove_repeats=True)
    rep = next(s for s in m["preprocessing"]["steps"] if s["step"] == "remove_consecutive_repeats")
    assert rep["removed_interactions"] >= 3873 and m["dataset"]["interactions"] < 316354 - 3873 + 1


def test_beauty_ts_ties_and_same_interactions_as_bsarec(shared_raw: Path) -> None:
    ts, m = load_prepared("beauty-ts", shared_raw)
    order = next(s for s in m["preprocessing"]["steps"] if s["step"] == "order")
    assert order["equal_time_neighbours"] == 77402 and order["rows_moved"] == 0  # files already oldest first
    plain, _ = load_prepared("beauty", shared_raw)
    assert np.array_equal(ts.sequences.lengths, plain.sequences.lengths)
    assert sorted(np.bincount(ts.sequences.items)) == sorted(np.bincount(plain.sequences.items))


@pytest.mark.parametrize(("name", "users", "differ"), [("beauty", 6110, 1465), ("sports", 10203, 2632)])
def test_itemties_reorders_only_same_day_items(shared_raw: Path, name: str, users: int, differ: int) -> None:
    a = prepare_split(f"{name}-ts", "gts", data_dir=shared_raw)
    b = prepare_split(f"{name}-ts-itemties", "gts", data_dir=shared_raw)
    assert a.manifest["counts"]["test"]["users"] == b.manifest["counts"]["test"]["users"] == users
    assert "increasing raw item id" in b.manifest["tie_rule"]
    for u in range(0, len(a.test), 97):  # same items and days per user; same-day items in increasing id
        sa, sb = a.test.inputs.sequence(u).tolist() + [a.test.targets[u]], b.test.inputs.sequence(u).tolist() + [
            b.test.targets[u]]
        assert sorted(sa) == sorted(sb)
    # the order decides the test target of that many test users (every one of them a same-day tie)
    assert int((a.test.targets != b.test.targets).sum()) == differ


def test_gts_beauty_ts_threshold_date(shared_raw: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    split = prepare_split("beauty-ts", "gts", data_dir=shared_raw)
    t = split.manifest["thresholds"]
    assert t["T_test_iso"].startswith("2014-05-13") and t["T_val"] < t["T_test"]
    assert (split.train.times <= t["T_val"]).all()
    assert split.manifest["counts"]["test"]["users"] == len(split.test) > 0


def test_gts_yelp_ts(shared_raw: Path) -> None:
    split = prepare_split("yelp-ts", "gts", data_dir=shared_raw)  # ~1 s on one core
    assert split.n_items == 20033 and len(split.test) > 0


def test_loo_beauty_matches_bsarec_protocol(shared_raw: Path) -> None:
    split = prepare_split("beauty", "loo", data_dir=shared_raw)
    assert len(split.test) == 22363 and split.n_items == 12101
    assert split.manifest["counts"]["train"]["interactions"] == 198502 - 2 * 22363
    # ids are the file's own ids (already 1..N): user 1's line is "1 1 2 3 4 5"
    assert split.test.inputs.sequence(0).tolist() == [1, 2, 3, 4] and split.test.targets[0] == 5
