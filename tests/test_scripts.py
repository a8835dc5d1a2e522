"""The analysis scripts behind statements of docs/results.md: scripts/cold_items_check.py ("Cold last items": its
per-band HRLI@1 is the hrli diagnostic's, its mean pairwise cosine the mean over every pair of distinct rows) and
scripts/bsarec_residuals_check.py (BSARec on video-ts: with the frequency residual as trained its rows are the
alpha sweep's)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import resdom
from resdom.data.sequences import item_counts
from resdom.diagnostics.hrli import last_item_hit_rates

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
cold_items_check = importlib.import_module("cold_items_check")
bsarec_residuals_check = importlib.import_module("bsarec_residuals_check")

SMALL = {"epochs": 2, "hidden": 16, "layers": 2, "heads": 2, "max_len": 12, "batch_size": 64, "seed": 0}


def test_mean_pair_cosine_is_the_mean_over_distinct_pairs() -> None:
    x = torch.randn(7, 5, dtype=torch.float64)
    u = x / x.norm(dim=1, keepdim=True)
    pairs = [float(u[i] @ u[j]) for i in range(7) for j in range(7) if i != j]
    assert cold_items_check.mean_pair_cosine(x) == pytest.approx(np.mean(pairs), abs=1e-12)
    same = torch.tensor([[1.0, 2.0], [2.0, 4.0], [0.5, 1.0]])
    assert cold_items_check.mean_pair_cosine(same) == pytest.approx(1.0, abs=1e-6)


def test_bands_agree_with_the_hrli_diagnostic(tmp_path: Path) -> None:
    split = resdom.prepare_split("synthetic:n_users=200,n_items=60,min_len=5,max_len=12,seed=0")
    fitted = resdom.fit(split, "sasrec", out=tmp_path / "run", device="cpu", progress=False, **SMALL)
    out = cold_items_check.check(tmp_path / "run")
    counts = item_counts(fitted.split.train, fitted.split.n_items)
    ref = last_item_hit_rates(fitted.model, fitted.split.test, batch_size=50, train_counts=counts).by_frequency
    assert out["bands"], "no band measured"
    for name, band in out["bands"].items():
        assert band["n_users"] == ref[name]["n_users"]
        assert band["HRLI@1"] == pytest.approx(ref[name]["values"]["HRLI@1"])
        assert -1.0 <= band["cos_state_last"] <= 1.0
    assert sum(b["n_users"] for b in out["bands"].values()) == len(fitted.split.test)
    assert out["items"] == fitted.split.n_items
    assert out["cold_items"] == int((counts[1:] == 0).sum())


def test_bsarec_residual_rows_with_the_frequency_residual_as_trained_are_the_alpha_sweep(tmp_path: Path) -> None:
    from resdom.diagnostics.alpha import alpha_sweep

    split = resdom.prepare_split("synthetic:n_users=200,n_items=60,min_len=5,max_len=12,seed=0")
    fitted = resdom.fit(split, "bsarec", out=tmp_path / "run", device="cpu", progress=False,
                        **{**SMALL, "heads": 2})
    rows = bsarec_residuals_check.check(tmp_path / "run")
    assert [(r["alpha"], r["s"]) for r in rows] == [(1.0, 1.0), (0.5, 1.0), (0.5, 0.5), (0.0, 1.0), (0.0, 0.0)]
    sweep = {r["alpha"]: r for r in alpha_sweep(fitted.model, fitted.split.test, alphas=(1.0, 0.5, 0.0)).rows}
    for r in rows:
        if r["s"] == 1.0:
            for key in ("HRLI@1", "HRL2I@1", "HR@10", "NDCG@10"):
                assert r[key] == pytest.approx(sweep[r["alpha"]][key]), (r, key)
    assert rows[0]["HRLI@1"] != rows[4]["HRLI@1"] or rows[0]["HRL2I@1"] != rows[4]["HRL2I@1"]
