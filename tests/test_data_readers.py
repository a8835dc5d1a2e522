"""Readers (spec §1): every format, format detection, and every malformed input -> one clear line, exit 2."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import invoke
from hypothesis import example, given, settings
from hypothesis import strategies as st

from resdom.data.prepare import load_interactions, load_prepared, prepare_split
from resdom.data.readers import RawInteractions, detect_format, read_frame, read_interactions, split_source_paths
from resdom.errors import ResdomError

# the same 3 users in every format: u1: 10 20 30 (t 100 200 300), u2: 20 30 (t 150 150), u3: 30 10 (t 50 60)
EXPECTED_ITEMS = [[10, 20, 30], [20, 30], [30, 10]]
EXPECTED_TIMES = [[100, 200, 300], [150, 150], [50, 60]]


def write(path: Path, text: str) -> Path:
    """``text`` written to ``path``, gzipped where its name ends in .gz."""
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """Run ``resdom ARGS`` in-process through ``cli.main.app`` (the ResdomError -> exit 2 wrapper)."""
    code = invoke(*args)
    out, err = capsys.readouterr()
    return code, out, err


def raw_lists(paths: list[Path], fmt: str | None = None, **cols: str) -> tuple[list, list | None]:
    raw = read_interactions(paths, fmt, **cols)
    users = np.unique(raw.users)
    items = [raw.items[raw.users == u].tolist() for u in users]
    times = None if raw.times is None else [raw.times[raw.users == u].tolist() for u in users]
    return items, times


# ---------------------------------------------------------------------------------------------------------------
# formats


def test_user_lines(tmp_path: Path) -> None:
    p = write(tmp_path / "seq.txt", "1 10 20 30\n2 20 30\n\n3 30 10\n")
    assert detect_format([p]) == "user-lines"
    assert raw_lists([p]) == (EXPECTED_ITEMS, None)


def test_paired_files_and_folder(tmp_path: Path) -> None:
    items = write(tmp_path / "X_item.txt", "1 10 20 30\n2 20 30\n3 30 10\n")
    times = write(tmp_path / "X_time.txt", "1 100 200 300\n2 150 150\n3 50 60\n")
    assert detect_format([items, times]) == "paired"
    assert raw_lists([items, times]) == (EXPECTED_ITEMS, EXPECTED_TIMES)
    assert split_source_paths(f"{items},{times}") == [items, times]
    assert split_source_paths(str(tmp_path)) == [items, times]


def test_interaction_lines_with_and_without_time(tmp_path: Path) -> None:
    p = write(tmp_path / "inter.txt", "1 10 100\n1 20 200\n2 20 150\n1 30 300\n2 30 150\n3 30 50\n3 10 60\n")
    assert detect_format([p]) == "interactions"
    assert raw_lists([p]) == (EXPECTED_ITEMS, EXPECTED_TIMES)
    p2 = write(tmp_path / "inter2.txt", "1 10\n1 20\n2 20\n1 30\n2 30\n3 30\n3 10\n")
    assert raw_lists([p2]) == (EXPECTED_ITEMS, None)


def test_recbole_inter(tmp_path: Path) -> None:
    p = write(
        tmp_path / "x.inter",
        "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
        "1\t10\t5\t100\n1\t20\t3\t200\n2\t20\t1\t150\n1\t30\t4\t300\n2\t30\t4\t150\n3\t30\t2\t50\n3\t10\t2\t60\n",
    )
    assert detect_format([p]) == "recbole"
    assert raw_lists([p]) == (EXPECTED_ITEMS, EXPECTED_TIMES)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "parquet"])
def test_tables_with_named_columns(tmp_path: Path, fmt: str) -> None:
    df = pd.DataFrame({"uid": [1, 1, 2, 1, 2, 3, 3], "iid": [10, 20, 20, 30, 30, 30, 10],
                       "ts": [100, 200, 150, 300, 150, 50, 60]})
    p = tmp_path / f"x.{fmt}"
    if fmt == "parquet":
        df.to_parquet(p)
    else:
        df.to_csv(p, sep="," if fmt == "csv" else "\t", index=False)
    assert detect_format([p]) == fmt
    assert raw_lists([p], user_col="uid", item_col="iid", time_col="ts") == (EXPECTED_ITEMS, EXPECTED_TIMES)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "recbole", "parquet", "dataframe"])
def test_a_column_read_twice_in_the_header_is_refused(tmp_path: Path, fmt: str) -> None:
    """pandas would read the first ``item_id`` and rename the second ``item_id.1`` (or refuse the names, or return a
    frame for ``df["item_id"]``): which column is meant is ambiguous, so the header is refused naming both; a
    repeated column that is not read changes nothing."""
    rows = [[1, 10, 11, 100, 5], [1, 20, 21, 200, 4], [2, 20, 21, 150, 3], [3, 10, 11, 60, 4]]

    def read(header: list[str]) -> RawInteractions:
        if fmt == "dataframe":
            return read_frame(pd.DataFrame(rows, columns=header))
        path = tmp_path / f"x.{'inter' if fmt == 'recbole' else fmt}"
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table([pa.array(col) for col in zip(*rows)], names=header), path)
        else:
            names = [f"{h}:token" for h in header] if fmt == "recbole" else header
            sep = "," if fmt == "csv" else "\t"
            path.write_text(sep.join(names) + "\n" + "".join(sep.join(map(str, r)) + "\n" for r in rows))
        return read_interactions([path], fmt)

    where = {"dataframe": "DataFrame", "parquet": "x.parquet", "recbole": "x.inter:1"}.get(fmt, f"x.{fmt}:1")
    with pytest.raises(ResdomError, match=rf"{re.escape(where)}: the header names column 'item_id' 2 times "
                                          r"\(columns 2, 3\)"):
        read(["user_id", "item_id", "item_id", "timestamp", "rating"])
    if fmt != "recbole":  # RecBole's atomic header may not repeat a name at all (pandas refuses the names)
        plain = read(["user_id", "item_id", "other", "timestamp", "rating"])
        repeated = read(["user_id", "item_id", "other", "timestamp", "other"])  # not a column that is read
        for a, b in ((plain.users, repeated.users), (plain.items, repeated.items), (plain.times, repeated.times)):
            np.testing.assert_array_equal(a, b)
        assert plain.items.tolist() == [10, 20, 20, 10]


@pytest.mark.parametrize("cols, message", [
    ({"user_col": "item", "item_col": "item"}, "user_col and item_col name the same column 'item'"),
    ({"user_col": "item_id"}, "user_col and item_col (its default) name the same column 'item_id'"),
    ({"user_col": "u", "item_col": "item", "time_col": "item"}, "item_col and time_col name the same column 'item'"),
])
def test_one_column_read_as_two_is_refused(cols: dict, message: str, capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    """user_col='item', item_col='item' made every user its own item and trained on that without a word."""
    frame = pd.DataFrame({"u": [1, 1, 2], "item": [5, 6, 5], "item_id": [5, 6, 5], "timestamp": [1, 2, 3]})
    with pytest.raises(ResdomError, match=re.escape(message)):
        read_frame(frame, **cols)
    path = tmp_path / "x.csv"
    frame.to_csv(path, index=False)
    flags = [x for k, v in cols.items() for x in (f"--{k[:-4]}-col", v)]
    assert invoke("data", "stats", str(path), *flags) == 2
    assert "--user-col" in capsys.readouterr().err or "time_col" in cols
    assert read_frame(frame, user_col="u", item_col="item").items.tolist() == [5, 6, 5]


@pytest.mark.parametrize("users, merged", [([1, "1", 2, 2], True), ([1, 1.0, 2, 2], True), ([True, 1, 2, 2], True),
                                           ([1, "a", 2, "b"], False), ([1.0, 1.0, 2.5, 2.5], False)])
def test_a_dataframe_id_column_of_mixed_types_must_map_one_to_one_onto_text(users: list, merged: bool) -> None:
    """Ids are read as their text: an object column holding 1 and '1' (one text) or 1 and 1.0 (one value, two
    texts) would merge or split ids without a word, so it is refused; mixed types with distinct texts are read."""
    df = pd.DataFrame({"user_id": pd.Series(users, dtype=object), "item_id": [10, 20, 10, 30], "timestamp": range(4)})
    if merged:
        with pytest.raises(ResdomError, match=r"^DataFrame: column 'user_id' mixes .* values whose texts are not one "
                                              r"per id .*df\['user_id'\]\.astype\(str\)"):
            read_frame(df)
        with pytest.raises(ResdomError, match="column 'item_id' mixes"):
            read_frame(df.rename(columns={"user_id": "item_id", "item_id": "user_id"}))
    else:
        assert sorted(map(str, read_frame(df).users.tolist())) == sorted(map(str, users))


@pytest.mark.parametrize("dtype", ["int64", "uint64", "UInt64", "uint64[pyarrow]"])
@pytest.mark.parametrize("fmt", ["dataframe", "parquet"])
def test_an_integer_id_column_past_18_digits_reads_as_the_same_ids_as_its_csv(dtype: str, fmt: str,
                                                                             tmp_path: Path) -> None:
    """An integer column was int64 whatever its values: a uint64 id past int64's range wrapped to a negative id, and
    a 19-digit id (a snowflake id) was an integer label where its CSV keeps text (first-appearance order, not
    increasing): other user indices, so other training numbers for the same data. Now every reader agrees."""
    big = 2**63 + 5 if dtype != "int64" else 4_200_000_000_000_000_017
    ids = [big, 7, big, 12, 7]
    df = pd.DataFrame({"user_id": pd.Series(ids, dtype=dtype), "item_id": [3, 4, 5, 3, 4], "timestamp": range(5)})
    csv = tmp_path / "x.csv"
    df.to_csv(csv, index=False)
    if fmt == "parquet":
        df.to_parquet(tmp_path / "x.parquet")
        raw = read_interactions([tmp_path / "x.parquet"])
    else:
        raw = read_frame(df)
    assert raw.users.tolist() == read_interactions([csv]).users.tolist() == [str(big), "7", str(big), "12", "7"]
    small = df.assign(user_id=pd.Series([5, 7, 5, 12, 7], dtype=dtype))
    small.to_csv(csv, index=False)
    assert read_frame(small).users.dtype == np.int64  # ids within 18 digits stay integers, as their CSV's
    assert read_frame(small).users.tolist() == read_interactions([csv]).users.tolist() == [5, 7, 5, 12, 7]


def test_a_line_with_a_user_and_no_item_is_counted_not_dropped_silently(tmp_path: Path) -> None:
    items = write(tmp_path / "items.txt", "u1 a b\nu2\nu3 c\nu4\n")
    raw = read_interactions([items], "user-lines")
    assert raw.users.tolist() == ["u1", "u1", "u3"]
    assert raw.notes == [f"2 lines with a user and no item skipped (e.g. 'u2', {items}:2)"]
    times = write(tmp_path / "times.txt", "u1 1 2\nu2\nu3 5\nu4\n")
    raw = read_interactions([items, times], "paired")
    assert raw.users.tolist() == ["u1", "u1", "u3"] and raw.times.tolist() == [1, 2, 5]
    assert raw.notes == [f"2 lines with a user and no item skipped (e.g. 'u2', {items}:2)"]
    assert read_interactions([write(tmp_path / "full.txt", "u1 a\n")], "user-lines").notes == []


def test_csv_string_ids_and_dates(tmp_path: Path) -> None:
    p = write(tmp_path / "x.csv", "user_id,item_id,timestamp\nA,x,2020-01-02\nA,y,2020-01-01\nB,x,2020-01-03\n")
    prepared, _ = load_prepared(str(p), k_core=0)
    s = prepared.sequences
    # A's two rows sorted by date (y first); items by first appearance: x -> 1, y -> 2
    assert s.to_lists() == [[2, 1], [1]]
    assert list(prepared.item_labels[1:]) == ["x", "y"]
    assert s.times.tolist() == [1577836800, 1577923200, 1578009600]


def test_dates_with_and_without_a_zone_are_not_mixed(tmp_path: Path) -> None:
    """pandas reads a time without a zone as UTC and one with a zone at its offset: mixed in one column, the
    order of a day's rows silently depended on a zone nobody gave (x at 10:00 local came after y at 09:00Z)."""
    mixed = write(tmp_path / "m.csv", "user_id,item_id,timestamp\nA,x,2020-01-01T10:00:00\nA,y,2020-01-01T09:00:00Z\n")
    with pytest.raises(ResdomError, match=r"m\.csv:2: timestamp '2020-01-01T10:00:00' in column 'timestamp' has no "
                                          r"time zone, while '2020-01-01T09:00:00Z' \(.*m\.csv:3\) has one"):
        read_interactions([mixed], None)
    # a bare date is midnight in a zone nobody gave: read as UTC, 2020-01-01 came after 03:00 at +05:00 that day
    dated = write(tmp_path / "d.csv", "user_id,item_id,timestamp\nA,x,2020-01-01T03:00:00+05:00\nA,y,2020-01-01\n")
    with pytest.raises(ResdomError, match=r"d\.csv:3: timestamp '2020-01-01' in column 'timestamp' has no time zone, "
                                          r"while '2020-01-01T03:00:00\+05:00' \(.*d\.csv:2\) has one"):
        read_interactions([dated], None)
    zoned = write(tmp_path / "z.csv", "user_id,item_id,timestamp\nA,x,2020-01-01T10:00:00+02:00\n"
                  "A,y,2020-01-01T09:00:00Z\nA,z,2020-01-03T00:00:00Z\n")
    raw = read_interactions([zoned], None)
    assert raw.times.tolist() == [1577865600, 1577869200, 1578009600]  # 08:00Z, 09:00Z, the 3rd at 00:00Z
    dates = write(tmp_path / "b.csv", "user_id,item_id,timestamp\nA,x,2020-01-02\nA,y,2020-01-01\n")
    assert read_interactions([dates], None).times.tolist() == [1577923200, 1577836800]  # bare dates alone: UTC
    naive = write(tmp_path / "n.csv", "user_id,item_id,timestamp\nA,x,2020-01-01 10:00\nA,y,2020-01-01 09:00\n")
    assert read_interactions([naive], None).times.tolist() == [1577872800, 1577869200]  # all read as UTC


@pytest.mark.parametrize("kind", ["datetime", "Timestamp"])
def test_a_dataframes_datetime_objects_with_and_without_a_zone_are_not_mixed(kind: str) -> None:
    """A DataFrame's object column of Python datetimes (or Timestamps), some zoned and some naive, was read without a
    word, each naive one as UTC, where the same times written to a CSV are refused as ambiguous."""
    import datetime as dt

    make = dt.datetime if kind == "datetime" else pd.Timestamp
    naive, zoned = make(2020, 1, 1, 10), make(2020, 1, 1, 9, tzinfo=dt.timezone.utc)
    df = pd.DataFrame({"user_id": ["A", "A"], "item_id": ["x", "y"], "timestamp": pd.Series([naive, zoned],
                                                                                         dtype=object)})
    with pytest.raises(ResdomError, match=r"^DataFrame: row 1: timestamp .* in column 'timestamp' has no time zone, "
                                          r"while .* \(DataFrame: row 2\) has one"):
        read_frame(df)
    offsets = pd.Series([make(2020, 1, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2))), zoned], dtype=object)
    assert read_frame(df.assign(timestamp=offsets)).times.tolist() == [1577865600, 1577869200]  # 08:00Z, 09:00Z
    naives = pd.Series([naive, make(2020, 1, 1, 9)], dtype=object)
    assert read_frame(df.assign(timestamp=naives)).times.tolist() == [1577872800, 1577869200]  # all read as UTC


@pytest.mark.parametrize("fmt", ["csv", "dataframe", "parquet"])
def test_dates_before_1677_or_after_2262_keep_their_year(fmt: str, tmp_path: Path) -> None:
    """pandas holds dates outside its nanosecond range (1677-2262) in microseconds or seconds; read as nanoseconds
    they wrapped around without a word (1500-01-01 read as 2084-07-20, 3000-01-01 as 1830-11-23), so the order and
    the split of such data were wrong. Every date of years 1 to 9999 keeps its Unix seconds; past them, one line."""
    dates = ["1500-01-01", "3000-01-01T00:00:00", "0001-01-01", "9999-12-31T23:59:59", "1969-12-31T23:59:59.5"]
    df = pd.DataFrame({"user_id": ["u"] * 5, "item_id": list("abcde"), "timestamp": dates})
    if fmt == "csv":
        df.to_csv(tmp_path / "x.csv", index=False)
        raw = read_interactions([tmp_path / "x.csv"])
    elif fmt == "parquet":
        df.assign(timestamp=pd.to_datetime(df["timestamp"], format="mixed")).to_parquet(tmp_path / "x.parquet")
        raw = read_interactions([tmp_path / "x.parquet"])
    else:
        raw = read_frame(df)
    assert raw.times is not None
    assert raw.times.tolist() == [-14831769600, 32503680000, -62135596800, 253402300799, -0.5]
    seconds = pd.Series(np.array(["2020-01-01", "20000-01-01"], dtype="datetime64[s]"))
    with pytest.raises(ResdomError, match=r"^DataFrame: row 2 \(column 'timestamp'\): timestamp .* is outside the "
                                          r"supported range"):
        read_frame(df.iloc[:2].assign(timestamp=seconds))


def test_dates_read_day_first_and_month_first_in_one_column_are_refused(tmp_path: Path) -> None:
    """pandas reads each 'a/b/yyyy' date on its own, month first unless 'a' is past 12: a column of days first
    read 01/02/2020 as January 2 and 13/01/2020 as January 13, so February 1 came before January 13 without a
    word. Such a column is now one line naming a date of each reading; one read month first throughout is kept."""
    path = write(tmp_path / "x.csv", "user_id,item_id,timestamp\nu,a,01/02/2020\nu,b,13/01/2020\n")
    with pytest.raises(ResdomError, match=r"^.*x\.csv:2: timestamp '01/02/2020' in column 'timestamp' reads month "
                                          r"first, while '13/01/2020' \(.*x\.csv:3\) can only be day first"):
        read_interactions([path])
    df = pd.DataFrame({"user_id": ["u"] * 3, "item_id": list("abc"), "timestamp": ["13.01.2020", "2020-01-01",
                                                                                   "05.02.2020 10:00"]})
    with pytest.raises(ResdomError, match=r"^DataFrame: row 3: timestamp '05\.02\.2020 10:00' .* reads month first"):
        read_frame(df)
    with pytest.raises(ResdomError, match=r"^DataFrame: row 3: timestamp '05\.02\.2020 10:00' .* reads month first"):
        read_frame(df.astype({"timestamp": "category"}))
    ok = read_frame(df.assign(timestamp=["01/13/2020", "02/01/2020", "2020-01-01"]))
    assert ok.times is not None and ok.times.tolist() == [1578873600, 1580515200, 1577836800]
    days = read_frame(df.assign(timestamp=["13/01/2020", "31/01/2020", "2020-01-01"]))  # every one day first
    assert days.times is not None and days.times.tolist() == [1578873600, 1580428800, 1577836800]


@pytest.mark.parametrize("name, header, sep", [("x.tsv", "user_id\titem_id\ttimestamp", "\t"),
                                               ("x.csv", "user_id,item_id,timestamp", ","),
                                               ("x.inter", "user_id:token\titem_id:token\ttimestamp:float", "\t")])
def test_a_stray_quote_that_swallows_lines_into_one_id_is_refused(name: str, header: str, sep: str,
                                                                  tmp_path: Path) -> None:
    """An id starting with a quote ('"abc', a TSV written without CSV's quoting) opened a quoted value that the next
    quote closed, lines later: the rows between became part of one item id and were lost without a word (four rows
    read as two interactions). Now one line names the row; a quoted id holding a doubled quote still reads."""
    rows = [("u1", '"abc', "1"), ("u1", "def", "2"), ("u2", 'x"y', "3"), ("u2", "q", "4")]
    path = write(tmp_path / name, "\n".join([header, *(sep.join(r) for r in rows)]) + "\n")
    with pytest.raises(ResdomError, match=r"x\.(tsv|csv|inter):2: the 'item_id' value 'abc.*' spans several lines: "
                                          r"a quote \(\"\) at the start of a field"):
        read_interactions([path])
    rows[0] = ("u1", '"ab""c"', "1")
    rows[2] = ("u2", "xy", "3")
    path.write_text("\n".join([header, *(sep.join(r) for r in rows)]) + "\n")
    assert read_interactions([path]).items.tolist() == ['ab"c', "def", "xy", "q"]


@pytest.mark.parametrize("zone", ["UTC+2", "GMT+2", "UTC-05:00", "GMT +3"])
def test_a_zone_written_as_an_offset_from_utc_or_gmt_is_refused(zone: str, tmp_path: Path) -> None:
    """pandas reads '10:00 UTC+2' with the POSIX sign, as 12:00 UTC, where its writer means 08:00 UTC (ISO 8601's
    +02:00): a column of such times was read four hours off without a word. Now one line naming the row."""
    path = write(tmp_path / "x.csv", f"user_id,item_id,timestamp\nu,a,2020-01-01 10:00:00 {zone}\n"
                                     f"u,b,2020-01-01 11:00:00 {zone}\n")
    with pytest.raises(ResdomError, match=r"x\.csv:2: timestamp '2020-01-01 10:00:00 .*' in column 'timestamp' gives "
                                          r"its zone as an offset from UTC or GMT"):
        read_interactions([path])
    path.write_text("user_id,item_id,timestamp\nu,a,2020-01-01 10:00:00+02:00\nu,b,2020-01-01 10:00:00 UTC\n")
    assert read_interactions([path]).times.tolist() == [1577865600, 1577872800]


@pytest.mark.parametrize("value, what", [("now", "names the moment it is read"),
                                         ("10:00", "is a time of day without its date"),
                                         ("10:00 PM", "is a time of day without its date"),
                                         ("5 May", "has no year"), ("March", "has no year")])
def test_a_value_that_names_no_whole_date_is_refused(value: str, what: str, tmp_path: Path) -> None:
    """pandas reads 'now' as the moment it runs, '10:00' as today at ten and '5 May' in the year 1: times made up
    without a word (a user's '10:00' after their 2020 interactions). Now one line naming the row."""
    path = write(tmp_path / "x.csv", f"user_id,item_id,timestamp\nu,a,2020-01-01\nu,b,{value}\n")
    with pytest.raises(ResdomError, match=f"x\\.csv:3: timestamp '{value}' in column 'timestamp' {what}, not a date"):
        read_interactions([path])
    path.write_text("user_id,item_id,timestamp\nu,a,Jan 2020\nu,b,0001-01-01\nu,c,1st of May 2020\n")
    assert read_interactions([path]).times.tolist() == [1577836800, -62135596800, 1588291200]


def test_movielens_plain_and_gzip(tmp_path: Path) -> None:
    text = "1::10::5::100\n1::20::3::200\n2::20::1::150\n1::30::4::300\n2::30::4::150\n3::30::2::50\n3::10::2::60\n"
    plain = write(tmp_path / "ratings.dat", text)
    gz = tmp_path / "ratings.dat.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    for p in (plain, gz):
        assert detect_format([p]) == "movielens"
        assert raw_lists([p]) == (EXPECTED_ITEMS, EXPECTED_TIMES)


BOM_CASES = {  # one file of each text format holding EXPECTED_ITEMS / EXPECTED_TIMES
    "user-lines": ("seq.txt", "1 10 20 30\n2 20 30\n3 30 10\n"),
    "interactions": ("inter.txt", "1 10 100\n1 20 200\n2 20 150\n1 30 300\n2 30 150\n3 30 50\n3 10 60\n"),
    "recbole": ("x.inter", "user_id:token\titem_id:token\ttimestamp:float\n1\t10\t100\n1\t20\t200\n2\t20\t150\n"
                           "1\t30\t300\n2\t30\t150\n3\t30\t50\n3\t10\t60\n"),
    "csv": ("x.csv", "user_id,item_id,timestamp\n1,10,100\n1,20,200\n2,20,150\n1,30,300\n2,30,150\n3,30,50\n3,10,60\n"),
    "movielens": ("ratings.dat.gz", "1::10::5::100\n1::20::3::200\n2::20::1::150\n1::30::4::300\n2::30::4::150\n"
                                    "3::30::2::50\n3::10::2::60\n"),
}


@pytest.mark.parametrize("fmt", list(BOM_CASES))
def test_a_byte_order_mark_is_not_part_of_the_first_id(tmp_path: Path, fmt: str) -> None:
    """A file saved with a UTF-8 byte-order mark (Excel, Notepad) reads exactly as the same file without one.
    Before: the first line's user became '\\ufeff1', another user than '1' (an extra user, ids no longer integers)
    in the whitespace formats, and a RecBole header's first field was not found."""
    name, text = BOM_CASES[fmt]
    reads = []
    for folder, prefix in (("plain", b""), ("bom", b"\xef\xbb\xbf")):
        (tmp_path / folder).mkdir()
        data = prefix + text.encode()
        p = tmp_path / folder / name
        p.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        assert detect_format([p]) == fmt
        raw = read_interactions([p], None)
        reads.append((raw.users.dtype, raw.users.tolist(), raw.items.tolist(),
                      None if raw.times is None else raw.times.tolist()))
    assert reads[1] == reads[0] and reads[0][0] == np.int64
    expected_times = None if fmt == "user-lines" else EXPECTED_TIMES
    assert raw_lists([tmp_path / "bom" / name]) == (EXPECTED_ITEMS, expected_times)


def test_an_archive_or_binary_file_read_as_text_says_what_it_is(tmp_path: Path) -> None:
    """A zip (or .xlsx), a gzip file without .gz, a Parquet file named .csv: read as text they gave
    "qz.zip:1: not UTF-8 text" or, for Parquet as CSV, "p.csv:3: expected 2 columns, found 35"; now one line saying
    what the file is and what to do, whatever the reader. A real .gz is still decompressed."""
    import io
    import zipfile

    text = "user_id,item_id,timestamp\na,x,1\na,y,2\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.csv", text)
    parquet = io.BytesIO()
    pd.DataFrame({"user_id": ["a"], "item_id": ["x"], "timestamp": [1]}).to_parquet(parquet)
    cases = {"data.zip": (buf.getvalue(), "a zip archive or an .xlsx workbook"),
             "data.csv": (gzip.compress(text.encode()), "gzip-compressed: name it *.gz"),
             "data.txt": (parquet.getvalue(), "a Parquet file: name it *.parquet or give the format parquet")}
    for name, (data, what) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        for fmt in (None, "csv", "tsv", "interactions", "user-lines"):
            with pytest.raises(ResdomError) as e:
                read_interactions([p], fmt)
            assert str(e.value).startswith(f"{p}: not UTF-8 text ({what}"), (name, fmt, str(e.value))
        p.unlink()
    gz = tmp_path / "data.csv.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    assert read_interactions([gz], None).items.tolist() == ["x", "y"]


def test_paired_files_with_byte_order_marks(tmp_path: Path) -> None:
    items = tmp_path / "X_item.txt"
    times = tmp_path / "X_time.txt"
    items.write_bytes(b"\xef\xbb\xbf1 10 20 30\n2 20 30\n3 30 10\n")
    times.write_bytes(b"\xef\xbb\xbf1 100 200 300\n2 150 150\n3 50 60\n")
    assert raw_lists([items, times]) == (EXPECTED_ITEMS, EXPECTED_TIMES)


def test_all_formats_agree_after_preprocessing(tmp_path: Path) -> None:
    items = write(tmp_path / "a_item.txt", "1 10 20 30\n2 20 30\n3 30 10\n")
    times = write(tmp_path / "a_time.txt", "1 100 200 300\n2 150 150\n3 50 60\n")
    ml = write(tmp_path / "ratings.dat", "3::30::2::50\n1::20::3::200\n2::20::1::150\n1::30::4::300\n"
               "2::30::4::150\n1::10::5::100\n3::10::2::60\n")
    a = load_interactions(f"{items},{times}", k_core=0)
    b = load_interactions(str(ml), k_core=0)
    assert a.to_lists() == b.to_lists() == [[1, 2, 3], [2, 3], [3, 1]]
    assert a.times.tolist() == b.times.tolist()


def test_explicit_format_overrides_detection(tmp_path: Path) -> None:
    # two tokens a line and unique users: ambiguous, so detection refuses; --format decides
    p = write(tmp_path / "amb.txt", "1 10\n2 20\n3 30\n")
    with pytest.raises(ResdomError, match="fmt='user-lines' or fmt='interactions'"):
        detect_format([p])
    assert raw_lists([p], "user-lines") == ([[10], [20], [30]], None)
    assert raw_lists([p], "interactions") == ([[10], [20], [30]], None)


# ---------------------------------------------------------------------------------------------------------------
# malformed inputs: message names file and line; the CLI exits 2 with one line and no traceback

# ids are labels: 'x7', 'u2', '3.5' and 'abc' are ids like any other (tests/test_data_own.py)
MALFORMED = {
    "wrong column count, interactions": ("inter.txt", "1 10 100\n1 20 200\n1 30 300 9\n", "interactions",
                                         r"inter\.txt:3: expected 3 columns .* found 4"),
    "wrong column count, first line": ("inter.txt", "1 10 100 7 7\n", "interactions",
                                       r"inter\.txt:1: expected 2 or 3 columns"),
    "wrong column count, movielens": ("ratings.dat", "1::10::5::100\n1::20::5\n", None,
                                      r"ratings\.dat:2: expected 4 columns .* found 3"),
    "wrong column count, csv": ("x.csv", "user_id,item_id,timestamp\n1,2,3\n1,3,4,5\n", None,
                                r"x\.csv:3: expected 3 columns, found 4"),
    # the first data line one field longer than the header made pandas read the first column as an unnamed index:
    # every column shifted by one (items read as users), without a word
    "extra field on the first line, csv": ("x.csv", "user_id,item_id,timestamp\nu1,x,1,7\nu1,y,2,8\nu2,x,3,9\n", None,
                                           r"x\.csv:2: expected 3 columns, found 4"),
    "extra field on the first line only, csv": ("x.csv", "user_id,item_id,timestamp\nu1,x,1,7\nu1,y,2\n", None,
                                                r"x\.csv:2: expected 3 columns, found 4"),
    "extra field, gzipped tsv": ("x.tsv.gz", "user_id\titem_id\ttimestamp\nu1\tx\t1\nu1\ty\t2\t8\n", None,
                                 r"x\.tsv\.gz:3: expected 3 columns, found 4"),
    # split at its spaces, JSON lines were read as an interactions file of ids like '{"user_id":"a",'
    "JSON lines": ("x.json", '{"user_id":"a", "item_id":"x"}\n{"user_id":"a", "item_id":"y"}\n', None,
                   r"x\.json: JSON \(an object or list a line\), which resdom does not read .*pandas\.read_json"),
    "JSON lines, no spaces": ("x.jsonl", '{"user_id":"a","item_id":"x","timestamp":1}\n', None,
                              r"x\.jsonl: JSON \(an object or list a line\)"),
    "unclosed quote, csv": ("x.csv", "user_id,item_id,timestamp\n1,2,3\n\n1,\"3,4\n2,3,4\n", None,
                            r"x\.csv:4: a quote \(\"\) opened on this line is never closed"),
    "other separator, csv": ("x.csv", "user_id;item_id;timestamp\n1;2;3\n", None,
                             r"x\.csv: missing column 'user_id' .*separated by ';'\? fmt='csv' reads commas"),
    "tabs in a .csv": ("x.csv", "user_id\titem_id\ttimestamp\n1\t2\t3\n", None,
                       r"x\.csv: missing column 'user_id' .*separated by '\\t'\? .*fmt='tsv' tabs"),
    "missing value, csv": ("x.csv", "user_id,item_id,timestamp\n1,2,3\n1,,4\n", None,
                           r"x\.csv:3: missing value in column 'item_id'"),
    "bad timestamp, csv": ("x.csv", "user_id,item_id,timestamp\n1,2,3\n1,3,soon\n", None,
                           r"x\.csv:3: timestamp 'soon' in column 'timestamp' is not a number"),
    "bad timestamp, interactions": ("inter.txt", "1 10 100\n1 20 later\n", "interactions",
                                    r"inter\.txt:2: timestamp 'later' is not a number"),
    "missing column, csv": ("x.csv", "user,item_id\n1,2\n", None,
                            r"x\.csv: missing column 'user_id' \(columns: 'user', 'item_id'\)"),
    # a name with other case or spaces is named, quoted (a space around a name is then visible)
    "column with spaces, csv": ("x.csv", "user_id, item_id,timestamp\n1,2,3\n", None,
                                r"x\.csv: missing column 'item_id' \(columns: 'user_id', ' item_id', 'timestamp'\); "
                                r"name it with item_col=\.\.\. \(' item_id' is named with other case or spaces: "
                                r"item_col=' item_id' reads it\)"),
    "column in capitals, csv": ("x.csv", "User_ID,item_id,timestamp\n1,2,3\n", None,
                                r"user_col='User_ID' reads it"),
    "missing column, recbole": ("x.inter", "user_id:token\titem:token\n1\t2\n", None,
                                r"x\.inter: missing column 'item_id'"),
    "bad recbole header": ("x.inter", "user_id\titem_id:token\n1\t2\n", None, r"x\.inter:1: header field 1 'user_id'"),
    "empty file": ("seq.txt", "", "user-lines", r"seq\.txt: file is empty"),
    "blank file": ("seq.txt", "\n\n  \n", None, r"seq\.txt: file is empty"),
    "empty csv": ("x.csv", "", None, r"x\.csv: file is empty"),
    "header-only csv": ("x.csv", "user_id,item_id,timestamp\n", None, r"x\.csv: no rows after the header"),
    "no timestamp column, csv": ("x.csv", "user_id,item_id\n1,2\n", None,
                                 r"x\.csv: missing timestamp column 'timestamp' \(columns: 'user_id', 'item_id'\).*"
                                 r"time_col=None"),
    "user on two lines": ("seq.txt", "1 10 20 30\n2 20 30 40\n1 40 50\n", "user-lines",
                          r"seq\.txt:3: user 1 already has a line \(line 1\)"),
    "ambiguous format": ("amb.txt", "1 10\n2 20\n", None, r"amb\.txt: cannot tell"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_single_file(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    name, text, fmt, pattern = MALFORMED[case]
    p = write(tmp_path / name, text)
    with pytest.raises(ResdomError, match=pattern):
        load_interactions(str(p), fmt=fmt)
    args = ["data", "stats", str(p)] + (["--format", fmt] if fmt else [])
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert name in lines[0] and "Traceback" not in err


PAIRED_MALFORMED = {
    "fewer time lines": ("1 10 20\n2 20 30\n", "1 1 2\n", r"t_time\.txt: 1 non-blank lines, but .*t_item\.txt has 2"),
    "other user on a line": ("1 10 20\n2 20 30\n", "1 1 2\n3 1 2\n",
                             r"t_time\.txt:2: user 3, but .*t_item\.txt:2 has user 2"),
    "fewer times than items": ("1 10 20\n2 20 30 40\n", "1 1 2\n2 1 2\n",
                               r"t_time\.txt:2: 2 times for 3 items on .*t_item\.txt:2"),
    "decreasing times": ("1 10 20 30\n2 20 30\n", "1 5 6 7\n2 9 8\n", r"t_time\.txt:2: times decrease \(9 then 8"),
    "non-integer time": ("1 10 20\n", "1 5 x\n", r"t_time\.txt:1: timestamp 'x' is not a number \(column 3\)"),
    "empty time file": ("1 10 20\n", "", r"t_time\.txt: file is empty"),
}


@pytest.mark.parametrize("case", list(PAIRED_MALFORMED))
def test_malformed_paired(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    items_text, times_text, pattern = PAIRED_MALFORMED[case]
    items = write(tmp_path / "t_item.txt", items_text)
    times = write(tmp_path / "t_time.txt", times_text)
    with pytest.raises(ResdomError, match=pattern):
        load_interactions(f"{items},{times}")
    code, _, err = run_cli(["data", "stats", f"{items},{times}"], monkeypatch, capsys)
    assert code == 2 and "t_time.txt" in err and len(err.strip().splitlines()) == 1


def test_missing_named_column_parquet(tmp_path: Path) -> None:
    p = tmp_path / "x.parquet"
    pd.DataFrame({"user_id": [1], "item_id": [2]}).to_parquet(p)
    with pytest.raises(ResdomError, match=r"x\.parquet: missing timestamp column 'ts'"):
        load_interactions(str(p), time_col="ts")
    # the default timestamp column absent: an error naming file and column, unless no_time (then recorded)
    with pytest.raises(ResdomError, match=r"x\.parquet: missing timestamp column 'timestamp'.*time_col=None"):
        read_interactions([p])
    raw = read_interactions([p], no_time=True)
    assert raw.times is None and "no timestamps (no_time)" in raw.notes[0]


def test_other_user_mistakes(tmp_path: Path, monkeypatch, capsys) -> None:
    p = write(tmp_path / "seq.txt", "1 10 20 30\n")
    table = write(tmp_path / "x.csv", "user_id,item_id,timestamp\n1,10,100\n")
    cases = [
        (["data", "stats", str(tmp_path / "nope.txt")], "unknown source"),
        (["data", "stats", str(p), "--format", "weird"], "--format: unknown format 'weird'; choose one of: "
         "user-lines, paired, interactions, recbole, csv, tsv, parquet, movielens, movielens-zip, diginetica, "),
        (["data", "stats", ""], "an empty argument (an unset shell variable?)"),  # Path("") is the working folder
        (["data", "stats", f"{p},"], f"source '{p},': an empty path"),
        (["data", "stats", f"{table},{table}"], f"{table}, {table}: two paths are read as a paired file pair "
         "(items,times: one user a line, whitespace-separated), but x.csv is a table; give one table file"),
        (["data", "stats", "synthetic:p_lsat=0.2"], "unknown synthetic knob 'p_lsat'"),
        (["data", "stats", "synthetic:p_last=0.9,p_user=0.9"], "> 1"),
        (["data", "split", "beauty", "--protocol", "xyz", "--out", str(tmp_path / "o")], "unknown protocol"),
        (["data", "split", str(p), "--protocol", "gts", "--out", str(tmp_path / "o"), "--k-core", "0"],
         "needs timestamps"),
    ]
    for args, needle in cases:
        code, _, err = run_cli(args, monkeypatch, capsys)
        assert code == 2 and needle in err, (args, err)
    with pytest.raises(ResdomError, match="unknown data option 'kcore'"):
        load_interactions(str(p), kcore=3)
    for k in range(12):  # a folder of 14 files: the message names eight and counts the rest
        write(tmp_path / f"f{k:02d}.txt", "1 2\n")
    with pytest.raises(ResdomError, match=r"cannot tell which files to read \(found f00\.txt, f01\.txt, .*, f07\.txt "
                                          r"and 6 more\)"):
        split_source_paths(tmp_path)


@pytest.mark.slow
def test_subprocess_exit_status_and_no_traceback(tmp_path: Path) -> None:
    p = write(tmp_path / "inter.txt", "1 10 100\n1 20 oops\n")
    r = subprocess.run([sys.executable, "-m", "resdom", "data", "stats", str(p), "--format", "interactions"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: {p}:2: timestamp 'oops' is not a number (column 3)"


# ---------------------------------------------------------------------------------------------------------------
# the vectorised tokenizer agrees with the per-line reference


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="12x \t\r\n\x0b\x1f\xa0\u2028", max_size=60))
@example(text="1\x1f1\n\x1f")  # str.split splits at U+001F: same token total, other per-line counts
@example(text="1\xa01\n\xa0")
def test_fast_tokenizer_matches_per_line_reference(text: str) -> None:
    from resdom.data.readers import _tokenize_fast, _tokenize_lines

    ref = _tokenize_lines(Path("f"), text)
    fast = _tokenize_fast(Path("f"), text)
    if fast is None:  # exotic whitespace: the reader falls back to the reference
        return
    assert fast.tokens == ref.tokens
    assert fast.counts.tolist() == ref.counts.tolist() and fast.line_no.tolist() == ref.line_no.tolist()


@pytest.mark.parametrize("fmt, text", [
    ("user-lines", "u1 Caf\u00e9\u00a0Noir tea\nu2 tea\u3000cup Caf\u00e9\u00a0Noir\n"),
    ("interactions", "u1 Caf\u00e9\u00a0Noir 1\nu1 tea 2\nu2 tea\u3000cup 3\nu2 Caf\u00e9\u00a0Noir 4\n"),
])
def test_a_unicode_space_inside_an_id_is_part_of_the_id(tmp_path: Path, fmt: str, text: str) -> None:
    """Whitespace formats separate fields by ASCII spaces and tabs: str.split cut 'Café\u00a0Noir' (a no-break space,
    copied from a web page) into two items 'Café' and 'Noir' without a word. Now one id, as read, with a note."""
    p = write(tmp_path / "seq.txt", text)
    raw = read_interactions([p], fmt)
    assert set(raw.items.tolist()) == {"Caf\u00e9\u00a0Noir", "tea", "tea\u3000cup"}
    assert raw.notes[-1] == ("2 ids hold a Unicode space (e.g. 'Café\\xa0Noir'), kept as part of the id: fields are "
                             "separated by ASCII spaces and tabs")
    plain = write(tmp_path / "plain.txt", "u1 a b\nu2 b c\n")
    assert read_interactions([plain], "user-lines").notes == []


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="1x \t\n\xa0\u2003\u3000", max_size=60))
def test_the_reference_tokenizer_splits_at_ascii_whitespace_only(text: str) -> None:
    from resdom.data.readers import _tokenize_lines

    tok = _tokenize_lines(Path("f"), text)
    assert tok.tokens == [t for line in text.splitlines() for t in re.split(r"[ \t]+", line) if t]


@pytest.mark.parametrize("inside", ["\u2028", "\x85", "\x0b", "\x0c", "\x1c", "\x1e"])
def test_a_line_is_broken_only_where_python_reads_a_line_break(inside: str, tmp_path: Path) -> None:
    """Lines were cut by str.splitlines, which also breaks at U+2028, U+0085, a vertical tab, a form feed or
    U+001C-U+001E: 'u1 a b<U+2028>c d' became user u1 (a, b) and a new user c (d) without a word. Lines now end
    where Python's file reading (S3-Rec's and SASRec's readers) ends them: at \\n, \\r\\n or \\r; within a line the
    ASCII controls separate fields, as str.split does, and a Unicode space is part of an id."""
    from resdom.cli.recommend_cmd import read_ids

    p = write(tmp_path / "seq.txt", f"u1 a b{inside}c d\r\nu2 a c\n")
    raw = read_interactions([p], "user-lines")
    assert raw.users.tolist()[:3] == ["u1"] * 3 and raw.users.tolist()[-2:] == ["u2"] * 2
    kept = {"\u2028": ["a", f"b{inside}c", "d"], "\x85": ["a", f"b{inside}c", "d"]}.get(inside, ["a", "b", "c", "d"])
    assert raw.items.tolist() == [*kept, "a", "c"]
    ids = write(tmp_path / "users.txt", f"u{inside}1\nu2\n")
    assert read_ids(ids, "--users", ("user_id", "user")) == [f"u{inside}1", "u2"]


def test_fast_tokenizer_used_on_plain_and_crlf_text() -> None:
    from resdom.data.readers import _tokenize_fast

    tok = _tokenize_fast(Path("f"), "1 2 3\r\n\r\n4  5\r\n")
    assert tok is not None and tok.counts.tolist() == [3, 2] and tok.line_no.tolist() == [1, 3]


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="12x \t\n", max_size=80))
def test_fast_tokenizer_always_applies_to_plain_text(text: str) -> None:
    from resdom.data.readers import _tokenize_fast, _tokenize_lines

    fast, ref = _tokenize_fast(Path("f"), text), _tokenize_lines(Path("f"), text)
    assert fast is not None and fast.tokens == ref.tokens and fast.line_no.tolist() == ref.line_no.tolist()


@pytest.mark.parametrize("column", ["user_id", "item_id", "timestamp"])
@pytest.mark.parametrize("cell", [np.array([1, 2]), [1, 2], {"a": 1}], ids=["array", "list", "dict"])
def test_a_cell_holding_several_values_is_refused_naming_its_row_and_column(column: str, cell: object) -> None:
    df = pd.DataFrame({"user_id": ["u1", "u1", "u2"], "item_id": ["a", "b", "a"], "timestamp": [1, 2, 3]},
                      dtype=object)
    df.at[1, column] = cell
    with pytest.raises(ResdomError, match=rf"row 2\b.*column '{column}' holds a {type(cell).__name__} \("):
        read_frame(df)


@pytest.mark.parametrize("column", ["user_id", "item_id"])
def test_a_missing_value_in_a_string_column_is_named_not_a_traceback(column: str) -> None:
    df = pd.DataFrame({"user_id": ["u1", "u1", "u2"], "item_id": ["a", "b", "a"], "timestamp": [1, 2, 3]})
    df[column] = df[column].astype("string")
    df.loc[2, column] = pd.NA  # pd.NA in the column's values compares as NA, not as False
    with pytest.raises(ResdomError, match=rf"missing value in column '{column}'"):
        read_frame(df)


@pytest.mark.parametrize("fmt, name, text", [
    ("user-lines", "u.txt", "u1 a b c\nu2 b c\n"),
    ("interactions", "i.txt", "u1 a 3\nu1 b 1\nu2 a 2\n"),
    ("movielens", "ratings.dat", "1::10::5::978300760\n1::11::3::978300761\n"),
])
def test_column_options_on_a_format_without_named_columns_are_refused(tmp_path: Path, capsys, fmt, name,
                                                                       text) -> None:
    """--time-col / --user-col / --item-col on a file read by position were ignored without a word (a user-lines
    file with --time-col t still had no timestamps, and nothing said the option went unused)."""
    path = write(tmp_path / name, text)
    with pytest.raises(ResdomError, match=rf"^{re.escape(str(path))}: format '{fmt}' has no named columns \(.*\), "
                                          r"so time_col='t' cannot apply \(a table with a header line: fmt='csv' or "
                                          r"tsv\)$"):
        read_interactions([path], fmt, time_col="t")
    assert invoke("data", "stats", str(path), "--format", fmt, "--user-col", "u", "--item-col", "i") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"format '{fmt}' has no named columns" in err, err
    assert "so --user-col u, --item-col i cannot apply (a table with a header line: --format csv or tsv)" in err
    assert len(read_interactions([path], fmt)) > 0  # without them: read as before


def test_a_data_dir_for_a_source_that_is_no_registered_data_set_is_refused(tmp_path: Path) -> None:
    """``data_dir`` finds registered data sets' files; for a file, generated data or a DataFrame it was ignored
    without a word."""
    path = tmp_path / "d.csv"
    path.write_text("user_id,item_id\n1,2\n1,3\n")
    for source in (path, "synthetic:n_users=40,n_items=25", pd.DataFrame({"user_id": [1], "item_id": [2]})):
        with pytest.raises(ResdomError, match=r"^data_dir='/x': the folder of registered data sets; .* not one"):
            prepare_split(source, data_dir="/x")
    with pytest.raises(ResdomError, match=r"^unknown source 'BEAUTY' \(did you mean beauty\?\)"):  # a mistyped name
        prepare_split("BEAUTY", data_dir="/x")
