"""Progress that reaches a log: evaluate, recommend, similar, the diagnostics and the beyond-accuracy metrics
showed a bar on a terminal only, so under nohup or a batch scheduler a log saw nothing of them until the end; now
``batches.with_progress`` (the one helper of every long loop) prints a plain line every ``PROGRESS_LINE_S``
seconds there ("recommend: 40,000/100,000 users (40%), 12 s")."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
import torch

import resdom
import resdom.evaluation.batches as batches_mod
import resdom.recommend as rec
from resdom.data.prepare import prepare_split
from resdom.data.sequences import SplitData
from resdom.diagnostics.common import batches as diagnostic_batches
from resdom.evaluation.batches import with_progress
from resdom.evaluation.evaluate import evaluate
from resdom.models import build_model
from resdom.models.config import make_model_config
from resdom.recommend import recommend, similar_items


@pytest.fixture(scope="module")
def split() -> SplitData:
    rng = np.random.default_rng(0)
    rows = []
    for u in range(30):
        n = int(rng.integers(3, 9))
        rows += [(f"u{u}", f"i{int(rng.integers(25))}", float(t)) for t in np.sort(rng.random(n) * 1000)]
    return prepare_split(pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]), "loo")


@pytest.fixture(scope="module")
def model(split: SplitData) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = make_model_config(name="sasrec", n_items=split.n_items, hidden=16, layers=2, max_len=6, dropout=0.0,
                            heads=2, attn_dropout=0.0)
    return build_model(cfg).eval()


class FakeClock:
    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_progress_lines_reach_a_log(capsys) -> None:
    """stderr no terminal (nohup, a scheduler): a plain line each time ``every`` seconds have passed, and a last
    one at the end; a loop faster than that prints nothing; no progress asked: nothing."""
    capsys.readouterr()
    got = list(with_progress(range(10), 100, True, "recommend", unit="user", size=lambda _: 10,
                             clock=FakeClock(6.0), every=12.0))
    assert got == list(range(10))
    assert capsys.readouterr().err.splitlines() == [
        "recommend: 20/100 users (20%), 12 s", "recommend: 40/100 users (40%), 24 s",
        "recommend: 60/100 users (60%), 36 s", "recommend: 80/100 users (80%), 48 s",
        "recommend: 100/100 users (100%), 66 s"]
    list(with_progress(range(3), 30_000, True, "similar", unit="item", size=lambda _: 10_000,
                       clock=FakeClock(100.0), every=30.0))
    assert capsys.readouterr().err.splitlines() == ["similar: 10,000/30,000 items (33%), 100 s",
                                                    "similar: 20,000/30,000 items (66%), 200 s",
                                                    "similar: 30,000/30,000 items (100%), 400 s"]
    list(with_progress(range(10), 10, True, "fast", clock=FakeClock(0.001), every=30.0))
    list(with_progress(range(10), 10, False, "off", clock=FakeClock(100.0), every=30.0))
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_is_a_bar_and_a_gone_stderr_stops_nothing(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert list(with_progress(range(4), 8, True, "evaluate", size=lambda _: 2, clock=FakeClock(100.0))) == [0, 1, 2, 3]
    err = capsys.readouterr().err
    assert "evaluate" in err and "user/s" in err and "users (" not in err  # tqdm's bar, not the log's lines
    monkeypatch.setattr(sys, "stderr", None)  # pythonw, a daemon: no stderr at all
    assert list(with_progress(range(4), 8, True, "evaluate")) == [0, 1, 2, 3]


@pytest.mark.parametrize("loop", ["evaluate", "recommend", "similar", "diagnostic", "beyond", "neighbours"])
def test_every_long_loop_reports_in_a_log(loop, split, model, capsys, monkeypatch) -> None:
    """evaluate, recommend, similar, the diagnostics' batches and the beyond-accuracy metrics: lines in a log
    (every batch here, ``PROGRESS_LINE_S`` 0), counting users (items), the same results."""
    monkeypatch.setattr(batches_mod, "PROGRESS_LINE_S", 0.0)
    capsys.readouterr()
    if loop == "evaluate":
        want = evaluate(model, split.test, batch_size=4).metrics
        assert evaluate(model, split.test, batch_size=4, progress=True).metrics == want
        total, unit = len(split.test), "users"
    elif loop == "recommend":
        pd.testing.assert_frame_equal(recommend(model, split, k=2, batch_size=4, progress=True),
                                      recommend(model, split, k=2, batch_size=4))
        total, unit = len(split.history()), "users"
    elif loop == "similar":
        monkeypatch.setattr(rec, "user_chunk_size", lambda n, requested: 4)
        similar_items(model, split, k=2, progress=True)
        total, unit = split.n_items, "items"
    elif loop == "beyond":
        resdom.evaluate(resdom.Fitted(model, split, model.cfg, None), beyond=True, batch_size=4, progress=True,
                        device="cpu")
        total, unit = len(split.test), "users"
    elif loop == "neighbours":  # --beyond's nearest items of the distinct last items, before any user
        from resdom.evaluation.beyond import neighbours_of

        ids = np.arange(1, split.n_items + 1)
        with torch.no_grad():
            emb = model.item_embeddings()
            assert np.array_equal(neighbours_of(emb, ids, 3, chunk=4, progress=True), neighbours_of(emb, ids, 3))
        total, unit = split.n_items, "items"
    else:
        n = sum(len(idx) for idx, _, _ in diagnostic_batches(model, split.test, 4, desc="hrli", progress=True))
        total, unit = n, "users"
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) >= 2 and lines[-1].endswith(" s") and f"{total:,}/{total:,} {unit} (100%)" in lines[-1], err
    assert all(f"/{total:,} {unit} (" in line for line in lines), err
