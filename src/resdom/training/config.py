"""Typed, validated training configuration and the resolution of per-model defaults and presets.

``TrainConfig`` round-trips to plain data (``model_dump``); a run records the *resolved* config (objective
filled in, presets applied), so it can be rebuilt from ``config.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from resdom.errors import ResdomError
from resdom.evaluation.ranking import KS
from resdom.models.config import (
    BSAREC_PRESETS,
    REFERENCE_POST_LN,
    REFERENCE_QUERY_LN,
    ModelConfig,
    format_validation_error,
)

ObjectiveName = Literal["ce_all", "ce_last", "bce", "ce_sampled"]
DeviceName = Literal["auto", "cpu", "cuda", "mps"]

# Objective used when the user does not choose one (SPEC 2): BSARec's low-pass filter is not causal.
DEFAULT_OBJECTIVE: dict[str, str] = {"sasrec": "ce_all", "duorec": "ce_all", "bsarec": "ce_last"}

# Training-side part of BSARec's presets (SPEC 8); the architecture part is models.config.BSAREC_PRESETS.
BSAREC_TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    "beauty": {"lr": 5e-4}, "sports": {"lr": 1e-3}, "toys": {"lr": 1e-3}, "yelp": {"lr": 1e-3}, "lastfm": {"lr": 1e-3},
    "ml-1m": {"lr": 5e-4},
}

# Named variants of a model, usable wherever a grid names its models: label -> (model, model values).
MODEL_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # time-to-split's own SASRec at its default max length (SPEC 8: the published GTS results of the paper's code)
    "sasrec-tts": ("sasrec", {**REFERENCE_QUERY_LN, "max_len": 128}),
}


def protocol_defaults(model_name: str, protocol: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model values, train values) a protocol implies for a model, under the user's own (SPEC 6).

    GTS follows the reference paper's code: SASRec with its post-LN block at max length 200, DuoRec with the
    query-LN block its DuoRec uses (unsupervised view, ce_all), up to 300 epochs. LOO follows BSARec's code base
    (ModelConfig's defaults). BSARec keeps its own architecture under both, its padding row initialised as there.
    """
    if model_name == "bsarec":
        return {"init_padding": True}, {}
    if protocol == "gts" and model_name == "sasrec":
        return dict(REFERENCE_POST_LN), {"epochs": 300}
    if protocol == "gts" and model_name == "duorec":
        return {**REFERENCE_QUERY_LN, "max_len": 200, "duorec_views": "unsup"}, {"epochs": 300}
    return {}, {}


def model_variant(label: str) -> tuple[str, dict[str, Any]]:
    """A model name or a ``MODEL_VARIANTS`` label -> (model name, the variant's model values)."""
    if label in MODEL_VARIANTS:
        name, values = MODEL_VARIANTS[label]
        return name, dict(values)
    return label, {}

METRIC_NAMES = tuple(f"{m}@{k}" for m in ("HR", "NDCG") for k in KS) + ("MRR",)


class TrainConfig(BaseModel):
    """How a model is trained (SPEC 2 and 6). ``objective=None`` means the model's default."""

    model_config = ConfigDict(extra="forbid")

    objective: ObjectiveName | None = Field(None, description="ce_all | ce_last | bce | ce_sampled")
    epochs: int = Field(200, ge=1, description="maximum number of epochs")
    batch_size: int = Field(256, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    patience: int = Field(10, ge=1, description="epochs without improvement of `metric` before stopping")
    metric: str = Field("NDCG@10", description="validation metric for early stopping and the best checkpoint")
    seed: int = Field(17, ge=0)
    device: DeviceName = "auto"
    eval_batch_size: int = Field(256, ge=1)
    threads: int | None = Field(
        None, ge=1, description="CPU threads for torch (None: torch's default); 1 is fastest on a busy machine"
    )
    n_negatives: int = Field(256, ge=1, description="ce_sampled: shared negatives per batch")
    negative_sampling: Literal["popularity", "uniform"] = Field(
        "popularity", description="ce_sampled: proposal distribution Q (log-Q corrected)"
    )
    length_groups: int = Field(
        4, ge=1,
        description="cut each batch into up to this many groups of similar input length, each padded only to its "
        "own longest input, and accumulate their gradients: the same update as the whole batch, less padding "
        "(1 = one pass per batch). Used with ce_all, ce_last and bce, not with DuoRec or BSARec",
    )
    length_buckets: int = Field(
        0, ge=0,
        description="length bucketing: sort by length within windows of this many batches, batches then shuffled "
        "(0 = off, plain shuffling). Faster still, but batches of similar lengths train worse (SASRec ce_all on "
        "Beauty: best valid NDCG@10 0.062 with 16 against 0.070 without). Not used for full-window models (BSARec)",
    )
    item_chunk: int | None = Field(
        None, ge=1, description="full-softmax CE over items in chunks of this size (bounded memory); None = one go"
    )
    monitor_every: int = Field(
        0, ge=0, description="every this many epochs, record HRLI@1, HRL2I@1 and the mixing ratio of the current "
        "model on a fixed validation subsample into metrics.jsonl (\"monitor\"); 0 = off. Changes no training result"
    )
    monitor_users: int = Field(1024, ge=1, description="validation users the monitor uses (a fixed random subset)")

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        if v not in METRIC_NAMES:
            raise ValueError(f"unknown metric {v!r}; one of {', '.join(METRIC_NAMES)}")
        return v


# Fields that may differ between an interrupted run and its resumption without changing the result.
RESUMABLE_FIELDS = frozenset({"epochs", "device", "eval_batch_size", "threads", "monitor_every", "monitor_users"})


def make_train_config(**values: Any) -> TrainConfig:
    """Validate ``values`` into a TrainConfig; a bad field becomes a ResdomError naming ``train.<field>``."""
    try:
        return TrainConfig(**values)
    except ValidationError as e:
        raise ResdomError(format_validation_error(e, "train")) from None


def preset_name(source: str | None) -> str | None:
    """The BSARec preset matching a data source name or path (``beauty-ts`` -> ``beauty``), or None."""
    if not source:
        return None
    name = Path(str(source)).name.lower()
    for suffix in (".txt", ".inter", ".csv", ".tsv", ".parquet", ".gz", ".dat"):
        name = name.removesuffix(suffix)
    name = name.removesuffix("-ts").removesuffix("_ts")
    aliases = {"sports_and_outdoors": "sports", "toys_and_games": "toys", "ml1m": "ml-1m"}
    name = aliases.get(name, name)
    if name in BSAREC_PRESETS:
        return name
    return next((p for p in BSAREC_PRESETS if name.startswith(p + "-") or name.startswith(p + "_")), None)


def resolve_configs(
    model_name: str,
    model_values: dict[str, Any] | None = None,
    train_values: dict[str, Any] | None = None,
    source: str | None = None,
    n_items: int = 0,
    protocol: str | None = None,
) -> tuple[ModelConfig, TrainConfig]:
    """Apply the protocol's defaults, then presets, then the user's explicit values; validate; check the pairing.

    ``model_values`` / ``train_values`` hold only what the user set (YAML, ``--set``, options); protocol defaults
    (``protocol_defaults``) and BSARec's per-data-set presets fill the other fields. Raises ResdomError naming
    the bad field.
    """
    model_values = dict(model_values or {})
    train_values = dict(train_values or {})
    if "name" in model_values and model_values["name"] != model_name:
        raise ResdomError(f"model.name: {model_values['name']!r} contradicts --model {model_name!r}")
    merged_model, merged_train = protocol_defaults(model_name, protocol)
    preset = preset_name(source) if model_name == "bsarec" else None
    if preset:
        merged_model.update(BSAREC_PRESETS[preset])
        merged_train.update(BSAREC_TRAIN_PRESETS.get(preset, {}))
    merged_model.update(model_values)
    merged_model.update(name=model_name, n_items=n_items)
    merged_train.update(train_values)
    from resdom.models.config import make_model_config

    model_cfg = make_model_config(**merged_model)
    train_cfg = make_train_config(**merged_train)
    if train_cfg.objective is None:
        train_cfg = train_cfg.model_copy(update={"objective": DEFAULT_OBJECTIVE[model_name]})
    check_pairing(model_cfg, train_cfg)
    return model_cfg, train_cfg


def check_pairing(model_cfg: ModelConfig, train_cfg: TrainConfig) -> None:
    """Refuse objective/model pairs that are wrong by construction (SPEC 2)."""
    from resdom.training.objectives import get_objective

    objective = get_objective(train_cfg.objective or DEFAULT_OBJECTIVE[model_cfg.name])
    if model_cfg.name == "bsarec" and objective.layout == "all":
        raise ResdomError(
            f"train.objective: {objective.name!r} cannot train bsarec: its low-pass filter is not causal, so every "
            "position sees later items of the window, including the very item it must predict (label leakage, "
            "SPEC 2); use ce_last (the default for bsarec)"
        )
