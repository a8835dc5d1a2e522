"""A light repository: committed figures stay small."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_PNG_BYTES = 300_000
# folders that are never committed (.gitignore): run directories, environments, build output
IGNORED = {".git", ".venv", "runs", "resdom-demo", "build", "dist", "test-artifacts", "node_modules", "saved",
           "log_tensorboard", ".pytest_cache", ".ruff_cache", ".hypothesis", "__pycache__", "out"}


def tree_pngs(root: Path = ROOT) -> list[Path]:
    """The PNG files of the working tree outside the folders that are never committed."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in IGNORED and not d.startswith(".") and not d.endswith("-venv")]
        found += [Path(folder) / f for f in files if f.lower().endswith(".png")]
    return sorted(found)


def test_every_committed_png_is_under_300_kb() -> None:
    pngs = tree_pngs()
    assert pngs, "no PNG found: the walk is broken"
    big = {str(p.relative_to(ROOT)): p.stat().st_size for p in pngs if p.stat().st_size >= MAX_PNG_BYTES}
    assert big == {}, "regenerate at PNG_DPI with `resdom report` (report.figures), or leave the figure uncommitted"


def test_report_figures_in_the_tree_are_100_dpi_palette_images() -> None:
    from PIL import Image

    from resdom.report.figures import EXTRA_FIGURE_KEYS, PNG_DPI, figure_keys
    from resdom.study import STUDY_FIGURE_KEYS
    from resdom.study.evidence_blocks import EVIDENCE_FIGURE_KEYS
    from resdom.study.probe_blocks import PROBE_FIGURE_KEYS

    figures = sorted((ROOT / "docs" / "results" / "figures").glob("*.png"))
    known = {*figure_keys(), *EXTRA_FIGURE_KEYS, *STUDY_FIGURE_KEYS, *EVIDENCE_FIGURE_KEYS, *PROBE_FIGURE_KEYS}
    assert {p.stem for p in figures} <= known, "a stale figure of an older report is left"
    for path in figures:
        image = Image.open(io.BytesIO(path.read_bytes()))
        assert image.mode == "P" and image.info["dpi"][0] <= PNG_DPI + 0.5, path


def test_the_walk_finds_a_big_png(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.png").write_bytes(b"\x89PNG" + b"0" * MAX_PNG_BYTES)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "b.png").write_bytes(b"\x89PNG")
    assert tree_pngs(tmp_path) == [tmp_path / "docs" / "a.png"]
    with pytest.raises(AssertionError):
        assert all(p.stat().st_size < MAX_PNG_BYTES for p in tree_pngs(tmp_path))


def test_the_gpu_queue_is_the_evidence_queues_bsarec_and_duorec_cells() -> None:
    """scripts/grid_gpu.txt holds exactly the BSARec and DuoRec cells of scripts/grid_evidence.txt (BSARec first), so
    the two queues cannot drift apart; neither lists a cell twice."""
    def cells(name: str) -> list[tuple[str, str, str]]:
        lines = (ROOT / "scripts" / name).read_text().splitlines()
        return [tuple(line.split()[:3]) for line in lines if line.strip() and not line.lstrip().startswith("#")]

    evidence, gpu = cells("grid_evidence.txt"), cells("grid_gpu.txt")
    assert len(set(evidence)) == len(evidence) and len(set(gpu)) == len(gpu)
    expensive = [c for c in evidence if c[1] == "bsarec"] + [c for c in evidence if c[1] == "duorec"]
    assert gpu == expensive and gpu[0][1] == "bsarec"
