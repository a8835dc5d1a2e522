"""Files an older resdom wrote, read by this one (docs/choices.md, "Files of another resdom version"): they work with
the numbers the older version printed, or one line names the file and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import SMALL_SYNTHETIC, TINY_MODEL, one_line_error, run_cli


def test_a_config_from_config_show_trains_on_a_saved_split_and_a_conflict_names_the_config_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`config show --protocol loo` writes `data: quantile: 0.9` (every protocol's config holds the default), and
    `train SAVED_LOO_SPLIT --config` of it was refused: '--quantile 0.9: split is a saved loo split ...; leave the
    option out', naming a flag the user never gave. A loo split has no quantile, so the config's is no change of it;
    a config key that does conflict with the saved split (data.protocol gts, data.k_core) is named as the key of
    its file, not as a flag."""
    split = tmp_path / "split"
    code, _, err = run_cli(capsys, "data", "split", SMALL_SYNTHETIC, "--protocol", "loo", "--out", str(split))
    assert code == 0, err
    loo, gts = tmp_path / "loo.yaml", tmp_path / "gts.yaml"
    assert run_cli(capsys, "config", "show", "sasrec", "--protocol", "loo", "--out", str(loo))[0] == 0
    assert run_cli(capsys, "config", "show", "sasrec", "--protocol", "gts", "--out", str(gts))[0] == 0
    code, _, err = run_cli(capsys, "train", str(split), "--config", str(loo), "--out", str(tmp_path / "run"),
                           "--epochs", "1", *TINY_MODEL)
    assert code == 0, err
    assert "--quantile" not in err  # no note of an option the user did not give
    code, _, err = run_cli(capsys, "train", str(split), "--config", str(gts), "--out", str(tmp_path / "run2"))
    line = one_line_error(code, err, f"{gts}: data.protocol gts", "holds a loo split",
                          f"set data.protocol to null in {gts}")
    assert "--protocol" not in line
    kc = tmp_path / "kc.yaml"
    kc.write_text("data:\n  k_core: 3\n")
    code, _, err = run_cli(capsys, "train", str(split), "--config", str(kc), "--out", str(tmp_path / "run3"))
    one_line_error(code, err, f"{kc}: data.k_core: does not apply to")
    code, _, err = run_cli(capsys, "train", str(split), "--config", str(loo), "--quantile", "0.5",
                           "--out", str(tmp_path / "run4"))
    one_line_error(code, err, "--quantile 0.5: ", "leave --quantile out")  # a flag given is still refused


def _tie_curve() -> list[dict[str, float]]:
    """A validation curve on which the two tie rules differ: nothing recovered at any alpha, HR@10 equal."""
    return [{"alpha": a, "recovery": 0.0, "HR@10": 0.25} for a in (1.0, 0.5, 0.0)]


def test_older_reading_names_a_recovery_file_of_an_older_rule_or_reading() -> None:
    """recovery.json of a resdom before 2026-12-02 chose alpha* with ties to the larger alpha (1.0 here), the
    current rule the smaller (0.0): read now, the older choice was shown as the current rule's without a word.
    One of a query-token model without offsets_read read its offsets from raw item columns (before 2026-12-07)."""
    from resdom.records import older_reading, select_alpha

    assert select_alpha(_tie_curve()) == 0.0
    old = {"alpha_star": 1.0, "K": 10, "eps": 0.01, "valid": {"curve": _tie_curve()}}
    note = older_reading("recovery", old, "RUN/diagnostics/recovery.json")
    assert note is not None and note.startswith("RUN/diagnostics/recovery.json: alpha* 1.0 is not what")
    assert "before 2026-12-02" in note and "resdom diagnose RUN --what recovery" in note
    assert older_reading("recovery", {**old, "alpha_star": 0.0}, "f") is None  # the current rule's choice
    assert older_reading("shuffle", old, "f") is None
    query = {**old, "alpha_star": 0.0}
    assert "before 2026-12-07" in (older_reading("recovery", query, "f", readout="query") or "")
    assert older_reading("recovery", {**query, "offsets_read": "prefix passes"}, "f", readout="query") is None
    assert older_reading("recovery", {"alpha_star": 1.0}, "f") is None  # no curve: nothing to check it against


def test_report_and_diagnose_name_a_recovery_file_an_older_resdom_wrote(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run diagnosed by a resdom before 2026-12-02 (its recovery.json's alpha* by the older tie rule) was
    reported, and summarised by `diagnose RUN --what users`, with that alpha* as the current rule's, without a
    word; each now names the file and the command that reads it anew (the numbers are shown as stored)."""
    import json

    run = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--out", str(run), "--epochs", "1", *TINY_MODEL)
    assert code == 0, err
    assert run_cli(capsys, "diagnose", str(run), "--what", "recovery", "--device", "cpu")[0] == 0
    path = run / "diagnostics" / "recovery.json"
    data = json.loads(path.read_text())
    assert run_cli(capsys, "report", str(run), "--out", str(tmp_path / "r0"))[2].count("note:") == 0
    data["valid"]["curve"] = [{**row, "recovery": 0.0, "HR@10": 0.25} for row in data["valid"]["curve"]]
    data["alpha_star"] = 1.0  # the older rule's choice on a curve of ties
    path.write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "r1"))
    assert code == 0, err
    assert f"note: {path}: alpha* 1.0 is not what its validation curve selects" in err, err
    assert f"run `resdom diagnose {run} --what recovery` again" in err
    code, out, err = run_cli(capsys, "diagnose", str(run), "--what", "hrli", "--device", "cpu")
    assert code == 0, err
    assert f"note: {path}: alpha* 1.0" in err
    code, out, err = run_cli(capsys, "diagnose", str(run), "--what", "recovery", "--device", "cpu")
    assert code == 0 and "note:" not in err, err  # read anew: the current rule's


def test_a_config_written_whole_by_an_older_resdom_trains_what_that_resdom_trained(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `config show` file or a run's config.json names every setting of the resdom that wrote it. One written
    before model.qkv_init and model.ffn_dropout existed (2026-12-06) trained N(0, init_std) projections without
    FFN dropout; `train --config` of it took today's gts recipe for the missing fields (Xavier, FFN dropout), so a
    rerun of a 2026-12-05 run from its config.json trained another model (loss 3.6907 vs the run's 3.6900). The
    missing fields now keep the value they were added with, which the older resdom trained, and a note names them;
    a hand-written partial config still layers over the recipe."""
    import json

    import yaml

    whole = tmp_path / "whole.yaml"
    assert run_cli(capsys, "config", "show", "sasrec", "--protocol", "gts", "--out", str(whole))[0] == 0
    text = whole.read_text()
    assert "qkv_init: xavier" in text and "ffn_dropout: true" in text  # today's gts recipe
    older = tmp_path / "older.yaml"  # the same file as a config show of before those fields
    older.write_text("".join(line for line in text.splitlines(keepends=True)
                             if not line.lstrip().startswith(("qkv_init:", "ffn_dropout:", "precision:"))))
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump({"model": {"hidden": 8}}))
    tiny = ["--epochs", "1", *TINY_MODEL]
    for cfg, init, ffn in ((older, "normal", False), (whole, "xavier", True), (partial, "xavier", True)):
        run = tmp_path / f"run-{cfg.stem}"
        code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--config", str(cfg), "--out", str(run), *tiny)
        assert code == 0, err
        model = json.loads((run / "config.json").read_text())["model"]
        assert (model["qkv_init"], model["ffn_dropout"]) == (init, ffn), cfg
        assert ("written whole by an older resdom" in err) == (cfg == older), err
    record = json.loads((tmp_path / "run-whole" / "config.json").read_text())
    for key in ("qkv_init", "ffn_dropout"):
        del record["model"][key]  # a run of before those fields: it trained neither
    old_run = tmp_path / "old-config.json"
    old_run.write_text(json.dumps(record))
    code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--config", str(old_run), "--out",
                           str(tmp_path / "rerun"), *tiny)
    assert code == 0, err
    assert f"note: {old_run}: written whole by an older resdom, without model.qkv_init \"normal\", " \
           "model.ffn_dropout false" in err
    model = json.loads((tmp_path / "rerun" / "config.json").read_text())["model"]
    assert (model["qkv_init"], model["ffn_dropout"]) == ("normal", False)


@pytest.mark.slow
def test_the_demo_over_an_older_resdoms_demo_trains_anew_beside_it(tmp_path: Path) -> None:
    """`resdom demo --out D` over the demo an older resdom wrote (its run's state without model.qkv_init and
    model.ffn_dropout, added 2026-12-06: N(0, init_std), no FFN dropout) said '[2/3] reusing the finished SASRec run
    (same settings, ...)' and then failed, 'D/run: holds a run with another setup (model.ffn_dropout: False saved vs
    True now; ...); ... rerun `resdom train` with --force', a command the user never ran. The demo compares the
    whole setup, as the trainer does: such a run is moved aside (run.replaced-1) and trained anew, as a run of other
    demo settings is."""
    import json

    from resdom.pipeline import DemoSettings, run_demo

    settings = DemoSettings(source="synthetic:n_users=120,n_items=40,min_len=6,max_len=14", epochs=1, batch_size=64,
                            model={"hidden": 16, "layers": 1, "heads": 2, "max_len": 16}, device="cpu")
    out = tmp_path / "demo"
    run_demo(out, settings, progress=False, echo=lambda _: None)
    state = out / "run" / "state" / "trainer.json"
    data = json.loads(state.read_text())
    assert (data["model"]["qkv_init"], data["model"]["ffn_dropout"]) == ("xavier", True)  # today's gts recipe
    for key in ("qkv_init", "ffn_dropout"):
        del data["model"][key]  # as an older resdom saved it
    state.write_text(json.dumps(data))
    lines: list[str] = []
    run_demo(out, settings, progress=False, echo=lines.append)
    said = "\n".join(lines)
    assert "holds a run trained with other settings (model.ffn_dropout: False saved vs True now; " \
           "model.qkv_init: 'normal' saved vs 'xavier' now)" in said, said
    assert "reusing" not in said and (out / "run.replaced-1" / "state" / "trainer.json").is_file()
    assert json.loads((out / "run" / "config.json").read_text())["model"]["qkv_init"] == "xavier"


def test_a_run_of_an_older_recipe_is_refused_with_the_way_to_resume_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`train DATA --out RUN` on a run an older resdom trained (before model.qkv_init and model.ffn_dropout: it
    trained neither) is another setup under today's gts recipe; the refusal offered only another --out or --force
    (training anew). Its own config.json resumes it with the settings it was trained with, which the line now
    says, and doing so resumes it."""
    import json

    run = tmp_path / "run"
    tiny = [*TINY_MODEL, "--protocol", "gts"]
    code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--out", str(run), "--epochs", "1", *tiny)
    assert code == 0, err
    for path, key in ((run / "config.json", "model"), (run / "model.json", "model"),
                      (run / "state" / "trainer.json", "model")):
        data = json.loads(path.read_text())
        for field in ("qkv_init", "ffn_dropout"):
            del data[key][field]  # as an older resdom wrote it
        path.write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--out", str(run), "--epochs", "2", *tiny)
    one_line_error(code, err, "holds a run with another setup (model.ffn_dropout: False saved vs True now",
                   f"resume it as it was trained with --config {run / 'config.json'}; use another --out")
    code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--config", str(run / "config.json"), "--out", str(run),
                           "--epochs", "2", *tiny)
    assert code == 0, err
    assert "epoch 2/2" in err and "epoch 1/2" not in err, err  # resumed, not trained anew
