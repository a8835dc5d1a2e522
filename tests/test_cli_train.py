"""``resdom train`` / ``resdom evaluate``: config layering, one-line errors (exit 2), mismatched runs, torchrun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from cli_helpers import invoke, run_cli
from test_training_support import toy_split

from resdom.cli.train_cmd import parse_set, read_config_file
from resdom.errors import ResdomError
from resdom.training.config import resolve_configs

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "synthetic:n_users=60,n_items=30,min_len=5,max_len=12"
TINY = ["--set", "model.hidden=16", "--set", "model.layers=1", "--set", "model.max_len=10", "--device", "cpu",
        "--protocol", "loo"]



@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "run"
    assert invoke("train", SOURCE, "--model", "sasrec", "--out", str(out), "--epochs", "2", *TINY) == 0
    return out


def test_train_writes_run_and_prints_metrics(trained_run: Path) -> None:
    cfg = json.loads((trained_run / "config.json").read_text())
    assert cfg["model"]["hidden"] == 16 and cfg["model"]["layers"] == 1 and cfg["train"]["epochs"] == 2
    assert cfg["train"]["objective"] == "ce_all" and cfg["data"]["source"] == SOURCE
    assert cfg["data"]["protocol"] == "loo"
    result = json.loads((trained_run / "metrics.json").read_text())
    assert result["test"]["n_users"] == 60


def test_evaluate_prints_metrics_and_users(trained_run: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "evaluate", str(trained_run))
    assert code == 0 and "60 users" in out and "NDCG@10" in out
    code, out, _ = run_cli(capsys, "evaluate", str(trained_run), "--json", "--device", "cpu")  # trained on the CPU
    data = json.loads(out)
    saved = json.loads((trained_run / "metrics.json").read_text())
    assert data["split"] == "test" and data["filtered"] and data["n_users"] == 60
    assert data["metrics"] == pytest.approx(saved["test"]["metrics"], abs=1e-12)
    code, out, _ = run_cli(capsys, "evaluate", str(trained_run), "--json", "--split", "valid", "--no-filter")
    data = json.loads(out)
    assert not data["filtered"] and data["split"] == "valid"


def test_train_again_on_finished_run_does_not_retrain(trained_run: Path, capsys) -> None:
    before = (trained_run / "metrics.jsonl").read_text()
    code, out, _ = run_cli(capsys, "train", SOURCE, "--out", str(trained_run), "--epochs", "2", *TINY)
    assert code == 0 and "best epoch" in out
    assert (trained_run / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--set", "model.hiden=3"], "model.hiden (did you mean model.hidden?)"),
        (["--set", "train.lr=abc"], "train.lr"),
        (["--set", "train.lr=-1"], "train.lr"),
        (["--set", "hidden=3"], "expected model.<field>=<value>"),
        (["--set", "data.k_core=5"], "--set 'data.k_core=5': a data setting is given by its option, --k-core"),
        (["--set", "train.metric=NDCG@7"], "train.metric"),
        (["--model", "caser"], "--model"),
        (["--protocol", "random"], "--protocol"),
        (["--model", "bsarec", "--set", "train.objective=ce_all"], "label leakage"),
        (["--device", "tpu"], "--device: unknown device 'tpu' (did you mean cpu? choose auto, cpu, cuda, mps)"),
        (["--set", "train.device=tpu"], "--set train.device: unknown device 'tpu'"),
        (["--seed", "99999999999999999999"], "--seed: Input should be less than or equal to 4611686018427387904"),
    ],
)
def test_bad_values_exit_2_with_one_line(tmp_path: Path, capsys, args: list[str], needle: str) -> None:
    code, out, err = run_cli(capsys, "train", SOURCE, "--out", str(tmp_path / "r"), *args)
    assert code == 2
    assert needle in err and err.strip().count("\n") == 0 and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # refused before any data is read or written


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("args,needle", [(["--device", "cuda"], "--device: 'cuda' requested"),
                                         (["--set", "train.device=cuda"], "train.device: 'cuda' requested")])
def test_an_absent_device_is_refused_before_the_data_is_read(tmp_path: Path, capsys, args: list[str],
                                                             needle: str) -> None:
    code, out, err = run_cli(capsys, "train", SOURCE, "--out", str(tmp_path / "r"), *args)
    assert code == 2 and needle in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_bad_device_or_model_from_a_config_file_names_the_file(tmp_path: Path, capsys) -> None:
    """`train.device: cuda` in a config file was "error: train.device: ..." and a model too large or with hidden not
    divisible by heads "error: model: ...", neither naming the file (or the --set) that gave the values."""
    cases = [("train:\n  device: cuda\n", [], "error: {c}: train.device: 'cuda' requested"),
             ("model:\n  max_len: 100000000\n", [], "error: model (given by {c}): refused: this model would take"),
             ("model:\n  hidden: 10\n", ["--set", "model.heads=4"], "error: model (given by --set model.heads, {c}): "
              "hidden (10) must be divisible by heads (4)")]
    config = tmp_path / "c.yaml"
    for text, extra, needle in cases:
        config.write_text(text)
        code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(tmp_path / "r"), "--config", str(config), *extra)
        assert code == 2 and err.startswith(needle.format(c=config)) and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()
    assert err.strip().count("\n") == 0 and "data:" not in err  # no "data: read ..." line before the refusal
    assert not (tmp_path / "r").exists()


def test_yaml_config_layers(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  hidden: 32\n  heads: 4\ntrain:\n  lr: 0.01\n  epochs: 7\n")
    values = read_config_file(cfg)
    assert values == {"model": {"hidden": 32, "heads": 4}, "train": {"lr": 0.01, "epochs": 7}}
    sets = parse_set(["train.lr=5e-4", "model.emb_scale=true", "train.item_chunk=null"])
    assert sets == {"model": {"emb_scale": True}, "train": {"lr": 5e-4, "item_chunk": None}}


@pytest.mark.parametrize(
    "text,needle",
    [
        ("model:\n  hiden: 3\n", "model.hiden"),
        ("trainer:\n  lr: 1\n", "unknown section 'trainer'"),
        ("model: [1, 2]\n", "must be a mapping"),
        ("model:\n  hidden: [\n", "c.yaml:"),
        ("- 1\n", "expected a mapping"),
    ],
)
def test_bad_yaml_config(tmp_path: Path, capsys, text: str, needle: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(tmp_path / "r"), "--config", str(cfg))
    assert code == 2 and needle in err and str(cfg) in err


def test_bad_yaml_value_names_field(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  hidden: 30\n  heads: 4\n")
    code, _, err = run_cli(capsys, "train", SOURCE, "--out", str(tmp_path / "r"), "--config", str(cfg))
    assert code == 2 and "divisible" in err


@pytest.mark.parametrize("path", sorted((ROOT / "src" / "resdom" / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_are_valid(path: Path) -> None:
    values = read_config_file(path)
    name = "bsarec" if "bsarec" in path.name else "duorec" if "duorec" in path.name else "sasrec"
    assert values["model"].get("name", name) == name  # the shipped configs name their model (smoke.yaml: any)
    model, train = resolve_configs(name, values["model"], values["train"], source="beauty", n_items=10)
    assert model.name == name and train.objective in ("ce_all", "ce_last")
    assert values.get("data", {}).get("protocol", "loo") in ("loo", "gts")


def test_evaluate_mismatched_checkpoint(trained_run: Path, tmp_path: Path, capsys) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(trained_run, broken)
    toy_split(n_users=10, n_items=17).save(broken / "data")  # another data set: 17 items
    code, _, err = run_cli(capsys, "evaluate", str(broken))
    assert code == 2 and "item count" in err and "17" in err
    code, _, err = run_cli(capsys, "evaluate", str(tmp_path / "nothing"))
    assert code == 2 and "not found" in err


def test_train_into_run_of_other_data_is_refused(trained_run: Path, tmp_path: Path, capsys) -> None:
    other = tmp_path / "other"
    shutil.copytree(trained_run, other)
    state = json.loads((other / "state" / "trainer.json").read_text())
    state["stopped"] = None  # pretend it was interrupted (at its last epoch: the state's files are of that epoch)
    (other / "state" / "trainer.json").write_text(json.dumps(state))
    code, _, err = run_cli(capsys, "train", SOURCE.replace("n_items=30", "n_items=31"), "--out", str(other),
                           "--epochs", str(state["epoch"] + 1), *TINY)
    assert code == 2 and "another setup" in err and "model.n_items: 30 saved vs 31 now" in err
    assert "use another --out directory" in err  # the CLI's flag (from Python: out)


# Under torchrun, each rank runs ``resdom train`` and then ``resdom diagnose`` in one interpreter (one launch, not
# two: every launch pays the torch import in each process): the process group is joined once, before both commands
# (``distributed.setup`` then leaves it open), and each command's stdout goes to its own file per rank.
TORCHRUN_SCRIPT = """
import contextlib, json, os, sys, traceback
import torch.distributed as dist
from resdom.cli.main import app
rank = os.environ["RANK"]
dist.init_process_group("gloo")
try:
    for name, args in json.loads(sys.argv[1]).items():
        sys.argv = ["resdom", *args]
        with open(f"{name}.rank{rank}.out", "w") as out, contextlib.redirect_stdout(out):
            try:
                app()
            except SystemExit as e:
                if e.code not in (0, None):
                    raise
        open(f"{name}.rank{rank}.done", "w").close()
except BaseException:
    with open(f"error.rank{rank}.txt", "w") as f:
        traceback.print_exc(file=f)
    raise
dist.barrier()
dist.destroy_process_group()
open(f"closed.rank{rank}", "w").close()
from resdom.distributed import leave
leave(0)  # as the CLI ends a process that left its group: no interpreter teardown, where gloo may abort
"""


def _torchrun_failure(tmp_path: Path, stderr: str) -> str:
    """What a failed torchrun left: each rank's traceback, the markers reached, the lines of stderr that say why."""
    files = sorted(x.name for x in tmp_path.iterdir() if x.suffix in (".done", ".txt") or x.name.startswith("closed"))
    errors = "".join(x.read_text() for x in sorted(tmp_path.glob("error.rank*.txt")))
    why = [x for x in stderr.splitlines() if any(w in x for w in ("rror", "terminate", "what()", "bort", "xception"))]
    return f"markers {files}\n{errors}\n" + "\n".join(why[:40])


@pytest.mark.slow
def test_torchrun_two_cpu_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """DDP on gloo with 2 processes: training completes, rank 0 writes every file once; diagnose with the users
    sharded over the ranks prints the summary that one process computes (that one runs in this process). One
    torchrun launch runs both commands (``TORCHRUN_SCRIPT``)."""
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    diag = ["diagnose", str(out), "--json", "--no-progress", "--what", "hrli,mixing,shuffle", "--seeds", "0"]
    evaluate = ["evaluate", str(out), "--json", "--beyond"]
    commands = {"train": ["train", SOURCE, "--out", str(out), "--epochs", "2", *TINY], "diagnose": diag,
                "evaluate": [*evaluate, "--per-user", str(tmp_path / "users_ddp.csv")]}
    script = tmp_path / "both.py"
    script.write_text(TORCHRUN_SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script), json.dumps(commands)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    finished = all((tmp_path / f"{name}.rank{rank}.done").exists() for name in commands for rank in (0, 1))
    if proc.returncode != 0 and finished:  # every command done on both ranks: the failure is gloo's teardown
        warnings.warn(f"torchrun exited {proc.returncode} after both ranks finished every command (process group "
                      f"teardown): {_torchrun_failure(tmp_path, proc.stderr)}", stacklevel=1)
    else:
        assert proc.returncode == 0, _torchrun_failure(tmp_path, proc.stderr)
    printed = {f"{name}{rank}": (tmp_path / f"{name}.rank{rank}.out").read_text()
               for name in commands for rank in (0, 1)}
    assert printed["train0"].count("best epoch") == 1 and printed["train1"] == ""  # rank 0 reports
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2]
    result = json.loads((out / "metrics.json").read_text())
    assert result["test"]["n_users"] == 60 and result["epochs_run"] == 2
    # every sample trained once per epoch across the two ranks (60 users with >= 2 training items)
    assert all(json.loads(x)["samples_per_s"] > 0 for x in lines)

    # diagnose under torchrun: users sharded over the two ranks, rank 0 prints the same summary as one process
    assert printed["diagnose1"] == ""
    capsys.readouterr()
    assert invoke(*diag) == 0
    a, b = json.loads(printed["diagnose0"]), json.loads(capsys.readouterr().out)
    for key in ("HRLI@1", "HRL2I@1", "n_users"):
        assert a[key] == b[key]
    for key in ("mixing_pooled_all", "mixing_pooled_last", "shuffle_NDCG@10_change"):
        assert a[key] == pytest.approx(b[key], abs=1e-6)

    # evaluate under torchrun: rank 0 alone prints (each rank printed the whole result) and the numbers and the
    # per-user file are one process's
    assert printed["evaluate1"] == ""
    assert invoke(*evaluate, "--per-user", str(tmp_path / "users.csv")) == 0
    assert json.loads(printed["evaluate0"]) == json.loads(capsys.readouterr().out)
    assert (tmp_path / "users_ddp.csv").read_bytes() == (tmp_path / "users.csv").read_bytes()


@pytest.mark.slow
def test_torchrun_cli_exits_zero(tmp_path: Path) -> None:
    """``torchrun -m resdom train``: the CLI joins the group, leaves it and ends with status 0 on both ranks (it
    ends through ``distributed.leave``: gloo's teardown at interpreter exit once failed a finished run)."""
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "resdom", "train", SOURCE, "--out", str(out), "--epochs", "1", *TINY],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("best epoch") == 1  # rank 0 reports, its output flushed before os._exit
    assert json.loads((out / "metrics.json").read_text())["epochs_run"] == 1


def test_parse_set_errors() -> None:
    with pytest.raises(ResdomError, match="did you mean train.epochs"):
        parse_set(["train.epoch=3"])


def test_busy_machine_hint(monkeypatch) -> None:
    """Several torch threads on a machine another process keeps busy: a hint; otherwise nothing."""
    import os

    import torch

    from resdom.cli.train_cmd import busy_machine_hint

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    hint = busy_machine_hint(None, "cpu")
    assert hint is not None and "load 1.0 on 2 cores" in hint and "train.threads=1" in hint
    assert busy_machine_hint(1, "cpu") is None  # threads chosen
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert busy_machine_hint(None, "cpu") is None  # idle machine
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert busy_machine_hint(None, "cpu") is None  # one thread already
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert busy_machine_hint(None, "cpu") is None  # the user set it


def test_a_runs_own_config_json_reruns_it(trained_run: Path, tmp_path: Path) -> None:
    saved = json.loads((trained_run / "config.json").read_text())
    values = read_config_file(trained_run / "config.json")
    assert "n_items" not in values["model"] and set(values) == {"model", "train", "record"}
    assert values["record"]["protocol"] == "loo"  # the split it records, kept apart
    name = saved["model"]["name"]
    model, train = resolve_configs(name, values["model"], values["train"], n_items=saved["model"]["n_items"],
                                   protocol=saved["data"].get("protocol"))
    assert model.model_dump() == saved["model"] and train.model_dump() == saved["train"]


def test_a_rerun_from_a_runs_config_json_says_where_its_split_differs(trained_run: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`train --config RUN/config.json` of a loo run split the data by auto's protocol (gts here: the data has
    timestamps) without a word, so the "rerun" was measured on another split; it now says so, and is silent where
    the split is the recorded one. Maker: the module's loo run, rerun from its config.json with and without
    --protocol loo."""
    config = str(trained_run / "config.json")
    tiny = ["--set", "model.hidden=8", "--set", "model.max_len=10", "--epochs", "1", "--device", "cpu"]
    capsys.readouterr()
    assert invoke("train", SOURCE, "--config", config, "--out", str(tmp_path / "gts"), *tiny) == 0
    err = capsys.readouterr().err
    assert f"note: {config} records a loo split; this run's is gts 0.9" in err and "give --protocol loo" in err
    assert invoke("train", SOURCE, "--config", config, "--out", str(tmp_path / "loo"), "--protocol", "loo",
                  *tiny) == 0
    assert "records a" not in capsys.readouterr().err
    assert invoke("config", "show", "--config", config) == 0  # config show prints what train would use: gts
    shown = capsys.readouterr()
    assert "protocol: gts" in shown.out and f"note: {config} records a loo split; this run's is gts 0.9" in shown.err
    assert invoke("config", "show", "--config", config, "--protocol", "loo") == 0
    assert "records a" not in capsys.readouterr().err


def test_keep_freed_memory_sets_glibc_malloc_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    from resdom.cli.main import keep_freed_memory

    monkeypatch.setenv("RESDOM_MALLOC", "system")
    assert keep_freed_memory() is False
    monkeypatch.delenv("RESDOM_MALLOC")
    assert keep_freed_memory() is (platform.libc_ver()[0] == "glibc")


def test_train_takes_a_training_variants_values_under_the_users(tmp_path: Path) -> None:
    """`train --model sasrec-p30` trains SASRec with patience 30 (the variant's train value), --set wins over it;
    the run is named by its label."""
    out = tmp_path / "p30"
    assert invoke("train", SOURCE, "--model", "sasrec-p30", "--out", str(out), "--epochs", "1", *TINY) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["train"]["patience"] == 30 and config["model"]["name"] == "sasrec"
    assert config["data"]["label"] == "sasrec-p30"
    out2 = tmp_path / "celast"
    assert invoke("train", SOURCE, "--model", "sasrec-celast", "--out", str(out2), "--epochs", "1",
                  "--set", "train.objective=ce_all", *TINY) == 0
    assert json.loads((out2 / "config.json").read_text())["train"]["objective"] == "ce_all"
