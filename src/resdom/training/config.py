"""Typed, validated training configuration and the resolution of per-model defaults and presets.

``TrainConfig`` round-trips to plain data (``model_dump``); a run records the *resolved* config (objective
filled in, presets applied), so it can be rebuilt from ``config.json``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from resdom.checks import INT_LIMIT, NumbersModel, arg, closed_choice, literal_names
from resdom.errors import ResdomError, validation_error
from resdom.experiments import canonical_label, model_defaults, model_variant
from resdom.models import model_class
from resdom.models.config import (
    CausalConfig,
    ModelConfig,
    foreign_field_error,
    foreign_fields,
    make_model_config,
)
from resdom.names import METRICS, DeviceName
from resdom.training.objectives import OBJECTIVES, ObjectiveName, get_objective

MAX_SEED = INT_LIMIT  # the largest train.seed: every integer setting's bound (2^62), which a larger one met only
# after reproduce had checked its seeds against 2^63 and trained the other cells


class TrainConfig(NumbersModel):
    """How a model is trained (spec §2 and §6). ``objective=None`` means the model's default."""

    model_config = ConfigDict(extra="forbid")

    objective: ObjectiveName | None = Field(None, description=" | ".join(OBJECTIVES))
    epochs: int = Field(200, ge=1, description="maximum number of epochs")
    batch_size: int = Field(256, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    patience: int = Field(10, ge=1, description="epochs without improvement of `metric` before stopping")
    metric: str = Field("NDCG@10", description="validation metric for early stopping and the best checkpoint")
    seed: int = Field(17, ge=0, le=MAX_SEED)
    device: DeviceName = "auto"
    eval_batch_size: int = Field(256, ge=1)
    threads: int | None = Field(
        None, ge=1, le=4096, description="CPU threads for torch (None: torch's default); 1 is fastest on a busy machine"
    )
    n_negatives: int = Field(256, ge=1, description="ce_sampled: shared negatives per batch")
    negative_sampling: Literal["popularity", "uniform"] = Field(
        "popularity", description="ce_sampled: proposal distribution Q (log-Q corrected)"
    )
    length_groups: int = Field(
        4, ge=1,
        description="cut each batch into up to this many groups of similar input length, each padded only to its "
        "own longest input, and accumulate their gradients: the same update as the whole batch, less padding "
        "(1 = one pass per batch). With ce_all, ce_last and bce; where a loss needs the whole batch (DuoRec, "
        "ce_sampled) the model encodes the batch's rows in as many groups instead (the same states); not BSARec, "
        "whose filter always sees the full window",
    )
    length_buckets: int = Field(
        0, ge=0,
        description="length bucketing: sort by length within windows of this many batches, batches then shuffled "
        "(0 = off, plain shuffling). Faster still, but batches of similar lengths train worse (SASRec ce_all on "
        "Beauty: best valid NDCG@10 0.062 with 16 against 0.070 without). Not used for full-window models (BSARec)",
    )
    item_chunk: int | None = Field(
        None, ge=1, description="ignored, kept so that configs and runs that set it still load: the full-softmax CE "
        "no longer has an item-chunked variant (it was slower and larger than the default, which never holds a "
        "(positions x items) matrix: docs/scaling.md)"
    )
    precision: Literal["fp32", "bf16-loss"] = Field(
        "fp32", description="bf16-loss: the loss's item products (the full-softmax CE's three block products) under "
        "bfloat16 autocast with float32 accumulation, the softmax, loss, gradients' sums, the model's encoding and "
        "Adam in float32: 1.44x less CPU a beauty-ts epoch on a CPU with AVX-512 BF16, and on 3 seeds trained to "
        "early stopping test NDCG@10 and HRLI@1 inside fp32's seeds (benchmarks/RESULTS.md, \"Hardware levers\"). "
        "Evaluation, early stopping, ranks and every diagnostic stay float32. fp32 (the default) keeps every seeded "
        "run's numbers. The whole training step under bfloat16 is not offered: slower than bf16-loss (1.25x)",
    )
    monitor_every: int = Field(
        0, ge=0, description="every this many epochs, record HRLI@1, HRL2I@1 and the mixing ratio of the current "
        "model on a fixed validation subsample into metrics.jsonl (\"monitor\"); 0 = off. Changes no training result"
    )
    monitor_users: int = Field(1024, ge=1, description="validation users the monitor uses (a fixed random subset)")
    valid_users: int | None = Field(
        None, ge=1, description="validation users early stopping and the best checkpoint read each epoch: None = all "
        "of them; k = a fixed random subset of k drawn with train.seed (the paper's code: 1,024). The final "
        "metrics.json evaluates every validation user either way"
    )

    @field_validator("metric", mode="before")
    @classmethod
    def _known_metric(cls, v: Any) -> Any:
        return closed_choice(v, METRICS, "metric")  # any case: ndcg@10 is NDCG@10

    @field_validator("objective", "device", "negative_sampling", "precision", mode="before")
    @classmethod
    def _closed_choice(cls, v: Any, info: ValidationInfo) -> Any:
        """A closed choice in any case (``device: CPU``), a near miss named with the closest (``bf61``: did you mean
        bf16?)."""
        names = literal_names(cls.model_fields[str(info.field_name)].annotation)
        if info.field_name == "device" and isinstance(v, torch.device):  # a notebook's torch.device("cuda"): its name
            v = str(v)
        return v if v is None else closed_choice(v, names, str(info.field_name).replace("_", " "))


# Fields that may differ between an interrupted run and its resumption: the epochs draw nothing from them (but
# another device, or another CPU thread count, sums in another order: the last bits of the weights then differ)
RESUMABLE_FIELDS = frozenset({"epochs", "device", "eval_batch_size", "threads", "monitor_every", "monitor_users",
                              "item_chunk"})


def make_train_config(**values: Any) -> TrainConfig:
    """Validate ``values`` into a TrainConfig; a bad field becomes an OptionError naming ``train.<field>``."""
    try:
        return TrainConfig(**values)
    except ValidationError as e:
        raise validation_error(e, "train") from None


def resolve_configs(
    model_name: str,
    model_values: dict[str, Any] | None = None,
    train_values: dict[str, Any] | None = None,
    source: str | None = None,
    n_items: int = 0,
    protocol: str | None = None,
) -> tuple[ModelConfig, TrainConfig]:
    """Apply the protocol's defaults, then presets, then the user's explicit values; validate; check the pairing.

    ``model_values`` / ``train_values`` hold only what the user set (YAML, ``--set``, options); the model's protocol
    defaults and its per-data-set presets (``experiments.model_defaults``, keyed on the registered data set named
    by ``source``) fill the other fields. Raises ResdomError naming
    the bad field.
    """
    model_values = dict(model_values or {})
    train_values = dict(train_values or {})
    if "name" in model_values:  # read case-insensitively, as --model
        named = model_variant(canonical_label(str(model_values["name"]), "model.name"))[0]
        if named != model_name:
            raise ResdomError(f"model.name: {model_values['name']!r} contradicts {arg('model')} {model_name!r}")
    try:
        model_class(model_name)  # an unknown model is refused here
    except ValueError as e:
        raise ResdomError(f"{arg('model')}: {e}") from None
    foreign = foreign_fields(model_name, model_values)
    if foreign:  # before the defaults: a field of another model is the user's, named as given
        raise foreign_field_error(model_name, foreign[0])
    merged_model, merged_train = model_defaults(model_name, protocol, source)
    merged_model.update(model_values)
    merged_model.update(name=model_name, n_items=n_items)
    merged_train.update(train_values)
    model_cfg = make_model_config(**merged_model)
    train_cfg = make_train_config(**merged_train)
    train_cfg = with_objective(model_cfg, train_cfg)
    return model_cfg, train_cfg


def with_objective(model_cfg: ModelConfig, train_cfg: TrainConfig) -> TrainConfig:
    """``train_cfg`` with the model's default objective where none is set, after refusing objective/model pairs
    that are wrong by construction (an all-position objective on a non-causal model, spec §2; a sample layout the
    model cannot train from, such as masked-item CE on a model that does not mask its input)."""
    cls = model_class(model_cfg.name)
    query = isinstance(model_cfg, CausalConfig) and model_cfg.readout == "query"
    name: str | None = train_cfg.objective
    if name is None:  # a query token is read after the whole prefix only: one prediction a sample
        name = "ce_last" if query else cls.default_objective
        train_cfg = train_cfg.model_copy(update={"objective": name})
    objective = get_objective(name)
    if query and objective.layout != "last":
        raise ResdomError(f"train.objective: {objective.name!r} cannot train model.readout='query': the query token "
                          "is read after the whole prefix only; use ce_last")
    if not cls.causal and objective.layout == "all":
        raise ResdomError(f"train.objective: {objective.name!r} cannot train {cls.name}: {cls.noncausal_reason}; "
                          f"use {cls.default_objective} (the default for {cls.name})")
    if objective.layout not in cls.train_layouts:
        fits = [o.name for o in OBJECTIVES.values() if o.layout in cls.train_layouts]
        raise ResdomError(f"train.objective: {objective.name!r} cannot train {cls.name}: it needs a model that "
                          f"{LAYOUT_NEEDS.get(objective.layout, 'trains from ' + objective.layout + ' samples')}; "
                          f"use one of {', '.join(fits)} (default {cls.default_objective})")
    return train_cfg


# What a sample layout asks of the model (for the refusal of a layout a model does not list in train_layouts).
LAYOUT_NEEDS = {"window": "masks its own input (bert4rec)", "all": "reads a prediction at every position",
                "last": "reads a prediction at the last position"}
