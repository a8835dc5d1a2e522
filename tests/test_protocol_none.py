"""Protocol ``none``, fit on everything (nothing held out, or a small holdout slice only when asked),
then recommend for every user; from Python and from the command line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from cli_helpers import one_line_error, run_cli

import resdom
from resdom.data.prepare import prepare_split
from resdom.data.sequences import Sequences
from resdom.data.splits import split_none
from resdom.errors import ResdomError
from resdom.experiments import model_defaults
from resdom.models.config import make_model_config

TINY = {"hidden": 8, "layers": 1, "heads": 1, "max_len": 6, "device": "cpu", "progress": False, "threads": 1}


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = [(f"u{u}", f"i{int(rng.integers(15))}", float(t) + 0.5) for u in range(24)
            for t in range(1 if u == 0 else int(rng.integers(2, 7)))]
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])


def test_split_none_holds_out_nothing_unless_asked() -> None:
    seqs = Sequences.from_lists([[1, 2, 3], [4], [5, 6], [7, 8, 9, 1]])
    parts = split_none(seqs)
    assert parts.train.to_lists() == seqs.to_lists() and len(parts.valid) == len(parts.test) == 0
    assert parts.info == {"protocol": "none", "thresholds": None, "holdout_users": 0, "holdout_seed": 0,
                          "dropped_users": {}}
    held = split_none(seqs, holdout_users=2, seed=3)
    users = held.valid.inputs.users.tolist()
    assert len(users) == 2 and 1 not in users  # a one-item user cannot lend its last item
    for row, u in enumerate(users):
        full = seqs.sequence(u).tolist()
        assert held.valid.inputs.sequence(row).tolist() == full[:-1] and held.valid.targets[row] == full[-1]
        assert held.train.sequence(u).tolist() == full[:-1]
    others = [u for u in range(4) if u not in users]
    assert all(held.train.sequence(u).tolist() == seqs.sequence(u).tolist() for u in others)
    assert split_none(seqs, holdout_users=2, seed=3).valid.inputs.users.tolist() == users  # seeded
    assert len(split_none(seqs, holdout_users=10).valid) == 3  # all who can, where fewer than asked


def test_prepare_split_protocol_none_and_its_checks() -> None:
    df = _frame()
    split = prepare_split(df, protocol="None")  # any case
    assert split.manifest["protocol"] == "none"
    assert len(split.train.items) == len(df) and len(split.test) == 0 and split.rest is None
    assert split.manifest["changes"]["split"]["interactions_unused"] == 0
    held = prepare_split(df, protocol="none", holdout_users=4)
    assert len(held.valid) == 4 and held.manifest["holdout_users"] == 4
    for kwargs, message in [({"protocol": "gst"}, r"protocol: unknown protocol 'gst' \(did you mean gts\? choose "
                                                  r"auto, loo, gts or none\)"),
                            ({"protocol": "loo", "holdout_users": 3}, "holdout_users: the monitoring slice of "
                                                                      "protocol 'none'"),
                            ({"protocol": "none", "holdout_users": -1}, "holdout_users: expected an integer >= 0"),
                            ({"protocol": "none", "valid_quantile": 0.5}, "valid_quantile: sets the validation cut "
                                                                          "time of the gts protocol; a none split")]:
        with pytest.raises(ResdomError, match=message):
            prepare_split(df, **kwargs)
    assert prepare_split(df, protocol="GTS", quantile=0.8).manifest["protocol"] == "gts"


def test_fit_on_everything_recommends_for_every_user() -> None:
    df = _frame()
    fitted = resdom.fit(prepare_split(df, protocol="none"), "sasrec", epochs=2, **TINY)
    assert fitted.metrics["stopped"] == "max_epochs" and fitted.metrics["best_epoch"] == 2
    assert fitted.metrics["valid"] == {"metrics": {}, "n_users": 0} and len(fitted.history) == 2
    recs = fitted.recommend(k=3)
    assert set(recs["user_id"]) == set(df["user_id"])  # every user, the one-interaction user u0 too
    with pytest.raises(ResdomError, match="part: this split \\(protocol none\\) holds no test users"):
        resdom.evaluate(fitted, device="cpu")
    with pytest.raises(ResdomError, match="holds no test users"):
        resdom.diagnose(fitted, device="cpu")


def test_a_holdout_slice_when_asked() -> None:
    df = _frame()
    held = resdom.fit(prepare_split(df, protocol="none", holdout_users=5), "sasrec", epochs=1, **TINY)
    assert held.metrics["valid"]["n_users"] == 5 and "NDCG@10" in held.history[0]["valid"]
    assert resdom.evaluate(held, part="valid", device="cpu").n_users == 5


def test_cli_protocol_none(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _frame().to_csv("shop.csv", index=False)
    code, out, err = run_cli(capsys, "train", "shop.csv", "--protocol", "NONE", "--epochs", "1", "--set",
                             "model.hidden=8", "--set", "model.layers=1", "--device", "cpu", "--no-progress",
                             "--out", "run")
    assert code == 0, err
    n = len(_frame())  # u0's one interaction has no next item: no sample reads it (the others fit max_len)
    assert out == (f"run: trained 1 epoch on {n - 1} of {n} interactions (protocol none: nothing held out, the last "
                   "epoch kept; not trained on: the only interaction of 1 user (no next item)); `resdom recommend` "
                   "reads it\n")
    assert "data: none split: every user and interaction in training (nothing held out)" in err
    code, out, err = run_cli(capsys, "recommend", "run", "-k", "2", "--device", "cpu")
    assert code == 0 and len(out.splitlines()) == 1 + 2 * 24, err
    code, _, err = run_cli(capsys, "evaluate", "run", "--device", "cpu")
    one_line_error(code, err, "--part test: run holds no test users (protocol none: nothing held out; evaluate")
    code, _, err = run_cli(capsys, "diagnose", "run", "--device", "cpu", "--no-progress")  # says why, as evaluate
    one_line_error(code, err, "(the test split has none; protocol none: nothing held out; diagnose a")
    code, _, err = run_cli(capsys, "data", "split", "shop.csv", "--protocol", "none", "--holdout-users", "3",
                           "--out", "split")
    assert code == 0, err
    assert ("data: none split: every user and interaction in training (nothing held out but the last item of 3 "
            "users, for early stopping)") in err
    code, _, err = run_cli(capsys, "data", "split", "shop.csv", "--holdout-users", "3", "--out", "split2")
    one_line_error(code, err, "--holdout-users: the monitoring slice of --protocol none; a split by the default "
                   "protocol, auto (gts or loo), holds out its own validation users")
    # a none split without a slice: `train` takes it (its epochs, the last kept), so no note says it will refuse it
    code, _, err = run_cli(capsys, "data", "split", "shop.csv", "--protocol", "none", "--out", "whole")
    assert code == 0 and "valid part is empty" not in err and "will refuse" not in err, err
    code, out, err = run_cli(capsys, "train", "whole", "--epochs", "1", "--set", "model.hidden=8", "--set",
                             "model.layers=1", "--device", "cpu", "--no-progress", "--out", "run-whole")
    assert code == 0 and f"trained 1 epoch on {n - 1} of {n} interactions" in out, err
    # a model window shorter than some users' sequences: their older interactions are never read, and it says so
    df = _frame()
    sizes = df.groupby("user_id").size()
    older, users = int((sizes - 4).clip(lower=0).sum()), int((sizes > 4).sum())
    assert older and users
    code, out, err = run_cli(capsys, "train", "whole", "--epochs", "1", "--set", "model.hidden=8", "--set",
                             "model.layers=1", "--set", "model.max_len=3", "--device", "cpu", "--no-progress",
                             "--out", "run-short")
    assert code == 0, err
    assert (f"trained 1 epoch on {n - 1 - older} of {n} interactions (protocol none: nothing held out, the last epoch "
            f"kept; not trained on: {older} before the last max_len (3 + 1) items of {users} users, the only "
            "interaction of 1 user (no next item))") in out


def test_cli_protocol_in_any_case_and_a_did_you_mean(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _frame().to_csv("shop.csv", index=False)
    code, _, err = run_cli(capsys, "data", "split", "shop.csv", "--protocol", "GTS", "--out", "gts")
    assert code == 0, err
    assert resdom.load_split("gts").manifest["protocol"] == "gts"
    code, _, err = run_cli(capsys, "data", "split", "shop.csv", "--protocol", "gst", "--out", "x")
    one_line_error(code, err, "--protocol: unknown protocol 'gst' (did you mean gts? choose auto, loo, gts or none)")
    code, _, err = run_cli(capsys, "data", "split", "shop.csv", "--protocol", "LOO", "--out", "loo")
    assert code == 0, err
    code, _, err = run_cli(capsys, "train", "loo", "--protocol", "Loo", "--epochs", "1", "--set", "model.hidden=8",
                           "--set", "model.layers=1", "--device", "cpu", "--no-progress", "--out", "run")
    assert code == 0, err  # the saved split's protocol, named in another case: no refusal


def test_fit_on_everything_trains_the_recipe_the_default_protocol_measures(tmp_path, capsys, monkeypatch) -> None:
    """Protocol none took the model defaults of loo (max length 50, GELU, ...) for data with timestamps, whose
    default protocol, auto, measures gts's (SASRec's reference post-LN block, max length 200): the model deployed
    was not the one measured. It takes auto's, from Python, the command line and `config show`."""
    monkeypatch.chdir(tmp_path)
    df = _frame()
    keys = ("max_len", "activation", "embedding", "positions", "ln_eps")

    def recipe(split) -> dict:
        fitted = resdom.fit(split, "sasrec", epochs=1, hidden=8, layers=1, device="cpu", progress=False)
        return {k: getattr(fitted.model.cfg, k) for k in keys}

    def defaults(protocol: str) -> dict:
        config = make_model_config(**{"name": "sasrec", "n_items": 1, **model_defaults("sasrec", protocol)[0]})
        return {k: getattr(config, k) for k in keys}

    assert defaults("gts")["max_len"] == 200 and defaults("loo")["max_len"] == 50
    assert recipe(prepare_split(df, protocol="none")) == defaults("gts")  # auto's for data with timestamps
    assert recipe(prepare_split(df, protocol="none", no_time=True)) == defaults("loo")
    assert recipe(prepare_split(df, protocol="loo")) == defaults("loo")
    df.to_csv("shop.csv", index=False)
    shown = {}
    for name, extra in (("none", ["--protocol", "none"]), ("none-untimed", ["--protocol", "none", "--no-time"])):
        code, _, err = run_cli(capsys, "train", "shop.csv", *extra, "--epochs", "1", "--set", "model.hidden=8",
                               "--set", "model.layers=1", "--device", "cpu", "--no-progress", "--out", name)
        assert code == 0, err
        config = resdom.load_run(name, device="cpu").model.cfg
        shown[name] = {k: getattr(config, k) for k in keys}
    assert shown == {"none": defaults("gts"), "none-untimed": defaults("loo")}
    code, out, err = run_cli(capsys, "config", "show", "sasrec", "--protocol", "none")
    assert code == 0, err
    _, gts, _ = run_cli(capsys, "config", "show", "sasrec", "--protocol", "gts")
    assert out.split("model:")[1].split("data:")[0] == gts.split("model:")[1].split("data:")[0]
    assert "# protocol none: nothing held out; the model defaults of the protocol auto measures" in out
