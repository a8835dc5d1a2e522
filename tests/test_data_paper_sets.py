"""The paper's data sets in the registry (ml-1m, diginetica, steam, beeradvocate, zvuk, time-to-split's CSVs):
where their files are looked for, the message when one is missing, time-to-split's preprocessing on tiny native
files (counts by hand), and the per-data-set evaluation setting (seen items kept) in evaluation and diagnostics."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from cli_helpers import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from resdom.data.download import ENV_CACHE_DIR, ENV_DATA_DIR, resolve_dataset_files
from resdom.data.prepare import load_prepared, prepare_split
from resdom.data.preprocess import PreprocessConfig, preprocess
from resdom.data.readers import RawInteractions
from resdom.data.registry import DATASETS, TTS_PRESET, DatasetSpec, ManualFile, WebFile
from resdom.data.sequences import EvalSet, Sequences, SplitData
from resdom.errors import ResdomError

PAPER_SETS = ("ml-1m", "diginetica", "steam", "beeradvocate", "zvuk")


@pytest.fixture
def no_env(monkeypatch, tmp_path) -> Path:
    """No $RESDOM_DATA_DIR; the cache in tmp_path/cache (returned)."""
    monkeypatch.delenv(ENV_DATA_DIR, raising=False)
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    return tmp_path / "cache"


# ----------------------------------------------------------------------------------------------- registry entries

def test_paper_sets_are_registered_with_time_to_split_preprocessing() -> None:
    for name in PAPER_SETS:
        spec = DATASETS[name]
        assert spec.preset.items() >= TTS_PRESET.items(), name
    assert TTS_PRESET == {"k_core": 5, "remove_repeats": True}
    # time-to-split's dataset.filter_seen: False for the repeat-consumption data sets only
    assert {n for n, s in DATASETS.items() if not s.filter_seen} == {"diginetica", "zvuk", "diginetica-tts",
                                                                      "zvuk-tts"}
    assert DATASETS["zvuk"].preset["sample_users"] == 20_000
    ml = DATASETS["ml-1m"].files[0]
    assert isinstance(ml, WebFile) and ml.address == "https://files.grouplens.org/datasets/movielens/ml-1m.zip"
    assert ml.sha256 == "a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20"
    assert ml.url() == ml.address and ml.url("http://127.0.0.1:5") == (
        "http://127.0.0.1:5/files.grouplens.org/datasets/movielens/ml-1m.zip")
    assert all(DATASETS[n].manual for n in ("diginetica", "steam", "beeradvocate", "zvuk")) and not DATASETS[
        "ml-1m"].manual


@pytest.mark.parametrize("name, local", [
    ("diginetica", "diginetica/train-item-views.csv"), ("steam", "steam/steam_reviews.json.gz"),
    ("beeradvocate", "beeradvocate/beeradvocate.json.gz"), ("zvuk", "zvuk/zvuk-interactions.parquet"),
    ("diginetica-tts", "time-to-split/Diginetica.csv"), ("zvuk-tts", "time-to-split/Zvuk.csv"),
])
def test_missing_manual_file_names_what_to_fetch_and_the_exact_path(name: str, local: str, tmp_path: Path,
                                                                   no_env: Path, monkeypatch) -> None:
    spec = DATASETS[name]
    data_dir = tmp_path / "data"
    with pytest.raises(ResdomError) as e:
        resolve_dataset_files(spec, data_dir)
    msg = str(e.value)
    assert f"{data_dir / local}: not found, and resdom does not download it" in msg
    assert f"put it at {data_dir / local};" in msg and "http" in msg and str(no_env) not in msg
    # without --data-dir: $RESDOM_DATA_DIR first, the cache as the other place
    monkeypatch.setenv(ENV_DATA_DIR, str(tmp_path / "env"))
    with pytest.raises(ResdomError, match="put it at " + str(tmp_path / "env" / local) + r" \(or at "
                       + str(no_env / local) + r"\)"):
        resolve_dataset_files(spec)
    monkeypatch.delenv(ENV_DATA_DIR)
    with pytest.raises(ResdomError, match="put it at " + str(no_env / local) + ";"):
        resolve_dataset_files(spec)


def test_manual_file_found_under_an_alternative_name_and_checked_where_a_sha256_is_known(
        tmp_path: Path, no_env: Path) -> None:
    spec = DATASETS["beeradvocate"]
    (no_env / "beeradvocate").mkdir(parents=True)
    alt = no_env / "beeradvocate" / "beeradvocate.txt.gz"
    alt.write_bytes(b"x")
    (got,) = resolve_dataset_files(spec)
    assert got.path == alt and got.origin == "cache" and got.sha256 == hashlib.sha256(b"x").hexdigest()
    checked = DatasetSpec("t", "steam", (ManualFile("t/f.txt", "f.txt from somewhere", "why",
                                                    sha256=hashlib.sha256(b"good").hexdigest()),), "t")
    (tmp_path / "d" / "t").mkdir(parents=True)
    (tmp_path / "d" / "t" / "f.txt").write_bytes(b"bad")
    with pytest.raises(ResdomError, match="does not match the registered"):
        resolve_dataset_files(checked, tmp_path / "d")


def test_ml_1m_refuses_a_file_that_is_not_grouplens_zip(tmp_path: Path, no_env: Path) -> None:
    (tmp_path / "ml-1m").mkdir()
    (tmp_path / "ml-1m" / "ml-1m.zip").write_bytes(b"not the zip")
    with pytest.raises(ResdomError, match=r"ml-1m\.zip: sha256 .* does not match the registered a6898adb.*"
                       r"files\.grouplens\.org"):
        resolve_dataset_files(DATASETS["ml-1m"], tmp_path)


def test_cli_names_the_file_and_exits_2(tmp_path: Path, no_env: Path, capsys) -> None:
    assert invoke("data", "split", "diginetica", "--protocol", "gts", "--data-dir", str(tmp_path),
                  "--out", str(tmp_path / "split")) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'diginetica' / 'train-item-views.csv'}: not found" in err and "Traceback" not in err
    assert not (tmp_path / "split").exists()
    assert invoke("data", "list") == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PAPER_SETS) and "[by hand]" in out


# ----------------------------------------------------------------------------------------------- time-to-split's filter

def tts_core_filter(rows: list[tuple[int, int, int]], k: int) -> list[tuple[int, int, int]]:
    """time-to-split's ``core_filter`` with ``drop_conseq_repeats=True``, written out literally on (user, item,
    time) rows: repeats (rows stably sorted by user and time; a row whose item equals the previous row's of the same
    user goes), then, while some user or item has fewer than k rows: users, then items, then repeats."""
    def drop_repeats(rs: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        rs = sorted(rs, key=lambda r: (r[0], r[2]))  # Python's sort is stable: ties keep their order
        return [r for j, r in enumerate(rs) if not (j and rs[j - 1][0] == r[0] and rs[j - 1][1] == r[1])]

    rows = drop_repeats(rows)
    while rows and (min(Counter(r[0] for r in rows).values()) < k or min(Counter(r[1] for r in rows).values()) < k):
        users = Counter(r[0] for r in rows)
        rows = [r for r in rows if users[r[0]] >= k]
        items = Counter(r[1] for r in rows)
        rows = [r for r in rows if items[r[1]] >= k]
        rows = drop_repeats(rows)
    return rows


def kept_sequences(rows: list[tuple[int, int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for u, i, _ in rows:
        out.setdefault(u, []).append(i)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 6), st.integers(0, 8)), max_size=70),
       st.sampled_from([2, 3]))
def test_repeats_and_k_core_keep_exactly_time_to_splits_rows(rows, k) -> None:
    """resdom's alternation (repeats, k-core to its fixed point, ...) keeps the rows of time-to-split's loop."""
    want = kept_sequences(tts_core_filter(list(rows), k))
    raw = RawInteractions(np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows],
                          dtype=np.int64), np.array([r[2] for r in rows], dtype=np.int64), "t", [])
    if not want:
        if rows:
            with pytest.raises(ResdomError, match="no interactions left"):
                preprocess(raw, PreprocessConfig(k_core=k, remove_repeats=True))
        return
    p = preprocess(raw, PreprocessConfig(k_core=k, remove_repeats=True))
    s = p.sequences
    got = {int(p.user_labels[j]): [int(p.item_labels[i]) for i in s.items[s.offsets[j]:s.offsets[j + 1]]]
           for j in range(len(s))}
    assert got == want


def test_user_sample() -> None:
    users = np.array(["u3", "u1", "u2", "u1", "u4", "u5", "u3"], dtype=object)
    items = np.array(["a", "b", "c", "d", "e", "f", "g"], dtype=object)
    times = np.arange(7, dtype=np.int64)
    cfg = PreprocessConfig(k_core=None, sample_users=2, sample_seed=3)
    p = preprocess(RawInteractions(users, items, times, "t", []), cfg)
    kept = sorted(p.user_labels.tolist())
    assert len(kept) == 2
    # every row of a drawn user stays; the draw depends on the ids, not on the rows' order
    assert len(p.sequences.items) == sum(users.tolist().count(u) for u in kept)
    perm = np.array([6, 5, 4, 3, 2, 1, 0])
    again = preprocess(RawInteractions(users[perm], items[perm], times[perm], "t", []), cfg)
    assert sorted(again.user_labels.tolist()) == kept
    others = {tuple(sorted(preprocess(RawInteractions(users, items, times, "t", []),
                                      cfg.model_copy(update={"sample_seed": s})).user_labels.tolist()))
              for s in range(12)}
    assert len(others) > 1  # the seed matters
    step = next(s for s in p.steps if s["step"] == "sample_users")
    assert step["users"] == 2 and step["n"] == 2 and step["seed"] == 3
    everyone = preprocess(RawInteractions(users, items, times, "t", []), cfg.model_copy(update={"sample_users": 9}))
    assert len(everyone.user_labels) == 5
    assert "sample_users" not in PreprocessConfig().record() and cfg.record()["sample_users"] == 2


# ----------------------------------------------------------------------------------------------- tiny native files

def views(session: str, items: str, day: str, start_ms: int = 0) -> list[str]:
    return [f"{session};;{it};{start_ms + 1000 * j};{day}" for j, it in enumerate(items.split())]


def test_diginetica_registered_end_to_end(tmp_path: Path, no_env: Path) -> None:
    """Sessions s1..s5 view A B C D E (s5 also X, seen once); s6 views A A B C D (a consecutive repeat: 4 left,
    then too short); s7 views F G H I J (each item once). time-to-split's preprocessing keeps s1..s5 x A..E."""
    lines = ["sessionId;userId;itemId;timeframe;eventdate"]
    for n in range(1, 6):
        lines += views(f"s{n}", "A B C D E" + (" X" if n == 5 else ""), f"2016-01-0{n}")
    lines += views("s6", "A A B C D", "2016-01-06") + views("s7", "F G H I J", "2016-01-07")
    path = tmp_path / "diginetica" / "train-item-views.csv"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    prepared, m = load_prepared("diginetica", tmp_path)
    assert [m["dataset"][k] for k in ("users", "items", "interactions")] == [5, 5, 25]
    steps = {s["step"]: s for s in m["preprocessing"]["steps"]}
    assert steps["read"]["interactions"] == 6 * 5 + 1 + 5
    assert steps["remove_consecutive_repeats"]["removed_interactions"] == 1
    assert steps["k_core"]["removed_interactions"] == 4 + 5 + 1
    assert m["preprocessing"]["preset"] == TTS_PRESET
    assert m["source"]["files"][0]["origin"] == "data-dir"
    assert m["source"]["files"][0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sorted(prepared.user_labels.tolist()) == ["s1", "s2", "s3", "s4", "s5"]
    split = prepare_split("diginetica", "gts", data_dir=tmp_path)
    assert split.manifest["evaluation"]["filter_seen"] is False and split.filter_seen is False
    # the user's option wins over the data set's setting
    assert prepare_split("diginetica", "gts", data_dir=tmp_path, filter_seen=True).filter_seen is True


def test_steam_registered_end_to_end(tmp_path: Path, no_env: Path) -> None:
    """Five users review games 1..5 (one of them twice in a row: a consecutive repeat); a sixth user reviews a
    game nobody else does. Kept: 5 users x 5 games."""
    lines = []
    for u in range(5):
        for g in range(1, 6):
            lines.append(repr({"username": f"user {u}", "hours": 1.5, "product_id": str(g),
                               "date": f"2017-0{g}-1{u}", "text": "ok"}))
    lines.insert(3, repr({"username": "user 0", "product_id": "3", "date": "2017-03-10", "text": "again"}))
    lines.append(repr({"username": "loner", "product_id": "99", "date": "2017-06-01", "text": "x"}))
    path = tmp_path / "steam" / "steam_reviews.json.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    _, m = load_prepared("steam", tmp_path)
    assert [m["dataset"][k] for k in ("users", "items", "interactions")] == [5, 5, 25]
    steps = {s["step"]: s for s in m["preprocessing"]["steps"]}
    assert steps["remove_consecutive_repeats"]["removed_interactions"] == 1
    assert steps["k_core"]["removed_interactions"] == 1
    assert prepare_split("steam", "gts", data_dir=tmp_path).filter_seen is True


def test_zvuk_registered_end_to_end_with_the_sample(tmp_path: Path, no_env: Path) -> None:
    t0 = pd.Timestamp("2023-01-01")
    recs = [(u, 100 + j, t0 + pd.Timedelta(hours=u * 10 + j)) for u in range(6) for j in range(5)]
    df = pd.DataFrame(recs, columns=["user_id", "track_id", "datetime"]).assign(session_id=1, play_duration=9)
    path = tmp_path / "zvuk" / "zvuk-interactions.parquet"
    path.parent.mkdir()
    df.to_parquet(path)
    _, m = load_prepared("zvuk", tmp_path)
    assert [m["dataset"][k] for k in ("users", "items", "interactions")] == [6, 5, 30]
    sample = next(s for s in m["preprocessing"]["steps"] if s["step"] == "sample_users")
    assert sample["n"] == 20_000 and sample["users"] == 6  # fewer users than the sample: all kept
    assert m["preprocessing"]["config"]["sample_users"] == 20_000


def test_ml_1m_read_from_the_zip_with_the_preset(tmp_path: Path, no_env: Path, monkeypatch) -> None:
    """ml-1m's reader and preset on a stand-in zip (the registered sha256 is GroupLens's file's): six users rate
    movies 1..5, one also movie 9 (rated once, removed by the 5-core)."""
    ratings = [f"{u}::{m}::4::{978300000 + 60 * (u * 10 + m)}" for u in range(1, 7) for m in range(1, 6)]
    ratings.append("1::9::5::978301000")
    path = tmp_path / "ml-1m" / "ml-1m.zip"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ml-1m/ratings.dat", "\n".join(ratings) + "\n")
    remote = dataclasses.replace(DATASETS["ml-1m"].files[0], sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    monkeypatch.setitem(DATASETS, "ml-1m", dataclasses.replace(DATASETS["ml-1m"], files=(remote,)))
    _, m = load_prepared("ml-1m", tmp_path)
    assert [m["dataset"][k] for k in ("users", "items", "interactions")] == [6, 5, 30]
    assert m["source"]["files"][0]["upstream"] == "https://files.grouplens.org/datasets/movielens/ml-1m.zip"


def test_time_to_split_csv_registered(tmp_path: Path, no_env: Path) -> None:
    rows = ["sessionId,userId,itemId,timestamp"]
    rows += [f"{s},,{i},{1451606400 + 86400 * s + 1.5 * i}" for s in range(1, 6) for i in range(1, 6)]
    path = tmp_path / "time-to-split" / "Diginetica.csv"
    path.parent.mkdir()
    path.write_text("\n".join(rows) + "\n")
    split = prepare_split("diginetica-tts", "gts", data_dir=tmp_path)
    assert split.manifest["dataset"]["interactions"] == 25 and split.filter_seen is False


# ----------------------------------------------------------------------------------------------- seen items kept

def echo_split(filter_seen: bool | None) -> SplitData:
    """Every target is its user's last input item: filtered, a miss (30 items, at most 4 seen); unfiltered, wherever
    the model ranks it."""
    rng = np.random.default_rng(0)
    seqs = [list(rng.integers(1, 31, size=4)) for _ in range(40)]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in seqs])])
    inputs = Sequences(offsets, np.concatenate(seqs))
    ev = EvalSet(inputs, np.array([s[-1] for s in seqs]))
    manifest = {} if filter_seen is None else {"evaluation": {"filter_seen": filter_seen}}
    return SplitData(inputs, ev, ev, 30, manifest)


@pytest.fixture(scope="module")
def tiny_model():
    from resdom.models import build_model
    from resdom.models.config import make_model_config

    torch.manual_seed(0)
    return build_model(make_model_config(n_items=30, max_len=6, hidden=8, layers=1, heads=1))


def test_split_filter_seen_reads_the_manifest() -> None:
    assert echo_split(None).filter_seen is True  # splits made before the setting: filtered
    assert echo_split(True).filter_seen is True and echo_split(False).filter_seen is False


@pytest.mark.parametrize("keep", [False, True])
def test_evaluation_and_diagnostics_follow_the_data_sets_setting(tiny_model, keep: bool) -> None:
    import resdom
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import _evaluate

    split = echo_split(False if keep else None)
    kept = resdom.evaluate(tiny_model, split, filter_seen=False, device="cpu").metrics
    filtered = resdom.evaluate(tiny_model, split, filter_seen=True, device="cpu").metrics
    assert filtered["HR@20"] == 0.0 and kept["HR@20"] > 0.0  # the two settings differ on this split
    want = kept if keep else filtered
    assert resdom.evaluate(tiny_model, split, device="cpu").metrics == want  # default: the split's setting
    assert _evaluate(tiny_model, split, "test", TrainConfig(), torch.device("cpu"))["metrics"] == want
    diagnosis = resdom.diagnose(tiny_model, split, what="shuffle,alpha,recovery", alphas=(1.0, 0.5), seeds=(0,),
                                device="cpu")
    alpha = diagnosis.alpha.to_dict()
    assert alpha["rows"][0]["HR@10"] == want["HR@10"] and alpha["rows"][0]["NDCG@10"] == want["NDCG@10"]
    assert alpha["rows"][0]["HR@10_unfiltered"] == kept["HR@10"]
    assert alpha.get("filter_seen", True) is (not keep)
    rec = diagnosis.recovery.to_dict()
    assert rec["test"]["curve"][0]["HR@10"] == want["HR@10"] and rec.get("filter_seen", True) is (not keep)
    shuffle = diagnosis.shuffle.to_dict()
    assert shuffle["filtered"] is (not keep) and shuffle["original"]["HR@10"] == want["HR@10"]


def test_cli_split_records_the_users_setting(tmp_path: Path) -> None:
    import json

    path = tmp_path / "views.csv"
    path.write_text("user_id,item_id,timestamp\n" + "".join(
        f"u{u},i{i},{1000 * u + 10 * i}\n" for u in range(6) for i in range(5)))
    assert invoke("data", "split", str(path), "--protocol", "gts", "--no-filter-seen", "--out",
                  str(tmp_path / "kept")) == 0
    assert json.loads((tmp_path / "kept" / "manifest.json").read_text())["evaluation"]["filter_seen"] is False
    assert invoke("data", "split", str(path), "--protocol", "gts", "--out", str(tmp_path / "plain")) == 0
    assert "evaluation" not in json.loads((tmp_path / "plain" / "manifest.json").read_text())
    assert SplitData.load(tmp_path / "kept").filter_seen is False
