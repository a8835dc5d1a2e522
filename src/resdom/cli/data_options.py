"""The reader, preprocessing and split options shared by ``data stats``, ``data split`` and ``train``: declared
once here (``DataOptions`` and the ``data_options`` decorator), so every command reads data the same way.

A command decorated with ``@data_options(split=...)`` takes one parameter ``data: DataOptions``; the decorator
adds the options to the command's signature (as Typer sees it) and packs them into that parameter::

    @data_options(split=True)
    def train(source: str = typer.Argument(...), ..., data: DataOptions = DEFAULT) -> None:
        split = data.split(source)
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import typer

from resdom.bounded import load_json
from resdom.checks import launch_rank
from resdom.cli.values import say
from resdom.data.changes import change_lines
from resdom.data.prepare import format_name, known_protocol, load_prepared, prepare_split, protocol_name
from resdom.data.sequences import SplitData
from resdom.errors import OptionError, ResdomError
from resdom.experiments import recipe_protocol
from resdom.limits import short
from resdom.names import AUTO_PROTOCOL, PROTOCOLS

SOURCE_HELP = (
    "A registered data set (see 'resdom data list'), 'synthetic' or 'synthetic:knob=value,...', or a path: "
    "one file, 'items.txt,times.txt' (paired files), or a folder with one *item* and one *time* file."
)
DATA_DIR_HELP = (
    "Folder laid out like shared/data/raw (a bsarec folder with Beauty.txt, ...) holding the registered files. "
    "Default: $RESDOM_DATA_DIR, then the user cache ($RESDOM_CACHE_DIR or ~/.cache/resdom), then download."
)
FORMAT_HELP = ("Input format: user-lines, paired, interactions, recbole, csv, tsv, parquet, movielens, and the native "
               "files of the paper's data sets: movielens-zip, diginetica, steam, beeradvocate, zvuk, "
               "time-to-split-csv (default: detect).")
DEFAULT_PROTOCOL = AUTO_PROTOCOL  # gts where the data has timestamps, loo where not (prepare.resolve_protocol)
# the CLI prints the data: lines itself (print_changes): prepare_split's log records of them (prepare.log_changes) are
# not shown again by Python's last-resort handler
logging.getLogger("resdom.data").addHandler(logging.NullHandler())
DEFAULT_QUANTILE = 0.9

# (name, annotation, typer option): the reader and preprocessing options, then the split options
_READ_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("data_dir", Path | None, typer.Option(None, "--data-dir", help=DATA_DIR_HELP)),
    ("fmt", str | None, typer.Option(None, "--format", help=FORMAT_HELP)),
    ("k_core", int | None,
     typer.Option(None, "--k-core", help="Iterative k-core (0: off). Default: off for your own files; 5 for the "
                  "registered data sets unless their preset says otherwise (ml-100k, ml-1m-part: off).")),
    ("remove_repeats", bool | None,
     typer.Option(None, "--remove-repeats/--keep-repeats",
                  help="Remove consecutive repeats of an item within a user (default keep).")),
    ("user_col", str | None,
     typer.Option(None, "--user-col", help="User column (csv, tsv, parquet, recbole; default user_id).")),
    ("item_col", str | None,
     typer.Option(None, "--item-col", help="Item column (csv, tsv, parquet, recbole; default item_id).")),
    ("time_col", str | None,
     typer.Option(None, "--time-col", help="Timestamp column (csv, tsv, parquet, recbole; default timestamp). A table "
                  "without it is an error unless --no-time.")),
    ("no_time", bool,
     typer.Option(False, "--no-time", help="No timestamps: each user's interactions in the file's row order (a table "
                  "without a timestamp column needs this; timestamps that are there are ignored).")),
    ("normalize_ids", bool,
     typer.Option(False, "--normalize-ids", help="Strip spaces around ids and read integer-looking ids as numbers "
                  "(007 = 7). Default: ids are labels, kept exactly as read.")),
)
_SPLIT_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("protocol", str | None,
     typer.Option(None, "--protocol", help="auto (the default: gts where the data has timestamps, loo where it has "
                  "none), loo (leave-one-out), gts (global temporal split) or none (nothing held out: fit on every "
                  "interaction, to recommend); any case.")),
    ("quantile", float | None,
     typer.Option(None, "--quantile", help="GTS: T_test = this quantile of all timestamps (default 0.9).")),
    ("valid_quantile", float | None,
     typer.Option(None, "--valid-quantile",
                  help="GTS: T_val = this quantile of the training pool's times (default: --quantile).")),
    ("holdout_users", int | None,
     typer.Option(None, "--holdout-users", help="--protocol none: hold out the last item of this many users as a "
                  "validation slice for early stopping (default: none held out; training runs --epochs, keeps the "
                  "last).")),
    ("filter_seen", bool | None,
     typer.Option(None, "--filter-seen/--no-filter-seen",
                  help="Evaluation removes (or keeps) each user's input items from the ranking; recorded in the split "
                       "(default: the data set's setting: filtered, except diginetica, zvuk).")),
)
_FLAGS = {name: opt.param_decls[0] for name, _, opt in (*_READ_OPTIONS, *_SPLIT_OPTIONS)}


def is_split_dir(source: str | Path) -> bool:
    """Whether ``source`` is a folder written by ``resdom data split`` (arrays.npz + manifest.json)."""
    return SplitData.exists(str(source))


def split_manifest(source: str | Path) -> dict[str, Any]:
    """The manifest.json of a split folder (``is_split_dir``)."""
    path = Path(str(source)) / SplitData.MANIFEST
    again = "run `resdom data split` again"
    try:
        manifest = load_json(path.read_bytes(), str(path), again)  # bounded nesting: one line
    except OSError as e:  # no permission, an I/O error: splitting again would not help
        raise ResdomError(f"{path}: cannot read the split's manifest ({e.strerror})") from None
    if not isinstance(manifest, dict):
        raise ResdomError(f"{path}: not a split manifest (expected a JSON object); run `resdom data split` again")
    if manifest.get("protocol") not in PROTOCOLS:  # the protocol sets the model's defaults before the split is read
        raise ResdomError(f"{path}: protocol is {short(manifest.get('protocol'))}, none of {', '.join(PROTOCOLS)}; "
                          f"{again}")
    return manifest


def print_changes(manifest: dict[str, Any], where: str | Path | None = None) -> None:
    """Print what preparing the data changed (``data.changes.change_lines``), one ``data:`` line each on stderr
    (stdout stays for the command's own output, e.g. ``--json``); only the main process under torchrun. ``where``:
    the manifest.json of a saved split the manifest was read from (named where its ``changes`` cannot be read; what
    the lines advise is then a new split, as no option changes a saved one)."""
    if launch_rank() != 0:
        return
    try:
        lines = change_lines(manifest, saved=where is not None)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a hand-edited manifest.json
        detail = f"no field {e}" if isinstance(e, KeyError) else str(e)[:200] or type(e).__name__
        raise ResdomError(f"{where or 'the manifest'}: changes or counts is not what `resdom data split` writes "
                          f"({detail}); run `resdom data split` again") from None
    for line in lines:
        say(f"data: {line}", err=True)


@dataclass(frozen=True)
class DataOptions:
    """What the user gave of the shared data options; None = the source's preset or the default."""

    data_dir: Path | None = None
    fmt: str | None = None
    k_core: int | None = None
    remove_repeats: bool | None = None
    user_col: str | None = None
    item_col: str | None = None
    time_col: str | None = None
    no_time: bool | None = None
    normalize_ids: bool | None = None
    protocol: str | None = None
    quantile: float | None = None
    valid_quantile: float | None = None
    holdout_users: int | None = None
    filter_seen: bool | None = None
    # the fields a config file's data: section set (with_config_data): field -> where, as "FILE: data.key"
    from_config: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        """A bad value is an OptionError naming its flag (a config file's ``data:`` renames it to its key)."""
        problems = []
        try:  # in any case (--format CSV), with the closest format where it is none
            object.__setattr__(self, "fmt", format_name(self.fmt))
        except ResdomError as e:
            problems.append(("fmt", str(e).removeprefix("fmt: ")))
        if self.k_core is not None and self.k_core < 0:
            problems.append(("k_core", f"must be 0 (off) or more (got {self.k_core})"))
        if self.holdout_users is not None and self.holdout_users < 0:
            problems.append(("holdout_users", f"must be 0 or more (got {self.holdout_users})"))
        for name in ("quantile", "valid_quantile"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value < 1.0:
                problems.append((name, f"must lie strictly between 0 and 1 (got {value})"))
        if problems:
            raise OptionError([(_FLAGS[name], problem) for name, problem in problems])

    def given(self) -> dict[str, Any]:
        """The options the user set, by field name."""
        return {k: v for k, v in asdict(self).items() if v is not None and k != "from_config"}

    def named(self, name: str) -> str:
        """Where the user gave field ``name``: its flag (``--quantile``), or ``FILE: data.quantile`` where a config
        file's data: section set it."""
        return self.from_config.get(name, _FLAGS[name])

    def _leave_out(self, name: str) -> str:
        """How to stop giving field ``name``: leave its flag out, or its key in the config file."""
        where = self.from_config.get(name)
        return f"set {where.rsplit(': ', 1)[-1]} to null in {where.rsplit(': ', 1)[0]}" if where else \
            f"leave {_FLAGS[name]} out"

    def preprocess_options(self) -> dict[str, Any]:
        """Keyword options of ``prepare.load_prepared`` (reader columns, preprocessing) that the user set."""
        keep = ("k_core", "remove_repeats", "user_col", "item_col", "time_col", "no_time", "normalize_ids")
        return {k: v for k, v in self.given().items() if k in keep}

    def load_prepared(self, source: str) -> tuple[Any, dict[str, Any]]:
        """``prepare.load_prepared`` of ``source`` with these options (for ``data stats``); prints what preparing
        changed (``print_changes``). A folder written by ``resdom data split``: (None, its manifest), which holds the
        same statistics of the data it was made from (no option may change them)."""
        if is_split_dir(source):
            manifest = split_manifest(source)
            self._check_saved_split(source, manifest)
            if not all(isinstance(manifest.get(k), dict) for k in ("dataset", "source", "preprocessing")):
                raise ResdomError(f"{Path(source) / SplitData.MANIFEST}: holds no statistics of its data (a split "
                                  "saved by an older resdom); give the data it was made from, or split it again")
            print_changes(manifest, Path(source) / SplitData.MANIFEST)
            return None, manifest
        prepared, manifest = load_prepared(source, self.data_dir, self.fmt, **self.preprocess_options())
        print_changes(manifest)
        return prepared, manifest

    @property
    def protocol_choice(self) -> str:
        """--protocol as given (any case, checked), else the default ``auto``."""
        return protocol_name(self.protocol or DEFAULT_PROTOCOL, "--protocol")

    def known_protocol(self, source: str) -> str | None:
        """The protocol the split of ``source`` uses, where it is known before the data is read: a saved split's
        own, --protocol, or what ``auto`` resolves to (``prepare.known_protocol``); None for a file whose
        timestamps are known once it is read."""
        if is_split_dir(source):
            saved = split_manifest(source).get("protocol")
            return saved if isinstance(saved, str) else None
        reader = {k: v for k, v in self.preprocess_options().items() if k in ("no_time", "time_col")}
        return known_protocol(source, self.protocol_choice, **reader)

    def recipe_protocol(self, source: str) -> str | None:
        """The protocol whose model defaults a run of ``source`` trains with (``experiments.recipe_protocol``: for
        none, the one auto measures the data by), where it is known before the data is read; else None."""
        protocol = self.known_protocol(source)
        if protocol != "none":
            return protocol
        if is_split_dir(source):
            return recipe_protocol(protocol, split_manifest(source).get("has_timestamps"))
        reader = {k: v for k, v in self.preprocess_options().items() if k in ("no_time", "time_col")}
        return known_protocol(source, AUTO_PROTOCOL, **reader)

    def _auto_note(self, protocol: str) -> str:
        """`` (protocol auto: ...)`` where the user named no protocol, so a message says where ``protocol`` came
        from."""
        if self.protocol is not None:
            return ""
        return f" (the default protocol, auto: the data has {'timestamps' if protocol == 'gts' else 'none'})"

    def split(self, source: str) -> Any:
        """The SplitData of ``source``: read, preprocessed and split with these options, or, for a folder written
        by ``resdom data split``, exactly the split saved there (then no reader or preprocessing option applies)."""
        if is_split_dir(source):
            manifest = split_manifest(source)
            self._check_saved_split(source, manifest)
            split = SplitData.load(source)
            where: Path | None = Path(source) / SplitData.MANIFEST
        else:
            opts = self.preprocess_options()
            known = self.known_protocol(source)
            if self.valid_quantile is not None:
                if known is not None and known != "gts":
                    raise ResdomError("--valid-quantile: sets the validation cut time of --protocol gts; this is a "
                                      f"{known} split{self._auto_note(known)}, which has none")
                opts["valid_quantile"] = self.valid_quantile  # (auto on a file: prepare_split checks it once read)
            if self.holdout_users is not None:
                if self.protocol_choice != "none":
                    which = f"a {known} split" if known else "a split by the default protocol, auto (gts or loo),"
                    raise ResdomError(f"--holdout-users: the monitoring slice of --protocol none; {which} holds out "
                                      "its own validation users")
                opts["holdout_users"] = self.holdout_users
            if self.filter_seen is not None:
                opts["filter_seen"] = self.filter_seen
            quantile = DEFAULT_QUANTILE if self.quantile is None else self.quantile
            split = prepare_split(source, self.protocol_choice, quantile, self.data_dir, self.fmt, **opts)
            where = None
        print_changes(split.manifest, where)
        protocol = split.manifest.get("protocol")
        if protocol == "loo" and self.quantile is not None and "quantile" not in self.from_config \
                and launch_rank() == 0:  # (a config file holds a quantile for every protocol: config show's)
            # (--valid-quantile with loo is refused above; --quantile has a default in prepare_split, so it is not)
            say(f"data: note: --quantile sets the cut time of --protocol gts; this is a loo split"
                f"{self._auto_note(protocol)}, which has none: not used", err=True)
        return split

    def _check_saved_split(self, source: str, manifest: dict[str, Any]) -> None:
        """A saved split is used as it is: an option that would change it is an error naming the option (or the
        config file's ``data.`` key that set it). A config file's quantile on a saved loo split is no change: a loo
        split has none, and ``config show`` writes the default quantile for every protocol."""
        saved = manifest.get("protocol")
        if self.protocol is not None and self.protocol_choice != AUTO_PROTOCOL:
            if saved is not None and self.protocol_choice != saved:
                raise ResdomError(f"{self.named('protocol')} {self.protocol}: {source} holds a {saved} split (written "
                                  f"by `resdom data split`); {self._leave_out('protocol')} or split the data again")
        for name in ("quantile", "valid_quantile", "holdout_users"):
            value = getattr(self, name)
            if name == "quantile" and saved == "loo" and name in self.from_config:
                continue
            if value is not None and value != manifest.get(name):
                raise ResdomError(f"{self.named(name)} {value}: {source} is a saved {saved} split "
                                  f"({name} {manifest.get(name)}); {self._leave_out(name)} or split the data again")
        other = [k for k in self.given() if k not in ("protocol", "quantile", "valid_quantile", "holdout_users")]
        if other:
            raise ResdomError(f"{self.named(other[0])}: does not apply to {source}, a split saved by `resdom data "
                              "split` (its manifest.json records how it was read and preprocessed); give the option "
                              "to `resdom data split` instead")

    def record(self, source: str, split: SplitData | None = None) -> dict[str, Any]:
        """How the data was obtained, for the run's config.json (``data``): ``protocol`` the one the split uses
        (``split``'s, else ``known_protocol``), never ``auto``."""
        out: dict[str, Any] = {"source": source}
        if is_split_dir(source):
            manifest = split_manifest(source)
            out.update(prepared_split=str(Path(source).resolve()), protocol=manifest.get("protocol"),
                       quantile=manifest.get("quantile"), data_dir=None)
            return out
        protocol = split.manifest.get("protocol") if split is not None else self.known_protocol(source)
        out.update(protocol=protocol,
                   quantile=DEFAULT_QUANTILE if self.quantile is None else self.quantile,
                   data_dir=str(self.data_dir) if self.data_dir else None)
        extra = {k: v for k, v in self.given().items() if k not in ("protocol", "quantile", "data_dir")}
        if extra:
            out["options"] = extra
        return out


F = TypeVar("F", bound=Callable[..., Any])


def data_options(*, split: bool) -> Callable[[F], F]:
    """Add the shared data options (and, with ``split``, --protocol, --quantile, --valid-quantile) to a Typer
    command whose parameter ``data: DataOptions`` receives them."""
    declared = _READ_OPTIONS + (_SPLIT_OPTIONS if split else ())

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        if "data" not in sig.parameters:
            raise TypeError(f"{fn.__name__}: a command with @data_options needs a parameter 'data: DataOptions'")
        params = [p for p in sig.parameters.values() if p.name != "data"]
        params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann)
                   for name, ann, opt in declared]
        names = [name for name, _, _ in declared]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            values = {n: kwargs.pop(n, None) for n in names}
            for flag in ("no_time", "normalize_ids"):  # a flag left off is "not given", as every other option
                values[flag] = values.get(flag) or None
            return fn(*args, data=DataOptions(**values), **kwargs)

        annotations = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if k != "data"}
        annotations.update({name: ann for name, ann, _ in declared})
        command.__annotations__ = annotations
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        return command  # type: ignore[return-value]

    return decorate



# ------------------------------------------------------------------ the data: section of a --config file


def _config_key(flag: str) -> str:
    """``--remove-repeats/--keep-repeats`` -> ``remove_repeats``: a flag's key in a config file's ``data:``."""
    return flag.split("/")[0].lstrip("-").replace("-", "_")


def data_config_keys() -> dict[str, str]:
    """Key of a config file's ``data:`` section -> DataOptions field (``format`` -> ``fmt``); one per data option."""
    return {_config_key(flag): name for name, flag in _FLAGS.items()}


def data_flag(key: str) -> str | None:
    """The command-line flag of a config file's ``data:`` key (``k_core`` -> ``--k-core``), None for no such key."""
    name = data_config_keys().get(key)
    return None if name is None else _FLAGS[name].split("/")[0]


def _config_value(key: str, annotation: Any, value: Any, where: str) -> Any:
    """``value`` of ``data.<key>`` as the option's type, converted as the model and train sections convert theirs
    (pydantic's lax mode: ``"0.5"`` and PyYAML's ``1e-1``, which YAML 1.1 reads as a string, are numbers, ``"yes"``
    a bool) and refused as they refuse (a bool for a number, NaN, infinity, ``5.5`` for an integer)."""
    import typing

    from pydantic import ConfigDict, TypeAdapter, ValidationError

    if value is None:
        return None
    kinds = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    kind = kinds[0]
    if isinstance(value, bool) and kind in (int, float):
        raise ResdomError(f"{where}: data.{key}: expected a number, not true or false")
    if kind in (str, Path) and not isinstance(value, str):
        raise ResdomError(f"{where}: data.{key} must be str (got {value!r})")
    if kind in (int, float, bool):
        try:
            value = TypeAdapter(kind, config=ConfigDict(allow_inf_nan=False)).validate_python(value)
        except ValidationError as e:
            raise ResdomError(f"{where}: data.{key}: {e.errors()[0]['msg']} (got {value!r})") from None
    if key == "protocol":
        value = protocol_name(value, f"{where}: data.protocol")
    return Path(value) if kind is Path else value


def data_config_values(section: dict[str, Any], where: str) -> dict[str, Any]:
    """A config file's ``data:`` mapping (keys as the options without dashes: protocol, quantile, k_core, format,
    user_col, ...) -> DataOptions field values; ResdomError naming ``where`` and the key for anything else."""
    import difflib

    keys = data_config_keys()
    annotations = {name: ann for name, ann, _ in (*_READ_OPTIONS, *_SPLIT_OPTIONS)}
    out: dict[str, Any] = {}
    for key, value in section.items():
        key = str(key)
        if key not in keys:
            close = difflib.get_close_matches(key, sorted(keys), n=1)
            hint = f" (did you mean data.{close[0]}?)" if close else f" (known: {', '.join(sorted(keys))})"
            raise ResdomError(f"{where}: unknown field data.{key}{hint}")
        out[keys[key]] = _config_value(key, annotations[keys[key]], value, where)
    try:
        DataOptions(**out)
    except OptionError as e:
        raise e.renamed({_FLAGS[field]: f"{where}: data.{key}" for key, field in keys.items()}) from None
    return out


def with_config_data(options: DataOptions, values: dict[str, Any], where: str | None = None) -> DataOptions:
    """``options`` with the config file's data ``values`` (DataOptions fields) where the command line gave none:
    the command line wins, as for model and train fields. A split option the protocol has no use for
    (``holdout_users`` but for none, ``valid_quantile`` but for gts or auto) is an OptionError naming where it was
    given (the flag, or ``where: data.key``), as ``prepare_split`` refuses it: ``config show`` printed such a
    configuration, which ``train --config`` of it then refused."""
    from dataclasses import replace

    taken = {k: v for k, v in values.items() if getattr(options, k) is None}
    keys = {field: key for key, field in data_config_keys().items()}
    merged = replace(options, **taken, from_config={**options.from_config, **(
        {k: f"{where}: data.{keys[k]}" for k in taken if values[k] is not None} if where else {})})
    try:
        protocol = merged.protocol_choice
    except ResdomError:
        return merged  # an unknown protocol is named where the protocol is read
    problems = []
    if merged.holdout_users is not None and protocol != "none":
        which = (f"a {protocol} split" if protocol != AUTO_PROTOCOL
                 else "a split by the default protocol, auto (gts or loo),")
        problems.append(("holdout_users", f"the monitoring slice of --protocol none; {which} holds out its own "
                                          "validation users"))
    if merged.valid_quantile is not None and protocol not in ("gts", AUTO_PROTOCOL):
        problems.append(("valid_quantile", f"sets the validation cut time of --protocol gts; a {protocol} split "
                                           "has none"))
    if problems:
        raise OptionError([(f"{where}: data.{keys[field]}" if field in taken and where else _FLAGS[field], problem)
                           for field, problem in problems])
    return merged


def data_config_section(options: DataOptions, protocol: str | None = None) -> dict[str, Any]:
    """Every data setting as a config file's ``data:`` section (None: the source's own default), quantile resolved
    and the protocol ``protocol`` (the one the configuration was resolved for; None: --protocol as given, or
    auto)."""
    keys = {field: key for key, field in data_config_keys().items()}
    split_first = [name for name, _, _ in _SPLIT_OPTIONS] + [name for name, _, _ in _READ_OPTIONS]
    out = {keys[name]: getattr(options, name) for name in split_first}
    out.update(protocol=protocol or options.protocol_choice,
               quantile=DEFAULT_QUANTILE if options.quantile is None else options.quantile)
    return {k: str(v) if isinstance(v, Path) else v for k, v in out.items()}
