"""Import a RecBole 1.x SASRec checkpoint (the ``.pth`` its trainer saves) as a resdom run.

RecBole's SASRec (``recbole/model/sequential_recommender/sasrec.py``, 1.2.1) is resdom's post-LN SASRec with:

- input ``Dropout(LayerNorm(E[item] + P[pos]))``, eps ``layer_norm_eps`` -> ``embedding="ln_dropout"``;
- right padding with positions counted from the first item (0, 1, ...) -> ``positions="from_start"``;
- attention mask causal AND key not padding, added as -10000 (as resdom); FFN ``inner_size`` with
  ``hidden_act`` (gelu = exact erf GELU, or relu); no final LayerNorm; scores ``h @ item_embedding.T``.

Weights map one to one (``query/key/value/dense`` -> ``query/key/value/out``; the attention sub-layer's and
the FFN's LayerNorms -> ``attn_ln`` / ``ffn_ln``; ``LayerNorm`` -> ``emb_ln``).

The data is RecBole's, rebuilt from its ``.inter`` file and the checkpoint's config (``recbole_interactions``):
its filters (``rm_dup_inter``, ``val_interval``, ``user_inter_num_interval`` / ``item_inter_num_interval``),
its item numbering (``pandas.factorize`` in row order after filtering; each resdom item id takes the row of
its raw id) and its sequence order (by user, then by the float32 of the, usually min-max normalised, timestamp
with stable sorts, so near-equal times keep file order). resdom's own preprocessing (k-core, time sort) is
not applied. The LOO test split of those sequences is RecBole's ``LS: valid_and_test`` test split.

The checkpoint is read with ``safe_pickle`` (RecBole's ``Config`` and enums become inert stand-ins); RecBole
need not be installed and no code from the file runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from resdom.adapters.common import (
    ImportData,
    TrackedState,
    check_heads,
    embedding_table,
    import_inputs,
    imported_model_config,
    load_weights,
    setting_number,
    source_rows,
    take_rows,
    write_run,
)
from resdom.adapters.safe_pickle import Inert, load_torch_file
from resdom.data.download import resolve_dataset_files, sha256_file
from resdom.data.preprocess import PreprocessConfig, preprocess
from resdom.data.readers import RawInteractions
from resdom.data.registry import DATASETS
from resdom.data.stats import dataset_stats
from resdom.errors import ResdomError
from resdom.models.base import SequentialRecommender
from resdom.models.config import ModelConfig
from resdom.records import counted
from resdom.runs import model_to_load
from resdom.version import __version__

RECBOLE_STAND_INS = ("recbole.", "yaml.loader.", "yaml.")  # inert stand-ins for any class from these packages
_ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}


@dataclass
class RecBoleCheckpoint:
    """What a RecBole checkpoint holds that matters here.

    config: RecBole's ``final_config_dict`` (plain data; enum members are ``Inert`` objects).
    state_dict: the model's tensors by RecBole name. epoch: the saved epoch, if recorded.
    """

    path: Path
    config: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    epoch: int | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return self.config.get(key, default)

    def require(self, key: str) -> Any:
        if key not in self.config:
            raise ResdomError(f"{self.path}: the checkpoint's config has no {key!r}")
        return self.config[key]


def read_recbole_checkpoint(path: str | Path) -> RecBoleCheckpoint:
    """Read ``path`` safely; checks it is a RecBole SASRec checkpoint with a config and a state dict."""
    path = Path(path)
    obj = load_torch_file(path, stand_in_prefixes=RECBOLE_STAND_INS)
    if not isinstance(obj, dict) or "state_dict" not in obj or "config" not in obj:
        keys = sorted(obj)[:6] if isinstance(obj, dict) else type(obj).__name__
        raise ResdomError(f"{path}: not a RecBole checkpoint (expected keys 'config' and 'state_dict', got {keys})")
    config = _final_config(obj["config"], path)
    state = obj["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ResdomError(f"{path}: 'state_dict' is not a mapping of tensors")
    model = config.get("model")
    if model != "SASRec":
        raise ResdomError(f"{path}: RecBole model {model!r} is not supported (only SASRec)")
    epoch = obj.get("epoch")
    return RecBoleCheckpoint(path, config, dict(state), epoch if isinstance(epoch, int) else None)


def _final_config(config: Any, path: Path) -> dict[str, Any]:
    if isinstance(config, dict):  # a checkpoint re-saved with a plain dict
        return config
    state = config.state if isinstance(config, Inert) else None
    if isinstance(state, dict) and isinstance(state.get("final_config_dict"), dict):
        return state["final_config_dict"]
    raise ResdomError(f"{path}: the checkpoint's 'config' holds no final_config_dict (RecBole 1.x Config)")


# ---------------------------------------------------------------------------------------------------------------
# RecBole's data pipeline (recbole/data/dataset/dataset.py and sequential_dataset.py, 1.2.1)

ORDER_RULE = ("RecBole's order: grouped by user; within a user by the float32 value of the (min-max normalised, "
              "where RecBole normalises it) timestamp, with a stable sort, so times that are equal in float32 keep "
              "the order of the rows before it (file order; time order after rm_dup_inter)")


@dataclass
class RecBoleInteractions:
    """The interactions a RecBole 1.x sequential model was trained and evaluated on, rebuilt without RecBole.

    users, items: (n,) str tokens, in RecBole's sequence order (grouped by user, each user's rows in RecBole's
    time order); times: (n,) float64 raw timestamps, aligned; item_tokens: RecBole's item table (entry k = token
    of item id k, 0 = ``[PAD]``); steps: what was applied (manifest records); time_key: the sort key RecBole used.
    """

    path: Path
    users: np.ndarray
    items: np.ndarray
    times: np.ndarray
    item_tokens: list[str]
    steps: list[dict[str, Any]]
    settings: dict[str, Any]
    normalised: bool
    users_reordered: int

    @property
    def n_users(self) -> int:
        return int(len(pd.unique(self.users)))


def _fields(config: dict[str, Any]) -> tuple[str, str, str]:
    return (config.get("USER_ID_FIELD") or "user_id", config.get("ITEM_ID_FIELD") or "item_id",
            config.get("TIME_FIELD") or "timestamp")


def _recbole_frame(inter_path: Path, config: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, str],
                                                                       list[dict[str, Any]]]:
    """RecBole's ``_data_filtering`` of the ``.inter`` rows: (kept rows in RecBole's row order, field types, steps).

    ``_filter_nan_user_or_item``, ``_remove_duplication`` (``rm_dup_inter``: sort by time, then
    ``drop_duplicates``), ``_filter_by_field_value`` (``val_interval``), ``_filter_by_inter_num``
    (``user_inter_num_interval`` / ``item_inter_num_interval``, repeated to a fixed point).
    """
    _refuse_unsupported(config, inter_path)
    sep = config.get("field_separator") or "\t"
    uid, iid, time = _fields(config)
    val = config.get("val_interval") or {}
    if not isinstance(val, dict):
        raise ResdomError(f"{inter_path}: RecBole setting val_interval={val!r} is not a mapping of field -> interval")
    df, types = _read_inter(inter_path, sep, [uid, iid], [time, *val], config.get("encoding"))
    steps: list[dict[str, Any]] = [{"step": "read", "interactions": len(df), "file": str(inter_path)}]

    def record(step: str, before: int, **extra: Any) -> None:
        steps.append({"step": step, "removed_interactions": before - len(df), **extra})

    n = len(df)
    df = df[df[uid].notna() & df[iid].notna()]
    record("filter_nan_user_or_item", n)
    keep = config.get("rm_dup_inter")
    if keep is not None:
        if keep not in ("first", "last"):
            raise ResdomError(f"{inter_path}: rm_dup_inter {keep!r} is not 'first' or 'last'")
        n = len(df)
        if time in df:
            df = df.sort_values(by=[time], ascending=True, kind="stable")
        df = df.drop_duplicates(subset=[uid, iid], keep=keep)
        record("rm_dup_inter", n, keep=keep, sorted_by=time if time in df else None)
    for field, interval in val.items():
        if field not in df:
            raise ResdomError(f"{inter_path}: RecBole setting val_interval names {field!r}, which is not a column "
                              "of the .inter file")
        n = len(df)
        if types[field] == "float":
            df = df[_within_array(df[field].to_numpy(dtype=np.float64), _parse_intervals(interval) or [])]
        elif types[field] == "token":
            df = df[df[field].isin(interval)]
        else:
            raise ResdomError(f"{inter_path}: val_interval on the {types[field]} field {field!r} is not supported")
        record("val_interval", n, field=field, interval=interval)
    n = len(df)
    user_iv, item_iv = config.get("user_inter_num_interval"), config.get("item_inter_num_interval")
    df = _filter_by_inter_num(df, uid, iid, user_iv, item_iv)
    record("filter_by_inter_num", n, user_inter_num_interval=user_iv, item_inter_num_interval=item_iv)
    if len(df) == 0:
        raise ResdomError(f"{inter_path}: no interactions left after RecBole's filtering settings")
    if keep is not None and time in df:
        _check_no_tied_first_times(df, iid, time, inter_path)
    return df, types, steps


def recbole_item_tokens(inter_path: str | Path, config: dict[str, Any]) -> list[str]:
    """RecBole's item table for ``inter_path`` under ``config``: entry k is the token of item id k (0 = [PAD]).

    Reproduces RecBole 1.x ``Dataset``: load the ``.inter`` columns as strings, drop rows with a missing user or
    item, ``rm_dup_inter`` (after a sort by time; refused where tied timestamps make RecBole's order depend on its
    unstable sort), ``val_interval``, ``user_inter_num_interval`` / ``item_inter_num_interval`` (iterated), then
    ``pandas.factorize`` of the item column in row order. Settings that change the numbering in other ways
    (item features, aliases, benchmark files) are refused by name.
    """
    df, _, _ = _recbole_frame(Path(inter_path), config)
    _, iid, _ = _fields(config)
    _, uniques = pd.factorize(df[iid].to_numpy())
    return ["[PAD]"] + [str(t) for t in uniques]


def recbole_interactions(inter_path: str | Path, config: dict[str, Any]) -> RecBoleInteractions:
    """The per-user sequences RecBole 1.x builds for a sequential model from ``inter_path`` under ``config``.

    After the filtering of ``recbole_item_tokens``, RecBole normalises float fields (``normalize_all``, or
    ``normalize_field`` naming the time field: ``(t - min) / (max - min)`` in float64), stores them as float32
    tensors, and ``SequentialDataset.data_augmentation`` sorts by ``[user, time]`` with ``Interaction.sort``:
    one ``np.argsort(kind="stable")`` per key, the time first. So each user's rows are ordered by the float32
    key, and rows whose keys are equal in float32 (on ml-100k, times a few seconds apart) keep their row order.
    """
    inter_path = Path(inter_path)
    df, types, steps = _recbole_frame(inter_path, config)
    uid, iid, time = _fields(config)
    if time not in df:
        raise ResdomError(f"{inter_path}: no time column {time!r}: RecBole's sequential models sort by it "
                          "(TIME_FIELD)")
    if types[time] != "float":
        raise ResdomError(f"{inter_path}: the time field {time!r} has type {types[time]!r}; the importer needs "
                          "'float' (RecBole would sort by its remapped token ids)")
    times = df[time].to_numpy(dtype=np.float64)
    if not np.isfinite(times).all():
        k = int(np.flatnonzero(~np.isfinite(times))[0])
        raise ResdomError(f"{inter_path}: missing or non-finite timestamp {times[k]!r} (RecBole would fill it with "
                          "the column's mean; not supported by the importer)")
    discretization = config.get("discretization") or {}
    if isinstance(discretization, dict) and time in discretization:
        raise ResdomError(f"{inter_path}: RecBole setting discretization of {time!r} is not supported")
    if config.get("rm_dup_inter") is not None:
        _check_no_tied_user_times(df, uid, time, inter_path)
    fields = config.get("normalize_field")
    normalised = bool(fields and time in fields) or (not fields and config.get("normalize_all") is True)
    if normalised:
        mx, mn = times.max(), times.min()
        key = np.ones(len(times)) if mx == mn else (times - mn) / (mx - mn)
    else:
        key = times
    key32 = key.astype(np.float32)
    users, items = df[uid].to_numpy(dtype=object), df[iid].to_numpy(dtype=object)
    ucode, _ = pd.factorize(users)
    pos = np.arange(len(df))
    order = np.lexsort((pos, key32, ucode))  # = RecBole's stable sort by time, then by user
    exact = np.lexsort((pos, times, ucode))  # a stable sort by the exact times, for the record
    moved = order != exact
    users_reordered = int(len(np.unique(ucode[exact[moved]])))
    _, uniques = pd.factorize(items)
    tokens = ["[PAD]"] + [str(t) for t in uniques]
    steps.append({"step": "order", "rule": ORDER_RULE, "time_field": time, "normalised": normalised,
                  "users_reordered_vs_exact_times": users_reordered})
    settings = {k: config.get(k) for k in RECBOLE_DATA_SETTINGS}
    return RecBoleInteractions(inter_path, users[order], items[order], times[order], tokens, steps, settings,
                               normalised, users_reordered)


RECBOLE_DATA_SETTINGS = ("field_separator", "USER_ID_FIELD", "ITEM_ID_FIELD", "TIME_FIELD", "rm_dup_inter",
                         "val_interval", "user_inter_num_interval", "item_inter_num_interval", "normalize_all",
                         "normalize_field", "load_col", "MAX_ITEM_LIST_LENGTH", "eval_args")


def _check_no_tied_first_times(df: pd.DataFrame, iid: str, time: str, path: Path) -> None:
    """With ``rm_dup_inter`` RecBole numbers items after an *unstable* sort by time: items first seen at the same
    timestamp get an order that depends on numpy's sort implementation, which cannot be rebuilt. Refuse then."""
    first = df.groupby(iid, sort=False)[time].min()
    tied = int(first.duplicated(keep=False).sum())
    if tied:
        raise ResdomError(
            f"{path}: RecBole's rm_dup_inter sorts interactions by {time!r} with an unstable sort, and {tied} items "
            "are first seen at a tied timestamp: their RecBole ids depend on numpy's sort and cannot be rebuilt "
            "(retrain without rm_dup_inter, or deduplicate the .inter file beforehand)"
        )


def _check_no_tied_user_times(df: pd.DataFrame, uid: str, time: str, path: Path) -> None:
    """The same unstable sort orders a user's interactions at one timestamp: refuse where that happens."""
    tied = df.duplicated(subset=[uid, time], keep=False)
    if tied.any():
        n_users = int(df.loc[tied, uid].nunique())
        raise ResdomError(
            f"{path}: RecBole's rm_dup_inter sorts interactions by {time!r} with an unstable sort, and {n_users} "
            "users have several interactions at one timestamp: their order in RecBole depends on numpy's sort and "
            "cannot be rebuilt (retrain without rm_dup_inter, or deduplicate the .inter file beforehand)"
        )


def _refuse_unsupported(config: dict[str, Any], path: Path) -> None:
    checks = {"benchmark_filename": config.get("benchmark_filename"),
              "alias_of_item_id": config.get("alias_of_item_id"), "alias_of_user_id": config.get("alias_of_user_id")}
    for key, value in checks.items():
        if value:
            raise ResdomError(f"{path}: RecBole setting {key}={value!r} is not supported by the importer")
    load_col = config.get("load_col")
    for source in ("user", "item"):
        if isinstance(load_col, dict) and source in load_col:
            raise ResdomError(f"{path}: RecBole setting load_col loads {source} features ({source!r}), which "
                              f"change RecBole's {source} filtering or numbering; not supported by the importer")
        feat = path.with_suffix(f".{source}")
        if load_col is None and feat.is_file():
            raise ResdomError(f"{path}: RecBole's load_col is unset, so it also loaded {feat.name}, whose {source} "
                              "features change its filtering or numbering; not supported by the importer")


def _read_inter(path: Path, sep: str, ids: list[str], optional: list[str], encoding: str | None
                ) -> tuple[pd.DataFrame, dict[str, str]]:
    """Columns of a RecBole atomic file read as RecBole reads them (float as float64, the rest as str): the
    ``ids`` columns (required, type token) and those of ``optional`` that the header has; (frame, field types)."""
    if not path.is_file():
        raise ResdomError(f"{path}: RecBole .inter file not found")
    if encoding is not None and not _is_text_encoding(encoding):
        raise ResdomError(f"{path}: RecBole setting encoding={encoding!r} is not a text encoding Python knows")
    try:
        with open(path, encoding=encoding or "utf-8") as f:
            header = f.readline()[:-1].split(sep)
    except UnicodeDecodeError:
        raise ResdomError(f"{path}: not readable as {encoding or 'utf-8'} text") from None
    if len(header) == 1 and any(c in header[0] for c in ",; "):
        separator = "tabs" if sep == "\t" else repr(sep)
        raise ResdomError(f"{path}:1: the header reads as one column ({header[0]!r}): a RecBole .inter file is "
                          f"separated by {separator}, with typed fields (user_id:token, item_id:token, "
                          "timestamp:float)")
    fields = {}
    for col in header:
        name, _, ftype = col.partition(":")
        fields[name] = (col, ftype)
    for name in ids:
        if name not in fields:
            raise ResdomError(f"{path}:1: no column {name!r} in the header (has {', '.join(fields)})")
        if fields[name][1] != "token":
            raise ResdomError(f"{path}:1: column {name!r} has type {fields[name][1]!r}; the importer needs 'token'")
    names = list(dict.fromkeys(ids + [c for c in optional if c in fields]))
    cols = [fields[c][0] for c in names]
    dtype = {c: (np.float64 if c.endswith(":float") else str) for c in cols}
    try:
        df = pd.read_csv(path, delimiter=sep, usecols=cols, dtype=dtype, encoding=encoding or "utf-8",
                         engine="python")
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ResdomError(f"{path}: cannot read as a RecBole atomic file ({e})") from None
    df = df[cols]
    df.columns = names
    return df, {c: fields[c][1] for c in names}


def _is_text_encoding(name: Any) -> bool:
    """Whether ``name`` names a codec ``open`` can read text with (not e.g. ``rot13`` or ``base64``)."""
    import codecs

    try:
        return isinstance(name, str) and codecs.lookup(name)._is_text_encoding
    except LookupError:
        return False


def _parse_intervals(text: Any) -> list[tuple[str, float, float, str]] | None:
    """RecBole's ``_parse_intervals_str``: ``"[5,inf);(0,2]"`` -> [("[", 5, inf, ")"), ...]; illegal parts skipped."""
    if text is None:
        return None
    out = []
    for part in str(text).split(";"):
        part = part.strip()
        pair = part[1:-1].split(",")
        if not (len(pair) == 2 and part[:1] in ("(", "[") and part[-1:] in (")", "]")):
            continue  # RecBole warns and skips an illegal interval
        out.append((part[0], float(pair[0]), float(pair[1]), part[-1]))
    return out


def _within_array(values: np.ndarray, intervals: list[tuple[str, float, float, str]]) -> np.ndarray:
    """RecBole's ``_within_intervals`` on an array (True everywhere for no intervals)."""
    result = np.ones(len(values), dtype=bool)
    for k, (lb, lo, hi, rb) in enumerate(intervals):
        ok = (values >= lo if lb == "[" else values > lo) & (values <= hi if rb == "]" else values < hi)
        result = ok if k == 0 else result | ok
    return result


def _filter_by_inter_num(df: pd.DataFrame, uid: str, iid: str, user_iv: Any, item_iv: Any) -> pd.DataFrame:
    """RecBole's ``_filter_by_inter_num``: drop users / items whose counts fall outside the intervals, repeated."""
    user_iv, item_iv = _parse_intervals(user_iv), _parse_intervals(item_iv)
    if user_iv is None and item_iv is None:
        return df
    while True:
        ban = np.zeros(len(df), dtype=bool)
        for col, iv in ((uid, user_iv), (iid, item_iv)):
            if iv:  # RecBole counts nothing for an empty (or all-illegal) interval list
                counts = df[col].map(df[col].value_counts()).to_numpy(dtype=np.float64)
                ban |= ~_within_array(counts, iv)
        if not ban.any():
            return df
        df = df[~ban]


# ---------------------------------------------------------------------------------------------------------------
# the data resdom evaluates an imported RecBole model on


def _id_array(tokens: np.ndarray) -> np.ndarray:
    """int64 where every token is a canonical decimal integer (then resdom numbers items by increasing raw id, as
    when it reads the same file itself), else the str tokens."""
    s = pd.Series(tokens, dtype=object).astype(str)
    if len(s) and s.str.fullmatch(r"0|-?[1-9]\d{0,17}").all():
        return s.to_numpy().astype(np.int64)
    return s.to_numpy(dtype=object)


def resolve_inter(source: str, data_dir: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """(RecBole .inter file, manifest source record) of ``--data``: a registered RecBole data set or a path."""
    if source in DATASETS:
        spec = DATASETS[source]
        if spec.fmt != "recbole":
            raise ResdomError(f"data set {source!r} is in format {spec.fmt!r}, not a RecBole .inter file; give the "
                              "file RecBole trained on")
        (resolved,) = resolve_dataset_files(spec, data_dir)
        record = {"kind": "registry", "name": source, "format": "recbole",
                  "files": [{"path": str(resolved.path), "sha256": resolved.sha256, "origin": resolved.origin}]}
        return Path(resolved.path), record
    path = Path(source)
    if not path.is_file():
        raise ResdomError(f"{source}: no such file, and not a registered RecBole data set; give the .inter file "
                          "RecBole trained on")
    record = {"kind": "path", "name": source, "format": "recbole",
              "files": [{"path": str(path.resolve()), "sha256": sha256_file(path)}]}
    return path, record


def recbole_import_data(rb: RecBoleInteractions, source_record: dict[str, Any]) -> ImportData:
    """resdom's LOO split of RecBole's sequences ``rb`` (each user's order kept exactly), with its manifest.

    RecBole's ``LS: valid_and_test`` split of the augmented sequences gives the same test set: the last item of
    every user with >= 3 interactions, its input all earlier items (the model reads the last max_len).
    """
    times = np.floor(rb.times)
    if np.abs(times).max(initial=0) >= 2.0**62:
        raise ResdomError(f"{rb.path}: timestamps out of the range resdom stores (|t| < 2^62 s)")
    raw = RawInteractions(_id_array(rb.users), _id_array(rb.items), times.astype(np.int64), "recbole", [rb.path])
    # the rows already are in RecBole's order: group by user only, keep every row (no k-core, no repeat removal)
    prepared = preprocess(raw, PreprocessConfig(k_core=None, remove_repeats=False, sort_by_time=False))
    seqs = prepared.sequences
    remap = [s for s in prepared.steps if s["step"] == "remap"]
    steps = rb.steps + remap + [s for s in prepared.steps if s["step"] == "result"]
    manifest: dict[str, Any] = {
        "resdom_version": __version__,
        "source": source_record,
        "preprocessing": {"framework": "recbole", "settings": _jsonable(rb.settings), "steps": _jsonable(steps)},
        "tie_rule": ORDER_RULE,
        "n_items": prepared.n_items,
        "n_users": len(seqs),
        "has_timestamps": True,
        "dataset": dataset_stats(seqs),
    }
    return ImportData.leave_one_out(prepared, manifest)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    return repr(obj)


def describe_recbole_data(rb: RecBoleInteractions, data: ImportData, ckpt: RecBoleCheckpoint) -> list[str]:
    """What the import applied, in a few lines (printed by ``resdom import-recbole``)."""
    s = rb.settings
    read = rb.steps[0]["interactions"]
    removed = sum(st.get("removed_interactions", 0) for st in rb.steps)
    filters = ", ".join(f"{k}={s.get(k)!r}" for k in ("rm_dup_inter", "val_interval", "user_inter_num_interval",
                                                      "item_inter_num_interval"))
    lines = [
        f"RecBole preprocessing, as the checkpoint's config says: {filters}: {counted(read, 'interaction')} read, "
        f"{removed:,} removed -> {counted(len(rb.items), 'interaction')}, {counted(rb.n_users)}, "
        f"{counted(len(rb.item_tokens) - 1, 'item')}",
        f"order: each user's interactions by float32 {'min-max normalised ' if rb.normalised else ''}timestamp "
        f"(normalize_all={s.get('normalize_all')!r}, normalize_field={s.get('normalize_field')!r}), ties in "
        f"{'exact time order (rm_dup_inter sorted the rows)' if s.get('rm_dup_inter') else 'file order'}; this "
        f"differs from exact time order for {counted(rb.users_reordered)}",
        f"test split: RecBole's leave-one-out, {counted(len(data.split.test))}, inputs = last "
        f"{ckpt.get('MAX_ITEM_LIST_LENGTH')} items (MAX_ITEM_LIST_LENGTH); RecBole's full-ranking evaluation of "
        "sequential models does not filter seen items: compare with `resdom evaluate --no-filter`",
    ]
    ev = ckpt.get("eval_args") or {}
    split, order, mode = ev.get("split"), ev.get("order"), ev.get("mode")
    mode = mode.get("test") if isinstance(mode, dict) else mode  # RecBole 1.2 stores {"valid": .., "test": ..}
    if split not in ({"LS": "valid_and_test"}, {"LS": "test_only"}) or order != "TO" or mode != "full":
        lines.append(f"note: RecBole evaluated this model with eval_args split={split!r}, order={order!r}, "
                     f"mode={mode!r}; resdom's test split is the leave-one-out one above, full ranking, so its "
                     "numbers are not RecBole's")
    return lines



# ---------------------------------------------------------------------------------------------------------------
# the model


def recbole_model_config(ckpt: RecBoleCheckpoint, n_items: int) -> ModelConfig:
    """resdom's ModelConfig equal to the checkpoint's SASRec (``n_items``: resdom's item count)."""
    where = str(ckpt.path)

    def number(key: str, kind: type, default: Any) -> Any:
        return setting_number(ckpt.get(key, default), kind, key, where)

    act = ckpt.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise ResdomError(f"{ckpt.path}: hidden_act {act!r} is not supported (gelu or relu)")
    emb = ckpt.state_dict.get("item_embedding.weight")
    pos = ckpt.state_dict.get("position_embedding.weight")
    if emb is None or pos is None:
        raise ResdomError(f"{ckpt.path}: state_dict lacks item_embedding / position_embedding (not SASRec?)")
    emb = embedding_table(ckpt.state_dict, "item_embedding.weight", where)
    pos = embedding_table(ckpt.state_dict, "position_embedding.weight", where)
    hidden, max_len = int(emb.shape[1]), int(pos.shape[0])
    layers = len({k.split(".")[2] for k in ckpt.state_dict if k.startswith("trm_encoder.layer.")})
    for key, value in (("hidden_size", hidden), ("n_layers", layers), ("MAX_ITEM_LIST_LENGTH", max_len)):
        if key in ckpt.config and setting_number(ckpt.config[key], int, key, where) != value:
            raise ResdomError(f"{ckpt.path}: config {key}={ckpt.config[key]} but the weights say {value}")
    first_ffn = "trm_encoder.layer.0.feed_forward.dense_1.weight"
    if first_ffn not in ckpt.state_dict:
        raise ResdomError(f"{ckpt.path}: state_dict has no {first_ffn!r} (not SASRec?)")
    inner = int(ckpt.state_dict[first_ffn].shape[0])
    heads = setting_number(ckpt.require("n_heads"), int, "n_heads", where)
    check_heads(hidden, heads, "n_heads", where)
    return imported_model_config(
        where, name="sasrec", n_items=n_items, max_len=max_len, hidden=hidden, layers=layers,
        heads=heads, dropout=number("hidden_dropout_prob", float, 0.5),
        attn_dropout=number("attn_dropout_prob", float, 0.5), inner_size=inner, activation=_ACTIVATIONS[act],
        norm_first=False, emb_scale=False, embedding="ln_dropout", final_ln=False,
        ln_eps=number("layer_norm_eps", float, 1e-12), positions="from_start", key_padding_mask=True,
        init_std=number("initializer_range", float, 0.02),
    )


def recbole_state_dict(ckpt: RecBoleCheckpoint, cfg: ModelConfig, rows: np.ndarray) -> dict[str, torch.Tensor]:
    """resdom state dict from RecBole's tensors; ``rows``: RecBole item row of each resdom item id."""
    sd = ckpt.state_dict

    def get(name: str) -> torch.Tensor:
        if name not in sd:
            raise ResdomError(f"{ckpt.path}: state_dict has no {name!r}")
        return sd[name]

    out = {
        "item_emb.weight": take_rows(get("item_embedding.weight"), rows),
        "pos_emb.weight": get("position_embedding.weight"),
        "emb_ln.weight": get("LayerNorm.weight"), "emb_ln.bias": get("LayerNorm.bias"),
    }
    names = {"query": "query", "key": "key", "value": "value", "out": "dense"}
    for i in range(cfg.layers):
        src, dst = f"trm_encoder.layer.{i}.", f"blocks.{i}."
        for ours, theirs in names.items():
            for p in ("weight", "bias"):
                out[f"{dst}attention.{ours}.{p}"] = get(f"{src}multi_head_attention.{theirs}.{p}")
        for p in ("weight", "bias"):
            out[f"{dst}attn_ln.{p}"] = get(f"{src}multi_head_attention.LayerNorm.{p}")
            out[f"{dst}ffn.fc1.{p}"] = get(f"{src}feed_forward.dense_1.{p}")
            out[f"{dst}ffn.fc2.{p}"] = get(f"{src}feed_forward.dense_2.{p}")
            out[f"{dst}ffn_ln.{p}"] = get(f"{src}feed_forward.LayerNorm.{p}")
    return out


def recbole_model(ckpt: RecBoleCheckpoint, data: ImportData, item_tokens: list[str]) -> SequentialRecommender:
    """resdom SASRec (eval mode) whose scores equal the checkpoint's on ``data``'s items.

    ``item_tokens``: RecBole's item table (``recbole_item_tokens``); each resdom item id takes the row of its token.
    """
    n_rows = int(ckpt.state_dict["item_embedding.weight"].shape[0])
    if len(item_tokens) != n_rows:
        raise ResdomError(
            f"{ckpt.path}: the model has {n_rows - 1} items but RecBole's numbering of the data gives "
            f"{len(item_tokens) - 1}: the checkpoint was trained on other data or other filtering settings"
        )
    rows = source_rows(data.item_labels, item_tokens, str(ckpt.path))
    cfg = recbole_model_config(ckpt, data.split.n_items)
    model = model_to_load(cfg)
    state = recbole_state_dict(ckpt, cfg, rows)
    load_weights(model, state, str(ckpt.path))
    return model


def import_recbole(checkpoint: str | Path, source: str, out: str | Path, data_dir: str | Path | None = None,
                   force: bool = False, log: Callable[[str], None] | None = None) -> Path:
    """Read a RecBole SASRec checkpoint, rebuild RecBole's data from ``source`` (its ``.inter`` file, or a
    registered RecBole data set) under the checkpoint's own settings, and write run ``out``.

    ``log`` receives a few lines saying what was applied (filters, order, split).
    """
    ckpt = read_recbole_checkpoint(checkpoint)
    recbole_model_config(ckpt, 1)  # refuse bad settings before the data is read
    inter, source_record = resolve_inter(source, data_dir)
    rb = recbole_interactions(inter, ckpt.config)
    data = recbole_import_data(rb, source_record)
    ckpt.state_dict = TrackedState(ckpt.state_dict)
    model = recbole_model(ckpt, data, rb.item_tokens)
    ignored = ckpt.state_dict.unread()
    applied = describe_recbole_data(rb, data, ckpt)
    imported = {"format": "recbole", "path": str(Path(checkpoint).resolve()), "epoch": ckpt.epoch,
                "dataset": ckpt.get("dataset"), "model": ckpt.get("model"),
                "max_item_list_length": ckpt.get("MAX_ITEM_LIST_LENGTH"), "preprocessing": applied,
                "ignored_weights": ignored}
    return write_run(out, model, data, imported, force, log, applied,
                     import_inputs("CHECKPOINT", checkpoint, source, data_dir))
