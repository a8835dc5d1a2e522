"""SASRec (Kang & McAuley 2018): embeddings -> n causal self-attention blocks -> tied output."""

from __future__ import annotations

from typing import ClassVar

from resdom.models.base import SequentialRecommender


class SASRec(SequentialRecommender):
    """The plain encoder; everything is in SequentialRecommender.

    Defaults (``experiments.PROTOCOL_DEFAULTS``): BSARec's code base under LOO (ModelConfig's defaults); under GTS
    the reference paper's code (its post-LN block at max length 200, up to 300 epochs).
    """

    name: ClassVar[str] = "sasrec"
