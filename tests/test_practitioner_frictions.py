"""The frictions a practitioner met with their own data (the tab hint whatever the column names, the
GTS drop line that adds up, a warning for small evaluation sets, the Python API's counts and argument names)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from resdom.data.changes import change_lines
from resdom.data.prepare import prepare_split
from resdom.data.readers import read_interactions
from resdom.errors import ResdomError


@pytest.mark.parametrize("header", ["user_id\titem_id\ttimestamp", "customer\tproduct\tts"])
def test_a_tsv_saved_as_csv_gets_the_tab_hint_whatever_its_column_names(tmp_path: Path, header: str) -> None:
    path = tmp_path / "shop.csv"
    path.write_text(f"{header}\nc1\tp1\t1\nc1\tp,1,x\t2\n")  # a comma in an id: line 3 parses as 3 columns
    cols = {} if header.startswith("user_id") else {"user_col": "customer", "item_col": "product", "time_col": "ts"}
    with pytest.raises(ResdomError) as e:
        read_interactions([path], "csv", **cols)
    assert str(e.value).startswith(f"{path}:3: expected 1 columns, found 3 (its header line holds no ',' but tabs: "
                                   "is the file separated by tabs? fmt='csv' reads commas, fmt='tsv' tabs")
    good = tmp_path / "good.csv"  # a comma file with a short row: no separator hint
    good.write_text("user_id,item_id,timestamp\nc1,p1,1\nc1,p2,2,9,9\n")
    with pytest.raises(ResdomError) as e:
        read_interactions([good], "csv")
    assert str(e.value) == f"{good}:3: expected 3 columns, found 5"


def _gts_frame(n_users: int = 60, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        times = np.sort(rng.integers(0, 1000, int(rng.integers(1, 5))))
        rows += [(u, int(rng.integers(30)), int(t)) for t in times]
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])


def test_the_gts_drop_line_adds_up_against_a_per_user_reference() -> None:
    df = _gts_frame()
    split = prepare_split(df, protocol="gts")
    t_test = split.manifest["thresholds"]["T_test"]
    # the slow reference: a user is in no part of a GTS split iff one interaction (two or more: a test user, or a
    # pool user in valid or train); it is 'after' when that interaction lies after T_test
    per_user = df.groupby("user_id")["timestamp"].agg(["size", "max"])
    single = per_user[per_user["size"] == 1]
    after, before = int((single["max"] > t_test).sum()), int((single["max"] <= t_test).sum())
    assert after > 0 and before > 0  # both reasons exercised
    held = set(split.train.users) | set(split.valid.inputs.users) | set(split.test.inputs.users)
    assert len(per_user) - len(held) == after + before
    line = next(x for x in change_lines(split.manifest) if x.startswith("gts split:"))
    assert line == (f"gts split: {after + before} users in no part (one interaction, after T_test: {after}; fewer "
                    f"than 2 interactions, all at or before T_test: {before}), {after + before} interactions in no "
                    "part; kept for `recommend`")


def test_small_evaluation_sets_warn_and_the_python_api_logs_the_data_lines(caplog) -> None:
    df = _gts_frame()
    with caplog.at_level(logging.INFO, logger="resdom.data"):
        split = prepare_split(df, protocol="gts")
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "resdom.data"]
    lines = change_lines(split.manifest)
    assert [m for _, m in logged] == [f"data: {x}" for x in lines]
    n_valid, n_test = len(split.valid), len(split.test)
    assert n_valid < 100 and n_test < 100
    assert logged[-1] == ("WARNING", f"data: warning: only {n_valid} validation users and {n_test} test users (fewer "
                                     "than 100): early stopping and the metrics rest on few users and will vary from "
                                     "split to split; more data, a lower quantile (an earlier T_test holds out more "
                                     "users) or protocol='loo' (every user with 3 items or more a test user) gives "
                                     "steadier numbers")
    assert all(level == "INFO" for level, _ in logged[:-1])
    big = pd.DataFrame([(u, (u + t) % 50, t) for u in range(150) for t in range(4)],
                       columns=["user_id", "item_id", "timestamp"])
    assert not [x for x in change_lines(prepare_split(big, "loo").manifest)
                if x.startswith("warning")]  # loo: 150 each, none
    assert not [x for x in change_lines(prepare_split(df, protocol="none").manifest) if x.startswith("warning")]
    small = [x for x in change_lines(prepare_split(big.head(200), "loo").manifest) if x.startswith("warning")]
    assert small == ["warning: only 50 validation users and 50 test users (fewer than 100): early stopping and the "
                     "metrics rest on few users and will vary from split to split; more data gives steadier numbers "
                     "(leave-one-out already tests every user with 3 items or more)"]  # no quantile: loo has none
    one = pd.DataFrame([(u, t, t) for u in range(2) for t in range(1 + 2 * u)], columns=df.columns[:3])
    assert [x for x in change_lines(prepare_split(one, "loo").manifest) if x.startswith("warning")][0].startswith(
        "warning: only 1 validation user and 1 test user (fewer than 100)")  # "1 validation users" before


def test_dataframe_errors_name_python_arguments() -> None:
    df = pd.DataFrame({"customer": ["a", "a", "b"], "Item_ID": ["x", "y", "z"], "ts": [1, 2, 3]})
    for kwargs, message in [
        ({}, "DataFrame: missing column 'user_id' (columns: 'customer', 'Item_ID', 'ts'); name it with user_col=..."),
        ({"user_col": "customer"}, "name it with item_col=... ('Item_ID' is named with other case or spaces: "
                                   "item_col='Item_ID' reads it)"),
        ({"user_col": "customer", "item_col": "Item_ID"}, "missing timestamp column 'timestamp' (columns: 'customer',"
                                                          " 'Item_ID', 'ts'); name the timestamp column with "
                                                          "time_col=..., or pass time_col=None"),
    ]:
        with pytest.raises(ResdomError) as e:
            prepare_split(df, **kwargs)
        assert message in str(e.value) and "--" not in str(e.value), str(e.value)


def test_the_demo_says_how_training_ended() -> None:
    from resdom.pipeline.demo import training_line

    stopped = {"stopped": "early_stopping", "epochs_run": 23, "best_epoch": 13, "metric": "NDCG@10"}
    assert training_line(stopped, 50, 10) == ("early stopping ended training at epoch 23 of up to 50: no better "
                                              "validation NDCG@10 in 10 epochs; the best, epoch 13, is kept")
    full = {"stopped": "max_epochs", "epochs_run": 5, "best_epoch": 4, "metric": "NDCG@10"}
    assert training_line(full, 5, 10) == "trained all 5 of 5 epochs; the best by validation NDCG@10, epoch 4, is kept"


@pytest.mark.parametrize("command", [["train"], ["data", "split"], ["evaluate"], ["recommend"], ["similar"]])
def test_help_at_80_columns_cuts_no_word(command, capsys, monkeypatch) -> None:
    """Every option's help, its default included, is readable in an 80-column terminal: rich marks a word it had to
    cut with an ellipsis."""
    from cli_helpers import invoke

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERMINAL_WIDTH", "80")
    assert invoke(*command, "--help") == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80 and ("--device" in out) == (command != ["data", "split"])
    assert "…" not in out, [x for x in out.splitlines() if "…" in x]


def test_filter_seen_and_its_older_name_are_one_option(capsys) -> None:
    from cli_helpers import invoke

    assert invoke("evaluate", "nowhere", "--filter-seen", "--no-filter") == 2
    assert "--filter-seen and --no-filter disagree; give one of them" in capsys.readouterr().err


def test_format_and_definition_in_any_case_with_the_closest_name(tmp_path: Path) -> None:
    """--format / fmt= and diagnose's definition take any case, and a near miss names the closest choice."""
    from resdom.diagnostics.options import DiagnoseOptions

    path = tmp_path / "shop.csv"
    path.write_text("user_id,item_id,timestamp\n" + "".join(f"u{u},i{(u + k) % 7},{k}\n" for u in range(12)
                                                            for k in range(5)))
    split = prepare_split(path, protocol="loo", fmt=" CSV ")
    assert split.manifest["source"]["format"] == "csv"
    with pytest.raises(ResdomError, match=r"fmt: unknown format 'CSVV'; choose one of: .* \(did you mean csv\?\)"):
        prepare_split(path, protocol="loo", fmt="CSVV")
    assert DiagnoseOptions(definition="Sum_Of_Norms").definition == "sum_of_norms"
    with pytest.raises(ValueError, match=r"did you mean norm_of_sums\? got 'norm_of_sum'"):
        DiagnoseOptions(definition="norm_of_sum")


def test_the_split_line_counts_one_user_partly_used_as_one_user() -> None:
    """The data: line said '(1 users partly)'; it now counts as the rest of the line does."""
    manifest = {"changes": {"read": {"interactions": 9, "users": 3, "items": 4, "format": "csv"},
                            "split": {"protocol": "gts", "users_dropped": 1, "interactions_unused": 2,
                                      "users_partly_used": 1, "reasons": {}}}}
    line = next(x for x in change_lines(manifest) if x.startswith("gts split:"))
    assert line == "gts split: 1 user in no part, 2 interactions in no part (1 user partly); kept for `recommend`"
    manifest["changes"]["split"]["users_partly_used"] = 1234
    assert "(1,234 users partly)" in next(x for x in change_lines(manifest) if x.startswith("gts split:"))
