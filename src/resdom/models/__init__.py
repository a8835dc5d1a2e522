"""Models (SPEC section 2): SASRec, DuoRec, BSARec sharing one block interface."""

from __future__ import annotations

from resdom.models.base import SequentialRecommender, TrainBatch
from resdom.models.block import AttentionBlock, BlockRecord
from resdom.models.config import ModelConfig
from resdom.models.interface import Diagnosable, recording, residual_scale


def build_model(cfg: ModelConfig) -> SequentialRecommender:
    """The model named by ``cfg.name``."""
    if cfg.name == "sasrec":
        from resdom.models.sasrec import SASRec

        return SASRec(cfg)
    if cfg.name == "duorec":
        from resdom.models.duorec import DuoRec

        return DuoRec(cfg)
    if cfg.name == "bsarec":
        from resdom.models.bsarec import BSARec

        return BSARec(cfg)
    raise ValueError(f"unknown model {cfg.name!r}")


__all__ = [
    "AttentionBlock", "BlockRecord", "Diagnosable", "ModelConfig", "SequentialRecommender", "TrainBatch",
    "build_model", "recording", "residual_scale",
]
