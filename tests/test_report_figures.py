"""Figures and the HTML / Markdown report from the fixture runs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from resdom.report import build_report, find_run_dirs, read_runs
from resdom.report.figures import FIGURE_KEYS, MODEL_COLORS, all_figures, model_color

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "diagnostics"


@pytest.fixture(scope="module")
def figures() -> dict:
    return {f.key: f for f in all_figures(read_runs(find_run_dirs(FIXTURES)))}


def test_every_figure_built_with_labels_and_legend(figures: dict) -> None:
    assert list(figures) == list(FIGURE_KEYS)
    for key, f in figures.items():
        assert f.caption.endswith(".") and f.title
        assert f.figure.legends, f"{key}: no legend"
        for ax in f.figure.axes:
            assert ax.get_xlabel() or key == "shuffle", f"{key}: unlabelled x axis"
            assert ax.get_ylabel(), f"{key}: unlabelled y axis"


def test_model_colours_fixed(figures: dict) -> None:
    assert model_color("sasrec") == MODEL_COLORS["sasrec"] and model_color("other") == model_color("other")
    ax = figures["hrli"].figure.axes[0]  # toyA: SASRec and BSARec bars
    colours = {to_hex(p.get_facecolor()) for p in ax.patches}
    assert colours == {MODEL_COLORS["sasrec"].lower(), MODEL_COLORS["bsarec"].lower()}
    lines = figures["alpha_sweep"].figure.axes[1].get_lines()
    assert {to_hex(line.get_color()) for line in lines} <= {c.lower() for c in MODEL_COLORS.values()}
    legend = [t.get_text() for t in figures["hrli"].figure.legends[0].get_texts()]
    assert legend == ["SASRec", "BSARec"]


def test_bar_heights_are_seed_means(figures: dict) -> None:
    ax = figures["hrli"].figure.axes[0]
    sasrec_bars = [p for p in ax.patches if to_hex(p.get_facecolor()) == MODEL_COLORS["sasrec"].lower()]
    assert sasrec_bars[0].get_height() == pytest.approx(0.85)  # HRLI@1, seeds 0.80 / 0.90
    assert sasrec_bars[1].get_height() == pytest.approx(0.03)  # HRL2I@1, seeds 0.02 / 0.04


def test_report_files(tmp_path: Path) -> None:
    paths = build_report(find_run_dirs(FIXTURES), tmp_path, title="t")
    for key in FIGURE_KEYS:
        assert paths.figures[key]["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert paths.figures[key]["pdf"].read_bytes()[:5] == b"%PDF-"
    html = paths.html.read_text()
    assert "<script" not in html and "http://" not in html and "https://" not in html  # self-contained
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == len(FIGURE_KEYS)
    for key in FIGURE_KEYS:
        section = re.search(rf'<section id="fig-{key}".*?</section>', html, re.S).group(0)
        assert '<p class="caption">' in section and "data:image/png" in section
    md = paths.markdown.read_text()
    for key in FIGURE_KEYS:
        assert f"(figures/{key}.png)" in md
    assert "| toyA | sasrec | 2 | 0.850 ± 0.071 |" in md
    assert "Mixing ratio drops from 0.850 at Attn to 0.250 at +Res" in "\n".join(paths.findings)


def test_report_without_diagnostics(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "toyB_sasrec_seed1", run)
    shutil.rmtree(run / "diagnostics")
    paths = build_report([run], tmp_path / "out")
    html = paths.html.read_text()
    assert paths.figures == {} and html.count('class="missing"') == len(FIGURE_KEYS)
    assert "toyB" in html and "0.200" in html  # the run and its test HR@10 from metrics.json
