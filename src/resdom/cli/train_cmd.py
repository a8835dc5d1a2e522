"""``resdom train`` and ``resdom evaluate``.

Config precedence (lowest first): per-model defaults and BSARec presets, a named variant's values (``--model
sasrec-tts``), ``--config FILE.yaml`` or a shipped configuration's name (sections ``model:``, ``train:`` and
``data:``), ``--set section.field=value`` (values parsed as YAML scalars), then the explicit options ``--epochs``,
``--seed``, ``--device`` and the data options (which win over the file's ``data:``).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from resdom.api import evaluate as run_evaluation
from resdom.api import fit
from resdom.bounded import BoundedSafeLoader, load_yaml, refuse_special
from resdom.checks import choice, launch_rank
from resdom.cli.data_options import (
    SOURCE_HELP,
    DataOptions,
    data_config_values,
    data_flag,
    data_options,
    is_split_dir,
    split_manifest,
    with_config_data,
)
from resdom.cli.values import interrupted, one_filter, parse_cutoffs, positive_int, progress_option, say
from resdom.data.download import data_folders
from resdom.data.prepare import source_paths
from resdom.data.readers import not_text, refuse_binary
from resdom.data.sequences import SplitData
from resdom.distributed import resolve_device, setup, world_size
from resdom.errors import OptionError, ResdomError
from resdom.evaluation.beyond import NEIGHBOURS
from resdom.experiments import canonical_label, model_variant, recipe_protocol, variant_train_values
from resdom.io import atomic_write_bytes, csv_text
from resdom.models.config import ALL_MODEL_FIELDS, MODEL_CONFIGS, ModelConfig, drop_flat_defaults
from resdom.names import CUTOFFS, MODELS, PARTS, metric_key
from resdom.records import counted
from resdom.resources import reference_config, reference_configs
from resdom.rundir import check_output_file, check_output_folder, check_output_inputs, move_aside
from resdom.runs import load_run
from resdom.training.batches import trained_rows
from resdom.training.config import TrainConfig, resolve_configs, with_objective
from resdom.training.objectives import get_objective

SECTIONS = ("model", "train")


def _fields(section: str) -> set[str]:
    """The field names of a section: every model's fields (the model's own are checked once it is known)."""
    return set(ALL_MODEL_FIELDS) if section == "model" else set(TrainConfig.model_fields)


def _check_field(section: str, key: str, where: str) -> None:
    """ResdomError naming ``section.key`` (and the closest real field) when ``key`` is not a config field."""
    known = _fields(section)
    if key not in known:
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f" (did you mean {section}.{close[0]}?)" if close else f" (known: {', '.join(sorted(known))})"
        raise ResdomError(f"{where}: unknown field {section}.{key}{hint}")


# What a run's own config.json (or a results-store cell's) holds beside model and train: a record of how it came to
# be, not settings; ``--config RUN/config.json`` reruns the run from its record (its ``data`` is a record too).
RECORD_SECTIONS = ("data", "versions", "label", "imported_from")


def config_path(path: Path) -> Path:
    """``path`` itself where it is a file, else the shipped reference configuration of that name
    (``resdom config list``: ``--config sasrec_loo``); a ResdomError naming both otherwise."""
    if path.is_file():
        return path
    shipped = reference_config(path)
    if shipped is not None:
        return shipped
    if path.is_dir():
        run = path / "config.json"
        hint = f" (a run's own configuration is {run})" if run.is_file() else ""
        raise ResdomError(f"{path}: is a folder; give a YAML config file{hint}")
    raise ResdomError(f"{path}: config file not found (nor a shipped configuration: "
                      f"{', '.join(reference_configs())}; see `resdom config list`)")


def read_config_file(path: Path) -> dict[str, dict[str, Any]]:
    """A YAML file (or a shipped configuration's name) with optional ``model:``, ``train:`` and ``data:`` mappings
    -> {"model": {...}, "train": {...}} plus "data" (DataOptions fields) where the file has a ``data:`` section.

    ``data:`` holds the data options without their dashes (protocol, quantile, k_core, format, user_col, ...), as
    ``resdom config show`` prints them. A run's saved ``config.json`` is accepted too: its record sections (its
    ``data`` included) are skipped, and ``model.n_items`` (set from the data) is dropped; the split it records
    (protocol, quantile) is kept apart as "record", so ``train`` can say where its own split differs."""
    import yaml

    refuse_special(path)  # a device or FIFO: refused before it is looked up or opened
    path = config_path(path)
    refuse_binary(path, advice=False)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise not_text(path, raw[: e.start].count(b"\n") + 1, advice=False) from None
    try:
        data = load_yaml(text, str(path), _unique_keys_loader()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ResdomError(f"{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise ResdomError(f"{path}: expected a mapping with sections 'model', 'train' and 'data'")
    is_record = any(k in data for k in RECORD_SECTIONS if k != "data")
    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for section, values in data.items():
        if section in RECORD_SECTIONS and (is_record or section != "data"):
            continue
        if section not in (*SECTIONS, "data"):
            raise ResdomError(f"{path}: unknown section {section!r} (expected 'model', 'train' and/or 'data')")
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ResdomError(f"{path}: section {section!r} must be a mapping of field: value")
        if section == "data":
            out["data"] = data_config_values(values, str(path))
            continue
        for key in values:
            _check_field(section, str(key), str(path))
        out[section].update(values)
    out["model"].pop("n_items", None)
    if is_record or WHOLE_CONFIG.match(text):
        _complete(out, path)
    recorded = data.get("data")
    if is_record and isinstance(recorded, dict):
        manifest = recorded["manifest"] if isinstance(recorded.get("manifest"), dict) else {}
        split = {k: manifest.get(k, recorded.get(k)) for k in ("protocol", "quantile")}
        if isinstance(split["protocol"], str):
            out["record"] = split
    return out


# the first line `resdom config show` writes: the file names every setting (config_cmd.config_text)
WHOLE_CONFIG = re.compile(r"# resdom [^\n:]*: the full configuration of ")


def _complete(out: dict[str, dict[str, Any]], path: Path) -> None:
    """A configuration written whole (a run's ``config.json``, a file of ``resdom config show``) names every setting
    of the resdom that wrote it; one of an older resdom lacks the fields added since, which then took today's
    recipe (a run of 2026-12-05 rerun from its config.json trained Xavier projections and FFN dropout it never
    had). Such a field takes its class default, the value it was added with, which is what the older resdom
    trained; a note names them."""
    name = out["model"].get("name")
    if not isinstance(name, str) or name not in MODEL_CONFIGS or not out["model"]:
        return  # a file without a model section (or of an unknown model: named where it is read) layers as any
    added = []
    for section, cls in (("model", MODEL_CONFIGS[name]), ("train", TrainConfig)):
        if section == "train" and not out["train"]:
            continue
        for key, info in cls.model_fields.items():
            if key not in out[section] and key != "n_items" and not info.is_required():
                out[section][key] = info.get_default(call_default_factory=True)
                added.append(f"{section}.{key} {json.dumps(out[section][key])}")
    if added and launch_rank() == 0:
        say(f"note: {path}: written whole by an older resdom, without {', '.join(added)}: these keep the value that "
            "resdom trained (set them in the file for another)", err=True)


def recorded_split_note(config: Path | None, record: dict[str, Any], manifest: dict[str, Any],
                        saved: bool = False) -> str | None:
    """A note where a run's config.json given as --config records another split (protocol, or gts quantile) than
    the one this run made: a run's data section is a record, not a setting, so a rerun from it splits by the
    options given (auto's protocol by default); None where they agree or nothing is recorded. ``saved``: the
    run trains on a saved split (``resdom data split``), which takes no split option: the data split again does."""
    def named(split: dict[str, Any]) -> str:
        quantile = split.get("quantile")
        gts = split.get("protocol") == "gts" and isinstance(quantile, (int, float))
        return f"{split.get('protocol')}{f' {quantile:g}' if gts else ''}"

    if not record.get("protocol") or named(record) == named(manifest):
        return None
    hint = f"--protocol {record['protocol']}"
    if record["protocol"] == "gts" and isinstance(record.get("quantile"), (int, float)):
        hint += f" --quantile {record['quantile']:g}"
    return (f"note: {config} records a {named(record)} split; this run's is {named(manifest)} (a run's data "
            f"section is a record, not a setting: "
            + (f"split the data again, `resdom data split` with {hint}, to split as it did)" if saved else
               f"give {hint} to split as it did)"))


def _unique_keys_loader() -> type:
    """PyYAML's SafeLoader, but a key given twice in one mapping is an error at its line (YAML requires unique keys;
    PyYAML would keep the last value silently, so an edited copy of a field would be trained without a word)."""
    import yaml

    class UniqueKeysLoader(BoundedSafeLoader):  # within resdom.limits: aliases, their expansion, nesting
        def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN202
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, Hashable):
                    continue  # SafeLoader itself refuses it below, at its line
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"{key!r} is given twice in one mapping",
                                                            key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeysLoader


def parse_set(assignments: list[str]) -> dict[str, dict[str, Any]]:
    """``["model.hidden=64", "train.lr=5e-4"]`` -> {"model": {"hidden": 64}, "train": {"lr": 0.0005}}."""
    import yaml

    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for item in assignments:
        key, sep, raw = item.partition("=")
        section, dot, field = key.strip().partition(".")
        if section == "data" and data_flag(field.strip()) is not None:  # the data settings are options of their own
            raise ResdomError(f"--set {item!r}: a data setting is given by its option, {data_flag(field.strip())} "
                              "(or in a config file's data: section), not by --set")
        if not sep or not dot or section not in SECTIONS or not field:
            raise ResdomError(f"--set {item!r}: expected model.<field>=<value> or train.<field>=<value>")
        _check_field(section, field, f"--set {item!r}")
        out[section][field] = _parse_value(raw, yaml, f"--set {key.strip()}")
    return out


def _parse_value(raw: str, yaml, source: str = "--set") -> Any:  # noqa: ANN001
    """A YAML scalar; also ``5e-4``, which YAML 1.1 reads as a string. Read within ``resdom.limits`` (aliases,
    nesting): a refusal is a ResdomError naming ``source``."""
    try:
        value = load_yaml(raw, source) if raw.strip() else raw
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _merge(*layers: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for layer in layers:
        for s in SECTIONS:
            out[s].update(layer.get(s, {}))
    return out


def _trained_on(split: SplitData, model_cfg: ModelConfig, train_cfg: TrainConfig) -> str:
    """What a protocol-none fit trained on, in words: every interaction, or how many of them and why not the others
    (a sample reads a user's last max_len (+ 1) items, ``batches.trained_rows``; a one-item user has no target)."""
    objective = with_objective(model_cfg, train_cfg).objective  # the model's default where none is set
    assert objective is not None  # with_objective sets it
    layout = get_objective(objective).layout
    used, lengths = trained_rows(split.train, model_cfg.max_len, layout), split.train.lengths
    kept = "(protocol none: nothing held out, the last epoch kept"
    total = int(lengths.sum())
    if int(used.sum()) == total:
        return f"every interaction {kept})"
    window = f"{model_cfg.max_len} + 1" if layout == "all" else str(model_cfg.max_len)
    cut, alone = (used > 0) & (used < lengths), (used == 0) & (lengths > 0)
    n_cut, n_alone = int(cut.sum()), int(alone.sum())
    why = [f"{int((lengths - used)[cut].sum()):,} before the last max_len ({window}) items of {n_cut:,} "
           f"user{'' if n_cut == 1 else 's'}"] if n_cut else []
    why += [f"the only interaction of {n_alone:,} user{'' if n_alone == 1 else 's'} (no next item)"] if n_alone else []
    return f"{int(used.sum()):,} of {total:,} interactions {kept}; not trained on: {', '.join(why)})"


def _format_metrics(metrics: dict[str, float]) -> str:
    return "  ".join(f"{k} {metrics[k]:.4f}" for k in sorted(metrics, key=metric_key))


def busy_machine_hint(threads: int | None, device: str) -> str | None:
    """A one-line hint when torch would run several CPU threads on a machine other processes already keep busy:
    OpenMP threads then wait on each other, and steps were 3x-40x slower on 2 cores beside one busy process."""
    import torch

    if threads is not None or "OMP_NUM_THREADS" in os.environ or not hasattr(os, "getloadavg"):
        return None
    if device != "cpu" and torch.cuda.is_available():
        return None
    n, cores, load = torch.get_num_threads(), os.cpu_count() or 1, os.getloadavg()[0]
    if n > 1 and load >= 0.75 and n + load > cores + 0.5:
        return (f"note: this machine is busy (load {load:.1f} on {cores} cores) and torch would use {n} threads, "
                "which then wait on each other; OMP_NUM_THREADS=1 or --set train.threads=1 is likely much faster")
    return None


DEFAULT_MODEL = "sasrec"
MODEL_HELP = ("sasrec | duorec | bsarec | bert4rec | gru4rec, or a named variant (sasrec-tts, sasrec-gate, ...; "
              "`resdom config list`); any case. Default: the config file's model.name, else sasrec")


@dataclass
class CommandConfig:
    """What ``train`` and ``config show`` resolve from --model, --config, --set and the options: the model's label
    (a model or a MODEL_VARIANTS label), the model it names, the user's model / train values (the variant's values
    lowest, then the file's, --set, the options) and the data options (the command line over the file's data:)."""

    label: str
    name: str
    values: dict[str, dict[str, Any]]
    data: DataOptions
    origins: dict[str, str]  # "model.hidden" -> where the user gave its value ("c.yaml: model.hidden", "--epochs")
    record: dict[str, Any] = field(default_factory=dict)  # the split a run's config.json given as --config records

    def resolve(self, source: str | None, n_items: int, protocol: str | None) -> tuple[ModelConfig, TrainConfig]:
        """``resolve_configs`` of these values; a bad value is named where the user gave it (the config file, the
        --set or the option), not only by its field."""
        try:
            return resolve_configs(self.name, self.values["model"], self.values["train"], source=source,
                                   n_items=n_items, protocol=protocol)
        except OptionError as e:
            raise e.renamed({**self.origins, "model": self.model_origin()}) from None

    def model_origin(self) -> str:
        """How a problem of the whole model (its size, hidden not divisible by heads) is named: ``model`` with where
        the user gave model values (``model (given by c.yaml, --set model.heads)``), which alone can change it."""
        given = sorted({where if where.startswith("--") else where.split(": ")[0]
                        for key, where in self.origins.items() if key.startswith("model.")})
        return f"model (given by {', '.join(given)})" if given else "model"

    def device_origin(self, option_given: bool) -> str:
        """Where the device was set: --device, else the config file or --set that gave train.device."""
        return "--device" if option_given else self.origins.get("train.device", "train.device")


def _model_label(option: str | None, set_name: Any, file_name: Any, config: Path | None,
                 model_flag: str = "--model") -> str:
    """The label of --model (``model_flag``: how the command takes it), else of ``--set model.name=...``, else of the
    config file's ``model.name``, else the default (names read case-insensitively); two of them naming different
    models is an error, and so is a variant label (``sasrec-tts``) where one given before it names another label
    (``sasrec``, ``sasrec-gate``): its values would be dropped without a word. A plain model name below a variant
    of it (a shipped config's ``name: sasrec`` under ``--model sasrec-gate``) is that variant's base, not a
    contradiction."""
    given = [(canonical_label(str(value), where), where, value) for value, where in (
        (option, model_flag), (set_name, "--set model.name"), (file_name, f"{config}: model.name"))
        if value is not None]
    for label, where, value in given[1:]:
        if model_variant(label)[0] != model_variant(given[0][0])[0]:
            raise ResdomError(f"{where}: {value!r} contradicts {given[0][1]} {given[0][2]!r}")
        if label != given[0][0] and label not in MODELS:
            raise ResdomError(f"{where}: {value!r} contradicts {given[0][1]} {given[0][2]!r} (another variant of "
                              f"{model_variant(label)[0]}; name the model once, or the same label in both)")
    return given[0][0] if given else DEFAULT_MODEL


def command_config(model: str | None, config: Path | None, set_: list[str], explicit: dict[str, Any],
                   data: DataOptions, model_flag: str = "--model") -> CommandConfig:
    """The layers of a command's configuration (module docstring) -> CommandConfig; nothing is validated yet
    beyond field names (``resolve_configs`` does)."""
    file_values = read_config_file(config) if config else {}
    file_model = dict(file_values.get("model", {}))
    set_values = parse_set(set_)
    set_name = set_values.get("model", {}).pop("name", None)
    label = _model_label(model, set_name, file_model.pop("name", None), config, model_flag)
    name, variant = model_variant(label)
    # a file written before each model had its own configuration class (a run's config.json, `config show`) holds
    # other models' fields at their defaults: those are dropped, any other value of them is refused by name
    file_layer = {"model": drop_flat_defaults(name, file_model), "train": file_values.get("train", {})}
    values = _merge({"model": variant, "train": variant_train_values(label)}, file_layer, set_values,
                    {"train": explicit})
    origins = {f"{s}.{k}": f"{config}: {s}.{k}" for s in SECTIONS for k in file_layer.get(s, {})}
    origins |= {f"{s}.{k}": f"--set {s}.{k}" for s in SECTIONS for k in set_values.get(s, {})}
    origins |= {f"train.{k}": f"--{k}" for k in explicit}
    return CommandConfig(label, name, values, with_config_data(data, file_values.get("data", {}), str(config)),
                         origins, file_values.get("record", {}))


@data_options(split=True)
def train(
    source: str = typer.Argument(..., help=SOURCE_HELP + " Or a folder written by `resdom data split`: trains on "
                                 "exactly that split."),
    model: str | None = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="run directory (resumed when it holds an interrupted run)"),
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML file with model:, train: and data: "
                                       "sections, or a shipped configuration's name (`resdom config list`)"),
    set_: list[str] = typer.Option([], "--set", help="override one field: model.<field>=v or train.<field>=v"),
    epochs: int | None = typer.Option(None, "--epochs", help="maximum number of epochs (default: the model's for the "
                                      "protocol, `resdom config show MODEL` prints it); on a saved run, more epochs "
                                      "resume it unless early stopping ended it"),
    seed: int | None = typer.Option(None, "--seed", help="random seed (default 17)"),
    device: str | None = typer.Option(None, "--device", help="auto (the default: cuda, then mps, then cpu) | cpu | "
                                      "cuda | mps"),
    precision: str | None = typer.Option(None, "--precision", help="fp32 (the default) | bf16-loss: the "
                                         "loss's item products under bfloat16 autocast (less CPU an epoch; "
                                         "evaluation and diagnostics stay fp32; train.precision)"),
    progress: bool = progress_option(),
    force: bool = typer.Option(False, "--force", help="--out holds a finished or imported run with no resume "
                               "state: move it aside (OUT.replaced-K) and train anew; a results-store cell or a "
                               "folder of other files is refused even then"),
    data: DataOptions = DataOptions(),
) -> None:
    """Train a model on SOURCE; writes RUN_DIR (config, data, best checkpoint, metrics; under --protocol none the
    last epoch's checkpoint and no validation or test metrics, unless --holdout-users). Works under torchrun."""
    explicit = {k: v for k, v in (("epochs", epochs), ("seed", seed), ("device", device),
                                               ("precision", precision)) if v is not None}
    cfg = command_config(model, config, set_, explicit, data)
    data = cfg.data
    is_main = launch_rank() == 0
    # under torchrun with --force, a rank other than 0 looks at --out only once rank 0 has moved the old run aside
    # (below; its training checks the folder again): a look during the rename could find it half gone
    waits = force and world_size() > 1 and not is_main
    replace = False if waits else check_output_folder(out, "--out", runs=True, force=force)
    check_output_inputs(out, "--out", {"SOURCE": tuple(source_paths(source)),
                                          "--config": config if config and config.is_file() else None,
                                          **data_folders(data.data_dir)},
                        replaced=replace, read_whole=("SOURCE",) if is_split_dir(source) else ())
    data.protocol_choice  # noqa: B018 (fail fast on an unknown --protocol)
    preset_source = split_manifest(source).get("source", {}).get("name", source) if is_split_dir(source) else source
    protocol = data.recipe_protocol(source)  # its defaults apply to the model (training.config; none: auto's)
    if protocol is not None:
        # the one resolution of the configuration, before the data is read (a bad value fails fast); the split sets
        # n_items, which nothing else depends on, and fit hands both configs to the trainer as they are
        model_cfg, train_cfg = cfg.resolve(preset_source, n_items=0, protocol=protocol)
        resolve_device(train_cfg.device, cfg.device_origin(device is not None))
    else:  # auto or none on a file: its timestamps, so its defaults, are known once it is read; resolved under either
        # now (a value wrong under both fails before the read), those of the protocol the split takes after it
        under: dict[str, tuple[ModelConfig, TrainConfig] | ResdomError] = {}
        for either in ("gts", "loo"):
            try:
                under[either] = cfg.resolve(preset_source, n_items=0, protocol=either)
            except ResdomError as e:
                under[either] = e
        refused = [r for r in under.values() if isinstance(r, ResdomError)]
        if len(refused) == len(under):
            raise refused[0]
    split = data.split(source)
    if (note := recorded_split_note(config, cfg.record, split.manifest, is_split_dir(source))) is not None \
            and is_main:
        say(note, err=True)
    if protocol is None:
        resolved = under[recipe_protocol(split.manifest["protocol"], split.manifest.get("has_timestamps")) or "loo"]
        if isinstance(resolved, ResdomError):
            raise resolved
        model_cfg, train_cfg = resolved
        resolve_device(train_cfg.device, cfg.device_origin(device is not None))
    data_info = data.record(source, split)
    if cfg.label != cfg.name:
        data_info["label"] = cfg.label  # reports name the run by its variant
    hint = busy_machine_hint(train_cfg.threads, train_cfg.device)
    if hint and is_main:
        say(hint, err=True)
    # under torchrun with --force every rank joins the group here: rank 0 alone moves the old run aside, the others
    # wait for it at a barrier and only then look at --out (in fit), so none reads the old run's state or looks at
    # a folder half-way through its move
    group = setup(train_cfg.device, "--device" if device else "train.device") if force and world_size() > 1 else None
    try:
        if replace and is_main:
            say(f"--force: {out} moved aside to {move_aside(out)}; training anew", err=True)
        if group is not None:
            group.barrier()
        result = fit(split, model_cfg, train=train_cfg, out=out, data_info=data_info,
                     progress=None if progress else False).metrics
    except KeyboardInterrupt:
        how = ("run the same command without --force to resume (with it, the run would be moved aside and "
               "trained anew)" if force else "run the same command to resume")
        raise interrupted(f"interrupted: {out} keeps the state of the last finished epoch; {how}") from None
    finally:
        if group is not None:
            group.close()  # the group this command joined (fit leaves one it did not join open)
    if is_main:
        if split.manifest.get("protocol") == "none" and not result["valid"]["n_users"]:
            n = result["epochs_run"]
            on = _trained_on(split, model_cfg, train_cfg)
            say(f"{out}: trained {n} epoch{'' if n == 1 else 's'} on {on}; `resdom recommend` reads it")
            return
        say(f"{out}: best epoch {result['best_epoch']} of {result['epochs_run']} ({result['stopped']})")
        for name in PARTS:
            if result[name]["n_users"] or split.manifest.get("protocol") != "none":
                say(f"{name} ({counted(result[name]['n_users'])}): {_format_metrics(result[name]['metrics'])}")


def evaluate(
    run_dir: Path = typer.Argument(..., help="a run directory written by `resdom train`"),
    split: str = typer.Option("test", "--part", "--split", help="valid | test: the part of the split evaluated "
                              "(resdom.evaluate's part; --split is its older name)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    filter_seen: bool | None = typer.Option(
        None, "--filter-seen/--no-filter-seen",
        help="remove (or keep) each user's input items in the ranking; default: the data set's setting (filtered, "
             "except data sets that keep seen items: diginetica, zvuk); --filter / --no-filter say the same"),
    filter_old: bool | None = typer.Option(None, "--filter/--no-filter", hidden=True),
    cutoffs: str = typer.Option(",".join(map(str, CUTOFFS)), "--cutoffs", help="the K of HR@K and NDCG@K, "
                                "comma-separated"),
    beyond: bool = typer.Option(False, "--beyond", help="also the beyond-accuracy metrics of the same top-K lists: "
                                "Coverage@K, AvgPop@K, Novelty@K, Echo@K (the last input item in the top K), "
                                "EchoNN@K (it or one of its --neighbours nearest items)"),
    neighbours: int | None = typer.Option(None, "--neighbours", help="with --beyond: the last item's nearest items "
                                          f"(cosine over the output item embeddings) that EchoNN@K counts "
                                          f"(default {NEIGHBOURS})"),
    per_user: Path | None = typer.Option(None, "--per-user", help="CSV file to write, one row per user: user_id, "
                                         "item_id (the target), rank (0-based; empty: filtered out), each metric"),
    device: str = typer.Option("auto", "--device", help="auto (cuda, then mps, then cpu) | cpu | cuda | mps"),
    batch_size: int = typer.Option(256, "--batch-size", help="users per evaluation chunk"),
    progress: bool = progress_option(),
) -> None:
    """Full-ranking HR@K, NDCG@K and MRR of a run's best model, with the number of users evaluated (--beyond:
    coverage, popularity, novelty and echo of the same top-K lists)."""
    filter_seen = one_filter(filter_seen, filter_old)
    split = choice(split, PARTS, "--part")  # any case; a did-you-mean
    ks = parse_cutoffs(cutoffs)
    positive_int(batch_size, "--batch-size")
    if neighbours is not None and not beyond:  # EchoNN@K alone counts them: it would be ignored without a word
        raise ResdomError("--neighbours: counts for EchoNN@K of --beyond; give --beyond too, or leave it out")
    if neighbours is not None:
        positive_int(neighbours, "--neighbours")
    if per_user is not None:
        check_output_file(per_user, "--per-user", "user_id,item_id,rank", "a per-user file")
    ctx = setup(device, "--device")  # under torchrun: join the process group; users are sharded, rank 0 reports
    try:
        run = load_run(run_dir, device=ctx.device)
        if run.training_note() and ctx.is_main:
            say(run.training_note(), err=True)
        if len(getattr(run.split, split)) == 0:
            none = run.split.manifest.get("protocol") == "none"
            again = ("evaluate it with --part valid (its monitoring slice)" if len(run.split.valid) else
                     "train with --protocol none --holdout-users N (a monitoring slice of validation users) and "
                     "evaluate that run with --part valid")
            raise ResdomError(f"--part {split}: {run_dir} holds no {split} users" + (
                f" (protocol none: nothing held out; evaluate a loo or gts run of the same data, or {again})"
                if none else ""))
        filtered = run.split.filter_seen if filter_seen is None else filter_seen
        result = run_evaluation(run.model, run.split, part=split, filter_seen=filtered, batch_size=batch_size,
                                device=ctx.device, cutoffs=ks, beyond=beyond, neighbours=neighbours,
                                progress=progress and ctx.is_main)
    finally:
        ctx.close()
    if not ctx.is_main:  # every rank holds every user's rank (gathered): rank 0 alone prints and writes
        return
    if per_user is not None:
        assert result.users is not None  # resdom.evaluate fills it
        users = result.users
        atomic_write_bytes(per_user, csv_text(lambda end: users.to_csv(index=False, lineterminator=end))
                           .encode("utf-8"))
        say(f"{per_user}: {counted(len(result.users))}", err=True)
    if as_json:  # a mean over no user (AvgPop@K, Novelty@K when no user has a list: NaN) is null, never NaN
        shown = {**result.to_dict(), "metrics": {k: None if math.isnan(v) else v for k, v in result.metrics.items()}}
        typer.echo(json.dumps({"split": split, "filtered": filtered, **shown}, indent=2))
        return
    assert result.users is not None  # resdom.evaluate fills it
    unranked = int(result.users["rank"].isna().sum())  # filtered out: a target in its own input
    why = f": {unranked:,} target(s) in their own input, a miss at every K" if unranked else ""
    say(f"{run_dir} {split} ({counted(result.n_users)}, seen items {'filtered' if filtered else 'kept'}{why})")
    accuracy = sorted((m for m in result.metrics if metric_key(m)[0] == 0), key=metric_key)
    width = max([8, *map(len, result.metrics)])  # Coverage@10, EchoNN@20: one column of values for every name
    for name in [*accuracy, *(m for m in result.metrics if m not in accuracy)]:  # beyond: in evaluation's order
        value = result.metrics[name]
        say(f"  {name:{width}s} {'-' if math.isnan(value) else f'{value:.4f}'}")
    if any(math.isnan(v) for v in result.metrics.values()):
        say("note: '-': no user has an item left to recommend (every item is in each input), so AvgPop "
            "and Novelty are means over no user", err=True)


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("evaluate")(evaluate)
