"""The version of resdom, read from the installed package's metadata (``pyproject.toml``'s ``version``), so that no
module needs to import the root package ``resdom`` (whose ``__init__`` loads the API on first use) to name it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("resdom")
except PackageNotFoundError:  # pragma: no cover - a source tree on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
