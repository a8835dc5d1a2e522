"""Shared test fixtures. Real data lives in ../shared/data (or $RESDOM_DATA_DIR); tests that need it skip
with the missing path named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RESDOM_SHARED_DATA", ROOT.parent / "shared" / "data"))


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
