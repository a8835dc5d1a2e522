"""Which residual carries BSARec's last-item reliance (docs/results.md, BSARec on video-ts).

    python scripts/bsarec_residuals_check.py [CELL ...] [--store results] [--runs 'runs/repro*']

BSARec's sub-layer output is ``a * DSP + (1 - a) * LN(alpha * X + Dropout(MHA(X)))`` with the frequency branch
``DSP = LN(s * X + Dropout(LPF(X) + beta * (X - LPF(X))))``: X's own row reaches the output through the attention
residual (``alpha``, what the alpha sweep scales) and through the frequency branch's residual (``s``, 1 as
trained). For every BSARec cell of the store (or each CELL folder given), on the checkpoint the cell names (its
run directory under ``--runs``): test HRLI@1, HRL2I@1 and HR@10 / NDCG@10 (filtered) with alpha in 1, 0.5, 0 and
s = 1 (the sweep as the alpha diagnostic runs it) or s = alpha (both residuals scaled), and the frequency branch's
share of the two branches' norms from the cell's ``mixing.json``. No training; a minute or two a cell on one core.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from rediagnose_cells import cell_arguments, cells_with_runs

from resdom.api import evaluate, load_run
from resdom.diagnostics.hrli import last_item_hit_rates
from resdom.models.bsarec import frequency_residual_scale
from resdom.models.interface import residual_scale
from resdom.pipeline.store import store_cells

ALPHAS = (1.0, 0.5, 0.0)


def check(run: Path) -> list[dict]:
    """One row per (alpha, s): the rates and test accuracy of the run's model with both residual scales set."""
    fitted = load_run(run, device="cpu")
    model, split = fitted.model, fitted.split
    model.eval()
    rows = []
    with torch.no_grad():
        for alpha in ALPHAS:
            for s in sorted({1.0, alpha}, reverse=True):
                with residual_scale(model, alpha), frequency_residual_scale(model, s):
                    rates = last_item_hit_rates(model, split.test).values
                    acc = evaluate(model, split.test, cutoffs=(10,), device="cpu").metrics
                rows.append({"alpha": alpha, "s": s, "HRLI@1": rates["HRLI@1"], "HRL2I@1": rates["HRL2I@1"],
                             "HR@10": acc["HR@10"], "NDCG@10": acc["NDCG@10"]})
    return rows


def main() -> int:
    args = cell_arguments(__doc__.splitlines()[0]).parse_args()
    torch.set_num_threads(1)
    cells = args.cells or [c for c in store_cells(args.store) if c.parent.name == "bsarec"]
    for cell, _, run in cells_with_runs(cells, args.runs):
        config = json.loads((run / "config.json").read_text())["model"]
        mixing = json.loads((cell / "diagnostics" / "mixing.json").read_text())
        share = mixing.get("frequency_branch", {}).get("pooled", {}).get("all", {}).get("frequency_share")
        share_text = "–" if share is None else f"{share:.3f}"
        print(f"{cell}: a {config['bsa_a']}, c {config['bsa_c']}; frequency branch's share of the branches' norms "
              f"{share_text}")
        for r in check(run):
            print(f"  alpha {r['alpha']:.1f}, frequency residual x{r['s']:.1f}: HRLI@1 {r['HRLI@1']:.3f}, HRL2I@1 "
                  f"{r['HRL2I@1']:.3f}, test HR@10 {r['HR@10']:.4f} / NDCG@10 {r['NDCG@10']:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
