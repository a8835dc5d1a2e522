"""Checks of option values shared by the API and the CLI, so both accept and refuse the same values."""

from __future__ import annotations

import numbers
import types
import typing
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationInfo, field_validator

from resdom.errors import ResdomError

ALPHA_RANGE = (0.0, 1.0)  # residual scales: 1 = the trained model, 0 = no attention residual


def _numeric(annotation: Any) -> bool:
    """Whether a field of this type takes an int or a float and no bool."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = typing.get_args(annotation)
    else:
        kinds = (annotation,)
    return bool({int, float} & set(kinds)) and bool not in kinds


class NumbersModel(BaseModel):
    """A pydantic model whose int and float fields refuse a bool: pydantic's lax mode reads True as 1, so
    ``hidden: true`` or ``fit(..., epochs=True)`` would train a one-unit or one-epoch model without a word."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name
        if isinstance(value, (bool, np.bool_)) and name is not None and _numeric(cls.model_fields[name].annotation):
            raise ValueError("expected a number, not true or false")
        return value


def positive_int(value: int, option: str) -> int:
    """``value`` as an int; ResdomError naming ``option`` where it is no integer or below 1 (batch sizes, k)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ResdomError(f"{option}: expected an integer >= 1 (got {value!r})")
    if value < 1:
        raise ResdomError(f"{option}: must be at least 1 (got {value})")
    return int(value)


def choice(value: Any, choices: tuple[str, ...], option: str) -> str:
    """``value`` in any case and without surrounding spaces, as one of ``choices``; a ResdomError naming ``option``,
    the choices and the closest of them otherwise (``--split tset``: did you mean test?)."""
    import difflib

    text = value.strip().lower() if isinstance(value, str) else None
    if text in choices:
        return text
    close = difflib.get_close_matches(str(value).strip().lower(), choices, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ResdomError(f"{option}: expected one of {', '.join(choices)} ({hint}got {value!r})")


def optional_bool(value: bool | None, option: str) -> bool | None:
    """``value`` where it is True, False or None (a numpy bool as a bool); ResdomError naming ``option`` otherwise
    (``filter_seen="no"`` would be true)."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    raise ResdomError(f"{option}: expected True, False or None (got {value!r})")


def alpha_value(value: float, option: str) -> float:
    """``value`` as a float in ``ALPHA_RANGE``; ResdomError naming ``option`` otherwise (NaN, text, a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            ALPHA_RANGE[0] <= float(value) <= ALPHA_RANGE[1]):  # NaN fails both
        raise ResdomError(f"{option}: the residual scale must lie in [{ALPHA_RANGE[0]:g}, {ALPHA_RANGE[1]:g}] "
                          f"(got {value!r})")
    return float(value)


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
