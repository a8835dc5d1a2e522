"""``encode(items, last=k)``: only the last k columns computed (the final block's queries there only), the same
states and, for a loss that reads only those columns, the same loss and gradients as the full pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics.recovery import position_ranks
from resdom.models import build_model, make_model_config, recording
from resdom.models.interface import final_states
from resdom.training.objectives import LossContext, get_objective
from resdom.training.trainer import TrainStep

VARIANTS = {
    "post-LN": dict(name="sasrec"),
    "pre-LN": dict(name="sasrec", norm_first=True),
    "query-LN": dict(name="sasrec", query_ln=True, final_ln=True),
    "zero-padding": dict(name="sasrec", zero_padding=True),
    "no-key-padding": dict(name="sasrec", key_padding_mask=False),
    "gate": dict(name="sasrec", residual_gate="channel"),
    "mean-readout": dict(name="sasrec", readout="mean", readout_k=3),
    "duorec": dict(name="duorec"),
    "bsarec": dict(name="bsarec", bsa_a=0.6, bsa_c=3),
    "bert4rec": dict(name="bert4rec"),
}


def make_model(kw: dict, dropout: float = 0.0) -> torch.nn.Module:
    torch.manual_seed(0)
    values = dict(n_items=30, max_len=10, hidden=8, layers=2, heads=2, init_std=0.3, inner_mult=2, dropout=dropout,
                  attn_dropout=dropout)
    return build_model(make_model_config(**{**values, **kw})).double()


def make_items() -> torch.Tensor:
    rng = np.random.default_rng(0)
    seqs = [rng.integers(1, 31, size=n).tolist() for n in (1, 3, 9, 6, 2, 9)]
    return torch.from_numpy(Sequences.from_lists(seqs).padded(9))


@pytest.mark.parametrize("kw", VARIANTS.values(), ids=VARIANTS.keys())
@pytest.mark.parametrize("k", [1, 2])
def test_last_columns_equal_the_full_pass(kw, k):
    model = make_model(kw).eval()
    items = make_items()
    with torch.no_grad():
        full, part = model.encode(items), model.encode(items, last=k)
    assert part.shape == full.shape
    torch.testing.assert_close(part[:, -k:], full[:, -k:])
    assert torch.equal(part[:, :-k], torch.zeros_like(part[:, :-k]))  # not computed
    torch.testing.assert_close(final_states(model, items), model.readout(full, items)[:, -1])


@pytest.mark.parametrize("kw", VARIANTS.values(), ids=VARIANTS.keys())
def test_ce_last_step_has_the_full_pass_loss_and_gradients(kw):
    """The trainer's ce_last step encodes column L-1 only (``training_states``; DuoRec's second view too): the
    loss and every gradient equal those of a model made to encode every column."""
    model = make_model(kw).train()
    items = make_items()
    targets = torch.tensor([3, 7, 1, 30, 12, 5])
    step = TrainStep(model, get_objective("ce_last"), LossContext())
    encode = model.encode
    results = []
    for full in (False, True):
        model.zero_grad()
        model.encode = (lambda it, last=0: encode(it)) if full else encode
        loss = step(items, targets, None, None)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    model.encode = encode
    (loss_part, grads_part), (loss_full, grads_full) = results
    torch.testing.assert_close(loss_part, loss_full)
    assert grads_part.keys() == grads_full.keys() and len(grads_full) > 4
    for name in grads_full:
        torch.testing.assert_close(grads_part[name], grads_full[name], msg=name)


def test_only_the_last_columns_reach_the_final_block():
    """The saving is real: the final block's feed-forward layer sees (B, k, d), the first block (B, L, d)."""
    model = make_model(VARIANTS["post-LN"]).train()
    seen = []
    hooks = [b.ffn.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape))) for b in model.blocks]
    model.encode(make_items(), last=1)
    for h in hooks:
        h.remove()
    assert seen == [(6, 9, 8), (6, 1, 8)]


def test_recording_keeps_every_position():
    """Records cover every position, so a recorded pass computes all columns whatever ``last`` says."""
    model = make_model(VARIANTS["bsarec"]).eval()
    items = make_items()
    with torch.no_grad(), recording(model) as store:
        part = model.encode(items, last=1)
    with torch.no_grad():
        full = model.encode(items)
    torch.testing.assert_close(part, full)
    assert [r.sublayer_out.shape[1] for layer in store for r in layer] == [9, 9]


@pytest.mark.parametrize("kw", [VARIANTS["post-LN"], VARIANTS["mean-readout"], VARIANTS["bert4rec"]],
                         ids=["post-LN", "mean-readout", "bert4rec"])
def test_recovery_ranks_equal_the_full_pass(kw):
    """Miss recovery reads columns L-1..L-3 of a pass that computes only the columns those readouts need."""
    model = make_model(kw).eval()
    rng = np.random.default_rng(1)
    evalset = EvalSet(Sequences.from_lists([rng.integers(1, 31, size=n).tolist() for n in (1, 2, 4, 9, 9, 12)]),
                      rng.integers(1, 31, size=6))
    part = position_ranks(model, evalset, batch_size=4)
    encode = model.encode
    model.encode = lambda it, last=0: encode(it)
    full = position_ranks(model, evalset, batch_size=4)
    assert np.array_equal(part, full)
