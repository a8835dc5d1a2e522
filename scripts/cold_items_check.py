"""Why a last input item never seen in training is never ranked first (docs/results.md, "Cold last items").

    python scripts/cold_items_check.py [CELL ...] [--store results] [--runs 'runs/repro*']

For every cell of the store (or each CELL folder given), on the checkpoint the cell names (its run directory
under ``--runs``, as ``scripts/rediagnose_cells.py`` finds it): the item embeddings of the items that never occur
in the training sequences ("cold"), how alike they are (mean cosine over all pairs, against the seen items'), the
cosine between their mean and the mean final state over the test users, and per band of the test users' last
input item's training frequency (hrli's bands): users, HRLI@1, the median 0-based rank of the last item in the
unfiltered full ranking, the mean cosine between the final state and the last item's embedding. No training;
seconds a cell on one core.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from rediagnose_cells import cell_arguments, cells_with_runs

from resdom.api import load_run
from resdom.data.sequences import item_counts
from resdom.diagnostics.common import batches, ranks_of, recent_items, scores_at
from resdom.diagnostics.hrli import band_masks
from resdom.models.interface import final_states
from resdom.pipeline.store import store_cells


def mean_pair_cosine(x: torch.Tensor) -> float:
    """Mean cosine over all pairs of distinct rows of x (n >= 2)."""
    u = F.normalize(x, dim=1)
    n = len(u)
    total = u.sum(0).square().sum() - n  # sum over i != j of u_i . u_j
    return float(total / (n * (n - 1)))


def check(run: Path) -> dict:
    fitted = load_run(run, device="cpu")
    model, split = fitted.model, fitted.split
    model.eval()
    counts = item_counts(split.train, split.n_items)
    emb = model.item_embeddings().detach()
    ranks, freq, cosines, states = [], [], [], []
    with torch.no_grad():
        for idx, items, _ in batches(model, split.test, 256):
            h = final_states(model, items)
            last = torch.from_numpy(recent_items(split.test.inputs, idx, 1))
            ranks.append(ranks_of(scores_at(model, h, None), last).numpy())
            freq.append(counts[last.numpy()])
            cosines.append(F.cosine_similarity(h, emb[last], dim=1).numpy())
            states.append(h)
    ranks, freq, cosines = np.concatenate(ranks), np.concatenate(freq), np.concatenate(cosines)
    cold = emb[1:][torch.from_numpy(counts[1:] == 0)]
    seen = emb[1:][torch.from_numpy(counts[1:] > 0)]
    out = {"cold_items": len(cold), "items": len(emb) - 1,
           "norm_seen": float(seen.norm(dim=1).median()),
           "norm_cold": float(cold.norm(dim=1).median()) if len(cold) else None,
           "cos_pairs_seen": mean_pair_cosine(seen),
           "cos_pairs_cold": mean_pair_cosine(cold) if len(cold) > 1 else None,
           "cos_cold_mean_state": float(F.cosine_similarity(cold.mean(0), torch.cat(states).mean(0), dim=0))
           if len(cold) else None, "bands": {}}
    for name, m in band_masks(freq).items():
        if m.any():
            out["bands"][name] = {"n_users": int(m.sum()), "HRLI@1": float(np.mean(ranks[m] == 0)),
                                  "median_rank": float(np.median(ranks[m])), "cos_state_last": float(cosines[m].mean())}
    return out


def main() -> int:
    args = cell_arguments(__doc__.splitlines()[0]).parse_args()
    torch.set_num_threads(1)
    for cell, _, run in cells_with_runs(args.cells or store_cells(args.store), args.runs):
        r = check(run)
        pairs = "–" if r["cos_pairs_cold"] is None else f"{r['cos_pairs_cold']:.3f}"
        against = "–" if r["cos_cold_mean_state"] is None else f"{r['cos_cold_mean_state']:+.3f}"
        norms = "–" if r["norm_cold"] is None else f"{r['norm_cold']:.2f}"
        print(f"{cell}: {r['cold_items']:,} of {r['items']:,} items never in training; mean pairwise cosine of "
              f"their embeddings {pairs} (seen items {r['cos_pairs_seen']:.3f}); their mean against the mean test "
              f"final state {against}; median embedding norm {norms} (seen items {r['norm_seen']:.2f})")
        for name, b in r["bands"].items():
            print(f"  last item seen {name:>4} times: {b['n_users']:5,} users, HRLI@1 {b['HRLI@1']:.3f}, median rank "
                  f"{b['median_rank']:7.0f}, cos(final state, last item) {b['cos_state_last']:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
