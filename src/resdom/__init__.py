"""resdom: train causal self-attention sequential recommenders and diagnose their last-item reliance.

Pipeline (one subpackage each): data -> models -> training -> evaluation -> diagnostics -> report,
with the command line in ``resdom.cli`` and the Python API in ``resdom.api``, whose functions are here::

    import resdom
    fitted = resdom.fit(resdom.prepare_split("synthetic:demo"), "sasrec", epochs=10)
    resdom.diagnose(fitted).plot("mixing")

They are imported on first use, so ``import resdom`` itself loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from resdom.version import __version__

if TYPE_CHECKING:  # a type checker sees the API's own signatures (at run time __getattr__ loads them on first use)
    from resdom.api import Diagnosis as Diagnosis
    from resdom.api import Fitted as Fitted
    from resdom.api import diagnose as diagnose
    from resdom.api import diagnose_run as diagnose_run
    from resdom.api import evaluate as evaluate
    from resdom.api import fit as fit
    from resdom.api import load_run as load_run
    from resdom.api import load_split as load_split
    from resdom.api import prepare_split as prepare_split

_API = ("Diagnosis", "Fitted", "diagnose", "diagnose_run", "evaluate", "fit", "load_run", "load_split", "prepare_split")
__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from resdom import api

        return getattr(api, name)
    raise AttributeError(f"module 'resdom' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
