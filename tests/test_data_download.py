"""Registry resolution and download against a local HTTP server on 127.0.0.1 (no network)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from resdom.data.download import ENV_CACHE_DIR, ENV_DATA_DIR, ENV_DOWNLOAD_BASE, download_file, resolve_dataset_files
from resdom.data.prepare import load_prepared
from resdom.data.registry import DATASETS, DatasetSpec, RemoteFile
from resdom.errors import ResdomError

CONTENT = b"1 1 2 3 4 5\n2 1 2 3 4 5\n3 1 2 3 4 5\n4 1 2 3 4 5\n5 1 2 3 4 5\n"
SPEC = DatasetSpec("tiny", "user-lines", (
    RemoteFile("tiny/Tiny.txt", "owner/repo", "c" * 40, "data/Tiny.txt", hashlib.sha256(CONTENT).hexdigest()),
), "test")


class Server:
    """Serves ``routes[url_path]``: bytes, or (mode, bytes): "truncate" promises more bytes than it sends, "trickle"
    sends a byte every 50 ms, "no-length" sends without a Content-Length (to the end of the connection), "html"
    sends as text/html, "bad-length" with an unreadable Content-Length, "loop" redirects to itself; an int is
    that status."""

    def __init__(self) -> None:
        self.routes: dict[str, object] = {}
        self.hits: list[str] = []
        routes, hits = self.routes, self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                hits.append(self.path)
                body = routes.get(self.path)
                if body is None or isinstance(body, int):
                    self.send_error(body or 404)
                    return
                if isinstance(body, tuple) and body[0] == "loop":
                    self.send_response(302)
                    self.send_header("Location", self.path)
                    self.end_headers()
                    return
                self.send_response(200)
                if isinstance(body, tuple):
                    self.send_tuple(*body)
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def send_tuple(self, mode: str, data: bytes) -> None:
                length = {"truncate": str(len(data) + 1000), "bad-length": "many", "no-length": None}.get(
                    mode, str(len(data)))
                if length is not None:
                    self.send_header("Content-Length", length)
                if mode == "html":
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                self.end_headers()
                self.close_connection = True
                if mode == "truncate":  # interrupted transfer: promise len + 1000, send half, close
                    data = data[: len(data) // 2]
                if mode == "trickle":
                    for i in range(len(data)):
                        self.wfile.write(data[i: i + 1])
                        self.wfile.flush()
                        time.sleep(0.05)
                    return
                self.wfile.write(data)
                self.wfile.flush()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url_path(self, remote: RemoteFile) -> str:
        return remote.url("")


@pytest.fixture
def server(monkeypatch, tmp_path) -> Iterator[Server]:
    s = Server()
    monkeypatch.setenv(ENV_DOWNLOAD_BASE, s.base)
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(ENV_DATA_DIR, raising=False)
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # the test server is local; a proxy must not be asked
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_download_verifies_then_caches(server: Server, tmp_path: Path) -> None:
    remote = SPEC.files[0]
    server.routes[server.url_path(remote)] = CONTENT
    (got,) = resolve_dataset_files(SPEC)
    assert got.origin == "download" and got.path == tmp_path / "cache" / "tiny" / "Tiny.txt"
    assert got.path.read_bytes() == CONTENT and leftovers(tmp_path / "cache") == ["Tiny.txt"]
    assert server.hits == ["/owner/repo/" + "c" * 40 + "/data/Tiny.txt"]
    (again,) = resolve_dataset_files(SPEC)
    assert again.origin == "cache" and len(server.hits) == 1


def test_corrupted_download_leaves_nothing(server: Server, tmp_path: Path) -> None:
    server.routes[server.url_path(SPEC.files[0])] = CONTENT.replace(b"5\n", b"6\n", 1)
    with pytest.raises(ResdomError, match="downloaded file has sha256 .* expected .*nothing was kept"):
        resolve_dataset_files(SPEC)
    assert leftovers(tmp_path / "cache") == []


def test_interrupted_download_leaves_nothing(server: Server, tmp_path: Path) -> None:
    server.routes[server.url_path(SPEC.files[0])] = ("truncate", CONTENT)
    with pytest.raises(ResdomError, match="nothing was kept"):
        resolve_dataset_files(SPEC)
    assert leftovers(tmp_path / "cache") == []


def test_missing_upstream_and_offline(server: Server, tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ResdomError, match="HTTP Error 404.*pass data_dir or set"):
        resolve_dataset_files(SPEC)
    monkeypatch.setenv(ENV_DOWNLOAD_BASE, "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(ResdomError, match="download failed"):
        download_file(SPEC.files[0].url("http://127.0.0.1:9"), tmp_path / "x" / "f.txt", SPEC.files[0].sha256)
    assert leftovers(tmp_path / "x") == []


def test_a_file_in_the_download_path_is_one_line(tmp_path: Path) -> None:
    """RESDOM_CACHE_DIR naming a file: was NotADirectoryError's traceback, before any network."""
    afile = tmp_path / "cache"
    afile.write_text("")
    with pytest.raises(ResdomError, match=r"cache/tiny: cannot be made, a file stands in its path .*RESDOM_CACHE_DIR"):
        download_file("http://127.0.0.1:9/never", afile / "tiny" / "Tiny.txt", "0" * 64)
    assert afile.read_text() == ""


def test_wrong_cached_file_is_downloaded_again(server: Server, tmp_path: Path) -> None:
    server.routes[server.url_path(SPEC.files[0])] = CONTENT
    bad = tmp_path / "cache" / "tiny" / "Tiny.txt"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"1 2 3\n")
    (got,) = resolve_dataset_files(SPEC)
    assert got.origin == "download" and bad.read_bytes() == CONTENT


def test_resolution_order(server: Server, tmp_path: Path, monkeypatch) -> None:
    server.routes[server.url_path(SPEC.files[0])] = CONTENT
    explicit, env = tmp_path / "explicit", tmp_path / "env"
    for d in (explicit, env):
        (d / "tiny").mkdir(parents=True)
        (d / "tiny" / "Tiny.txt").write_bytes(CONTENT)
    monkeypatch.setenv(ENV_DATA_DIR, str(env))
    assert resolve_dataset_files(SPEC, explicit)[0].origin == "data-dir"
    assert resolve_dataset_files(SPEC)[0].origin == "env"
    (env / "tiny" / "Tiny.txt").unlink()  # missing under $RESDOM_DATA_DIR: falls through to cache / download
    assert resolve_dataset_files(SPEC)[0].origin == "download"
    assert server.hits  # only now
    (explicit / "tiny" / "Tiny.txt").unlink()  # an explicit --data-dir must hold the file
    with pytest.raises(ResdomError, match=r"explicit/tiny/Tiny\.txt: not found"):
        resolve_dataset_files(SPEC, explicit)
    (explicit / "tiny" / "Tiny.txt").write_bytes(CONTENT + b"6 1 2 3 4 5\n")
    with pytest.raises(ResdomError, match="does not match the registered"):
        resolve_dataset_files(SPEC, explicit)
    # a file where a folder is meant: the variable was passed over without a word, --data-dir said "not found"
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ResdomError, match=r"^data_dir='.*afile': not a folder \(give a folder laid out like"):
        resolve_dataset_files(SPEC, afile)
    monkeypatch.setenv(ENV_DATA_DIR, str(afile))
    with pytest.raises(ResdomError, match=r"^RESDOM_DATA_DIR=.*afile: not a folder .*, or unset it\)$"):
        resolve_dataset_files(SPEC)
    (env / "tiny" / "Tiny.txt").write_bytes(CONTENT)
    assert resolve_dataset_files(SPEC, env)[0].origin == "data-dir"  # --data-dir given: the variable is not read


@pytest.mark.slow
def test_registered_files_served_like_raw_githubusercontent(server: Server, shared_raw: Path, tmp_path) -> None:
    """Serve shared/data/raw under <repository>/<commit>/<path>; 'lastfm' and 'ml-100k' download and verify."""
    for name in ("lastfm", "ml-100k"):
        for remote in DATASETS[name].files:
            server.routes[server.url_path(remote)] = (shared_raw / remote.local).read_bytes()
    _, manifest = load_prepared("lastfm")
    assert [manifest["dataset"][k] for k in ("users", "items", "interactions")] == [1090, 3646, 52551]
    assert manifest["source"]["files"][0]["origin"] == "download"
    assert manifest["source"]["files"][0]["sha256"] == DATASETS["lastfm"].files[0].sha256
    # a corrupted copy of a real file: refused, nothing cached
    remote = DATASETS["ml-100k"].files[0]
    server.routes[server.url_path(remote)] = (shared_raw / remote.local).read_bytes()[:-10] + b"0000000000"
    with pytest.raises(ResdomError, match="sha256"):
        load_prepared("ml-100k")
    assert not (tmp_path / "cache" / remote.local).exists()
    assert leftovers(tmp_path / "cache" / "ml-100k") == []


def test_web_file_downloads_from_its_address_under_a_mirror_base(server: Server, tmp_path: Path) -> None:
    """A WebFile (a fixed address outside GitHub, e.g. GroupLens's ml-1m.zip) is fetched from <base>/<host>/<path>
    under $RESDOM_DOWNLOAD_BASE and checked against its sha256, like a repository file."""
    from resdom.data.registry import WebFile

    web = DatasetSpec("web", "user-lines", (
        WebFile("web/Tiny.txt", "https://example.org/data/Tiny.txt", hashlib.sha256(CONTENT).hexdigest()),), "t")
    server.routes["/example.org/data/Tiny.txt"] = CONTENT
    (got,) = resolve_dataset_files(web)
    assert got.origin == "download" and got.path.read_bytes() == CONTENT
    assert server.hits == ["/example.org/data/Tiny.txt"]
    server.routes["/example.org/data/Tiny.txt"] = CONTENT + b"x"
    got.path.unlink()
    with pytest.raises(ResdomError, match="downloaded file has sha256"):
        resolve_dataset_files(web)


def test_download_names_what_it_cannot_fetch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`resdom data download synthetic` was 'unknown data set' followed by a list that named synthetic."""
    from cli_helpers import one_line_error, run_cli

    code, _, err = run_cli(capsys, "data", "download", "synthetic")
    one_line_error(code, err, "'synthetic' is generated in memory", "nothing to download")
    code, _, err = run_cli(capsys, "data", "download", "beuaty")
    line = one_line_error(code, err, "unknown data set 'beuaty' (did you mean beauty?); registered: beauty,",
                          "(and synthetic, generated)")
    assert ", synthetic," not in line
    code, _, err = run_cli(capsys, "data", "download", "BEAUTY")  # a name in other case: the name meant
    one_line_error(code, err, "unknown data set 'BEAUTY' (did you mean beauty?)")
    code, _, err = run_cli(capsys, "data", "stats", "Beauty-TS")
    one_line_error(code, err, "unknown source 'Beauty-TS' (did you mean beauty-ts?)")


@pytest.mark.parametrize(("served", "message"), [
    (500, r"download failed \(HTTPError: HTTP Error 500"),
    (("loop", b""), r"download failed \(HTTPError: HTTP Error 302: .*infinite loop"),
    (("html", b"<html>Rate limited</html>"), r"downloaded file has sha256 .* \(the server sent an HTML page, not "
                                             r"the file\); nothing was kept$"),
    (("trickle", CONTENT), r"download failed \(stalled: [0-9]+ bytes in 0.3 s, [0-9]+ in all\); nothing was kept"),
])
def test_a_server_that_fails_is_one_line_naming_the_url(server: Server, tmp_path: Path, served, message) -> None:
    """An HTML error page sent with status 200 said only 'sha256 ... expected ...'; a server sending a byte now and
    then (never idle for the whole timeout) held the download for ever."""
    remote = SPEC.files[0]
    server.routes[server.url_path(remote)] = served
    dest = tmp_path / "cache" / "tiny" / "Tiny.txt"
    with pytest.raises(ResdomError, match=message) as e:
        download_file(remote.url(server.base), dest, remote.sha256, timeout=0.3)
    assert str(e.value).startswith(f"{remote.url(server.base)}: ") and "\n" not in str(e.value)
    assert leftovers(tmp_path / "cache") == []
    server.routes[server.url_path(remote)] = CONTENT  # the retry works
    assert download_file(remote.url(server.base), dest, remote.sha256).read_bytes() == CONTENT


def test_a_download_is_bounded_in_size(server: Server, tmp_path: Path, monkeypatch) -> None:
    """A server sending without end (no Content-Length) filled the disk before the sha256 could refuse it."""
    remote = SPEC.files[0]
    url, dest = remote.url(server.base), tmp_path / "cache" / "tiny" / "Tiny.txt"
    monkeypatch.setenv("RESDOM_MAX_DOWNLOAD_BYTES", "100")
    server.routes[server.url_path(remote)] = CONTENT + b"7 1 2 3 4 5\n" * 1000
    with pytest.raises(ResdomError, match=r"refused: the server declares 12,060 bytes, more than a download may "
                                          r"hold \(RESDOM_MAX_DOWNLOAD_BYTES=100\); nothing was kept. If the file"):
        download_file(url, dest, remote.sha256)
    server.routes[server.url_path(remote)] = ("no-length", CONTENT + b"7 1 2 3 4 5\n" * 1000)
    with pytest.raises(ResdomError, match=r"refused: the server sends more than 100 bytes"):
        download_file(url, dest, remote.sha256)
    assert leftovers(tmp_path / "cache") == []
    server.routes[server.url_path(remote)] = ("no-length", CONTENT)  # within the limit, with or without a length
    assert download_file(url, dest, remote.sha256).read_bytes() == CONTENT
    dest.unlink()
    server.routes[server.url_path(remote)] = ("bad-length", CONTENT)  # an unreadable length: the sha256 decides
    assert download_file(url, dest, remote.sha256).read_bytes() == CONTENT


def test_a_cache_that_cannot_take_the_download_is_named(server: Server, tmp_path: Path, monkeypatch) -> None:
    """A full disk said 'download failed (OSError: [Errno 28] ...). Offline?' about the URL; a read-only cache
    folder was a PermissionError traceback (the CLI named a temporary '.Tiny.txt.x8k2.part' that never existed)."""
    import errno
    import os
    import tempfile

    import resdom.data.download as download

    remote = SPEC.files[0]
    server.routes[server.url_path(remote)] = CONTENT
    dest = tmp_path / "cache" / "tiny" / "Tiny.txt"

    class FullDisk:
        def __init__(self, f) -> None:
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.f.close()

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_fdopen = os.fdopen
    monkeypatch.setattr(download.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(ResdomError, match=r"cache/tiny/Tiny\.txt: cannot write the download \(No space left on "
                                          r"device\); nothing was kept. Point RESDOM_CACHE_DIR at a folder"):
        resolve_dataset_files(SPEC)
    monkeypatch.undo()
    monkeypatch.setenv(ENV_DOWNLOAD_BASE, server.base)
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    assert leftovers(tmp_path / "cache") == [] and not (tmp_path / "cache").exists()

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), kwargs.get("dir", args[0] if args else None))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    with pytest.raises(ResdomError, match=r"cache/tiny/Tiny\.txt: cannot write the download \(Permission denied\)"):
        resolve_dataset_files(SPEC)
    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(ResdomError, match=r"cache/tiny: cannot write the download \(Permission denied\)"):
        download_file(remote.url(server.base), dest, remote.sha256)
    monkeypatch.undo()
    assert download_file(remote.url(server.base), dest, remote.sha256).read_bytes() == CONTENT


def test_a_killed_download_leaves_nothing_taken_for_the_data(server: Server, tmp_path: Path) -> None:
    """A download killed by SIGTERM or SIGKILL (no ``finally``) left its '.part' file for ever: the retry removes
    those untouched for an hour (a download in progress writes at least every timeout) and never reads them."""
    import os

    remote = SPEC.files[0]
    server.routes[server.url_path(remote)] = CONTENT
    folder = tmp_path / "cache" / "tiny"
    folder.mkdir(parents=True)
    killed, live = folder / ".Tiny.txt.abc123.part", folder / ".Tiny.txt.def456.part"
    killed.write_bytes(CONTENT)  # complete and with the right sha256, yet never taken for the file
    live.write_bytes(CONTENT[:5])
    os.utime(killed, (0, 0))
    (got,) = resolve_dataset_files(SPEC)
    assert got.origin == "download" and leftovers(tmp_path / "cache") == [".Tiny.txt.def456.part", "Tiny.txt"]
    assert server.hits  # downloaded, not read from the stale part


def test_two_downloads_of_the_same_file_at_once(server: Server, tmp_path: Path) -> None:
    """Each writes its own temporary file and renames it into place; a wrong file in the cache is left where it is
    until a verified download replaces it (its removal by one raced the other's: FileNotFoundError)."""
    from concurrent.futures import ThreadPoolExecutor

    server.routes[server.url_path(SPEC.files[0])] = ("trickle", CONTENT[:20])
    short = DatasetSpec("tiny", "user-lines", (
        RemoteFile("tiny/Tiny.txt", "owner/repo", "c" * 40, "data/Tiny.txt", hashlib.sha256(CONTENT[:20]).hexdigest()),
    ), "test")
    wrong = tmp_path / "cache" / "tiny" / "Tiny.txt"
    wrong.parent.mkdir(parents=True)
    wrong.write_bytes(b"junk\n")
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: resolve_dataset_files(short)[0], range(2)))
    assert [g.origin for g in got] == ["download", "download"] and wrong.read_bytes() == CONTENT[:20]
    assert leftovers(tmp_path / "cache") == ["Tiny.txt"]
