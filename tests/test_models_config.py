"""Model configurations by type (models/config.py): each model's class holds its own fields only, a stored
configuration reads back in its own form or in the flat form of before the classes, the model is assembled from the
parts its configuration names, and a field of another model is one error naming the field and the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resdom.errors import ResdomError
from resdom.models import build_model
from resdom.models.base import MeanReadout, PoolReadout, QueryReadout, Readout
from resdom.models.block import AttentionBlock, PaperDuoRecBlock, PreLNBlock, QueryLNBlock
from resdom.models.bsarec import BSARecBlock
from resdom.models.config import (
    ALL_MODEL_FIELDS,
    FLAT_DEFAULTS,
    MODEL_CONFIGS,
    BERT4RecConfig,
    BSARecConfig,
    DuoRecConfig,
    GRU4RecConfig,
    SASRecConfig,
    make_model_config,
    read_model_config,
)
from resdom.names import MODELS

ROOT = Path(__file__).resolve().parents[1]
COMMON = {"name", "n_items", "max_len", "hidden", "layers", "dropout", "init_std"}
ATTENTION = COMMON | {"heads", "attn_dropout", "inner_mult", "inner_size", "activation", "residual_scale",
                      "residual_gate", "emb_scale", "embedding", "final_ln", "qkv_init", "ffn_dropout", "ln_eps",
                      "final_ln_eps", "zero_padding", "positions", "init_padding"}
CAUSAL = ATTENTION | {"key_padding_mask", "readout", "readout_k", "output"}
BLOCK = CAUSAL | {"norm_first", "query_ln", "query_ln_kv"}


def test_each_model_has_its_own_fields_only() -> None:
    assert tuple(MODEL_CONFIGS) == MODELS
    assert set(SASRecConfig.model_fields) == BLOCK
    assert set(DuoRecConfig.model_fields) == BLOCK | {"duorec_tau", "duorec_lambda", "duorec_views"}
    assert set(BSARecConfig.model_fields) == CAUSAL | {"bsa_a", "bsa_c"}  # post-LN only: no block choice
    assert set(BERT4RecConfig.model_fields) == ATTENTION | {"norm_first", "mask_prob"}
    assert set(GRU4RecConfig.model_fields) == COMMON
    assert set(ALL_MODEL_FIELDS) == set(FLAT_DEFAULTS)  # the flat form had exactly the fields of all models


def test_defaults_are_those_of_the_flat_form() -> None:
    """A field keeps the default the one flat ModelConfig gave it, in every class that has it (so a stored flat
    config.json that leaves a field out means the same value it meant when it was written)."""
    for cls in MODEL_CONFIGS.values():
        for key, info in cls.model_fields.items():
            if key != "name":
                assert info.default == FLAT_DEFAULTS[key] and type(info.default) is type(FLAT_DEFAULTS[key]), key


@pytest.mark.parametrize("name", MODELS)
def test_a_configuration_round_trips_through_the_discriminated_reader(name: str) -> None:
    cfg = make_model_config(name=name, n_items=7, max_len=9, hidden=12, layers=1)
    assert type(cfg) is MODEL_CONFIGS[name] and cfg.name == name
    again = read_model_config(json.loads(json.dumps(cfg.model_dump())))
    assert type(again) is type(cfg) and again == cfg


@pytest.mark.parametrize("name", MODELS)
def test_the_flat_form_reads_as_the_models_own(name: str) -> None:
    """A flat config.json holds every model's fields, the other models' at their defaults: they are dropped; its
    own fields are kept as stored."""
    flat = {**FLAT_DEFAULTS, "name": name, "n_items": 30, "hidden": 32, "max_len": 20}
    cfg = read_model_config(flat)
    assert type(cfg) is MODEL_CONFIGS[name]
    assert cfg.model_dump() == {k: flat[k] for k in MODEL_CONFIGS[name].model_fields}


def test_the_flat_form_names_a_value_the_model_cannot_have() -> None:
    flat = {**FLAT_DEFAULTS, "name": "sasrec", "n_items": 30, "bsa_a": 0.5}
    with pytest.raises(ResdomError, match=r"^model\.json: model\.bsa_a: 0\.5 set, but bsa_a is not a field of sasrec$"):
        read_model_config(flat, "model.json: model")
    with pytest.raises(ResdomError, match=r"^m\.heads: 4 set, but heads is not a field of gru4rec$"):
        read_model_config({**FLAT_DEFAULTS, "name": "gru4rec", "heads": 4}, "m")
    with pytest.raises(ResdomError, match=r"^m\.name: unknown model 'sasrek'"):
        read_model_config({"name": "sasrek"}, "m")
    with pytest.raises(ResdomError, match=r"^m: hidden \(10\) must be divisible by heads \(3\)$"):
        read_model_config({"name": "sasrec", "hidden": 10, "heads": 3}, "m")
    with pytest.raises(ResdomError, match=r"^m\.hidden: Input should be greater than or equal to 1$"):
        read_model_config({"name": "bsarec", "hidden": 0}, "m")
    assert read_model_config({"n_items": 3}).name == "sasrec"  # the flat form's default name


def test_a_field_of_another_model_is_one_error_naming_it_and_the_model() -> None:
    with pytest.raises(ResdomError, match=r"^model\.duorec_tau: not a field of sasrec \(it configures duorec\)"):
        make_model_config(name="sasrec", duorec_tau=0.5)
    with pytest.raises(ResdomError, match=r"^model\.readout: not a field of bert4rec \(it configures sasrec, duorec, "
                                          r"bsarec\)"):
        make_model_config(name="bert4rec", readout="mean")
    with pytest.raises(ResdomError, match=r"^model\.hiddn: unknown field of gru4rec; its fields: name, max_len"):
        make_model_config(name="gru4rec", hiddn=3)


def test_the_model_is_built_from_the_parts_its_configuration_names() -> None:
    def block(**values: object) -> type:
        return type(build_model(make_model_config(n_items=9, max_len=6, hidden=8, layers=1, **values)).blocks[0])

    assert block() is AttentionBlock and make_model_config().block == "post_ln"
    assert block(norm_first=True) is PreLNBlock
    assert block(query_ln=True) is QueryLNBlock
    assert block(name="duorec", query_ln=True, query_ln_kv="query") is PaperDuoRecBlock
    assert block(name="bsarec") is BSARecBlock
    assert block(name="bert4rec") is AttentionBlock and block(name="bert4rec", norm_first=True) is PreLNBlock

    def readout(**values: object) -> Readout:
        return build_model(make_model_config(n_items=9, max_len=6, hidden=8, layers=1, **values)).readout_part

    assert type(readout()) is Readout and type(readout(name="bert4rec")) is Readout
    mean = readout(readout="mean", readout_k=4)
    assert isinstance(mean, MeanReadout) and mean.width == 4
    assert type(readout(name="bsarec", readout="pool")) is PoolReadout
    assert type(readout(name="duorec", readout="query")) is QueryReadout
    assert type(build_model(make_model_config(name="gru4rec", n_items=9)).readout_part) is Readout


def test_a_model_is_built_from_its_own_configuration_class_only() -> None:
    from pydantic import ValidationError

    from resdom.models import SASRec
    from resdom.models.config import AttentionConfig, ModelConfig

    for shared in (ModelConfig, AttentionConfig):  # the shared bases configure no model
        with pytest.raises(ValidationError, match=f"{shared.__name__} holds the fields models share"):
            shared(hidden=8)

    with pytest.raises(ValueError, match="a duorec model is built from a DuoRecConfig, not a SASRecConfig"):
        build_model(SASRecConfig(n_items=5).model_copy(update={"name": "duorec"}))
    assert type(build_model(SASRecConfig(n_items=5))) is SASRec


def store_configs() -> list[Path]:
    return sorted((ROOT / "results").glob("*/*/seed*/config.json"))


def test_every_stored_cell_config_loads_and_rebuilds_its_model() -> None:
    """Every cell of the results store (the flat form, written before the classes) reads as its model's own
    configuration, keeps every value of its own fields, and builds that model. tests/test_models_seeded.py shows the
    model built is the one the code of before the classes built, weight for weight."""
    paths = store_configs()
    if not paths:
        pytest.skip("no results store in this checkout")
    seen = {}
    for path in paths:
        stored = json.loads(path.read_text())["model"]
        cfg = read_model_config(stored, str(path))
        assert type(cfg) is MODEL_CONFIGS[stored["name"]], path
        assert all(cfg.model_dump()[k] == v for k, v in stored.items() if k in type(cfg).model_fields), path
        assert all(v == FLAT_DEFAULTS[k] for k, v in stored.items() if k not in type(cfg).model_fields), path
        seen[json.dumps(stored, sort_keys=True)] = cfg
    assert {c.name for c in seen.values()} == set(MODELS)  # the store holds every model
    for cfg in seen.values():
        model = build_model(cfg.model_copy(update={"n_items": 5}))  # the item count sets only the tables' rows
        assert model.cfg is not None and type(model).name == cfg.name


def test_the_cli_names_a_field_of_another_model_where_it_was_given(tmp_path: Path, capsys) -> None:
    from cli_helpers import one_line_error, run_cli

    code, _, err = run_cli(capsys, "config", "show", "sasrec", "--set", "model.bsa_a=0.5")
    one_line_error(code, err, "--set model.bsa_a: not a field of sasrec (it configures bsarec)")
    code, _, err = run_cli(capsys, "config", "show", "bsarec", "--set", "model.norm_first=true")
    one_line_error(code, err, "--set model.norm_first: not a field of bsarec")
    mine = tmp_path / "g.yaml"
    mine.write_text("model:\n  name: gru4rec\n  heads: 4\n")
    code, _, err = run_cli(capsys, "config", "show", "--config", str(mine))
    one_line_error(code, err, f"{mine}: model.heads: not a field of gru4rec")
    mine.write_text("model:\n  name: gru4rec\n  hidden: 32\n")
    code, out, _ = run_cli(capsys, "config", "show", "--config", str(mine))
    assert code == 0 and "hidden: 32" in out and "heads" not in out


def test_a_flat_config_json_given_back_as_config_trains_its_own_fields(tmp_path: Path, capsys) -> None:
    """A run's config.json of before the classes (every model's fields; the YAML reader sees 1e-12 as a string)
    is taken by --config: its own fields as stored, the other models' defaults dropped, another value named."""
    import yaml
    from cli_helpers import one_line_error, run_cli

    flat = {**FLAT_DEFAULTS, "name": "gru4rec", "n_items": 40, "hidden": 24, "max_len": 128, "layers": 1}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model": flat, "train": {"epochs": 3}, "versions": {"resdom": "0.1.0"}}))
    code, out, err = run_cli(capsys, "config", "show", "--config", str(path))
    assert code == 0, err
    assert yaml.safe_load(out)["model"] == {"name": "gru4rec", "max_len": 128, "hidden": 24, "layers": 1,
                                            "dropout": 0.5, "init_std": 0.02}
    path.write_text(json.dumps({"model": {**flat, "ln_eps": 1e-8}, "versions": {"resdom": "0.1.0"}}))
    code, _, err = run_cli(capsys, "config", "show", "--config", str(path))
    one_line_error(code, err, f"{path}: model.ln_eps: not a field of gru4rec")


def test_fit_names_a_field_of_another_model() -> None:
    import resdom

    split = resdom.prepare_split("synthetic:n_users=40,n_items=20,seed=1")
    with pytest.raises(ResdomError, match=r"^model\.mask_prob: not a field of duorec \(it configures bert4rec\)"):
        resdom.fit(split, "duorec", mask_prob=0.3, epochs=1)
    with pytest.raises(ResdomError, match=r"fit: unknown option 'hiden' \(did you mean hidden\?\)"):
        resdom.fit(split, "sasrec", hiden=3)
