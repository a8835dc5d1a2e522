"""TrainConfig, per-model defaults, BSARec presets and refused pairings."""

from __future__ import annotations

import pytest

from resdom.errors import ResdomError
from resdom.training.config import TrainConfig, make_train_config, resolve_configs


def test_defaults() -> None:
    cfg = TrainConfig()
    got = (cfg.epochs, cfg.batch_size, cfg.lr, cfg.patience, cfg.metric, cfg.seed)
    assert got == (200, 256, 1e-3, 10, "NDCG@10", 17)
    assert cfg.model_dump()["objective"] is None


@pytest.mark.parametrize("name,objective", [("sasrec", "ce_all"), ("duorec", "ce_all"), ("bsarec", "ce_last")])
def test_default_objective_per_model(name: str, objective: str) -> None:
    _, train = resolve_configs(name, {}, {}, n_items=10)
    assert train.objective == objective


@pytest.mark.parametrize("objective", ["ce_all", "bce", "ce_sampled"])
def test_bsarec_refuses_all_position_objectives(objective: str) -> None:
    with pytest.raises(ResdomError, match="leakage"):
        resolve_configs("bsarec", {}, {"objective": objective}, n_items=10)


@pytest.mark.parametrize("source,lr,heads", [("beauty", 5e-4, 1), ("beauty-ts", 5e-4, 1), ("lastfm", 1e-3, 1),
                                             ("sports-ts", 1e-3, 4), ("ml-1m-part", 5e-4, 4), ("beauty-tts", 5e-4, 1),
                                             ("/data/raw/bsarec/Beauty.txt", 1e-3, 2), ("synthetic", 1e-3, 2),
                                             (None, 1e-3, 2)])
def test_bsarec_presets_follow_the_registered_data_set(source: str | None, lr: float, heads: int) -> None:
    """BSARec's presets are keyed on the data registry's names (experiments.DATASET_PRESETS); a file path is not
    parsed for one."""
    model, train = resolve_configs("bsarec", {}, {}, source=source, n_items=10)
    assert (train.lr, model.heads) == (lr, heads)


def test_bsarec_beauty_preset_and_user_override() -> None:
    model, train = resolve_configs("bsarec", {}, {}, source="beauty-ts", n_items=10)
    assert (model.bsa_a, model.bsa_c, model.heads, train.lr) == (0.7, 5, 1, 5e-4)
    model, train = resolve_configs("bsarec", {"bsa_c": 7}, {"lr": 1e-2}, source="beauty", n_items=10)
    assert (model.bsa_a, model.bsa_c, train.lr) == (0.7, 7, 1e-2)
    model, train = resolve_configs("sasrec", {}, {}, source="beauty", n_items=10)  # presets are BSARec's only
    assert (model.heads, train.lr) == (2, 1e-3)


def test_bad_values_name_the_field() -> None:
    with pytest.raises(ResdomError, match=r"train\.lr"):
        make_train_config(lr=-1)
    with pytest.raises(ResdomError, match=r"train\.metric"):
        make_train_config(metric="NDCG@3")
    with pytest.raises(ResdomError, match=r"train\.batch"):
        make_train_config(batch=3)
    with pytest.raises(ResdomError, match=r"model\.hiden"):
        resolve_configs("sasrec", {"hiden": 3}, {}, n_items=10)
    with pytest.raises(ResdomError, match=r"model\.name"):
        resolve_configs("sasrec", {"name": "bsarec"}, {}, n_items=10)


@pytest.mark.parametrize("section, field", [("train", "epochs"), ("train", "lr"), ("train", "threads"),
                                            ("model", "hidden"), ("model", "dropout")])
def test_a_bool_is_no_number(section: str, field: str) -> None:
    """pydantic's lax mode read True as 1: ``hidden: true`` built a one-unit model, ``epochs=True`` one epoch."""
    values = {field: True}
    with pytest.raises(ResdomError, match=rf"{section}\.{field}: expected a number, not true or false"):
        resolve_configs("sasrec", *((values, {}) if section == "model" else ({}, values)), n_items=10)
    assert resolve_configs("sasrec", {"norm_first": True}, {"lr": "1e-3"}, n_items=10)[1].lr == 1e-3  # YAML's 1e-3


def test_the_other_configs_refuse_a_bool_for_a_number() -> None:
    from pydantic import ValidationError

    from resdom.data.preprocess import PreprocessConfig
    from resdom.data.synthetic import SyntheticConfig

    for make in (lambda: SyntheticConfig(n_users=True), lambda: PreprocessConfig(k_core=True)):
        with pytest.raises(ValidationError, match="expected a number, not true or false"):
            make()
    assert PreprocessConfig(remove_repeats=True, sample_users=None).remove_repeats


@pytest.mark.parametrize("section, field, value", [
    ("train", "lr", float("inf")), ("train", "weight_decay", float("inf")), ("train", "lr", float("nan")),
    ("model", "init_std", float("inf")), ("model", "dropout", float("nan")), ("model", "ln_eps", float("inf")),
])
def test_infinity_and_nan_are_no_number(section: str, field: str, value: float) -> None:
    """``lr=inf`` passed ``lr > 0`` and trained a model of NaN weights, refused only at ranking ("retrain")."""
    values = {field: value}
    with pytest.raises(ResdomError, match=rf"{section}\.{field}: Input should be a finite number"):
        resolve_configs("sasrec", *((values, {}) if section == "model" else ({}, values)), n_items=10)


def test_the_other_configs_refuse_infinity_and_nan() -> None:
    from pydantic import ValidationError

    from resdom.data.synthetic import SyntheticConfig
    from resdom.diagnostics.options import DiagnoseOptions

    for make in (lambda: SyntheticConfig(p_last=float("inf")), lambda: DiagnoseOptions(alphas=(float("nan"),))):
        with pytest.raises((ValidationError, ResdomError)):
            make()


@pytest.mark.parametrize("section, field, value, message", [
    ("train", "threads", 10**23, "Input should be less than or equal to 4096"),
    ("model", "max_len", 10**23, "must lie within ±2^62"),
    ("model", "max_len", 2**62 - 1, "refused: this model would take about"),
    ("model", "layers", 2**62 - 1, "refused: this model would take about"),
    ("model", "layers", 100_000, "GiB of weights, more than 4 GiB (RESDOM_MAX_MODEL_BYTES raises the limit)"),
])
def test_a_setting_past_the_machine_is_refused_before_anything_is_built(section: str, field: str, value: int,
                                                                        message: str) -> None:
    """train.threads=1e23 and model.max_len=1e23 were OverflowError tracebacks, max_len=2^62 a torch RuntimeError,
    layers=2^62 ran for ever building blocks: the configuration refuses them in one line."""
    values = {field: value}
    with pytest.raises(ResdomError) as e:
        resolve_configs("sasrec", *((values, {}) if section == "model" else ({}, values)), n_items=10)
    assert str(e.value).startswith(section) and message in str(e.value), str(e.value)


def test_resolve_device() -> None:
    import torch

    from resdom.distributed import resolve_device, setup

    auto = resolve_device("auto")
    if torch.cuda.is_available():
        assert auto.type == "cuda"
    elif not torch.backends.mps.is_available():
        assert auto.type == "cpu"
    assert resolve_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ResdomError, match="cuda"):
            resolve_device("cuda")
    ctx = setup("cpu")  # outside torchrun: one process, no process group
    assert (ctx.rank, ctx.world_size, ctx.distributed, ctx.is_main) == (0, 1, False, True)
    assert ctx.all_reduce_sum(2.5) == 2.5


# ------------------------------------------------------------------------------------- protocol defaults


def test_gts_trains_the_reference_papers_models_unless_overridden() -> None:
    sas, train = resolve_configs("sasrec", {}, {}, n_items=10, protocol="gts")
    got = (sas.embedding, sas.emb_scale, sas.ln_eps, sas.inner, sas.activation, sas.positions, sas.max_len,
           sas.query_ln, sas.final_ln, train.objective, train.seed, train.epochs, train.patience, train.metric)
    assert got == ("dropout_ln", True, 1e-8, 64, "relu", "from_start", 200, False, False, "ce_all", 17, 300, 10,
                   "NDCG@10")
    duo, train = resolve_configs("duorec", {}, {}, n_items=10, protocol="gts")
    assert (duo.query_ln, duo.final_ln, duo.embedding, duo.max_len, duo.duorec_views, train.objective) == (
        True, True, "dropout", 200, "unsup", "ce_all")
    mine, train = resolve_configs("sasrec", {"max_len": 50}, {"epochs": 7}, n_items=10, protocol="gts")
    assert (mine.max_len, mine.embedding, train.epochs) == (50, "dropout_ln", 7)


def test_loo_keeps_bsarecs_code_base() -> None:
    sas, _ = resolve_configs("sasrec", {}, {}, n_items=10, protocol="loo")
    assert (sas.embedding, sas.inner, sas.activation, sas.ln_eps, sas.max_len) == ("ln_dropout", 256, "gelu", 1e-12,
                                                                                   50)


@pytest.mark.parametrize("protocol", ["loo", "gts"])
@pytest.mark.parametrize("source,want", [("beauty-ts", (0.7, 5, 1, 5e-4)), ("sports-ts", (0.3, 5, 4, 1e-3)),
                                         ("toys-ts", (0.7, 3, 1, 1e-3)), ("yelp", (0.7, 3, 4, 1e-3)),
                                         ("lastfm", (0.9, 3, 1, 1e-3)), ("ml-1m", (0.3, 9, 4, 5e-4))])
def test_bsarec_published_settings_under_both_protocols(protocol: str, source: str, want: tuple) -> None:
    model, train = resolve_configs("bsarec", {}, {}, source=source, n_items=10, protocol=protocol)
    assert (model.bsa_a, model.bsa_c, model.heads, train.lr) == want
    assert model.init_padding and model.embedding == "ln_dropout" and train.objective == "ce_last"


def test_bsarec_padding_row_is_initialised_like_the_others() -> None:
    import torch

    from resdom.models import build_model

    torch.manual_seed(0)
    bsa, _ = resolve_configs("bsarec", {}, {}, n_items=50, protocol="gts")
    sas, _ = resolve_configs("sasrec", {}, {}, n_items=50, protocol="gts")
    pad = build_model(bsa).item_emb.weight[0].detach()
    assert 0.01 < float(pad.std()) < 0.03  # N(0, 0.02) as every other row
    assert float(build_model(sas).item_emb.weight[0].detach().abs().max()) == 0.0


def test_named_variant() -> None:
    from resdom.experiments import model_variant

    name, values = model_variant("sasrec-tts")
    model, _ = resolve_configs(name, values, {}, n_items=10, protocol="gts")
    assert (model.name, model.query_ln, model.final_ln, model.max_len) == ("sasrec", True, True, 128)
    assert model_variant("bsarec") == ("bsarec", {})


def test_a_field_of_another_model_is_refused_and_a_run_config_round_trips() -> None:
    with pytest.raises(ResdomError, match=r"^model\.bsa_a: not a field of sasrec \(it configures bsarec\)"):
        resolve_configs("sasrec", {"bsa_a": 0.3}, {}, n_items=10)
    with pytest.raises(ResdomError, match=r"^model\.duorec_tau: not a field of bsarec \(it configures duorec\)"):
        resolve_configs("bsarec", {"duorec_tau": 0.5}, {}, n_items=10)
    with pytest.raises(ResdomError, match=r"^model\.bsa_a: not a field of sasrec"):  # even at bsarec's default
        resolve_configs("sasrec", {"bsa_a": 0.9}, {}, n_items=10)
    with pytest.raises(ResdomError, match=r"^model\.hiden: unknown field of sasrec; its fields: name, max_len"):
        resolve_configs("sasrec", {"hiden": 32}, {}, n_items=10)
    saved, _ = resolve_configs("sasrec", {}, {}, n_items=10)  # a run's own config.json holds the model's fields
    again, _ = resolve_configs("sasrec", saved.model_dump(exclude={"name", "n_items"}), {}, n_items=10)
    assert again == saved


def test_models_carry_their_traits() -> None:
    import torch

    from resdom.models import MODEL_CLASSES, build_model
    from resdom.names import MODELS

    assert tuple(MODEL_CLASSES) == MODELS
    assert [MODEL_CLASSES[m].default_objective for m in MODELS] == ["ce_all", "ce_all", "ce_last", "mlm", "ce_all"]
    assert [MODEL_CLASSES[m].causal for m in MODELS] == [True, True, False, False, True]
    torch.manual_seed(0)
    built = {m: build_model(resolve_configs(m, {}, {}, n_items=10)[0]) for m in MODELS}
    assert [built[m].exact_length_groups() for m in MODELS] == [True, False, False, False, True]
    assert not built["duorec"].needs_partners()
    duo_both = build_model(resolve_configs("duorec", {"duorec_views": "both"}, {}, n_items=10)[0])
    assert duo_both.needs_partners()
