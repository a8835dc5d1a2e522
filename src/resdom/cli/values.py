"""Checks of option values shared by several commands, so every command accepts and refuses the same values."""

from __future__ import annotations

from typing import Any

import typer

from resdom.checks import ALPHA_RANGE, MAX_CUTOFF, parse_alphas, positive_int
from resdom.errors import ResdomError

__all__ = ["ALPHA_RANGE", "PROGRESS_HELP", "parse_alphas", "parse_cutoffs", "positive_int", "progress_option",
           "quiet_alias"]


INTERRUPTED = 130  # the exit status after Ctrl-C (128 + SIGINT)


def interrupted(message: str | None) -> SystemExit:
    """What a command raises after Ctrl-C, having said what it kept (``message``, on stderr; None: nothing to say,
    e.g. on a torchrun rank other than 0): exit 130 as a SystemExit, which Click lets through, so the entry point
    (cli/main.py) tells it from a Ctrl-C no command caught, which gets a plain "interrupted" there."""
    if message is not None:
        typer.echo(message, err=True)
    return SystemExit(INTERRUPTED)


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
        if v > MAX_CUTOFF:
            raise ResdomError(f"{option}: must be at most {MAX_CUTOFF:,} (got {v})")
    if len(set(values)) != len(values):
        raise ResdomError(f"{option}: repeated cutoff in {text!r}")
    return tuple(values)


def one_filter(filter_seen: bool | None, filter_old: bool | None) -> bool | None:
    """``--filter-seen/--no-filter-seen`` and its older name ``--filter/--no-filter`` (hidden from the help): one
    value, or a ResdomError where both are given and disagree."""
    if filter_seen is not None and filter_old is not None and filter_seen != filter_old:
        raise ResdomError(f"--{'' if filter_seen else 'no-'}filter-seen and --{'' if filter_old else 'no-'}filter "
                          "disagree; give one of them")
    return filter_seen if filter_seen is not None else filter_old
