"""Objectives (training/objectives.py) against slow per-position references and hand-computed cases."""

from __future__ import annotations

import math
import typing

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from resdom.data.sequences import Sequences
from resdom.models import build_model
from resdom.models.base import TrainBatch
from resdom.models.config import make_model_config
from resdom.training import objectives
from resdom.training.batches import build_samples, make_batch
from resdom.training.objectives import (
    OBJECTIVES,
    LossContext,
    ObjectiveName,
    full_cross_entropy,
    get_objective,
    popularity_log_q,
    real_positions,
)

N_ITEMS = 12
SEQS = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11, 12, 1], [3, 4, 5]]



def small_model(name: str = "sasrec") -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(make_model_config(name=name, n_items=N_ITEMS, hidden=8, layers=1, heads=2, max_len=6))
    return model.eval()


def test_registry() -> None:
    assert set(OBJECTIVES) >= {"ce_all", "ce_last", "bce", "ce_sampled"}
    assert get_objective("ce_last").layout == "last" and get_objective("ce_all").layout == "all"
    with pytest.raises(ValueError, match="unknown objective"):
        get_objective("ce_everything")


def test_the_objective_literal_names_the_registry() -> None:
    """train.objective's static Literal (what mypy and pydantic check) is the registry's names, in its order."""
    from resdom.training.config import TrainConfig

    assert typing.get_args(ObjectiveName) == tuple(OBJECTIVES)
    assert typing.get_args(TrainConfig.model_fields["objective"].annotation)[0] == ObjectiveName


def test_the_trainer_reads_traits_not_names() -> None:
    """What the trainer needs to know of an objective is a trait of it: where it samples by popularity
    (``needs_popularity``: the sampled softmax) and whether a batch cut into length groups gives its loss exactly
    (``exact_in_groups``: nothing drawn per call); training/trainer.py names no objective."""
    from pathlib import Path

    traits = {n: (o.needs_popularity, o.exact_in_groups) for n, o in OBJECTIVES.items()}
    assert traits == {"ce_all": (False, True), "ce_last": (False, True), "bce": (False, True),
                      "ce_sampled": (True, False), "mlm": (False, False)}
    source = Path(objectives.__file__).with_name("trainer.py").read_text()
    assert [n for n in OBJECTIVES if f'"{n}"' in source] == []


@pytest.mark.parametrize("name", [n for n, o in OBJECTIVES.items() if o.exact_in_groups and not o.needs_negatives])
def test_an_exact_objective_is_the_target_weighted_mean_of_its_groups(name: str) -> None:
    """Cut a batch's rows in two: the loss of the whole is the mean of the parts' losses weighted by their targets
    (what the trainer's length groups rely on)."""
    model = small_model()
    layout = get_objective(name).layout
    samples = build_samples(Sequences.from_lists(SEQS), 6, layout)
    rows = np.arange(len(samples))
    whole = make_batch(samples, rows, n_items=N_ITEMS)
    parts = [make_batch(samples, idx, n_items=N_ITEMS) for idx in (rows[:3], rows[3:])]
    loss = get_objective(name).loss
    n = [int((p.targets > 0).sum()) for p in parts]
    mixed = sum(loss(model, p, model.encode(p.items), LossContext()) * k for p, k in zip(parts, n)) / sum(n)
    torch.testing.assert_close(loss(model, whole, model.encode(whole.items), LossContext()), mixed)


def test_ce_all_matches_per_position_reference() -> None:
    model = small_model()
    samples = build_samples(Sequences.from_lists(SEQS), 6, "all")
    batch = make_batch(samples, np.arange(len(samples)), n_items=N_ITEMS)
    hidden = model.encode(batch.items)
    loss = get_objective("ce_all").loss(model, batch, hidden, LossContext())
    emb = model.item_embeddings()
    terms = []
    for b in range(batch.items.shape[0]):
        for col in range(batch.items.shape[1]):
            t = int(batch.targets[b, col])
            if t:
                logits = hidden[b, col] @ emb[1:].T  # padding row is not a class
                terms.append(-torch.log_softmax(logits, 0)[t - 1])
    assert len(terms) == sum(len(s) - 1 for s in SEQS)
    torch.testing.assert_close(loss, torch.stack(terms).mean())


def test_ce_last_reads_last_column() -> None:
    model = small_model()
    samples = build_samples(Sequences.from_lists(SEQS), 6, "last")
    batch = make_batch(samples, np.arange(len(samples)), n_items=N_ITEMS)
    hidden = model.encode(batch.items)
    loss = get_objective("ce_last").loss(model, batch, hidden, LossContext())
    ref = F.cross_entropy(hidden[:, -1] @ model.item_embeddings()[1:].T, batch.targets - 1)
    torch.testing.assert_close(loss, ref)


def test_real_positions_skip_padding() -> None:
    hidden = torch.arange(2 * 3 * 1, dtype=torch.float32).view(2, 3, 1)
    batch = TrainBatch(torch.tensor([[0, 1, 2], [3, 4, 5]]), torch.tensor([[0, 2, 3], [4, 5, 6]]))
    h, t = real_positions(hidden, batch)
    assert h.squeeze(1).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0] and t.tolist() == [2, 3, 4, 5, 6]


@pytest.mark.parametrize("rows", [1, 2, 4, 9, 64])
def test_full_ce_equals_torch_cross_entropy_and_passes_gradcheck(rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of ``rows`` rows (64 on CPU by default): blocks of one row, uneven last blocks and one block alike."""
    monkeypatch.setattr(objectives, "CPU_ROWS", rows)
    g = torch.Generator().manual_seed(2)
    h = torch.randn(9, 4, generator=g, dtype=torch.float64, requires_grad=True)
    emb = torch.randn(13, 4, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([1, 13, 5, 5, 2, 9, 3, 13, 7])
    ours = full_cross_entropy(h, emb, t)
    ref = torch.nn.functional.cross_entropy(h @ emb.T, t - 1)
    torch.testing.assert_close(ours, ref)
    for a, b in zip(torch.autograd.grad(ours * 3.0, (h, emb)), torch.autograd.grad(ref * 3.0, (h, emb))):
        torch.testing.assert_close(a, b)  # an upstream gradient other than 1 scales through
    assert torch.autograd.gradcheck(lambda a, b: full_cross_entropy(a, b, t), (h, emb))


def previous_row_layout_ce(h: torch.Tensor, emb: torch.Tensor, t: torch.Tensor, rows: int = 64) -> tuple:
    """The previous path of ``_CrossEntropy`` (blocks held as (rows, N) = ``h_b @ emb.T``): (loss, dL/dh, dL/demb)."""
    lse, gh, ge = torch.empty(h.shape[0], dtype=h.dtype), torch.empty_like(h), torch.zeros_like(emb)
    for s in range(0, h.shape[0], rows):
        hb = h[s : s + rows]
        scores = hb @ emb.T
        top = scores.amax(1, keepdim=True)
        z = scores.sub_(top).exp_().sum(1, keepdim=True)
        lse[s : s + rows] = z.log().add_(top).squeeze(1)
        g = scores.div_(z)
        g[torch.arange(len(hb)), t[s : s + rows] - 1] -= 1.0
        gh[s : s + rows] = g @ emb
        ge.addmm_(g.T, hb)
    loss = (lse - (h * emb[t - 1]).sum(-1)).mean()
    return loss, gh / h.shape[0], ge / h.shape[0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_full_ce_item_major_blocks_equal_the_previous_row_layout(dtype: torch.dtype) -> None:
    """The (N, rows) blocks (``emb @ h_b.T``) against the previous (rows, N) ones, at a size with several blocks
    and an uneven last one: the same loss and gradients to rounding (1e-12 in float64; float32 rounding)."""
    g = torch.Generator().manual_seed(5)
    h = (torch.randn(150, 32, generator=g) * 0.5).to(dtype).requires_grad_()
    emb = (torch.randn(3000, 32, generator=g) * 0.5).to(dtype).requires_grad_()
    t = torch.randint(1, 3001, (150,), generator=g)
    loss = full_cross_entropy(h, emb, t)
    gh, ge = torch.autograd.grad(loss, (h, emb))
    with torch.no_grad():
        ref, rh, re = previous_row_layout_ce(h, emb, t)
    tol = {"rtol": 1e-12, "atol": 1e-15} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-8}
    torch.testing.assert_close(loss, ref, **tol)
    torch.testing.assert_close(gh, rh, **tol)
    torch.testing.assert_close(ge, re, **tol)


def test_full_ce_gradients_of_one_input_and_value_without_gradients() -> None:
    """The gradients made in forward: right when only one input needs them; under no_grad the value alone."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(70, 4, generator=g, dtype=torch.float64)  # two blocks of 64 rows and more
    emb = torch.randn(13, 4, generator=g, dtype=torch.float64)
    t = torch.randint(1, 14, (70,), generator=g)
    ref_h, ref_e = h.clone().requires_grad_(), emb.clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(ref_h @ ref_e.T, t - 1)
    ref.backward()
    e_only = emb.clone().requires_grad_()
    full_cross_entropy(h, e_only, t).backward()
    torch.testing.assert_close(e_only.grad, ref_e.grad)
    h_only = h.clone().requires_grad_()
    full_cross_entropy(h_only, emb, t).backward()
    torch.testing.assert_close(h_only.grad, ref_h.grad)
    with torch.no_grad():
        value = full_cross_entropy(h.clone().requires_grad_(), emb, t)
    assert not value.requires_grad
    torch.testing.assert_close(value, ref.detach())


def test_bce_hand_computed() -> None:
    """One position, h . e_pos = 2, h . e_neg = -1: loss = log(1 + e^-2) + log(1 + e^-1)."""

    class Stub:
        def item_embeddings(self) -> torch.Tensor:
            return torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])

    hidden = torch.tensor([[[0.0, 0.0], [2.0, -1.0]]])
    batch = TrainBatch(torch.tensor([[0, 3]]), torch.tensor([[0, 1]]), negatives=torch.tensor([[0, 2]]))
    loss = get_objective("bce").loss(Stub(), batch, hidden, LossContext())
    assert math.isclose(float(loss), math.log1p(math.exp(-2)) + math.log1p(math.exp(-1)), rel_tol=1e-6)


def test_ce_sampled_logq_reference() -> None:
    model = small_model()
    samples = build_samples(Sequences.from_lists(SEQS), 6, "all")
    batch = make_batch(samples, np.arange(len(samples)), n_items=N_ITEMS)
    hidden = model.encode(batch.items)
    counts = torch.arange(1, N_ITEMS + 1)
    ctx = LossContext(n_negatives=5, log_q=popularity_log_q(counts))
    torch.manual_seed(4)
    loss = get_objective("ce_sampled").loss(model, batch, hidden, ctx)
    torch.manual_seed(4)
    negs = torch.multinomial(ctx.log_q.exp(), 5, replacement=True) + 1
    emb, lq = model.item_embeddings(), ctx.log_q
    terms = []
    for b in range(batch.items.shape[0]):
        for col in range(batch.items.shape[1]):
            t = int(batch.targets[b, col])
            if not t:
                continue
            h = hidden[b, col]
            logits = [h @ emb[t] - lq[t - 1]] + [
                h @ emb[n] - lq[n - 1] if int(n) != t else torch.tensor(-math.inf) for n in negs
            ]
            terms.append(-torch.log_softmax(torch.stack(logits), 0)[0])
    torch.testing.assert_close(loss, torch.stack(terms).mean())


def test_popularity_log_q() -> None:
    lq = popularity_log_q(torch.tensor([0, 1, 2]))
    torch.testing.assert_close(lq.exp(), torch.tensor([1 / 6, 2 / 6, 3 / 6]))
    torch.testing.assert_close(popularity_log_q(torch.tensor([0, 9]), "uniform").exp(), torch.tensor([0.5, 0.5]))


def test_objective_gradient_reaches_embeddings_not_padding_row() -> None:
    model = small_model().train()
    samples = build_samples(Sequences.from_lists(SEQS), 6, "all")
    batch = make_batch(samples, np.arange(len(samples)), n_items=N_ITEMS)
    loss = get_objective("ce_all").loss(model, batch, model.encode(batch.items), LossContext())
    loss.backward()
    grad = model.item_emb.weight.grad
    assert grad[1:].abs().sum() > 0 and grad[0].abs().sum() == 0


def test_negatives_are_drawn_past_torch_multinomial_s_limit() -> None:
    """ce_sampled (the objective docs/scaling.md names for large catalogues) drew its negatives with
    torch.multinomial, which refuses more than 2^24 categories: a catalogue of 16,777,217 items stopped at the
    first batch with torch's RuntimeError. Past that limit the draws come from the cumulative distribution; below
    it they are multinomial's, as every run has drawn them."""
    from resdom.training.objectives import MULTINOMIAL_MAX, draw_items

    big = torch.full((MULTINOMIAL_MAX + 1,), -math.log(MULTINOMIAL_MAX + 1))
    big[7] = math.log(0.5)  # another half on one item: a third of the whole mass
    torch.manual_seed(0)
    negs = draw_items(big, 4000)
    assert negs.dtype == torch.int64 and negs.shape == (4000,) and 0 <= int(negs.min()) <= int(negs.max()) <= \
        MULTINOMIAL_MAX
    assert 0.29 < float((negs == 7).double().mean()) < 0.38
    small = torch.log(torch.tensor([0.1, 0.0, 0.6, 0.3]))
    torch.manual_seed(1)
    got = draw_items(small, 50)
    torch.manual_seed(1)
    assert got.tolist() == torch.multinomial(small.exp(), 50, replacement=True).tolist()


def test_full_ce_blocks_stay_within_a_bound_off_the_cpu() -> None:
    """On a GPU the full softmax scored every position of the batch in one (N, P) block: 205 GB for 256 x 200
    positions at a million items, a CUDA out-of-memory error at the first batch. Past BLOCK_FLOATS scores it now
    takes as many rows a block as stay within it (the blocks the CPU takes, 64 rows, give the same loss and
    gradients: test_full_ce_equals_torch_cross_entropy_and_passes_gradcheck); the registered data sets' one block
    is unchanged."""
    from resdom.training.objectives import BLOCK_FLOATS, CPU_ROWS, block_rows

    assert block_rows("cpu", 51_200, 1_000_000) == CPU_ROWS
    assert block_rows("cuda", 256 * 200, 12_101) == 256 * 200  # the largest registered data set: one block
    rows = block_rows("cuda", 256 * 200, 1_000_000)
    assert rows == BLOCK_FLOATS // 1_000_000 == 1073 and rows * 1_000_000 <= BLOCK_FLOATS
    assert block_rows("cuda", 3, 10**10) == 1  # a catalogue past the bound: one row a block
