"""RecTools 0.19 SASRec / BERT4Rec import: the fixtures (made by scripts/make_rectools_fixture.py with RecTools
itself, on ml-100k) are read without RecTools; the imported models' scores equal RecTools' own, evaluate and
diagnose accept the runs, and a malicious file is refused without running code."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from resdom.adapters.rectools import import_rectools, read_rectools_file, rectools_model, rectools_model_config
from resdom.adapters.safe_pickle import loads_restricted
from resdom.errors import ResdomError
from resdom.runs import load_run

FIXTURE = Path(__file__).parent / "fixtures" / "rectools"
KINDS = ("sasrec", "bert4rec")


def _file(kind: str) -> Path:
    return FIXTURE / f"{kind}.rectools"


def _scores(kind: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURE / f"{kind}_scores.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _labels(ck) -> np.ndarray:
    """resdom item id -> raw id: the model's own items, in its order."""
    return np.array([None] + [int(x) for x in ck.item_ids[len(ck.extra_tokens):]], dtype=object)


def test_fixtures_are_small_and_read_without_rectools() -> None:
    assert sum(p.stat().st_size for p in FIXTURE.iterdir()) < 2_000_000
    for kind in KINDS:
        ck = read_rectools_file(_file(kind))
        assert ck.kind == kind and ck.config["session_max_len"] == 20 and ck.config["n_factors"] == 16
        assert ck.extra_tokens == (["PAD"] if kind == "sasrec" else ["PAD", "MASK"])
        assert json.loads((FIXTURE / f"{kind}_eval.json").read_text())["rectools"] == "0.19.0"
    assert "rectools" not in sys.modules and "pytorch_lightning" not in sys.modules


@pytest.mark.parametrize("kind", KINDS)
def test_scores_equal_rectools_own(kind: str) -> None:
    """The bar: resdom's scores == RecTools' torch model's logits and its recommend() scores, within 1e-5."""
    ck = read_rectools_file(_file(kind))
    labels = _labels(ck)
    model = rectools_model(ck, labels)
    z = _scores(kind)
    n_extra = len(ck.extra_tokens)
    assert [str(x) for x in z["item_ids"][n_extra:]] == [str(x) for x in labels[1:]]
    to_id = {int(raw): i for i, raw in enumerate(labels) if raw is not None}
    inputs = z["inputs"][:, :-1] if kind == "bert4rec" else z["inputs"]  # BERT4Rec: its last column is MASK
    items = torch.tensor([[to_id[int(v)] if v >= 0 else 0 for v in row] for row in inputs])
    with torch.no_grad():
        scores = (model.encode(items)[:, -1] @ model.item_embeddings().T).numpy()
    assert np.abs(scores[:, 1:] - z["logits"][:, n_extra:]).max() <= 1e-5
    reco = np.take_along_axis(scores, np.vectorize(to_id.__getitem__)(z["reco_items"]), axis=1)
    assert np.abs(reco - z["reco_scores"]).max() <= 1e-5
    # batch trimming: a short input gives the same states at any width
    short = items[:3, -4:]
    with torch.no_grad():
        wide = model.encode(torch.nn.functional.pad(short, (model.max_len - 4, 0)))[:, -4:]
        assert torch.allclose(model.encode(short), wide, atol=1e-6)


def test_lightning_checkpoint_reads_like_the_saved_model(tmp_path: Path) -> None:
    outer = loads_restricted(_file("sasrec").read_bytes(), ("rectools.",))
    ckpt = tmp_path / "last.ckpt"
    ckpt.write_bytes(outer.state["fitted_checkpoint"])
    a, b = read_rectools_file(_file("sasrec")), read_rectools_file(ckpt)
    assert a.config == b.config and all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict)


def _outer_pickle(checkpoint: bytes) -> bytes:
    """A RecTools model.save() file by hand (protocol 2): SASRecModel.__new__, then its state dict."""
    state = pickle.dumps({"fitted_checkpoint": checkpoint}, protocol=2)[2:-1]
    return b"\x80\x02crectools.models.nn.transformers.sasrec\nSASRecModel\n)\x81" + state + b"b."


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_files_are_refused_without_running_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil_outer = tmp_path / "outer.rectools"
    evil_outer.write_bytes(pickle.dumps(_Evil(marker)))
    with pytest.raises(ResdomError, match="refused to load.*system"):
        read_rectools_file(evil_outer)
    # the model object is fine, the Lightning checkpoint inside it is not
    inner = tmp_path / "inner.pt"
    torch.save({"state_dict": {}, "hyper_parameters": {"x": _Evil(marker)}}, inner)
    evil_inner = tmp_path / "inner.rectools"
    evil_inner.write_bytes(_outer_pickle(inner.read_bytes()))
    with pytest.raises(ResdomError, match="fitted_checkpoint.*refused to load.*system"):
        read_rectools_file(evil_inner)
    with pytest.raises(ResdomError, match="refused to load.*system"):
        read_rectools_file(inner)  # as a .ckpt
    assert not marker.exists()
    # a hand-made outer file around the real checkpoint reads like the real file
    real = loads_restricted(_file("sasrec").read_bytes(), ("rectools.",)).state["fitted_checkpoint"]
    (tmp_path / "ok.rectools").write_bytes(_outer_pickle(real))
    assert read_rectools_file(tmp_path / "ok.rectools").kind == "sasrec"


def test_unsupported_models_are_refused_by_name() -> None:
    ck = read_rectools_file(_file("sasrec"))
    cases = [
        ({"similarity_module_kwargs": {"distance": "cosine"}}, "distance 'cosine'"),
        ({"transformer_layers_type": "rectools.models.nn.transformers.net_blocks.PreLNTransformerLayers"},
         "transformer_layers_type"),
        ({"pos_encoding_type": "my.PositionalEncoding"}, "pos_encoding_type"),
        ({"use_causal_attn": False}, "without causal attention"),
    ]
    for change, message in cases:
        bad = type(ck)(**{**ck.__dict__, "config": {**ck.config, **change}})
        with pytest.raises(ResdomError, match=message):
            rectools_model_config(bad, 10)
    feats = dict(ck.state_dict)
    feats["torch_model.item_model.item_net_blocks.1.embedding_bag.weight"] = torch.zeros(3, 16)
    with pytest.raises(ResdomError, match="id-only item nets"):
        rectools_model_config(type(ck)(**{**ck.__dict__, "state_dict": feats}), 10)


def _synthetic_inter(ck, path: Path, users: int = 30) -> Path:
    """A small RecBole-style .inter file over items the model knows (for CI, which has no ml-100k)."""
    rng = np.random.default_rng(0)
    raw = [int(x) for x in ck.item_ids[len(ck.extra_tokens):]]
    lines = ["user_id:token\titem_id:token\ttimestamp:float"]
    t = 0
    for u in range(users):
        for item in rng.choice(raw, size=int(rng.integers(5, 30)), replace=False):
            t += 1
            lines.append(f"u{u}\t{item}\t{t}")
    lines.append(f"u0\t999999\t{t + 1}")  # an item the model does not know: dropped, as RecTools' recommend does
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_and_diagnose_accept_the_run(kind: str, tmp_path: Path) -> None:
    from resdom.diagnostics.runner import run_all
    from resdom.evaluation.evaluate import evaluate

    ck = read_rectools_file(_file(kind))
    lines: list[str] = []
    run_dir = import_rectools(_file(kind), str(_synthetic_inter(ck, tmp_path / "s.inter")), tmp_path / "run",
                              log=lines.append)
    assert "1 interaction with items unknown to the model dropped" in lines[1]  # was "1 interactions"
    run = load_run(run_dir)
    assert run.config["imported_from"]["format"] == "rectools" and run.model.cfg.name == kind
    result = evaluate(run.model, run.split.test)
    assert result.n_users == 30 and 0.0 <= result.metrics["HR@10"] <= 1.0
    summary = run_all(run_dir, what="all", progress=False, seeds=[0], alphas=[1.0, 0.5, 0.0])
    assert summary["n_users"] == 30
    mixing = json.loads((run_dir / "diagnostics" / "mixing.json").read_text())
    assert len(mixing["layers"]) == 2


# ---------------------------------------------------------------------------------------------------------------
# against RecTools' own recommend() on the real ml-100k (the fixture's data)


@pytest.fixture(scope="module")
def ml100k_inter(shared_raw: Path) -> Path:
    path = shared_raw / "ml-100k" / "ml-100k.inter"
    if not path.is_file():
        pytest.skip(f"real ml-100k not found at {path}")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_ml100k_metrics_and_inputs_equal_rectools(kind: str, ml100k_inter: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`resdom import-rectools` + `resdom evaluate` (seen items filtered) == RecTools' recommend(filter_viewed=True)
    HR@10 / NDCG@10 on the same leave-one-out split, and the test inputs are the ones RecTools read."""
    from cli_helpers import invoke

    out = tmp_path / "run"
    assert invoke("import-rectools", str(_file(kind)), "--data", str(ml100k_inter), "--out", str(out)) == 0
    stdout = capsys.readouterr().out
    assert "943 users" in stdout and "dropped" in stdout
    assert invoke("evaluate", str(out), "--json") == 0
    got, theirs = json.loads(capsys.readouterr().out), json.loads((FIXTURE / f"{kind}_eval.json").read_text())
    assert got["n_users"] == theirs["users"] == 943
    assert abs(got["metrics"]["HR@10"] - theirs["HR@10"]) <= 1e-4, (got["metrics"], theirs)
    assert abs(got["metrics"]["NDCG@10"] - theirs["NDCG@10"]) <= 1e-4, (got["metrics"], theirs)
    from resdom.adapters.rectools import rectools_import_data

    run, z, ck = load_run(out), _scores(kind), read_rectools_file(_file(kind))
    data = rectools_import_data(str(ml100k_inter), ck.item_ids[len(ck.extra_tokens):])
    assert np.array_equal(data.split.test.targets, run.split.test.targets)
    test = data.split.test
    width = run.model.max_len
    ours = {int(data.user_labels[test.inputs.users[i]]): [int(data.item_labels[x]) for x in
                                                          test.inputs.sequence(i)[-width:]] for i in range(len(test))}
    inputs = z["inputs"][:, :-1] if kind == "bert4rec" else z["inputs"]
    for user, row in zip(z["users"].tolist(), inputs):
        assert ours[user] == [int(v) for v in row if v >= 0]


def test_object_arrays_only_when_asked_and_only_of_plain_ids(tmp_path: Path) -> None:
    from resdom.adapters.safe_pickle import load_torch_bytes

    def saved(obj: object) -> bytes:
        path = tmp_path / "x.pt"
        torch.save(obj, path)
        return path.read_bytes()

    ids = saved({"ids": np.array(["PAD", 7, 9], dtype=object)})
    with pytest.raises(ResdomError, match="object dtype"):
        load_torch_bytes(ids)
    assert load_torch_bytes(ids, object_arrays=True)["ids"].tolist() == ["PAD", 7, 9]
    nested = saved({"ids": np.array([np.zeros(2), "PAD"], dtype=object)})
    with pytest.raises(ResdomError, match="object array of anything but"):
        load_torch_bytes(nested, object_arrays=True)


def test_benchmark_trains_the_network_the_importer_maps() -> None:
    """benchmarks/run.py's RecTools section gives resdom RecTools' SASRec as the importer maps it (d 64 there)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import run as bench

    ck = read_rectools_file(_file("sasrec"))
    mapped = rectools_model_config(ck, 10).model_dump()
    sizes = {"n_items", "max_len", "hidden", "dropout", "attn_dropout", "inner_size", "emb_scale"}
    assert {k: v for k, v in bench.RECTOOLS_SASREC.items() if k not in sizes} == \
        {k: mapped[k] for k in bench.RECTOOLS_SASREC if k not in sizes}
    assert bench.RECTOOLS_SASREC["inner_size"] == bench.RECTOOLS_SASREC["hidden"] == 64


def test_time_to_accuracy_curve_helpers() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import run as bench

    records = [{"seconds": 1.0, "v": 0.01}, {"seconds": 2.0, "v": None}, {"seconds": 1.5, "v": 0.07}]
    points = bench.curve(records, lambda r: r["v"])
    assert points == [(1.0, 0.01), (4.5, 0.07)]
    assert bench.time_to(points, 0.06) == 4.5 and bench.time_to(points, 0.1) is None
    assert "tta" in bench.SECTIONS and "tta" in bench.RUNNERS
