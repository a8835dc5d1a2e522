"""pmixer/SASRec.pytorch import: a faithful re-implementation of pmixer's current SASRec (post-LN and
``norm_first``), its state dict imported into resdom, scores equal pmixer's ``predict`` on the same inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from resdom.adapters.pmixer import import_pmixer
from resdom.errors import ResdomError
from resdom.evaluation.batches import iter_eval_batches
from resdom.models.interface import recording, residual_scale
from resdom.runs import load_run

MAXLEN, HIDDEN, HEADS, BLOCKS = 12, 16, 2, 2


class PointWiseFeedForward(nn.Module):
    """pmixer's FFN: two 1x1 convolutions with ReLU (the residual is added by the caller in the current code)."""

    def __init__(self, hidden: int, dropout: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(hidden, hidden, kernel_size=1)
        self.dropout1 = nn.Dropout(dropout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv1d(hidden, hidden, kernel_size=1)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(x.transpose(-1, -2))))))
        return y.transpose(-1, -2)


class PmixerSASRec(nn.Module):
    """Same modules, names and forward pass as pmixer's current ``model.SASRec`` (inference path)."""

    def __init__(self, item_num: int, maxlen: int, hidden: int, blocks: int, heads: int, dropout: float,
                 norm_first: bool) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.item_emb = nn.Embedding(item_num + 1, hidden, padding_idx=0)
        self.pos_emb = nn.Embedding(maxlen + 1, hidden, padding_idx=0)
        self.emb_dropout = nn.Dropout(dropout)
        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        self.last_layernorm = nn.LayerNorm(hidden, eps=1e-8)
        for _ in range(blocks):
            self.attention_layernorms.append(nn.LayerNorm(hidden, eps=1e-8))
            self.attention_layers.append(nn.MultiheadAttention(hidden, heads, dropout))
            self.forward_layernorms.append(nn.LayerNorm(hidden, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(hidden, dropout))

    def log2feats(self, log_seqs: np.ndarray) -> torch.Tensor:
        seqs = self.item_emb(torch.as_tensor(log_seqs, dtype=torch.long))
        seqs = seqs * self.item_emb.embedding_dim ** 0.5
        poss = np.tile(np.arange(1, log_seqs.shape[1] + 1), [log_seqs.shape[0], 1]) * (log_seqs != 0)
        seqs = self.emb_dropout(seqs + self.pos_emb(torch.as_tensor(poss, dtype=torch.long)))
        tl = seqs.shape[1]
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool))
        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            if self.norm_first:
                x = self.attention_layernorms[i](seqs)
                mha, _ = self.attention_layers[i](x, x, x, attn_mask=attention_mask)
                seqs = torch.transpose(seqs + mha, 0, 1)
                seqs = seqs + self.forward_layers[i](self.forward_layernorms[i](seqs))
            else:
                mha, _ = self.attention_layers[i](seqs, seqs, seqs, attn_mask=attention_mask)
                seqs = torch.transpose(self.attention_layernorms[i](seqs + mha), 0, 1)
                seqs = self.forward_layernorms[i](seqs + self.forward_layers[i](seqs))
        return self.last_layernorm(seqs)

    def predict(self, log_seqs: np.ndarray, item_indices: np.ndarray) -> torch.Tensor:
        final = self.log2feats(log_seqs)[:, -1, :]
        embs = self.item_emb(torch.as_tensor(item_indices, dtype=torch.long))
        return embs.matmul(final.unsqueeze(-1)).squeeze(-1)


def _data_file(path: Path, rng: np.random.Generator) -> tuple[Path, dict[int, list[int]]]:
    """``user item`` lines (pmixer's format); raw item ids sparse (3k + 2), so resdom's ids differ from them."""
    raw_items = 3 * np.arange(30) + 2
    seqs = {u: rng.choice(raw_items, size=int(rng.integers(4, 26))).tolist() for u in range(1, 41)}
    path.write_text("".join(f"{u} {i}\n" for u, s in seqs.items() for i in s))
    return path, seqs


def _pmixer(norm_first: bool, item_num: int, seed: int) -> PmixerSASRec:
    torch.manual_seed(seed)
    model = PmixerSASRec(item_num, MAXLEN, HIDDEN, BLOCKS, HEADS, 0.2, norm_first)
    for _, p in model.named_parameters():  # pmixer's main.py: xavier_normal_ on every parameter it can
        try:
            nn.init.xavier_normal_(p.data)
        except ValueError:
            pass
    with torch.no_grad():  # biases and LayerNorms away from their init, so every weight mapping is exercised
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def _left_pad(seqs: list[list[int]], width: int) -> np.ndarray:
    out = np.zeros((len(seqs), width), dtype=np.int64)
    for r, s in enumerate(seqs):
        s = s[-width:]
        out[r, width - len(s):] = s
    return out


@pytest.mark.parametrize("norm_first", [False, True])
def test_scores_equal_pmixers(tmp_path: Path, norm_first: bool) -> None:
    rng = np.random.default_rng(3)
    data, seqs = _data_file(tmp_path / "data.txt", rng)
    pm = _pmixer(norm_first, item_num=int(max(max(s) for s in seqs.values())), seed=int(norm_first))
    torch.save(pm.state_dict(), tmp_path / "sasrec.pth")
    run_dir = import_pmixer(tmp_path / "sasrec.pth", str(data), tmp_path / "run", heads=HEADS, norm_first=norm_first,
                            k_core=0)
    run = load_run(run_dir)
    assert run.model.cfg.norm_first is norm_first and not run.model.cfg.key_padding_mask

    from resdom.data.prepare import load_prepared

    labels = load_prepared(str(data), k_core=0)[0].item_labels
    raw_ids = np.array([int(x) for x in labels[1:]])
    test = run.split.test
    # pmixer's test input: the user's items but the last, left-padded to maxlen; scores for every item
    inputs = [[int(labels[x]) for x in test.inputs.sequence(i)] for i in range(len(test))]
    with torch.no_grad():
        theirs = pm.predict(_left_pad(inputs, MAXLEN), raw_ids).numpy()
        # resdom's batches are trimmed to their longest row: scores must not depend on that width
        ours = np.zeros_like(theirs)
        for idx, items, _ in iter_eval_batches(test, run.model.max_len, batch_size=7):
            assert items.shape[1] <= MAXLEN
            ours[idx] = (run.model.encode(items)[:, -1] @ run.model.item_embeddings().T)[:, 1:].numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    assert (ours.argmax(1) == theirs.argmax(1)).all()


def test_records_have_the_callers_width_and_alpha_acts(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    data, seqs = _data_file(tmp_path / "data.txt", rng)
    pm = _pmixer(False, item_num=int(max(max(s) for s in seqs.values())), seed=5)
    torch.save(pm.state_dict(), tmp_path / "sasrec.pth")
    run = load_run(import_pmixer(tmp_path / "sasrec.pth", str(data), tmp_path / "run", heads=HEADS, k_core=0))
    items = torch.tensor([[0, 0, 5, 7], [3, 4, 9, 1]])
    with torch.no_grad(), recording(run.model) as store:
        h = run.model.encode(items)
    assert h.shape == (2, 4, HIDDEN)
    rec = store[0][0]
    assert rec.attn_weights.shape == (2, HEADS, 4, 4) and rec.z.shape == (2, 4, HIDDEN)
    with torch.no_grad(), residual_scale(run.model, 0.3):
        h_scaled = run.model.encode(items)
    assert not torch.allclose(h, h_scaled)

    from resdom.diagnostics import mixing_ratios

    result = mixing_ratios(run.model, run.split.test).to_dict()
    assert 0.0 <= result["pooled"]["all"]["+Res"] <= 1.0


def test_wrong_heads_or_max_len_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    data, seqs = _data_file(tmp_path / "data.txt", rng)
    torch.save(_pmixer(False, int(max(max(s) for s in seqs.values())), 0).state_dict(), tmp_path / "s.pth")
    with pytest.raises(ResdomError, match="not divisible by --heads 3"):
        import_pmixer(tmp_path / "s.pth", str(data), tmp_path / "a", heads=3, k_core=0)
    for wrong in (MAXLEN + 5, MAXLEN - 5):  # a shorter one put the last item at another position than pmixer's
        with pytest.raises(ResdomError, match=f"position table .* so the model was trained with maxlen {MAXLEN}"):
            import_pmixer(tmp_path / "s.pth", str(data), tmp_path / "b", heads=2, max_len=wrong, k_core=0)
    torch.save({"weights": torch.ones(3)}, tmp_path / "other.pth")
    with pytest.raises(ResdomError, match="not a pmixer SASRec state dict"):
        import_pmixer(tmp_path / "other.pth", str(data), tmp_path / "c", k_core=0)


def test_older_pmixer_checkpoint_is_refused_not_misread(tmp_path: Path) -> None:
    """The older model.py had a maxlen-row position table; pmixer's file names say maxlen, so it is caught."""
    rng = np.random.default_rng(6)
    data, seqs = _data_file(tmp_path / "data.txt", rng)
    state = _pmixer(False, int(max(max(s) for s in seqs.values())), 0).state_dict()
    state["pos_emb.weight"] = state["pos_emb.weight"][1:]  # MAXLEN rows, as the older code made
    path = tmp_path / f"SASRec.epoch=20.lr=0.001.layer=2.head=2.hidden=16.maxlen={MAXLEN}.pth"
    torch.save(state, path)
    with pytest.raises(ResdomError, match="older pmixer model.py"):
        import_pmixer(path, str(data), tmp_path / "run", heads=HEADS, k_core=0)


def test_cli_import_pmixer_norm_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``resdom import-pmixer`` (in this process, through the CLI's entry function) and its one-line error."""
    from cli_helpers import invoke

    rng = np.random.default_rng(7)
    data, seqs = _data_file(tmp_path / "data.txt", rng)
    path = tmp_path / f"SASRec.epoch=20.lr=0.001.layer=2.head=2.hidden=16.maxlen={MAXLEN}.pth"
    torch.save(_pmixer(True, int(max(max(s) for s in seqs.values())), 0).state_dict(), path)
    out = tmp_path / "run"
    cmd = ["import-pmixer", str(path), "--data", str(data), "--out", str(out), "--heads", str(HEADS), "--norm-first",
           "--k-core", "0"]
    assert invoke(*cmd) == 0, capsys.readouterr().err
    run = load_run(out)
    assert run.model.cfg.norm_first and run.model.max_len == MAXLEN
    assert run.config["imported_from"]["format"] == "pmixer"
    capsys.readouterr()
    assert invoke(*cmd[:5], str(tmp_path / "run2"), "--heads", "3", "--k-core", "0") == 2
    err = capsys.readouterr().err
    assert "--heads 3" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    # --force replaces the run (its diagnostics go), never a folder of other files, whose diagnostics/ it would remove
    (out / "diagnostics").mkdir()
    assert invoke(*cmd) == 2 and "--force" in capsys.readouterr().err
    assert invoke(*cmd, "--force") == 0 and not (out / "diagnostics").exists()
    project = tmp_path / "project"
    (project / "diagnostics").mkdir(parents=True)
    (project / "diagnostics" / "mine.txt").write_text("keep me")
    capsys.readouterr()
    assert invoke(*cmd[:5], str(project), *cmd[6:], "--force") == 2
    assert "is not a resdom run directory (it holds diagnostics)" in capsys.readouterr().err
    assert [p.name for p in project.rglob("*")] == ["diagnostics", "mine.txt"]


def test_default_applies_pmixers_preprocessing_none(tmp_path: Path) -> None:
    """pmixer's data_partition uses its file as it is: no k-core (a rare item stays), file order, users with
    >= 3 items tested; the import does the same by default and says so."""
    rng = np.random.default_rng(8)
    data, seqs = _data_file(tmp_path / "data.txt", rng)
    rare = 3 * 30 + 2  # an item seen once, by a user with 3 items; a 5-core would drop both
    seqs[41] = [2, rare, 5]
    seqs[42] = [5, 8]  # fewer than 3 items: trained on only, as in pmixer
    data.write_text("".join(f"{u} {i}\n" for u, s in seqs.items() for i in s))
    torch.save(_pmixer(False, rare, 0).state_dict(), tmp_path / "s.pth")
    lines: list[str] = []
    run = load_run(import_pmixer(tmp_path / "s.pth", str(data), tmp_path / "run", heads=HEADS, log=lines.append))
    test = run.split.test
    assert len(test) == len([s for s in seqs.values() if len(s) >= 3])
    from resdom.data.prepare import load_prepared

    prepared, _ = load_prepared(str(data), k_core=0)
    il, ul = prepared.item_labels, prepared.user_labels
    ours = {int(ul[test.inputs.users[i]]): [int(il[x]) for x in test.inputs.sequence(i)] + [int(il[test.targets[i]])]
            for i in range(len(test))}
    assert ours == {u: s for u, s in seqs.items() if len(s) >= 3}  # pmixer's sequences, in file order
    assert run.split.n_items == len(set().union(*seqs.values())) and rare in il.tolist()
    assert "no filtering, as pmixer" in lines[0] and "file order" in lines[0]
    n = sum(map(len, seqs.values()))  # each count as the data holds it, as data split writes counts
    assert (f"{n:,} interactions read -> {n:,} interactions, {len(seqs):,} users, "
            f"{len(set().union(*seqs.values())):,} items") in lines[0], lines[0]
    assert f"leave-one-out, {len(test):,} users (" in lines[1]
    assert run.config["imported_from"]["preprocessing"] == lines


def test_importing_and_loading_leave_the_callers_torch_random_state_alone(tmp_path: Path) -> None:
    """The model the weights are loaded into draws its initial weights without moving the caller's random state: a
    seeded script's next random numbers are the same whether or not it imported or loaded a model."""
    rng = np.random.default_rng(4)
    data, seqs = _data_file(tmp_path / "data.txt", rng)
    torch.save(_pmixer(False, item_num=int(max(max(s) for s in seqs.values())), seed=5).state_dict(),
               tmp_path / "sasrec.pth")
    torch.manual_seed(123)
    before = torch.get_rng_state()
    run_dir = import_pmixer(tmp_path / "sasrec.pth", str(data), tmp_path / "run", heads=HEADS, k_core=0)
    assert torch.equal(torch.get_rng_state(), before)
    load_run(run_dir)
    assert torch.equal(torch.get_rng_state(), before)
