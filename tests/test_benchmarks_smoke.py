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


@pytest.mark.parametrize("what", ["recommend", "similar"])
def test_output_task_writes_the_same_bytes_whole_and_in_parts(tmp_path: Path, what: str) -> None:
    args = {"data": TINY, "model": MODEL, "threads": 1, "what": what, "k": 7, "part_rows": 9}
    whole = tasks.task_output({**args, "impl": "whole", "out": str(tmp_path / "whole.csv")})
    parts = tasks.task_output({**args, "impl": "parts", "out": str(tmp_path / "parts.csv")})
    assert whole["sha256"] == parts["sha256"] and whole["bytes"] == parts["bytes"] > 0
    assert whole["rows"] == parts["rows"] == whole["lists"] * 7 and parts["peak_rss_mb"] > 0


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


def test_top_lists_task_times_old_and_new_on_equal_outputs() -> None:
    for ties in (False, True):
        out = tasks.task_top_lists({"what": "kernel", "B": 8, "N": 300, "ties": ties, "rounds": 2, "threads": 1})
        assert out["same"] and {"sorted_top", "ordered_top", "top_k_every_row", "top_k", "ranks_bool_3",
                                "pessimistic_ranks_3"} <= set(out["seconds"])
    out = tasks.task_top_lists({"what": "shuffle", "data": TINY, "model": MODEL, "rounds": 1, "threads": 1})
    assert out["same"] and out["users"] == 40 and set(out["seconds"]) == {"sorted_top", "ordered_top"}
    out = tasks.task_top_lists({"what": "alpha", "data": TINY, "model": MODEL, "rounds": 1, "threads": 1})
    assert out["same"] and out["alphas"] == [1.0, 0.5] and set(out["seconds"]) == {"ranks_bool", "pessimistic_ranks"}


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


def _tta_fakes(monkeypatch, common: dict[str, list[float]], own: dict[str, list[float]],
               rescore: dict[int, float] | None = None) -> list[tuple[str, dict]]:
    """run.Context's children faked: each library's training returns epochs (resdom 2 s wall / 1 s CPU, RecBole
    20 / 10, RecTools 5 / 4) with its own metric ``own[lib]``; scoring returns ``common[lib]`` per checkpoint
    (resdom's re-scores ``rescore`` where given, else its own numbers). Returns the calls made, in order."""
    calls: list[tuple[str, dict]] = []
    clocks = {"resdom": (2.0, 1.0), "RecBole": (20.0, 10.0), "RecTools": (5.0, 4.0)}

    def epochs(lib: str) -> list[dict]:
        wall, cpu = clocks[lib]
        out = []
        for k, v in enumerate(own[lib], start=1):
            r = {"epoch": k, "seconds": wall, "cpu_seconds": cpu}
            if lib == "resdom":
                r["after"] = {"valid": {"metrics": {"NDCG@10": v}}}
            else:
                r["checkpoint"] = f"/saved/{lib}/epoch-{k}.ckpt"
                r["valid"] = {"ndcg@10": v} if lib == "RecBole" else {"metrics": {"NDCG@10": v}}
            out.append(r)
        return out

    def run_json(self, cmd, timeout, env=None):  # noqa: ANN001
        lib = "RecBole" if "recbole_driver.py" in cmd[1] else "RecTools"
        calls.append((lib, {**json.loads(cmd[-1]), "timeout": timeout}))
        self.commands.append(" ".join(cmd))
        return {"epochs": epochs(lib)}

    def task(self, name, args, timeout=3600):  # noqa: ANN001
        if name == "train":
            calls.append(("resdom", {**args, "timeout": timeout}))
            return {"epochs": epochs("resdom")}
        lib = args["library"]
        calls.append((f"score {lib}", args))
        scores = []
        for path in args["checkpoints"]:
            k = int(Path(path).stem.split("-")[1])
            v = (rescore or {}).get(k, own[lib][k - 1]) if lib == "resdom" else common[lib][k - 1]
            scores.append({"checkpoint": path, "n_users": 2, "model_items": 5, "unknown_targets": 0,
                           "metrics": {"NDCG@10": v}})
        return {"library": lib, "scores": scores}

    monkeypatch.setattr(run.Context, "run_json", run_json)
    monkeypatch.setattr(run.Context, "task", task)
    return calls


def _tta_rows(text: str, header: str = "| library") -> dict[str, list[str]]:
    """The rows of the table whose header starts with ``header``, by their first cell."""
    rows, inside = {}, False
    for line in text.splitlines():
        if line.startswith(header):
            inside = True
        elif inside and line.startswith("| "):
            rows[line.split("|")[1].strip()] = [c.strip() for c in line.split("|")[2:-1]]
        elif inside and not line.startswith("|"):
            break
    return rows


def _tta_ctx(tmp_path: Path, libs: tuple[str, ...] = run.TTA_LIBS, budget: float | None = 7200.0) -> run.Context:
    (tmp_path / "bsarec").mkdir(exist_ok=True)
    (tmp_path / "bsarec" / "Beauty.txt").write_text("u1 1 2 3 4\nu2 2 3 4 5\n")
    (tmp_path / "out").mkdir(exist_ok=True)
    return run.Context(True, tmp_path, tmp_path / "out", "rb-python", 1, rectools_python="rt-python",
                       tta_budget=budget, tta_libs=libs)


def test_tta_level_and_ratios_come_from_the_common_evaluators_curves(tmp_path: Path, monkeypatch) -> None:
    """The level is the least of the libraries' best common NDCG@10 (not their own metrics), the ratios each
    library's seconds to it over resdom's, by wall clock and by CPU time; the own metric is kept beside."""
    own = {"resdom": [0.02, 0.05, 0.07], "RecBole": [0.03, 0.04], "RecTools": [0.01, 0.046, 0.065]}
    common = {"RecBole": [0.035, 0.048], "RecTools": [0.01, 0.046, 0.065]}
    calls = _tta_fakes(monkeypatch, common, own)
    text = run.section_tta(_tta_ctx(tmp_path))
    rows = _tta_rows(text)
    # level min(0.07, 0.048, 0.065) = 0.048 (RecBole's own best, 0.04, would give 0.04): resdom's epoch 2 (4 s
    # wall, 2 s CPU), RecBole's epoch 2 (40 / 20), RecTools' epoch 3 (15 / 12)
    assert "NDCG@10 >= 0.0480" in text
    assert rows["resdom"][6:10] == ["4.0", "1.00x", "2.0", "1.00x"]
    assert rows["RecBole"][4:10] == ["0.0480", "0.0400", "40.0", "10.00x", "20.0", "10.00x"]
    assert rows["RecTools"][6:10] == ["15.0", "3.75x", "12.0", "6.00x"]
    # each peer at its own best: RecBole's 0.048 (resdom epoch 2: 2 s CPU, 4 s wall; RecBole 20 / 40), RecTools'
    # 0.065 (resdom epoch 3, 0.07: 3 / 6; RecTools 12 / 15)
    pairs = _tta_rows(text, "| peer")
    assert pairs == {"RecBole": ["0.0480", "20.0", "2.0", "10.00x", "40.0", "4.0", "10.00x"],
                     "RecTools": ["0.0650", "12.0", "3.0", "4.00x", "15.0", "6.0", "2.50x"]}
    # every peer checkpoint scored; resdom's first and best re-scored
    scored = {name: args["checkpoints"] for name, args in calls if name.startswith("score")}
    assert scored["score RecBole"] == ["/saved/RecBole/epoch-1.ckpt", "/saved/RecBole/epoch-2.ckpt"]
    assert [Path(p).name for p in scored["score resdom"]] == ["epoch-1.safetensors", "epoch-3.safetensors"]
    stored = json.loads((tmp_path / "out" / "tta" / "RecBole.json").read_text())
    assert [(r["own_ndcg10"], r["common_ndcg10"]) for r in stored["records"]] == [(0.03, 0.035), (0.04, 0.048)]
    assert stored["own_metric"].startswith("RecBole's own") and stored["budget_s"] == 7200.0


def test_tta_refuses_a_resdom_curve_its_evaluator_does_not_reproduce(tmp_path: Path, monkeypatch) -> None:
    """resdom's curve is its validation in training; a re-scored checkpoint that differs is a failure, not stored."""
    own = {"resdom": [0.02, 0.05, 0.07], "RecBole": [0.03], "RecTools": [0.01]}
    _tta_fakes(monkeypatch, {"RecBole": [0.03], "RecTools": [0.01]}, own, rescore={3: 0.0701})
    text = run.section_tta(_tta_ctx(tmp_path))
    assert "re-scored epoch 3 gives NDCG@10 0.0701, its validation in training 0.07" in text
    assert not (tmp_path / "out" / "tta" / "resdom.json").exists()


def test_tta_level_and_ratios_against_a_written_out_reference() -> None:
    """tta_level / tta_ratios against the definitions written out as loops."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        curves = {lib: [(float(t), float(v)) for t, v in zip(np.cumsum(rng.uniform(1, 9, n)), rng.uniform(0, 0.1, n))]
                  for lib, n in zip(run.TTA_LIBS, rng.integers(1, 8, 3))}
        bests = []
        for points in curves.values():
            best = points[0][1]
            for _, v in points:
                best = v if v > best else best
            bests.append(best)
        level = bests[0]
        for b in bests:
            level = b if b < level else level
        assert run.tta_level(curves) == level
        ratios = run.tta_ratios(curves, level)
        for lib, points in curves.items():
            first = None
            for t, v in points:
                if v >= level:
                    first = t
                    break
            assert first is not None and ratios[lib][0] == first
            assert ratios[lib][1] == pytest.approx(first / ratios["resdom"][0], rel=1e-15)
    assert run.tta_level({}) is None and run.tta_level({"resdom": [], "RecBole": [(1.0, 0.1)]}) is None
    assert run.tta_ratios({"resdom": [(1.0, 0.01)], "RecBole": [(3.0, 0.2)]}, 0.1) == {
        "resdom": (None, None), "RecBole": (3.0, None)}


def test_tta_pair_row_times_each_library_to_the_peers_own_best() -> None:
    """pair_row: the peer's best, then (peer, resdom, ratio) by CPU and by wall, each the first time at or above it."""
    wall = {"resdom": [(10.0, 0.02), (20.0, 0.05), (30.0, 0.06)], "RecBole": [(100.0, 0.01), (200.0, 0.04),
                                                                            (300.0, 0.03)]}
    cpu = {"resdom": [(2.0, 0.02), (4.0, 0.05), (6.0, 0.06)], "RecBole": [(90.0, 0.01), (180.0, 0.04),
                                                                         (270.0, 0.03)]}
    assert run.pair_row("RecBole", wall, cpu) == ["RecBole", "0.0400", 180.0, 4.0, "45.00x", 200.0, 20.0, "10.00x"]
    far = {"resdom": [(1.0, 0.01)], "RecBole": [(5.0, 0.04)]}
    assert run.pair_row("RecBole", far, far) == ["RecBole", "0.0400", 5.0, "not reached", "n/a", 5.0,
                                                 "not reached", "n/a"]


def test_score_task_gives_the_evaluators_number_for_an_imported_rectools_model(tmp_path: Path) -> None:
    """tasks.py score on RecTools' fixture (imported with resdom's importer) equals a written-out full ranking:
    each validation user's input in the model's ids, every item the model has scored, the input's items removed,
    the target's pessimistic rank; a target the model has no row for a miss."""
    from resdom.adapters.rectools import import_rectools, read_rectools_file
    from resdom.models.interface import final_states
    from resdom.runs import load_run

    fixture = Path(__file__).parent / "fixtures" / "rectools" / "sasrec.rectools"
    ck = read_rectools_file(fixture)
    rng = np.random.default_rng(0)
    known = [int(x) for x in ck.item_ids[len(ck.extra_tokens):]]
    lines, t = ["user_id:token\titem_id:token\ttimestamp:float"], 0
    for u in range(40):
        seq = [int(x) for x in rng.choice(known, size=int(rng.integers(5, 70)), replace=False)]
        if u == 0:
            seq[-2] = 999999  # a validation target the model never saw: a miss
        if u == 1:
            seq[0] = 999998  # an unknown item far back in a long input (outside the window): not a candidate
            seq += [int(x) for x in rng.choice([k for k in known if k not in seq], size=60, replace=False)]
        for item in seq:
            t += 1
            lines.append(f"u{u}\t{item}\t{t}")
    inter = tmp_path / "s.inter"
    inter.write_text("\n".join(lines) + "\n")
    data = {"source": str(inter), "options": {"k_core": 0}}
    out = tasks.task_score({"library": "RecTools", "checkpoints": [str(fixture)], "data": data,
                            "source": str(inter), "threads": 1})["scores"][0]
    assert out["n_users"] == 40 and out["unknown_targets"] == 1

    model = load_run(import_rectools(fixture, str(inter), tmp_path / "run")).model.eval()
    labels = load_run(tmp_path / "run").split.item_labels
    ids = {str(raw): k for k, raw in enumerate(labels) if k}
    split = tasks.load_split(data)
    table = model.item_embeddings()
    ranks = []
    with torch.no_grad():
        for i in range(len(split.valid)):
            seq = [ids.get(str(split.item_labels[x])) for x in split.valid.inputs.sequence(i)]
            window = seq[-model.max_len:]
            assert None not in window
            scores = table @ final_states(model, torch.tensor([window]))[0]
            target = ids.get(str(split.item_labels[split.valid.targets[i]]))
            candidates = [k for k in range(1, len(labels)) if k not in set(seq)]
            if target is None or target not in candidates:
                ranks.append(None)
                continue
            ranks.append(sum(1 for k in candidates if scores[k] >= scores[target]) - 1)
    ndcg = sum(1 / math.log2(r + 2) for r in ranks if r is not None and r < 10) / len(ranks)
    mrr = sum(1 / (r + 1) for r in ranks if r is not None) / len(ranks)
    assert ranks[0] is None
    assert out["metrics"]["NDCG@10"] == pytest.approx(ndcg, abs=1e-12)
    assert out["metrics"]["MRR"] == pytest.approx(mrr, abs=1e-12) and mrr > 0


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
    fifth of the epochs), and each saves its model after every epoch into its own folder."""
    calls = _tta_fakes(monkeypatch, {"RecBole": [0.01], "RecTools": [0.01]},
                       {"resdom": [0.01], "RecBole": [0.01], "RecTools": [0.01]})
    run.section_tta(_tta_ctx(tmp_path))
    trained = {name: args for name, args in calls if not name.startswith("score")}
    assert {k: (v["budget_s"], v["epochs"]) for k, v in trained.items()} == {
        k: (7200.0, 100_000) for k in ("resdom", "RecBole", "RecTools")}
    assert all(v["timeout"] > 3 * 7200 for v in trained.values())
    assert {k: Path(v["save_dir"]).name for k, v in trained.items()} == {k: k for k in trained}


def test_tta_libraries_measured_in_separate_runs_share_one_table(tmp_path: Path, monkeypatch) -> None:
    """--tta-libs: each library's curve is stored with its settings and conditions; a later run that measures
    another library reads it back (same settings, another budget allowed: each entry names its own), refuses it
    under other settings, and never stores a failure."""
    own = {"resdom": [0.02, 0.07], "RecBole": [0.01, 0.065], "RecTools": [0.01, 0.065]}
    calls = _tta_fakes(monkeypatch, {"RecBole": [0.01, 0.065], "RecTools": [0.01, 0.065]}, own)
    first = run.section_tta(_tta_ctx(tmp_path, ("RecBole", "RecTools")))
    assert [n for n, _ in calls] == ["RecBole", "score RecBole", "RecTools", "score RecTools"]
    assert "resdom: not measured yet" in first
    stored = json.loads((tmp_path / "out" / "tta" / "RecBole.json").read_text())
    assert [r["common_ndcg10"] for r in stored["records"]] == [0.01, 0.065] and stored["budget_s"] == 7200.0
    assert {"started", "finished", "load_average_start", "load_average_end", "machine", "cpu", "cpu_flags",
            "command"} <= set(stored["conditions"])
    calls.clear()
    text = run.section_tta(_tta_ctx(tmp_path, ("resdom",), budget=900.0))
    assert [n for n, _ in calls] == ["resdom", "score resdom"] and "Failed measurements" not in text
    rows = _tta_rows(text)
    assert rows["resdom"][6] == "4.0" and rows["RecBole"][6:8] == ["40.0", "10.00x"]  # >= 0.065: 4 s against 40 s
    monkeypatch.setattr(run.Context, "task", lambda self, name, args, timeout=3600: {"error": "boom"})
    run.section_tta(_tta_ctx(tmp_path, ("resdom",)))
    assert [r["common_ndcg10"] for r in json.loads((tmp_path / "out" / "tta" / "resdom.json").read_text())[
        "records"]] == [0.02, 0.07]
    other = run.Context(True, tmp_path, tmp_path / "out", "rb-python", 2, rectools_python="rt-python",
                        tta_budget=7200.0, tta_libs=("resdom",))
    assert "RecBole: the stored curve was measured with other settings" in run.section_tta(other)


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


@pytest.mark.parametrize("argv", [["--only", ","], ["--threads", "0"], ["--tta-epochs", "0"], ["--tta-budget", "-5"],
                                  ["--tta-budget", "nan"], ["--peer-rounds", "1"], ["--peer-batches", "0"],
                                  ["--recbole-users", "0"], ["--only", "tta", "--data-dir", "/nonexistent"]])
def test_run_refuses_odd_options_before_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    monkeypatch.setattr(run, "RUNNERS", {k: lambda ctx: pytest.fail("measured") for k in run.SECTIONS})
    results = tmp_path / "RESULTS.md"
    with pytest.raises(SystemExit) as e:
        run.main([*argv, "--results", str(results)])
    assert e.value.code == 2 and not results.exists()
    assert f": error: {argv[-2]} " in capsys.readouterr().err.strip().splitlines()[-1]


def test_failed_section_keeps_the_stored_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "RESULTS.md"
    monkeypatch.setattr(run, "OUT", tmp_path / "out")
    monkeypatch.setattr(run, "RUNNERS", {"peak": lambda ctx: "| measured | 1 |"})
    assert run.main(["--only", "peak", "--results", str(results)]) == 0
    stored = results.read_text()
    monkeypatch.setattr(run, "RUNNERS", {"peak": lambda ctx: run.errors_note({"peak": {"error": "exit 1: boom"}})})
    assert run.main(["--only", "peak", "--results", str(results)]) == 1
    assert results.read_text() == stored
    assert "boom" in (tmp_path / "out" / "peak.failed.md").read_text()


@pytest.mark.parametrize(("argv", "says"), [
    (["--configs", "bogus"], "unknown precision 'bogus'"), (["--configs", ","], "unknown precision ''"),
    (["--configs", "fp32+cache=x"], "cache='x'"), (["--configs", "fp32,fp32"], "a config named twice"),
    (["--rounds", "0"], "--rounds 0"), (["--epochs", "0"], "--epochs 0"), (["--batches", "-1"], "--batches -1")])
def test_levers_refuses_odd_options_before_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], argv: list[str],
                                                     says: str) -> None:
    levers = _load("levers")
    monkeypatch.setattr(levers.subprocess, "run", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(SystemExit) as e:
        levers.main(["epoch", "--data-dir", str(tmp_path), *argv])
    assert e.value.code == 2
    assert says in capsys.readouterr().err.strip().splitlines()[-1]


def test_levers_failed_child_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    levers = _load("levers")
    failed = levers.subprocess.CompletedProcess([], 1, "", "Traceback (most recent call last):\nValueError: no data")
    monkeypatch.setattr(levers.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(SystemExit) as e:
        levers.main(["epoch", "--data-dir", str(tmp_path), "--configs", "fp32"])
    assert str(e.value.code) == "levers.py: error: config 'fp32', round 1: ValueError: no data"


def test_a_failed_measurement_never_replaces_the_published_figure(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    monkeypatch.setattr(run, "HERE", bench)
    ctx = run.Context(False, tmp_path, tmp_path / "out", None, 1)
    assert run.figure_path(ctx, "scaling.png", failed=False) == bench / "scaling.png"
    assert run.figure_path(ctx, "scaling.png", failed=True) == tmp_path / "out" / "scaling.png"
    monkeypatch.setattr(ctx, "task", lambda *a, **k: {"error": "exit 1: boom"})
    assert run.FAILED in run.section_scaling(ctx)
    assert not (bench / "scaling.png").exists()
