"""The trainer: files written, early stopping, seeds, resume, finished runs, mismatched setups."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_training_support import toy_split

from resdom.diagnostics.monitor import epoch_monitor
from resdom.errors import ResdomError
from resdom.models.config import model_config_class
from resdom.runs import load_run
from resdom.training.config import resolve_configs
from resdom.training.state import EarlyStopping, RunFiles, flatten_optimizer, unflatten_optimizer
from resdom.training.trainer import fit

SMALL = {"hidden": 16, "layers": 1, "heads": 2, "max_len": 8}



def configs(model: str = "sasrec", n_users: int = 60, **train):
    split = toy_split(n_users=n_users)
    values = {"epochs": 3, "batch_size": 32, "device": "cpu", **train}
    small = {k: v for k, v in SMALL.items() if k in model_config_class(model).model_fields}  # gru4rec: no heads
    model_cfg, train_cfg = resolve_configs(model, small, values, n_items=split.n_items)
    return split, model_cfg, train_cfg


class Interrupt(Exception):
    pass


def stop_after(epoch: int):
    def cb(e: int, record: dict) -> None:
        if e == epoch:
            raise Interrupt

    return cb


def test_run_directory_contents(tmp_path: Path) -> None:
    split, m, t = configs()
    result = fit(split, m, t, tmp_path, {"source": "toy"}, progress=False)
    for name in ("config.json", "model.safetensors", "model.json", "metrics.jsonl", "metrics.json",
                 "data/arrays.npz", "state/trainer.json"):
        assert (tmp_path / name).exists(), name
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2, 3]
    assert all(r["samples_per_s"] > 0 and np.isfinite(r["loss"]) and "NDCG@10" in r["valid"] for r in lines)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["train"]["objective"] == "ce_all" and cfg["model"]["n_items"] == split.n_items
    assert cfg["data"]["source"] == "toy" and cfg["data"]["manifest"] == split.manifest
    side = json.loads((tmp_path / "model.json").read_text())
    assert side["epoch"] == result["best_epoch"] and side["data_fingerprint"] == cfg["data"]["fingerprint"]
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert result["test"]["n_users"] == len(split.test) and result["valid"]["n_users"] == len(split.valid)
    best = max(lines, key=lambda r: r["valid"]["NDCG@10"])
    assert result["best_epoch"] == best["epoch"]
    assert result["valid"]["metrics"]["NDCG@10"] == pytest.approx(best["valid"]["NDCG@10"], abs=1e-12)
    # the saved best model is what load_run gives
    run = load_run(tmp_path)
    assert run.model.n_items == split.n_items and run.sidecar["epoch"] == result["best_epoch"]


def test_training_learns(tmp_path: Path) -> None:
    split, m, t = configs(n_users=120, epochs=12, lr=5e-3)
    result = fit(split, m, t, tmp_path, progress=False)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["loss"] < lines[0]["loss"] - 0.5
    assert result["test"]["metrics"]["HR@10"] > 0.5  # 40 items, deterministic successor: learnable


def test_same_seed_same_metrics_other_seed_differs(tmp_path: Path) -> None:
    split, m, t = configs(epochs=2)
    a = fit(split, m, t, tmp_path / "a", progress=False)
    b = fit(split, m, t, tmp_path / "b", progress=False)
    c = fit(split, m, t.model_copy(update={"seed": 18}), tmp_path / "c", progress=False)
    assert a["test"] == b["test"] and a["valid"] == b["valid"]
    assert a["valid"]["metrics"] != c["valid"]["metrics"]
    la = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    lb = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["loss"] for x in la] == [json.loads(x)["loss"] for x in lb]


@pytest.mark.parametrize(
    "model,train", [("sasrec", {}), ("bsarec", {}), ("duorec", {}), ("sasrec", {"objective": "bce"}),
                    ("bert4rec", {}), ("gru4rec", {})]
)
def test_interrupted_run_resumes_to_identical_result(tmp_path: Path, model: str, train: dict) -> None:
    split, m, t = configs(model, n_users=30 if model == "bsarec" else 60, batch_size=64, **train)
    full = fit(split, m, t, tmp_path / "full", progress=False)
    with pytest.raises(Interrupt):
        fit(split, m, t, tmp_path / "cut", callbacks=[stop_after(1)], progress=False)
    state = json.loads((tmp_path / "cut" / "state" / "trainer.json").read_text())
    assert state["epoch"] == 1 and not (tmp_path / "cut" / "metrics.json").exists()
    resumed = fit(split, m, t, tmp_path / "cut", progress=False)
    assert resumed == full
    full_log = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    cut_log = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    def key(log):
        return [(r["epoch"], r["loss"], r["valid"]) for r in log]

    assert key(cut_log) == key(full_log)


def test_raising_epochs_continues_like_one_longer_run(tmp_path: Path) -> None:
    split, m, t = configs(epochs=3)
    full = fit(split, m, t, tmp_path / "full", progress=False)
    short = fit(split, m, t.model_copy(update={"epochs": 1}), tmp_path / "cut", progress=False)
    assert short["epochs_run"] == 1 and short["stopped"] == "max_epochs"
    longer = fit(split, m, t, tmp_path / "cut", progress=False)
    assert longer == full


def test_finished_run_returns_saved_metrics_without_training(tmp_path: Path, monkeypatch) -> None:
    split, m, t = configs(epochs=2)
    first = fit(split, m, t, tmp_path, progress=False)
    import resdom.training.trainer as trainer

    def no_training(*a, **k):
        raise AssertionError("trained again")

    monkeypatch.setattr(trainer, "_train_epoch", no_training)
    assert fit(split, m, t, tmp_path, progress=False) == first
    assert fit(split, m, t.model_copy(update={"eval_batch_size": 7}), tmp_path, progress=False) == first


def test_early_stopping_with_patience(tmp_path: Path, monkeypatch) -> None:
    import resdom.training.trainer as trainer

    values = iter([0.1, 0.3, 0.2, 0.3, 0.25, 0.9])

    def fake_eval(model, split, which, train_cfg, device):
        return {"metrics": {"NDCG@10": next(values) if which == "stop" else 0.0}, "n_users": 1}

    split, m, t = configs(epochs=10, patience=3)
    monkeypatch.setattr(trainer, "_evaluate", fake_eval)
    result = fit(split, m, t, tmp_path, progress=False)
    assert (result["best_epoch"], result["epochs_run"], result["stopped"]) == (2, 5, "early_stopping")
    state = json.loads((tmp_path / "state" / "trainer.json").read_text())
    assert state["epoch"] == 5 and state["stopped"] == "early_stopping"
    assert state["early_stopping"] == {"best_value": 0.3, "best_epoch": 2, "bad_epochs": 3}
    assert json.loads((tmp_path / "model.json").read_text())["epoch"] == 2


def test_early_stopping_unit() -> None:
    es = EarlyStopping()
    assert es.update(0.0, 1) and not es.update(0.0, 2) and es.bad_epochs == 1
    assert es.update(0.1, 3) and es.bad_epochs == 0 and es.best_epoch == 3
    assert not es.should_stop(1) and not es.update(0.05, 4) and es.should_stop(1)


def test_resume_with_other_setup_is_refused(tmp_path: Path) -> None:
    split, m, t = configs()
    with pytest.raises(Interrupt):
        fit(split, m, t, tmp_path, callbacks=[stop_after(1)], progress=False)
    with pytest.raises(ResdomError, match=r"train\.lr: 0\.001 saved vs 0\.002 now"):
        fit(split, m, t.model_copy(update={"lr": 2e-3}), tmp_path, progress=False)
    with pytest.raises(ResdomError, match=r"model\.hidden"):
        fit(split, m.model_copy(update={"hidden": 8}), t, tmp_path, progress=False)
    other = toy_split(seed=1)
    with pytest.raises(ResdomError, match="data fingerprint"):
        fit(other, m, t, tmp_path, progress=False)


def test_item_count_mismatch(tmp_path: Path) -> None:
    split, m, t = configs()
    with pytest.raises(ResdomError, match=r"model\.n_items"):
        fit(split, m.model_copy(update={"n_items": 7}), t, tmp_path, progress=False)


def test_optimizer_state_roundtrip() -> None:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(2):
        model(torch.ones(4, 3)).pow(2).sum().backward()
        opt.step()
    tensors, meta = flatten_optimizer(opt)
    assert set(tensors) == {f"state.{p}.{k}" for p in (0, 1) for k in ("step", "exp_avg", "exp_avg_sq")}
    meta = json.loads(json.dumps(meta))  # JSON round trip, no pickle
    other = torch.optim.Adam(torch.nn.Linear(3, 2).parameters(), lr=0.5)
    other.load_state_dict(unflatten_optimizer(tensors, meta))
    a, b = opt.state_dict(), other.state_dict()
    assert a["param_groups"][0]["lr"] == b["param_groups"][0]["lr"] == 0.01
    for p in (0, 1):
        for k in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(a["state"][p][k], b["state"][p][k])


def test_state_keeps_only_last_epoch_files(tmp_path: Path) -> None:
    split, m, t = configs(n_users=30, epochs=2)
    fit(split, m, t, tmp_path, progress=False)
    files = RunFiles(tmp_path)
    names = sorted(p.name for p in files.state_dir.iterdir())
    assert names == ["model-0002.safetensors", "optimizer-0002.safetensors", "trainer.json"]


def test_duorec_supervised_views_train(tmp_path: Path) -> None:
    split = toy_split(n_users=20)
    m, t = resolve_configs("duorec", {**SMALL, "duorec_views": "both"}, {"epochs": 1, "batch_size": 64,
                                                                        "device": "cpu", "objective": "ce_last"},
                           n_items=split.n_items)
    result = fit(split, m, t, tmp_path, progress=False)
    assert result["epochs_run"] == 1 and result["model"] == "duorec"


@pytest.mark.parametrize(
    "train", [{"objective": "ce_sampled", "n_negatives": 8}, {"length_buckets": 2}]
)
def test_large_catalog_objectives_train(tmp_path: Path, train: dict) -> None:
    split, m, t = configs(epochs=1, **train)
    result = fit(split, m, t, tmp_path, progress=False)
    assert np.isfinite(json.loads((tmp_path / "metrics.jsonl").read_text())["loss"])
    assert result["test"]["n_users"] == len(split.test)


def test_item_chunk_is_accepted_and_changes_nothing(tmp_path: Path) -> None:
    """train.item_chunk (its chunked CE was removed: slower and larger than the default) still loads, and trains
    exactly as without it."""
    split, m, t = configs(epochs=1)
    full = fit(split, m, t, tmp_path / "a", progress=False)
    chunked = fit(split, m, t.model_copy(update={"item_chunk": 7}), tmp_path / "b", progress=False)
    assert chunked["test"]["metrics"] == full["test"]["metrics"]


def test_ctrl_c_mid_epoch_then_resume(tmp_path: Path, monkeypatch) -> None:
    """A KeyboardInterrupt inside epoch 2 (weights half-updated in memory) resumes from epoch 1's state."""
    import resdom.training.trainer as trainer

    split, m, t = configs(epochs=3, batch_size=16, length_groups=1)  # one forward per step
    full = fit(split, m, t, tmp_path / "full", progress=False)
    original = trainer.TrainStep.forward
    calls = {"n": 0}

    def flaky(self, *args):
        calls["n"] += 1
        if calls["n"] == 6:  # 60 samples / 16 = 4 steps per epoch: the 2nd step of epoch 2
            raise KeyboardInterrupt
        return original(self, *args)

    monkeypatch.setattr(trainer.TrainStep, "forward", flaky)
    with pytest.raises(KeyboardInterrupt):
        fit(split, m, t, tmp_path / "cut", progress=False)
    monkeypatch.setattr(trainer.TrainStep, "forward", original)
    assert json.loads((tmp_path / "cut" / "state" / "trainer.json").read_text())["epoch"] == 1
    # a kill between the log line and the state: a record of a later epoch and a torn line
    with (tmp_path / "cut" / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"epoch": 2, "loss": 0.0}) + "\n" + '{"epoch": 3, "lo')
    assert fit(split, m, t, tmp_path / "cut", progress=False) == full
    epochs = [json.loads(x)["epoch"] for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]


def test_diverging_loss_is_a_clear_error(tmp_path: Path) -> None:
    split, m, t = configs(epochs=2, lr=1e30)
    with pytest.raises(ResdomError, match="diverged at epoch 1"):
        fit(split, m, t, tmp_path, progress=False)


def test_weights_whose_scores_overflow_are_a_divergence_too(tmp_path: Path, monkeypatch) -> None:
    """train.lr=1e30 on synthetic data: a finite epoch loss, then validation scores of inf, which ended the run in
    "its weights are broken ... retrain or re-import the run"; it is the epoch's divergence, with the lr to lower."""
    import resdom.training.trainer as trainer
    from resdom.evaluation.ranking import NonFiniteScores

    def overflowed(*args: object, **kwargs: object) -> None:
        raise NonFiniteScores("the model scores items as NaN or infinity")

    monkeypatch.setattr(trainer, "_evaluate", overflowed)
    split, m, t = configs(epochs=2, lr=0.5)
    with pytest.raises(ResdomError, match=r"training diverged at epoch 1 \(loss [0-9.]+, but the model scores items "
                                          r"as NaN or infinity\); try a lower learning rate, lr=N \(now 0.5\)"):
        fit(split, m, t, tmp_path, progress=False)


def test_progress_bar_shows_loss_and_metric(tmp_path: Path, capsys, monkeypatch) -> None:
    split, m, t = configs(n_users=20, epochs=1)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # bars only on a terminal
    fit(split, m, t, tmp_path / "on", progress=True)
    err = capsys.readouterr().err
    assert "epochs" in err and "loss=" in err and "NDCG@10=" in err and "epoch 1/1:" not in err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    for progress in (True, None):  # a log (stderr not a terminal) gets one plain line per epoch, never a bar
        fit(split, m, t, tmp_path / f"log-{progress}", progress=progress)
        err = capsys.readouterr().err
        assert err.startswith("epoch 1/1: loss ") and "valid NDCG@10" in err and "\r" not in err, err
    fit(split, m, t, tmp_path / "off", progress=False)
    assert capsys.readouterr().err == ""


def test_unusable_splits_are_clear_errors(tmp_path: Path) -> None:
    from resdom.data.sequences import EvalSet, Sequences, SplitData

    split, m, t = configs(n_users=10)
    no_valid = SplitData(split.train, EvalSet(Sequences.from_lists([]), []), split.test, split.n_items, {})
    with pytest.raises(ResdomError, match=r"no validation users: early stopping and the best checkpoint need "
                                          r"them$"):
        fit(no_valid, m, t, tmp_path / "a", progress=False)
    gts = SplitData(split.train, no_valid.valid, split.test, split.n_items, {"protocol": "gts"})
    with pytest.raises(ResdomError, match=r"need them \(a gts split: a lower --valid-quantile moves T_val earlier\)"):
        fit(gts, m, t, tmp_path / "g", progress=False)
    one_item = SplitData(Sequences.from_lists([[1]] * 10), split.valid, split.test, split.n_items, {})
    with pytest.raises(ResdomError, match="no training samples for ce_all"):
        fit(one_item, m, t, tmp_path / "b", progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # refused before writing


@pytest.mark.parametrize(("model", "bucketed"), [("sasrec", True), ("bsarec", False)])
def test_length_bucketing_only_for_trimmed_models(tmp_path: Path, monkeypatch, model: str, bucketed: bool) -> None:
    """BSARec runs every batch on the full window, so bucketing would only make its batches less random."""
    import resdom.training.trainer as trainer

    calls = []
    real = trainer.bucket_by_length
    monkeypatch.setattr(trainer, "bucket_by_length", lambda *a: calls.append(a[3]) or real(*a))
    split, m, t = configs(model, epochs=2, length_buckets=4)
    fit(split, m, t, tmp_path, progress=False)
    assert calls == ([4, 4] if bucketed else [])


def test_a_run_directory_in_use_is_refused(tmp_path: Path) -> None:
    """Two trainers writing one directory would interleave checkpoints; the second is a clear error."""
    from resdom.io import directory_lock

    split, m, t = configs(epochs=1)
    with directory_lock(tmp_path, "training"), pytest.raises(ResdomError, match="another process is already"):
        fit(split, m, t, tmp_path, progress=False)
    assert not (tmp_path / "state").exists()
    fit(split, m, t, tmp_path, progress=False)  # free again once released
    assert (tmp_path / "metrics.json").exists()


def test_a_refusal_names_what_the_lock_holder_does_there(tmp_path: Path) -> None:
    """A trainer refused because an import (or ``Fitted.save``) writes the folder said "already training there": the
    holder's activity is in the lock file, and the refusal names it."""
    from resdom.io import directory_lock

    split, m, t = configs(epochs=1)
    with directory_lock(tmp_path, "writing"), pytest.raises(
            ResdomError, match=f"^{tmp_path}: another process is already writing there; wait for it to finish"):
        fit(split, m, t, tmp_path, progress=False)
    (tmp_path / ".lock").write_text("x" * 100)  # a lock file that says nothing usable: the refused command's word
    with open(tmp_path / ".lock", "a") as f:
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ResdomError, match="another process is already training there"):
            fit(split, m, t, tmp_path, progress=False)


def test_a_run_being_trained_is_neither_finished_nor_resumed_by_a_second_trainer(tmp_path: Path) -> None:
    """A second `resdom train` with the epochs the running one had reached (its state, read mid-run) went on to
    finish the run beside the first: metrics.json of that epoch and a "stopped" state while the first trained on.
    It is refused before the state is read, with nothing written."""
    from resdom.io import directory_lock

    split, m, t = configs(epochs=1)
    t2 = t.model_copy(update={"epochs": 2})
    fit(split, m, t, tmp_path, progress=False)
    (tmp_path / "metrics.json").unlink()  # as in a run whose trainer is on its way to 2 epochs
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for cfg in (t, t2):  # finishing at epoch 1, or resuming to 2
        with directory_lock(tmp_path, "training"), pytest.raises(ResdomError, match="another process is already"):
            fit(split, m, cfg, tmp_path, progress=False)
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_threads_may_change_on_resume(tmp_path: Path) -> None:
    split, m, t = configs(epochs=1)
    fit(split, m, t, tmp_path, progress=False)
    t2 = t.model_copy(update={"epochs": 2, "threads": 1})
    assert fit(split, m, t2, tmp_path, progress=False)["epochs_run"] == 2


def test_threads_hold_for_the_fit_alone(tmp_path: Path) -> None:
    """fit(threads=1) left the caller's process on one torch thread for everything after it (evaluation, the
    next fit): the count is the fit's, the caller's own comes back when it returns, or fails."""
    split, m, t = configs(epochs=1)
    own = torch.get_num_threads()
    torch.set_num_threads(3)  # the caller's count, whatever the machine's default
    try:
        seen = []
        fit(split, m, t.model_copy(update={"threads": 1}), tmp_path / "a", progress=False,
            callbacks=[lambda epoch, record: seen.append(torch.get_num_threads())])
        assert seen == [1] and torch.get_num_threads() == 3
        with pytest.raises(ResdomError):
            fit(split, m, t.model_copy(update={"threads": 1, "lr": 1.0}), tmp_path / "a", progress=False)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(own)


def test_the_source_commit_is_recorded_per_epoch_and_in_the_config(tmp_path: Path, monkeypatch) -> None:
    """A resumed run trained by other code says so epoch by epoch; the cell's compute lists both commits."""
    import resdom
    from resdom import runs
    from resdom.pipeline.reproduce import cell_compute
    from resdom.training import trainer

    assert runs.source_commit(tmp_path) is None  # no SOURCE_COMMIT file
    (tmp_path / "SOURCE_COMMIT").write_text("abc1234\n")
    assert runs.source_commit(tmp_path) == "abc1234"
    assert runs.source_commit(Path(resdom.__file__).parent) is None  # a checkout records none
    split, m, t = configs(epochs=1)
    run = tmp_path / "run"
    monkeypatch.setattr(trainer, "source_commit", lambda: "abc1234")
    monkeypatch.setattr(runs, "source_commit", lambda: "abc1234")
    fit(split, m, t, run, progress=False)
    monkeypatch.setattr(trainer, "source_commit", lambda: "def5678")
    monkeypatch.setattr(runs, "source_commit", lambda: "def5678")
    fit(split, m, t.model_copy(update={"epochs": 2}), run, progress=False)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["source"] for r in records] == ["abc1234", "def5678"]
    assert json.loads((run / "config.json").read_text())["versions"]["source"] == "def5678"
    assert cell_compute(run)["sources"] == ["abc1234", "def5678"]


@pytest.mark.parametrize("objective", ["ce_all", "ce_last", "bce"])
def test_grouped_backward_gives_the_whole_batch_gradient(objective: str) -> None:
    """backward_groups over length groups = one backward of the whole batch (same loss, same gradients)."""
    from resdom.distributed import setup
    from resdom.models import TrainBatch, build_model
    from resdom.training.batches import build_samples, length_groups, make_batch
    from resdom.training.objectives import LossContext, get_objective
    from resdom.training.trainer import TrainStep, backward_groups

    split, m, _ = configs(model="sasrec", n_users=40)
    m = m.model_copy(update={"dropout": 0.0, "attn_dropout": 0.0})
    obj = get_objective(objective)
    samples = build_samples(split.train, m.max_len, obj.layout)
    # an empty prefix (ce_last's first sample of a user) attends over padding only, so its state depends on the
    # width it is padded to, grouped or not: it is left out here (docs/choices.md)
    nonempty = np.flatnonzero(samples.end > samples.start)
    idx = np.random.default_rng(0).permutation(nonempty)[:32]
    whole = make_batch(samples, idx, n_items=split.n_items, rng=np.random.default_rng(1), negatives=obj.needs_negatives)
    torch.manual_seed(0)
    step = TrainStep(build_model(m), obj, LossContext())
    step.train()
    ctx = setup("cpu")
    want_loss = backward_groups(step, [whole], ctx)
    want = {n: p.grad.clone() for n, p in step.named_parameters() if p.grad is not None}
    step.zero_grad(set_to_none=True)
    # the groups as sub-batches of the same rows (so bce's negatives are the same ones)
    lengths = samples.end - samples.start
    groups = length_groups(idx, lengths, 3)
    assert len(groups) > 1
    row = {int(s): r for r, s in enumerate(idx)}
    parts = []
    for g in groups:
        rows = [row[int(s)] for s in g]
        w = max(1, int(lengths[g].max()))
        neg = None if whole.negatives is None else whole.negatives[rows][:, -w:]
        tgt = whole.targets[rows] if obj.layout == "last" else whole.targets[rows][:, -w:]
        parts.append(TrainBatch(whole.items[rows][:, -w:], tgt, neg))
        assert (whole.items[rows][:, :-w] == 0).all()  # only padding was cut
    got_loss = backward_groups(step, parts, ctx)
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    got = {n: p.grad for n, p in step.named_parameters() if p.grad is not None}
    assert got.keys() == want.keys()
    for n in want:
        torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-6)


def test_length_groups_train_like_one_pass_per_batch(tmp_path: Path) -> None:
    split, m, t = configs(epochs=3, length_groups=1)
    m = m.model_copy(update={"dropout": 0.0, "attn_dropout": 0.0})
    one = fit(split, m, t, tmp_path / "one", progress=False)
    four = fit(split, m, t.model_copy(update={"length_groups": 4}), tmp_path / "four", progress=False)
    assert four["valid"]["metrics"]["NDCG@10"] == pytest.approx(one["valid"]["metrics"]["NDCG@10"], abs=1e-4)
    logs = [[json.loads(x)["loss"] for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
            for d in ("one", "four")]
    assert logs[1] == pytest.approx(logs[0], rel=1e-4)


def test_resume_of_a_run_saved_before_a_config_field_existed(tmp_path: Path) -> None:
    """A field added to ModelConfig / TrainConfig later holds its default in older saved state: resumable."""
    split, m, t = configs(epochs=2)
    with pytest.raises(Interrupt):
        fit(split, m, t, tmp_path, callbacks=[stop_after(1)], progress=False)
    state_file = tmp_path / "state" / "trainer.json"
    state = json.loads(state_file.read_text())
    del state["model"]["query_ln"], state["model"]["init_padding"]
    state_file.write_text(json.dumps(state))
    assert fit(split, m, t, tmp_path, progress=False)["epochs_run"] == 2
    state["model"]["hidden"] = 999  # a real difference is still refused
    state["epoch"] = 1
    state["stopped"] = None
    state_file.write_text(json.dumps(state))
    with pytest.raises(ResdomError, match="model.hidden"):
        fit(split, m, t, tmp_path, progress=False)


def test_a_run_saved_under_the_older_data_fingerprint_resumes_and_loads(tmp_path: Path) -> None:
    """Runs saved before the fingerprint stopped hashing the data's path carry the older fingerprint: they resume,
    finish and load; a fingerprint of other data is still refused."""
    from resdom.data import prepare_split
    from resdom.runs import data_fingerprints

    rng = np.random.default_rng(0)
    rows = [f"u{u},i{rng.integers(40)},{t}" for u in range(60) for t in range(int(rng.integers(4, 9)))]
    (tmp_path / "mine.csv").write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    split = prepare_split(str(tmp_path / "mine.csv"), "loo")
    m, t = resolve_configs("sasrec", SMALL, {"epochs": 2, "batch_size": 32, "device": "cpu"}, n_items=split.n_items)
    full = fit(split, m, t, tmp_path / "full", progress=False)
    with pytest.raises(Interrupt):
        fit(split, m, t, tmp_path / "old", callbacks=[stop_after(1)], progress=False)
    current, legacy = data_fingerprints(split)
    assert current != legacy
    for name in ("state/trainer.json", "model.json"):
        f = tmp_path / "old" / name
        saved = json.loads(f.read_text())
        assert saved["data_fingerprint"] == current
        f.write_text(json.dumps({**saved, "data_fingerprint": legacy}))
    assert fit(split, m, t, tmp_path / "old", progress=False) == full
    side = tmp_path / "old" / "model.json"
    side.write_text(json.dumps({**json.loads(side.read_text()), "data_fingerprint": legacy}))
    assert load_run(tmp_path / "old").sidecar["data_fingerprint"] == legacy
    side.write_text(json.dumps({**json.loads(side.read_text()), "data_fingerprint": "0123456789abcdef"}))
    with pytest.raises(ResdomError, match="trained on another data set"):
        load_run(tmp_path / "old")


def test_monitor_records_reliance_curve_without_changing_training(tmp_path: Path) -> None:
    split, m, t = configs(epochs=3)
    plain = fit(split, m, t, tmp_path / "plain", progress=False)
    watched = fit(split, m, t.model_copy(update={"monitor_every": 2, "monitor_users": 25}), tmp_path / "watched",
                  progress=False, hooks=(epoch_monitor,))
    assert watched["test"] == plain["test"]
    log = [json.loads(line) for line in (tmp_path / "watched" / "metrics.jsonl").read_text().splitlines()]
    assert [("monitor" in r) for r in log] == [False, True, False]
    assert [r["loss"] for r in log] == [json.loads(x)["loss"] for x in
                                        (tmp_path / "plain" / "metrics.jsonl").read_text().splitlines()]
    mon = log[1]["monitor"]
    assert mon["n_users"] == 25 and 0.0 <= mon["HRL2I@1"] <= 1.0 and 0.0 <= mon["HRLI@1"] <= 1.0
    assert set(mon["mixing_all"]) == {"Attn", "+Res", "+LN"}
    assert 0.0 <= mon["unseen_share"] <= 1.0 and "HRLI@1_seen" in mon


def test_monitor_equals_the_full_diagnostics_on_the_same_users() -> None:
    from resdom.diagnostics.hrli import last_item_hit_rates
    from resdom.diagnostics.mixing import mixing_ratios
    from resdom.diagnostics.monitor import cheap_diagnostics
    from resdom.models import build_model

    split, m, _ = configs()
    torch.manual_seed(0)
    model = build_model(m).eval()
    sub = split.valid.subset(20, seed=3)
    assert len(sub) == 20 and np.array_equal(sub.targets, split.valid.subset(20, seed=3).targets)
    got = cheap_diagnostics(model, sub)
    assert got["HRLI@1"] == last_item_hit_rates(model, sub).to_dict()["values"]["HRLI@1"]
    assert got["mixing_last"] == mixing_ratios(model, sub).to_dict()["pooled"]["last"]
    # with training frequencies: HRLI@1 over the users whose last item is in training, by hand
    from resdom.data.sequences import item_counts

    counts = item_counts(split.train, split.n_items)
    counts[sub.inputs.items[sub.inputs.offsets[1:3] - 1]] = 0  # make the first two users' last items unseen
    banded = cheap_diagnostics(model, sub, train_counts=counts)
    last = sub.inputs.items[sub.inputs.offsets[1:] - 1]
    seen = counts[last] > 0
    hits = last_item_hit_rates(model, sub, Ks=(1,)).values  # overall only: recompute per user below
    items = torch.from_numpy(sub.inputs.padded(model.max_len))
    with torch.no_grad():
        scores = model.encode(items)[:, -1] @ model.item_embeddings().T
    scores[:, 0] = -float("inf")
    top1_is_last = (scores.argmax(1).numpy() == last)
    assert banded["HRLI@1"] == hits["HRLI@1"] == pytest.approx(top1_is_last.mean())
    assert banded["unseen_share"] == pytest.approx(1 - seen.mean()) and not seen[:2].any()
    assert banded["HRLI@1_seen"] == pytest.approx(top1_is_last[seen].mean())


def test_monitor_every_without_a_monitor_is_refused(tmp_path: Path) -> None:
    """The trainer imports no diagnostics: whoever sets train.monitor_every passes the monitor to run."""
    split, m, t = configs(epochs=1)
    with pytest.raises(ResdomError, match="train.monitor_every: the trainer was given no epoch hook"):
        fit(split, m, t.model_copy(update={"monitor_every": 1}), tmp_path, progress=False)
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_epoch_hooks_add_to_the_record_before_it_is_written(tmp_path: Path) -> None:
    """An epoch hook sees the epoch, the model and the data after validation and may add to the epoch's record,
    which metrics.jsonl and the callbacks then hold."""
    from resdom.training.trainer import EpochEnd

    split, m, t = configs(epochs=2)
    seen: list[tuple[int, bool]] = []

    def hook(end: EpochEnd) -> None:
        seen.append((end.epoch, end.split is split and end.model.cfg.hidden == m.hidden))
        end.record["extra"] = end.epoch * 10

    got: list[int] = []
    fit(split, m, t, tmp_path, progress=False, hooks=(hook,), callbacks=[lambda e, r: got.append(r["extra"])])
    log = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert seen == [(1, True), (2, True)] and [r["extra"] for r in log] == got == [10, 20]


def test_resume_state_round_trip_and_a_malformed_one(tmp_path: Path) -> None:
    from resdom.training.state import STATE_FORMAT, ResumeState

    split, m, t = configs(epochs=1)
    fit(split, m, t, tmp_path, progress=False)
    files = RunFiles(tmp_path)
    raw = json.loads(files.state.read_text())
    state = files.read_state()
    assert isinstance(state, ResumeState) and state.epoch == 1 and state.stopped == "max_epochs"
    assert json.loads(json.dumps(state.to_json())) == raw and raw["format"] == STATE_FORMAT
    files.state.write_text(json.dumps({**raw, "early_stopping": {"best": 1}}))
    with pytest.raises(ResdomError, match="malformed resume state .*--force"):  # a finished run: --force, not delete
        files.read_state()


def test_early_stopping_on_a_fixed_subset_of_validation_users(tmp_path: Path) -> None:
    """train.valid_users = k: every epoch's validation (and so early stopping and the best checkpoint) reads the same
    k validation users, drawn with train.seed; the best epoch is the one whose subset NDCG@10 is highest, and the
    saved best model scores that value on the subset; metrics.json still evaluates every validation user."""
    from resdom.evaluation.evaluate import evaluate

    split, m, t = configs(n_users=60, epochs=4, valid_users=25)
    result = fit(split, m, t, tmp_path, {"source": "toy"}, progress=False)
    sub = split.valid.subset(25, t.seed)
    assert len(sub) == 25 < len(split.valid)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["n_users"] for r in lines] == [25] * 4
    best = max(lines, key=lambda r: r["valid"]["NDCG@10"])  # the first of equal values, as early stopping keeps it
    assert result["best_epoch"] == best["epoch"]
    model = load_run(tmp_path).model.eval()
    again = evaluate(model, sub, filter_seen=split.filter_seen, batch_size=64).to_dict()["metrics"]["NDCG@10"]
    assert again == pytest.approx(best["valid"]["NDCG@10"], abs=1e-9)
    assert result["valid"]["n_users"] == len(split.valid)
    with pytest.raises(ResdomError, match="train.valid_users"):
        configs(valid_users=0)


@pytest.mark.parametrize("field,value", [("patience", 1), ("valid_users", 25), ("epochs", 2)])
def test_stopping_fields_change_no_epoch_of_the_run(tmp_path: Path, field: str, value: int) -> None:
    """experiments.STOPPING_FIELDS: a run that differs only in when it stops (patience, validation users, the epoch
    cap) trains, seed for seed, the same epochs as the other: equal losses and validation over the epochs both ran
    (and so a comparison of the two pairs their seeds, experiments.shares_runs)."""
    from resdom.experiments import STOPPING_FIELDS

    assert field in STOPPING_FIELDS
    split, m, t = configs(n_users=60, epochs=4, patience=10)
    fit(split, m, t, tmp_path / "base", progress=False)
    fit(split, m, t.model_copy(update={field: value}), tmp_path / "variant", progress=False)
    base, variant = ([json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
                     for d in ("base", "variant"))
    assert 1 <= len(variant) and len(base) == 4
    assert [r["loss"] for r in variant] == [r["loss"] for r in base[:len(variant)]]
    if field != "valid_users":
        assert [r["valid"] for r in variant] == [r["valid"] for r in base[:len(variant)]]


def test_the_epoch_loss_is_the_mean_of_its_batches_per_target_means(tmp_path: Path) -> None:
    """metrics.jsonl's ``loss`` is the mean over the epoch's batches (the short last one included, weighted as one)
    of each batch's mean CE over its targets: against a float64 loop that encodes every sample alone, on weights
    that Adam's steps of lr 1e-12 leave where they started (no dropout), with the trainer's length groups."""
    import torch.nn.functional as F

    from resdom.models import build_model
    from resdom.training.batches import build_samples, epoch_order
    from resdom.training.trainer import epoch_seed

    split = toy_split(n_users=21)
    small = {**SMALL, "dropout": 0.0, "attn_dropout": 0.0}
    m, t = resolve_configs("sasrec", small, {"epochs": 1, "batch_size": 8, "lr": 1e-12, "device": "cpu"},
                           n_items=split.n_items)
    fit(split, m, t, tmp_path, progress=False)
    reported = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["loss"]
    torch.manual_seed(t.seed)
    model = build_model(m).double().eval()
    samples = build_samples(split.train, m.max_len, "all")
    order = epoch_order(len(samples), np.random.default_rng(epoch_seed(t.seed, 1, 0)))
    assert len(order) % 8 != 0  # a short last batch
    means = []
    with torch.no_grad():
        for s in range(0, len(order), 8):
            terms = []
            for i in order[s : s + 8]:
                start, end = samples.start[i], samples.end[i]
                states = model.encode(torch.from_numpy(samples.items[start:end])[None])[0]
                for p in range(end - start):
                    scores = model.item_embeddings()[1:] @ states[p]
                    terms.append(-float(F.log_softmax(scores, 0)[samples.items[start + 1 + p] - 1]))
            means.append(sum(terms) / len(terms))
    assert reported == pytest.approx(sum(means) / len(means), rel=1e-5)


def _killed_before_state_of(epoch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the trainer die (a kill) after epoch ``epoch``'s checkpoint and log record, before its resume state."""
    import resdom.training.trainer as trainer

    original = trainer.RunFiles.save_state

    def killed(self, state, model, optimizer):  # noqa: ANN001, ANN202
        if state.epoch == epoch:
            raise KeyboardInterrupt
        return original(self, state, model, optimizer)

    monkeypatch.setattr(trainer.RunFiles, "save_state", killed)


def test_fewer_epochs_on_a_run_killed_past_its_state_end_as_that_uninterrupted_run_or_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed in epoch 3 after that epoch's checkpoint and log record, before its state (epoch 2's), then run
    with --epochs 2, ended without training: with epoch 3's checkpoint ("best epoch 3 of 2", other test metrics than
    a 2-epoch run) and epoch 3 in its curve. Epoch 3's checkpoint cannot be undone: refused, naming the epochs that
    resume it; where epoch 3 wrote no checkpoint (no better validation), the run ends as the uninterrupted 2-epoch run,
    its log without epoch 3's record."""
    import resdom.training.trainer as trainer

    split, m, t = configs(n_users=30, epochs=4, lr=5e-3)
    two = t.model_copy(update={"epochs": 2})
    full = fit(split, m, two, tmp_path / "full", progress=False)
    _killed_before_state_of(3, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        fit(split, m, t, tmp_path / "cut", progress=False)
    monkeypatch.undo()
    assert json.loads((tmp_path / "cut" / "model.json").read_text())["epoch"] == 3  # epoch 3 improved
    with pytest.raises(ResdomError, match=r"model\.json: a checkpoint of epoch 3, .* give epochs=3 or more"):
        fit(split, m, two, tmp_path / "cut", progress=False)
    assert not (tmp_path / "cut" / "metrics.json").exists()
    assert fit(split, m, t, tmp_path / "cut", progress=False) == fit(split, m, t, tmp_path / "full4", progress=False)

    # epoch 3 not better: no checkpoint of it, only its log record (and a torn line)
    values = iter([0.5, 0.6, 0.1, 0.1])
    original = trainer._evaluate

    def stop_value(model, split, which, train_cfg, device):  # noqa: ANN001, ANN202
        out = original(model, split, which, train_cfg, device)
        return {**out, "metrics": {**out["metrics"], "NDCG@10": next(values)}} if which == "stop" else out

    monkeypatch.setattr(trainer, "_evaluate", stop_value)
    _killed_before_state_of(3, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        fit(split, m, t, tmp_path / "flat", progress=False)
    monkeypatch.undo()
    with (tmp_path / "flat" / "metrics.jsonl").open("a") as f:
        f.write('{"epoch": 4, "lo')
    assert json.loads((tmp_path / "flat" / "model.json").read_text())["epoch"] == 2
    ended = fit(split, m, two, tmp_path / "flat", progress=False)
    assert (ended["best_epoch"], ended["epochs_run"]) == (2, 2) and ended["test"] == full["test"]
    assert [json.loads(x)["epoch"] for x in (tmp_path / "flat" / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert json.loads((tmp_path / "flat" / "config.json").read_text())["train"]["epochs"] == 2  # what it ended at


def test_a_run_made_in_a_fresh_folder_while_a_trainer_starts_there_is_not_wiped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trainer looks at a folder that does not exist yet, and locks it only once its model is built: another trainer
    (of another setup) that made and finished a run there meanwhile had its run wiped by this one's fresh start
    (checkpoint, log and metrics.json deleted, the data and config replaced) without its setup being compared. The
    folder is looked at again under the lock; the late trainer is refused, the other run left as it was."""
    import resdom.training.trainer as trainer

    split, m, t = configs(n_users=30, epochs=1)
    other = t.model_copy(update={"lr": 2e-3})
    built = trainer._built

    def meanwhile(model_cfg, device):  # noqa: ANN001, ANN202
        monkeypatch.setattr(trainer, "_built", built)
        fit(split, m, other, tmp_path / "run", progress=False)  # the other trainer, done while this one started
        return built(model_cfg, device)

    monkeypatch.setattr(trainer, "_built", meanwhile)
    with pytest.raises(ResdomError, match="run: another process wrote a run there while this one started"):
        fit(split, m, t, tmp_path / "run", progress=False)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["lr"] == 2e-3
    assert (tmp_path / "run" / "metrics.json").is_file() and (tmp_path / "run" / "model.safetensors").is_file()


def test_resume_on_other_data_names_what_differs(tmp_path: Path) -> None:
    """Resuming on other data (another split option, an edited file at the same path) named only two fingerprints
    ("data fingerprint a saved vs b now"), not what changed; the fields of the data's record (config.json's
    data.manifest) that differ are named, the data's settings first. Maker: an interrupted toy run resumed on the toy
    data of another seed."""
    split, m, t = configs(n_users=30)
    with pytest.raises(Interrupt):
        fit(split, m, t, tmp_path, callbacks=[stop_after(1)], progress=False)
    with pytest.raises(ResdomError, match=r"data fingerprint \w+ saved vs \w+ now: data\.manifest\.seed: 0 saved vs 1 "
                                          r"now\)"):
        fit(toy_split(n_users=30, seed=1), m, t, tmp_path, progress=False)
    (tmp_path / "config.json").unlink()  # no record of the data: the fingerprints alone
    with pytest.raises(ResdomError, match=r"data fingerprint \w+ saved vs \w+ now\)"):
        fit(toy_split(n_users=30, seed=1), m, t, tmp_path, progress=False)


def test_a_resume_with_another_thread_count_says_its_weights_will_differ(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """train.threads may change on resume, and the trainer said nothing depends on it; but CPU kernels split their
    sums by thread, so a run resumed with another count ends with other weights (another checkpoint id) than the
    uninterrupted run, silently. It says so, naming the count that resumes it exactly; with the same count, nothing."""
    split, m, t = configs(n_users=30, threads=1)
    with pytest.raises(Interrupt):
        fit(split, m, t, tmp_path, callbacks=[stop_after(1)], progress=False)
    capsys.readouterr()
    with pytest.raises(Interrupt):
        fit(split, m, t, tmp_path, callbacks=[stop_after(2)], progress=False)
    assert "note:" not in capsys.readouterr().err
    fit(split, m, t.model_copy(update={"threads": 2}), tmp_path, progress=False)
    err = capsys.readouterr().err
    assert "resumes with 2 torch threads where epoch 2 ran with 1" in err and "; threads=1 (or OMP" in err


def test_an_epoch_trained_again_that_does_not_rewrite_its_killed_checkpoint_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill after epoch 2's checkpoint, before its state: the resumed run trains epoch 2 again, which rewrites the
    checkpoint where it repeats bit for bit (CPU, the same threads). Where it does not (a GPU, another thread count)
    and its validation now falls short of epoch 1's, the killed attempt's checkpoint stayed: the run ended with it as
    "best epoch 2" while its log said epoch 1 was best. Refused in one line; the state stays at epoch 1."""
    import resdom.training.trainer as trainer

    split, m, t = configs(n_users=30, epochs=3)
    original = trainer._evaluate
    values = iter([0.5, 0.6, 0.4, 0.3])  # epoch 1, epoch 2 (killed), epoch 2 again, epoch 3

    def stop_value(model, split, which, train_cfg, device):  # noqa: ANN001, ANN202
        out = original(model, split, which, train_cfg, device)
        return {**out, "metrics": {**out["metrics"], "NDCG@10": next(values)}} if which == "stop" else out

    monkeypatch.setattr(trainer, "_evaluate", stop_value)
    saving = trainer.RunFiles.save_state
    _killed_before_state_of(2, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        fit(split, m, t, tmp_path, progress=False)
    monkeypatch.setattr(trainer.RunFiles, "save_state", saving)
    with pytest.raises(ResdomError, match=r"model\.safetensors: the checkpoint of epoch 2, written before the run was "
                                          r"interrupted, is not what epoch 2 trained again gives"):
        fit(split, m, t, tmp_path, progress=False)
    assert json.loads((tmp_path / "state" / "trainer.json").read_text())["epoch"] == 1
