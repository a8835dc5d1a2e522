"""Probes of the residual account (docs/results.md, "Beyond the paper"): the read-out at a learned query token
appended after the prefix, and untied / projected output embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import resdom
from resdom.data.sequences import Sequences
from resdom.errors import ResdomError
from resdom.experiments import model_variant
from resdom.models import build_model
from resdom.models.config import make_model_config
from resdom.training.config import resolve_configs


def make_model(**kw) -> torch.nn.Module:
    torch.manual_seed(0)
    values = dict(name="sasrec", n_items=30, max_len=9, hidden=8, layers=2, heads=2, init_std=0.4, dropout=0.0,
                  attn_dropout=0.0)
    values.update(kw)
    return build_model(make_model_config(**values)).double().eval()


def items(n: int = 5, width: int = 8, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, 31, size=int(rng.integers(1, width + 1))).tolist() for _ in range(n)]
    return torch.from_numpy(Sequences.from_lists(seqs).padded(width))


@pytest.mark.parametrize("model_name", ["sasrec", "duorec"])
def test_query_token_is_appended_and_read_out_after_the_prefix(model_name):
    model = make_model(name=model_name, readout="query")
    x = items()
    assert model.max_len == 8 and model.item_embeddings().shape[0] == 31  # the query row is never ranked
    with torch.no_grad():
        states = model.encode(x)  # (B, L, d)
        token = torch.full((x.shape[0], 1), 31)
        written_out = model.encode_tokens(torch.cat([x, token], 1))  # the L + 1 positions, the query last
    assert states.shape == (5, 8, 8)
    assert torch.equal(states[:, -1], written_out[:, -1])  # the prediction: the query token's state
    assert torch.equal(states[:, :-1], written_out[:, 1:-1])  # the others: the items' own states, shifted
    assert (states[:, -1] - states[:, -2]).abs().max() > 1e-3  # the prediction is not the last item's state


def test_query_token_changes_no_item_state():
    """Causal attention: with positions counted from the first item, appending the token leaves every item's
    state as the model without it computes it."""
    model = make_model(readout="query", positions="from_start")
    x = items()
    with torch.no_grad():
        states, plain = model.encode(x), model.encode_tokens(x)
    real = x[:, 1:] > 0
    assert torch.allclose(states[:, :-1][real], plain[:, 1:][real], atol=1e-12)


def test_query_readout_trains_with_a_last_position_objective_only():
    model_cfg, train_cfg = resolve_configs("sasrec", {"readout": "query"}, {}, n_items=5)
    assert train_cfg.objective == "ce_last"
    with pytest.raises(ResdomError, match="readout='query'.*ce_last"):
        resolve_configs("sasrec", {"readout": "query"}, {"objective": "ce_all"}, n_items=5)
    assert model_variant("sasrec-query") == ("sasrec", {"readout": "query"})


def test_untied_output_is_a_table_of_its_own():
    model = make_model(output="untied")
    emb = model.item_embeddings()
    assert emb.shape == (31, 8) and emb.data_ptr() != model.item_emb.weight.data_ptr()
    h = torch.randn(3, 8, dtype=torch.float64)
    (h @ emb.T).sum().backward()
    assert model.out_emb.weight.grad is not None and model.item_emb.weight.grad is None


def test_projected_output_is_the_input_table_through_a_projection():
    model = make_model(output="projected")
    want = model.item_emb.weight @ model.out_proj.weight.T
    assert torch.allclose(model.item_embeddings(), want)
    tied = make_model()
    assert torch.equal(tied.item_embeddings(), tied.item_emb.weight)


@pytest.mark.parametrize("label", ["sasrec-query", "sasrec-untied", "duorec-projected"])
def test_probes_fit_and_diagnose_end_to_end(label):
    split = resdom.prepare_split("synthetic:n_users=80,n_items=30,min_len=4,max_len=10,seed=0", "loo")
    name, values = model_variant(label)
    fitted = resdom.fit(split, name, device="cpu", progress=False, epochs=1, hidden=8, layers=1, heads=1,
                        max_len=10, batch_size=64, seed=0, **values)
    diagnosis = resdom.diagnose(fitted, seeds=(0,), alphas=(1.0, 0.0), device="cpu")
    result = diagnosis.to_dict()
    assert set(result) == {"shuffle", "hrli", "mixing", "alpha", "recovery"}  # every diagnostic ran on the probe
    assert result["hrli"]["n_users"] == 80 and 0.0 <= result["hrli"]["values"]["HRLI@1"] <= 1.0
