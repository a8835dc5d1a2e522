"""Render the HTML report in headless Chromium: every section and figure present, no console / JS error, no broken
image; a screenshot is saved to test-artifacts/report.png. Skipped where Chromium is absent (CI installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from resdom.report import build_report, find_run_dirs
from resdom.report.figures import figure_keys

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "diagnostics"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# slow: each test starts Chromium (and the report fixture draws every figure, ~15 s)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (CI installs Debian's chromium)")]

# Injected by the test only (the report itself carries no script): records JS errors, console.error calls and
# images that failed to decode into a #probe element that --dump-dom returns.
PROBE = """<script>
window.__errs = [];
window.addEventListener('error', function (e) {
  window.__errs.push('error: ' + (e.message || (e.target && (e.target.alt || e.target.src || e.target.tagName))));
}, true);
(function () { var ce = console.error; console.error = function () {
  window.__errs.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); ce.apply(console, arguments);
}; })();
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !i.complete || i.naturalWidth === 0; })
                   .map(function (i) { return i.getAttribute('data-figure') || i.alt; });
  var p = document.createElement('div'); p.id = 'probe';
  p.setAttribute('data-result', JSON.stringify({errors: window.__errs, broken: broken, images: imgs.length}));
  document.body.appendChild(p);
});
</script>"""

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000"]


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def render(html_path: Path, tmp: Path, screenshot: Path | None = None) -> tuple[str, dict, list[str]]:
    """Load ``html_path`` (with the probe injected) and return (DOM, probe result, console lines on stderr)."""
    page = tmp / "probed.html"
    page.write_text(html_path.read_text().replace("<head>", "<head>" + PROBE, 1))
    run = _chromium(["--dump-dom", page.as_uri()], tmp / "profile-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    match = re.search(r'<div id="probe" data-result="([^"]*)"', run.stdout)
    assert match, "the probe never ran (page load did not finish?)\n" + run.stderr[-2000:]
    probe = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    if screenshot is not None:
        shot = _chromium([f"--screenshot={screenshot}", "--window-size=1280,6000", "--hide-scrollbars",
                          html_path.as_uri()], tmp / "profile-shot")
        assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
    return run.stdout, probe, console


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    return build_report(find_run_dirs(FIXTURES), out, title="resdom report (fixtures)").html


def test_report_renders_in_chromium(report: Path, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    dom, probe, console = render(report, tmp_path, screenshot=ARTIFACTS / "report.png")
    assert probe["errors"] == [] and console == [], (probe["errors"], console)
    assert probe["broken"] == [], f"images that did not decode: {probe['broken']}"
    assert probe["images"] == len(figure_keys())
    for section in ("findings", "runs", "tables", *(f"fig-{k}" for k in figure_keys())):
        assert f'id="{section}"' in dom, f"section {section} missing from the rendered DOM"
    for key in figure_keys():
        assert f'data-figure="{key}"' in dom, f"figure {key} missing"
    for table in ("runs", "datasets", "mixing", "hrli", "shuffle", "recovery", "accuracy"):
        assert f'id="table-{table}"' in dom
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000


def test_probe_catches_broken_image_and_js_error(tmp_path: Path) -> None:
    """The check itself can fail: a corrupt image and a throwing script are both reported."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
                   '<img alt="x" data-figure="broken" src="data:image/png;base64,AAAA">'
                   "<script>undefinedFunction();</script></body></html>")
    _, probe, console = render(bad, tmp_path)
    assert probe["broken"] == ["broken"]
    assert any("undefinedFunction" in e for e in probe["errors"]) or console
