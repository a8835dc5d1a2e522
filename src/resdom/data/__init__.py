"""Data layer: readers -> preprocessing -> splits (spec §1).

``prepare_split``, ``load_interactions``, ``dataset_stats``, ``SyntheticConfig`` and ``generate`` are
imported lazily (they pull in pandas), so ``import resdom.data.sequences`` stays light.
"""

from typing import TYPE_CHECKING, Any

from resdom.data.sequences import EvalSet, Sequences, SplitData

if TYPE_CHECKING:  # a type checker sees their own signatures (at run time __getattr__ loads them on first use)
    from resdom.data.prepare import load_interactions as load_interactions
    from resdom.data.prepare import prepare_split as prepare_split
    from resdom.data.stats import dataset_stats as dataset_stats
    from resdom.data.synthetic import SyntheticConfig as SyntheticConfig
    from resdom.data.synthetic import generate as generate
    from resdom.data.synthetic import planted_structure as planted_structure

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
