"""Output that grows with the request: ``resdom recommend --k 100000`` over every user and ``resdom similar
--items all`` built the whole table and its CSV text in memory before writing a byte, so memory grew with the
output asked for. They now make and write the lists a part at a time (``recommend.Lists``, ``io.atomic_stream``):
the same bytes as the whole table's CSV, in the memory of one part, the file still renamed into place whole."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from cli_helpers import full_disk_after, invoke

import resdom
import resdom.recommend as rec
from resdom.data.prepare import prepare_split
from resdom.data.sequences import SplitData
from resdom.errors import ResdomError
from resdom.io import atomic_stream, csv_text
from resdom.models import build_model
from resdom.models.config import make_model_config
from resdom.recommend import recommend, similar_items

ITEMS = [f"sku {k}" for k in range(20)] + ["007", "7", 'q"uo,te', "cr\rid", "ünï"]
USERS = [f"cust-{u:03d}" for u in range(30)] + ['u,"x"', "u\rcr"]


@pytest.fixture(scope="module")
def split() -> SplitData:
    """Ids a CSV writer must quote (a comma, a quote, a carriage return), and an id of one interaction."""
    rng = np.random.default_rng(0)
    rows = []
    for j, u in enumerate(USERS):
        n = 1 if j == 0 else int(rng.integers(2, 9))
        rows += [(u, ITEMS[int(rng.integers(len(ITEMS)))], float(t)) for t in np.sort(rng.random(n) * 1000)]
    return prepare_split(pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]), "loo")


@pytest.fixture(scope="module")
def model(split: SplitData) -> torch.nn.Module:
    """A small SASRec whose items 3..9 share one embedding: their scores and cosines tie."""
    torch.manual_seed(0)
    cfg = make_model_config(name="sasrec", n_items=split.n_items, hidden=16, layers=2, max_len=6, dropout=0.0,
                            heads=2, attn_dropout=0.0)
    net = build_model(cfg).eval()
    with torch.no_grad():
        table = net.item_embeddings()
        table[3:10] = table[3].clone()
    return net


@pytest.fixture(scope="module")
def run_dir(split, model, tmp_path_factory) -> Path:
    return resdom.Fitted(model, split, model.cfg, None).save(tmp_path_factory.mktemp("parts") / "run")


def _whole_csv(frame: pd.DataFrame) -> bytes:
    """What ``resdom recommend`` / ``similar`` wrote before: the whole frame's CSV text at once."""
    return csv_text(lambda end: frame.to_csv(index=False, lineterminator=end)).encode("utf-8")


def _sizes_of_csv(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of every frame turned into CSV text from now on."""
    sizes: list[int] = []
    real = pd.DataFrame.to_csv

    def to_csv(self: pd.DataFrame, *args, **kwargs):
        sizes.append(len(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
    return sizes


CASES = [  # (command, args, the API call that gives the same table)
    ("recommend", ["--k", "1"], lambda m, s: recommend(m, s, k=1)),
    ("recommend", ["--k", "4"], lambda m, s: recommend(m, s, k=4)),
    ("recommend", ["--k", "100000"], lambda m, s: recommend(m, s, k=100000)),  # past the catalogue: short lists
    ("recommend", ["--k", "6", "--no-filter-seen", "--batch-size", "3"],
     lambda m, s: recommend(m, s, k=6, filter_seen=False, batch_size=3)),
    ("recommend", ["--k", "5", "--items", "sku 3,sku 4,sku 5,007,sku 1", "--exclude", "sku 1"],
     lambda m, s: recommend(m, s, k=5, items=["sku 3", "sku 4", "sku 5", "007", "sku 1"], exclude=["sku 1"])),
    ("recommend", ["--k", "3", "--history", "test", "--alpha", "0.5"],
     lambda m, s: recommend(m, s, k=3, history="test", alpha=0.5)),
    ("recommend", ["--k", "2", "--items", "sku 3"], lambda m, s: recommend(m, s, k=2, items=["sku 3"])),
    ("similar", ["--k", "1"], lambda m, s: similar_items(m, s, k=1)),
    ("similar", ["--k", "5"], lambda m, s: similar_items(m, s, k=5)),
    ("similar", ["--k", "100000"], lambda m, s: similar_items(m, s, k=100000)),
    ("similar", ["--k", "3", "--items", "sku 3,sku 4,nope"], lambda m, s: similar_items(m, s, ["sku 3", "sku 4",
                                                                                             "nope"], k=3)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_lists_are_written_in_parts_with_the_bytes_of_the_whole_table(case, split, model, run_dir, tmp_path,
                                                                       capsys, monkeypatch) -> None:
    """Every part at most ``PART_ROWS`` rows (or one list, where a list is longer): the CSV text made at once is
    bounded by the parameter, not by users x k; the file and the printed CSV are the whole table's bytes, ties,
    quoted ids and short lists included, and the summary line counts the same rows."""
    command, args, api = CASES[case]
    frame = api(model, split)
    want = _whole_csv(frame)
    part_rows = 7
    monkeypatch.setattr(rec, "PART_ROWS", part_rows)
    sizes = _sizes_of_csv(monkeypatch)
    out = tmp_path / "out.csv"
    assert invoke(command, str(run_dir), "--device", "cpu", "--out", str(out), *args) == 0
    err = capsys.readouterr().err
    assert out.read_bytes() == want
    longest = int(frame.groupby(frame.columns[0], sort=False).size().max())
    assert max(sizes) <= max(part_rows, longest), sizes
    assert (len(sizes) > 1 or len(frame) <= part_rows) and f"{out}: {len(frame):,} " in err, err
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    sizes.clear()
    assert invoke(command, str(run_dir), "--device", "cpu", *args) == 0  # printed, part by part
    assert capsys.readouterr().out.encode("utf-8") == want
    assert max(sizes) <= max(part_rows, longest)


def test_a_request_of_many_rows_is_made_in_many_bounded_parts(split, model, monkeypatch) -> None:
    """Each part holds whole lists, at most ``part_rows`` rows; together they are ``recommend``'s frame, and
    ``frame()`` is that frame, its note included."""
    lists = rec.recommend_lists(model, split, k=3, part_rows=5)
    parts = list(lists.frames())
    assert len(parts) > 5 and all(len(p) <= 5 for p in parts)
    whole = recommend(model, split, k=3)
    pd.testing.assert_frame_equal(pd.concat(parts, ignore_index=True), whole, check_dtype=False)
    assert lists.n_rows == len(whole) and lists.n_lists == whole["user_id"].nunique()
    assert lists.note == whole.attrs.get("note")
    again = rec.recommend_lists(model, split, k=3, part_rows=5).frame()
    pd.testing.assert_frame_equal(again, whole)
    with pytest.raises(ResdomError, match="part_rows: must be at least 1"):
        rec.similar_lists(model, split, part_rows=0)


def test_an_error_part_way_leaves_the_file_as_it_was(split, model, run_dir, tmp_path, capsys, monkeypatch) -> None:
    """A stop after some parts were written (Ctrl-C, a full disk): the earlier output stays whole, no temporary
    file is left, and a full disk is one line."""
    out = tmp_path / "recs.csv"
    assert invoke("recommend", str(run_dir), "--device", "cpu", "--k", "2", "--out", str(out)) == 0
    before = out.read_bytes()
    monkeypatch.setattr(rec, "PART_ROWS", 4)
    real, calls = rec.top_k, {"n": 0}

    def stopped(scores: torch.Tensor, k: int):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(scores, k)

    monkeypatch.setattr(rec, "top_k", stopped)
    assert invoke("recommend", str(run_dir), "--device", "cpu", "--k", "3", "--out", str(out)) == 130
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["recs.csv"]
    monkeypatch.setattr(rec, "top_k", real)
    sims = tmp_path / "sims.csv"
    assert invoke("similar", str(run_dir), "--device", "cpu", "--k", "1", "--out", str(sims)) == 0
    before = sims.read_bytes()
    full_disk_after(monkeypatch, 0)
    capsys.readouterr()
    assert invoke("similar", str(run_dir), "--device", "cpu", "--k", "3", "--out", str(sims)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{sims}: no space left on device" in err, err
    assert sims.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["recs.csv", "sims.csv"]


def test_an_error_part_way_through_printing_says_the_output_is_incomplete(run_dir, capsys, monkeypatch) -> None:
    """Printed, the parts before an error are out already (a model scoring some users' items as NaN stops after
    them): the one error line says they are not the whole table; an error before any part is the plain line."""
    from resdom.evaluation.ranking import NonFiniteScores

    monkeypatch.setattr(rec, "PART_ROWS", 4)
    real, calls = rec.top_k, {"n": 0, "at": 3}

    def broken(scores: torch.Tensor, k: int):
        calls["n"] += 1
        if calls["n"] == calls["at"]:
            raise NonFiniteScores("the model scores items as NaN or infinity")
        return real(scores, k)

    monkeypatch.setattr(rec, "top_k", broken)
    assert invoke("recommend", str(run_dir), "--device", "cpu", "--k", "2") == 2
    got = capsys.readouterr()
    assert got.out.startswith("user_id,item_id,score,rank\n") and got.err.count("\n") == 1, got.err
    assert "NaN or infinity (the rows printed before this error are not the whole table" in got.err
    calls.update(n=0, at=1)
    assert invoke("recommend", str(run_dir), "--device", "cpu", "--k", "2") == 2
    got = capsys.readouterr()
    assert got.out == "" and got.err.count("\n") == 1 and "not the whole table" not in got.err, got.err


def test_atomic_stream_renames_whole_or_leaves_the_target(tmp_path) -> None:
    target = tmp_path / "t.csv"
    target.write_bytes(b"old\n")
    with pytest.raises(RuntimeError), atomic_stream(target) as f:
        f.write(b"new, half")
        raise RuntimeError
    assert target.read_bytes() == b"old\n" and os.listdir(tmp_path) == ["t.csv"]
    with atomic_stream(target) as f:
        f.write(b"a\n")
        f.write(b"b\n")
    assert target.read_bytes() == b"a\nb\n" and os.listdir(tmp_path) == ["t.csv"]
    with pytest.raises(ResdomError, match="not a regular file"), atomic_stream("/dev/null"):
        pass
