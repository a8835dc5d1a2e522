"""Shared test fixtures. Real data lives in ../shared/data (or $RESDOM_DATA_DIR); tests that need it skip
with the missing path named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RESDOM_SHARED_DATA", ROOT.parent / "shared" / "data"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads the real data sets (through ``shared_raw``, however indirectly) is slow: ``pytest -m "not
    slow"`` leaves it out."""
    for item in items:
        if "shared_raw" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def shared_raw() -> Path:
    """Path to ../shared/data/raw; skips the test where it is absent."""
    raw = SHARED_DATA / "raw"
    if not raw.is_dir():
        pytest.skip(f"real data not found at {raw} (set RESDOM_SHARED_DATA to the shared/data folder)")
    return raw


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    """pytest-xdist runs one worker per core: one torch thread each avoids oversubscribing the CPU."""
    import torch

    torch.set_num_threads(1)
