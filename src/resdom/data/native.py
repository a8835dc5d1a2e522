"""Readers of the native files of the paper's data sets that ``readers.py`` does not read (spec §1).

Formats (``--format`` names; each returns a ``RawInteractions`` like ``readers.py``):

- ``movielens-zip``: GroupLens's ``ml-1m.zip``; its ``ratings.dat`` (``user::item::rating::timestamp``) is read
  by ``readers.read_movielens``;
- ``diginetica``: the CIKM Cup 2016 ``train-item-views.csv``, ``;``-separated with the header
  ``sessionId;userId;itemId;timeframe;eventdate``; a session is a user (``userId`` is ignored, mostly empty) and
  its time is ``eventdate`` (UTC midnight) + ``timeframe`` milliseconds: what time-to-split's ``Diginetica.csv``
  holds (its published raw statistics: 1,235,380 rows, 2016-01-01 00:00:05.082 to 2016-06-01 00:19:59.894);
- ``steam``: UCSD's ``steam_reviews.json.gz`` (Steam v2), one Python dict literal a line; ``username``,
  ``product_id``, ``date`` (``YYYY-MM-DD``, UTC);
- ``beeradvocate``: BeerAdvocate reviews, either one dict literal (or JSON object) a line, or SNAP's text
  layout (``key: value`` lines, a blank line between reviews); ``review/profileName``, ``beer/beerId``,
  ``review/time`` (Unix seconds);
- ``zvuk``: the Zvuk data set's ``zvuk-interactions.parquet``; ``user_id``, ``track_id``, ``datetime``;
- ``time-to-split-csv``: time-to-split's raw CSVs (``Diginetica.csv`` ...): a header row, the user, item and
  time columns named with ``--user-col`` / ``--item-col`` / ``--time-col`` (the registry names them), times in
  Unix seconds, possibly fractional.

Ids are kept exactly as read: strings (object arrays), except integer columns of a Parquet file, kept as int64
(the same values; a string per row of Zvuk's 244M rows would not fit in memory). Times finer than a second
(Diginetica's milliseconds, fractional seconds, Parquet timestamps) are used to order the rows first (a stable
sort by the exact time), then floored to whole seconds: preprocessing's stable sort by (user, second) then keeps
the exact order, as time-to-split's stable sort by the exact time does. Rows a native file leaves without a
user (a review without a user name) are skipped and counted in ``notes``; anything unreadable is one
ResdomError naming the file and line.
"""

from __future__ import annotations

import ast
import errno
import io
import json
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from resdom.bounded import arrow_source, check_expansion, check_parquet, gunzip, open_zip, read_member, refuse_special
from resdom.checks import arg
from resdom.data.readers import (
    TIME_MAX,
    TIME_MIN,
    RawInteractions,
    check_parquet_columns,
    check_unique_header,
    damaged_parquet,
    datetime_counts,
    extra_fields,
    header_fields,
    integer_labels,
    not_text,
    parser_error,
    read_movielens,
    refuse_spanning_lines,
    time_column_values,
)
from resdom.errors import ResdomError
from resdom.io import NO_SPACE, warnings_filter
from resdom.limits import short, why_unread

NATIVE_FORMATS = ("movielens-zip", "diginetica", "steam", "beeradvocate", "zvuk", "time-to-split-csv")
DIGINETICA_HEADER = ("sessionId", "userId", "itemId", "timeframe", "eventdate")
STEAM_FIELDS = ("username", "product_id", "date")
BEER_FIELDS = ("review/profileName", "beer/beerId", "review/time")
ZVUK_COLUMNS = ("user_id", "track_id", "datetime")


def read_native(
    fmt: str, paths: list[Path], user_col: str | None = None, item_col: str | None = None,
    time_col: str | None = None,
) -> RawInteractions:
    """Read ``paths`` (one file) in the native format ``fmt`` (one of NATIVE_FORMATS)."""
    if fmt not in NATIVE_FORMATS:
        raise ResdomError(f"unknown native format {fmt!r}; choose one of: {', '.join(NATIVE_FORMATS)}")
    if len(paths) != 1:
        raise ResdomError(f"format {fmt!r} reads one file, got {len(paths)}: {', '.join(map(str, paths))}")
    path = paths[0]
    refuse_special(path)  # a device or FIFO is never opened
    if fmt == "time-to-split-csv":
        missing = [arg(name) for name, v in (("user_col", user_col), ("item_col", item_col), ("time_col", time_col))
                   if not v]
        if missing:
            raise ResdomError(f"{path}: format 'time-to-split-csv' needs the column names ({', '.join(missing)})")
        return read_tts_csv(path, str(user_col), str(item_col), str(time_col))
    if any((user_col, item_col, time_col)):
        raise ResdomError(f"{path}: format {fmt!r} has fixed columns; {arg('user_col')} / {arg('item_col')} / "
                          f"{arg('time_col')} do not apply")
    readers = {"movielens-zip": read_movielens_zip, "diginetica": read_diginetica, "steam": read_steam,
               "beeradvocate": read_beeradvocate, "zvuk": read_zvuk}
    return readers[fmt](path)


# ---------------------------------------------------------------------------------------------------------------
# shared helpers


def _ordered_by_exact_time(
    users: np.ndarray, items: np.ndarray, exact: np.ndarray, per_second: int | None, fmt: str, path: Path,
    notes: list[str], where: Callable[[int], str] | None = None,
) -> RawInteractions:
    """Rows with their times in whole seconds; where ``exact`` is finer than a second, stably sorted by it first.

    exact: (n,) int64 in units of 1 / ``per_second`` s (seconds: 1, milliseconds: 1000, nanoseconds: 10**9), or
    float64 seconds with ``per_second`` None. ``where(k)``: "file:line" of row k, for a time out of range.
    """
    if per_second is None:
        finite = np.isfinite(exact)
        if not finite.all():
            k = int(np.flatnonzero(~finite)[0])
            raise ResdomError(f"{where(k) if where else path}: timestamp {short(exact[k])} is not a finite number")
        seconds = np.floor(exact).astype(np.int64)
    else:
        seconds = np.floor_divide(exact, per_second).astype(np.int64)
    bad = np.flatnonzero((seconds < TIME_MIN) | (seconds > TIME_MAX))
    if len(bad):
        k = int(bad[0])
        raise ResdomError(f"{where(k) if where else path}: timestamp {short(exact[k])} is outside the supported range "
                          f"(Unix seconds {TIME_MIN} to {TIME_MAX})")
    if per_second == 1:  # whole seconds already: source order, as every reader
        return RawInteractions(users, items, seconds, fmt, [path], notes=notes)
    order = np.argsort(exact, kind="stable")
    notes.append("rows ordered by their exact time (stable sort), then times floored to whole seconds")
    return RawInteractions(users[order], items[order], seconds[order], fmt, [path], notes=notes)


def _strings(values: pd.Series) -> np.ndarray:
    """object (n,) of str: the column's text exactly as read."""
    return values.astype(str).to_numpy(dtype=object)


def _open_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its end) of a text file, gzip by suffix (unpacked within
    ``resdom.limits``; a truncated one is a ResdomError saying so)."""
    refuse_special(path)
    gz = path.name.lower().endswith(".gz")
    try:
        with (io.TextIOWrapper(io.BytesIO(gunzip(path)), encoding="utf-8-sig") if gz
              else open(path, encoding="utf-8-sig")) as f:
            for no, line in enumerate(f, start=1):
                yield no, line.rstrip("\r\n")
    except UnicodeDecodeError:
        raise not_text(path) from None
    except OSError as e:
        raise ResdomError(f"{path}: cannot read it ({why_unread(e)})") from None


def _csv_source(path: Path) -> Path | io.BytesIO:
    """What pandas reads for a CSV file: the file, or a .gz file's bytes unpacked within ``resdom.limits``."""
    refuse_special(path)
    return io.BytesIO(gunzip(path)) if path.name.lower().endswith(".gz") else path


def _date_seconds(values: pd.Series, fmt: str, path: Path, field: str, lines: np.ndarray) -> np.ndarray:
    """int64 Unix seconds (UTC midnight) of date strings in ``fmt``; an unreadable one names its line."""
    parsed = pd.to_datetime(values, format=fmt, errors="coerce", utc=True)
    bad = np.flatnonzero(pd.isna(parsed.to_numpy()))
    if len(bad):
        k = int(bad[0])
        raise ResdomError(f"{path}:{lines[k]}: {field} {short(values.iloc[k])} is not a date ({fmt})")
    counts, per_second = datetime_counts(parsed)
    return counts // per_second


# ---------------------------------------------------------------------------------------------------------------
# MovieLens-1M zip


def read_movielens_zip(path: Path) -> RawInteractions:
    """GroupLens's ``ml-1m.zip``: its one ``ratings.dat`` member, read by ``readers.read_movielens``."""
    with open_zip(path) as z:  # bounded: a 3 MB zip that unpacks to gigabytes is refused before it is unpacked
        members = [n for n in z.namelist() if Path(n).name == "ratings.dat"]
        if len(members) != 1:
            raise ResdomError(f"{path}: expected one ratings.dat in the zip, found {len(members)}")
        check_expansion(z, str(path), members)
        data = read_member(z, members[0], str(path))
    with tempfile.TemporaryDirectory(prefix="resdom-ml-") as tmp:
        inner = Path(tmp) / "ratings.dat"
        try:
            inner.write_bytes(data)
        except OSError as e:  # a full /tmp or ulimit -f: "output: no space left ..." named no file of the user's
            if e.errno not in NO_SPACE:
                raise
            why = "a file size limit (ulimit -f)" if e.errno == errno.EFBIG else "no space left on device"
            raise ResdomError(f"{path}: cannot unpack {members[0]} ({len(data):,} bytes) into the temporary folder "
                              f"{Path(tmp).parent} ({why}); set TMPDIR to a folder with room, or unpack it and give "
                              "its ratings.dat") from None
        try:
            raw = read_movielens(inner)
        except ResdomError as e:  # name the member inside the zip, not the temporary copy
            raise ResdomError(str(e).replace(str(inner), f"{path}:{members[0]}")) from None
    raw.fmt, raw.files = "movielens-zip", [path]
    raw.notes.append(f"read {members[0]} from the zip")
    return raw


# ---------------------------------------------------------------------------------------------------------------
# Diginetica


def read_diginetica(path: Path) -> RawInteractions:
    """CIKM Cup 2016 ``train-item-views.csv``: user = sessionId, item = itemId, time = eventdate + timeframe ms."""
    source = _csv_source(path)
    try:
        with warnings_filter("error", pd.errors.ParserWarning):  # a line longer than the header: refused (readers)
            df = pd.read_csv(source, sep=";", dtype=str, keep_default_na=False, engine="c", index_col=False)
    except pd.errors.ParserWarning:
        if isinstance(source, io.BytesIO):
            source.seek(0)
        raise extra_fields(path, source, ";", None, 0) from None
    except pd.errors.EmptyDataError:
        raise ResdomError(f"{path}: file is empty") from None
    except pd.errors.ParserError as e:
        raise parser_error(path, e) from None
    except UnicodeDecodeError:
        raise not_text(path) from None
    if tuple(df.columns) != DIGINETICA_HEADER:
        raise ResdomError(f"{path}:1: header {';'.join(header_fields(path, ';'))!r}, expected "
                          f"{';'.join(DIGINETICA_HEADER)!r} (CIKM Cup 2016 train-item-views.csv)")
    if len(df) == 0:
        raise ResdomError(f"{path}: no rows after the header")
    lines = np.arange(len(df), dtype=np.int64) + 2
    for col in ("sessionId", "itemId"):  # a stray quote read the lines up to the next quote as one id
        refuse_spanning_lines(df[col], lambda k: f"{path}:{k + 2}", col)
    for col in ("sessionId", "itemId", "timeframe", "eventdate"):
        empty = np.flatnonzero((df[col].str.strip() == "").to_numpy())
        if len(empty):
            raise ResdomError(f"{path}:{lines[empty[0]]}: missing value in column {col!r}")
    frame = df["timeframe"].str.strip()
    bad = np.flatnonzero(~frame.str.fullmatch(r"\d{1,15}").to_numpy())
    if len(bad):
        k = int(bad[0])
        raise ResdomError(f"{path}:{lines[k]}: timeframe {short(df['timeframe'].iloc[k])} is not a whole number of "
                          "milliseconds")
    days = _date_seconds(df["eventdate"].str.strip(), "%Y-%m-%d", path, "eventdate", lines)
    exact_ms = days * 1000 + frame.to_numpy().astype(np.int64)
    notes = ["user = sessionId (userId ignored); time = eventdate (UTC midnight) + timeframe / 1000 s"]
    return _ordered_by_exact_time(_strings(df["sessionId"].str.strip()), _strings(df["itemId"].str.strip()),
                                  exact_ms, 1000, "diginetica", path, notes)


# ---------------------------------------------------------------------------------------------------------------
# one dict literal a line (Steam, BeerAdvocate)

# one top-level "key: value" pair of a flat dict literal; strings are consumed whole, so a key quoted inside a
# review's text is never taken for a field
_STRING = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_PAIR = re.compile(rf"\s*(?P<key>{_STRING})\s*:\s*(?P<value>{_STRING}|[^,{{}}\[\]'\"]*?)\s*(?P<end>,|}})")


def _decode_string(token: str) -> str:
    """The text of a quoted Python or JSON string literal."""
    if "\\" not in token:
        return token[1:-1]
    if token[0] == '"':
        try:
            return str(json.loads(token))
        except json.JSONDecodeError:
            pass
    with warnings_filter("ignore"):  # invalid escapes such as "\/" stay as written
        try:
            return str(ast.literal_eval(token))
        except (SyntaxError, ValueError, MemoryError, RecursionError):  # a bad escape ("\x4", "\N{nope}"): the
            return token[1:-1]  # text as written, as for the escapes Python only warns about


def _value_text(token: str) -> str:
    token = token.strip()
    return _decode_string(token) if token[:1] in ("'", '"') else token


def parse_flat_dict(line: str) -> dict[str, str] | None:
    """The top-level pairs of a one-line flat dict literal (Python or JSON), values as text; None where the line is
    not a flat dict (nested values), for the caller to parse it another way."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    out: dict[str, str] = {}
    pos = 1
    if text[1:].strip() == "}":
        return out
    while True:
        m = _PAIR.match(text, pos)
        if m is None:
            return None
        out[_decode_string(m["key"])] = _value_text(m["value"])
        pos = m.end()
        if m["end"] == "}":
            return out if text[pos:].strip() == "" else None


def _literal_dict(line: str) -> dict[str, object] | None:
    """A dict literal (Python or JSON) of any nesting, or None."""
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(line.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            continue
        return value if isinstance(value, dict) else None
    return None


def _dict_records(path: Path, fields: tuple[str, ...]) -> tuple[list[list[str]], list[int], dict[str, int]]:
    """(rows of the ``fields`` values as text, their line numbers, {field: lines skipped without it}) of a file
    holding one dict literal a line. A line that is no dict is an error naming it."""
    rows: list[list[str]] = []
    line_nos: list[int] = []
    skipped = dict.fromkeys(fields, 0)
    for no, line in _open_lines(path):
        if not line.strip():
            continue
        rec: Mapping[str, object] | None = parse_flat_dict(line)  # a dict of str, or of anything below
        if rec is None:
            rec = _literal_dict(line)
        if rec is None:
            raise ResdomError(f"{path}:{no}: not a dict literal ({line[:60]!r}...)")
        values = [rec.get(f) for f in fields]
        absent = next((f for f, v in zip(fields, values) if v is None or str(v).strip() == ""), None)
        if absent is not None:
            skipped[absent] += 1
            continue
        rows.append([str(v).strip() for v in values])
        line_nos.append(no)
    return rows, line_nos, skipped


def _skip_notes(skipped: dict[str, int], what: str) -> list[str]:
    return [f"{n:,} {what}{'s' if n != 1 else ''} without {f!r} skipped" for f, n in skipped.items() if n]


def read_steam(path: Path) -> RawInteractions:
    """UCSD Steam reviews v2: user = username, item = product_id, time = date (day resolution, UTC midnight)."""
    rows, line_nos, skipped = _dict_records(path, STEAM_FIELDS)
    if not rows:
        raise ResdomError(f"{path}: no reviews with {', '.join(STEAM_FIELDS)}")
    arr = np.asarray(rows, dtype=object)
    lines = np.asarray(line_nos, dtype=np.int64)
    seconds = _date_seconds(pd.Series(arr[:, 2]), "%Y-%m-%d", path, "date", lines)
    notes = ["user = username, item = product_id, time = date (UTC midnight)", *_skip_notes(skipped, "review")]
    return RawInteractions(arr[:, 0], arr[:, 1], seconds, "steam", [path], notes=notes)


def read_beeradvocate(path: Path) -> RawInteractions:
    """BeerAdvocate reviews: user = review/profileName, item = beer/beerId, time = review/time (Unix seconds).
    One dict a line, or SNAP's ``key: value`` blocks (told apart by the first non-blank character)."""
    first = next((line for _, line in _open_lines(path) if line.strip()), None)
    if first is None:
        raise ResdomError(f"{path}: file is empty")
    if first.lstrip().startswith("{"):
        rows, line_nos, skipped = _dict_records(path, BEER_FIELDS)
    else:
        rows, line_nos, skipped = _snap_records(path, BEER_FIELDS)
    if not rows:
        raise ResdomError(f"{path}: no reviews with {', '.join(BEER_FIELDS)}")
    arr = np.asarray(rows, dtype=object)
    times = pd.to_numeric(pd.Series(arr[:, 2]), errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(times) | (times != np.floor(times)))
    if len(bad):
        k = int(bad[0])
        raise ResdomError(f"{path}:{line_nos[k]}: review/time {short(arr[k, 2])} is not whole Unix seconds")
    notes = ["user = review/profileName, item = beer/beerId, time = review/time", *_skip_notes(skipped, "review")]
    return _ordered_by_exact_time(arr[:, 0], arr[:, 1], times.astype(np.int64), 1, "beeradvocate", path, notes,
                                  lambda k: f"{path}:{line_nos[k]}")


def _snap_records(path: Path, fields: tuple[str, ...]) -> tuple[list[list[str]], list[int], dict[str, int]]:
    """SNAP's layout: ``key: value`` lines, reviews separated by blank lines (a line without ``key:`` continues
    the previous value). Returns as ``_dict_records``, with the line of each review's first field."""
    rows: list[list[str]] = []
    line_nos: list[int] = []
    skipped = dict.fromkeys(fields, 0)
    rec: dict[str, str] = {}
    start = 0

    def close() -> None:
        if not rec:
            return
        absent = next((f for f in fields if not rec.get(f, "").strip()), None)
        if absent is not None:
            skipped[absent] += 1
        else:
            rows.append([rec[f].strip() for f in fields])
            line_nos.append(start)

    for no, line in _open_lines(path):
        if not line.strip():
            close()
            rec = {}
            continue
        key, sep, value = line.partition(":")
        if not sep or "/" not in key or " " in key:
            if not rec:
                raise ResdomError(f"{path}:{no}: expected 'key: value' (SNAP BeerAdvocate layout), got {line[:60]!r}")
            continue  # a continued review text
        if not rec:
            start = no
        rec[key] = value[1:] if value.startswith(" ") else value
    close()
    return rows, line_nos, skipped


# ---------------------------------------------------------------------------------------------------------------
# tables: Zvuk's Parquet file and time-to-split's raw CSVs


def _table_ids(col: pd.Series) -> np.ndarray:
    """Integer columns as int64 (exact values) where ``integer_labels`` takes them, anything else as the exact text."""
    ints = integer_labels(col) if pd.api.types.is_integer_dtype(col.dtype) else None
    return ints if ints is not None else _strings(col)


def _exact_times(col: pd.Series, where: Callable[[int], str], name: str) -> tuple[np.ndarray, int | None]:
    """(exact times, per_second) of a time column: datetimes and date strings as int64 counts of their unit
    (``datetime_counts``: per_second 10**9 for ns), integer seconds as int64 (1), fractional seconds as float64
    (None). The checks (a missing or unreadable value
    names its row, ``where(k)``) are the table readers' (``readers.time_column_values``)."""
    values = time_column_values(col, where, name)
    if pd.api.types.is_datetime64_any_dtype(values.dtype):
        return datetime_counts(values)
    if pd.api.types.is_integer_dtype(values.dtype):
        return values.to_numpy(dtype=np.int64), 1
    seconds = values.to_numpy(dtype=np.float64)
    if np.array_equal(seconds, np.floor(seconds)) and np.abs(seconds).max(initial=0) < 2**53:
        return seconds.astype(np.int64), 1
    return seconds, None


def read_zvuk(path: Path) -> RawInteractions:
    """Zvuk's ``zvuk-interactions.parquet``: user = user_id, item = track_id, time = datetime."""
    check_parquet(path, len(ZVUK_COLUMNS))
    try:
        with arrow_source(path) as source:
            df = pd.read_parquet(source, columns=list(ZVUK_COLUMNS))
    except Exception as e:  # pyarrow raises many types: missing column, bad file
        raise ResdomError(f"{path}: not a readable Zvuk Parquet file with columns {', '.join(ZVUK_COLUMNS)} "
                          f"({type(e).__name__}: {short(' '.join(str(e).split()))})") from None
    check_parquet_columns(df, list(ZVUK_COLUMNS), path)
    if len(df) == 0:
        raise ResdomError(f"{path}: no rows")
    with damaged_parquet(path):  # pyarrow converts some columns only when read
        for col in ("user_id", "track_id"):
            miss = np.flatnonzero(pd.isna(df[col].to_numpy()))
            if len(miss):
                raise ResdomError(f"{path}: row {int(miss[0]) + 1}: missing value in column {col!r}")
        exact, per_second = _exact_times(df["datetime"], lambda k: f"{path}: row {k + 1}", "datetime")
        users, items = _table_ids(df["user_id"]), _table_ids(df["track_id"])
    notes = ["user = user_id, item = track_id, time = datetime"]
    return _ordered_by_exact_time(users, items, exact, per_second, "zvuk", path, notes)


def read_tts_csv(path: Path, user_col: str, item_col: str, time_col: str) -> RawInteractions:
    """time-to-split's raw CSV: header row, the named user / item / time columns (times in Unix seconds)."""
    try:
        head = pd.read_csv(_csv_source(path), nrows=0)
    except pd.errors.EmptyDataError:
        raise ResdomError(f"{path}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ResdomError(f"{path}: not a readable CSV file ({type(e).__name__})") from None
    cols = list(map(str, head.columns))
    check_unique_header(header_fields(path, ","), f"{path}:1", (user_col, item_col, time_col))
    for name, option in ((user_col, "user_col"), (item_col, "item_col"), (time_col, "time_col")):
        if name not in cols:
            raise ResdomError(f"{path}:1: missing column {name!r} (columns: {', '.join(cols)}); name it with "
                              f"{arg(option)}")
    try:
        df = pd.read_csv(_csv_source(path), usecols=[user_col, item_col, time_col],
                         dtype={user_col: str, item_col: str}, keep_default_na=False, na_values={time_col: [""]},
                         engine="c")
    except pd.errors.ParserError as e:
        raise parser_error(path, e) from None
    except UnicodeDecodeError:
        raise not_text(path) from None
    if len(df) == 0:
        raise ResdomError(f"{path}: no rows after the header")
    for col in (user_col, item_col):
        refuse_spanning_lines(df[col], lambda k: f"{path}:{k + 2}", col)
        empty = np.flatnonzero((df[col].str.strip() == "").to_numpy())
        if len(empty):
            raise ResdomError(f"{path}:{int(empty[0]) + 2}: missing value in column {col!r}")
    exact, per_second = _exact_times(df[time_col], lambda k: f"{path}:{k + 2}", time_col)  # line 1: the header
    notes = [f"user = {user_col}, item = {item_col}, time = {time_col}"]
    return _ordered_by_exact_time(_strings(df[user_col].str.strip()), _strings(df[item_col].str.strip()), exact,
                                  per_second, "time-to-split-csv", path, notes)
