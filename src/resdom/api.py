"""The Python API: prepare or load a split, fit a model, evaluate it, diagnose it, save and load runs.

    import resdom
    split = resdom.prepare_split("synthetic:demo", protocol="gts")
    fitted = resdom.fit(split, "sasrec", epochs=10)        # in memory; out="runs/x" writes a run directory
    resdom.evaluate(fitted, cutoffs=(10,)).metrics          # {"HR@10": ..., "NDCG@10": ..., "MRR": ...}
    fitted.recommend(k=10)                                  # DataFrame user_id, item_id, score, rank: your ids
    diagnosis = resdom.diagnose(fitted)                     # shuffle, hrli, mixing, alpha, recovery
    diagnosis.plot("mixing")                                # the report's figure; every result: to_dict(), to_frame()

One vocabulary throughout: ``split`` is a SplitData (train sequences, valid and test examples), ``part`` names
one of its evaluation sets (``"valid"`` or ``"test"``), ``cutoffs`` are the K of @K metrics, ``recency`` the k
of HRLkI (the k-th most recent input item), ``device`` is ``"auto"`` (cuda, then mps, then cpu) or a device name.
A user's mistake is a ResdomError naming the parameter. The CLI commands ``train``, ``evaluate`` and
``diagnose`` are a thin layer over these functions.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import tempfile
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from resdom.checks import MAX_CUTOFF, choice, flag, launch_env, optional_bool, path_argument, positive_int
from resdom.data.prepare import prepare_split
from resdom.data.sequences import EvalSet, SplitData
from resdom.diagnostics.common import check_model
from resdom.diagnostics.monitor import epoch_monitor
from resdom.diagnostics.options import (
    DEFAULTS,
    USED_BY,
    DiagnoseOptions,
    diagnose_options,
    integers,
    no_repeats,
    refuse_unused,
)
from resdom.diagnostics.registry import REGISTRY
from resdom.diagnostics.runner import compute, parse_what, plan, run_all
from resdom.distributed import resolve_device
from resdom.errors import ResdomError
from resdom.evaluation.beyond import NEIGHBOURS, beyond_accuracy
from resdom.evaluation.evaluate import evaluate as run_evaluation
from resdom.evaluation.ranking import MISS
from resdom.experiments import canonical_label, model_variant, recipe_protocol, variant_train_values
from resdom.io import atomic_write_json, atomic_write_text, read_jsonl, warnings_filter
from resdom.limits import short
from resdom.models.config import ALL_MODEL_FIELDS, ModelConfig
from resdom.names import MODELS, PARTS
from resdom.recommend import external_ids, recommend, similar_items
from resdom.report.figures import result_figure
from resdom.rundir import (
    RUN,
    RunDir,
    check_output_folder,
    check_output_inputs,
    output_lock,
    own_entries,
    refuse_cell,
    require_folder_path,
    write_marker,
)
from resdom.runs import checkpoint_id, save_checkpoint
from resdom.runs import load_run as read_run
from resdom.training.config import TrainConfig, make_train_config, resolve_configs
from resdom.training.trainer import fit as run_training

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from matplotlib.figure import Figure

    from resdom.evaluation.evaluate import EvalResult
    from resdom.models import SequentialRecommender
    from resdom.training.trainer import EpochCallback

__all__ = ["Diagnosis", "Fitted", "diagnose", "evaluate", "fit", "load_run", "load_split", "prepare_split"]


# ------------------------------------------------------------------------------------------------- data


# ``prepare_split(source, protocol="auto", quantile=0.9, data_dir=None, fmt=None, **options)`` (data.prepare): a
# registered name, ``synthetic[:knobs]``, a path, or a pandas DataFrame (``prepare_split(df, user_col="customer",
# item_col="product", time_col="ts")``; ``time_col=None`` or ``no_time=True``: no timestamps, row order).


def load_split(path: str | Path) -> SplitData:
    """The split saved in folder ``path`` (``resdom data split``, ``SplitData.save``, or a run's ``data/``).

    Parameters
    ----------
    path
        The folder: ``arrays.npz`` and ``manifest.json``.

    Returns
    -------
    SplitData
        ``train`` (CSR sequences of item ids 1..n_items), ``valid`` / ``test`` (input sequences and one target
        each); ``manifest`` says how it was made.
    """
    return SplitData.load(path_argument(path, "path"))


# ---------------------------------------------------------------------------------------------- fitted


@dataclass
class Fitted:
    """A trained (or imported) model in memory, with what it was trained on and how.

    ``model``: the best checkpoint (by validation ``train_config.metric``), in eval mode; it maps left-padded
    item ids int64 (B, L) to states (B, L, d), scored against ``model.item_embeddings()`` (n_items + 1, d).
    ``split``: its data. ``model_config`` / ``train_config``: the resolved configs (``train_config`` is None for
    an imported model). ``metrics``: what ``metrics.json`` holds (``{"valid": {"metrics", "n_users"},
    "test": {...}, "best_epoch", "epochs_run", "stopped", ...}``; {} when the model was not trained here).
    ``history``: one record per epoch (``metrics.jsonl``: loss, validation metrics, seconds). ``config``: the
    run's ``config.json``; ``sidecar``: the checkpoint's ``model.json``; ``checkpoint``: the weights' hash.
    ``directory``: the run directory it was written to or loaded from (None: in memory only).
    """

    model: SequentialRecommender
    split: SplitData
    model_config: ModelConfig
    train_config: TrainConfig | None
    metrics: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    sidecar: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    directory: Path | None = None

    @property
    def name(self) -> str:
        """The model's name (``sasrec``, ``duorec``, ...)."""
        return str(self.model_config.name)

    def __repr__(self) -> str:
        test = (self.metrics.get("test") or {}).get("metrics") or {}
        shown = ", ".join(f"{k} {test[k]:.4f}" for k in ("HR@10", "NDCG@10") if k in test)
        where = f", directory={str(self.directory)!r}" if self.directory is not None else ""
        return (f"Fitted({self.name}, {self.split.n_items} items, best epoch {self.metrics.get('best_epoch', '-')}"
                f"{', test ' + shown if shown else ''}{where})")

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write a run directory at ``path`` that every CLI command reads (``resdom evaluate / diagnose / report``):
        ``config.json``, ``data/``, ``model.safetensors`` + ``model.json``, ``metrics.json``, ``metrics.jsonl``.
        No resume state is written: ``resdom train`` there needs ``--force`` (which moves it aside and trains anew).

        Parameters
        ----------
        path
            The run directory to write; a non-empty one is refused unless ``overwrite``.
        overwrite
            Replace a run directory at ``path``: the old run is moved aside to ``PATH.replaced-K``, nothing deleted;
            a folder of other files and a results-store cell are refused even then.

        Returns
        -------
        Path
            ``path``; ``directory`` and ``checkpoint`` then name it and its weights.
        """
        files = RunDir(path_argument(path, "path"))
        overwrite = flag(overwrite, "overwrite")  # overwrite="no" would be true
        require_folder_path(files.dir, "path")  # a file there, or above it (a NotADirectoryError at data/)
        refuse_cell(files.dir, "path")
        check_output_inputs(files.dir, "path", {"the split": self.split.folder}, read_whole=("the split",))

        def replaced() -> bool:
            if not (files.dir.is_dir() and own_entries(files.dir)):
                return False
            if not overwrite:
                raise ResdomError(f"{files.dir}: exists and is not empty (choose another path, or overwrite=True)")
            # a run is replaced, never a folder of other files; the old run is moved aside, not deleted
            return check_output_folder(files.dir, "path", runs=False, force=True)

        with output_lock(files.dir, replaced, "path"), _in_use(self.model):  # one writer at a time: checked again
            return self._save(files)

    def _save(self, files: RunDir) -> Path:
        """``save``'s files, into ``files.dir`` (absent or empty, and locked)."""
        self.split.save(files.data)
        extra = {k: v for k, v in self.sidecar.items() if k not in ("format", "model", "versions")}
        save_checkpoint(files.model, self.model, extra)
        checkpoint = checkpoint_id(files.model)
        atomic_write_json(files.config, self.config)
        if self.metrics:
            atomic_write_json(files.final, {**self.metrics, "checkpoint": checkpoint})
        else:
            files.final.unlink(missing_ok=True)
        atomic_write_text(files.log, "".join(json.dumps(r) + "\n" for r in self.history))
        write_marker(files.dir, RUN)
        self.checkpoint, self.directory = checkpoint, files.dir
        if self.metrics:
            self.metrics = {**self.metrics, "checkpoint": checkpoint}
        return files.dir


    def recommend(self, users: Sequence[Any] | str | int | None = None, k: int = 10, filter_seen: bool | None = None,
                  alpha: float = 1.0, *, sequences: Any = None, items: Sequence[Any] | str | int | None = None,
                  exclude: Sequence[Any] | str | int | None = None, history: str = "all",
                  batch_size: int = 256) -> pd.DataFrame:
        """The top ``k`` items for each user (or session), in the data's own (external) ids: the ids of the file or
        DataFrame the split was prepared from, exactly as read. Works for imported models as for trained ones
        (``resdom.recommend``).

        Parameters
        ----------
        users
            External user ids (matched as text: ``7`` and ``"7"`` are the same id, ``"007"`` is another); one id
            alone (``"u7"``) is that user; None: every user. An unknown id is a ResdomError naming it.
        k
            Items per user (>= 1).
        filter_seen
            Never recommend an item of the user's input. None: the split's setting (``SplitData.filter_seen``:
            True but for data sets that keep seen items, as evaluation).
        alpha
            The residual scale at inference, in [0, 1] (1: the model as trained; docs/spec.md §4).
        sequences
            Sessions to score instead of users, in external item ids, oldest first: a dict {session id: item ids}
            or a pandas Series of item-id lists indexed by session id (``df.groupby("session")["item"].apply(list)``),
            or a list of item-id lists (ids 0, 1, ...); item ids not in the data are left out and named in
            ``frame.attrs["note"]``.
        items
            A whitelist: the only items that may be recommended (external ids; unknown ones left out with a note).
        exclude
            Items never recommended (external ids; unknown ones left out with a note).
        history
            ``"all"`` (each user's whole known sequence: what to recommend next), or ``"test"`` / ``"valid"``
            (that part's inputs, as evaluation scores them; ranks then equal evaluation's).
        batch_size
            Users scored at once (memory only: a user's list and scores do not depend on it, nor on the other
            users asked; docs/limits.md).

        Returns
        -------
        pandas.DataFrame
            RecTools' columns: user_id, item_id, score, rank (1..k), ``k`` rows per user, best first (fewer for a
            user with fewer recommendable items: ``frame.attrs["note"]`` counts and names them).
        """
        with _in_use(self.model):
            return recommend(self.model, self.split, users, k, sequences=sequences, items=items, exclude=exclude,
                             filter_seen=filter_seen, alpha=alpha, history=history, batch_size=batch_size)

    def similar_items(self, items: Sequence[Any] | str | int | None = None, k: int = 10) -> pd.DataFrame:
        """The ``k`` items nearest each of ``items`` by cosine over the model's output item embeddings, the item
        itself excluded.

        Parameters
        ----------
        items
            External item ids (None: every item); unknown ids are left out and named in ``frame.attrs["note"]``.
        k
            Neighbours per item (>= 1).

        Returns
        -------
        pandas.DataFrame
            RecTools' columns: target_item_id, item_id, score (the cosine), rank (1..k).
        """
        with _in_use(self.model):
            return similar_items(self.model, self.split, items, k)


def load_run(path: str | Path, device: str = "auto") -> Fitted:
    """A run directory as a Fitted.

    Parameters
    ----------
    path
        The run directory (trained by ``resdom train`` / ``fit(out=...)``, imported, or ``Fitted.save``).
    device
        ``auto`` (cuda, then mps, then cpu), ``cpu``, ``cuda`` or ``mps``.

    Returns
    -------
    Fitted
        Its best model on ``device``, its split, configs, metrics and epoch history.
    """
    run = read_run(path_argument(path, "path"), device=_device(device))
    files = RunDir(run.directory)
    train = run.config.get("train")
    try:
        train_config = make_train_config(**train) if isinstance(train, dict) else None
    except ResdomError as e:
        raise ResdomError(f"{files.config}: {e}") from None
    metrics = {}
    if files.final.is_file():
        try:
            metrics = json.loads(files.final.read_text(encoding="utf-8"))
        except OSError as e:  # no permission, an I/O error: not a damaged file to delete
            raise ResdomError(f"{files.final}: cannot read it ({e.strerror})") from None
        except ValueError as e:
            raise ResdomError(f"{files.final}: cannot read it ({e}); delete it or train the run again") from None
    return Fitted(run.model, run.split, run.model.cfg, train_config,
                  metrics if isinstance(metrics, dict) else {}, read_jsonl(files.log), run.config, run.sidecar,
                  run.checkpoint, run.directory)


# ------------------------------------------------------------------------------------------------- fit


def _import_tqdm_quietly() -> None:
    """Import ``tqdm.auto`` (training's and the diagnostics' bars) without the warning it gives in a notebook that
    lacks ipywidgets: resdom draws bars only on a terminal and prints plain lines elsewhere."""
    with warnings_filter("ignore"):
        import tqdm.auto  # noqa: F401


def _config_fields() -> tuple[set[str], set[str]]:
    return set(ALL_MODEL_FIELDS) - {"name", "n_items"}, set(TrainConfig.model_fields)


def _route_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``fit``'s keyword options -> (model values, train values), by field name; an unknown one is a ResdomError
    naming it and the closest field."""
    model_fields, train_fields = _config_fields()
    model_values, train_values = {}, {}
    for key, value in options.items():
        if key in model_fields:
            model_values[key] = value
        elif key in train_fields:
            train_values[key] = value
        else:
            known = sorted(model_fields | train_fields)
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"options: {', '.join(known)}"
            raise ResdomError(f"fit: unknown option {key!r} ({hint})")
    return model_values, train_values


def fit(
    split: SplitData,
    model: str | ModelConfig = "sasrec",
    *,
    out: str | Path | None = None,
    device: str | torch.device = "auto",
    progress: bool | None = None,
    data_info: dict[str, Any] | None = None,
    callbacks: Sequence[EpochCallback] = (),
    train: TrainConfig | None = None,
    **options: Any,
) -> Fitted:
    """Train ``model`` on ``split.train`` with early stopping on ``split.valid``; returns the best model in memory.

    Parameters
    ----------
    split
        The data (``resdom.prepare_split`` or ``resdom.load_split``).
    model
        A name (``resdom.names.MODELS`` or a variant label such as ``sasrec-tts``, any case) or a ModelConfig.
    out
        A run directory to write (and resume, as ``resdom train --out``); without it training runs in a private
        temporary directory that is removed before returning, so nothing is left on disk (``Fitted.save`` writes
        it later).
    device
        Where to train and where the returned model lives (``auto``: cuda, then mps, then cpu), or a torch.device
        of one of them.
    progress
        tqdm bars (None: on a terminal; elsewhere one line per epoch on stderr; False: silent).
    data_info
        Recorded in ``config.json`` under ``data`` (how the split was obtained).
    callbacks
        ``cb(epoch, record)`` after each epoch (``training.trainer.fit``).
    train
        A resolved TrainConfig, with ``model`` a resolved ModelConfig (``training.config.resolve_configs``) and no
        other options: the trainer receives both as they are, nothing resolved again (``resdom train`` resolves
        its configuration once, before the data is read); it trains on ``train.device`` into ``out``.
    **options
        Any ModelConfig or TrainConfig field by name (``hidden=64, layers=2, max_len=50, epochs=10, lr=1e-3,
        batch_size=256, seed=17, ...``), on top of the model's defaults for the split's protocol and data set (as
        ``resdom train``). ``threads=N`` sets torch's thread count, the process's, for the fit: calls in other
        threads meanwhile run with it too, and the caller's count is back when ``fit`` returns or fails.

    Returns
    -------
    Fitted
        The best checkpoint (by validation ``train_config.metric``) in eval mode, with its split, configurations
        and metrics; ``directory`` is ``out`` (None without it).
    """
    if not isinstance(split, SplitData):
        raise ResdomError(f"split: expected a SplitData (resdom.prepare_split or resdom.load_split), got "
                          f"{type(split).__name__}")
    progress = optional_bool(progress, "progress")  # progress="no" drew the bars
    out = path_argument(out, "out") if out is not None else None
    callbacks = _callbacks(callbacks)
    if train is not None:
        return _fit_resolved(split, model, train, out, progress, data_info, callbacks, options)
    model_values, train_values = _route_options(options)
    _import_tqdm_quietly()
    if isinstance(model, ModelConfig):
        if model.n_items not in (0, split.n_items):
            raise ResdomError(f"model.n_items: {model.n_items} but the split has {split.n_items} items")
        model_values = {**model.model_dump(exclude={"name", "n_items"}), **model_values}
        name = model.name
    elif isinstance(model, str):
        label = canonical_label(model, "model")  # "SASRec", "sasrec-tts", ...
        name, variant = model_variant(label)
        model_values = {**variant, **model_values}
        train_values = {**variant_train_values(label), **train_values}
    else:
        raise ResdomError(f"model: expected a model name ({', '.join(MODELS)}) or a ModelConfig, got "
                          f"{type(model).__name__}")
    device = _device_name(device)  # recorded as train.device
    _device(device)  # an unknown or unavailable device fails before any data is touched
    source = (split.manifest.get("source") or {}).get("name")
    protocol = split.manifest.get("protocol")
    recipe = recipe_protocol(protocol, split.manifest.get("has_timestamps"))  # none: the measured protocol's
    model_cfg, train_cfg = resolve_configs(name, model_values, {**train_values, "device": device}, source=source,
                                           n_items=split.n_items, protocol=recipe)
    info = data_info if data_info is not None else {"source": source, "protocol": protocol}
    if isinstance(model, str) and label != name and data_info is None:
        info["label"] = label  # reports name the run by its variant
    if out is not None:
        run_training(split, model_cfg, train_cfg, out, info, callbacks=callbacks, progress=progress,
                     hooks=(epoch_monitor,))
        return load_run(out, device)
    if launch_env()[1] > 1:
        raise ResdomError("out: needed under torchrun (every process must train into the same run directory)")
    with tempfile.TemporaryDirectory(prefix="resdom-fit-") as tmp:
        run_training(split, model_cfg, train_cfg, tmp, info, callbacks=callbacks, progress=progress,
                     hooks=(epoch_monitor,))
        fitted = load_run(tmp, device)
    fitted.directory = None
    fitted.split.folder = split.folder  # read from there, not from the folder gone with the temporary run
    return fitted


def _callbacks(callbacks: Any) -> tuple[EpochCallback, ...]:
    """``callbacks`` as a tuple of functions; a ResdomError before training where it is no sequence of them (one
    function alone was a TypeError from the trainer once the first epoch had run)."""
    if callable(callbacks) or isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Iterable):
        hint = " (one callback: callbacks=[cb])" if callable(callbacks) else ""
        raise ResdomError(f"callbacks: expected a list of functions cb(epoch, record), got "
                          f"{type(callbacks).__name__}{hint}")
    given = tuple(callbacks)
    for cb in given:
        if not callable(cb):
            raise ResdomError(f"callbacks: expected functions cb(epoch, record), got {type(cb).__name__} "
                              f"{short(cb, 40)}")
    return given


def _fit_resolved(split: SplitData, model: Any, train: TrainConfig, out: str | Path | None, progress: bool | None,
                  data_info: dict[str, Any] | None, callbacks: Sequence[EpochCallback],
                  options: dict[str, Any]) -> Fitted:
    """``fit`` of a resolved configuration: ``model`` a ModelConfig (its n_items set from the split where 0) and
    ``train`` a TrainConfig, handed to the trainer as they are."""
    if not isinstance(train, TrainConfig) or not isinstance(model, ModelConfig) or options:
        raise ResdomError("train: a resolved TrainConfig goes with a resolved ModelConfig as model and no other "
                          f"options (got model {type(model).__name__}, options {sorted(options)})")
    if model.n_items not in (0, split.n_items):
        raise ResdomError(f"model.n_items: {model.n_items} but the split has {split.n_items} items")
    model_cfg = model if model.n_items else model.model_copy(update={"n_items": split.n_items})
    _import_tqdm_quietly()
    _device(train.device)
    info = data_info if data_info is not None else {"source": (split.manifest.get("source") or {}).get("name"),
                                                     "protocol": split.manifest.get("protocol")}
    if out is None:
        raise ResdomError("out: a resolved configuration trains into a run directory (fit(..., out=...))")
    run_training(split, model_cfg, train, out, info, callbacks=callbacks, progress=progress, hooks=(epoch_monitor,))
    return load_run(out, train.device)


# -------------------------------------------------------------------------------------------- evaluate


def _device_name(device: str | torch.device) -> str:
    """``device`` as ``train.device`` records it: a torch.device by its name (``torch.device("cuda")`` is "cuda"; one
    GPU of several, "cuda:1", is then refused by ``resolve_device``, naming CUDA_VISIBLE_DEVICES)."""
    import torch

    return str(device) if isinstance(device, torch.device) else device


def _device(device: str | torch.device) -> torch.device:
    import torch

    if isinstance(device, torch.device):
        return device
    return resolve_device(str(device), "device")


def _positive_ints(values: Sequence[int] | str, what: str) -> tuple[int, ...]:
    """``values`` (a sequence, a numpy array of one dimension, or comma-separated text as the CLI takes it) as a
    tuple of distinct ints from 1 to ``MAX_CUTOFF``; a ResdomError naming ``what`` otherwise (a value twice, as
    ``--cutoffs 10,10``, is refused: the metrics would hold it once)."""
    if isinstance(values, np.ndarray) and values.ndim == 1:  # np.array([5, 10]) was "expected a sequence"
        values = values.tolist()
    try:
        out = no_repeats(integers(values, 1, "(1, 5, 10)"), "value")
    except ValueError as e:
        raise ResdomError(f"{what}: {e}") from None
    big = [v for v in out if v > MAX_CUTOFF]
    if big:
        raise ResdomError(f"{what}: every value must be an integer from 1 to {MAX_CUTOFF:,} (got {big[0]!r})")
    return out


def _model_and_split(model: Any, split: SplitData | EvalSet | None, what: str) -> tuple[Any, Any]:
    """(Diagnosable model, split or evaluation set): a Fitted gives its own split where ``split`` is None."""
    if isinstance(model, Fitted):
        model, split = model.model, model.split if split is None else split
    try:
        check_model(model)
    except TypeError as e:
        raise ResdomError(f"model: {e}") from None
    if split is None:
        raise ResdomError(f"split: {what} needs the data (a SplitData) when the model is not a Fitted")
    if not isinstance(split, (SplitData, EvalSet)):
        hint = f" (the part is chosen by part={split!r})" if isinstance(split, str) and split in PARTS else ""
        raise ResdomError(f"split: expected a SplitData or EvalSet, got {type(split).__name__} "
                          f"{short(split, 40)}{hint}")
    _check_items(model, split)
    return model, split


def _check_items(model: Any, split: SplitData | EvalSet) -> None:
    """Refuse data whose items the model does not score as its own: another split's (an item id past the model's
    embeddings was an IndexError from inside torch; fewer items ranked the model's others too)."""
    n_model = int(model.n_items)
    if isinstance(split, SplitData):
        if split.n_items != n_model:
            raise ResdomError(f"split: {split.n_items:,} items, but the model scores {n_model:,} (a split other than "
                              "the one it was trained on?)")
        return
    top = max(int(split.targets.max(initial=0)), int(split.inputs.items.max(initial=0)))
    if top > n_model:
        raise ResdomError(f"split: the EvalSet holds item id {top:,}, past the model's {n_model:,} items")


def _check_part(part: str) -> str:
    return choice(part, PARTS, "part")  # any case; a did-you-mean


# a lock per model object: evaluate, diagnose, recommend and similar_items run on it one at a time (_in_use)
_IN_USE: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_IN_USE_GUARD = threading.Lock()
_ANY_MODEL = threading.RLock()  # a model object that takes no weak reference


@contextlib.contextmanager
def _in_use(model: Any) -> Iterator[None]:
    """Hold ``model`` for one API call: calls on one model object in several threads run one at a time. A diagnosis
    scales the residual (``residual_scale``) and records every block (``recording``) on the model itself, and
    ``recommend(alpha=...)`` scales it too: an ``evaluate`` of the same model in another thread meanwhile returned
    the scaled model's metrics without a word, and two diagnoses at once failed with an internal ValueError."""
    with _IN_USE_GUARD:
        try:
            lock = _IN_USE.get(model)
            if lock is None:
                lock = _IN_USE[model] = threading.RLock()
        except TypeError:  # not weakly referable (or not hashable): one lock for every such model
            lock = _ANY_MODEL
    with lock:
        yield


def _on_device(model: Any, device: torch.device) -> Any:
    """``model`` moved to ``device`` (in place, as ``nn.Module.to``) where it is a torch module; its weights stay
    ordinary tensors inside a caller's ``torch.inference_mode()`` (``runs.model_to_load``)."""
    import torch

    if not hasattr(model, "to"):
        return model
    with torch.inference_mode(False):
        return model.to(device)


def evaluate(
    model: Fitted | Any,
    split: SplitData | EvalSet | None = None,
    *,
    part: str = "test",
    cutoffs: Sequence[int] = (1, 5, 10, 20),
    filter_seen: bool | None = None,
    beyond: bool = False,
    neighbours: int | None = None,
    batch_size: int = 256,
    device: str | torch.device = "auto",
    progress: bool = False,
) -> EvalResult:
    """Full-ranking HR@K and NDCG@K (K in ``cutoffs``) and MRR of ``model`` on ``split``'s ``part``.

    Parameters
    ----------
    model
        A Fitted or any Diagnosable (``encode`` int64 (B, L) -> (B, L, d), ``item_embeddings`` (N + 1, d)); it is
        moved to ``device``.
    split
        A SplitData (its ``part`` is used), an EvalSet, or None for a Fitted's own split.
    part
        ``valid`` or ``test`` (of a SplitData; an EvalSet is scored as it is, and ``valid`` is refused there).
    cutoffs
        The K of HR@K and NDCG@K (each >= 1).
    filter_seen
        Items of each user's input score -inf (a target in its own input is then a miss). None: the split's
        setting (``SplitData.filter_seen``: True except for data sets that keep seen items, such as
        ``diginetica``), True for a bare EvalSet.
    beyond
        Also the beyond-accuracy metrics of the same top-K lists (``evaluation.beyond``: Coverage@K, AvgPop@K,
        Novelty@K, Echo@K, EchoNN@K; popularity counted on the split's ``train``, so a SplitData is needed).
    neighbours
        With ``beyond``: the last item's nearest items (cosine over the output embeddings) that EchoNN@K counts
        (None: 10).
    batch_size
        Users ranked at once.
    device
        ``auto`` (cuda, then mps, then cpu), ``cpu``, ``cuda`` or ``mps``, or a torch.device.
    progress
        Progress on stderr: a bar of the users on a terminal, a plain line every 30 s in a log.

    Returns
    -------
    EvalResult
        ``metrics`` (means over ``n_users``), ``to_dict()``, ``to_frame()``, and ``users``: one row per user
        (user_id, item_id (the target), rank (0-based, pessimistic; <NA> for a target filtered out), HR@K,
        NDCG@K, RR, and with ``beyond`` each user's AvgPop@K, Novelty@K, Echo@K, EchoNN@K), in external ids.
    """
    model, data = _model_and_split(model, split, "evaluate")
    cutoffs = _positive_ints(cutoffs, "cutoffs")
    batch_size, filter_seen = positive_int(batch_size, "batch_size"), optional_bool(filter_seen, "filter_seen")
    beyond, progress = flag(beyond, "beyond"), flag(progress, "progress")
    if neighbours is not None and not beyond:  # EchoNN@K alone counts them: it would be ignored without a word
        raise ResdomError("neighbours: counts for EchoNN@K of beyond=True; pass beyond=True too, or leave it out")
    neighbours = positive_int(neighbours, "neighbours") if neighbours is not None else NEIGHBOURS
    if beyond and not isinstance(data, SplitData):
        raise ResdomError("beyond: needs a SplitData (popularity is counted on its train), not a bare EvalSet")
    part = _check_part(part)
    if isinstance(data, EvalSet) and part != "test":  # it chooses a SplitData's part: ignored without a word
        raise ResdomError(f"part: {part!r} chooses a part of a SplitData; an EvalSet is scored as it is (pass the "
                          "SplitData, or leave part out)")
    evalset = data if isinstance(data, EvalSet) else getattr(data, part)
    if len(evalset) == 0:
        raise ResdomError(_no_users(data, part))
    dev = _device(device)
    if filter_seen is None:
        filter_seen = data.filter_seen if isinstance(data, SplitData) else True
    with _in_use(model):
        model = _on_device(model, dev)
        result = run_evaluation(model, evalset, filter_seen=filter_seen, batch_size=batch_size, device=dev,
                                ks=cutoffs, return_ranks=True, progress=progress)
        values: dict[str, Any] = {}
        if beyond:
            more, values = beyond_accuracy(model, evalset, data.train, filter_seen=filter_seen, ks=cutoffs,
                                           neighbours=neighbours, batch_size=batch_size, device=dev,
                                           progress=progress)
            result.metrics.update(more)
    result.users = _per_user(result.ranks, evalset, data if isinstance(data, SplitData) else None, cutoffs, values)
    return result


def _no_users(data: SplitData | EvalSet, part: str) -> str:
    """The error for an evaluation part without users (protocol none holds nothing out)."""
    if isinstance(data, SplitData) and data.manifest.get("protocol") == "none":
        again = ("evaluate part='valid' (its monitoring slice)" if len(data.valid) else
                 "prepare it with holdout_users=N (then part='valid')")
        return (f"part: this split (protocol none) holds no {part} users: nothing is held out; evaluate a "
                f"loo or gts split of the same data, or {again}")
    return f"part: the {part} set holds no users" if isinstance(data, SplitData) else "split: the EvalSet is empty"


def _per_user(ranks: Any, evalset: EvalSet, split: SplitData | None, cutoffs: tuple[int, ...],
              values: dict[str, Any]) -> pd.DataFrame:
    """One row per user of ``evalset``: ids (external where ``split`` has them), rank, HR@K, NDCG@K, RR (as
    ``ranking.metrics_from_ranks`` averages them), then ``values`` (``beyond.per_user``)."""
    import pandas as pd

    ranks = np.asarray(ranks, dtype=np.int64)
    missed = ranks >= MISS
    r = ranks.astype(np.float64)
    users = external_ids(split.user_labels if split is not None else None, evalset.inputs.users)
    items = external_ids(split.item_labels if split is not None else None, evalset.targets)
    frame = pd.DataFrame({"user_id": users, "item_id": items,
                          "rank": pd.array(np.where(missed, 0, ranks), dtype="Int64")})
    frame.loc[missed, "rank"] = pd.NA
    ks = sorted(cutoffs)
    for k in ks:
        frame[f"HR@{k}"] = ((r < k) & ~missed).astype(np.float64)
    for k in ks:
        frame[f"NDCG@{k}"] = np.where((r < k) & ~missed, 1.0 / np.log2(r + 2.0), 0.0)
    frame["RR"] = np.where(missed, 0.0, 1.0 / (r + 1.0))
    for name, v in values.items():
        frame[name] = v
    return frame


# -------------------------------------------------------------------------------------------- diagnose


def diagnose_run(run_dir: str | Path, options: DiagnoseOptions | None = None, *, device: str | torch.device = "auto",
                 progress: bool = False, **values: Any) -> dict[str, Any]:
    """Diagnose the run directory ``run_dir`` and write ``RUN_DIR/diagnostics/``: what ``resdom diagnose`` does.

    Parameters
    ----------
    run_dir
        A run directory (``resdom train``, ``fit(out=...)``, ``Fitted.save`` or an importer).
    options
        The validated options (``diagnostics.options.DiagnoseOptions``); or give them as ``values`` (the same
        fields, ``what="all"`` including the per-user evidence ``users``), validated here.
    device
        Where to compute (``auto``: cuda, then mps, then cpu); under torchrun each process diagnoses its shard.
    progress
        Progress on stderr: bars on a terminal, a plain line every 30 s in a log.
    **values
        The options' fields by name, instead of ``options``.

    Returns
    -------
    dict
        The summary, as written to ``RUN_DIR/diagnostics/summary.json``: every diagnostic's headline numbers.
    """
    return run_all(path_argument(run_dir, "run_dir"), options, device=str(_device(device)), progress=progress,
                   **values)




class NotInDiagnosis(ResdomError, KeyError):
    """A diagnostic a Diagnosis does not hold (unknown, or not computed): a ResdomError, as every mistake of the
    API's user, and a KeyError, as ``diagnosis[name]`` of a mapping (``plot`` and ``to_frame`` raised a bare
    KeyError, its message in quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class Diagnosis:
    """The diagnostics of one model on one part of a split, as result objects by name (``diagnostics.registry``).

    ``results``: {name: result} of the diagnostics computed, in canonical order; ``diagnosis.<name>`` is the result
    of diagnostic ``<name>`` (None: not computed). Each result has ``to_dict()`` (the JSON of
    ``RUN_DIR/diagnostics/<name>.json``) and ``to_frame()`` (a pandas table, the rows of its CSV file);
    ``plot(name)`` draws the report's figure of it (``report.figures``, from the JSON: a result holds no plotting
    of its own). ``seconds``: what each took.
    """

    part: str
    model: str = "model"
    results: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        if name in REGISTRY:  # diagnosis.hrli, ...: only reached for names that are not attributes
            return self.__dict__.get("results", {}).get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getitem__(self, name: str) -> Any:
        return self._result(name)

    def _result(self, name: Any) -> Any:
        """The result of diagnostic ``name`` (any case); a ``NotInDiagnosis`` naming it where it is unknown or was
        not computed."""
        key = name.strip().lower() if isinstance(name, str) else name
        if not isinstance(key, str) or key not in REGISTRY:  # a list or dict: a TypeError of the lookup otherwise
            raise NotInDiagnosis(f"name: unknown diagnostic {name!r} (one of {', '.join(REGISTRY)})")
        if key not in self.results:
            raise NotInDiagnosis(f"name: {key} was not computed (diagnose(..., what=...) chose "
                                 f"{', '.join(self.results) or 'none'})")
        return self.results[key]

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The JSON of every diagnostic computed.

        Returns
        -------
        dict
            {name: result.to_dict()}, what ``RUN_DIR/diagnostics/<name>.json`` holds, in canonical order.
        """
        return {n: r.to_dict() for n, r in self.results.items()}

    def to_frame(self, name: str | None = None) -> pd.DataFrame | dict[str, pd.DataFrame]:
        """The table of one diagnostic, or of every one computed.

        Parameters
        ----------
        name
            A computed diagnostic's name (``hrli``, ``mixing``, ...); None: every computed diagnostic.

        Returns
        -------
        pandas.DataFrame or dict
            ``self[name].to_frame()`` (the rows of its CSV file); without a name {name: DataFrame} in canonical
            order (as ``to_dict()`` gives every JSON).
        """
        if name is None:
            return {n: r.to_frame() for n, r in self.results.items()}
        return self._result(name).to_frame()

    def plot(self, name: str = "mixing", per_position: bool = False) -> Figure:
        """The report's figure of one diagnostic, drawn from ``self[name].to_dict()`` by
        ``report.figures.result_figure``.

        Parameters
        ----------
        name
            A computed diagnostic's name.
        per_position
            Mixing only: the last layer's ratio against the offset from the last position instead of the ratio
            by stage.

        Returns
        -------
        matplotlib.figure.Figure
            Labelled with the model's name.
        """
        result = self._result(name)
        per_position = flag(per_position, "per_position")  # per_position="no" would be true
        key = name.strip().lower()
        if per_position and key != "mixing":
            raise ResdomError(f"per_position: only the mixing figure has one (not {name!r})")
        return result_figure("mixing_per_position" if per_position else key, result.to_dict(), self.model)

    def __repr__(self) -> str:
        return f"Diagnosis(part={self.part!r}, computed={list(self.results)})"


def diagnose(
    model: Fitted | Any,
    split: SplitData | None = None,
    what: str | Sequence[str] = "all",
    *,
    part: str = DEFAULTS.part,
    recency: Sequence[int] = DEFAULTS.recency,
    cutoffs: Sequence[int] = DEFAULTS.cutoffs,
    definition: str = DEFAULTS.definition,
    seeds: Sequence[int] = DEFAULTS.seeds,
    alphas: Sequence[float] = DEFAULTS.alphas,
    layers: Sequence[int] | None = DEFAULTS.layers,
    per_head: bool = DEFAULTS.per_head,
    batch_size: int = DEFAULTS.batch_size,
    device: str = "auto",
    progress: bool = False,
) -> Diagnosis:
    """The diagnostics of last-item reliance of ``model`` on ``split``'s ``part``, in memory (nothing written).

    Parameters
    ----------
    model
        A Fitted or any model satisfying ``resdom.models.interface.Diagnosable`` (trained here or imported by an
        adapter); it is moved to ``device``.
    split
        A SplitData (None: a Fitted's own).
    what
        ``"all"`` or some of the registered diagnostics (``resdom.records``: shuffle, hrli, mixing, alpha,
        recovery), a list or a comma-separated string.
    part, recency, cutoffs, definition, seeds, alphas, layers, per_head, batch_size
        ``diagnostics.options.DiagnoseOptions``'s fields, validated there, with its defaults (``DEFAULTS``):
        ``part`` valid or test; ``recency`` and ``cutoffs`` the k and K of HRLkI@K (unfiltered rankings);
        ``definition`` the mixing ratio, ``norm_of_sums`` or ``sum_of_norms``; ``seeds`` the shuffle seeds;
        ``alphas`` residual scales in [0, 1] of the sweep and of recovery, applied to ``layers`` (None: every
        block); ``per_head`` per-head mixing ratios too; ``batch_size`` users per batch.
    device
        Where to compute (``auto``: cuda, then mps, then cpu).
    progress
        Progress on stderr: bars on a terminal, a plain line every 30 s in a log.

    Returns
    -------
    Diagnosis
        The result objects by name, in canonical order (``to_dict``: the JSON file; ``to_frame``: its table;
        ``plot``: the report's figure). Recovery selects alpha* on ``valid`` and reports ``test`` whatever
        ``part`` says. The numbers equal ``resdom diagnose``'s: both run ``diagnostics.runner.compute``.
    """
    label = model.name if isinstance(model, Fitted) else str(getattr(getattr(model, "cfg", None), "name", "model"))
    progress = bool(optional_bool(progress, "progress"))
    model, data = _model_and_split(model, split, "diagnose")
    if not isinstance(data, SplitData):
        raise ResdomError(f"split: diagnose needs a SplitData (recovery uses valid and test), got "
                          f"{type(data).__name__}")
    part = _check_part(part)  # any case
    if len(getattr(data, part)) == 0:
        raise ResdomError(_no_users(data, part))
    options = diagnose_options(what=parse_what(what), part=part, recency=recency, cutoffs=cutoffs,
                               definition=definition, seeds=seeds, alphas=alphas, layers=layers, per_head=per_head,
                               batch_size=batch_size)  # what: the registered diagnostics (users.npz is run_all's)
    refuse_unused(options, [k for k in USED_BY if getattr(options, k) != getattr(DEFAULTS, k)])
    chosen = plan(model, data, options)  # mixing and alpha need attention blocks (GRU4Rec has none)
    dev = _device(device)
    _import_tqdm_quietly()
    with _in_use(model):
        model = _on_device(model, dev)
        done = compute(chosen, model, data, options, device=dev, progress=progress)
    return Diagnosis(part, label, done.results, done.seconds)
