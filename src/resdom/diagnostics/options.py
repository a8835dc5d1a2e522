"""The options of a diagnose call, validated in one place (``DiagnoseOptions``), for ``resdom.diagnose`` (the API),
``diagnostics.runner.run_all`` and ``resdom diagnose`` (the CLI); and ``Context``, what a diagnostic's compute
function is given besides the model and the split.

A bad value is an ``OptionError`` naming the field (``alphas: residual scales must lie in [0, 1] (got 2)``); the CLI
renames the fields to its flags (``--alphas: ...``, ``part`` -> ``--part``). List-valued options take a sequence
or a comma-separated string (what the CLI passes on), so both front ends parse and refuse the same values.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from resdom.checks import MAX_CUTOFF, NumbersModel, closest_hint, residual_scales
from resdom.diagnostics.alpha import ALPHAS
from resdom.diagnostics.common import DEFAULT_BATCH
from resdom.diagnostics.decomposition import DEFINITIONS
from resdom.diagnostics.mixing import Definition
from resdom.errors import OptionError
from resdom.names import PARTS, USERS
from resdom.records import ALPHA, RECOVERY, diagnostic_names

if TYPE_CHECKING:
    import torch

    from resdom.data.sequences import SplitData
    from resdom.models.interface import Diagnosable

# USERS (names.py) is what's other choice: the per-user evidence (users.npz, diagnostics.evidence), a file ``run_all``
# writes after the diagnostics (part of "all"), not a diagnostic result: resdom.diagnose does not compute it


def parse_what(what: Any, choices: Iterable[str] | None = None) -> tuple[str, ...]:
    """"all" or some of ``choices`` (default: the registered diagnostics), in any case, as a comma-separated string
    or a sequence -> the chosen names in ``choices`` order; ValueError naming an unknown one."""
    choices = tuple(diagnostic_names() if choices is None else choices)
    items = _items(what)
    if items is None:
        raise ValueError(f"expected all or some of {', '.join(choices)} (got {what!r})")
    names = [str(w).strip().lower() for w in items if str(w).strip()]  # any case, as model names
    if not names or names == ["all"]:
        return choices
    bad = [w for w in names if w not in choices]
    if bad:
        close = difflib.get_close_matches(bad[0], choices, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ValueError(f"unknown diagnostic {bad[0]!r} ({hint}choose all or from {', '.join(choices)})")
    return tuple(w for w in choices if w in names)


def _items(value: Any) -> list[Any] | None:
    """A comma-separated string or any iterable (list, tuple, array) -> its items; None for anything else."""
    if isinstance(value, str):
        return [x.strip() for x in value.split(",") if x.strip()]
    if isinstance(value, (bytes, dict)):
        return None
    try:
        return list(value)
    except TypeError:
        return None


def _choice(value: Any, choices: tuple[str, ...]) -> str:
    """``value`` in any case if it is one of ``choices``; ValueError naming them and the closest otherwise."""
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in choices:
        raise ValueError(f"must be one of {', '.join(choices)} ({closest_hint(value, choices)}got {value!r})")
    return text


SEED_LIMIT = 2**62  # shuffle seeds lie in [-SEED_LIMIT, SEED_LIMIT): seed + user index stays an int64


def integers(value: Any, least: int | None, example: str) -> tuple[int, ...]:
    """``value`` (comma-separated text, or any iterable of integers) as a tuple of ints, each >= ``least`` (None: any);
    ValueError otherwise, ``example`` the well-formed value it names."""
    items = _items(value)
    if items is None or not items:
        raise ValueError(f"expected a non-empty sequence of integers{f' >= {least}' if least is not None else ''}, "
                         f"e.g. {example} (got {value!r})")
    out = []
    for v in items:
        if isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                raise ValueError(f"expected comma-separated integers (got {value!r})") from None
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"every value must be an integer{f' >= {least}' if least is not None else ''} "
                             f"(got {v!r})")
        v = int(v)
        if least is not None and v < least:
            raise ValueError(f"every value must be an integer >= {least} (got {v})")
        out.append(v)
    return tuple(out)


def no_repeats(values: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    """``values`` unchanged; ValueError naming the first value given twice (a sweep or table would hold it twice)."""
    def text(x: Any) -> str:
        return f"{x:g}" if isinstance(x, float) else str(x)

    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{what} {text(v)} is given twice (in {','.join(map(text, values))})")
        seen.add(v)
    return values


class DiagnoseOptions(NumbersModel):
    """What to diagnose and how (docs/spec.md §4); the defaults are ``resdom diagnose``'s.

    ``what``: the diagnostics (names of ``diagnostics.registry``; "all" = every registered one, in canonical order)
    and ``users``, the per-user evidence file that ``run_all`` writes (part of "all"; ``diagnostics`` and
    ``users`` split them).
    ``part``: the part of the split diagnosed (valid | test; recovery selects alpha* on valid and reports test
    whatever it says). ``recency`` / ``cutoffs``: the k and K of HRLkI@K. ``definition``: the mixing ratio.
    ``seeds``: shuffle seeds. ``alphas``: residual scales in [0, 1] of the sweep and of recovery, applied to
    ``layers`` (None: every block). ``per_head``: per-head mixing ratios too. ``batch_size``: users per batch.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    what: tuple[str, ...] = Field("all", validate_default=True, description="all, or some of the diagnostics")
    part: str = Field("test", description="valid or test")
    recency: tuple[int, ...] = Field((1, 2, 3), description="k of HRLkI (the k-th most recent input item)")
    cutoffs: tuple[int, ...] = Field((1, 5, 10), description="K of HRLkI@K")
    definition: Definition = Field("norm_of_sums", description="mixing ratio: norm_of_sums or sum_of_norms")
    seeds: tuple[int, ...] = Field((0, 1, 2), description="shuffle seeds")
    alphas: tuple[float, ...] = Field(ALPHAS, description="residual scales in [0, 1] (1 = the trained model)")
    layers: tuple[int, ...] | None = Field(None, description="blocks whose residual is scaled (None: all)")
    per_head: bool = Field(False, description="also per-head mixing ratios")
    batch_size: int = Field(DEFAULT_BATCH, description="users per batch")

    @field_validator("what", mode="before")
    @classmethod
    def _what(cls, v: Any) -> tuple[str, ...]:
        return parse_what(v, (*diagnostic_names(), USERS))

    @field_validator("part", mode="before")
    @classmethod
    def _part(cls, v: Any) -> str:
        return _choice(v, PARTS)

    @field_validator("recency", "cutoffs", mode="before")
    @classmethod
    def _positive_ints(cls, v: Any) -> tuple[int, ...]:
        values = integers(v, 1, "(1, 5, 10)")
        big = [x for x in values if x > MAX_CUTOFF]
        if big:
            raise ValueError(f"every value must be at most {MAX_CUTOFF:,} (got {big[0]})")
        return no_repeats(values, "value")

    @field_validator("definition", mode="before")
    @classmethod
    def _definition(cls, v: Any) -> str:
        return _choice(v, DEFINITIONS)  # the message names the choices

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, v: Any) -> tuple[int, ...]:
        if _items(v) == []:
            raise ValueError("give at least one seed")
        seeds = integers(v, None, "(0, 1, 2)")
        big = [s for s in seeds if not -SEED_LIMIT <= s < SEED_LIMIT]  # a user's stream is keyed by seed + user
        if big:
            raise ValueError(f"every seed must lie in [-2^62, 2^62) (got {big[0]})")
        return no_repeats(seeds, "seed")  # a seed twice would count its shuffle twice in the mean over seeds

    @field_validator("alphas", mode="before")
    @classmethod
    def _alphas(cls, v: Any) -> tuple[float, ...]:
        return residual_scales(v)  # the one rule (resdom.checks): type, range, at least one, no repeats

    @field_validator("layers", mode="before")
    @classmethod
    def _layers(cls, v: Any) -> tuple[int, ...] | None:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None
        return no_repeats(integers(v, 0, "(0, 1)"), "block")

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"expected an integer >= 1 (got {v!r})")
        if v < 1:
            raise ValueError(f"must be at least 1 (got {v})")
        return int(v)

    @property
    def diagnostics(self) -> tuple[str, ...]:
        """The registered diagnostics ``what`` chooses, in canonical order."""
        return tuple(w for w in self.what if w != USERS)

    @property
    def users(self) -> bool:
        """Whether ``what`` chooses the per-user evidence (``users.npz``, run_all only)."""
        return USERS in self.what

    def layer_list(self) -> list[int] | None:
        """``layers`` as the list the diagnostic functions take (None: every block)."""
        return None if self.layers is None else list(self.layers)



# DiagnoseOptions field -> the ``what`` choices that read it: a value given where none of them runs is refused
USED_BY: dict[str, tuple[str, ...]] = {"seeds": ("shuffle",), "recency": ("hrli",), "cutoffs": ("hrli",),
                                       "definition": ("mixing", ALPHA), "per_head": ("mixing",),
                                       "alphas": (ALPHA, RECOVERY, USERS), "layers": (ALPHA, RECOVERY, USERS)}


def refuse_unused(options: DiagnoseOptions, given: Iterable[str], what: str = "what=") -> None:
    """The fields of ``given`` that no diagnostic of ``options.what`` reads are one OptionError naming each, not
    ignored without a word (what=hrli, seeds=(5,): no shuffle runs). ``what``: how the message names the choice
    (``--what `` in the CLI)."""
    chosen, found = ",".join(options.what), []
    for name in given:
        readers = USED_BY.get(name, ())
        if not readers or any(w in options.what for w in readers):
            continue
        them = f"{readers[0]} reads it, and {what}{chosen} does not run it" if len(readers) == 1 \
            else f"{', '.join(readers[:-1])} or {readers[-1]} read it, and {what}{chosen} runs none"
        found.append((name, f"only {them} (add it to {what.strip(' =')}, or leave it out)"))
    if found:
        raise OptionError(found)


# diagnose's defaults, written once (the fields above): the API's keywords and the CLI's flags read them
DEFAULTS = DiagnoseOptions()

def problems(error: ValidationError) -> list[tuple[str, str]]:
    """(field, message) of each error of a DiagnoseOptions validation; a validator's own message as it wrote it."""
    out = []
    for err in error.errors():
        name = ".".join(str(x) for x in err["loc"][:1]) or "(options)"
        message = str(err["ctx"]["error"]) if err["type"] == "value_error" and "error" in err.get("ctx", {}) \
            else err["msg"]
        if err["type"] == "extra_forbidden":
            message = f"unknown option (options: {', '.join(DiagnoseOptions.model_fields)})"
        out.append((name, message))
    return out


def diagnose_options(**values: Any) -> DiagnoseOptions:
    """``DiagnoseOptions(**values)``; bad values are one OptionError naming every bad field."""
    try:
        return DiagnoseOptions(**values)
    except ValidationError as e:
        raise OptionError(problems(e)) from None


@dataclass
class Context:
    """What a diagnostic's ``compute`` is given besides the model and the data: the part of the split chosen
    (valid | test), the validated options, where to compute, whether to draw progress bars, and ``shared``: a dict
    kept across the diagnostics of one call on one model (the alpha sweep leaves its target ranks there, under
    ``alpha_ranks`` and the part's name, and recovery reuses them instead of ranking the split at every alpha
    again)."""

    part: str
    options: DiagnoseOptions
    device: str | torch.device | None = None
    progress: bool = False
    shared: dict[str, Any] = field(default_factory=dict)

    def common(self) -> dict[str, Any]:
        """The keywords every diagnostic function takes: ``batch_size``, ``device``, ``progress``."""
        return {"batch_size": self.options.batch_size, "device": self.device, "progress": self.progress}


Compute = Callable[["Diagnosable", "SplitData", Context], Any]  # a record's compute function
