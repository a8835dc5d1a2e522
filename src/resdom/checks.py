"""Checks of option values shared by the API and the CLI, so both accept and refuse the same values."""

from __future__ import annotations

import contextlib
import numbers
import os
import types
import typing
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from resdom.errors import ResdomError
from resdom.limits import short

ALPHA_RANGE = (0.0, 1.0)  # residual scales: 1 = the trained model, 0 = no attention residual

# How a message names an option: by its Python argument (``user_col``) from the API, by the CLI's flag (``--user-col``)
# while a command of the CLI runs (``cli_names``, entered by cli/main.py), so one message serves both.
_CLI_NAMES: ContextVar[bool] = ContextVar("resdom_cli_names", default=False)
FLAGS: dict[str, str] = {
    "user_col": "--user-col", "item_col": "--item-col", "time_col": "--time-col", "no_time": "--no-time",
    "normalize_ids": "--normalize-ids", "fmt": "--format", "data_dir": "--data-dir", "k_core": "--k-core",
    "remove_repeats": "--remove-repeats", "protocol": "--protocol", "quantile": "--quantile",
    "valid_quantile": "--valid-quantile", "holdout_users": "--holdout-users", "filter_seen": "--filter-seen",
    "model": "--model", "out": "--out", "epochs": "--epochs",
}


@contextlib.contextmanager
def cli_names() -> Iterator[None]:
    """Within it, ``arg`` names options by the CLI's flags."""
    token = _CLI_NAMES.set(True)
    try:
        yield
    finally:
        _CLI_NAMES.reset(token)


def naming_flags() -> bool:
    """Whether messages name options by the CLI's flags (within ``cli_names``)."""
    return _CLI_NAMES.get()


def arg(name: str, value: Any = None) -> str:
    """How a message names option ``name`` (a Python argument): ``--user-col`` in the CLI, ``user_col`` from Python;
    with ``value``, the option given it: ``--format csv`` / ``fmt='csv'`` (``--no-time`` / ``no_time=True`` for a
    flag given True)."""
    flag = FLAGS.get(name)
    if _CLI_NAMES.get() and flag is not None:
        return flag if value is None or value is True else f"{flag} {value}"
    return name if value is None else f"{name}={value!r}"


def setting(key: str, value: Any = None) -> str:
    """How a message tells the user to give the model or training setting ``key`` (``train.lr``): ``--set
    train.lr=VALUE`` in the CLI, ``resdom.fit``'s keyword (``lr=VALUE``) from Python; ``value`` None: ``N``, a
    value to choose. A bare ``train.lr=1e-4`` was an extra argument to ``resdom train``."""
    shown = "N" if value is None else str(value)
    if _CLI_NAMES.get():
        return f"--set {key}={shown}"
    return f"{key.rpartition('.')[2]}={shown}"


def _numeric(annotation: Any) -> bool:
    """Whether a field of this type takes an int or a float and no bool."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = typing.get_args(annotation)
    else:
        kinds = (annotation,)
    return bool({int, float} & set(kinds)) and bool not in kinds


INT_LIMIT = 2**62  # the largest integer setting: within int64 after the arithmetic done on it (a seed plus a user)


class NumbersModel(BaseModel):
    """A pydantic model whose int and float fields refuse a bool: pydantic's lax mode reads True as 1, so
    ``hidden: true`` or ``fit(..., epochs=True)`` would train a one-unit or one-epoch model without a word; and
    refuse infinity and NaN, which pass a bound such as ``lr > 0`` and then train a model of NaN weights."""

    model_config = ConfigDict(allow_inf_nan=False)  # subclasses' own model_config is merged with this one

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name
        if isinstance(value, (bool, np.bool_)) and name is not None and _numeric(cls.model_fields[name].annotation):
            raise ValueError("expected a number, not true or false")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _machine_ints(cls, value: Any) -> Any:
        """An integer setting past what the machine's integers hold (``train.threads=1e23`` written out) reached
        torch or numpy as an OverflowError traceback."""
        if isinstance(value, int) and not isinstance(value, bool) and not -INT_LIMIT <= value <= INT_LIMIT:
            raise ValueError("must lie within ±2^62")
        return value


MAX_CUTOFF = 2**31 - 1  # the largest K of HR@K, NDCG@K or HRLI@K: past any catalogue, far below the rank that
# marks an item never ranked (evaluation.ranking.MISS), which a larger K would count as a hit


def positive_int(value: int, option: str) -> int:
    """``value`` as an int; ResdomError naming ``option`` where it is no integer or below 1 (batch sizes, k)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ResdomError(f"{option}: expected an integer >= 1 (got {value!r})")
    if value < 1:
        raise ResdomError(f"{option}: must be at least 1 (got {value})")
    return int(value)


def choice(value: Any, choices: tuple[str, ...], option: str) -> str:
    """``value`` in any case and without surrounding spaces, as one of ``choices``; a ResdomError naming ``option``,
    the choices and the closest of them otherwise (``--part tset``: did you mean test?)."""
    found = canonical(value, choices)
    if found is not None:
        return found
    raise ResdomError(f"{option}: expected one of {', '.join(choices)} ({closest_hint(value, choices)}got {value!r})")


def canonical(value: Any, choices: tuple[str, ...]) -> str | None:
    """The one of ``choices`` that ``value`` is in any case and without surrounding spaces (``"NDCG@10 "`` ->
    ``NDCG@10``, ``"CPU"`` -> ``cpu``); None where it is none of them (or no text)."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    return next((c for c in choices if c.lower() == text), None)


def closed_choice(value: Any, choices: tuple[str, ...], what: str) -> Any:
    """``value`` as ``canonical`` reads it, for a pydantic validator (mode "before"): a ValueError naming ``what``,
    the choices and the closest of them where it is text and none of them; anything else is returned as it is (the
    field's own type check refuses it)."""
    if not isinstance(value, str):
        return value
    found = canonical(value, choices)
    if found is None:
        raise ValueError(f"unknown {what} {value!r} ({closest_hint(value, choices)}choose {', '.join(choices)})")
    return found


def literal_names(annotation: Any) -> tuple[str, ...]:
    """The text choices of a field's type: a Literal's names, also inside an Optional or a Union (empty: the field
    is no closed choice)."""
    return tuple(c for kind in typing.get_args(annotation) for c in (typing.get_args(kind) or (kind,))
                 if isinstance(c, str))


def closest_hint(value: Any, choices: tuple[str, ...]) -> str:
    """``"did you mean X? "`` for the choice closest to ``value`` (both in any case), ``""`` where none is close."""
    import difflib

    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(str(value).strip().lower(), list(lowered), n=1)
    return f"did you mean {lowered[close[0]]}? " if close else ""


def path_argument(value: Any, name: str) -> Path:
    """``value`` (a str or os.PathLike) as a Path; a ResdomError naming ``name`` where it is none (None, 5: a
    TypeError from inside pathlib that named no argument) or empty ("": the working folder)."""
    if not isinstance(value, (str, os.PathLike)) or isinstance(value, bytes):
        raise ResdomError(f"{name}: expected a path (a str or pathlib.Path), got {type(value).__name__} "
                          f"{short(value, 60)}")
    if not str(os.fspath(value)):  # "" is Path("."), the working folder
        raise ResdomError(f"{name}: an empty path; give a folder")
    return Path(value)


def optional_bool(value: bool | None, option: str) -> bool | None:
    """``value`` where it is True, False or None (a numpy bool as a bool); ResdomError naming ``option`` otherwise
    (``filter_seen="no"`` would be true)."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    raise ResdomError(f"{option}: expected True, False or None (got {value!r})")


def flag(value: bool, option: str) -> bool:
    """``value`` where it is True or False (a numpy bool, as ``df["x"].any()`` gives, as a bool); a ResdomError
    naming ``option`` otherwise (``overwrite="no"`` would be true)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ResdomError(f"{option}: expected True or False (got {value!r})")


def alpha_value(value: float, option: str) -> float:
    """``value`` as a float by ``residual_scales``' rule for one scale; ResdomError naming ``option`` otherwise
    (NaN, text, a bool: a value that is no number is named as such, not as one out of range)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ResdomError(f"{option}: expected a number, the residual scale in [{ALPHA_RANGE[0]:g}, "
                          f"{ALPHA_RANGE[1]:g}] (got {type(value).__name__} {short(value, 40)})")
    try:
        (scale,) = residual_scales((value,))
    except ValueError:
        raise ResdomError(f"{option}: the residual scale must lie in [{ALPHA_RANGE[0]:g}, {ALPHA_RANGE[1]:g}] "
                          f"(got {value!r})") from None
    return scale


def parse_alphas(text: str | None, option: str = "--alphas") -> list[float] | None:
    """``"1,0.5,0"`` -> [1.0, 0.5, 0.0]; None where not given; ``residual_scales``' rule, a ResdomError naming
    ``option`` otherwise."""
    if text is None or not text.strip():
        return None
    try:
        return list(residual_scales(text))
    except ValueError as e:
        raise ResdomError(f"{option}: {e}") from None


def residual_scales(value: Any) -> tuple[float, ...]:
    """The one rule for residual scales (alpha, docs/spec.md "Residual scaling"): a comma-separated text, or a
    sequence of numbers (a bool, a text or a complex number is no scale: ``float(True)`` is 1), each in
    ``ALPHA_RANGE`` (NaN is not), at least one, none twice (a sweep would hold its row twice) -> the scales as floats,
    in the order given. A ValueError says what is wrong (the caller names the option)."""
    lo, hi = ALPHA_RANGE
    if isinstance(value, str):
        try:
            values = [float(x) for x in value.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"expected comma-separated numbers (got {value!r})") from None
    else:
        try:
            items = list(value)
        except TypeError:
            items = None
        if items is None or isinstance(value, (bytes, dict)) or any(
                isinstance(a, (bool, np.bool_)) or not isinstance(a, numbers.Real) for a in items):
            raise ValueError(f"expected numbers in [{lo:g}, {hi:g}] (got {value!r})")
        values = [float(a) for a in items]
    bad = [a for a in values if not lo <= a <= hi]  # NaN fails both comparisons
    if bad:
        raise ValueError(f"residual scales must lie in [{lo:g}, {hi:g}] (got {bad[0]:g})")
    if not values:
        raise ValueError("give at least one residual scale")
    seen: set[float] = set()
    for a in values:
        if a in seen:
            raise ValueError(f"residual scale {a:g} is given twice (in {','.join(f'{x:g}' for x in values)})")
        seen.add(a)
    return tuple(values)


LAUNCH_HINT = "torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; unset them to run one process"


def launch_env() -> tuple[int, int, int]:
    """(RANK, WORLD_SIZE, LOCAL_RANK) as a launcher (torchrun) sets them; (0, 1, 0) where unset. A ResdomError naming
    the variable where one is not a whole number, WORLD_SIZE is below 1, RANK or LOCAL_RANK is not below WORLD_SIZE
    (``RANK=1`` alone made a lone process a silent non-main rank that printed nothing), or several processes are
    asked for without the rendezvous address a launcher sets (MASTER_ADDR, MASTER_PORT): torch raised a traceback."""
    values = {}
    for name, default, low in (("WORLD_SIZE", 1, 1), ("RANK", 0, 0), ("LOCAL_RANK", 0, 0)):
        text = os.environ.get(name)
        try:
            values[name] = default if text is None else int(text.strip())
        except ValueError:
            raise ResdomError(f"{name}={text!r}: expected a whole number ({LAUNCH_HINT})") from None
        if values[name] < low:
            raise ResdomError(f"{name}={text}: expected a whole number >= {low} ({LAUNCH_HINT})")
    world = values["WORLD_SIZE"]
    given = "" if "WORLD_SIZE" in os.environ else " (unset)"
    for name in ("RANK", "LOCAL_RANK"):
        if values[name] >= world:
            raise ResdomError(f"{name}={values[name]} is not below WORLD_SIZE={world}{given} ({LAUNCH_HINT})")
    if world > 1:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name, "").strip()]
        if missing:
            raise ResdomError(f"WORLD_SIZE={world} asks for {world} processes, but {' and '.join(missing)} "
                              f"{'is' if len(missing) == 1 else 'are'} not set: start them with torchrun "
                              f"(torchrun --nproc_per_node {world} $(which resdom) ...), or unset WORLD_SIZE")
        port = os.environ["MASTER_PORT"].strip()
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ResdomError(f"MASTER_PORT={port!r}: expected a port number from 1 to 65535 ({LAUNCH_HINT})")
    return values["RANK"], world, values["LOCAL_RANK"]


def launch_rank() -> int:
    """This process's rank (``launch_env``): 0 outside torchrun, where the main process prints and writes."""
    return launch_env()[0]
