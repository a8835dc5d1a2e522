"""One configuration pass: ``resdom train`` resolves its configuration once (``training.config.resolve_configs``,
before the data is read), and ``resdom.fit`` hands that ModelConfig and TrainConfig to the trainer as they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke

import resdom
import resdom.api
import resdom.cli.train_cmd
import resdom.training.trainer
from resdom.errors import ResdomError
from resdom.models.config import ModelConfig
from resdom.training.config import TrainConfig, resolve_configs

SOURCE = "synthetic:n_users=60,n_items=30,min_len=5,max_len=12"
TINY = ["--set", "model.hidden=8", "--set", "model.layers=1", "--set", "model.heads=1", "--set", "model.max_len=8",
        "--device", "cpu", "--no-progress"]


def test_train_resolves_once_and_the_trainer_gets_that_configuration(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    received: list[tuple[ModelConfig, TrainConfig]] = []

    def counted(*args: Any, **kwargs: Any) -> tuple[ModelConfig, TrainConfig]:
        calls.append(kwargs)
        return resolve_configs(*args, **kwargs)

    trainer = resdom.training.trainer.fit

    def spy(split: Any, model_cfg: ModelConfig, train_cfg: TrainConfig, *args: Any, **kwargs: Any) -> Any:
        received.append((model_cfg, train_cfg))
        return trainer(split, model_cfg, train_cfg, *args, **kwargs)

    monkeypatch.setattr(resdom.cli.train_cmd, "resolve_configs", counted)
    monkeypatch.setattr(resdom.api, "resolve_configs", counted)
    monkeypatch.setattr(resdom.api, "run_training", spy)
    out = tmp_path / "run"
    assert invoke("train", SOURCE, "--out", str(out), "--epochs", "1", "--seed", "3", *TINY) == 0
    assert len(calls) == 1 and calls[0]["n_items"] == 0  # before the data is read: n_items comes from the split
    (model_cfg, train_cfg), = received
    assert model_cfg.n_items == 30 and (model_cfg.hidden, train_cfg.epochs, train_cfg.seed) == (8, 1, 3)
    written = json.loads((out / "config.json").read_text())
    assert written["model"]["hidden"] == 8 and written["train"]["seed"] == 3


def test_fit_takes_a_resolved_configuration_only_whole(tmp_path: Path) -> None:
    split = resdom.prepare_split(SOURCE, "loo")
    model_cfg, train_cfg = resolve_configs("sasrec", {"hidden": 8, "layers": 1, "heads": 1, "max_len": 8},
                                           {"epochs": 1, "device": "cpu"}, n_items=0, protocol="loo")
    with pytest.raises(ResdomError, match="no other options"):
        resdom.fit(split, model_cfg, train=train_cfg, out=tmp_path / "a", epochs=2)
    with pytest.raises(ResdomError, match="no other options"):
        resdom.fit(split, "sasrec", train=train_cfg, out=tmp_path / "b")
    fitted = resdom.fit(split, model_cfg, train=train_cfg, out=tmp_path / "c", progress=False)
    assert fitted.model_config.n_items == split.n_items and fitted.train_config == train_cfg
