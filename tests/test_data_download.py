"""Registry resolution and download against a local HTTP server on 127.0.0.1 (no network)."""

from __future__ import annotations

import hashlib
import threading
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
    """Serves ``routes[url_path]``: bytes, or ("truncate", bytes) to promise more bytes than it sends."""

    def __init__(self) -> None:
        self.routes: dict[str, object] = {}
        self.hits: list[str] = []
        routes, hits = self.routes, self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                hits.append(self.path)
                body = routes.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                if isinstance(body, tuple):  # interrupted transfer: promise len + 1000, send half, close
                    data = body[1]
                    self.send_header("Content-Length", str(len(data) + 1000))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

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
