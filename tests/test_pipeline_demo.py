"""End to end on tiny synthetic data: the demo, and the reproduction grid (resume, skip, failures); the demo at its
real size shows the phenomenon it exists to show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from resdom.cli.main import _typer_app
from resdom.pipeline import DemoSettings, GridSpec, reproduce, run_demo
from resdom.pipeline.remedies import remedy_grid
from resdom.report.figures import figure_keys

TINY = "synthetic:n_users=120,n_items=40,min_len=6,max_len=14"
SHORT = "synthetic:n_users=3,n_items=40,min_len=2,max_len=2"  # a data set whose every cell fails: no loo split
TINY_MODEL = {"hidden": 16, "layers": 2, "heads": 2, "max_len": 16}


@pytest.mark.slow
def test_demo_end_to_end_and_rerun(tmp_path: Path) -> None:
    settings = DemoSettings(source=TINY, epochs=1, batch_size=64, model=dict(TINY_MODEL))
    lines: list[str] = []
    result = run_demo(tmp_path / "demo", settings, progress=False, echo=lines.append)
    run = result.run_dir
    for name in ("shuffle", "hrli", "mixing", "alpha", "recovery", "summary"):
        assert (run / "diagnostics" / f"{name}.json").is_file(), name
    assert result.report_html.is_file() and (tmp_path / "demo" / "report.md").is_file()
    for key in figure_keys():
        assert (tmp_path / "demo" / "figures" / f"{key}.png").is_file(), key
    text = "\n".join(result.findings)
    assert "Mixing ratio" in text and "HRLI@1 =" in text and "Recoverable misses" in text
    assert any(x.strip().startswith("trained all 1 of 1 epochs; the best by validation NDCG@10, epoch 1") for x in
               lines), lines  # how training ended
    config = json.loads((run / "config.json").read_text())
    assert config["data"]["source"] == TINY and config["model"]["name"] == "sasrec"
    # a second run reuses the trained model: no new epoch in the log
    log_lines = (run / "metrics.jsonl").read_text().count("\n")
    run_demo(tmp_path / "demo", settings, progress=False, echo=lines.append)
    assert (run / "metrics.jsonl").read_text().count("\n") == log_lines
    # a demo folder made from other data (an older demo's default) is refused, not silently reused
    from resdom.errors import ResdomError

    with pytest.raises(ResdomError, match="was made from 'synthetic:n_users=120"):
        run_demo(tmp_path / "demo", DemoSettings(source=TINY + ",seed=1"), progress=False, echo=lines.append)


@pytest.mark.slow
def test_demo_refuses_a_folder_of_other_files(tmp_path: Path) -> None:
    """The demo writes run/, report.html, report.md, figures/ and tables/ into --out: into a folder of other files
    (a run directory, a project) it wrote them beside the user's files."""
    from resdom.errors import ResdomError

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    (folder / "report.html").write_text("an earlier demo's")  # the demo's own names are fine
    with pytest.raises(ResdomError, match=r"--out .*project: holds what the demo does not write \(notes.txt\)"):
        run_demo(folder, DemoSettings(epochs=1, device="cpu"), progress=False, echo=lambda _: None)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "report.html"]


def test_a_second_demo_in_one_folder_is_refused_at_once(tmp_path: Path) -> None:
    """Two demos in one --out wrote one report over the other's; the second now says so in one line, before the
    data is made, and writes nothing."""
    from resdom.errors import ResdomError
    from resdom.io import directory_lock

    out = tmp_path / "demo"
    said: list[str] = []
    with directory_lock(out, "writing"), pytest.raises(ResdomError, match=r"demo: another process is already "
                                                                          "writing there; .*choose another --out"):
        run_demo(out, DemoSettings(epochs=1, device="cpu"), progress=False, echo=said.append)
    assert said == [] and [p.name for p in out.iterdir()] == [".lock"]


@pytest.mark.slow  # over 5 s of CPU: the fast subset stays under 2 minutes on 2 cores
def test_demo_default_shows_last_item_reliance(tmp_path: Path) -> None:
    """``resdom demo``'s own setting (synthetic:demo, full size, about 15 s of CPU): the trained SASRec ranks the
    last input item first far more often than the second to last, the residual swamps the mixing, a keep_last
    shuffle costs little and a full one much, and scaling the residual down lowers HRLI@1; the printed findings
    carry these numbers and the user counts, and README.md's "Measured:" sentence is this run's."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = run_demo(tmp_path / "demo", DemoSettings(), progress=False, echo=lambda _: None)
    finally:
        torch.set_num_threads(threads)
    diag = result.run_dir / "diagnostics"
    hrli = json.loads((diag / "hrli.json").read_text())
    h1, h2 = hrli["values"]["HRLI@1"], hrli["values"]["HRL2I@1"]
    assert h1 >= 0.3 and h1 >= 3 * h2, (h1, h2)
    mixing = json.loads((diag / "mixing.json").read_text())["pooled"]["all"]
    assert mixing["+Res"] < 0.5 * mixing["Attn"], mixing
    shuffle = json.loads((diag / "shuffle.json").read_text())["perturbations"]
    keep, full = (shuffle[m]["relative_change"]["NDCG@10"] for m in ("keep_last", "full"))
    assert keep > -0.1 and full < -0.3, (keep, full)
    rows = sorted(json.loads((diag / "alpha.json").read_text())["rows"], key=lambda r: -r["alpha"])
    sweep = [r["HRLI@1"] for r in rows]  # alpha 1.0, 0.9, ..., 0.0
    assert rows[0]["alpha"] == 1.0 and rows[-1]["alpha"] == 0.0
    assert all(b <= a + 0.02 for a, b in zip(sweep, sweep[1:])), sweep  # non-increasing as alpha falls
    assert sweep[-1] < sweep[0] - 0.2, sweep
    text = "\n".join(result.findings)
    n = hrli["n_users"]
    assert f"HRLI@1 = {h1:.3f} vs HRL2I@1 = {h2:.3f}" in text and f"shares of {n:,} test users" in text
    assert f"from {mixing['Attn']:.3f} at Attn to {mixing['+Res']:.3f} at +Res" in text
    assert f"with the residual scaled to α = 0 HRLI@1 is {sweep[-1]:.3f}" in text
    # README.md quotes this run: its sentence must be what the demo measures, not what it once measured
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert (f"Measured: mixing ratio {mixing['Attn']:.3f} at Attn, {mixing['+Res']:.3f} at +Res; HRLI@1 = {h1:.3f} "
            f"vs HRL2I@1 = {h2:.3f} ({n:,} test users), {sweep[-1]:.3f} at α = 0; a keep_last shuffle changes test "
            f"NDCG@10 by {keep:+.1%}, a full shuffle by {full:+.1%}.") in readme


@pytest.mark.slow
def test_reproduce_grid_resume_and_failures(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    spec = GridSpec([TINY, SHORT], ["sasrec", "bsarec"], [1], out, protocol="loo", device="cpu",
                    epochs=1, train_values={"batch_size": 64}, model_values=dict(TINY_MODEL))
    lines: list[str] = []
    result = reproduce(spec, progress=False, echo=lines.append)
    status = {(o.dataset, o.model): o.status for o in result.outcomes}
    assert status == {(TINY, "sasrec"): "done", (TINY, "bsarec"): "done",
                      (SHORT, "sasrec"): "failed", (SHORT, "bsarec"): "failed"}
    err = (out / SHORT / "sasrec" / "seed1" / "error.txt").read_text()
    assert "the loo split leaves no training and no test data" in err.splitlines()[0]
    assert any(line.startswith("[4/4]") for line in lines)  # progress across the grid
    summary = out / "summary"
    assert result.report_html == summary / "report.html" and (summary / "tables" / "mixing.tex").is_file()
    assert (summary / "grid.json").is_file() and (out / TINY / "dataset.json").is_file()
    md = (summary / "tables" / "hrli.md").read_text()
    assert "| sasrec | 1 seed |" in md and "| bsarec | 1 seed |" in md

    # rerun: finished runs are skipped, failed ones are tried again
    again = reproduce(spec, progress=False, echo=lines.append)
    assert [o.status for o in again.outcomes] == ["skipped", "skipped", "failed", "failed"]

    # a larger epoch budget resumes the finished runs from their saved state (one more epoch each)
    spec2 = GridSpec([TINY], ["sasrec"], [1], out, protocol="loo", device="cpu", epochs=2,
                     train_values={"batch_size": 64}, model_values=dict(TINY_MODEL))
    third = reproduce(spec2, progress=False, echo=lines.append)
    assert [o.status for o in third.outcomes] == ["done"]
    log = (out / TINY / "sasrec" / "seed1" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in log] == [1, 2]


def test_a_grid_being_written_refuses_a_second_grid_there(tmp_path: Path) -> None:
    """Two `resdom reproduce` (or `remedies`) into one --out at once: each failed the other's cells ("another
    process is already training there", an error.txt in a run the other was training) and both wrote the summary.
    The grid locks --out until its summary is written; a second one is refused in one line, nothing written."""
    from resdom.errors import ResdomError
    from resdom.io import directory_lock

    out = tmp_path / "grid"
    spec = GridSpec([TINY], ["sasrec"], [1], out, protocol="loo", device="cpu", epochs=1,
                    train_values={"batch_size": 64}, model_values=dict(TINY_MODEL))
    with directory_lock(out, "writing"), pytest.raises(
            ResdomError, match=f"^{out}: another process is already writing there; wait for it to finish or choose "
                               "another --out$"):
        reproduce(spec, progress=False, echo=lambda line: None)
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


def test_grid_spec_validation(tmp_path: Path) -> None:
    from resdom.errors import ResdomError

    with pytest.raises(ResdomError, match="--models: unknown model 'caser'"):
        GridSpec(["beauty-ts"], ["caser"], [1], tmp_path)
    assert GridSpec(["beauty-ts"], ["sasrec", "duorec", "bsarec", "bert4rec", "gru4rec"], [1], tmp_path).models[-1] \
        == "gru4rec"  # the paper's five models
    with pytest.raises(ResdomError, match="--seeds: repeated"):
        GridSpec(["beauty-ts"], ["sasrec"], [1, 1], tmp_path)
    with pytest.raises(ResdomError, match="--protocol"):
        GridSpec(["beauty-ts"], ["sasrec"], [1], tmp_path, protocol="random")
    # every cell's configuration is resolved up front: a bad --set value is one refusal naming it and the cell it
    # first breaks, before anything is written (was: every cell failed on its own, each with an error.txt folder)
    with pytest.raises(ResdomError, match=r"^--set model\.hidden: Input should be a valid integer.*\(sasrec on "
                                          r"beauty-ts\)$"):
        GridSpec(["beauty-ts"], ["sasrec", "bsarec"], [1], tmp_path / "g", model_values={"hidden": "abc"})
    with pytest.raises(ResdomError, match=r"^--set train\.lr: Input should be greater than 0"):
        GridSpec(["beauty-ts"], ["sasrec"], [1], tmp_path / "g", train_values={"lr": 0})
    with pytest.raises(ResdomError, match=r"label leakage.*\(bsarec on toys-ts\)$"):  # a rule of one model only
        GridSpec(["toys-ts"], ["sasrec", "bsarec"], [1], tmp_path / "g", train_values={"objective": "ce_all"})
    with pytest.raises(ResdomError, match=r"^model: hidden \(60\) must be divisible by heads \(8\)"):
        GridSpec(["beauty-ts"], ["sasrec"], [1], tmp_path / "g", model_values={"hidden": 60, "heads": 8})
    with pytest.raises(ResdomError, match=r"^--seeds: every seed must lie in \[0, 2\^62\] \(got 1844674407370955161"):
        GridSpec(["beauty-ts"], ["sasrec"], [1, 2**64], tmp_path / "g")  # torch.manual_seed would overflow
    # a seed past train.seed's own bound (2^62) passed this check (2^63) and failed its cell after the others trained
    with pytest.raises(ResdomError, match=r"^--seeds: every seed must lie in \[0, 2\^62\] \(got 4611686018427387905\)"):
        GridSpec(["beauty-ts"], ["sasrec"], [1, 2**62 + 1], tmp_path / "g")
    GridSpec(["beauty-ts"], ["sasrec"], [2**62], tmp_path / "g")  # the largest seed train.seed takes
    # every data set is known before the first cell (was: each cell of it failed on its own, with an error.txt)
    with pytest.raises(ResdomError, match=r"^--datasets: unknown source 'beuaty-ts' \(did you mean beauty-ts\?\)"):
        GridSpec(["beauty-ts", "beuaty-ts"], ["sasrec"], [1], tmp_path / "g")
    with pytest.raises(ResdomError, match=r"^--datasets: 'synthetic:bogus=1': unknown synthetic knob 'bogus'"):
        GridSpec(["synthetic:bogus=1"], ["sasrec"], [1], tmp_path / "g")
    with pytest.raises(ResdomError, match=r"^DATASET: unknown source 'nope'"):  # remedies takes it as an argument
        remedy_grid("nope", "sasrec", ["base"], [1], tmp_path / "g")
    assert not (tmp_path / "g").exists()
    # a folder holding files is never a grid's output (a grid's folders, of any data sets, are)
    mine = tmp_path / "mine"
    (mine / "beauty-ts").mkdir(parents=True)
    (mine / "other-set").mkdir()
    GridSpec(["beauty-ts"], ["sasrec"], [1], mine)
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ResdomError, match=r"--out .*mine: holds what a grid does not write \(notes.txt, other-set\)"):
        GridSpec(["beauty-ts"], ["sasrec"], [1], mine)
    GridSpec(["beauty-ts", "synthetic"], ["sasrec", "sasrec-tts", "duorec", "bsarec", "sasrec-celast"], [1],
             tmp_path / "g", model_values={"hidden": 32}, train_values={"lr": 1e-3})  # values every cell takes
    # a folder of the user's folders is no grid either (a grid's data set folders hold model folders of seed<k>)
    with pytest.raises(ResdomError, match=r"--out .*: holds what a grid does not write \(mine\)"):
        GridSpec(["beauty-ts"], ["sasrec"], [1], tmp_path)


def test_grid_refuses_what_would_mislabel_or_misplace_its_cells(tmp_path: Path, capsys) -> None:
    """Each was accepted: --quantile 1.5 failed every cell on its own (exit 1, error.txt folders written); --set
    model.residual_scale=0.3 trained 'sasrec-res0.5' at 0.3 and tabled it under that label; --variants base,BASE
    said '--models: repeated value in sasrec,sasrec'; a summary/ folder of the user's files was taken for an earlier
    grid's and written into."""
    from cli_helpers import SMALL_SYNTHETIC, one_line_error, run_cli

    from resdom.errors import ResdomError

    with pytest.raises(ResdomError, match=r"^--quantile: must lie strictly between 0 and 1 \(got 1.5\)"):
        GridSpec([TINY], ["sasrec"], [1], tmp_path / "g", quantile=1.5)
    with pytest.raises(ResdomError, match=r"^--quantile: .*\(got nan\)"):
        GridSpec([TINY], ["sasrec"], [1], tmp_path / "g", quantile=float("nan"))
    with pytest.raises(ResdomError, match=r"^--set model\.residual_scale=0\.3: sasrec-res0\.5 sets residual_scale=0\.5 "
                                          r"itself \(the cells would be trained as another variant under its label\)"):
        remedy_grid(TINY, "sasrec", ["base", "res0.5"], [1], tmp_path / "g", model_values={"residual_scale": 0.3})
    with pytest.raises(ResdomError, match=r"^--set model\.query_ln=True: sasrec-preln sets query_ln=False itself"):
        remedy_grid(TINY, "sasrec", ["preln"], [1], tmp_path / "g", model_values={"query_ln": True})
    remedy_grid(TINY, "sasrec", ["base"], [1], tmp_path / "g", model_values={"residual_scale": 0.3})  # base: yours
    remedy_grid(TINY, "sasrec", ["res0.5"], [1], tmp_path / "g", model_values={"residual_scale": 0.5})  # the same
    GridSpec([TINY], ["sasrec-tts"], [1], tmp_path / "g", model_values={"max_len": 12})  # a size: every cell's
    with pytest.raises(ResdomError, match=r"^--set train\.patience=5: sasrec-p30 sets patience=30 itself"):
        GridSpec([TINY], ["sasrec", "sasrec-p30"], [1], tmp_path / "g", train_values={"patience": 5})
    with pytest.raises(ResdomError, match=r"^--variants: 'BASE' repeats a variant given before it \(base, BASE\)$"):
        remedy_grid(TINY, "sasrec", ["base", "BASE"], [1], tmp_path / "g")
    # a --set of what the grid's own options give won in silence (cell seed1 trained with seed 1, not 3)
    with pytest.raises(ResdomError, match=r"^--set train\.seed=3: the grid's cells take their seed from --seeds"):
        GridSpec([TINY], ["sasrec"], [1], tmp_path / "g", train_values={"seed": 3})
    with pytest.raises(ResdomError, match=r"^--set train\.device=cuda: .* from --device; give it there$"):
        GridSpec([TINY], ["sasrec"], [1], tmp_path / "g", train_values={"device": "cuda"})
    with pytest.raises(ResdomError, match=r"^--set train\.epochs=3: .* from --epochs"):
        GridSpec([TINY], ["sasrec"], [1], tmp_path / "g", epochs=1, train_values={"epochs": 3})
    GridSpec([TINY], ["sasrec"], [1], tmp_path / "g", train_values={"epochs": 3})  # no --epochs: the --set's
    # a --store that is a file (or below one) failed every cell after its training, with NotADirectoryError
    (tmp_path / "afile").write_text("")
    with pytest.raises(ResdomError, match=r"^--store .*afile: exists and is not a directory"):
        GridSpec([TINY], ["sasrec"], [1], tmp_path / "g", store=tmp_path / "afile")
    with pytest.raises(ResdomError, match=r"^--store .*afile/store: .*afile is a file, not a folder"):
        GridSpec([TINY], ["sasrec"], [1], tmp_path / "g", store=tmp_path / "afile" / "store")
    assert not (tmp_path / "g").exists()
    mine = tmp_path / "mine"
    (mine / "summary").mkdir(parents=True)
    (mine / "summary" / "report.md").write_text("my notes")
    with pytest.raises(ResdomError, match=r"--out .*mine: holds what a grid does not write \(summary\)"):
        GridSpec([TINY], ["sasrec"], [1], mine)
    for name in ("figures", "tables", "report.html"):  # an earlier grid's summary is one: its grid.json first
        (mine / "summary" / name).mkdir()
    (mine / "summary" / "grid.json").write_text("{}")
    GridSpec([TINY], ["sasrec"], [1], mine)
    (mine / "summary" / "notes.txt").write_text("mine")
    with pytest.raises(ResdomError, match=r"--out .*mine: holds what a grid does not write \(summary\)"):
        GridSpec([TINY], ["sasrec"], [1], mine)
    # the CLI: a synthetic source keeps its knobs (was: "unknown source 'n_items=25'"); an empty item is refused
    # (was: '1,,2' read as 1,2)
    code, _, err = run_cli(capsys, "reproduce", "--datasets", f"{SMALL_SYNTHETIC},synthetic:n_users=30", "--models",
                           "sasrec", "--seeds", "1", "--out", str(tmp_path / "g"), "--quantile", "2")
    one_line_error(code, err, "--quantile: must lie strictly between 0 and 1 (got 2.0)")
    code, _, err = run_cli(capsys, "reproduce", "--datasets", f"{SMALL_SYNTHETIC},beuaty-ts", "--out",
                           str(tmp_path / "g"))
    one_line_error(code, err, "--datasets: unknown source 'beuaty-ts'")
    for option, value in (("--seeds", "1,,2"), ("--models", "sasrec,,bsarec"), ("--datasets", ",beauty-ts")):
        code, _, err = run_cli(capsys, "reproduce", option, value, "--out", str(tmp_path / "g"))
        one_line_error(code, err, f"{option}: an empty item in {value!r} (a value left out between commas?)")
    assert not (tmp_path / "g").exists()


def test_grid_lists_keep_a_synthetic_source_whole() -> None:
    from resdom.cli.pipeline_cmd import _split_list, _split_sources

    assert _split_sources("synthetic:n_users=40, n_items=25,beauty-ts,synthetic,synthetic:demo,seed=2", "--x") == [
        "synthetic:n_users=40,n_items=25", "beauty-ts", "synthetic", "synthetic:demo,seed=2"]
    assert _split_list("1, 2,", "--seeds") == ["1", "2"]  # a comma at the end is no item left out


@pytest.mark.slow
def test_cli_report_and_errors(tmp_path: Path) -> None:
    fixtures = Path(__file__).resolve().parent / "fixtures" / "diagnostics"
    runner = CliRunner()
    ok = runner.invoke(_typer_app, ["report", str(fixtures), "--out", str(tmp_path / "r")])
    assert ok.exit_code == 0, ok.output
    assert "report of 4 run(s)" in ok.output and (tmp_path / "r" / "report.html").is_file()
    bad = runner.invoke(_typer_app, ["reproduce", "--out", str(tmp_path / "g"), "--seeds", "1,x"])
    assert bad.exit_code != 0 and "--seeds: 'x' is not an integer" in str(bad.exception)


@pytest.mark.slow
def test_reproduce_trains_a_training_variant_with_its_train_values(tmp_path: Path) -> None:
    """A grid label of ``experiments.TRAINING_VARIANTS`` trains its model with the variant's train values; the grid's
    own train values (and the seed) lie over them."""
    spec = GridSpec([TINY], ["sasrec-celast"], [2], tmp_path / "grid", protocol="loo", device="cpu", epochs=1,
                    train_values={"batch_size": 64}, model_values=dict(TINY_MODEL))
    result = reproduce(spec, progress=False, echo=lambda _: None)
    assert [o.status for o in result.outcomes] == ["done"]
    config = json.loads((tmp_path / "grid" / TINY / "sasrec-celast" / "seed2" / "config.json").read_text())
    assert config["train"]["objective"] == "ce_last" and config["train"]["seed"] == 2
    assert config["model"]["name"] == "sasrec" and config["data"]["label"] == "sasrec-celast"


def test_the_demo_counts_its_test_users_as_data_split_does(tmp_path: Path, monkeypatch) -> None:
    """The demo's data line said '1250 test users' beside '12,000 users': the count is now the split's, with its
    thousands separator."""
    import resdom.pipeline.demo as demo
    from resdom.data.prepare import prepare_split

    source = "synthetic:n_users=12000,n_items=40,min_len=3,max_len=5"
    n_test = len(prepare_split(source, protocol="gts").test)
    assert n_test >= 1000

    def stop(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "train_and_diagnose", stop)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_demo(tmp_path / "demo", DemoSettings(source=source, device="cpu"), progress=False, echo=lines.append)
    assert lines[1].endswith(f"interactions; {n_test:,} test users"), lines
