"""SASRec (Kang & McAuley 2018): embeddings -> n causal self-attention blocks -> tied output."""

from resdom.models.base import SequentialRecommender


class SASRec(SequentialRecommender):
    """The plain encoder; everything is in SequentialRecommender."""
