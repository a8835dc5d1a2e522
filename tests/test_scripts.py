"""The analysis scripts behind statements of docs/results.md: scripts/cold_items_check.py ("Cold last items": its
per-band HRLI@1 is the hrli diagnostic's, its mean pairwise cosine the mean over every pair of distinct rows) and
scripts/bsarec_residuals_check.py (BSARec on video-ts: with the frequency residual as trained its rows are the
alpha sweep's), scripts/recovery_filter_check.py ("The paper side by side": its filtered curve is the stored
recovery.json's, checked), scripts/mixing_population_check.py (its test-user ratios are the stored mixing.json's,
checked; its validation-user ratios the mixing diagnostic's over the validation set) and
scripts/epoch_trajectory_check.py (its retrain is the stored run, checked; its kept epoch's numbers the stored ones)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
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
recovery_filter_check = importlib.import_module("recovery_filter_check")
mixing_population_check = importlib.import_module("mixing_population_check")
epoch_trajectory_check = importlib.import_module("epoch_trajectory_check")

SMALL = {"epochs": 2, "hidden": 16, "layers": 2, "heads": 2, "max_len": 12, "batch_size": 64, "seed": 0}


def test_mean_pair_cosine_is_the_mean_over_distinct_pairs() -> None:
    x = torch.randn(7, 5, dtype=torch.float64)
    u = x / x.norm(dim=1, keepdim=True)
    pairs = [float(u[i] @ u[j]) for i in range(7) for j in range(7) if i != j]
    assert cold_items_check.mean_pair_cosine(x) == pytest.approx(np.mean(pairs), abs=1e-12)
    same = torch.tensor([[1.0, 2.0], [2.0, 4.0], [0.5, 1.0]])
    assert cold_items_check.mean_pair_cosine(same) == pytest.approx(1.0, abs=1e-6)


def test_bands_agree_with_the_hrli_diagnostic(tmp_path: Path) -> None:
    split = resdom.prepare_split("synthetic:n_users=200,n_items=60,min_len=5,max_len=12,seed=0", "loo")
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

    split = resdom.prepare_split("synthetic:n_users=200,n_items=60,min_len=5,max_len=12,seed=0", "loo")
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


def _cells_repo(tmp_path: Path, docs: dict[str, str], cells: tuple[str, ...]) -> tuple[Path, Path, Callable[..., str]]:
    """The project root, a git checkout holding scripts/reproduce_cells.sh, ``docs`` (name -> text, under docs/)
    and the stored ``cells`` copied from the project, committed as "start", and ``git(*args) -> stdout`` there.
    .venv and ``moved`` are ignored in it: each test puts its own .venv in."""
    import shutil

    root = Path(__file__).resolve().parents[1]
    if not (root / ".venv" / "bin" / "resdom").exists() or shutil.which("git") is None:
        pytest.skip("needs the project's .venv (make test makes it) and git")
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(root / "scripts" / "reproduce_cells.sh", repo / "scripts")
    (repo / "docs").mkdir()
    for name, text in docs.items():
        (repo / "docs" / name).write_text(text)
    # the project's own ignores (the lock and marker resdom report leaves in docs/results), and the test's folder
    (repo / ".gitignore").write_text((root / ".gitignore").read_text() + "moved\n")
    for cell in cells:
        shutil.copytree(root / cell, repo / cell)
    return root, repo, _git_checkout(repo)


def _git_checkout(repo: Path) -> Callable[..., str]:
    """``repo`` made a git checkout with everything in it committed as "start"; returns ``git(*args) -> stdout``
    there."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    git("add", ".")
    git("commit", "-qm", "start")
    return git


@pytest.mark.slow
def test_a_cell_commit_leaves_an_edit_in_progress_out(tmp_path: Path) -> None:
    """scripts/reproduce_cells.sh commits a stored cell with the documents refilled on HEAD's copies: an edit in
    progress in docs/results.md stays in the working copy (refilled too), out of the commit."""
    import shutil
    import subprocess

    block = "<!-- resdom:table {} -->\n<!-- /resdom:table -->\n"
    first, second = "results/beauty-ts/gru4rec/seed1", "results/beauty-ts/bert4rec/seed1"
    root, repo, git = _cells_repo(tmp_path, {"results.md": "# R\n\n" + block.format("accuracy") + "\nProse.\n",
                                             "remedies.md": "# M\n\n" + block.format("remedies")}, (first,))
    (repo / ".venv").symlink_to(root / ".venv")
    shutil.copytree(root / second, repo / second)
    with open(repo / "docs" / "results.md", "a") as f:
        f.write("AN EDIT IN PROGRESS\n")
    done = subprocess.run(["bash", "scripts/reproduce_cells.sh", "--commit", second], cwd=repo, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert git("log", "-1", "--format=%s").strip() == "results: beauty-ts / bert4rec / seed 1"
    committed, working = git("show", "HEAD:docs/results.md"), (repo / "docs" / "results.md").read_text()
    for text in (committed, working):
        assert "| beauty-ts | bert4rec | 1 seed |" in text and "| beauty-ts | gru4rec | 1 seed |" in text
    assert "AN EDIT IN PROGRESS" not in committed and working.endswith("Prose.\nAN EDIT IN PROGRESS\n")
    names = git("show", "--name-only", "--format=", "HEAD").split()
    assert f"{second}/cell.json" in names and "docs/results/tables/accuracy.md" in names
    assert {n for n in names if not n.startswith((second, "docs/results/tables/"))} <= {"docs/results.md",
                                                                                       "docs/remedies.md"}
    assert not (repo / "docs" / "results" / "figures").exists()  # figures: on demand, never with a cell
    assert git("status", "--porcelain").split("\n")[0] == " M docs/results.md"
    bad = subprocess.run(["bash", "scripts/reproduce_cells.sh", "--commit", "results/nope"], cwd=repo,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "results/nope: not a results-store cell" in bad.stderr


@pytest.mark.slow
def test_a_cell_commit_names_a_hand_written_reading_it_breaks(tmp_path: Path) -> None:
    """After a cell's commit, scripts/reproduce_cells.sh runs the checkout's tests/test_results_doc.py but its
    tables' regeneration: a failing reading is named in a warning and the cell stays committed (exit 0); the
    regeneration test is not run; where every reading holds, nothing is said."""
    import shutil
    import subprocess

    table = "<!-- resdom:table accuracy -->\n<!-- /resdom:table -->\n"
    root, repo, git = _cells_repo(tmp_path, {"results.md": "# R\n\n" + table, "remedies.md": "# M\n"}, ())
    (repo / ".venv").symlink_to(root / ".venv")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_results_doc.py").write_text(
        "from pathlib import Path\n\n\n"
        "def test_committed_tables_equal_what_the_store_regenerates():\n    raise AssertionError\n\n\n"
        "def test_a_reading():\n    assert '| beauty-ts | bert4rec |' not in Path('docs/results.md').read_text()\n")
    first, second = "results/beauty-ts/gru4rec/seed1", "results/beauty-ts/bert4rec/seed1"
    shutil.copytree(root / first, repo / first)
    quiet = subprocess.run(["bash", "scripts/reproduce_cells.sh", "--commit", first], cwd=repo, capture_output=True,
                           text=True)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    shutil.copytree(root / second, repo / second)
    loud = subprocess.run(["bash", "scripts/reproduce_cells.sh", "--commit", second], cwd=repo, capture_output=True,
                          text=True)
    assert loud.returncode == 0, loud.stderr
    assert git("log", "-1", "--format=%s").strip() == "results: beauty-ts / bert4rec / seed 1"
    assert f"WARNING: with {second} stored, a hand-written reading" in loud.stderr
    assert "FAILED tests/test_results_doc.py::test_a_reading" in loud.stderr
    assert "test_committed_tables" not in loud.stderr


@pytest.mark.slow
def test_a_cell_commit_that_loses_a_race_for_head_commits_again(tmp_path: Path) -> None:
    """Two queues commit into one checkout: where another commit moves HEAD while a cell's documents are refilled,
    the cell's commit fails quietly and is made again on the new HEAD, with a line saying so (no git "fatal").
    Meanwhile nothing is staged in the checkout's index, so a `git commit` made then could not take the cell."""
    import shutil
    import subprocess

    table = "<!-- resdom:table accuracy -->\n<!-- /resdom:table -->\n"
    root, repo, git = _cells_repo(tmp_path, {"results.md": "# R\n\n" + table, "remedies.md": "# M\n"}, ())
    (repo / ".venv" / "bin").mkdir(parents=True)
    wrapper = repo / ".venv" / "bin" / "resdom"  # the first report also moves HEAD, as another queue's commit would
    wrapper.write_text("#!/bin/sh\n"
                       "git diff --cached --name-only >> .venv/staged.txt\n"
                       "if [ ! -e moved ]; then touch moved\n"
                       "  git update-ref HEAD \"$(git commit-tree HEAD^{tree} -p HEAD -m 'another queue')\"; fi\n"
                       f"exec {root / '.venv' / 'bin' / 'resdom'} \"$@\"\n")
    wrapper.chmod(0o755)
    cell = "results/beauty-ts/gru4rec/seed1"
    shutil.copytree(root / cell, repo / cell)
    done = subprocess.run(["bash", "scripts/reproduce_cells.sh", "--commit", cell], cwd=repo, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert f"{cell}: another commit moved HEAD or holds the index meanwhile; commit try 2 of 5" in done.stderr
    assert "fatal" not in done.stderr
    assert git("log", "--format=%s").split("\n")[:3] == ["results: beauty-ts / gru4rec / seed 1", "another queue",
                                                           "start"]
    assert "| beauty-ts | gru4rec | 1 seed |" in git("show", "HEAD:docs/results.md")
    assert git("status", "--porcelain") == ""
    assert (repo / ".venv" / "staged.txt").read_text() == ""  # two refills, nothing staged during either


def _queue_repo(tmp_path: Path, grid: str) -> Path:
    """A checkout holding scripts/reproduce_queue.sh, the grid ``grid``, stored beauty-ts cells of gru4rec (40
    minutes) and bert4rec (70 minutes), and a stub trainer that records the cells it is given and, with
    STUB_STORES set, stores each as a cell that took 4 minutes (and ran STUB_EPOCHS epochs where that is set)."""
    import json
    import shutil

    root = Path(__file__).resolve().parents[1]
    if not (root / ".venv" / "bin" / "python").exists():
        pytest.skip("needs the project's .venv (make test makes it)")
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(root / "scripts" / "reproduce_queue.sh", repo / "scripts")
    (repo / ".venv").symlink_to(root / ".venv")
    stub = repo / "scripts" / "reproduce_cells.sh"
    stub.write_text('#!/usr/bin/env bash\necho "$@" >> started.txt\nread -r d m s <<<"$1"\n'
                    'if [ -n "${STUB_STORES:-}" ]; then mkdir -p results/$d/$m/seed$s\n'
                    '  echo "{\\"compute\\": {\\"train_seconds\\": 200, \\"diagnose_seconds\\": 40},"\\\n'
                    '    "\\"epochs_run\\": ${STUB_EPOCHS:-null}}" \\\n'
                    '    > results/$d/$m/seed$s/cell.json\n'
                    '  touch results/$d/$m/seed$s/users.npz\n'
                    'fi\n'
                    'echo "$GRID" >> grids.txt\n')
    stub.chmod(0o755)
    for model, minutes in {"gru4rec": 40, "bert4rec": 70}.items():
        cell = repo / "results" / "beauty-ts" / model / "seed1"
        cell.mkdir(parents=True)
        cell.joinpath("cell.json").write_text(json.dumps({"compute": {"train_seconds": minutes * 60 - 60,
                                                                      "diagnose_seconds": 60}}))
    (repo / "scripts" / "grid.txt").write_text(grid)
    (repo / "runs").mkdir()
    return repo


def _run_queue(repo: Path, until: str, **env: str) -> list[str]:
    import os
    import subprocess

    (repo / "started.txt").unlink(missing_ok=True)
    done = subprocess.run(["bash", "scripts/reproduce_queue.sh"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "UNTIL": until, **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "none fits before" in done.stdout
    started = repo / "started.txt"
    return started.read_text().splitlines() if started.exists() else []


@pytest.mark.slow
def test_the_queue_starts_no_cell_that_would_not_end_before_until(tmp_path: Path) -> None:
    """scripts/reproduce_queue.sh with UNTIL skips the open cells whose estimated cost (the stored cells of the same
    model on the same data set) runs past it, and takes the ones that fit, in the queue's order."""
    repo = _queue_repo(tmp_path, "# planned\nbeauty-ts bert4rec 1\nbeauty-ts bert4rec 2\nbeauty-ts gru4rec 2\n"
                                 "beauty-ts gru4rec 3\n")
    assert _run_queue(repo, "now + 50 minutes") == ["beauty-ts gru4rec 2", "beauty-ts gru4rec 3"]
    assert _run_queue(repo, "now + 80 minutes") == ["beauty-ts bert4rec 2", "beauty-ts gru4rec 2",
                                                    "beauty-ts gru4rec 3"]
    assert _run_queue(repo, "now + 30 minutes") == []


@pytest.mark.slow
def test_the_queue_reads_a_bare_clock_time_already_past_as_tomorrows(tmp_path: Path) -> None:
    """UNTIL=HH:MM set after that time today means the coming night (every cell fits in the hours to it), not "no
    cell fits"; a dated time already past, or one date cannot read, is refused in one line, nothing started."""
    import datetime
    import os
    import subprocess

    repo = _queue_repo(tmp_path, "beauty-ts bert4rec 2\nbeauty-ts gru4rec 2\n")
    earlier = (datetime.datetime.now() - datetime.timedelta(minutes=5)).strftime("%H:%M")
    assert _run_queue(repo, earlier) == ["beauty-ts bert4rec 2", "beauty-ts gru4rec 2"]
    (repo / "started.txt").unlink()
    for until, says in {"2020-01-01 08:00": "UNTIL=2020-01-01 08:00: already past",
                        "soonish": "UNTIL=soonish: not a time date -d reads (e.g. 08:05)"}.items():
        done = subprocess.run(["bash", "scripts/reproduce_queue.sh"], cwd=repo, capture_output=True, text=True,
                              env={**os.environ, "UNTIL": until}, timeout=120)
        assert (done.returncode, done.stderr.strip()) == (2, says)
        assert not (repo / "started.txt").exists()


@pytest.mark.slow
def test_the_queue_costs_a_started_cell_by_what_is_left_of_it(tmp_path: Path) -> None:
    """A bert4rec cell on beauty-ts costs 70 minutes whole. Seed 2, started and 10 epochs past its best with patience
    10, has only its diagnosis left (a twentieth: 3.5 minutes) and fits 10 minutes; seed 3, started with 10 one-minute
    epochs left, needs 13.5 and does not; seed 4, not started, needs all 70. The started seeds come before seed 4,
    which the grid puts first: finishing a cell costs less than starting one."""
    import json

    repo = _queue_repo(tmp_path, "beauty-ts bert4rec 4\nbeauty-ts bert4rec 3\nbeauty-ts bert4rec 2\n")
    for seed, (epoch, best) in {2: (70, 60), 3: (5, 5)}.items():
        run = repo / "runs" / "repro" / "beauty-ts" / "bert4rec" / f"seed{seed}"
        run.mkdir(parents=True)
        run.joinpath("config.json").write_text(json.dumps({"train": {"patience": 10}}))
        run.joinpath("metrics.jsonl").write_text(
            json.dumps({"epoch": epoch - 1, "best_epoch": best, "seconds": 60}) + "\n"
            + json.dumps({"epoch": epoch, "best_epoch": best, "seconds": 60}) + "\n")
    assert _run_queue(repo, "now + 10 minutes") == ["beauty-ts bert4rec 2"]
    assert _run_queue(repo, "now + 15 minutes") == ["beauty-ts bert4rec 3", "beauty-ts bert4rec 2"]
    assert _run_queue(repo, "now + 80 minutes") == ["beauty-ts bert4rec 3", "beauty-ts bert4rec 2",
                                                    "beauty-ts bert4rec 4"]


@pytest.mark.slow
def test_the_queue_status_groups_the_open_seeds_with_their_hours(tmp_path: Path) -> None:
    """--status ends with a line a data set and model: its open seeds, in the queue's order, and their hours (the
    stored cells' cost times the seeds: bert4rec 70 minutes, gru4rec 40)."""
    import subprocess

    repo = _queue_repo(tmp_path, "beauty-ts bert4rec 1\nbeauty-ts gru4rec 3\nbeauty-ts bert4rec 2\n"
                                 "beauty-ts bert4rec 3\nbeauty-ts gru4rec 1\n")
    done = subprocess.run(["bash", "scripts/reproduce_queue.sh", "--status", "scripts/grid.txt"], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "2 of 5 planned cells stored in results/"
    assert lines[-3:] == ["open, by data set and model:", "  beauty-ts gru4rec: seed 3 (about 0.7 h)",
                          "  beauty-ts bert4rec: seeds 2, 3 (about 2.3 h)"]


@pytest.mark.slow
def test_the_queue_status_costs_a_started_cell_by_what_is_left_of_it(tmp_path: Path) -> None:
    """bert4rec on beauty-ts costs 70 minutes a seed. Seed 3, started with ten one-minute epochs left, costs 10
    minutes and a twentieth of 70 for its diagnosis (13.5 minutes), and comes first; seed 2 costs 70: 1.4 hours in
    all, where counting the started seed whole would say 2.3."""
    import json
    import subprocess

    repo = _queue_repo(tmp_path, "beauty-ts bert4rec 2\nbeauty-ts bert4rec 3\n")
    run = repo / "runs" / "repro" / "beauty-ts" / "bert4rec" / "seed3"
    run.mkdir(parents=True)
    run.joinpath("config.json").write_text(json.dumps({"train": {"patience": 10}}))
    run.joinpath("metrics.jsonl").write_text(json.dumps({"epoch": 5, "best_epoch": 5, "seconds": 60}) + "\n")
    done = subprocess.run(["bash", "scripts/reproduce_queue.sh", "--status", "scripts/grid.txt"], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("next open: beauty-ts bert4rec 3, epoch 5 (best 5,")
    assert lines[2] == "next open: beauty-ts bert4rec 2"
    assert lines[3].startswith("open cells: 2, about 1 CPU hours")
    assert lines[-1] == "  beauty-ts bert4rec: seeds 3, 2 (about 1.4 h)"


@pytest.mark.slow
def test_the_queue_holds_until_to_the_slowest_stored_seed(tmp_path: Path) -> None:
    """Two stored bert4rec seeds on beauty-ts took 70 and 10 minutes: --status prices seed 3 at their mean (40
    minutes), but UNTIL holds a worker to the slowest (70 minutes), so 50 minutes left start nothing and 80 do."""
    import json
    import subprocess

    repo = _queue_repo(tmp_path, "beauty-ts bert4rec 3\n")
    cell = repo / "results" / "beauty-ts" / "bert4rec" / "seed2"
    cell.mkdir(parents=True)
    cell.joinpath("cell.json").write_text(json.dumps({"compute": {"train_seconds": 540, "diagnose_seconds": 60}}))
    status = subprocess.run(["bash", "scripts/reproduce_queue.sh", "--status", "scripts/grid.txt"], cwd=repo,
                            capture_output=True, text=True, timeout=120)
    assert status.stdout.splitlines()[-1] == "  beauty-ts bert4rec: seed 3 (about 0.7 h)"
    assert _run_queue(repo, "now + 50 minutes") == []
    assert _run_queue(repo, "now + 80 minutes") == ["beauty-ts bert4rec 3"]


@pytest.mark.slow
def test_the_queue_scales_its_estimates_by_the_cells_it_finished(tmp_path: Path) -> None:
    """A worker whose first cell took a tenth of its estimate (4 of 40 minutes) takes a 70-minute cell with 50
    minutes left: the estimate scaled by the machine's speed (about 7 minutes) fits."""
    repo = _queue_repo(tmp_path, "beauty-ts gru4rec 2\nbeauty-ts bert4rec 2\n")
    assert _run_queue(repo, "now + 50 minutes", STUB_STORES="1") == ["beauty-ts gru4rec 2", "beauty-ts bert4rec 2"]


@pytest.mark.slow
def test_the_queue_measures_its_speed_per_epoch(tmp_path: Path) -> None:
    """The stored gru4rec cell ran 40 epochs in 40 minutes. A worker's first gru4rec cell that took 4 minutes for 4
    epochs (it stopped early) went at the stored speed, so the 70-minute bert4rec cell does not fit 50 minutes; one
    that took 4 minutes for 40 epochs went ten times as fast, so it does."""
    import json

    repo = _queue_repo(tmp_path, "beauty-ts gru4rec 2\nbeauty-ts bert4rec 2\n")
    cell = repo / "results" / "beauty-ts" / "gru4rec" / "seed1" / "cell.json"
    cell.write_text(json.dumps({**json.loads(cell.read_text()), "epochs_run": 40}))
    assert _run_queue(repo, "now + 50 minutes", STUB_STORES="1", STUB_EPOCHS="4") == ["beauty-ts gru4rec 2"]
    stored = json.loads((repo / "results" / "beauty-ts" / "gru4rec" / "seed2" / "cell.json").read_text())
    assert stored["epochs_run"] == 4
    (repo / "results" / "beauty-ts" / "gru4rec" / "seed2" / "cell.json").unlink()
    assert _run_queue(repo, "now + 50 minutes", STUB_STORES="1", STUB_EPOCHS="40") == ["beauty-ts gru4rec 2",
                                                                                     "beauty-ts bert4rec 2"]


@pytest.mark.slow
def test_the_queue_scales_a_models_cost_to_a_data_set_it_has_not_run_on(tmp_path: Path) -> None:
    """bert4rec has run on beauty-ts only (70 minutes). On ml-100k, where gru4rec took a tenth of its beauty-ts
    time, its estimate is a tenth too (7 minutes) and fits 20 minutes; on toys-ts, where no model has run, it is the
    beauty-ts cost and does not fit."""
    import json

    repo = _queue_repo(tmp_path, "toys-ts bert4rec 1\nml-100k bert4rec 1\n")
    cell = repo / "results" / "ml-100k" / "gru4rec" / "seed1"
    cell.mkdir(parents=True)
    cell.joinpath("cell.json").write_text(json.dumps({"compute": {"train_seconds": 200, "diagnose_seconds": 40}}))
    assert _run_queue(repo, "now + 20 minutes") == ["ml-100k bert4rec 1"]


@pytest.mark.slow
def test_the_queue_costs_a_cell_by_its_fresh_cells_where_it_has_some(tmp_path: Path) -> None:
    """bert4rec on beauty-ts has an old cell (70 minutes, no users.npz) and a fresh one (4 minutes, with its
    per-user evidence: the current code): the estimate is the fresh cell's, so seed 3 fits 20 minutes (the mean of
    both, 37 minutes, would not); gru4rec, with its old cell only, is still costed by it (40 minutes)."""
    import json

    repo = _queue_repo(tmp_path, "beauty-ts gru4rec 2\nbeauty-ts bert4rec 3\n")
    cell = repo / "results" / "beauty-ts" / "bert4rec" / "seed2"
    cell.mkdir(parents=True)
    cell.joinpath("cell.json").write_text(json.dumps({"compute": {"train_seconds": 200, "diagnose_seconds": 40}}))
    cell.joinpath("users.npz").touch()
    assert _run_queue(repo, "now + 20 minutes") == ["beauty-ts bert4rec 3"]


@pytest.mark.slow
def test_the_evidence_queue_trains_again_the_cells_stored_without_users_npz(tmp_path: Path) -> None:
    """EVIDENCE=1: a cell stored without its per-user evidence is open again (a new run in runs/evidence); one
    with users.npz is done. Without it, both are stored and nothing is trained."""
    repo = _queue_repo(tmp_path, "beauty-ts gru4rec 1\nbeauty-ts bert4rec 1\n")
    (repo / "results" / "beauty-ts" / "bert4rec" / "seed1" / "users.npz").touch()
    assert _run_queue(repo, "now + 10 hours") == []
    assert _run_queue(repo, "now + 10 hours", EVIDENCE="1", STUB_STORES="1") == ["beauty-ts gru4rec 1"]
    assert (repo / "grids.txt").read_text().split() == ["runs/evidence"]
    assert _run_queue(repo, "now + 10 hours", EVIDENCE="1") == []  # now stored with its evidence


CLAIM_RACE = r'''
set -u
SCRIPT=$1 N=$2 T=$3
export CLAIMS=$T/claims T
mkdir -p "$CLAIMS"
FUNCS=$(sed -n '/^claim() {/,/^}/p; /^release() {/,/^}/p' "$SCRIPT")
export FUNCS
WORKER='eval "$FUNCS"
type release >/dev/null 2>&1 || release() { rm -rf "$CLAIMS/$1"; }
touch "$T/ready/$1.$$"
flock -s "$T/start" true
if claim "$1"; then r=won; else r=lost; fi
echo "$1 $$ $r" >"$T/done/$1.$$"
flock -s "$T/end" true
[ "$r" = lost ] && release "$1"
exit 0'
mkdir -p "$T/ready" "$T/done"
exec 7>"$T/start" 8>"$T/end"
flock -x 7; flock -x 8
for i in $(seq "$N"); do
  for w in a b; do bash -c "$WORKER" _ "cell$i" 7>&- 8>&- & done
done
until [ "$(ls "$T/ready" | wc -l)" -ge $((2 * N)) ]; do sleep 0.1; done
flock -u 7  # every worker is at the start line: go
until [ "$(ls "$T/done" | wc -l)" -ge $((2 * N)) ]; do sleep 0.1; done
cat "$T"/done/* >"$T/results"
for i in $(seq "$N"); do echo "cell$i $(cat "$CLAIMS/cell$i/pid" 2>/dev/null)"; done >"$T/holders"
flock -u 8  # winners still alive until every worker has decided; now the losers release (not theirs)
wait
for i in $(seq "$N"); do echo "cell$i $(cat "$CLAIMS/cell$i/pid" 2>/dev/null)"; done >"$T/after"
'''


@pytest.mark.slow
def test_two_queue_workers_never_both_claim_a_cell(tmp_path: Path) -> None:
    """200 races of two workers for one cell each (released together): exactly one wins every time, its pid is
    the claim's, and the loser's release leaves the winner's claim in place."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    harness = tmp_path / "race.sh"
    harness.write_text(CLAIM_RACE)
    n = 200
    done = subprocess.run(["bash", str(harness), str(root / "scripts" / "reproduce_queue.sh"), str(n),
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    winners: dict[str, list[str]] = {}
    for line in (tmp_path / "results").read_text().splitlines():
        cell, pid, outcome = line.split()
        winners.setdefault(cell, [])
        if outcome == "won":
            winners[cell].append(pid)
    assert len(winners) == n
    double = {c: w for c, w in winners.items() if len(w) != 1}
    assert not double, f"{len(double)} of {n} cells without exactly one winner: {list(double.items())[:3]}"
    holders = dict(line.split() for line in (tmp_path / "holders").read_text().splitlines())
    after = dict(line.split() for line in (tmp_path / "after").read_text().splitlines())
    assert holders == after == {c: w[0] for c, w in winners.items()}
    assert not [p for p in (tmp_path / "claims").iterdir() if p.name.startswith(".new.")]


STUB_PYTHON = r'''#!/usr/bin/env bash
# stands in for "python3 -m resdom reproduce ...": records its arguments, then stores the cell (or fails, or hangs)
[ "$1 $2 $3" = "-m resdom reproduce" ] || exit 9
shift 3
while [ $# -gt 0 ]; do case $1 in --datasets) d=$2;; --models) m=$2;; --seeds) s=$2;; --store) store=$2;;
  --device) dev=$2;; esac; shift; done
echo "$d $m $s $dev" >> "$LOG_STARTED"
case $m in broken) echo "Traceback: boom" >&2; exit 1;; slow) sleep 600;; esac
mkdir -p "$store/$d/$m/seed$s" && echo '{}' > "$store/$d/$m/seed$s/cell.json" && touch "$store/$d/$m/seed$s/users.npz"
'''


@pytest.mark.slow
def test_device_cells_trains_the_open_cells_and_imports_them(tmp_path: Path) -> None:
    """scripts/device_cells.sh --run: the queue's open cells (EVIDENCE=1: also those stored without users.npz) on the
    device, a failure and a cell past the deadline reported, the finished ones packed; --import adds to the store
    only the cells it lacks (COMMIT=0: no git)."""
    import os
    import shutil
    import subprocess
    import tarfile

    root = Path(__file__).resolve().parents[1]
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(root / "scripts" / "device_cells.sh", repo / "scripts")
    (repo / "src").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STUB_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    old = repo / "results" / "toys-ts" / "sasrec" / "seed1"  # stored without its evidence
    old.mkdir(parents=True)
    old.joinpath("cell.json").write_text('{"old": true}')
    done = repo / "results" / "toys-ts" / "sasrec" / "seed2"  # stored with it
    done.mkdir(parents=True)
    done.joinpath("cell.json").write_text("{}")
    done.joinpath("users.npz").touch()
    queue = repo / "q.txt"
    queue.write_text("# a comment\ntoys-ts sasrec 1\ntoys-ts sasrec 2\ntoys-ts broken 1\ntoys-ts slow 1\n"
                     "beauty-ts duorec 3\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "LOG_STARTED": str(tmp_path / "started.txt"), "EVIDENCE": "1"}
    run = subprocess.run(["bash", "scripts/device_cells.sh", "--run", "q.txt", "8", "2"], cwd=repo,
                         env={**env, "MIN_LEFT": "2"},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    started = sorted((tmp_path / "started.txt").read_text().splitlines())
    assert started == ["beauty-ts duorec 3 cuda", "toys-ts broken 1 cuda", "toys-ts sasrec 1 cuda",
                       "toys-ts slow 1 cuda"]
    log = (tmp_path / "out" / "cells.log").read_text()
    assert "4 open cells" in log and "stored: toys-ts sasrec 1" in log and "stored: beauty-ts duorec 3" in log
    assert "not stored (failed or past the deadline): toys-ts broken 1" in log and "  > Traceback: boom" in log
    assert "not stored (failed or past the deadline): toys-ts slow 1" in log and "2 cells stored" in log
    with tarfile.open(tmp_path / "out" / "cells.tar.gz") as tar:
        cells = sorted(n for n in tar.getnames() if n.endswith("cell.json"))
    assert cells == ["./beauty-ts/duorec/seed3/cell.json", "./toys-ts/sasrec/seed1/cell.json"]

    imp = subprocess.run(["bash", "scripts/device_cells.sh", "--import", str(tmp_path / "out" / "cells.tar.gz")],
                         cwd=repo, env={**env, "EVIDENCE": "0", "COMMIT": "0"}, capture_output=True, text=True)
    assert imp.returncode == 0, imp.stderr
    assert "kept: results/toys-ts/sasrec/seed1 (already stored)" in imp.stdout
    assert (repo / "results" / "beauty-ts" / "duorec" / "seed3" / "users.npz").exists()
    assert old.joinpath("cell.json").read_text() == '{"old": true}' and not old.joinpath("users.npz").exists()
    imp = subprocess.run(["bash", "scripts/device_cells.sh", "--import", str(tmp_path / "out" / "cells.tar.gz")],
                         cwd=repo, env={**env, "COMMIT": "0"}, capture_output=True, text=True)  # EVIDENCE=1
    assert "imported: results/toys-ts/sasrec/seed1" in imp.stdout and old.joinpath("users.npz").exists()
    bad = subprocess.run(["bash", "scripts/device_cells.sh", "--import", str(tmp_path / "nope.tar.gz")], cwd=repo,
                         env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "nope.tar.gz: no such file" in bad.stderr


def test_largest_recovery_takes_the_first_alpha_of_the_highest_value() -> None:
    curve = [{"alpha": 1.0, "recovery": 0.0}, {"alpha": 0.2, "recovery": 0.3}, {"alpha": 0.1, "recovery": 0.3},
             {"alpha": 0.0, "recovery": float("nan")}, {"alpha": 0.5, "recovery": 0.1}]
    assert recovery_filter_check.largest(curve) == (0.3, 0.1)


def test_recovery_filter_check_reproduces_the_stored_curve_and_refuses_another(tmp_path: Path) -> None:
    """Its filtered curve is the one ``resdom diagnose --what recovery`` stored for the same checkpoint (else it
    stops); the unfiltered one ranks every item, so its recoverable set is its own."""
    import json

    from cli_helpers import invoke

    split = resdom.prepare_split("synthetic:n_users=200,n_items=60,min_len=5,max_len=12,seed=0", "loo")
    run = tmp_path / "run"
    resdom.fit(split, "sasrec", out=run, device="cpu", progress=False, **SMALL)
    assert invoke("diagnose", str(run), "--what", "recovery", "--no-progress", "--device", "cpu") == 0
    out = recovery_filter_check.check(run, run)
    stored = json.loads((run / "diagnostics" / "recovery.json").read_text())["test"]
    assert [x["recovery"] for x in out["filtered"]["curve"]] == pytest.approx(
        [x["recovery"] for x in stored["curve"]], nan_ok=True)
    assert out["filtered"]["recoverable"] == stored["recoverable"]
    assert 0 <= out["unfiltered"]["recoverable"] <= out["n_users"] == len(split.test)
    bad = json.loads((run / "diagnostics" / "recovery.json").read_text())
    bad["test"]["curve"][1]["recovery"] += 0.5
    (run / "diagnostics" / "recovery.json").write_text(json.dumps(bad))
    with pytest.raises(SystemExit, match="differs from the stored"):
        recovery_filter_check.check(run, run)
    bad["checkpoint"] = "0" * 16  # a recovery.json of another checkpoint is refused, not skipped
    (run / "diagnostics" / "recovery.json").write_text(json.dumps(bad))
    with pytest.raises(SystemExit, match="recovery.json is of checkpoint 0000000000000000"):
        recovery_filter_check.check(run, run)


def test_mixing_population_check_reproduces_the_stored_ratios_and_refuses_another(tmp_path: Path) -> None:
    """Its test-user ratios are the ones ``resdom diagnose --what mixing`` stored for the same checkpoint (else it
    stops), its validation-user ratios the mixing diagnostic's over the validation set, its input lengths the mean
    real length capped at max_len; ``population_table`` averages seeds per data set beside the paper's Attn."""
    import json

    from cli_helpers import invoke

    from resdom.diagnostics.mixing import mixing_ratios

    split = resdom.prepare_split("synthetic:n_users=200,n_items=60,min_len=5,max_len=20,seed=0", "loo")
    run = tmp_path / "run"
    fitted = resdom.fit(split, "sasrec", out=run, device="cpu", progress=False, **SMALL)
    assert invoke("diagnose", str(run), "--what", "mixing", "--no-progress", "--device", "cpu") == 0
    out = mixing_population_check.check(run, run)
    valid = mixing_ratios(fitted.model, fitted.split.valid).pooled["all"]
    assert out["valid"]["pooled_all"] == pytest.approx({s: valid[s] for s in ("Attn", "+Res", "+LN")})
    lengths = [min(len(x), 12) for x in fitted.split.valid.inputs.to_lists()]
    assert out["valid"]["mean_input_length"] == pytest.approx(sum(lengths) / len(lengths))
    assert max(len(x) for x in fitted.split.valid.inputs.to_lists()) > 12  # the cap is exercised
    assert out["valid"]["n_users"] == len(fitted.split.valid) and out["test"]["n_users"] == len(fitted.split.test)

    cell = {"dataset": "toys-ts", "label": "sasrec", "seed": 1, **out}
    other = {**cell, "seed": 2, "valid": {**out["valid"], "pooled_all": {**out["valid"]["pooled_all"], "Attn": 0.5}}}
    table = mixing_population_check.population_table({"cells": {"a": cell, "b": other, "c": {**cell, "dataset": "x"}}})
    row = table.splitlines()[2]
    assert table.count("\n") == 3 and row.startswith("| toys-ts (Toys) | 2 | ")
    attn = (out["valid"]["pooled_all"]["Attn"] + 0.5) / 2, out["test"]["pooled_all"]["Attn"]
    assert f"| {attn[0]:.3f} | {attn[1]:.3f} | 0.772 |" in row

    bad = json.loads((run / "diagnostics" / "mixing.json").read_text())
    bad["pooled"]["all"]["Attn"] += 0.01
    (run / "diagnostics" / "mixing.json").write_text(json.dumps(bad))
    with pytest.raises(SystemExit, match="differ from the stored mixing.json"):
        mixing_population_check.check(run, run)
    bad["checkpoint"] = "0" * 16
    (run / "diagnostics" / "mixing.json").write_text(json.dumps(bad))
    with pytest.raises(SystemExit, match="mixing.json is of checkpoint 0000000000000000"):
        mixing_population_check.check(run, run)


def test_epoch_trajectory_check_retrains_the_stored_run_and_refuses_another(tmp_path: Path) -> None:
    """A stored cell retrained from its config.json is the same run (every epoch's loss, the kept epoch, and there
    the stored test mixing ratios and HRLI@1); one epoch read per epoch, the kept one's numbers the stored ones. A
    cell whose curve another run wrote is refused, naming the epoch; ``trajectory_table`` reads the kept epoch and
    the epochs closest to the paper's Attn and HRLI@1."""
    import json

    from cli_helpers import invoke

    from resdom.pipeline.store import export_cell

    split = resdom.prepare_split("synthetic:n_users=200,n_items=60,min_len=5,max_len=20,seed=0", protocol="gts")
    run = tmp_path / "run"
    resdom.fit(split, "sasrec", out=run, device="cpu", progress=False, **{**SMALL, "epochs": 3})
    assert invoke("diagnose", str(run), "--no-progress", "--device", "cpu") == 0
    cell = export_cell(run, tmp_path / "store", "toys-ts", "sasrec", 0)
    out = epoch_trajectory_check.trajectory(cell, None)
    meta = json.loads((cell / "cell.json").read_text())
    assert [e["epoch"] for e in out["epochs"]] == [1, 2, 3] and out["kept_epoch"] == meta["best_epoch"]
    kept = out["epochs"][meta["best_epoch"] - 1]
    stored = json.loads((cell / "diagnostics" / "mixing.json").read_text())["pooled"]["all"]
    assert {s: kept[s] for s in ("Attn", "+Res", "+LN")} == pytest.approx(stored, abs=1e-6)
    hrli = json.loads((cell / "diagnostics" / "hrli.json").read_text())["values"]["HRLI@1"]
    assert kept["HRLI@1"] == pytest.approx(hrli, abs=1e-6) and out["n_test_users"] == len(split.test)

    table = epoch_trajectory_check.trajectory_table({"cells": {"c": out}})
    assert table.splitlines()[2].startswith(f"| c | 0.772 / 0.123 / ~0.82 | the kept epoch | {out['kept_epoch']} | ")
    attn = epoch_trajectory_check.closest(out, "Attn", 0.772)
    assert all(abs(e["Attn"] - 0.772) >= abs(attn["Attn"] - 0.772) for e in out["epochs"])
    assert f"| Attn closest to the paper's | {attn['epoch']} | {attn['Attn']:.3f} |" in table

    curve = (cell / "curve.jsonl").read_text().splitlines()
    first = json.loads(curve[0])
    first["loss"] += 0.01
    (cell / "curve.jsonl").write_text("\n".join([json.dumps(first), *curve[1:]]) + "\n")
    with pytest.raises(SystemExit, match="the retrain is not the stored run: epoch 1: loss"):
        epoch_trajectory_check.trajectory(cell, None)


def test_the_analysis_folder_emulation_by_hand(tmp_path: Path) -> None:
    """Two toys-ts seeds: validation users Attn 0.77 / 0.775, +Res 0.12 / 0.13; the stored sweep's test users at
    alpha = 1 Attn 0.80 / 0.81 and at alpha = 0 Attn = +Res = 0.77 / 0.775. One more run's interval of two seeds
    (mean +- 12.706 * sd * sqrt(3/2)) of the validation pass holds the paper's Attn 0.772 and +Res 0.123, the
    alpha = 1 pass neither (Attn 0.805 +- 0.078 holds it: two seeds are wide), the alpha = 0 pass Attn only."""
    import json

    store = tmp_path / "results"
    cells = {}
    for seed, (v, vres, t1, t0) in enumerate([(0.77, 0.12, 0.80, 0.77), (0.775, 0.13, 0.81, 0.775)], 1):
        name = f"results/toys-ts/sasrec/seed{seed}"
        (tmp_path / name / "diagnostics").mkdir(parents=True)
        rows = [{"alpha": 1.0, "mixing_all": {"Attn": t1, "+Res": 0.20, "+LN": 0.20}},
                {"alpha": 0.0, "mixing_all": {"Attn": t0, "+Res": t0, "+LN": t0}}]
        (tmp_path / name / "diagnostics" / "alpha.json").write_text(json.dumps({"checkpoint": f"c{seed}",
                                                                                 "rows": rows}))
        cells[name] = {"dataset": "toys-ts", "checkpoint": f"c{seed}",
                       "valid": {"n_users": 100, "pooled_all": {"Attn": v, "+Res": vres}},
                       "test": {"n_users": 90}}
    values = mixing_population_check.last_pass_values({"cells": cells}, store)
    assert values["toys-ts"]["paper"] == {"Attn": 0.772, "+Res": 0.123}
    assert values["toys-ts"]["seeds"][1]["test users, alpha = 0"] == {"Attn": 0.775, "+Res": 0.775}
    table = mixing_population_check.pass_order_table({"cells": cells}, store)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[2:]}
    assert rows["validation users"] == "| validation users | 0.772 ✓ / 0.125 ✓ | yes | yes |"
    assert rows["test users, alpha = 0"] == "| test users, alpha = 0 | 0.772 ✓ / 0.772 | yes | no |"
    assert rows["test users, alpha = 1"].startswith("| test users, alpha = 1 | 0.805 ✓ / 0.200 | yes | no |")
    assert list(rows) == ["validation users", "test users, alpha = 1", "test users, alpha = 0"]  # the passes held
    assert mixing_population_check.leftover_share({"cells": cells}) == pytest.approx((10 + 256) / 100)
    cells["results/toys-ts/sasrec/seed2"]["checkpoint"] = "other"
    with pytest.raises(SystemExit, match="another checkpoint"):
        mixing_population_check.last_pass_values({"cells": cells}, store)


@pytest.mark.slow
def test_promote_staging_moves_every_cell_in_one_commit_or_none(tmp_path: Path) -> None:
    """scripts/promote_staging.sh refuses while a cell of the queue is missing from the staging store or carries
    another recipe (exit 1, one line, nothing moved), then replaces results/'s cells with the staged ones in one
    commit, the staging store emptied and a cell the queue does not name left as it was."""
    import json
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[1]
    if not (root / ".venv" / "bin" / "python").exists() or shutil.which("git") is None:
        pytest.skip("needs the project's .venv (make test makes it) and git")
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for script in ("promote_staging.sh", "rediagnose_cells.py"):
        shutil.copy(root / "scripts" / script, repo / "scripts")
    (repo / ".venv").symlink_to(root / ".venv")
    (repo / ".gitignore").write_text(".venv\n__pycache__\n")
    (repo / "scripts" / "q.txt").write_text("# the queue\nbeauty-ts sasrec 1\ntoys-ts sasrec-pool 2\n")

    def cell(store: str, name: str, recipe: str | None) -> None:
        folder = repo / store / name
        folder.mkdir(parents=True)
        folder.joinpath("cell.json").write_text(json.dumps({"versions": {"recipe": recipe} if recipe else {}}))
        folder.joinpath("metrics.json").write_text(json.dumps({"store": store}))

    for name in ("beauty-ts/sasrec/seed1", "toys-ts/sasrec-pool/seed2", "toys-ts/gru4rec/seed1"):
        cell("results", name, None)
    cell("stage", "beauty-ts/sasrec/seed1", "sasrec/2")
    cell("stage", "toys-ts/sasrec-pool/seed2", "sasrec/1")
    git = _git_checkout(repo)

    def promote() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "scripts/promote_staging.sh", "stage", "scripts/q.txt", "sasrec/2"], cwd=repo,
                              capture_output=True, text=True, timeout=120)

    done = promote()
    assert done.returncode == 1
    assert done.stderr.strip() == ("stage: 1 of 2 cells of scripts/q.txt not yet stored with recipe sasrec/2, e.g. "
                                   "toys-ts/sasrec-pool/seed2 (recipe: sasrec/1); nothing moved")
    assert git("status", "--porcelain") == "" and len(git("log", "--oneline").splitlines()) == 1
    pool = repo / "stage" / "toys-ts/sasrec-pool/seed2"
    (pool / "cell.json").write_text('{"versions": {"recipe": "sasrec/2"}}')
    # a query-token model's recovery of the reading before prefix passes: diagnosed again before it is promoted
    (pool / "config.json").write_text('{"model": {"readout": "query"}}')
    (pool / "diagnostics").mkdir()
    (pool / "diagnostics" / "recovery.json").write_text('{"rates": [0.1]}')
    git("add", "stage")
    git("commit", "-q", "-m", "the last cell")
    done = promote()
    assert done.returncode == 1
    assert done.stderr.strip() == ("stage: cells of an older reading, to be diagnosed again first (scripts/"
                                   "rediagnose_cells.py --what recovery,users --stale --store stage, on their run "
                                   "folders): toys-ts/sasrec-pool/seed2; nothing moved")
    assert git("status", "--porcelain") == "" and len(git("log", "--oneline").splitlines()) == 2
    (pool / "diagnostics" / "recovery.json").write_text('{"rates": [0.1], "offsets_read": "prefix passes"}')
    git("commit", "-q", "-am", "diagnosed again")
    done = promote()
    assert done.returncode == 0, done.stderr
    assert git("status", "--porcelain") == "" and len(git("log", "--oneline").splitlines()) == 4
    for name in ("beauty-ts/sasrec/seed1", "toys-ts/sasrec-pool/seed2"):
        assert json.loads((repo / "results" / name / "metrics.json").read_text()) == {"store": "stage"}
        assert json.loads((repo / "results" / name / "cell.json").read_text())["versions"]["recipe"] == "sasrec/2"
    assert json.loads((repo / "results/toys-ts/gru4rec/seed1/metrics.json").read_text()) == {"store": "results"}
    assert not any(p.is_file() for p in (repo / "stage").rglob("*"))
    assert "the 2 cells of recipe sasrec/2" in git("log", "-1", "--format=%s")
