"""Checks of option values shared by several commands, so every command accepts and refuses the same values."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from resdom.checks import ALPHA_RANGE, MAX_CUTOFF, parse_alphas, positive_int
from resdom.errors import ResdomError
from resdom.io import text_bytes
from resdom.limits import visible
from resdom.rundir import STANDARD_OUTPUT

__all__ = ["ALPHA_RANGE", "PROGRESS_HELP", "parse_alphas", "parse_cutoffs", "positive_int", "progress_option",
           "quiet_alias"]


INTERRUPTED = 130  # the exit status after Ctrl-C (128 + SIGINT)
STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # `kill`, `timeout`, a scheduler; a closed terminal
_STOPPED_BY: list[int] = []  # the stopping signal that came, if one did (else the stop was Ctrl-C's)


def _stop(signum: int, frame: object) -> None:
    """A stopping signal: end the command as Ctrl-C does (each command's own "interrupted: ..." line, what it kept,
    how to resume), then exit 128 + its number; a second one ends the process at once."""
    _STOPPED_BY.append(signum)
    signal.signal(signum, signal.SIG_DFL)
    raise KeyboardInterrupt


@contextlib.contextmanager
def stop_as_on_ctrl_c() -> Iterator[None]:
    """While the command runs, SIGTERM and SIGHUP end it as Ctrl-C does (they killed it without a word: no line of
    what was kept or how to resume). Only in the main thread, where the signal is not ignored (``nohup``) or handled
    already, and outside torchrun, whose agent stops its workers itself; the handlers before are restored after."""
    _STOPPED_BY.clear()
    before = {}
    if threading.current_thread() is threading.main_thread() and os.environ.get("WORLD_SIZE", "1").strip() == "1":
        before = {s: signal.getsignal(s) for s in STOPPING_SIGNALS if signal.getsignal(s) is signal.SIG_DFL}
    for signum in before:
        signal.signal(signum, _stop)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def stopped_status() -> int:
    """The exit status of a stopped command: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + _STOPPED_BY[0] if _STOPPED_BY else INTERRUPTED


def stopped_by() -> str:
    """The stop for a message: "" for Ctrl-C, " (SIGTERM)" for a stopping signal."""
    return f" ({signal.Signals(_STOPPED_BY[0]).name})" if _STOPPED_BY else ""


def interrupted(message: str | None) -> SystemExit:
    """What a command raises after Ctrl-C (or a stopping signal, ``stop_as_on_ctrl_c``), having said what it kept
    (``message``, on stderr; None: nothing to say, e.g. on a torchrun rank other than 0): exit 128 + the signal as
    a SystemExit, which Click lets through, so the entry point (cli/main.py) tells it from a stop no command caught,
    which gets a plain "interrupted" there. A terminal that is gone (SIGHUP) takes no message."""
    if message is not None:
        with contextlib.suppress(OSError):
            typer.echo(message.replace("interrupted:", f"interrupted{stopped_by()}:", 1), err=True)
    return SystemExit(stopped_status())


PROGRESS_HELP = ("progress: bars on a terminal; in a log, one line per epoch and per diagnostic, and within a long "
                 "loop (an epoch, a diagnostic, evaluate, recommend, similar) a line of how far it is every 30 s "
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


def printed_if_dash(out: Path | None) -> Path | None:
    """``--out -`` of a command that prints its one file without ``--out`` (``recommend``, ``similar``, ``config
    show``): None, printed, as the Unix convention has it (it wrote a file named ``-``); any other path as given."""
    return None if out is not None and str(out) == STANDARD_OUTPUT else out


def one_filter(filter_seen: bool | None, filter_old: bool | None) -> bool | None:
    """``--filter-seen/--no-filter-seen`` and its older name ``--filter/--no-filter`` (hidden from the help): one
    value, or a ResdomError where both are given and disagree."""
    if filter_seen is not None and filter_old is not None and filter_seen != filter_old:
        raise ResdomError(f"--{'' if filter_seen else 'no-'}filter-seen and --{'' if filter_old else 'no-'}filter "
                          "disagree; give one of them")
    return filter_seen if filter_seen is not None else filter_old


def say(message: str | None = "", err: bool = False, nl: bool = True) -> None:
    """``typer.echo`` of a line for the user to read (a note, a summary, a path written): a control character in a
    path, data set, label or id it names is written as its code (``visible``: ``\\x1b``, ``\\u202e``), never sent to
    the terminal to act on (an escape sequence in a vendor's file name cleared the screen). Data a command writes
    to stdout (CSV, YAML, JSON) goes out as it is, through ``typer.echo``."""
    typer.echo(None if message is None else visible(message), err=err, nl=nl)


def print_file(text: str) -> None:
    """Print the file a command prints where it is given no --out (or ``--out -``: recommend's and similar's CSV,
    config show's YAML) as the bytes --out would hold: UTF-8 whatever stdout's encoding. On a Latin-1 locale (or
    PYTHONIOENCODING=latin-1) an id outside Latin-1 was a UnicodeEncodeError traceback, and the others went out in
    Latin-1, another file than --out writes. A stdout of text only (a program's ``io.StringIO`` around ``app()``)
    gets the text."""
    if getattr(sys.stdout, "buffer", None) is None:
        typer.echo(text, nl=False)
        return
    typer.echo(text_bytes(text), nl=False)
