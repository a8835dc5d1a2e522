"""Experiment settings as plain data, torch-free: every setting an experiment takes from resdom rather than from
the user, in one place.

- Reference architectures (spec §6): ``REFERENCE_POST_LN``, ``REFERENCE_QUERY_LN``, time-to-split's BERT4Rec and
  GRU4Rec (``TIME_TO_SPLIT_BERT4REC``, ``TIME_TO_SPLIT_GRU4REC``), as ModelConfig values.
- What each model supports (``MODEL_TRAITS``): the ModelConfig values its architecture refuses (its configuration
  class refuses them too). The variants below read it, so no module names a model to decide what applies to it.
- Protocol defaults (``PROTOCOL_DEFAULTS``): the model and train values each model's reference code base uses
  under a protocol; per-data-set presets (``DATASET_PRESETS``: BSARec's published settings), keyed on the names of
  the data registry (``data/registry.py``), not parsed from file names. ``model_defaults`` combines them;
  ``training.config.resolve_configs`` puts the user's values on top.
- Model variants (``MODEL_VARIANTS``): named labels a grid can train, each a model and its values: the named
  references (``NAMED_VARIANTS``), the training-time remedies (``REMEDIES``, docs/remedies.md) of
  ``REMEDY_MODELS`` and the probes of the residual account (``PROBES``) of ``PROBE_MODELS``, wherever the model
  supports them (``MODEL_TRAITS``), and the model's own block trained another way (``TRAINING_VARIANTS``: train
  values, ``variant_train_values``, e.g. the query probe's objective on SASRec); ``REMEDY_LABELS`` orders the
  remedies for their comparison; ``canonical_label`` reads any of these names as a command does.

Nothing here imports a model: ``training.config`` (which validates) and ``report`` (which reads labels) both take
their settings from this module.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from resdom.checks import closest_hint
from resdom.errors import ResdomError
from resdom.names import MODELS, PROTOCOLS

Values = dict[str, Any]

# ------------------------------------------------------------------------------------- reference architectures

# The reference paper's SASRec: post-LN blocks, LN(Dropout(E * sqrt(d) + P)) input, FFN d with ReLU, max length 200.
# Its query/key/value projections are nn.MultiheadAttention's (Xavier-uniform, zero biases) and its FFN has pmixer's
# dropout after the first layer; no final LayerNorm (the last public commit of its code comments it out: spec §6).
REFERENCE_POST_LN: Values = {
    "embedding": "dropout_ln", "emb_scale": True, "ln_eps": 1e-8, "inner_mult": 1, "activation": "relu",
    "positions": "from_start", "max_len": 200, "qkv_init": "xavier", "ffn_dropout": True,
}
# time-to-split's SASRec and the paper's DuoRec: the query-LN block, Dropout(E * sqrt(d) + P) input, a final LN
# (the paper's DuoRec adds query_ln_kv="query": keys and values from LN_a(X), dropout on the attention output).
REFERENCE_QUERY_LN: Values = {
    "query_ln": True, "final_ln": True, "embedding": "dropout", "emb_scale": True, "ln_eps": 1e-8, "inner_mult": 1,
    "activation": "relu", "positions": "from_start",
}
# time-to-split's BERT4Rec (its grid point 41: d 64, 2 layers, 2 heads, dropout 0.5; max length 128;
# models/bert4rec.py).
TIME_TO_SPLIT_BERT4REC: Values = {
    "max_len": 128, "hidden": 64, "layers": 2, "heads": 2, "dropout": 0.5, "attn_dropout": 0.1, "inner_mult": 2,
    "activation": "gelu", "embedding": "ln_dropout", "emb_scale": False, "ln_eps": 1e-12, "positions": "from_start",
    "final_ln": False, "mask_prob": 0.2,
}
# time-to-split's GRU4Rec (its grid point 32: d 64, 1 layer, dropout 0.1; max length 128; models/gru4rec.py).
TIME_TO_SPLIT_GRU4REC: Values = {"max_len": 128, "hidden": 64, "layers": 1, "dropout": 0.1}


# ------------------------------------------------------------------------------------------ training recipes

# The version of each model's training recipe (initialisation, dropout sites, LayerNorms), recorded in every run's
# config.json (``versions.recipe``, e.g. "sasrec/2") and so in every results-store cell; raised whenever a change
# alters what a seeded run of that model trains. sasrec 2: the reference paper's SASRec (GTS) initialises its
# query/key/value projections Xavier-uniform and has dropout inside its FFN, as its code (recipe 1 had neither).
# sasrec 3, duorec 2: ``ce_last``'s empty first prefix, in a batch trimmed below max_len with positions counted
# from the end, gets the state of the max_len window (``SequentialRecommender.encode_tokens``; it depended on the
# batch's longest row).
RECIPE_VERSIONS: dict[str, int] = {"sasrec": 3, "duorec": 2, "bsarec": 1, "bert4rec": 1, "gru4rec": 1}


def _empty_prefix_windowed(v: Mapping[str, Any]) -> bool:
    """Whether sasrec 3 / duorec 2 changed what a run of model and train values ``v`` trains: ``ce_last`` (whose
    first prefix is empty) on a trimmed model (a key-padding mask) with positions counted from the end, read at the
    last state (a query token makes no prefix empty)."""
    return (v.get("objective") == "ce_last" and v.get("positions") == "from_end"
            and bool(v.get("key_padding_mask", True)) and v.get("readout", "last") != "query")


# Which configurations each version changed (model -> version -> a test over the run's model values and train values,
# one mapping): a run records the latest version that changed what its configuration trains, so a run of a
# configuration no change touched reads as the same recipe as the runs trained before. sasrec 2 changed post-LN and
# pre-LN blocks with Xavier projections or FFN dropout; the query-LN block (``sasrec-tts``) always had both, and LOO's
# sasrec (BSARec's code base) has neither.
RECIPE_CHANGES: dict[str, dict[int, Callable[[Mapping[str, Any]], bool]]] = {
    "sasrec": {2: lambda v: not v.get("query_ln", False)
               and (v.get("qkv_init", "normal") == "xavier" or bool(v.get("ffn_dropout", False))),
               3: _empty_prefix_windowed},
    "duorec": {2: _empty_prefix_windowed},
}


def recipe_label(model: str, values: Mapping[str, Any] | None = None) -> str:
    """``"<model>/<version>"``: the latest version of ``model``'s training recipe (``RECIPE_VERSIONS``) that changed
    what a run of ``values`` (its model values with its train values, one mapping) trains (``RECIPE_CHANGES``;
    without values, the latest version)."""
    return f"{model}/{RECIPE_VERSIONS[model] if values is None else recipe_version(model, values)}"


def recipe_version(model: str, values: Mapping[str, Any]) -> int:
    """The latest version of ``model``'s training recipe that changed what a run of ``values`` (model and train
    values, one mapping) trains (``RECIPE_CHANGES``; 1 where none did)."""
    return max((version for version, applies in RECIPE_CHANGES.get(model, {}).items() if applies(values)), default=1)


# ---------------------------------------------------------------------------------------------- model traits


@dataclass(frozen=True)
class ModelTraits:
    """What a model's architecture supports, as plain data.

    ``refuses``: ModelConfig fields -> the values the model cannot take (BSARec's frequency branch sits in a
    post-LN layer: no pre-LN or query-LN block); ``min_max_len``: the shortest window it runs on; ``heads``: whether
    it has attention heads (``hidden`` must then be divisible by ``heads``); ``why``: the refusal, one line;
    ``contrast``: one of the paper's contrast models (spec §7: BERT4Rec, GRU4Rec), not one of the causal
    self-attention recommenders whose last-item reliance it studies (SASRec, DuoRec, BSARec).
    """

    refuses: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    min_max_len: int = 1
    heads: bool = True
    why: str = ""
    contrast: bool = False

    def refused(self, values: Mapping[str, Any]) -> list[str]:
        """The fields of ``values`` (ModelConfig values) the model refuses (``max_len`` below ``min_max_len``
        included)."""
        out = [k for k, bad in self.refuses.items() if k in values and values[k] in bad]
        if "max_len" in values and values["max_len"] < self.min_max_len:
            out.append("max_len")
        return out

    def supports(self, values: Mapping[str, Any]) -> bool:
        """Whether the model takes every one of ``values``."""
        return not self.refused(values)


MODEL_TRAITS: dict[str, ModelTraits] = {
    "sasrec": ModelTraits(),
    "duorec": ModelTraits(),
    "bsarec": ModelTraits(refuses={"norm_first": (True,), "query_ln": (True,)},
                          why="bsarec is post-LN only (norm_first and query_ln must be false)"),
    "bert4rec": ModelTraits(refuses={"key_padding_mask": (False,)}, min_max_len=2,
                            why="bert4rec needs max_len >= 2 (its input items and the appended [MASK]) and "
                                "key_padding_mask (its attention is bidirectional: padding must not be attended to)",
                            contrast=True),
    "gru4rec": ModelTraits(heads=False, contrast=True),
}
assert tuple(MODEL_TRAITS) == MODELS, "resdom.names.MODELS and MODEL_TRAITS disagree"
assert tuple(RECIPE_VERSIONS) == MODELS, "resdom.names.MODELS and RECIPE_VERSIONS disagree"
assert all(max(RECIPE_CHANGES.get(m, {}), default=1) == v for m, v in RECIPE_VERSIONS.items()), \
    "RECIPE_VERSIONS and RECIPE_CHANGES disagree"
# The causal self-attention recommenders whose last-item reliance resdom studies (SASRec, DuoRec, BSARec): every
# model but the contrast models, by their traits.
CAUSAL_MODELS: tuple[str, ...] = tuple(m for m, traits in MODEL_TRAITS.items() if not traits.contrast)


# --------------------------------------------------------------------------------- defaults and presets

ANY_PROTOCOL = "*"
# model -> protocol ("*": every protocol, also none) -> (model values, train values) of its reference code base.
# Under LOO SASRec and DuoRec are BSARec's code base, which is ModelConfig's defaults; under GTS the reference paper's.
PROTOCOL_DEFAULTS: dict[str, dict[str, tuple[Values, Values]]] = {
    "sasrec": {"gts": (REFERENCE_POST_LN, {"epochs": 300})},
    # the reference paper's DuoRec: its block (MHA(Q, Q, Q) on Q = LN_a(X), dropout on its output) at max length 200,
    # the unsupervised view, ce_all
    "duorec": {"gts": ({**REFERENCE_QUERY_LN, "query_ln_kv": "query", "max_len": 200, "duorec_views": "unsup"},
                       {"epochs": 300})},
    # BSARec's own architecture under every protocol, its padding row initialised as in its code
    "bsarec": {ANY_PROTOCOL: ({"init_padding": True}, {})},
    # time-to-split's values under every protocol (there is no other reference for them)
    "bert4rec": {ANY_PROTOCOL: (TIME_TO_SPLIT_BERT4REC, {"epochs": 300})},
    "gru4rec": {ANY_PROTOCOL: (TIME_TO_SPLIT_GRU4REC, {"epochs": 300})},
}

# BSARec's published per-data-set settings (spec §8): (a, c, heads) and the learning rate, per the paper's data set
BSAREC_PUBLISHED: dict[str, tuple[Values, Values]] = {
    "beauty": ({"bsa_a": 0.7, "bsa_c": 5, "heads": 1}, {"lr": 5e-4}),
    "sports": ({"bsa_a": 0.3, "bsa_c": 5, "heads": 4}, {"lr": 1e-3}),
    "toys": ({"bsa_a": 0.7, "bsa_c": 3, "heads": 1}, {"lr": 1e-3}),
    "yelp": ({"bsa_a": 0.7, "bsa_c": 3, "heads": 4}, {"lr": 1e-3}),
    "lastfm": ({"bsa_a": 0.9, "bsa_c": 3, "heads": 1}, {"lr": 1e-3}),
    "ml-1m": ({"bsa_a": 0.3, "bsa_c": 9, "heads": 4}, {"lr": 5e-4}),
}
# the registered data sets (data/registry.py) that hold one of BSARec's six -> that data set
BSAREC_DATA: dict[str, str] = {
    "beauty": "beauty", "beauty-ts": "beauty", "beauty-ts-itemties": "beauty", "beauty-tts": "beauty",
    "sports": "sports", "sports-ts": "sports", "sports-ts-itemties": "sports", "sports-tts": "sports",
    "toys": "toys", "toys-ts": "toys", "yelp": "yelp", "yelp-ts": "yelp", "lastfm": "lastfm",
    "ml-1m": "ml-1m", "ml-1m-part": "ml-1m",
}
# model -> registered data set -> (model values, train values), on top of the protocol defaults
DATASET_PRESETS: dict[str, dict[str, tuple[Values, Values]]] = {
    "bsarec": {name: BSAREC_PUBLISHED[paper] for name, paper in BSAREC_DATA.items()},
}


def recipe_protocol(protocol: str | None, has_timestamps: bool | None = None) -> str | None:
    """The protocol whose defaults (``PROTOCOL_DEFAULTS``) a run split by ``protocol`` trains with: ``protocol``
    itself, but for ``none`` (fit on everything) the protocol the default, auto, measures the same data by: gts
    where it has timestamps, loo where it has none, so the model fitted for deployment is the one measured (None
    while its timestamps are not known)."""
    if protocol != "none":
        return protocol
    return None if has_timestamps is None else "gts" if has_timestamps else "loo"


def model_defaults(model: str, protocol: str | None = None, source: str | None = None) -> tuple[Values, Values]:
    """(model values, train values) ``model``'s reference code base uses under ``protocol`` on ``source`` (a
    registered data set's name; a path or synthetic data has no preset): its defaults for every protocol, then
    those of ``protocol``, then its preset for ``source``. The user's own values go on top."""
    table = PROTOCOL_DEFAULTS.get(model, {})
    parts = [table.get(ANY_PROTOCOL, ({}, {})), table.get(protocol or "", ({}, {})),
             DATASET_PRESETS.get(model, {}).get(source or "", ({}, {}))]
    return {k: v for m, _ in parts for k, v in m.items()}, {k: v for _, t in parts for k, v in t.items()}


# ---------------------------------------------------------------------------------------------- variants

# Named variants of a model: label -> (model, model values).
NAMED_VARIANTS: dict[str, tuple[str, Values]] = {
    # time-to-split's own SASRec at its default max length (spec §8: the published GTS results of the paper's code)
    "sasrec-tts": ("sasrec", {**REFERENCE_QUERY_LN, "max_len": 128}),
    # DuoRec on time-to-split's SASRec block (keys and values from the raw X): resdom's GTS DuoRec before the fix
    "duorec-tts": ("duorec", {**REFERENCE_QUERY_LN, "query_ln_kv": "input"}),
}
# A model's own block trained another way: label -> (model, train values, lowest of the run's train values).
TRAINING_VARIANTS: dict[str, tuple[str, Values]] = {
    # the fair base of the query probe (question 1), which has one readout a sequence and so trains ce_last
    "sasrec-celast": ("sasrec", {"objective": "ce_last"}),
    # question 4: training on long past the NDCG@10 plateau (patience 30 epochs instead of 10)
    "sasrec-p30": ("sasrec", {"patience": 30}),
    # the paper's early stopping: validation NDCG@10 on a fixed sample of 1,024 validation users, not all of them
    # (a candidate cause of the differences from the paper, docs/results.md "The paper side by side")
    "sasrec-v1024": ("sasrec", {"valid_users": 1024}),
}
# Train fields that change when training stops and which epoch it keeps, never an epoch's training (validation reads
# no random stream the training does: tests/test_training_trainer.py). A training variant that sets only these trains,
# seed for seed, its model's very run, so a comparison of the two pairs their seeds (``shares_runs``).
STOPPING_FIELDS: frozenset[str] = frozenset({"epochs", "patience", "valid_users"})

# Training-time remedies for residual dominance (docs/remedies.md): variant -> model values on top of the model's
# own protocol defaults. Registered as "<model>-<variant>" for each of REMEDY_MODELS that supports the values
# (``MODEL_TRAITS``); "base" is the model itself.
REMEDIES: dict[str, Values] = {
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
# Probes of the residual account (docs/results.md, "Beyond the paper"): read out at a learned query token appended
# after the prefix (no own-item residual at the readout position), and untied or projected output embeddings;
# registered as "<model>-<probe>" for each of PROBE_MODELS that supports the values.
PROBES: dict[str, Values] = {
    "query": {"readout": "query"},
    "untied": {"output": "untied"},
    "projected": {"output": "projected"},
}
PROBE_MODELS: tuple[str, ...] = ("sasrec", "duorec")


def supports(model: str, values: Mapping[str, Any]) -> bool:
    """Whether ``model`` takes ``values`` (``MODEL_TRAITS``)."""
    return MODEL_TRAITS[model].supports(values)


def _variants() -> dict[str, tuple[str, Values]]:
    out = {label: (model, dict(values)) for label, (model, values) in NAMED_VARIANTS.items()}
    out.update({label: (model, {}) for label, (model, _) in TRAINING_VARIANTS.items()})
    for model in REMEDY_MODELS:
        for variant, values in REMEDIES.items():
            if variant != "base" and supports(model, values):
                out[f"{model}-{variant}"] = (model, dict(values))
    for model in PROBE_MODELS:
        for probe, values in PROBES.items():
            if supports(model, values):
                out[f"{model}-{probe}"] = (model, dict(values))
    return out


# Every variant label, usable wherever a grid names its models: label -> (model, model values).
MODEL_VARIANTS: dict[str, tuple[str, Values]] = _variants()
# Every remedy grid label, in the comparison's order: each model, then its variants in REMEDIES order.
REMEDY_LABELS: tuple[str, ...] = tuple(
    m if v == "base" else f"{m}-{v}" for m in REMEDY_MODELS for v in REMEDIES
    if v == "base" or f"{m}-{v}" in MODEL_VARIANTS)


def _meant(value: str, choices: tuple[str, ...]) -> str:
    """`` (did you mean X?)`` for the closest of ``choices``, "" where none is close."""
    hint = closest_hint(value, choices).strip()
    return f" ({hint})" if hint else ""


def remedy_label(model: str, variant: str) -> str:
    """The grid label of ``variant`` (a REMEDIES key) of ``model``: the model itself for "base"; a ResdomError
    naming --variants / --model otherwise. Both are read case-insensitively."""
    model, variant = str(model).strip().lower(), str(variant).strip().lower()
    if model not in REMEDY_MODELS:
        raise ResdomError(f"--model: remedies apply to {', '.join(REMEDY_MODELS)}, not {model!r}"
                          f"{_meant(model, REMEDY_MODELS)}")
    if variant not in REMEDIES:
        raise ResdomError(f"--variants: unknown variant {variant!r}; one of {', '.join(REMEDIES)}"
                          f"{_meant(variant, tuple(REMEDIES))}")
    label = model if variant == "base" else f"{model}-{variant}"
    if label != model and label not in MODEL_VARIANTS:
        raise ResdomError(f"--variants: {variant!r} does not apply to {model} ({MODEL_TRAITS[model].why})")
    return label


def remedy_variant(label: str) -> tuple[str, str] | None:
    """(model, variant) of a remedy variant's grid label ("sasrec-gate" -> ("sasrec", "gate")); None for any other
    label, the base models themselves included."""
    model = label.split("-", 1)[0]
    if label == model or label not in REMEDY_LABELS:
        return None
    return model, label[len(model) + 1:]


def studied_variant(label: str) -> bool:
    """Whether ``label`` is a remedy variant, a probe or a training variant of a model: a change studied against its
    base model in blocks and figures of its own (docs/remedies.md; docs/results.md, "Beyond the paper"), not a
    model of its own as the models and ``NAMED_VARIANTS`` are."""
    model, _, variant = label.partition("-")
    return (remedy_variant(label) is not None or label in TRAINING_VARIANTS
            or (model in PROBE_MODELS and variant in PROBES and label in MODEL_VARIANTS))


def model_variant(label: str) -> tuple[str, Values]:
    """A model name or a ``MODEL_VARIANTS`` label -> (model name, the variant's model values)."""
    if label in MODEL_VARIANTS:
        name, values = MODEL_VARIANTS[label]
        return name, dict(values)
    return label, {}


def variant_train_values(label: str) -> Values:
    """The train values a ``TRAINING_VARIANTS`` label sets (``{}`` for any other label)."""
    return dict(TRAINING_VARIANTS[label][1]) if label in TRAINING_VARIANTS else {}


def shares_runs(label: str, base: str) -> bool:
    """Whether seed k of ``label`` is seed k of ``base`` trained by the same epochs, stopped by another rule: a
    ``TRAINING_VARIANTS`` label of ``base`` that sets only ``STOPPING_FIELDS`` ("sasrec-p30" and "sasrec" yes;
    "sasrec-celast", another objective, no)."""
    variant = TRAINING_VARIANTS.get(label)
    return variant is not None and variant[0] == base and set(variant[1]) <= STOPPING_FIELDS


# Remedy variants that do not start where their base model starts (``shares_start``): under the reference paper's
# protocol DuoRec's query LayerNorm (``query_ln``) is a module of its base, and pre-LN drops it, so every parameter
# drawn after it is another draw.
NOT_SAME_START: frozenset[str] = frozenset({"duorec-preln"})
# Named variants that start where their model starts: duorec-tts takes keys and values from the raw input instead
# of LN_a(X), the same modules drawn in the same order.
SAME_START_NAMED: frozenset[str] = frozenset({"duorec-tts"})


def shares_start(label: str, base: str) -> bool:
    """Whether seed k of ``label`` starts where seed k of ``base`` starts: every parameter of ``base`` drawn to the
    same initial value and the same data order in every epoch (the same objective and window, so the same samples
    shuffled by the same seeded stream), so that a comparison pairs their seeds. True for ``shares_runs`` pairs (one
    run, two stopping rules), the remedy variants of ``base`` (``REMEDIES``: they add no parameter, or one drawn after
    the base's: a gate, a pooling query) but those of ``NOT_SAME_START``, and ``SAME_START_NAMED``. Not the probes
    (untied and projected output embeddings are drawn before the blocks, so the blocks start elsewhere; the query
    probe trains ce_last, other samples), nor "sasrec-celast" (ce_last: other samples, another order), nor the other
    named references (another window or block). Under the protocol of the store's cells (gts);
    tests/test_experiments_pairing.py builds each pair."""
    if shares_runs(label, base):
        return True
    if label in SAME_START_NAMED:
        return model_variant(label)[0] == base
    parts = remedy_variant(label)
    return parts is not None and parts[0] == base and label not in NOT_SAME_START


def model_labels() -> tuple[str, ...]:
    """Every name a command accepts for a model: the models (``names.MODELS``), then the ``MODEL_VARIANTS``."""
    return (*MODELS, *MODEL_VARIANTS)


def canonical_label(name: str, option: str = "--model") -> str:
    """``name`` as a model or variant label (``model_labels``), read case-insensitively ("SASRec-TTS" ->
    "sasrec-tts"); a ResdomError naming ``option``, the closest label and every label otherwise."""
    key = str(name).strip().lower()
    known = model_labels()
    if key in known:
        return key
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ResdomError(f"{option}: unknown model {name!r}{hint}; one of {', '.join(known)}")


assert set(PROTOCOL_DEFAULTS) <= set(MODELS) and all(
    p in (*PROTOCOLS, ANY_PROTOCOL) for table in PROTOCOL_DEFAULTS.values() for p in table)
