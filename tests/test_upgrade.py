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
