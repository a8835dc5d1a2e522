"""Issue 28, done when: a new user's CSV with string ids, fractional times and a one-interaction user goes through
prepare, train, diagnose, recommend and report as separate ``resdom`` processes, with every change to the data
printed, and the recommendations come back in the file's own ids. The two user mistakes on the way (one line,
exit 2, nothing written) run in this process: each extra ``resdom`` process pays the torch import again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import invoke

ROOT = Path(__file__).resolve().parents[1]


def _resdom(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "resdom", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)


def _own_csv(path: Path) -> pd.DataFrame:
    """Customers 'c 1'.. with 3-12 purchases of products 'P-007', 'P-7', '007', '7', ... at fractional times (several
    within one second, out of file order); customer 'solo' buys once; a repeated purchase."""
    rng = np.random.default_rng(5)
    products = ["007", "7", "07", "+7"] + [f"P-{k:03d}" for k in range(36)]
    rows = []
    for u in range(60):
        n = int(rng.integers(3, 13))
        base = 1_700_000_000 + float(rng.integers(0, 10**6))
        times = base + np.round(rng.random(n) * 0.9, 3)  # all within one second: only the fractions order them
        rows += [(f"c {u}", products[int(rng.integers(len(products)))], t) for t in times]
    rows.append(("solo", "P-001", 1_700_500_000.5))
    df = pd.DataFrame(rows, columns=["customer", "product", "when"])
    df.to_csv(path, index=False)
    return df


@pytest.mark.slow
def test_a_users_csv_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the in-process commands read and write where the processes do
    csv = tmp_path / "shop.csv"
    df = _own_csv(csv)
    cols = ["--user-col", "customer", "--item-col", "product"]

    # forgetting the timestamp column is one clear line, and nothing is written
    code = invoke("data", "split", str(csv), *cols, "--out", "split")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "missing timestamp column 'timestamp'" in err
    assert not (tmp_path / "split").exists()

    r = _resdom("data", "split", str(csv), *cols, "--time-col", "when", "--out", "split", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    n_products = df["product"].nunique()
    assert (f"data: read {len(df):,} interactions of 61 users and {n_products} items (csv); ids kept exactly as read"
            in r.stderr)
    assert "data: order: each user's interactions by timestamp (fractional seconds kept)" in r.stderr
    assert "data: k-core: off (no user or item filtered)" in r.stderr
    assert "data: loo split: 1 user in no part (fewer than 3 items: 1), 1 interaction in no part" in r.stderr
    assert "data: repeats:" in r.stderr

    r = _resdom("train", "split", "--out", "run", "--epochs", "1", "--device", "cpu", "--set", "model.hidden=16",
                "--set", "model.layers=1", "--set", "model.heads=1", "--set", "model.max_len=8", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "data: loo split: 1 user in no part" in r.stderr  # printed again from the saved split's manifest
    assert "best epoch 1 of 1" in r.stdout

    r = _resdom("diagnose", "run", "--device", "cpu", "--seeds", "0", "--alphas", "1,0", "--no-progress",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / "diagnostics" / "summary.json").is_file()

    (tmp_path / "who.txt").write_text("solo\nc 3\n")
    r = _resdom("recommend", "run", "--users", "who.txt", "--k", "5", "--out", "recs.csv", "--device", "cpu",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    recs = pd.read_csv(tmp_path / "recs.csv", dtype={"user": str, "item": str}, keep_default_na=False)
    assert recs["user"].tolist() == ["solo"] * 5 + ["c 3"] * 5 and recs["rank"].tolist() == [1, 2, 3, 4, 5] * 2
    assert set(recs["item"]) <= set(df["product"])  # the file's own product ids, '007' and '7' apart
    assert "P-001" not in set(recs.loc[recs["user"] == "solo", "item"])  # solo's one purchase, seen
    bought = set(df.loc[df["customer"] == "c 3", "product"])
    assert not bought & set(recs.loc[recs["user"] == "c 3", "item"])

    capsys.readouterr()
    code = invoke("recommend", "run", "--users", "who.txt", "--out", "recs.csv", "--device", "cpu", "--k", "0")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--k" in err

    r = _resdom("report", "run", "--out", "report", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "report" / "report.html").is_file()
