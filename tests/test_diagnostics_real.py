"""`resdom diagnose` end to end on a short real-data run (LastFM, 1,090 users)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke


@pytest.mark.slow
def test_diagnose_lastfm_run(shared_raw: Path, tmp_path: Path, capsys) -> None:
    from resdom.data.prepare import prepare_split
    from resdom.models.config import make_model_config
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import fit

    split = prepare_split("lastfm", "loo", data_dir=shared_raw)
    run = tmp_path / "run"
    fit(split, make_model_config(max_len=50, hidden=32, layers=2, heads=2), TrainConfig(epochs=2, device="cpu"), run,
        progress=False)
    assert invoke("diagnose", str(run), "--what", "hrli,mixing,shuffle", "--seeds", "0", "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_users"] == 1090 and summary["split"] == "test"
    mix = summary["mixing_pooled_all"]
    assert all(0.0 <= v <= 1.0 for v in mix.values())
    assert mix["+Res"] < mix["Attn"]  # the residual term dominates the block's output
    assert 0.0 <= summary["HRL2I@1"] <= summary["HRLI@10"] <= 1.0
    shuffle = json.loads((run / "diagnostics" / "shuffle.json").read_text())
    assert shuffle["perturbations"]["keep_last"]["jaccard@10"] > shuffle["perturbations"]["full"]["jaccard@10"]
