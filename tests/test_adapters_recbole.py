"""RecBole 1.2.1 SASRec import: the fixture (made by scripts/make_recbole_fixture.py with RecBole itself) is
imported without RecBole; the imported model's scores equal RecBole's own, and evaluate / diagnose accept it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from resdom.adapters.common import load_import_data
from resdom.adapters.recbole import (
    import_recbole,
    read_recbole_checkpoint,
    recbole_import_data,
    recbole_interactions,
    recbole_item_tokens,
)
from resdom.errors import ResdomError
from resdom.runs import load_run

FIXTURE = Path(__file__).parent / "fixtures" / "recbole"
CKPT, INTER = FIXTURE / "sasrec_tiny.pth", FIXTURE / "tiny.inter"


@pytest.fixture(scope="module")
def expected() -> dict[str, np.ndarray]:
    with np.load(FIXTURE / "expected.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_recbole(CKPT, str(INTER), tmp_path_factory.mktemp("recbole") / "run")


def test_checkpoint_reads_without_recbole() -> None:
    ckpt = read_recbole_checkpoint(CKPT)
    assert "recbole" not in sys.modules
    assert ckpt.config["model"] == "SASRec" and ckpt.config["MAX_ITEM_LIST_LENGTH"] == 10
    assert ckpt.state_dict["item_embedding.weight"].shape == (41, 16)


def test_item_numbering_is_recboles(expected: dict[str, np.ndarray]) -> None:
    tokens = recbole_item_tokens(INTER, read_recbole_checkpoint(CKPT).config)
    assert tokens[0] == "[PAD]" and tokens[1:] == expected["item_tokens"].tolist()
    # the fixture is built so that RecBole's order (first appearance) is not resdom's (increasing raw id)
    assert tokens[1:] != sorted(tokens[1:], key=int)


@pytest.mark.parametrize("name", ["kcore", "intervals", "dedup_last"])
def test_item_numbering_under_recbole_filters(name: str) -> None:
    """numbering.json: RecBole's own item tables of tiny.inter under filtering settings (made by the script)."""
    case = json.loads((FIXTURE / "numbering.json").read_text())[name]
    tokens = recbole_item_tokens(INTER, case["config"])
    assert tokens == case["tokens"] and len(tokens) < 41


def test_numbering_that_depends_on_tie_order_is_refused(tmp_path: Path) -> None:
    inter = tmp_path / "ties.inter"
    inter.write_text("user_id:token\titem_id:token\ttimestamp:float\n"
                     "u1\t5\t10\nu1\t6\t10\nu2\t5\t11\nu2\t7\t12\n")
    config = {"rm_dup_inter": "first", "USER_ID_FIELD": "user_id", "ITEM_ID_FIELD": "item_id"}
    with pytest.raises(ResdomError, match="2 items are first seen at a tied timestamp"):
        recbole_item_tokens(inter, config)
    assert recbole_item_tokens(inter, {**config, "rm_dup_inter": None}) == ["[PAD]", "5", "6", "7"]
    with pytest.raises(ResdomError, match="alias_of_item_id"):
        recbole_item_tokens(inter, {**config, "alias_of_item_id": ["x"]})
    # the same unstable sort orders one user's interactions at one time: the numbering is fine, the order is not
    inter.write_text("user_id:token\titem_id:token\ttimestamp:float\n"
                     "u1\t5\t10\nu1\t6\t11\nu2\t5\t12\nu2\t6\t12\n")
    assert recbole_item_tokens(inter, config) == ["[PAD]", "5", "6"]
    with pytest.raises(ResdomError, match="1 users have several interactions at one timestamp"):
        recbole_interactions(inter, config)
    assert recbole_interactions(inter, {**config, "rm_dup_inter": None}).items.tolist() == ["5", "6", "5", "6"]


def test_val_interval_and_interaction_counts_as_recbole(tmp_path: Path) -> None:
    """RecBole's _filter_by_field_value (float intervals, token lists) before _filter_by_inter_num."""
    inter = tmp_path / "v.inter"
    rows = [("u1", "a", 1, 10), ("u1", "b", 5, 11), ("u1", "c", 4, 12), ("u2", "a", 2, 13), ("u2", "c", 5, 14),
            ("u3", "b", 3, 15), ("u3", "d", 5, 16)]
    inter.write_text("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                     + "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
    rb = recbole_interactions(inter, {"val_interval": {"rating": "[3,inf)"}})
    assert rb.item_tokens == ["[PAD]", "b", "c", "d"] and rb.items.tolist() == ["b", "c", "c", "b", "d"]
    steps = {st["step"]: st for st in rb.steps}
    assert steps["val_interval"]["removed_interactions"] == 2
    rb = recbole_interactions(inter, {"val_interval": {"rating": "[3,inf)"}, "item_inter_num_interval": "[2,inf)"})
    assert rb.item_tokens == ["[PAD]", "b", "c"] and rb.items.tolist() == ["b", "c", "c", "b"]  # d: 1 left
    with pytest.raises(ResdomError, match="no interactions left"):  # the count filters cascade to nothing
        recbole_interactions(inter, {"val_interval": {"rating": "[3,inf)"}, "user_inter_num_interval": "[2,inf)",
                                     "item_inter_num_interval": "[2,inf)"})
    rb = recbole_interactions(inter, {"val_interval": {"item_id": ["a", "d"]}})
    assert rb.item_tokens == ["[PAD]", "a", "d"]


def test_order_is_recboles_float32_time_order(tmp_path: Path) -> None:
    """RecBole sorts by the float32 of the (min-max normalised) time with stable sorts: near-equal times tie
    and keep file order, where an exact time sort would swap them."""
    inter = tmp_path / "t.inter"
    t0 = 500_000_000
    rows = [("u1", "x", 0), ("u1", "a", t0 + 10), ("u1", "b", t0 + 3), ("u1", "c", t0 + 200), ("u2", "a", 10**9),
            ("u2", "b", 1), ("u2", "c", 2)]
    inter.write_text("user_id:token\titem_id:token\ttimestamp:float\n"
                     + "".join(f"{u}\t{i}\t{t}\n" for u, i, t in rows))
    for normalize_all in (True, None):  # normalised: (t - 0) / 1e9 in float32; raw: float32 spacing 32 s at 5e8
        rb = recbole_interactions(inter, {"normalize_all": normalize_all})
        assert rb.normalised is bool(normalize_all)
        assert rb.items.tolist() == ["x", "a", "b", "c", "b", "c", "a"]  # a (t0+10) stays before b (t0+3)
        assert rb.users_reordered == 1
    data = recbole_import_data(recbole_interactions(inter, {"normalize_all": True}), {"kind": "path"})
    seq = data.split.test.inputs.sequence(0).tolist() + [int(data.split.test.targets[0])]
    assert [data.item_labels[i] for i in seq] == ["x", "a", "b", "c"]
    from resdom.data.prepare import load_prepared

    prepared, _ = load_prepared(str(inter), k_core=0)  # resdom's own order: exact times
    assert [prepared.item_labels[i] for i in prepared.sequences.sequence(0)] == ["x", "b", "a", "c"]


def _resdom_inputs(expected: dict[str, np.ndarray], labels: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
    """RecBole's test inputs in resdom ids (left-padded), and RecBole's score column of each resdom item id."""
    rid = {str(lab): i for i, lab in enumerate(labels) if i}
    seqs = [[rid[t] for t in s.split()] for s in expected["inputs"]]
    width = max(map(len, seqs))
    items = torch.tensor([[0] * (width - len(s)) + s for s in seqs])
    col = {t: k + 1 for k, t in enumerate(expected["item_tokens"].tolist())}
    return items, np.array([col[str(lab)] for lab in labels[1:]])


def test_scores_equal_recboles(run_dir: Path, expected: dict[str, np.ndarray]) -> None:
    run = load_run(run_dir)
    labels = load_import_data(str(INTER)).item_labels
    items, cols = _resdom_inputs(expected, labels)
    with torch.no_grad():
        scores = (run.model.encode(items)[:, -1] @ run.model.item_embeddings().T)[:, 1:].numpy()
    theirs = expected["scores"][:, cols]
    assert scores.shape == theirs.shape == (60, 40)
    np.testing.assert_allclose(scores, theirs, rtol=1e-5, atol=1e-5)
    assert (scores.argmax(1) == theirs.argmax(1)).all()


def test_run_test_split_is_recboles_test_split(run_dir: Path, expected: dict[str, np.ndarray]) -> None:
    """resdom's LOO test inputs (last max_len items) and targets are RecBole's, user by user."""
    run = load_run(run_dir)
    from resdom.data.prepare import load_prepared

    prepared, _ = load_prepared(str(INTER))
    labels, users = prepared.item_labels, prepared.user_labels
    test = run.split.test
    ours = {
        str(users[test.inputs.users[i]]): ([str(labels[x]) for x in test.inputs.sequence(i)[-10:]],
                                           str(labels[test.targets[i]]))
        for i in range(len(test))
    }
    theirs = {u: (s.split(), t) for u, s, t in zip(expected["users"], expected["inputs"], expected["targets"])}
    assert ours == theirs


def test_evaluate_and_diagnose_accept_the_run(run_dir: Path) -> None:
    from resdom.diagnostics.runner import run_all
    from resdom.evaluation.evaluate import evaluate

    run = load_run(run_dir)
    assert run.config["imported_from"]["format"] == "recbole"
    result = evaluate(run.model, run.split.test)
    assert result.n_users == 60 and 0.0 < result.metrics["HR@10"] <= 1.0
    summary = run_all(run_dir, what="all", progress=False, seeds=[0], alphas=[1.0, 0.5, 0.0])
    assert summary["n_users"] == 60 and summary["split"] == "test"
    mixing = json.loads((run_dir / "diagnostics" / "mixing.json").read_text())
    assert mixing["stages"] == ["Attn", "+Res", "+LN"] and len(mixing["layers"]) == 2
    hrli = json.loads((run_dir / "diagnostics" / "hrli.json").read_text())
    assert 0.0 <= hrli["values"]["HRLI@1"] <= 1.0


def test_other_data_is_refused(tmp_path: Path) -> None:
    lines = INTER.read_text().splitlines(keepends=True)
    item = lines[1].split("\t")[1]
    other = tmp_path / "other.inter"  # one item fewer than the model was trained on
    other.write_text("".join([lines[0]] + [x for x in lines[1:] if x.split("\t")[1] != item]))
    with pytest.raises(ResdomError, match="trained on other data"):
        import_recbole(CKPT, str(other), tmp_path / "run")


def test_a_csv_given_as_the_inter_file_or_a_recbole_file_to_another_importer_says_so(tmp_path: Path) -> None:
    """A comma-separated file as --data said "no column 'user_id' in the header (has user_id,item_id,timestamp)";
    a RecBole checkpoint given to import-pmixer / import-rectools named only the refused global."""
    from resdom.adapters.pmixer import import_pmixer

    csv = tmp_path / "shop.csv"
    csv.write_text("user_id,item_id,timestamp\n1,2,3\n")
    with pytest.raises(ResdomError, match=r"shop.csv:1: the header reads as one column \('user_id,item_id,timestamp'"
                                          r"\): a RecBole .inter file is separated by tabs, with typed fields"):
        import_recbole(CKPT, str(csv), tmp_path / "run")
    with pytest.raises(ResdomError, match=r"it is a RecBole checkpoint: `resdom import-recbole` reads it$"):
        import_pmixer(CKPT, str(INTER), tmp_path / "run2")
    assert not (tmp_path / "run").exists() and not (tmp_path / "run2").exists()


def test_existing_output_is_not_overwritten(run_dir: Path) -> None:
    with pytest.raises(ResdomError, match="not empty"):
        import_recbole(CKPT, str(INTER), run_dir)


def test_cli_import_and_error_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``resdom import-recbole`` (in this process, through the CLI's entry function) and its one-line error."""
    from cli_helpers import invoke

    out = tmp_path / "cli-run"
    assert invoke("import-recbole", str(CKPT), "--data", str(INTER), "--out", str(out)) == 0
    stdout = capsys.readouterr().out
    assert (out / "model.safetensors").exists() and (out / "data" / "arrays.npz").exists()
    # it says what it applied: RecBole's settings from the checkpoint, not resdom's k-core
    assert "RecBole preprocessing, as the checkpoint's config says: rm_dup_inter=None" in stdout
    assert "user_inter_num_interval='[0,inf)'" in stdout and "40 items" in stdout
    assert "60 users" in stdout and "--no-filter" in stdout
    assert invoke("import-recbole", str(tmp_path / "nope.pth"), "--data", str(INTER), "--out", str(tmp_path / "x")) == 2
    err = capsys.readouterr().err
    assert "nope.pth" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------------------------
# a RecBole SASRec trained on the real ml-100k (scripts/make_recbole_ml100k_fixture.py, in RecBole's own venv)

ML100K = Path(__file__).parent / "fixtures" / "recbole_ml100k"
ML100K_CKPT = ML100K / "sasrec_ml100k.pth"


@pytest.fixture(scope="module")
def ml100k_inter(shared_raw: Path) -> Path:
    path = shared_raw / "ml-100k" / "ml-100k.inter"
    if not path.is_file():
        pytest.skip(f"real ml-100k not found at {path} (RecBole's dataset/ml-100k/ml-100k.inter)")
    return path


@pytest.fixture(scope="module")
def ml100k_recbole() -> dict:
    """RecBole's own test split (users, inputs, targets, target ranks) and printed test evaluation."""
    with np.load(ML100K / "test_split.npz", allow_pickle=False) as z:
        split = {k: z[k] for k in z.files}
    return {**split, **json.loads((ML100K / "recbole_eval.json").read_text())}


@pytest.fixture(scope="module")
def ml100k_data(ml100k_inter: Path):
    """RecBole's data rebuilt from the real file and the checkpoint's config, and resdom's split of it."""
    rb = recbole_interactions(ml100k_inter, read_recbole_checkpoint(ML100K_CKPT).config)
    return rb, recbole_import_data(rb, {"kind": "path"})


@pytest.fixture(scope="module")
def ml100k_run(ml100k_inter: Path, shared_raw: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Imported with the registered name (its file found in --data-dir); the CLI test gives the path."""
    return import_recbole(ML100K_CKPT, "ml-100k", tmp_path_factory.mktemp("ml100k") / "run", data_dir=shared_raw)


def _test_split_by_user(split_data, item_labels: np.ndarray, user_labels: np.ndarray, width: int
                        ) -> dict[str, tuple]:
    """{user token: (last ``width`` input item tokens, target token)} of a split's test set."""
    test = split_data.test
    return {str(user_labels[test.inputs.users[i]]): (
        tuple(str(item_labels[x]) for x in test.inputs.sequence(i)[-width:]), str(item_labels[test.targets[i]]))
        for i in range(len(test))}


def test_ml100k_fixture_is_small_and_from_recbole(ml100k_recbole: dict) -> None:
    assert ML100K_CKPT.stat().st_size < 3_000_000
    assert ml100k_recbole["versions"]["recbole"] == "1.2.1" and ml100k_recbole["normalize_all"] is True
    assert ml100k_recbole["n_test_users"] == len(ml100k_recbole["users"]) == 943


def test_ml100k_inputs_and_targets_are_recboles_user_by_user(ml100k_inter: Path, ml100k_data, ml100k_recbole: dict
                                                             ) -> None:
    """RecBole orders by float32 normalised times (ties keep file order); resdom's own exact-time order differs
    for some users, the import's order for none."""
    from resdom.data.prepare import load_prepared, prepare_split

    rb, data = ml100k_data
    width = int(read_recbole_checkpoint(ML100K_CKPT).config["MAX_ITEM_LIST_LENGTH"])
    theirs = {u: (tuple(s.split()), t) for u, s, t in
              zip(ml100k_recbole["users"], ml100k_recbole["inputs"], ml100k_recbole["targets"])}
    ours = _test_split_by_user(data.split, data.item_labels, data.user_labels, width)
    assert len(ours) == len(theirs) == 943
    assert ours == theirs
    assert data.split.n_items == 1682  # nothing filtered: RecBole's ml-100k preset has no interaction-count filter
    # resdom's own preparation of the same file (exact times, stable): other inputs or targets for ~4% of users
    prepared, _ = load_prepared(str(ml100k_inter), k_core=0)
    own = _test_split_by_user(prepare_split(str(ml100k_inter), "loo", k_core=0), prepared.item_labels,
                              prepared.user_labels, width)
    differ = sum(own[u] != theirs[u] for u in theirs)
    assert 0.02 < differ / len(theirs) < 0.08, differ
    assert rb.users_reordered >= differ


def test_ml100k_no_filter_metrics_equal_recboles(ml100k_run: Path, ml100k_data, ml100k_recbole: dict) -> None:
    """The bar: `resdom import-recbole` + `--no-filter` evaluation == RecBole's own printed test evaluation."""
    from resdom.evaluation.evaluate import evaluate

    run = load_run(ml100k_run)
    assert run.split.n_items == 1682 and run.config["imported_from"]["preprocessing"]
    result = evaluate(run.model, run.split.test, filter_seen=False, return_ranks=True)
    recbole = ml100k_recbole["recbole_test_result"]
    assert result.n_users == 943
    assert abs(result.metrics["HR@10"] - recbole["hit@10"]) <= 1e-4, (result.metrics, recbole)
    assert abs(result.metrics["NDCG@10"] - recbole["ndcg@10"]) <= 1e-4, (result.metrics, recbole)
    # user by user: the target's rank under resdom's scores is RecBole's (both pessimistic, over all items)
    _, data = ml100k_data  # the same split as the run's (same code), with the user tokens
    assert np.array_equal(data.split.test.targets, run.split.test.targets)
    ours = {str(data.user_labels[u]): int(r) for u, r in zip(run.split.test.inputs.users, result.ranks)}
    theirs = dict(zip(ml100k_recbole["users"].tolist(), ml100k_recbole["ranks"].tolist()))
    differ = [u for u in theirs if ours[u] != theirs[u]]
    assert len(differ) <= 2, f"{len(differ)} users rank their target differently (e.g. {differ[:3]})"


@pytest.mark.slow
def test_ml100k_cli_import_prints_what_it_applied(ml100k_inter: Path, tmp_path: Path, ml100k_recbole: dict,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from cli_helpers import invoke

    out = tmp_path / "cli"
    assert invoke("import-recbole", str(ML100K_CKPT), "--data", str(ml100k_inter), "--out", str(out)) == 0
    stdout = capsys.readouterr().out
    assert "100,000 interactions read, 0 removed" in stdout and "1,682 items" in stdout, stdout
    assert "float32 min-max normalised timestamp" in stdout and "943 users" in stdout, stdout
    assert invoke("evaluate", str(out), "--no-filter", "--json") == 0
    got = json.loads(capsys.readouterr().out)
    recbole = ml100k_recbole["recbole_test_result"]
    assert got["n_users"] == 943 and not got["filtered"]
    assert abs(got["metrics"]["HR@10"] - recbole["hit@10"]) <= 1e-4
    assert abs(got["metrics"]["NDCG@10"] - recbole["ndcg@10"]) <= 1e-4


def test_text_ids_that_differ_by_leading_zeros_stay_two_items(tmp_path: Path) -> None:
    """RecBole's tokens are text: '007' and '7' are two of its items, as resdom reads them; the importer matched ids
    by their integer value and refused such data ("raw item id '7' appears twice in the model's item table").
    A model whose ids are integers (pmixer) knows one item 7: two data ids that are it are refused, where both
    took its row without a word."""
    from resdom.adapters.common import source_rows

    inter = tmp_path / "zeros.inter"
    inter.write_text("user_id:token\titem_id:token\ttimestamp:float\n"
                     + "".join(f"u{u}\t{i}\t{t}\n" for u in range(3) for t, i in enumerate(["007", "7", "a", "07"])))
    rb = recbole_interactions(inter, {})
    data = recbole_import_data(rb, {"kind": "path"})
    assert rb.item_tokens == ["[PAD]", "007", "7", "a", "07"]
    rows = source_rows(data.item_labels, rb.item_tokens, "ckpt")
    assert [rb.item_tokens[r] for r in rows[1:]] == data.item_labels[1:].tolist()
    labels = np.array([None, "007", 5], dtype=object)
    assert source_rows(labels, list(range(9)), "state").tolist() == [0, 7, 5]  # pmixer: '007' is its item 7
    with pytest.raises(ResdomError, match=r"^state: items '007' and 7 of the data are one item of the model \(7"):
        source_rows(np.array([None, "007", 7], dtype=object), list(range(9)), "state")
