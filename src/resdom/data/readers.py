"""Readers: every input format of spec §1 into one raw interaction table (``RawInteractions``).

Formats (``fmt`` names, as accepted by ``--format``):

- ``user-lines``: one user a line, ``user item item ...``, oldest first (S3-Rec / BSARec files);
- ``paired``: that, plus a second file in the same line order holding ``user t t ...`` (Unix seconds);
  given as ``items.txt,times.txt`` or a folder holding exactly one ``*item*`` and one ``*time*`` file;
- ``interactions``: one interaction a line, ``user item [timestamp]``, whitespace-separated (SASRec files);
- ``recbole``: RecBole atomic ``.inter`` file (tab-separated, typed header ``name:token``);
- ``csv`` / ``tsv`` / ``parquet``: named user, item and (optional) timestamp columns;
- ``movielens``: ``ratings.dat`` (``user::item::rating::timestamp``), optionally gzipped.

Every malformed input raises ``ResdomError`` naming the file and line (or row). Readers do no
preprocessing: rows come back in source order; ``preprocess.py`` sorts, filters and remaps.

Timestamps are Unix seconds in ``[TIME_MIN, TIME_MAX]`` (0001-01-01 to 9999-12-31 UTC, what Python's datetime
represents: the split writes its thresholds as dates, and spans and differences stay far from int64 overflow);
a value outside (1e20, -1e12, milliseconds after 1978) is an error naming its file and line.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from resdom.errors import ResdomError

FORMATS = ("user-lines", "paired", "interactions", "recbole", "csv", "tsv", "parquet", "movielens")
DEFAULT_COLUMNS = {"user_col": "user_id", "item_col": "item_id", "time_col": "timestamp"}
TIME_MIN = -62_135_596_800  # 0001-01-01T00:00:00Z in Unix seconds
TIME_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z
_SNIFF_LINES = 2000


@dataclass
class RawInteractions:
    """One row per interaction, in source order.

    users: (n,) raw user ids (int64, or object array of string tokens).
    items: (n,) raw item ids (int64, or object array of string tokens).
    times: (n,) int64 Unix seconds, or None where the source has no timestamps.
    fmt:   the format read; files: the files read (hashed into the manifest).
    time_ordered: the format promises rows oldest first within each user (checked where times exist).
    notes: what the reader did that a reader of the manifest should know (e.g. dropped columns).
    """

    users: np.ndarray
    items: np.ndarray
    times: np.ndarray | None
    fmt: str
    files: list[Path]
    time_ordered: bool = False
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.items)


# ---------------------------------------------------------------------------------------------------------------
# entry points


def split_source_paths(source: str | Path) -> list[Path]:
    """``"a.txt,b.txt"`` -> two paths (paired files); a folder of paired files -> its item and time files."""
    text = str(source)
    paths = [Path(p.strip()).expanduser() for p in text.split(",")] if "," in text else [Path(text).expanduser()]
    for p in paths:
        if not p.exists():
            raise ResdomError(f"{p}: no such file or directory")
    if len(paths) == 1 and paths[0].is_dir():
        return _files_in_folder(paths[0])
    if len(paths) > 2:
        raise ResdomError(f"{source}: give one file, or two (items,times) for paired files")
    return paths


def _files_in_folder(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix != ".md")
    items = [p for p in files if "item" in p.name.lower()]
    times = [p for p in files if "time" in p.name.lower()]
    if len(items) == 1 and len(times) == 1:
        return [items[0], times[0]]
    if len(files) == 1:
        return files
    names = ", ".join(p.name for p in files) or "nothing"
    raise ResdomError(
        f"{folder}: cannot tell which files to read (found {names}); give a file, or 'items.txt,times.txt' for "
        "paired files"
    )


def read_interactions(
    paths: list[Path],
    fmt: str | None = None,
    user_col: str | None = None,
    item_col: str | None = None,
    time_col: str | None = None,
) -> RawInteractions:
    """Read ``paths`` (one file, or item + time file for ``paired``) in format ``fmt`` (detected if None).

    Column names apply to ``recbole`` / ``csv`` / ``tsv`` / ``parquet`` (defaults user_id, item_id, timestamp;
    a missing default timestamp column means no timestamps, a missing named one is an error).
    """
    fmt = detect_format(paths) if fmt is None else _check_format(fmt)
    if fmt == "paired":
        if len(paths) != 2:
            raise ResdomError(f"format 'paired' needs two files (items,times), got {len(paths)}: {_names(paths)}")
        return read_paired(paths[0], paths[1])
    if len(paths) != 1:
        raise ResdomError(f"format {fmt!r} reads one file, got {len(paths)}: {_names(paths)}")
    path = paths[0]
    if fmt == "user-lines":
        return read_user_lines(path)
    if fmt == "interactions":
        return read_interaction_lines(path)
    if fmt == "movielens":
        return read_movielens(path)
    cols = {"user_col": user_col, "item_col": item_col, "time_col": time_col}
    if fmt == "recbole":
        return read_recbole(path, **cols)
    return read_table(path, fmt, **cols)


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ResdomError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    return fmt


def _names(paths: list[Path]) -> str:
    return ", ".join(str(p) for p in paths)


def detect_format(paths: list[Path]) -> str:
    """The format of ``paths`` where it is unambiguous; otherwise a ResdomError asking for ``--format``."""
    if len(paths) == 2:
        return "paired"
    path = paths[0]
    name = path.name.lower()
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith(".inter"):
        return "recbole"
    if base.endswith((".parquet", ".pq")):
        return "parquet"
    if base.endswith(".csv"):
        return "csv"
    if base.endswith(".tsv"):
        return "tsv"
    lines = _head_lines(path, _SNIFF_LINES)
    if not lines:
        raise ResdomError(f"{path}: file is empty")
    if "::" in lines[0]:
        return "movielens"
    counts = [len(line.split()) for line in lines]
    users = [line.split(maxsplit=1)[0] for line in lines]
    repeated_users = len(set(users)) < len(users)
    if repeated_users and len(set(counts)) == 1 and counts[0] in (2, 3):
        return "interactions"
    if not repeated_users and (len(set(counts)) > 1 or counts[0] > 3):
        return "user-lines"
    raise ResdomError(
        f"{path}: cannot tell whether this is one user a line or one interaction a line; "
        "pass --format user-lines or --format interactions"
    )


# ---------------------------------------------------------------------------------------------------------------
# whitespace text formats


def _open_text(path: Path) -> str:
    """The whole file as text (gzip by suffix); an empty file is an error."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.name.lower().endswith(".gz") else path.read_bytes()
    except (OSError, EOFError) as e:
        raise ResdomError(f"{path}: cannot read ({e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ResdomError(f"{path}:{line}: not UTF-8 text") from None
    if not text.strip():
        raise ResdomError(f"{path}: file is empty")
    return text


def _head_lines(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    out: list[str] = []
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:  # type: ignore[operator]
            for line in f:
                if line.strip():
                    out.append(line)
                if len(out) >= n:
                    break
    except (OSError, EOFError) as e:
        raise ResdomError(f"{path}: cannot read ({e})") from None
    return out


@dataclass
class _Tokens:
    """Non-blank lines split into tokens: ``tokens`` flat, ``counts[k]`` tokens on line ``line_no[k]`` (1-based)."""

    path: Path
    tokens: list[str]
    counts: np.ndarray
    line_no: np.ndarray

    @property
    def starts(self) -> np.ndarray:
        """int64 (m,): index in ``tokens`` of each line's first token."""
        return np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    def all_int64(self) -> np.ndarray | None:
        """int64 array of every token where all are integers (one C-level conversion), else None."""
        if not hasattr(self, "_ints"):
            try:
                self._ints: np.ndarray | None = np.array(self.tokens, dtype=np.int64)
            except (ValueError, OverflowError):
                self._ints = None
        return self._ints

    def locate(self, flat_index: int) -> tuple[int, int]:
        """(line number, 1-based column) of flat token ``flat_index``."""
        k = int(np.searchsorted(np.cumsum(self.counts), flat_index, side="right"))
        return int(self.line_no[k]), int(flat_index - self.starts[k] + 1)


def _tokenize(path: Path, sep: str | None = None) -> _Tokens:
    text = _open_text(path)
    if sep is not None:  # e.g. "::": an empty field or a stray space then shows up as a wrong column count
        text = text.replace(sep, " ")
    fast = _tokenize_fast(path, text)
    return fast if fast is not None else _tokenize_lines(path, text)


def _tokenize_lines(path: Path, text: str) -> _Tokens:
    """Per-line tokenizer (the reference for ``_tokenize_fast``, and its fallback)."""
    per_line: list[list[str]] = []
    line_no: list[int] = []
    for i, line in enumerate(text.splitlines(), start=1):
        toks = line.split()
        if toks:
            per_line.append(toks)
            line_no.append(i)
    counts = np.fromiter((len(t) for t in per_line), dtype=np.int64, count=len(per_line))
    tokens = [t for toks in per_line for t in toks]
    return _Tokens(path, tokens, counts, np.asarray(line_no, dtype=np.int64))


def _tokenize_fast(path: Path, text: str) -> _Tokens | None:
    """Vectorised tokenizer (no Python loop per line): token counts per line from the bytes.

    Returns None (use the per-line path) where str.split / splitlines could disagree with the byte view:
    exotic line breaks, bare carriage returns, or non-ASCII whitespace (token counts then differ).
    """
    if any(c in text for c in "\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029") or text.count("\r") != text.count("\r\n"):
        return None
    if not text.isascii() and any(c.isspace() for c in set(text) if ord(c) > 127):
        return None  # str.split also splits at Unicode spaces (U+00A0, U+3000, ...)
    tokens = text.split()
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    newline = data == 10
    space = newline | (data == 32) | (data == 9) | (data == 13)
    start = ~space
    start[1:] &= space[:-1]  # first byte of each token
    newlines = np.flatnonzero(newline)
    line_of_token = np.searchsorted(newlines, np.flatnonzero(start))  # 0-based line of each token
    counts = np.bincount(line_of_token, minlength=len(newlines) + 1)
    if int(counts.sum()) != len(tokens):
        return None
    nonblank = np.flatnonzero(counts)
    return _Tokens(path, tokens, counts[nonblank].astype(np.int64), (nonblank + 1).astype(np.int64))


def _to_int(tok: _Tokens, select: np.ndarray, what: Callable[[int], str]) -> np.ndarray:
    """int64 values of the flat tokens at ``select``; a non-integer names its file, line and column.

    ``what(column)`` names the field (``"item id"``) for the message.
    """
    ints = tok.all_int64()
    if ints is not None:
        return ints[select]
    picked = [tok.tokens[i] for i in select]
    try:
        return np.array(picked, dtype=np.int64) if picked else np.zeros(0, dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    for k, t in enumerate(picked):  # slow path, only to name the offending token
        try:
            int(t)
        except ValueError:
            line, col = tok.locate(int(select[k]))
            raise ResdomError(f"{tok.path}:{line}: {what(col)} {t!r} is not an integer (column {col})") from None
    raise ResdomError(f"{tok.path}: an integer does not fit in 64 bits")  # overflow


def _time_range_error(where: str, value: object) -> ResdomError:
    return ResdomError(
        f"{where}: timestamp {value!r} is outside the supported range, Unix seconds from {TIME_MIN} to {TIME_MAX} "
        "(years 1 to 9999); timestamps must be Unix seconds (milliseconds: divide by 1000)"
    )


def _first_out_of_range(values: np.ndarray) -> int | None:
    bad = np.flatnonzero((values < TIME_MIN) | (values > TIME_MAX))
    return int(bad[0]) if len(bad) else None


def _to_time(tok: _Tokens, select: np.ndarray) -> np.ndarray:
    """int64 Unix seconds (in ``[TIME_MIN, TIME_MAX]``) of the tokens at ``select``; integers, or decimals floored
    to the second."""
    values = _parse_times(tok, select)
    k = _first_out_of_range(values)
    if k is not None:
        line, col = tok.locate(int(select[k]))
        raise _time_range_error(f"{tok.path}:{line} (column {col})", tok.tokens[int(select[k])])
    return values if values.dtype == np.int64 else np.floor(values).astype(np.int64)


def _parse_times(tok: _Tokens, select: np.ndarray) -> np.ndarray:
    """int64 values of the tokens at ``select`` where all are integers, else float64 (all finite)."""
    ints = tok.all_int64()
    if ints is not None:
        return ints[select]
    picked = [tok.tokens[i] for i in select]
    try:
        return np.array(picked, dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    try:
        values = np.array(picked, dtype=np.float64)
    except ValueError:
        values = None
    if values is not None and np.isfinite(values).all():
        return values
    for k, t in enumerate(picked):
        try:
            if not np.isfinite(float(t)):
                raise ValueError
        except ValueError:
            line, col = tok.locate(int(select[k]))
            raise ResdomError(f"{tok.path}:{line}: timestamp {t!r} is not a number (column {col})") from None
    raise ResdomError(f"{tok.path}: unreadable timestamps")


def _user_line_arrays(tok: _Tokens, users_per_line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(user of each row (n,), flat indices of the non-user tokens (n,)) of a one-user-a-line file."""
    rest = np.ones(len(tok.tokens), dtype=bool)
    rest[tok.starts] = False
    return np.repeat(users_per_line, tok.counts - 1), np.flatnonzero(rest)


def read_user_lines(path: Path) -> RawInteractions:
    """``user item item ...`` per line, oldest first. A user on two lines is an error."""
    tok = _tokenize(path)
    users_per_line = _to_int(tok, tok.starts, lambda c: "user id")
    _check_unique_users(tok, users_per_line)
    user_rows, rest_idx = _user_line_arrays(tok, users_per_line)
    items = _to_int(tok, rest_idx, lambda c: "item id")
    return RawInteractions(user_rows, items, None, "user-lines", [path], time_ordered=True)


def _check_unique_users(tok: _Tokens, users_per_line: np.ndarray) -> None:
    order = np.argsort(users_per_line, kind="stable")
    dup = np.flatnonzero(users_per_line[order][1:] == users_per_line[order][:-1])
    if len(dup):
        first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise ResdomError(
            f"{tok.path}:{tok.line_no[second]}: user {users_per_line[second]} already has a line "
            f"(line {tok.line_no[first]}); one user a line expected (or pass --format interactions)"
        )


def read_paired(item_path: Path, time_path: Path) -> RawInteractions:
    """Item file ``user item ...`` plus time file ``user t ...`` in the same line order (times oldest first)."""
    items_tok, times_tok = _tokenize(item_path), _tokenize(time_path)
    if len(items_tok.counts) != len(times_tok.counts):
        raise ResdomError(
            f"{time_path}: {len(times_tok.counts)} non-blank lines, but {item_path} has {len(items_tok.counts)}; "
            "the time file must match the item file line by line"
        )
    item_users = _to_int(items_tok, items_tok.starts, lambda c: "user id")
    time_users = _to_int(times_tok, times_tok.starts, lambda c: "user id")
    bad = np.flatnonzero(item_users != time_users)
    if len(bad):
        k = int(bad[0])
        raise ResdomError(
            f"{time_path}:{times_tok.line_no[k]}: user {time_users[k]}, but {item_path}:{items_tok.line_no[k]} "
            f"has user {item_users[k]}; the time file must match the item file line by line"
        )
    bad = np.flatnonzero(items_tok.counts != times_tok.counts)
    if len(bad):
        k = int(bad[0])
        raise ResdomError(
            f"{time_path}:{times_tok.line_no[k]}: {times_tok.counts[k] - 1} times for {items_tok.counts[k] - 1} "
            f"items on {item_path}:{items_tok.line_no[k]}; the time file must match the item file line by line"
        )
    _check_unique_users(items_tok, item_users)
    user_rows, item_idx = _user_line_arrays(items_tok, item_users)
    _, time_idx = _user_line_arrays(times_tok, time_users)
    items = _to_int(items_tok, item_idx, lambda c: "item id")
    times = _to_time(times_tok, time_idx)
    _check_non_decreasing(times_tok, user_rows, times, time_idx)
    return RawInteractions(user_rows, items, times, "paired", [item_path, time_path], time_ordered=True)


def _check_non_decreasing(tok: _Tokens, users: np.ndarray, times: np.ndarray, flat_idx: np.ndarray) -> None:
    """Paired files promise oldest first within a line: a decrease is an error naming the line."""
    same_user = users[1:] == users[:-1]
    bad = np.flatnonzero(same_user & (times[1:] < times[:-1]))
    if len(bad):
        k = int(bad[0])
        line, col = tok.locate(int(flat_idx[k + 1]))
        raise ResdomError(
            f"{tok.path}:{line}: times decrease ({times[k]} then {times[k + 1]}, column {col}); "
            "paired files must list each user's interactions oldest first"
        )


def read_interaction_lines(path: Path) -> RawInteractions:
    """``user item [timestamp]`` per line; every line has the same number of columns (2 or 3)."""
    tok = _tokenize(path)
    return _rows_to_raw(tok, ncols_allowed=(2, 3), fmt="interactions", layout="user item [timestamp]")


def read_movielens(path: Path) -> RawInteractions:
    """MovieLens ``ratings.dat``: ``user::item::rating::timestamp`` (rating ignored), optionally gzipped."""
    tok = _tokenize(path, sep="::")
    raw = _rows_to_raw(tok, ncols_allowed=(4,), fmt="movielens", layout="user::item::rating::timestamp")
    raw.notes.append("rating column ignored (implicit feedback)")
    return raw


def _rows_to_raw(tok: _Tokens, ncols_allowed: tuple[int, ...], fmt: str, layout: str) -> RawInteractions:
    ncols = int(tok.counts[0])
    if ncols not in ncols_allowed:
        raise ResdomError(
            f"{tok.path}:{tok.line_no[0]}: expected {' or '.join(map(str, ncols_allowed))} columns ({layout}), "
            f"found {ncols}"
        )
    bad = np.flatnonzero(tok.counts != ncols)
    if len(bad):
        k = int(bad[0])
        raise ResdomError(
            f"{tok.path}:{tok.line_no[k]}: expected {ncols} columns ({layout}) as on line {tok.line_no[0]}, "
            f"found {tok.counts[k]}"
        )
    base = tok.starts
    names = {1: "user id", 2: "item id"}
    users = _to_int(tok, base, lambda c: names.get(c, "value"))
    items = _to_int(tok, base + 1, lambda c: names.get(c, "value"))
    times = _to_time(tok, base + ncols - 1) if ncols in (3, 4) else None
    return RawInteractions(users, items, times, fmt, [tok.path], time_ordered=False)


# ---------------------------------------------------------------------------------------------------------------
# tabular formats


def read_recbole(
    path: Path, user_col: str | None = None, item_col: str | None = None, time_col: str | None = None
) -> RawInteractions:
    """RecBole atomic ``.inter``: tab-separated, header ``name:type`` (e.g. ``user_id:token``)."""
    head = _head_lines(path, 1)
    if not head:
        raise ResdomError(f"{path}: file is empty")
    fields = head[0].rstrip("\r\n").split("\t")
    names = []
    for i, f in enumerate(fields, start=1):
        name, sep, typ = f.partition(":")
        if not sep or not name or not typ:
            raise ResdomError(f"{path}:1: header field {i} {f!r} is not 'name:type' (RecBole atomic file)")
        names.append(name)
    df = _read_csv(path, sep="\t", names=names, skiprows=1)
    return _frame_to_raw(df, path, "recbole", user_col, item_col, time_col, first_data_line=2)


def read_table(
    path: Path, fmt: str, user_col: str | None = None, item_col: str | None = None, time_col: str | None = None
) -> RawInteractions:
    """CSV / TSV (header row) or Parquet with named user, item and timestamp columns."""
    if fmt == "parquet":
        try:
            df = pd.read_parquet(path)
        except Exception as e:  # pyarrow raises many types for a bad file
            raise ResdomError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from None
        return _frame_to_raw(df, path, fmt, user_col, item_col, time_col, first_data_line=None)
    head = _head_lines(path, 1)
    if not head:
        raise ResdomError(f"{path}: file is empty")
    df = _read_csv(path, sep="," if fmt == "csv" else "\t", names=None, skiprows=0)
    return _frame_to_raw(df, path, fmt, user_col, item_col, time_col, first_data_line=2)


def _read_csv(path: Path, sep: str, names: list[str] | None, skiprows: int) -> pd.DataFrame:
    try:
        return pd.read_csv(
            path, sep=sep, names=names, header=0 if names is None else None, skiprows=skiprows, dtype=str,
            keep_default_na=False, skip_blank_lines=True, engine="c",
        )
    except pd.errors.ParserError as e:
        msg = str(e).replace("Error tokenizing data. C error: ", "").strip()
        raise ResdomError(f"{path}: wrong column count: {msg}") from None
    except pd.errors.EmptyDataError:
        raise ResdomError(f"{path}: file is empty") from None
    except UnicodeDecodeError:
        raise ResdomError(f"{path}: not UTF-8 text") from None


def _frame_to_raw(
    df: pd.DataFrame, path: Path, fmt: str, user_col: str | None, item_col: str | None, time_col: str | None,
    first_data_line: int | None,
) -> RawInteractions:
    """Pick the named columns; ids stay integers where every value is one, else string tokens."""
    where = (lambda k: f"{path}:{k + first_data_line}") if first_data_line else (lambda k: f"{path}: row {k + 1}")
    cols = list(map(str, df.columns))
    df.columns = cols
    ucol = user_col or DEFAULT_COLUMNS["user_col"]
    icol = item_col or DEFAULT_COLUMNS["item_col"]
    for name, flag in ((ucol, "--user-col"), (icol, "--item-col")):
        if name not in cols:
            raise ResdomError(f"{path}: missing column {name!r} (columns: {', '.join(cols)}); name it with {flag}")
    tcol = time_col or DEFAULT_COLUMNS["time_col"]
    notes = []
    if tcol not in cols:
        if time_col:
            raise ResdomError(f"{path}: missing column {tcol!r} (columns: {', '.join(cols)}); name it with --time-col")
        tcol = None
        notes.append(f"no {DEFAULT_COLUMNS['time_col']!r} column: no timestamps")
    if len(df) == 0:
        raise ResdomError(f"{path}: no rows after the header")
    users = _id_column(df[ucol], where, ucol)
    items = _id_column(df[icol], where, icol)
    times = _time_column(df[tcol], where, tcol) if tcol else None
    return RawInteractions(users, items, times, fmt, [path], time_ordered=False, notes=notes)


def _missing(col: pd.Series) -> np.ndarray:
    values = col.to_numpy()
    return pd.isna(values) | (values == "") if values.dtype == object else pd.isna(values)


def _id_column(col: pd.Series, where: Callable[[int], str], name: str) -> np.ndarray:
    miss = np.flatnonzero(_missing(col))
    if len(miss):
        raise ResdomError(f"{where(int(miss[0]))}: missing value in column {name!r}")
    if pd.api.types.is_integer_dtype(col.dtype):
        return col.to_numpy(dtype=np.int64)
    as_str = col.astype(str).str.strip()
    if as_str.str.fullmatch(r"[+-]?\d{1,18}").all():
        return as_str.to_numpy().astype(np.int64)
    return as_str.to_numpy(dtype=object)


def _time_column(col: pd.Series, where: Callable[[int], str], name: str) -> np.ndarray:
    miss = np.flatnonzero(_missing(col))
    if len(miss):
        raise ResdomError(f"{where(int(miss[0]))}: missing value in column {name!r}")
    if pd.api.types.is_datetime64_any_dtype(col.dtype):
        return _datetimes_to_seconds(pd.to_datetime(col, utc=True))
    numeric = pd.to_numeric(col, errors="coerce")
    bad = np.flatnonzero(pd.isna(numeric.to_numpy()) | ~np.isfinite(numeric.to_numpy(dtype=np.float64)))
    if len(bad) == 0:
        values = numeric.to_numpy(dtype=np.float64)
        k = _first_out_of_range(values)
        if k is not None:
            raise _time_range_error(f"{where(k)} (column {name!r})", col.iloc[k])
        return np.floor(values).astype(np.int64)
    if len(bad) < len(col):  # a mix of numbers and text: the first text value is the error
        k = int(bad[0])
        raise ResdomError(f"{where(k)}: timestamp {col.iloc[k]!r} in column {name!r} is not a number")
    parsed = pd.to_datetime(col, utc=True, errors="coerce", format="mixed")
    bad = np.flatnonzero(pd.isna(parsed.to_numpy()))
    if len(bad):
        k = int(bad[0])
        raise ResdomError(f"{where(k)}: timestamp {col.iloc[k]!r} in column {name!r} is neither a number nor a date")
    return _datetimes_to_seconds(parsed)


def _datetimes_to_seconds(values: pd.Series) -> np.ndarray:
    ns = values.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return ns // 1_000_000_000
