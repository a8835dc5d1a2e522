"""Does the population the mixing ratio is pooled over move it? (docs/results.md, "The paper side by side").

    python scripts/mixing_population_check.py [CELL ...] [--store results] [--runs 'runs/*'] [--json OUT]
    python scripts/mixing_population_check.py --table JSON    # the markdown table docs/results.md shows
    python scripts/mixing_population_check.py --pass-orders JSON   # the analysis-folder emulation docs/results.md shows

For every cell given (default: the store's `sasrec` cells) whose checkpoint is still in a run directory under
``--runs``: the mixing ratios (norm of sums, pooled over layers, all real positions) pooled over the validation
users' inputs and over the test users' inputs (the stored numbers; checked against the cell's mixing.json), and the
mean real input length of each split. Prints them; ``--json`` keeps them; ``--table`` prints the means over seeds of
a kept file beside the paper's Attn, one row per data set of the paper held. No training; well under a minute a
cell on one core.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from rediagnose_cells import cell_arguments, cells_with_runs, keep_measurements, load_with_stored

from resdom.diagnostics.mixing import mixing_ratios
from resdom.pipeline.store import store_cells
from resdom.report.stats import prediction_interval
from resdom.study.fidelity import DATASETS, NOT_COMPARABLE, PAPER_MIXING

STAGES = ("Attn", "+Res", "+LN")
WHAT = ("mixing ratios (norm of sums, pooled over layers, all real positions) of stored cells' checkpoints pooled over "
        "the validation users and over the test users (the stored numbers), and the mean real input length of each "
        "split")


def mean_length(evalset, max_len: int) -> float:
    """The mean number of real input items per user, capped at the model's max length."""
    return float(np.minimum(evalset.inputs.lengths, max_len).mean())


def check(cell: Path, run: Path) -> dict:
    fitted, stored = load_with_stored(cell, run, "mixing")
    model, split = fitted.model, fitted.split
    out = {"checkpoint": fitted.checkpoint}
    for name, evalset in (("valid", split.valid), ("test", split.test)):
        pooled = mixing_ratios(model, evalset).pooled["all"]
        out[name] = {"n_users": len(evalset), "pooled_all": {s: pooled[s] for s in STAGES},
                     "mean_input_length": mean_length(evalset, model.max_len)}
    want = stored["pooled"]["all"]  # the test-user ratios are the stored ones
    if any(not math.isclose(out["test"]["pooled_all"][s], want[s], abs_tol=1e-9) for s in STAGES):
        raise SystemExit(f"{cell}: the test-user ratios differ from the stored mixing.json")
    return out


def population_table(measured: dict) -> str:
    """The markdown table of a kept file: per data set of the paper held (resdom's name, the paper's), the seeds,
    Attn over the validation and the test users, the paper's Attn, +Res and the mean input length of each split,
    means over the seeds."""
    by_dataset: dict[str, list[dict]] = {}
    for cell in measured["cells"].values():
        if cell["dataset"] in DATASETS and DATASETS[cell["dataset"]][0] in PAPER_MIXING:
            by_dataset.setdefault(cell["dataset"], []).append(cell)
    rows = ["| data set (paper's) | seeds | Attn: validation users | Attn: test users (stored) | the paper's Attn | "
            "+Res: validation / test users | input items: validation / test |", "|---|---|---|---|---|---|---|"]
    for dataset, cells in sorted(by_dataset.items()):
        def mean(split: str, key: str, stage: str | None = None) -> float:
            return float(np.mean([c[split][key][stage] if stage else c[split][key] for c in cells]))  # noqa: B023

        paper = DATASETS[dataset][0]
        name = f"{dataset} ({paper})" + (f": not comparable ({NOT_COMPARABLE[dataset]})"
                                         if dataset in NOT_COMPARABLE else "")
        rows.append(f"| {name} | {len(cells)} | {mean('valid', 'pooled_all', 'Attn'):.3f} | "
                    f"{mean('test', 'pooled_all', 'Attn'):.3f} | {PAPER_MIXING[paper][0]:.3f} | "
                    f"{mean('valid', 'pooled_all', '+Res'):.3f} / {mean('test', 'pooled_all', '+Res'):.3f} | "
                    f"{mean('valid', 'mean_input_length'):.1f} / {mean('test', 'mean_input_length'):.1f} |")
    return "\n".join(rows) + "\n"


# The paper's analysis folder: every prediction pass writes its batches as batch000000.npz, batch000001.npz, ... into
# one folder per model, data set, split type and seed, so a later pass overwrites an earlier pass's file of the same
# number and the summary (scripts/summarize_mixing_ratios.py there) reads whatever the last passes left. The passes
# its public code makes: the validation and the test users at alpha = 1, the alpha sweep, the shuffles. A folder
# holds the last pass's files and, where an earlier pass had more users, that pass's files past the last one's: at
# most |N_earlier - N_last| users plus one batch (the leftover).
LAST_PASSES = ("validation users", *(f"test users, alpha = {a:g}" for a in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3,
                                                                          0.2, 0.1, 0.0)))


def last_pass_values(measured: dict, store: Path) -> dict[str, dict]:
    """Per comparable data set of the paper held: each candidate last pass's Attn and +Res (pooled over layers and all
    real positions) per seed, from a kept population file (validation users) and the stored alpha sweep of the same
    checkpoint (test users at each alpha), with the paper's values."""
    out: dict[str, dict] = {}
    for name, cell in sorted(measured["cells"].items()):
        dataset = cell["dataset"]
        if dataset not in DATASETS or not DATASETS[dataset][1] or DATASETS[dataset][0] not in PAPER_MIXING:
            continue
        sweep = json.loads((store.parent / name / "diagnostics" / "alpha.json").read_text())
        if sweep["checkpoint"] != cell["checkpoint"]:
            raise SystemExit(f"{name}: its alpha sweep is of another checkpoint than the population file's")
        ratios = {f"test users, alpha = {r['alpha']:g}": r["mixing_all"] for r in sweep["rows"]}
        ratios["validation users"] = cell["valid"]["pooled_all"]
        paper = PAPER_MIXING[DATASETS[dataset][0]]
        d = out.setdefault(dataset, {"paper": {"Attn": paper[0], "+Res": paper[1]}, "seeds": []})
        d["seeds"].append({last: {s: r[s] for s in ("Attn", "+Res")} for last, r in ratios.items()})
    return out


def pass_order_table(measured: dict, store: Path) -> str:
    """The markdown table of the analysis-folder emulation: per comparable data set, the summary's Attn and +Res if
    each candidate pass is the last (means over seeds), ✓ where the paper's value lies inside the 95% prediction
    interval of one more run; whether all four data sets' Attn, and their Attn and +Res, are reproduced together."""
    values = last_pass_values(measured, store)
    rows = ["| last pass | " + " | ".join(f"{d} ({DATASETS[d][0]}: {v['paper']['Attn']:.3f} / {v['paper']['+Res']:.3f})"
                                         for d, v in values.items())
            + " | every Attn | every Attn and +Res |", "|---" * (len(values) + 3) + "|"]
    held = [p for p in LAST_PASSES if all(p in s for v in values.values() for s in v["seeds"])]
    for last in held:
        cells, attn_all, both_all = [], True, True
        for v in values.values():
            marks = {}
            for stage in ("Attn", "+Res"):
                per_seed = [s[last][stage] for s in v["seeds"]]
                lo, hi = prediction_interval(per_seed)
                marks[stage] = (float(np.mean(per_seed)), lo <= v["paper"][stage] <= hi)
            attn_all &= marks["Attn"][1]
            both_all &= marks["Attn"][1] and marks["+Res"][1]
            cells.append(" / ".join(f"{m:.3f}{' ✓' if ok else ''}" for m, ok in marks.values()))
        rows.append(f"| {last} | " + " | ".join(cells) + f" | {'yes' if attn_all else 'no'} | "
                    f"{'yes' if both_all else 'no'} |")
    return "\n".join(rows) + "\n"


def leftover_share(measured: dict, batch: int = 256) -> float:
    """The largest share of users an earlier pass can leave in the folder beside the last pass's, over the cells of a
    kept file: (|N_valid - N_test| + one batch) / the larger of the two."""
    return max((abs(c["valid"]["n_users"] - c["test"]["n_users"]) + batch)
               / max(c["valid"]["n_users"], c["test"]["n_users"])
               for c in measured["cells"].values() if c["dataset"] in DATASETS and DATASETS[c["dataset"]][1])


def main() -> int:
    ap = cell_arguments(__doc__.splitlines()[0])
    ap.set_defaults(runs="runs/*")
    ap.add_argument("--json", type=Path, default=None, help="write the measurements to this JSON file")
    ap.add_argument("--table", type=Path, default=None, help="print the markdown table of this kept JSON file")
    ap.add_argument("--pass-orders", type=Path, default=None,
                    help="print the analysis-folder emulation of this kept JSON file (with the store's alpha sweeps)")
    args = ap.parse_args()
    if args.table is not None:
        print(population_table(json.loads(args.table.read_text())), end="")
        return 0
    if args.pass_orders is not None:
        print(pass_order_table(json.loads(args.pass_orders.read_text()), Path(args.store)), end="")
        return 0
    torch.set_num_threads(1)
    cells = args.cells or [c for c in store_cells(args.store) if c.parent.name == "sasrec"]
    results = {}
    for cell, meta, run in cells_with_runs(cells, args.runs):
        r = check(cell, run)
        results[str(cell)] = {"dataset": meta["dataset"], "label": meta["label"], "seed": meta["seed"], **r}
        v, t = r["valid"], r["test"]
        print(f"{cell}: Attn {v['pooled_all']['Attn']:.3f} valid / {t['pooled_all']['Attn']:.3f} test, +Res "
              f"{v['pooled_all']['+Res']:.3f} / {t['pooled_all']['+Res']:.3f}; mean input length "
              f"{v['mean_input_length']:.2f} / {t['mean_input_length']:.2f} ({v['n_users']:,} / {t['n_users']:,} "
              "users)")
    if args.json is not None:
        keep_measurements(args.json, WHAT, "mixing_population_check.py", args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
