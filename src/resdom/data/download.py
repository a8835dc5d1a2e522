"""Finding a named data set's files: data folder, environment variable, user cache, then download.

Resolution order for each file of a registered data set (``registry.py``):

1. ``data_dir`` (``--data-dir``): a folder laid out like ``shared/data/raw`` (``bsarec/Beauty.txt``, ...);
   the file must be there;
2. ``$RESDOM_DATA_DIR``: the same layout; used where the file is there;
3. the user cache: ``$RESDOM_CACHE_DIR``, else ``$XDG_CACHE_HOME/resdom``, else ``~/.cache/resdom``;
4. download into the cache from ``$RESDOM_DOWNLOAD_BASE`` (default https://raw.githubusercontent.com)
   ``/<repository>/<commit>/<path>``: written to a temporary file, its sha256 checked, then renamed, so an
   interrupted or corrupted download never leaves a file that looks valid.

Every file used is checked against the registry's sha256; a mismatch in a data folder is an error (pass the
file as a path to use a different version), a mismatch in the cache is replaced by a fresh download.

A ``WebFile`` (a fixed address outside GitHub, e.g. GroupLens) downloads from its address; under another
``$RESDOM_DOWNLOAD_BASE`` (a mirror, a test server) from ``<base>/<host>/<path>``. A ``ManualFile`` is never
downloaded: steps 1-3 look for it under its name (or an alternative name), its sha256 is checked where the
registry knows one, and where it is nowhere the error names the file, where to fetch it and the exact path to
put it at.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from resdom.checks import arg
from resdom.data.registry import DEFAULT_BASE_URL, DataFile, DatasetSpec, ManualFile, RemoteFile
from resdom.errors import ResdomError
from resdom.io import file_mode, sha256_file

ENV_DATA_DIR = "RESDOM_DATA_DIR"
ENV_CACHE_DIR = "RESDOM_CACHE_DIR"
ENV_DOWNLOAD_BASE = "RESDOM_DOWNLOAD_BASE"
_CHUNK = 1 << 20


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
        cached.unlink()
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

    On any failure (network, short read, checksum) the temporary file is removed and a ResdomError raised;
    ``dest`` is only ever the complete, verified file.
    """
    dest = Path(dest)
    created = _missing_parents(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a folder of the path should be
        raise ResdomError(f"{dest.parent}: cannot be made, a file stands in its path (the download folder is "
                          f"{ENV_CACHE_DIR} or the user cache; point {ENV_CACHE_DIR} at a folder)") from None
    print(f"resdom: downloading {url}", file=sys.stderr)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    ok = False
    try:
        h = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=timeout) as response:
            expected = response.headers.get("Content-Length")
            while chunk := response.read(_CHUNK):
                f.write(chunk)
                h.update(chunk)
                size += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        if expected is not None and size != int(expected):
            raise ResdomError(f"{url}: download interrupted ({size} of {expected} bytes); nothing was kept")
        if h.hexdigest() != sha256:
            raise ResdomError(
                f"{url}: downloaded file has sha256 {h.hexdigest()}, expected {sha256}; nothing was kept"
            )
        os.chmod(tmp, file_mode())  # mkstemp's 0600 -> what the user's umask gives any new file
        os.replace(tmp, dest)
        ok = True
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
        raise ResdomError(
            f"{url}: download failed ({type(e).__name__}: {e}); nothing was kept. Offline? Put the files in a "
            f"folder laid out like shared/data/raw and pass {arg('data_dir')} or set {ENV_DATA_DIR}"
        ) from None
    finally:
        Path(tmp).unlink(missing_ok=True)
        if not ok:
            _remove_empty(created)
    return dest


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
