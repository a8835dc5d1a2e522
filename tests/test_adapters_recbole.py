"""RecBole 1.2.1 SASRec import: the fixture (made by scripts/make_recbole_fixture.py with RecBole itself) is
imported without RecBole; the imported model's scores equal RecBole's own, and evaluate / diagnose accept it."""

from __future__ import annotations

import json
import subprocess
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


def test_existing_output_is_not_overwritten(run_dir: Path) -> None:
    with pytest.raises(ResdomError, match="not empty"):
        import_recbole(CKPT, str(INTER), run_dir)


def test_cli_import_and_error_exit(tmp_path: Path) -> None:
    out = tmp_path / "cli-run"
    cmd = [sys.executable, "-m", "resdom", "import-recbole", str(CKPT), "--data", str(INTER), "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "model.safetensors").exists() and (out / "data" / "arrays.npz").exists()
    bad = subprocess.run(cmd[:4] + [str(tmp_path / "nope.pth")] + cmd[5:-1] + [str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nope.pth" in bad.stderr and "Traceback" not in bad.stderr
