"""A new user's CSV with string ids (``007``, ``07``, ``+7``, ``7``, ids with spaces), fractional
times and a one-interaction user goes through ``resdom data split``, ``train``, ``diagnose``, ``recommend`` and
``report`` (in-process, as a user types them), with every change to the data printed; the recommendations come back
in the file's own ids, and recommend's ranks are the ranks evaluation computes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import run_cli

from resdom.data.sequences import SplitData

ITEMS = ["007", "07", "+7", "7", " a", "a ", "a", "x y"] + [f"P-{k:03d}" for k in range(16)]
USERS = [f"c {u}" for u in range(40)] + ["007", "7", "+7", "u "]
TINY = ["--set", "model.hidden=16", "--set", "model.layers=1", "--set", "model.heads=1", "--set", "model.max_len=8",
        "--device", "cpu"]


def _own_csv(path: Path) -> pd.DataFrame:
    """Every user of USERS buys 3-9 ITEMS at fractional times, all within one second (only the fractions order them,
    and the file is not in time order); one pair of equal times; 'solo' buys once. Returns the frame as written."""
    rng = np.random.default_rng(5)
    rows = []
    for u, user in enumerate(USERS):
        base = 1_700_000_000 + 10.0 * u
        times = base + rng.choice(900, int(rng.integers(3, 10)), replace=False) / 1000  # distinct, unsorted
        rows += [(user, ITEMS[int(rng.integers(len(ITEMS)))], float(t)) for t in times]
    rows.append((USERS[0], "P-015", rows[0][2]))  # the same time as c 0's first row: a tie, kept in file order
    rows.append(("solo", "007", 1_700_900_000.25))
    df = pd.DataFrame(rows, columns=["customer", "product", "when"])
    df.to_csv(path, index=False)
    return df


def _clash_note(ids: list[str], what: str) -> str:
    """The data summary's note on ids that --normalize-ids would make one, from a plain loop: each id keyed by its
    stripped text, integer-looking ones by their integer; the example is the first such group's first two ids."""
    unique = list(dict.fromkeys(ids))

    def key(text: str) -> str:
        stripped = text.strip()
        return str(int(stripped)) if re.fullmatch(r"[+-]?[0-9]{1,18}", stripped) else stripped

    groups: dict[str, list[str]] = {}
    for text in unique:
        groups.setdefault(key(text), []).append(text)
    clash = [text for text in unique if len(groups[key(text)]) > 1]
    a, b = groups[key(clash[0])][:2]
    return (f"data: note: {len(clash)} {what} ids differ from another only by surrounding spaces, leading zeros or a "
            f"'+' (e.g. {a!r} and {b!r}): kept apart, as read; --normalize-ids (normalize_ids=True) makes them one")


def _expected_lines(df: pd.DataFrame) -> list[str]:
    """The ``data:`` lines, each number computed here from the frame by plain pandas (the slow obvious reference)."""
    ordered = df.assign(row=range(len(df))).sort_values(["customer", "when", "row"], kind="stable")
    same_user = ordered["customer"].eq(ordered["customer"].shift())
    ties = int((same_user & ordered["when"].eq(ordered["when"].shift())).sum())
    consecutive = int((same_user & ordered["product"].eq(ordered["product"].shift())).sum())
    repeats = int(df.duplicated(["customer", "product"]).sum())
    short = df.groupby("customer").size().lt(3)
    n_short, rows_short = int(short.sum()), int(df["customer"].map(short).sum())

    def n(count: int, word: str) -> str:
        return f"{count:,} {word}{'' if count == 1 else 's'}"

    return [f"data: read {len(df):,} interactions of {df['customer'].nunique()} users and {df['product'].nunique()} "
            "items (csv); ids kept exactly as read",
            *(_clash_note(df[column].tolist(), what) for column, what in (("customer", "user"), ("product", "item"))),
            f"data: order: each user's interactions by timestamp (fractional seconds kept); {n(ties, 'pair')} of "
            f"neighbours with equal times {'keeps' if ties == 1 else 'keep'} file order",
            f"data: repeats: {n(repeats, 'row')} {'repeats' if repeats == 1 else 'repeat'} an earlier (user, item) "
            f"pair, {consecutive} of them right after the same item; all kept",
            "data: k-core: off (no user or item filtered)",
            f"data: loo split: {n(n_short, 'user')} in no part (fewer than 3 items: {n_short}), "
            f"{n(rows_short, 'interaction')} in no part; kept for `recommend`",
            *([f"data: warning: only {n_loo:,} validation users and {n_loo:,} test users (fewer than 100): early "
               "stopping and the metrics rest on few users and will vary from split to split; more data gives "
               "steadier numbers (leave-one-out already tests every user with 3 items or more)"]
              if (n_loo := int((~short).sum())) < 100 else [])]


@pytest.mark.slow
def test_a_users_csv_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    df = _own_csv(tmp_path / "shop.csv")
    assert df["product"].nunique() == len(set(df["product"])) and {"007", "07", "+7", "7", " a", "a "} <= set(
        df["product"])
    cols = ["--user-col", "customer", "--item-col", "product"]

    # forgetting the timestamp column is one clear line, and nothing is written
    code, _, err = run_cli(capsys, "data", "split", "shop.csv", *cols, "--out", "split")
    assert code == 2 and err.count("\n") == 1 and "missing timestamp column 'timestamp'" in err, err
    assert not (tmp_path / "split").exists()

    # prepare: every change printed, numbers as computed by hand
    expected = _expected_lines(df)
    assert "1 pair of neighbours with equal times keeps file order" in expected[3]  # the planted tie, and only it
    code, out, err = run_cli(capsys, "data", "split", "shop.csv", *cols, "--time-col", "when", "--protocol", "loo",
                             "--out", "split")
    assert code == 0, err
    assert [x for x in err.splitlines() if x.startswith("data:")] == expected
    split = SplitData.load(tmp_path / "split")
    assert sorted(map(str, split.item_labels[1:])) == sorted(set(df["product"]))  # '007', '7', ' a', 'a ' apart
    assert set(map(str, split.user_labels)) == set(df["customer"])  # 'u ' keeps its space, solo is kept

    # train (the change lines again, from the saved split), diagnose
    code, out, err = run_cli(capsys, "train", "split", "--out", "run", "--epochs", "2", *TINY)
    assert code == 0, err
    assert [x for x in err.splitlines() if x.startswith("data:")] == expected
    assert "best epoch" in out
    code, out, err = run_cli(capsys, "diagnose", "run", "--device", "cpu", "--alphas", "1,0", "--no-progress")
    assert code == 0, err
    evidence = np.load(tmp_path / "run" / "diagnostics" / "users.npz")

    # recommend in the file's own ids: solo (one purchase), users whose ids an int conversion or a strip would merge
    (tmp_path / "who.txt").write_text("solo\n007\n7\nu \n")
    code, _, err = run_cli(capsys, "recommend", "run", "--users", "who.txt", "--k", "5", "--out", "recs.csv")
    assert code == 0, err
    recs = pd.read_csv(tmp_path / "recs.csv", dtype={"user_id": str, "item_id": str}, keep_default_na=False)
    assert recs["user_id"].tolist() == [u for u in ("solo", "007", "7", "u ") for _ in range(5)]
    assert recs["rank"].tolist() == [1, 2, 3, 4, 5] * 4
    assert set(recs["item_id"]) <= set(df["product"])
    for user, mine in recs.groupby("user_id"):  # seen items are filtered: none the user bought
        assert not set(mine["item_id"]) & set(df.loc[df["customer"] == user, "product"]), user

    # recommend's ranks are evaluation's: the target's place in the full list is its rank in users.npz (diagnose),
    # a filtered target (in the input) is never listed and evaluation counts it a miss; HR@K equals evaluate's
    code, _, err = run_cli(capsys, "recommend", "run", "--history", "test", "--k", str(split.n_items), "--out",
                           "full.csv")
    assert code == 0, err
    full = pd.read_csv(tmp_path / "full.csv", dtype={"user_id": str, "item_id": str}, keep_default_na=False)
    test = split.test
    place = {(u, i): r for u, i, r in zip(full["user_id"], full["item_id"], full["rank"])}
    listed = []
    assert evidence["user"].tolist() == test.inputs.users.tolist()
    for row in range(len(test)):
        user, target = str(split.user_labels[test.inputs.users[row]]), str(split.item_labels[test.targets[row]])
        rank = place.get((user, target))
        if test.targets[row] in set(test.inputs.sequence(row).tolist()):
            assert rank is None and evidence["target_rank"][row] >= split.n_items - 1
        else:
            assert rank == evidence["target_rank"][row], (user, target)
        listed.append(rank)
    assert any(r is None for r in listed) and any(r is not None for r in listed)  # both cases exercised
    code, out, err = run_cli(capsys, "evaluate", "run", "--json", "--cutoffs", "1,3,5", "--device", "cpu")
    assert code == 0, err
    metrics = json.loads(out)["metrics"]
    for k in (1, 3, 5):
        assert metrics[f"HR@{k}"] == pytest.approx(np.mean([r is not None and r <= k for r in listed]))

    # report
    code, out, err = run_cli(capsys, "report", "run", "--out", "report")
    assert code == 0, err
    assert (tmp_path / "report" / "report.html").is_file()
