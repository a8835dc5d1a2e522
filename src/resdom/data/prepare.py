"""From a source string to a prepared, split data set (spec §1): read -> preprocess -> split -> manifest.

``source`` is one of:

- a registered name (``resdom data list``): ``beauty``, ``sports``, ``toys``, ``yelp``, ``lastfm``,
  ``beauty-ts``, ``sports-ts``, ``toys-ts``, ``yelp-ts``, ``video-ts``, ``ml-100k``, ``ml-1m-part``, and the
  paper's others in their native files: ``ml-1m``, ``diginetica``, ``steam``, ``beeradvocate``, ``zvuk`` (and
  time-to-split's raw CSVs: ``diginetica-tts`` ...); files are found by ``download.py`` (``data_dir``,
  ``$RESDOM_DATA_DIR``, user cache, download; files that cannot be downloaded are named with where to put them);
- ``synthetic`` or ``synthetic:knob=value,...`` (``synthetic.py``);
- a path: one file, ``items.txt,times.txt`` (paired files), or a folder holding one ``*item*`` and one
  ``*time*`` file; the format is detected where unambiguous, ``fmt`` forces it.

Options (``**options``): preprocessing ``k_core`` (None/0 off), ``remove_repeats``, ``sort_by_time``,
``remap`` (and ``sample_users``, ``sample_seed``); reader column names ``user_col``,
``item_col``, ``time_col``; GTS ``valid_quantile``; ``filter_seen`` (evaluation). A registered data set may carry
its own preset (``ml-100k``: no k-core, as distributed; the paper's data sets: time-to-split's preprocessing)
and evaluation setting (``diginetica``, ``zvuk``: seen items kept); explicit options win.

The evaluation setting goes into the split's manifest as ``"evaluation": {"filter_seen": false, ...}`` where it is
False (absent: filter, the default; ``SplitData.filter_seen``), so a split made before the setting existed keeps
its manifest and data fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from resdom.data.download import resolve_dataset_files, sha256_file
from resdom.data.native import NATIVE_FORMATS, read_native
from resdom.data.preprocess import Prepared, PreprocessConfig, preprocess
from resdom.data.readers import RawInteractions, read_interactions, split_source_paths
from resdom.data.registry import DATASETS
from resdom.data.sequences import Sequences, SplitData
from resdom.data.splits import SplitParts, part_counts, split_gts, split_loo
from resdom.data.stats import dataset_stats
from resdom.data.synthetic import generate, parse_synthetic_source
from resdom.errors import ResdomError

PREPROCESS_OPTIONS = tuple(PreprocessConfig.model_fields)
READER_OPTIONS = ("user_col", "item_col", "time_col")
SPLIT_OPTIONS = ("valid_quantile", "filter_seen")
PROTOCOLS = ("loo", "gts")


def _check_options(options: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ResdomError(f"unknown data option {unknown[0]!r}; options: {', '.join(allowed)}")


def read_source(
    source: str, data_dir: str | Path | None = None, fmt: str | None = None, **reader_options: Any
) -> tuple[RawInteractions, dict[str, Any], dict[str, Any]]:
    """(raw interactions, source record for the manifest, preprocessing preset) of ``source``."""
    _check_options(reader_options, READER_OPTIONS)
    source = str(source)
    if source == "synthetic" or source.startswith("synthetic:"):
        cfg = parse_synthetic_source(source)
        seqs = generate(cfg)
        raw = RawInteractions(np.repeat(seqs.users, seqs.lengths), seqs.items, seqs.times, "synthetic", [],
                              time_ordered=True)
        record = {"kind": "synthetic", "name": source, "config": cfg.model_dump(), "sha256": cfg.sha256()}
        # planted ids must stay the generator's ids: no k-core, no remapping
        return raw, record, {"k_core": None, "remap": False}
    if source in DATASETS:
        spec = DATASETS[source]
        if fmt is not None and fmt != spec.fmt:
            raise ResdomError(f"data set {source!r} is in format {spec.fmt!r}; --format {fmt} does not apply")
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
            known = ", ".join(DATASETS)
            raise ResdomError(f"unknown source {source!r}: not a registered data set ({known}, synthetic) "
                              "and no such file") from None
        raise e
    raw = _read(paths, fmt, **reader_options)
    files = [{"path": str(p.resolve()), "sha256": sha256_file(p)} for p in raw.files]
    return raw, {"kind": "path", "name": source, "format": raw.fmt, "files": files}, {}


def _read(paths: list[Path], fmt: str | None, **reader_options: Any) -> RawInteractions:
    """``readers.read_interactions``, or ``native.read_native`` for the native formats of the paper's data sets."""
    if fmt in NATIVE_FORMATS:
        return read_native(str(fmt), paths, **reader_options)
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
    source: str, data_dir: str | Path | None = None, fmt: str | None = None, **options: Any
) -> tuple[Prepared, dict[str, Any]]:
    """(full per-user sequences after preprocessing, manifest fragment: source, preprocessing, stats)."""
    _check_options(options, PREPROCESS_OPTIONS + READER_OPTIONS)
    reader_opts = {k: v for k, v in options.items() if k in READER_OPTIONS and v is not None}
    raw, source_record, preset = read_source(source, data_dir, fmt, **reader_opts)
    explicit = {k: v for k, v in options.items() if k in PREPROCESS_OPTIONS}
    cfg = PreprocessConfig(**{**preset, **explicit})
    prepared = preprocess(raw, cfg)
    from resdom import __version__

    manifest = {
        "resdom_version": __version__,
        "source": source_record,
        "preprocessing": {"config": cfg.record(), "preset": preset, "steps": prepared.steps},
        "tie_rule": prepared.tie_rule,
        "n_items": prepared.n_items,
        "n_users": len(prepared.sequences),
        "has_timestamps": prepared.sequences.times is not None,
        "dataset": dataset_stats(prepared.sequences),
    }
    return prepared, manifest


def load_interactions(
    source: str, data_dir: str | Path | None = None, fmt: str | None = None, **options: Any
) -> Sequences:
    """Full per-user sequences of ``source`` after preprocessing (users 0..U-1, items 1..n_items)."""
    prepared, _ = load_prepared(source, data_dir, fmt, **options)
    return prepared.sequences


def prepare_split(
    source: str,
    protocol: str = "loo",
    quantile: float = 0.9,
    data_dir: str | Path | None = None,
    fmt: str | None = None,
    **options: Any,
) -> SplitData:
    """Read, preprocess and split ``source`` (module docstring) by ``protocol`` ``loo`` or ``gts`` (spec §1).

    The manifest holds: protocol, thresholds (timestamps and ISO dates, GTS), counts per part, the
    preprocessing applied, the source files' sha256, the tie rule and the dropped users.
    """
    if protocol not in PROTOCOLS:
        raise ResdomError(f"unknown protocol {protocol!r}; choose loo or gts")
    _check_options(options, PREPROCESS_OPTIONS + READER_OPTIONS + SPLIT_OPTIONS)
    valid_quantile = options.pop("valid_quantile", None)
    evaluation = evaluation_setting(source, options.pop("filter_seen", None))
    prepared, manifest = load_prepared(source, data_dir, fmt, **options)
    seqs = prepared.sequences
    if protocol == "loo":
        if valid_quantile is not None:
            raise ResdomError("valid_quantile applies to --protocol gts only")
        parts: SplitParts = split_loo(seqs)
    else:
        parts = split_gts(seqs, quantile, valid_quantile)
    counts = part_counts(parts)
    if counts["train"]["interactions"] == 0 or counts["test"]["users"] == 0:
        raise ResdomError(f"{source}: the {protocol} split leaves an empty training or test part ({counts})")
    manifest.update(parts.info)
    manifest["counts"] = counts
    if evaluation:
        manifest["evaluation"] = evaluation
    return SplitData(parts.train, parts.valid, parts.test, prepared.n_items, manifest)
