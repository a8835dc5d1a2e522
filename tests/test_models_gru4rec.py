"""GRU4Rec (spec §7): shapes, causality of its states, equality with time-to-split's forward pass (nn.GRU on
right-padded input), training on planted data, and the diagnostics that do (not) apply to a model without
attention."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import invoke
from test_models_bert4rec import left_padded, popularity_hr

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics.alpha import alpha_sweep
from resdom.diagnostics.hrli import last_item_hit_rates
from resdom.diagnostics.mixing import mixing_ratios
from resdom.diagnostics.monitor import epoch_monitor
from resdom.diagnostics.recovery import miss_recovery
from resdom.diagnostics.shuffle import position_shuffle
from resdom.errors import ResdomError
from resdom.experiments import TIME_TO_SPLIT_GRU4REC as TIME_TO_SPLIT
from resdom.models import build_model, make_model_config
from resdom.training.config import resolve_configs
from resdom.training.trainer import fit

SEQS = [[3, 7, 1, 9, 4, 12, 5, 2], [2, 8], [20], [6, 6, 11, 3]]


def make(n_items: int = 20, max_len: int = 8, hidden: int = 16, layers: int = 1, seed: int = 0,
         **kw: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    values = {**TIME_TO_SPLIT, "name": "gru4rec", "n_items": n_items, "max_len": max_len, "hidden": hidden,
              "layers": layers, **kw}
    return build_model(make_model_config(**values))


def test_shapes_padding_and_defaults() -> None:
    m = make().eval()
    items = left_padded(SEQS, 8)
    with torch.no_grad():
        h = m.encode(items)
    assert h.shape == (4, 8, 16) and m.item_embeddings().shape == (21, 16)
    assert (h[items == 0] == 0).all() and (h[items > 0].abs().sum(-1) > 0).all()
    assert list(m.attention_blocks()) == [] and m.exact_length_groups()
    model, train = resolve_configs("gru4rec", {}, {}, n_items=10, protocol="gts")
    assert (model.max_len, model.hidden, model.layers, model.dropout) == (128, 64, 1, 0.1)
    assert (train.objective, train.lr, train.batch_size, train.patience, train.metric) == (
        "ce_all", 1e-3, 256, 10, "NDCG@10")
    with pytest.raises(ResdomError, match=r"model\.heads: not a field of gru4rec"):
        resolve_configs("gru4rec", {"heads": 4}, {}, n_items=10)
    saved, _ = resolve_configs("gru4rec", {}, {}, n_items=10)  # a run's own config.json passes
    assert resolve_configs("gru4rec", saved.model_dump(exclude={"name", "n_items"}), {}, n_items=10)[0] == saved


def test_state_at_t_depends_only_on_items_up_to_t() -> None:
    m = make(layers=2, dropout=0.3).eval()
    items = left_padded([[3, 7, 1, 9, 4, 12]], 8)
    with torch.no_grad():
        base = m.encode(items)
        for col in range(2, 8):  # change the item at column col: states before it stay, states from it on move
            other = items.clone()
            other[0, col] = 19
            h = m.encode(other)
            assert torch.equal(h[0, :col], base[0, :col]), col
            assert (h[0, col:] - base[0, col:]).abs().max() > 1e-6, col


def test_batch_width_and_longer_inputs() -> None:
    m = make().eval()
    items = left_padded(SEQS, 8)
    with torch.no_grad():
        h = m.encode(items)
        wide = torch.cat([torch.zeros(4, 5, dtype=torch.int64), items], 1)[:, -8:]
        assert torch.allclose(m.encode(wide), h)
        assert torch.allclose(m.encode(torch.cat([torch.full((4, 3), 7), items], 1)), h)  # last max_len items kept
        short = left_padded([s[-3:] for s in SEQS], 3)
        assert torch.allclose(m.encode(short), m.encode(left_padded([s[-3:] for s in SEQS], 8))[:, -3:], atol=1e-6)


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_equals_time_to_split_forward(layers: int) -> None:
    """time-to-split's GRU4Rec.forward: embed_layer -> nn.GRU(batch_first) on right-padded ids -> tied head."""
    m = make(n_items=20, hidden=12, layers=layers, seed=layers).double().eval()
    ref = torch.nn.GRU(input_size=12, hidden_size=12, num_layers=layers, batch_first=True, bidirectional=False,
                       dropout=0.1 if layers > 1 else 0.0).double().eval()
    ref.load_state_dict(m.gru.state_dict())
    ids = torch.zeros(4, 8, dtype=torch.int64)  # right padding, as its PaddingCollateFn
    for b, s in enumerate(SEQS):
        ids[b, : len(s)] = torch.tensor(s)
    with torch.no_grad():
        out, _ = ref(torch.nn.functional.embedding(ids, m.item_emb.weight, padding_idx=0))
        logits = out @ m.item_emb.weight.T  # its head: vocabulary 0..N
        ours = m.encode(left_padded(SEQS, 8))
        for b, s in enumerate(SEQS):
            n = len(s)
            assert torch.allclose(ours[b, 8 - n :], out[b, :n], atol=1e-12), b
        last = (ids != 0).sum(1) - 1  # its make_prediction reads the last real index
        assert torch.allclose(ours[:, -1] @ m.item_embeddings()[1:].T, logits[torch.arange(4), last][:, 1:],
                              atol=1e-12)


# ---------------------------------------------------------------------------------------------------------
# Diagnostics of a model without attention


def _evalset() -> EvalSet:
    rng = np.random.default_rng(0)
    seqs = [rng.integers(1, 21, size=int(rng.integers(1, 12))).tolist() for _ in range(12)]
    return EvalSet(Sequences.from_lists(seqs), rng.integers(1, 21, size=12))


def test_mixing_and_alpha_are_refused_in_one_line() -> None:
    m, ev = make(), _evalset()
    for fn, what in ((mixing_ratios, "mixing"), (alpha_sweep, "alpha")):
        with pytest.raises(ResdomError) as err:
            fn(m, ev)
        text = str(err.value)
        assert text.startswith(f"{what}: gru4rec has no attention blocks") and "\n" not in text


def test_hrli_shuffle_and_alpha_free_recovery_apply() -> None:
    m, ev = make(), _evalset()
    hr = last_item_hit_rates(m, ev)
    assert set(hr.values) >= {"HRLI@1", "HRL2I@1", "HRL3I@10"} and hr.n_users == 12
    sh = position_shuffle(m, ev, seeds=(0,))
    assert set(sh.perturbations) == {"keep_last", "full", "last_only", "drop_last", "reverse"}
    rec = miss_recovery(m, ev, ev)
    assert [r["alpha"] for r in rec.test.curve] == [1.0] and rec.alpha_star == 1.0
    assert set(rec.test.offset_shares) == {"L-1", "L-2", "L-3"}


# ---------------------------------------------------------------------------------------------------------
# Training on planted structure; the CLI on a GRU4Rec run


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, object, dict]:
    from resdom.data.prepare import prepare_split

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        split = prepare_split("synthetic:n_users=600,n_items=60,min_len=8,max_len=16,p_last=0.8,p_skip2=0.0,"
                              "p_user=0.1,seed=0", "loo")
        out = tmp_path_factory.mktemp("gru4rec")
        m, t = resolve_configs("gru4rec", {"max_len": 16, "hidden": 32},
                               {"epochs": 6, "batch_size": 32, "lr": 1e-2, "device": "cpu", "monitor_every": 3},
                               n_items=split.n_items)
        result = fit(split, m, t, out, {"source": "synthetic"}, progress=False, hooks=(epoch_monitor,))
    finally:
        torch.set_num_threads(threads)
    return out, split, result


def test_training_learns_the_planted_successor(planted) -> None:
    out, split, result = planted
    got = result["test"]["metrics"]
    pop1, pop10 = popularity_hr(split, 1), popularity_hr(split, 10)
    assert got["HR@10"] > 0.6 and got["HR@10"] > 3 * pop10, (got["HR@10"], pop10)
    assert got["HR@1"] > 10 * pop1, (got["HR@1"], pop1)
    # the training monitor records the hit rates, and no mixing ratio for a model without attention
    monitored = [json.loads(x)["monitor"] for x in (out / "metrics.jsonl").read_text().splitlines()
                 if "monitor" in json.loads(x)]
    assert len(monitored) == 2 and all(m["mixing_all"] is None and 0 <= m["HRLI@1"] <= 1 for m in monitored)


def test_diagnose_mixing_on_gru4rec_exits_with_one_line(planted, capsys) -> None:
    out, _, _ = planted
    capsys.readouterr()
    for what in ("mixing", "alpha", "hrli,mixing"):
        assert invoke("diagnose", str(out), "--what", what, "--no-progress") == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "has no attention blocks" in err, err


def test_diagnose_all_on_gru4rec_runs_what_applies(planted, capsys) -> None:
    out, _, _ = planted
    assert invoke("diagnose", str(out), "--what", "all", "--no-progress") == 0
    captured = capsys.readouterr()
    assert "mixing and alpha do not apply and are skipped" in captured.err
    files = out / "diagnostics"
    assert not (files / "mixing.json").exists() and not (files / "alpha.json").exists()
    rec = json.loads((files / "recovery.json").read_text())
    assert [r["alpha"] for r in rec["test"]["curve"]] == [1.0]
    summary = json.loads((files / "summary.json").read_text())
    assert "HRLI@1" in summary and "shuffle_NDCG@10_change" in summary and "mixing_pooled_all" not in summary
    assert "last-item hit rates" in captured.out and "miss recovery" in captured.out


@pytest.mark.slow
def test_reproduce_runs_the_contrast_models(tmp_path: Path) -> None:
    """``reproduce --models bert4rec,gru4rec``: every cell trains and is diagnosed with what applies, and the
    report has the paper's Figure 2 with both models."""
    from resdom.pipeline import GridSpec, reproduce

    tiny = "synthetic:n_users=120,n_items=40,min_len=6,max_len=14"
    out = tmp_path / "grid"
    spec = GridSpec([tiny], ["bert4rec", "gru4rec"], [1], out, protocol="loo", device="cpu", epochs=1,
                    train_values={"batch_size": 64, "monitor_every": 1},
                    model_values={"hidden": 16, "layers": 1, "max_len": 12})
    result = reproduce(spec, progress=False, echo=lambda line: None)
    assert [o.status for o in result.outcomes] == ["done", "done"], [o.message for o in result.outcomes]
    cells = {m: out / tiny / m / "seed1" / "diagnostics" for m in ("bert4rec", "gru4rec")}
    assert json.loads((cells["bert4rec"] / "mixing.json").read_text())["stages"] == ["Attn", "+Res", "+LN"]
    assert not (cells["gru4rec"] / "mixing.json").exists() and (cells["gru4rec"] / "recovery.json").is_file()
    figures = out / "summary" / "figures"
    assert (figures / "hrli_by_model.png").is_file() and (figures / "shuffle.png").is_file()
    md = (out / "summary" / "tables" / "hrli.md").read_text()
    assert all(f"| {m} | 1 seed |" in md for m in ("bert4rec", "gru4rec"))
