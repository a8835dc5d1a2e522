"""experiments.shares_start, checked on the models: for every variant label of a causal model under the protocol of
the store's cells (gts), whether seed k of the variant starts where seed k of its base starts (every parameter the
base has drawn to the same value from the same seed, and the same inputs to each epoch's data order: window,
objective's sample layout, length bucketing, batch size, same-target partners) is what shares_start declares."""

from __future__ import annotations

import pytest
import torch

from resdom.experiments import MODEL_VARIANTS, model_variant, shares_runs, shares_start, variant_train_values
from resdom.models import build_model
from resdom.training.config import resolve_configs
from resdom.training.objectives import get_objective


def _start(label: str, source: str, seed: int = 3) -> tuple[dict[str, torch.Tensor], tuple]:
    name, values = model_variant(label)
    model_cfg, train_cfg = resolve_configs(name, values, variant_train_values(label), source=source, n_items=300,
                                           protocol="gts")
    torch.manual_seed(seed)  # as the trainer does, just before it builds the model
    model = build_model(model_cfg)
    order = (model_cfg.max_len, get_objective(train_cfg.objective).layout, model.full_window(),
             train_cfg.length_buckets, train_cfg.batch_size, model.needs_partners())
    return model.state_dict(), order


def _same_start(label: str, base: str, source: str) -> bool:
    (b, b_order), (v, v_order) = _start(base, source), _start(label, source)
    return b_order == v_order and all(k in v and v[k].shape == t.shape and torch.equal(v[k], t) for k, t in b.items())


@pytest.mark.parametrize("source", ["toys-ts", "beauty-ts"])
def test_shares_start_is_what_the_models_draw(source: str) -> None:
    pairs = [(label, model_variant(label)[0]) for label in MODEL_VARIANTS
             if model_variant(label)[0] in ("sasrec", "duorec", "bsarec")]
    found = {label: _same_start(label, base, source) for label, base in pairs}
    declared = {label: shares_start(label, base) for label, base in pairs}
    assert found == declared
    assert declared["sasrec-gate-channel"] and declared["sasrec-pool"] and declared["sasrec-p30"]
    assert not declared["sasrec-untied"] and not declared["sasrec-query"] and not declared["sasrec-celast"]


def test_shares_start_needs_the_variants_own_base() -> None:
    assert not shares_start("sasrec-gate", "duorec") and not shares_start("sasrec", "sasrec")
    assert all(shares_start(lb, "sasrec") for lb in MODEL_VARIANTS if shares_runs(lb, "sasrec"))
