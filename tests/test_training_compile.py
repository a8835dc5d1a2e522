"""torch.compile of the training step: what still breaks its graph, and why."""

from __future__ import annotations

import torch
from test_training_support import toy_split

from resdom.models import build_model
from resdom.training.config import resolve_configs
from resdom.training.objectives import LossContext, full_cross_entropy, get_objective
from resdom.training.trainer import TrainStep


def test_training_step_graph_breaks_are_the_mask_check_and_the_eager_cross_entropy(monkeypatch) -> None:
    """Two breaks are left: ``causal_mask_bias``'s check for an input of padding alone (a host sync: such an input
    needs the dense mask to give the numbers it gives eagerly, and ``ce_last`` trains on empty prefixes) and the
    full-softmax cross-entropy, kept eager on purpose (its loop over 64-row blocks would be traced again for every
    row count). ``real_positions``' boolean indexing is traced with data-dependent shapes allowed."""
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)
    split = toy_split(n_users=20)
    m, _ = resolve_configs("sasrec", {"hidden": 16, "layers": 1, "heads": 2, "max_len": 8}, {"device": "cpu"},
                           n_items=split.n_items)
    torch.manual_seed(0)
    step = TrainStep(build_model(m).train(), get_objective("ce_all"), LossContext())
    items = torch.tensor([[0, 0, 4, 7, 10, 13, 16, 19]] * 3)
    targets = torch.tensor([[0, 0, 7, 10, 13, 16, 19, 22]] * 3)
    torch._dynamo.reset()
    try:
        ex = torch._dynamo.explain(step)(items, targets, None, None)
    finally:
        torch._dynamo.reset()
    where = sorted(b.user_stack[-1].name for b in ex.break_reasons)
    assert ex.graph_break_count == 2, [str(b.reason)[:200] for b in ex.break_reasons]
    assert where == ["causal_mask_bias", "loss"], where
    # the cross-entropy is the same function eagerly (compiler.disable only marks it)
    h, emb, t = torch.randn(70, 8), torch.randn(30, 8), torch.randint(1, 31, (70,))
    assert torch.equal(full_cross_entropy(h, emb, t), full_cross_entropy.__wrapped__(h, emb, t))
