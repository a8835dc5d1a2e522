"""One behaviour across commands: the same device default, one progress flag, ``evaluate --cutoffs``,
model names in any case and every model / variant name the docs use accepted by ``train``; ``resdom config``
(shipped reference configs, ``config show`` printing a full config that ``--config`` trains unchanged)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from cli_helpers import commands, invoke, one_line_error, run_cli
from typer.core import TyperOption

from resdom.cli.main import _typer_app
from resdom.errors import ResdomError
from resdom.experiments import MODEL_VARIANTS, canonical_label, model_labels
from resdom.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "synthetic:n_users=60,n_items=30,min_len=5,max_len=12"
TINY = ["--set", "model.hidden=16", "--set", "model.layers=1", "--set", "model.max_len=10", "--device", "cpu"]
COMPUTING = ("train", "evaluate", "diagnose", "demo", "reproduce", "remedies", "recommend", "similar")  # run a model
PROGRESSING = ("train", "evaluate", "diagnose", "demo", "reproduce", "remedies", "recommend", "similar")  # show it


def command(name: str) -> Any:
    """The click command (Typer's) of ``resdom NAME``."""
    group = typer.main.get_command(_typer_app)
    return group.commands[name]  # type: ignore[attr-defined]


def options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if isinstance(p, TyperOption)]


def option(cmd: Any, flag: str) -> Any:
    return next((p for p in options(cmd) if flag in (*p.opts, *p.secondary_opts)), None)


def test_no_help_text_loses_a_bracketed_word_to_rich_markup() -> None:
    """Typer renders help with Rich markup, which eats an unescaped ``[word]`` (``data list`` lost its "[by hand]"):
    every command's and option's help, rendered, keeps every character but the ``\\`` of an escaped bracket."""
    from rich.markup import render

    lost = []
    for path, cmd in commands(typer.main.get_command(_typer_app)):
        for text in [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]:
            if render(text).plain != text.replace("\\[", "["):
                lost.append(f"resdom {' '.join(path)}: {text[:60]!r}")
    assert len(commands(typer.main.get_command(_typer_app))) > 10 and not lost, lost


# ------------------------------------------------------------------------------------------- the same defaults


@pytest.mark.parametrize("name", COMPUTING)
def test_every_computing_command_defaults_to_device_auto(name: str) -> None:
    opt = option(command(name), "--device")
    assert opt is not None, f"{name} has no --device"
    # train's None falls through to TrainConfig's default
    default = TrainConfig().device if opt.default is None else opt.default
    assert default == "auto", f"resdom {name} --device defaults to {default!r}"


def test_every_device_option_defaults_to_auto_and_says_so() -> None:
    """Every ``--device`` of every command (and subcommand): auto by default (None: TrainConfig's, auto), its help
    naming auto first; a command that runs a model without being in COMPUTING would be found here."""
    group = typer.main.get_command(_typer_app)
    found = []
    stack = [("", group)]
    while stack:
        prefix, cmd = stack.pop()
        if hasattr(cmd, "commands"):
            stack += [(f"{prefix} {n}".strip(), c) for n, c in cmd.commands.items()]
            continue
        opt = option(cmd, "--device")
        if opt is None:
            continue
        found.append(prefix)
        assert (TrainConfig().device if opt.default is None else opt.default) == "auto", prefix
        assert opt.help.startswith("auto"), prefix
    assert set(COMPUTING) <= set(found) and set(found) - set(COMPUTING) == {"config show"}


def test_demo_settings_default_to_device_auto() -> None:
    from resdom.pipeline.demo import DemoSettings

    assert DemoSettings().device == "auto"


@pytest.mark.parametrize("name", PROGRESSING)
def test_one_progress_flag_spelled_the_same_way(name: str) -> None:
    cmd = command(name)
    opt = option(cmd, "--progress")
    assert opt is not None and opt.opts == ["--progress"] and opt.secondary_opts == ["--no-progress"], name
    assert opt.default is True
    visible = [f for p in options(cmd) if not p.hidden
               for f in (*p.opts, *p.secondary_opts) if re.search(r"quiet|progress|^-q$|silent|verbose", f)]
    assert sorted(visible) == ["--no-progress", "--progress"], f"{name}: {visible}"


def test_quiet_is_kept_as_a_hidden_alias_of_no_progress(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    pipeline_cmd = importlib.import_module("resdom.cli.pipeline_cmd")  # the grid runner as the command calls it
    seen: list[bool] = []

    def fake(spec: Any, progress: bool = True, echo: Any = print) -> Any:
        seen.append(progress)
        raise typer.Exit(0)

    monkeypatch.setattr(pipeline_cmd, "run_grid", fake)
    for flag, expected in (("-q", False), ("--quiet", False), ("--no-progress", False), ("--progress", True)):
        assert invoke("reproduce", "--datasets", "synthetic", "--models", "sasrec", "--out", "/tmp/never", flag) == 0
        assert seen.pop() is expected, flag
    capsys.readouterr()


# ------------------------------------------------------------------------------------------- evaluate --cutoffs


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("consistency") / "run"
    assert invoke("train", SOURCE, "--model", "SASRec", "--out", str(out), "--epochs", "2", "--no-progress",
                  *TINY) == 0
    return out


def test_train_takes_model_names_in_any_case(trained_run: Path) -> None:
    config = json.loads((trained_run / "config.json").read_text())
    assert config["model"]["name"] == "sasrec" and "label" not in config["data"]


def test_evaluate_cutoffs(trained_run: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "evaluate", str(trained_run), "--json")
    default = json.loads(out)["metrics"]
    assert code == 0 and set(default) == {*(f"{m}@{k}" for m in ("HR", "NDCG") for k in (1, 5, 10, 20)), "MRR"}
    code, out, _ = run_cli(capsys, "evaluate", str(trained_run), "--json", "--cutoffs", "3,20,5")
    chosen = json.loads(out)["metrics"]
    assert code == 0 and set(chosen) == {"HR@3", "HR@5", "HR@20", "NDCG@3", "NDCG@5", "NDCG@20", "MRR"}
    for key in ("HR@5", "HR@20", "NDCG@5", "NDCG@20", "MRR"):  # the same users, the same ranks
        assert chosen[key] == pytest.approx(default[key], abs=1e-12)
    assert default["HR@1"] <= chosen["HR@3"] <= default["HR@5"]
    assert default["NDCG@1"] <= chosen["NDCG@3"] <= default["NDCG@5"]
    code, out, _ = run_cli(capsys, "evaluate", str(trained_run), "--cutoffs", "3")
    assert code == 0 and "HR@3" in out and "HR@10" not in out


@pytest.mark.parametrize("value,needle", [("0", "at least 1"), ("a,b", "comma-separated integers"),
                                          ("5,5", "repeated"), (",", "at least one")])
def test_bad_cutoffs_are_one_line(trained_run: Path, capsys, value: str, needle: str) -> None:
    code, _, err = run_cli(capsys, "evaluate", str(trained_run), "--cutoffs", value)
    assert code == 2 and "--cutoffs" in err and needle in err and err.strip().count("\n") == 0


# ------------------------------------------------------------------------------------------- model names


def doc_model_names() -> set[str]:
    """Every model or variant name README.md, docs/spec.md and docs/remedies.md use: after --model / --models,
    and in backticks."""
    names: set[str] = set()
    for doc in ("README.md", "docs/spec.md", "docs/remedies.md"):
        text = (ROOT / doc).read_text()
        for arg in re.findall(r"--models?[ =]([A-Za-z0-9.,-]+)", text):
            names.update(x for x in arg.split(",") if x and not x.startswith("."))
        names.update(re.findall(r"`((?:sasrec|duorec|bsarec|bert4rec|gru4rec)[a-z0-9.-]*)`", text, re.IGNORECASE))
    return names


def test_the_docs_name_models_and_variants() -> None:
    names = doc_model_names()
    assert {"sasrec", "duorec", "bsarec", "sasrec-tts", "sasrec-gate"} <= names  # the parser finds them


@pytest.fixture
def fake_fit(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``resdom train`` up to training: ``api.fit`` records what it was given instead of training."""
    import resdom.api

    calls: list[dict[str, Any]] = []

    class Result:
        metrics = {"best_epoch": 1, "epochs_run": 1, "stopped": "max_epochs",
                   **{p: {"n_users": 0, "metrics": {}} for p in ("valid", "test")}}

    def fit(split: Any, model: Any, **kwargs: Any) -> Result:
        calls.append({"model": model, **kwargs})
        return Result()

    monkeypatch.setattr(resdom.api, "fit", fit)
    monkeypatch.setattr(importlib.import_module("resdom.cli.train_cmd"), "fit", fit)  # the name the command calls
    return calls


@pytest.mark.parametrize("name", sorted(doc_model_names() | set(model_labels())))
def test_train_accepts_every_model_and_variant_name(name: str, fake_fit: list, tmp_path: Path, capsys) -> None:
    for spelled in (name, name.upper()):
        code, _, err = run_cli(capsys, "train", SOURCE, "--model", spelled, "--out", str(tmp_path / "r"),
                               "--no-progress", "--device", "cpu")
        assert code == 0, err
    model_cfg, info = fake_fit[-1]["model"], fake_fit[-1]["data_info"]
    label = name.lower()  # the docs also write SASRec, DuoRec
    base, variant = MODEL_VARIANTS.get(label, (label, {}))
    assert model_cfg.name == base
    assert {k: getattr(model_cfg, k) for k in variant} == variant  # the variant's values are applied
    assert info.get("label", base) == label  # and the run is labelled by the variant
    assert fake_fit[-1]["progress"] is False


def test_set_model_name_is_read_in_any_case_and_must_agree(fake_fit: list, tmp_path: Path, capsys) -> None:
    """``--set model.name=...`` names the model as --model does (any case); naming another model than --model or
    the config file is one line naming both."""
    out = ["--out", str(tmp_path / "r"), "--no-progress", "--device", "cpu"]
    for args, model in ((["--set", "model.name=DuoRec"], "duorec"),
                        (["--model", "sasrec", "--set", "model.name=SASRec"], "sasrec")):
        code, _, err = run_cli(capsys, "train", SOURCE, *args, *out)
        assert code == 0 and fake_fit[-1]["model"].name == model, err
    code, _, err = run_cli(capsys, "train", SOURCE, "--model", "sasrec", "--set", "model.name=DuoRec", *out)
    assert code == 2 and "--set model.name: 'DuoRec' contradicts --model 'sasrec'" in err
    from resdom.training.config import resolve_configs

    assert resolve_configs("sasrec", {"name": "SASRec", "heads": 1}, n_items=5)[0].name == "sasrec"
    with pytest.raises(ResdomError, match="model.name: 'DuoRec' contradicts"):
        resolve_configs("sasrec", {"name": "DuoRec"}, n_items=5)


def test_a_refused_value_the_message_quotes_is_said_once(tmp_path: Path, capsys) -> None:
    """A closed choice's message quotes the value it refuses, so "(got ...)" is not added again; a message that does
    not quote it (or quotes a number it merely contains) keeps it."""
    from pydantic import BaseModel, Field, ValidationError, field_validator

    from resdom.errors import validation_error

    code, _, err = run_cli(capsys, "train", SOURCE, "--precision", "bf16", "--out", str(tmp_path / "r"))
    assert code == 2 and err.strip().count("'bf16'") == 1 and "did you mean bf16-loss" in err, err
    # before the data is read, even where protocol auto waits for the file's timestamps: the file's own fault
    # (no item column) is not reached
    bad = tmp_path / "bad.csv"
    bad.write_text("user_id,timestamp\nu1,1\n")
    for option in (["--precision", "bf16"], ["--set", "train.lr=0"]):
        code, _, err = run_cli(capsys, "train", str(bad), *option, "--out", str(tmp_path / "r"))
        assert code == 2 and str(bad) not in err and ("bf16" in err or "train.lr" in err), err
    code, _, err = run_cli(capsys, "train", str(bad), "--out", str(tmp_path / "r"))
    assert code == 2 and str(bad) in err  # the file is read once the configuration passes

    class Box(BaseModel):
        name: str = "a"
        ratio: float = Field(0.5, gt=0, lt=1)

        @field_validator("name")
        @classmethod
        def _known(cls, v: str) -> str:
            raise ValueError(f"unknown name {v!r}")

    for data, said in [({"name": "zz"}, "name: unknown name 'zz'"), ({"ratio": 1}, "ratio: Input should be less "
                                                                                  "than 1 (got 1)")]:
        with pytest.raises(ValidationError) as e:
            Box(**data)
        assert str(validation_error(e.value)) == said


def test_unknown_model_is_one_line_with_the_closest_name(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(capsys, "train", SOURCE, "--model", "sasrek-tts", "--out", str(tmp_path / "r"))
    assert code == 2 and "did you mean sasrec-tts" in err and err.strip().count("\n") == 0
    assert not (tmp_path / "r").exists()


def test_canonical_label() -> None:
    assert canonical_label("SASRec") == "sasrec" and canonical_label(" DuoRec-Gate ") == "duorec-gate"
    with pytest.raises(ResdomError, match="--models: unknown model 'caser'"):
        canonical_label("caser", "--models")


def test_reproduce_and_remedies_take_model_names_in_any_case(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    pipeline_cmd = importlib.import_module("resdom.cli.pipeline_cmd")  # the runners as the commands call them

    specs: list[Any] = []

    def capture(spec: Any, **_: Any) -> Any:
        specs.append(spec)
        raise typer.Exit(0)

    monkeypatch.setattr(pipeline_cmd, "run_grid", capture)
    monkeypatch.setattr(pipeline_cmd, "run_remedies", capture)
    assert invoke("reproduce", "--models", "SASRec,DuoRec,SASRec-TTS", "--out", "/tmp/never") == 0
    assert specs[-1].models == ["sasrec", "duorec", "sasrec-tts"]
    assert invoke("remedies", "synthetic", "--model", "BSARec", "--variants", "base,Gate", "--out", "/tmp/never") == 0
    assert specs[-1].models == ["bsarec", "bsarec-gate"]
    assert invoke("reproduce", "--models", "sasrec,SASRec", "--out", "/tmp/never") == 2  # the same model twice
    capsys.readouterr()


def test_python_fit_takes_variant_labels_in_any_case() -> None:
    import resdom

    split = resdom.prepare_split(SOURCE, "loo")
    fitted = resdom.fit(split, "SASRec-TTS", epochs=1, hidden=16, layers=1, device="cpu", progress=False)
    assert fitted.model_config.name == "sasrec" and fitted.model_config.max_len == 128
    assert fitted.model_config.query_ln is True


# ------------------------------------------------------------------------------------------- resdom config


def test_config_list_names_the_shipped_configs_and_models(capsys) -> None:
    code, out, _ = run_cli(capsys, "config", "list")
    assert code == 0
    for name in ("sasrec_loo", "sasrec_gts_reference", "bsarec_beauty", "duorec_loo", "smoke", "sasrec-tts"):
        assert name in out


def test_config_show_prints_every_setting(capsys) -> None:
    from resdom.cli.data_options import data_config_keys
    from resdom.models.config import SASRecConfig

    code, out, _ = run_cli(capsys, "config", "show", "sasrec", "--protocol", "gts")
    shown = yaml.safe_load(out)
    assert code == 0 and set(shown) == {"model", "train", "data"}
    assert set(shown["train"]) == set(TrainConfig.model_fields)
    assert set(shown["data"]) == set(data_config_keys())  # data settings included
    assert shown["data"]["protocol"] == "gts" and shown["data"]["quantile"] == 0.9
    assert set(shown["model"]) == set(SASRecConfig.model_fields) - {"n_items"}
    assert shown["model"]["max_len"] == 200 and shown["train"]["objective"] == "ce_all"  # GTS: the paper's code
    code, auto, _ = run_cli(capsys, "config", "show", "SASRec")  # the default, auto: gts for data with timestamps
    assert yaml.safe_load(auto)["model"] == shown["model"] and yaml.safe_load(auto)["data"]["protocol"] == "gts"
    code, loo, _ = run_cli(capsys, "config", "show", "SASRec", "--dataset", "beauty")  # auto: beauty has none
    assert yaml.safe_load(loo)["model"]["max_len"] == 50 and yaml.safe_load(loo)["data"]["protocol"] == "loo"


def test_config_show_replaces_only_a_file_it_wrote(tmp_path: Path, capsys) -> None:
    """``config show --out FILE`` over a file it did not write (a config written by hand, given with --config; the
    data) is refused in one line and the file kept; over its own earlier output (or an empty file) it writes."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("model:\n  hidden: 8\n")
    code, _, err = run_cli(capsys, "config", "show", "--config", str(mine), "--out", str(mine))
    assert code == 2 and err.count("\n") == 1, err
    assert (f"--out {mine}: exists and is not a configuration `resdom config show` wrote (its first line does not "
            "begin '# resdom ')") in err
    assert mine.read_text() == "model:\n  hidden: 8\n"
    shown = tmp_path / "shown.yaml"
    shown.write_text("")
    for _ in range(2):
        code, out, err = run_cli(capsys, "config", "show", "--config", str(mine), "--out", str(shown))
        assert code == 0, err
        assert yaml.safe_load(shown.read_text())["model"]["hidden"] == 8
        assert out == "" and err == f"sasrec: written to {shown}\n"  # a note (it was on stdout), as recommend's
    code, _, err = run_cli(capsys, "config", "show", "--out", str(tmp_path))
    assert code == 2 and f"--out {tmp_path}: is a directory; give a file name" in err


def test_config_show_names_its_model_argument_as_it_is_given(tmp_path: Path, capsys) -> None:
    """`config show` takes the model as its MODEL argument, so a bad name is MODEL's, not a --model it has not."""
    code, _, err = run_cli(capsys, "config", "show", "nope")
    one_line_error(code, err, "error: MODEL: unknown model 'nope'")
    code, _, err = run_cli(capsys, "config", "show", "sasrec", "--set", "model.name=bsarec")
    one_line_error(code, err, "error: --set model.name: 'bsarec' contradicts MODEL 'sasrec'")
    code, _, err = run_cli(capsys, "train", SOURCE, "--model", "nope", "--out", str(tmp_path / "r"))
    one_line_error(code, err, "error: --model: unknown model 'nope'")


def test_a_variant_label_is_never_dropped_for_another_label_of_its_model(fake_fit: list, tmp_path: Path,
                                                                        capsys) -> None:
    """A variant label (``sasrec-tts``) in --set or a config file beside another label of the same model was dropped
    without a word: ``--model sasrec --set model.name=sasrec-tts`` trained plain SASRec. It is one line naming both;
    a plain model name below a variant of it (a shipped config's ``name: sasrec``) stays that variant's base."""
    tts = tmp_path / "tts.yaml"
    tts.write_text("model:\n  name: sasrec-tts\n")
    out = ["--out", str(tmp_path / "r"), "--no-progress", "--device", "cpu"]
    for args, needle in (
            (["--model", "sasrec", "--set", "model.name=sasrec-tts"],
             "error: --set model.name: 'sasrec-tts' contradicts --model 'sasrec' (another variant of sasrec"),
            (["--model", "sasrec-gate", "--config", str(tts)],
             f"error: {tts}: model.name: 'sasrec-tts' contradicts --model 'sasrec-gate'"),
            (["--set", "model.name=sasrec-p30", "--config", str(tts)],
             f"error: {tts}: model.name: 'sasrec-tts' contradicts --set model.name 'sasrec-p30'")):
        code, _, err = run_cli(capsys, "train", SOURCE, *args, *out)
        one_line_error(code, err, needle)
        shown = [a for a in args if a != "--model"]  # config show takes the model as its argument
        code, _, err = run_cli(capsys, "config", "show", *shown)
        assert code == 2 and "contradicts" in err and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()
    for args, label in ((["--model", "sasrec-tts", "--config", str(tts)], "sasrec-tts"),
                        (["--model", "sasrec-gate", "--config", "sasrec_loo"], "sasrec-gate"),
                        (["--model", "SASRec-TTS", "--set", "model.name=sasrec"], "sasrec-tts")):
        code, _, err = run_cli(capsys, "train", SOURCE, *args, *out, "--force")
        assert code == 0, err
        assert fake_fit[-1]["data_info"].get("label") == label


def test_config_show_prints_no_split_option_train_would_refuse(tmp_path: Path, capsys) -> None:
    """`config show --holdout-users 5` (protocol gts), `--protocol loo --valid-quantile 0.5` or a file's
    `holdout_users: -1` printed a configuration that `train --config` of it refused; each is one line naming where
    the value was given, in `config show` and `train` alike."""
    mine = tmp_path / "mine.yaml"
    out = ["--out", str(tmp_path / "r")]
    cases = [
        (["--holdout-users", "5"], "error: --holdout-users: the monitoring slice of --protocol none; a split by the "
         "default protocol, auto (gts or loo), holds out its own validation users"),
        (["--protocol", "loo", "--holdout-users", "5"], "error: --holdout-users: the monitoring slice of --protocol "
         "none; a loo split holds out its own validation users"),
        (["--holdout-users", "-1"], "error: --holdout-users: must be 0 or more (got -1)"),
        (["--protocol", "loo", "--valid-quantile", "0.5"], "error: --valid-quantile: sets the validation cut time of "
         "--protocol gts; a loo split has none"),
        (["--config", str(mine)], f"error: {mine}: data.holdout_users: must be 0 or more (got -1)"),
        (["--config", str(mine), "--protocol", "gts"], f"error: {mine}: data.holdout_users: must be 0 or more"),
    ]
    mine.write_text("data:\n  holdout_users: -1\n")
    for args, needle in cases:
        for command in (["config", "show"], ["train", SOURCE, *out]):
            code, _, err = run_cli(capsys, *command, *args)
            one_line_error(code, err, needle)
    mine.write_text("data:\n  protocol: loo\n  holdout_users: 3\n")
    code, _, err = run_cli(capsys, "config", "show", "--config", str(mine))
    one_line_error(code, err, f"error: {mine}: data.holdout_users: the monitoring slice of --protocol none; a loo")
    code, shown, err = run_cli(capsys, "config", "show", "--config", str(mine), "--protocol", "none")
    assert code == 0 and yaml.safe_load(shown)["data"]["holdout_users"] == 3, err
    assert not (tmp_path / "r").exists()


def test_a_folder_given_as_config_says_it_is_a_folder(tmp_path: Path, capsys) -> None:
    """`--config RUN_DIR` said "config file not found" of a folder that is there; it names the folder, and the run's
    own config.json where it has one."""
    run = tmp_path / "run"
    run.mkdir()
    code, _, err = run_cli(capsys, "config", "show", "--config", str(run))
    one_line_error(code, err, f"error: {run}: is a folder; give a YAML config file")
    (run / "config.json").write_text("{}")
    for command in (["config", "show"], ["train", SOURCE, "--out", str(tmp_path / "r")]):
        code, _, err = run_cli(capsys, *command, "--config", str(run))
        one_line_error(code, err, f"error: {run}: is a folder; give a YAML config file (a run's own configuration "
                       f"is {run / 'config.json'})")
    assert not (tmp_path / "r").exists()


def test_config_show_round_trips_through_train(tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.yaml"
    code, _, err = run_cli(capsys, "config", "show", "sasrec-tts", "--protocol", "gts", "--epochs", "1",
                           "--out", str(path), *TINY)
    assert code == 0, err
    shown = yaml.safe_load(path.read_text())
    assert shown["model"]["name"] == "sasrec-tts" and shown["model"]["hidden"] == 16
    # the printed file is itself a full config: showing it again prints the same text
    code, again, _ = run_cli(capsys, "config", "show", "--config", str(path))
    assert code == 0 and again == path.read_text()
    run = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", SOURCE, "--config", str(path), "--out", str(run), "--no-progress")
    assert code == 0, err
    saved = json.loads((run / "config.json").read_text())
    assert saved["data"]["protocol"] == "gts" and saved["data"]["label"] == "sasrec-tts"
    assert {k: saved["model"][k] for k in shown["model"] if k != "name"} == {
        k: v for k, v in shown["model"].items() if k != "name"}
    assert saved["model"]["name"] == "sasrec"
    assert saved["train"] == shown["train"]


def test_quantiles_with_a_loo_split(tmp_path: Path, capsys) -> None:
    """--quantile sets GTS's cut time; with the loo protocol (named, or the default's on data without timestamps)
    it would be ignored without a word."""
    note = "data: note: --quantile sets the cut time of --protocol gts; this is a loo split"
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--no-time", "--quantile", "0.5", "--out",
                           str(tmp_path / "a"))
    assert code == 0 and f"{note} (the default protocol, auto: the data has none), which has none: not used" in err
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--quantile", "0.5", "--protocol", "loo",
                           "--out", str(tmp_path / "b"))
    assert code == 0 and f"{note}, which has none: not used" in err
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--quantile", "0.5", "--protocol", "gts",
                           "--out", str(tmp_path / "c"))
    assert code == 0 and "data: note: --quantile" not in err
    # --valid-quantile has no default to fall back on: with loo it is refused, before the data is read
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--no-time", "--valid-quantile", "0.5", "--out",
                           str(tmp_path / "d"))
    assert code == 2 and err == ("error: --valid-quantile: sets the validation cut time of --protocol gts; this is a "
                                 "loo split (the default protocol, auto: the data has none), which has none\n")
    assert not (tmp_path / "d").exists()
    from resdom.data.prepare import prepare_split

    with pytest.raises(ResdomError, match="^valid_quantile: sets the validation cut time of the gts protocol"):
        prepare_split(str(tmp_path / "no-such-file.csv"), protocol="loo", valid_quantile=0.5)


def test_command_line_data_options_win_over_the_files(tmp_path: Path, fake_fit: list, capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  protocol: gts\n  quantile: 0.8\n")
    assert run_cli(capsys, "train", SOURCE, "--config", str(path), "--out", str(tmp_path / "r"))[0] == 0
    assert fake_fit[-1]["data_info"]["protocol"] == "gts" and fake_fit[-1]["data_info"]["quantile"] == 0.8
    assert run_cli(capsys, "train", SOURCE, "--config", str(path), "--protocol", "loo", "--quantile", "0.9",
                   "--out", str(tmp_path / "r"))[0] == 0
    assert fake_fit[-1]["data_info"]["protocol"] == "loo"


@pytest.mark.parametrize("text,needle", [
    ("data:\n  protocl: gts\n", "data.protocl (did you mean data.protocol?)"),
    ("data:\n  k_core: five\n", "data.k_core: Input should be a valid integer, unable to parse string as an integer"),
    ("data:\n  k_core: 5.5\n", "data.k_core: Input should be a valid integer, got a number with a fractional part"),
    ("data:\n  quantile: true\n", "data.quantile: expected a number, not true or false"),
    ("data:\n  quantile: .nan\n", "data.quantile: Input should be a finite number (got nan)"),
    ("data:\n  user_col: 5\n", "data.user_col must be str (got 5)"),
    ("data:\n  protocol: random\n", "data.protocol: unknown protocol 'random'"),
    ("data:\n  quantile: [1]\n", "data.quantile: Input should be a valid number (got [1])"),
    ("data: [gts]\n", "section 'data' must be a mapping"),
    ("data:\n  format: xlsx\n", "c.yaml: data.format: unknown format 'xlsx'; choose one of: user-lines,"),
    ("data:\n  k_core: -1\n  quantile: 1.5\n", "c.yaml: data.k_core: must be 0 (off) or more (got -1); /"),
    ("data:\n  k_core: -1\n  quantile: 1.5\n", "c.yaml: data.quantile: must lie strictly between 0 and 1 (got 1.5)"),
    ("model:\n  name: caser\n", "model.name: unknown model 'caser'"),
    # PyYAML keeps the last of two equal keys without a word: an edited copy of a field would be trained silently
    ("model:\n  hidden: 8\n  layers: 1\n  hidden: 16\n", "c.yaml:4: not valid YAML ('hidden' is given twice"),
    ("model:\n  hidden: 8\ntrain: {}\nmodel:\n  layers: 1\n", "c.yaml:4: not valid YAML ('model' is given twice"),
    ('{"train": {"lr": 0.001, "lr": 0.01}}', "c.yaml:1: not valid YAML ('lr' is given twice"),
])
def test_bad_data_section_is_one_line(tmp_path: Path, capsys, text: str, needle: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    for args in (["train", SOURCE, "--out", str(tmp_path / "r")], ["config", "show"]):
        code, _, err = run_cli(capsys, *args, "--config", str(path))
        assert code == 2 and needle in err and str(path) in err and err.strip().count("\n") == 0, err
    assert not (tmp_path / "r").exists()


def test_the_data_section_converts_values_as_the_model_and_train_sections_do(tmp_path: Path, fake_fit: list,
                                                                             capsys) -> None:
    """PyYAML reads an unquoted ``1e-1`` as a string (YAML 1.1 wants a dot): ``train.lr: 1e-3`` was a number while
    ``data.quantile: 8e-1`` was refused; both sections now take what pydantic's lax mode takes."""
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  protocol: gts\n  quantile: 8e-1\n  valid_quantile: '0.7'\n  k_core: '2'\n"
                    "  remove_repeats: 'yes'\ntrain:\n  lr: 1e-3\n")
    assert run_cli(capsys, "train", SOURCE, "--config", str(path), "--out", str(tmp_path / "r"))[0] == 0
    info = fake_fit[-1]["data_info"]
    assert info["quantile"] == 0.8, info
    code, out, _ = run_cli(capsys, "config", "show", "--config", str(path))
    assert code == 0 and "quantile: 0.8" in out and "valid_quantile: 0.7" in out and "k_core: 2" in out, out
    assert "remove_repeats: true" in out and "lr: 0.001" in out, out


@pytest.mark.parametrize("data, needle", [
    (b"model:\n  hidden: 8\n\xff\n", "c.yaml:3: not UTF-8 text"),  # was a UnicodeDecodeError traceback
    (b"PK\x03\x04" + bytes(20), "c.yaml: not UTF-8 text (a zip archive or an .xlsx workbook)"),
])
def test_a_config_file_that_is_not_text_is_one_line(tmp_path: Path, capsys, data: bytes, needle: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    for args in (["train", SOURCE, "--out", str(tmp_path / "r")], ["config", "show"]):
        code, _, err = run_cli(capsys, *args, "--config", str(path))
        assert code == 2 and err.strip() == f"error: {tmp_path}/{needle}", err
    assert not (tmp_path / "r").exists()


def test_a_bad_value_is_named_where_it_was_given(tmp_path: Path, capsys) -> None:
    """The config file, the --set or the option that gave a value pydantic refuses, not only the field (a file's
    value overridden by --set is no longer the file's)."""
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  hidden: [8]\ntrain:\n  lr: 0\n")
    out = str(tmp_path / "r")
    cases = [
        ([], f"error: {path}: model.hidden: Input should be a valid integer (got [8])"),
        (["--set", "model.hidden=8"], f"error: {path}: train.lr: Input should be greater than 0 (got 0)"),
        (["--set", "model.hidden=8", "--set", "train.lr=-2"], "error: --set train.lr: Input should be greater than 0"),
        (["--set", "model.hidden=10", "--set", "model.heads=4", "--set", "train.lr=1e-3"],
         "error: model (given by --set model.heads, --set model.hidden): hidden (10) must be divisible by heads (4)"),
        # a rule across fields: the section, with where its values were given
    ]
    for extra, needle in cases:
        for args in (["train", SOURCE, "--out", out], ["config", "show"]):
            code, _, err = run_cli(capsys, *args, "--config", str(path), *extra)
            assert code == 2 and err.startswith(needle) and err.strip().count("\n") == 0, (args, extra, err)
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", out, "--epochs", "0")
    assert code == 2 and err.startswith("error: --epochs: Input should be greater than or equal to 1"), err
    assert not (tmp_path / "r").exists()


def test_a_config_naming_another_model_than_model_is_refused(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(capsys, "train", SOURCE, "--model", "sasrec", "--config", "duorec_loo",
                           "--out", str(tmp_path / "r"))
    assert code == 2 and "contradicts --model 'sasrec'" in err


@pytest.mark.parametrize("name", ["sasrec_loo", "sasrec_gts_reference.yaml", "bsarec_beauty", "duorec_loo", "smoke"])
def test_shipped_configs_by_name(name: str, capsys) -> None:
    from resdom.resources import reference_config

    code, out, err = run_cli(capsys, "config", "show", "--config", name)
    assert code == 0, err
    shown, own = yaml.safe_load(out), yaml.safe_load(reference_config(name).read_text())
    for section in ("model", "train", "data"):
        assert {k: shown[section][k] for k in own.get(section, {})} == own.get(section, {})


def test_a_config_that_is_neither_file_nor_shipped_names_both(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(capsys, "train", SOURCE, "--config", "sasrec_lo", "--out", str(tmp_path / "r"))
    assert code == 2 and "config file not found" in err and "sasrec_loo" in err


def test_config_show_presets_of_a_dataset(capsys) -> None:
    _, plain, _ = run_cli(capsys, "config", "show", "bsarec")
    _, beauty, _ = run_cli(capsys, "config", "show", "bsarec", "--dataset", "beauty")
    assert yaml.safe_load(beauty)["model"]["bsa_a"] == 0.7 and yaml.safe_load(beauty)["model"]["heads"] == 1
    assert yaml.safe_load(plain)["model"] != yaml.safe_load(beauty)["model"]


@pytest.mark.parametrize("env, coloured", [({}, True), ({"NO_COLOR": "1"}, False), ({"TERM": "dumb"}, False),
                                           ({"NO_COLOR": ""}, True)])
def test_an_error_on_a_terminal_is_red_unless_no_color_or_a_dumb_terminal(env: dict, coloured: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``error:`` lines were red on a terminal whatever NO_COLOR (no-color.org: set and not empty) or TERM=dumb
    said; the colour is kept on a terminal that takes it, and Click strips it in a pipe or a log as before."""
    import os
    import pty
    import sys

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    main, child = pty.openpty()
    with os.fdopen(child, "w", closefd=True) as terminal, os.fdopen(main, "rb", buffering=0) as reader:
        monkeypatch.setattr(sys, "stderr", terminal)
        assert invoke("data", "stats", "no-such-source.csv") == 2
        terminal.flush()
        said = reader.read(4096)
    assert b"error: unknown source 'no-such-source.csv'" in said
    assert (b"\x1b[" in said) is coloured, said


def test_no_writable_temporary_folder_is_one_line_before_torch_is_imported(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys) -> None:
    """With TMPDIR, /tmp, /var/tmp and the working folder all read-only, every command ended in a FileNotFoundError
    traceback from inside torch's import (its compile cache's path comes from ``tempfile.gettempdir``)."""
    import tempfile

    from resdom.cli import main

    def none_usable() -> str:
        raise FileNotFoundError(2, "No usable temporary directory found in ['/ro', '/tmp', '/var/tmp']")

    monkeypatch.setattr(tempfile, "gettempdir", none_usable)
    monkeypatch.setenv("TMPDIR", "/ro")
    with pytest.raises(SystemExit) as e:
        main.check_temporary_folder()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == ("error: no writable temporary folder (TMPDIR (/ro), /tmp, /var/tmp or the "
                                         "working folder); set TMPDIR to a writable folder\n")
    monkeypatch.undo()
    main.check_temporary_folder()  # a usable one: nothing said
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_a_deleted_working_folder_is_one_line(tmp_path: Path) -> None:
    """In a working folder deleted while the shell was in it, every command (data list, train with absolute paths)
    ended in torch's import with "Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so", five times; now one
    line naming the working folder, exit 2."""
    import subprocess
    import sys

    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && exec "$2" -m resdom data list', "sh", str(gone),
                           sys.executable], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr == (
        "error: the working folder no longer exists (deleted while the shell was in it); cd to a folder that exists "
        "and rerun\n"), done.stderr


@pytest.mark.parametrize("name", ["reproduce", "remedies"])
def test_grid_epochs_default_is_each_models_for_its_protocol_as_its_help_says(name: str, tmp_path: Path) -> None:
    """``reproduce`` and ``remedies`` without ``--epochs`` train each cell up to its model's maximum for the cell's
    protocol (300 for sasrec under gts, 200 under loo), as ``resdom train`` does; the help said "TrainConfig's"
    (200 whatever the protocol)."""
    from resdom.pipeline.reproduce import GridSpec
    from resdom.training.config import resolve_configs

    text = option(command(name), "--epochs").help
    assert "each model's for its protocol" in text and "config show" in text and "TrainConfig" not in text
    spec = GridSpec(["synthetic"], ["sasrec"], [1], tmp_path / "grid")
    assert spec.epochs is None
    for protocol, expected in (("gts", 300), ("loo", 200)):
        model, model_values, train_values = spec.cell_values("sasrec", 1)
        _, train = resolve_configs(model, model_values, train_values, source="synthetic", n_items=1, protocol=protocol)
        assert train.epochs == expected
    assert TrainConfig().epochs == 200  # the bare field default the help named: not what a gts cell trains
