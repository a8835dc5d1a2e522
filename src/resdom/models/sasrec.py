"""SASRec (Kang & McAuley 2018): embeddings -> n causal self-attention blocks -> tied output."""

from __future__ import annotations

from typing import Any, ClassVar

from resdom.experiments import REFERENCE_POST_LN
from resdom.models.base import SequentialRecommender


class SASRec(SequentialRecommender):
    """The plain encoder; everything is in SequentialRecommender.

    Defaults: BSARec's code base under LOO (ModelConfig's defaults); under GTS the reference paper's code
    (its post-LN block at max length 200, up to 300 epochs).
    """

    name: ClassVar[str] = "sasrec"

    @classmethod
    def defaults(cls, protocol: str | None, source: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        if protocol == "gts":
            return dict(REFERENCE_POST_LN), {"epochs": 300}
        return {}, {}
