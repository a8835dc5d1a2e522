"""The diagnostics find what was planted in synthetic data ("Correctness").

Two worlds from the data layer's generator, 100 items, no cluster preference, 20% noise:
- "skip2": the next item is a fixed function of the item two steps back (p_skip2 = 0.8);
- "last":  the next item is a fixed function of the last item (p_last = 0.8).
A small SASRec is trained a few epochs on each. In "skip2" the final state must fetch x_{L-1} through attention
while the state at column L-1 holds x_{L-1} itself; with seen-item filtering every other skip-2 successor of
its history is already in the input, so its top-1 is often the target where the final position's is not.
In "last" the state at column L-1 predicts x_L (seen, filtered) and has no reason to rank the target.
"""

from __future__ import annotations

import pytest
import torch

from resdom.diagnostics.mixing import mixing_ratios
from resdom.diagnostics.recovery import split_recovery
from resdom.diagnostics.shuffle import position_shuffle

WORLDS = {"skip2": "p_skip2=0.8,p_last=0.0", "last": "p_skip2=0.0,p_last=0.8"}


def _train(world: str, out) -> tuple[torch.nn.Module, object]:
    from resdom.data.prepare import prepare_split
    from resdom.models.config import make_model_config
    from resdom.runs import load_run
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import fit

    split = prepare_split(f"synthetic:n_users=1000,n_items=100,min_len=8,max_len=20,p_user=0.0,seed=0,{WORLDS[world]}",
                          "loo")
    fit(split, make_model_config(max_len=20, hidden=32, layers=2, heads=2, dropout=0.1, attn_dropout=0.1),
        TrainConfig(epochs=4, device="cpu", batch_size=64, lr=5e-3, seed=0), out, progress=False)
    run = load_run(out)
    return run.model, run.split


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, tuple[torch.nn.Module, object]]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {w: _train(w, tmp_path_factory.mktemp(w)) for w in WORLDS}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_position_l1_recovers_misses_under_skip2_structure(trained):
    rec = {w: split_recovery(m, split.test, alphas=(1.0,), K=1) for w, (m, split) in trained.items()}
    assert rec["skip2"].offset_shares["L-1"] > rec["last"].offset_shares["L-1"]
    assert rec["skip2"].recoverable_share > 0.02 > 5 * rec["last"].recoverable_share


def test_keep_last_shuffle_hurts_only_when_order_matters(trained):
    change = {}
    for w, (m, split) in trained.items():
        res = position_shuffle(m, split.test, modes=("keep_last",), seeds=(0,))
        change[w] = res.perturbations["keep_last"]["relative_change"]["NDCG@10"]
    assert change["skip2"] < -0.3  # the needed item x_{L-1} is moved away
    assert abs(change["last"]) < 0.1  # only the last item matters, and it stays


def test_last_position_mixes_more_when_context_is_needed(trained):
    mix = {w: mixing_ratios(m, split.test).pooled["last"]["+Res"] for w, (m, split) in trained.items()}
    assert mix["skip2"] > mix["last"]
