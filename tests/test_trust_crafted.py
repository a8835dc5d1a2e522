"""Crafted or broken inputs end in one clear line (exit 2, no traceback), nothing the user
owns is overwritten, and nothing blows up (output folders, importer configs, rediagnose paths, the demo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import SMALL_SYNTHETIC as SOURCE
from cli_helpers import TINY_MODEL as TINY
from cli_helpers import one_line_error, run_cli

from resdom.data.sequences import SplitData
from resdom.errors import ResdomError
from resdom.rundir import check_output_folder

# ------------------------------------------------------------------------------------ command-line mistakes


@pytest.mark.parametrize("args,needles", [
    (["train", SOURCE], ["resdom train: missing option '--out'", "(see resdom train --help)"]),
    (["train"], ["resdom train: missing argument 'source'"]),
    (["trian"], ["resdom: no such command 'trian'", "train"]),
    (["train", SOURCE, "--out", "x", "--epochs", "abc"], ["resdom train: invalid value for '--epochs'"]),
    (["train", SOURCE, "--out", "x", "--bogus"], ["resdom train: no such option: --bogus"]),
    (["data", "split"], ["resdom data split: missing argument"]),
    (["diagnose", "a", "b", "c"], ["resdom diagnose:"]),
])
def test_a_command_line_click_cannot_parse_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], args: list[str],
                                                       needles: list[str]) -> None:
    """Not Click's boxed usage message (five lines): one ``error:`` line naming the command and the option."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *args)
    one_line_error(code, err, *needles)
    assert err.strip().count("\n") == 0 and out == "" and "Usage:" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_an_error_quoting_a_multi_line_message_is_still_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Libraries' messages (pyarrow's schema dumps) span lines; the CLI prints a ResdomError that quotes one as one
    line, spaces inside a line kept as they are (an id such as 'a  b' is not changed)."""
    def fail(*args: object, **kwargs: object) -> str:
        raise ResdomError("x.parquet: not readable (ArrowInvalid: no field\n  user_id: int64\r\n  'a  b': string\n)")

    monkeypatch.setattr("resdom.cli.data_cmd.format_stats", fail)
    code, _, err = run_cli(capsys, "data", "stats", SOURCE)
    line = one_line_error(code, err, "x.parquet: not readable")
    assert line.endswith("(ArrowInvalid: no field user_id: int64 'a  b': string )")
    assert [x for x in err.splitlines() if not x.startswith("data: ")] == [line]  # after the data summary: one line


def test_a_model_too_large_for_memory_is_one_line_and_writes_no_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A size whose weights do not fit (model.max_len 10^5 on a machine made to refuse it) fails where the weights
    are allocated: one line naming the sizes, and no run folder (the model is built before config.json is written);
    an absurd one (10^9) is refused by the configuration first. Other errors are not disguised."""
    import resdom.training.trainer as trainer

    def refuse(cfg: object) -> None:
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you "
                           "tried to allocate 32000000000 bytes")

    monkeypatch.setattr(trainer, "build_model", refuse)
    out = tmp_path / "r"
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(out), *TINY, "--set", "model.max_len=100000")
    one_line_error(code, err, "model: its weights do not fit in memory on cpu (model.max_len 100000, "
                              "model.hidden 8,", "lower --set model.max_len=N or --set model.hidden=N")
    assert not out.exists()
    # past RESDOM_MAX_MODEL_BYTES the configuration refuses it before anything is built
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(out), *TINY, "--set", "model.max_len=1000000000")
    one_line_error(code, err, "error: model (given by --set model.", "--set model.max_len", "): refused: this model "
                   "would take about", "RESDOM_MAX_MODEL_BYTES")
    assert not out.exists()

    def broken(cfg: object) -> None:
        raise RuntimeError("some other failure")

    monkeypatch.setattr(trainer, "build_model", broken)
    with pytest.raises(RuntimeError, match="some other failure"):
        run_cli(capsys, "train", SOURCE, "--out", str(out), *TINY)


@pytest.mark.parametrize("args", [[], ["data"]])
def test_a_bare_command_group_still_prints_its_help(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and "Usage:" in out + err and "Commands" in out + err and "error:" not in err


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "train", "--help")
    assert code == 0 and "--out" in out and err == ""
    code, out, err = run_cli(capsys, "version")
    assert code == 0 and out.startswith("resdom ")


# ----------------------------------------------------------------------------------------- output folders


@pytest.mark.parametrize("args, message", [
    (["report", "RUN", "--out", ""], "--out: an empty value (an unset shell variable?); give one"),
    (["report", "RUN", "--out="], "--out: an empty value"),
    (["recommend", "RUN", "-o", ""], "-o: an empty value"),
    (["evaluate", ""], "an empty argument (an unset shell variable?); give a value or leave it out"),
    (["train", SOURCE, "--out", "x", "--config", ""], "--config: an empty value"),
])
def test_an_empty_argument_is_refused_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], args: list[str],
                                                           message: str) -> None:
    """`--out "$OUT"` with OUT unset: Path("") is the working folder, so `report` wrote its report there and
    `evaluate ""` looked for a run in it."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, *[str(tmp_path / "run") if a == "RUN" else a for a in args])
    one_line_error(code, err, message)
    assert list(tmp_path.iterdir()) == []


def test_empty_values_that_mean_all_are_kept() -> None:
    from resdom.cli.main import empty_argument

    assert empty_argument(["diagnose", "run", "--what", "", "--layers", "", "--alphas="]) is None
    from resdom.cli.diagnose_cmd import options_from_flags

    defaults = options_from_flags()  # and each of them is its default there (--alphas "" was refused)
    assert options_from_flags(what="", layers=" ", alphas="") == defaults
    assert empty_argument(["recommend", "run", "--", ""]) is None  # after "--" nothing is an option
    assert empty_argument(["train", "src", "--set", ""]) == "--set: an empty value (an unset shell variable?); give one"


def test_train_refuses_a_folder_of_other_files_and_leaves_it_untouched(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}')  # a user's own config.json, not a run's
    (folder / "notes.txt").write_text("keep me")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(folder), "--epochs", "1", *TINY)
    one_line_error(code, err, "--out", "not a resdom run directory", "notes.txt")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_data_split_replaces_only_its_own_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`data split --out` rewrites the same split, replaces another one only with --force, and never writes into a
    folder of other files, a run directory or a run's data/ (the split its checkpoint was trained on)."""
    def files(folder: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in folder.iterdir()}

    out = tmp_path / "split"
    assert run_cli(capsys, "data", "split", SOURCE, "--protocol", "loo", "--out", str(out))[0] == 0
    loo = files(out)
    assert run_cli(capsys, "data", "split", SOURCE, "--protocol", "loo", "--out", str(out))[0] == 0  # the same again
    assert files(out) == loo
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--protocol", "gts", "--out", str(out))
    one_line_error(code, err, f"--out {out}: holds another split (made from {SOURCE}, loo protocol)", "--force")
    assert files(out) == loo
    assert run_cli(capsys, "data", "split", SOURCE, "--protocol", "gts", "--out", str(out), "--force")[0] == 0
    assert SplitData.load(out).manifest["protocol"] == "gts"

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--out", str(folder), "--force")
    one_line_error(code, err, "--out", "is not a split folder", "notes.txt")
    assert files(folder) == {"notes.txt": b"keep me"}

    run = tmp_path / "run"
    assert run_cli(capsys, "train", str(out), "--out", str(run), "--epochs", "1", *TINY)[0] == 0
    before = files(run / "data")
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--out", str(run))
    one_line_error(code, err, f"--out {run}: is a run directory")
    code, _, err = run_cli(capsys, "data", "split", SOURCE, "--out", str(run / "data"), "--force")
    one_line_error(code, err, f"is the split of the run directory {run}")
    assert files(run / "data") == before and not (run / SplitData.ARRAYS).exists()


def test_data_split_replaces_no_split_saved_meanwhile(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `data split --out` at once: the one that finds the folder being written is refused in one line, and the
    one that finds another split saved there while it was splitting refuses to replace it (both said "-> OUT",
    exit 0, and the folder held the last one's split)."""
    from resdom.cli.data_options import DataOptions
    from resdom.data.prepare import prepare_split
    from resdom.io import directory_lock

    out = tmp_path / "split"
    with directory_lock(out, "writing"):  # another `data split` saving there
        code, stdout, err = run_cli(capsys, "data", "split", SOURCE, "--protocol", "loo", "--out", str(out))
    one_line_error(code, err, f"{out}: another process is already writing there", "choose another --out")
    assert stdout == "" and not (out / SplitData.MANIFEST).exists()

    split = DataOptions.split

    def saved_meanwhile(self: DataOptions, source: str) -> SplitData:
        made = split(self, source)
        prepare_split(SOURCE, "gts").save(out)  # what the other process saved while this one split
        return made

    monkeypatch.setattr(DataOptions, "split", saved_meanwhile)
    code, stdout, err = run_cli(capsys, "data", "split", SOURCE, "--protocol", "loo", "--out", str(out))
    one_line_error(code, err, f"--out {out}: holds another split (made from {SOURCE}, gts protocol)")
    assert SplitData.load(out).manifest["protocol"] == "gts" and "->" not in stdout


@pytest.mark.parametrize("command", [["train", SOURCE, *TINY], ["data", "split", SOURCE], ["report", "RUNS"]])
def test_out_naming_an_existing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 command: list[str]) -> None:
    target = tmp_path / "afile"
    target.write_text("precious")
    runs = tmp_path / "runs"
    runs.mkdir()
    args = [str(runs) if a == "RUNS" else a for a in command]
    code, _, err = run_cli(capsys, *args, "--out", str(target))
    one_line_error(code, err, "--out", "exists and is not a directory")
    assert target.read_text() == "precious"


@pytest.mark.parametrize("below", ["", "sub"])
@pytest.mark.parametrize("command", [["train", SOURCE, *TINY], ["data", "split", SOURCE], ["report", "RUNS"],
                                     ["demo", "--epochs", "1"]])
def test_out_through_a_broken_link_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               command: list[str], below: str) -> None:
    link = tmp_path / "gone"
    link.symlink_to(tmp_path / "nowhere")
    runs = tmp_path / "runs"
    runs.mkdir()
    args = [str(runs) if a == "RUNS" else a for a in command]
    code, _, err = run_cli(capsys, *args, "--out", str(link / below) if below else str(link))
    one_line_error(code, err, "--out", f"{link} is a link to {tmp_path / 'nowhere'}, which does not exist")
    assert not (tmp_path / "nowhere").exists()


def test_out_through_a_loop_of_links_says_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A loop (a -> b -> a) was "a is a link to b, which does not exist", while b is right there."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for args in (["data", "split", SOURCE, "--out"], ["config", "show", "sasrec", "--out"]):
        code, _, err = run_cli(capsys, *args, str(tmp_path / "a"))
        one_line_error(code, err, f"--out {tmp_path / 'a'}: {tmp_path / 'a'} is a link to {tmp_path / 'b'}, which "
                       "leads back to it (a loop of links)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_document_through_a_loop_of_links_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`report --doc a` (a -> b -> a) was pathlib's RuntimeError traceback ("Symlink loop from ..."), raised by
    Path.resolve() before Python 3.13; the document is checked first now, and the CLI turns that error, wherever
    else it comes from, into one line naming the path."""
    import resdom.cli.pipeline_cmd as pipeline_cmd

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    runs = tmp_path / "runs"
    (runs / "diagnostics").mkdir(parents=True)
    code, _, err = run_cli(capsys, "report", str(runs), "--out", str(tmp_path / "rep"), "--doc", str(tmp_path / "a"))
    one_line_error(code, err, f"--doc {tmp_path / 'a'}: a loop of symbolic links")

    def resolve_loop(path: Path) -> list[Path]:
        raise RuntimeError(f"Symlink loop from {str(tmp_path / 'a')!r}")

    monkeypatch.setattr(pipeline_cmd, "find_run_dirs", resolve_loop)
    code, _, err = run_cli(capsys, "report", str(runs), "--out", str(tmp_path / "rep"))
    one_line_error(code, err, f"{tmp_path / 'a'}: a loop of symbolic links")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "runs"]


def test_an_output_file_through_a_broken_link_is_refused(tmp_path: Path) -> None:
    from resdom.rundir import check_output_file

    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ResdomError, match="gone is a link to .*nowhere, which does not exist"):
        check_output_file(tmp_path / "gone" / "recs.csv", "--out", "user", "a list")


@pytest.mark.parametrize("command", ["evaluate", "diagnose", "recommend"])
def test_a_file_given_as_a_run_directory_is_named_as_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            command: str) -> None:
    from resdom.report.collect import read_run

    afile = tmp_path / "recs.csv"
    afile.write_text("user,item\n")
    code, _, err = run_cli(capsys, command, str(afile))
    one_line_error(code, err, f"{afile}: a file, not a run directory")
    code, _, err = run_cli(capsys, command, str(tmp_path / "absent"))
    one_line_error(code, err, f"{tmp_path / 'absent'}: run directory not found")
    with pytest.raises(ResdomError, match="a file, not a run directory"):
        read_run(afile)
    # a split folder, or a run's own data/, said "no model.safetensors (has training finished at least one epoch?)"
    import pandas as pd

    from resdom.data.prepare import prepare_split

    df = pd.DataFrame({"user_id": [1, 1, 1, 2, 2, 2], "item_id": [1, 2, 3, 2, 3, 1], "timestamp": range(6)})
    split = prepare_split(df, "loo")
    split.save(tmp_path / "split")
    split.save(tmp_path / "run" / "data")
    (tmp_path / "run" / "model.safetensors").write_bytes(b"")
    code, _, err = run_cli(capsys, command, str(tmp_path / "split"))
    one_line_error(code, err, f"{tmp_path / 'split'}: a prepared split (resdom data split), not a run: train a model "
                   f"on it first (resdom train {tmp_path / 'split'} --out RUN)")
    code, _, err = run_cli(capsys, command, str(tmp_path / "run" / "data"))
    one_line_error(code, err, f"{tmp_path / 'run' / 'data'}: the data of the run {tmp_path / 'run'}; give the run "
                   "itself")


def test_output_folder_rules(tmp_path: Path) -> None:
    check_output_folder(tmp_path / "new", runs=True)  # absent: fine
    empty = tmp_path / "empty"
    empty.mkdir()
    check_output_folder(empty, runs=True)
    check_output_folder(empty, runs=False)
    partial = tmp_path / "partial"  # a run killed before its config.json: data/, a lock, a temporary
    (partial / "data").mkdir(parents=True)
    (partial / ".lock").write_text("")
    (partial / ".config.json.abc.tmp").write_text("")
    check_output_folder(partial, runs=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": {"name": "sasrec"}, "train": {}, "versions": {}}))
    (run / "recs.csv").write_text("user,item\n")  # a run with a file of the user's beside it is still a run
    check_output_folder(run, runs=True)
    with pytest.raises(ResdomError, match="exists and is not empty"):
        check_output_folder(run, runs=False)
    check_output_folder(run, runs=False, force=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("[1, 2]")
    with pytest.raises(ResdomError, match="not a resdom run directory .it holds config.json"):
        check_output_folder(other, runs=True)
    # --force (an import) replaces a run, never a folder of other files: it would remove their diagnostics/ and state/
    with pytest.raises(ResdomError, match="not a resdom run directory .it holds config.json"):
        check_output_folder(other, runs=False, force=True)


def test_api_fit_refuses_a_folder_of_other_files(tmp_path: Path) -> None:
    import resdom

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "metrics.json").write_text("{}")
    (folder / "paper.tex").write_text("")
    split = resdom.prepare_split(SOURCE, protocol="loo")
    with pytest.raises(ResdomError, match="out .*not a resdom run directory"):
        resdom.fit(split, "sasrec", out=folder, epochs=1, hidden=8, layers=1, max_len=8, device="cpu")
    assert (folder / "metrics.json").read_text() == "{}"


# ---------------------------------------------------------------------------------------- importer settings

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def rectools_parts(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The RecTools SASRec fixture's Lightning checkpoint (as a dict) and a small .inter file of its items."""
    from test_adapters_rectools import _synthetic_inter

    from resdom.adapters.rectools import read_rectools_file
    from resdom.adapters.safe_pickle import load_torch_bytes, loads_restricted

    path = FIXTURES / "rectools" / "sasrec.rectools"
    outer = loads_restricted(path.read_bytes(), ("rectools.",))
    ckpt = load_torch_bytes(outer.state["fitted_checkpoint"], object_arrays=True)
    inter = _synthetic_inter(read_rectools_file(path), tmp_path_factory.mktemp("rectools") / "s.inter")
    return ckpt, inter


def _rectools_variant(parts: tuple[dict, Path], tmp_path: Path, change) -> Path:  # noqa: ANN001
    import copy

    import torch

    ckpt = copy.deepcopy(parts[0])
    change(ckpt, ckpt["hyper_parameters"]["model_config"])
    path = tmp_path / "crafted.ckpt"
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("change,needles", [
    (lambda c, m: c.__setitem__("state_dict", list(c["state_dict"].values())), ["state_dict is a list"]),
    (lambda c, m: m.__setitem__("similarity_module_kwargs", ["dot"]), ["similarity_module_kwargs is a list"]),
    (lambda c, m: c["hyper_parameters"].__setitem__("item_external_ids", 5), ["item_external_ids", "not a list"]),
    (lambda c, m: m.__setitem__("n_heads", 3), ["n_heads=3", "hidden size 16"]),
    (lambda c, m: m.__setitem__("session_max_len", "long"), ["session_max_len='long'", "not an integer"]),
    (lambda c, m: m.__setitem__("dropout_rate", [0.1]), ["dropout_rate=[0.1]", "not a number"]),
], ids=["state_dict_list", "similarity_kwargs_list", "item_ids_number", "heads_3_hidden_16", "max_len_text",
        "dropout_list"])
def test_import_rectools_crafted_settings_are_one_line(rectools_parts: tuple[dict, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str], change, needles) -> None:  # noqa: ANN001
    path = _rectools_variant(rectools_parts, tmp_path, change)
    code, _, err = run_cli(capsys, "import-rectools", str(path), "--data", str(rectools_parts[1]), "--out",
                           str(tmp_path / "run"))
    one_line_error(code, err, str(path), *needles)
    assert not (tmp_path / "run").exists()


def test_import_rectools_reports_weights_it_does_not_use(rectools_parts: tuple[dict, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    clean = _rectools_variant(rectools_parts, tmp_path, lambda c, m: None)
    code, out, err = run_cli(capsys, "import-rectools", str(clean), "--data", str(rectools_parts[1]), "--out",
                             str(tmp_path / "clean"))
    assert code == 0, err
    assert "ignored" not in out
    assert json.loads((tmp_path / "clean" / "config.json").read_text())["imported_from"]["ignored_weights"] == []
    extra = _rectools_variant(rectools_parts, tmp_path,
                              lambda c, m: c["state_dict"].__setitem__("torch_model.adapter.weight", torch.ones(2)))
    code, out, err = run_cli(capsys, "import-rectools", str(extra), "--data", str(rectools_parts[1]), "--out",
                             str(tmp_path / "run"))
    assert code == 0, err
    assert "ignored: 1 weight(s)" in out and "torch_model.adapter.weight" in out
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["imported_from"]["ignored_weights"] == ["torch_model.adapter.weight"]


def _recbole_variant(tmp_path: Path, change: dict, extra_weights: dict | None = None) -> Path:
    """The RecBole fixture re-saved with a plain-dict config (as the importer accepts) changed by ``change``."""
    import torch

    from resdom.adapters.recbole import RECBOLE_STAND_INS
    from resdom.adapters.safe_pickle import Inert, load_torch_file

    obj = load_torch_file(FIXTURES / "recbole" / "sasrec_tiny.pth", RECBOLE_STAND_INS)
    config = {k: (v.value if isinstance(v, Inert) else v) for k, v in obj["config"].state["final_config_dict"].items()}
    path = tmp_path / "crafted.pth"
    torch.save({"config": {**config, **change}, "state_dict": {**obj["state_dict"], **(extra_weights or {})},
                "epoch": 3}, path)
    return path


@pytest.mark.parametrize("change,needles", [
    ({"encoding": "rot13"}, ["encoding='rot13'", "not a text encoding"]),
    ({"layer_norm_eps": "x"}, ["layer_norm_eps='x'", "not a number"]),
    ({"hidden_size": "abc"}, ["hidden_size='abc'", "not an integer"]),
    ({"n_heads": 3}, ["n_heads=3", "hidden size 16"]),
    ({"hidden_dropout_prob": 7}, ["valid model", "dropout"]),
], ids=["encoding_rot13", "eps_text", "hidden_text", "heads_3", "dropout_7"])
def test_import_recbole_crafted_settings_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      change: dict, needles: list[str]) -> None:
    path = _recbole_variant(tmp_path, change)
    code, _, err = run_cli(capsys, "import-recbole", str(path), "--data", str(FIXTURES / "recbole" / "tiny.inter"),
                           "--out", str(tmp_path / "run"))
    one_line_error(code, err, *needles)
    assert not (tmp_path / "run").exists()


def test_import_recbole_reports_weights_it_does_not_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    path = _recbole_variant(tmp_path, {}, {"trm_encoder.layer.0.gate.weight": torch.ones(16),
                                           "item_bias": torch.zeros(41)})
    code, out, err = run_cli(capsys, "import-recbole", str(path), "--data", str(FIXTURES / "recbole" / "tiny.inter"),
                             "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert "ignored: 2 weight(s)" in out and "item_bias, trm_encoder.layer.0.gate.weight" in out
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["imported_from"]["ignored_weights"] == ["item_bias", "trm_encoder.layer.0.gate.weight"]


def test_import_pmixer_reports_weights_it_does_not_use(tmp_path: Path) -> None:
    import numpy as np
    import torch
    from test_adapters_pmixer import HEADS, _data_file, _pmixer

    from resdom.adapters.pmixer import import_pmixer

    data, seqs = _data_file(tmp_path / "data.txt", np.random.default_rng(7))
    state = _pmixer(False, int(max(max(s) for s in seqs.values())), 0).state_dict()
    torch.save({**state, "attention_layers.0.extra_bias": torch.zeros(3)}, tmp_path / "s.pth")
    lines: list[str] = []
    run = import_pmixer(tmp_path / "s.pth", str(data), tmp_path / "run", heads=HEADS, log=lines.append)
    assert any(x.startswith("ignored: 1 weight(s)") and "attention_layers.0.extra_bias" in x for x in lines)
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["imported_from"]["ignored_weights"] == ["attention_layers.0.extra_bias"]


# ------------------------------------------------------------------------------------- rediagnose_cells.py


def test_rediagnose_never_follows_a_cell_outside_the_grid_folder(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A cell.json naming ``..`` / an absolute path as its data set or label, or a grid folder whose cell is a link
    out of it, finds no run directory (nothing outside ``--runs`` is diagnosed, nothing outside the store
    written); an honest cell still finds its run."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import rediagnose_cells

    from resdom.runs import checkpoint_id

    def weights(folder: Path) -> str:
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"weights of " + str(folder).encode())
        return checkpoint_id(folder / "model.safetensors")

    grid = tmp_path / "runs" / "repro"
    ok = weights(grid / "beauty" / "sasrec" / "seed1")
    outside = weights(tmp_path / "runs" / "evil" / "seed1")  # runs/repro/../evil/seed1
    secret = weights(tmp_path / "secret" / "x" / "seed1")
    (grid / "beauty" / "linked").symlink_to(tmp_path / "secret" / "x")
    cells = {
        "ok": {"dataset": "beauty", "label": "sasrec", "seed": 1, "checkpoint": ok},
        "dotdot": {"dataset": "..", "label": "evil", "seed": 1, "checkpoint": outside},
        "absolute": {"dataset": str(tmp_path / "secret"), "label": "x", "seed": 1, "checkpoint": secret},
        "slashes": {"dataset": "beauty/../..", "label": "evil", "seed": 1, "checkpoint": outside},
        "link": {"dataset": "beauty", "label": "linked", "seed": 1, "checkpoint": secret},
        "seed_text": {"dataset": "beauty", "label": "sasrec", "seed": "1/../1", "checkpoint": ok},
    }
    folders = []
    for name, meta in cells.items():
        folder = tmp_path / "store" / name
        folder.mkdir(parents=True)
        (folder / "cell.json").write_text(json.dumps(meta))
        folders.append(folder)
    (tmp_path / "store" / "broken").mkdir()
    (tmp_path / "store" / "broken" / "cell.json").write_text("[1, 2")
    folders.append(tmp_path / "store" / "broken")
    found = list(rediagnose_cells.cells_with_runs(folders, str(tmp_path / "runs" / "repro*")))
    assert [(c.name, r) for c, _, r in found] == [("ok", grid / "beauty" / "sasrec" / "seed1")]
    err = capsys.readouterr().err
    for name in ("dotdot", "absolute", "slashes", "seed_text", "broken"):
        assert f"store/{name}: skipped" in err
    assert "store/link: skipped (no run directory" in err


def test_rediagnose_stale_names_only_a_query_models_recovery_read_before_prefix_passes(tmp_path: Path) -> None:
    """``--stale`` (the queue diagnoses such a cell again as soon as it is stored): a query-token model's
    recovery.json without ``offsets_read`` is stale; the same with it, another readout's, or a cell whose files are
    absent or unreadable is not."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import rediagnose_cells

    def cell(name: str, readout: object, recovery: object, *, config: str | None = None) -> Path:
        folder = tmp_path / name
        (folder / "diagnostics").mkdir(parents=True)
        (folder / "config.json").write_text(config or json.dumps({"model": {"readout": readout}}))
        if recovery is not None:
            (folder / "diagnostics" / "recovery.json").write_text(json.dumps(recovery))
        return folder

    assert rediagnose_cells.stale_reading(cell("old", "query", {"rates": [0.1]}))
    assert not rediagnose_cells.stale_reading(cell("new", "query", {"offsets_read": "prefix passes"}))
    assert not rediagnose_cells.stale_reading(cell("last", "last", {"rates": [0.1]}))
    assert not rediagnose_cells.stale_reading(cell("none", "query", None))
    assert not rediagnose_cells.stale_reading(cell("broken", "query", {}, config="{"))
    assert not rediagnose_cells.stale_reading(cell("list", "query", [], config="[]"))
    assert not rediagnose_cells.stale_reading(tmp_path / "absent")


# ---------------------------------------------------------------------------------------------- progress


@pytest.mark.slow
def test_a_long_epoch_prints_batches_done_in_a_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Not a terminal (a log): lines of batches done / total inside each epoch, at most every PROGRESS_LINE_S
    seconds (here 0: every batch), besides the line per epoch; none when progress is off."""
    import math
    import re

    import resdom
    import resdom.training.trainer as trainer

    monkeypatch.setattr(trainer, "PROGRESS_LINE_S", 0.0)
    split = resdom.prepare_split(SOURCE, protocol="loo")
    tiny = dict(hidden=8, layers=1, max_len=8, batch_size=16, device="cpu")
    resdom.fit(split, "sasrec", out=tmp_path / "run", epochs=1, **tiny)
    err = capsys.readouterr().err
    n_batches = math.ceil(len(split.train) / 16)  # ce_all: one sample per training sequence
    done = [int(m) for m in re.findall(rf"^epoch 1: batch (\d+)/{n_batches}, loss ", err, re.M)]
    assert done == list(range(1, n_batches + 1)) and n_batches > 1, err
    assert re.search(r"^epoch 1/1: loss", err, re.M)
    resdom.fit(split, "sasrec", out=tmp_path / "quiet", epochs=1, progress=False, **tiny)
    assert "batch" not in capsys.readouterr().err
    monkeypatch.setattr(trainer, "PROGRESS_LINE_S", 3600.0)  # the default spacing: no line in a short epoch
    resdom.fit(split, "sasrec", out=tmp_path / "short", epochs=1, **tiny)
    assert ": batch " not in capsys.readouterr().err


# -------------------------------------------------------------------------------------------------- demo


@pytest.mark.slow
def test_demo_with_other_epochs_trains_again_and_says_so(tmp_path: Path) -> None:
    """`resdom demo --epochs 2` on a demo folder trained with 1 epoch trains again (2 epochs in its log, config and
    metrics), saying why; the same settings again reuse the finished run and say that."""
    from resdom.pipeline import DemoSettings, run_demo

    tiny = dict(source="synthetic:n_users=60,n_items=30,min_len=5,max_len=10", batch_size=64, patience=5,
                model={"hidden": 8, "layers": 1, "heads": 1, "max_len": 8})
    out = tmp_path / "demo"
    lines: list[str] = []
    run_demo(out, DemoSettings(epochs=1, **tiny), progress=False, echo=lines.append)
    assert any(x.startswith("[2/3] training SASRec (up to 1 epochs)") for x in lines)
    lines.clear()
    result = run_demo(out, DemoSettings(epochs=2, **tiny), progress=False, echo=lines.append)
    text = "\n".join(lines)
    assert "holds a run trained with other settings (epochs 1 -> 2): training it again from scratch" in text
    assert "[2/3] training SASRec (up to 2 epochs)" in text
    run = result.run_dir
    assert [json.loads(x)["epoch"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert json.loads((run / "config.json").read_text())["train"]["epochs"] == 2
    assert json.loads((run / "metrics.json").read_text())["epochs_run"] == 2
    lines.clear()
    run_demo(out, DemoSettings(epochs=2, **tiny), progress=False, echo=lines.append)
    assert any(x.startswith("[2/3] reusing the finished SASRec run") for x in lines)
    assert "again from scratch" not in "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("out", ["run", "run/report", "runs/run", "runs/run/figures"])
def test_report_refuses_to_write_into_a_run_it_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], out: str) -> None:
    """``resdom report RUN --out RUN`` (or a folder inside it) wrote report.html, figures/ and tables/ among the
    run's own files (in a results store: into the cell the next commit carries); refused, nothing written."""
    import shutil

    fixture = Path(__file__).resolve().parent / "fixtures" / "diagnostics" / "toyA_sasrec_seed1"
    monkeypatch.chdir(tmp_path)
    shutil.copytree(fixture, "run")
    shutil.copytree(fixture, "runs/run")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    code, _, err = run_cli(capsys, "report", "runs" if out.startswith("runs") else "run", "--out", out)
    where = "the run directory" if out in ("run", "runs/run") else "inside"
    one_line_error(code, err, f"--out {out}: is {where} ", "which the report reads; choose a folder outside every run")
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert run_cli(capsys, "report", "runs", "--out", "runs/summary")[0] == 0  # beside the runs: as the grid does


def test_a_parquet_file_whose_pandas_metadata_contradicts_its_schema_is_refused_in_one_line(tmp_path: Path) -> None:
    """pandas names a Parquet file's columns after the file's own pandas metadata; a damaged file whose metadata
    renames a column (``track_id`` as ``track_jd``, as the fuzzing found) is refused naming both, by the Zvuk reader
    (it raised KeyError) and by the generic one, not read under the wrong names."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from resdom.data.native import read_zvuk
    from resdom.data.readers import read_table

    frame = pd.DataFrame({"user_id": [1, 1, 2], "track_id": [5, 6, 5],
                          "datetime": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03"])})
    table = pa.Table.from_pandas(frame)
    meta = dict(table.schema.metadata)
    meta[b"pandas"] = meta[b"pandas"].replace(b'"name": "track_id"', b'"name": "track_jd"')  # field_name kept
    path = tmp_path / "zvuk-interactions.parquet"
    pq.write_table(table.replace_schema_metadata(meta), path)
    assert pd.read_parquet(path).columns.tolist() == ["user_id", "track_jd", "datetime"]  # what pandas does
    said = (f"{path}: a damaged Parquet file: its pandas metadata names the columns 'user_id, track_jd, datetime', "
            "its schema 'user_id, track_id, datetime'")
    for read in (lambda: read_zvuk(path), lambda: read_table(path, "parquet", "user_id", "track_id", "datetime")):
        with pytest.raises(ResdomError) as e:
            read()
        assert str(e.value) == said
    pq.write_table(table, path)  # the same file undamaged reads
    assert len(read_zvuk(path).users) == 3
