"""Checks of option values shared by the API and the CLI, so both accept and refuse the same values."""

from __future__ import annotations

from resdom.errors import ResdomError

ALPHA_RANGE = (0.0, 1.0)  # residual scales: 1 = the trained model, 0 = no attention residual


def positive_int(value: int, option: str) -> int:
    """``value`` itself; ResdomError naming ``option`` where it is below 1 (batch sizes)."""
    if value < 1:
        raise ResdomError(f"{option}: must be at least 1 (got {value})")
    return value


def parse_alphas(text: str | None, option: str = "--alphas") -> list[float] | None:
    """``"1,0.5,0"`` -> [1.0, 0.5, 0.0]; None where not given. Every value must be a number in ``ALPHA_RANGE``."""
    if text is None or not text.strip():
        return None
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ResdomError(f"{option}: expected comma-separated numbers (got {text!r})") from None
    lo, hi = ALPHA_RANGE
    bad = [v for v in values if not lo <= v <= hi]  # NaN fails both comparisons
    if bad:
        raise ResdomError(f"{option}: residual scales must lie in [{lo:g}, {hi:g}] (got {bad[0]:g})")
    if not values:
        raise ResdomError(f"{option}: give at least one residual scale")
    return values
