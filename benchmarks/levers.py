"""The hardware levers (bf16 autocast, oneDNN's kernel cache, torch.compile), timed as whole training epochs
(interleaved, each in a process of its own):

    python benchmarks/levers.py epoch --data beauty-ts --configs fp32,bf16 --rounds 3 [--batches 40]

A config is ``precision[+cache=N][+compile][+ceonly]``: ``train.precision`` (fp32 | bf16 | bf16-loss; ``ceonly``
puts the precision's autocast around the loss alone, as bf16-loss does), oneDNN's primitive cache capacity for
that process (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, set before torch is imported; without ``cache=`` the variable
is removed from the child's environment, so oneDNN's default applies) and ``compile`` (the training step's forward
under ``torch.compile``, compile time included in the first epoch; the CPU seconds count this process only, not
inductor's compile workers, so compare wall seconds there). Each round runs every config once, the order reversed
every other round, so a load that comes and goes slows them alike. Each child trains ``--epochs`` epochs (each
timed) of the data set's SASRec with the protocol's defaults, seed 1, one thread, with the trainer's own epoch
loop, on every training sample or on a fixed random ``--batches`` x batch-size of them, then evaluates validation
NDCG@10 (fp32, untimed); it prints one JSON line.

The machine (CPU model and flags, load average) is printed first, so every figure says where it was measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_info() -> dict:
    """CPU model and the flags that decide the levers (AVX-512, AVX-512 BF16, AMX), as run.py writes them."""
    sys.path.insert(0, str(Path(__file__).parent))
    from run import cpu_model_and_flags

    model, flags = cpu_model_and_flags()
    return {"model": model, "cpus": os.cpu_count(), "flags": flags}


PRECISIONS = ("fp32", "bf16", "bf16-loss")  # the trainer's autocast settings (bf16: measured here, not offered)


def parse_config(text: str) -> dict:
    parts = text.split("+")
    if parts[0] not in PRECISIONS:
        raise SystemExit(f"config {text!r}: unknown precision {parts[0]!r}; precisions: {', '.join(PRECISIONS)}")
    cfg = {"name": text, "precision": parts[0], "cache": None, "compile": False, "ce_only": False}
    for p in parts[1:]:
        if p.startswith("cache="):
            value = p.split("=", 1)[1]
            if not value.isdigit() or int(value) < 1:
                raise SystemExit(f"config {text!r}: cache={value!r} is not a positive whole number")
            cfg["cache"] = int(value)
        elif p == "compile":
            cfg["compile"] = True
        elif p == "ceonly":  # the precision's autocast around the loss only: the encoder in float32
            cfg["ce_only"] = True
        else:
            raise SystemExit(f"unknown part {p!r} of config {text!r}")
    return cfg


def child(args: dict) -> dict:
    import numpy as np
    import torch

    from resdom import distributed
    from resdom.data.prepare import prepare_split
    from resdom.data.registry import DATASETS
    from resdom.evaluation.evaluate import evaluate
    from resdom.models import build_model
    from resdom.models.base import TrainBatch
    from resdom.training import trainer
    from resdom.training.batches import build_samples
    from resdom.training.config import resolve_configs
    from resdom.training.objectives import get_objective

    torch.set_num_threads(1)
    registered = args["data"] in DATASETS  # --data-dir finds a registered data set's files; a file is read as given
    split = prepare_split(args["data"], protocol=args.get("protocol", "gts"),
                          data_dir=args["data_dir"] if registered else None)
    model_cfg, train_cfg = resolve_configs(
        args.get("model", "sasrec"), {}, {"seed": 1, "threads": 1},  # precision: the TrainStep's own (bf16 included)
        source=args["data"], n_items=split.n_items, protocol=args.get("protocol", "gts"))
    objective = get_objective(train_cfg.objective)
    torch.manual_seed(train_cfg.seed)
    net = build_model(model_cfg)
    optimizer = torch.optim.Adam(net.parameters(), lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
    samples = build_samples(split.train, model_cfg.max_len, objective.layout)
    if args.get("batches"):  # the first k batches of the epoch's order: keep that many samples, drawn as it draws
        keep = np.sort(np.random.default_rng(0).permutation(len(samples))[: args["batches"] * train_cfg.batch_size])
        samples = dataclasses.replace(samples, start=samples.start[keep], end=samples.end[keep])
    step = trainer.TrainStep(net, objective, trainer._loss_context(split, train_cfg, objective), args["precision"])
    if args.get("ce_only"):
        def forward(items, targets, negatives, sup_items):
            batch, hidden = net.training_states(TrainBatch(items, targets, negatives, sup_items))
            with torch.autocast("cpu", dtype=step.low):
                return objective.loss(net, batch, hidden, step.ctx)
        step.forward = forward
    if args.get("compile"):  # boolean indexing traced (real_positions); the cross-entropy runs eagerly (disabled)
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        step.forward = torch.compile(step.forward, dynamic=True)
    ctx = distributed.DistContext(device=torch.device("cpu"))
    epochs = []
    for epoch in range(1, args.get("epochs", 1) + 1):
        start, cpu = time.perf_counter(), time.process_time()
        loss, n_seen, _ = trainer._train_epoch(step, optimizer, samples, split.n_items, model_cfg, train_cfg,
                                               objective, epoch, ctx, False)
        epochs.append({"seconds": round(time.perf_counter() - start, 2), "cpu_s": round(time.process_time() - cpu, 2),
                       "loss": round(loss, 5)})
    valid = evaluate(net, split.valid, filter_seen=split.filter_seen).metrics
    return {"config": args["name"], "seconds": epochs[0]["seconds"], "cpu_s": epochs[0]["cpu_s"], "samples": n_seen,
            "loss": epochs[-1]["loss"], "epochs": epochs, "valid_NDCG@10": round(valid["NDCG@10"], 5),
            "load": os.getloadavg()[0], "cache_env": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY"),
            "max_len": model_cfg.max_len}


def main(argv: list[str] | None = None) -> None:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "child":
        print(json.dumps(child(json.loads(sys.argv[2]))), flush=True)
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["epoch"])
    ap.add_argument("--data", default="beauty-ts")
    ap.add_argument("--protocol", default="gts")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "raw"))
    ap.add_argument("--configs", default="fp32,bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=0, help="0: the whole epoch")
    ap.add_argument("--epochs", type=int, default=1, help="epochs each child trains (each timed)")
    a = ap.parse_args(argv)
    for flag, value, least in (("--rounds", a.rounds, 1), ("--batches", a.batches, 0), ("--epochs", a.epochs, 1)):
        if value < least:
            ap.error(f"{flag} {value}: must be at least {least}")
    if not Path(a.data_dir).is_dir():
        ap.error(f"--data-dir {a.data_dir}: no such folder (give raw data laid out like shared/data/raw)")
    names = a.configs.split(",")
    try:
        configs = [parse_config(c) for c in names]
    except SystemExit as e:
        ap.error(f"--configs: {e}")
    if len(set(names)) != len(names):
        ap.error(f"--configs {a.configs!r}: a config named twice")
    print(json.dumps({"cpu": cpu_info(), "load": os.getloadavg(), "started": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                          time.gmtime())}))
    results: dict[str, list[dict]] = {c["name"]: [] for c in configs}
    for r in range(a.rounds):
        for c in configs if r % 2 == 0 else configs[::-1]:
            env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
            env["OMP_NUM_THREADS"] = "1"
            if c["cache"] is not None:
                env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(c["cache"])
            args = {**c, "data": a.data, "protocol": a.protocol, "data_dir": a.data_dir, "batches": a.batches,
                    "epochs": a.epochs}
            proc = subprocess.run([sys.executable, __file__, "child", json.dumps(args)], env=env, cwd=ROOT,
                                  capture_output=True, text=True)
            if proc.returncode != 0:  # the child's own last line (its exception), not a traceback of ours
                last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
                raise SystemExit(f"levers.py: error: config {c['name']!r}, round {r + 1}: {last}")
            out = proc.stdout.strip().splitlines()[-1]
            rec = json.loads(out)
            rec["round"] = r
            results[c["name"]].append(rec)
            print(json.dumps(rec), flush=True)
    for key in ("cpu_s", "seconds"):
        for e in range(a.epochs):
            base = min(x["epochs"][e][key] for x in results[configs[0]["name"]])
            for name, recs in results.items():
                vals = sorted(x["epochs"][e][key] for x in recs)
                print(f"epoch {e + 1} {key}: {name}: fastest {vals[0]:.2f}, median {vals[len(vals) // 2]:.2f}, "
                      f"{base / vals[0]:.2f}x the first config (fastest); final loss {recs[0]['loss']}, valid "
                      f"NDCG@10 {recs[0]['valid_NDCG@10']}")
    print(json.dumps({"ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
