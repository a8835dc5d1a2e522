"""Beyond-accuracy metrics of evaluation's top-K lists (coverage, average popularity, novelty, echo of
the last item and of its nearest neighbours) and the per-user table: a hand-computed case, and the whole
``resdom.evaluate(..., beyond=True)`` against a slow reference that scores and sorts every user in plain Python."""

from __future__ import annotations

import json
import math
import tracemalloc
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from cli_helpers import invoke

import resdom
from resdom.data.prepare import prepare_split
from resdom.data.sequences import Sequences, SplitData
from resdom.errors import ResdomError
from resdom.evaluation.beyond import cosine_neighbours, per_user, popularity, summary
from resdom.models import build_model
from resdom.models.config import make_model_config
from resdom.models.interface import final_states

MAX_LEN = 5


def test_a_hand_computed_case() -> None:
    train = Sequences.from_lists([[1, 2, 2], [2, 3], [2]])
    counts, n_seq = popularity(train.items, train.offsets, 4)
    assert counts.tolist() == [0, 1, 3, 1, 0] and n_seq == 3  # sequences holding each item (2 twice in one: once)
    lists = np.array([[1, 2], [2, 3], [4, 0]])  # the third user's list has one item
    last = np.array([2, 4, 1])
    near = np.array([[0], [2], [1], [4], [3]])  # one neighbour each
    values = {}
    for k in (1, 2):
        values.update(per_user(lists, last, near, counts, n_seq, k))
    got = summary(lists, values, 4, (1, 2))
    lg3 = math.log2(3)
    want = {"Coverage@1": 3 / 4, "Coverage@2": 1.0,
            "AvgPop@1": (1 + 3 + 0) / 3, "AvgPop@2": (2 + 2 + 0) / 3,
            "Novelty@1": (lg3 + 0 + lg3) / 3, "Novelty@2": (lg3 / 2 + lg3 / 2 + lg3) / 3,
            "Echo@1": 0.0, "Echo@2": 1 / 3, "EchoNN@1": 1 / 3, "EchoNN@2": 2 / 3}
    assert list(got) == list(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    assert values["Echo@2"].tolist() == [1.0, 0.0, 0.0] and values["EchoNN@2"].tolist() == [1.0, 1.0, 0.0]
    empty = per_user(np.array([[0, 0]]), np.array([1]), near, counts, n_seq, 2)  # no list: NaN means, no echo
    assert math.isnan(empty["AvgPop@2"][0]) and empty["Echo@2"][0] == 0.0


def test_cosine_neighbours_against_brute_force() -> None:
    torch.manual_seed(3)
    emb = torch.randn(12, 4)
    emb[5] = emb[3] * 2  # the same direction: cosine 1, a tie with nothing else
    emb[7] = emb[2]  # two items equal: ties broken by id
    emb[8] = emb[2]
    got = cosine_neighbours(emb, 4, chunk=3)
    e = emb.double().numpy()
    for i in range(1, 12):
        cos = {j: e[i] @ e[j] / np.linalg.norm(e[i]) / np.linalg.norm(e[j]) for j in range(1, 12) if j != i}
        want = sorted(cos, key=lambda j: (-round(cos[j], 6), j))[:4]
        assert got[i].tolist() == want, i
    assert got[0].tolist() == [0, 0, 0, 0] and cosine_neighbours(emb, 50).shape == (12, 10)


def _frame(seed: int = 1, n_users: int = 40, n_items: int = 18) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        length = int(rng.integers(3, 9))
        # a popular head: low ids far more often, and repeats, so popularity and the echo vary
        picks = rng.zipf(1.6, size=length) % n_items
        rows += [(f"u{u}", f"i{int(p)}", t) for t, p in enumerate(picks)]
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])


@pytest.fixture(scope="module")
def fitted() -> resdom.Fitted:
    split = prepare_split(_frame(), "loo")
    torch.manual_seed(0)
    cfg = make_model_config(name="sasrec", n_items=split.n_items, hidden=8, layers=1, heads=1, max_len=MAX_LEN,
                            dropout=0.0, attn_dropout=0.0)
    model = build_model(cfg).eval()
    return resdom.Fitted(model, split, cfg, None)


def _reference(fitted: resdom.Fitted, part: str, ks: tuple[int, ...], filter_seen: bool, m: int) -> dict[str, float]:
    """Every number in plain Python: each user scored alone, sorted by (-score, id), lists cut at K."""
    model, split = fitted.model, fitted.split
    evalset: SplitData = getattr(split, part)
    emb = model.item_embeddings().detach().double().numpy()
    n = split.n_items
    held = [set(split.train.sequence(s).tolist()) for s in range(len(split.train))]
    count = {i: sum(i in h for h in held) for i in range(1, n + 1)}
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True).clip(1e-12)
    near = {}
    for i in range(1, n + 1):
        cos = {j: float(unit[i] @ unit[j]) for j in range(1, n + 1) if j != i}
        near[i] = sorted(cos, key=lambda j: (-cos[j], j))[:m]
    out = {f"{name}@{k}": [] for name in ("AvgPop", "Novelty", "Echo", "EchoNN") for k in ks}
    shown = {k: set() for k in ks}
    for row in range(len(evalset)):
        seq = evalset.inputs.sequence(row).tolist()
        window = seq[-MAX_LEN:]
        with torch.no_grad():
            h = final_states(model, torch.tensor([[0] * (MAX_LEN - len(window)) + window]))[0]
            scores = (h @ model.item_embeddings().T).numpy()  # float32, as the model scores
        candidates = [j for j in range(1, n + 1) if not (filter_seen and j in seq)]
        ranked = sorted(candidates, key=lambda j: (-scores[j], j))
        for k in ks:
            top = ranked[:k]
            shown[k] |= set(top)
            if top:
                out[f"AvgPop@{k}"].append(sum(count[j] for j in top) / len(top))
                out[f"Novelty@{k}"].append(sum(-math.log2(max(count[j], 1) / len(held)) for j in top) / len(top))
            out[f"Echo@{k}"].append(float(seq[-1] in top))
            out[f"EchoNN@{k}"].append(float(any(j in top for j in [seq[-1], *near[seq[-1]]])))
    ref = {f"Coverage@{k}": len(shown[k]) / n for k in ks}
    ref.update({key: sum(v) / len(v) for key, v in out.items()})
    return ref


@pytest.mark.parametrize(("part", "filter_seen"), [("test", True), ("valid", False)])
def test_evaluate_beyond_equals_the_slow_reference(fitted, part, filter_seen) -> None:
    ks = (1, 3, 10)
    result = resdom.evaluate(fitted, part=part, cutoffs=ks, filter_seen=filter_seen, beyond=True, neighbours=2,
                             device="cpu")
    ref = _reference(fitted, part, ks, filter_seen, 2)
    for key, value in ref.items():
        assert result.metrics[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert filter_seen == (result.metrics["Echo@10"] == 0.0)  # filtered: the last item is never listed
    assert not filter_seen or result.metrics["EchoNN@10"] > 0  # its neighbours still are
    assert 0 < result.metrics["Coverage@1"] < result.metrics["Coverage@10"] <= 1
    # accuracy unchanged by beyond=True
    plain = resdom.evaluate(fitted, part=part, cutoffs=ks, filter_seen=filter_seen, device="cpu")
    assert {k: v for k, v in result.metrics.items() if k in plain.metrics} == plain.metrics


def test_a_cutoff_past_the_catalogue_needs_no_list_wider_than_it(fitted) -> None:
    """--cutoffs 10000000 with --beyond allocated a (users, 10,000,000) array of top lists and ran out of memory
    where evaluation without --beyond answered; a list never holds more than the catalogue, so K past it equals
    K at the catalogue's size, computed on lists that wide."""
    n = fitted.split.n_items
    tracemalloc.start()  # numpy's allocations are traced: the old lists alone were users x 10,000,000 x 8 bytes
    try:
        result = resdom.evaluate(fitted, cutoffs=(3, 10_000_000), beyond=True, neighbours=2, device="cpu")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000, peak
    ref = _reference(fitted, "test", (3, n), True, 2)
    for name in ("Coverage", "AvgPop", "Novelty", "Echo", "EchoNN"):
        assert result.metrics[f"{name}@10000000"] == pytest.approx(ref[f"{name}@{n}"], rel=1e-9, abs=1e-12), name
        assert result.metrics[f"{name}@3"] == pytest.approx(ref[f"{name}@3"], rel=1e-9, abs=1e-12), name


def test_per_user_frame_averages_to_the_metrics(fitted) -> None:
    result = resdom.evaluate(fitted, cutoffs=(1, 5), beyond=True, device="cpu")
    users = result.users
    assert list(users.columns) == ["user_id", "item_id", "rank", "HR@1", "HR@5", "NDCG@1", "NDCG@5", "RR",
                                   "AvgPop@1", "Novelty@1", "Echo@1", "EchoNN@1", "AvgPop@5", "Novelty@5",
                                   "Echo@5", "EchoNN@5"]
    assert len(users) == result.n_users == len(fitted.split.test)
    split = fitted.split
    assert users["user_id"].tolist() == [split.user_labels[u] for u in split.test.inputs.users]
    assert users["item_id"].tolist() == [split.item_labels[i] for i in split.test.targets]
    for key in ("HR@1", "HR@5", "NDCG@1", "NDCG@5"):
        assert users[key].mean() == pytest.approx(result.metrics[key], abs=1e-12)
    assert users["RR"].mean() == pytest.approx(result.metrics["MRR"], abs=1e-12)
    for key in ("AvgPop@5", "Novelty@5", "Echo@5", "EchoNN@5"):
        assert users[key].mean() == pytest.approx(result.metrics[key], abs=1e-12)
    ranks = resdom.evaluate(fitted, cutoffs=(5,), device="cpu").users["rank"]
    filtered = [t in set(split.test.inputs.sequence(i).tolist()) for i, t in enumerate(split.test.targets)]
    assert ranks.isna().tolist() == filtered and any(filtered)  # a target in its own input: no rank
    assert repr(result).startswith(f"EvalResult({result.n_users} users: HR@1 ")
    with pytest.raises(ResdomError, match="beyond: needs a SplitData"):
        resdom.evaluate(fitted.model, split.test, beyond=True, device="cpu")
    with pytest.raises(ResdomError, match="part: 'valid' chooses a part of a SplitData"):  # it was ignored
        resdom.evaluate(fitted.model, split.test, part="valid", device="cpu")
    with pytest.raises(ResdomError, match="part: "):
        resdom.evaluate(fitted.model, split.test, part="tset", device="cpu")
    assert resdom.evaluate(fitted.model, split.test, part="TEST", device="cpu").n_users == len(split.test)
    with pytest.raises(ResdomError, match="neighbours: must be at least 1"):
        resdom.evaluate(fitted, beyond=True, neighbours=0, device="cpu")
    with pytest.raises(ResdomError, match="neighbours: counts for EchoNN@K of beyond=True"):
        resdom.evaluate(fitted, neighbours=3, device="cpu")  # it was ignored without a word


def test_cli_evaluate_beyond_and_per_user(fitted, tmp_path, capsys) -> None:
    run = fitted.save(tmp_path / "run")
    per_user = tmp_path / "users.csv"
    assert invoke("evaluate", str(run), "--beyond", "--cutoffs", "1,5", "--neighbours", "3", "--json", "--per-user",
                  str(per_user), "--device", "cpu") == 0
    printed = json.loads(capsys.readouterr().out)
    api = resdom.evaluate(fitted, cutoffs=(1, 5), beyond=True, neighbours=3, device="cpu")
    assert printed["metrics"] == pytest.approx(api.metrics)
    got = pd.read_csv(per_user, dtype={"user_id": str, "item_id": str}, keep_default_na=False)
    assert got["user_id"].tolist() == api.users["user_id"].tolist()
    assert invoke("evaluate", str(run), "--beyond", "--cutoffs", "10", "--device", "cpu") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split()[0] for x in lines[1:]] == ["HR@10", "NDCG@10", "MRR", "Coverage@10", "AvgPop@10",
                                                  "Novelty@10", "Echo@10", "EchoNN@10"]
    # the values in one column: 'Coverage@10 0.5000' stood a place right of 'HR@10    0.1000'
    assert len({x.index(x.split()[1]) for x in lines[1:]}) == 1, lines
    (tmp_path / "data.csv").write_text("a,b\n")
    code = invoke("evaluate", str(run), "--per-user", str(tmp_path / "data.csv"), "--device", "cpu")
    assert code == 2 and "--per-user" in capsys.readouterr().err
    code = invoke("evaluate", str(run), "--neighbours", "3", "--device", "cpu")  # no --beyond: it was ignored
    assert code == 2 and "error: --neighbours: counts for EchoNN@K of --beyond" in capsys.readouterr().err


def test_no_user_with_a_list_gives_no_popularity_not_zero(tmp_path, capsys) -> None:
    """One item, in every input: no user has a list, and AvgPop@K / Novelty@K were printed 0.0000 (novelty 0: the
    most popular item recommended to all), a mean over no user; now NaN, '-' in the text, null in --json."""
    empty = np.zeros((3, 2), dtype=np.int64)
    counts, n_seq = popularity(np.array([1, 1, 1]), np.array([0, 1, 2, 3]), 1)
    values = per_user(empty, np.array([1, 1, 1]), np.zeros((2, 0), dtype=np.int64), counts, n_seq, 2)
    got = summary(empty, values, 1, (2,))
    assert math.isnan(got["AvgPop@2"]) and math.isnan(got["Novelty@2"])
    assert got["Coverage@2"] == 0.0 and got["Echo@2"] == 0.0 and got["EchoNN@2"] == 0.0
    df = pd.DataFrame({"user_id": np.repeat(["a", "b", "c"], 4), "item_id": "x", "timestamp": range(12)})
    fitted = resdom.fit(prepare_split(df, "loo"), "sasrec", epochs=1, hidden=8, layers=1, max_len=MAX_LEN,
                        device="cpu", progress=False)
    run = fitted.save(tmp_path / "run")
    capsys.readouterr()
    assert invoke("evaluate", str(run), "--beyond", "--cutoffs", "1", "--device", "cpu") == 0
    printed = capsys.readouterr()
    assert "  AvgPop@1   -\n  Novelty@1  -\n  Echo@1     0.0000\n" in printed.out  # one column (Coverage@1)
    # HR@K can never reach 1 there, and the header says why: every target is in its own input
    assert printed.out.splitlines()[0] == (f"{run} test (3 users, seen items filtered: 3 target(s) in their own "
                                           "input, a miss at every K)")
    assert invoke("evaluate", str(run), "--cutoffs", "1", "--no-filter-seen", "--device", "cpu") == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{run} test (3 users, seen items kept)"
    assert "note: '-': no user has an item left to recommend" in printed.err
    assert invoke("evaluate", str(run), "--beyond", "--cutoffs", "1", "--json", "--device", "cpu") == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]  # strict JSON: null, not NaN
    assert metrics["AvgPop@1"] is None and metrics["Novelty@1"] is None and metrics["Coverage@1"] == 0.0


def _random_case(n_users: int, n_items: int, seed: int = 0) -> tuple[torch.nn.Module, Any, Sequences]:
    from resdom.data.sequences import EvalSet

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = build_model(make_model_config(name="sasrec", n_items=n_items, hidden=8, layers=1, heads=1,
                                          max_len=MAX_LEN, dropout=0.0, attn_dropout=0.0)).eval()
    inputs = Sequences.from_lists([rng.integers(1, n_items + 1, size=int(rng.integers(0, 6))).tolist()
                                   for _ in range(n_users)])
    return model, EvalSet(inputs, rng.integers(1, n_items + 1, size=n_users)), inputs


def test_neighbours_are_scored_for_the_last_items_only(monkeypatch) -> None:
    """EchoNN@K scored every item of the catalogue against every other (its nearest neighbours table): 72 s at
    20,000 items for 200 users, days at a million; only the users' distinct last items need neighbours."""
    from resdom.evaluation import beyond

    model, evalset, train = _random_case(n_users=30, n_items=600)
    scored = []
    real = beyond.cosine_scores
    monkeypatch.setattr(beyond, "cosine_scores", lambda emb, items, *a, **kw: scored.append(len(items)) or
                        real(emb, items, *a, **kw))
    got, values = beyond.beyond_accuracy(model, evalset, train, filter_seen=True, ks=(1, 10), neighbours=3)
    lasts = {int(s[-1]) for s in (evalset.inputs.sequence(i) for i in range(len(evalset))) if len(s)}
    assert sum(scored) == len(lasts) < 600
    # the same numbers as the table of every item's neighbours
    near = cosine_neighbours(model.item_embeddings().detach(), 3)
    ends = evalset.inputs.offsets[1:]
    last = np.where(evalset.inputs.lengths > 0, evalset.inputs.items[np.maximum(ends - 1, 0)], 0)
    for k in (1, 10):
        assert np.array_equal(values[f"EchoNN@{k}"], per_user(_lists(model, evalset, 10), last, near,
                                                            *popularity(train.items, train.offsets, 600), k)[
                                                                f"EchoNN@{k}"])


def _lists(model, evalset, k: int) -> np.ndarray:
    from resdom.evaluation.beyond import top_lists

    history = int(evalset.inputs.lengths.max())
    with torch.no_grad():
        items = torch.from_numpy(evalset.inputs.padded(MAX_LEN))
        return top_lists(final_states(model, items), model.item_embeddings(), k,
                         torch.from_numpy(evalset.inputs.padded(history)))


def test_a_large_cutoff_keeps_memory_of_one_chunk_and_the_same_numbers() -> None:
    """--beyond with a K as large as the catalogue kept every user's top-K list (users x K int64) and compared
    it with each last item's neighbours at once (users x K x neighbours): 1 GiB at 5,000 users and K 20,000, a
    memory error, terabytes at a million users; each chunk of users is now done and dropped, the numbers those of
    any chunking."""
    from resdom.evaluation.beyond import beyond_accuracy

    model, evalset, train = _random_case(n_users=1500, n_items=1000)
    tracemalloc.start()
    try:
        with torch.no_grad():
            got, values = beyond_accuracy(model, evalset, train, filter_seen=True, ks=(5, 1000), neighbours=10,
                                          batch_size=64)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 30_000_000, peak  # the old lists and comparison alone: 12 MB + 16 MB, and more per user
    again, per = beyond_accuracy(model, evalset, train, filter_seen=True, ks=(5, 1000), neighbours=10,
                                 batch_size=5000)
    assert got == again or all(got[k] == again[k] or (math.isnan(got[k]) and math.isnan(again[k])) for k in got)
    for key in values:
        assert np.array_equal(values[key], per[key], equal_nan=True), key
    lists = _lists(model, evalset, 1000)
    near = cosine_neighbours(model.item_embeddings().detach(), 10)
    ends = evalset.inputs.offsets[1:]
    last = np.where(evalset.inputs.lengths > 0, evalset.inputs.items[np.maximum(ends - 1, 0)], 0)
    counts, n_seq = popularity(train.items, train.offsets, 1000)
    want = {}
    for k in (5, 1000):
        want.update(per_user(lists, last, near, counts, n_seq, k))
    assert summary(lists, want, 1000, (5, 1000)) == pytest.approx(got, nan_ok=True)
    for key in values:
        assert np.array_equal(values[key], want[key], equal_nan=True), key


def test_evaluate_shows_progress_on_a_terminal(fitted, capsys, monkeypatch) -> None:
    """Full ranking of every user ran without a sign of life (428 s for 50,000 users at a million items, hours
    for a million users); evaluate and --beyond now show a bar of their chunks on a terminal, the same numbers."""
    import sys

    want = resdom.evaluate(fitted, beyond=True, batch_size=3, device="cpu")
    capsys.readouterr()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    got = resdom.evaluate(fitted, beyond=True, batch_size=3, device="cpu", progress=True)
    err = capsys.readouterr().err
    assert "evaluate" in err and "beyond" in err
    assert got.metrics == pytest.approx(want.metrics, nan_ok=True) and got.users.equals(want.users)
    resdom.evaluate(fitted, batch_size=3, device="cpu")  # off by default in Python
    assert capsys.readouterr().err == ""
    with pytest.raises(ResdomError, match="progress: expected True or False"):
        resdom.evaluate(fitted, progress="yes", device="cpu")


def test_train_and_evaluate_count_one_user_as_one_user(tmp_path, capsys) -> None:
    """train's and evaluate's lines said '(1 users)', and 12345 users as '12345' where data split prints '12,345';
    each count is now the number of users evaluated, in words that fit it."""
    df = pd.DataFrame({"user_id": "a", "item_id": [f"i{k % 4}" for k in range(6)], "timestamp": range(6)})
    df.to_csv(tmp_path / "one.csv", index=False)
    run = tmp_path / "run"
    assert invoke("train", str(tmp_path / "one.csv"), "--protocol", "loo", "--out", str(run), "--epochs", "1",
                  "--set", "model.hidden=8", "--device", "cpu", "--no-progress") == 0
    lines = capsys.readouterr().out.splitlines()
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["valid"]["n_users"] == metrics["test"]["n_users"] == 1
    assert [x.split(":")[0] for x in lines[1:]] == ["valid (1 user)", "test (1 user)"]
    per_user = tmp_path / "per_user.csv"
    assert invoke("evaluate", str(run), "--device", "cpu", "--per-user", str(per_user)) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines()[0].startswith(f"{run} test (1 user, seen items")
    assert f"{per_user}: 1 user\n" in printed.err and len(pd.read_csv(per_user)) == 1
