"""resdom inside someone else's Python process: every API call leaves the caller's process as it found it (threads,
random states, torch's modes and flags, warnings, logging, matplotlib, signals, environment, cwd, sys.path, umask,
threads, file descriptors, temporary files, a model passed in), also when it is interrupted, and gives the numbers it
gives anywhere else inside a caller's ``torch.no_grad()``, ``torch.inference_mode()`` or ``torch.autocast``."""

from __future__ import annotations

import io
import logging
import os
import random
import signal
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import resdom

SOURCE = "synthetic:n_users=60,n_items=30,min_len=5,max_len=10,seed=0"
SMALL = {"epochs": 2, "hidden": 8, "layers": 1, "heads": 1, "max_len": 8, "batch_size": 64, "seed": 0,
         "device": "cpu", "progress": False}
SIGNALS = [getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", "SIGUSR1", "SIGCHLD", "SIGALRM")
           if hasattr(signal, s)]
MODES = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
         "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16)}


@pytest.fixture(scope="module")
def split():
    return resdom.prepare_split(SOURCE, "loo")


@pytest.fixture(scope="module")
def fitted(split):
    return resdom.fit(split, "sasrec", **SMALL)


@pytest.fixture(scope="module")
def run_dir(fitted, tmp_path_factory) -> Path:
    return resdom.Fitted(**{**fitted.__dict__}).save(tmp_path_factory.mktemp("citizen") / "run")


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """tempfile's folder for the test alone, to see what a call leaves in it."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _umask() -> str | None:
    try:
        with open("/proc/self/status") as f:
            return next((line.split()[1] for line in f if line.startswith("Umask:")), None)
    except OSError:
        return None


def _fds() -> list[tuple[str, str]]:
    """Open descriptors and what they are; matplotlib's own cache of the font files it drew with left out."""
    found = []
    for fd in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not target.endswith((".ttf", ".otf", ".afm")):
            found.append((fd, target))
    return sorted(found)


def _loggers() -> dict[str, Any]:
    known = [("", logging.root), *[(n, lg) for n, lg in logging.root.manager.loggerDict.items()
                                    if isinstance(lg, logging.Logger)]]
    return {n: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for n, lg in known}


def snapshot(tmp: Path | None = None) -> dict[str, Any]:
    """The process-wide state a library call must leave alone."""
    b = torch.backends
    state: dict[str, Any] = {
        "torch threads": (torch.get_num_threads(), torch.get_num_interop_threads()),
        "torch rng": torch.get_rng_state().tolist(),
        "numpy rng": repr(np.random.get_state()),
        "random rng": random.getstate(),
        "default dtype / device": (torch.get_default_dtype(), str(torch.get_default_device())),
        "deterministic": (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled()),
        "cudnn / matmul / sdp": (b.cudnn.benchmark, b.cudnn.deterministic, b.cudnn.enabled, b.cudnn.allow_tf32,
                                 b.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision(),
                                 b.cuda.flash_sdp_enabled(), b.cuda.mem_efficient_sdp_enabled(),
                                 b.cuda.math_sdp_enabled(), b.mkldnn.enabled),
        "grad / inference / anomaly / autocast": (torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
                                                  torch.is_anomaly_enabled(), torch.is_autocast_enabled("cpu")),
        "warnings": (list(warnings.filters), warnings.showwarning),
        "logging": (_loggers(), logging.root.manager.disable),
        "signals": {s: signal.getsignal(s) for s in SIGNALS},
        "environ": dict(os.environ),
        "cwd / sys.path / umask": (os.getcwd(), list(sys.path), _umask()),
        "threads": sorted(t.name for t in threading.enumerate()),
        "fds": _fds(),
        "hooks": (sys.excepthook, threading.excepthook, sys.stdout, sys.stderr),
        "numpy errors / print": (np.geterr(), np.get_printoptions()),
    }
    if "matplotlib" in sys.modules:
        import matplotlib

        state["matplotlib"] = (matplotlib.rcParams._get_backend_or_none(),  # noqa: SLF001 (no backend resolved)
                               {k: repr(v) for k, v in dict.items(matplotlib.rcParams) if k != "backend"})
    if tmp is not None:
        state["temporary files"] = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_"))
    return state


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The names of what differs (a logger made by an import on the way is new, not changed)."""
    out = []
    for key in before:
        if key == "logging":
            old, new = before[key][0], after[key][0]
            diff = [n for n in old if old[n] != new.get(n)]
            if diff or before[key][1] != after[key][1]:
                out.append(f"logging {diff}")
        elif key == "matplotlib" and key not in after:
            out.append(key)
        elif before[key] != after.get(key):
            out.append(key)
    return out


def _callers_state() -> None:
    """A caller's own settings, none of them resdom's defaults."""
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    warnings.filterwarnings("ignore", message="a caller's own filter")
    logging.getLogger("callers.own").setLevel(logging.DEBUG)


def _entry_points(split, fitted, run_dir: Path, out: Path) -> dict[str, Callable[[], Any]]:
    from resdom.report import build_report

    def fresh(name: str) -> Path:  # a new folder each call
        return out / f"{name}-{sum(1 for _ in out.iterdir())}"

    return {
        "prepare_split": lambda: resdom.prepare_split(SOURCE, "gts"),
        "load_split": lambda: resdom.load_split(run_dir / "data"),
        "fit": lambda: resdom.fit(split, "sasrec", **{**SMALL, "epochs": 1}),
        "fit threads=2": lambda: resdom.fit(split, "sasrec", **{**SMALL, "epochs": 1}, threads=2),
        "fit out": lambda: resdom.fit(split, "sasrec", **{**SMALL, "epochs": 1}, out=fresh("fit")),
        "load_run": lambda: resdom.load_run(run_dir, device="cpu"),
        "evaluate": lambda: resdom.evaluate(fitted, cutoffs=(5,), beyond=True, device="cpu"),
        "diagnose": lambda: resdom.diagnose(fitted, device="cpu"),
        "diagnose plot": lambda: resdom.diagnose(fitted, what="mixing", device="cpu").plot("mixing"),
        "diagnose_run": lambda: resdom.diagnose_run(run_dir, device="cpu", seeds=(0,), progress=False),
        "recommend": lambda: fitted.recommend(k=3, alpha=0.5),
        "recommend sessions": lambda: fitted.recommend(sequences=[[1, 2, 3]], k=3),
        "similar_items": lambda: fitted.similar_items(k=3),
        "save": lambda: resdom.Fitted(**{**fitted.__dict__}).save(fresh("saved")),
        "build_report": lambda: build_report([run_dir], fresh("report")),
    }


ENTRY_POINTS = ["prepare_split", "load_split", "fit", "fit threads=2", "fit out", "load_run", "evaluate", "diagnose",
                "diagnose plot", "diagnose_run", "recommend", "recommend sessions", "similar_items", "save",
                pytest.param("build_report", marks=pytest.mark.slow)]  # two reports: 19 s


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_each_api_call_leaves_the_callers_process_as_it_found_it(name, split, fitted, run_dir, tmp_path,
                                                                  private_tmp):
    """Around each entry point (tiny data): nothing of the process's state above changes, and a model passed in
    keeps its weights, its train mode and its residual scales."""
    call = _entry_points(split, fitted, run_dir, tmp_path)[name]
    call()  # a first call imports what it needs (new loggers, tqdm, matplotlib): that is not a change
    _callers_state()
    fitted.model.train()
    try:
        weights = {k: v.clone() for k, v in fitted.model.state_dict().items()}
        before = snapshot(private_tmp)
        call()
        after = snapshot(private_tmp)
        assert changed(before, after) == []
        assert all(torch.equal(v, weights[k]) for k, v in fitted.model.state_dict().items())
        assert fitted.model.training and all(m.training for m in fitted.model.modules())
        assert [b.alpha for b in fitted.model.attention_blocks()] == [1.0]
        assert all(p.grad is None for p in fitted.model.parameters())
    finally:
        fitted.model.eval()
        warnings.filters[:] = [f for f in warnings.filters if f[1] is None or "own filter" not in f[1].pattern]


def test_an_interrupted_fit_leaves_the_callers_process_as_it_found_it(split, private_tmp):
    """A KeyboardInterrupt from a callback (a notebook's stop button) in the middle of a fit in memory: the thread
    count, random states, modes and warnings filters are the caller's, and no temporary run is left."""
    def stop(epoch: int, record: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    resdom.fit(split, "sasrec", **{**SMALL, "epochs": 1})
    _callers_state()
    before = snapshot(private_tmp)
    with pytest.raises(KeyboardInterrupt):
        resdom.fit(split, "sasrec", **SMALL, threads=torch.get_num_threads() + 1, callbacks=[stop])
    assert changed(before, snapshot(private_tmp)) == []
    resdom.fit(split, "sasrec", **{**SMALL, "epochs": 1})  # nothing held: the next fit runs


def test_an_interrupted_diagnosis_gives_the_model_back_as_it_was(fitted):
    """A KeyboardInterrupt in the middle of a diagnosis (the alpha sweep scales the residual, mixing records every
    block): the model passed in is back in its train mode, unscaled and recording nothing."""
    model, calls = fitted.model, []

    def encode(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return type(model).encode(model, *args, **kwargs)

    model.encode = encode
    model.train()
    try:
        with pytest.raises(KeyboardInterrupt):
            resdom.diagnose(fitted, what="alpha", device="cpu")
        assert model.training
        assert [(b.alpha, b.recording) for b in model.attention_blocks()] == [(1.0, None)]
    finally:
        del model.encode
        model.eval()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_fit_inside_a_callers_torch_mode_trains_as_outside_it(mode, split, fitted):
    """``torch.no_grad()`` / ``torch.inference_mode()`` (a notebook cell that evaluates a model of its own): a fit
    inside failed at its first step with torch's "element 0 of tensors does not require grad". ``torch.autocast``
    (a caller's bfloat16 region): the fit trained in bfloat16 to other weights than ``resdom train``'s. The fit now
    trains as anywhere else; the caller's mode is on again after it."""
    with MODES[mode]():
        got = resdom.fit(split, "sasrec", **SMALL)
        assert (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu")) == (
            mode == "autocast", mode == "inference_mode", mode == "autocast")
    assert got.checkpoint == fitted.checkpoint


def test_inference_inside_a_callers_autocast_gives_the_numbers_outside_it(fitted):
    """In a caller's ``torch.autocast("cpu", dtype=torch.bfloat16)`` region the model ran in bfloat16: recommend
    scored and the diagnostics measured other numbers than outside it, and similar_items failed inside numpy
    ("Got unsupported ScalarType BFloat16"). Every computation of the API is float32 now (evaluate already was)."""
    def numbers() -> dict[str, Any]:
        diagnosis = resdom.diagnose(fitted, what="hrli,mixing,alpha", device="cpu")
        return {"recommend": fitted.recommend(k=3).to_dict(), "sessions": fitted.recommend(sequences=[[3, 1]], k=3,
                                                                                            alpha=0.5).to_dict(),
                "similar": fitted.similar_items(k=3).to_dict(), "diagnose": diagnosis.to_dict(),
                "evaluate": resdom.evaluate(fitted, cutoffs=(5,), beyond=True, device="cpu").metrics}

    def without_seconds(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: without_seconds(v) for k, v in value.items() if "seconds" not in str(k)}
        return [without_seconds(v) for v in value] if isinstance(value, list) else value

    outside = numbers()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = numbers()
    assert without_seconds(inside) == without_seconds(outside)


def test_a_fit_leaves_the_cuda_seeds_a_caller_queued_before_using_cuda(split):
    """``torch.manual_seed(s)`` before CUDA is first used queues ``s`` for it (torch.cuda's lazy seeds); a fit
    reseeds torch each epoch, which replaced the caller's queued seed, so a caller who seeded, fitted (on the CPU)
    and then drew on the GPU got the fit's last epoch seed's numbers. The queued seeds are the caller's again after
    it (CUDA already in use: its generators' states are kept as before). Read on any machine: the queue is kept
    whether or not a GPU is there."""
    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    if torch.cuda.is_initialized() or not hasattr(tracker, "manual_seed_all_cb"):
        pytest.skip("CUDA in use, or a torch that queues its seeds otherwise")
    torch.manual_seed(123)
    queued = dict(vars(tracker))
    resdom.fit(split, "sasrec", **{**SMALL, "epochs": 1})
    assert vars(tracker) == queued


def test_figures_drawn_in_several_threads_at_once_leave_the_callers_rcparams_alone(fitted):
    """Each figure is built under matplotlib's ``rc_context(STYLE)``, which saves rcParams on entry and puts that
    copy back on exit: two plots overlapping in two threads each put back what it saved, the second one resdom's
    STYLE, so a notebook's own figures came out with 7-point fonts and ``text.parse_math`` off for the rest of the
    process. The blocks now run one at a time."""
    import matplotlib

    diagnosis = resdom.diagnose(fitted, what="hrli,mixing", device="cpu")
    diagnosis.plot("mixing")
    before = {k: repr(v) for k, v in dict.items(matplotlib.rcParams)}

    def draw() -> None:
        for _ in range(10):
            diagnosis.plot("mixing")
            diagnosis.plot("hrli")

    threads = [threading.Thread(target=draw) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = {k: repr(v) for k, v in dict.items(matplotlib.rcParams)}
    assert {k: (v, after[k]) for k, v in before.items() if after[k] != v} == {}


def test_a_diagnosis_inside_a_callers_recording_leaves_it_recording(fitted):
    """``interface.recording`` (public: docs/architecture.md) set every block's ``recording`` to None on exit
    whatever it was before: a caller recording the blocks around a ``diagnose(what="mixing")`` (which records them
    itself) recorded nothing after it, without a word. The blocks record as before on exit now."""
    from resdom.models.interface import recording

    items = torch.tensor([[0, 1, 2, 3]])
    with recording(fitted.model, weights=False) as store:
        with torch.no_grad():
            fitted.model.encode(items)
        resdom.diagnose(fitted, what="mixing", device="cpu")
        with torch.no_grad():
            fitted.model.encode(items)
        assert [len(records) for records in store] == [2]
        assert [b.record_weights for b in fitted.model.attention_blocks()] == [False]
    assert [(b.recording, b.record_weights) for b in fitted.model.attention_blocks()] == [(None, True)]


@pytest.mark.parametrize("call", ["evaluate", "evaluate beyond", "diagnose", "recommend", "similar_items"])
def test_each_module_of_a_callers_model_keeps_its_train_or_eval_mode(call, fitted):
    """A caller fine-tuning with some modules in eval mode (dropout or normalisation frozen): evaluate, the
    diagnostics, recommend and similar_items put the whole model back with ``train(True)``, every module in train
    mode. Each module's mode is put back as it was now (``interface.eval_mode``)."""
    calls = {"evaluate": lambda: resdom.evaluate(fitted, cutoffs=(5,), device="cpu"),
             "evaluate beyond": lambda: resdom.evaluate(fitted, cutoffs=(5,), beyond=True, device="cpu"),
             "diagnose": lambda: resdom.diagnose(fitted, what="hrli,mixing", device="cpu"),
             "recommend": lambda: fitted.recommend(k=3),
             "similar_items": lambda: fitted.similar_items(k=3)}
    model = fitted.model
    model.train()
    frozen = list(model.attention_blocks())[0]
    frozen.eval()
    modes = [m.training for m in model.modules()]
    try:
        calls[call]()
        assert [m.training for m in model.modules()] == modes and not frozen.training
    finally:
        model.eval()


def test_a_model_fitted_or_loaded_inside_a_callers_inference_mode_can_be_trained_after_it(split, run_dir):
    """``resdom.fit`` / ``load_run`` inside a caller's ``torch.inference_mode()`` built the model there: its weights
    were inference tensors, and training it afterwards (fine-tuning the returned model) failed with torch's
    "Inference tensors cannot be saved for backward". The model is made of ordinary tensors whatever the caller's
    mode."""
    with torch.inference_mode():
        models = [resdom.fit(split, "sasrec", **{**SMALL, "epochs": 1}).model,
                  resdom.load_run(run_dir, device="cpu").model]
    for model in models:
        assert not any(p.is_inference() for p in model.parameters())
        model.train()
        model.encode(torch.tensor([[0, 1, 2, 3]])).sum().backward()
        assert any(p.grad is not None for p in model.parameters())


def test_a_callers_bfloat16_model_is_recommended_from_and_diagnosed_as_it_is(fitted):
    """A caller's model cast to bfloat16 (``model.to(torch.bfloat16)``, to save memory) was evaluated, but
    ``recommend`` failed inside numpy ("Got unsupported ScalarType BFloat16") and the mixing and alpha diagnostics
    inside torch ("expected m1 and m2 to have the same dtype"). Each runs now, and leaves the model bfloat16."""
    import copy

    low = resdom.Fitted(**{**fitted.__dict__, "model": copy.deepcopy(fitted.model).to(torch.bfloat16)})
    frame = low.recommend(k=3)
    assert len(frame) == 3 * frame["user_id"].nunique() and frame["score"].dtype == np.float64
    assert len(low.recommend(sequences=[[1, 2, 3]], k=3)) == 3
    diagnosis = resdom.diagnose(low, what="mixing,alpha", device="cpu")
    assert set(diagnosis.results) == {"mixing", "alpha"}
    assert all(p.dtype == torch.bfloat16 for p in low.model.parameters())


def _legacy_medium() -> Callable[[], Any]:
    torch.set_float32_matmul_precision("medium")
    return torch.get_float32_matmul_precision


def _per_backend_bf16() -> Callable[[], Any]:
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    return lambda: torch.backends.mkldnn.matmul.fp32_precision


@pytest.mark.parametrize("setting", [_legacy_medium, _per_backend_bf16])
def test_a_fit_after_a_callers_lower_matmul_precision_trains_as_resdom_train(setting, split, fitted):
    """``torch.set_float32_matmul_precision("medium")`` (or the per-backend ``fp32_precision`` of newer torch) in
    the caller's program made a fit's float32 products bfloat16 ones, on the CPU too: other weights than ``resdom
    train``'s (another checkpoint). A fit computes them in full precision and gives the caller's setting back, set
    the way the caller set it (torch refuses to read the legacy setting after a mix of the two ways)."""
    if setting is _per_backend_bf16 and not hasattr(getattr(torch.backends.mkldnn, "matmul", None),
                                                    "fp32_precision"):
        pytest.skip("a torch without per-backend matmul precisions")
    try:
        read = setting()
        before = read()
        got = resdom.fit(split, "sasrec", **SMALL)
        assert read() == before
    finally:
        if setting is _per_backend_bf16:
            torch.backends.mkldnn.matmul.fp32_precision = "ieee"
        torch.set_float32_matmul_precision("highest")
    assert got.checkpoint == fitted.checkpoint


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_on_a_terminal_leave_no_tqdm_monitor_thread_running(split, fitted, monkeypatch):
    """tqdm starts a monitor thread with its first bar and (tqdm 4.70) never stops it: a fit, a diagnosis or an
    evaluation with bars on a terminal left a ``tqdm_monitor`` thread in the caller's process for good. resdom's
    bars start none (``evaluation.batches.progress_bar``)."""
    import tqdm.auto
    import tqdm.std

    for cls in (tqdm.std.tqdm, tqdm.auto.tqdm):  # another test's bars
        if cls.monitor is not None:
            cls.monitor.exit()
            cls.monitor = None
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    resdom.fit(split, "sasrec", **{**SMALL, "progress": True})
    resdom.diagnose(fitted, what="hrli,mixing", device="cpu", progress=True)
    resdom.evaluate(fitted, cutoffs=(5,), beyond=True, batch_size=8, device="cpu", progress=True)
    fitted.recommend(k=2, batch_size=8)
    assert "epochs" in terminal.getvalue()  # the bars were drawn
    assert [t.name for t in threading.enumerate() if t.name == "tqdm_monitor"] == []
