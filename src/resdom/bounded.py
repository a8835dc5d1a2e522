"""Reading untrusted bytes within ``resdom.limits``: archives (zip, gz, npz), YAML and JSON, special files.

Every reader of a file a user may be handed goes through these helpers, so that the size a file declares is
checked before it is allocated and every failure is one ResdomError line naming the file (and member, line or
field), never a traceback:

- ``refuse_special``: a device, FIFO or socket given as a file (``/dev/zero`` as a CSV) is refused before it is
  opened;
- ``open_zip`` / ``read_member``: a zip member is read only where its declared size and its archive's expansion
  (``limits.expansion_cap``) are within bounds, and never past its declared size; a bad CRC, an unknown
  compression method, an encrypted member or a truncated stream is a ResdomError;
- ``gunzip``: a gzip stream unpacked within the same bounds; a truncated one says so;
- ``load_npz``: an ``.npz`` archive's arrays, parsed here from their ``.npy`` headers (no pickles), each checked to
  hold the bytes its shape needs before it is made;
- ``load_yaml`` / ``BoundedSafeLoader``: YAML with at most ``YAML_ALIASES`` aliases, ``YAML_NODES`` nodes once
  aliases are expanded, and ``YAML_DEPTH`` levels of nesting;
- ``load_json``: JSON text, its nesting bounded (deep nesting is a RecursionError in ``json``);
- ``command_budget``: the same limits over one whole command (the CLI enters it): the archives it reads unpack to
  at most ``EXPANSION`` times their packed bytes plus one ``EXPANSION_ALLOWANCE`` together, and its YAML
  documents expand to at most ``YAML_NODES`` values together, so that many files each within its own limit (a
  report over a store of crafted cells, ``--set`` repeated) cannot add up past them.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import yaml

from resdom.errors import ResdomError
from resdom.limits import (
    EXPANSION,
    EXPANSION_ALLOWANCE,
    MEMBER_BYTES,
    YAML_ALIASES,
    YAML_DEPTH,
    YAML_NODES,
    Limit,
    expansion_cap,
    model_params,
    short,
)

CHUNK = 1 << 20


# ---------------------------------------------------------------------------------------------------------------
# One command's budget: the limits are per file, and a command that reads many files is bounded in total too


@dataclass
class CommandBudget:
    """What one command has read so far: bytes unpacked from archives and the packed bytes they came from, and
    values of YAML documents once their aliases are expanded."""

    packed: int = 0
    unpacked: int = 0
    yaml_nodes: int = 0


_budget: CommandBudget | None = None  # the running command's (``command_budget``); None: per-file limits only


@contextlib.contextmanager
def command_budget() -> Iterator[CommandBudget]:
    """Count what the readers of this module unpack and expand while the block runs (one CLI command), against one
    budget: archives together at most ``EXPANSION`` times their packed bytes plus one ``EXPANSION_ALLOWANCE`` (a
    file's own limit grants each archive that allowance: twenty crafted files of 60 KB would otherwise unpack to
    1.2 GB), YAML documents together at most ``YAML_NODES`` values. Outside it (resdom used as a library) each
    file has its own limits only."""
    global _budget
    outer, _budget = _budget, CommandBudget()
    try:
        yield _budget
    finally:
        _budget = outer


def _charge_unpacked(packed: int, unpacked: int, where: str) -> None:
    """Count ``unpacked`` bytes, coming from ``packed`` archive bytes, against the command's budget; a ResdomError
    naming ``where`` (the archive that breaks it) once the command's archives together unpack past theirs."""
    budget = _budget
    if budget is None:
        return
    budget.packed += packed
    budget.unpacked += unpacked
    cap = EXPANSION.value * budget.packed + EXPANSION_ALLOWANCE
    if budget.unpacked > cap:
        raise ResdomError(f"{where}: refused: the archives this command read unpack to {budget.unpacked:,} bytes "
                          f"together, more than their {budget.packed:,} bytes may ({cap:,}: {EXPANSION.value} times "
                          f"their size plus 64 MiB for the whole command); if the files are genuine, raise "
                          f"{EXPANSION.env}")


def _charge_yaml(nodes: int, source: str) -> None:
    """Count a YAML document's ``nodes`` (aliases expanded) against the command's budget: a ResdomError naming
    ``source`` once the command's documents (its config file, every ``--set`` value) expand past ``YAML_NODES``
    values together."""
    budget = _budget
    if budget is None:
        return
    budget.yaml_nodes += nodes
    if budget.yaml_nodes > YAML_NODES.value:
        raise ResdomError(f"{source}: refused: the YAML this command read (config files, --set values) expands to "
                          f"more than {YAML_NODES.value:,} values together ({YAML_NODES.env} raises the limit)")

# what zipfile, zlib, lzma and bz2 raise on a damaged archive or member
_ARCHIVE_ERRORS: tuple[type[BaseException], ...] = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError,
                                                      NotImplementedError, RuntimeError, KeyError, IndexError,
                                                      UnicodeDecodeError)
try:  # lzma may be missing from a Python built without it
    import lzma

    _ARCHIVE_ERRORS = (*_ARCHIVE_ERRORS, lzma.LZMAError)
except ImportError:  # pragma: no cover
    pass


def refuse_special(path: str | Path) -> None:
    """A ResdomError where ``path`` exists and is neither a regular file nor a folder (a device such as
    ``/dev/zero``, a FIFO, a socket): reading one may never end, or block. Checked before it is opened."""
    kind = special_kind(path)
    if kind is not None:
        raise ResdomError(f"{path}: {kind}, not a regular file; give a file")


def special_kind(path: str | Path) -> str | None:
    """What ``path`` is (through links) where it exists and is neither a regular file nor a folder ("a character
    device", "a FIFO (named pipe)", ...); else None."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # absent or unreadable: the reader says so in its own words
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return ("a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")


def _damaged(where: str, e: BaseException) -> ResdomError:
    if isinstance(e, RuntimeError) and "encrypted" in str(e):
        return ResdomError(f"{where}: an encrypted (password-protected) member; resdom reads no encrypted archive")
    if isinstance(e, NotImplementedError):
        return ResdomError(f"{where}: compressed with a method resdom cannot read ({e})")
    if isinstance(e, EOFError):
        return ResdomError(f"{where}: the archive is truncated (it ends before its data does); fetch it again")
    return ResdomError(f"{where}: damaged archive ({type(e).__name__}: {short(str(e))})")


def open_zip(source: str | Path | bytes, where: str | None = None) -> zipfile.ZipFile:
    """An open ``ZipFile`` of a path or of bytes; a file that is no zip archive, or is damaged, is a ResdomError."""
    where = where or ("archive" if isinstance(source, (bytes, bytearray)) else str(source))
    if not isinstance(source, (bytes, bytearray)):
        refuse_special(source)
    try:
        return zipfile.ZipFile(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)
    except FileNotFoundError:
        raise ResdomError(f"{where}: no such file") from None
    except PermissionError:  # a file one may not read is not damaged: "PATH: Permission denied" (resdom.cli), no
        raise  # "not a readable zip file (PermissionError: ...)", no advice to prepare or fetch it again
    except _ARCHIVE_ERRORS as e:
        raise ResdomError(f"{where}: not a readable zip file ({type(e).__name__}: {short(str(e))})") from None


def archive_size(z: zipfile.ZipFile) -> int:
    """The bytes of the archive ``z`` was opened on (its file's size, or the length of its buffer)."""
    fp = z.fp
    if fp is None:
        return 0
    try:
        return os.fstat(fp.fileno()).st_size
    except (OSError, AttributeError, io.UnsupportedOperation):
        pos = fp.tell()
        end = fp.seek(0, io.SEEK_END)
        fp.seek(pos)
        return end


def check_expansion(z: zipfile.ZipFile, where: str, names: list[str] | None = None) -> None:
    """A ResdomError where the members ``names`` (all) of ``z`` declare more bytes together than the archive may
    unpack to (``limits.expansion_cap``): a zip bomb, or a damaged size field."""
    infos = z.infolist() if names is None else [z.getinfo(n) for n in names]
    declared = sum(i.file_size for i in infos)
    cap = expansion_cap(archive_size(z))
    if declared > cap:
        raise ResdomError(f"{where}: refused: its members unpack to {declared:,} bytes, more than this archive of "
                          f"{archive_size(z):,} bytes may ({cap:,}: {EXPANSION.value} times its size plus 64 MiB, at "
                          f"most {MEMBER_BYTES.env}); {_raise_hint(declared)}")


def _raise_hint(needed: int) -> str:
    return (f"if the file is genuine, raise {MEMBER_BYTES.env} and {EXPANSION.env} (e.g. "
            f"{MEMBER_BYTES.env}={max(needed, MEMBER_BYTES.value) + (1 << 20)})")


def read_member(z: zipfile.ZipFile, name: str, where: str, cap: int | None = None) -> bytearray:
    """The bytes of member ``name`` of ``z`` (a bytearray: no second copy of a large member): refused where it
    declares more than ``cap`` (default: what the archive may unpack to); read never past its declared size; a
    damaged member is a ResdomError naming ``where:name``."""
    label = f"{where}:{name}"
    try:
        info = z.getinfo(name)
    except KeyError:
        raise ResdomError(f"{label}: member missing") from None
    cap = expansion_cap(archive_size(z)) if cap is None else min(cap, MEMBER_BYTES.value)
    if info.file_size > cap:
        raise ResdomError(f"{label}: refused: it unpacks to {info.file_size:,} bytes, more than the {cap:,} this "
                          f"archive may (a crafted or damaged archive); {_raise_hint(info.file_size)}")
    if info.compress_type == zipfile.ZIP_LZMA:
        _check_lzma_dictionary(z, info, label)
    _charge_unpacked(info.compress_size, info.file_size, label)  # declared: never past it (below)
    out = bytearray()
    try:
        with z.open(info) as f:
            while chunk := f.read(CHUNK):
                out += chunk
                if len(out) > info.file_size:  # pragma: no cover - zipfile stops at the declared size
                    raise ResdomError(f"{label}: unpacks past its declared size")
    except ResdomError:
        raise
    except _ARCHIVE_ERRORS as e:
        raise _damaged(label, e) from None
    return out


LZMA_DICTIONARY = 64 * 1024 * 1024  # the largest dictionary an LZMA member may ask for (xz -9 uses 64 MiB)


def _check_lzma_dictionary(z: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> None:
    """An LZMA member's header names the dictionary its decoder allocates (up to 4 GiB, from a few bytes): refused
    past ``LZMA_DICTIONARY`` unless the member itself is that large."""
    fp = z.fp
    if fp is None:
        return
    pos = fp.tell()
    try:
        fp.seek(info.header_offset)
        local = fp.read(30)
        if len(local) < 30:
            return  # zipfile says what is wrong with the header
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        fp.seek(info.header_offset + 30 + name_len + extra_len)
        props = fp.read(9)  # version (2), size of the properties (2), lc/lp/pb (1), dictionary size (4)
    finally:
        fp.seek(pos)
    if len(props) == 9:
        dictionary = struct.unpack("<I", props[5:9])[0]
        if dictionary > max(LZMA_DICTIONARY, info.file_size):
            raise ResdomError(f"{label}: refused: its LZMA stream asks for a dictionary of {dictionary:,} bytes (at "
                              f"most {LZMA_DICTIONARY:,} for a member of {info.file_size:,} bytes; a crafted or "
                              "damaged archive)")


def gunzip(source: str | Path | bytes, where: str | None = None) -> bytes:
    """The unpacked bytes of a gzip file (a path or its bytes), refused past ``limits.expansion_cap`` of its size;
    a truncated or damaged stream is a ResdomError naming ``where``."""
    where = where or ("gzip data" if isinstance(source, (bytes, bytearray)) else str(source))
    fobj: BinaryIO
    if isinstance(source, (bytes, bytearray)):
        packed, fobj = len(source), io.BytesIO(source)
    else:
        refuse_special(source)
        try:
            packed, fobj = os.path.getsize(source), open(source, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            raise ResdomError(f"{where}: cannot read it ({e.strerror})") from None
    cap = expansion_cap(packed)
    out = bytearray()
    try:
        with fobj, gzip.GzipFile(fileobj=fobj) as g:
            while chunk := g.read(CHUNK):
                _charge_unpacked(packed if not out else 0, len(chunk), where)
                out += chunk
                if len(out) > cap:
                    raise ResdomError(f"{where}: refused: this gzip file of {packed:,} bytes unpacks to more than "
                                      f"{cap:,} bytes ({EXPANSION.value} times its size plus 64 MiB, at most "
                                      f"{MEMBER_BYTES.env}); {_raise_hint(len(out))}")
    except ResdomError:
        raise
    except EOFError:
        raise ResdomError(f"{where}: the gzip file is truncated (it ends before its data does); fetch or "
                          "compress it again") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as e:
        raise ResdomError(f"{where}: not a readable gzip file ({type(e).__name__}: {short(str(e))})") from None
    return bytes(out)


def read_bytes(path: str | Path, unpack_gz: bool = True) -> bytes:
    """A file's bytes (gzip unpacked by its ``.gz`` suffix, within bounds); a special file is refused."""
    refuse_special(path)
    if unpack_gz and str(path).lower().endswith(".gz"):
        return gunzip(path)
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None


# ---------------------------------------------------------------------------------------------------------------
# npz


def npy_array(data: bytes | bytearray, where: str) -> np.ndarray:
    """The array of one ``.npy`` record's bytes: its header parsed (no pickles, no object dtype) and its shape
    checked against the bytes present before the array is made (a view of ``data``, writable for a bytearray)."""
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"npy version {version}")
    except (ValueError, SyntaxError, TypeError, EOFError, KeyError) as e:
        raise ResdomError(f"{where}: not a readable array record ({short(str(e))})") from None
    if dtype.hasobject:
        raise ResdomError(f"{where}: refused: an array of Python objects (resdom reads no pickles)")
    if not all(isinstance(n, int) and n >= 0 for n in shape) or len(shape) > 32:
        raise ResdomError(f"{where}: malformed array shape {short(shape)}")
    count = 1
    for n in shape:
        count *= n
    offset = f.tell()
    needed = count * dtype.itemsize
    if needed > len(data) - offset:
        raise ResdomError(f"{where}: its header declares shape {short(shape)} ({needed:,} bytes) but the record holds "
                          f"{len(data) - offset:,}; the file is truncated or crafted")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=offset) if count else np.zeros(0, dtype=dtype)
    return array.reshape(shape, order="F" if fortran else "C")


def load_npz(source: str | Path | bytes, where: str | None = None) -> dict[str, np.ndarray]:
    """{name: array} of an ``.npz`` archive (a path or its bytes), every member bounded (``read_member``, the whole
    archive by ``check_expansion``) and parsed by ``npy_array``. Any damage is a ResdomError naming the member."""
    where = where or ("npz archive" if isinstance(source, (bytes, bytearray)) else str(source))
    with open_zip(source, where) as z:
        check_expansion(z, where)
        out = {}
        for info in z.infolist():
            if not info.filename or info.filename.endswith("/"):  # a folder, or a name a damaged header emptied
                continue
            data = read_member(z, info.filename, where)  # writable; the array is a view of it (no copy)
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            out[name] = npy_array(data, f"{where}:{info.filename}")
    return out


# ---------------------------------------------------------------------------------------------------------------
# YAML and JSON


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader within limits: at most ``YAML_ALIASES`` aliases, ``YAML_DEPTH`` levels of nesting, and
    ``YAML_NODES`` nodes as written (counted while they are composed) and once aliases are expanded (a 489-byte
    "billion laughs" document would expand to gigabytes wherever its value is walked). A breach is a ResdomError
    naming ``source`` and the line."""

    source = "YAML"

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._nodes = 0
        self._depth = 0

    def _refuse(self, what: str, limit: Limit) -> ResdomError:
        mark = self.peek_event().start_mark if self.check_event() else None  # type: ignore[no-untyped-call]
        line = f":{mark.line + 1}" if mark is not None else ""
        return ResdomError(f"{self.source}{line}: refused: {what} ({limit.env} raises the limit)")

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > YAML_ALIASES.value:
                raise self._refuse(f"more than {YAML_ALIASES.value:,} aliases (*name)", YAML_ALIASES)
        else:  # counted as composed: a long list without aliases is refused before it is all in memory
            self._nodes += 1
            if self._nodes > YAML_NODES.value:
                raise self._refuse(f"it holds more than {YAML_NODES.value:,} values", YAML_NODES)
        self._depth += 1
        if self._depth > YAML_DEPTH.value:
            raise self._refuse(f"nested more than {YAML_DEPTH.value} levels deep", YAML_DEPTH)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _charge_yaml(expanded_size(node, YAML_NODES.value, self.source), self.source)
        return node


def expanded_size(node: yaml.Node, limit: int, source: str) -> int:
    """The nodes of ``node`` with every alias expanded (shared nodes counted once per use); a ResdomError past
    ``limit``. Memoised per node, so the walk is linear in the document, not in its expansion."""
    sizes: dict[int, int] = {}

    def size(n: yaml.Node, depth: int) -> int:
        if id(n) in sizes:
            return sizes[id(n)]
        if depth > YAML_DEPTH.value + 2:  # pragma: no cover - compose_node refuses deeper documents
            raise ResdomError(f"{source}: refused: nested too deeply")
        total = 1
        if isinstance(n, yaml.SequenceNode):
            for child in n.value:
                total += size(child, depth + 1)
                if total > limit:
                    break
        elif isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                total += size(key, depth + 1) + size(value, depth + 1)
                if total > limit:
                    break
        if total > limit:
            line = n.start_mark.line + 1 if n.start_mark is not None else 0
            raise ResdomError(f"{source}:{line}: refused: its aliases expand to more than {limit:,} values "
                              f"({YAML_NODES.env} raises the limit)")
        sizes[id(n)] = total
        return total

    return size(node, 0)


def bounded_loader(base: type[yaml.SafeLoader] = BoundedSafeLoader, source: str = "YAML") -> type[BoundedSafeLoader]:
    """A ``BoundedSafeLoader`` subclass whose refusals name ``source`` (the file, or ``--set 'x=y'``)."""
    return type("Loader", (base,), {"source": source})


def load_yaml(text: str, source: str = "YAML", loader: type[BoundedSafeLoader] | None = None) -> Any:
    """``yaml.load`` with ``BoundedSafeLoader`` (or ``loader``, one of its subclasses), refusals naming ``source``.
    PyYAML's own errors (yaml.YAMLError) pass through for the caller to word."""
    cls = bounded_loader(loader or BoundedSafeLoader, source)
    try:
        return yaml.load(text, Loader=cls)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise ResdomError(f"{source}: refused: nested too deeply") from None


def load_json(text: str | bytes, source: str, fix: str = "",
              object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """``json.loads`` where invalid JSON, deep nesting (a RecursionError in ``json``) or memory exhaustion is a
    ResdomError naming ``source`` (ending with ``fix`` where given); ``object_pairs_hook``: ``json.loads``'s (a
    ResdomError it raises passes through)."""
    tail = f"; {fix}" if fix else ""
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ResdomError(f"{source}: not valid JSON ({short(str(e))}){tail}") from None
    except RecursionError:
        raise ResdomError(f"{source}: refused: JSON nested too deeply{tail}") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ResdomError(f"{source}: not valid JSON ({short(str(e))}){tail}") from None


def guarded(source: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, where a MemoryError or RecursionError (a reader meeting a crafted file past what the limits
    foresee) is a ResdomError naming ``source``: the last line of defence, never the first."""
    try:
        return fn()
    except MemoryError:
        raise ResdomError(f"{source}: refused: reading it needs more memory than there is (a crafted or damaged "
                          "file?)") from None
    except RecursionError:
        raise ResdomError(f"{source}: refused: nested too deeply (a crafted or damaged file?)") from None



# ---------------------------------------------------------------------------------------------------------------
# model descriptions


def check_model_description(fields: dict[str, Any], where: str, weights_bytes: int) -> None:
    """A ResdomError naming ``where`` when the model a description read from a file asks for (``model.json``) has,
    given the size of its weights file, more parameters than that file can hold (2 bytes a parameter at the least,
    ``limits.model_params``): checked before anything is built, so ``layers: 200000`` is one line, not gigabytes.
    A model past ``MODEL_BYTES`` in all is refused by its configuration already (``models.config``)."""
    lower, _ = model_params(fields)
    if 2 * lower > weights_bytes + (1 << 16):
        sizes = ", ".join(f"{k} {fields[k]!r}" for k in ("n_items", "max_len", "hidden", "layers") if k in fields)
        raise ResdomError(f"{where}: the model it describes ({short(sizes)}) has at least {lower:,} parameters, more "
                          f"than its weights file of {weights_bytes:,} bytes holds (a damaged or crafted description)")


# ---------------------------------------------------------------------------------------------------------------
# Parquet


@contextlib.contextmanager
def arrow_source(path: str | Path) -> Iterator[str | BinaryIO]:
    """``path`` as pyarrow (and pandas' Parquet reader) takes it: its text, or the file opened here where its name
    is no UTF-8 (Latin-1 bytes, held by Python with surrogates, which pyarrow cannot encode: such a file was "not a
    readable Parquet file (UnicodeEncodeError ...)", and its declared rows went unchecked)."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        with open(path, "rb") as f:
            yield f
        return
    yield text


def check_parquet(path: str | Path, columns: int | None = None) -> None:
    """A ResdomError naming ``path`` when a Parquet file's metadata declares more rows than its size may hold: at
    8 bytes a value (``columns`` read, default all), past ``EXPANSION`` times the file's size plus 64 MiB (a few KB
    of run-length-encoded pages can declare a billion rows). Metadata that cannot be read is left to the reader."""
    import pyarrow.parquet as pq

    refuse_special(path)
    try:
        with arrow_source(path) as source:
            meta = pq.read_metadata(source)
    except Exception:  # noqa: BLE001 - pyarrow raises many types; the reader words them
        return
    width = columns if columns is not None else max(meta.num_columns, 1)
    values = 8 * max(meta.num_rows, 0) * width
    size = os.path.getsize(path)
    cap = EXPANSION.value * size + EXPANSION_ALLOWANCE
    if values > cap:
        raise ResdomError(f"{path}: refused: this Parquet file of {size:,} bytes declares {meta.num_rows:,} rows, "
                          f"{values:,} bytes to read, more than {EXPANSION.value} times its size plus 64 MiB (a "
                          f"crafted or damaged file?); if it is genuine, raise {EXPANSION.env}")
