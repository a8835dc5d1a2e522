"""SASRec (Kang & McAuley 2018): embeddings -> n causal self-attention blocks -> tied output."""

from __future__ import annotations

from typing import ClassVar

from resdom.models.base import SequentialRecommender
from resdom.models.config import SASRecConfig


class SASRec(SequentialRecommender):
    """The plain encoder; everything is in SequentialRecommender, its block chosen by ``SASRecConfig.block``.

    Defaults (``experiments.PROTOCOL_DEFAULTS``): BSARec's code base under LOO (SASRecConfig's defaults); under GTS
    the reference paper's code (its post-LN block at max length 200, up to 300 epochs).
    """

    name: ClassVar[str] = "sasrec"
    cfg: SASRecConfig

    def __init__(self, cfg: SASRecConfig) -> None:
        super().__init__(cfg)
