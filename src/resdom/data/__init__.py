"""Data layer: readers -> preprocessing -> splits (SPEC section 1)."""

from resdom.data.sequences import EvalSet, Sequences, SplitData

__all__ = ["Sequences", "EvalSet", "SplitData"]
