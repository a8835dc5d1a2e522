"""resdom's benchmark suite: one command, every figure a ratio or side by side, measured in one run.

    python benchmarks/run.py [--quick] [--only peak,recbole,batching,eval,mixing,memory,scale,scaling,ddp]

Sections (background in docs/scaling.md):

- ``peak``     each hot path's achieved GFLOP/s as a share of the single-thread 2048^3 matmul's, measured in the
               same process: a training step, full ranking at 12k and 1M items, evaluation, mixing vs forward;
- ``recbole``  training throughput of resdom's SASRec vs RecBole 1.2.1's SASRec, Beauty LOO, same sizes and loss,
               interleaved: both libraries' own training loops alternate rounds of a fixed number of batches in
               one window (``--peer-rounds``, ``--peer-batches``);
- ``rectools`` the same against RecTools 0.19's SASRec (its architecture and full-softmax loss on both sides);
- ``tta``      time to accuracy: validation NDCG@10 against training seconds, resdom / RecBole / RecTools SASRec,
               each library's model saved after every epoch and every one scored by resdom's evaluator
               (peers imported with resdom's importers; saved models under benchmarks/out/tta-checkpoints);
- ``eval``     full-ranking evaluation users/s vs a naive full sort (argsort of every score);
- ``mixing``   the mixing-ratio diagnostic (norm of sums, sum of norms) vs a plain forward pass, and memory;
- ``memory``   peak RSS of training / evaluation / mixing at 10k, 100k and 1M items;
- ``scale``    the scale check: 1,000,000 items, 50,000 users, max length 200 (ce_sampled epoch, evaluation, mixing);
- ``scaling``  seconds per epoch as users, items and sequence length grow (table + benchmarks/scaling.png);
- ``ddp``      two gloo processes (torchrun) give the single process's evaluation metrics.

Every measurement runs in a fresh process (``benchmarks/tasks.py``), so peaks do not mix. Results go into
benchmarks/RESULTS.md inside an auto-generated block; each section is replaced only when it is measured again,
and text outside the block (accuracy figures, notes) is kept. ``--quick`` uses micro sizes and writes
benchmarks/out/RESULTS.quick.md unless ``--results`` says otherwise.

RecBole runs in its own virtual environment: ``--recbole-python``, else ``$RESDOM_RECBOLE_PYTHON``, else
benchmarks/.recbole-venv (made with scripts/make_recbole_venv.sh when missing and ``--setup-recbole`` is given).
RecTools likewise: ``--rectools-python``, ``$RESDOM_RECTOOLS_PYTHON``, benchmarks/.rectools-venv
(scripts/make_rectools_venv.sh, ``--setup-rectools``), driven by benchmarks/rectools_driver.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TASKS = HERE / "tasks.py"
OUT = HERE / "out"
RESULTS = HERE / "RESULTS.md"
DEFAULT_DATA_DIR = Path(os.environ.get("RESDOM_DATA_DIR", ROOT.parent / "shared" / "data" / "raw"))
BEGIN = "<!-- BEGIN benchmarks/run.py auto-generated block: edit outside it; run.py rewrites it -->"
END = "<!-- END benchmarks/run.py auto-generated block -->"
SECTIONS = ("peak", "recbole", "rectools", "tta", "batching", "last", "ce", "eval", "topk", "mixing", "memory",
            "scale", "scaling", "ddp", "output")
TITLES = {
    "peak": "Share of the single-thread matmul peak: training step, full ranking, evaluation, mixing",
    "recbole": "Training throughput: resdom vs RecBole 1.2.1 (SASRec, Beauty LOO)",
    "rectools": "Training throughput: resdom vs RecTools 0.19 (SASRec, Beauty LOO)",
    "tta": "Time to accuracy: validation NDCG@10 against training seconds (SASRec, Beauty LOO)",
    "batching": "Batching: length groups and length bucketing vs one pass per batch (SASRec, BERT4Rec, Beauty LOO)",
    "last": "Last-column encoding: the final block's queries only where the loss or the ranking reads (beauty-ts)",
    "ce": "Full-softmax cross-entropy: resdom's blocks of rows vs F.cross_entropy of the score matrix",
    "eval": "Full-ranking evaluation: resdom vs a naive full sort",
    "topk": "Top-K lists and rank counts of a score matrix (shuffle, alpha, --beyond, recommend): against the "
            "full sort and the bool compare they replaced",
    "mixing": "Mixing-ratio diagnostic vs a plain forward pass",
    "memory": "Peak memory at 10k, 100k and 1M items",
    "scale": "Scale check: 1,000,000 items, 50,000 users, max length 200",
    "scaling": "Scaling curve: seconds per epoch vs users, items, sequence length",
    "ddp": "Two gloo processes (torchrun) vs one process",
    "output": "Writing recommend / similar's CSV: the whole table at once vs part by part (peak memory)",
}


# ------------------------------------------------------------------------------------------ subprocesses


@dataclass
class Context:
    quick: bool
    data_dir: Path
    out: Path
    recbole_python: str | None
    threads: int | None
    recbole_users: int | None = None
    rectools_python: str | None = None
    tta_epochs: int = 30
    tta_budget: float | None = None  # tta: training seconds per library (then epochs are only a cap)
    tta_libs: tuple[str, ...] = ("resdom", "RecBole", "RecTools")  # tta: measured in this run (others: stored)
    peer_rounds: int = 8
    peer_batches: int = 20
    commands: list[str] = field(default_factory=list)  # what the current section ran, for RESULTS.md

    def task_cmd(self, name: str, args: dict[str, Any]) -> list[str]:
        """The command line of ``tasks.py name args`` (``--threads`` added to the arguments)."""
        if self.threads and "threads" not in args:
            args = {**args, "threads": self.threads}
        return [sys.executable, str(TASKS), name, json.dumps(args, separators=(",", ":"))]

    def task(self, name: str, args: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
        """Run ``tasks.py name args`` in a fresh process -> its JSON result ({"error": ...} on failure)."""
        return self.run_json(self.task_cmd(name, args), timeout)

    def run_json(self, cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
        self.commands.append(" ".join(shlex.quote(_rel(c)) for c in cmd))
        print(f"[bench] {self.commands[-1][:220]}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, **(env or {})})
        err_lines: list[str] = []

        def relay() -> None:  # stderr kept for the error message; its progress lines shown as they come
            for line in proc.stderr:  # type: ignore[union-attr]
                err_lines.append(line)
                if line.startswith("[progress]"):
                    print(f"[bench] {line.rstrip()}", file=sys.stderr, flush=True)

        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            proc.kill()

        reader, timer = threading.Thread(target=relay, daemon=True), threading.Timer(timeout, stop)
        reader.start()
        timer.start()
        stdout = proc.stdout.read()  # type: ignore[union-attr]
        proc.wait()
        timer.cancel()
        reader.join()
        if timed_out.is_set():
            return {"error": f"timed out after {timeout:.0f} s"}
        wall = time.perf_counter() - t0
        lines = [x for x in stdout.splitlines() if x.startswith("{")]
        if proc.returncode != 0 or not lines:
            return {"error": f"exit {proc.returncode}: {''.join(err_lines).strip()[-1500:]}"}
        result = json.loads(lines[-1])
        result["process_wall_s"] = round(wall, 2)
        return result


def _rel(s: str) -> str:
    """Paths under the repository shown relative to it (the commands in RESULTS.md run from the root)."""
    return s.replace(str(ROOT) + "/", "")


# ----------------------------------------------------------------------------------------------- helpers


def synthetic(n_users: int, n_items: int, max_len: int, min_len: int | None = None, seed: int = 0) -> dict:
    """Data spec for tasks.py: the synthetic generator, lengths uniform in [min_len, max_len + 3] so the
    training part (LOO drops 2 items) fills a window of ``max_len``."""
    lo = max(3, min_len if min_len is not None else max_len // 2)
    return {"synthetic": {"n_users": n_users, "n_items": n_items, "min_len": lo, "max_len": max_len + 3,
                          "n_clusters": min(20, n_items), "seed": seed}}


def fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def ratio(a: float | None, b: float | None, nd: int = 2) -> str:
    return "n/a" if not a or not b else f"{a / b:.{nd}f}x"


def table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows]
    return "\n".join(out)


def err(res: dict[str, Any]) -> str | None:
    return res.get("error")


FAILED = "**Failed measurements:**"
# sections that read Beauty (--data-dir) always, and those that read it outside --quick
DATA_SECTIONS = {"recbole", "rectools", "tta"}
FULL_DATA_SECTIONS = {"last", "batching", "eval", "topk", "mixing"}


def figure_path(ctx: Context, name: str, failed: bool) -> Path:
    """Where a section draws its figure: benchmarks/NAME, or OUT/NAME for --quick and where a measurement failed
    (a failed run never replaces the published figure, as it never replaces the stored section)."""
    return (ctx.out if ctx.quick or failed else HERE) / name


def errors_note(results: dict[str, dict[str, Any]]) -> str:
    bad = {k: v["error"] for k, v in results.items() if isinstance(v, dict) and "error" in v}
    if not bad:
        return ""
    return f"\n\n{FAILED}\n" + "\n".join(f"- {k}: `{v[:600]}`" for k, v in bad.items())


def mean_epoch(res: dict[str, Any], key: str, skip_first: bool = False) -> float | None:
    eps = res.get("epochs") or []
    if skip_first and len(eps) > 1:
        eps = eps[1:]
    vals = [e[key] for e in eps if e.get(key) is not None]
    return sum(vals) / len(vals) if vals else None


# ------------------------------------------------------------------------------------------- recbole


def write_recbole_inter(src: Path, dest_dir: Path, name: str, max_users: int | None) -> Path:
    """Beauty.txt (``user item item ...``, oldest first) -> DEST/NAME/NAME.inter with increasing timestamps."""
    folder = dest_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    t = 0
    with src.open() as f, (folder / f"{name}.inter").open("w") as out:
        out.write("user_id:token\titem_id:token\ttimestamp:float\n")
        for n, line in enumerate(f):
            if max_users is not None and n >= max_users:
                break
            user, *items = line.split()
            for item in items:
                out.write(f"{user}\t{item}\t{t}\n")
                t += 1
    return folder / f"{name}.inter"


def find_peer_python(peer: str, explicit: str | None, setup: bool) -> str | None:
    """The python of a peer library's venv (``peer`` recbole | rectools): ``explicit``, $RESDOM_<PEER>_PYTHON,
    benchmarks/.<peer>-venv, or (``setup``) that venv made by scripts/make_<peer>_venv.sh; None if none."""
    venv = HERE / f".{peer}-venv"
    for cand in (explicit, os.environ.get(f"RESDOM_{peer.upper()}_PYTHON"), str(venv / "bin" / "python")):
        if cand and Path(cand).exists():
            return cand
    if setup:
        subprocess.run(["bash", str(ROOT / "scripts" / f"make_{peer}_venv.sh"), str(venv)], check=True)
        return str(venv / "bin" / "python")
    return None


def beauty_data(ctx: Context, max_users: int | None) -> dict[str, Any]:
    """tasks.py data spec of Beauty: the first ``max_users`` users of Beauty.txt as a path source with no k-core
    (the peers get the same, unfiltered), or the registered data set."""
    if not max_users:
        return {"source": "beauty", "data_dir": str(ctx.data_dir)}
    tmp_txt = ctx.out / "beauty_slice.txt"
    tmp_txt.write_text("".join((ctx.data_dir / "bsarec" / "Beauty.txt").read_text().splitlines(True)[:max_users]))
    return {"source": str(tmp_txt), "options": {"k_core": 0}}


def section_peak(ctx: Context) -> str:
    """One process (``tasks.py peak``): the matmul peak, then every path's counted FLOPs over its fastest time."""
    r = ctx.task("peak", {"quick": ctx.quick, "rounds": 2 if ctx.quick else 5, "threads": ctx.threads or 1},
                 timeout=7200)
    if err(r):
        return errors_note({"peak": r})
    peak = r["peak_gflops"]
    targets = {"training step": 0.5, "full ranking, 12,101": 0.5, "full ranking, 1,000,000": 0.35}
    rows = []
    for name, p in r["paths"].items():
        goal = next((g for k, g in targets.items() if name.startswith(k)), None)
        rows.append([name, p["gflop"], f"{p['seconds']:.4f}", p["gflops"], f"{100 * p['share_of_peak']:.0f}%",
                     f"{100 * p['cpu_share_of_peak']:.0f}%", "" if goal is None else f">= {100 * goal:.0f}%",
                     "" if goal is None else ("yes" if p["share_of_peak"] >= goal else "**no**")])
    text = [table(["path", "GFLOP counted", "fastest s", "GFLOP/s", "share of peak", "(by CPU time)", "target",
                   "met"], rows)]
    mix, mix_cpu = r["mixing_vs_forward"], r["mixing_vs_forward_cpu"]
    text.append("\nMixing ratio (norm of sums) against a forward pass over the same users: " + "; ".join(
        f"max length {L}: {x:.2f}x ({'within' if x <= 1.2 else '**above**'} the 1.2x bar; {mix_cpu[L]:.2f}x by CPU "
        "time)" for L, x in mix.items()) + ".")
    text.append(
        f"\nPeak: the fastest of {r['rounds']} float32 2048 x 2048 x 2048 products on {r['threads']} thread(s), "
        f"{peak['start']:.1f} GFLOP/s before the paths and {peak['end']:.1f} after; the faster, "
        f"{peak['peak']:.1f}, is the peak ({peak['cpu_time']:.1f} by CPU time: the \"by CPU time\" column divides "
        "by the least CPU time this process got for a path and for the matmul, which a load on other cores "
        "disturbs less; the target is met on wall time). Load average at the end: "
        + " / ".join(f"{x:.1f}" for x in r["load_average"]) + ". FLOPs: the matrix products each path runs, "
        "counted once by torch's FlopCounterMode (with the CPU fused attention kernel's QK^T and AV, halved where "
        "it is causal; elementwise work, softmax, LayerNorm and Adam not counted), over the fastest of "
        f"{r['rounds']} interleaved rounds (the order reversed every other round). Training step: SASRec d 64, "
        "2 layers, 2 heads, inner 256, dropout 0.5/0.5, max length 50, `ce_all`, batch 256, the trainer's length "
        "groups, forward, backward and Adam's step, on synthetic sequences of 3-53 items. Full ranking: "
        "`ranking.tiled_ranks` of random states against random items (d 64, 50 seen items filtered per user), in "
        "evaluation's user chunks. Evaluation: `evaluate` (encoding and ranking) of an untrained SASRec over "
        "synthetic test users. Forward and mixing: the diagnostics' batches of synthetic users (lengths from a "
        "quarter of the window up to it), an untrained SASRec (d 64, inner 256).")
    return "\n".join(text)


class _Child:
    """A ``tasks.Rounds`` child process: its stdout lines read by a thread into a queue, stderr into a file."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None) -> None:
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                     cwd=ROOT, env={**os.environ, **(env or {})}, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, key: str, deadline: float) -> dict[str, Any]:
        """The next JSON line holding ``key`` (other output skipped); RuntimeError on exit or timeout."""
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError("timed out") from None
            if line is None:
                raise RuntimeError(f"exit {self.proc.wait()}: {self.stderr_tail()}")
            if line.startswith("{"):
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if key in msg:
                    return msg

    def send(self, word: str) -> None:
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def stderr_tail(self) -> str:
        self.err.seek(0)
        return self.err.read().strip()[-1500:]

    def close(self) -> None:
        try:
            self.send("stop")
            self.proc.stdin.close()
            self.proc.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def interleaved(ctx: Context, cmds: dict[str, list[str]], rounds: int, timeout: float = 7200,
                env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Time several libraries' training in one window: every command (a ``tasks.Rounds`` child: resdom's
    ``tasks.py train_rounds``, the peers' drivers with ``"batches"``) is started and prepares its data and model,
    untimed; then ``rounds`` rounds, in each of which the children run their fixed number of batches one after
    the other, the order reversed every other round, so a load that comes and goes slows all alike.
    -> {name: {"ready": {...}, "rounds": [{"seconds", "batches", "samples"}, ...]} or {"error": ...}}."""
    out: dict[str, dict[str, Any]] = {name: {"rounds": []} for name in cmds}
    children: dict[str, _Child] = {}
    deadline = time.monotonic() + timeout
    current = ""
    try:
        for name, cmd in cmds.items():
            current = name
            ctx.commands.append(" ".join(shlex.quote(_rel(c)) for c in cmd) + "   # rounds on stdin (interleaved)")
            print(f"[bench] {ctx.commands[-1][:220]}", file=sys.stderr, flush=True)
            children[name] = _Child(cmd, env)
        for name, child in children.items():
            current = name
            out[name]["ready"] = child.expect("ready", deadline)
        names = list(children)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                current = name
                children[name].send("round")
                out[name]["rounds"].append(children[name].expect("round", deadline))
    except (RuntimeError, OSError) as e:
        out[current] = {"error": str(e)[-1500:]}
    finally:
        for child in children.values():
            child.close()
    return out


def round_rates(res: dict[str, Any], warmup: int = 1) -> list[float]:
    """Samples per second of each timed round (the first ``warmup`` rounds left out when there are more)."""
    rs = res.get("rounds") or []
    rs = rs[warmup:] if len(rs) > warmup else rs
    return [r["samples"] / r["seconds"] for r in rs if r["seconds"] > 0]


def median(xs: list[float]) -> float | None:
    if not xs:
        return None
    ys = sorted(xs)
    n = len(ys)
    return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2


def peer_report(results: dict[str, dict[str, Any]], peer: str, rounds: int, batches: int, goal: float) -> list[str]:
    """The table and the ratio line of an interleaved peer comparison."""
    rows = []
    for name, res in results.items():
        if err(res) or not res.get("rounds"):
            continue
        rates = round_rates(res)
        rows.append([name, len(res["rounds"]), batches, median(rates), min(rates), max(rates),
                     ", ".join(f"{x:,.0f}" for x in rates)])
    text = [table(["library", "rounds", "batches / round", "median samples / s", "min", "max",
                   "samples / s per timed round"], rows)]
    ours, theirs = median(round_rates(results.get("resdom", {}))), median(round_rates(results.get(peer, {})))
    text.append(f"\n**Throughput ratio (median samples/s over interleaved rounds): {ratio(ours, theirs)}**. "
                f"Goal: >= {goal:g}x. {rounds} rounds of {batches} training batches each, the libraries in turn "
                "(the order reversed every other round), in one window, each in its own process that prepared "
                "its data and model before the first round (untimed); the first round of each is a warm-up, "
                "left out of the median. A round is timed from its start command to the end of its last "
                "optimizer step, data loading included.")
    return text


def section_recbole(ctx: Context) -> str:
    beauty = ctx.data_dir / "bsarec" / "Beauty.txt"
    max_users = 300 if ctx.quick else ctx.recbole_users
    rounds, batches = (3, 2) if ctx.quick else (ctx.peer_rounds, ctx.peer_batches)
    data = beauty_data(ctx, max_users)
    train = {"objective": "ce_last", "batch_size": 256, "lr": 1e-3}
    model = {"max_len": 50, "hidden": 64, "layers": 2, "heads": 2, "inner_size": 256, "dropout": 0.5,
             "attn_dropout": 0.5}
    cmds = {"resdom": ctx.task_cmd("train_rounds", {"data": data, "model": model, "train": train,
                                                    "batches": batches})}
    with tempfile.TemporaryDirectory(dir=ctx.out) as tmp:
        if ctx.recbole_python:
            write_recbole_inter(beauty, Path(tmp), "Beauty", max_users)
            args = {"batches": batches, "max_len": 50, **({"threads": ctx.threads} if ctx.threads else {})}
            cmds["RecBole"] = [ctx.recbole_python, str(HERE / "recbole_driver.py"), tmp, "Beauty", json.dumps(args)]
        results = interleaved(ctx, cmds, rounds)
        ctx.commands = [c.replace(tmp, "$TMP") for c in ctx.commands]
    if not ctx.recbole_python:
        results["RecBole"] = {"error": "RecBole venv not found (--recbole-python, $RESDOM_RECBOLE_PYTHON, "
                                       "benchmarks/.recbole-venv or --setup-recbole)"}
    text = peer_report(results, "RecBole", rounds, batches, 5.0)
    if max_users:
        text.append(f"\nData subset: the first {max_users:,} users of Beauty.txt for both libraries (the whole "
                    "file: run without --recbole-users).")
    for name, res in results.items():
        info = res.get("ready")
        if info:
            d = info.get("data", {})
            text.append(f"{name}: {info.get('params', 0):,} parameters, threads {info.get('threads')}, "
                        f"{d.get('users', 0):,} users, {d.get('items', 0):,} items"
                        + (f", {info['samples_per_epoch']:,} samples per epoch" if "samples_per_epoch" in info else "")
                        + (f", {d['train_samples']:,} training samples (augmented prefixes)" if "train_samples" in d
                           else "") + ".")
    text.append(
        "\nSame model sizes (d 64, 2 layers, 2 heads, inner 256, GELU, dropout 0.5/0.5, max length 50), "
        "same loss (CE over all items at the last position, every prefix of the training part a sample), "
        "Adam lr 1e-3, batch 256, same torch build; each library's own training loop (resdom "
        "`trainer._train_epoch`, RecBole `Trainer._train_epoch`) over its own shuffled batches. Sample sets "
        "differ slightly by construction: resdom's `ce_last` also trains the empty prefix (target = first item, "
        "as BSARec's code) and takes prefixes of the last 50 training items; RecBole starts at prefix length 1 "
        "and keeps every prefix (truncated to 50); RecBole's softmax also includes the padding item. Both "
        "figures are samples per second of their own sample sets. What makes the difference: resdom cuts each "
        "batch into groups of similar prefix length, each trimmed to its longest real prefix (Beauty prefixes "
        "are short), and gathers states before the output product; RecBole pads every batch to 50.")
    return "\n".join(text) + errors_note(results)


# ------------------------------------------------------------------------------------------ rectools

# RecTools' SASRec (SASRecTransformerLayers, d 64, 2 blocks, 2 heads, dropout 0.5, max length 50) as resdom's
# ModelConfig: the mapping of resdom.adapters.rectools (docs/adapters.md), so both train the same network.
RECTOOLS_SASREC = {
    "max_len": 50, "hidden": 64, "layers": 2, "heads": 2, "dropout": 0.5, "attn_dropout": 0.5, "inner_size": 64,
    "activation": "relu", "query_ln": True, "final_ln": True, "embedding": "dropout", "ln_eps": 1e-5,
    "final_ln_eps": 1e-8, "zero_padding": True, "key_padding_mask": False, "positions": "from_end",
}


def section_rectools(ctx: Context) -> str:
    """resdom vs RecTools 0.19 SASRec: the same network (RecTools' block), RecTools' loss (full-softmax CE at every
    position of each user's window, one sample per user), batch 256, Adam 1e-3, same thread count."""
    beauty = ctx.data_dir / "bsarec" / "Beauty.txt"
    max_users = 300 if ctx.quick else ctx.recbole_users
    rounds, batches = (3, 2) if ctx.quick else (ctx.peer_rounds, ctx.peer_batches)
    data = beauty_data(ctx, max_users)
    cmds = {"resdom": ctx.task_cmd("train_rounds", {"data": data, "model": RECTOOLS_SASREC, "batches": batches,
                                                    "train": {"objective": "ce_all", "batch_size": 256, "lr": 1e-3}})}
    if ctx.rectools_python:
        args: dict[str, Any] = {"batches": batches, "max_len": 50, **({"max_users": max_users} if max_users else {}),
                                **({"threads": ctx.threads} if ctx.threads else {})}
        cmds["RecTools"] = [ctx.rectools_python, str(HERE / "rectools_driver.py"), str(beauty), json.dumps(args)]
    results = interleaved(ctx, cmds, rounds)
    if not ctx.rectools_python:
        results["RecTools"] = {"error": "RecTools venv not found (--rectools-python, $RESDOM_RECTOOLS_PYTHON, "
                                        "benchmarks/.rectools-venv or --setup-rectools)"}
    text = peer_report(results, "RecTools", rounds, batches, 2.0)
    if max_users:
        text.append(f"\nData subset: the first {max_users:,} users of Beauty.txt for both libraries.")
    for name, res in results.items():
        info = res.get("ready")
        if info:
            extra = (f"RecTools {info['rectools']}, Lightning {info['lightning']}, torch {info['torch']}; "
                     if "rectools" in info else f"objective {info.get('objective')}; ")
            text.append(f"{name}: {extra}{info.get('params', 0):,} parameters, threads {info.get('threads')}.")
    text.append(
        "\nSame network on both sides: RecTools' SASRec block (query-LN, FFN of inner size d with ReLU, final "
        "LayerNorm, padded states zeroed, causal mask only), mapped onto resdom's model as `resdom import-rectools` "
        "does (docs/adapters.md); same loss: full-catalogue softmax CE at every position of each user's last 50 "
        "training items, one sample per user; each library's own training loop (resdom `trainer._train_epoch`, "
        "RecTools' Lightning loop, timed by a callback) over its own shuffled batches.")
    return "\n".join(text) + errors_note(results)


# --------------------------------------------------------------------------------------- time to accuracy


def curve(records: list[dict[str, Any]], ndcg: Callable[[dict[str, Any]], float | None],
          clock: str = "seconds") -> list[tuple[float, float]]:
    """[(cumulative training seconds, validation NDCG@10)] after each epoch (validation itself untimed);
    ``clock`` the record's key of the epoch's time: ``seconds`` (wall) or ``cpu_seconds`` (the process's CPU)."""
    out, total = [], 0.0
    for r in records:
        total += r[clock]
        v = ndcg(r)
        if v is not None:
            out.append((round(total, 2), round(float(v), 4)))
    return out


def time_to(points: list[tuple[float, float]], target: float) -> float | None:
    """The first time of ``points`` (time, value) whose value reaches ``target``; None if none does."""
    return next((t for t, v in points if v >= target), None)


def tta_level(curves: dict[str, list[tuple[float, float]]]) -> float | None:
    """The best value every library reaches: the minimum over libraries of each one's best (None without curves,
    or where a library has no point)."""
    if not curves or not all(curves.values()):
        return None
    return min(max(v for _, v in c) for c in curves.values())


def tta_ratios(curves: dict[str, list[tuple[float, float]]], level: float, ref: str = "resdom"
               ) -> dict[str, tuple[float | None, float | None]]:
    """{library: (time to ``level``, that time over ``ref``'s)}; the ratio None where either time is."""
    times = {k: time_to(c, level) for k, c in curves.items()}
    base = times.get(ref)
    return {k: (t, None if t is None or not base else t / base) for k, t in times.items()}


def pair_row(peer: str, wall: dict[str, list[tuple[float, float]]], cpu: dict[str, list[tuple[float, float]]],
             ref: str = "resdom") -> list[Any]:
    """One row of the pairwise table: ``peer``'s best (common) NDCG@10 and the CPU and wall seconds ``peer`` and
    ``ref`` take to reach it, with their ratios ("not reached" where ``ref`` never does)."""
    best = max(v for _, v in wall[peer])
    row: list[Any] = [peer, f"{best:.4f}"]
    for clock in (cpu, wall):
        times = tta_ratios({ref: clock[ref], peer: clock[peer]}, best, ref)
        mine = times[ref][0]
        row += [times[peer][0], "not reached" if mine is None else mine,
                "n/a" if mine is None else ratio(times[peer][0], mine)]
    return row


TTA_LIBS = ("resdom", "RecBole", "RecTools")
TTA_STORE = HERE / "tta"  # one file per library: its curve, the settings and the conditions it was measured under
TTA_OWN = {"resdom": "resdom's validation NDCG@10 in training (full ranking, seen items filtered)",
           "RecBole": "RecBole's own validation NDCG@10 (full ranking, seen items not filtered)",
           "RecTools": "RecTools' own model on its recommend batches (full ranking of its items, seen filtered)"}


def process_conditions() -> dict[str, Any]:
    """This process's CPU affinity, nice value and threads setting (what the child processes inherit)."""
    cond: dict[str, Any] = {"nice": os.nice(0) if hasattr(os, "nice") else None}
    if hasattr(os, "sched_getaffinity"):
        cond["cores"] = sorted(os.sched_getaffinity(0))
    return cond


def section_tta(ctx: Context) -> str:
    """Each library's SASRec with its own loss (resdom ce_all, RecBole CE at the last position over augmented
    prefixes, RecTools softmax at every position), d 64, 2 blocks, 2 heads, dropout 0.5, max length 50, batch 256,
    Adam 1e-3. Each trains for the same budget of training seconds (--tta-budget; validation, saving and scoring
    untimed), saves its model after every epoch, and every saved model is scored by one evaluator: RecBole's and
    RecTools' checkpoints imported with resdom's importers (resdom import-recbole / import-rectools), resdom's
    split of the data put in each model's item ids by raw id, then resdom's full ranking of the same validation
    users with the input's items filtered (each model ranks the items it has rows for; a target it has none for, an
    item it never saw in training, is a miss, as in RecTools' own metric); resdom's own validation in training is
    that evaluator (two of its checkpoints are re-scored and must give the same numbers). The level is the best
    validation NDCG@10 every library reaches within its budget (the minimum over libraries of each one's best),
    each ratio a library's training seconds to that level over resdom's, by wall clock and by the process's CPU
    time. Each library's curve is kept in benchmarks/tta/LIBRARY.json with its own metric beside the common one,
    its settings and the conditions it ran under, so the libraries may be measured in separate runs (--tta-libs,
    side by side with taskset); a stored curve is used only where its settings equal this run's."""
    beauty = ctx.data_dir / "bsarec" / "Beauty.txt"
    max_users = 300 if ctx.quick else ctx.recbole_users
    epochs = 2 if ctx.quick else ctx.tta_epochs
    rb_epochs = 1 if ctx.quick else max(1, epochs // 5)
    budget = {} if ctx.tta_budget is None else {"budget_s": ctx.tta_budget}
    if budget:  # the budget ends training; the epochs are a cap only
        epochs = rb_epochs = max(epochs, 100_000)
    timeout = 4 * 3600 if ctx.tta_budget is None else int(3 * ctx.tta_budget) + 3600  # validation is untimed
    model = {"max_len": 50, "hidden": 64, "layers": 2, "heads": 2, "inner_size": 256, "dropout": 0.5,
             "attn_dropout": 0.5}
    settings = {"evaluator": "resdom full ranking, seen filtered", "epochs": None if budget else epochs,
                "max_users": max_users, "threads": ctx.threads, "model": model}
    store = (ctx.out / "tta") if ctx.quick else TTA_STORE
    saved = ctx.out / ("tta-quick-checkpoints" if ctx.quick else "tta-checkpoints")  # git-ignored (benchmarks/out)
    data = beauty_data(ctx, max_users)  # the split resdom trains on: every library is scored on its validation
    missing = "venv not found (see --recbole-python / --rectools-python)"

    def fresh(lib: str) -> Path:
        folder = saved / lib
        shutil.rmtree(folder, ignore_errors=True)
        return folder

    def run_resdom() -> dict[str, Any]:
        return ctx.task("train", {"data": data, "model": model, "epochs": epochs, "evaluate": "valid_each_epoch",
                                  **budget, "save_dir": str(fresh("resdom")),
                                  "train": {"objective": "ce_all", "batch_size": 256, "lr": 1e-3}}, timeout=timeout)

    def run_recbole() -> dict[str, Any]:
        if not ctx.recbole_python:
            return {"error": "RecBole " + missing}
        folder = fresh("RecBole-data")
        inter = write_recbole_inter(beauty, folder, "Beauty", max_users)  # kept: the importer reads it again
        args = {"epochs": rb_epochs, "valid_each_epoch": True, "max_len": 50, **budget,
                "save_dir": str(fresh("RecBole")), **({"threads": ctx.threads} if ctx.threads else {})}
        res = ctx.run_json([ctx.recbole_python, str(HERE / "recbole_driver.py"), str(folder), "Beauty",
                            json.dumps(args)], timeout=timeout)
        res["import_source"] = str(inter)
        return res

    def run_rectools() -> dict[str, Any]:
        if not ctx.rectools_python:
            return {"error": "RecTools " + missing}
        args = {"epochs": epochs, "valid_each_epoch": True, "max_len": 50, **budget, "save_dir": str(fresh("RecTools")),
                **({"max_users": max_users} if max_users else {}), **({"threads": ctx.threads} if ctx.threads else {})}
        res = ctx.run_json([ctx.rectools_python, str(HERE / "rectools_driver.py"), str(beauty), json.dumps(args)],
                           timeout=timeout)
        res["import_source"] = data["source"]  # the interactions it was fitted on, as resdom reads them
        return res

    runners = {"resdom": run_resdom, "RecBole": run_recbole, "RecTools": run_rectools}
    own: dict[str, Callable[[dict[str, Any]], float | None]] = {
        "resdom": lambda r: r.get("after", {}).get("valid", {}).get("metrics", {}).get("NDCG@10"),
        "RecBole": lambda r: r.get("valid", {}).get("ndcg@10"),
        "RecTools": lambda r: r.get("valid", {}).get("metrics", {}).get("NDCG@10"),
    }

    def scored(lib: str, res: dict[str, Any]) -> dict[str, Any]:
        """The epochs' records with the common evaluator's NDCG@10 (``common``) beside the library's own."""
        eps = res["epochs"]
        if lib == "resdom":  # its validation in training is the evaluator: two checkpoints re-scored to show it
            best = max(eps, key=lambda r: own[lib](r) or 0.0)["epoch"]
            picks = sorted({eps[0]["epoch"], best if best != eps[0]["epoch"] else eps[-1]["epoch"]})
            paths = [str(saved / "resdom" / f"epoch-{k}.safetensors") for k in picks]
        else:
            paths = [r["checkpoint"] for r in eps]
        sc = ctx.task("score", {"library": lib, "checkpoints": paths, "data": data, "source": res.get("import_source"),
                                "data_dir": data.get("data_dir"), "unfiltered": lib == "RecBole"}, timeout=timeout)
        if err(sc):
            return {"error": f"{lib}: scoring its checkpoints failed: {err(sc)}"}
        by_path = {s["checkpoint"]: s for s in sc["scores"]}
        records = []
        for r in eps:
            path = r.get("checkpoint") or str(saved / "resdom" / f"epoch-{r['epoch']}.safetensors")
            s = by_path.get(path)
            common = s["metrics"]["NDCG@10"] if s else (own[lib](r) if lib == "resdom" else None)
            records.append({"epoch": r["epoch"], "seconds": r["seconds"], "cpu_seconds": r.get("cpu_seconds"),
                            "own_ndcg10": own[lib](r), "common_ndcg10": common,
                            **({"rescored": s["metrics"]["NDCG@10"]} if s and lib == "resdom" else {}),
                            **({"common_unfiltered_ndcg10": s["unfiltered"]["NDCG@10"]} if s and "unfiltered" in s
                               else {})})
        if lib == "resdom":
            bad = [r for r in records if "rescored" in r and r["rescored"] != r["own_ndcg10"]]
            if bad:
                return {"error": f"resdom: re-scored epoch {bad[0]['epoch']} gives NDCG@10 {bad[0]['rescored']}, its "
                                 f"validation in training {bad[0]['own_ndcg10']}: not the same evaluator"}
        first = sc["scores"][0] if sc["scores"] else {}
        return {"records": records, "model_items": first.get("model_items"), "valid_users": first.get("n_users"),
                "unknown_targets": first.get("unknown_targets")}

    measured: dict[str, dict[str, Any]] = {}
    for lib in TTA_LIBS:
        if lib in ctx.tta_libs:
            started, load0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()
            first = len(ctx.commands)
            res = runners[lib]()
            out = res if err(res) else scored(lib, res)
            cpu, flags = cpu_model_and_flags()
            entry = {"settings": settings, "budget_s": ctx.tta_budget, **({"error": err(out)} if err(out) else {}),
                     "own_metric": TTA_OWN[lib], **({} if err(out) else out), "commands": ctx.commands[first:],
                     "conditions": {"started": started, "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                    "load_average_start": [round(x, 2) for x in load0],
                                    "load_average_end": [round(x, 2) for x in os.getloadavg()],
                                    "cpu": cpu, "cpu_flags": flags, **process_conditions(),
                                    "command": " ".join(shlex.quote(_rel(a)) for a in sys.argv),
                                    "versions": {k: res.get(k) for k in ("recbole", "rectools", "torch", "lightning")
                                                 if res.get(k)}, "machine": machine_info()}}
            if not err(out):  # a failure is reported, never stored over an earlier curve
                store.mkdir(parents=True, exist_ok=True)
                (store / f"{lib}.json").write_text(json.dumps(entry, indent=1) + "\n")
            measured[lib] = entry
        elif (store / f"{lib}.json").exists():
            stored = json.loads((store / f"{lib}.json").read_text())
            measured[lib] = stored if stored["settings"] == settings else \
                {"error": f"{lib}: the stored curve was measured with other settings ({stored['settings']}); "
                          f"run --only tta --tta-libs {lib}"}
        else:
            measured[lib] = {"error": f"{lib}: not measured yet; run --only tta --tta-libs {lib}"}
    ok = {k: v for k, v in measured.items() if not err(v)}
    for k, v in ok.items():  # the commands of stored curves too, so the section lists every one it shows
        if k not in ctx.tta_libs:
            ctx.commands += v.get("commands", [])
    common = {k: curve(v["records"], lambda r: r["common_ndcg10"]) for k, v in ok.items()}
    common_cpu = {k: curve(v["records"], lambda r: r["common_ndcg10"], "cpu_seconds") for k, v in ok.items()}
    own_curves = {k: curve(v["records"], lambda r: r["own_ndcg10"]) for k, v in ok.items()}
    level = tta_level(common)
    level = level if level is not None and level > 0 else None  # a library that never scored: no level
    wall = tta_ratios(common, level) if level is not None else {}
    by_cpu = tta_ratios(common_cpu, level) if level is not None else {}
    rows = []
    for k, v in ok.items():
        recs, cond = v["records"], v["conditions"]
        n = len(recs)
        rows.append([k, n, sum(r["seconds"] for r in recs), sum(r["cpu_seconds"] for r in recs),
                     f"{sum(r['seconds'] for r in recs) / n:.1f} / {sum(r['cpu_seconds'] for r in recs) / n:.1f}",
                     f"{max(v for _, v in common[k]):.4f}", f"{max(v for _, v in own_curves[k]):.4f}",
                     wall[k][0] if wall.get(k) and wall[k][0] is not None else "not reached",
                     ratio(wall[k][0], wall["resdom"][0]) if k != "resdom" and "resdom" in wall else "1.00x",
                     by_cpu[k][0] if by_cpu.get(k) and by_cpu[k][0] is not None else "not reached",
                     ratio(by_cpu[k][0], by_cpu["resdom"][0]) if k != "resdom" and "resdom" in by_cpu else "1.00x",
                     f"{cond['started']}; cores {cond.get('cores')}, nice {cond.get('nice')}; load "
                     f"{cond['load_average_start'][0]}-{cond['load_average_end'][0]}"])
    lv = "n/a" if level is None else f"{level:.4f}"
    text = [f"Level: validation NDCG@10 >= {lv}, the best every library reached within its budget (common "
            "evaluator)." + ("" if level is not None else " None: a library scored 0 (or none was measured).") + "\n",
            table(["library", "epochs", "training s (wall)", "training s (CPU)", "s per epoch (wall / CPU)",
                   "best NDCG@10 (common)", "best NDCG@10 (own metric)", f"wall s to >= {lv}", "time vs resdom",
                   f"CPU s to >= {lv}", "CPU time vs resdom", "measured"], rows)]
    pairs = [pair_row(k, common, common_cpu) for k in ok if k != "resdom"] if "resdom" in ok else []
    if pairs:
        text.append("\nEach peer against resdom at the peer's own best (the best validation NDCG@10 the peer reached "
                    "within its budget; the level resdom has to reach, where it does):\n")
        text.append(table(["peer", "peer's best NDCG@10 (common)", "peer CPU s to it", "resdom CPU s to it",
                           "CPU time vs resdom", "peer wall s to it", "resdom wall s to it", "time vs resdom"], pairs))
    text.append("\nEach library's run (budget in training seconds, wall): " + "; ".join(
        f"{k} `{v['conditions'].get('command', '?')}` (budget {v.get('budget_s')}, {v['conditions']['started']} to "
        f"{v['conditions']['finished']})" for k, v in ok.items()) + ".")
    png = figure_path(ctx, "time_to_accuracy.png", failed=any(err(v) for v in measured.values()))
    if plot_tta(common_cpu, png, level):  # CPU time: on a shared machine the clock the load disturbs least
        text.append(f"\n![time to accuracy]({_rel(str(png)).removeprefix('benchmarks/')})")
    text.append("\nCurves (cumulative training seconds wall, common NDCG@10 / own NDCG@10 per epoch): " + "; ".join(
        f"{k} " + str([(t, c, o) for (t, c), (_, o) in zip(common[k], own_curves[k])]) for k in ok) + ". Own "
        "metrics: " + "; ".join(f"{k}: {TTA_OWN[k]}" for k in ok) + ". " + " ".join(
        (section_tta.__doc__ or "").split()))
    return "\n".join(text) + errors_note(measured)


def plot_tta(curves: dict[str, list[tuple[float, float]]], path: Path, level: float | None) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, pts in curves.items():
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, "o-", label=name, markersize=3)
    if level is not None:
        ax.axhline(level, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("training CPU seconds of the library's process (cumulative)")
    ax.set_ylabel("validation NDCG@10 (resdom's evaluator)")
    ax.grid(alpha=0.3)
    if any(curves.values()):
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# ------------------------------------------------------------------------------------------ batching


def section_last(ctx: Context) -> str:
    if ctx.quick:
        cases = [("synthetic", synthetic(300, 500, 50), ("bsarec",))]
    else:
        cases = [("beauty-ts (GTS)", {"source": "beauty-ts", "protocol": "gts", "data_dir": str(ctx.data_dir)},
                  ("bsarec", "duorec", "sasrec"))]
    rows, results = [], {}
    for label, data, models in cases:
        for name in models:
            r = ctx.task("last_columns", {"data": data, "model": name, "rounds": 2 if ctx.quick else 6,
                                          "steps": 2 if ctx.quick else 6, "eval_users": 200 if ctx.quick else 1024})
            results[f"{label} {name}"] = r
            if err(r):
                continue
            sec = r["seconds"]
            rows.append([label, name, r["objective"], r["max_len"], f"{r['steps']} x {r['batch_size']}",
                         sec["train_full"], sec["train_last"], ratio(sec["train_full"], sec["train_last"]),
                         r["eval_users"], sec["eval_full"], sec["eval_last"], ratio(sec["eval_full"], sec["eval_last"]),
                         f"{r['max_state_diff']:.1e}"])
    text = [table(["data", "model", "objective", "max len", "train batches", "train s (all columns)",
                   "train s (last)", "train speed-up", "eval users", "eval s (all columns)", "eval s (last)",
                   "eval speed-up", "max state diff"], rows)]
    text.append(
        "\nSame seeded untrained model (the protocol's defaults and BSARec's Beauty preset), same real batches "
        "(the trainer's length groups, DuoRec's partners) and test users. \"All columns\": the model made to "
        "encode every column; \"last\": what the trainer and `final_states` run, `encode(items, last=k)`, "
        "where the final block computes its queries, residual, LayerNorms and feed-forward layer at the k "
        "columns the loss or the ranking reads (keys and values everywhere). Training: forward and backward of "
        "every batch, no update; evaluation: the prediction states of the users, no autograd. Seconds: the "
        "fastest of 6 interleaved rounds in one process (which mode goes first alternates). Max state diff: "
        "the largest absolute difference of the evaluated prediction states (floating-point order only; the "
        "training losses and gradients are equal without dropout, `tests/test_models_last_columns.py`). "
        "SASRec's and DuoRec's `ce_all` read every column of the training pass: only DuoRec's second view and "
        "the evaluation gain there.")
    return "\n".join(text) + errors_note(results)


def section_ce(ctx: Context) -> str:
    # P: the target positions of a ce_all batch of 256 beauty-ts / sports-ts sequences (about 2,000), N their items
    cases = [(500, 2_000)] if ctx.quick else [(2_000, 12_101), (2_000, 18_357), (256, 12_101), (2_000, 100_000)]
    rows, results = [], {}
    for P, N in cases:
        r = ctx.task("cross_entropy", {"P": P, "N": N, "rounds": 2 if ctx.quick else 12})
        results[f"P {P}, N {N}"] = r
        if err(r):
            continue
        sec = r["seconds"]
        rows.append([f"{P:,}", f"{N:,}", r["d"], round(sec["torch"] * 1e3), round(sec["resdom"] * 1e3),
                     ratio(sec["torch"], sec["resdom"]), f"{r['loss_diff']:.1e}", f"{r['grad_diff']:.1e}"])
    text = [table(["rows P", "items N", "d", "F.cross_entropy ms", "resdom ms", "speed-up", "loss diff",
                   "max grad diff"], rows)]
    text.append(
        "\nForward and backward of the mean full-softmax cross-entropy of P states against N item embeddings "
        "(float32, random N(0, 0.3^2) entries): `F.cross_entropy(h @ E.T, t)` against resdom's "
        "`training.objectives.full_cross_entropy` (blocks of 64 rows on CPU scored, turned into probabilities "
        "and both gradient products and dropped while in cache, so backward only scales the gradients; no "
        "(P, N) tensor kept, no score computed twice). Times: the fastest of 12 interleaved rounds in "
        "one process, the order alternating. P 2,000 is about a `ce_all` batch of 256 beauty-ts sequences, "
        "P 256 a `ce_last` batch.")
    return "\n".join(text) + errors_note(results)


def section_batching(ctx: Context) -> str:
    """One epoch of SASRec per batching setting, side by side: plain batches, length groups, bucketing."""
    data = synthetic(600, 2000, 50, min_len=3) if ctx.quick else {"source": "beauty", "data_dir": str(ctx.data_dir)}
    model = {"max_len": 50, "hidden": 64, "layers": 2, "heads": 2, "inner_size": 256}
    settings = [("one pass per batch", {"length_groups": 1}), ("length_groups 4 (default)", {"length_groups": 4}),
                ("length_groups 8", {"length_groups": 8}), ("length_buckets 16", {"length_buckets": 16})]
    runs = [("ce_all", model, settings), ("ce_last", model, settings),
            # BERT4Rec as in the GTS grid (max length 128 with [MASK]): its masked window in the trainer's groups
            ("mlm (BERT4Rec)", {"name": "bert4rec", "max_len": 128}, settings[:2])]
    rows, results = [], {}
    for objective, net, these in runs:
        base = None
        for label, extra in these:
            res = ctx.task("train", {"data": data, "model": net, "epochs": 1,
                                     "train": {"objective": objective.split()[0], "batch_size": 256, **extra}})
            results[f"{objective} {label}"] = res
            if err(res):
                continue
            sps = mean_epoch(res, "samples_per_s")
            base = sps if base is None else base
            rows.append([objective, label, mean_epoch(res, "seconds"), sps, ratio(sps, base)])
    text = [table(["objective", "batching", "s / epoch", "samples / s", "vs one pass per batch"], rows)]
    text.append(
        "\nSame plain-shuffled batches of 256 in the first three rows: length groups cut each batch into groups of "
        "similar length (each padded to its own longest input) and sum their gradients, so the update is the "
        "batch's own (tests/test_training_trainer.py::test_grouped_backward_gives_the_whole_batch_gradient); "
        "BERT4Rec's masked-item loss is a mean over the batch's masked positions, so its model encodes the masked "
        "batch in the groups itself, the same states "
        "(tests/test_models_bert4rec.py::test_training_in_length_groups_gives_the_same_masks_states_loss_and_"
        "gradients). "
        "Length bucketing changes the batches themselves (sorted by length within windows of 16 batches): "
        "faster, but it trained SASRec ce_all on Beauty worse (best valid NDCG@10 0.0619 against 0.0704 with "
        "plain batches; docs/choices.md), so it is off by default.")
    return "\n".join(text) + errors_note(results)


# ---------------------------------------------------------------------------------------------- eval


def section_eval(ctx: Context) -> str:
    if ctx.quick:
        cases = [("synthetic 2k items", synthetic(300, 2000, 50), 50, None),
                 ("synthetic 100k items", synthetic(100, 100_000, 50), 50, 64)]
    else:
        cases = [("Beauty test (LOO)", {"source": "beauty", "data_dir": str(ctx.data_dir)}, 50, None),
                 ("synthetic 1M items, max len 200", synthetic(2000, 1_000_000, 200), 200, 310)]
    rows, results = [], {}
    for label, data, max_len, max_users in cases:
        args = {"data": data, "model": {"max_len": max_len, "inner_size": 256},
                **({"max_users": max_users} if max_users else {})}
        ours = ctx.task("eval", {**args, "impl": "resdom"})
        naive = ctx.task("eval", {**args, "impl": "naive"})
        results[f"{label} resdom"], results[f"{label} naive"] = ours, naive
        if err(ours) or err(naive):
            continue
        same = max(abs(ours["metrics"][k] - naive["metrics"][k]) for k in ours["metrics"] if k != "MRR")
        rows.append([label, ours["users"], ours["items"], ours["users_per_s"], naive["users_per_s"],
                     ratio(ours["users_per_s"], naive["users_per_s"]), ours["peak_rss_mb"], naive["peak_rss_mb"],
                     f"{same:.1e}"])
    text = [table(["data", "users", "items", "resdom users/s", "naive users/s", "speed-up",
                   "resdom peak MiB", "naive peak MiB", "max abs diff HR/NDCG"], rows)]
    text.append(
        "\nBoth score every item for every user (full ranking, seen items at -inf) with the same untrained, seeded "
        "SASRec. resdom scores 2,048 items at a time and counts, per user, the items scoring >= the target while "
        "the tile is in cache (pessimistic ties; `ranking.tiled_ranks`), its users batched by input length; the "
        "naive one keeps a chunk's users x items score matrix within 32M floats, argsorts all scores of each user "
        "and looks the target up. HR/NDCG agree (last column; MRR differs only by tie "
        "handling).")
    return "\n".join(text) + errors_note(results)


def section_topk(ctx: Context) -> str:
    """Old (a full sort of every row; the tie rule over every row; one bool compare of the whole matrix) against
    new, interleaved in one process."""
    rounds = 2 if ctx.quick else 8
    kernels = [(64, 2_000, False)] if ctx.quick else [(256, 12_101, False), (256, 100_000, False),
                                                       (256, 12_101, True)]
    rows, counts, results = [], [], {}
    for B, N, ties in kernels:
        r = ctx.task("top_lists", {"what": "kernel", "B": B, "N": N, "ties": ties, "rounds": rounds})
        results[f"kernel {B} x {N}{' ties' if ties else ''}"] = r
        if err(r):
            continue
        s, label = r["seconds"], f"{B:,} x {N + 1:,} scores{', integer (ties)' if ties else ''}"
        rows.append([label, round(s["sorted_top"] * 1e3, 1), round(s["ordered_top"] * 1e3, 1),
                     ratio(s["sorted_top"], s["ordered_top"]), round(s["top_k_every_row"] * 1e3, 1),
                     round(s["top_k"] * 1e3, 1), ratio(s["top_k_every_row"], s["top_k"]),
                     "yes" if r["same"] else "NO"])
        counts.append([label, *[x for j in (1, 3) for x in (
            round(s[f"ranks_bool_{j}"] * 1e3, 1), round(s[f"pessimistic_ranks_{j}"] * 1e3, 1),
            ratio(s[f"ranks_bool_{j}"], s[f"pessimistic_ranks_{j}"]))], "yes" if r["same"] else "NO"])
    data = synthetic(300, 2000, 50) if ctx.quick else {"source": "beauty", "data_dir": str(ctx.data_dir)}
    users = None if ctx.quick else 1024
    common = {"data": data, "model": {"max_len": 50, "inner_size": 256}, "rounds": 2 if ctx.quick else 3,
              **({"max_users": users} if users else {})}
    diag = []
    for what, extra, name, old, new in [
            ("shuffle", {"seeds": [0]}, "position shuffle (5 modes, seed 0)", "sorted_top", "ordered_top"),
            ("alpha", {"alphas": [1.0, 0.5]}, "alpha sweep (alpha 1.0 and 0.5)", "ranks_bool",
             "pessimistic_ranks")]:
        r = ctx.task("top_lists", {"what": what, **common, **extra})
        results[what] = r
        if not err(r):
            s = r["seconds"]
            diag.append([name, f"{r['users']:,}", f"{r['items']:,}", round(s[old], 2), round(s[new], 2),
                         ratio(s[old], s[new]), "yes" if r["same"] else "NO"])
    text = [table(["scores (users x items)", "ordered_top old ms", "new ms", "speed-up", "top_k old ms", "new ms",
                   "speed-up", "same lists"], rows),
            "\n" + table(["scores (users x items)", "ranks of 1 item old ms", "new ms", "speed-up",
                          "ranks of 3 items old ms", "new ms", "speed-up", "same ranks"], counts),
            "\n" + table(["diagnostic", "users", "items", "old s", "new s", "speed-up", "same result"], diag)]
    text.append(
        "\nTop-K lists as the shuffle's Jaccard@10, `evaluate --beyond`, the cosine neighbours, `resdom recommend` "
        "and `similar` take them: each row's K (10) best finite scores, highest first, equal scores by increasing"
        " item id. Old: `ordered_top` sorted every whole row (a stable descending sort), `top_k` ran the tie "
        "rule's cumulative sum over every whole row. New (`evaluation.beyond.top_k`): `torch.topk` of K + 1 gives"
        " the K-th best score and the next; where the next is lower and the K-th finite, topk's own K items are "
        "the list; only rows that tie at the K-th score (or hold fewer than K finite scores) take the tie rule. "
        "Ranks of a score matrix (`ranking.pessimistic_ranks`: the shuffle's and the alpha sweep's, 3 items a row"
        " in the sweep's unfiltered pass, 1 in its filtered): old, one (users x items x k) bool compare and its "
        "sum; new, `ITEM_TILE` columns at a time into one float32 buffer (as `tiled_ranks`), the same counts. "
        "Random normal scores of 64-d products with column 0 and 50 items a row at -inf (seen); the integer row "
        "is the worst case for the lists, every row tied. Times: the fastest of interleaved rounds in one "
        "process, the order alternating; \"same\": old and new outputs equal (lists, scores, ranks, the "
        "diagnostic's whole result and per-user ranks). The diagnostics: the first 1,024 Beauty test users (LOO),"
        " a seeded untrained SASRec; a stored beauty-ts cell's shuffle (6,110 users, 3 seeds) took 150 s with the"
        " old lists and 27 s with the new on this machine (one run each, the new first, in one process; not "
        "interleaved, and the load varied: an earlier pair took 303 s and 23 s), the same result.")
    return "\n".join(text) + errors_note(results)


# -------------------------------------------------------------------------------------------- mixing


def section_mixing(ctx: Context) -> str:
    if ctx.quick:
        cases = [("synthetic, max len 50", synthetic(300, 500, 50), 50, None)]
    else:
        cases = [("Beauty test (LOO), max len 50", {"source": "beauty", "data_dir": str(ctx.data_dir)}, 50, None),
                 ("beauty-ts test (GTS), max len 200",
                  {"source": "beauty-ts", "protocol": "gts", "data_dir": str(ctx.data_dir)}, 200, None),
                 ("synthetic, max len 200", synthetic(3000, 10_000, 200, min_len=150), 200, None)]
    rows, results = [], {}
    for label, data, max_len, max_users in cases:
        args = {"data": data, "model": {"max_len": max_len, "inner_size": 256},
                **({"max_users": max_users} if max_users else {})}
        timing = ctx.task("mixing", {**args, "what": "timing", "rounds": 2 if ctx.quick else 5})
        fwd = ctx.task("mixing", {**args, "what": "forward"})
        nos = ctx.task("mixing", {**args, "what": "norm_of_sums"})
        son = ctx.task("mixing", {**args, "what": "sum_of_norms"})
        results.update({f"{label} timing": timing, f"{label} forward": fwd, f"{label} norm_of_sums": nos,
                        f"{label} sum_of_norms": son})
        if err(timing) or err(fwd):
            continue
        best = timing["seconds"]
        for name, r, goal in (("norm_of_sums", nos, 1.2), ("sum_of_norms", son, 3.0)):
            if err(r):
                continue
            x = best[name] / best["forward"]
            rows.append([label, r["users"], name, best["forward"], best[name], f"{x:.2f}x",
                         "yes" if x <= goal else "**no**", f"<= {goal}x", fwd["peak_rss_mb"] - fwd["rss_before_mb"],
                         r["peak_rss_mb"] - r["rss_before_mb"], r["peak_rss_mb"]])
    text = [table(["data", "users", "definition", "forward s", "mixing s", "cost vs forward", "within goal",
                   "goal", "forward peak increase MiB", "mixing peak increase MiB", "mixing peak RSS MiB"], rows)]
    text.append(
        "\nSame untrained seeded SASRec (d 64, 2 layers, 2 heads), same batches (`diagnostics.common.batches`, 256 "
        "users), eval mode, no autograd. \"Forward\" is `model.encode` over the test inputs; \"mixing\" is "
        "`resdom.diagnostics.mixing_ratios` over the same inputs (its recording forward pass included), all "
        "stages (Attn, +Res, +LN), per layer, pooled, per position. Seconds: the fastest of interleaved rounds "
        "(forward, norm of sums, sum of norms, repeated) in one process, so a load that comes and goes slows "
        "all three alike. Peak increase = peak RSS during the phase minus RSS when it started (each phase in a "
        "process of its own).")
    return "\n".join(text) + errors_note(results)


# ------------------------------------------------------------------------------------- memory / scale


def _three_phases(ctx: Context, data: dict, max_len: int, tag: str, eval_users: int | None,
                  train_extra: dict | None = None) -> dict[str, dict[str, Any]]:
    """ce_sampled training (1 epoch, model saved) -> evaluation -> mixing, each in its own process."""
    path = ctx.out / f"{tag}.safetensors"
    model = {"max_len": max_len, "inner_size": 256}
    train = {"objective": "ce_sampled", "n_negatives": 256, **(train_extra or {})}
    tr = ctx.task("train", {"data": data, "model": model, "train": train, "epochs": 1, "save": str(path)})
    if err(tr):
        return {"train": tr}
    extra = {"max_users": eval_users} if eval_users else {}
    ev = ctx.task("eval", {"data": data, "model_path": str(path), "impl": "resdom", **extra})
    mx = ctx.task("mixing", {"data": data, "model_path": str(path), "what": "norm_of_sums", **extra})
    return {"train": tr, "eval": ev, "mixing": mx}


def section_memory(ctx: Context) -> str:
    sizes = [10_000, 100_000] if ctx.quick else [10_000, 100_000, 1_000_000]
    users, max_len, eval_users = (200, 50, 100) if ctx.quick else (4_000, 200, 1_000)
    rows, results = [], {}
    for n in sizes:
        data = synthetic(users, n, max_len, min_len=20)
        r = _three_phases(ctx, data, max_len, f"memory_{n}", eval_users)
        results.update({f"{n} items {k}": v for k, v in r.items()})
        tr = r["train"]
        if err(tr):
            continue
        ep = tr["epochs"][0]
        ev, mx = r.get("eval", {}), r.get("mixing", {})
        rows.append([f"{n:,}", ep["rss_before_mb"], ep["peak_rss_mb"], ep["seconds"],
                     ev.get("peak_rss_mb"), ev.get("seconds"), mx.get("peak_rss_mb"), mx.get("seconds")])
    text = [table(["items", "train: RSS before MiB", "train: peak MiB", "train s/epoch", "eval: peak MiB",
                   f"eval s ({eval_users:,} users)", "mixing: peak MiB", f"mixing s ({eval_users:,} users)"], rows)]
    text.append(
        f"\nSynthetic data, {users:,} users, lengths 20..{max_len + 3}, SASRec d 64, max length {max_len}; one "
        "epoch of `ce_sampled` (256 shared negatives, log-Q corrected), then full-ranking evaluation and the "
        "norm-of-sums mixing ratio on the first test users, each phase in a process of its own. Peak = the "
        "process's peak resident memory during the phase (kernel VmHWM reset at the phase's start); it includes "
        "Python, torch and the data. The item table (items x 64 floats) with its Adam moments and dense "
        "gradient is what grows with the catalogue: 4 x 256 MB at 1M items.")
    return "\n".join(text) + errors_note(results)


def section_scale(ctx: Context) -> str:
    users, items, max_len = (500, 100_000, 200) if ctx.quick else (50_000, 1_000_000, 200)
    data = synthetic(users, items, max_len, min_len=20)
    r = _three_phases(ctx, data, max_len, "scale", None)
    rows = [] if not ctx.quick else [["(--quick: micro sizes, not the scale check)", "", "", ""]]
    tr = r["train"]
    if not err(tr):
        ep = tr["epochs"][0]
        d = tr["data"]
        rows.append(["train: 1 epoch of ce_sampled", f"{d['users']:,} users ({ep['samples']:,} samples, "
                     f"{ep['target_positions']:,} target positions)", ep["seconds"], ep["peak_rss_mb"]])
    for key, label in (("eval", "full-ranking evaluation (test, seen filtered)"),
                       ("mixing", "mixing ratio (norm of sums, test)")):
        x = r.get(key, {})
        if x and not err(x):
            rows.append([label, f"{x['users']:,} users x {x['items']:,} items", x["seconds"], x["peak_rss_mb"]])
    text = [table(["phase", "size", "seconds", "peak RSS MiB"], rows)]
    if not err(tr):
        d = tr["data"]
        text.append(f"\nSynthetic data (resdom.data.synthetic): {d['users']:,} users, {d['items']:,} items, "
                    f"{d['train_interactions']:,} training interactions (lengths 20..{max_len + 3}); SASRec d 64, "
                    f"2 layers, max length {max_len}, {tr['params']:,} parameters; torch threads {tr['threads']}. "
                    "Machine limit: 24 GiB RAM. All three phases completed: " +
                    ("yes." if all(k in r and not err(r[k]) for k in ("train", "eval", "mixing")) else "**no**."))
    return "\n".join(text) + errors_note(r)


# --------------------------------------------------------------------------------------------- output


def section_output(ctx: Context) -> str:
    """Peak RSS of ``resdom recommend`` / ``similar``'s writing at a large k: the whole table and its CSV text at
    once (before) against ``Lists.frames`` into ``io.atomic_stream`` (now), each in a process of its own."""
    if ctx.quick:
        cases = [("recommend", synthetic(2_000, 1_000, 20), 200), ("similar", synthetic(200, 4_000, 20), 100)]
    else:
        cases = [("recommend", synthetic(10_000, 2_000, 20), 500), ("similar", synthetic(500, 10_000, 20), 500)]
    rows, results = [], {}
    for what, data, k in cases:
        runs = {}
        for impl in ("whole", "parts"):
            runs[impl] = ctx.task("output", {"data": data, "model": {"max_len": 20}, "what": what, "impl": impl,
                                             "k": k, "out": str(ctx.out / f"output_{what}_{impl}.csv")})
            results[f"{what} {impl}"] = runs[impl]
        whole, parts = runs["whole"], runs["parts"]
        if err(whole) or err(parts):
            continue
        grown = [r["peak_rss_mb"] - r["rss_before_mb"] for r in (whole, parts)]
        rows.append([what, f"{whole['lists']:,} x {k:,}", f"{whole['rows']:,}", f"{whole['bytes'] / 2**20:,.0f}",
                     whole["rss_before_mb"], whole["peak_rss_mb"], parts["peak_rss_mb"], fmt(grown[0]),
                     fmt(grown[1]), ratio(grown[0], grown[1], 1), whole["seconds"], parts["seconds"],
                     "yes" if whole["sha256"] == parts["sha256"] else "**no**"])
    text = [table(["command", "lists x k", "rows", "CSV MiB", "RSS before MiB", "whole: peak MiB",
                   "parts: peak MiB", "whole: growth MiB", "parts: growth MiB", "growth ratio", "whole s",
                   "parts s", "same bytes"], rows)]
    text.append(
        "\nSame untrained, seeded SASRec (d 64, max length 20) on synthetic data, every user (`recommend`) or every "
        "item (`similar`) at the k shown, CSV written to a file. \"whole\" is what the commands did before: "
        "`recommend()`'s DataFrame of every row, its CSV text (`csv_text`), encoded and written at once; \"parts\" "
        "is what they do now: `Lists.frames()` (`recommend.PART_ROWS` = 100,000 rows a part) written one after "
        "the other into a temporary file renamed into place (`io.atomic_stream`). Growth = peak RSS during the "
        "phase minus RSS when it started (Python, torch, data and model): what the output itself cost. The "
        "parts' growth is bounded by one chunk's scores (`ranking.SCORE_BUDGET`, 32M floats) and one part's "
        "rows, whatever users x k is; the whole table's grows with users x k (about 100-200 bytes a row).")
    return "\n".join(text) + errors_note(results)


# -------------------------------------------------------------------------------------------- scaling


def section_scaling(ctx: Context) -> str:
    if ctx.quick:
        base, users_axis, items_axis, len_axis = (200, 1000, 50), [100, 200], [1000, 10_000], [20, 50]
    else:
        base = (4000, 10_000, 50)
        users_axis, items_axis, len_axis = [2000, 4000, 8000, 16_000], [10_000, 100_000, 1_000_000], [50, 100, 200]
    points = ([("users", (u, base[1], base[2])) for u in users_axis]
              + [("items", (base[0], n, base[2])) for n in items_axis]
              + [("max length", (base[0], base[1], L)) for L in len_axis])
    cache: dict[tuple, dict] = {}
    rows, results, series = [], {}, {"users": [], "items": [], "max length": []}
    for axis, (u, n, L) in points:
        if (u, n, L) not in cache:
            cache[(u, n, L)] = ctx.task("train", {"data": synthetic(u, n, L),
                                                  "model": {"max_len": L, "inner_size": 256},
                                                  "train": {"objective": "ce_sampled"}, "epochs": 1})
        res = cache[(u, n, L)]
        results[f"{axis} {u}/{n}/{L}"] = res
        if err(res):
            continue
        ep = res["epochs"][0]
        x = {"users": u, "items": n, "max length": L}[axis]
        series[axis].append((x, ep["seconds"]))
        rows.append([axis, u, n, L, ep["samples"], ep["target_positions"], ep["seconds"], ep["samples_per_s"],
                     round(ep["target_positions"] / ep["seconds"]), ep["peak_rss_mb"]])
    png = figure_path(ctx, "scaling.png", failed=any(err(v) for v in results.values() if isinstance(v, dict)))
    plotted = plot_scaling(series, png, base)
    text = [table(["axis", "users", "items", "max len", "samples", "target positions", "s / epoch", "samples/s",
                   "positions/s", "peak RSS MiB"], rows)]
    text.append(
        f"\nOne epoch of `ce_sampled` (256 shared negatives) on synthetic data, SASRec d 64, 2 layers, 2 heads; "
        f"base point {base[0]:,} users, {base[1]:,} items, max length {base[2]}; lengths uniform in "
        "[max len / 2, max len + 3], so longer windows hold longer sequences. Each point in its own process.")
    if plotted:
        text.append(f"\n![scaling curve]({_rel(str(png)).removeprefix('benchmarks/')})")
    return "\n".join(text) + errors_note(results)


def plot_scaling(series: dict[str, list[tuple[int, float]]], path: Path, base: tuple) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, (axis, pts) in zip(axes, series.items()):
        if pts:
            xs, ys = zip(*sorted(pts))
            ax.plot(xs, ys, "o-")
        ax.set_xscale("log" if axis != "max length" else "linear")
        ax.set_xlabel(axis)
        ax.set_ylabel("seconds per epoch")
        ax.grid(alpha=0.3)
    fig.suptitle(f"resdom SASRec, ce_sampled; base {base[0]:,} users, {base[1]:,} items, max len {base[2]}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# ------------------------------------------------------------------------------------------------ ddp


def section_ddp(ctx: Context) -> str:
    source = "synthetic:n_users=600,n_items=200" if ctx.quick else "synthetic:n_users=3000,n_items=1000"
    epochs = "1" if ctx.quick else "2"
    base = ctx.out / "ddp"
    shutil.rmtree(base, ignore_errors=True)
    env = {"OMP_NUM_THREADS": "1"}
    single_threads = ctx.threads or 2  # the one-process run: --threads, else both cores
    results: dict[str, dict[str, Any]] = {}

    def train(out: Path, nproc: int) -> dict[str, Any]:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)] \
            if nproc > 1 else [sys.executable]
        cmd = [*launcher, "-m", "resdom", "train", source, "--protocol", "loo", "--out", str(out), "--epochs", epochs,
               "--device", "cpu"]
        if nproc == 1:
            cmd += ["--set", f"train.threads={single_threads}"]
        ctx.commands.append(" ".join(shlex.quote(_rel(c)) for c in cmd))
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, timeout=1800)
        if p.returncode != 0:
            return {"error": p.stderr[-1500:]}
        metrics = json.loads((out / "metrics.json").read_text())
        log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        return {"test": metrics["test"], "wall_s": round(time.perf_counter() - t0, 1),
                "epoch_s": [r["seconds"] for r in log]}

    results["train 1 process"] = single = train(base / "single", 1)
    evals = {}
    if not err(single):
        run_args = json.dumps({"run_dir": str(base / "single"), "batch_size": 64})
        evals[1] = ctx.run_json([sys.executable, str(TASKS), "eval_run", run_args], 600, env)
        evals[2] = ctx.run_json([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                 "2", str(TASKS), "eval_run", run_args], 600, env)
        results["evaluate 1 process"], results["evaluate 2 processes"] = evals[1], evals[2]
    results["train 2 processes"] = double = train(base / "ddp2", 2)
    rows = []
    for n, r in evals.items():
        if not err(r):
            m = r["metrics"]
            rows.append([f"evaluate the 1-process run, {n} process(es) (world {r['world_size']})", r["n_users"],
                         f"{m['HR@10']:.6f}", f"{m['NDCG@10']:.6f}", f"{m['MRR']:.6f}", r["ranks_sha256_16"]])
    text = [table(["run", "test users", "HR@10", "NDCG@10", "MRR", "sha256 of all ranks (16 hex)"], rows)]
    if len(rows) == 2:
        same = evals[1]["metrics"] == evals[2]["metrics"] and evals[1]["ranks_sha256_16"] == evals[2]["ranks_sha256_16"]
        text.append(f"\n**Same evaluation metrics and per-user ranks with 2 gloo processes as with one: "
                    f"{'yes' if same else 'NO'}** (users sharded `r::2`, ranks all-gathered).")
    if not err(single) and not err(double):
        s, d = single["test"]["metrics"], double["test"]["metrics"]
        d_epoch = sum(double["epoch_s"]) / len(double["epoch_s"])
        s_epoch = sum(single["epoch_s"]) / len(single["epoch_s"])
        text.append(
            f"\nTraining under DDP (`torchrun --nproc_per_node 2`, gloo, 1 thread each, global batch 256 = 2 x 128) "
            f"vs 1 process ({single_threads} thread(s)), {epochs} epochs, "
            f"test NDCG@10 {d['NDCG@10']:.4f} vs {s['NDCG@10']:.4f}, "
            f"HR@10 {d['HR@10']:.4f} vs {s['HR@10']:.4f}; seconds per epoch {fmt(d_epoch, 2)} vs {fmt(s_epoch, 2)}. "
            "Trained weights differ (each rank draws its own dropout masks; the loss is averaged per rank), "
            "so only evaluation is expected to match exactly.")
    return "\n".join(text) + errors_note(results)


# --------------------------------------------------------------------------------------- RESULTS.md


CPU_FLAGS = (("avx512f", "AVX-512"), ("avx512_bf16", "AVX-512 BF16"), ("amx_bf16", "AMX-BF16"),
             ("amx_tile", "AMX tiles"))  # the flags that decide what a CPU's fp32 and bf16 products can reach


def cpu_model_and_flags() -> tuple[str, str]:
    """(the CPU's model name, "AVX-512 yes, AVX-512 BF16 yes, AMX-BF16 no, AMX tiles no") from /proc/cpuinfo; the
    flags "unknown" where it cannot be read (not Linux)."""
    cpu, flags = platform.processor() or platform.machine(), None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == (platform.processor() or platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and flags is None:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    if flags is None:
        return cpu, "CPU flags unknown"
    return cpu, ", ".join(f"{name} {'yes' if flag in flags else 'no'}" for flag, name in CPU_FLAGS)


def machine_info() -> str:
    import torch

    cpu, flags = cpu_model_and_flags()
    cpu = f"{cpu} ({flags})"
    mem = "?"
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, AttributeError):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
                                ).stdout.strip()
    except OSError:
        commit = "?"
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (f"{cpu}, {os.cpu_count()} logical CPUs, {mem} RAM; Python {platform.python_version()}, torch "
            f"{torch.__version__} ({torch.get_num_threads()} threads by default); commit {commit}; load average "
            f"when the section ended {load} (1/5/15 min)")


def render_section(name: str, body: str, commands: list[str], command_line: str, seconds: float) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmds = "\n".join(commands)
    return (f"<!-- section:{name} -->\n### {TITLES[name]}\n\n"
            f"Measured {stamp} on {machine_info()}; section took {seconds:.0f} s.\n"
            f"Command: `{command_line}`\n\n{body}\n\n"
            f"<details><summary>Exact measurement commands (run from the repository root)</summary>\n\n"
            f"```\n{cmds}\n```\n</details>\n<!-- /section:{name} -->")


def merge_results(path: Path, new_sections: dict[str, str]) -> str:
    """The new RESULTS.md text: ``new_sections`` replace their namesakes in the auto-generated block; other
    sections of the block and all text outside it are kept."""
    old = path.read_text() if path.exists() else ""
    before, after, inner = old, "", ""
    if BEGIN in old and END in old:
        before, rest = old.split(BEGIN, 1)
        inner, after = rest.split(END, 1)
    elif not old:
        before = "# Benchmarks\n\nFigures outside the auto-generated block below are written by hand.\n\n"
    sections = {m.group(1): m.group(0)
                for m in re.finditer(r"(?s)<!-- section:(\w+) -->.*?<!-- /section:\1 -->", inner)}
    sections.update(new_sections)
    ordered = [sections[k] for k in SECTIONS if k in sections] + \
        [v for k, v in sections.items() if k not in SECTIONS]
    block = (f"{BEGIN}\n## Speed and scale (auto-generated by `python benchmarks/run.py`)\n\n"
             + "\n\n".join(ordered) + f"\n{END}")
    return before.rstrip("\n") + ("\n\n" if before.strip() else "") + block + (after if after.strip() else "\n")


RUNNERS: dict[str, Callable[[Context], str]] = {
    "peak": section_peak, "recbole": section_recbole, "rectools": section_rectools, "tta": section_tta,
    "batching": section_batching,
    "last": section_last, "ce": section_ce,
    "eval": section_eval, "topk": section_topk, "mixing": section_mixing, "memory": section_memory,
    "scale": section_scale, "scaling": section_scaling, "ddp": section_ddp, "output": section_output,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="micro sizes (smoke run, minutes)")
    p.add_argument("--only", default="", help=f"comma-separated sections: {','.join(SECTIONS)}")
    p.add_argument("--results", type=Path, default=None, help="results file (default benchmarks/RESULTS.md; "
                   "benchmarks/out/RESULTS.quick.md with --quick)")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="raw data laid out like shared/data/raw")
    p.add_argument("--recbole-python", default=None, help="python of a RecBole 1.2.1 venv")
    p.add_argument("--setup-recbole", action="store_true", help="make benchmarks/.recbole-venv when missing")
    p.add_argument("--rectools-python", default=None, help="python of a RecTools 0.19 venv")
    p.add_argument("--setup-rectools", action="store_true", help="make benchmarks/.rectools-venv when missing")
    p.add_argument("--tta-epochs", type=int, default=30, help="tta section: epochs for resdom and RecTools "
                   "(RecBole a fifth of them)")
    p.add_argument("--tta-budget", type=float, default=None, help="tta section: training seconds each library "
                   "gets (the equal budget of the comparison: 7200 or more); --tta-epochs is then a cap only")
    p.add_argument("--tta-libs", default="resdom,RecBole,RecTools",
                   help="tta section: the libraries measured in this run; the others' stored curves "
                   "(benchmarks/tta/) are used where their settings match")
    p.add_argument("--peer-rounds", type=int, default=8, help="recbole and rectools sections: interleaved rounds")
    p.add_argument("--peer-batches", type=int, default=20,
                   help="recbole and rectools sections: training batches per library per round")
    p.add_argument("--threads", type=int, default=None, help="torch threads in every measurement (default: torch's)")
    p.add_argument("--recbole-users", type=int, default=None,
                   help="recbole and rectools sections: only the first N users of Beauty.txt, for both libraries "
                   "(default: all)")
    a = p.parse_args(argv)
    names = [s.strip() for s in a.only.split(",") if s.strip()] or list(SECTIONS)
    bad = [n for n in names if n not in SECTIONS]
    if bad:
        p.error(f"unknown section {bad[0]!r}; sections: {', '.join(SECTIONS)}")
    if a.only.strip() and not [s for s in a.only.split(",") if s.strip()]:
        p.error(f"--only {a.only!r}: names no section; sections: {', '.join(SECTIONS)}")
    tta_libs = tuple(x.strip() for x in a.tta_libs.split(",") if x.strip())
    if any(x not in TTA_LIBS for x in tta_libs):
        p.error(f"--tta-libs: unknown library in {a.tta_libs!r}; libraries: {', '.join(TTA_LIBS)}")
    for flag, value, least in (("--threads", a.threads, 1), ("--tta-epochs", a.tta_epochs, 1),
                               ("--peer-rounds", a.peer_rounds, 2), ("--peer-batches", a.peer_batches, 1),
                               ("--recbole-users", a.recbole_users, 1)):
        if value is not None and value < least:  # --peer-rounds: the first round is a warm-up, left out
            p.error(f"{flag} {value}: must be at least {least}")
    if a.tta_budget is not None and not (math.isfinite(a.tta_budget) and a.tta_budget > 0):
        p.error(f"--tta-budget {a.tta_budget:g}: must be a positive number of seconds")
    beauty = a.data_dir / "bsarec" / "Beauty.txt"
    if set(names) & (DATA_SECTIONS if a.quick else DATA_SECTIONS | FULL_DATA_SECTIONS) and not beauty.is_file():
        p.error(f"--data-dir {a.data_dir}: no bsarec/Beauty.txt in it (give raw data laid out like shared/data/raw)")
    results = a.results or (OUT / "RESULTS.quick.md" if a.quick else RESULTS)
    OUT.mkdir(parents=True, exist_ok=True)
    need = set(names)
    recbole = find_peer_python("recbole", a.recbole_python, a.setup_recbole) if {"recbole", "tta"} & need else None
    rectools = find_peer_python("rectools", a.rectools_python, a.setup_rectools) if {"rectools", "tta"} & need else None
    ctx = Context(a.quick, a.data_dir, OUT, recbole, a.threads, a.recbole_users, rectools, a.tta_epochs,
                  a.tta_budget, tta_libs, a.peer_rounds, a.peer_batches)
    status = 0
    for name in names:
        ctx.commands = []
        t0 = time.perf_counter()
        body = RUNNERS[name](ctx)
        command_line = "python benchmarks/run.py" + (" --quick" if a.quick else "") + f" --only {name}" + \
            (f" --threads {a.threads}" if a.threads else "") + \
            (f" --recbole-users {a.recbole_users}" if a.recbole_users and name in ("recbole", "rectools", "tta")
             else "") + \
            (f" --tta-budget {a.tta_budget:g}" if a.tta_budget is not None and name == "tta" else "") + \
            (f" --tta-libs {','.join(tta_libs) or shlex.quote('')}" if name == "tta" and tta_libs != TTA_LIBS
             else "") + \
            (f" --peer-rounds {a.peer_rounds} --peer-batches {a.peer_batches}"
             if name in ("recbole", "rectools") and (a.peer_rounds, a.peer_batches) != (8, 20) else "")
        section = render_section(name, body, ctx.commands, command_line, time.perf_counter() - t0)
        stored = results.read_text() if results.exists() else ""
        if FAILED in body and f"<!-- section:{name} -->" in stored:  # a failed run never replaces measured numbers
            aside = OUT / f"{name}.failed.md"
            aside.write_text(section + "\n")
            print(f"[bench] {name}: a measurement failed; {_rel(str(results))} keeps its stored section, this "
                  f"run's is in {_rel(str(aside))}", file=sys.stderr)
            status = 1
            continue
        results.parent.mkdir(parents=True, exist_ok=True)
        tmp = results.with_name(f".{results.name}.tmp")
        tmp.write_text(merge_results(results, {name: section}))
        tmp.replace(results)  # written after every section: a later failure keeps what was measured
        print(f"[bench] {name}: done in {time.perf_counter() - t0:.0f} s -> {_rel(str(results))}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
