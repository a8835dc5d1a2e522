"""Models (spec §2): SASRec, DuoRec, BSARec sharing one block interface; the contrast models (spec §7) BERT4Rec
(bidirectional, read at an appended [MASK]) and GRU4Rec (recurrent, no attention blocks)."""

from __future__ import annotations

from resdom.models.base import SequentialRecommender, TrainBatch
from resdom.models.bert4rec import BERT4Rec
from resdom.models.block import AttentionBlock, BlockRecord
from resdom.models.bsarec import BSARec
from resdom.models.config import (
    MODEL_CONFIGS,
    BERT4RecConfig,
    BSARecConfig,
    DuoRecConfig,
    GRU4RecConfig,
    ModelConfig,
    SASRecConfig,
    make_model_config,
    read_model_config,
)
from resdom.models.duorec import DuoRec
from resdom.models.gru4rec import GRU4Rec
from resdom.models.interface import Diagnosable, recording, residual_scale
from resdom.models.sasrec import SASRec
from resdom.names import MODELS

MODEL_CLASSES: dict[str, type[SequentialRecommender]] = {
    cls.name: cls for cls in (SASRec, DuoRec, BSARec, BERT4Rec, GRU4Rec)
}
assert tuple(MODEL_CLASSES) == MODELS == tuple(MODEL_CONFIGS), "names.MODELS, the models and their configs disagree"


def model_class(name: str) -> type[SequentialRecommender]:
    """The class of the model called ``name`` (one of ``resdom.names.MODELS``)."""
    try:
        return MODEL_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(MODELS)}") from None


def build_model(cfg: ModelConfig) -> SequentialRecommender:
    """The model named by ``cfg.name``, from its own configuration class (``make_model_config``,
    ``read_model_config``)."""
    cls = model_class(cfg.name)
    if not isinstance(cfg, MODEL_CONFIGS[cls.name]):
        raise ValueError(f"a {cls.name} model is built from a {MODEL_CONFIGS[cls.name].__name__}, not a "
                         f"{type(cfg).__name__} (make_model_config builds the right one)")
    return cls(cfg)  # type: ignore[arg-type]  # the isinstance above: the class's own configuration


__all__ = [
    "MODEL_CLASSES", "MODEL_CONFIGS", "AttentionBlock", "BERT4RecConfig", "BSARecConfig", "BlockRecord", "Diagnosable",
    "DuoRecConfig", "GRU4RecConfig", "ModelConfig", "SASRecConfig", "SequentialRecommender", "TrainBatch",
    "build_model", "make_model_config", "model_class", "read_model_config", "recording", "residual_scale",
]
