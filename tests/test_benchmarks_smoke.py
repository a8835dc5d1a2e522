"""The benchmark suite's code paths at micro sizes (benchmarks/run.py, benchmarks/tasks.py); no RecBole."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from resdom.evaluation.ranking import pessimistic_ranks

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tasks = _load("tasks")
run = _load("run")

TINY = {"synthetic": {"n_users": 40, "n_items": 30, "min_len": 4, "max_len": 12, "n_clusters": 3}}
MODEL = {"max_len": 10, "hidden": 16, "heads": 2, "inner_size": 32}


@pytest.mark.parametrize("objective", ["ce_last", "ce_sampled"])
def test_train_task_times_epochs_and_saves(tmp_path: Path, objective: str) -> None:
    path = tmp_path / "m.safetensors"
    evaluate = "each_epoch" if objective == "ce_last" else True
    out = tasks.task_train({"data": TINY, "model": MODEL, "train": {"objective": objective, "n_negatives": 8},
                            "epochs": 2, "evaluate": evaluate, "save": str(path), "threads": 1})
    if evaluate == "each_epoch":
        assert [e["after"]["test"]["n_users"] for e in out["epochs"]] == [40, 40]
    assert [e["epoch"] for e in out["epochs"]] == [1, 2]
    assert all(e["samples_per_s"] > 0 and e["peak_rss_mb"] > 0 for e in out["epochs"])
    assert out["test"]["n_users"] == 40 and out["objective"] == objective
    net = tasks.load_model(path)
    assert net.n_items == 30 and not net.training


def test_eval_task_naive_full_sort_agrees_with_resdom() -> None:
    args = {"data": TINY, "model": MODEL, "threads": 1}
    ours = tasks.task_eval({**args, "impl": "resdom"})
    naive = tasks.task_eval({**args, "impl": "naive"})
    assert ours["users"] == naive["users"] == 40
    for k in ("HR@10", "NDCG@10", "HR@1"):
        assert ours["metrics"][k] == pytest.approx(naive["metrics"][k])


def test_mixing_task_forward_and_both_definitions() -> None:
    args = {"data": TINY, "model": MODEL, "threads": 1, "max_users": 16}
    fwd = tasks.task_mixing({**args, "what": "forward"})
    assert fwd["users"] == 16 and fwd["pooled"] is None
    for what in ("norm_of_sums", "sum_of_norms"):
        res = tasks.task_mixing({**args, "what": what})
        assert 0.0 <= res["pooled"]["all"]["+Res"] <= 1.0
    timing = tasks.task_mixing({**args, "what": "timing", "rounds": 2})
    assert timing["rounds"] == 2 and set(timing["seconds"]) == {"forward", "norm_of_sums", "sum_of_norms"}
    assert all(v > 0 for v in timing["seconds"].values())


@pytest.mark.parametrize("model", ["bsarec", "duorec"])
def test_last_columns_task_times_both_modes_on_the_same_states(model: str) -> None:
    res = tasks.task_last_columns({"data": TINY, "model": model, "threads": 1, "rounds": 1, "steps": 1,
                                   "eval_users": 16})
    assert set(res["seconds"]) == {"train_full", "train_last", "eval_full", "eval_last"}
    assert all(v > 0 for v in res["seconds"].values()) and res["eval_users"] == 16
    assert res["max_state_diff"] < 1e-5


def test_cross_entropy_task_compares_equal_losses() -> None:
    res = tasks.task_cross_entropy({"P": 70, "N": 50, "d": 8, "rounds": 2, "threads": 1})  # two row blocks
    assert set(res["seconds"]) == {"torch", "resdom"} and all(v > 0 for v in res["seconds"].values())
    assert res["loss_diff"] < 1e-5 and res["grad_diff"] < 1e-6


def test_phase_peak_covers_what_the_phase_held() -> None:
    with tasks.Phase() as ph:
        block = np.ones(64 * 1024 * 1024 // 8)  # 64 MiB touched inside the phase
        inside = tasks.rss_mb()
        block.sum()
    d = ph.to_dict()
    assert d["seconds"] >= 0 and d["peak_rss_mb"] >= max(inside, d["rss_before_mb"]) - 0.1


def test_phase_peak_leaves_out_what_came_before() -> None:
    """A freed 256 MiB block raised the lifetime peak; where the peak can be reset, the phase must not see it.
    (Whether freed memory leaves RSS, and whether the peak resets, depend on the allocator and the kernel.)"""
    block = np.ones(256 * 1024 * 1024 // 8)
    high = tasks.peak_rss_mb()
    del block
    if high - tasks.rss_mb() < 200:
        pytest.skip("the freed block stayed resident here")
    with tasks.Phase() as ph:
        pass
    d = ph.to_dict()
    if not d["peak_is_phase_only"]:
        pytest.skip("this kernel does not reset the peak RSS")
    assert d["peak_rss_mb"] < high - 100


def test_merge_results_replaces_only_measured_sections(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    first = {"eval": run.render_section("eval", "EVAL-1", ["cmd a"], "python benchmarks/run.py --only eval", 1.0),
             "ddp": run.render_section("ddp", "DDP-1", ["cmd b"], "python benchmarks/run.py --only ddp", 1.0)}
    path.write_text("# Benchmarks\n\nAccuracy by hand.\n\n" + run.merge_results(tmp_path / "none.md", first)
                    .split("\n\n", 2)[2] + "\nTrailing notes.\n")
    text = run.merge_results(path, {"eval": run.render_section("eval", "EVAL-2", [], "x", 1.0)})
    assert "Accuracy by hand." in text and "Trailing notes." in text
    assert "EVAL-2" in text and "EVAL-1" not in text and "DDP-1" in text
    assert text.count(run.BEGIN) == 1 and text.count(run.END) == 1
    assert text.index("section:eval") < text.index("section:ddp")  # canonical order


def test_run_main_quick_eval_section_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run.py end to end for one section, its task processes replaced by in-process calls."""

    def in_process(self, cmd, timeout, env=None):  # noqa: ANN001
        self.commands.append(" ".join(cmd))
        return tasks.TASKS[cmd[2]]({**json.loads(cmd[3]), "threads": 1})

    monkeypatch.setattr(run.Context, "run_json", in_process)
    monkeypatch.setattr(run, "synthetic", lambda u, n, L, min_len=None, seed=0: {
        "synthetic": {"n_users": 30, "n_items": min(n, 2000), "min_len": 4, "max_len": 12, "n_clusters": 3}})
    results = tmp_path / "R.md"
    assert run.main(["--quick", "--only", "eval", "--results", str(results)]) == 0
    text = results.read_text()
    assert "<!-- section:eval -->" in text and "| synthetic 2k items | 30 |" in text
    assert "tasks.py eval" in text and "Failed" not in text


def test_recbole_inter_file(tmp_path: Path) -> None:
    src = tmp_path / "B.txt"
    src.write_text("u1 5 7 5\nu2 9 8\nu3 1 2\n")
    path = run.write_recbole_inter(src, tmp_path, "B", max_users=2)
    lines = path.read_text().splitlines()
    assert lines[0] == "user_id:token\titem_id:token\ttimestamp:float"
    assert lines[1:] == ["u1\t5\t0", "u1\t7\t1", "u1\t5\t2", "u2\t9\t3", "u2\t8\t4"]


def test_pessimistic_ranks_stay_int64_and_count_ties() -> None:
    """ranking.pessimistic_ranks accumulates in int32 (speed); the result is int64, ties count against."""
    scores = torch.tensor([[0.0, 1.0, 1.0, 2.0, 1.0], [3.0, -1.0, 3.0, 3.0, 0.5]])
    ranks = pessimistic_ranks(scores, torch.tensor([2, 4]))
    assert ranks.dtype == torch.int64 and ranks.tolist() == [3, 3]
    many = pessimistic_ranks(scores, torch.tensor([[1, 3], [0, 1]]))
    assert many.dtype == torch.int64 and many.tolist() == [[3, 0], [2, 4]]


def test_tta_section_times_a_target_and_the_value_every_library_reached(tmp_path: Path, monkeypatch) -> None:
    """The time-to-accuracy table from each library's curve (cumulative training seconds, validation NDCG@10)."""
    (tmp_path / "bsarec").mkdir()
    (tmp_path / "bsarec" / "Beauty.txt").write_text("u1 1 2 3 4\nu2 2 3 4 5\n")
    ours = {"epochs": [{"seconds": 2.0, "after": {"valid": {"metrics": {"NDCG@10": v}}}} for v in (0.02, 0.05, 0.07)]}
    recbole = {"epochs": [{"seconds": 20.0, "valid": {"ndcg@10": v}} for v in (0.03, 0.045)]}
    rectools = {"epochs": [{"seconds": 5.0, "valid": {"metrics": {"NDCG@10": v}}} for v in (0.01, 0.046, 0.065)]}

    def fake(self, cmd, timeout, env=None):  # noqa: ANN001
        self.commands.append(" ".join(cmd))
        return recbole if "recbole_driver.py" in cmd[1] else rectools

    monkeypatch.setattr(run.Context, "run_json", fake)
    monkeypatch.setattr(run.Context, "task", lambda self, name, args, timeout=3600: ours)
    (tmp_path / "out").mkdir()
    ctx = run.Context(True, tmp_path, tmp_path / "out", "rb-python", 1, rectools_python="rt-python", tta_target=0.06)
    text = run.section_tta(ctx)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| library")}
    # >= 0.06: resdom after 6 s, RecTools after 15 s, RecBole never; >= 0.045 (RecBole's best): 4 / 40 / 10 s
    assert rows["resdom"][3:7] == ["6.0", "1.00x", "4.0", "1.00x"]
    assert rows["RecTools"][3:7] == ["15.0", "2.50x", "10.0", "2.50x"]
    assert rows["RecBole"][3] == "not reached" and rows["RecBole"][5:7] == ["40.0", "10.00x"]
    assert "s to >= 0.045 (reached by all)" in text


def test_a_training_budget_ends_each_librarys_loop_after_the_epoch_that_reaches_it() -> None:
    """``within_budget``: another epoch starts while the timed epochs sum below the budget (the rule resdom's,
    RecBole's and RecTools' loops share); resdom's train task stops on it with epochs as a cap only."""
    assert tasks.within_budget([], None) and tasks.within_budget([{"seconds": 5.0}] * 3, None)
    assert tasks.within_budget([{"seconds": 2.0}, {"seconds": 2.9}], 5.0)
    assert not tasks.within_budget([{"seconds": 2.0}, {"seconds": 3.0}], 5.0)
    out = tasks.task_train({"data": TINY, "model": MODEL, "epochs": 50, "budget_s": 0.0, "threads": 1})
    assert [e["epoch"] for e in out["epochs"]] == [1]  # one epoch reaches a budget of 0 s
    out = tasks.task_train({"data": TINY, "model": MODEL, "epochs": 2, "budget_s": 1e9, "threads": 1})
    assert [e["epoch"] for e in out["epochs"]] == [1, 2]  # the cap ends a budget not reached


def test_tta_with_a_budget_gives_every_library_the_same_seconds(tmp_path: Path, monkeypatch) -> None:
    """--tta-budget: resdom, RecBole and RecTools each get ``budget_s`` and the same epoch cap (RecBole no longer a
    fifth of the epochs)."""
    (tmp_path / "bsarec").mkdir()
    (tmp_path / "bsarec" / "Beauty.txt").write_text("u1 1 2 3 4\nu2 2 3 4 5\n")
    seen: dict[str, dict] = {}
    curve = {"epochs": [{"seconds": 1.0, "valid": {"ndcg@10": 0.01, "metrics": {"NDCG@10": 0.01}},
                         "after": {"valid": {"metrics": {"NDCG@10": 0.01}}}}]}

    def fake(self, cmd, timeout, env=None):  # noqa: ANN001
        self.commands.append(" ".join(cmd))
        seen["RecBole" if "recbole_driver.py" in cmd[1] else "RecTools"] = {**json.loads(cmd[-1]), "timeout": timeout}
        return curve

    def task(self, name, args, timeout=3600):  # noqa: ANN001
        seen["resdom"] = {**args, "timeout": timeout}
        return curve

    monkeypatch.setattr(run.Context, "run_json", fake)
    monkeypatch.setattr(run.Context, "task", task)
    (tmp_path / "out").mkdir()
    ctx = run.Context(True, tmp_path, tmp_path / "out", "rb-python", 1, rectools_python="rt-python", tta_epochs=30,
                      tta_budget=7200.0)  # quick: the plot goes to tmp_path
    run.section_tta(ctx)
    assert {k: (v["budget_s"], v["epochs"]) for k, v in seen.items()} == {
        k: (7200.0, 100_000) for k in ("resdom", "RecBole", "RecTools")}
    assert all(v["timeout"] > 3 * 7200 for v in seen.values())


def test_tta_libraries_measured_in_separate_runs_share_one_table(tmp_path: Path, monkeypatch) -> None:
    """--tta-libs: each library's curve is stored with its settings and conditions; a later run that measures
    another library reads it back (same settings), refuses it under other settings, and never stores a failure."""
    (tmp_path / "bsarec").mkdir()
    (tmp_path / "bsarec" / "Beauty.txt").write_text("u1 1 2 3 4\nu2 2 3 4 5\n")
    ours = {"epochs": [{"seconds": 2.0, "after": {"valid": {"metrics": {"NDCG@10": v}}}} for v in (0.02, 0.07)]}
    peer = {"epochs": [{"seconds": 5.0, "valid": {"ndcg@10": v, "metrics": {"NDCG@10": v}}} for v in (0.01, 0.065)]}
    ran: list[str] = []

    def fake(self, cmd, timeout, env=None):  # noqa: ANN001
        ran.append("RecBole" if "recbole_driver.py" in cmd[1] else "RecTools")
        self.commands.append(" ".join(cmd))
        return peer

    def task(self, name, args, timeout=3600):  # noqa: ANN001
        ran.append("resdom")
        return ours

    monkeypatch.setattr(run.Context, "run_json", fake)
    monkeypatch.setattr(run.Context, "task", task)
    (tmp_path / "out").mkdir()

    def ctx(libs: tuple[str, ...], budget: float = 7200.0) -> run.Context:
        return run.Context(True, tmp_path, tmp_path / "out", "rb-python", 1, rectools_python="rt-python",
                           tta_budget=budget, tta_libs=libs)

    first = run.section_tta(ctx(("RecBole", "RecTools")))
    assert ran == ["RecBole", "RecTools"] and "resdom: not measured yet" in first
    stored = json.loads((tmp_path / "out" / "tta" / "RecBole.json").read_text())
    assert stored["curve"] == [[5.0, 0.01], [10.0, 0.065]] and stored["settings"]["budget_s"] == 7200.0
    assert {"started", "finished", "load_average_start", "load_average_end", "machine"} <= set(stored["conditions"])
    ran.clear()
    text = run.section_tta(ctx(("resdom",)))
    assert ran == ["resdom"] and "Failed measurements" not in text
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| library")}
    assert rows["resdom"][3] == "4.0" and rows["RecBole"][3:5] == ["10.0", "2.50x"]  # >= 0.06: 4 s against 10 s
    other = run.section_tta(ctx(("resdom",), budget=3600.0))
    assert "RecBole: the stored curve was measured with other settings" in other
    monkeypatch.setattr(run.Context, "task", lambda self, name, args, timeout=3600: {"error": "boom"})
    run.section_tta(ctx(("resdom",)))
    assert json.loads((tmp_path / "out" / "tta" / "resdom.json").read_text())["curve"] == [[2.0, 0.02], [4.0, 0.07]]


def test_rounds_serve_a_fixed_number_of_batches_per_command() -> None:
    """tasks.Rounds: a round of k batches per ``round`` line (across epochs), one JSON line each; ``stop`` ends."""
    import io

    out = io.StringIO()
    rounds = tasks.Rounds(3, inp=io.StringIO("round\nround\nstop\n"), out=out)
    rounds.ready(library="x")
    seen = []
    while not rounds.stopped:  # epochs of 4 batches of 2 samples
        seen += list(rounds.wrap([[1, 2]] * 4, len))
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert lines[0] == {"ready": True, "library": "x"}
    assert [(x["round"], x["batches"], x["samples"]) for x in lines[1:]] == [(1, 3, 6), (2, 3, 6)]
    assert all(x["seconds"] >= 0 for x in lines[1:]) and len(seen) == 6
    cb = tasks.Rounds(2, inp=io.StringIO("round\n"), out=io.StringIO())  # the callback way in (RecTools)
    assert cb.start() and cb.batch_done(5) and not cb.batch_done(5) and cb.stopped and cb.round == 1


def test_counted_flops_include_the_cpu_attention_kernel() -> None:
    q = torch.randn(2, 2, 10, 8, requires_grad=True)
    mm = tasks.counted_flops(lambda: torch.randn(3, 4) @ torch.randn(4, 5))
    assert mm == 2 * 3 * 4 * 5
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    full = tasks.counted_flops(lambda: op(q, q, q, 0.0, False, scale=0.3))
    causal = tasks.counted_flops(lambda: op(q, q, q, 0.0, True, scale=0.3))
    assert full == 4 * 2 * 2 * 10 * 10 * 8 and causal == full // 2
    both = tasks.counted_flops(lambda: op(q, q, q, 0.0, True, scale=0.3)[0].sum().backward())
    assert both > causal  # the backward kernel counted too
    assert tasks.matmul_peak(n=64, rounds=1) > 0


@pytest.mark.slow
def test_interleaved_rounds_of_two_training_children(tmp_path: Path) -> None:
    """run.interleaved drives two tasks.py train_rounds children (resdom against itself: no peer venv needed)
    through alternating rounds; the section's report reads them."""
    (tmp_path / "out").mkdir()
    ctx = run.Context(True, tmp_path, tmp_path / "out", None, 1)
    args = {"data": TINY, "model": MODEL, "train": {"objective": "ce_last", "batch_size": 16}, "batches": 2}
    res = run.interleaved(ctx, {"resdom": ctx.task_cmd("train_rounds", args),
                                "again": ctx.task_cmd("train_rounds", {**args, "batches": 3})}, rounds=3, timeout=300)
    assert "error" not in res["resdom"] and "error" not in res["again"], res
    assert [r["batches"] for r in res["resdom"]["rounds"]] == [2, 2, 2]
    assert [r["samples"] for r in res["again"]["rounds"]] == [48, 48, 48]
    assert res["resdom"]["ready"]["library"] == "resdom" and len(ctx.commands) == 2
    text = "\n".join(run.peer_report(res, "again", 3, 2, 1.0))
    assert "| resdom | 3 | 2 |" in text and "Throughput ratio" in text and "n/a" not in text.split("Goal")[0]
    bad = run.interleaved(ctx, {"broken": [sys.executable, "-c", "import sys; sys.exit(3)"]}, rounds=1, timeout=60)
    assert "exit 3" in bad["broken"]["error"]


@pytest.mark.slow
def test_peak_task_quick_reports_every_path() -> None:
    res = tasks.task_peak({"quick": True, "rounds": 1, "threads": 1})
    assert res["peak_gflops"]["peak"] > 0 and set(res["mixing_vs_forward"]) == {50, 200}
    assert len(res["paths"]) == 8
    for p in res["paths"].values():
        # shares are positive and finite; their size is a timing, never asserted here (two timings on a loaded
        # machine may differ by any factor)
        assert p["gflop"] > 0 and p["seconds"] > 0
        assert 0 < p["share_of_peak"] < math.inf and 0 < p["cpu_share_of_peak"] < math.inf
    assert set(res["mixing_vs_forward_cpu"]) == {50, 200} and res["peak_gflops"]["cpu_time"] > 0


@pytest.mark.slow
def test_run_json_relays_progress_and_reports_failures(tmp_path: Path, capsys) -> None:
    """Context.run_json: the last JSON line of stdout is the result; stderr's "[progress]" lines are shown as they
    come (a run of hours shows where it is), the rest kept for the error message; a timeout kills the command."""
    ctx = run.Context(True, tmp_path, tmp_path, None, 1)
    script = ("import sys, json; print('[progress] x epoch 1: 3 of 10 training s', file=sys.stderr, flush=True); "
              "print('noise', file=sys.stderr); print(json.dumps({'ok': 1}))")
    res = ctx.run_json([sys.executable, "-c", script], timeout=60)
    assert res["ok"] == 1 and res["process_wall_s"] >= 0
    err_text = capsys.readouterr().err
    assert "[bench] [progress] x epoch 1: 3 of 10 training s" in err_text and "noise" not in err_text.splitlines()
    bad = ctx.run_json([sys.executable, "-c", "import sys; sys.exit('the reason')"], timeout=60)
    assert bad["error"].startswith("exit 1:") and "the reason" in bad["error"]
    slow = ctx.run_json([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert slow["error"].startswith("timed out after")
