"""Could a shorter training explain the paper's lower Attn and HRLI@1? (docs/results.md, "The paper side by side").

    python scripts/epoch_trajectory_check.py [CELL ...] [--data-dir DIR] [--json OUT]
    python scripts/epoch_trajectory_check.py --table JSON    # the markdown table docs/results.md shows

For every stored cell given (default: beauty-ts and toys-ts `sasrec` seed 1): retrain it from its own config.json
on its data set's prepared split (the data fingerprint must match the cell's; one torch thread) and after every
epoch read the current model on all test users, as the stored diagnostics read the kept one: the mixing ratios
(norm of sums, pooled over layers, all real positions) and HRLI@1 (unfiltered). The retrain must be the stored
run: its epochs' losses and its kept epoch equal the cell's curve, and at the kept epoch its test numbers equal
the cell's mixing.json and hrli.json (else it stops, naming the difference). ``--json`` keeps the trajectory;
``--table`` prints, per cell, the kept epoch and the epochs at which the test Attn ratio and HRLI@1 come closest to
the paper's, with the numbers there. About 15 minutes a cell on one core.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from datetime import date
from pathlib import Path

import torch

from resdom.data.prepare import prepare_split
from resdom.diagnostics.monitor import cheap_diagnostics, epoch_monitor
from resdom.models.config import read_model_config
from resdom.runs import data_fingerprint
from resdom.study.fidelity import DATASETS, PAPER_HRLI1, PAPER_MIXING
from resdom.training.config import TrainConfig
from resdom.training.trainer import EpochEnd, fit

STAGES = ("Attn", "+Res", "+LN")
DEFAULT_CELLS = ("results/beauty-ts/sasrec/seed1", "results/toys-ts/sasrec/seed1")
WHAT = ("a stored cell retrained from its config, its current model read on all test users after every epoch: "
        "mixing ratios (norm of sums, pooled over layers, all real positions) and HRLI@1 (unfiltered)")
TOL = 1e-6


def trajectory(cell: Path, data_dir: str) -> dict:
    config = json.loads((cell / "config.json").read_text())
    meta = json.loads((cell / "cell.json").read_text())
    stored_curve = [json.loads(line) for line in (cell / "curve.jsonl").read_text().splitlines() if line.strip()]
    data = config["data"]
    quantile = data["manifest"].get("quantile")  # GTS's; none under leave-one-out
    split = prepare_split(data["source"], protocol=data["protocol"], data_dir=data_dir,
                          **({} if quantile is None else {"quantile": quantile}))
    if data_fingerprint(split) != data["fingerprint"]:
        raise SystemExit(f"{cell}: the prepared split's fingerprint {data_fingerprint(split)} is not the cell's "
                         f"{data['fingerprint']}")
    model_cfg = read_model_config(config["model"])
    train_cfg = TrainConfig(**{**config["train"], "threads": 1})
    epochs: list[dict] = []

    def probe(end: EpochEnd) -> None:  # after the monitor: the current model on every test user
        numbers = cheap_diagnostics(end.model, end.split.test)  # the monitor's numbers, on the test users
        epochs.append({"epoch": end.epoch, "loss": end.record["loss"], "valid_NDCG@10": end.record["valid"]["NDCG@10"],
                       **{s: numbers["mixing_all"][s] for s in STAGES}, "HRLI@1": numbers["HRLI@1"]})
        end.model.train()

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        result = fit(split, model_cfg, train_cfg, tmp, hooks=(epoch_monitor, probe), progress=False)
    problems = [f"epoch {e['epoch']}: loss {e['loss']!r} vs the cell's {s['loss']!r}"
                for e, s in zip(epochs, stored_curve) if not math.isclose(e["loss"], s["loss"], abs_tol=TOL)]
    if len(epochs) != len(stored_curve) or result["best_epoch"] != meta["best_epoch"]:
        problems.append(f"{len(epochs)} epochs, kept {result['best_epoch']}; the cell: {len(stored_curve)}, kept "
                        f"{meta['best_epoch']}")
    kept = next(e for e in epochs if e["epoch"] == result["best_epoch"])
    mixing = json.loads((cell / "diagnostics" / "mixing.json").read_text())["pooled"]["all"]
    hrli = json.loads((cell / "diagnostics" / "hrli.json").read_text())["values"]["HRLI@1"]
    for name, stored in ((s, mixing[s]) for s in STAGES):
        if not math.isclose(kept[name], stored, abs_tol=TOL):
            problems.append(f"kept epoch's {name} {kept[name]!r} vs the cell's {stored!r}")
    if not math.isclose(kept["HRLI@1"], hrli, abs_tol=TOL):
        problems.append(f"kept epoch's HRLI@1 {kept['HRLI@1']!r} vs the cell's {hrli!r}")
    if problems:
        raise SystemExit(f"{cell}: the retrain is not the stored run: " + "; ".join(problems))
    return {"dataset": meta["dataset"], "label": meta["label"], "seed": meta["seed"], "kept_epoch": meta["best_epoch"],
            "n_test_users": len(split.test), "epochs": epochs}


def closest(cell: dict, key: str, target: float) -> dict:
    """The epoch whose ``key`` comes closest to ``target`` (the earlier on a tie)."""
    return min(cell["epochs"], key=lambda e: (abs(e[key] - target), e["epoch"]))


def trajectory_table(measured: dict) -> str:
    """Per cell: the paper's Attn and HRLI@1, then at the kept epoch and at the epoch where each comes closest to
    the paper's: the epoch, the test Attn, +Res and HRLI@1 there."""
    head = ("| cell | paper Attn / +Res / HRLI@1 | read at | epoch | Attn | +Res | HRLI@1 |\n"
            "|---|---|---|---|---|---|---|")
    lines = [head]
    for name, cell in measured["cells"].items():
        paper = DATASETS[cell["dataset"]][0]
        attn, res = PAPER_MIXING[paper][0], PAPER_MIXING[paper][1]
        want = f"{attn:.3f} / {res:.3f} / ~{PAPER_HRLI1[paper]:.2f}"
        rows = [("the kept epoch", next(e for e in cell["epochs"] if e["epoch"] == cell["kept_epoch"])),
                ("Attn closest to the paper's", closest(cell, "Attn", attn)),
                ("HRLI@1 closest to the paper's", closest(cell, "HRLI@1", PAPER_HRLI1[paper]))]
        for i, (what, e) in enumerate(rows):
            first = f"{name} | {want}" if i == 0 else " | "
            lines.append(f"| {first} | {what} | {e['epoch']} | {e['Attn']:.3f} | {e['+Res']:.3f} | "
                         f"{e['HRLI@1']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="*", type=Path, help=f"stored cells (default: {', '.join(DEFAULT_CELLS)})")
    ap.add_argument("--data-dir", default="../shared/data/raw")
    ap.add_argument("--json", type=Path, help="keep the trajectories here")
    ap.add_argument("--table", type=Path, help="print the table of a kept file and stop")
    args = ap.parse_args()
    if args.table:
        print(trajectory_table(json.loads(args.table.read_text())), end="")
        return
    cells = args.cells or [Path(c) for c in DEFAULT_CELLS]
    measured = {}
    for cell in cells:
        print(f"{cell}: retraining ...", file=sys.stderr, flush=True)
        measured[str(cell)] = trajectory(cell, args.data_dir)
        kept = measured[str(cell)]["kept_epoch"]
        print(f"{cell}: the stored run, kept epoch {kept}", file=sys.stderr, flush=True)
    out = {"what": WHAT, "command": "python scripts/epoch_trajectory_check.py " + " ".join(map(str, cells))
           + (f" --json {args.json}" if args.json else ""), "measured": date.today().isoformat(), "cells": measured}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(trajectory_table(out), end="")


if __name__ == "__main__":
    main()
