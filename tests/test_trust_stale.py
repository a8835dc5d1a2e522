"""A stored result always names the checkpoint it was computed on; nothing of an older model is reported as current."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import invoke

from resdom.diagnostics.runner import run_all
from resdom.io import directory_lock
from resdom.pipeline.common import is_finished
from resdom.report.collect import read_run
from resdom.runs import checkpoint_id, load_run

SOURCE = "synthetic:n_users=120,n_items=30,min_len=6,max_len=14,seed=3"


def _fit(out: Path, epochs: int, seed: int = 17) -> None:
    from resdom.data.prepare import prepare_split
    from resdom.models.config import make_model_config
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import fit

    torch.set_num_threads(1)
    fit(prepare_split(SOURCE, "loo"),
        make_model_config(max_len=12, hidden=16, layers=1, heads=2, dropout=0.1, attn_dropout=0.1),
        TrainConfig(epochs=epochs, patience=50, device="cpu", batch_size=32, seed=seed, lr=0.01), out, progress=False)


@pytest.fixture()
def run_dir(tmp_path) -> Path:
    _fit(tmp_path / "run", epochs=2)
    return tmp_path / "run"


def test_every_result_names_its_checkpoint(run_dir):
    run_all(run_dir, what="hrli,mixing", progress=False)
    ckpt = checkpoint_id(run_dir / "model.safetensors")
    assert len(ckpt) == 16 and int(ckpt, 16) >= 0
    for name in ("hrli", "mixing", "summary"):
        assert json.loads((run_dir / "diagnostics" / f"{name}.json").read_text())["checkpoint"] == ckpt
    assert json.loads((run_dir / "metrics.json").read_text())["checkpoint"] == ckpt
    assert load_run(run_dir).checkpoint == ckpt


def test_further_training_makes_old_diagnostics_stale_in_report_and_summary(run_dir):
    run_all(run_dir, what="shuffle,hrli", seeds=(0,), progress=False)
    old_ckpt = checkpoint_id(run_dir / "model.safetensors")
    assert is_finished(run_dir)
    _fit(run_dir, epochs=5)  # extends the run: a new best checkpoint (lr 0.01 on planted data keeps improving)
    assert checkpoint_id(run_dir / "model.safetensors") != old_ckpt
    assert not is_finished(run_dir)
    rec = read_run(run_dir)
    assert rec.stale == ["hrli", "shuffle", "summary"]  # name order, summary last
    assert rec.diag("hrli") == {} and rec.diag("shuffle") == {}
    assert rec.test_metrics()  # metrics.json was rewritten for the new checkpoint: not stale
    # diagnosing a part again never merges old numbers of the other part into the summary
    summary = run_all(run_dir, what="hrli", progress=False)
    assert "shuffle_NDCG@10_change" not in summary and summary["HRLI@1"] is not None
    assert not (run_dir / "diagnostics" / "shuffle.json").exists()
    assert not (run_dir / "diagnostics" / "shuffle.csv").exists()


def test_report_marks_stale_results(run_dir, tmp_path, capsys):
    run_all(run_dir, what="hrli", progress=False)
    _fit(run_dir, epochs=5)
    assert invoke("report", str(run_dir), "--out", str(tmp_path / "rep")) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "stale, left out: hrli" in md


def test_evaluate_and_diagnose_say_a_run_is_still_training(run_dir, capsys):
    with directory_lock(run_dir, "training"):
        # another process holds the lock in real life; flock is per open file, so a second open in this process
        # sees it held as well
        assert invoke("evaluate", str(run_dir)) == 0
        err = capsys.readouterr().err
        assert "still training" in err and "best checkpoint so far" in err
        assert invoke("diagnose", str(run_dir), "--what", "hrli") == 0
        assert "still training" in capsys.readouterr().err
    assert invoke("evaluate", str(run_dir)) == 0
    assert "still training" not in capsys.readouterr().err


def test_evaluate_diagnose_and_recommend_say_a_run_was_interrupted(run_dir, capsys):
    """A run whose training was killed part-way (no trainer holds it, its state not stopped) was evaluated,
    diagnosed and recommended from with no word that its checkpoint is of an unfinished run. Maker: a finished run's
    trainer.json with its ``stopped`` cleared, as a kill leaves it."""
    path = run_dir / "state" / "trainer.json"
    finished = path.read_text()
    state = json.loads(finished)
    path.write_text(json.dumps({**state, "stopped": None}))
    for args in (["evaluate", str(run_dir)], ["diagnose", str(run_dir), "--what", "hrli", "--no-progress"],
                 ["recommend", str(run_dir), "--users", "1"]):
        assert invoke(*args) == 0
        err = capsys.readouterr().err
        assert f"training was interrupted (epoch {state['epoch']} of {state['train']['epochs']} saved" in err, err
    for text in (finished, "{", ""):  # finished, or a state unreadable as JSON (then train says so): no note
        path.write_text(text)
        assert invoke("evaluate", str(run_dir)) == 0
        assert "interrupted" not in capsys.readouterr().err
