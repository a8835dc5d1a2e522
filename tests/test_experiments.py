"""resdom.experiments: the experiment settings as plain data (torch-free), read by training, the pipelines and the
report. Defaults and presets by hand-computed cases, presets keyed on the data registry, variants from the
models' traits, the shipped configs agreeing with the settings they spell out, and no module outside the models
(and the importers of named external models) deciding by a model's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from resdom.data.registry import DATASETS
from resdom.errors import ResdomError
from resdom.experiments import (
    BSAREC_DATA,
    BSAREC_PUBLISHED,
    DATASET_PRESETS,
    MODEL_TRAITS,
    MODEL_VARIANTS,
    PROTOCOL_DEFAULTS,
    REFERENCE_POST_LN,
    REMEDIES,
    REMEDY_LABELS,
    REMEDY_MODELS,
    TRAINING_VARIANTS,
    model_defaults,
    remedy_label,
    variant_train_values,
)
from resdom.models.config import make_model_config
from resdom.names import MODELS

ROOT = Path(__file__).resolve().parents[1]


def test_presets_are_keyed_on_registered_data_sets() -> None:
    for model, presets in DATASET_PRESETS.items():
        assert model in MODELS and set(presets) <= set(DATASETS), model
    assert set(BSAREC_DATA.values()) == set(BSAREC_PUBLISHED)  # every published setting is reachable
    # each registered data set with BSARec's published setting holds that data set's interactions
    assert {name: BSAREC_DATA.get(name) for name in ("beauty", "beauty-ts-itemties", "sports-ts", "toys-ts",
                                                     "yelp-ts", "lastfm", "ml-1m-part", "video-ts", "ml-100k")} == {
        "beauty": "beauty", "beauty-ts-itemties": "beauty", "sports-ts": "sports", "toys-ts": "toys",
        "yelp-ts": "yelp", "lastfm": "lastfm", "ml-1m-part": "ml-1m", "video-ts": None, "ml-100k": None}


@pytest.mark.parametrize("model, protocol, source, expected", [
    ("sasrec", "loo", "beauty", ({}, {})),
    ("sasrec", None, None, ({}, {})),
    ("sasrec", "gts", "beauty-ts", (REFERENCE_POST_LN, {"epochs": 300})),
    ("bsarec", "loo", None, ({"init_padding": True}, {})),
    ("bsarec", "gts", "beauty-ts", ({"init_padding": True, "bsa_a": 0.7, "bsa_c": 5, "heads": 1}, {"lr": 5e-4})),
    ("bsarec", "loo", "sports", ({"init_padding": True, "bsa_a": 0.3, "bsa_c": 5, "heads": 4}, {"lr": 1e-3})),
    ("bsarec", "loo", "data/Beauty.txt", ({"init_padding": True}, {})),  # a path is not parsed for a preset
    ("gru4rec", "loo", "beauty", ({"max_len": 128, "hidden": 64, "layers": 1, "dropout": 0.1}, {"epochs": 300})),
])
def test_model_defaults(model: str, protocol: str | None, source: str | None, expected: tuple) -> None:
    assert model_defaults(model, protocol, source) == expected


def test_defaults_cover_every_model_and_are_plain_data() -> None:
    assert set(PROTOCOL_DEFAULTS) == set(MODELS)
    values, train = model_defaults("bert4rec", "gts")
    values["hidden"] = -1  # callers get copies: the table is not changed through them
    assert model_defaults("bert4rec", "gts")[0]["hidden"] == 64 and train == {"epochs": 300}


def test_variants_follow_the_models_traits() -> None:
    """A remedy is registered for each remedy model whose traits take its values: BSARec refuses pre-LN blocks."""
    for model in REMEDY_MODELS:
        for variant, values in REMEDIES.items():
            label = f"{model}-{variant}"
            if variant == "base":
                continue
            assert (label in MODEL_VARIANTS) == MODEL_TRAITS[model].supports(values), label
            assert (label in REMEDY_LABELS) == (label in MODEL_VARIANTS)
    assert "bsarec-preln" not in MODEL_VARIANTS and "duorec-preln" in MODEL_VARIANTS
    with pytest.raises(ResdomError, match="'preln' does not apply to bsarec .*post-LN only"):
        remedy_label("bsarec", "preln")


@pytest.mark.parametrize("values, message", [
    ({"name": "bsarec", "norm_first": True}, r"model\.norm_first: not a field of bsarec"),  # post-LN only
    ({"name": "bsarec", "query_ln": True}, r"model\.query_ln: not a field of bsarec"),
    ({"name": "bert4rec", "max_len": 1}, "bert4rec needs max_len >= 2"),
    ({"name": "bert4rec", "key_padding_mask": False}, r"model\.key_padding_mask: not a field of bert4rec"),
    ({"name": "sasrec", "hidden": 10, "heads": 3}, "must be divisible by heads"),
    ({"name": "gru4rec", "heads": 3}, r"model\.heads: not a field of gru4rec"),  # no attention heads
])
def test_model_config_refuses_what_the_traits_refuse(values: dict, message: str) -> None:
    with pytest.raises(ResdomError, match=message):
        make_model_config(n_items=5, **values)


def test_every_value_the_traits_refuse_is_refused_by_the_model_config() -> None:
    """MODEL_TRAITS (which the variants read) and the configuration classes agree: each refused value is refused."""
    for model, traits in MODEL_TRAITS.items():
        for key, bad in traits.refuses.items():
            for value in bad:
                with pytest.raises(ResdomError, match=key):
                    make_model_config(name=model, n_items=5, **{key: value})
        if traits.min_max_len > 1:
            with pytest.raises(ResdomError, match="max_len"):
                make_model_config(name=model, n_items=5, max_len=traits.min_max_len - 1)


def test_model_config_takes_what_the_traits_allow() -> None:
    assert make_model_config(name="gru4rec", n_items=5, hidden=10).hidden == 10
    assert make_model_config(name="sasrec", n_items=5, norm_first=True).norm_first
    assert make_model_config(name="bert4rec", n_items=5, max_len=2).max_len == 2


def test_shipped_configs_agree_with_the_settings_they_spell_out() -> None:
    """configs/*.yaml are examples that write out settings resdom applies anyway: they must not drift."""
    folder = ROOT / "src" / "resdom" / "configs"
    beauty = yaml.safe_load((folder / "bsarec_beauty.yaml").read_text())
    preset_model, preset_train = BSAREC_PUBLISHED["beauty"]
    assert {k: beauty["model"][k] for k in preset_model} == preset_model
    assert {k: beauty["train"][k] for k in preset_train} == preset_train
    reference = yaml.safe_load((folder / "sasrec_gts_reference.yaml").read_text())
    assert {k: reference["model"][k] for k in REFERENCE_POST_LN} == REFERENCE_POST_LN
    assert reference["train"]["epochs"] == PROTOCOL_DEFAULTS["sasrec"]["gts"][1]["epochs"]


def test_no_module_outside_the_models_decides_by_a_models_name() -> None:
    """No comparison with a model's name (``name == "bsarec"``, ``model in ("sasrec", ...)``) in src/resdom outside
    models/ (where each model is defined) and adapters/ (importers of named external models): what a model
    supports is its traits (experiments.MODEL_TRAITS, the model classes' traits)."""
    found = []
    for path in sorted((ROOT / "src" / "resdom").rglob("*.py")):
        rel = path.relative_to(ROOT / "src" / "resdom").as_posix()
        if rel.startswith(("models/", "adapters/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = [c.value for c in sides if isinstance(c, ast.Constant) and c.value in MODELS]
            names += [e.value for c in sides if isinstance(c, (ast.Tuple, ast.List, ast.Set)) for e in c.elts
                      if isinstance(e, ast.Constant) and e.value in MODELS]
            if names:
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def test_training_variants_are_labels_with_train_values_only() -> None:
    """A training variant is the model's own block (no model values) with train values of its own; every other
    label sets no train values."""
    assert TRAINING_VARIANTS and set(TRAINING_VARIANTS) <= set(MODEL_VARIANTS)
    for label, (model, values) in TRAINING_VARIANTS.items():
        assert MODEL_VARIANTS[label] == (model, {}) and values
        got = variant_train_values(label)
        got["seed"] = 1  # callers get copies
        assert variant_train_values(label) == values
    assert variant_train_values("sasrec-celast") == {"objective": "ce_last"}
    assert variant_train_values("sasrec-p30") == {"patience": 30}
    assert variant_train_values("sasrec") == {} and variant_train_values("sasrec-query") == {}


def test_studied_variants_are_the_remedies_probes_and_training_variants() -> None:
    """Models and named variants are models of their own; every remedy, probe and training variant label is
    studied against its base (report.figures leaves those out of the standard figures)."""
    from resdom.experiments import (
        MODEL_VARIANTS,
        NAMED_VARIANTS,
        PROBES,
        REMEDY_LABELS,
        TRAINING_VARIANTS,
        studied_variant,
    )

    assert not any(studied_variant(m) for m in ("sasrec", "duorec", "bsarec", "bert4rec", "gru4rec", *NAMED_VARIANTS))
    assert all(studied_variant(label) for label in REMEDY_LABELS if "-" in label)
    assert all(studied_variant(label) for label in TRAINING_VARIANTS)
    probes = [label for label in MODEL_VARIANTS if label.partition("-")[2] in PROBES]
    assert "sasrec-query" in probes and all(studied_variant(label) for label in probes)
    assert {label for label in MODEL_VARIANTS if not studied_variant(label)} == set(NAMED_VARIANTS)
    assert not studied_variant("gru4rec-query")  # not a registered probe


def test_shares_runs_only_for_stopping_variants_of_their_own_model() -> None:
    from resdom.experiments import STOPPING_FIELDS, TRAINING_VARIANTS, shares_runs

    assert shares_runs("sasrec-p30", "sasrec") and shares_runs("sasrec-v1024", "sasrec")
    assert not shares_runs("sasrec-celast", "sasrec")  # another objective: another run
    assert not shares_runs("sasrec-p30", "duorec") and not shares_runs("sasrec", "sasrec")
    assert not shares_runs("sasrec-gate", "sasrec") and not shares_runs("sasrec-query", "sasrec")
    assert {label for label, (_, values) in TRAINING_VARIANTS.items() if set(values) <= STOPPING_FIELDS} == {
        "sasrec-p30", "sasrec-v1024"}
