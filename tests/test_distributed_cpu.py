"""Several processes on the CPU (torchrun, gloo) give what one process gives, and say it once."""

from __future__ import annotations

import pytest
from cli_helpers import one_line_error, run_cli


def _launched(monkeypatch: pytest.MonkeyPatch, rank: int, local_rank: int) -> None:
    for name, value in {"WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(local_rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(name, value)


def test_a_mistake_every_process_sees_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``torchrun --nproc_per_node 2 -m resdom evaluate RUN --batch-size 0`` printed the same error line twice (each
    process its own); the first process of the machine says it, the others exit 2 without a word."""
    args = ("evaluate", str(tmp_path), "--batch-size", "0")
    _launched(monkeypatch, 1, 1)
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out == "" and err == ""
    _launched(monkeypatch, 0, 0)
    one_line_error(*run_cli(capsys, *args)[::2], "--batch-size")
    _launched(monkeypatch, 2, 0)  # the first process of a second machine: its own terminal or log
    monkeypatch.setenv("WORLD_SIZE", "4")
    one_line_error(*run_cli(capsys, *args)[::2], "--batch-size")
    monkeypatch.setenv("LOCAL_RANK", "5")  # variables no launcher sets: which process is first is unknown, each says it
    one_line_error(*run_cli(capsys, *args)[::2], "--batch-size")


def test_progress_under_torchrun_says_it_counts_rank_0s_share(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """In a log, ``torchrun --nproc_per_node 2 -m resdom evaluate RUN`` (or diagnose) printed rank 0's count as if
    it were every user's ("evaluate: 30/30 users (100%)" of 60 users); the line now names the share it counts."""
    import numpy as np
    import torch

    from resdom.data.sequences import EvalSet, Sequences
    from resdom.diagnostics import common
    from resdom.diagnostics.hrli import last_item_hit_rates
    from resdom.evaluation import batches
    from resdom.evaluation import evaluate as evaluation
    from resdom.models import build_model
    from resdom.models.config import make_model_config

    torch.manual_seed(0)
    model = build_model(make_model_config(name="sasrec", n_items=9, max_len=5, hidden=8, layers=1, heads=1)).eval()
    evalset = EvalSet(Sequences.from_lists([[1 + i % 9, 1 + (i + 1) % 9] for i in range(7)]),
                      np.array([1 + (i + 2) % 9 for i in range(7)]))

    def gathered(local: torch.Tensor, n: int, rank: int, world: int) -> torch.Tensor:  # this rank's rows, others 0
        full = torch.zeros((n, *local.shape[1:]), dtype=local.dtype)
        full[rank::world] = local
        return full

    monkeypatch.setattr(batches, "PROGRESS_LINE_S", 0.0)
    for module in (evaluation, common):
        monkeypatch.setattr(module, "rank_and_world", lambda: (0, 2))
        monkeypatch.setattr(module, "gather_users", gathered)
    evaluation.evaluate(model, evalset, batch_size=1, progress=True)
    last_item_hit_rates(model, evalset, batch_size=1, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines and all("[rank 0 of 2, 4 of 7 users]: " in x for x in lines), lines
    assert any(x.startswith("evaluate [rank 0 of 2, 4 of 7 users]: 4/4 users (100%)") for x in lines), lines
    assert any(x.startswith("hrli [rank 0 of 2, 4 of 7 users]: 4/4 users (100%)") for x in lines), lines
    assert batches.share("evaluate", 7, 0, 1) == "evaluate"  # one process: as before


GLOO_PEER_GONE = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                  "[127.0.0.1]:61106. This is typically caused by a remote worker crashing.")


def test_a_process_whose_peer_stopped_says_so_in_a_line(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Under torchrun, rank 0 stopped at a file it alone writes (diagnose with RUN/diagnostics/hrli.json a folder):
    rank 1, waiting in the next diagnostic's all_reduce, ended in a traceback of gloo's "Connection closed by peer".
    It is now one line, exit 1; outside a process group the same RuntimeError is no peer's and stays a bug."""
    from resdom import distributed
    from resdom.cli import diagnose_cmd

    def gone(*args: object, **kwargs: object) -> None:
        raise RuntimeError(GLOO_PEER_GONE)

    monkeypatch.setattr(diagnose_cmd, "diagnose_run", gone)
    monkeypatch.setattr(distributed, "rank_and_world", lambda: (0, 2))
    code, out, err = run_cli(capsys, "diagnose", str(tmp_path), "--what", "hrli")
    assert code == 1 and out == "" and "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("error: another process of this launch stopped"), err
    monkeypatch.setattr(distributed, "rank_and_world", lambda: (0, 1))
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        run_cli(capsys, "diagnose", str(tmp_path), "--what", "hrli")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory):
    from cli_helpers import invoke

    out = tmp_path_factory.mktemp("ddp") / "run"
    assert invoke("train", "synthetic:n_users=20,n_items=30,min_len=4,max_len=8", "--out", str(out), "--epochs", "1",
                  "--set", "model.hidden=8", "--set", "model.layers=1", "--set", "model.max_len=6", "--device", "cpu",
                  "--protocol", "loo", "--no-progress") == 0
    return out


def test_recommend_and_similar_end_every_process_non_zero_on_a_mistake(
        tiny_run, monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """``torchrun --nproc_per_node 2 -m resdom recommend RUN --items 9999``: rank 0 exited 2, rank 1 returned at once
    with status 0 (rank 0 alone writes the lists, and it alone checked the command). Every process checks it now; the
    others still make and write nothing."""
    capsys.readouterr()
    _launched(monkeypatch, 1, 1)
    lists = tmp_path / "lists.csv"
    for args in (("recommend", str(tiny_run), "--items", "9999"), ("recommend", str(tiny_run), "--users", "nobody"),
                 ("similar", str(tiny_run), "--items", "9999")):
        code, out, err = run_cli(capsys, *args, "--out", str(lists))
        assert (code, out, err) == (2, "", ""), args
    for command in ("recommend", "similar"):
        assert run_cli(capsys, command, str(tiny_run), "--out", str(lists)) == (0, "", "")
        assert run_cli(capsys, command, str(tiny_run)) == (0, "", "")  # printed by rank 0 alone
    assert not lists.exists()
    _launched(monkeypatch, 0, 0)
    code, out, err = run_cli(capsys, "recommend", str(tiny_run), "--items", "9999")
    one_line_error(code, err, "--items 9999")
    assert run_cli(capsys, "similar", str(tiny_run), "--out", str(lists))[0] == 0 and lists.is_file()


def test_a_command_not_split_over_processes_is_refused_under_torchrun(
        tiny_run, monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """``torchrun --nproc_per_node 2 -m resdom report RUN --out REP`` ran the report in both processes: one wrote it,
    the other ended with "REP: another process is already writing there" (its twin's lock) and the launch failed;
    demo, data split and the imports wrote their outputs twice over. Such a command is now one line, exit 2, on every
    process, before it writes anything; the commands that run under torchrun and --help are unchanged."""
    capsys.readouterr()
    _launched(monkeypatch, 0, 0)
    rep = tmp_path / "rep"
    for args in (("report", str(tiny_run), "--out", str(rep)), ("demo", "--out", str(rep)),
                 ("data", "split", "synthetic:n_users=20,n_items=30", "--out", str(rep))):
        code, _, err = run_cli(capsys, *args)
        line = one_line_error(code, err, f"resdom {' '.join(args[:2 if args[0] == 'data' else 1])} runs in one process",
                              "WORLD_SIZE=2", "without torchrun")
        assert "train" in line.split("under it:")[1]
    assert not rep.exists()
    assert run_cli(capsys, "report", "--help")[0] == 0
    _launched(monkeypatch, 1, 1)
    assert run_cli(capsys, "report", str(tiny_run), "--out", str(rep)) == (2, "", "")  # the first process says it
    assert run_cli(capsys, "similar", str(tiny_run)) == (0, "", "")  # one that runs under torchrun: rank 0 prints
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert run_cli(capsys, "report", str(tiny_run), "--out", str(rep))[0] == 0 and (rep / "report.html").is_file()


@pytest.mark.slow
def test_two_processes_end_in_a_line_each_when_one_fails_mid_collective(tiny_run, tmp_path) -> None:
    """Two processes of one launch (the variables torchrun sets, by hand: each says its own line), rank 0 stopping at
    a file it alone writes (RUN/diagnostics/hrli.json a folder) while rank 1 goes on to the next diagnostic's
    all_reduce: neither hangs, rank 0 names the file (exit 2), rank 1 says its peer stopped (exit 1), no traceback."""
    import os
    import shutil
    import socket
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "diagnostics" / "hrli.json" / "x").mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": "0",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, "-m", "resdom", "diagnose", str(run), "--what", "hrli,mixing",
                                       "--no-progress", "--device", "cpu"], env=env, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        ended = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    (_, err0), (_, err1) = ended
    assert procs[0].returncode == 2 and "Traceback" not in err0 and "hrli.json" in err0, err0
    assert procs[1].returncode == 1 and "Traceback" not in err1, err1
    assert err1.strip().splitlines()[-1].startswith("error: another process of this launch stopped"), err1


def test_a_folder_where_an_output_file_goes_is_named_not_the_temporary_file(tmp_path) -> None:
    """Found under torchrun (rank 0 writing RUN/diagnostics/hrli.json, a folder there): the line named the temporary
    file, 'RUN/diagnostics/.hrli.json.aced04nr.tmp: Is a directory', gone by then and never the user's; every
    atomic write (whole or streamed) now names the file it replaces, and leaves no temporary file."""
    import errno

    from resdom.io import atomic_stream, atomic_write_bytes

    target = tmp_path / "hrli.json"
    (target / "x").mkdir(parents=True)
    with pytest.raises(OSError) as caught:
        atomic_write_bytes(target, b"{}")
    assert caught.value.errno == errno.EISDIR and caught.value.filename == str(target)
    with pytest.raises(OSError) as caught, atomic_stream(target) as f:
        f.write(b"{}")
    assert caught.value.errno == errno.EISDIR and caught.value.filename == str(target)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["hrli.json"]
