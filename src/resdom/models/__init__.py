"""Models (spec §2): SASRec, DuoRec, BSARec sharing one block interface; the contrast models (spec §7) BERT4Rec
(bidirectional, read at an appended [MASK]) and GRU4Rec (recurrent, no attention blocks)."""

from __future__ import annotations

from resdom.models.base import SequentialRecommender, TrainBatch
from resdom.models.bert4rec import BERT4Rec
from resdom.models.block import AttentionBlock, BlockRecord
from resdom.models.bsarec import BSARec
from resdom.models.config import ModelConfig
from resdom.models.duorec import DuoRec
from resdom.models.gru4rec import GRU4Rec
from resdom.models.interface import Diagnosable, recording, residual_scale
from resdom.models.sasrec import SASRec
from resdom.names import MODELS

MODEL_CLASSES: dict[str, type[SequentialRecommender]] = {
    cls.name: cls for cls in (SASRec, DuoRec, BSARec, BERT4Rec, GRU4Rec)
}
assert tuple(MODEL_CLASSES) == MODELS, "resdom.names.MODELS and the model classes disagree"


def model_class(name: str) -> type[SequentialRecommender]:
    """The class of the model called ``name`` (one of ``resdom.names.MODELS``)."""
    try:
        return MODEL_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(MODELS)}") from None


def build_model(cfg: ModelConfig) -> SequentialRecommender:
    """The model named by ``cfg.name``."""
    return model_class(cfg.name)(cfg)


__all__ = [
    "MODEL_CLASSES", "AttentionBlock", "BlockRecord", "Diagnosable", "ModelConfig", "SequentialRecommender",
    "TrainBatch", "build_model", "model_class", "recording", "residual_scale",
]
