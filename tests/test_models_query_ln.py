"""The query-LN block (time-to-split's SASRec, the paper's DuoRec) against a literal copy of that code."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from resdom.data.sequences import Sequences
from resdom.errors import ResdomError
from resdom.models import build_model, recording, residual_scale
from resdom.models.block import QueryLNBlock
from resdom.models.config import ModelConfig, make_model_config


class ReferenceSASRec(nn.Module):
    """time-to-split ``src/models.py`` SASRec (from pmixer/SASRec.pytorch), written out as there, right padding;
    ``alpha`` scales ``Q`` in ``seqs = Q + mha_outputs`` (the paper's residual scaling)."""

    def __init__(self, n_items: int, max_len: int, d: int, blocks: int, heads: int) -> None:
        super().__init__()
        self.item_emb = nn.Embedding(n_items + 1, d, padding_idx=0)
        self.pos_emb = nn.Embedding(max_len, d)
        self.attention_layernorms = nn.ModuleList(nn.LayerNorm(d, eps=1e-8) for _ in range(blocks))
        self.attention_layers = nn.ModuleList(nn.MultiheadAttention(d, heads, 0.0) for _ in range(blocks))
        self.forward_layernorms = nn.ModuleList(nn.LayerNorm(d, eps=1e-8) for _ in range(blocks))
        self.conv1 = nn.ModuleList(nn.Conv1d(d, d, kernel_size=1) for _ in range(blocks))
        self.conv2 = nn.ModuleList(nn.Conv1d(d, d, kernel_size=1) for _ in range(blocks))
        self.last_layernorm = nn.LayerNorm(d, eps=1e-8)
        self.alpha = 1.0

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seqs = self.item_emb(input_ids) * self.item_emb.embedding_dim**0.5
        seqs = seqs + self.pos_emb(torch.arange(input_ids.shape[1]).expand_as(input_ids))
        timeline_mask = input_ids == 0
        seqs = seqs * ~timeline_mask.unsqueeze(-1)
        tl = seqs.shape[1]
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool))
        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, _ = self.attention_layers[i](Q, seqs, seqs, attn_mask=attention_mask)
            seqs = self.alpha * Q + mha_outputs
            seqs = torch.transpose(seqs, 0, 1)
            seqs = self.forward_layernorms[i](seqs)
            ffn = self.conv2[i](torch.relu(self.conv1[i](seqs.transpose(-1, -2)))).transpose(-1, -2)
            seqs = (ffn + seqs) * ~timeline_mask.unsqueeze(-1)
        return self.last_layernorm(seqs)


def both_paddings(seqs: list[list[int]], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(left-padded (resdom), right-padded (the reference code)) (B, width) batches of ``seqs``."""
    left = torch.from_numpy(Sequences.from_lists(seqs).padded(width))
    right = torch.zeros_like(left)
    for b, s in enumerate(seqs):
        right[b, : len(s)] = torch.tensor(s)
    return left, right


def tts_config(**kw) -> ModelConfig:
    values = dict(name="sasrec", n_items=40, max_len=10, hidden=16, layers=2, heads=2, query_ln=True, final_ln=True,
                  embedding="dropout", emb_scale=True, ln_eps=1e-8, inner_mult=1, activation="relu",
                  positions="from_start")
    return make_model_config(**{**values, **kw})


def copy_into_reference(model, ref: ReferenceSASRec) -> None:
    with torch.no_grad():
        ref.item_emb.weight.copy_(model.item_emb.weight)
        ref.pos_emb.weight.copy_(model.pos_emb.weight)
        for i, b in enumerate(model.blocks):
            a, mha = b.attention, ref.attention_layers[i]
            mha.in_proj_weight.copy_(torch.cat([a.query.weight, a.key.weight, a.value.weight]))
            mha.in_proj_bias.copy_(torch.cat([a.query.bias, a.key.bias, a.value.bias]))
            mha.out_proj.weight.copy_(a.out.weight)
            mha.out_proj.bias.copy_(a.out.bias)
            for mine, theirs in ((b.attn_ln, ref.attention_layernorms[i]), (b.ffn_ln, ref.forward_layernorms[i])):
                theirs.weight.copy_(mine.weight)
                theirs.bias.copy_(mine.bias)
            ref.conv1[i].weight.copy_(b.ffn.fc1.weight[:, :, None])
            ref.conv1[i].bias.copy_(b.ffn.fc1.bias)
            ref.conv2[i].weight.copy_(b.ffn.fc2.weight[:, :, None])
            ref.conv2[i].bias.copy_(b.ffn.fc2.bias)
        ref.last_layernorm.weight.copy_(model.final_ln.weight)
        ref.last_layernorm.bias.copy_(model.final_ln.bias)


@pytest.mark.parametrize("alpha", [1.0, 0.4, 0.0])
def test_equals_time_to_split_sasrec_at_every_real_position(alpha):
    torch.manual_seed(0)
    model = build_model(tts_config()).double().eval()
    with torch.no_grad():  # non-trivial biases and LayerNorm parameters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln" in name:
                p.add_(0.3 * torch.randn_like(p))
    ref = ReferenceSASRec(40, 10, 16, 2, 2).double().eval()
    copy_into_reference(model, ref)
    rng = np.random.default_rng(1)
    seqs = [rng.integers(1, 41, size=int(rng.integers(1, 11))).tolist() for _ in range(7)]
    left, right = both_paddings(seqs, 10)
    ref.alpha = alpha
    with torch.no_grad(), residual_scale(model, alpha):
        mine, theirs = model.encode(left), ref(right)
    for b, s in enumerate(seqs):
        n = len(s)
        assert torch.allclose(mine[b, -n:], theirs[b, :n], atol=1e-10), b


def test_block_is_chosen_and_initialised_like_multihead_attention():
    torch.manual_seed(0)
    model = build_model(tts_config(hidden=64, max_len=20))
    assert all(isinstance(b, QueryLNBlock) for b in model.blocks)
    q = model.blocks[0].attention.query.weight.detach()
    bound = (6.0 / (4 * 64)) ** 0.5  # nn.MultiheadAttention: xavier_uniform_ over the (3d, d) in_proj_weight
    assert q.abs().max() <= bound and q.abs().max() > 0.9 * bound
    assert abs(float(q.std()) - bound / 3**0.5) < 0.01  # uniform(-b, b) has std b / sqrt(3)
    assert abs(float(model.blocks[0].attention.out.weight.detach().std()) - 0.02) < 0.003  # out_proj: N(0, 0.02)


def test_record_names_the_query_ln_residual_and_rebuilds_the_block_output():
    torch.manual_seed(0)
    model = build_model(tts_config()).double().eval()
    items = torch.from_numpy(Sequences.from_lists([[3, 4, 5, 6], [7, 8]]).padded(10))
    with torch.no_grad(), recording(model) as store:
        out = model.encode(items)
    rec = store[0][0]
    block = model.blocks[0]
    assert torch.allclose(rec.x, block.attn_ln(rec.attn_in))  # residual = LN_a(X), keys/values = X
    assert torch.allclose(rec.z, rec.x + rec.attn_out)
    assert torch.allclose(rec.sublayer_out, block.ffn_ln(rec.z))
    # the next block's input is this block's output: H + FFN(H)
    nxt = store[1][0]
    assert torch.allclose(nxt.attn_in, rec.sublayer_out + block.ffn(rec.sublayer_out))
    assert torch.allclose(out, model.final_ln(nxt.sublayer_out + model.blocks[1].ffn(nxt.sublayer_out)))


def test_dropout_sits_inside_the_ffn_and_on_attention_weights_only():
    torch.manual_seed(0)
    model = build_model(tts_config(dropout=0.5, attn_dropout=0.5))
    block = model.blocks[0]
    assert block.ffn.inner_dropout.p == 0.5
    x = torch.randn(3, 6, 16)
    block.train()
    mask = torch.zeros(3, 1, 6, 6)
    torch.manual_seed(1)
    a = block.attention_sublayer(x, mask)
    block.attention.attn_dropout = 0.0
    torch.manual_seed(1)
    b = block.attention_sublayer(x, mask)
    assert not torch.allclose(a, b)  # attention-weight dropout acts
    block.eval()
    block.attention.attn_dropout = 0.5
    assert torch.allclose(block.attention_sublayer(x, mask), block.attention_sublayer(x, mask))


def test_refused_with_bsarec_and_with_pre_ln():
    with pytest.raises(ResdomError, match=r"model\.query_ln: not a field of bsarec"):
        make_model_config(name="bsarec", query_ln=True)
    with pytest.raises(ResdomError, match="choose one"):
        make_model_config(query_ln=True, norm_first=True)
