"""One short training run on real data (LastFM, 1,090 users): the pipeline end to end on a registered source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke


@pytest.mark.slow
def test_sasrec_one_epoch_on_lastfm(shared_raw: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert invoke("train", "lastfm", "--model", "sasrec", "--protocol", "loo", "--out", str(out),
                  "--data-dir", str(shared_raw), "--epochs", "1", "--device", "cpu",
                  "--set", "model.hidden=32", "--set", "model.layers=1") == 0
    assert "test (1,090 users)" in capsys.readouterr().out
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["data"]["source"] == "lastfm" and cfg["model"]["n_items"] == 3646
    assert cfg["data"]["manifest"]  # the split's manifest travels with the run
    record = json.loads((out / "metrics.jsonl").read_text())
    assert record["epoch"] == 1 and record["n_users"] == 1090 and record["loss"] < 8.3  # below log(3646) = 8.2 + eps
