"""Does the seen-item filter set how much residual scaling recovers? (docs/results.md, "The paper side by side").

    python scripts/recovery_filter_check.py [CELL ...] [--store results] [--runs 'runs/*'] [--json OUT]

For every cell given (or of the store) whose checkpoint is still in a run directory under ``--runs``: the test
users' miss-recovery curve (spec §4: recoverable set at alpha = 1, Recovery(alpha) over the sweep) computed twice
on that checkpoint, with the seen-item filter of the cell's evaluation (the stored numbers; checked against the
cell's recovery.json) and without any filter (every item rankable, the last input item included). Prints, for
each, the recoverable share and the largest Recovery over alpha; ``--json`` keeps them. No training; a minute or
two a cell on one core.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from rediagnose_cells import cell_arguments, cells_with_runs, keep_measurements, load_with_stored

from resdom.diagnostics.alpha import ALPHAS
from resdom.diagnostics.common import inference
from resdom.diagnostics.recovery import K_RECOVERY, split_recovery
from resdom.pipeline.store import store_cells

WHAT = ("test miss-recovery curves of stored cells' checkpoints with the cell's seen-item filter and without it "
        "(spec §4, K 10, offsets 1-3)")


def largest(curve: list[dict]) -> tuple[float, float]:
    """(largest Recovery over the alphas, the alpha where it is first reached, in increasing alpha)."""
    rows = sorted((r for r in curve if not math.isnan(r["recovery"])), key=lambda r: r["alpha"])
    best = max(rows, key=lambda r: r["recovery"])
    return best["recovery"], best["alpha"]


def check(cell: Path, run: Path) -> dict:
    fitted, stored = load_with_stored(cell, run, "recovery")
    model, split = fitted.model, fitted.split
    out = {"checkpoint": fitted.checkpoint, "n_users": len(split.test)}
    with inference(model):
        for name, filtered in (("filtered", True), ("unfiltered", False)):
            r = split_recovery(model, split.test, list(ALPHAS), K_RECOVERY, None, filter_seen=filtered)
            top, at = largest(r.curve)
            out[name] = {"recoverable": r.recoverable, "recoverable_share": r.recoverable_share,
                         "largest_recovery": top, "at_alpha": at,
                         "curve": [{"alpha": x["alpha"], "recovery": x["recovery"]} for x in r.curve]}
    want = {x["alpha"]: x["recovery"] for x in stored["test"]["curve"]}  # the filtered curve is the stored one
    got = {x["alpha"]: x["recovery"] for x in out["filtered"]["curve"]}
    if any(not math.isclose(got[a], want[a], abs_tol=1e-12) for a in want if not math.isnan(want[a])):
        raise SystemExit(f"{cell}: the filtered curve differs from the stored recovery.json")
    return out


def main() -> int:
    ap = cell_arguments(__doc__.splitlines()[0])
    ap.set_defaults(runs="runs/*")
    ap.add_argument("--json", type=Path, default=None, help="write the measurements to this JSON file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = {}
    for cell, meta, run in cells_with_runs(args.cells or store_cells(args.store), args.runs):
        r = check(cell, run)
        results[str(cell)] = {"dataset": meta["dataset"], "label": meta["label"], "seed": meta["seed"], **r}
        for name in ("filtered", "unfiltered"):
            x = r[name]
            print(f"{cell} {name:>10}: recoverable {x['recoverable']:,} of {r['n_users']:,} test users "
                  f"({x['recoverable_share']:.3f}); largest Recovery {x['largest_recovery']:.3f} at alpha "
                  f"{x['at_alpha']:g}")
    if args.json is not None:
        keep_measurements(args.json, WHAT, "recovery_filter_check.py", args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
