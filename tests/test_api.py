"""The Python API (resdom.api): fit in memory, save to a run directory the CLI reads, evaluate and
diagnose with the CLI's numbers, tables and figures of every result, one-line errors naming the parameter."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

import resdom
from resdom.errors import ResdomError
from resdom.training.config import make_train_config
from tests.cli_helpers import invoke

SOURCE = "synthetic:n_users=200,n_items=60,min_len=5,max_len=12,seed=0"
SMALL = {"epochs": 2, "hidden": 16, "layers": 2, "heads": 2, "max_len": 12, "batch_size": 64, "seed": 0}
FAST = {"seeds": (0,), "alphas": (1.0, 0.5, 0.0), "device": "cpu"}


def OTHER_SPLIT():  # noqa: N802 (a constant, made on first use)
    return resdom.prepare_split(SOURCE.replace("n_items=60", "n_items=70"))


@pytest.fixture(scope="module")
def split():
    return resdom.prepare_split(SOURCE, "loo")


@pytest.fixture(scope="module")
def fitted(split):
    return resdom.fit(split, "sasrec", device="cpu", progress=False, **SMALL)


@pytest.fixture(scope="module")
def diagnosis(fitted):
    return resdom.diagnose(fitted, **FAST)


@pytest.fixture(scope="module")
def run_dir(fitted, tmp_path_factory) -> Path:
    saved = resdom.Fitted(**{**fitted.__dict__})  # a copy: save() records its directory on the object
    return saved.save(tmp_path_factory.mktemp("api") / "run")


def test_the_api_is_loaded_on_first_use():
    """``resdom.fit`` is ``resdom.api.fit``; that ``import resdom`` alone loads no torch is checked in a fresh
    interpreter by tests/test_import_layers.py (one subprocess for it and the report)."""
    assert resdom.fit is resdom.api.fit and resdom.Diagnosis is resdom.api.Diagnosis


def test_a_type_checker_sees_the_apis_signatures_at_the_top_level():
    """``resdom.fit`` and the rest (and ``resdom.data.prepare_split``, ...) come from a module ``__getattr__`` (loaded
    on first use), which a type checker reads as ``Any``: the package ships py.typed, yet ``resdom.fit(...)`` and
    what it returns were unchecked. Every name of the lazy API is imported under TYPE_CHECKING as an explicit
    re-export (``from resdom.api import X as X``; checked by reading the source: mypy itself takes 40 s to start)."""
    import ast

    import resdom.data

    def exported(module) -> dict[str, str]:  # name -> the module it is imported from under TYPE_CHECKING
        tree = ast.parse(Path(module.__file__).read_text())
        checked = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
        return {a.name: str(n.module) for block in checked for n in block.body if isinstance(n, ast.ImportFrom)
                for a in n.names if a.asname == a.name}

    assert exported(resdom) == dict.fromkeys(resdom._API, "resdom.api")
    assert all(getattr(resdom, name) is getattr(resdom.api, name) for name in resdom._API)
    assert exported(resdom.data) == resdom.data._LAZY  # resdom.data's lazy names (prepare_split, ...) too


def test_fit_without_out_writes_nothing_and_returns_a_usable_model(split, tmp_path, monkeypatch):
    private, cwd = tmp_path / "tmp", tmp_path / "cwd"
    private.mkdir()
    cwd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.chdir(cwd)
    fitted = resdom.fit(split, "sasrec", device="cpu", progress=False, **{**SMALL, "epochs": 1})
    left = [p.name for p in private.iterdir() if not p.name.startswith("torchinductor_")]  # torch's own cache
    assert left == [] and list(cwd.iterdir()) == []  # the temporary run directory is gone
    assert fitted.directory is None and not fitted.model.training
    assert fitted.model_config.hidden == 16 and fitted.model_config.n_items == split.n_items
    assert fitted.train_config.epochs == 1 and fitted.train_config.objective == "ce_all"
    assert fitted.metrics["epochs_run"] == 1 and len(fitted.history) == 1
    assert fitted.metrics["test"]["n_users"] == len(split.test)
    result = resdom.evaluate(fitted)
    assert result.metrics == pytest.approx(fitted.metrics["test"]["metrics"], abs=1e-12)  # the best checkpoint


def test_fit_and_load_run_leave_the_callers_torch_random_state_alone(split, run_dir):
    """``fit`` seeds torch with train.seed and loading a run builds a model before its weights are read: neither
    moves the caller's random state (a seeded script drew the same numbers after a fit as without one only by luck
    of never drawing again; it got train.seed's stream instead)."""
    import torch

    torch.manual_seed(123)
    before = torch.get_rng_state()
    resdom.fit(split, "sasrec", device="cpu", progress=False, **{**SMALL, "epochs": 1})
    assert torch.equal(torch.get_rng_state(), before)
    resdom.load_run(run_dir, device="cpu")
    assert torch.equal(torch.get_rng_state(), before)


def test_fits_in_two_threads_at_once_give_each_the_numbers_it_gives_alone(split, fitted):
    """torch's random state is the process's: two fits at once drew each other's dropout and reseeded each other
    mid-epoch, so neither gave the weights it gives alone. They now run one at a time."""
    import threading

    got: dict[int, object] = {}

    def train(i: int) -> None:
        try:
            got[i] = resdom.fit(split, "sasrec", device="cpu", progress=False, **SMALL).checkpoint
        except Exception as e:  # noqa: BLE001 - reported by the assert below
            got[i] = e

    threads = [threading.Thread(target=train, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {0: fitted.checkpoint, 1: fitted.checkpoint}


def test_a_fit_gives_the_thread_count_back_before_another_thread_may_fit(split, monkeypatch) -> None:
    """One lock serves a fit (``callers_rng``'s, held for the whole run; the trainer's own second lock is gone): the
    torch thread count a fit sets (``train.threads``) is given back while it is still held, so a fit that another
    thread starts meanwhile never has its threads set back under it. Before, the count was given back after that
    lock was released (only the trainer's second lock kept another fit out)."""
    import torch

    from resdom import distributed

    given_back: list[bool] = []
    real = torch.set_num_threads
    before = torch.get_num_threads()

    def set_num_threads(n: int) -> None:
        if n == before:  # giving the caller's count back
            given_back.append(distributed._RANDOM_STATE._is_owned())
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", set_num_threads)
    resdom.fit(split, "sasrec", device="cpu", progress=False, **{**SMALL, "epochs": 1},
               threads=before + 1)
    assert torch.get_num_threads() == before and given_back == [True]


def test_a_load_in_another_thread_leaves_a_fit_under_way_its_numbers(split, fitted, run_dir):
    """Loading a run builds a model inside ``callers_rng`` and puts the state it found back on leaving: in another
    thread during a fit, that put back the state of some earlier epoch in the middle of the fit's (so the second of
    two fits in two threads, whose first loads its best model after training, gave other weights). A load now waits
    for the fit under way."""
    import threading

    got: list[object] = []
    fitting = threading.Thread(
        target=lambda: got.append(resdom.fit(split, "sasrec", device="cpu", progress=False, **SMALL).checkpoint))
    fitting.start()
    loads = 0
    while fitting.is_alive() or not loads:
        resdom.load_run(run_dir, device="cpu")
        loads += 1
    fitting.join()
    assert got == [fitted.checkpoint]


def test_fit_and_diagnose_without_bars_leave_no_thread_behind(split):
    """A hidden tqdm bar (``disable=True``) starts tqdm's monitor thread and nothing stops it: a fit or a diagnosis
    without bars (a notebook, a log, progress=False) left a thread running in the caller's process."""
    import threading

    from tqdm import tqdm

    if tqdm.monitor is not None:  # another test's bar
        tqdm.monitor.exit()
        tqdm.monitor = None
    fitted = resdom.fit(split, "sasrec", device="cpu", progress=False, **{**SMALL, "epochs": 1})
    resdom.diagnose(fitted, what="hrli,mixing", device="cpu")
    assert tqdm.monitor is None
    assert [t.name for t in threading.enumerate() if t.name == "tqdm_monitor"] == []


CONCURRENT_WARNINGS = """
import sys, threading, warnings
import torch._dynamo  # torch's compiler adds a filter of its own on import (SymPy's), training imports it anyway
import resdom
before = list(warnings.filters)
split = resdom.prepare_split("synthetic:n_users=60,n_items=30,min_len=5,max_len=12,seed=0", "loo")
csv = sys.argv[1]
def work():
    resdom.prepare_split(csv, user_col="u", item_col="i", time_col="t", protocol="loo", k_core=0)
    resdom.fit(split, "sasrec", epochs=1, hidden=8, layers=1, heads=1, max_len=8, device="cpu", progress=False)
threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert warnings.filters == before, [f for f in warnings.filters if f not in before]
"""


@pytest.mark.slow
def test_calls_in_two_threads_at_once_leave_the_warnings_filters_alone(tmp_path):
    """resdom's own warnings filters (quiet tqdm import, pandas' ParserWarning as an error) were catch_warnings
    blocks: two overlapping in two threads each put back the filters it saved on entry, the second with the first's
    filter in it, so two fits at once left "ignore every warning" installed in the caller's process. (A fresh
    interpreter: the overlap is at the first import of tqdm.auto.)"""
    import subprocess
    import sys

    csv = tmp_path / "events.csv"
    csv.write_text("u,i,t\n" + "".join(f"{u},{(u * 7 + k) % 13},{k}\n" for u in range(30) for k in range(6)))
    done = subprocess.run([sys.executable, "-c", CONCURRENT_WARNINGS, str(csv)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_an_evaluation_while_another_thread_recommends_at_alpha_0_gets_the_models_own_numbers(fitted):
    """recommend(alpha=...) and a diagnosis scale the residual on the model itself: an evaluate of the same model in
    another thread meanwhile returned the scaled model's metrics without a word. Calls on one model now run one at
    a time. (The recommending thread is held inside its scaled scoring until the evaluation has had its chance.)"""
    import threading

    own = resdom.evaluate(fitted, cutoffs=(10,)).metrics
    model = fitted.model
    inside, release = threading.Event(), threading.Event()

    def held_embeddings():
        if not inside.is_set() and all(b.alpha == 0.0 for b in model.attention_blocks()):  # recommend's scoring
            inside.set()
            release.wait(30)
        return type(model).item_embeddings(model)

    model.item_embeddings = held_embeddings
    got: dict[str, object] = {}
    try:
        recommending = threading.Thread(target=lambda: fitted.recommend(k=3, alpha=0.0))
        recommending.start()
        assert inside.wait(30)
        evaluating = threading.Thread(target=lambda: got.update(m=resdom.evaluate(fitted, cutoffs=(10,)).metrics))
        evaluating.start()
        evaluating.join(5)  # before the fix: done by now, with alpha 0's numbers; after it: waiting for the model
        release.set()
        recommending.join()
        evaluating.join()
    finally:
        release.set()
        del model.item_embeddings
    assert got["m"] == own


def test_a_callers_float64_default_dtype_neither_changes_the_model_nor_is_lost(fitted, run_dir):
    """``torch.set_default_dtype(torch.float64)`` in the caller's program made resdom.fit build and train a float64
    model: other weights and metrics than ``resdom train``'s for the same configuration (NDCG@10 0.114 vs 0.232 on
    a small synthetic split), and load_run a float64 copy of float32 weights. Both are float32 now, and the
    caller's default comes back."""
    import torch

    torch.set_default_dtype(torch.float64)
    try:
        again = resdom.fit(fitted.split, "sasrec", device="cpu", progress=False, **SMALL)
        loaded = resdom.load_run(run_dir, device="cpu")
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert again.checkpoint == fitted.checkpoint
    assert {p.dtype for p in again.model.parameters()} == {p.dtype for p in loaded.model.parameters()} == {
        torch.float32}


def test_a_callers_default_device_neither_breaks_fit_nor_load_run_nor_is_lost(fitted, run_dir):
    """``torch.set_default_device`` of another device (a notebook's "cuda"; "meta" here, on any machine) made
    resdom.fit and load_run build the model there and fail inside torch on ``device="cpu"`` ("Cannot copy out of
    meta tensor"). They build on the CPU now, and the caller's default comes back."""
    import torch

    torch.set_default_device("meta")
    try:
        again = resdom.fit(fitted.split, "sasrec", device="cpu", progress=False, **{**SMALL, "epochs": 1})
        loaded = resdom.load_run(run_dir, device="cpu")
        assert torch.get_default_device().type == "meta"
    finally:
        torch.set_default_device(None)
    assert again.metrics["epochs_run"] == 1 and loaded.checkpoint == fitted.checkpoint
    assert {p.device.type for p in loaded.model.parameters()} == {"cpu"}


def test_fit_takes_a_torch_device_as_evaluate_and_diagnose_do(fitted, split, tmp_path):
    """``resdom.fit(split, device=torch.device("cpu"))`` (a notebook's ``torch.device("cuda" if ... else "cpu")``,
    which evaluate, diagnose and load_run take) was refused: "train.device: Input should be 'auto', 'cpu', 'cuda' or
    'mps' (got device(type='cpu'))". It trains there now, recorded by the device's name."""
    import torch

    again = resdom.fit(split, "sasrec", out=tmp_path / "run", device=torch.device("cpu"), progress=False, **SMALL)
    assert again.checkpoint == fitted.checkpoint and again.train_config.device == "cpu"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["device"] == "cpu"
    assert make_train_config(device=torch.device("cpu")).device == "cpu"


def test_fit_with_out_writes_a_run_directory(split, tmp_path):
    fitted = resdom.fit(split, "sasrec", out=tmp_path / "run", device="cpu", progress=False, **{**SMALL, "epochs": 1})
    assert fitted.directory == tmp_path / "run" and (tmp_path / "run" / "model.safetensors").is_file()
    assert resdom.load_run(tmp_path / "run", device="cpu").checkpoint == fitted.checkpoint
    # another setup into it: the message names fit's argument, not the CLI's --out
    with pytest.raises(ResdomError, match=r"holds a run with another setup \(model\.hidden: 16 saved vs 8 now\); "
                                          r"use another out directory"):
        resdom.fit(split, "sasrec", out=tmp_path / "run", device="cpu", progress=False,
                   **{**SMALL, "epochs": 2, "hidden": 8})


def test_saved_run_gives_the_cli_the_same_numbers(fitted, run_dir, capsys):
    assert invoke("evaluate", str(run_dir), "--json", "--device", "cpu") == 0  # the default, auto, may be a GPU
    cli = json.loads(capsys.readouterr().out)
    api = resdom.evaluate(fitted, device="cpu")
    assert cli["metrics"] == api.metrics and cli["n_users"] == api.n_users
    assert invoke("evaluate", str(run_dir), "--split", "valid", "--no-filter", "--json", "--device", "cpu") == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["metrics"] == resdom.evaluate(fitted, part="valid", filter_seen=False, device="cpu").metrics
    loaded = resdom.load_run(run_dir, device="cpu")
    assert loaded.checkpoint == loaded.metrics["checkpoint"]  # metrics.json names the saved weights
    assert loaded.model_config == fitted.model_config and loaded.train_config == fitted.train_config
    assert loaded.history == fitted.history and loaded.metrics["test"] == fitted.metrics["test"]


def test_evaluate_cutoffs_and_evalset(fitted):
    result = resdom.evaluate(fitted.model, fitted.split.valid, cutoffs=(3, 7), device="cpu")
    assert list(result.metrics) == ["HR@3", "HR@7", "NDCG@3", "NDCG@7", "MRR"]
    assert list(result.to_frame().columns) == ["metric", "value", "n_users"]


def test_diagnose_equals_run_all(diagnosis, run_dir):
    from resdom.diagnostics.registry import REGISTRY
    from resdom.diagnostics.runner import run_all

    run_all(run_dir, what="all", progress=False, seeds=[0], alphas=[1.0, 0.5, 0.0])
    for name, mine in diagnosis.to_dict().items():
        written = json.loads((run_dir / "diagnostics" / f"{name}.json").read_text())
        assert {k: v for k, v in written.items() if k not in ("seconds", "checkpoint")} == mine, name
    assert list(diagnosis.results) == ["shuffle", "hrli", "mixing", "alpha", "recovery"]
    # every CSV file is its result's table, to the letter (mixing_per_position.csv: to_frame(per_position=True))
    for name, d in REGISTRY.items():
        for suffix, frame in d.frames.items():
            table = frame(diagnosis[name]).to_csv(index=False, lineterminator="\n")
            assert (run_dir / "diagnostics" / f"{name}{suffix}.csv").read_text() == table, name + suffix
    assert (run_dir / "diagnostics" / "mixing_per_position.csv").read_text() == diagnosis.mixing.to_frame(
        per_position=True).to_csv(index=False, lineterminator="\n")


def test_diagnose_any_diagnosable_with_its_split(fitted, diagnosis):
    alone = resdom.diagnose(fitted.model, fitted.split, what="hrli,mixing", device="cpu")
    assert alone.shuffle is None and list(alone.results) == ["hrli", "mixing"]
    assert alone.hrli.to_dict() == diagnosis.hrli.to_dict()
    assert alone.mixing.to_dict() == diagnosis.mixing.to_dict()
    custom = resdom.diagnose(fitted, what=["hrli"], recency=(1, 4), cutoffs=(2,), device="cpu")
    assert list(custom.hrli.values) == ["HRLI@2", "HRL4I@2"]


def test_to_frame_columns(diagnosis):
    columns = {
        "shuffle": ["perturbation", "metric", "mean", "std", "relative_change", "jaccard@10"],
        "hrli": ["metric", "recency", "cutoff", "band", "n_users", "value"],
        "mixing": ["layer", "scope", "stage", "r"],
        "recovery": ["split", "alpha", "recovery", "HR@10", "alpha_star"],
    }
    for name, cols in columns.items():
        assert list(diagnosis.to_frame(name).columns) == cols, name
    alpha = diagnosis.alpha.to_frame()
    assert list(alpha.columns[:4]) == ["alpha", "mixing_all_Attn", "mixing_all_+Res", "mixing_all_+LN"]
    assert {"HRLI@1", "HRL2I@1", "HR@10", "NDCG@10"} <= set(alpha.columns) and alpha["alpha"].tolist() == [1, .5, 0]
    per_position = diagnosis.mixing.to_frame(per_position=True)
    assert list(per_position.columns) == ["layer", "offset_from_end", "stage", "r"]
    hrli = diagnosis.hrli.to_frame()
    assert set(hrli["band"]) == {"all", "0", "1-4", "5-19", "20+"}  # the split's training frequencies are known
    hrli = hrli[hrli["band"] == "all"].set_index("metric")
    assert hrli.loc["HRL2I@10", "recency"] == 2 and hrli.loc["HRL2I@10", "cutoff"] == 10
    pooled = diagnosis.mixing.to_frame().query("layer == 'pooled' and scope == 'all'").set_index("stage")["r"]
    assert pooled.to_dict() == pytest.approx(diagnosis.mixing.pooled["all"])


def test_plot_returns_a_figure_a_notebook_shows(diagnosis):
    for name in ("shuffle", "hrli", "mixing", "alpha", "recovery"):
        fig = diagnosis.plot(name)
        assert isinstance(fig, Figure) and fig.axes, name
        assert fig._repr_png_().startswith(b"\x89PNG"), name  # what Jupyter displays as the cell's value
    assert isinstance(diagnosis.plot("mixing", per_position=True), Figure)
    with pytest.raises(ResdomError, match="per_position: only the mixing figure"):
        diagnosis.plot("hrli", per_position=True)
    for result in diagnosis.results.values():  # results are data: the figure comes from the report
        assert not hasattr(result, "plot")
    legend = [t.get_text() for t in diagnosis.plot("mixing").legends[0].get_texts()]
    assert "SASRec (n=1)" in legend  # one result: one seed


@pytest.mark.parametrize("call, message", [
    (lambda s, f: resdom.fit(s, "nosuchmodel"), "model: unknown model 'nosuchmodel'"),
    (lambda s, f: resdom.fit(s, epochz=3), "unknown option 'epochz' (did you mean epochs?)"),
    (lambda s, f: resdom.fit(s, lr=-1.0), "train.lr"),
    (lambda s, f: resdom.fit(s, hidden=0), "model.hidden"),
    (lambda s, f: resdom.fit(SOURCE), "split: expected a SplitData"),
    (lambda s, f: resdom.fit(s, device="tpu"), "device: unknown device 'tpu'"),
    (lambda s, f: resdom.fit(s, device="cuda:1"), "device: unknown device 'cuda:1' (auto, cpu, cuda or mps); to use "
                                                   "GPU 1, run with CUDA_VISIBLE_DEVICES=1 and the device 'cuda'"),
    # a torch.device as its name, as evaluate and diagnose take one (was "train.device: Input should be 'auto', ...")
    (lambda s, f: resdom.fit(s, device=__import__("torch").device("cuda", 1)),
     "device: unknown device 'cuda:1' (auto, cpu, cuda or mps); to use GPU 1, run with CUDA_VISIBLE_DEVICES=1"),
    (lambda s, f: resdom.fit(s, device=__import__("torch").device("meta")), "device: unknown device 'meta'"),
    (lambda s, f: resdom.evaluate(f, cutoffs=(0, 10)),
     "cutoffs: every value must be an integer >= 1 (got 0)"),
    (lambda s, f: resdom.evaluate(f, cutoffs=(10, 10)), "cutoffs: value 10 is given twice (in 10,10)"),
    (lambda s, f: resdom.evaluate(f, cutoffs=(5, 2**31)),
     "cutoffs: every value must be an integer from 1 to 2,147,483,647 (got 2147483648)"),
    (lambda s, f: resdom.evaluate(f, cutoffs=10), "cutoffs: expected a non-empty sequence"),
    (lambda s, f: resdom.evaluate(f, part="train"), "part: expected one of valid, test (got 'train')"),
    (lambda s, f: resdom.evaluate(f, part="tset"), "part: expected one of valid, test (did you mean test? got 'tset')"),
    (lambda s, f: resdom.evaluate(f, batch_size=0), "batch_size: must be at least 1"),
    (lambda s, f: resdom.evaluate(object(), s), "model: object is not diagnosable"),
    # the part named where the split goes: was an AttributeError ('str' object has no attribute 'test')
    (lambda s, f: resdom.evaluate(f, "test"), "split: expected a SplitData or EvalSet, got str 'test' (the part is "
                                              "chosen by part='test')"),
    (lambda s, f: resdom.diagnose(f, "valid"), "split: expected a SplitData or EvalSet, got str 'valid'"),
    (lambda s, f: resdom.evaluate(f, 5), "split: expected a SplitData or EvalSet, got int 5"),
    (lambda s, f: resdom.diagnose(f.model), "split: diagnose needs the data"),
    (lambda s, f: resdom.diagnose(f, what="nope"), "what: unknown diagnostic 'nope'"),
    (lambda s, f: resdom.diagnose(f, what="users"), "what: unknown diagnostic 'users'"),  # users.npz: run_all's
    (lambda s, f: resdom.diagnose(f, alphas=(1.0, 2.0)), "alphas: residual scales must lie in [0, 1] (got 2)"),
    (lambda s, f: resdom.diagnose(f, layers=(5,)), "layers: the model has 2 blocks"),
    (lambda s, f: resdom.diagnose(f, recency=(0,)), "recency: every value must be an integer >= 1"),
    (lambda s, f: resdom.diagnose(f, definition="norms"), "definition: must be one of"),
    (lambda s, f: resdom.load_run("no/such/run"), "no/such/run: run directory not found"),
    # prepare_split's own values, checked before the data is read (were a TypeError, pydantic's multi-line
    # ValidationError, and "SplitData(train=...): no such file or directory")
    (lambda s, f: resdom.prepare_split(SOURCE, protocol="gts", quantile="x"),
     "quantile: expected a number strictly between 0 and 1 (got str 'x')"),
    # a number given as text was said to be out of range ("must lie strictly between 0 and 1 (got '0.8')")
    (lambda s, f: resdom.prepare_split(SOURCE, protocol="gts", valid_quantile="0.8"),
     "valid_quantile: expected a number strictly between 0 and 1 (got str '0.8')"),
    (lambda s, f: f.recommend(alpha="0.5"), "alpha: expected a number, the residual scale in [0, 1] (got str '0.5')"),
    (lambda s, f: resdom.prepare_split(SOURCE, protocol="gts", quantile=float("nan")), "quantile: must lie"),
    (lambda s, f: resdom.prepare_split(SOURCE, protocol="gts", valid_quantile=1), "valid_quantile: must lie"),
    (lambda s, f: resdom.prepare_split(SOURCE, "loo", k_core=-1), "k_core: must be >= 0 (0 or None: off) (got -1)"),
    (lambda s, f: resdom.prepare_split(SOURCE, "loo", sample_users=0), "sample_users: must be >= 1 (None: all users)"),
    (lambda s, f: resdom.prepare_split(s), "source: a SplitData is split already"),
    # what is no source: its text was taken for a file name ("[1: no such file or directory", a Series printed whole)
    (lambda s, f: resdom.prepare_split([1, 2, 3]), "source: expected a data set name, a file or folder path, or a "
                                                   "pandas DataFrame (got list)"),
    (lambda s, f: resdom.prepare_split(pd.Series(["u1", "u2"])), "source: expected a data set name, a file or folder "
                                                                 "path, or a pandas DataFrame (got Series)"),
    (lambda s, f: resdom.prepare_split(pd.DataFrame({"u": ["a"]}), user_col=True), "user_col: expected a column name, "
                                                                                    "got bool True"),
    (lambda s, f: resdom.prepare_split(pd.DataFrame({"u": ["a"]}), item_col=["i"]), "item_col: expected a column name, "
                                                                                    "got list ['i']"),
    # a flag given as text would be true; numbers of the wrong kind were TypeErrors
    (lambda s, f: resdom.prepare_split(SOURCE, "loo", filter_seen="no"), "filter_seen: expected True, False or None"),
    (lambda s, f: resdom.prepare_split(pd.DataFrame({"user_id": [1], "item_id": [1], "timestamp": [1]}), no_time="no"),
     "no_time: expected True, False or None (got 'no')"),  # was read as true: a loo split without the timestamps
    (lambda s, f: resdom.prepare_split(SOURCE, normalize_ids="no"), "normalize_ids: expected True, False or None"),
    (lambda s, f: f.recommend(filter_seen="no"), "filter_seen: expected True, False or None (got 'no')"),
    (lambda s, f: resdom.evaluate(f, filter_seen=1), "filter_seen: expected True, False or None (got 1)"),
    (lambda s, f: f.recommend(alpha="x"), "alpha: expected a number, the residual scale in [0, 1] (got str 'x')"),
    (lambda s, f: f.recommend(alpha=1.5), "alpha: the residual scale must lie in [0, 1] (got 1.5)"),
    (lambda s, f: f.recommend(batch_size=0), "batch_size: must be at least 1 (got 0)"),
    (lambda s, f: resdom.evaluate(f, batch_size="x"), "batch_size: expected an integer >= 1 (got 'x')"),
    # another split's data: an item id past the model's embeddings was an IndexError from inside torch
    (lambda s, f: resdom.evaluate(f, OTHER_SPLIT()), "split: 70 items, but the model scores 60 (a split other than"),
    (lambda s, f: resdom.evaluate(f, OTHER_SPLIT().test), "split: the EvalSet holds item id 7"),
    (lambda s, f: resdom.diagnose(f, OTHER_SPLIT(), what="hrli"), "split: 70 items, but the model scores 60"),
    # a path that is none was a TypeError from inside pathlib naming no argument; one below a file a
    # NotADirectoryError; "" the working folder
    (lambda s, f: f.save(None), "path: expected a path (a str or pathlib.Path), got NoneType None"),
    (lambda s, f: f.save(""), "path: an empty path; give a folder"),
    (lambda s, f: resdom.load_run(5), "path: expected a path (a str or pathlib.Path), got int 5"),
    (lambda s, f: resdom.load_split(None), "path: expected a path"),
    (lambda s, f: resdom.diagnose_run(None), "run_dir: expected a path"),
    (lambda s, f: resdom.diagnose_run(f.directory or "run", options=5), "options: expected a DiagnoseOptions or None "
                                                                        "(got int)"),  # was an AttributeError
    (lambda s, f: resdom.fit(s, out=3), "out: expected a path"),
    (lambda s, f: resdom.prepare_split(SOURCE, data_dir=5), "data_dir: expected a path (a str or pathlib.Path)"),
    # a flag given as text drew the bars
    (lambda s, f: resdom.fit(s, progress="no"), "progress: expected True, False or None (got 'no')"),
    (lambda s, f: resdom.diagnose(f, progress="no"), "progress: expected True, False or None (got 'no')"),
    # one function alone was a TypeError from the trainer after the first epoch had run
    (lambda s, f: resdom.fit(s, callbacks=print), "callbacks: expected a list of functions cb(epoch, record), got "
                                                  "builtin_function_or_method (one callback: callbacks=[cb])"),
    (lambda s, f: resdom.fit(s, callbacks=[print, 1]), "callbacks: expected functions cb(epoch, record), got int 1"),
    # a value whose repr spans lines (a DataFrame's) was quoted over several lines
    (lambda s, f: resdom.evaluate(f, pd.DataFrame({"user_id": [1, 2], "item_id": [3, 4]})),
     "split: expected a SplitData or EvalSet, got DataFrame user_id item_id 0 1 3"),
    (lambda s, f: f.save(np.zeros((3, 2))), "path: expected a path (a str or pathlib.Path), got ndarray array([[0., "
                                            "0.], [0., 0.], [0., 0.]])"),
    # every other quoted value whose repr spans lines is one line too (each line break one space)
    (lambda s, f: resdom.evaluate(f, batch_size=np.zeros((3, 2))), "batch_size: expected an integer >= 1 (got "
                                                                   "array([[0., 0.], [0., 0.], [0., 0.]]))"),
    (lambda s, f: f.recommend(k=np.zeros((2, 2))), "k: expected an integer >= 1 (got array([[0., 0.], [0., 0.]]))"),
    (lambda s, f: resdom.diagnose(f, what="mixing", definition=pd.DataFrame({"a": [1]})),
     "definition: must be one of norm_of_sums, sum_of_norms (got "),
    (lambda s, f: resdom.fit(s, epochs=np.zeros((2, 2))), "train.epochs: Input should be a valid integer (got "
                                                          "array([[0., 0.], [0., 0.]]))"),
])
def test_user_mistakes_are_one_line_errors_naming_the_parameter(split, fitted, call, message):
    with pytest.raises(ResdomError) as e:
        call(split, fitted)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_numpy_bool_is_a_flag_wherever_true_or_false_is(split, fitted, tmp_path) -> None:
    """filter_seen took np.True_ (what ``series.any()`` gives) but beyond and overwrite refused it."""
    flag = np.bool_(True)
    assert resdom.evaluate(fitted, cutoffs=(5,), beyond=flag, filter_seen=flag).metrics == resdom.evaluate(
        fitted, cutoffs=(5,), beyond=True, filter_seen=True).metrics
    copy = resdom.Fitted(**{**fitted.__dict__})
    copy.save(tmp_path / "run")
    assert copy.save(tmp_path / "run", overwrite=flag) == tmp_path / "run"
    with pytest.raises(ResdomError, match=r"^beyond: expected True or False \(got 1\)$"):
        resdom.evaluate(fitted, beyond=1)


def test_integer_column_labels_are_columns() -> None:
    """A DataFrame read with header=None has columns 0, 1, 2: user_col=0 was taken for "not given" (the default
    'user_id', then "missing column") and 1 for a name that no column (labels read as text) had."""
    rows = [("a", "x", 1), ("a", "y", 2), ("a", "z", 3), ("b", "y", 1), ("b", "z", 2), ("b", "x", 3)]
    split = resdom.prepare_split(pd.DataFrame(rows), "loo", user_col=0, item_col=np.int64(1), time_col=2)
    named = resdom.prepare_split(pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]), "loo")
    assert split.user_labels.tolist() == named.user_labels.tolist() == ["a", "b"]
    assert split.item_labels.tolist() == named.item_labels.tolist()
    assert split.train.to_lists() == named.train.to_lists() and split.test.targets.tolist() == [3, 1]



def test_load_split_of_a_run_directory_names_its_split(run_dir):
    """A run directory holds its split in data/: load_split(run) says so (it was only "no prepared split here")."""
    with pytest.raises(ResdomError, match=r"no prepared split here .*; a run directory: its split is .*data$"):
        resdom.load_split(run_dir)
    assert resdom.load_split(run_dir / "data").n_items == resdom.load_run(run_dir).split.n_items

def test_save_refuses_a_non_empty_directory(fitted, run_dir):
    copy = resdom.Fitted(**{**fitted.__dict__})
    with pytest.raises(ResdomError, match="exists and is not empty"):
        copy.save(run_dir)
    assert copy.directory is None


def test_save_overwrite_drops_the_old_models_state_and_diagnostics(fitted, tmp_path):
    old = tmp_path / "run"
    resdom.Fitted(**{**fitted.__dict__}).save(old)
    for folder in ("state", "diagnostics"):
        (old / folder).mkdir(parents=True, exist_ok=True)
        (old / folder / "x.json").write_text("{}")
    resdom.Fitted(**{**fitted.__dict__}).save(old, overwrite=True)
    assert not (old / "state").exists() and not (old / "diagnostics").exists()
    assert resdom.load_run(old, device="cpu").checkpoint == json.loads((old / "metrics.json").read_text())["checkpoint"]


def test_save_overwrite_replaces_a_run_never_a_folder_of_other_files(fitted, tmp_path):
    """overwrite=True removes the folder's state/ and diagnostics/: only a run's; "no" is not False."""
    project = tmp_path / "project"
    (project / "diagnostics").mkdir(parents=True)
    (project / "diagnostics" / "mine.txt").write_text("keep me")
    (project / "notes.txt").write_text("keep me too")
    copy = resdom.Fitted(**{**fitted.__dict__})
    with pytest.raises(ResdomError, match="is not a resdom run directory"):
        copy.save(project, overwrite=True)
    with pytest.raises(ResdomError, match="overwrite: expected True or False \\(got 'no'\\)"):
        copy.save(tmp_path / "run", overwrite="no")
    assert sorted(p.name for p in project.rglob("*")) == ["diagnostics", "mine.txt", "notes.txt"]
    assert not (tmp_path / "run").exists()


def test_save_into_a_folder_another_process_writes_is_refused(fitted, tmp_path):
    """Two saves (or a save and a trainer) into one empty path at once wrote their weights and config over each
    other's; the save now holds the folder's lock, and the second is refused in one line, writing nothing."""
    from resdom.io import directory_lock

    out = tmp_path / "run"
    copy = resdom.Fitted(**{**fitted.__dict__})
    with directory_lock(out, "training"), pytest.raises(
            ResdomError, match=f"^{out}: another process is already training there; wait for it to finish or choose "
                               "another path$"):
        copy.save(out)
    assert [p.name for p in out.iterdir()] == [".lock"] and copy.directory is None
    assert copy.save(out) == out and (out / "config.json").is_file()


def test_diagnose_a_model_without_attention_skips_what_does_not_apply(split, capsys):
    gru = resdom.fit(split, "gru4rec", device="cpu", progress=False, epochs=1, hidden=16, max_len=12, seed=0)
    diagnosis = resdom.diagnose(gru, **FAST)
    assert list(diagnosis.results) == ["shuffle", "hrli", "recovery"]
    assert "gru4rec has no attention blocks" in capsys.readouterr().err
    with pytest.raises(ResdomError, match="mixing: gru4rec has no attention blocks"):
        resdom.diagnose(gru, what="mixing", device="cpu")
    with pytest.raises(KeyError, match="mixing was not computed"):
        diagnosis.plot("mixing")


def test_fit_takes_a_training_variants_train_values_under_the_users(split, tmp_path: Path) -> None:
    """``fit(split, "sasrec-celast")`` trains SASRec with ce_last (the variant's train value); a value the caller
    gives wins over the variant's."""
    small = {**SMALL, "epochs": 1}
    fitted = resdom.fit(split, "sasrec-celast", out=tmp_path / "a", device="cpu", progress=False, **small)
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["train"]["objective"] == "ce_last" and config["model"]["name"] == "sasrec"
    assert config["data"]["label"] == "sasrec-celast" and fitted.model_config.name == "sasrec"
    resdom.fit(split, "sasrec-p30", out=tmp_path / "b", device="cpu", progress=False, **{**small, "patience": 3})
    assert json.loads((tmp_path / "b" / "config.json").read_text())["train"]["patience"] == 3


def test_a_diagnosis_names_what_it_does_not_hold_in_a_resdom_error(diagnosis, fitted):
    """plot / to_frame of an unknown or uncomputed diagnostic raised a KeyError; a name in another case was unknown
    (elsewhere names are read in any case); per_position="no" drew the per-position figure."""
    for call in (diagnosis.plot, diagnosis.to_frame):
        with pytest.raises(ResdomError, match=r"^name: unknown diagnostic 'nope' \(one of shuffle, hrli,"):
            call("nope")
        with pytest.raises(ResdomError, match=r"^name: unknown diagnostic (None|5) "):
            call(5 if call == diagnosis.to_frame else None)  # to_frame(None) is every table
    pd.testing.assert_frame_equal(diagnosis.to_frame("HRLI"), diagnosis.to_frame("hrli"))
    assert isinstance(diagnosis.plot("Mixing"), Figure)
    with pytest.raises(ResdomError, match=r"^per_position: expected True or False \(got 'no'\)"):
        diagnosis.plot("mixing", per_position="no")
    part = resdom.diagnose(fitted, what="hrli", device="cpu")
    with pytest.raises(ResdomError, match=r"^name: mixing was not computed \(diagnose\(.*\) chose hrli\)"):
        part.plot("mixing")
    with pytest.raises(KeyError, match="^name: mixing was not computed"):  # still a KeyError, as of a mapping
        part["mixing"]
    for unhashable in (["hrli"], {"name": "hrli"}):  # a bare TypeError, "unhashable type: 'list'"
        for call in (diagnosis.plot, diagnosis.to_frame, diagnosis.__getitem__):
            with pytest.raises(ResdomError, match=r"^name: unknown diagnostic [\[{]"):
                call(unhashable)


def test_evaluate_takes_cutoffs_as_text_as_diagnose_and_the_cli_do(fitted):
    text = resdom.evaluate(fitted, cutoffs="5, 10", device="cpu").metrics
    assert text == resdom.evaluate(fitted, cutoffs=(5, 10), device="cpu").metrics and "HR@5" in text


def test_evaluate_takes_numpy_cutoffs(fitted):
    """np.array([5, 10]) was 'expected a non-empty sequence of integers', and np.int64(5) 'not an integer'."""
    got = resdom.evaluate(fitted, cutoffs=np.array([5, 10]), device="cpu").metrics
    assert got == resdom.evaluate(fitted, cutoffs=[np.int64(5), 10], device="cpu").metrics
    assert got == resdom.evaluate(fitted, cutoffs=(5, 10), device="cpu").metrics


def test_save_below_a_file_is_one_line(fitted, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("precious")
    with pytest.raises(ResdomError, match=r"^path .*afile/run: .*afile is a file, not a folder"):
        fitted.save(afile / "run")
    assert afile.read_text() == "precious"


def test_to_frame_without_a_name_gives_every_table_and_reprs_are_short(diagnosis, fitted, split):
    """``to_frame()`` beside ``to_dict()`` takes no argument; a split, a run, an evaluation and a
    diagnosis print in a line, not as their arrays."""
    frames = diagnosis.to_frame()
    assert list(frames) == list(diagnosis.to_dict()) == list(diagnosis.results)
    for name, frame in frames.items():
        pd.testing.assert_frame_equal(frame, diagnosis.to_frame(name))
    for obj in (split, split.train, split.test, fitted, diagnosis, resdom.evaluate(fitted, device="cpu")):
        text = repr(obj)
        assert len(text) < 300 and "\n" not in text and "array" not in text, text
    assert repr(split).startswith(f"SplitData({split.manifest['protocol']} split of ")
    assert f"{split.n_items:,} items" in repr(split) and f"test {len(split.test):,} users" in repr(split)


def test_unknown_diagnostic_gets_a_did_you_mean(fitted, run_dir, capsys):
    with pytest.raises(ResdomError, match=r"unknown diagnostic 'hrlii' \(did you mean hrli\?"):
        resdom.diagnose(fitted, what="hrlii", device="cpu")
    assert invoke("diagnose", str(run_dir), "--what", "hrlii", "--device", "cpu") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--what: unknown diagnostic 'hrlii' (did you mean hrli?" in err, err


def test_closed_choices_take_any_case(fitted, run_dir, capsys):
    """A part, a history or --split in any case is the same choice."""
    assert resdom.evaluate(fitted, part="VALID", device="cpu").metrics == resdom.evaluate(
        fitted, part="valid", device="cpu").metrics
    assert resdom.diagnose(fitted, what="hrli", part="Valid", device="cpu").part == "valid"
    pd.testing.assert_frame_equal(fitted.recommend(k=2, history="Test"), fitted.recommend(k=2, history="test"))
    assert invoke("evaluate", str(run_dir), "--split", "Valid", "--json", "--device", "cpu") == 0
    assert json.loads(capsys.readouterr().out)["split"] == "valid"
    assert invoke("evaluate", str(run_dir), "--split", "tets", "--device", "cpu") == 2
    assert "--part: expected one of valid, test (did you mean test? got 'tets')" in capsys.readouterr().err


def test_fit_and_save_write_no_run_inside_the_split_folder_they_read(split, tmp_path: Path) -> None:
    """``resdom train SPLIT --out SPLIT/run`` is refused (the run inside the split it reads), but ``resdom.fit(
    load_split(SPLIT), out=SPLIT/run)`` and ``Fitted.save(SPLIT/run)`` wrote one there; a split read from a folder
    keeps the folder (``SplitData.folder``) and both refuse it, naming their parameter."""
    from resdom.errors import ResdomError

    folder = tmp_path / "split"
    split.save(folder)
    loaded = resdom.load_split(folder)
    assert loaded.folder == folder and split.folder is None
    with pytest.raises(ResdomError, match=f"^out {folder}/run: is inside the split {folder}, which the command "
                                          "reads; choose an out outside it$"):
        resdom.fit(loaded, "sasrec", device="cpu", progress=False, out=folder / "run", **{**SMALL, "epochs": 1})
    fitted = resdom.fit(loaded, "sasrec", device="cpu", progress=False, **{**SMALL, "epochs": 1})
    with pytest.raises(ResdomError, match=f"^path {folder}/run: is inside the split {folder}, which the command "
                                          "reads; choose a path outside it$"):
        fitted.save(folder / "run")
    assert sorted(p.name for p in folder.iterdir()) == ["arrays.npz", "manifest.json"]


def test_a_split_is_saved_into_no_file_device_or_folder_of_other_files(split, tmp_path: Path) -> None:
    """``SplitData.save`` (``load_split``'s other half) added arrays.npz and manifest.json to any folder (a run
    directory, a folder of the user's files) and failed with a FileExistsError traceback at ``/dev/null``; each is
    a ResdomError naming ``directory`` now, and a split's own folder is written again."""
    import re

    from resdom.errors import ResdomError

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    refused = {other: "is not a split folder (it holds notes.txt)", other / "notes.txt": "is not a directory"}
    if Path("/dev/null").exists():
        refused[Path("/dev/null")] = "is not a directory"
    for path, needle in refused.items():
        with pytest.raises(ResdomError, match=f"^directory {re.escape(str(path))}: .*{re.escape(needle)}"):
            split.save(path)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    split.save(tmp_path / "split")
    split.save(tmp_path / "split")  # its own folder: written again
    assert resdom.load_split(tmp_path / "split").n_items == split.n_items
