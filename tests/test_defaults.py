"""One set of defaults and names across the CLI and the API: the one protocol default (``auto``: gts where the data
has timestamps, loo where it has none, resolved once from the data), closed choices in any case with the closest
named, every command's help whole at 80 columns, and the API's counts and argument names."""

from __future__ import annotations

import inspect
import io
import json
import logging
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import typer
from cli_helpers import commands as cli_commands
from cli_helpers import invoke, one_line_error, run_cli

import resdom
from resdom.checks import cli_names, closest_hint
from resdom.cli.main import _typer_app
from resdom.data.changes import change_lines
from resdom.data.prepare import known_protocol, prepare_split
from resdom.data.registry import DATASETS
from resdom.errors import ResdomError
from resdom.names import AUTO_PROTOCOL
from resdom.runs import data_fingerprint
from resdom.training.config import make_train_config, resolve_configs

SYNTH = "synthetic:n_users=80,n_items=30,min_len=4,max_len=10,seed=0"
TINY = ["--set", "model.hidden=8", "--set", "model.layers=1", "--set", "model.heads=1", "--set", "model.max_len=8",
        "--epochs", "1", "--device", "cpu", "--no-progress"]


def _frame(n_users: int = 40) -> pd.DataFrame:
    return pd.DataFrame([(f"u{u}", f"i{(u * 3 + t) % 17}", 10 * u + t) for u in range(n_users) for t in range(6)],
                        columns=["user_id", "item_id", "timestamp"])


def _user_lines(tmp_path: Path, n_users: int = 40) -> Path:
    """A file in the BSARec layout (one user a line, no timestamps)."""
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"u{u} " + " ".join(f"i{(u + t) % 13}" for t in range(6)) + "\n" for u in range(n_users)))
    return path


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "shop.csv"
    _frame().to_csv(path, index=False)
    return path


# ------------------------------------------------------------------------------------------ the protocol default


def _sources(tmp_path: Path) -> list[tuple[Any, dict[str, Any], str]]:
    """(source, reader options, the protocol auto must choose): data with and without timestamps."""
    return [(SYNTH, {}, "gts"), (_frame(), {}, "gts"), (_frame(), {"no_time": True}, "loo"),
            (_frame(), {"time_col": None}, "loo"), (str(_csv(tmp_path)), {}, "gts"),
            (str(_user_lines(tmp_path)), {}, "loo"), (SYNTH, {"no_time": True}, "loo")]


def test_auto_is_gts_with_timestamps_and_loo_without_and_known_agrees_with_the_split(tmp_path: Path) -> None:
    for source, options, expected in _sources(tmp_path):
        split = prepare_split(source, **options)
        assert split.manifest["protocol"] == expected, (source, options)
        known = known_protocol(source, **options)
        assert known in (expected, None), (source, options, known)  # None: a file, known once read
        assert split.manifest["changes"]["protocol"] == {"rule": "auto", "protocol": expected,
                                                         "timestamps": expected == "gts"}
        for named in ("loo", "gts", "none"):
            assert known_protocol(source, named, **options) == named
    # a file is known only once read; a table format is read only with its time column, so a DataFrame is known
    assert known_protocol(str(_csv(tmp_path))) is None and known_protocol(_frame()) == "gts"


def test_every_registered_data_set_resolves_by_whether_its_files_have_timestamps() -> None:
    for name, spec in DATASETS.items():
        assert known_protocol(name) == ("loo" if spec.fmt == "user-lines" else "gts"), name
    # the BSARec files have no timestamps; the paper grid's data sets all have them, so their cells stay gts
    assert {known_protocol(n) for n in ("beauty", "sports", "toys", "yelp", "lastfm")} == {"loo"}
    assert {known_protocol(n) for n in ("beauty-ts", "toys-ts", "sports-ts", "yelp-ts", "video-ts")} == {"gts"}


@pytest.mark.slow
def test_registered_files_split_as_known_protocol_says(shared_raw: Path) -> None:
    for name in ("beauty", "beauty-ts", "ml-100k"):
        split = prepare_split(name, data_dir=shared_raw)
        assert split.manifest["protocol"] == known_protocol(name), name


def test_auto_and_the_named_protocol_are_the_same_data(tmp_path: Path) -> None:
    auto, named = prepare_split(SYNTH), prepare_split(SYNTH, "gts")
    assert data_fingerprint(auto) == data_fingerprint(named)
    assert "protocol" not in named.manifest["changes"]  # a protocol given by name: nothing was chosen
    lines = change_lines(auto.manifest)
    assert "protocol: gts, chosen by auto: the data has timestamps (gts: train on the past, test on the future); " \
           "name another protocol to override" in lines
    without = change_lines(prepare_split(str(_user_lines(tmp_path))).manifest)
    assert "protocol: loo, chosen by auto: the data has no timestamps (loo: leave-one-out); name another protocol " \
           "to override" in without
    assert not [x for x in change_lines(named.manifest) if x.startswith("protocol:")]


def _options(cmd: Any) -> dict[str, Any]:
    return {p.name: p for p in cmd.params}


def test_every_command_and_the_api_default_to_auto() -> None:
    from resdom.cli.data_options import DataOptions
    from resdom.pipeline.demo import DemoSettings
    from resdom.pipeline.reproduce import GridSpec

    with_protocol = {path: cmd for path, cmd in cli_commands(typer.main.get_command(_typer_app))
                     if "protocol" in _options(cmd)}
    assert {("train",), ("data", "split"), ("config", "show"), ("reproduce",), ("remedies",)} <= set(with_protocol)
    for path, cmd in with_protocol.items():
        default = _options(cmd)["protocol"].default
        assert default in (None, AUTO_PROTOCOL), (path, default)  # None: DataOptions' default, auto
        assert "auto" in (_options(cmd)["protocol"].help or ""), path
    assert DataOptions().protocol_choice == AUTO_PROTOCOL
    assert inspect.signature(prepare_split).parameters["protocol"].default == AUTO_PROTOCOL
    assert DemoSettings().protocol == AUTO_PROTOCOL
    assert inspect.signature(GridSpec).parameters["protocol"].default == AUTO_PROTOCOL


def test_train_resolves_auto_from_the_data_and_its_configuration_with_it(tmp_path: Path, capsys) -> None:
    lines = _user_lines(tmp_path)
    for source, protocol in ((str(lines), "loo"), (SYNTH, "gts")):
        out = tmp_path / f"run-{protocol}"
        code, _, err = run_cli(capsys, "train", source, "--out", str(out), *TINY)
        assert code == 0, err
        assert f"data: protocol: {protocol}, chosen by auto" in err
        config = json.loads((out / "config.json").read_text())
        assert config["data"]["protocol"] == protocol
        tiny = {"hidden": 8, "layers": 1, "heads": 1, "max_len": 8}
        model_cfg, train_cfg = resolve_configs("sasrec", tiny, {"epochs": 1, "device": "cpu"}, n_items=0,
                                               protocol=protocol, source=source)
        # the protocol's own defaults: gts's reference architecture, loo's BSARec code base
        assert config["model"] == {**model_cfg.model_dump(mode="json"), "n_items": config["model"]["n_items"]}
        assert config["train"] == train_cfg.model_dump(mode="json")


def test_config_show_prints_what_train_uses(capsys) -> None:
    def shown(*args: str) -> dict[str, Any]:
        import yaml

        code, out, err = run_cli(capsys, "config", "show", "sasrec", *args)
        assert code == 0, err
        return yaml.safe_load(out), out.splitlines()[:6]

    for args, protocol, dataset in (((), "gts", None), (("--dataset", "beauty"), "loo", "beauty"),
                                    (("--dataset", "beauty-ts"), "gts", "beauty-ts"), (("--protocol", "LOO"), "loo",
                                                                                       None)):
        values, header = shown(*args)
        model_cfg, train_cfg = resolve_configs("sasrec", {}, {}, n_items=1, protocol=protocol, source=dataset)
        assert values["data"]["protocol"] == protocol, args
        assert values["train"] == train_cfg.model_dump(mode="json"), args
        assert values["model"]["norm_first"] == model_cfg.norm_first and values["model"]["hidden"] == model_cfg.hidden
        said = [x for x in header if x.startswith("# protocol ")]
        assert bool(said) == ("--protocol" not in args), header  # the default's choice is said; a named one is not
    assert [x for x in shown()[1] if x.startswith("# protocol ")] == [
        "# protocol gts: what the default, auto, uses for data with timestamps; `--protocol loo` or `--dataset NAME` "
        "shows another."]


def test_the_grid_keeps_gts_on_its_data_sets_and_splits_beauty_leave_one_out(tmp_path: Path) -> None:
    from resdom.pipeline.reproduce import GridSpec

    spec = GridSpec(["beauty-ts", "toys-ts", "beauty", "synthetic:demo"], ["sasrec"], [1], tmp_path / "grid")
    assert [spec.protocol_of(d) for d in spec.datasets] == ["gts", "gts", "loo", "gts"]
    named = GridSpec(["beauty-ts"], ["sasrec"], [1], tmp_path / "grid", protocol="GTS")
    assert named.protocol == "gts" and named.protocol_of("beauty-ts") == "gts"
    with pytest.raises(ResdomError, match="--protocol: none holds out no test users"):
        GridSpec(["beauty-ts"], ["sasrec"], [1], tmp_path / "grid", protocol="none")
    with pytest.raises(ResdomError, match=r"did you mean gts\?"):
        GridSpec(["beauty-ts"], ["sasrec"], [1], tmp_path / "grid", protocol="gst")


def test_a_quantile_of_gts_on_data_without_timestamps(tmp_path: Path, capsys) -> None:
    lines = str(_user_lines(tmp_path))
    with pytest.raises(ResdomError, match=r"^valid_quantile: sets the validation cut time of the gts protocol; the "
                                          r"data has no timestamps, so the default protocol, auto, splits it loo"):
        prepare_split(lines, valid_quantile=0.8)
    code, _, err = run_cli(capsys, "data", "split", lines, "--valid-quantile", "0.8", "--out", str(tmp_path / "s"))
    one_line_error(code, err, "--valid-quantile: sets the validation cut time of the gts protocol; the data has no "
                   "timestamps")
    code, _, err = run_cli(capsys, "data", "split", "beauty", "--valid-quantile", "0.8", "--out", str(tmp_path / "t"))
    one_line_error(code, err, "--valid-quantile: sets the validation cut time of --protocol gts; this is a loo split "
                   "(the default protocol, auto: the data has none), which has none")


def test_protocol_in_any_case_and_the_closest_named(tmp_path: Path, capsys) -> None:
    assert prepare_split(SYNTH, "GTS").manifest["protocol"] == "gts"
    with pytest.raises(ResdomError, match=r"^protocol: unknown protocol 'lo' \(did you mean loo\? choose auto, loo, "
                                          r"gts or none\)"):
        prepare_split(SYNTH, "lo")
    code, _, err = run_cli(capsys, "data", "split", SYNTH, "--protocol", "atuo", "--out", str(tmp_path / "s"))
    one_line_error(code, err, "--protocol: unknown protocol 'atuo' (did you mean auto?")


# ------------------------------------------------------------------------------------------------ closed choices


@pytest.mark.parametrize(("field", "given", "value"), [
    ("device", "CPU", "cpu"), ("precision", "BF16-Loss", "bf16-loss"), ("objective", " CE_ALL", "ce_all"),
    ("metric", "ndcg@10", "NDCG@10"), ("negative_sampling", "Uniform", "uniform")])
def test_train_choices_in_any_case(field: str, given: str, value: str) -> None:
    assert getattr(make_train_config(**{field: given}), field) == value


@pytest.mark.parametrize(("field", "given", "closest"), [
    ("device", "cpuu", "cpu"), ("precision", "bf16-los", "bf16-loss"), ("objective", "ce_al", "ce_all"),
    ("metric", "NDGC@10", "NDCG@10"), ("negative_sampling", "unifrom", "uniform")])
def test_train_choices_name_the_closest(field: str, given: str, closest: str) -> None:
    with pytest.raises(ResdomError, match=rf"train\.{field}: unknown .*\(did you mean {closest}\? choose "):
        make_train_config(**{field: given})


def test_devices_in_any_case_and_the_closest_named(capsys) -> None:
    from resdom.distributed import resolve_device

    assert str(resolve_device(" CPU ")) == "cpu"
    with pytest.raises(ResdomError, match=r"--device: unknown device 'cpuu' \(did you mean cpu\? auto, cpu"):
        resolve_device("cpuu", "--device")
    code, _, err = run_cli(capsys, "evaluate", "nowhere", "--device", "Cpu_")
    one_line_error(code, err, "--device: unknown device 'cpu_' (did you mean cpu?")


def test_remedy_names_name_the_closest() -> None:
    from resdom.experiments import remedy_label

    assert remedy_label("SASRec", "GATE") == "sasrec-gate"
    with pytest.raises(ResdomError, match=r"--variants: unknown variant 'gaet'; .*\(did you mean gate\?\)"):
        remedy_label("sasrec", "gaet")
    with pytest.raises(ResdomError, match=r"--model: remedies apply to .*\(did you mean sasrec\?\)"):
        remedy_label("sasrc", "gate")


def test_prepare_splits_options_name_the_closest() -> None:
    """The CLI's --format is prepare_split's fmt (format is Python's builtin); a near miss names the option meant."""
    with pytest.raises(ResdomError, match=r"^unknown data option 'format' \(did you mean fmt\? options: k_core, "):
        prepare_split(SYNTH, format="csv")
    with pytest.raises(ResdomError, match=r"^unknown data option 'kcore' \(did you mean k_core\? options: "):
        prepare_split(SYNTH, kcore=5)
    with pytest.raises(ResdomError, match=r"^unknown data option 'time_column' \(did you mean time_col\? "):
        prepare_split(SYNTH, time_column="ts")


def test_the_closest_hint_compares_in_any_case() -> None:
    assert closest_hint("ndgc@10", ("HR@10", "NDCG@10")) == "did you mean NDCG@10? "
    assert closest_hint("zzz", ("HR@10", "NDCG@10")) == ""


def test_the_evaluation_part_has_the_apis_name_in_the_cli() -> None:
    """The API's ``part`` is the CLI's ``--part`` (``--split``, its older name, is the same option)."""
    for name in ("evaluate", "diagnose"):
        cmd = typer.main.get_command(_typer_app).commands[name]
        (part,) = [p for p in cmd.params if "--part" in p.opts]
        assert part.opts == ["--part", "--split"] and part.default == "test"
    assert inspect.signature(resdom.evaluate).parameters["part"].default == "test"
    assert inspect.signature(resdom.diagnose).parameters["part"].default == "test"


# --------------------------------------------------------------------------------------------- help at 80 columns


def _help(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERMINAL_WIDTH", "80")
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert invoke(*path, "--help") == 0
    return buf.getvalue()


def _shown_default(param: Any) -> str | None:
    """The default a parameter's help shows (Typer's ``[default: ...]``), None where it shows none."""
    if getattr(param, "hidden", False) or param.default is None or param.show_default is False:
        return None
    if isinstance(param.show_default, str):
        return param.show_default
    if getattr(param, "is_flag", False):
        if param.secondary_opts:  # --progress/--no-progress: the flag that is on
            names = param.opts if param.default else param.secondary_opts
            return names[0].lstrip("-")
        return None  # a plain flag, off by default: nothing shown
    if isinstance(param.default, (list, tuple)):
        return None if not param.default else ", ".join(map(str, param.default))
    return str(param.default)


def test_every_help_shows_every_default_whole_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command's and subcommand's help fits 80 columns, cuts no word (Rich marks a cut with an ellipsis), and
    shows the default of every option that has one, each word of it whole; --device's default is named."""
    commands = cli_commands(typer.main.get_command(_typer_app))
    assert len(commands) > 20
    problems = []
    for path, cmd in commands:
        out = _help(path, monkeypatch)
        where = f"resdom {' '.join(path)}"
        problems += [f"{where}: {x!r}" for x in out.splitlines() if len(x) > 80 or "…" in x]
        for param in getattr(cmd, "params", []):
            default = _shown_default(param)
            if default is None:
                continue
            problems += [f"{where} {param.opts[0]}: default word {word!r} not shown whole"
                         for word in default.split() if word not in out]
        device = _options(cmd).get("device")
        if device is not None:
            said = device.default == "auto" or "auto (the default" in (device.help or "")
            problems += [] if said else [f"{where} --device: its default is not shown"]
    assert not problems, problems


# ------------------------------------------------------------------------------------ the API's counts and names


def test_prepare_split_returns_its_counts_and_logs_the_cli_lines(tmp_path: Path, caplog, capsys) -> None:
    df = _frame()
    with caplog.at_level(logging.INFO, logger="resdom.data"):
        split = prepare_split(df, protocol="loo")
    counts = split.counts
    assert counts["read"] == {"users": 40, "items": 17, "interactions": 240, "format": "dataframe"}
    for part in ("train", "valid", "test"):
        assert counts[part] == split.manifest["counts"][part]
    # the slow reference: loo keeps every user with 3+ interactions; test = each user's last item, valid the one before
    assert counts["test"]["users"] == len(split.test) == 40 and counts["valid"]["users"] == len(split.valid) == 40
    assert counts["train"]["interactions"] == len(split.train.items) == 40 * 4
    assert counts["split"]["users_dropped"] == 0 and "protocol" not in counts
    logged = [r.getMessage() for r in caplog.records if r.name == "resdom.data"]
    assert logged == [f"data: {x}" for x in change_lines(split.manifest)]
    assert prepare_split(df).counts["protocol"]["protocol"] == "gts"
    # the CLI prints the same lines
    code, _, err = run_cli(capsys, "data", "split", str(_csv(tmp_path)), "--protocol", "loo", "--out",
                           str(tmp_path / "s"))
    assert code == 0, err
    printed = [x.removeprefix("data: ") for x in err.splitlines() if x.startswith("data: ")]
    assert printed[0].startswith("read 240 interactions of 40 users and 17 items (csv)")
    with cli_names():  # the same lines, options named by their flags (the warning's --quantile)
        assert printed[1:] == change_lines(split.manifest)[1:]
    assert "leave-one-out already tests" in printed[-1] and "quantile" not in printed[-1]  # loo has no quantile
    gts = prepare_split(df).manifest  # its warning names the options that help, as the caller names them
    assert "a lower quantile (" in change_lines(gts)[-1] and "or protocol='loo' (" in change_lines(gts)[-1]
    with cli_names():
        assert "a lower --quantile (" in change_lines(gts)[-1] and "or --protocol loo (" in change_lines(gts)[-1]


def test_api_errors_name_python_arguments_and_the_cli_its_flags(tmp_path: Path, capsys) -> None:
    csv = tmp_path / "shop.csv"
    csv.write_text("customer,product,ts\nc1,p1,1\nc1,p2,2\n")
    lines = str(_user_lines(tmp_path))
    cases = [  # (the API's call, its message, the CLI's arguments, the CLI's message)
        (lambda: prepare_split(str(csv)), "missing column 'user_id' (columns: 'customer', 'product', 'ts'); name it "
         "with user_col=...", ["data", "split", str(csv)], "name it with --user-col"),
        (lambda: prepare_split("beauty", fmt="csv"), "data set 'beauty' is in format 'user-lines'; fmt='csv' does not "
         "apply", ["data", "split", "beauty", "--format", "csv"], "--format csv does not apply"),
        (lambda: prepare_split(lines, "gts"), "the global temporal split needs timestamps; this source has none (use "
         "protocol='loo')", ["data", "split", lines, "--protocol", "gts"], "(use --protocol loo)"),
        (lambda: prepare_split("beauty", data_dir=tmp_path / "none"), "not found (data_dir must be laid out like "
         "shared/data/raw", ["data", "split", "beauty", "--data-dir", str(tmp_path / "none")],
         "not found (--data-dir must be laid out"),
    ]
    for call, message, args, flag_message in cases:
        with pytest.raises(ResdomError) as e:
            call()
        assert message in str(e.value) and " --" not in str(e.value), str(e.value)
        code, _, err = run_cli(capsys, *args, "--out", str(tmp_path / "out"))
        one_line_error(code, err, flag_message)


@pytest.mark.parametrize(("name", "field", "given", "value"), [
    ("sasrec", "readout", "Mean", "mean"), ("sasrec", "activation", "ReLU", "relu"),
    ("sasrec", "qkv_init", "XAVIER", "xavier"), ("duorec", "duorec_views", "Sup", "sup")])
def test_model_choices_in_any_case(name: str, field: str, given: str, value: str) -> None:
    from resdom.models.config import make_model_config

    assert getattr(make_model_config(name=name, **{field: given}), field) == value


@pytest.mark.parametrize(("name", "field", "given", "closest"), [
    ("sasrec", "readout", "meen", "mean"), ("sasrec", "output", "untyed", "untied"),
    ("duorec", "duorec_views", "suup", "sup")])
def test_model_choices_name_the_closest(name: str, field: str, given: str, closest: str) -> None:
    from resdom.models.config import make_model_config

    with pytest.raises(ResdomError, match=rf"model\.{field}: unknown .*\(did you mean {closest}\? choose "):
        make_model_config(name=name, **{field: given})
