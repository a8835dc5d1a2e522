"""Checks of option values shared by several commands, so every command accepts and refuses the same values."""

from __future__ import annotations

from typing import Any

import typer

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


PROGRESS_HELP = ("progress: bars on a terminal; in a log, one line per epoch and per diagnostic "
                 "(--no-progress: none)")


def progress_option() -> Any:
    """The one progress flag of every command that computes: ``--progress/--no-progress`` (default on)."""
    return typer.Option(True, "--progress/--no-progress", help=PROGRESS_HELP)


def quiet_alias() -> Any:
    """``-q`` / ``--quiet``, kept hidden for older scripts: the same as ``--no-progress``."""
    return typer.Option(False, "--quiet", "-q", hidden=True, help="the same as --no-progress")


def parse_cutoffs(text: str, option: str = "--cutoffs") -> tuple[int, ...]:
    """``"1,5,10,20"`` -> (1, 5, 10, 20): the K of HR@K / NDCG@K, each at least 1, none repeated."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ResdomError(f"{option}: expected comma-separated integers (got {text!r})") from None
    if not values:
        raise ResdomError(f"{option}: give at least one cutoff")
    for v in values:
        positive_int(v, option)
    if len(set(values)) != len(values):
        raise ResdomError(f"{option}: repeated cutoff in {text!r}")
    return tuple(values)
