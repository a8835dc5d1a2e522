"""The memory rule is per command: "no input of 1 MB or less makes any command use more than 1 GB of memory".

Each file's own limits (``resdom.limits``) grant any archive an allowance of 64 MiB whatever its ratio, and any YAML
document 100,000 values: many files, each within its limits, used to add up within one command. A report over a
store of 20 crafted cells (1.3 MB together, each users.npz a valid one whose alpha sweep of 33,000 alphas holds
59 MB of ranks, deflated to 60 KB) kept 1.2 GB of them, and ``--set`` given 50 times, each value's aliases
expanding to 93,000 values, passed 4.7 million values on. Now a command's archives together unpack to at most 100
times their bytes plus one 64 MiB allowance, and its YAML documents to 100,000 values together
(``bounded.command_budget``). The makers are below; each case runs the whole command, in this process (fast) and in
a subprocess whose address space is capped at 1 GiB above its imports (slow), and must end in one clean line naming
the limit."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_line_error, run_cli

from resdom.bounded import load_npz, load_yaml
from resdom.errors import ResdomError

N_USERS, ALPHAS = 600, 33_000  # a crafted cell's users, and the alphas of its sweep: 3 x 19.8 MB of ranks it keeps


def crafted_users(checkpoint: str) -> bytes:
    """Maker: a valid users.npz of a cell (header of the test split and ``checkpoint``) whose alpha sweep has 33,000
    alphas: its three (alphas, users) rank arrays hold 59 MB that the report keeps once read, and deflate to about
    60 KB, within the file's own limit (100 times its size plus 64 MiB)."""
    n = N_USERS
    head = {"version": 1, "split": "test", "n_users": n, "n_items": 30, "alphas": [1.0] * ALPHAS, "rank_cap": 21,
            "checkpoint": checkpoint}
    ranks = (np.arange(n) % 20 + 1).astype(np.uint8)
    sweep = np.ones((ALPHAS, n), np.uint8)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, header=np.array(json.dumps(head)), user=np.arange(n), target_rank=ranks,
                        target_rank_unfiltered=ranks, last_rank=ranks, last_seen=np.ones(n, bool),
                        last_freq=np.full(n, 5), alpha_target_rank=sweep, alpha_target_rank_unfiltered=sweep,
                        alpha_last_rank=sweep, recoverable=np.zeros(n, bool))
    return buffer.getvalue()


def crafted_store(root: Path, cells: int = 20) -> Path:
    """Maker: a results store of ``cells`` seeds of one data set and model, each cell sound (cell.json, config,
    metrics, hrli.json, all of its own checkpoint) and its users.npz ``crafted_users``."""
    for seed in range(1, cells + 1):
        cell = root / "toy" / "sasrec" / f"seed{seed}"
        (cell / "diagnostics").mkdir(parents=True)
        checkpoint = f"c{seed}"
        (cell / "cell.json").write_text(json.dumps({"dataset": "toy", "label": "sasrec", "model": "sasrec",
                                                    "seed": seed, "checkpoint": checkpoint, "compute": {}}))
        (cell / "config.json").write_text(json.dumps({"label": "sasrec", "model": {"name": "sasrec"}, "train": {},
                                                      "versions": {}}))
        (cell / "metrics.json").write_text(json.dumps({"test": {"metrics": {"HR@10": 0.3, "NDCG@10": 0.1},
                                                                "n_users": N_USERS}, "checkpoint": checkpoint}))
        (cell / "diagnostics" / "hrli.json").write_text(json.dumps({"values": {"HRLI@1": 0.5}, "n_users": N_USERS,
                                                                    "split": "test", "checkpoint": checkpoint}))
        (cell / "users.npz").write_bytes(crafted_users(checkpoint))
    return root


def alias_value(width: int = 45) -> str:
    """Maker: a YAML list whose aliases expand to ``width`` lists of ``width`` lists of ``width`` zeros (93,196
    values with their lists: under one document's limit of 100,000, with 88 aliases of its 100), in about 1 KB."""
    inner = f"&a [{', '.join(['0'] * width)}]"
    middle = f"&b [{inner}, " + ", ".join(["*a"] * (width - 1)) + "]"
    return f"[{middle}, " + ", ".join(["*b"] * (width - 1)) + "]"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return crafted_store(tmp_path_factory.mktemp("crafted") / "store")


@pytest.mark.slow
def test_the_makers_are_within_each_files_own_limits(store: Path) -> None:
    """Each crafted file alone passes its reader's limits (so only the command's total can refuse them), and the
    whole store is about 1 MB."""
    from resdom.bounded import command_budget

    arrays = load_npz(store / "toy" / "sasrec" / "seed1" / "users.npz")
    assert sum(a.nbytes for a in arrays.values()) > 59_000_000
    assert sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) < 1_300_000
    assert len(load_yaml(alias_value(), "--set")) == 45
    with command_budget():  # the same in one command: refused at the second document
        load_yaml(alias_value(), "--set 1")
        with pytest.raises(ResdomError, match="--set 2: refused: the YAML this command read"):
            load_yaml(alias_value(), "--set 2")


@pytest.mark.slow
def test_a_store_of_crafted_cells_is_refused_in_one_line(store: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "report", str(store), "--out", str(tmp_path / "report"), "--tables-only")
    one_line_error(code, err, "users.npz", "refused: the archives this command read unpack to",
                   "RESDOM_MAX_EXPANSION")


def test_set_repeated_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [a for _ in range(50) for a in ("--set", f"model.hidden={alias_value()}")]
    code, _, err = run_cli(capsys, "config", "show", "sasrec", *sets)
    one_line_error(code, err, "refused: the YAML this command read", "RESDOM_MAX_YAML_NODES")


CAPPED = """
import resource, sys
import torch  # noqa: F401 - what any command imports, before the cap
from resdom.cli.main import app
with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), size + (1 << 30)))
sys.argv = ["resdom", *sys.argv[1:]]
app()
"""


def capped(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``resdom ARGS`` in a subprocess capped at 1 GiB above its imports (and 120 s)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", CAPPED, *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=cwd)


@pytest.mark.slow
def test_whole_commands_stay_under_the_cap(store: Path, tmp_path: Path) -> None:
    """The report over the crafted store and ``--set`` repeated, each a whole command under the cap: one clean line
    naming the limit (not "out of memory", not a traceback)."""
    report = capped("report", str(store), "--out", str(tmp_path / "report"), "--tables-only", cwd=tmp_path)
    sets = [a for _ in range(50) for a in ("--set", f"model.hidden={alias_value()}")]
    config = capped("config", "show", "sasrec", *sets, cwd=tmp_path)
    for proc, needle in ((report, "refused: the archives this command read"),
                         (config, "refused: the YAML this command read")):
        one_line_error(proc.returncode, proc.stderr, needle)
