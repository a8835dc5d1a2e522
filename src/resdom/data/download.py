"""Finding a named data set's files: data folder, environment variable, user cache, then download.

Resolution order for each file of a registered data set (``registry.py``):

1. ``data_dir`` (``--data-dir``): a folder laid out like ``shared/data/raw`` (``bsarec/Beauty.txt``, ...);
   the file must be there;
2. ``$RESDOM_DATA_DIR``: the same layout; used where the file is there;
3. the user cache: ``$RESDOM_CACHE_DIR``, else ``$XDG_CACHE_HOME/resdom``, else ``~/.cache/resdom``;
4. download into the cache from ``$RESDOM_DOWNLOAD_BASE`` (default https://raw.githubusercontent.com)
   ``/<repository>/<commit>/<path>``: written to a temporary file, its sha256 checked, then renamed, so an
   interrupted or corrupted download never leaves a file that looks valid. A download is bounded in size
   (``RESDOM_MAX_DOWNLOAD_BYTES``) and in how long the server may stall; a cache that cannot take it (a full
   disk, a read-only folder) is named, not taken for a network failure.

Every file used is checked against the registry's sha256; a mismatch in a data folder is an error (pass the
file as a path to use a different version), a mismatch in the cache is replaced by a fresh download.

A ``WebFile`` (a fixed address outside GitHub, e.g. GroupLens) downloads from its address; under another
``$RESDOM_DOWNLOAD_BASE`` (a mirror, a test server) from ``<base>/<host>/<path>``. A ``ManualFile`` is never
downloaded: steps 1-3 look for it under its name (or an alternative name), its sha256 is checked where the
registry knows one, and where it is nowhere the error names the file, where to fetch it and the exact path to
put it at.
"""

from __future__ import annotations

import glob
import hashlib
import http.client
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from resdom.checks import arg
from resdom.data.registry import DEFAULT_BASE_URL, DataFile, DatasetSpec, ManualFile, RemoteFile
from resdom.errors import ResdomError
from resdom.io import file_mode, sha256_file
from resdom.limits import DOWNLOAD_BYTES, KIB

ENV_DATA_DIR = "RESDOM_DATA_DIR"
ENV_CACHE_DIR = "RESDOM_CACHE_DIR"
ENV_DOWNLOAD_BASE = "RESDOM_DOWNLOAD_BASE"
_CHUNK = 1 << 20
_STALE_PART_SECONDS = 3600  # a temporary file untouched this long is a killed download's
_STALL_BYTES = 64 * KIB  # what a server must send within the timeout (about 1 KB/s), or it has stalled


@dataclass(frozen=True)
class ResolvedFile:
    """A file on disk, where it was found (data-dir, env, cache, download) and its verified sha256."""

    path: Path
    origin: str
    sha256: str


def cache_dir() -> Path:
    """The user cache folder for downloads (not created here)."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "resdom"


def data_folders(data_dir: str | Path | None) -> dict[str, str | Path | None]:
    """Where registered data sets are read from, by what names each (``--data-dir``, ``$RESDOM_DATA_DIR``, the
    download cache): the inputs an output folder moved aside by --force may not hold (``rundir.check_output_inputs``).
    """
    return {"--data-dir": data_dir, f"${ENV_DATA_DIR}": os.environ.get(ENV_DATA_DIR) or None,
            "the download cache": cache_dir()}


def download_base() -> str:
    return os.environ.get(ENV_DOWNLOAD_BASE) or DEFAULT_BASE_URL


def resolve_dataset_files(spec: DatasetSpec, data_dir: str | Path | None = None) -> list[ResolvedFile]:
    """The local files of ``spec`` (in ``spec.files`` order), downloading into the cache where needed. A
    ``data_dir`` or $RESDOM_DATA_DIR that is a file is refused (the variable would be passed over in silence; a
    folder not made yet is where a file fetched by hand is to go)."""
    env = os.environ.get(ENV_DATA_DIR)
    given = (arg("data_dir", str(data_dir)), data_dir, "") if data_dir is not None else (
        f"{ENV_DATA_DIR}={env}", env, ", or unset it") if env else None  # --data-dir given: the variable is unread
    if given is not None and Path(given[1]).expanduser().exists() and not Path(given[1]).expanduser().is_dir():
        raise ResdomError(f"{given[0]}: not a folder (give a folder laid out like shared/data/raw{given[2]})")
    return [resolve_file(f, data_dir, spec.name) for f in spec.files]


def resolve_file(remote: DataFile, data_dir: str | Path | None = None, dataset: str | None = None) -> ResolvedFile:
    """One file, by the resolution order in the module docstring (``dataset``: its data set's name, for messages)."""
    if isinstance(remote, ManualFile):
        return _resolve_manual(remote, data_dir, dataset)
    if data_dir is not None:
        path = Path(data_dir).expanduser() / remote.local
        if not path.is_file():
            raise ResdomError(f"{path}: not found ({arg('data_dir')} must be laid out like shared/data/raw: "
                              f"{remote.local})")
        return ResolvedFile(path, "data-dir", _verified(path, remote))
    env = os.environ.get(ENV_DATA_DIR)
    if env:
        path = Path(env).expanduser() / remote.local
        if path.is_file():
            return ResolvedFile(path, "env", _verified(path, remote))
    cached = cache_dir() / remote.local
    if cached.is_file():
        digest = sha256_file(cached)
        if digest == remote.sha256:
            return ResolvedFile(cached, "cache", digest)
        print(f"resdom: cached {cached} has the wrong sha256; downloading it again", file=sys.stderr)
        # left in place until the verified download replaces it (another process may be replacing it now)
    download_file(remote.url(download_base()), cached, remote.sha256)
    return ResolvedFile(cached, "download", remote.sha256)


def _manual_folders(data_dir: str | Path | None) -> list[tuple[Path, str]]:
    """(folder, origin) where a ManualFile is looked for: ``data_dir`` alone, else $RESDOM_DATA_DIR, the cache."""
    if data_dir is not None:
        return [(Path(data_dir).expanduser(), "data-dir")]
    env = os.environ.get(ENV_DATA_DIR)
    return ([(Path(env).expanduser(), "env")] if env else []) + [(cache_dir(), "cache")]


def _resolve_manual(remote: ManualFile, data_dir: str | Path | None, dataset: str | None) -> ResolvedFile:
    """A file resdom does not download: the first of its names found in the folders of ``_manual_folders``."""
    folders = _manual_folders(data_dir)
    for folder, origin in folders:
        for name in remote.names:
            path = folder / name
            if path.is_file():
                return ResolvedFile(path, origin, _verified(path, remote) if remote.sha256 else sha256_file(path))
    target = folders[0][0] / remote.local
    others = [str(f / remote.local) for f, _ in folders[1:]]
    also = f" (or at {' or '.join(others)})" if others else ""
    names = ", ".join(Path(n).name for n in remote.alternatives)
    alt = f"; also accepted there: {names}" if names else ""
    what = f"data set {dataset!r}: " if dataset else ""
    raise ResdomError(
        f"{what}{target}: not found, and resdom does not download it ({remote.why}). Fetch {remote.fetch} and put it "
        f"at {target}{also}{alt}; then run the same command again"
    )


def _verified(path: Path, remote: DataFile) -> str:
    digest = sha256_file(path)
    if digest != remote.sha256:
        raise ResdomError(
            f"{path}: sha256 {digest} does not match the registered {remote.sha256} "
            f"({_short_upstream(remote)}); pass the file as a path to use it anyway"
        )
    return digest


def _short_upstream(remote: DataFile) -> str:
    if isinstance(remote, RemoteFile):
        return f"{remote.repository}@{remote.commit[:8]}:{remote.path}"
    return remote.upstream()


def download_file(url: str, dest: str | Path, sha256: str, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest``: temporary file beside it, sha256 check, then rename.

    On any failure (network, short read, checksum, a stalled or oversized transfer, a cache that cannot be
    written) the temporary file is removed and a ResdomError raised; ``dest`` is only ever the complete, verified
    file. ``timeout``: the seconds within which the server must send at least ``_STALL_BYTES`` (a server that
    sends a byte now and then has stalled); ``limits.DOWNLOAD_BYTES`` bounds the file's size.
    """
    dest = Path(dest)
    created = _missing_parents(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a folder of the path should be
        raise ResdomError(f"{dest.parent}: cannot be made, a file stands in its path (the download folder is "
                          f"{ENV_CACHE_DIR} or the user cache; point {ENV_CACHE_DIR} at a folder)") from None
    except OSError as e:  # no permission, a read-only file system
        raise ResdomError(_cannot_write(dest.parent, e)) from None
    print(f"resdom: downloading {url}", file=sys.stderr)
    _remove_stale_parts(dest)
    tmp: str | None = None
    ok = False
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        with os.fdopen(fd, "wb") as f:
            digest, content_type = _fetch(url, f, timeout)
            f.flush()
            os.fsync(f.fileno())
        if digest != sha256:
            page = " (the server sent an HTML page, not the file)" if content_type == "text/html" else ""
            raise ResdomError(f"{url}: downloaded file has sha256 {digest}, expected {sha256}{page}; nothing was kept")
        os.chmod(tmp, file_mode())  # mkstemp's 0600 -> what the user's umask gives any new file
        os.replace(tmp, dest)
        ok = True
    except _NetworkError as e:
        raise ResdomError(
            f"{url}: download failed ({e}); nothing was kept. Offline? Put the files in a folder laid out like "
            f"shared/data/raw and pass {arg('data_dir')} or set {ENV_DATA_DIR}"
        ) from None
    except OSError as e:  # the local side: a full disk, a read-only cache, a folder where the file goes
        raise ResdomError(_cannot_write(dest, e)) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if not ok:
            _remove_empty(created)
    return dest


class _NetworkError(Exception):
    """What the server or the connection did wrong (its ``str``: the cause, for the message)."""


def _fetch(url: str, f: BinaryIO, timeout: float) -> tuple[str, str]:
    """Write the body of ``url`` to ``f`` -> (its sha256, the response's content type). The server's failures are a
    ``_NetworkError``, the local file's an OSError, a body past ``limits.DOWNLOAD_BYTES`` or shorter than it
    declared a ResdomError naming ``url``."""
    limit = DOWNLOAD_BYTES.value
    h = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            declared = response.headers.get("Content-Length")
            expected = int(declared) if declared is not None and declared.strip().isdigit() else None
            if expected is not None and expected > limit:
                raise ResdomError(_too_large(url, f"declares {expected:,} bytes", limit))
            content_type = response.headers.get_content_type()
            window_start, window_bytes = time.monotonic(), 0
            while chunk := response.read1(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise ResdomError(_too_large(url, f"sends more than {limit:,} bytes", limit))
                _write(f, chunk)
                h.update(chunk)
                window_bytes += len(chunk)
                if time.monotonic() - window_start >= timeout:
                    if window_bytes < _STALL_BYTES:
                        raise _NetworkError(f"stalled: {window_bytes} bytes in {timeout:g} s, {size:,} in all")
                    window_start, window_bytes = time.monotonic(), 0
    except _WriteError as e:
        raise e.error from None
    except (urllib.error.URLError, http.client.HTTPException, ValueError, OSError) as e:  # OSError: a reset, a timeout
        # one line: urllib's message of a redirect loop spans two
        raise _NetworkError(f"{type(e).__name__}: {' '.join(str(e).split())}") from None
    if expected is not None and size != expected:
        raise ResdomError(f"{url}: download interrupted ({size:,} of {expected:,} bytes); nothing was kept")
    return h.hexdigest(), content_type


class _WriteError(Exception):
    """An OSError of the local file while the body is read: kept apart from the connection's OSErrors."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _write(f: BinaryIO, chunk: bytes) -> None:
    try:
        f.write(chunk)
    except OSError as e:
        raise _WriteError(e) from None


def _remove_stale_parts(dest: Path) -> None:
    """Remove the temporary files of downloads of ``dest`` that were killed (SIGTERM, SIGKILL: no ``finally`` ran):
    those untouched for ``_STALE_PART_SECONDS``. A live download writes at least every timeout (else it has
    stalled and ends), so another process's download in progress is left alone."""
    cutoff = time.time() - _STALE_PART_SECONDS
    for part in dest.parent.glob(f".{glob.escape(dest.name)}.*.part"):
        try:
            if part.stat().st_mtime < cutoff:
                part.unlink()
        except OSError:  # gone already, or not ours to remove: the download goes on beside it
            continue


def _too_large(url: str, what: str, limit: int) -> str:
    return (f"{url}: refused: the server {what}, more than a download may hold ({DOWNLOAD_BYTES.env}={limit:,}); "
            f"nothing was kept. If the file is genuine, raise {DOWNLOAD_BYTES.env}")


def _cannot_write(path: Path, e: OSError) -> str:
    """A download the cache cannot take (a full disk, no permission, a read-only file system), naming ``path``."""
    return (f"{path}: cannot write the download ({e.strerror or e}); nothing was kept. Point {ENV_CACHE_DIR} at a "
            f"folder you can write with room for it, or put the files in a folder laid out like shared/data/raw "
            f"and pass {arg('data_dir')} or set {ENV_DATA_DIR}")


def _missing_parents(path: Path) -> list[Path]:
    """The folders above ``path`` that do not exist yet, deepest first (what ``mkdir(parents=True)`` creates)."""
    out = []
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        out.append(parent)
        parent = parent.parent
    return out


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) where they are empty: a failed download leaves no empty cache folder."""
    for folder in folders:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:  # not empty: another process put a file there
            break
