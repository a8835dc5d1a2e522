"""From a source string to a prepared, split data set (spec §1): read -> preprocess -> split -> manifest.

``source`` is one of:

- a registered name (``resdom data list``): ``beauty``, ``sports``, ``toys``, ``yelp``, ``lastfm``,
  ``beauty-ts``, ``sports-ts``, ``toys-ts``, ``yelp-ts``, ``video-ts``, ``ml-100k``, ``ml-1m-part``, and the
  paper's others in their native files: ``ml-1m``, ``diginetica``, ``steam``, ``beeradvocate``, ``zvuk`` (and
  time-to-split's raw CSVs: ``diginetica-tts`` ...); files are found by ``download.py`` (``data_dir``,
  ``$RESDOM_DATA_DIR``, user cache, download; files that cannot be downloaded are named with where to put them);
- ``synthetic`` or ``synthetic:knob=value,...`` (``synthetic.py``);
- a path: one file, ``items.txt,times.txt`` (paired files), or a folder holding one ``*item*`` and one
  ``*time*`` file; the format is detected where unambiguous, ``fmt`` forces it;
- a pandas DataFrame with user, item and timestamp columns (read as a table file is).

Options (``**options``): preprocessing ``k_core`` (None/0 off), ``remove_repeats``, ``sort_by_time``,
``remap`` (and ``sample_users``, ``sample_seed``); reader options ``user_col``, ``item_col``, ``time_col``
(``time_col=None`` given explicitly: no timestamps, as ``no_time=True``), ``no_time``, ``normalize_ids``; GTS
``valid_quantile``; ``filter_seen`` (evaluation). A user's own data is not filtered (no k-core) unless asked;
registered paper data sets apply their protocol's k-core 5 (``REGISTERED_DEFAULTS``) or their own preset
(``ml-100k``: no k-core, as distributed; the paper's data sets: time-to-split's preprocessing) and evaluation
setting (``diginetica``, ``zvuk``: seen items kept); explicit options win. Everything that changes the data on
the way (users, items and rows removed, repeats kept or removed, the order used) is recorded in the manifest's
``changes`` (``data.changes``) and printed by every command.

The evaluation setting goes into the split's manifest as ``"evaluation": {"filter_seen": false, ...}`` where it is
False (absent: filter, the default; ``SplitData.filter_seen``), so a split made before the setting existed keeps
its manifest and data fingerprint.
"""

from __future__ import annotations

import hashlib
import logging
import numbers
import os
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
from pydantic import ValidationError

from resdom.checks import arg, closest_hint, optional_bool, path_argument
from resdom.data.changes import change_lines, preprocessing_changes, split_changes, split_reasons
from resdom.data.download import resolve_dataset_files, sha256_file
from resdom.data.native import NATIVE_FORMATS, read_native
from resdom.data.preprocess import Prepared, PreprocessConfig, preprocess
from resdom.data.readers import (
    FORMATS,
    RawInteractions,
    drop_times,
    note_near_duplicate_ids,
    read_frame,
    read_interactions,
    split_source_paths,
)
from resdom.data.registry import DATASETS, dataset_hint
from resdom.data.sequences import Sequences, SplitData
from resdom.data.splits import SplitParts, heads, part_counts, split_gts, split_loo, split_none
from resdom.data.stats import dataset_stats
from resdom.data.synthetic import generate, parse_synthetic_source
from resdom.errors import ResdomError, validation_error
from resdom.limits import short
from resdom.names import AUTO_PROTOCOL, PROTOCOLS
from resdom.version import __version__

PREPROCESS_OPTIONS = tuple(PreprocessConfig.model_fields)
READER_OPTIONS = ("user_col", "item_col", "time_col", "no_time", "normalize_ids")
SPLIT_OPTIONS = ("valid_quantile", "filter_seen", "holdout_users")
# the preprocessing a registered paper data set gets unless its preset or the user says otherwise (the papers'
# 5-core; a user's own files get no k-core)
REGISTERED_DEFAULTS: dict[str, Any] = {"k_core": 5}
LOG = logging.getLogger("resdom.data")  # the data: lines of prepare_split (log_changes)
Source: TypeAlias = str | Path | pd.DataFrame  # explicit: pandas has no stubs here (its DataFrame is Any)


def source_name(source: Source) -> str:
    """How ``source`` is named in messages and the manifest (``DataFrame`` for a pandas DataFrame); a ResdomError
    for what is no source (a list, a Series: its text was taken for a file name)."""
    if isinstance(source, pd.DataFrame):
        return "DataFrame"
    if not isinstance(source, (str, os.PathLike)):
        raise ResdomError(f"source: expected a data set name, a file or folder path, or a pandas DataFrame (got "
                          f"{type(source).__name__})")
    return str(source)


def frame_sha256(df: pd.DataFrame) -> str:
    """A content hash of a DataFrame (column names, then pandas' row hashes of the values)."""
    h = hashlib.sha256("\x1f".join(map(str, df.columns)).encode("utf-8"))
    try:
        h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    except TypeError:  # unhashable cells (lists, ...): hash their text
        h.update(pd.util.hash_pandas_object(df.astype(str), index=False).to_numpy().tobytes())
    return h.hexdigest()


# the CLI's names of prepare_split's own parameters, which a Python call may reach for (format= is fmt=)
_PARAMETER_NAMES = {"format": "fmt"}


def _check_options(options: dict[str, Any], allowed: tuple[str, ...]) -> None:
    """A ResdomError naming the first unknown option and the closest known one (the parameters ``fmt``,
    ``protocol``, ... too: ``format=`` is ``fmt=``), or a reader flag that is not True, False or None."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        key = str(unknown[0])
        known = (*allowed, "protocol", "quantile", "data_dir", "fmt")
        hint = (f"did you mean {_PARAMETER_NAMES[key]}? " if key in _PARAMETER_NAMES
                else closest_hint(key.replace("-", "_"), known))
        raise ResdomError(f"unknown data option {key!r} ({hint}options: {', '.join(allowed)})")
    for flag in ("no_time", "normalize_ids"):  # no_time="no" read the data without its timestamps
        if flag in options:
            optional_bool(options[flag], flag)
    if options.get("no_time") and options.get("time_col") is not None:  # the one read, the other ignored unsaid
        raise ResdomError(f"{arg('no_time')}, {arg('time_col', options['time_col'])}: the one reads the data without "
                          "timestamps, the other names its timestamp column; give one of them")


def format_name(fmt: str | None, option: str = "fmt") -> str | None:
    """``fmt`` in any case and without surrounding spaces (``CSV`` -> ``csv``), one of the formats resdom reads; a
    ResdomError naming ``option``, every format and the closest otherwise."""
    formats = (*FORMATS, *NATIVE_FORMATS)
    text = fmt.strip().lower() if isinstance(fmt, str) else fmt
    if text is None or text in formats:
        return text
    hint = closest_hint(fmt, formats).rstrip()
    raise ResdomError(f"{option}: unknown format {fmt!r}; choose one of: {', '.join(formats)}"
                      + (f" ({hint})" if hint else ""))


def read_source(
    source: Source, data_dir: str | Path | None = None, fmt: str | None = None, **reader_options: Any
) -> tuple[RawInteractions, dict[str, Any], dict[str, Any]]:
    """(raw interactions, source record for the manifest, preprocessing preset) of ``source``."""
    _check_options(reader_options, READER_OPTIONS)
    fmt = format_name(fmt)
    if isinstance(source, pd.DataFrame):
        _no_data_dir(data_dir, "a DataFrame")
        if fmt is not None:
            raise ResdomError(f"fmt: a DataFrame is read by its columns; fmt={fmt!r} does not apply")
        raw = read_frame(source, **reader_options)
        if not reader_options.get("normalize_ids"):
            note_near_duplicate_ids(raw)
        record = {"kind": "dataframe", "name": "DataFrame", "format": "dataframe", "rows": len(source),
                  "columns": [str(c) for c in source.columns], "sha256": frame_sha256(source)}
        return raw, record, {}
    source = source_name(source)
    if source == "synthetic" or source.startswith("synthetic:"):
        _no_data_dir(data_dir, repr(source))
        given = [arg(k, v) for k, v in (("fmt", fmt), *((k, reader_options.get(k)) for k in (
            "user_col", "item_col", "time_col"))) if v is not None]
        if given:  # generated, not read: the option would be ignored without a word
            raise ResdomError(f"{source}: generated data, read from no file, so {', '.join(given)} cannot apply")
        cfg = parse_synthetic_source(source)
        seqs = generate(cfg)
        raw = RawInteractions(np.repeat(seqs.users, seqs.lengths), seqs.items, seqs.times, "synthetic", [],
                              time_ordered=True)
        if reader_options.get("no_time"):
            drop_times(raw)
        record = {"kind": "synthetic", "name": source, "config": cfg.model_dump(), "sha256": cfg.sha256()}
        # planted ids must stay the generator's ids: no k-core, no remapping
        return raw, record, {"k_core": None, "remap": False}
    if source in DATASETS:
        spec = DATASETS[source]
        if fmt is not None and fmt != spec.fmt:
            raise ResdomError(f"data set {source!r} is in format {spec.fmt!r}; {arg('fmt', fmt)} does not apply")
        resolved = resolve_dataset_files(spec, data_dir)
        raw = _read([r.path for r in resolved], spec.fmt, **{**spec.reader, **reader_options})
        if spec.seconds_per_time_unit != 1 and raw.times is not None:
            raw.times = raw.times * spec.seconds_per_time_unit
            raw.notes.append(f"times multiplied by {spec.seconds_per_time_unit} (the file's unit) to seconds")
        files = [
            {"path": str(r.path), "sha256": r.sha256, "origin": r.origin,
             "upstream": f.upstream()}
            for r, f in zip(resolved, spec.files)
        ]
        record = {"kind": "registry", "name": source, "format": spec.fmt, "files": files}
        return raw, record, dict(spec.preset)
    try:
        paths = split_source_paths(source)
    except ResdomError as e:
        if "," not in source and not Path(source).exists():
            raise _unknown_source(source) from None
        raise e
    _no_data_dir(data_dir, repr(source))
    raw = _read(paths, fmt, **reader_options)
    if not reader_options.get("normalize_ids"):
        note_near_duplicate_ids(raw)
    files = [{"path": str(p.resolve()), "sha256": sha256_file(p)} for p in raw.files]
    return raw, {"kind": "path", "name": source, "format": raw.fmt, "files": files}, {}


def _no_data_dir(data_dir: str | Path | None, what: str) -> None:
    """``data_dir`` finds a registered data set's files: given for ``what`` (a file, generated data, a DataFrame),
    which is no such set, it would be ignored without a word; a ResdomError instead."""
    if data_dir is not None:
        raise ResdomError(f"{arg('data_dir', str(data_dir))}: the folder of registered data sets; {what} is not "
                          "one, so it cannot apply")


def _unknown_source(source: str) -> ResdomError:
    hint = dataset_hint(source, [*DATASETS, "synthetic"])
    return ResdomError(f"unknown source {source!r}{hint}: not a registered data set ({', '.join(DATASETS)}, "
                       "synthetic) and no such file")


def check_source(source: str) -> None:
    """Nothing where ``source`` names a registered data set, a synthetic one (its knobs checked) or existing files;
    the ResdomError ``read_source`` would raise otherwise, before anything is read or downloaded (a grid checks
    every data set before its first cell)."""
    if source == "synthetic" or source.startswith("synthetic:"):
        parse_synthetic_source(source)
    elif source not in DATASETS and not all(Path(p).exists() for p in source.split(",")):
        raise _unknown_source(source)


def source_paths(source: str) -> list[str]:
    """The files or folders a data ``source`` reads from (none for a registered data set or a synthetic one, which
    are found in the data folder or made): a path, or the paths of ``items.txt,times.txt``."""
    if source == "synthetic" or source.startswith("synthetic:") or source in DATASETS:
        return []
    return [source] if Path(source).exists() else source.split(",")


def _read(paths: list[Path], fmt: str | None, **reader_options: Any) -> RawInteractions:
    """``readers.read_interactions``, or ``native.read_native`` for the native formats of the paper's data sets
    (``no_time`` applies to them too; ``normalize_ids`` does not: their ids are the files' own)."""
    if fmt in NATIVE_FORMATS:
        no_time = bool(reader_options.pop("no_time", False))
        if reader_options.pop("normalize_ids", False):
            raise ResdomError(f"{arg('normalize_ids', True)} does not apply to format {fmt!r} (a paper data set's "
                              "native file)")
        raw = read_native(str(fmt), paths, **reader_options)
        return drop_times(raw) if no_time else raw
    return read_interactions(paths, fmt, **reader_options)


def evaluation_setting(source: str, filter_seen: bool | None = None) -> dict[str, Any]:
    """The split manifest's ``evaluation`` entry: {} where seen items are filtered (the default), else
    ``{"filter_seen": False, "why": ...}``. ``filter_seen`` (the user's) wins over the registry's setting."""
    if filter_seen is None:
        spec = DATASETS.get(str(source))
        if spec is None or spec.filter_seen:
            return {}
        return {"filter_seen": False, "why": f"data set {spec.name!r}: seen items kept at evaluation, as the paper's "
                "code (time-to-split's dataset.filter_seen) for repeat consumption"}
    return {} if filter_seen else {"filter_seen": False, "why": "filter_seen=False given"}


def load_prepared(
    source: Source, data_dir: str | Path | None = None, fmt: str | None = None, **options: Any
) -> tuple[Prepared, dict[str, Any]]:
    """(full per-user sequences after preprocessing, manifest fragment: source, preprocessing, stats, changes)."""
    _check_options(options, PREPROCESS_OPTIONS + READER_OPTIONS)
    reader_opts = {k: v for k, v in options.items() if k in READER_OPTIONS and v is not None}
    if "time_col" in options and options["time_col"] is None:  # time_col=None said explicitly: no timestamps
        reader_opts["no_time"] = True
    for flag in ("no_time", "normalize_ids"):
        if not reader_opts.get(flag, True):
            reader_opts.pop(flag)
    explicit = {k: v for k, v in options.items() if k in PREPROCESS_OPTIONS}
    _preprocess_config(explicit)  # checked before the data is read
    raw, source_record, preset = read_source(source, data_dir, fmt, **reader_opts)
    defaults = REGISTERED_DEFAULTS if source_record["kind"] == "registry" else {}
    cfg = _preprocess_config({**defaults, **preset, **explicit})
    read_counts = _raw_counts(raw)
    prepared = preprocess(raw, cfg)

    manifest = {
        "resdom_version": __version__,
        "source": source_record,
        "preprocessing": {"config": cfg.record(), "preset": preset, "steps": prepared.steps},
        "tie_rule": prepared.tie_rule,
        "n_items": prepared.n_items,
        "n_users": len(prepared.sequences),
        "has_timestamps": prepared.sequences.times is not None,
        "dataset": dataset_stats(prepared.sequences),
        "changes": preprocessing_changes(raw, read_counts, prepared, cfg, bool(reader_opts.get("no_time")),
                                         bool(reader_opts.get("normalize_ids"))),
    }
    return prepared, manifest


def _preprocess_config(values: dict[str, Any]) -> PreprocessConfig:
    """``PreprocessConfig(**values)``; a bad value is an OptionError naming its option (``k_core: ...``)."""
    try:
        return PreprocessConfig(**values)
    except ValidationError as e:
        raise validation_error(e) from None


def check_quantile(value: Any, name: str) -> float:
    """``value`` as a quantile strictly between 0 and 1; a ResdomError naming ``name`` otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):  # named as no number, not as one
        raise ResdomError(f"{name}: expected a number strictly between 0 and 1 (got {type(value).__name__} "
                          f"{short(value, 40)})")
    if not 0.0 < float(value) < 1.0:
        raise ResdomError(f"{name}: must lie strictly between 0 and 1 (got {value!r})")
    return float(value)


def _raw_counts(raw: RawInteractions) -> dict[str, int]:
    """Users, items and rows of the raw table, as read."""
    return {"users": int(len(pd.unique(raw.users))), "items": int(len(pd.unique(raw.items))),
            "interactions": len(raw)}


def load_interactions(
    source: Source, data_dir: str | Path | None = None, fmt: str | None = None, **options: Any
) -> Sequences:
    """Full per-user sequences of ``source`` after preprocessing (users 0..U-1, items 1..n_items)."""
    prepared, _ = load_prepared(source, data_dir, fmt, **options)
    return prepared.sequences


def protocol_name(protocol: Any, where: str, auto: bool = True) -> str:
    """``protocol`` in any case (``GTS``) as one of ``names.PROTOCOLS`` or, where ``auto``, ``"auto"`` (resolved from
    the data by ``resolve_protocol``); a ResdomError naming ``where`` (and the closest name) otherwise."""
    choices = (AUTO_PROTOCOL, *PROTOCOLS) if auto else PROTOCOLS
    text = str(protocol).strip().lower() if isinstance(protocol, str) else None
    if text in choices:
        return text
    hint = closest_hint(protocol, choices)
    raise ResdomError(f"{where}: unknown protocol {protocol!r} ({hint}choose {', '.join(choices[:-1])} or "
                      f"{choices[-1]})")


def resolve_protocol(protocol: str, has_times: bool) -> str:
    """The protocol a split uses: ``protocol`` itself, or for ``"auto"`` gts where the data has timestamps (train on
    the past, test on the future, as the paper) and loo where it has none (docs/choices.md, "One protocol
    default")."""
    if protocol != AUTO_PROTOCOL:
        return protocol
    return "gts" if has_times else "loo"


# formats that never carry timestamps (their row order is the time order): "auto" resolves to loo for them
_UNTIMED_FORMATS = ("user-lines",)


def known_protocol(source: Source, protocol: str = AUTO_PROTOCOL, **reader_options: Any) -> str | None:
    """The protocol ``prepare_split(source, protocol, **reader_options)`` will use, where it is known before the data
    is read (a resolved configuration depends on it): ``protocol`` itself where it is not ``"auto"``; for ``"auto"``
    loo without timestamps (``no_time=True``, ``time_col=None``, a registered data set whose files have none), gts
    for a table or DataFrame (read only with its timestamp column, unless ``no_time``), synthetic data and the
    registered data sets with timestamps; None for a file whose format is detected when it is read."""
    protocol = protocol_name(protocol, "protocol")
    if protocol != AUTO_PROTOCOL:
        return protocol
    if reader_options.get("no_time") or ("time_col" in reader_options and reader_options["time_col"] is None):
        return "loo"
    if isinstance(source, pd.DataFrame):
        return "gts"
    name = source_name(source)
    if name == "synthetic" or name.startswith("synthetic:"):
        return "gts"
    if name in DATASETS:
        return "loo" if DATASETS[name].fmt in _UNTIMED_FORMATS else "gts"
    return None


def prepare_split(
    source: Source,
    protocol: str = AUTO_PROTOCOL,
    quantile: float = 0.9,
    data_dir: str | Path | None = None,
    fmt: str | None = None,
    **options: Any,
) -> SplitData:
    """Read, preprocess and split ``source``.

    ``resdom.prepare_split(df, user_col="customer", item_col="product", time_col="ts")`` reads a DataFrame.

    Parameters
    ----------
    source
        A registered name, ``synthetic[:knobs]``, a path or a pandas DataFrame (this module's docstring).
    protocol
        ``auto`` (the default: gts where the data has timestamps, loo where it has none, ``resolve_protocol``; the
        split's ``manifest["protocol"]`` names the one used, and its ``changes`` record that auto chose it, a
        ``data:`` line says so), ``loo``, ``gts`` (spec §1) or ``none`` (nothing held out: fit on every
        interaction to recommend; ``holdout_users=N`` holds out the last item of N users as a validation slice for
        early stopping, ``splits.split_none``), in any case (``"GTS"``).
    quantile
        GTS: the global timestamp quantile that ends the training period.
    data_dir
        A folder laid out like ``shared/data/raw`` where registered data sets' files are found.
    fmt
        Force the file format (detected where unambiguous otherwise).
    **options
        Preprocessing, reader, GTS and evaluation options (this module's docstring: ``k_core``,
        ``remove_repeats``, ``user_col``, ``item_col``, ``time_col``, ``no_time``, ``valid_quantile``,
        ``holdout_users``, ``filter_seen``, ...).

    Returns
    -------
    SplitData
        ``train``, ``valid``, ``test`` and the manifest: protocol, thresholds (timestamps and ISO dates, GTS),
        counts per part, the preprocessing applied, the source files' sha256, the tie rule, the dropped users, and
        ``changes`` (what was removed, and why); the external user and item ids (``user_labels``,
        ``item_labels``).
    """
    if isinstance(source, SplitData):
        raise ResdomError("source: a SplitData is split already (give it to resdom.fit as it is, or its source "
                          "to prepare_split)")
    requested = protocol_name(protocol, "protocol")
    _check_options(options, PREPROCESS_OPTIONS + READER_OPTIONS + SPLIT_OPTIONS)
    data_dir = path_argument(data_dir, "data_dir") if data_dir is not None else None
    valid_quantile = options.pop("valid_quantile", None)
    if requested not in ("gts", AUTO_PROTOCOL) and valid_quantile is not None:  # before the data is read
        raise ResdomError(f"valid_quantile: sets the validation cut time of the gts protocol; a {requested} split has "
                          "none")
    holdout_users = options.pop("holdout_users", None)
    if holdout_users is not None:
        if requested != "none":
            raise ResdomError(f"holdout_users: the monitoring slice of protocol 'none'; a {requested} split holds out "
                              "its own validation users")
        if isinstance(holdout_users, bool) or not isinstance(holdout_users, numbers.Integral) or holdout_users < 0:
            raise ResdomError(f"holdout_users: expected an integer >= 0 (got {holdout_users!r})")
    quantile = check_quantile(quantile, "quantile")
    if valid_quantile is not None:
        valid_quantile = check_quantile(valid_quantile, "valid_quantile")
    evaluation = evaluation_setting(source_name(source), optional_bool(options.pop("filter_seen", None), "filter_seen"))
    prepared, manifest = load_prepared(source, data_dir, fmt, **options)
    protocol = resolve_protocol(requested, prepared.sequences.times is not None)
    if requested == AUTO_PROTOCOL:
        manifest["changes"]["protocol"] = {"rule": AUTO_PROTOCOL, "protocol": protocol,
                                           "timestamps": prepared.sequences.times is not None}
        if protocol != "gts" and valid_quantile is not None:
            raise ResdomError(f"{arg('valid_quantile')}: sets the validation cut time of the gts protocol; the data "
                              "has no timestamps, so the default protocol, auto, splits it loo, which has none")
    seqs = prepared.sequences
    try:
        if protocol == "loo":
            parts: SplitParts = split_loo(seqs)
        elif protocol == "none":
            parts = split_none(seqs, holdout_users or 0)
        else:
            parts = split_gts(seqs, quantile, valid_quantile)
    except ResdomError as e:  # the split sees sequences only: its refusal is named by the source here
        raise ResdomError(f"{source_name(source)}: {e}") from None
    counts = part_counts(parts)
    empty = [part for part, n in (("training", counts["train"]["interactions"]), ("test", counts["test"]["users"]))
             if n == 0 and not (protocol == "none" and part == "test")]
    if empty:
        dropped = split_reasons(parts.info["dropped_users"])
        if protocol == "loo":
            why = " (leave-one-out needs 3 interactions or more per user)"
        else:
            t = parts.info["thresholds"]
            after = int((seqs.times > t["T_test"]).sum())
            why = (f" ({after:,} of {len(seqs.items):,} interactions lie after T_test = {t['T_test_iso']}, the "
                   f"{quantile:g}-quantile of the timestamps; a test user needs its last interaction after it and one "
                   "more before that, a training user 2 at or before it"
                   + (f"; lower {arg('quantile')}" if after == 0 and (seqs.times < t["T_test"]).any() else "")
                   + (f"; the default protocol, auto, chose gts as the data has timestamps: {arg('protocol', 'loo')} "
                      "splits by user instead" if requested == AUTO_PROTOCOL else "") + ")")
        raise ResdomError(f"{source_name(source)}: the {protocol} split leaves no {' and no '.join(empty)} data: "
                          f"{len(seqs)} user(s) after preprocessing, dropped by the split: {dropped or 'none'}{why}")
    split = split_data(parts, prepared, manifest, evaluation)
    log_changes(split.manifest)
    return split


def log_changes(manifest: dict[str, Any]) -> None:
    """What preparing the data changed (the ``data:`` lines the CLI prints, ``changes.change_lines``) through the
    ``logging`` logger ``resdom.data``: each line at INFO, a warning (fewer than 100 validation or test users) at
    WARNING, which Python shows without any logging set up (``logging.basicConfig(level="INFO")`` shows them all;
    ``split.manifest["changes"]`` holds them as data)."""
    for line in change_lines(manifest):
        if line.startswith("warning: "):
            LOG.warning("data: %s", line)
        else:
            LOG.info("data: %s", line)


def split_data(parts: SplitParts, prepared: Prepared, manifest: dict[str, Any],
               evaluation: dict[str, Any] | None = None) -> SplitData:
    """The SplitData of ``parts`` (a split of ``prepared.sequences``): ``manifest`` gets the split's info, its
    counts, the ``evaluation`` setting (where not empty) and what the split left out (``changes.split``); the split
    keeps the external ids and, in ``rest``, the full sequences of users the parts do not wholly hold."""
    seqs = prepared.sequences
    manifest.update(parts.info)
    manifest["counts"] = part_counts(parts)
    if evaluation:
        manifest["evaluation"] = evaluation
    used = np.zeros(len(seqs), dtype=np.int64)  # per user: the longest prefix some part holds
    for part_users, part_lengths in ((parts.train.users, parts.train.lengths),
                                     (parts.valid.inputs.users, parts.valid.inputs.lengths + 1),
                                     (parts.test.inputs.users, parts.test.inputs.lengths + 1)):
        np.maximum.at(used, part_users, part_lengths)
    short = np.flatnonzero(used < seqs.lengths)
    rest = seqs.take(short) if len(short) else None
    used_items = heads(seqs, used).items
    manifest.setdefault("changes", {})["split"] = split_changes(parts.info, seqs, used, used_items, prepared.n_items)
    return SplitData(parts.train, parts.valid, parts.test, prepared.n_items, manifest,
                     user_labels=np.asarray(prepared.user_labels), item_labels=np.asarray(prepared.item_labels,
                                                                                          dtype=object), rest=rest)
