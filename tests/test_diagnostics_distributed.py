"""Every diagnostic under torch.distributed (2 gloo CPU processes) gives the numbers of one process."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gloo_helpers import spawn_gloo

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics.alpha import alpha_sweep
from resdom.diagnostics.hrli import last_item_hit_rates
from resdom.diagnostics.mixing import mixing_ratios
from resdom.diagnostics.recovery import miss_recovery
from resdom.diagnostics.runner import run_all
from resdom.diagnostics.shuffle import position_shuffle
from resdom.models import build_model
from resdom.models.config import make_model_config

N_ITEMS = 25


def make_evalset(n: int, seed: int) -> EvalSet:
    rng = np.random.default_rng(seed)
    lists = [rng.integers(1, N_ITEMS + 1, size=int(rng.integers(1, 12))).tolist() for _ in range(n)]
    lists[0], lists[1] = [4], [4, 9]  # users shorter than 2 and 3 items
    return EvalSet(Sequences.from_lists(lists), rng.integers(1, N_ITEMS + 1, size=n))


def make_model(name: str = "sasrec") -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = make_model_config(name=name, n_items=N_ITEMS, max_len=8, hidden=16, layers=2, heads=2, init_std=0.5)
    return build_model(cfg).double().eval()


def diagnose_all() -> dict[str, Any]:
    """Every diagnostic on fixed float64 models and data (31 and 1 users), as plain JSON data."""
    valid, test = make_evalset(29, 1), make_evalset(31, 0)
    tiny = EvalSet(Sequences.from_lists([[3, 5, 7]]), np.array([5]))  # fewer users than processes
    sasrec, bsarec = make_model(), make_model("bsarec")
    common = {"batch_size": 4}
    alphas = (1.0, 0.5, 0.0)
    return {
        "shuffle": position_shuffle(sasrec, test, seeds=(0, 1), **common).to_dict(),
        "hrli": last_item_hit_rates(sasrec, test, **common).to_dict(),
        "hrli_tiny": last_item_hit_rates(sasrec, tiny, **common).to_dict(),
        "mixing": mixing_ratios(sasrec, test, per_head=True, **common).to_dict(),
        "mixing_son": mixing_ratios(sasrec, test, definition="sum_of_norms", **common).to_dict(),
        "mixing_bsarec": mixing_ratios(bsarec, test, **common).to_dict(),
        "alpha": alpha_sweep(sasrec, test, alphas=alphas, **common).to_dict(),
        "recovery": miss_recovery(sasrec, valid, test, alphas=alphas, **common).to_dict(),
    }


def assert_close(got: Any, want: Any, tol: float, where: str = "") -> None:
    """Nested JSON data equal; floats within ``tol`` (absolute), everything else exactly."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), where
        for k in want:
            assert_close(got[k], want[k], tol, f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, tol, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=0.0, abs_tol=tol), (where, got, want)
    else:
        assert got == want, (where, got, want)


def _worker(rank: int, world: int, tmp: str) -> None:
    torch.set_num_threads(1)
    out = {"diagnostics": diagnose_all()}
    summary = run_all(f"{tmp}/run_dist", alphas=(1.0, 0.5, 0.0), seeds=(0,), progress=False, batch_size=16)
    out["summary"] = summary
    Path(f"{tmp}/rank{rank}.json").write_text(json.dumps(out))


@pytest.mark.slow
def test_two_gloo_processes_match_one_process(tmp_path: Path) -> None:
    from resdom.data.prepare import prepare_split
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import fit

    torch.set_num_threads(1)
    single = json.loads(json.dumps(diagnose_all()))  # the JSON round trip the workers' results take
    split = prepare_split("synthetic:n_users=60,n_items=30,min_len=6,max_len=14,seed=3", "loo")
    cfg = make_model_config(max_len=12, hidden=16, layers=2, heads=2)
    fit(split, cfg, TrainConfig(epochs=1, device="cpu", batch_size=64), tmp_path / "run_single", progress=False)
    shutil.copytree(tmp_path / "run_single", tmp_path / "run_dist")
    single_summary = run_all(tmp_path / "run_single", alphas=(1.0, 0.5, 0.0), seeds=(0,), progress=False,
                             batch_size=16)

    spawn_gloo(_worker, str(tmp_path))
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for g in got:
        assert_close(g["diagnostics"], single, 1e-12)
    # run_all: rank 0's summary on every rank (float32 model: batch composition moves the last bits)
    assert got[1]["summary"] == got[0]["summary"]
    summary = {k: v for k, v in got[0]["summary"].items() if k != "seconds"}
    assert_close(summary, {k: v for k, v in single_summary.items() if k != "seconds"}, 1e-5)
    written = json.loads((tmp_path / "run_dist" / "diagnostics" / "summary.json").read_text())
    assert {k: v for k, v in written.items() if k != "seconds"} == summary
    # the per-user evidence: every user once, in user order, with one process's ranks
    from resdom.diagnostics.evidence import read_users

    (h1, a1), (h2, a2) = (read_users(tmp_path / r / "diagnostics" / "users.npz") for r in ("run_single", "run_dist"))
    assert h1["n_users"] > 0 and {k: v for k, v in h2.items() if k != "seconds"} == {
        k: v for k, v in h1.items() if k != "seconds"}
    for name in a1:
        assert np.array_equal(a2[name], a1[name]), name
