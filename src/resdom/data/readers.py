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
preprocessing: rows come back in source order; ``preprocess.py`` sorts, filters and remaps. A pandas DataFrame is
read like a table (``read_frame``).

Ids are labels, kept exactly as read: ``007``, ``07``, ``+7`` and ``7`` are four items, `` a`` and ``a `` are not
``a``. A column whose every id is a canonical decimal integer (its text is ``str(int(text))``) is held as int64
(same labels, less memory, ordered numerically by the remap); any other column as the exact strings.
``normalize_ids=True`` (off by default) strips surrounding spaces and reads integer-looking ids as numbers.

A table (csv, tsv, parquet, recbole, DataFrame) without its timestamp column is an error unless ``no_time=True``
(``--no-time``): then each user's interactions keep the file's row order. ``user-lines`` files and two-column
``interactions`` files have no timestamps by definition: their row order is the time order (S3-Rec, SASRec).
Fractional timestamps are kept, never floored (float64 seconds: about 0.2 microseconds of resolution at
today's dates; finer differences become ties, which keep file order); whole-second timestamps are int64.

Timestamps are Unix seconds in ``[TIME_MIN, TIME_MAX]`` (0001-01-01 to 9999-12-31 UTC, what Python's datetime
represents: the split writes its thresholds as dates, and spans and differences stay far from int64 overflow);
a value outside (1e20, -1e12, milliseconds after 1978) is an error naming its file and line.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import re
import unicodedata
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np
import pandas as pd

from resdom.bounded import arrow_source, check_parquet, gunzip, read_bytes, refuse_special
from resdom.checks import arg, naming_flags
from resdom.errors import ResdomError
from resdom.io import warnings_filter
from resdom.limits import quote, short, why_unread

FORMATS = ("user-lines", "paired", "interactions", "recbole", "csv", "tsv", "parquet", "movielens")
DEFAULT_COLUMNS = {"user_col": "user_id", "item_col": "item_id", "time_col": "timestamp"}
TIME_MIN = -62_135_596_800  # 0001-01-01T00:00:00Z in Unix seconds
TIME_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z
_SNIFF_LINES = 2000


@dataclass
class RawInteractions:
    """One row per interaction, in source order.

    users: (n,) raw user ids: int64 where every id is a canonical integer, else an object array of the exact strings.
    items: (n,) raw item ids, the same way.
    times: (n,) Unix seconds, int64 (all whole) or float64 (some fractional), or None without timestamps.
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
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):  # Path("") is the working directory
        raise ResdomError(f"source {text!r}: an empty path; give a file, a folder, 'items.txt,times.txt', a "
                          "registered data set (`resdom data list`) or synthetic")
    paths = [Path(p).expanduser() for p in parts] if len(parts) > 1 else [Path(text).expanduser()]
    for p in paths:
        if not p.exists():
            raise ResdomError(f"{p}: no such file or directory")
        refuse_special(p)
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
    if {"arrays.npz", "manifest.json"} <= {p.name for p in files}:  # SplitData's two files: split already
        raise ResdomError(f"{folder}: a prepared split (resdom data split), not data to read: load it as it is "
                          f"(resdom.load_split, or `resdom train {folder}`)")
    if (folder / "data" / "arrays.npz").is_file() and (folder / "data" / "manifest.json").is_file():
        raise ResdomError(f"{folder}: a run (resdom train), not data to read: its split is {folder / 'data'}")
    names = ", ".join(p.name for p in files[:8]) + (f" and {len(files) - 8:,} more" if len(files) > 8 else "")
    names = names or "nothing"
    raise ResdomError(
        f"{folder}: cannot tell which files to read (found {names}); give a file, or 'items.txt,times.txt' for "
        "paired files"
    )


UNNAMED_COLUMNS = {  # formats read by position: a column option has nothing to name
    "user-lines": "one user a line: user item item ...", "paired": "an item file and a time file, one user a line",
    "interactions": "user item [timestamp], by position", "movielens": "user::item::rating::timestamp"}


def read_interactions(
    paths: list[Path],
    fmt: str | None = None,
    user_col: str | None = None,
    item_col: str | None = None,
    time_col: str | None = None,
    no_time: bool = False,
    normalize_ids: bool = False,
) -> RawInteractions:
    """Read ``paths`` (one file, or item + time file for ``paired``) in format ``fmt`` (detected if None).

    Column names apply to ``recbole`` / ``csv`` / ``tsv`` / ``parquet`` (defaults user_id, item_id, timestamp).
    A table's missing timestamp column is an error unless ``no_time``, which also ignores timestamps that are there
    (each user's interactions then keep the file's row order). ``normalize_ids``: module docstring.
    """
    for path in paths:
        refuse_special(path)  # /dev/zero as a CSV would be read for ever
    fmt = detect_format(paths) if fmt is None else _check_format(fmt)
    named = [arg(name, value) for name, value in (("user_col", user_col), ("item_col", item_col),
                                                  ("time_col", time_col)) if value is not None]
    if named and fmt in UNNAMED_COLUMNS:  # the option would be ignored without a word: the file has no header
        raise ResdomError(f"{_names(paths)}: format {fmt!r} has no named columns ({UNNAMED_COLUMNS[fmt]}), so "
                          f"{', '.join(named)} cannot apply (a table with a header line: {arg('fmt', 'csv')} or "
                          "tsv)")
    if fmt == "paired":
        if len(paths) != 2:
            raise ResdomError(f"format 'paired' needs two files (items,times), got {len(paths)}: {_names(paths)}")
        raw = read_paired(paths[0], paths[1], normalize_ids)
    elif len(paths) != 1:
        raise ResdomError(f"format {fmt!r} reads one file, got {len(paths)}: {_names(paths)}")
    elif fmt == "user-lines":
        raw = read_user_lines(paths[0], normalize_ids)
    elif fmt == "interactions":
        raw = read_interaction_lines(paths[0], normalize_ids)
    elif fmt == "movielens":
        raw = read_movielens(paths[0], normalize_ids)
    else:
        cols: _ColumnOptions = {"user_col": user_col, "item_col": item_col, "time_col": time_col, "no_time": no_time,
                "normalize_ids": normalize_ids}
        raw = read_recbole(paths[0], **cols) if fmt == "recbole" else read_table(paths[0], fmt, **cols)
    return drop_times(raw) if no_time else raw


class _ColumnOptions(TypedDict):
    """The column options read_interactions passes on to read_recbole and read_table."""

    user_col: str | None
    item_col: str | None
    time_col: str | None
    no_time: bool
    normalize_ids: bool


def drop_times(raw: RawInteractions) -> RawInteractions:
    """``raw`` without timestamps (``no_time``), with a note saying so."""
    if raw.times is not None:
        raw.notes.append("timestamps ignored (no_time): each user's interactions in file row order")
        raw.times = None
    return raw


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ResdomError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    return fmt


def _names(paths: list[Path]) -> str:
    return ", ".join(str(p) for p in paths)


_TABLE_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq", ".inter")


def detect_format(paths: list[Path]) -> str:
    """The format of ``paths`` where it is unambiguous; otherwise a ResdomError asking for ``--format``."""
    if len(paths) == 2:
        tables = [p for p in paths if p.name.lower().removesuffix(".gz").endswith(_TABLE_SUFFIXES)]
        if tables:  # two comma-separated paths are a paired items,times pair, not two tables to concatenate
            raise ResdomError(f"{_names(paths)}: two paths are read as a paired file pair (items,times: one user a "
                              f"line, whitespace-separated), but {tables[0].name} is a table; give one table file")
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
    refuse_binary(path)
    lines = _head_lines(path, _SNIFF_LINES)
    if not lines:
        raise ResdomError(f"{path}: file is empty")
    if "::" in lines[0]:
        return "movielens"
    if _json_line(lines[0]):  # split at its spaces, an object a line was read as a user-lines or interactions file
        raise ResdomError(f"{path}: JSON (an object or list a line), which resdom does not read for a data set of your "
                          "own: give a table (csv, tsv or parquet; e.g. pandas.read_json(path, lines=True)"
                          ".to_csv('data.csv', index=False))")
    counts = [len(_fields(line)) for line in lines]
    users = [_fields(line)[0] for line in lines]
    repeated_users = len(set(users)) < len(users)
    if repeated_users and len(set(counts)) == 1 and counts[0] in (2, 3):
        return "interactions"
    if not repeated_users and (len(set(counts)) > 1 or counts[0] > 3):
        return "user-lines"
    raise ResdomError(
        f"{path}: cannot tell whether this is one user a line or one interaction a line; "
        f"pass {arg('fmt', 'user-lines')} or {arg('fmt', 'interactions')}"
    )


def _json_line(line: str) -> bool:
    """Whether ``line`` is a JSON object or list (a JSON-lines file's first line)."""
    text = line.strip()
    if not text.startswith(("{", "[")):
        return False
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------------------------
# whitespace text formats


_BINARY = ((b"PK\x03\x04", "a zip archive or an .xlsx workbook", "unpack it, or save the sheet as CSV"),
           (b"\x1f\x8b", "gzip-compressed", "name it *.gz, which resdom reads"),
           (b"PAR1", "a Parquet file", "name it *.parquet or give the format parquet"),
           (b"BZh", "bzip2-compressed", "decompress it first"),
           (b"\xfd7zXZ\x00", "xz-compressed", "decompress it first"),
           (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "unpack it first"))


def _binary_kind(path: Path, advice: bool = True) -> str | None:
    """What ``path`` is (and, with ``advice``, what to do) where its first bytes say it is no text file, else
    None. A .gz file is decompressed by its reader, so it is never one."""
    if path.name.lower().endswith(".gz"):
        return None
    refuse_special(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    found = next(((kind, todo) for magic, kind, todo in _BINARY if head.startswith(magic)), None)
    return None if found is None else f"{found[0]}: {found[1]}" if advice else found[0]


def refuse_binary(path: Path, advice: bool = True) -> None:
    """A ResdomError where ``path`` is, by its first bytes, an archive, a compressed or a Parquet file read as text
    (a text parser would misread it); ``advice``: say what to do (the data readers' advice)."""
    if (what := _binary_kind(path, advice)) is not None:
        raise ResdomError(f"{path}: not UTF-8 text ({what})")


def not_text(path: Path, line: int | None = None, advice: bool = True) -> ResdomError:
    """The error for a file that is not UTF-8 text, saying what it is where its first bytes tell (``advice``: and
    what to do, for a data file)."""
    what = _binary_kind(path, advice)
    return ResdomError(f"{path}{f':{line}' if line and what is None else ''}: not UTF-8 text"
                       + (f" ({what})" if what else ""))


def _open_text(path: Path) -> str:
    """The whole file as text (gzip by suffix); an empty file is an error."""
    refuse_binary(path)
    raw = read_bytes(path)  # a .gz unpacked within resdom.limits; a truncated one says so
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark (files saved by Excel, Notepad) is no id's text
    except UnicodeDecodeError as e:
        raise not_text(path, raw[: e.start].count(b"\n") + 1) from None
    if not text.strip():
        raise ResdomError(f"{path}: file is empty")
    return text


HEAD_BYTES = 4 << 20  # what the first lines of a file are looked for in (format detection, a header)


def _head_lines(path: Path, n: int) -> list[str]:
    """The first ``n`` non-blank lines of a file (gzip by suffix), looked for in its first ``HEAD_BYTES``."""
    refuse_special(path)
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:  # type: ignore[operator]
            head = f.read(HEAD_BYTES)
    except EOFError:
        head = b""  # a truncated gzip file: its reader says so
    except (OSError, zlib.error) as e:
        raise ResdomError(f"{path}: cannot read it ({why_unread(e)})") from None
    text = head.decode("utf-8-sig", errors="replace")
    lines = text.splitlines(keepends=True)
    if len(head) == HEAD_BYTES and lines:
        lines = lines[:-1] or lines  # the last line may be cut
    return [line for line in lines if line.strip()][:n]


@dataclass
class _Tokens:
    """Non-blank lines split into tokens: ``tokens`` flat, ``counts[k]`` tokens on line ``line_no[k]`` (1-based)."""

    path: Path
    tokens: list[str]
    counts: np.ndarray
    line_no: np.ndarray
    _nbytes: np.ndarray | None = None  # UTF-8 length of each token, where the tokenizer measured it
    notes: list[str] = field(default_factory=list)  # for RawInteractions.notes (ids holding a Unicode space)

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

    def canonical(self) -> np.ndarray | None:
        """bool (n_tokens,): the token is the canonical text of its integer (``str(int(t)) == t``), where every
        token reads as an int64 (``all_int64``); else None. Exact by UTF-8 length: numpy's int parse accepts only
        additions to the canonical digits (a ``+``, leading zeros, ``_``; non-ASCII digits take more bytes)."""
        ints = self.all_int64()
        if ints is None:
            return None
        if not hasattr(self, "_canonical"):
            nbytes = self._nbytes if self._nbytes is not None else np.fromiter(
                (len(t.encode("utf-8")) for t in self.tokens), dtype=np.int64, count=len(self.tokens))
            self._canonical = nbytes == decimal_length(ints)
        return self._canonical

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


_FIELD_SEPARATORS = re.compile(r"[ \t\n\r\x0b\x0c\x1c-\x1f]+")  # str.split's separators but the Unicode spaces


def _fields(line: str) -> list[str]:
    """The whitespace-separated fields of ``line``: separated by ASCII spaces, tabs and the like only, so an id
    holding a no-break or other Unicode space (copied from a web page) stays one id, as read."""
    return [t for t in _FIELD_SEPARATORS.split(line) if t]


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def text_lines(text: str) -> list[str]:
    """The lines of ``text`` as Python reads a file's lines (universal newlines: ``\n``, ``\r\n``, ``\r``), as the
    readers of S3-Rec's and SASRec's files do: ``str.splitlines`` also broke lines at a vertical tab, a form feed,
    U+001C-U+001E, U+0085 or U+2028, so 'u1 a b<U+2028>c d' became user u1 and a user c without a word."""
    return _LINE_BREAK.split(text)


def _tokenize_lines(path: Path, text: str) -> _Tokens:
    """Per-line tokenizer (the reference for ``_tokenize_fast``, and its fallback)."""
    per_line: list[list[str]] = []
    line_no: list[int] = []
    for i, line in enumerate(text_lines(text), start=1):
        toks = _fields(line)
        if toks:
            per_line.append(toks)
            line_no.append(i)
    counts = np.fromiter((len(t) for t in per_line), dtype=np.int64, count=len(per_line))
    tokens = [t for toks in per_line for t in toks]
    spaced = list(dict.fromkeys(t for t in tokens if not t.isascii() and any(c.isspace() for c in t)))
    notes = [f"{len(spaced):,} id{'s' if len(spaced) > 1 else ''} hold a Unicode space (e.g. {spaced[0]!r}), kept as "
             "part of the id: fields are separated by ASCII spaces and tabs"] if spaced else []
    return _Tokens(path, tokens, counts, np.asarray(line_no, dtype=np.int64), notes=notes)


def _tokenize_fast(path: Path, text: str) -> _Tokens | None:
    """Vectorised tokenizer (no Python loop per line): token counts per line from the bytes.

    Returns None (use the per-line path) where str.split / splitlines could disagree with the byte view:
    exotic line breaks, bare carriage returns, or non-ASCII whitespace (token counts then differ).
    """
    if any(c in text for c in "\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029") or text.count("\r") != text.count("\r\n"):
        return None
    if not text.isascii() and any(c.isspace() for c in set(text) if ord(c) > 127):
        return None  # str.split would split at Unicode spaces (U+00A0, U+3000, ...), which are part of an id
    tokens = text.split()
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    newline = data == 10
    space = newline | (data == 32) | (data == 9) | (data == 13)
    start = ~space
    start[1:] &= space[:-1]  # first byte of each token
    end = ~space
    end[:-1] &= space[1:]  # last byte of each token
    starts = np.flatnonzero(start)
    newlines = np.flatnonzero(newline)
    line_of_token = np.searchsorted(newlines, starts)  # 0-based line of each token
    counts = np.bincount(line_of_token, minlength=len(newlines) + 1)
    if int(counts.sum()) != len(tokens):
        return None
    nonblank = np.flatnonzero(counts)
    nbytes = (np.flatnonzero(end) - starts + 1).astype(np.int64)
    return _Tokens(path, tokens, counts[nonblank].astype(np.int64), (nonblank + 1).astype(np.int64), nbytes)


_POWERS_OF_TEN = np.array([10**k for k in range(20)], dtype=np.uint64)


def decimal_length(ints: np.ndarray) -> np.ndarray:
    """int64 (n,): the length of ``str(x)`` for each int64 ``x`` (digits, plus one for a minus sign)."""
    ints = np.asarray(ints, dtype=np.int64)
    magnitude = np.abs(ints).astype(np.uint64)  # abs(int64 min) wraps to itself: as uint64 it is 2**63, right
    digits = np.maximum(np.searchsorted(_POWERS_OF_TEN, magnitude, side="right"), 1)
    return digits.astype(np.int64) + (ints < 0)


_CANONICAL_INT = r"0|-?[1-9][0-9]{0,17}"  # str(int(t)) == t, and |t| < 10**18 (fits int64)


def canonical_int_labels(texts: np.ndarray) -> np.ndarray | None:
    """int64 (n,) of ``texts`` (strings) where every text is a canonical decimal integer (``str(int(t)) == t``: no
    sign but ``-``, no leading zero, no ``_``, ASCII digits, at most 18 digits), else None: then the ids stay
    strings, so ``007`` and ``7`` remain two ids."""
    if len(texts) == 0:
        return np.zeros(0, dtype=np.int64)
    try:
        series = pd.Series(texts, dtype="string[pyarrow]")  # RE2 on Arrow strings: about 2x faster
    except (ImportError, TypeError, ValueError):
        series = pd.Series(np.asarray(texts, dtype=object), dtype=object).astype(str)
    if not bool(series.str.fullmatch(_CANONICAL_INT).all()):
        return None
    return np.asarray(texts, dtype=object).astype(np.int64)


CANONICAL_INT_BOUND = 10**18  # |id| below it: an integer label (``_CANONICAL_INT``'s at most 18 digits)


def integer_labels(col: pd.Series) -> np.ndarray | None:
    """int64 (n,) of an integer column where every value is an integer label by ``canonical_int_labels``' rule
    (|v| < 10**18), else None: its ids are then the text of each value, as the same ids written to a file are read
    (a 19-digit id stays text there; a uint64 id past int64's range would have wrapped to a negative one here)."""
    if len(col) and not (-CANONICAL_INT_BOUND < int(col.min()) and int(col.max()) < CANONICAL_INT_BOUND):
        return None
    return col.to_numpy(dtype=np.int64)


def _normalized(texts: np.ndarray) -> np.ndarray:
    """``normalize_ids``: each id stripped of surrounding whitespace, integer-looking ids (``+7``, ``007``, at most 18
    digits) written canonically (``7``); int64 where all are integers then, else an object array of str."""
    stripped = pd.Series(np.asarray(texts, dtype=object)).astype(str).str.strip()
    numeric = stripped.str.fullmatch(r"[+-]?[0-9]{1,18}").to_numpy(dtype=bool)
    out = stripped.to_numpy(dtype=object)
    out[numeric] = [str(int(t)) for t in out[numeric]]
    ints = canonical_int_labels(out)
    return ints if ints is not None else out


def note_near_duplicate_ids(raw: RawInteractions) -> RawInteractions:
    """Add a note to ``raw`` (ids kept exactly) for each id column in which different ids are one id to
    ``--normalize-ids`` (``'u1 '`` and ``'u1'``, ``'007'`` and ``'7'``): they stay different users or items, as read,
    but a reader of the data summary should know. Integer labels are canonical already: only text ids are looked at."""
    for labels, what in ((raw.users, "user"), (raw.items, "item")):
        if labels.dtype != object:
            continue
        unique = pd.unique(labels)
        merged = pd.Series(_normalized(unique), dtype=object)
        clash = merged.duplicated(keep=False).to_numpy()
        if not clash.any():
            continue
        example = unique[clash & (merged == merged[clash].iloc[0]).to_numpy()][:2]
        raw.notes.append(f"{int(clash.sum()):,} {what} ids differ from another only by surrounding spaces, leading "
                         f"zeros or a '+' (e.g. {quote(example[0])} and {quote(example[1])}): kept apart, as read; "
                         "--normalize-ids (normalize_ids=True) makes them one")
    for labels, what in ((raw.users, "user"), (raw.items, "item")):
        same = unicode_twins(labels)
        if same:
            raw.notes.append(f"{len(same):,} {what} id(s) in other Unicode code points than an id that looks the "
                             f"same (an accent composed or decomposed, NFC / NFD: e.g. {spelled(same[0][0])} and "
                             f"{spelled(same[0][1])}): kept apart, as read")
    return raw


def unicode_twins(labels: np.ndarray) -> list[tuple[str, str]]:
    """Pairs of distinct text ids of ``labels`` that are one text in Unicode's NFC form ('Café' written with the
    letter é and with e + a combining accent), one pair for each such id after the first of its form."""
    if labels.dtype != object:
        return []
    first: dict[str, str] = {}
    pairs = []
    for text in pd.unique(labels):
        if isinstance(text, str) and not text.isascii():
            form = unicodedata.normalize("NFC", text)
            if first.setdefault(form, text) != text:
                pairs.append((first[form], text))
    return pairs


def spelled(text: str) -> str:
    """``text`` quoted, with its code points past ASCII named (``'Café' (U+00E9)``, ``'Café' (U+0301)``): two
    spellings that look the same are told apart in a message."""
    marks = [f"U+{ord(c):04X}" for c in text if not c.isascii()]
    return f"{quote(text)} ({' '.join(marks[:6])}{' ...' if len(marks) > 6 else ''})"


def id_labels(texts: np.ndarray, normalize: bool = False) -> np.ndarray:
    """Labels of the id strings ``texts`` (n,): int64 where all are canonical integers, else an object array of the
    exact strings. ``normalize``: ``_normalized`` (off by default)."""
    texts = np.asarray(texts, dtype=object)
    if normalize:
        return _normalized(texts)
    ints = canonical_int_labels(texts)
    return ints if ints is not None else texts


def _labels(tok: _Tokens, select: np.ndarray, normalize: bool = False) -> np.ndarray:
    """Labels (``id_labels``) of the flat tokens at ``select``."""
    canonical = tok.canonical()
    if canonical is not None and not normalize and bool(canonical[select].all()):
        ints = tok.all_int64()
        assert ints is not None  # canonical() is None unless every token reads as an int64
        return ints[select]
    texts = np.array([tok.tokens[i] for i in select], dtype=object) if len(select) else np.zeros(0, dtype=object)
    return id_labels(texts, normalize)


def _time_range_error(where: str, value: object) -> ResdomError:
    if isinstance(value, np.generic):
        value = value.item()  # 1600000000000, not np.int64(1600000000000)
    return ResdomError(
        f"{where}: timestamp {short(value)} is outside the supported range, Unix seconds from {TIME_MIN} to {TIME_MAX} "
        "(years 1 to 9999); timestamps must be Unix seconds (milliseconds: divide by 1000)"
    )


def _first_out_of_range(values: np.ndarray) -> int | None:
    bad = np.flatnonzero((values < TIME_MIN) | (values > TIME_MAX))
    return int(bad[0]) if len(bad) else None


def whole_seconds(values: np.ndarray) -> np.ndarray:
    """``values`` as int64 where every one is a whole number of seconds, else float64 (fractions kept)."""
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    values = values.astype(np.float64)
    return values.astype(np.int64) if bool((values == np.floor(values)).all()) else values


def _to_time(tok: _Tokens, select: np.ndarray) -> np.ndarray:
    """Unix seconds (in ``[TIME_MIN, TIME_MAX]``) of the tokens at ``select``: int64 where all are whole seconds,
    else float64 (fractions kept, never floored)."""
    values = _parse_times(tok, select)
    k = _first_out_of_range(values)
    if k is not None:
        line, col = tok.locate(int(select[k]))
        raise _time_range_error(f"{tok.path}:{line} (column {col})", tok.tokens[int(select[k])])
    return whole_seconds(values)


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
            raise ResdomError(f"{tok.path}:{line}: timestamp {short(t)} is not a number (column {col})") from None
    raise ResdomError(f"{tok.path}: unreadable timestamps")


def _user_line_arrays(tok: _Tokens, users_per_line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(user of each row (n,), flat indices of the non-user tokens (n,)) of a one-user-a-line file."""
    rest = np.ones(len(tok.tokens), dtype=bool)
    rest[tok.starts] = False
    return np.repeat(users_per_line, tok.counts - 1), np.flatnonzero(rest)


def read_user_lines(path: Path, normalize_ids: bool = False) -> RawInteractions:
    """``user item item ...`` per line, oldest first. A user on two lines is an error."""
    tok = _tokenize(path)
    users_per_line = _labels(tok, tok.starts, normalize_ids)
    _check_unique_users(tok, users_per_line)
    user_rows, rest_idx = _user_line_arrays(tok, users_per_line)
    items = _labels(tok, rest_idx, normalize_ids)
    return RawInteractions(user_rows, items, None, "user-lines", [path], time_ordered=True,
                           notes=[*_users_without_items(tok, users_per_line), *tok.notes])


def _users_without_items(tok: _Tokens, users_per_line: np.ndarray) -> list[str]:
    """A note on the lines that hold a user and no item (such a user has no interaction, so is no user of the
    data): counted and the first named, never dropped without a word."""
    empty = np.flatnonzero(tok.counts == 1)
    if not len(empty):
        return []
    k = int(empty[0])
    return [f"{len(empty):,} line{'s' if len(empty) > 1 else ''} with a user and no item skipped (e.g. "
            f"{short(str(users_per_line[k]))}, {tok.path}:{tok.line_no[k]})"]


def _check_unique_users(tok: _Tokens, users_per_line: np.ndarray) -> None:
    order = np.argsort(users_per_line, kind="stable")
    dup = np.flatnonzero(users_per_line[order][1:] == users_per_line[order][:-1])
    if len(dup):
        first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise ResdomError(
            f"{tok.path}:{tok.line_no[second]}: user {users_per_line[second]} already has a line "
            f"(line {tok.line_no[first]}); one user a line expected (or pass {arg('fmt', 'interactions')})"
        )


def read_paired(item_path: Path, time_path: Path, normalize_ids: bool = False) -> RawInteractions:
    """Item file ``user item ...`` plus time file ``user t ...`` in the same line order (times oldest first)."""
    items_tok, times_tok = _tokenize(item_path), _tokenize(time_path)
    if len(items_tok.counts) != len(times_tok.counts):
        raise ResdomError(
            f"{time_path}: {len(times_tok.counts)} non-blank lines, but {item_path} has {len(items_tok.counts)}; "
            "the time file must match the item file line by line"
        )
    item_users = _labels(items_tok, items_tok.starts, normalize_ids)
    time_users = _labels(times_tok, times_tok.starts, normalize_ids)
    if item_users.dtype != time_users.dtype:  # one file's user ids all canonical integers, the other's not
        item_users, time_users = item_users.astype(str).astype(object), time_users.astype(str).astype(object)
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
    items = _labels(items_tok, item_idx, normalize_ids)
    times = _to_time(times_tok, time_idx)
    _check_non_decreasing(times_tok, user_rows, times, time_idx)
    return RawInteractions(user_rows, items, times, "paired", [item_path, time_path], time_ordered=True,
                           notes=[*_users_without_items(items_tok, item_users), *items_tok.notes])


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


def read_interaction_lines(path: Path, normalize_ids: bool = False) -> RawInteractions:
    """``user item [timestamp]`` per line; every line has the same number of columns (2 or 3)."""
    tok = _tokenize(path)
    return _rows_to_raw(tok, ncols_allowed=(2, 3), fmt="interactions", layout="user item [timestamp]",
                        normalize_ids=normalize_ids)


def read_movielens(path: Path, normalize_ids: bool = False) -> RawInteractions:
    """MovieLens ``ratings.dat``: ``user::item::rating::timestamp`` (rating ignored), optionally gzipped."""
    tok = _tokenize(path, sep="::")
    raw = _rows_to_raw(tok, ncols_allowed=(4,), fmt="movielens", layout="user::item::rating::timestamp",
                       normalize_ids=normalize_ids)
    raw.notes.append("rating column ignored (implicit feedback)")
    return raw


def _rows_to_raw(tok: _Tokens, ncols_allowed: tuple[int, ...], fmt: str, layout: str,
                 normalize_ids: bool = False) -> RawInteractions:
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
    users = _labels(tok, base, normalize_ids)
    items = _labels(tok, base + 1, normalize_ids)
    times = _to_time(tok, base + ncols - 1) if ncols in (3, 4) else None
    return RawInteractions(users, items, times, fmt, [tok.path], time_ordered=False, notes=list(tok.notes))


# ---------------------------------------------------------------------------------------------------------------
# tabular formats


def read_recbole(
    path: Path, user_col: str | None = None, item_col: str | None = None, time_col: str | None = None,
    no_time: bool = False, normalize_ids: bool = False,
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
            raise ResdomError(f"{path}:1: header field {i} {short(f)} is not 'name:type' (RecBole atomic file)")
        names.append(name)
    check_unique_header(names, f"{path}:1")
    df = _read_csv(path, sep="\t", names=names, skiprows=1)
    columns = _Columns(user_col, item_col, time_col, no_time, normalize_ids)
    return _frame_to_raw(df, str(path), "recbole", columns, first_data_line=2, files=[path])


def read_table(
    path: Path, fmt: str, user_col: str | None = None, item_col: str | None = None, time_col: str | None = None,
    no_time: bool = False, normalize_ids: bool = False,
) -> RawInteractions:
    """CSV / TSV (header row) or Parquet with named user, item and timestamp columns."""
    columns = _Columns(user_col, item_col, time_col, no_time, normalize_ids)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        check_parquet(path)  # rows declared past what the file's size may hold: refused (pandas reads every column)
        try:
            with arrow_source(path) as source:
                names = pq.read_schema(source).names
            check_unique_header(names, str(path), columns.read)
            once = [n for n in names if names.count(n) == 1]  # pyarrow reads no column whose name repeats
            with arrow_source(path) as source:
                df = pd.read_parquet(source, columns=None if len(once) == len(names) else once)
            check_parquet_columns(df, once, path)
        except ResdomError:
            raise
        except Exception as e:  # pyarrow raises many types for a bad file; its messages span lines
            raise ResdomError(f"{path}: not a readable Parquet file ({type(e).__name__}: "
                              f"{' '.join(str(e).split())})") from None
        with damaged_parquet(path):  # pyarrow converts some columns only when read (a text that is not UTF-8)
            return _frame_to_raw(df, str(path), fmt, columns, first_data_line=None, files=[path])
    sep = "," if fmt == "csv" else "\t"
    fields = header_fields(path, sep)
    if not fields:
        raise ResdomError(f"{path}: file is empty")
    check_unique_header(fields, f"{path}:1", columns.read)
    df = _read_csv(path, sep=sep, names=None, skiprows=0)
    return _frame_to_raw(df, str(path), fmt, columns, first_data_line=2, files=[path])


@contextlib.contextmanager
def damaged_parquet(path: str | Path) -> Iterator[None]:
    """pyarrow's errors while a Parquet file's columns are converted (pandas keeps pyarrow-backed columns, and a
    damaged text, not UTF-8, fails only when read) as one ResdomError naming the file."""
    import pyarrow as pa

    try:
        yield
    except pa.ArrowException as e:
        raise ResdomError(f"{path}: a damaged Parquet file ({type(e).__name__}: "
                          f"{short(' '.join(str(e).split()))})") from None


def check_parquet_columns(df: pd.DataFrame, names: list[str], path: str | Path) -> None:
    """The frame pandas read from a Parquet file has the columns ``names`` its schema gives: pandas renames columns
    after the file's own pandas metadata, which a damaged file may contradict (``track_id`` read as ``track_jd``)."""
    got = [str(c) for c in df.columns]
    if got != names:
        raise ResdomError(f"{path}: a damaged Parquet file: its pandas metadata names the columns "
                          f"{short(', '.join(got))}, its schema {short(', '.join(names))}")


def header_fields(path: Path, sep: str) -> list[str]:
    """The fields of a delimited file's header (its first line that is not blank), unquoted as CSV reads them, as
    written: pandas renames a repeated name (``item_id.1``)."""
    head = _head_lines(path, 1)
    return next(csv.reader([head[0].rstrip("\r\n")], delimiter=sep), []) if head else []


def check_unique_header(names: list[str], where: str, read: tuple[str, ...] | None = None) -> None:
    """A header naming a column that is read (``read``; None: any column) twice is ambiguous (pandas would read the
    first as given and rename the second ``name.1``, or refuse): a ResdomError naming the column and its positions."""
    seen: dict[str, list[int]] = {}
    for i, name in enumerate(map(str, names), start=1):
        seen.setdefault(name, []).append(i)
    for name, at in seen.items():
        if len(at) > 1 and (read is None or name in read):
            raise ResdomError(f"{where}: the header names column {name!r} {len(at)} times (columns "
                              f"{', '.join(map(str, at))}): which one is meant is ambiguous; give them distinct names")


def read_frame(
    df: pd.DataFrame, user_col: str | None = None, item_col: str | None = None, time_col: str | None = None,
    no_time: bool = False, normalize_ids: bool = False, name: str = "DataFrame",
) -> RawInteractions:
    """A pandas DataFrame with named user, item and timestamp columns, read as a table file is (rows named
    ``DataFrame: row k``, 1-based; the frame itself is not changed). Integer columns are integer labels; any other
    id column is read as the text of each value (``str``)."""
    if not isinstance(df, pd.DataFrame):
        raise ResdomError(f"{name}: expected a pandas DataFrame, got {type(df).__name__}")
    columns = _Columns(user_col, item_col, time_col, no_time, normalize_ids)
    check_unique_header(list(df.columns), name, columns.read)
    for column in columns.read[:2]:
        if column in df.columns:
            _check_text_is_one_to_one(df[column], name, column)
    return _frame_to_raw(df, name, "dataframe", columns, first_data_line=None, files=[])


def _check_text_is_one_to_one(col: pd.Series, where: str, name: str) -> None:
    """An id column of mixed Python types (an object column holding 1 and '1', or 1 and 1.0) whose values and texts
    do not correspond one to one: ids are read as their text, so two ids would become one (or one two) without a
    word; a ResdomError instead. A column of one type (the usual) is not looked at value by value."""
    if col.dtype != object or not pd.api.types.infer_dtype(col, skipna=True).startswith("mixed"):
        return
    try:
        values = col.nunique(dropna=True)
    except TypeError:  # unhashable values (lists): each is read as its text, as before
        return
    if values != col.dropna().astype(str).nunique():
        types = " and ".join(sorted({type(v).__name__ for v in col.dropna().unique()}))
        raise ResdomError(f"{where}: column {name!r} mixes {types} values whose texts are not one per id (e.g. 1 "
                          f"and '1' have one text, 1 and 1.0 two); ids are read as text, so give the column one "
                          f"type first (e.g. df[{name!r}].astype(str))")


def parser_error(path: Path, e: Exception) -> ResdomError:
    """pandas' C tokenizer error as one line naming the file's line: its "line L" is 1-based and its "row R" (where
    an unclosed quote starts) 0-based, both counting every line of the file, the header and blank lines too."""
    msg = str(e).replace("Error tokenizing data. C error: ", "").strip()
    if m := re.fullmatch(r"Expected (\d+) fields in line (\d+), saw (\d+)", msg):
        return ResdomError(f"{path}:{m[2]}: expected {m[1]} columns, found {m[3]}")
    if m := re.fullmatch(r"EOF inside string starting at row (\d+)", msg):
        return ResdomError(f"{path}:{int(m[1]) + 1}: a quote (\") opened on this line is never closed")
    return ResdomError(f"{path}: not a readable table ({msg})")


def _read_csv(path: Path, sep: str, names: list[str] | None, skiprows: int) -> pd.DataFrame:
    refuse_binary(path)
    source: Path | io.BytesIO = path
    if path.name.lower().endswith(".gz"):  # unpacked within resdom.limits (pandas would unpack without a bound,
        source = io.BytesIO(gunzip(path))  # and a truncated file ended in an EOFError: "error: aborted")
    try:
        # index_col=False: pandas took a first data line with one field more than the header for an unnamed index
        # column and shifted every column by one (users read as items, items as times) without a word; rows with
        # more fields than the header are then pandas' ParserWarning, refused at their line
        with warnings_filter("error", pd.errors.ParserWarning):
            return pd.read_csv(
                source, sep=sep, names=names, header=0 if names is None else None, skiprows=skiprows, dtype=str,
                keep_default_na=False, skip_blank_lines=True, engine="c", index_col=False,
            )
    except pd.errors.ParserWarning:
        if isinstance(source, io.BytesIO):
            source.seek(0)
        raise extra_fields(path, source, sep, len(names) if names is not None else None, skiprows) from None
    except pd.errors.ParserError as e:
        raise ResdomError(f"{parser_error(path, e)}{_separator_hint(path, sep)}") from None
    except pd.errors.EmptyDataError:
        raise ResdomError(f"{path}: file is empty") from None
    except UnicodeDecodeError:
        raise not_text(path) from None


def extra_fields(path: Path, source: Path | io.BytesIO, sep: str, width: int | None, skiprows: int) -> ResdomError:
    """The first line of a table holding more fields than its header (``width`` columns, or the header line's),
    as ``parser_error`` words one: ``path:line: expected 3 columns, found 4``."""
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open(source, "rb")) if isinstance(source, Path) else source
        text = stack.enter_context(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""))
        rows = csv.reader(text, delimiter=sep)
        for row in rows:
            if rows.line_num <= skiprows or not row:
                continue
            if width is None:
                width = len(row)  # the header line
            elif len(row) > width:
                return ResdomError(f"{path}:{rows.line_num}: expected {width} columns, found {len(row)}")
    return ResdomError(f"{path}: a line holds more fields than the header names")


def _separator_hint(path: Path, sep: str) -> str:
    """Where the first line of ``path`` holds another separator (a tab, ';', '|') but not ``sep``: the hint that
    the file may be separated by it (a TSV saved as .csv), whatever its column names; else ''."""
    try:
        with open(path, "rb") as f:
            first = f.readline(65_536).decode("utf-8-sig", errors="replace")
    except OSError:
        return ""
    if path.name.lower().endswith(".gz") or sep in first:
        return ""
    seps = [c for c in "\t;|" if c in first]
    if not seps:
        return ""
    name = {"\t": "tabs", ";": "';'", "|": "'|'"}[seps[0]]
    return (f" (its header line holds no {sep!r} but {name}: is the file separated by {name}? {_separator_formats()})")


def _separator_formats() -> str:
    """What reads which separator, as a message names the formats (``--format csv`` / ``fmt='csv'``)."""
    return (f"{arg('fmt', 'csv')} reads commas, {arg('fmt', 'tsv')} tabs; save a file with another separator with one "
            "of them")


@dataclass(frozen=True)
class _Columns:
    """The reader options of a table: column names (None: the default), ``no_time``, ``normalize_ids``."""

    user_col: str | None = None
    item_col: str | None = None
    time_col: str | None = None
    no_time: bool = False
    normalize_ids: bool = False

    def __post_init__(self) -> None:
        for field_name in ("user_col", "item_col", "time_col"):  # a DataFrame's integer label (header=None) is
            value = getattr(self, field_name)  # matched as its text, as every column name is
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                object.__setattr__(self, field_name, str(value))
            elif value is not None and not isinstance(value, str):
                raise ResdomError(f"{field_name}: expected a column name, got {type(value).__name__} {value!r}")
        fields = ("user_col", "item_col", "time_col")[: len(self.read)]
        for i, (name, field_name) in enumerate(zip(self.read, fields)):  # user and item read from one column: every
            # user would be its own item, and training would go on without a word
            if name in self.read[:i]:
                other = fields[self.read.index(name)]
                said = [f"{arg(f)}{'' if getattr(self, f) else ' (its default)'}" for f in (other, field_name)]
                raise ResdomError(f"{said[0]} and {said[1]} name the same column {name!r}; each names a column "
                                  "of its own")

    @property
    def read(self) -> tuple[str, ...]:
        """The names of the columns read: user, item and (unless no_time) timestamp."""
        names = (self.user_col or DEFAULT_COLUMNS["user_col"], self.item_col or DEFAULT_COLUMNS["item_col"])
        return names if self.no_time else (*names, self.time_col or DEFAULT_COLUMNS["time_col"])



def _near_column(cols: list[str], name: str, option: str) -> str:
    """A hint where a column of ``cols`` is ``name`` but for case or surrounding spaces (' item_id', 'Item_ID'), naming
    ``option`` (``user_col``) as ``arg`` does: user_col='Item' / --user-col 'Item'."""
    near = [c for c in cols if c.strip().casefold() == name.casefold()]
    if not near:
        return ""
    given = arg(option, repr(near[0]) if naming_flags() else near[0])
    return f" ({near[0]!r} is named with other case or spaces: {given} reads it)"

def _frame_to_raw(
    df: pd.DataFrame, where_name: str, fmt: str, columns: _Columns, first_data_line: int | None, files: list[Path],
) -> RawInteractions:
    """Pick the named columns of ``df`` (not modified); ids become labels (``id_labels``), times seconds."""
    if first_data_line:
        def where(k: int) -> str:
            return f"{where_name}:{k + first_data_line}"
    else:
        def where(k: int) -> str:
            return f"{where_name}: row {k + 1}"
    cols = list(map(str, df.columns))
    df = df.set_axis(cols, axis=1)
    ucol, icol = columns.read[:2]
    python = not naming_flags()  # prepare_split(...) from Python: name the Python arguments, not the CLI's flags
    for name, option in ((ucol, "user_col"), (icol, "item_col")):
        if name not in cols:
            seps = [c for c in ";|\t, " if fmt in ("csv", "tsv") and len(cols) == 1 and c in cols[0]]
            hint = (f" (the header reads as one column: is the file separated by {seps[0]!r}? "
                    f"{_separator_formats()})") if seps else ""
            hint = hint or _near_column(cols, name, option)
            raise ResdomError(f"{where_name}: missing column {name!r} (columns: {', '.join(map(repr, cols))}); "
                              f"name it with {arg(option)}{'=...' if python else ''}{hint}")
    tcol: str | None  # None: no timestamps read (declared apart: a str is narrowed to on assignment)
    tcol = columns.time_col or DEFAULT_COLUMNS["time_col"]
    notes = []
    if columns.no_time:
        if tcol in cols:
            notes.append(f"column {tcol!r} ignored (no_time): each user's interactions in file row order")
        else:
            notes.append("no timestamps (no_time): each user's interactions in file row order")
        tcol = None
    elif tcol not in cols:
        if python:
            how = "name the timestamp column with time_col=..." if not columns.time_col else "check its name"
            raise ResdomError(f"{where_name}: missing timestamp column {tcol!r} (columns: "
                              f"{', '.join(map(repr, cols))}); {how}, or pass time_col=None (no timestamps) to order "
                              f"each user's interactions by row order{_near_column(cols, tcol, 'time_col')}")
        how = "name the timestamp column with --time-col" if not columns.time_col else "check its name"
        raise ResdomError(f"{where_name}: missing timestamp column {tcol!r} (columns: {', '.join(map(repr, cols))}); "
                          f"{how}, or pass --no-time to order each user's interactions by the file's "
                          f"row order{_near_column(cols, tcol, 'time_col')}")
    if len(df) == 0:
        raise ResdomError(f"{where_name}: no rows after the header")
    if first_data_line:
        for name in (ucol, icol):
            refuse_spanning_lines(df[name], where, name)
    users = _id_column(df[ucol], where, ucol, columns.normalize_ids)
    items = _id_column(df[icol], where, icol, columns.normalize_ids)
    notes += [_float_ids_note(df[c], c, fmt) for c in (ucol, icol) if pd.api.types.is_float_dtype(df[c].dtype)]
    times = time_column_seconds(df[tcol], where, tcol) if tcol else None
    return RawInteractions(users, items, times, fmt, files, time_ordered=False, notes=notes)


def refuse_spanning_lines(col: pd.Series, where: Callable[[int], str], name: str) -> None:
    """An id of a table file that holds a line break: a quote at the start of a field (an id ``"abc`` written
    without CSV's quoting) opened a quoted value that a quote on a later line closed, so the lines between were
    read as one id and their interactions lost without a word; a ResdomError naming the first such row."""
    try:
        texts = col.astype("string[pyarrow]")  # Arrow's search: a fraction of a second for millions of ids
    except (ImportError, TypeError, ValueError):
        texts = col.astype(str)
    spans = np.flatnonzero(texts.str.contains(r"[\r\n]", regex=True).to_numpy(dtype=bool, na_value=False))
    if len(spans):
        k = int(spans[0])
        raise ResdomError(f"{where(k)}: the {name!r} value {short(col.iloc[k])} spans several lines: a quote (\") at "
                          "the start of a field opened a quoted value that a quote on a later line closed, so those "
                          "lines were read as one id; remove the stray quote, or quote the id with its quotes doubled "
                          '("ab""c"); an id that truly holds a line break can be given in a DataFrame')


def _float_ids_note(col: pd.Series, name: str, fmt: str) -> str:
    """The note on an id column of floats (integer ids a missing value once made floats, in pandas): each id is
    the text of its float, '6.0', which recommend writes and matches (6 or '6' is not it)."""
    todo = f"df[{name!r}].astype('int64') first" if fmt == "dataframe" else "write the column as integers"
    return (f"column {name!r} holds floats: its ids are their text (e.g. {quote(str(col.iloc[0]))}), which is how "
            f"they are matched and written; for integer ids, {todo}")


def _refuse_nested(col: pd.Series, where: Callable[[int], str], name: str) -> None:
    """A column of lists, arrays, mappings or sets (a Parquet list column) holds no ids or times: a ResdomError
    naming its first such row."""
    if col.dtype != object:
        return
    nested = np.flatnonzero([isinstance(v, (list, tuple, dict, set, frozenset, np.ndarray)) for v in col.to_numpy()])
    if len(nested):
        k = int(nested[0])
        raise ResdomError(f"{where(k)}: column {name!r} holds a {type(col.iloc[k]).__name__} "
                          f"({short(col.iloc[k], 80)}), not one id or time a row")


def _missing(col: pd.Series, where: Callable[[int], str], name: str) -> np.ndarray:
    """bool (n,): the rows whose value is missing (None, NaN, NA, NaT, or an empty text); a column of lists (cells
    holding several values) is refused first (``_refuse_nested``)."""
    _refuse_nested(col, where, name)
    values = col.to_numpy()
    missing = np.asarray(pd.isna(values), dtype=bool)
    if values.dtype == object:
        present = np.flatnonzero(~missing)  # pd.NA compares as NA, not False: only present values are compared
        missing[present] = values[present] == ""
    return missing


def _id_column(col: pd.Series, where: Callable[[int], str], name: str, normalize: bool = False) -> np.ndarray:
    """Labels of an id column: int64 for an integer column of labels (``integer_labels``) or canonical integer texts,
    else the exact strings."""
    miss = np.flatnonzero(_missing(col, where, name))
    if len(miss):
        raise ResdomError(f"{where(int(miss[0]))}: missing value in column {name!r}")
    if pd.api.types.is_integer_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
        ints = integer_labels(col)
        if ints is not None:
            return ints
    return id_labels(col.astype(str).to_numpy(dtype=object), normalize)


_TIME = r"[T ]\d{1,2}:\d{2}"  # a date's time of day
_ZONE = _TIME + r"(?::\d{2}(?:\.\d+)?)?\s*(?:Z|UTC|GMT|[+-]\d{2}(?::?\d{2})?)\s*$"  # ... with its zone


def _one_kind_of_zone(col: pd.Series) -> bool:
    """Whether pandas parses the dates of ``col`` without "Mixed timezones" (all without a zone, or all with the
    same one): then no time lacks the zone another has. A quick pass over texts; the row-by-row check runs
    otherwise, and for a column of other objects (Python datetimes, Timestamps), whose mix of zoned and naive
    values pandas reads without a word, each naive one as UTC."""
    if pd.api.types.infer_dtype(col, skipna=True) != "string":
        return False
    try:
        pd.to_datetime(col, errors="coerce", format="mixed")
    except ValueError:
        return False
    return True


def time_column_values(col: pd.Series, where: Callable[[int], str], name: str) -> pd.Series:
    """The values of a timestamp column (n,), checked: finite numbers (a numeric Series, integer dtype where the
    column's is) or dates (a UTC datetime Series: a datetime column, or one whose every value is a date's text).

    A missing value, a non-number among numbers, or a value that is neither is a ResdomError naming the row
    (``where(k)`` of the 0-based row ``k``) and the column ``name``. Shared by every table reader (readers, native).
    """
    miss = np.flatnonzero(_missing(col, where, name))
    if len(miss):
        raise ResdomError(f"{where(int(miss[0]))}: missing value in column {name!r}")
    if pd.api.types.is_datetime64_any_dtype(col.dtype):
        return pd.to_datetime(col, utc=True)
    for is_kind, what in ((pd.api.types.is_bool_dtype, "true/false values"),
                          (pd.api.types.is_timedelta64_dtype, f"durations (e.g. {short(str(col.iloc[0]))})")):
        if is_kind(col.dtype):  # pandas would read True as 1 s and a duration as its nanoseconds
            raise ResdomError(f"{where(0)}: column {name!r} holds {what}, not times (Unix seconds or dates)")
    try:
        numeric = pd.to_numeric(col, errors="coerce")
    except (OverflowError, TypeError, ValueError):  # a whole number past a float (a 400-digit timestamp): as text,
        numeric = pd.to_numeric(col.astype(str), errors="coerce")  # it reads as inf and is refused below
    bad = np.flatnonzero(pd.isna(numeric.to_numpy()) | ~np.isfinite(numeric.to_numpy(dtype=np.float64)))
    if len(bad) == 0:
        return numeric
    if len(bad) < len(col):  # a mix of numbers and text: the first text value is the error
        k = int(bad[0])
        raise ResdomError(f"{where(k)}: timestamp {short(col.iloc[k])} in column {name!r} is not a number")
    parsed = pd.to_datetime(col, utc=True, errors="coerce", format="mixed")
    bad = np.flatnonzero(pd.isna(parsed.to_numpy()))
    if len(bad):
        k = int(bad[0])
        raise ResdomError(f"{where(k)}: timestamp {short(col.iloc[k])} in column {name!r} is neither a number nor "
                          "a date")
    _check_day_month_order(col, where, name)
    _check_named_offsets(col, where, name)
    _check_whole_dates(col, parsed, where, name)
    if _one_kind_of_zone(col):
        return parsed
    text = col.astype(str)
    zoned = text.str.contains(_ZONE, regex=True).to_numpy()
    naive = ~zoned  # a time of day without its zone, or a bare date (its midnight in which zone?)
    if zoned.any() and naive.any():  # pandas reads a time without a zone as UTC, the others at their offset
        k, j = int(np.flatnonzero(naive)[0]), int(np.flatnonzero(zoned)[0])
        raise ResdomError(f"{where(k)}: timestamp {short(col.iloc[k])} in column {name!r} has no time zone, while "
                          f"{short(col.iloc[j])} ({where(j)}) has one: in which zone the first lies is ambiguous, and "
                          "with it the order of the day's interactions; give every date a zone, or none")
    return parsed


_DAY_MONTH = r"^\s*(\d{1,2})([/.-])\d{1,2}\2\d{2,4}(?!\d)"  # 01/02/2020, 13.01.20: which is the day?


def _check_day_month_order(col: pd.Series, where: Callable[[int], str], name: str) -> None:
    """pandas reads each date ``a/b/yyyy`` (or with '.' or '-') on its own: month first, but day first where ``a``
    is past 12, so a column of days first ('13/01/2020', '01/02/2020') read its early days of each month as months
    without a word (February 1 as January 2). A column whose dates are read both ways is a ResdomError naming one
    of each; one read month first throughout is pandas' reading (nothing in it tells the order)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype(object)
    if pd.api.types.infer_dtype(col, skipna=True) != "string":
        return
    maybe = np.flatnonzero(col.str.match(r"\s*\d{1,2}[/.-]").to_numpy(dtype=bool, na_value=False))  # quick pass
    if not len(maybe):
        return
    first = np.full(len(col), np.nan)
    first[maybe] = pd.to_numeric(col.iloc[maybe].str.extract(_DAY_MONTH)[0], errors="coerce").to_numpy(
        dtype=np.float64)
    day_first, month_first = np.flatnonzero(first > 12), np.flatnonzero(first <= 12)
    if len(day_first) and len(month_first):
        k, j = int(day_first[0]), int(month_first[0])
        raise ResdomError(f"{where(j)}: timestamp {short(col.iloc[j])} in column {name!r} reads month first, while "
                          f"{short(col.iloc[k])} ({where(k)}) can only be day first: the order of day and month is "
                          "ambiguous; write dates as YYYY-MM-DD (ISO 8601) or Unix seconds")


_NAMED_OFFSET = r"(?:UTC|GMT)\s*[+-]\s*\d"  # 10:00 UTC+2: which way?


def _check_named_offsets(col: pd.Series, where: Callable[[int], str], name: str) -> None:
    """A date whose zone is written ``UTC+2`` or ``GMT+2``: pandas (dateutil) reads it with the POSIX sign, two hours
    behind UTC (10:00 UTC+2 as 12:00 UTC), where a person writing it means ISO 8601's +02:00 (08:00 UTC): the times
    were four hours off without a word. A ResdomError naming the first such row."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype(object)
    if pd.api.types.infer_dtype(col, skipna=True) != "string":
        return
    named = np.flatnonzero(col.str.contains(_NAMED_OFFSET, regex=True).to_numpy(dtype=bool, na_value=False))
    if len(named):
        k = int(named[0])
        raise ResdomError(f"{where(k)}: timestamp {short(col.iloc[k])} in column {name!r} gives its zone as an offset "
                          "from UTC or GMT, which pandas reads with the POSIX sign (GMT+2 two hours behind UTC), the "
                          "opposite of ISO 8601's; write the offset alone (+02:00) or a Unix time")


_TIME_ONLY = r"\s*T?\d{1,2}:\d{2}(?::\d{2}(?:\.\d*)?)?\s*(?:[AaPp]\.?[Mm]\.?)?\s*"  # 10:00, 10:00 PM: which day?


def _check_whole_dates(col: pd.Series, parsed: pd.Series, where: Callable[[int], str], name: str) -> None:
    """A value pandas reads as a date although it names none: 'now' and 'today' (the moment it is read), a time of
    day alone ('10:00': today's date), a day without its year ('5 May', 'March': the year 1). Each was a time
    made up without a word; a ResdomError naming the first such row."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype(object)
    if pd.api.types.infer_dtype(col, skipna=True) != "string":
        return
    text = col.str.strip()
    now = text.str.lower().isin(["now", "today"]).to_numpy(dtype=bool)
    clock = text.str.fullmatch(_TIME_ONLY).to_numpy(dtype=bool, na_value=False)
    no_year = (parsed.dt.year == 1).to_numpy(dtype=bool) & ~text.str.contains("0001", regex=False).to_numpy(
        dtype=bool, na_value=False)
    bad = np.flatnonzero(now | clock | no_year)
    if len(bad):
        k = int(bad[0])
        what = "names the moment it is read" if now[k] else "is a time of day without its date" if clock[k] else \
            "has no year"
        raise ResdomError(f"{where(k)}: timestamp {short(col.iloc[k])} in column {name!r} {what}, not a date; give "
                          "each time its full date (2020-05-01T10:00:00) or a Unix time")


def time_column_seconds(col: pd.Series, where: Callable[[int], str], name: str) -> np.ndarray:
    """Unix seconds of a timestamp column (numbers, or dates): int64 where all are whole seconds, else float64; a bad
    value is a ResdomError naming its row (``where``) and the column (``time_column_values``)."""
    values = time_column_values(col, where, name)
    if pd.api.types.is_datetime64_any_dtype(values.dtype):
        seconds = _datetimes_to_seconds(values)
        k = _first_out_of_range(seconds)  # a datetime64[s] column may hold the year 20000
        if k is not None:
            raise _time_range_error(f"{where(k)} (column {name!r})", col.iloc[k])
        return seconds
    seconds = values.to_numpy(dtype=np.float64)
    k = _first_out_of_range(seconds)
    if k is not None:
        raise _time_range_error(f"{where(k)} (column {name!r})", col.iloc[k])
    if pd.api.types.is_integer_dtype(values.dtype):
        return values.to_numpy(dtype=np.int64)
    return whole_seconds(seconds)


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def datetime_counts(values: pd.Series) -> tuple[np.ndarray, int]:
    """(int64 (n,) counts since 1970-01-01 UTC, counts per second) of a datetime Series (naive: UTC), in the
    Series' own unit: pandas holds dates outside 1677-2262 in seconds, milliseconds or microseconds, which read as
    nanoseconds wrapped around without a word (1500-01-01 read as 2084-07-20)."""
    if getattr(values.dt, "tz", None) is not None:
        values = values.dt.tz_convert("UTC").dt.tz_localize(None)
    array = values.to_numpy()
    unit = np.datetime_data(array.dtype)[0]
    if unit not in _PER_SECOND:  # pandas holds none other; a coarser numpy unit holds whole seconds
        array, unit = array.astype("datetime64[s]"), "s"
    return array.astype(np.int64), _PER_SECOND[unit]


def _datetimes_to_seconds(values: pd.Series) -> np.ndarray:
    """Unix seconds of UTC datetimes: int64 where all are whole seconds, else float64 (sub-second parts kept)."""
    counts, per_second = datetime_counts(values)
    whole, frac = np.divmod(counts, per_second)
    if not frac.any():
        return whole.astype(np.int64)
    return whole.astype(np.float64) + frac / per_second
