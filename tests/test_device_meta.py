"""The GPU path, checked without a GPU (``device_harness``): resdom trains, evaluates, diagnoses and recommends with
its model and inputs on torch's ``meta`` device, where a tensor made on the CPU and combined with the model's fails
as it does on a GPU, and every branch written for a device other than the CPU runs. Values mean nothing there."""

from __future__ import annotations

import pytest
import torch
from device_harness import META, DeviceMix, on_meta
from test_training_support import toy_split

from resdom import distributed
from resdom.training.config import TrainConfig, resolve_configs
from resdom.training.trainer import fit

SMALL = {"hidden": 16, "layers": 2, "heads": 2, "max_len": 8}


def small(model: str) -> dict:
    return {k: v for k, v in SMALL.items() if model != "gru4rec" or k != "heads"}

TRAINED = [
    ("sasrec", {}), ("sasrec", {"objective": "ce_last"}), ("sasrec", {"objective": "bce"}),
    ("sasrec", {"objective": "ce_sampled"}), ("sasrec", {"precision": "bf16-loss"}),
    ("sasrec", {"readout": "mean"}), ("sasrec", {"readout": "pool"}), ("sasrec", {"readout": "query"}),
    ("sasrec", {"key_padding_mask": False}), ("sasrec", {"residual_gate": "channel"}),
    ("sasrec", {"length_groups": 2, "length_buckets": 2}), ("duorec", {"duorec_views": "both", "length_groups": 2}),
    ("bsarec", {}), ("bert4rec", {}), ("gru4rec", {}),
]


def test_the_harness_catches_a_cpu_tensor_meeting_the_models() -> None:
    x = torch.zeros(3, 4, device=META)
    with on_meta():
        with pytest.raises(DeviceMix):
            torch.matmul(x, torch.ones(4, 2))  # meta's own kernel lets this through; a GPU does not
        with pytest.raises(DeviceMix):
            x + torch.arange(4)
        assert (x + torch.tensor(1.0)).device == META and x[torch.tensor([0, 2])].shape == (2, 4)
        assert bool(x.sum() > 0) and x.cpu().device.type == "cpu"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:for .* copying from a non-meta parameter")  # a resume's weights, onto meta
@pytest.mark.parametrize("model,options", TRAINED, ids=[f"{m}-{'-'.join(map(str, o.values())) or 'default'}"
                                                         for m, o in TRAINED])
def test_a_fit_on_another_device_mixes_no_cpu_tensor_in(model, options, tmp_path, monkeypatch) -> None:
    """Training (each model, objective, readout, precision), validation, the training monitor, the test
    evaluation and a resumed run of ``fit`` with ``device`` resolved to meta."""
    from resdom.diagnostics.monitor import epoch_monitor

    split = toy_split(n_users=12, n_items=30)
    train_keys = set(TrainConfig.model_fields)
    m, t = resolve_configs(model, {**small(model), **{k: v for k, v in options.items() if k not in train_keys}},
                           {"epochs": 1, "batch_size": 8, "device": "cpu", "seed": 1, "monitor_every": 1,
                            **{k: v for k, v in options.items() if k in train_keys}}, n_items=split.n_items)
    monkeypatch.setattr(distributed, "resolve_device", lambda name, option="train.device": META)
    with on_meta(float64=False):
        fit(split, m, t, tmp_path / "run", {"source": "toy"}, progress=False, hooks=(epoch_monitor,))
        # resumed: the saved weights and Adam moments loaded onto the device
        fit(split, m, t.model_copy(update={"epochs": 2}), tmp_path / "run", {"source": "toy"}, progress=False,
            hooks=(epoch_monitor,))


def _built(model: str, split, **values):
    from resdom.models import build_model

    m, _ = resolve_configs(model, {**small(model), **values}, {"device": "cpu"}, n_items=split.n_items)
    torch.manual_seed(0)
    return build_model(m).to(META).eval()


MODELS = ["sasrec", "duorec", "bsarec", "bert4rec", "gru4rec"]


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_evaluation_and_every_diagnostic_on_another_device_mix_no_cpu_tensor_in(model) -> None:
    """``resdom.evaluate`` (beyond-accuracy too) and ``resdom.diagnose`` (every diagnostic, per head, and both
    mixing definitions) with the model and the device on meta, and no float64 tensor there (MPS has none)."""
    import resdom

    split = toy_split(n_users=12, n_items=30)
    net = _built(model, split)
    with on_meta(float64=False):
        resdom.evaluate(net, split, beyond=True, device=META)
        resdom.evaluate(net, split, part="valid", filter_seen=False, device=META)
        resdom.diagnose(net, split, device=META, seeds=(0,), alphas=(0.0, 1.0), per_head=model != "gru4rec")
        if model != "gru4rec":
            resdom.diagnose(net, split, "mixing,alpha", device=META, alphas=(0.5,), definition="sum_of_norms")


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_recommend_and_similar_items_on_another_device_mix_no_cpu_tensor_in(model) -> None:
    import pandas as pd

    from resdom.data.prepare import prepare_split
    from resdom.recommend import recommend, similar_items

    toy = toy_split(n_users=12, n_items=30)
    split = prepare_split(pd.DataFrame([(f"u{u}", f"i{x}", t) for u in range(len(toy.test))
                                        for t, x in enumerate(toy.test.inputs.sequence(u).tolist())],
                                       columns=["user_id", "item_id", "timestamp"]), "loo")
    net = _built(model, split)
    alpha = 1.0 if model == "gru4rec" else 0.5
    with on_meta(float64=False):
        recommend(net, split, k=3, exclude=["i1", "i2"], alpha=alpha, device=META)
        recommend(net, split, k=3, sequences={"s": ["i1", "i2", "i4"]}, filter_seen=False)
        similar_items(net, split, k=3, device=META)


@pytest.mark.slow
def test_diagnosing_a_run_directory_on_another_device_mixes_no_cpu_tensor_in(tmp_path) -> None:
    """``resdom diagnose RUN --device ...``'s path (``run_all``: every diagnostic and the per-user evidence) with the
    run's model loaded onto meta."""
    from resdom.diagnostics.runner import run_all

    split = toy_split(n_users=12, n_items=30)
    m, t = resolve_configs("sasrec", SMALL, {"epochs": 1, "batch_size": 8, "device": "cpu"}, n_items=split.n_items)
    fit(split, m, t, tmp_path / "run", {"source": "toy"}, progress=False)
    with on_meta(float64=False):
        run_all(tmp_path / "run", device="meta", progress=False, seeds=(0,), alphas=(0.0, 1.0))


@pytest.mark.parametrize("model", MODELS)
def test_the_other_branches_of_a_training_step_and_a_forward_pass_on_another_device(model) -> None:
    """``fit`` above reads every made-up boolean as True (a batch with an input of padding alone: the dense mask);
    here False (the mask in parts, attention over its ``bias()``), for one training step of each objective the
    model takes, in float32 and bf16-loss, and an inference forward pass."""
    import numpy as np

    from resdom.errors import ResdomError
    from resdom.models.interface import final_states
    from resdom.training.batches import build_samples, make_batch
    from resdom.training.objectives import OBJECTIVES, LossContext, popularity_log_q
    from resdom.training.trainer import TrainStep

    split = toy_split(n_users=12, n_items=30)
    net = _built(model, split).train()
    log_q = popularity_log_q(torch.ones(split.n_items))
    ran = []
    for name, objective in OBJECTIVES.items():
        try:
            resolve_configs(model, small(model), {"objective": name}, n_items=split.n_items)
        except ResdomError:  # an objective this model does not train with
            continue
        samples = build_samples(split.train, net.max_len, objective.layout)
        partners = np.arange(len(samples)) if net.needs_partners() else None
        batch = make_batch(samples, np.arange(8), n_items=split.n_items, rng=np.random.default_rng(0),
                           negatives=objective.needs_negatives, partners=partners).to(META)
        for precision in ("fp32", "bf16-loss"):
            step = TrainStep(net, objective, LossContext(n_negatives=4, log_q=log_q), precision)
            with on_meta(truth=False, float64=False):
                step(batch.items, batch.targets, batch.negatives, batch.sup_items).backward()
        ran.append(name)
    assert len(ran) >= (4 if model in ("sasrec", "duorec", "gru4rec") else 1), ran
    with on_meta(truth=False), torch.no_grad():
        final_states(net.eval(), torch.ones(4, net.max_len, dtype=torch.int64, device=META))
