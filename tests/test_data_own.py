"""A user's own data is never changed silently. Ids are labels kept exactly as read, fractional times are
kept, a missing timestamp column is an error unless --no-time, a user's own files get no k-core, whatever is dropped
is counted in the manifest and printed by every command that prepares data, and the API takes a DataFrame."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import invoke, one_line_error, run_cli

import resdom
from resdom.data.changes import change_lines
from resdom.data.prepare import load_prepared, prepare_split
from resdom.data.readers import canonical_int_labels, read_interactions
from resdom.data.sequences import SplitData
from resdom.errors import ResdomError

# the issue's case: four spellings of "7" (four items), and three of "a"
ISSUE_CSV = "user_id,item_id,timestamp\nu1,007,1\nu1,7,2\nu1,07,3\nu1,+7,4\nu1, a,5\nu1,a ,6\nu1,a,7\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def labels_of(prepared) -> list:
    return list(prepared.item_labels[1:])


# ------------------------------------------------------------------------------------------------ ids are labels


def test_issue_case_gives_four_items_for_four_spellings_of_seven(tmp_path: Path) -> None:
    prepared, manifest = load_prepared(str(write(tmp_path / "x.csv", ISSUE_CSV)))
    assert labels_of(prepared) == ["007", "7", "07", "+7", " a", "a ", "a"]  # 7 distinct items, first appearance
    assert prepared.sequences.to_lists() == [[1, 2, 3, 4, 5, 6, 7]]
    assert manifest["changes"]["read"] == {"users": 1, "items": 7, "interactions": 7, "format": "csv"}


def test_digit_only_ids_are_not_converted_to_numbers(tmp_path: Path) -> None:
    # the issue's printf: an all-integer-looking column was converted to int64, and 007, 7, 07, +7 became one item
    p = write(tmp_path / "x.csv", "user_id,item_id,timestamp\nu1,007,1\nu1,7,2\nu1,07,3\nu1,+7,4\nu2,7,1\nu2,07,2\n")
    split = prepare_split(str(p), "loo")
    assert split.n_items == 4 and split.item_labels[1:].tolist() == ["007", "7", "07", "+7"]
    assert split.item_labels[split.test.targets].tolist() == ["+7"]


@pytest.mark.parametrize("fmt", ["tsv", "parquet", "recbole", "dataframe"])
def test_ids_are_kept_exactly_in_every_table_format(tmp_path: Path, fmt: str) -> None:
    df = pd.DataFrame({"user_id": ["u1"] * 6 + [" u1"], "item_id": ["007", "7", "07", "+7", " a", "a ", "a"],
                       "timestamp": list(range(1, 8))})
    if fmt == "tsv":
        source = tmp_path / "x.tsv"
        df.to_csv(source, sep="\t", index=False)
    elif fmt == "parquet":
        source = tmp_path / "x.parquet"
        df.to_parquet(source)
    elif fmt == "recbole":
        source = write(tmp_path / "x.inter", "user_id:token\titem_id:token\ttimestamp:float\n" + "".join(
            f"{u}\t{i}\t{t}\n" for u, i, t in df.itertuples(index=False)))
    else:
        source = df
    prepared, _ = load_prepared(source if fmt == "dataframe" else str(source))
    assert labels_of(prepared) == ["007", "7", "07", "+7", " a", "a ", "a"]
    assert list(prepared.user_labels) == ["u1", " u1"]  # " u1" is another user


@pytest.mark.parametrize("fmt, text", [
    ("interactions", "u1 007 1\nu1 7 2\nu1 07 3\nu1 +7 4\nu1 1_0 5\nu1 10 6\n"),
    ("user-lines", "u1 007 7 07 +7 1_0 10\n"),
    ("movielens", "u1::007::5::1\nu1::7::5::2\nu1::07::5::3\nu1::+7::5::4\nu1::1_0::5::5\nu1::10::5::6\n"),
])
def test_ids_are_kept_exactly_in_whitespace_formats(tmp_path: Path, fmt: str, text: str) -> None:
    # numpy's int parser reads "007", "+7" and "1_0" as integers: the reader must not merge them
    raw = read_interactions([write(tmp_path / "f.txt", text)], fmt)
    assert raw.items.tolist() == ["007", "7", "07", "+7", "1_0", "10"]
    assert raw.users.tolist() == ["u1"] * 6


def test_string_ids_are_accepted_where_integers_were_required(tmp_path: Path) -> None:
    raw = read_interactions([write(tmp_path / "seq.txt", "1 10 20\nu2 20 x7 3.5\n")], "user-lines")
    assert raw.users.tolist() == ["1", "1", "u2", "u2", "u2"]  # one id column: all strings
    assert raw.items.tolist() == ["10", "20", "20", "x7", "3.5"]


def test_canonical_integer_ids_stay_integers_in_numeric_order(tmp_path: Path) -> None:
    # the registered data sets' ids are canonical integers: same labels, numbered in increasing id as before
    prepared, _ = load_prepared(str(write(tmp_path / "x.csv", "user_id,item_id,timestamp\n5,100,1\n5,9,2\n5,-3,3\n")))
    assert prepared.item_labels[1:].tolist() == [-3, 9, 100] and prepared.sequences.to_lists() == [[3, 2, 1]]
    assert prepared.user_labels.dtype == np.int64 and prepared.user_labels.tolist() == [5]
    assert canonical_int_labels(np.array(["0", "-12", "123456789012345678"], dtype=object)).tolist() == [
        0, -12, 123456789012345678]
    for text in ("-0", "007", "+7", "1_0", "\u0667", " 7", "7 ", "1234567890123456789"):
        assert canonical_int_labels(np.array(["1", text], dtype=object)) is None, text


def test_normalize_ids_is_an_option_off_by_default(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "x.csv", ISSUE_CSV)
    prepared, manifest = load_prepared(str(p), normalize_ids=True)
    assert labels_of(prepared) == ["7", "a"] and manifest["changes"]["ids"] == "normalized"
    ints, _ = load_prepared(str(write(tmp_path / "n.csv", "user_id,item_id,timestamp\n 1,007,1\n1,+7,2\n1, 8,3\n")),
                            normalize_ids=True)
    assert ints.item_labels[1:].tolist() == [7, 8] and ints.user_labels.tolist() == [1]
    assert invoke("data", "stats", str(p), "--normalize-ids") == 0
    assert "data: read 7 interactions of 1 user and 2 items (csv); ids normalized" in capsys.readouterr().err


def test_ids_that_normalizing_would_merge_are_kept_and_noted(tmp_path: Path, capsys) -> None:
    """Kept apart (ids are exact), but the data summary says which ids look like one id written twice."""
    p = write(tmp_path / "x.csv", ISSUE_CSV)  # items 007, 7, 07, +7 (one to --normalize-ids), ' a', 'a ', 'a'
    prepared, manifest = load_prepared(str(p))
    assert labels_of(prepared) == ["007", "7", "07", "+7", " a", "a ", "a"]
    assert manifest["changes"]["notes"] == [
        "7 item ids differ from another only by surrounding spaces, leading zeros or a '+' (e.g. '007' and '7'): "
        "kept apart, as read; --normalize-ids (normalize_ids=True) makes them one"]
    spaced = pd.DataFrame({"user_id": ["u1", "u1 ", "u2"], "item_id": ["a", "b", "c"], "timestamp": [1, 2, 3]})
    _, frame = load_prepared(spaced)
    assert frame["changes"]["notes"] == [
        "2 user ids differ from another only by surrounding spaces, leading zeros or a '+' (e.g. 'u1' and 'u1 '): "
        "kept apart, as read; --normalize-ids (normalize_ids=True) makes them one"]
    assert invoke("data", "stats", str(p)) == 0
    assert "data: note: 7 item ids differ from another only by" in capsys.readouterr().err
    # none where no two ids merge, and none when they are normalized
    clean = write(tmp_path / "c.csv", "user_id,item_id,timestamp\nu1,a,1\nu1,b,2\nu2,007,3\nu2,8,4\n")
    assert load_prepared(str(clean))[1]["changes"]["notes"] == []
    assert load_prepared(str(p), normalize_ids=True)[1]["changes"]["notes"] == []


def test_ids_that_look_the_same_in_other_unicode_code_points_are_kept_and_noted(tmp_path: Path, capsys) -> None:
    """'Café' with the letter é and with e + a combining accent (NFC / NFD: a Mac's file names, a web form) look
    the same on every screen and were two users or items without a word; kept apart (ids are exact), now noted with
    their code points, and a lookup of one spelling names the data's other."""
    nfc, nfd = "Caf\u00e9", "Cafe\u0301"
    df = pd.DataFrame({"user_id": [nfc, nfc, nfd, nfd, "u"], "item_id": [nfd, "b", nfd, "b", nfc],
                       "timestamp": [1, 2, 3, 4, 5]})
    _, manifest = load_prepared(df)
    notes = manifest["changes"]["notes"]
    assert notes == [
        "1 user id(s) in other Unicode code points than an id that looks the same (an accent composed or decomposed, "
        f"NFC / NFD: e.g. {nfc!r} (U+00E9) and {nfd!r} (U+0301)): kept apart, as read",
        "1 item id(s) in other Unicode code points than an id that looks the same (an accent composed or decomposed, "
        f"NFC / NFD: e.g. {nfd!r} (U+0301) and {nfc!r} (U+00E9)): kept apart, as read"]
    assert load_prepared(df.assign(user_id=["a", "a", "b", "b", "c"], item_id=[nfc, "b", nfc, "b", "x"]))[1][
        "changes"]["notes"] == []
    from resdom.models import build_model
    from resdom.models.config import make_model_config
    from resdom.recommend import recommend, similar_items

    split = prepare_split(df.assign(user_id=[nfc] * 2 + ["u"] * 3, item_id=[nfd, "b", "b", nfd, "c"]), "loo")
    model = build_model(make_model_config(name="sasrec", n_items=split.n_items, hidden=8, layers=1, max_len=4,
                                          heads=1)).eval()
    rest = "in other Unicode code points; ids are matched exactly)"
    user_hint = f"({nfd!r} (U+0301) is the data's {nfc!r} (U+00E9) {rest}"
    with pytest.raises(ResdomError, match=f"^users: 1 user id\\(s\\) not in the data: .*{re.escape(user_hint)}$"):
        recommend(model, split, [nfd])
    item_hint = f"({nfc!r} (U+00E9) is the data's {nfd!r} (U+0301) {rest}"
    note = recommend(model, split, ["u"], k=1, items=[nfc, "c"], filter_seen=False).attrs["note"]
    assert note == f"items: 1 whitelisted item id(s) not in the data, left out: {nfc!r} {item_hint}"
    none = r"^items: none of the 1 item id\(s\) is in the data "
    with pytest.raises(ResdomError, match=f"{none}.*{re.escape(item_hint)}$"):
        similar_items(model, split, [nfc])


def test_an_id_column_of_floats_is_noted(tmp_path: Path) -> None:
    """A DataFrame's integer ids that a missing value once made floats were read as '6.0' without a word, so
    recommend wrote '6.0' and did not match 6; kept (ids are the text of each value), now noted with what to do."""
    df = pd.DataFrame({"user_id": [1, 1, 2, 2], "item_id": [6.0, 7.0, 6.0, 7.5], "timestamp": [1, 2, 3, 4]})
    prepared, manifest = load_prepared(df)
    assert prepared.item_labels[1:].tolist() == ["6.0", "7.0", "7.5"]
    assert manifest["changes"]["notes"] == [
        "column 'item_id' holds floats: its ids are their text (e.g. '6.0'), which is how they are matched and "
        "written; for integer ids, df['item_id'].astype('int64') first"]
    df.to_parquet(tmp_path / "x.parquet")
    assert load_prepared(str(tmp_path / "x.parquet"))[1]["changes"]["notes"][0].endswith("write the column as integers")
    assert load_prepared(df.astype({"item_id": str}))[1]["changes"]["notes"] == []


# ---------------------------------------------------------------------------------------------------- timestamps


def test_fractional_timestamps_order_events_within_a_second(tmp_path: Path) -> None:
    # b at 1.2 s comes before a at 1.5 s: floored, both were at 1 s and kept file order (a, b): another target
    p = write(tmp_path / "x.csv", "user_id,item_id,timestamp\nu,x,0.5\nu,a,1.5\nu,b,1.2\n")
    split = prepare_split(str(p), "loo")
    assert split.item_labels[split.test.targets].tolist() == ["a"]
    assert split.test.inputs.times.tolist() == [0.5, 1.2]
    assert split.manifest["changes"]["time"]["fractional"] is True


def test_fractional_times_in_whitespace_files_and_dates(tmp_path: Path) -> None:
    raw = read_interactions([write(tmp_path / "i.txt", "1 10 100.75\n1 20 100.25\n")], "interactions")
    assert raw.times.dtype == np.float64 and raw.times.tolist() == [100.75, 100.25]
    csv = write(tmp_path / "d.csv", "user_id,item_id,timestamp\nu,a,2020-01-01T00:00:00.750Z\n"
                                    "u,b,2020-01-01T00:00:00.250Z\n")
    assert read_interactions([csv]).times.tolist() == [1577836800.75, 1577836800.25]
    whole = read_interactions([write(tmp_path / "w.txt", "1 10 100.0\n1 20 99\n")], "interactions")
    assert whole.times.dtype == np.int64 and whole.times.tolist() == [100, 99]  # whole seconds stay integers


def test_equal_times_still_keep_file_order(tmp_path: Path) -> None:
    p = write(tmp_path / "x.csv", "user_id,item_id,timestamp\nu,c,2.5\nu,a,2.5\nu,b,1.25\nu,d,2.5\n")
    prepared, manifest = load_prepared(str(p))
    seq = prepared.item_labels[prepared.sequences.items].tolist()
    assert seq == ["b", "c", "a", "d"]
    assert manifest["changes"]["time"]["equal_time_neighbours"] == 2


def test_a_table_without_its_timestamp_column_is_an_error_unless_no_time(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "x.csv", "user_id,item_id\nu,b\nu,a\nu,c\n")
    with pytest.raises(ResdomError, match=r"x\.csv: missing timestamp column 'timestamp' \(columns: 'user_id', "
                                          r"'item_id'\); name the timestamp column with time_col=\.\.\..*"
                                          r"time_col=None"):
        load_prepared(str(p))  # from Python: the Python arguments; the command line's flags below
    with pytest.raises(ResdomError, match=r"x\.csv: missing timestamp column 'when'.*time_col=None"):
        load_prepared(str(p), time_col="when")
    for code_args in (["data", "split", str(p), "--out", str(tmp_path / "s")], ["data", "stats", str(p)]):
        assert invoke(*code_args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "missing timestamp column 'timestamp'" in err and str(p) in err
    assert not (tmp_path / "s").exists()
    # --no-time: file row order, said by the manifest and the console
    assert invoke("data", "split", str(p), "--out", str(tmp_path / "s"), "--no-time") == 0
    err = capsys.readouterr().err
    assert "data: order: no timestamps (--no-time): each user's interactions in file row order" in err
    split = SplitData.load(tmp_path / "s")
    assert split.manifest["changes"]["time"]["kind"] == "no_time" and split.manifest["has_timestamps"] is False
    assert "source order" in split.manifest["tie_rule"]
    assert split.item_labels[split.test.targets].tolist() == ["c"]  # the last row, not a sorted or shuffled one


def test_api_time_col_none_or_no_time_means_row_order(tmp_path: Path) -> None:
    df = pd.DataFrame({"user_id": ["u"] * 3, "item_id": ["b", "a", "c"], "timestamp": [3, 2, 1]})
    with_time = prepare_split(df, "loo")
    assert with_time.item_labels[with_time.test.targets].tolist() == ["b"]
    for options in ({"time_col": None}, {"no_time": True}):
        split = prepare_split(df, **options)
        assert split.item_labels[split.test.targets].tolist() == ["c"], options
        assert split.manifest["changes"]["time"]["kind"] == "ignored"
        assert any("ignored (no_time)" in n for n in split.manifest["changes"]["notes"])
    # no_time with a named time column: the column was read as the user's timestamps by nothing, without a word
    with pytest.raises(ResdomError, match=r"^no_time, time_col='timestamp': the one reads the data without "
                                          r"timestamps, the other names its timestamp column; give one of them$"):
        prepare_split(df, no_time=True, time_col="timestamp")
    assert prepare_split(df, "loo", no_time=False, time_col="timestamp").item_labels[with_time.test.targets[0]] == "b"


def test_cli_no_time_with_a_time_column_is_one_error(tmp_path: Path, capsys) -> None:
    p = write(tmp_path / "x.csv", "user_id,item_id,ts\nu,b,3\nu,a,2\nu,c,1\n")
    for args in (["data", "stats", str(p)], ["data", "split", str(p), "--out", str(tmp_path / "s")],
                 ["train", str(p), "--out", str(tmp_path / "run")]):
        code = invoke(*args, "--no-time", "--time-col", "ts")
        err = capsys.readouterr().err
        assert code == 2 and err == ("error: --no-time, --time-col ts: the one reads the data without timestamps, the "
                                     "other names its timestamp column; give one of them\n"), err
    assert not (tmp_path / "s").exists() and not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------------- filtering, counted


def _sparse_csv(tmp_path: Path) -> Path:
    """u1: 4 items, u2: 3, u3: 1 (a one-interaction user); items 'z' and 'y' occur once."""
    rows = [("u1", "a", 1), ("u1", "b", 2), ("u1", "a", 3), ("u1", "c", 4), ("u2", "b", 1), ("u2", "c", 2),
            ("u2", "z", 3), ("u3", "y", 5)]
    return write(tmp_path / "own.csv", "user_id,item_id,timestamp\n" + "".join(f"{u},{i},{t}\n" for u, i, t in rows))


def test_own_files_get_no_k_core_by_default(tmp_path: Path) -> None:
    prepared, manifest = load_prepared(str(_sparse_csv(tmp_path)))
    assert len(prepared.sequences) == 3 and prepared.n_items == 5  # the old default k-core 5 removed everything
    assert manifest["preprocessing"]["config"]["k_core"] is None and manifest["changes"]["k_core"] is None


def test_k_core_counts_what_it_removes(tmp_path: Path) -> None:
    # k = 2 by hand: y (1), z (1) go; then u3 has 0 rows, u2 has b, c (2): stays; a (2), b (2), c (2) stay
    prepared, manifest = load_prepared(str(_sparse_csv(tmp_path)), k_core=2)
    assert manifest["changes"]["k_core"] == {"k": 2, "users": 1, "items": 2, "interactions": 2}
    assert manifest["changes"]["removed"] == {"users": 1, "items": 2, "interactions": 2}
    assert prepared.item_labels[1:].tolist() == ["a", "b", "c"] and list(prepared.user_labels) == ["u1", "u2"]


def test_split_counts_the_dropped_user_and_keeps_its_history(tmp_path: Path) -> None:
    split = prepare_split(str(_sparse_csv(tmp_path)), "loo")
    m = split.manifest
    assert m["dropped_users"] == {"fewer_than_3_items": 1}  # u3: one interaction
    assert m["changes"]["split"] == {"protocol": "loo", "users_dropped": 1, "users_partly_used": 0,
                                     "interactions_unused": 1, "items_unused": 1,
                                     "reasons": {"fewer_than_3_items": 1}}
    assert m["changes"]["repeats"] == {"repeat_rows": 1, "consecutive": 0, "removed": 0}
    history = split.history()
    assert [split.user_labels[u] for u in history.users] == ["u1", "u2", "u3"]
    assert [split.item_labels[s].tolist() for s in history.to_lists()] == [["a", "b", "a", "c"], ["b", "c", "z"],
                                                                           ["y"]]


def test_a_split_with_nothing_left_says_why_in_one_line(tmp_path: Path) -> None:
    """Two users with 2 and 1 interactions: leave-one-out drops both (it needs 3 each), the global temporal split
    drops both for its own reasons; the message names the parts left empty and the split's dropped counts (in the
    words of the data summary's split line, ``changes.split_reasons``)."""
    f = write(tmp_path / "tiny.csv", "user_id,item_id,timestamp\n1,a,1\n1,b,2\n2,a,3\n")
    with pytest.raises(ResdomError) as loo:
        prepare_split(str(f), "loo")
    assert str(loo.value) == (f"{f}: the loo split leaves no training and no test data: 2 user(s) after "
                              "preprocessing, dropped by the split: fewer than 3 items: 2 (leave-one-out needs 3 "
                              "interactions or more per user)")
    with pytest.raises(ResdomError) as gts:
        prepare_split(str(f), protocol="gts")
    assert "\n" not in str(gts.value)
    assert str(gts.value).startswith(f"{f}: the gts split leaves no training and no test data: 2 user(s) after "
                                     "preprocessing, dropped by the split: test: eval users with one interaction: 1")
    assert str(gts.value).endswith("(1 of 3 interactions lie after T_test = 1970-01-01T00:00:02Z, the 0.9-quantile "
                                   "of the timestamps; a test user needs its last interaction after it and one more "
                                   "before that, a training user 2 at or before it)")
    late = write(tmp_path / "late.csv", "user_id,item_id,timestamp\n1,a,1\n1,b,2\n1,c,9\n2,a,3\n2,b,4\n2,c,9\n")
    with pytest.raises(ResdomError, match=r"0 of 6 interactions lie after T_test = 1970-01-01T00:00:09Z, the "
                       r"0\.9-quantile .*; lower quantile\)$"):  # the last time is the quantile: nothing after it
        prepare_split(str(late), protocol="gts")
    same = write(tmp_path / "same.csv", "user_id,item_id,timestamp\n1,a,5\n1,b,5\n1,c,5\n2,a,5\n2,b,5\n")
    with pytest.raises(ResdomError, match=r"0 of 5 interactions lie after T_test = .*a training user 2 at or before "
                       r"it\)$"):
        prepare_split(str(same), protocol="gts")  # one time for all: no quantile helps, so none is suggested


def test_every_refusal_of_the_split_names_the_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The split sees sequences only, so its own refusals said nothing of the file: a file of one interaction under
    gts was "error: no user has 2 interactions at or before T_test = ...", gts of a file read without times "error:
    the global temporal split needs timestamps"."""
    one = write(tmp_path / "one.csv", "user_id,item_id,timestamp\na,x,1\n")
    with pytest.raises(ResdomError) as e:
        prepare_split(str(one), protocol="gts")
    assert str(e.value) == (f"{one}: no user has 2 interactions at or before T_test = 1970-01-01T00:00:01Z; raise the "
                            "quantile")
    three = write(tmp_path / "three.csv", "user_id,item_id,timestamp\na,x,1\na,y,2\na,z,3\n")
    with pytest.raises(ResdomError, match=f"^{three}: the global temporal split needs timestamps"):
        prepare_split(str(three), protocol="gts", no_time=True)
    code, _, err = run_cli(capsys, "data", "split", str(one), "--protocol", "gts", "--out", str(tmp_path / "o"))
    one_line_error(code, err, f"error: {one}: no user has 2")
    assert not (tmp_path / "o").exists()


def test_registered_data_sets_keep_their_protocol_and_fingerprint(shared_raw: Path) -> None:
    """The paper data sets still get k-core 5 (ml-100k its preset: none), and their splits are the very ones of
    before ids were read as labels (the fingerprints below were checked equal to the previous code's splits when the
    fingerprint stopped hashing the data folder's path)."""
    from resdom.runs import data_fingerprint

    expected = {("beauty", "loo"): ("e4e4d88f51e83b88", 5), ("toys-ts", "gts"): ("65bb67cf81527578", 5),
                ("ml-100k", "loo"): ("4e2ab36ac6935eda", None)}
    for (name, protocol), (fingerprint, k) in expected.items():
        split = prepare_split(name, protocol=protocol, data_dir=shared_raw)
        assert split.manifest["preprocessing"]["config"]["k_core"] == k
        assert data_fingerprint(split) == fingerprint, name
        assert split.user_labels.dtype == np.int64 and all(isinstance(x, int) for x in split.item_labels[1:5])


def test_the_fingerprint_does_not_depend_on_where_the_data_lies(tmp_path: Path) -> None:
    """The same file in two folders (another clone, another machine) is the same split: its runs resume there."""
    from resdom.runs import data_fingerprint

    first = _sparse_csv(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    second = tmp_path / "elsewhere" / "copy.csv"
    second.write_bytes(first.read_bytes())
    assert data_fingerprint(prepare_split(str(first), "loo")) == data_fingerprint(prepare_split(str(second), "loo"))
    second.write_bytes(first.read_bytes().replace(b"u2", b"u9"))
    assert data_fingerprint(prepare_split(str(first), "loo")) != data_fingerprint(prepare_split(str(second), "loo"))


def test_every_command_that_prepares_data_prints_what_changed(tmp_path: Path, capsys) -> None:
    p = _sparse_csv(tmp_path)
    expected = ["data: read 8 interactions of 3 users and 5 items (csv); ids kept exactly as read",
                "data: repeats: 1 row repeats an earlier (user, item) pair, 0 of them right after the same item; all "
                "kept", "data: k-core: off (no user or item filtered)"]
    split_line = ("data: loo split: 1 user in no part (fewer than 3 items: 1), 1 interaction in no part; kept for "
                  "`recommend`")
    assert invoke("data", "stats", str(p)) == 0
    err = capsys.readouterr().err
    assert all(line in err for line in expected) and "split" not in err
    assert invoke("data", "stats", str(p), "--json") == 0
    out, err = capsys.readouterr()
    assert out.startswith("{") and all(line in err for line in expected)  # stdout stays JSON
    assert invoke("data", "split", str(p), "--protocol", "loo", "--out", str(tmp_path / "s")) == 0
    err = capsys.readouterr().err
    assert all(line in err for line in [*expected, split_line])
    assert invoke("data", "split", str(p), "--protocol", "loo", "--out", str(tmp_path / "s2"), "--k-core", "2") == 0
    assert "data: k-core 2: removed 1 user, 2 items, 2 interactions" in capsys.readouterr().err
    lines = change_lines(SplitData.load(tmp_path / "s").manifest)
    assert [f"data: {x}" for x in lines if x.startswith("loo split")] == [split_line]


def test_a_split_that_uses_every_row_says_so(tmp_path: Path, capsys) -> None:
    p = tmp_path / "full.csv"
    p.write_text("user_id,item_id,timestamp\n" + "".join(f"u{u},i{j},{10 * u + j}\n" for u in range(2)
                                                          for j in range(3)))
    assert invoke("data", "split", str(p), "--protocol", "loo", "--out", str(tmp_path / "s")) == 0
    err = capsys.readouterr().err
    assert "data: loo split: every user and interaction in a part\n" in err and "in no part" not in err


@pytest.mark.slow
def test_train_prints_what_changed(tmp_path: Path, capsys) -> None:
    p = _sparse_csv(tmp_path)
    code = invoke("train", str(p), "--protocol", "loo", "--out", str(tmp_path / "run"), "--epochs", "1", "--device",
                  "cpu", "--set", "model.hidden=8", "--set", "model.layers=1", "--set", "model.heads=1",
                  "--set", "model.max_len=4")
    err = capsys.readouterr().err
    assert code == 0, err
    assert "data: loo split: 1 user in no part (fewer than 3 items: 1)" in err
    assert "data: k-core: off (no user or item filtered)" in err


# ------------------------------------------------------------------------------------------------- DataFrames


def test_prepare_split_takes_a_dataframe_and_leaves_it_unchanged(tmp_path: Path) -> None:
    df = pd.DataFrame({"customer": ["c1", "c1", "c1", "c2", "c2", "c2"], "product": [3, 1, 2, 1, 2, 3],
                       "ts": [1.5, 2.5, 3.5, 1, 2, 3]})
    before = df.copy()
    split = resdom.prepare_split(df, "loo", user_col="customer", item_col="product", time_col="ts")
    pd.testing.assert_frame_equal(df, before)
    assert split.manifest["source"]["kind"] == "dataframe" and split.manifest["source"]["rows"] == 6
    assert split.item_labels[1:].tolist() == [1, 2, 3] and list(split.user_labels) == ["c1", "c2"]
    assert split.item_labels[split.test.targets].tolist() == [2, 3]
    other = df.assign(ts=[1.5, 2.5, 3.5, 1, 2, 4])
    assert prepare_split(other, "loo", user_col="customer", item_col="product", time_col="ts").manifest["source"][
        "sha256"] != split.manifest["source"]["sha256"]
    with pytest.raises(ResdomError, match=r"DataFrame: missing column 'user_id'"):
        resdom.prepare_split(df, "loo")
    with pytest.raises(ResdomError, match=r"DataFrame: row 2: missing value in column 'product'"):
        resdom.prepare_split(df.astype({"product": object}).assign(product=[3, None, 2, 1, 2, 3]), "loo",
                             user_col="customer", item_col="product", time_col="ts")


# ------------------------------------------------------------------------------------------ ids in saved splits


@pytest.mark.parametrize("labels", [["007", "7", " a", "a ", "x,y", 'q"uote', "\u00e9t\u00e9", "a\x00"],
                                    [-2, 3, 10**15]])
def test_split_saves_and_loads_external_ids_exactly(tmp_path: Path, labels: list) -> None:
    items = labels * 2
    users = ["u1"] * len(labels) + ["u2"] * len(labels)
    df = pd.DataFrame({"user_id": users, "item_id": items, "timestamp": range(len(items))})
    split = prepare_split(df, "loo")
    split.save(tmp_path / "s")
    loaded = SplitData.load(tmp_path / "s")
    assert loaded.item_labels[1:].tolist() == split.item_labels[1:].tolist() == labels
    assert [type(x) for x in loaded.item_labels[1:]] == [type(x) for x in labels]
    assert loaded.user_labels.tolist() == ["u1", "u2"]
    with np.load(tmp_path / "s" / "arrays.npz", allow_pickle=False) as z:  # no pickles
        assert {"user_labels_utf8", "item_labels_utf8", "item_labels_int"} & set(z.files)


def test_split_without_ids_still_loads(tmp_path: Path) -> None:
    split = prepare_split("synthetic:n_users=20,n_items=30,min_len=3,max_len=5,seed=0", "loo")
    bare = SplitData(split.train, split.valid, split.test, split.n_items, split.manifest)
    bare.save(tmp_path / "s")
    loaded = SplitData.load(tmp_path / "s")
    assert loaded.user_labels is None and loaded.item_labels is None and loaded.rest is None


def test_damaged_labels_are_one_clear_error(tmp_path: Path) -> None:
    split = prepare_split(pd.DataFrame({"user_id": ["a"] * 3, "item_id": ["x", "y", "z"], "timestamp": [1, 2, 3]}),
                          "loo")
    split.save(tmp_path / "s")
    with np.load(tmp_path / "s" / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["item_labels_offsets"] = arrays["item_labels_offsets"][:-1]
    np.savez(tmp_path / "s" / "arrays.npz", **arrays)
    with pytest.raises(ResdomError, match=r"arrays\.npz: not a readable prepared split.*item_labels"):
        SplitData.load(tmp_path / "s")


def test_gzip_csv_with_string_ids(tmp_path: Path) -> None:
    p = tmp_path / "x.csv.gz"
    p.write_bytes(gzip.compress(ISSUE_CSV.encode()))
    prepared, _ = load_prepared(str(p))
    assert labels_of(prepared) == ["007", "7", "07", "+7", " a", "a ", "a"]


def test_gts_threshold_keeps_its_fraction(tmp_path: Path) -> None:
    # all 6 times: 1.0 1.1 2.0 2.2 2.5 2.7; q 0.9 -> the order statistic at floor(0.9 * 5) = 4: T_test = 2.5 (a
    # floored 2 would make u1, whose last time is 2.5, a test user)
    p = write(tmp_path / "x.csv", "user_id,item_id,timestamp\nu1,a,1.0\nu1,b,2.0\nu1,c,2.5\nu2,a,1.1\nu2,b,2.2\n"
                                  "u2,c,2.7\n")
    split = prepare_split(str(p), protocol="gts", quantile=0.9, valid_quantile=0.5)
    assert split.manifest["thresholds"]["T_test"] == 2.5
    assert split.manifest["thresholds"]["T_test_iso"] == "1970-01-01T00:00:02.500000Z"
    assert [split.user_labels[u] for u in split.test.inputs.users] == ["u2"]
