"""Measurement tasks of the benchmark suite. Each task runs in a process of its own, so peak memory does not mix:

    python benchmarks/tasks.py TASK '{"json": "arguments"}'

prints one JSON line (the task's result) last on stdout. ``run.py`` starts these processes; the smoke test
calls the functions directly at micro sizes.

Memory: ``Phase`` resets the kernel's peak-RSS counter (``/proc/self/clear_refs`` 5, Linux >= 4.0) when a phase
starts and reads ``VmHWM`` when it ends, so a phase's peak excludes what data preparation touched before it;
``rss_before_mb`` is the resident size when the phase starts (Python, torch, data, model).
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from resdom.data.sequences import EvalSet, SplitData

# ------------------------------------------------------------------------------------------------- memory


def _status_mb(key: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def rss_mb() -> float:
    """Current resident set size in MiB."""
    v = _status_mb("VmRSS")
    return v if v is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def peak_rss_mb() -> float:
    """Peak resident set size since the last reset (VmHWM), in MiB; getrusage's lifetime peak elsewhere."""
    v = _status_mb("VmHWM")
    return v if v is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reset_peak() -> bool:
    """Reset the peak-RSS counter to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    hwm, rss = _status_mb("VmHWM"), _status_mb("VmRSS")  # some kernels accept the write and ignore it
    return hwm is not None and rss is not None and hwm - rss < 1.0


class Phase:
    """``with Phase() as p: ...`` -> p.seconds (wall), p.cpu_seconds (this process's CPU time, all its threads),
    p.rss_before_mb, p.peak_mb (peak RSS during the phase)."""

    def __enter__(self) -> Phase:
        self.exact = reset_peak()
        self.rss_before_mb = rss_mb()
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.cpu_seconds = time.process_time() - self.cpu0
        self.peak_mb = max(peak_rss_mb(), rss_mb())

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
                "rss_before_mb": round(self.rss_before_mb, 1), "peak_rss_mb": round(self.peak_mb, 1),
                "peak_is_phase_only": self.exact}


# ------------------------------------------------------------------------------- interleaved rounds (peers)


class Rounds:
    """The child's side of interleaved timing (``run.py``'s ``interleaved``): a library's own training loop runs
    ``batches`` batches per round, each round started by a ``round`` line on stdin (``stop`` or end of input
    ends it), and prints one JSON line per round: ``{"round": n, "seconds": s, "batches": k, "samples": m}``.

    The clock runs from the command to the end of the round's last training step, data loading included; the
    wait between rounds is not timed. Two ways in: ``wrap(iterable, size)`` around the batches a training loop
    iterates over (resdom, RecBole), or ``start()`` / ``batch_done(samples)`` from a callback (RecTools'
    Lightning). numpy/torch-free: the peers' venvs import it.
    """

    def __init__(self, batches: int, inp: Any = None, out: Any = None) -> None:
        self.batches, self.inp, self.out = int(batches), inp or sys.stdin, out or sys.stdout
        self.n = self.samples = self.round = 0
        self.t0: float | None = None
        self.stopped = False

    def ready(self, **info: Any) -> None:
        """Announce that preparation (data, model) is done: ``{"ready": true, ...info}``."""
        print(json.dumps({"ready": True, **info}, default=float), file=self.out, flush=True)

    def start(self) -> bool:
        """Wait (untimed) for the next command; True when a round starts, False (``stopped``) on stop / end."""
        line = self.inp.readline()
        if line.strip() != "round":
            self.stopped = True
            return False
        self.t0, self.n, self.samples = time.perf_counter(), 0, 0
        return True

    def batch_done(self, samples: int) -> bool:
        """After a training step of ``samples`` samples: ends the round after its last batch (printing its line)
        and waits for the next; False once stopped."""
        self.n += 1
        self.samples += int(samples)
        if self.n < self.batches:
            return True
        self.round += 1
        print(json.dumps({"round": self.round, "seconds": time.perf_counter() - self.t0, "batches": self.n,
                          "samples": self.samples}), file=self.out, flush=True)
        return self.start()

    def wrap(self, iterable: Any, size: Callable[[Any], int]) -> Any:
        """The batches of ``iterable`` (one epoch), served in rounds: yields until stopped or exhausted (the caller
        starts another epoch while not ``stopped``)."""
        if self.t0 is None and not self.start():
            return
        for batch in iterable:
            yield batch  # the caller's training step runs before the generator resumes
            if not self.batch_done(size(batch)):
                return


# --------------------------------------------------------------------------------------------------- data


def load_split(data: dict[str, Any]):
    """``{"source": "beauty", "data_dir": ...}`` (prepared as the CLI does) or ``{"synthetic": {knobs}}``
    (resdom.data.synthetic's generator, split leave-one-out directly: no preprocessing pass) -> SplitData."""
    from resdom.data.sequences import SplitData

    if "synthetic" in data:
        from resdom.data.splits import split_loo
        from resdom.data.synthetic import SyntheticConfig, generate

        cfg = SyntheticConfig(**data["synthetic"])
        parts = split_loo(generate(cfg))
        return SplitData(parts.train, parts.valid, parts.test, cfg.n_items, {"synthetic": cfg.model_dump()})
    from resdom.data.prepare import prepare_split

    return prepare_split(data["source"], protocol=data.get("protocol", "loo"), data_dir=data.get("data_dir"),
                         **data.get("options", {}))


def data_summary(split) -> dict[str, Any]:
    lengths = split.train.lengths
    return {"users": int(len(split.train)), "items": int(split.n_items), "train_interactions": int(lengths.sum()),
            "avg_train_len": round(float(lengths.mean()), 2) if len(lengths) else 0.0,
            "test_users": int(len(split.test))}


def set_threads(threads: int | None) -> int:
    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


# ----------------------------------------------------------------------------------------------- training


def make_configs(split, model: dict[str, Any], train: dict[str, Any]):
    from resdom.training.config import resolve_configs

    return resolve_configs(model.get("name", "sasrec"), {k: v for k, v in model.items() if k != "name"}, train,
                           n_items=split.n_items)


def train_epochs(split, model: dict[str, Any], train: dict[str, Any], epochs: int, device: str = "cpu",
                 after_epoch: Any = None, budget_s: float | None = None, save_dir: str | Path | None = None):
    """Train a fresh model for ``epochs`` epochs with the trainer's own epoch loop (``trainer._train_epoch``:
    the code ``resdom train`` runs, without its per-epoch validation) -> (model, per-epoch records, configs).
    The loop reads every batch's loss back (a device sync), so wall times are complete on CUDA too.
    ``after_epoch(epoch, model)`` (untimed) may return a dict, stored in the epoch's record as ``"after"``.
    ``budget_s``: stop after the epoch whose training seconds, summed, reach it (``within_budget``).
    ``save_dir``: the model saved after every epoch (untimed) as SAVE_DIR/epoch-K.safetensors (``save_model``)."""
    from resdom import distributed
    from resdom.models import build_model
    from resdom.training import trainer
    from resdom.training.batches import build_samples
    from resdom.training.objectives import get_objective

    model_cfg, train_cfg = make_configs(split, model, train)
    objective = get_objective(train_cfg.objective)
    torch.manual_seed(train_cfg.seed)
    net = build_model(model_cfg).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
    samples = build_samples(split.train, model_cfg.max_len, objective.layout)
    step = trainer.TrainStep(net, objective, trainer._loss_context(split, train_cfg, objective)).to(device)
    ctx = distributed.DistContext(device=torch.device(device))
    records = []
    for epoch in range(1, epochs + 1):
        with Phase() as ph:
            loss, n_seen, _ = trainer._train_epoch(step, optimizer, samples, split.n_items, model_cfg, train_cfg,
                                                   objective, epoch, ctx, False)
        positions = int((samples.end - samples.start).sum()) if objective.layout == "all" else len(samples)
        records.append({"epoch": epoch, "loss": round(loss, 5), "samples": n_seen,
                        "target_positions": positions, "samples_per_s": round(n_seen / ph.seconds, 1),
                        **ph.to_dict()})
        if save_dir is not None:
            save_model(net, model_cfg, Path(save_dir) / f"epoch-{epoch}.safetensors")
        if after_epoch is not None:
            extra = after_epoch(epoch, net)
            if extra is not None:
                records[-1]["after"] = extra
        report_epoch("resdom", records, budget_s)
        if not within_budget(records, budget_s):
            break
    return net, records, (model_cfg, train_cfg)


def report_epoch(library: str, records: list[dict[str, Any]], budget_s: float | None) -> None:
    """A progress line on stderr after each timed epoch (benchmarks/run.py passes lines starting with "[progress]"
    on to its own stderr, so a run of hours shows where it is)."""
    spent = sum(r["seconds"] for r in records)
    of = f" of {budget_s:g}" if budget_s is not None else ""
    print(f"[progress] {library} epoch {records[-1]['epoch']}: {spent:.0f}{of} training s", file=sys.stderr,
          flush=True)


def within_budget(records: list[dict[str, Any]], budget_s: float | None) -> bool:
    """Whether another epoch may start: no budget, or the epochs' summed training seconds (``"seconds"`` of each
    record; validation untimed) are still below it. The same rule in resdom's, RecBole's and RecTools' loops."""
    return budget_s is None or sum(r["seconds"] for r in records) < budget_s


def save_model(net, model_cfg, path: str | Path) -> None:
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in net.state_dict().items()}, str(path))
    path.with_suffix(".json").write_text(json.dumps(model_cfg.model_dump()))


def load_model(path: str | Path):
    from safetensors.torch import load_file

    from resdom.models import build_model, read_model_config

    path = Path(path)
    net = build_model(read_model_config(json.loads(path.with_suffix(".json").read_text())))
    net.load_state_dict(load_file(str(path)))
    return net.eval()


def model_for(split, args: dict[str, Any]):
    """The saved model ``args["model_path"]``, or a fresh (seeded, untrained) one from ``args["model"]``."""
    if args.get("model_path"):
        return load_model(args["model_path"])
    from resdom.models import build_model

    model_cfg, _ = make_configs(split, args.get("model", {}), {})
    torch.manual_seed(0)
    return build_model(model_cfg).eval()


def test_metrics(net, split, batch_size: int = 256) -> dict[str, Any]:
    from resdom.evaluation.evaluate import evaluate

    with Phase() as ph:
        res = evaluate(net, split.test, filter_seen=True, batch_size=batch_size)
    return {**res.to_dict(), **ph.to_dict()}


def valid_metrics(net, split, batch_size: int = 256) -> dict[str, Any]:
    from resdom.evaluation.evaluate import evaluate

    with Phase() as ph:
        res = evaluate(net, split.valid, filter_seen=True, batch_size=batch_size)
    return {**res.to_dict(), **ph.to_dict()}


def task_train(args: dict[str, Any]) -> dict[str, Any]:
    """Train ``epochs`` epochs; optionally the test metrics after them and the model saved for later tasks.
    ``evaluate``: ``"each_epoch"`` test metrics after every epoch, ``"valid_each_epoch"`` validation metrics
    after every epoch (both untimed, in the epoch's record under ``"after"``), anything else true: test at the end."""
    threads = set_threads(args.get("threads"))
    split = load_split(args["data"])
    each = args.get("evaluate") == "each_epoch"  # test metrics after every epoch (untimed)
    valid = args.get("evaluate") == "valid_each_epoch"
    after = (lambda epoch, net: {"test": test_metrics(net, split)}) if each else (
        (lambda epoch, net: {"valid": valid_metrics(net, split)}) if valid else None)
    net, records, (model_cfg, train_cfg) = train_epochs(
        split, args.get("model", {}), args.get("train", {}), int(args.get("epochs", 1)), after_epoch=after,
        budget_s=args.get("budget_s"), save_dir=args.get("save_dir"))
    out: dict[str, Any] = {"data": data_summary(split), "threads": threads, "epochs": records,
                           "objective": train_cfg.objective, "model": model_cfg.model_dump(),
                           "params": sum(p.numel() for p in net.parameters())}
    if args.get("evaluate"):
        out["test"] = records[-1]["after"]["test"] if each else test_metrics(net, split)
    if args.get("save"):
        save_model(net, model_cfg, args["save"])
    out["process_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    return out


# --------------------------------------------------------------------------------------------- evaluation


def naive_ranks(net, evalset, batch_size: int = 256) -> torch.Tensor:
    """The textbook full ranking: score every item, drop seen ones, argsort all scores of each user, find the
    target's position. Same user chunks and seen-item rule as resdom's evaluation; ties broken by item id."""
    from resdom.evaluation.batches import iter_eval_batches
    from resdom.evaluation.ranking import user_chunk_size

    emb = net.item_embeddings()
    chunk = user_chunk_size(net.n_items, batch_size)
    history = max(1, int(evalset.inputs.lengths.max(initial=1)))
    out = []
    with torch.no_grad():
        for idx, items, targets in iter_eval_batches(evalset, net.max_len, chunk):
            scores = net.encode(items)[:, -1] @ emb.T
            scores[:, 0] = -math.inf
            scores.scatter_(1, torch.from_numpy(evalset.inputs.padded(history, idx)), -math.inf)
            order = torch.argsort(scores, dim=1, descending=True, stable=True)
            out.append((order == targets[:, None]).int().argmax(1))
    return torch.cat(out)


def first_test_users(split: SplitData, n: int | None) -> EvalSet:
    """The test set, cut to its first ``n`` users when ``n`` is given."""
    from resdom.data.sequences import EvalSet

    if not n:
        return split.test
    keep = np.arange(min(len(split.test), n))
    return EvalSet(split.test.inputs.take(keep), split.test.targets[keep])


def task_eval(args: dict[str, Any]) -> dict[str, Any]:
    """Users/s of resdom's full-ranking evaluation (``impl="resdom"``) or the naive full sort (``"naive"``)."""
    from resdom.evaluation.evaluate import evaluate
    from resdom.evaluation.ranking import metrics_from_ranks

    threads = set_threads(args.get("threads"))
    split = load_split(args["data"])
    evalset = first_test_users(split, args.get("max_users"))
    net = model_for(split, args)
    impl = args.get("impl", "resdom")
    with Phase() as ph:
        if impl == "resdom":
            res = evaluate(net, evalset, filter_seen=True, batch_size=args.get("batch_size", 256))
            metrics = res.metrics
        elif impl == "naive":
            metrics = metrics_from_ranks(naive_ranks(net, evalset, args.get("batch_size", 256)))
        else:
            raise ValueError(f"unknown impl {impl!r}")
    return {"impl": impl, "threads": threads, "users": len(evalset), "items": split.n_items,
            "users_per_s": round(len(evalset) / ph.seconds, 1), "metrics": metrics, **ph.to_dict()}


# ------------------------------------------------------------------------------------------------- mixing


def task_mixing(args: dict[str, Any]) -> dict[str, Any]:
    """A plain forward pass over the test inputs (``what="forward"``) or the mixing ratio (``norm_of_sums`` /
    ``sum_of_norms``), with the diagnostics' own batches."""
    from resdom.diagnostics.common import batches, inference
    from resdom.diagnostics.mixing import mixing_ratios

    threads = set_threads(args.get("threads"))
    split = load_split(args["data"])
    evalset = first_test_users(split, args.get("max_users"))
    net = model_for(split, args)
    what, bs = args.get("what", "forward"), args.get("batch_size", 256)

    def one(kind: str) -> dict[str, Any] | None:
        if kind == "forward":
            with inference(net):
                for _, items, _ in batches(net, evalset, bs):
                    net.encode(items)
            return None
        return mixing_ratios(net, evalset, definition=kind, batch_size=bs).pooled

    info = {"what": what, "threads": threads, "users": len(evalset), "items": split.n_items}
    if what == "timing":  # interleaved rounds, the fastest of each: a busy machine slows all three alike
        kinds, best = ("forward", "norm_of_sums", "sum_of_norms"), {}
        for _ in range(args.get("rounds", 3)):
            for kind in kinds:
                t0 = time.perf_counter()
                one(kind)
                best[kind] = min(best.get(kind, math.inf), time.perf_counter() - t0)
        return {**info, "rounds": args.get("rounds", 3), "seconds": {k: round(v, 3) for k, v in best.items()}}
    with Phase() as ph:
        pooled = one(what)
    return {**info, "users_per_s": round(len(evalset) / ph.seconds, 1), "pooled": pooled, **ph.to_dict()}


def fastest_of(fns: dict[str, Callable[[], Any]], rounds: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Each of ``fns`` ``rounds`` times, interleaved, the order reversed every other round (a load that comes and
    goes slows all alike) -> (the fastest seconds of each, the last result of each)."""
    best: dict[str, float] = {}
    out: dict[str, Any] = {}
    for n in range(rounds):
        for name in (list(fns) if n % 2 == 0 else list(fns)[::-1]):
            t0 = time.perf_counter()
            out[name] = fns[name]()
            best[name] = min(best.get(name, math.inf), time.perf_counter() - t0)
    return best, out


def task_last_columns(args: dict[str, Any]) -> dict[str, Any]:
    """Training steps and evaluation passes with the final block's queries at the columns read (``encode(items,
    last=k)``, what the trainer and evaluation use) against the same model made to encode every column: the
    fastest of interleaved rounds of the same real batches, and the largest difference of the evaluated states
    (the training losses differ by their dropout draws; their equality without dropout is a unit test)."""
    from resdom import distributed
    from resdom.diagnostics.common import batches, inference
    from resdom.models import build_model
    from resdom.models.interface import final_states
    from resdom.training import trainer
    from resdom.training.batches import build_samples, epoch_order, iter_batches, same_target_partners
    from resdom.training.config import resolve_configs
    from resdom.training.objectives import get_objective

    threads = set_threads(args.get("threads"))
    data = args["data"]
    split = load_split(data)
    model_cfg, train_cfg = resolve_configs(args["model"], {}, {}, source=data.get("source"), n_items=split.n_items,
                                           protocol=data.get("protocol"))
    objective = get_objective(train_cfg.objective)
    torch.manual_seed(0)
    net = build_model(model_cfg)
    samples = build_samples(split.train, model_cfg.max_len, objective.layout)
    rng = np.random.default_rng(0)
    partners = same_target_partners(samples.last_targets, rng) if net.needs_partners() else None
    groups = train_cfg.length_groups if objective.name in ("ce_all", "ce_last") and net.exact_length_groups() else 1
    net.encode_groups = 1 if groups > 1 else train_cfg.length_groups
    order = epoch_order(len(samples), rng)[: args.get("steps", 6) * train_cfg.batch_size]
    train_batches = list(iter_batches(samples, order, train_cfg.batch_size, n_items=split.n_items, groups=groups,
                                      partners=partners))
    step = trainer.TrainStep(net, objective, trainer._loss_context(split, train_cfg, objective))
    ctx = distributed.DistContext(device=torch.device("cpu"))
    evalset = first_test_users(split, args.get("eval_users", 1024))
    encode = net.encode

    def set_full(full: bool) -> None:
        net.encode = (lambda items, last=0: encode(items)) if full else encode

    def train_pass() -> None:  # gradients only, no update: both modes see the same weights
        net.train()
        for parts in train_batches:
            net.zero_grad(set_to_none=True)
            trainer.backward_groups(step, parts, ctx)

    def eval_pass() -> torch.Tensor:
        with inference(net):
            return torch.cat([final_states(net, items) for _, items, _ in batches(net, evalset, 256)])

    def in_mode(full: bool, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            set_full(full)
            return fn()

        return run

    best, out = fastest_of({"train_last": in_mode(False, train_pass), "eval_last": in_mode(False, eval_pass),
                            "train_full": in_mode(True, train_pass), "eval_full": in_mode(True, eval_pass)},
                           args.get("rounds", 3))
    set_full(False)
    dstate = float((out["eval_last"] - out["eval_full"]).abs().max())
    return {"threads": threads, "model": args["model"], "objective": objective.name, "max_len": model_cfg.max_len,
            "steps": len(train_batches), "batch_size": train_cfg.batch_size, "eval_users": len(evalset),
            "seconds": {k: round(v, 3) for k, v in best.items()}, "max_state_diff": dstate}


def task_cross_entropy(args: dict[str, Any]) -> dict[str, Any]:
    """The full-softmax CE of ``P`` states against ``N`` items (d ``d``), forward and backward: ``F.cross_entropy``
    of the score product against resdom's ``full_cross_entropy`` (blocks of rows, no (P, N) tensor kept), the
    fastest of interleaved rounds, and the largest differences of loss and gradients."""
    import torch.nn.functional as F

    from resdom.training.objectives import full_cross_entropy

    threads = set_threads(args.get("threads"))
    P, N, d = int(args["P"]), int(args["N"]), int(args.get("d", 64))
    g = torch.Generator().manual_seed(0)
    h0, emb0 = torch.randn(P, d, generator=g) * 0.3, torch.randn(N, d, generator=g) * 0.3
    targets = torch.randint(1, N + 1, (P,), generator=g)
    def backward_of(loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], tuple]:
        h, e = h0.clone().requires_grad_(), emb0.clone().requires_grad_()

        def run() -> tuple:
            h.grad = e.grad = None
            loss = loss_fn(h, e)
            loss.backward()
            return float(loss.detach()), h.grad, e.grad

        return run

    best, out = fastest_of({"torch": backward_of(lambda h, e: F.cross_entropy(h @ e.T, targets - 1)),
                            "resdom": backward_of(lambda h, e: full_cross_entropy(h, e, targets))},
                           args.get("rounds", 5))
    (lt, ht, et), (lr, hr, er) = out["torch"], out["resdom"]
    return {"threads": threads, "P": P, "N": N, "d": d, "seconds": {k: round(v, 4) for k, v in best.items()},
            "loss_diff": abs(lt - lr), "grad_diff": max(float((ht - hr).abs().max()), float((et - er).abs().max()))}


def sorted_top(scores: torch.Tensor, k: int) -> np.ndarray:
    """``evaluation.beyond.ordered_top`` as it was before 2026-12-08: a stable descending sort of every whole row."""
    k = min(k, scores.shape[1])
    values, order = torch.sort(scores, dim=1, descending=True, stable=True)
    items = order[:, :k].cpu().numpy().astype(np.int64)
    items[~torch.isfinite(values[:, :k]).cpu().numpy()] = 0
    return items


def top_k_every_row(scores: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``evaluation.beyond.top_k`` (then ``recommend.top_k``) as it was before 2026-12-08: the tie rule's cumulative
    sum over every whole row."""
    k = min(k, scores.shape[1])
    kth = torch.topk(scores, k, dim=1).values[:, -1:]
    above = scores > kth
    tied = (scores == kth) & torch.isfinite(scores)
    room = k - above.sum(1, keepdim=True, dtype=torch.int32)
    cand = above | (tied & (torch.cumsum(tied, 1, dtype=torch.int32) <= room))
    rows, items = (t.cpu().numpy() for t in torch.nonzero(cand, as_tuple=True))
    values = scores[cand].cpu().numpy().astype(np.float64)
    order = np.lexsort((items, -values, rows))
    rows, items, values = rows[order], items[order], values[order]
    keep = (np.arange(len(rows)) - np.searchsorted(rows, rows, side="left")) < k
    return rows[keep], items[keep], values[keep]


def ranks_bool(scores: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """``evaluation.ranking.pessimistic_ranks`` as it was before 2026-12-08: one (B, k, N+1) bool compare."""
    from resdom.evaluation.ranking import MISS

    flat = items.dim() == 1
    cols = items[:, None] if flat else items
    own = scores.gather(1, cols)
    ranks = (scores[:, None, :] >= own[:, :, None]).sum(-1, dtype=torch.int32).to(torch.int64) - 1
    ranks = torch.where(own == -math.inf, torch.full_like(ranks, MISS), ranks)
    return ranks[:, 0] if flat else ranks


def task_top_lists(args: dict[str, Any]) -> dict[str, Any]:
    """Top-K lists without a sort of whole rows, against the code they replace, the fastest of interleaved rounds
    in one process. ``what="kernel"``: ``ordered_top`` and ``top_k`` of a (``B``, ``N`` + 1) score matrix (random
    normal scores, column 0 -inf, ``seen`` random items a row at -inf; ``ties``: integer scores 0..4, so every
    row ties at the K-th score) against ``sorted_top`` and ``top_k_every_row``; ``what="shuffle"``: the whole
    position-shuffle diagnostic (every mode, ``seeds``) of a seeded untrained model on the test users, with
    ``sorted_top`` patched back in as the old side; ``what="alpha"``: the alpha sweep at ``alphas`` likewise, with
    ``ranks_bool`` patched back in. Each says whether the old and new outputs are equal."""
    threads = set_threads(args.get("threads"))
    rounds = int(args.get("rounds", 5))
    if args.get("what", "kernel") == "kernel":
        from resdom.evaluation.beyond import ordered_top, top_k
        from resdom.evaluation.ranking import pessimistic_ranks

        B, N, k, seen = int(args.get("B", 256)), int(args["N"]), int(args.get("k", 10)), int(args.get("seen", 50))
        g = torch.Generator().manual_seed(0)
        if args.get("ties"):
            scores = torch.randint(0, 5, (B, N + 1), generator=g).float()
        else:
            scores = torch.randn(B, 64, generator=g) @ torch.randn(N + 1, 64, generator=g).T
        scores[:, 0] = -math.inf
        scores.scatter_(1, torch.randint(1, N + 1, (B, seen), generator=g), -math.inf)
        one = torch.randint(1, N + 1, (B,), generator=g)
        three = torch.randint(1, N + 1, (B, 3), generator=g)
        best, out = fastest_of({"sorted_top": lambda: sorted_top(scores, k),
                                "ordered_top": lambda: ordered_top(scores, k),
                                "top_k_every_row": lambda: top_k_every_row(scores, k),
                                "top_k": lambda: top_k(scores, k),
                                "ranks_bool_1": lambda: ranks_bool(scores, one),
                                "pessimistic_ranks_1": lambda: pessimistic_ranks(scores, one),
                                "ranks_bool_3": lambda: ranks_bool(scores, three),
                                "pessimistic_ranks_3": lambda: pessimistic_ranks(scores, three)}, rounds)
        same = bool(np.array_equal(out["sorted_top"], out["ordered_top"])) and all(
            np.array_equal(a, b) for a, b in zip(out["top_k_every_row"], out["top_k"])) and all(
            torch.equal(out[f"ranks_bool_{j}"], out[f"pessimistic_ranks_{j}"]) for j in (1, 3))
        return {"threads": threads, "B": B, "N": N, "k": k, "ties": bool(args.get("ties")),
                "seconds": {name: round(v, 5) for name, v in best.items()}, "same": same}
    from resdom.diagnostics import common, shuffle
    from resdom.diagnostics.alpha import alpha_sweep

    split = load_split(args["data"])
    evalset = first_test_users(split, args.get("max_users"))
    net = model_for(split, args)
    if args["what"] == "alpha":
        alphas, fast = [float(a) for a in args.get("alphas", (1.0, 0.5))], common.pessimistic_ranks

        def sweep(ranks: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], Any]:
            def go() -> Any:
                common.pessimistic_ranks = ranks
                try:
                    res = alpha_sweep(net, evalset, alphas=alphas, filter_seen=True)
                    return res.to_dict(), res.user_ranks
                finally:
                    common.pessimistic_ranks = fast

            return go

        best, out = fastest_of({"ranks_bool": sweep(ranks_bool), "pessimistic_ranks": sweep(fast)}, rounds)
        (d_old, u_old), (d_new, u_new) = out["ranks_bool"], out["pessimistic_ranks"]
        same = d_old == d_new and all(np.array_equal(u_old[a][key], u_new[a][key]) for a in u_new for key in u_new[a])
        return {"threads": threads, "users": len(evalset), "items": split.n_items, "alphas": alphas,
                "seconds": {name: round(v, 3) for name, v in best.items()}, "same": same}
    seeds = tuple(args.get("seeds", (0,)))
    new = shuffle.ordered_top

    def run(top: Callable[[torch.Tensor, int], np.ndarray]) -> Callable[[], dict[str, Any]]:
        def go() -> dict[str, Any]:
            shuffle.ordered_top = top
            try:
                return shuffle.position_shuffle(net, evalset, seeds=seeds, filter_seen=True).to_dict()
            finally:
                shuffle.ordered_top = new

        return go

    best, out = fastest_of({"sorted_top": run(sorted_top), "ordered_top": run(new)}, rounds)
    return {"threads": threads, "users": len(evalset), "items": split.n_items, "seeds": list(seeds),
            "seconds": {name: round(v, 3) for name, v in best.items()}, "same": out["sorted_top"] == out["ordered_top"]}


# ------------------------------------------------------------------------------------ interleaved peers


def task_train_rounds(args: dict[str, Any]) -> dict[str, Any]:
    """resdom's side of the interleaved peer timing: the trainer's own epoch loop (``trainer._train_epoch``, the
    code ``resdom train`` runs) with its batches served in rounds of ``batches`` (``Rounds``, protocol on
    stdin/stdout); epochs follow each other until the parent says stop."""
    from resdom import distributed
    from resdom.models import build_model
    from resdom.training import trainer
    from resdom.training.batches import build_samples
    from resdom.training.objectives import get_objective

    threads = set_threads(args.get("threads"))
    split = load_split(args["data"])
    model_cfg, train_cfg = make_configs(split, args.get("model", {}), args.get("train", {}))
    objective = get_objective(train_cfg.objective)
    torch.manual_seed(train_cfg.seed)
    net = build_model(model_cfg)
    optimizer = torch.optim.Adam(net.parameters(), lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
    samples = build_samples(split.train, model_cfg.max_len, objective.layout)
    step = trainer.TrainStep(net, objective, trainer._loss_context(split, train_cfg, objective))
    ctx = distributed.DistContext(device=torch.device("cpu"))
    rounds = Rounds(args["batches"])
    real = trainer.iter_batches
    trainer.iter_batches = lambda *a, **k: rounds.wrap(real(*a, **k), lambda parts: sum(len(p.items) for p in parts))
    rounds.ready(library="resdom", threads=threads, params=sum(p.numel() for p in net.parameters()),
                 objective=objective.name, samples_per_epoch=len(samples), data=data_summary(split))
    epoch = 0
    try:
        while not rounds.stopped:
            epoch += 1
            trainer._train_epoch(step, optimizer, samples, split.n_items, model_cfg, train_cfg, objective, epoch,
                                 ctx, False)
    finally:
        trainer.iter_batches = real
    return {"done": True, "rounds": rounds.round, "epochs_started": epoch}


# ----------------------------------------------------------------------------------------- share of peak


def matmul_peak(n: int = 2048, rounds: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """GFLOP/s of the fastest of ``rounds`` float32 (n x n) @ (n x n) products (2 n^3 FLOPs) on torch's threads,
    timed by ``clock`` (wall time; ``time.process_time``: the CPU time this process got)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    best = math.inf
    for _ in range(rounds):
        t0 = clock()
        a @ b
        best = min(best, clock() - t0)
    return 2 * n**3 / best / 1e9


def _cpu_sdpa_flops(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """The CPU fused attention kernel's FLOPs (torch's FlopCounterMode has formulas for the CUDA kernels only):
    the two products QK^T and AV, 4 B H Lq Lk dh, halved for ``is_causal`` (the kernel skips the future keys)."""
    from torch.utils.flop_counter import sdpa_flop_count

    causal = bool(args[1]) if len(args) > 1 else bool(kwargs.get("is_causal", False))
    flops = sdpa_flop_count(query, key, value)
    return flops // 2 if causal else flops


def _cpu_sdpa_backward_flops(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None,
                             **kwargs: Any) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    causal = bool(args[3]) if len(args) > 3 else bool(kwargs.get("is_causal", False))
    flops = sdpa_backward_flop_count(grad_out, query, key, value)
    return flops // 2 if causal else flops


def counted_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of the matrix products (and attention) ``fn()`` runs, by torch's FlopCounterMode (elementwise work,
    softmax, LayerNorm, the optimizer not counted): what a share of the matmul peak is computed from."""
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward_flops}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        fn()
    return int(counter.get_total_flops())


def _training_pass(data: dict[str, Any], model: dict[str, Any], train: dict[str, Any], steps: int
                   ) -> Callable[[], None]:
    """``steps`` training steps of the trainer's own batches (length groups, as ``_train_epoch``): zero_grad,
    ``backward_groups``, Adam's step; the same batches every call."""
    from resdom import distributed
    from resdom.models import build_model
    from resdom.training import trainer
    from resdom.training.batches import build_samples, epoch_order, iter_batches
    from resdom.training.objectives import get_objective

    split = load_split(data)
    model_cfg, train_cfg = make_configs(split, model, train)
    objective = get_objective(train_cfg.objective)
    torch.manual_seed(0)
    net = build_model(model_cfg)
    samples = build_samples(split.train, model_cfg.max_len, objective.layout)
    exact = objective.name in ("ce_all", "ce_last", "bce") and net.exact_length_groups()
    groups = train_cfg.length_groups if exact else 1
    net.encode_groups = 1 if exact else train_cfg.length_groups
    order = epoch_order(len(samples), np.random.default_rng(0))[: steps * train_cfg.batch_size]
    batches = list(iter_batches(samples, order, train_cfg.batch_size, n_items=split.n_items, groups=groups))
    step = trainer.TrainStep(net, objective, trainer._loss_context(split, train_cfg, objective))
    optimizer = torch.optim.Adam(net.parameters(), lr=train_cfg.lr)
    ctx = distributed.DistContext(device=torch.device("cpu"))
    step.train()

    def run() -> None:
        for parts in batches:
            optimizer.zero_grad(set_to_none=True)
            trainer.backward_groups(step, parts, ctx)
            optimizer.step()

    return run


def _ranking_pass(n_items: int, users: int, d: int = 64, seen: int = 50) -> Callable[[], None]:
    """Full ranking of ``users`` random states against ``n_items`` random items (``tiled_ranks``, seen items
    filtered), in evaluation's user chunks."""
    from resdom.evaluation.ranking import tiled_chunk_size, tiled_ranks

    g = torch.Generator().manual_seed(n_items)
    emb = torch.randn(n_items + 1, d, generator=g) * 0.1
    hidden = torch.randn(users, d, generator=g)
    targets = torch.randint(1, n_items + 1, (users,), generator=g)
    history = torch.randint(0, n_items + 1, (users, seen), generator=g)
    chunk = tiled_chunk_size(n_items, 256)

    def run() -> None:
        for s in range(0, users, chunk):
            tiled_ranks(hidden[s : s + chunk], emb, targets[s : s + chunk], history[s : s + chunk])

    return run


def _forward_and_mixing(data: dict[str, Any], max_len: int, max_users: int | None
                        ) -> dict[str, Callable[[], Any]]:
    """A plain forward pass over the test inputs (the diagnostics' batches) and the norm-of-sums mixing ratio."""
    from resdom.diagnostics.common import batches, inference
    from resdom.diagnostics.mixing import mixing_ratios

    split = load_split(data)
    evalset = first_test_users(split, max_users)
    net = model_for(split, {"model": {"max_len": max_len, "inner_size": 256}})

    def forward() -> None:
        with inference(net):
            for _, items, _ in batches(net, evalset, 256):
                net.encode(items)

    return {"forward": forward, "mixing": lambda: mixing_ratios(net, evalset, batch_size=256)}


def task_peak(args: dict[str, Any]) -> dict[str, Any]:
    """Share of the single-thread matmul peak of resdom's hot paths, in one process: the 2048^3 matmul's GFLOP/s
    (before and after the paths; the faster is the peak), then for each path the FLOPs of its matrix products
    (``counted_flops``, one untimed pass) over the fastest of interleaved rounds: a training step, full ranking at
    12k and 1M items (a tiny catalogue with ``quick``), evaluation (encoding and ranking), and the forward pass
    against the norm-of-sums mixing ratio at max length 50 and 200."""
    threads = set_threads(args.get("threads", 1))
    quick, rounds = bool(args.get("quick")), int(args.get("rounds", 5))
    peak_start = matmul_peak(rounds=rounds)
    train_data = args.get("train_data") or {"synthetic": {"n_users": 600 if quick else 6000, "n_items": 2000,
                                                          "min_len": 3, "max_len": 53, "n_clusters": 20}}
    train_model = {"max_len": 50, "hidden": 64, "layers": 2, "heads": 2, "inner_size": 256, "dropout": 0.5,
                   "attn_dropout": 0.5}
    big = 20_000 if quick else 1_000_000
    paths: dict[str, Callable[[], Any]] = {
        "training step (SASRec ce_all)": _training_pass(train_data, train_model,
                                                         {"objective": "ce_all", "batch_size": 256},
                                                         2 if quick else 20),
        "full ranking, 12,101 items": _ranking_pass(12_101, 256 if quick else 4096),
        f"full ranking, {big:,} items": _ranking_pass(big, 64 if quick else 512),
    }
    eval_data = {"synthetic": {"n_users": 300 if quick else 4000, "n_items": 12_101, "min_len": 3, "max_len": 53,
                               "n_clusters": 20}}
    split = load_split(eval_data)
    eval_net = model_for(split, {"model": {"max_len": 50, "inner_size": 256}})
    from resdom.evaluation.evaluate import evaluate

    paths["evaluation (encode and rank), 12,101 items"] = lambda: evaluate(eval_net, split.test, batch_size=256)
    for L in (50, 200):
        users = 200 if quick else 2000
        data = {"synthetic": {"n_users": users, "n_items": 2000, "min_len": max(3, L // 4), "max_len": L + 3,
                              "n_clusters": 20}}
        pair = _forward_and_mixing(data, L, None)
        paths[f"forward, max len {L}"], paths[f"mixing (norm of sums), max len {L}"] = pair["forward"], pair["mixing"]
    flops = {name: counted_flops(fn) for name, fn in paths.items()}
    best, cpu = {}, {}  # the fastest wall time and the least CPU time of each, over interleaved rounds
    for n in range(rounds):
        for name in (list(paths) if n % 2 == 0 else list(paths)[::-1]):
            t0, c0 = time.perf_counter(), time.process_time()
            paths[name]()
            best[name] = min(best.get(name, math.inf), time.perf_counter() - t0)
            cpu[name] = min(cpu.get(name, math.inf), time.process_time() - c0)
    peak_end = matmul_peak(rounds=rounds)
    peak = max(peak_start, peak_end)
    cpu_peak = matmul_peak(rounds=rounds, clock=time.process_time)
    out = {name: {"seconds": round(best[name], 4), "gflop": round(flops[name] / 1e9, 3),
                  "gflops": round(flops[name] / best[name] / 1e9, 2),
                  "share_of_peak": round(flops[name] / best[name] / 1e9 / peak, 4),
                  "cpu_seconds": round(cpu[name], 4),
                  "cpu_share_of_peak": round(flops[name] / cpu[name] / 1e9 / cpu_peak, 4)} for name in paths}
    mixing = {L: round(best[f"mixing (norm of sums), max len {L}"] / best[f"forward, max len {L}"], 3)
              for L in (50, 200)}
    mixing_cpu = {L: round(cpu[f"mixing (norm of sums), max len {L}"] / cpu[f"forward, max len {L}"], 3)
                  for L in (50, 200)}
    return {"threads": threads, "quick": quick, "rounds": rounds,
            "peak_gflops": {"start": round(peak_start, 2), "end": round(peak_end, 2), "peak": round(peak, 2),
                            "cpu_time": round(cpu_peak, 2)},
            "paths": out, "mixing_vs_forward": mixing, "mixing_vs_forward_cpu": mixing_cpu,
            "load_average": list(os.getloadavg())}


# -------------------------------------------------------------------------------------------- distributed


def task_eval_run(args: dict[str, Any]) -> dict[str, Any]:
    """Evaluate a run directory's best model on its test split (one process, or each rank under torchrun with
    the process group joined: users sharded and gathered). Returns metrics and a digest of every rank."""
    import hashlib

    from resdom import distributed
    from resdom.evaluation.evaluate import evaluate
    from resdom.runs import load_run

    set_threads(args.get("threads"))
    ctx = distributed.setup("cpu")
    try:
        run = load_run(args["run_dir"])
        res = evaluate(run.model, run.split.test, filter_seen=True, batch_size=args.get("batch_size", 64),
                       return_ranks=True)
        digest = hashlib.sha256(np.ascontiguousarray(res.ranks, dtype=np.int64).tobytes()).hexdigest()[:16]
        return {"rank": ctx.rank, "world_size": ctx.world_size, **res.to_dict(), "ranks_sha256_16": digest}
    finally:
        ctx.close()


# ------------------------------------------------------------------------------- time to accuracy: scoring


def in_model_ids(evalset, common: np.ndarray, labels: np.ndarray, max_len: int):
    """``evalset`` (item ids of the split whose raw ids are ``common``) in a model's item ids (``labels``: raw id of
    each of its item ids) -> (that EvalSet, how many of its targets the model has no row for). Such a target (an
    item the model never saw in training) becomes 0, the padding id, which the evaluator never ranks: a miss; the
    model ranks its own items, as its library does. An input item the model lacks cannot be one of its candidates
    and is dropped from the seen items; one among the last ``max_len`` items of an input (the window the model
    reads) is a ValueError: the model would read another sequence than the split's."""
    from resdom.adapters.common import _keys, integer_ids
    from resdom.data.sequences import EvalSet, Sequences

    numeric = integer_ids(labels[1:])  # as the importers match: text exactly, or integers by value
    row = {key: k for k, key in enumerate(_keys(labels[1:], numeric), start=1)}
    to_model = np.array([0] + [row.get(key, 0) for key in _keys(common[1:], numeric)], dtype=np.int64)
    items = to_model[evalset.inputs.items]
    ends = np.repeat(evalset.inputs.offsets[1:], evalset.inputs.lengths)
    read = ends - np.arange(len(items)) <= max_len  # within the last max_len items of its sequence
    if (read & (items == 0)).any():
        raw = common[evalset.inputs.items[np.flatnonzero(read & (items == 0))[0]]]
        raise ValueError(f"the model has no row for item {raw!r}, within the window of a validation input")
    keep = items > 0
    n = len(evalset.inputs)
    counts = np.bincount(np.repeat(np.arange(n), evalset.inputs.lengths)[keep], minlength=n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    times = None if evalset.inputs.times is None else evalset.inputs.times[keep]
    targets = to_model[evalset.targets]
    return EvalSet(Sequences(offsets, items[keep], times, evalset.inputs.users), targets), int((targets == 0).sum())


def imported_model(library: str, path: str, source: str, data_dir: str | None, tmp: Path):
    """The checkpoint ``path`` of ``library`` as a resdom model and the raw item id of each of its item ids:
    resdom's own file read directly; RecBole's and RecTools' imported by resdom's importers into a run directory
    (``resdom import-recbole`` / ``import-rectools``), then read back as any run."""
    from resdom.runs import load_run

    if library == "resdom":
        return load_model(path), None
    out = tmp / Path(path).stem
    if library == "RecBole":
        from resdom.adapters.recbole import import_recbole

        import_recbole(path, source, out, data_dir=data_dir)
    elif library == "RecTools":
        from resdom.adapters.rectools import import_rectools

        import_rectools(path, source, out, data_dir=data_dir)
    else:
        raise ValueError(f"unknown library {library!r}")
    run = load_run(out)
    return run.model.eval(), run.split.item_labels


def task_score(args: dict[str, Any]) -> dict[str, Any]:
    """Validation metrics of every checkpoint in ``checkpoints`` (files of ``library``: resdom, RecBole or RecTools)
    by one evaluator: resdom's full ranking of ``data``'s validation users (the split resdom trains on), the input's
    items filtered. ``source``: what the peer's importer reads as the training data (RecBole's .inter file, the
    interactions RecTools was fitted on). ``unfiltered``: the same without the seen-item filter too (RecBole's own
    metric does not filter: equal numbers show the import exact). The split's validation set is put in each
    model's item ids by raw id (``in_model_ids``), so each model ranks its own items with its own weights."""
    import tempfile

    from resdom.evaluation.evaluate import evaluate

    set_threads(args.get("threads"))
    split = load_split(args["data"])
    common = np.asarray(split.item_labels, dtype=object)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in args["checkpoints"]:
            with Phase() as ph:
                model, labels = imported_model(args["library"], path, args.get("source", ""), args.get("data_dir"),
                                               Path(tmp))
                valid, unknown = (split.valid, 0) if labels is None else \
                    in_model_ids(split.valid, common, labels, model.max_len)
                res = evaluate(model, valid, filter_seen=True)
                bare = evaluate(model, valid, filter_seen=False) if args.get("unfiltered") else None
            out.append({"checkpoint": path, "n_users": res.n_users, "model_items": model.n_items,
                        "unknown_targets": unknown, "metrics": res.metrics,
                        **({"unfiltered": bare.metrics} if bare else {}), **ph.to_dict()})
            print(f"[progress] scored {path}: NDCG@10 {res.metrics['NDCG@10']:.4f}", file=sys.stderr, flush=True)
    return {"library": args["library"], "scores": out}


# ------------------------------------------------------------------------------------------------- output


def task_output(args: dict[str, Any]) -> dict[str, Any]:
    """Peak memory of writing ``resdom recommend`` / ``resdom similar``'s CSV (``what``) for every user (item) at
    ``k``: ``impl="whole"`` the whole table and its text at once (what the commands did before: ``recommend()``'s
    frame, ``csv_text``, ``atomic_write_bytes``), ``"parts"`` the commands' own writer (``Lists.frames`` into
    ``io.atomic_stream``, ``part_rows`` rows a part; None: ``recommend.PART_ROWS``). Both write ``out``; its
    sha256 says the bytes are the same."""
    from resdom.cli.recommend_cmd import _write
    from resdom.io import atomic_write_bytes, csv_text, sha256_file
    from resdom.recommend import recommend_lists, similar_lists

    threads = set_threads(args.get("threads"))
    split = load_split(args["data"])
    net = model_for(split, args)
    what, impl, k, out = args.get("what", "recommend"), args["impl"], int(args["k"]), Path(args["out"])
    extra = {"part_rows": args["part_rows"]} if args.get("part_rows") else {}
    make = recommend_lists if what == "recommend" else similar_lists
    with Phase() as ph:
        lists = make(net, split, k=k, **extra)
        if impl == "whole":
            frame = lists.frame()
            atomic_write_bytes(out, csv_text(lambda end: frame.to_csv(index=False, lineterminator=end))
                               .encode("utf-8"))
        elif impl == "parts":
            _write(lists.frames(), out)
        else:
            raise ValueError(f"unknown impl {impl!r}")
    return {"what": what, "impl": impl, "threads": threads, "k": k, "rows": lists.n_rows, "lists": lists.n_lists,
            "items": split.n_items, "bytes": out.stat().st_size, "sha256": sha256_file(out), **ph.to_dict()}


TASKS = {"train": task_train, "eval": task_eval, "mixing": task_mixing, "last_columns": task_last_columns,
         "cross_entropy": task_cross_entropy, "eval_run": task_eval_run, "train_rounds": task_train_rounds,
         "peak": task_peak, "score": task_score, "top_lists": task_top_lists, "output": task_output}


def main(argv: list[str]) -> None:
    if len(argv) != 3 or argv[1] not in TASKS:
        sys.exit(f"usage: python {argv[0]} {{{','.join(TASKS)}}} JSON_ARGS")
    result = TASKS[argv[1]](json.loads(argv[2]))
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result, default=float), flush=True)


if __name__ == "__main__":
    main(sys.argv)
