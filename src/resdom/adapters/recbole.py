"""Import a RecBole 1.x SASRec checkpoint (the ``.pth`` its trainer saves) as a resdom run.

RecBole's SASRec (``recbole/model/sequential_recommender/sasrec.py``, 1.2.1) is resdom's post-LN SASRec with:

- input ``Dropout(LayerNorm(E[item] + P[pos]))``, eps ``layer_norm_eps`` -> ``embedding="ln_dropout"``;
- right padding with positions counted from the first item (0, 1, ...) -> ``positions="from_start"``;
- attention mask causal AND key not padding, added as -10000 (as resdom); FFN ``inner_size`` with
  ``hidden_act`` (gelu = exact erf GELU, or relu); no final LayerNorm; scores ``h @ item_embedding.T``.

Weights map one to one (``query/key/value/dense`` -> ``query/key/value/out``; the attention sub-layer's and
the FFN's LayerNorms -> ``attn_ln`` / ``ffn_ln``; ``LayerNorm`` -> ``emb_ln``). Item rows are re-ordered:
RecBole numbers item tokens in order of first appearance (``pandas.factorize``) in its ``.inter`` file after
its own filtering, so ``recbole_item_tokens`` rebuilds that numbering from the data file and the
checkpoint's config, and each resdom item id takes the row of its raw id.

The checkpoint is read with ``safe_pickle`` (RecBole's ``Config`` and enums become inert stand-ins); RecBole
need not be installed and no code from the file runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from resdom.adapters.common import ImportData, load_import_data, load_weights, source_rows, take_rows, write_run
from resdom.adapters.safe_pickle import Inert, load_torch_file
from resdom.errors import ResdomError
from resdom.models import build_model
from resdom.models.base import SequentialRecommender
from resdom.models.config import ModelConfig

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
# RecBole's item numbering


def recbole_item_tokens(inter_path: str | Path, config: dict[str, Any]) -> list[str]:
    """RecBole's item table for ``inter_path`` under ``config``: entry k is the token of item id k (0 = [PAD]).

    Reproduces RecBole 1.x ``Dataset``: load the ``.inter`` columns as strings, drop rows with a missing user or
    item, ``rm_dup_inter`` (after a sort by time; refused where tied timestamps make RecBole's order depend on its
    unstable sort), ``user_inter_num_interval`` / ``item_inter_num_interval`` (iterated), then
    ``pandas.factorize`` of the item column in row order. Settings that change the numbering in other ways
    (``val_interval``, item features, aliases, benchmark files) are refused by name.
    """
    inter_path = Path(inter_path)
    _refuse_unsupported(config, inter_path)
    sep = config.get("field_separator") or "\t"
    uid, iid, time = config.get("USER_ID_FIELD", "user_id"), config.get("ITEM_ID_FIELD", "item_id"), \
        config.get("TIME_FIELD", "timestamp")
    df = _read_inter(inter_path, sep, uid, iid, time, config.get("encoding"))
    df = df[df[uid].notna() & df[iid].notna()]
    keep = config.get("rm_dup_inter")
    if keep is not None:
        if keep not in ("first", "last"):
            raise ResdomError(f"{inter_path}: rm_dup_inter {keep!r} is not 'first' or 'last'")
        if time in df:
            df = df.sort_values(by=[time], ascending=True, kind="stable")
        df = df.drop_duplicates(subset=[uid, iid], keep=keep)
    df = _filter_by_inter_num(df, uid, iid, config.get("user_inter_num_interval"),
                              config.get("item_inter_num_interval"))
    if keep is not None and time in df:
        _check_no_tied_first_times(df, iid, time, inter_path)
    _, uniques = pd.factorize(df[iid].to_numpy())
    return ["[PAD]"] + [str(t) for t in uniques]


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


def _refuse_unsupported(config: dict[str, Any], path: Path) -> None:
    checks = {
        "val_interval": config.get("val_interval"), "benchmark_filename": config.get("benchmark_filename"),
        "alias_of_item_id": config.get("alias_of_item_id"),
    }
    for key, value in checks.items():
        if value:
            raise ResdomError(f"{path}: RecBole setting {key}={value!r} is not supported by the importer")
    load_col = config.get("load_col")
    if isinstance(load_col, dict) and "item" in load_col:
        raise ResdomError(f"{path}: RecBole setting load_col loads item features ('item'), which changes the "
                          "item numbering; not supported by the importer")


def _read_inter(path: Path, sep: str, uid: str, iid: str, time: str, encoding: str | None) -> pd.DataFrame:
    """The user, item (and time) columns of a RecBole atomic file, read as RecBole reads them."""
    if not path.is_file():
        raise ResdomError(f"{path}: RecBole .inter file not found")
    with open(path, encoding=encoding or "utf-8") as f:
        header = f.readline().rstrip("\n").split(sep)
    fields = {}
    for col in header:
        name, _, ftype = col.partition(":")
        fields[name] = (col, ftype)
    for name in (uid, iid):
        if name not in fields:
            raise ResdomError(f"{path}:1: no column {name!r} in the header (has {', '.join(fields)})")
        if fields[name][1] != "token":
            raise ResdomError(f"{path}:1: column {name!r} has type {fields[name][1]!r}; the importer needs 'token'")
    cols = [fields[uid][0], fields[iid][0]] + ([fields[time][0]] if time in fields else [])
    dtype = {c: (np.float64 if c.endswith(":float") else str) for c in cols}
    try:
        df = pd.read_csv(path, delimiter=sep, usecols=cols, dtype=dtype, encoding=encoding or "utf-8",
                         engine="python")
    except (ValueError, pd.errors.ParserError) as e:
        raise ResdomError(f"{path}: cannot read as a RecBole atomic file ({e})") from None
    df.columns = [c.partition(":")[0] for c in cols]
    return df


def _parse_intervals(text: Any) -> list[tuple[str, float, float, str]] | None:
    if text is None:
        return None
    out = []
    for part in str(text).split(";"):
        part = part.strip()
        lo, _, hi = part[1:-1].partition(",")
        if len(part) < 2 or part[0] not in "([" or part[-1] not in ")]" or not _:
            continue  # RecBole warns and skips an illegal interval
        out.append((part[0], float(lo), float(hi), part[-1]))
    return out


def _within(n: int, intervals: list[tuple[str, float, float, str]]) -> bool:
    result = True
    for k, (lb, lo, hi, rb) in enumerate(intervals):
        ok = (n >= lo if lb == "[" else n > lo) and (n <= hi if rb == "]" else n < hi)
        result = ok if k == 0 else result or ok
    return result


def _filter_by_inter_num(df: pd.DataFrame, uid: str, iid: str, user_iv: Any, item_iv: Any) -> pd.DataFrame:
    """RecBole's ``_filter_by_inter_num``: drop users / items whose counts fall outside the intervals, repeated."""
    user_iv, item_iv = _parse_intervals(user_iv), _parse_intervals(item_iv)
    if user_iv is None and item_iv is None:
        return df
    while True:
        uc = Counter(df[uid].to_numpy()) if user_iv else Counter()
        ic = Counter(df[iid].to_numpy()) if item_iv else Counter()
        ban_u = {u for u, n in uc.items() if not _within(n, user_iv)} if user_iv else set()
        ban_i = {i for i, n in ic.items() if not _within(n, item_iv)} if item_iv else set()
        if not ban_u and not ban_i:
            return df
        df = df[~(df[uid].isin(ban_u) | df[iid].isin(ban_i))]


# ---------------------------------------------------------------------------------------------------------------
# the model


def recbole_model_config(ckpt: RecBoleCheckpoint, n_items: int) -> ModelConfig:
    """resdom's ModelConfig equal to the checkpoint's SASRec (``n_items``: resdom's item count)."""
    act = ckpt.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise ResdomError(f"{ckpt.path}: hidden_act {act!r} is not supported (gelu or relu)")
    emb = ckpt.state_dict.get("item_embedding.weight")
    pos = ckpt.state_dict.get("position_embedding.weight")
    if emb is None or pos is None:
        raise ResdomError(f"{ckpt.path}: state_dict lacks item_embedding / position_embedding (not SASRec?)")
    hidden, max_len = int(emb.shape[1]), int(pos.shape[0])
    layers = len({k.split(".")[2] for k in ckpt.state_dict if k.startswith("trm_encoder.layer.")})
    for key, value in (("hidden_size", hidden), ("n_layers", layers), ("MAX_ITEM_LIST_LENGTH", max_len)):
        if key in ckpt.config and int(ckpt.config[key]) != value:
            raise ResdomError(f"{ckpt.path}: config {key}={ckpt.config[key]} but the weights say {value}")
    inner = int(ckpt.state_dict["trm_encoder.layer.0.feed_forward.dense_1.weight"].shape[0])
    return ModelConfig(
        name="sasrec", n_items=n_items, max_len=max_len, hidden=hidden, layers=layers,
        heads=int(ckpt.require("n_heads")), dropout=float(ckpt.get("hidden_dropout_prob", 0.5)),
        attn_dropout=float(ckpt.get("attn_dropout_prob", 0.5)), inner_size=inner, activation=_ACTIVATIONS[act],
        norm_first=False, emb_scale=False, embedding="ln_dropout", final_ln=False,
        ln_eps=float(ckpt.get("layer_norm_eps", 1e-12)), positions="from_start", key_padding_mask=True,
        init_std=float(ckpt.get("initializer_range", 0.02)),
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


def recbole_model(ckpt: RecBoleCheckpoint, data: ImportData, inter_path: str | Path | None = None
                  ) -> SequentialRecommender:
    """resdom SASRec (eval mode) whose scores equal the checkpoint's on ``data``'s items."""
    inter = Path(inter_path) if inter_path is not None else _inter_file(data, ckpt)
    tokens = recbole_item_tokens(inter, ckpt.config)
    n_rows = int(ckpt.state_dict["item_embedding.weight"].shape[0])
    if len(tokens) != n_rows:
        raise ResdomError(
            f"{ckpt.path}: the model has {n_rows - 1} items but RecBole's numbering of {inter} gives "
            f"{len(tokens) - 1}: the checkpoint was trained on other data or other filtering settings"
        )
    rows = source_rows(data.item_labels, tokens, str(ckpt.path))
    cfg = recbole_model_config(ckpt, data.split.n_items)
    model = build_model(cfg)
    state = recbole_state_dict(ckpt, cfg, rows)
    load_weights(model, state, str(ckpt.path))
    return model


def _inter_file(data: ImportData, ckpt: RecBoleCheckpoint) -> Path:
    files = data.source_files
    inter = [f for f in files if f.suffix == ".inter"]
    if len(inter) != 1:
        raise ResdomError(
            f"{ckpt.path}: --data is not a RecBole .inter file ({', '.join(map(str, files)) or 'no files'}); give "
            "the .inter file RecBole trained on (--recbole-inter) to rebuild its item numbering"
        )
    return inter[0]


def import_recbole(checkpoint: str | Path, source: str, out: str | Path, data_dir: str | Path | None = None,
                   inter_path: str | Path | None = None, force: bool = False, **data_options: Any) -> Path:
    """Read a RecBole SASRec checkpoint, map it onto resdom's SASRec for ``source`` (LOO) and write run ``out``."""
    ckpt = read_recbole_checkpoint(checkpoint)
    data = load_import_data(source, data_dir, **data_options)
    model = recbole_model(ckpt, data, inter_path)
    imported = {"format": "recbole", "path": str(Path(checkpoint).resolve()), "epoch": ckpt.epoch,
                "dataset": ckpt.get("dataset"), "model": ckpt.get("model"),
                "max_item_list_length": ckpt.get("MAX_ITEM_LIST_LENGTH")}
    return write_run(out, model, data, imported, force)
