"""Experiment settings as plain data, torch-free: the reference code bases' architectures, the named model variants
and the training-time remedies (docs/remedies.md), with the labels a grid, a results store and a report use.

Nothing here imports a model: ``training.config`` (which validates) and ``report`` (which only reads labels) both
take their variants and remedy labels from this module.
"""

from __future__ import annotations

import difflib
from typing import Any

from resdom.errors import ResdomError
from resdom.names import MODELS

# Architectures of the reference code bases (spec §6), as ModelConfig values.
# The reference paper's SASRec: post-LN blocks, LN(Dropout(E * sqrt(d) + P)) input, FFN d with ReLU, max length 200.
REFERENCE_POST_LN: dict[str, object] = {
    "embedding": "dropout_ln", "emb_scale": True, "ln_eps": 1e-8, "inner_mult": 1, "activation": "relu",
    "positions": "from_start", "max_len": 200,
}
# time-to-split's SASRec and the paper's DuoRec: the query-LN block, Dropout(E * sqrt(d) + P) input, a final LN
# (the paper's DuoRec adds query_ln_kv="query": keys and values from LN_a(X), dropout on the attention output).
REFERENCE_QUERY_LN: dict[str, object] = {
    "query_ln": True, "final_ln": True, "embedding": "dropout", "emb_scale": True, "ln_eps": 1e-8, "inner_mult": 1,
    "activation": "relu", "positions": "from_start",
}

# Training-time remedies for residual dominance (docs/remedies.md): variant -> model values on top of the model's
# own protocol defaults. Registered as "<model>-<variant>" for each of REMEDY_MODELS (except the pairs in
# REMEDY_EXCLUDED); "base" is the model itself.
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
REMEDY_EXCLUDED: frozenset[tuple[str, str]] = frozenset({("bsarec", "preln")})  # BSARec is post-LN only
# Probes of the residual account (docs/results.md, "Beyond the paper"): read out at a learned query token appended
# after the prefix (no own-item residual at the readout position), and untied or projected output embeddings;
# registered as "<model>-<probe>" for each of PROBE_MODELS.
PROBES: dict[str, dict[str, Any]] = {
    "query": {"readout": "query"},
    "untied": {"output": "untied"},
    "projected": {"output": "projected"},
}
PROBE_MODELS: tuple[str, ...] = ("sasrec", "duorec")


def _variants() -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {
        # time-to-split's own SASRec at its default max length (spec §8: the published GTS results of the paper's code)
        "sasrec-tts": ("sasrec", {**REFERENCE_QUERY_LN, "max_len": 128}),
        # DuoRec on time-to-split's SASRec block (keys and values from the raw X): resdom's GTS DuoRec before the fix
        "duorec-tts": ("duorec", {**REFERENCE_QUERY_LN, "query_ln_kv": "input"}),
    }
    for model in REMEDY_MODELS:
        for variant, values in REMEDIES.items():
            if variant != "base" and (model, variant) not in REMEDY_EXCLUDED:
                out[f"{model}-{variant}"] = (model, dict(values))
    for model in PROBE_MODELS:
        for probe, values in PROBES.items():
            out[f"{model}-{probe}"] = (model, dict(values))
    return out


# Named variants of a model, usable wherever a grid names its models: label -> (model, model values).
MODEL_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = _variants()
# Every remedy grid label, in the comparison's order: each model, then its variants in REMEDIES order.
REMEDY_LABELS: tuple[str, ...] = tuple(
    m if v == "base" else f"{m}-{v}" for m in REMEDY_MODELS for v in REMEDIES
    if v == "base" or f"{m}-{v}" in MODEL_VARIANTS)


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
    key = str(name).strip().lower()
    known = model_labels()
    if key in known:
        return key
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ResdomError(f"{option}: unknown model {name!r}{hint}; one of {', '.join(known)}")
