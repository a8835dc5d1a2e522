"""Atomic file output: write to a temporary file beside the target, then rename.

An interrupted run never leaves a half-written file that looks valid. ``directory_lock`` keeps two processes
from writing one run directory at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from resdom.errors import ResdomError


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


@contextmanager
def directory_lock(directory: str | Path, what: str) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``directory/.lock`` (the OS drops it when the process ends, however).

    Another process holding it is a ResdomError naming the directory. A no-op where ``fcntl`` is missing.
    """
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResdomError(f"{directory}: another process is already {what} there; wait for it to finish "
                              "or choose another directory") from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def is_locked(directory: str | Path) -> bool:
    """True while another process holds ``directory/.lock`` (``directory_lock``): e.g. a trainer is running there."""
    try:
        import fcntl
    except ImportError:  # Windows
        return False
    lock = Path(directory) / ".lock"
    if not lock.is_file():
        return False
    with open(lock, "a") as f:
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
