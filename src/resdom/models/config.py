"""Typed, validated model configurations (spec §2), one class per model with only the fields it uses.

::

    ModelConfig                 name, n_items, max_len, hidden, layers, dropout, init_std       (GRU4RecConfig)
    └── AttentionConfig         + heads, the FFN, the input, LayerNorms, positions, the residual scale
        ├── BERT4RecConfig      + mask_prob
        └── CausalConfig        + key_padding_mask, readout, output
            ├── BSARecConfig    + bsa_a, bsa_c                       (post-LN blocks only: no block choice)
            └── BlockConfig     + norm_first, query_ln, query_ln_kv  (which block: post-LN, pre-LN, query-LN)
                ├── SASRecConfig
                └── DuoRecConfig + duorec_tau, duorec_lambda, duorec_views

(BERT4RecConfig has ``norm_first`` too: post-LN as BERT, or pre-LN as RecTools' BERT4Rec.) ``block`` names the
block every layer is built from, read once by the model (``models.block.BLOCKS``).

``make_model_config(name=..., **values)`` builds the class of ``name``; a field the class does not have is one error
naming the field and the model. ``read_model_config`` reads a stored configuration: the class's own form, or the
flat form every run wrote before the classes existed (one ``ModelConfig`` of every model's fields), whose fields of
other models hold their defaults there (``FLAT_DEFAULTS``) and are dropped. Each round-trips through
``model_dump``. Which parts a model is built from (the block, the readout, ...) is chosen from these values once, at
construction (``models.base``, ``models.block``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from resdom.checks import NumbersModel, closed_choice, literal_names
from resdom.errors import OptionError, ResdomError, validation_error
from resdom.limits import GIB, MODEL_BYTES, model_params

# The attention blocks a configuration can name (models.block.BLOCKS builds them).
BlockName = Literal["post_ln", "pre_ln", "query_ln", "query_ln_qkv"]


class ModelConfig(NumbersModel):
    """The fields every model has. Defaults follow BSARec's code base (spec §6); a model's reference code base under
    each protocol is in ``experiments.PROTOCOL_DEFAULTS``."""

    model_config = ConfigDict(extra="forbid")

    name: str = "sasrec"
    n_items: int = Field(0, ge=0, description="number of real items (ids 1..n_items); set from the data")
    max_len: int = Field(50, ge=1)
    hidden: int = Field(64, ge=1)
    layers: int = Field(2, ge=1)
    dropout: float = Field(0.5, ge=0.0, lt=1.0, description="hidden dropout")
    init_std: float = Field(0.02, gt=0.0)

    @field_validator("*", mode="before")
    @classmethod
    def _closed_choice(cls, v: Any, info: ValidationInfo) -> Any:
        """A closed choice (a field of literal names: readout, activation, ...) in any case (``readout: Mean``), a
        near miss named with the closest (``readuot``: did you mean readout?)."""
        field = str(info.field_name)
        if field == "name" or not isinstance(v, str):
            return v
        names = literal_names(cls.model_fields[field].annotation)
        return closed_choice(v, names, field.replace("_", " ")) if names else v

    @model_validator(mode="after")
    def _a_model_of_its_own(self) -> ModelConfig:
        if type(self) in _SHARED:
            raise ValueError(f"{type(self).__name__} holds the fields models share; a model is configured by its "
                             "own class (make_model_config(name=...), SASRecConfig, ...)")
        _, estimate = model_params(self.__dict__)  # before anything is built: layers=1e18 ran for ever,
        if 4 * estimate > MODEL_BYTES.value:  # max_len=1e18 ended in a torch RuntimeError
            raise ValueError(f"refused: this model would take about {4 * estimate / GIB:,.1f} GiB of weights, "
                             f"more than {MODEL_BYTES.value / GIB:g} GiB ({MODEL_BYTES.env} raises the limit)")
        return self


class AttentionConfig(ModelConfig):
    """A self-attention encoder: embeddings -> blocks -> (final LN).

    Defaults: ``Dropout(LayerNorm(E + P))`` input, FFN 4d GELU, LayerNorm eps 1e-12, positions counted from the right
    (left padding). The reference paper's code is ``embedding="dropout_ln", emb_scale=True, ln_eps=1e-8,
    inner_mult=1, activation="relu", positions="from_start"``.
    """

    heads: int = Field(2, ge=1)
    attn_dropout: float = Field(0.5, ge=0.0, lt=1.0, description="attention-probability dropout")
    inner_mult: int = Field(4, ge=1, description="FFN inner size = inner_mult * hidden")
    inner_size: int | None = Field(None, ge=1, description="explicit FFN inner size (overrides inner_mult)")
    activation: Literal["gelu", "relu"] = "gelu"
    residual_scale: float = Field(
        1.0, ge=0.0, description="remedy (docs/remedies.md): a fixed scale a on the attention sub-layer's residual, "
        "Z = a * R + Dropout(A), in training and inference; the inference-time alpha multiplies it"
    )
    residual_gate: Literal["none", "scalar", "channel"] = Field(
        "none", description="remedy: a learned residual scale per layer (one number, or one per channel), "
        "initialised at 1, in place of residual_scale"
    )
    emb_scale: bool = Field(False, description="multiply item embeddings by sqrt(hidden)")
    embedding: Literal["ln_dropout", "dropout_ln", "dropout"] = Field(
        "ln_dropout", description="input: Dropout(LN(E+P)) (BSARec), LN(Dropout(E+P)) (reference), Dropout(E+P)"
    )
    final_ln: bool = False
    qkv_init: Literal["normal", "xavier"] = Field(
        "normal", description="initialisation of the query/key/value projections: N(0, init_std) with zero biases "
        "(BSARec, RecBole), or nn.MultiheadAttention's Xavier-uniform over the stacked (3d, d) matrix with zero "
        "biases (pmixer's SASRec and the code built on it: the reference paper's SASRec). The query-LN blocks are "
        "always Xavier (their reference is nn.MultiheadAttention)"
    )
    ffn_dropout: bool = Field(
        False, description="dropout inside the FFN, on its first layer's output (pmixer's dropout1: the reference "
        "paper's SASRec); the query-LN blocks always have it. Before ReLU or after it is the same mask and values"
    )
    ln_eps: float = Field(1e-12, gt=0.0)
    final_ln_eps: float | None = Field(None, gt=0.0, description="eps of the final LayerNorm (default ln_eps); "
                                       "RecTools' SASRec: 1e-8 there, 1e-5 in its blocks")
    zero_padding: bool = Field(
        False, description="multiply the states of padded positions by 0 before every block and before the final "
        "LayerNorm (RecTools' SASRec 'timeline mask'): without a key-padding mask, padded keys then read X = 0"
    )
    positions: Literal["from_end", "from_start", "from_end_pad0"] = Field(
        "from_end",
        description="position ids: from_end = BSARec's left padding (last item at position max_len-1); "
        "from_start = right padding (first item at position 0); from_end_pad0 = pmixer's SASRec.pytorch "
        "(last item at position max_len, padding at position 0; the position table has max_len + 1 rows)",
    )
    init_padding: bool = Field(
        False, description="initialise the padding item's embedding row like the others instead of zero (BSARec's "
        "code: its gradient is zero, but its frequency filter mixes padded positions in, so the row matters)"
    )

    @model_validator(mode="after")
    def _check_attention(self) -> AttentionConfig:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.residual_gate != "none" and self.residual_scale != 1.0:
            raise ValueError("residual_gate replaces residual_scale (the gate starts at 1); set one of them")
        return self

    @property
    def inner(self) -> int:
        return self.inner_size if self.inner_size is not None else self.inner_mult * self.hidden

    @property
    def block(self) -> BlockName:
        """The block every layer is built from (``models.block.BLOCKS``): post-LN unless a subclass chooses."""
        return "post_ln"


class CausalConfig(AttentionConfig):
    """A causal encoder, read after each prefix: its key-padding mask, its readout and its output embeddings."""

    key_padding_mask: bool = Field(
        True,
        description="mask padded keys in attention (BSARec, RecBole); False = causal mask only, as in code built "
        "on nn.MultiheadAttention (pmixer): padded positions then take part in attention, so inputs are always "
        "left-padded to max_len and results do not depend on the batch width",
    )
    readout: Literal["last", "mean", "pool", "query"] = Field(
        "last", description="remedy: the prediction state after a prefix: its last output state (last), the mean of "
        "its last readout_k real states (mean), a learned attention pooling over all its real states (pool), or the "
        "state of a learned query token appended after the prefix (query; trains with ce_last)"
    )
    output: Literal["tied", "untied", "projected"] = Field(
        "tied", description="the output item embeddings: the input embeddings (tied), a table of their own "
        "(untied), or the input embeddings through a learned d x d projection (projected)"
    )
    readout_k: int = Field(3, ge=1, description="readout='mean': how many of the last real states are averaged")


class BlockConfig(CausalConfig):
    """A causal encoder whose block is chosen: post-LN (default), pre-LN (``norm_first``) or query-LN."""

    norm_first: bool = Field(False, description="pre-LN blocks (X + MHA(LN(X))) instead of post-LN")
    query_ln: bool = Field(
        False, description="the query-LN block of time-to-split's SASRec and the paper's DuoRec: H = LN_f(alpha * "
        "LN_a(X) + MHA(LN_a(X), X, X)), X' = H + FFN(H) with dropout inside the FFN; use with final_ln"
    )
    query_ln_kv: Literal["input", "query"] = Field(
        "input", description="query_ln: what attention's keys and values read: the block's input X (time-to-split's "
        "SASRec, no dropout on A) or Q = LN_a(X) with dropout on A (the paper's DuoRec: MHA(Q, Q, Q))"
    )

    @model_validator(mode="after")
    def _check_block(self) -> BlockConfig:
        if self.norm_first and self.query_ln:
            raise ValueError("norm_first and query_ln are two different blocks; choose one")
        return self

    @property
    def block(self) -> BlockName:
        if self.query_ln:
            return "query_ln_qkv" if self.query_ln_kv == "query" else "query_ln"
        return "pre_ln" if self.norm_first else "post_ln"


class SASRecConfig(BlockConfig):
    """SASRec (Kang & McAuley 2018)."""

    name: Literal["sasrec"] = "sasrec"


class DuoRecConfig(BlockConfig):
    """DuoRec (Qiu et al. 2022): SASRec's encoder and a contrastive loss (spec §2)."""

    name: Literal["duorec"] = "duorec"
    duorec_tau: float = Field(1.0, gt=0.0)
    duorec_lambda: float = Field(0.1, ge=0.0)
    duorec_views: Literal["unsup", "sup", "both"] = "unsup"


class BSARecConfig(CausalConfig):
    """BSARec (Shin et al. 2024): post-LN blocks mixed with a frequency branch (spec §2)."""

    name: Literal["bsarec"] = "bsarec"
    bsa_a: float = Field(0.9, ge=0.0, le=1.0)
    bsa_c: int = Field(3, ge=1)


class BERT4RecConfig(AttentionConfig):
    """BERT4Rec (spec §7): bidirectional post-LN blocks, padded keys always masked, read at an appended [MASK]."""

    name: Literal["bert4rec"] = "bert4rec"
    norm_first: bool = Field(False, description="pre-LN blocks (RecTools' BERT4Rec) instead of post-LN (BERT's)")
    mask_prob: float = Field(
        0.2, gt=0.0, lt=1.0, description="bert4rec: probability that a real training position is replaced by [MASK] "
        "(labels only there)"
    )

    @model_validator(mode="after")
    def _check_window(self) -> BERT4RecConfig:
        if self.max_len < 2:
            raise ValueError("bert4rec needs max_len >= 2 (its input items and the appended [MASK])")
        return self

    @property
    def block(self) -> BlockName:
        return "pre_ln" if self.norm_first else "post_ln"


class GRU4RecConfig(ModelConfig):
    """GRU4Rec (spec §7): an item embedding and a GRU; no attention, positions or LayerNorm."""

    name: Literal["gru4rec"] = "gru4rec"


_SHARED: tuple[type[ModelConfig], ...] = (ModelConfig, AttentionConfig, CausalConfig, BlockConfig)
MODEL_CONFIGS: dict[str, type[ModelConfig]] = {
    "sasrec": SASRecConfig, "duorec": DuoRecConfig, "bsarec": BSARecConfig, "bert4rec": BERT4RecConfig,
    "gru4rec": GRU4RecConfig,
}


def _name_of(value: Any) -> Any:
    """The tag of a model configuration: its ``name`` (a stored mapping's, default sasrec, or an instance's)."""
    return value.get("name", "sasrec") if isinstance(value, Mapping) else getattr(value, "name", None)


# Any model's configuration, told apart by ``name`` (a callable discriminator: NumbersModel's before-validator
# covers ``name`` too, which pydantic's field discriminator does not allow).
AnyModelConfig = Annotated[
    Annotated[SASRecConfig, Tag("sasrec")] | Annotated[DuoRecConfig, Tag("duorec")]
    | Annotated[BSARecConfig, Tag("bsarec")] | Annotated[BERT4RecConfig, Tag("bert4rec")]
    | Annotated[GRU4RecConfig, Tag("gru4rec")],
    Discriminator(_name_of),
]
_READER: TypeAdapter[ModelConfig] = TypeAdapter(AnyModelConfig)
# Every field of some model's configuration, in a stable order (an option's name is checked against these first).
ALL_MODEL_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(f for c in MODEL_CONFIGS.values() for f in c.model_fields))

# The defaults of the flat ModelConfig every run wrote before the classes: a stored config.json holds each field of
# another model at these values, and a run's own config.json may be given back as --config.
FLAT_DEFAULTS: dict[str, Any] = {
    "name": "sasrec", "n_items": 0, "max_len": 50, "hidden": 64, "layers": 2, "heads": 2, "dropout": 0.5,
    "attn_dropout": 0.5, "inner_mult": 4, "inner_size": None, "activation": "gelu", "norm_first": False,
    "query_ln": False, "query_ln_kv": "input", "residual_scale": 1.0, "residual_gate": "none", "readout": "last",
    "output": "tied", "readout_k": 3, "emb_scale": False, "embedding": "ln_dropout", "final_ln": False,
    "qkv_init": "normal", "ffn_dropout": False, "ln_eps": 1e-12, "final_ln_eps": None, "zero_padding": False,
    "positions": "from_end", "key_padding_mask": True, "init_std": 0.02, "init_padding": False,
    "duorec_tau": 1.0, "duorec_lambda": 0.1, "duorec_views": "unsup", "bsa_a": 0.9, "bsa_c": 3, "mask_prob": 0.2,
}


def model_config_class(name: str) -> type[ModelConfig]:
    """The configuration class of model ``name`` (one of ``resdom.names.MODELS``); a ResdomError otherwise."""
    try:
        return MODEL_CONFIGS[name]
    except (KeyError, TypeError):
        raise ResdomError(f"model.name: unknown model {name!r}; one of {', '.join(MODEL_CONFIGS)}") from None


def foreign_field_error(name: str, key: str) -> OptionError:
    """The one-line error of a field ``key`` that model ``name``'s configuration does not have (an OptionError
    naming ``model.<key>``, so a front end can name where the value came from)."""
    owners = [m for m, c in MODEL_CONFIGS.items() if key in c.model_fields]
    if owners:
        return OptionError([(f"model.{key}", f"not a field of {name} (it configures {', '.join(owners)}); "
                                             "leave it out")])
    fields = ", ".join(f for f in model_config_class(name).model_fields if f != "n_items")
    return OptionError([(f"model.{key}", f"unknown field of {name}; its fields: {fields}")])


def foreign_fields(name: str, values: Mapping[str, Any]) -> list[str]:
    """The keys of ``values`` that are not fields of model ``name``'s configuration."""
    own = model_config_class(name).model_fields
    return [k for k in values if k not in own]


def drop_flat_defaults(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the fields of other models that hold the flat form's defaults (``FLAT_DEFAULTS``): how a
    stored config.json of before the classes (every model's fields) reads as model ``name``'s own."""
    own = model_config_class(name).model_fields
    return {k: v for k, v in values.items()
            if k in own or k not in FLAT_DEFAULTS or not _same(k, v)}


def _same(key: str, value: Any) -> bool:
    """Whether ``value`` is the flat form's default of ``key`` as the flat ModelConfig read it (pydantic's lax mode:
    a YAML file's ``1e-12`` is the string "1e-12", read as the float)."""
    default = FLAT_DEFAULTS[key]
    owner = next(c for c in MODEL_CONFIGS.values() if key in c.model_fields)
    annotation: Any = owner.model_fields[key].annotation
    try:
        read = TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    same_kind = isinstance(value, bool) == isinstance(default, bool)  # 0 is no false, true no 1
    return same_kind and type(read) is type(default) and read == default


def make_model_config(**values: Any) -> ModelConfig:
    """Validate ``values`` into the configuration class of ``values["name"]`` (default sasrec); a field of another
    model is a ResdomError naming it and the model, a bad value an OptionError naming ``model.<field>``."""
    cls = model_config_class(str(values.get("name", "sasrec")).lower())
    values = {**values, "name": cls.model_fields["name"].default}
    foreign = foreign_fields(values["name"], values)
    if foreign:
        raise foreign_field_error(values["name"], foreign[0])
    try:
        return cls(**values)
    except ValidationError as e:
        raise validation_error(e, "model") from None


def read_model_config(values: Mapping[str, Any], where: str = "model") -> ModelConfig:
    """A stored model configuration (a run's ``config.json`` ``model``, a checkpoint's ``model.json``), in its own
    class's form or in the flat form of before the classes; one ResdomError naming ``where`` and the field when it
    does not read."""
    if not isinstance(values, Mapping):
        raise ResdomError(f"{where}: expected a mapping of model fields, got {type(values).__name__}")
    name = values.get("name", FLAT_DEFAULTS["name"])
    if name not in MODEL_CONFIGS:
        raise ResdomError(f"{where}.name: unknown model {name!r}; one of {', '.join(MODEL_CONFIGS)}")
    own = drop_flat_defaults(name, {**values, "name": name})
    foreign = foreign_fields(name, own)
    if foreign:
        key = foreign[0]
        raise ResdomError(f"{where}.{key}: {own[key]!r} set, but {key} is not a field of {name}")
    try:
        return _READER.validate_python(own)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"][1:])  # after the union's tag
        raise ResdomError(f"{where}{'.' + loc if loc else ''}: {err['msg'].removeprefix('Value error, ')}") from None
