"""``resdom config``: the shipped reference configurations, and the full resolved configuration of a model.

``resdom config show MODEL`` resolves exactly as ``resdom train`` does (defaults for the protocol, a variant's
values, ``--config``, ``--set``, the options) and prints every setting, data settings included, as YAML that
``resdom train DATA --config FILE`` accepts and trains unchanged.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import typer

from resdom.cli.data_options import DataOptions, data_config_section, data_options, is_split_dir
from resdom.cli.train_cmd import MODEL_HELP, command_config, recorded_split_note
from resdom.cli.values import print_file, printed_if_dash, say
from resdom.errors import ResdomError
from resdom.experiments import model_labels
from resdom.io import atomic_write_text
from resdom.names import AUTO_PROTOCOL
from resdom.resources import describe_config, reference_configs
from resdom.rundir import check_output_file
from resdom.version import __version__

config_app = typer.Typer(help="Configurations: the shipped reference configs, the full config of a model.",
                         no_args_is_help=True)


@config_app.command("list")
def list_cmd() -> None:
    """The reference configurations shipped with resdom (use one with `--config NAME`), then the model names."""
    for name, path in reference_configs().items():
        say(f"{name:<22} {describe_config(path)}")
    say(f"\nmodels and variants (--model, any case): {', '.join(model_labels())}")


def full_config(model: str | None = None, config: Path | None = None, set_: list[str] | None = None,
                explicit: dict[str, Any] | None = None, data: DataOptions | None = None,
                dataset: str | None = None) -> tuple[str, dict[str, Any], bool, dict[str, Any]]:
    """(label, {"model": ..., "train": ..., "data": ...}, auto): every setting resolved as ``resdom train`` resolves
    it (``dataset``: a data set whose presets apply, e.g. BSARec's for beauty, and whose timestamps decide the
    default protocol; ``shown_protocol``). The model section holds the fields of the model's configuration class
    (n_items left out: that is set from the data); ``model.name`` is the label (a variant's, e.g. sasrec-tts);
    values are plain YAML types. ``auto``: no protocol was named (the default chose it). Last, the split a run's
    config.json given as ``config`` records (``read_config_file``; {} for any other file)."""
    cfg = command_config(model, config, set_ or [], explicit or {}, data or DataOptions(), model_flag="MODEL")
    protocol = shown_protocol(cfg.data, dataset)
    model_cfg, train_cfg = cfg.resolve(dataset, n_items=1, protocol=_recipe(cfg.data, dataset, protocol))
    shown_model = model_cfg.model_dump(mode="json", exclude={"n_items"})
    shown_model["name"] = cfg.label  # a variant's label (sasrec-tts): training from the file records it
    return cfg.label, {"model": shown_model, "train": train_cfg.model_dump(mode="json"),
                       "data": data_config_section(cfg.data, protocol)}, cfg.data.protocol_choice == AUTO_PROTOCOL, \
        cfg.record


def _recipe(data: DataOptions, dataset: str | None, protocol: str) -> str:
    """The protocol whose model defaults ``protocol`` trains with (``DataOptions.recipe_protocol``): for none,
    auto's choice for ``dataset``, else for data with timestamps (gts), as ``resdom train`` resolves it."""
    if protocol != "none":
        return protocol
    known = None
    if dataset is not None:
        with contextlib.suppress(ResdomError):
            known = data.recipe_protocol(dataset)
    return known or "gts"


def shown_protocol(data: DataOptions, dataset: str | None) -> str:
    """The protocol whose configuration ``config show`` prints: what ``resdom train DATASET`` would use (--protocol,
    or what auto resolves to for ``dataset``); where the data is not named (or is a file, whose timestamps are known
    once it is read), auto's choice for data with timestamps, gts (``config_text``'s header says so)."""
    if dataset is not None and not is_split_dir(dataset):
        try:
            known = data.known_protocol(dataset)
        except ResdomError:  # a --dataset that is no source: its presets are looked up by name only
            known = None
        if known is not None:
            return known
    choice = data.protocol_choice
    return "gts" if choice == AUTO_PROTOCOL else choice


def config_text(label: str, values: dict[str, Any], dataset: str | None, auto: bool = False) -> str:
    """The YAML of ``full_config`` with a header saying what it is and how to use it (``auto``: the protocol is
    the default's choice, which the header says)."""
    import yaml

    where = f", presets of {dataset}" if dataset else ""
    protocol = values["data"]["protocol"]
    header = [
        f"# resdom {__version__}: the full configuration of {label} ({protocol}{where}).",
        "# Every setting is explicit, so `resdom train DATA --config THIS_FILE --out RUN` trains exactly this;",
        "# options given on the command line win over the file. data: null = the source's own default (format:",
        "# detected; k_core: the source's preset; columns: user_id, item_id, timestamp; valid_quantile: quantile).",
    ]
    if auto:
        other = "loo" if protocol == "gts" else "gts"
        header.append(f"# protocol {protocol}: what the default, auto, uses for "
                      + ("data with timestamps" if protocol == "gts" else "this data set (it has no timestamps)")
                      + f"; `--protocol {other}` or `--dataset NAME` shows another.")
    if protocol == "none":
        header += ["# protocol none: nothing held out; the model defaults of the protocol auto measures the same data",
                   "# by (gts with timestamps, loo without), so what is deployed is what was measured."]
    body = yaml.safe_dump(values, sort_keys=False, default_flow_style=False)
    return "\n".join(header) + "\n" + body


@config_app.command("show")
@data_options(split=True)
def show_cmd(
    model: str | None = typer.Argument(None, help=MODEL_HELP),
    config: Path | None = typer.Option(None, "--config", "-c", help="a YAML file or a shipped configuration's name "
                                       "(`resdom config list`), layered as in `resdom train`"),
    set_: list[str] = typer.Option([], "--set", help="override one field: model.<field>=v or train.<field>=v"),
    epochs: int | None = typer.Option(None, "--epochs", help="maximum number of epochs"),
    seed: int | None = typer.Option(None, "--seed", help="random seed"),
    device: str | None = typer.Option(None, "--device", help="auto (the default: cuda, then mps, then cpu) | cpu | "
                                      "cuda | mps"),
    precision: str | None = typer.Option(None, "--precision", help="fp32 (the default) | bf16-loss: the "
                                         "loss's item products under bfloat16 autocast (less CPU an epoch; "
                                         "evaluation and diagnostics stay fp32; train.precision)"),
    dataset: str | None = typer.Option(None, "--dataset", help="apply this data set's presets (BSARec's per-data-set "
                                       "values); nothing is read"),
    out: Path | None = typer.Option(None, "--out", "-o", help="write the YAML to this file instead of printing "
                                 "it (-: print it)"),
    data: DataOptions = DataOptions(),
) -> None:
    """Print the full configuration `resdom train` would use for MODEL (model, train and data settings) as YAML
    that `--config` accepts: `resdom config show sasrec --protocol gts > c.yaml; resdom train DATA --config c.yaml`."""
    explicit = {k: v for k, v in (("epochs", epochs), ("seed", seed), ("device", device),
                                               ("precision", precision)) if v is not None}
    out = printed_if_dash(out)
    label, values, auto, record = full_config(model, config, set_, explicit, data, dataset)
    text = config_text(label, values, dataset, auto)
    if (note := recorded_split_note(config, record, values["data"])) is not None:
        say(note, err=True)
    if out is None:
        print_file(text)
        return
    check_output_file(out, "--out", "# resdom ", "a configuration `resdom config show` wrote", {"--config": config})
    atomic_write_text(out, text)
    say(f"{label}: written to {out}", err=True)  # a note, as recommend --out gives it: stdout stays empty


def register(app: typer.Typer) -> None:
    """Add the ``config`` group to the ``resdom`` app."""
    app.add_typer(config_app, name="config")
