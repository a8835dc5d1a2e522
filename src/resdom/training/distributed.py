"""Moved to ``resdom.distributed`` (devices, ranks, gathering); this name is kept for code written against it."""

from resdom.distributed import *  # noqa: F403
from resdom.distributed import resolve_device, setup, wrap  # noqa: F401
