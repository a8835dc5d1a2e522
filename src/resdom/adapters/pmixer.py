"""Import a pmixer/SASRec.pytorch ``state_dict`` (``torch.save(model.state_dict(), ...)``) as a resdom run.

The current pmixer model (``model.py``, with ``args.norm_first``) maps onto resdom's SASRec with:

- input ``Dropout(E[item] * sqrt(d) + P[pos])``, positions ``1..L`` over the left-padded window and 0 for
  padding (``pos_emb`` has a padding row) -> ``emb_scale=True, embedding="dropout",
  positions="from_end_pad0"``; every input is left-padded to ``maxlen``;
- ``nn.MultiheadAttention`` with a causal mask only: padded positions are attended to ->
  ``key_padding_mask=False`` (resdom then pads to ``max_len`` itself, so scores match pmixer's exactly);
- post-LN (default): ``LN(x + MHA(x))``, ``LN(h + FFN(h))``; ``norm_first``: ``x + MHA(LN(x))``,
  ``h + FFN(LN(h))``; FFN = two 1x1 convolutions (d -> d -> d) with ReLU -> ``inner_size=d, activation="relu"``;
- a final LayerNorm ``last_layernorm``; every LayerNorm has eps 1e-8.

The state dict does not say how many heads the model has, nor whether it was ``norm_first``: pass both as
trained (pmixer's defaults: 1 head, post-LN). ``max_len`` defaults to the position table size - 1 (some
pmixer versions fix that table at 201 rows while training with ``--maxlen 50``: then pass 50; pmixer's file
names carry it, ``...maxlen=50.pth``, and are read when ``--max-len`` is not given). pmixer's item
ids are the integers of its data file, so each resdom item id takes the row of its raw id.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resdom.adapters.common import (
    ImportData,
    TrackedState,
    attention_weights,
    import_inputs,
    load_import_data,
    load_weights,
    source_rows,
    take_rows,
    write_run,
)
from resdom.adapters.safe_pickle import load_torch_file
from resdom.errors import ResdomError
from resdom.models.base import SequentialRecommender
from resdom.models.config import ModelConfig, SASRecConfig
from resdom.records import counted
from resdom.runs import model_to_load

LN_EPS = 1e-8


def read_pmixer_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a pmixer state dict file (read safely); also accepts ``{"state_dict": ...}``."""
    obj = load_torch_file(path)
    if isinstance(obj, dict) and "item_emb.weight" not in obj:
        obj = obj.get("state_dict", obj.get("model", obj))
    if not isinstance(obj, dict) or "item_emb.weight" not in obj:
        raise ResdomError(f"{path}: not a pmixer SASRec state dict (no 'item_emb.weight')")
    state = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    for name in ("item_emb.weight", "pos_emb.weight"):  # a crafted file: one line, not an IndexError / KeyError
        if name in obj and (name not in state or state[name].ndim != 2 or 0 in state[name].shape):
            shape = tuple(state[name].shape) if name in state else type(obj[name]).__name__
            raise ResdomError(f"{path}: {name!r} is {shape}, not a table of rows x hidden size (a damaged or "
                              "crafted state dict)")
    return state


def maxlen_from_name(path: str | Path) -> int | None:
    """The ``maxlen=N`` pmixer writes into its checkpoint names (``SASRec.epoch=...maxlen=200.pth``), or None."""
    match = re.search(r"maxlen=(\d+)", Path(path).name)
    return int(match.group(1)) if match else None


def pmixer_model_config(state: dict[str, torch.Tensor], n_items: int, heads: int, norm_first: bool,
                        max_len: int | None = None, where: str = "state dict") -> ModelConfig:
    """resdom's ModelConfig equal to a pmixer SASRec with these weights."""
    for name in ("item_emb.weight", "pos_emb.weight"):
        if name in state and (state[name].ndim != 2 or 0 in state[name].shape):
            raise ResdomError(f"{where}: {name!r} has shape {tuple(state[name].shape)}, not rows x hidden size")
    if "item_emb.weight" not in state:
        raise ResdomError(f"{where}: state dict has no 'item_emb.weight' (not pmixer's SASRec)")
    hidden = int(state["item_emb.weight"].shape[1])
    pos_rows = int(state["pos_emb.weight"].shape[0]) if "pos_emb.weight" in state else 0
    layers = len([k for k in state if k.startswith("attention_layers.") and k.endswith(".in_proj_weight")])
    if layers == 0 or pos_rows == 0:
        raise ResdomError(f"{where}: no attention_layers.*.in_proj_weight / pos_emb.weight (not pmixer's SASRec)")
    max_len = pos_rows - 1 if max_len is None else max_len
    if max_len == pos_rows:
        raise ResdomError(
            f"{where}: the position table has maxlen = {max_len} rows, as written by the older pmixer model.py "
            "(positions from 0, query LN(x) with raw keys and values, zeroed padding states), which this importer "
            "does not read; it reads the current code, whose table has maxlen + 1 rows (row 0 = padding)"
        )
    if max_len != pos_rows - 1:  # pmixer's table has exactly maxlen + 1 rows; a shorter max_len would put the last
        # item at position max_len, not at the maxlen it was trained at (other scores than pmixer's predict)
        raise ResdomError(f"{where}: max_len {max_len} needs a position table of {max_len + 1} rows; it has "
                          f"{pos_rows}, so the model was trained with maxlen {pos_rows - 1} (this importer reads the "
                          "current pmixer code, whose row 0 is padding)")
    if hidden % heads:
        raise ResdomError(f"{where}: hidden size {hidden} is not divisible by --heads {heads}")
    return SASRecConfig(
        name="sasrec", n_items=n_items, max_len=max_len, hidden=hidden, layers=layers, heads=heads, dropout=0.5,
        attn_dropout=0.5, inner_size=hidden, activation="relu", norm_first=norm_first, emb_scale=True,
        embedding="dropout", final_ln=True, ln_eps=LN_EPS, positions="from_end_pad0", key_padding_mask=False,
    )


def pmixer_state_dict(state: dict[str, torch.Tensor], cfg: ModelConfig, rows: np.ndarray, where: str
                      ) -> dict[str, torch.Tensor]:
    """resdom state dict from pmixer's tensors; ``rows``: pmixer item row of each resdom item id."""

    def get(name: str) -> torch.Tensor:
        if name not in state:
            raise ResdomError(f"{where}: state dict has no {name!r}")
        return state[name]

    d = cfg.hidden
    out = {
        "item_emb.weight": take_rows(get("item_emb.weight"), rows),
        "pos_emb.weight": get("pos_emb.weight")[: cfg.max_len + 1],
        "emb_ln.weight": torch.ones(d), "emb_ln.bias": torch.zeros(d),  # unused: pmixer has no input LayerNorm
        "final_ln.weight": get("last_layernorm.weight"), "final_ln.bias": get("last_layernorm.bias"),
    }
    for i in range(cfg.layers):
        mha, dst = f"attention_layers.{i}.", f"blocks.{i}."
        out.update(attention_weights(dst, get(mha + "in_proj_weight"), get(mha + "in_proj_bias"),
                                     get(mha + "out_proj.weight"), get(mha + "out_proj.bias")))
        for p in ("weight", "bias"):
            out[f"{dst}attn_ln.{p}"] = get(f"attention_layernorms.{i}.{p}")
            out[f"{dst}ffn_ln.{p}"] = get(f"forward_layernorms.{i}.{p}")
            for conv, fc in (("conv1", "fc1"), ("conv2", "fc2")):
                t = get(f"forward_layers.{i}.{conv}.{p}")
                out[f"{dst}ffn.{fc}.{p}"] = t[:, :, 0] if p == "weight" else t
    return out


def pmixer_model(state: dict[str, torch.Tensor], item_labels: np.ndarray, heads: int = 1, norm_first: bool = False,
                 max_len: int | None = None, where: str = "state dict") -> SequentialRecommender:
    """resdom SASRec (eval mode) whose scores equal pmixer's ``predict`` on the items of ``item_labels``.

    ``item_labels``: (n_items + 1,) raw (integer) id of each resdom item id; pmixer's item row = that id.
    """
    n_rows = int(state["item_emb.weight"].shape[0])
    rows = source_rows(np.asarray(item_labels, dtype=object), list(range(n_rows)), where)
    cfg = pmixer_model_config(state, len(item_labels) - 1, heads, norm_first, max_len, where)
    model = model_to_load(cfg)
    load_weights(model, pmixer_state_dict(state, cfg, rows, where), where)
    return model


PMIXER_PREPROCESSING = {"k_core": None, "remove_repeats": False, "sort_by_time": False}


def import_pmixer(state_path: str | Path, source: str, out: str | Path, heads: int = 1, norm_first: bool = False,
                  max_len: int | None = None, data_dir: str | Path | None = None, force: bool = False,
                  log: Callable[[str], None] | None = None, **data_options: Any) -> Path:
    """Read a pmixer SASRec state dict, map it onto resdom's SASRec for ``source`` (LOO), write run ``out``.

    pmixer's ``data_partition`` reads its ``user item`` file as it is: no filtering, each user's items in file
    order. That is the default here (``PMIXER_PREPROCESSING``); ``data_options`` (e.g. ``k_core``) override it.
    ``log`` receives a line saying what was applied.
    """
    state = read_pmixer_state_dict(state_path)
    if max_len is None:
        max_len = maxlen_from_name(state_path)
    data: ImportData = load_import_data(source, data_dir, **{**PMIXER_PREPROCESSING, **data_options})
    state = TrackedState(state)
    model = pmixer_model(state, data.item_labels, heads, norm_first, max_len, str(state_path))
    ignored = state.unread()
    applied = describe_pmixer_data(data)
    imported = {"format": "pmixer", "path": str(Path(state_path).resolve()), "heads": heads,
                "norm_first": norm_first, "max_len": model.max_len, "preprocessing": applied,
                "ignored_weights": ignored}
    return write_run(out, model, data, imported, force, log, applied,
                     import_inputs("STATE_DICT", state_path, source, data_dir))


def _count(step: dict[str, Any], noun: str) -> str:
    """A count of a preprocessing step (``read``, ``result``): ``12,345 interactions``, ``1 user``."""
    n = step.get(f"{noun}s")
    return counted(n, noun) if isinstance(n, int) else f"{n} {noun}s"


def describe_pmixer_data(data: ImportData) -> list[str]:
    """What was applied to the data, in a line or two (printed by ``resdom import-pmixer``)."""
    pre = data.manifest.get("preprocessing", {})
    cfg = pre.get("config", {})
    steps = {s["step"]: s for s in pre.get("steps", [])}
    read, result = steps.get("read", {}), steps.get("result", {})
    k = cfg.get("k_core")
    filters = "no filtering, as pmixer" if not k and not cfg.get("remove_repeats") else (
        f"k-core {k}" if k else "") + (" and consecutive-repeat removal" if cfg.get("remove_repeats") else "")
    order = "each user's items in file order, as pmixer" if not cfg.get("sort_by_time") else data.manifest.get(
        "tie_rule", "sorted by time")
    return [
        f"pmixer preprocessing: {filters.strip()}; {order}: {_count(read, 'interaction')} read -> "
        f"{_count(result, 'interaction')}, {_count(result, 'user')}, {_count(result, 'item')}",
        f"test split: leave-one-out, {counted(len(data.split.test))} (pmixer's data_partition: users with >= 3 items)",
    ]
