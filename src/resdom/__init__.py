"""resdom: train causal self-attention sequential recommenders and diagnose their last-item reliance.

Pipeline (one subpackage each): data -> models -> training -> evaluation -> diagnostics -> report,
with the command line in ``resdom.cli`` and the Python API in ``resdom.api``, whose functions are here::

    import resdom
    fitted = resdom.fit(resdom.prepare_split("synthetic:demo"), "sasrec", epochs=10)
    resdom.diagnose(fitted).plot("mixing")

They are imported on first use, so ``import resdom`` itself loads no torch.
"""

from __future__ import annotations

from typing import Any

from resdom.version import __version__

_API = ("Diagnosis", "Fitted", "diagnose", "diagnose_run", "evaluate", "fit", "load_run", "load_split", "prepare_split")
__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from resdom import api

        return getattr(api, name)
    raise AttributeError(f"module 'resdom' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
