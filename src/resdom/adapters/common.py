"""What every importer shares: aligning another code base's item ids with resdom's, and writing the run directory.

An imported run is an ordinary run directory (``resdom.runs``): ``data/`` (the LOO split of ``--data``),
``model.safetensors`` + ``model.json`` (with the data fingerprint), ``config.json`` (with ``"imported_from"``
instead of a training config). ``resdom evaluate`` and ``resdom diagnose`` read it like a trained run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resdom.data.download import data_folders
from resdom.data.prepare import load_prepared, prepare_split, source_paths, split_data
from resdom.data.sequences import SplitData
from resdom.data.splits import split_loo
from resdom.errors import ResdomError
from resdom.io import atomic_write_json
from resdom.models.base import SequentialRecommender
from resdom.models.config import ModelConfig, model_config_class
from resdom.rundir import RUN, InputPaths, RunDir, check_output_folder, check_output_inputs, output_lock, write_marker
from resdom.runs import data_fingerprint, fitted_weights, save_checkpoint, versions


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


def integer_ids(tokens: Iterable[Any]) -> bool:
    """Whether a source model's item ids ``tokens`` are all integers (``_keys``' ``numeric``)."""
    return all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in tokens)


def _keys(labels: Iterable[Any], numeric: bool) -> list[str]:
    """Comparable keys for raw ids: their exact text (``str``); ``numeric`` (a source model whose item table holds
    integers, which read ``007`` as 7): digit strings as canonical decimal strings too (``"007"`` -> ``"7"``)."""
    out = []
    for x in labels:
        if isinstance(x, (int, np.integer)):
            out.append(str(int(x)))
        else:
            s = str(x)
            out.append(str(int(s)) if numeric and s.isascii() and s.isdigit() else s)
    return out


def source_rows(resdom_labels: np.ndarray, source_tokens: Sequence[Any], what: str) -> np.ndarray:
    """int64 (n_items + 1,): for each resdom item id, its row in the source model's item table (0 -> 0).

    ``source_tokens[k]`` is the raw id of the source model's item row k (row 0, padding, is ignored).
    Every resdom item must exist in the source model; items only the source knows are dropped. Ids are matched as
    text, exactly, where the source's ids are text (RecBole's tokens: ``007`` and ``7`` are two items); where
    they are integers (pmixer, a RecTools model of integer ids), a data id written ``007`` is item 7, and two data
    ids that are one such item (``007`` and ``7``) are refused (they would share one row of the model).
    """
    numeric = integer_ids(source_tokens[1:])
    keys = _keys(source_tokens, numeric)
    index: dict[str, int] = {}
    for row, key in enumerate(keys):
        if row == 0:
            continue
        if key in index:
            raise ResdomError(f"{what}: raw item id {source_tokens[row]!r} appears twice in the model's item table")
        index[key] = row
    rows = np.zeros(len(resdom_labels), dtype=np.int64)
    missing = []
    first: dict[str, int] = {}
    for rid, key in enumerate(_keys(resdom_labels[1:], numeric), start=1):
        if key not in index:
            missing.append(resdom_labels[rid])
            continue
        if key in first:
            raise ResdomError(f"{what}: items {resdom_labels[first[key]]!r} and {resdom_labels[rid]!r} of the data are "
                              f"one item of the model ({source_tokens[index[key]]!r}: its ids are integers); give "
                              "the data its ids as the model was trained on them")
        first[key] = rid
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
    model.load_state_dict(fitted_weights(state, model.state_dict(), what, "weights do not fit", extra=True))
    model.eval()


class TrackedState(dict):
    """A source state dict (name -> tensor) that remembers which names the mapping read (``[]`` / ``get``), so
    that weights no mapping uses are reported instead of dropped silently (``unread``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def unread(self) -> list[str]:
        """The names never read, sorted."""
        return sorted(set(self) - self.read)


def ignored_weights_line(names: Sequence[str]) -> str | None:
    """The line an importer prints for weights of the file its mapping does not use (None when there are none)."""
    if not names:
        return None
    shown = ", ".join(names[:5]) + (f", ... ({len(names)} in all)" if len(names) > 5 else "")
    return (f"ignored: {len(names)} weight(s) of the file that resdom's mapping does not use: {shown}; the imported "
            "model is the mapped network without them (check that the file holds the model resdom maps)")


def setting_number(value: Any, kind: type, name: str, where: str) -> Any:
    """A checkpoint setting ``name`` as an ``int`` or a finite ``float`` (``kind``); one line naming it otherwise."""
    want = "an integer" if kind is int else "a number"
    try:
        if isinstance(value, bool) or value is None:
            raise TypeError
        number = float(value) if kind is float else int(value)
    except (TypeError, ValueError, OverflowError):
        raise ResdomError(f"{where}: setting {name}={value!r} is not {want}") from None
    if kind is float and not math.isfinite(number):
        raise ResdomError(f"{where}: setting {name}={value!r} is not a finite number")
    if kind is int and isinstance(value, float) and value != number:
        raise ResdomError(f"{where}: setting {name}={value!r} is not {want}")
    return number


def setting_mapping(value: Any, name: str, where: str) -> dict[str, Any]:
    """A checkpoint setting that must be a mapping (None -> {}); one line naming it otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ResdomError(f"{where}: setting {name} is a {type(value).__name__} ({str(value)[:60]}), not a mapping")
    return value


def embedding_table(state: dict[str, Any], name: str, where: str) -> torch.Tensor:
    """``state[name]``, refused in one line unless it is a table (a 2-D tensor of at least one row and column): a
    crafted checkpoint's 1-D, empty or non-tensor table was an IndexError traceback."""
    table = state.get(name)
    if not isinstance(table, torch.Tensor) or table.ndim != 2 or 0 in table.shape:
        what = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise ResdomError(f"{where}: {name!r} is {what}, not a table of rows x hidden size (a damaged or crafted "
                          "checkpoint)")
    return table


def check_heads(hidden: int, heads: int, heads_name: str, where: str) -> None:
    """Attention heads must divide the hidden size (one line naming the setting otherwise)."""
    if heads < 1 or hidden % heads:
        raise ResdomError(f"{where}: {heads_name}={heads} heads do not divide the hidden size {hidden} of the weights")


def imported_model_config(where: str, **fields: Any) -> ModelConfig:
    """The configuration of model ``fields["name"]`` from a file's settings; an invalid combination is one line
    naming the file."""
    from pydantic import ValidationError

    try:
        return model_config_class(str(fields["name"]))(**fields)
    except ValidationError as e:
        problems = "; ".join(_problem(err) for err in e.errors())
        raise ResdomError(f"{where}: the model settings in the file do not make a valid model ({problems})") from None


def _problem(err: Any) -> str:
    """One pydantic error as ``field=value: message`` (resdom's field name; the model-wide checks name theirs)."""
    msg = str(err.get("msg", "")).removeprefix("Value error, ")
    loc = ".".join(str(x) for x in err.get("loc", ()))
    return f"{loc}={err.get('input')!r}: {msg}" if loc else msg


def write_run(out: str | Path, model: SequentialRecommender, data: ImportData, imported_from: dict[str, Any],
              force: bool = False, log: Callable[[str], None] | None = None, notes: Sequence[str] = (),
              inputs: InputPaths | None = None) -> Path:
    """Write the run directory ``out`` (data/, model.safetensors + model.json, config.json); returns it.

    Then ``log`` gets each of ``notes`` (what the importer applied to the data) and, where ``imported_from`` names
    ignored weights, the line that says so. ``inputs``: the files the importer read, by option; ``out`` may not be
    one of them, nor hold one that --force would move aside.
    """
    out = Path(out)

    def check() -> bool:  # --force: the old run is kept, renamed; one writer at a time (another import, a trainer):
        # checked again under the lock
        replace = check_output_folder(out, "--out", runs=False, force=force)
        check_output_inputs(out, "--out", inputs or {}, replaced=replace)
        return replace

    with output_lock(out, check) as aside:
        if aside is not None and log is not None:
            log(f"--force: {out} moved aside to {aside}")
        _write_run(out, model, data, imported_from)
    if log is not None:
        for line in [*notes, ignored_weights_line(imported_from.get("ignored_weights", []))]:
            if line:
                log(line)
    return out


def import_inputs(what: str, path: str | Path, source: str, data_dir: str | Path | None) -> InputPaths:
    """An importer's inputs for ``write_run``: the model file (argument ``what``), ``--data`` and ``--data-dir``."""
    return {what: path, "--data": tuple(source_paths(source)), **data_folders(data_dir)}


def _write_run(out: Path, model: SequentialRecommender, data: ImportData, imported_from: dict[str, Any]) -> None:
    """``write_run``'s files, into ``out`` (absent or empty, and locked)."""
    run = RunDir(out)  # absent or empty now (or a run killed before its config.json): nothing to delete
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
    write_marker(out, RUN)
