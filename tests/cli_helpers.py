"""Run the resdom CLI in-process as a user would: through ``cli.main.app``, where a ResdomError exits 2."""

from __future__ import annotations

import sys

from resdom.cli.main import app


def invoke(*args: str) -> int:
    """Run ``resdom ARGS`` and return its exit status (output goes to the captured stdout / stderr)."""
    old = sys.argv
    sys.argv = ["resdom", *args]
    try:
        app()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    return 0
