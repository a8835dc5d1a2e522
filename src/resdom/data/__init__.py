"""Data layer: readers -> preprocessing -> splits (spec §1).

``prepare_split``, ``load_interactions``, ``dataset_stats``, ``SyntheticConfig`` and ``generate`` are
imported lazily (they pull in pandas), so ``import resdom.data.sequences`` stays light.
"""

from typing import Any

from resdom.data.sequences import EvalSet, Sequences, SplitData

_LAZY = {
    "prepare_split": "resdom.data.prepare",
    "load_interactions": "resdom.data.prepare",
    "dataset_stats": "resdom.data.stats",
    "SyntheticConfig": "resdom.data.synthetic",
    "generate": "resdom.data.synthetic",
    "planted_structure": "resdom.data.synthetic",
}

__all__ = ["Sequences", "EvalSet", "SplitData", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'resdom.data' has no attribute {name!r}")
