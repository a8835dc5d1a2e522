"""Typed, validated training configuration and the resolution of per-model defaults and presets.

``TrainConfig`` round-trips to plain data (``model_dump``); a run records the *resolved* config (objective
filled in, presets applied), so it can be rebuilt from ``config.json``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from resdom.errors import ResdomError
from resdom.models import MODEL_CLASSES, model_class
from resdom.models.config import REFERENCE_QUERY_LN, ModelConfig, format_validation_error
from resdom.names import METRICS, MODELS

ObjectiveName = Literal["ce_all", "ce_last", "bce", "ce_sampled", "mlm"]
DeviceName = Literal["auto", "cpu", "cuda", "mps"]

# Named variants of a model, usable wherever a grid names its models: label -> (model, model values).
MODEL_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # time-to-split's own SASRec at its default max length (spec §8: the published GTS results of the paper's code)
    "sasrec-tts": ("sasrec", {**REFERENCE_QUERY_LN, "max_len": 128}),
    # DuoRec on time-to-split's SASRec block (keys and values from the raw X): resdom's GTS DuoRec before the fix
    "duorec-tts": ("duorec", {**REFERENCE_QUERY_LN, "query_ln_kv": "input"}),
}

# Training-time remedies for residual dominance (docs/remedies.md): variant -> model values on top of the model's
# own protocol defaults. Registered in MODEL_VARIANTS as "<model>-<variant>" for SASRec, DuoRec and BSARec (BSARec
# is post-LN only: no preln); "base" is the model itself.
REMEDIES: dict[str, dict[str, Any]] = {
    "base": {},
    "res0.5": {"residual_scale": 0.5},
    "res0.75": {"residual_scale": 0.75},
    "gate": {"residual_gate": "scalar"},
    "gate-channel": {"residual_gate": "channel"},
    "preln": {"norm_first": True, "query_ln": False},
    "mean3": {"readout": "mean", "readout_k": 3},
    "pool": {"readout": "pool"},
}
REMEDY_MODELS: tuple[str, ...] = ("sasrec", "duorec", "bsarec")


def remedy_label(model: str, variant: str) -> str:
    """The grid label of ``variant`` (a REMEDIES key) of ``model``: the model itself for "base"; a ResdomError
    naming --variants / --model otherwise. Both are read case-insensitively."""
    model, variant = str(model).strip().lower(), str(variant).strip().lower()
    if model not in REMEDY_MODELS:
        raise ResdomError(f"--model: remedies apply to {', '.join(REMEDY_MODELS)}, not {model!r}")
    if variant not in REMEDIES:
        raise ResdomError(f"--variants: unknown variant {variant!r}; one of {', '.join(REMEDIES)}")
    label = model if variant == "base" else f"{model}-{variant}"
    if label != model and label not in MODEL_VARIANTS:
        raise ResdomError(f"--variants: {variant!r} does not apply to {model} (it is post-LN only)")
    return label


for _model in REMEDY_MODELS:
    for _variant, _values in REMEDIES.items():
        if _variant != "base" and not (_model == "bsarec" and _variant == "preln"):
            MODEL_VARIANTS[f"{_model}-{_variant}"] = (_model, dict(_values))
# Probes of the residual account (docs/results.md, "Beyond the paper"): read out at a learned query token appended
# after the prefix (no own-item residual at the readout position), and untied or projected output embeddings.
PROBES: dict[str, dict[str, Any]] = {
    "query": {"readout": "query"},
    "untied": {"output": "untied"},
    "projected": {"output": "projected"},
}
for _model in ("sasrec", "duorec"):
    for _probe, _values in PROBES.items():
        MODEL_VARIANTS[f"{_model}-{_probe}"] = (_model, dict(_values))
# Every remedy grid label, in the comparison's order: each model, then its variants in REMEDIES order.
REMEDY_LABELS: tuple[str, ...] = tuple(
    m if v == "base" else f"{m}-{v}" for m in REMEDY_MODELS for v in REMEDIES
    if v == "base" or f"{m}-{v}" in MODEL_VARIANTS)


def remedy_variant(label: str) -> tuple[str, str] | None:
    """(model, variant) of a remedy variant's grid label ("sasrec-gate" -> ("sasrec", "gate")); None for any other
    label, the base models themselves included."""
    model = label.split("-", 1)[0]
    if label == model or label not in REMEDY_LABELS:
        return None
    return model, label[len(model) + 1:]


def model_variant(label: str) -> tuple[str, dict[str, Any]]:
    """A model name or a ``MODEL_VARIANTS`` label -> (model name, the variant's model values)."""
    if label in MODEL_VARIANTS:
        name, values = MODEL_VARIANTS[label]
        return name, dict(values)
    return label, {}


def model_labels() -> tuple[str, ...]:
    """Every name a command accepts for a model: the models (``names.MODELS``), then the ``MODEL_VARIANTS``."""
    return (*MODELS, *MODEL_VARIANTS)


def canonical_label(name: str, option: str = "--model") -> str:
    """``name`` as a model or variant label (``model_labels``), read case-insensitively ("SASRec-TTS" ->
    "sasrec-tts"); a ResdomError naming ``option``, the closest label and every label otherwise."""
    import difflib

    key = str(name).strip().lower()
    known = model_labels()
    if key in known:
        return key
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ResdomError(f"{option}: unknown model {name!r}{hint}; one of {', '.join(known)}")

METRIC_NAMES = METRICS


class TrainConfig(BaseModel):
    """How a model is trained (spec §2 and §6). ``objective=None`` means the model's default."""

    model_config = ConfigDict(extra="forbid")

    objective: ObjectiveName | None = Field(None, description="ce_all | ce_last | bce | ce_sampled | mlm")
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
RESUMABLE_FIELDS = frozenset({"epochs", "device", "eval_batch_size", "threads", "monitor_every", "monitor_users",
                              "item_chunk"})


def make_train_config(**values: Any) -> TrainConfig:
    """Validate ``values`` into a TrainConfig; a bad field becomes a ResdomError naming ``train.<field>``."""
    try:
        return TrainConfig(**values)
    except ValidationError as e:
        raise ResdomError(format_validation_error(e, "train")) from None


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
    try:
        cls = model_class(model_name)
    except ValueError as e:
        raise ResdomError(f"--model: {e}") from None
    _check_own_fields(model_name, model_values)
    merged_model, merged_train = cls.defaults(protocol, source)
    merged_model.update(model_values)
    merged_model.update(name=model_name, n_items=n_items)
    merged_train.update(train_values)
    from resdom.models.config import make_model_config

    model_cfg = make_model_config(**merged_model)
    train_cfg = make_train_config(**merged_train)
    train_cfg = with_objective(model_cfg, train_cfg)
    return model_cfg, train_cfg


def with_objective(model_cfg: ModelConfig, train_cfg: TrainConfig) -> TrainConfig:
    """``train_cfg`` with the model's default objective where none is set, after refusing objective/model pairs
    that are wrong by construction (an all-position objective on a non-causal model, spec §2; a sample layout the
    model cannot train from, such as masked-item CE on a model that does not mask its input)."""
    from resdom.training.objectives import OBJECTIVES, get_objective

    cls = model_class(model_cfg.name)
    if train_cfg.objective is None:  # a query token is read after the whole prefix only: one prediction a sample
        default = "ce_last" if model_cfg.readout == "query" else cls.default_objective
        train_cfg = train_cfg.model_copy(update={"objective": default})
    objective = get_objective(train_cfg.objective)
    if model_cfg.readout == "query" and objective.layout != "last":
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


def _check_own_fields(model_name: str, values: dict[str, Any]) -> None:
    """A field of another model, or one that means nothing for this model (``unused_fields``: GRU4Rec's attention
    fields), set to anything but its default, is an error naming it (a run's own config.json holds every such
    field at its default, so it passes)."""
    for key in model_class(model_name).unused_fields:
        if key in values and values[key] != ModelConfig.model_fields[key].default:
            raise ResdomError(f"model.{key}: does not apply to {model_name} (nothing in it uses {key}); leave it out")
    for other, cls in MODEL_CLASSES.items():
        if other == model_name:
            continue
        for key in cls.own_fields:
            if key in values and values[key] != ModelConfig.model_fields[key].default:
                raise ResdomError(f"model.{key}: applies to {other} only, not to {model_name}")
