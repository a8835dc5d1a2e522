"""Native readers of the paper's data sets (data/native.py), each on a small file in the exact native layout."""

from __future__ import annotations

import ast
import gzip
import json
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resdom.data.native import (
    parse_flat_dict,
    read_beeradvocate,
    read_diginetica,
    read_movielens_zip,
    read_native,
    read_steam,
    read_tts_csv,
    read_zvuk,
)
from resdom.errors import ResdomError


def day(s: str) -> int:
    """Unix seconds of a date's UTC midnight."""
    return int(datetime.strptime(s, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp())


def rows(raw) -> list[tuple[str, str, int]]:
    return [(str(u), str(i), int(t)) for u, i, t in zip(raw.users, raw.items, raw.times)]


# ------------------------------------------------------------------------------------------------ Diginetica

DIGINETICA = (
    "sessionId;userId;itemId;timeframe;eventdate\n"
    "1;NA;81766;526309;2016-05-09\n"
    "1;NA;31331;1031018;2016-05-09\n"
    "1;NA;32118;243569;2016-05-09\n"
    "2;;12345;1500;2016-05-10\n"   # same second as the next row, later millisecond: goes after it
    "2;;999;1200;2016-05-10\n"
    "3;7;0042;0;2016-05-10\n"       # ids stay as written ("0042")
)


def test_diginetica_session_item_and_time(tmp_path: Path) -> None:
    path = tmp_path / "train-item-views.csv"
    path.write_text(DIGINETICA)
    raw = read_diginetica(path)
    d9, d10 = day("2016-05-09"), day("2016-05-10")
    # rows stably sorted by the exact millisecond (the second of session 2 before its first), times floored
    assert rows(raw) == [("1", "32118", d9 + 243), ("1", "81766", d9 + 526), ("1", "31331", d9 + 1031),
                         ("3", "0042", d10), ("2", "999", d10 + 1), ("2", "12345", d10 + 1)]
    assert raw.users.dtype == object and raw.fmt == "diginetica" and raw.files == [path]
    assert any("eventdate" in n for n in raw.notes)


@pytest.mark.parametrize("text, message", [
    ("session;user;item;tf;date\n1;;2;3;2016-01-01\n", r":1: header 'session;user;item;tf;date', expected"),
    (DIGINETICA.replace("2016-05-10\n3", "2016-13-10\n3"), r":6: eventdate '2016-13-10' is not a date"),
    (DIGINETICA.replace(";1500;", ";1.5;"), r":5: timeframe '1.5' is not a whole number"),
    (DIGINETICA.replace("3;7;0042", "3;7;"), r":7: missing value in column 'itemId'"),
    ("sessionId;userId;itemId;timeframe;eventdate\n", "no rows after the header"),
    # the header as written, not as pandas renames a repeated name ('itemId.1')
    ("sessionId;userId;itemId;timeframe;itemId\n1;;2;3;4\n", r":1: header 'sessionId;userId;itemId;timeframe;itemId',"),
    # a first line one field longer than the header was read with sessionId as pandas' index: every column shifted
    (DIGINETICA.replace("2016-05-09\n", "2016-05-09;x\n", 1), r"views\.csv:2: expected 5 columns, found 6"),
])
def test_diginetica_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "views.csv"
    path.write_text(text)
    with pytest.raises(ResdomError, match=message):
        read_diginetica(path)


# ------------------------------------------------------------------------------------------------ Steam

def steam_line(**fields) -> str:
    return repr(fields)  # the file is Python dict literals, one a line


STEAM_LINES = [
    steam_line(username="Chaos Syren", hours=0.1, products=41, product_id="725280", page_order=0,
               date="2017-12-17", text="This would not be acceptable", early_access=False, page=1),
    # a name with a quote (repr uses double quotes), a text quoting a fake field, an extra user_id
    steam_line(username="O'Neil", hours=12.5, product_id="328100", date="2017-12-27",
               text="see {'username': 'fake', 'product_id': '1', 'date': '1999-01-01'} lol", user_id="765611"),
    steam_line(hours=1.0, product_id="35140", date="2018-01-04", text="no user name"),  # skipped, counted
    steam_line(username="Chaos Syren", product_id="631920", date="2017-12-17", text="tab\there",
               found_funny=3, compensation="Product received for free"),
]


def test_steam_fields_from_python_literals(tmp_path: Path) -> None:
    path = tmp_path / "steam_reviews.json.gz"
    path.write_bytes(gzip.compress(("\n".join(STEAM_LINES) + "\n").encode()))
    raw = read_steam(path)
    assert rows(raw) == [("Chaos Syren", "725280", day("2017-12-17")), ("O'Neil", "328100", day("2017-12-27")),
                         ("Chaos Syren", "631920", day("2017-12-17"))]
    assert "1 review without 'username' skipped" in raw.notes
    plain = tmp_path / "steam_reviews.json"
    plain.write_text("\n".join(STEAM_LINES))
    assert rows(read_steam(plain)) == rows(raw)


def test_steam_errors(tmp_path: Path) -> None:
    path = tmp_path / "steam.json"
    path.write_text(STEAM_LINES[0] + "\n{'username': 'x', 'product_id': '1', 'date': \n")
    with pytest.raises(ResdomError, match=r"steam\.json:2: not a dict literal"):
        read_steam(path)
    path.write_text(STEAM_LINES[0] + "\n" + steam_line(username="x", product_id="1", date="2017-02-30") + "\n")
    with pytest.raises(ResdomError, match=r"steam\.json:2: date '2017-02-30' is not a date"):
        read_steam(path)


flat_values = st.one_of(st.text(max_size=12), st.integers(-10**6, 10**6), st.booleans(), st.none(),
                        st.floats(allow_nan=False, allow_infinity=False, width=32))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), flat_values, max_size=6))
def test_parse_flat_dict_matches_literal_eval(d: dict) -> None:
    """The fast pair scanner agrees with ast.literal_eval (and json) on every flat dict, keys and text exactly."""
    for line in (repr(d), json.dumps(d)):
        got = parse_flat_dict(line)
        want = ast.literal_eval(line) if line == repr(d) else json.loads(line)
        assert got is not None and set(got) == set(want)
        for k, v in want.items():
            if isinstance(v, str):
                assert got[k] == v
            else:
                assert ast.literal_eval(got[k]) == v if line == repr(d) else json.loads(got[k]) == v


def test_parse_flat_dict_refuses_nested_values() -> None:
    assert parse_flat_dict("{'a': [1, 2], 'b': 'x'}") is None
    assert parse_flat_dict("{'a': {'b': 1}}") is None
    assert parse_flat_dict("not a dict") is None
    assert parse_flat_dict("{}") == {}


# ------------------------------------------------------------------------------------------------ BeerAdvocate

BEER_SNAP = """beer/name: Sausa Weizen
beer/beerId: 47986
beer/brewerId: 10325
beer/ABV: 5.00
beer/style: Hefeweizen
review/appearance: 2.5
review/aroma: 2
review/palate: 1.5
review/taste: 1.5
review/overall: 1.5
review/time: 1234817823
review/profileName: stcules
review/text: A lot of foam. But a lot.

beer/name: Red Moon
beer/beerId: 48213
beer/brewerId: 10325
beer/ABV: 6.20
beer/style: English Strong Ale
review/appearance: 3
review/aroma: 2.5
review/palate: 3
review/taste: 3
review/overall: 3
review/time: 1235915097
review/profileName:
review/text: Dark red color, light beige foam, average.

beer/name: Black Horse Black Beer
beer/beerId: 47966
beer/brewerId: 10325
beer/ABV: 6.50
beer/style: German Pilsener
review/appearance: 3
review/aroma: 2.5
review/palate: 3
review/taste: 3
review/overall: 3
review/time: 1235916604
review/profileName: stcules
review/text: Almost totally black.
"""


def beer_dicts() -> list[dict[str, str]]:
    out = []
    for block in BEER_SNAP.strip().split("\n\n"):
        out.append({k: v.strip() for k, _, v in (line.partition(":") for line in block.splitlines())})
    return out


@pytest.mark.parametrize("layout", ["snap", "python", "json"])
def test_beeradvocate_layouts(tmp_path: Path, layout: str) -> None:
    if layout == "snap":
        text = BEER_SNAP
    else:
        dump = repr if layout == "python" else json.dumps
        text = "\n".join(dump(d) for d in beer_dicts()) + "\n"
    path = tmp_path / ("beeradvocate.txt.gz" if layout == "snap" else "beeradvocate.json.gz")
    path.write_bytes(gzip.compress(text.encode()))
    raw = read_beeradvocate(path)
    assert rows(raw) == [("stcules", "47986", 1234817823), ("stcules", "47966", 1235916604)]
    assert "1 review without 'review/profileName' skipped" in raw.notes


def test_beeradvocate_errors(tmp_path: Path) -> None:
    path = tmp_path / "beer.txt"
    path.write_text(BEER_SNAP.replace("review/time: 1235916604", "review/time: soon"))
    with pytest.raises(ResdomError, match=r"beer\.txt:29: review/time 'soon' is not whole Unix seconds"):
        read_beeradvocate(path)
    path.write_text("just some text\n")
    with pytest.raises(ResdomError, match=r"beer\.txt:1: expected 'key: value'"):
        read_beeradvocate(path)


# ------------------------------------------------------------------------------------------------ Zvuk (Parquet)

def test_zvuk_parquet(tmp_path: Path) -> None:
    t0 = pd.Timestamp("2023-03-01 10:00:00")
    df = pd.DataFrame({
        "user_id": np.array([5, 5, 9, 5], dtype=np.int64),
        "session_id": [1, 1, 2, 1],
        "datetime": [t0 + pd.Timedelta(seconds=3.7), t0 + pd.Timedelta(seconds=3.2), t0, t0 + pd.Timedelta(days=1)],
        "track_id": np.array([101, 102, 7, 101], dtype=np.int64),
        "play_duration": [30, 40, 50, 60],
    })
    path = tmp_path / "zvuk-interactions.parquet"
    df.to_parquet(path)
    raw = read_zvuk(path)
    s = int(t0.value // 10**9)
    # the sub-second order (3.2 s before 3.7 s) is kept, times floored; integer ids stay int64
    assert rows(raw) == [("9", "7", s), ("5", "102", s + 3), ("5", "101", s + 3), ("5", "101", s + 86400)]
    assert raw.users.dtype == np.int64 and raw.items.dtype == np.int64
    df.assign(datetime=df["datetime"].where(df.index != 1)).to_parquet(path)
    with pytest.raises(ResdomError, match=r"parquet: row 2: missing value in column 'datetime'"):
        read_zvuk(path)
    df.drop(columns="track_id").to_parquet(path)
    with pytest.raises(ResdomError, match="not a readable Zvuk Parquet file with columns user_id, track_id"):
        read_zvuk(path)


# ------------------------------------------------------------------------------------------------ time-to-split CSV

def test_time_to_split_csv(tmp_path: Path) -> None:
    path = tmp_path / "Diginetica.csv"
    path.write_text("sessionId,userId,itemId,timestamp\n"
                    "1,,81766,1462752526.309\n"
                    "1,,31331,1462753031.018\n"
                    "1,,32118,1462752526.2\n"  # same second, earlier: goes first
                    "02,,7,1462752000\n")
    raw = read_tts_csv(path, "sessionId", "itemId", "timestamp")
    assert rows(raw) == [("02", "7", 1462752000), ("1", "32118", 1462752526), ("1", "81766", 1462752526),
                         ("1", "31331", 1462753031)]
    with pytest.raises(ResdomError, match=r":1: missing column 'track_id'.*name it with item_col$"):
        read_tts_csv(path, "sessionId", "track_id", "timestamp")
    path.write_text("user_id,item_id,timestamp\na,b,12\nc,d,x\n")
    with pytest.raises(ResdomError, match=r"Diginetica\.csv:3: timestamp 'x' in column 'timestamp' is not a number"):
        read_tts_csv(path, "user_id", "item_id", "timestamp")
    with pytest.raises(ResdomError, match="needs the column names"):
        read_native("time-to-split-csv", [path])
    # a column read named twice: which is meant is ambiguous (pandas would read the first); one not read is fine
    path.write_text("user_id,item_id,item_id,timestamp\na,b,c,12\n")
    with pytest.raises(ResdomError, match=r"csv:1: the header names column 'item_id' 2 times \(columns 2, 3\)"):
        read_tts_csv(path, "user_id", "item_id", "timestamp")
    path.write_text("user_id,x,item_id,timestamp,x\na,1,b,12,2\n")
    assert rows(read_tts_csv(path, "user_id", "item_id", "timestamp")) == [("a", "b", 12)]


def test_time_to_split_csv_and_diginetica_dates_before_1677_keep_their_year(tmp_path: Path) -> None:
    """A date outside pandas' nanosecond range (1677-2262), held in microseconds, was read as nanoseconds and
    wrapped around without a word (1500-01-01 as 2084-07-20), in time-to-split's CSVs and Diginetica's eventdate."""
    path = tmp_path / "t.csv"
    path.write_text("user_id,item_id,timestamp\na,b,1500-01-01T00:00:01.5\na,c,3000-01-01\n")
    assert rows(read_tts_csv(path, "user_id", "item_id", "timestamp")) == [("a", "b", -14831769599),
                                                                           ("a", "c", 32503680000)]
    path = tmp_path / "train-item-views.csv"
    path.write_text(DIGINETICA.replace("2016-05-09", "1500-01-01"))
    assert rows(read_diginetica(path))[0] == ("1", "32118", day("1500-01-01") + 243)
    assert day("1500-01-01") == -14831769600


def test_time_to_split_csv_and_diginetica_refuse_a_stray_quote_that_swallows_lines(tmp_path: Path) -> None:
    """An id starting with an unbalanced quote read the lines up to the next quote as one id, their interactions
    lost without a word; refused in one line, as the table readers refuse it."""
    path = tmp_path / "t.csv"
    path.write_text('user_id,item_id,timestamp\na,"b,1\na,c,2\nd,e",3\nd,f,4\n')
    with pytest.raises(ResdomError, match=r"t\.csv:2: the 'item_id' value 'b,1\\na,c,2\\nd,e' spans several lines"):
        read_tts_csv(path, "user_id", "item_id", "timestamp")
    path = tmp_path / "train-item-views.csv"
    path.write_text(DIGINETICA.replace("1;NA;31331", '1;NA;"31331', 1).replace("2;;999", '2;;999"', 1))
    with pytest.raises(ResdomError, match=r"views\.csv:3: the 'itemId' value '31331;.*' spans several lines"):
        read_diginetica(path)


# ------------------------------------------------------------------------------------------------ ml-1m.zip

def test_movielens_zip(tmp_path: Path) -> None:
    path = tmp_path / "ml-1m.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ml-1m/README", "readme")
        z.writestr("ml-1m/ratings.dat", "1::1193::5::978300760\n1::661::3::978302109\n2::1357::5::978298709\n")
    raw = read_movielens_zip(path)
    assert rows(raw) == [("1", "1193", 978300760), ("1", "661", 978302109), ("2", "1357", 978298709)]
    assert raw.fmt == "movielens-zip" and raw.files == [path]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ml-1m/ratings.dat", "1::1193::5::978300760\n1::661::3\n")
    with pytest.raises(ResdomError, match=r"ml-1m\.zip:ml-1m/ratings\.dat:2: expected 4 columns"):
        read_movielens_zip(path)
    path.write_bytes(b"not a zip")
    with pytest.raises(ResdomError, match="not a readable zip file"):
        read_movielens_zip(path)


@pytest.mark.parametrize(("code", "why"), [(28, "no space left on device"), (27, r"a file size limit \(ulimit -f\)")])
def test_movielens_zip_unpacked_into_a_full_temporary_folder_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     code: int, why: str) -> None:
    """ml-1m.zip is unpacked into the temporary folder to be read: a full /tmp (ENOSPC) or ``ulimit -f`` (EFBIG) made
    ``resdom data stats ml-1m.zip`` say "output: no space left on device; free space and rerun (the run resumes: a
    training run continues ...)", naming no file of the user's; it names the zip, its member and the temporary
    folder now, and TMPDIR."""
    import errno
    import tempfile

    assert (errno.ENOSPC, errno.EFBIG) == (28, 27)
    path = tmp_path / "ml-1m.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ml-1m/ratings.dat", "1::1193::5::978300760\n")
    real = Path.write_bytes

    def full(self: Path, data: bytes) -> int:
        if self.name == "ratings.dat":
            raise OSError(code, "stopped")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    said = (rf"^{path}: cannot unpack ml-1m/ratings\.dat \(22 bytes\) into the temporary folder "
            rf"{tempfile.gettempdir()} \({why}\); set TMPDIR to a folder with room")
    with pytest.raises(ResdomError, match=said):
        read_movielens_zip(path)


def test_fixed_column_formats_refuse_column_options(tmp_path: Path) -> None:
    with pytest.raises(ResdomError, match="has fixed columns"):
        read_native("steam", [tmp_path / "x"], user_col="u")
