"""Typed, validated model configuration (spec §2). Round-trips to plain data via ``model_dump``."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from resdom.checks import NumbersModel
from resdom.errors import validation_error
from resdom.experiments import MODEL_TRAITS
from resdom.names import MODELS

ModelName = Literal[MODELS]  # type: ignore[valid-type]

class ModelConfig(NumbersModel):
    """Architecture of a causal self-attention recommender.

    Defaults follow BSARec's code base (spec §6): ``Dropout(LayerNorm(E + P))`` input, post-LN blocks,
    FFN 4d GELU, LayerNorm eps 1e-12, positions counted from the right (left padding). The reference
    paper's code is ``embedding="dropout_ln", emb_scale=True, ln_eps=1e-8, inner_mult=1,
    activation="relu", positions="from_start"``.
    """

    model_config = ConfigDict(extra="forbid")

    name: ModelName = "sasrec"
    n_items: int = Field(0, ge=0, description="number of real items (ids 1..n_items); set from the data")
    max_len: int = Field(50, ge=1)
    hidden: int = Field(64, ge=1)
    layers: int = Field(2, ge=1)
    heads: int = Field(2, ge=1)
    dropout: float = Field(0.5, ge=0.0, lt=1.0, description="hidden dropout")
    attn_dropout: float = Field(0.5, ge=0.0, lt=1.0, description="attention-probability dropout")
    inner_mult: int = Field(4, ge=1, description="FFN inner size = inner_mult * hidden")
    inner_size: int | None = Field(None, ge=1, description="explicit FFN inner size (overrides inner_mult)")
    activation: Literal["gelu", "relu"] = "gelu"
    norm_first: bool = Field(False, description="pre-LN blocks (X + MHA(LN(X))) instead of post-LN")
    query_ln: bool = Field(
        False, description="the query-LN block of time-to-split's SASRec and the paper's DuoRec: H = LN_f(alpha * "
        "LN_a(X) + MHA(LN_a(X), X, X)), X' = H + FFN(H) with dropout inside the FFN; use with final_ln"
    )
    query_ln_kv: Literal["input", "query"] = Field(
        "input", description="query_ln: what attention's keys and values read: the block's input X (time-to-split's "
        "SASRec, no dropout on A) or Q = LN_a(X) with dropout on A (the paper's DuoRec: MHA(Q, Q, Q))"
    )
    residual_scale: float = Field(
        1.0, ge=0.0, description="remedy (docs/remedies.md): a fixed scale a on the attention sub-layer's residual, "
        "Z = a * R + Dropout(A), in training and inference; the inference-time alpha multiplies it"
    )
    residual_gate: Literal["none", "scalar", "channel"] = Field(
        "none", description="remedy: a learned residual scale per layer (one number, or one per channel), "
        "initialised at 1, in place of residual_scale"
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
    key_padding_mask: bool = Field(
        True,
        description="mask padded keys in attention (BSARec, RecBole); False = causal mask only, as in code built "
        "on nn.MultiheadAttention (pmixer): padded positions then take part in attention, so inputs are always "
        "left-padded to max_len and results do not depend on the batch width",
    )
    init_std: float = Field(0.02, gt=0.0)
    init_padding: bool = Field(
        False, description="initialise the padding item's embedding row like the others instead of zero (BSARec's "
        "code: its gradient is zero, but its frequency filter mixes padded positions in, so the row matters)"
    )
    # DuoRec (spec §2)
    duorec_tau: float = Field(1.0, gt=0.0)
    duorec_lambda: float = Field(0.1, ge=0.0)
    duorec_views: Literal["unsup", "sup", "both"] = "unsup"
    # BSARec (spec §2)
    bsa_a: float = Field(0.9, ge=0.0, le=1.0)
    bsa_c: int = Field(3, ge=1)
    # BERT4Rec (spec §7)
    mask_prob: float = Field(
        0.2, gt=0.0, lt=1.0, description="bert4rec: probability that a real training position is replaced by [MASK] "
        "(labels only there)"
    )

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        traits = MODEL_TRAITS[self.name]  # what the model's architecture supports (experiments.py)
        if traits.heads and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if traits.refused(self.model_dump()):
            raise ValueError(traits.why)
        if self.residual_gate != "none" and self.residual_scale != 1.0:
            raise ValueError("residual_gate replaces residual_scale (the gate starts at 1); set one of them")
        if self.norm_first and self.query_ln:
            raise ValueError("norm_first and query_ln are two different blocks; choose one")
        return self

    @property
    def inner(self) -> int:
        return self.inner_size if self.inner_size is not None else self.inner_mult * self.hidden


def make_model_config(**values: object) -> ModelConfig:
    """Validate ``values`` into a ModelConfig; a bad field becomes an OptionError naming it."""
    try:
        return ModelConfig(**values)
    except ValidationError as e:
        raise validation_error(e, "model") from None
