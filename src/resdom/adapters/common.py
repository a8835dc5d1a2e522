"""What every importer shares: aligning another code base's item ids with resdom's, and writing the run directory.

An imported run is an ordinary run directory (``resdom.runs``): ``data/`` (the LOO split of ``--data``),
``model.safetensors`` + ``model.json`` (with the data fingerprint), ``config.json`` (with ``"imported_from"``
instead of a training config). ``resdom evaluate`` and ``resdom diagnose`` read it like a trained run.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resdom.data.prepare import load_prepared, prepare_split, split_data
from resdom.data.sequences import SplitData
from resdom.data.splits import split_loo
from resdom.errors import ResdomError
from resdom.io import atomic_write_json
from resdom.models.base import SequentialRecommender
from resdom.rundir import RunDir
from resdom.runs import check_finite, data_fingerprint, save_checkpoint, versions


@dataclass
class ImportData:
    """The data an imported model is evaluated on.

    split:        the LOO split of the source, as ``prepare_split`` makes it.
    item_labels:  (n_items + 1,) raw id of each resdom item id (entry 0, padding, is None).
    manifest:     the split's manifest (source record with file paths, preprocessing).
    user_labels:  (U,) raw id of each user index of the split's sequences (``inputs.users``), where known.
    """

    split: SplitData
    item_labels: np.ndarray
    manifest: dict[str, Any]
    user_labels: np.ndarray | None = None

    @classmethod
    def leave_one_out(cls, prepared: Any, manifest: dict[str, Any]) -> ImportData:
        """The LOO split of ``prepared`` (a ``data.preprocess`` result: sequences, n_items, item and user labels),
        with the split's thresholds and counts added to ``manifest``."""
        split = split_data(split_loo(prepared.sequences), prepared, manifest)  # keeps the external ids
        return cls(split, np.asarray(prepared.item_labels, dtype=object), manifest,
                   np.asarray(prepared.user_labels, dtype=object))

    @property
    def source_files(self) -> list[Path]:
        return [Path(f["path"]) for f in self.manifest.get("source", {}).get("files", [])]


def load_import_data(source: str, data_dir: str | Path | None = None, **options: Any) -> ImportData:
    """Prepare ``source`` as ``resdom train`` would (LOO split) and keep the raw id of every item id."""
    split = prepare_split(source, protocol="loo", data_dir=data_dir, **options)
    prepared, _ = load_prepared(source, data_dir, **options)
    if prepared.n_items != split.n_items:  # both come from the same code path; a mismatch is a bug
        raise ResdomError(f"{source}: item count differs between preparation passes ({prepared.n_items} vs "
                          f"{split.n_items})")
    return ImportData(split, np.asarray(prepared.item_labels, dtype=object), split.manifest,
                      np.asarray(prepared.user_labels, dtype=object))


def _keys(labels: Sequence[Any]) -> list[str]:
    """Comparable keys for raw ids: integers and digit strings as canonical decimal strings ("007" -> "7")."""
    out = []
    for x in labels:
        if isinstance(x, (int, np.integer)):
            out.append(str(int(x)))
        else:
            s = str(x)
            out.append(str(int(s)) if s.isascii() and s.isdigit() else s)
    return out


def source_rows(resdom_labels: np.ndarray, source_tokens: Sequence[Any], what: str) -> np.ndarray:
    """int64 (n_items + 1,): for each resdom item id, its row in the source model's item table (0 -> 0).

    ``source_tokens[k]`` is the raw id of the source model's item row k (row 0, padding, is ignored).
    Every resdom item must exist in the source model; items only the source knows are dropped.
    """
    keys = _keys(source_tokens)
    index: dict[str, int] = {}
    for row, key in enumerate(keys):
        if row == 0:
            continue
        if key in index:
            raise ResdomError(f"{what}: raw item id {source_tokens[row]!r} appears twice in the model's item table")
        index[key] = row
    rows = np.zeros(len(resdom_labels), dtype=np.int64)
    missing = []
    for rid, key in enumerate(_keys(resdom_labels[1:]), start=1):
        if key not in index:
            missing.append(resdom_labels[rid])
        else:
            rows[rid] = index[key]
    if missing:
        raise ResdomError(
            f"{what}: {len(missing)} item(s) of the data are unknown to the model (e.g. raw id {missing[0]!r}); "
            "was it trained on this data set with the same filtering?"
        )
    return rows


def take_rows(table: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """The item table re-ordered to resdom ids: (n_items + 1, d), row 0 = the source's padding row."""
    return table[torch.from_numpy(rows)].clone()


def attention_weights(dst: str, in_proj_weight: torch.Tensor, in_proj_bias: torch.Tensor, out_weight: torch.Tensor,
                      out_bias: torch.Tensor) -> dict[str, torch.Tensor]:
    """``nn.MultiheadAttention``'s packed in_proj (3d, d) / (3d,) and out_proj as resdom's ``{dst}attention.*``
    (query, key, value, out) weights and biases."""
    d = in_proj_weight.shape[1]
    out = {f"{dst}attention.out.weight": out_weight, f"{dst}attention.out.bias": out_bias}
    for k, name in enumerate(("query", "key", "value")):
        out[f"{dst}attention.{name}.weight"] = in_proj_weight[k * d : (k + 1) * d]
        out[f"{dst}attention.{name}.bias"] = in_proj_bias[k * d : (k + 1) * d]
    return out


def load_weights(model: SequentialRecommender, state: dict[str, torch.Tensor], what: str) -> None:
    """Load a complete, shape-checked, finite state dict into ``model`` (eval mode afterwards)."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    bad = [(k, tuple(state[k].shape), tuple(own[k].shape)) for k in own if k in state and
           tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or bad:
        raise ResdomError(f"{what}: weights do not fit (missing {missing[:3]}, shape mismatch {bad[:3]})")
    check_finite({k: v for k, v in state.items() if k in own}, what)
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items() if k in own})
    model.eval()


def write_run(out: str | Path, model: SequentialRecommender, data: ImportData, imported_from: dict[str, Any],
              force: bool = False) -> Path:
    """Write the run directory ``out`` (data/, model.safetensors + model.json, config.json); returns it."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ResdomError(f"{out}: exists and is not a directory")
    if out.exists() and any(out.iterdir()) and not force:
        raise ResdomError(f"{out}: exists and is not empty (choose another --out, or --force to overwrite)")
    run = RunDir(out)
    for stale in (run.diagnostics, run.state_dir):  # results of whatever model was there before
        shutil.rmtree(stale, ignore_errors=True)
    fingerprint = data_fingerprint(data.split)
    data.split.save(run.data)
    save_checkpoint(run.model, model, {
        "data_fingerprint": fingerprint, "imported_from": imported_from, "data": data.manifest,
    })
    atomic_write_json(run.config, {
        "model": model.cfg.model_dump(), "train": None, "imported_from": imported_from,
        "data": {"source": data.manifest.get("source", {}).get("name"), "protocol": "loo",
                 "fingerprint": fingerprint, "n_items": data.split.n_items, "manifest": data.manifest},
        "versions": versions(),
    })
    for stale in (run.final, run.log):
        stale.unlink(missing_ok=True)
    return out
