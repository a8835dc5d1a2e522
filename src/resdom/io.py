"""Atomic file output: write to a temporary file beside the target, then rename.

An interrupted run never leaves a half-written file that looks valid. ``directory_lock`` keeps two processes
from writing one run directory at once.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Literal

from resdom.bounded import special_kind
from resdom.errors import ResdomError
from resdom.names import metric_key


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# a write the system stops for room: a full disk, a quota, a file size limit (ulimit -f: Python ignores SIGXFSZ,
# so the write fails with EFBIG)
NO_SPACE = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})


NO_WRITE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})  # a folder the user may not write in


def no_space_message(path: str | Path | None, code: int | None = errno.ENOSPC) -> str:
    """The one line for a write stopped with ``code`` (one of ``NO_SPACE``)."""
    what = ("file too large for this process's file size limit (ulimit -f) or the filesystem; raise the limit or "
            "write elsewhere" if code == errno.EFBIG else "no space left on device; free space")
    return f"{path or 'output'}: {what} and rerun (the run resumes: a training run continues from its last saved epoch)"


# one warnings_filter block at a time in this process (warnings_filter)
_WARNINGS = threading.RLock()


@contextmanager
def warnings_filter(action: Literal["error", "ignore", "always", "default", "module", "once"],
                    category: type[Warning] = Warning, message: str = "") -> Iterator[None]:
    """``warnings.catch_warnings()`` with ``filterwarnings(action, message, category)`` (``message``: a regular
    expression the warning's text starts with; "": every warning), one such block at a time in the process.
    catch_warnings saves the process's filters on entry and puts that copy back on exit: two blocks overlapping in
    two threads (two ``resdom.fit`` or ``prepare_split`` at once) each put back the copy it saved, the second one with
    the first one's filter in it, so "ignore every warning" (or "ParserWarning is an error") stayed installed for
    the rest of the caller's process."""
    with _WARNINGS, warnings.catch_warnings():
        warnings.filterwarnings(action, message, category)  # message "": every one, as simplefilter
        yield


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """A full disk (ENOSPC, or a quota: EDQUOT, or a file size limit: EFBIG) while writing ``path`` -> a ResdomError
    naming it."""
    try:
        yield
    except OSError as e:
        if e.errno in NO_SPACE:
            raise ResdomError(no_space_message(path, e.errno)) from None
        if e.errno in NO_WRITE:  # the temporary file beside ``path`` is what the system names: name ``path``
            raise ResdomError(f"{path}: {e.strerror} (cannot write in {Path(path).parent})") from None
        raise


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file ([] where absent; a torn line, as a kill leaves, is skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    # a damaged line is skipped like a torn one
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to a temporary ``.NAME.*.tmp`` beside ``path``, then rename it; a full disk is a ResdomError
    and leaves ``path`` as it was (the temporary file is removed)."""
    atomic_write_files({Path(path): data})


def not_a_file_to_replace(path: str | Path) -> str | None:
    """Why ``path`` may not be written by renaming a new file onto it, or None: a device, a FIFO or a socket (through
    links: ``/dev/null``, a named pipe), a link in /dev or any path in /proc (``/dev/stdout``, ``/proc/self/fd/1``):
    the rename would replace the system's node or link itself (as root, /dev/null became a regular file)."""
    kind = special_kind(path)
    if kind is not None:
        return f"{kind}, not a regular file"
    where = Path(os.path.abspath(path)).parts[1:2]
    if where == ("proc",) or Path(os.path.realpath(path)).parts[1:2] == ("proc",) or (
            where == ("dev",) and os.path.islink(path)):  # /dev/shm/FILE is a file like any other
        return "a link of the system (standard output, a descriptor), not a regular file"
    return None


def refuse_unreplaceable(path: Path) -> None:
    """A ResdomError where ``path`` is no file to replace by a rename (``not_a_file_to_replace``), before anything
    is written: the one check of ``atomic_write_files`` and ``atomic_stream``."""
    if (why := not_a_file_to_replace(path)) is not None:
        raise ResdomError(f"{path}: {why}; resdom writes each output whole, as a new file renamed into place, "
                          "which would replace it; give a file name")


def atomic_write_files(files: dict[Path, bytes]) -> None:
    """``atomic_write_bytes`` for files that belong together (weights and their sidecar): every temporary file is
    written before the first rename, so a full disk leaves all of them as they were. A path that is no file to
    replace (``not_a_file_to_replace``) is a ResdomError before anything is written."""
    for path in files:
        refuse_unreplaceable(path)
    done: dict[Path, str] = {}
    made: list[Path] = []  # the folders made for the files, outermost first: removed again where the write fails
    renamed = False
    try:
        for path, data in files.items():
            with writing(path):
                made += _missing_folders(path.parent)
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, done[path] = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(done[path], file_mode())  # mkstemp makes 0600: colleagues could not read the report
        for path, tmp in done.items():
            _rename_into_place(tmp, path)
        renamed = True
    finally:
        for tmp in done.values():
            Path(tmp).unlink(missing_ok=True)  # those not renamed
        if not renamed:  # a report's figures/ and tables/ left empty by a full disk were not a report's to rerun
            for folder in reversed(made):
                with contextlib.suppress(OSError):  # one holding a file (renamed, or another writer's) stays
                    folder.rmdir()


def _rename_into_place(tmp: str, path: Path) -> None:
    """``os.replace(tmp, path)``; its error names ``path``, the file the user asked for: a folder in its place (a
    diagnose of a run whose RUN/diagnostics/hrli.json is a folder) said ".hrli.json.aced04nr.tmp: Is a directory",
    a temporary name the user never gave and that is gone by the time they read it."""
    try:
        os.replace(tmp, path)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those above it that do not exist yet, outermost first (what ``mkdir(parents=True)`` makes)."""
    missing: list[Path] = []
    while not folder.exists() and folder.parent != folder:
        missing.insert(0, folder)
        folder = folder.parent
    return missing


@contextmanager
def atomic_stream(path: str | Path) -> Iterator[BinaryIO]:
    """``atomic_write_bytes`` for output made piece by piece (``resdom recommend``'s lists, any size): a binary file
    to write into, a temporary ``.NAME.*.tmp`` beside ``path``, renamed onto it when the block ends without an
    error; an error or Ctrl-C in the block removes it and leaves ``path`` as it was, and a full disk is a
    ResdomError naming ``path``. Memory: what the caller holds of one piece, not the whole file."""
    path = Path(path)
    refuse_unreplaceable(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with writing(path):
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, file_mode())  # mkstemp makes 0600: colleagues could not read the file
            _rename_into_place(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # not renamed: an error, or Ctrl-C, in the block


def safetensors_bytes(tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> bytes:
    """A safetensors file's content, for ``atomic_write_*`` (safetensors' own file writer reports a full disk as
    an error of its own type, without errno)."""
    from safetensors.torch import save

    return save(tensors, metadata=metadata)


def is_temporary(name: str) -> bool:
    """Whether a file name is a writer's temporary: ``.NAME.*.tmp`` (``atomic_write_*``'s) or ``.tmp*``; never a
    result, whatever a killed writer left of it."""
    return name.startswith(".tmp") or (name.startswith(".") and name.endswith(".tmp"))


def remove_temporaries(directory: str | Path) -> list[Path]:
    """Delete the temporary files an interrupted (killed) writer left in ``directory`` (``is_temporary``); returns
    them. Call it only while no other process writes there."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = sorted(p for p in directory.iterdir() if is_temporary(p.name) and p.is_file())
    for p in found:
        p.unlink(missing_ok=True)
    return found


def text_bytes(text: str) -> bytes:
    """``text`` as UTF-8, a path's undecodable bytes (``os.fsdecode``'s surrogates: a folder named in Latin-1, or
    any name where Python's file system encoding is ASCII) written back as the bytes they stand for: a report or
    log quoting such a path was a UnicodeEncodeError traceback."""
    return text.encode("utf-8", "surrogateescape")


_LINE_END_OUTSIDE_QUOTES = re.compile(r'("[^"]*")|\r\n')


def csv_text(write: Callable[[str], str]) -> str:
    """The CSV text ``write(lineterminator)`` gives (a frame's ``to_csv``, a ``csv.writer``'s) with ``\\n`` line
    ends and every field holding a carriage return quoted: Python's CSV writers quote only the characters of their
    line terminator, so with ``\\n`` an id ``a<CR>b`` went out bare and every reader (pandas, the csv module, a
    spreadsheet) split the row there. Text without a carriage return is written once, as before; otherwise it is
    written with ``\\r\\n`` (which quotes such a field) and the line ends outside quotes made ``\\n``."""
    text = write("\n")
    if "\r" not in text:
        return text
    return _LINE_END_OUTSIDE_QUOTES.sub(lambda m: m.group(1) or "\n", write("\r\n"))


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text_bytes(text))


def json_bytes(obj: Any) -> bytes:
    """``obj`` as the indented, key-sorted JSON text (UTF-8) every resdom JSON file holds (``json_order``)."""
    return (json.dumps(json_order(obj), indent=2, default=_json_default) + "\n").encode("utf-8")


def file_mode() -> int:
    """The permission bits a new file gets from the user's umask (``0o666 & ~umask``), as ``open()`` would."""
    return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask can only be read by setting it, racing other threads)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def json_order(obj: Any) -> Any:
    """``obj`` with every mapping's keys in ``metric_key`` order (dicts, lists and tuples are rebuilt), so files
    list metrics in one order whatever order they were computed in."""
    if isinstance(obj, dict):
        return {k: json_order(obj[k]) for k in sorted(obj, key=metric_key)}
    if isinstance(obj, (list, tuple)):
        return [json_order(v) for v in obj]
    return obj


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_bytes(path, json_bytes(obj))


LOCK = ".lock"  # the file in a folder that ``directory_lock`` locks


@contextmanager
def directory_lock(directory: str | Path, what: str, other: str = "choose another directory") -> Iterator[None]:
    """Hold an exclusive advisory lock on ``directory/.lock`` (the OS drops it when the process ends, however).

    Another process holding it is a ResdomError naming the directory (and ``other``: what else the user can do). A
    no-op where ``fcntl`` is missing.
    """
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    directory = Path(directory)
    try:  # a folder one may not write in (a colleague's run, a read-only copy) named as such, not as its lock file
        directory.mkdir(parents=True, exist_ok=True)
        lock = open(directory / LOCK, "a")  # noqa: SIM115 (closed by the with below)
    except OSError as e:
        if e.errno not in NO_WRITE or e.filename is None:
            raise
        where = "it" if Path(e.filename) == directory / LOCK else Path(e.filename).parent
        raise ResdomError(f"{directory}: {e.strerror} (cannot write in {where})") from None
    with lock as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResdomError(f"{directory}: another process is already {_holding(directory / LOCK, what)} there; "
                              f"wait for it to finish or {other}") from None
        try:
            f.truncate(0)  # what the holder does there, for a refused command to name (an import, not "training")
            f.write(f"{what}\n")
            f.flush()
        except OSError:
            pass  # a lock file it may not write: the lock holds all the same
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _holding(lock: Path, default: str) -> str:
    """What the process holding ``lock`` said it does there (``directory_lock``'s ``what``); ``default`` where it
    has not said yet or says something else than a few words."""
    try:
        with open(lock, "rb") as f:
            text = f.read(64).decode("ascii", "replace").strip()
    except OSError:
        return default
    return text if text and len(text) < 40 and all(c.isalpha() or c == " " for c in text) else default


def is_locked(directory: str | Path) -> bool:
    """True while another process holds ``directory/.lock`` (``directory_lock``): e.g. a trainer is running there."""
    try:
        import fcntl
    except ImportError:  # Windows
        return False
    lock = Path(directory) / LOCK
    if not lock.is_file():
        return False
    try:  # read-only: a reader of a run it may not write (a colleague's, a read-only copy) asks too
        f = open(lock, "rb")
    except OSError:  # a lock file it may not read: nobody it could tell about
        return False
    with f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return False


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
