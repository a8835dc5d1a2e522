"""Last-item hit rates, the residual-scaling sweep and miss recovery against slow references and hand cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from resdom.data.sequences import EvalSet, Sequences
from resdom.diagnostics.alpha import ALPHAS, alpha_sweep
from resdom.diagnostics.common import ranks_of, scores_at, seen_items
from resdom.diagnostics.hrli import last_item_hit_rates
from resdom.diagnostics.mixing import mixing_ratios
from resdom.diagnostics.recovery import miss_recovery, select_alpha, split_recovery
from resdom.evaluation.evaluate import evaluate
from resdom.experiments import model_labels, model_variant
from resdom.models import build_model, residual_scale
from resdom.models.config import make_model_config
from resdom.models.interface import final_states

N_ITEMS = 25


def evalset(n: int = 30, seed: int = 0) -> EvalSet:
    rng = np.random.default_rng(seed)
    lists = [rng.integers(1, N_ITEMS + 1, size=int(rng.integers(1, 12))).tolist() for _ in range(n)]
    lists[0], lists[1] = [4], [4, 9]  # users shorter than 2 and 3 items
    return EvalSet(Sequences.from_lists(lists), rng.integers(1, N_ITEMS + 1, size=n))


def model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(make_model_config(n_items=N_ITEMS, max_len=8, hidden=16, layers=2, heads=2, init_std=0.5)).eval()


def slow_ranks(scores: np.ndarray, item: int) -> int:
    """Pessimistic 0-based rank by counting."""
    return int((scores >= scores[item]).sum() - 1)


def test_hrli_matches_a_slow_reference():
    m, ev = model(), evalset()
    res = last_item_hit_rates(m, ev, batch_size=7)
    items = torch.from_numpy(ev.inputs.padded(m.max_len))
    with torch.no_grad():
        scores = (m.encode(items)[:, -1] @ m.item_embeddings().T).numpy()
    scores[:, 0] = -np.inf
    for k in (1, 2, 3):
        for K in (1, 5, 10):
            hits = 0
            for u, s in enumerate(ev.inputs.to_lists()):
                if len(s) >= k and slow_ranks(scores[u], s[-k]) < K:
                    hits += 1
            name = "HRLI" if k == 1 else f"HRL{k}I"
            assert res.values[f"{name}@{K}"] == pytest.approx(hits / len(ev))
    assert res.n_users == len(ev) and res.to_dict()["filtered"] is False


def test_hrli_by_last_item_frequency_matches_a_slow_reference():
    """Per band of the last input item's training frequency (counted by hand from a list of training sequences):
    each band's rates over its own users, the bands partition the users, the table's seen / unseen split."""
    from resdom.data.sequences import item_counts
    from resdom.names import band_names
    from resdom.report.values import hrli_values

    m, base = model(), evalset()
    lists = base.inputs.to_lists()
    for u, last in zip(range(2, 8), (1, 2, 3, 4, 10, 20)):  # a user ending in each band
        lists[u][-1] = last
    ev = EvalSet(Sequences.from_lists(lists), base.targets)
    rng = np.random.default_rng(5)
    train = [rng.integers(8, 13, size=int(rng.integers(3, 9))).tolist() for _ in range(40)]  # 8-12: 20+ times
    train += [[1, 2, 2], [3] * 6, [4] * 7, [4, 4]]  # 1, 2: 1-4 times; 3, 4: 5-19; 5-7 and 13-25 never
    counts = item_counts(Sequences.from_lists(train), N_ITEMS)
    res = last_item_hit_rates(m, ev, batch_size=7, train_counts=counts)
    items = torch.from_numpy(ev.inputs.padded(m.max_len))
    with torch.no_grad():
        scores = (m.encode(items)[:, -1] @ m.item_embeddings().T).numpy()
    scores[:, 0] = -np.inf

    def band(item: int) -> str:
        c = sum(seq.count(item) for seq in train)
        return "0" if c == 0 else "1-4" if c < 5 else "5-19" if c < 20 else "20+"

    assert list(res.by_frequency) == band_names() == ["0", "1-4", "5-19", "20+"]
    assert sum(b["n_users"] for b in res.by_frequency.values()) == len(ev)
    for name, b in res.by_frequency.items():
        users = [u for u, s in enumerate(lists) if band(s[-1]) == name]
        assert b["n_users"] == len(users) > 0, name
        for k, K in ((1, 1), (2, 1), (1, 10)):
            hits = sum(len(lists[u]) >= k and slow_ranks(scores[u], lists[u][-k]) < K for u in users)
            key = "HRLI" if k == 1 else f"HRL{k}I"
            assert b["values"][f"{key}@{K}"] == pytest.approx(hits / len(users)), (name, k, K)
    table = hrli_values(res.to_dict())
    cold = [u for u, s in enumerate(lists) if band(s[-1]) == "0"]
    warm = [u for u in range(len(ev)) if u not in cold]
    top1 = scores.argmax(1)
    assert table["unseen_share"] == pytest.approx(len(cold) / len(ev))
    assert table["HRLI@1_unseen"] == pytest.approx(np.mean([top1[u] == lists[u][-1] for u in cold]))
    assert table["HRLI@1_seen"] == pytest.approx(np.mean([top1[u] == lists[u][-1] for u in warm]))
    assert table["HRLI@1"] == pytest.approx(res.values["HRLI@1"])
    frame = res.to_frame()
    assert set(frame["band"]) == {"all", *band_names()}
    row = frame[(frame["band"] == "0") & (frame["metric"] == "HRLI@1")].iloc[0]
    assert row["n_users"] == len(cold) and row["value"] == pytest.approx(table["HRLI@1_unseen"])
    # an empty band (its rates NaN before JSON, None after) does not spoil the seen average
    d = {"values": {"HRLI@1": 0.5}, "by_frequency": {
        "0": {"n_users": 2, "values": {"HRLI@1": 0.0}}, "1-4": {"n_users": 0, "values": {"HRLI@1": float("nan")}},
        "5-19": {"n_users": 2, "values": {"HRLI@1": 1.0}}}}
    assert hrli_values(d)["HRLI@1_seen"] == 1.0 and hrli_values(d)["unseen_share"] == 0.5
    # without frequencies: no bands, and the table's band columns are empty
    plain = last_item_hit_rates(m, ev, batch_size=7)
    assert plain.by_frequency is None and "by_frequency" not in plain.to_dict()
    assert hrli_values(plain.to_dict())["unseen_share"] is None


def test_hrli_refuses_filtering_because_it_would_be_zero():
    m, ev = model(), evalset()
    with pytest.raises(ValueError, match="identically 0"):
        last_item_hit_rates(m, ev, filter_seen=True)
    # and with filtering the last items indeed never reach the top-K
    idx = np.arange(len(ev))
    items = torch.from_numpy(ev.inputs.padded(m.max_len))
    with torch.no_grad():
        scores = scores_at(m, m.encode(items)[:, -1], seen_items(ev.inputs, idx, "cpu"))
    last = torch.from_numpy(ev.inputs.items[ev.inputs.offsets[1:] - 1])
    assert (ranks_of(scores, last) >= 10).all()


def test_alpha_sweep_at_one_matches_the_other_diagnostics():
    m, ev = model(), evalset()
    res = alpha_sweep(m, ev, alphas=(1.0, 0.0), batch_size=8)
    row = res.rows[0]
    filt, unfilt = evaluate(m, ev, filter_seen=True).metrics, evaluate(m, ev, filter_seen=False).metrics
    assert row["HR@10"] == pytest.approx(filt["HR@10"]) and row["NDCG@10"] == pytest.approx(filt["NDCG@10"])
    assert row["HR@10_unfiltered"] == pytest.approx(unfilt["HR@10"])
    assert row["NDCG@10_unfiltered"] == pytest.approx(unfilt["NDCG@10"])
    h = last_item_hit_rates(m, ev).values
    assert row["HRLI@1"] == pytest.approx(h["HRLI@1"]) and row["HRL2I@1"] == pytest.approx(h["HRL2I@1"])
    mix = mixing_ratios(m, ev)
    assert row["mixing_all"] == pytest.approx(mix.pooled["all"]) and row["mixing_last"] == pytest.approx(
        mix.pooled["last"])
    zero = res.rows[1]
    assert zero["mixing_all"]["Attn"] == pytest.approx(zero["mixing_all"]["+Res"], abs=1e-6)
    assert all(b.alpha == 1.0 for b in m.attention_blocks())  # restored


def test_alpha_sweep_scales_only_the_chosen_layers():
    m, ev = model(), evalset()
    res = alpha_sweep(m, ev, alphas=(0.5,), layers=[1])
    with residual_scale(m, 0.5, [1]):
        want = evaluate(m, ev).metrics["HR@10"]
    assert res.rows[0]["HR@10"] == pytest.approx(want) and res.layers == [1]
    assert list(ALPHAS) == [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]


@pytest.mark.parametrize("bad", [True, np.bool_(False), "0.5", None, np.complex64(0.5)])
def test_alpha_sweep_and_recovery_refuse_an_alpha_that_is_not_a_number(bad):
    # float(True) is 1.0 and float("0.5") is 0.5: the functions below the options must not read either as a scale
    m, ev = model(), evalset()
    with pytest.raises(ValueError, match=r"expected numbers in \[0, 1\]"):
        alpha_sweep(m, ev, alphas=(0.5, bad))
    with pytest.raises(ValueError, match=r"expected numbers in \[0, 1\]"):
        miss_recovery(m, ev, evalset(seed=2), alphas=(1.0, bad))
    assert alpha_sweep(m, ev, alphas=(np.float32(0.5), 1)).rows[0]["alpha"] == 0.5  # NumPy and int scales still read


@pytest.mark.parametrize("alphas, needle", [((1.0, 2.0), "must lie in [0, 1] (got 2)"), ((0.5, 0.5), "given twice"),
                                            ((), "at least one"), ((float("nan"),), "(got nan)")])
def test_the_functions_below_the_options_take_the_options_rule(alphas, needle):
    """alpha_sweep and miss_recovery called directly refuse what ``diagnose`` refuses: one rule of residual scales
    (``checks.residual_scales``: range, repeats, type), in one place."""
    m, ev = model(), evalset()
    for call in (lambda: alpha_sweep(m, ev, alphas=alphas),
                 lambda: miss_recovery(m, ev, evalset(seed=2), alphas=alphas)):
        with pytest.raises(ValueError) as e:
            call()
        assert needle in str(e.value)


def test_select_alpha_by_hand():
    curve = [{"alpha": 1.0, "recovery": 0.0, "HR@10": 0.50}, {"alpha": 0.8, "recovery": 0.2, "HR@10": 0.496},
             {"alpha": 0.5, "recovery": 0.4, "HR@10": 0.45}, {"alpha": 0.3, "recovery": 0.2, "HR@10": 0.499}]
    assert select_alpha(curve) == 0.3  # 0.5 fails the guard (floor 0.495); 0.8 and 0.3 tie: the smaller alpha
    assert select_alpha(list(reversed(curve))) == 0.3  # whatever order the rows come in
    assert select_alpha(curve, eps=0.2) == 0.5  # floor 0.4: 0.5 passes and recovers most
    assert select_alpha([{"alpha": 1.0, "recovery": 0.0, "HR@10": 0.5},
                         {"alpha": 0.5, "recovery": 0.9, "HR@10": 0.1}]) == 1.0  # guard: only alpha 1 passes
    # a tie at the top between three alphas, one of them failing the guard: the smallest that passes
    assert select_alpha([{"alpha": 1.0, "recovery": 0.0, "HR@10": 0.5}, {"alpha": 0.6, "recovery": 0.25, "HR@10": 0.5},
                         {"alpha": 0.4, "recovery": 0.25, "HR@10": 0.5},
                         {"alpha": 0.2, "recovery": 0.25, "HR@10": 0.3}]) == 0.4


def test_select_alpha_with_nothing_recoverable_takes_the_smallest_alpha_passing_the_guard():
    # an empty recoverable set: recovery undefined (NaN, null in JSON) at every alpha counts as 0, so every alpha
    # passing the guard ties at 0 and the smallest wins, not alpha = 1
    nan = float("nan")
    assert select_alpha([{"alpha": 1.0, "recovery": nan, "HR@10": 0.5},
                         {"alpha": 0.5, "recovery": nan, "HR@10": 0.5}]) == 0.5
    assert select_alpha([{"alpha": 1.0, "recovery": None, "HR@10": 0.5}, {"alpha": 0.7, "recovery": None, "HR@10": 0.5},
                         {"alpha": 0.0, "recovery": None, "HR@10": 0.2}]) == 0.7  # 0.0 fails the guard
    assert select_alpha([{"alpha": 1.0, "recovery": nan, "HR@10": nan}]) == 1.0


def test_miss_recovery_with_an_empty_recoverable_set_selects_the_smallest_alpha():
    # K above the catalogue: every final position whose target can be ranked hits (a target in its own input is
    # filtered out: a miss at every K and every column), so nothing is recoverable and HR@K, at every alpha, is the
    # share of users whose target is not in their input
    m = model()
    valid = evalset(seed=1)
    res = miss_recovery(m, valid, evalset(seed=2), alphas=(1.0, 0.7, 0.3), K=m.n_items + 1, batch_size=16)
    rankable = np.mean([int(t) not in s for t, s in zip(valid.targets, valid.inputs.to_lists())])
    assert 0 < rankable < 1
    assert res.valid.recoverable == 0 and all(r[f"HR@{res.K}"] == pytest.approx(rankable) for r in res.valid.curve)
    assert res.alpha_star == 0.3


@pytest.mark.parametrize("readout", ["last", "query"])
def test_recovery_matches_a_slow_reference(readout):
    """Offset k is the prediction after the prefix that ends k items earlier: for SASRec the state at column L-1-k
    of the whole input (causal); for a query-token readout, whose item columns hold raw encoder states (and whose
    column L-2 sits on the last item, having seen the whole input), the query's state after the prefix encoded on
    its own, one user at a time here."""
    torch.manual_seed(0)
    m = build_model(make_model_config(n_items=N_ITEMS, max_len=8, hidden=16, layers=2, heads=2, init_std=0.5,
                                      readout=readout)).eval()
    ev = evalset(n=40, seed=3)
    K = 5
    rec = split_recovery(m, ev, alphas=(1.0, 0.4), K=K, batch_size=6)
    lists = ev.inputs.to_lists()
    with torch.no_grad():
        hid = {}
        for alpha in (1.0, 0.4):
            with residual_scale(m, alpha):
                hid[alpha] = m.encode(torch.from_numpy(ev.inputs.padded(m.max_len)))
    emb = m.item_embeddings().detach().numpy()
    L = hid[1.0].shape[1]

    def rank(state: torch.Tensor, u: int) -> int:
        s = state.numpy() @ emb.T
        s[0] = -np.inf
        s[lists[u]] = -np.inf  # the whole input's items, also for earlier positions
        return slow_ranks(s, int(ev.targets[u]))

    def earlier(u: int, k: int) -> torch.Tensor:
        if readout == "last":
            return hid[1.0][u, L - 1 - k]
        prefix = lists[u][-m.max_len:][:-k]
        with torch.no_grad():
            return m.encode(torch.tensor([prefix]))[0, -1]  # no padding: the query token right after the prefix

    recoverable, shares, recovered = 0, np.zeros(3), 0
    for u, s in enumerate(lists):
        final_hit = rank(hid[1.0][u, -1], u) < K
        off = [len(s) >= k + 1 and rank(earlier(u, k), u) < K for k in (1, 2, 3)]
        shares += np.array(off) & (not final_hit)
        if not final_hit and any(off):
            recoverable += 1
            recovered += rank(hid[0.4][u, -1], u) < K
    assert rec.recoverable == recoverable and recoverable > 0
    assert [rec.offset_shares[f"L-{k}"] for k in (1, 2, 3)] == pytest.approx(list(shares / len(ev)))
    assert rec.curve[0]["recovery"] == 0.0
    assert rec.curve[1]["recovery"] == pytest.approx(recovered / recoverable)


def test_miss_recovery_end_to_end():
    m = model()
    res = miss_recovery(m, evalset(seed=1), evalset(seed=2), alphas=(1.0, 0.7, 0.3), batch_size=16)
    d = res.to_dict()
    assert d["K"] == 10 and d["eps"] == 0.01 and d["alpha_star"] in (1.0, 0.7, 0.3)
    assert set(d["test"]) >= {"n_users", "recoverable", "recoverable_share", "offset_shares", "curve"}
    with residual_scale(m, res.alpha_star):
        want = evaluate(m, evalset(seed=2)).metrics
    assert res.test_at_alpha_star["HR@10"] == pytest.approx(want["HR@10"])
    assert res.test_at_alpha_star["NDCG@10"] == pytest.approx(want["NDCG@10"])



@pytest.mark.parametrize("readout", ["last", "query"])
def test_recovery_json_says_where_a_query_readouts_offsets_were_read(readout):
    """A query-token model's recovery.json says its offsets are read from prefix passes (a file of such a model
    without it read them from raw item columns); every other model's file is as it was."""
    torch.manual_seed(0)
    m = build_model(make_model_config(n_items=N_ITEMS, max_len=8, hidden=8, layers=1, heads=1, readout=readout))
    d = miss_recovery(m.eval(), evalset(seed=1), evalset(seed=2), alphas=(1.0, 0.5), batch_size=16).to_dict()
    assert d.get("offsets_read") == ("prefix passes" if readout == "query" else None)

def test_miss_recovery_reuses_the_alpha_sweeps_ranks_without_changing_a_number(monkeypatch):
    m, valid, test = model(), evalset(seed=1), evalset(seed=2)
    alphas = (1.0, 0.7, 0.3)
    fresh = miss_recovery(m, valid, test, alphas=alphas, layers=[1], batch_size=16).to_dict()
    sweeps = {part: alpha_sweep(m, s, alphas=alphas, layers=[1], batch_size=7).target_ranks
              for part, s in (("valid", valid), ("test", test))}
    for part, s in (("valid", valid), ("test", test)):  # the sweep's ranks are the final position's own
        for a in alphas:
            with residual_scale(m, a, [1]):
                want = evaluate(m, s).metrics
            got = sweeps[part][a]
            assert got.shape == (len(s),) and float((got < 10).mean()) == pytest.approx(want["HR@10"])
    import resdom.diagnostics.recovery as recovery

    calls, real = [], recovery.final_ranks
    monkeypatch.setattr(recovery, "final_ranks", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    reused = miss_recovery(m, valid, test, alphas=alphas, layers=[1], batch_size=16, known_ranks=sweeps).to_dict()
    assert calls == []  # nothing ranked again
    assert reused == fresh
    half = miss_recovery(m, valid, test, alphas=alphas, layers=[1], batch_size=16,
                         known_ranks={"test": sweeps["test"]})
    assert calls == [0.7, 0.3]  # valid only, at the alphas other than 1
    assert half.test.to_dict() == fresh["test"]


def label_model(label: str) -> torch.nn.Module:
    name, values = model_variant(label)
    heads = {} if name == "gru4rec" else {"heads": 2}
    torch.manual_seed(0)
    return build_model(make_model_config(**{**values, "name": name, "n_items": N_ITEMS, "max_len": 6, "hidden": 8,
                                            "layers": 2, "init_std": 0.5, **heads})).double().eval()


@pytest.mark.parametrize("label", model_labels())
def test_every_labels_hrli_and_sweep_rows_match_a_per_user_loop(label):
    """For every model label: HRLI@1 (the last real input item, never a [MASK] / query token or padding) and the
    sweep's HR@10 / HRLI@1 at alpha 0.4, from padded batches of 4, equal a loop that scores one user at a time from
    the unpadded window (readouts, appended tokens and full-window models included)."""
    m, ev = label_model(label), evalset(n=12, seed=3)
    has_blocks = len(m.attention_blocks()) > 0
    alphas = (1.0, 0.4) if has_blocks else (1.0,)
    want: dict[float, tuple[float, float]] = {}
    for alpha in alphas:
        last_hits, hits = [], []
        for u, seq in enumerate(ev.inputs.to_lists()):
            with torch.no_grad(), residual_scale(m, alpha):
                s = scores_at(m, final_states(m, torch.tensor([seq[-m.max_len:]])), None)[0].numpy()
            last_hits.append(slow_ranks(s, seq[-1]) < 1)
            s[list(set(seq))] = -np.inf
            target = int(ev.targets[u])
            hits.append(bool(np.isfinite(s[target])) and slow_ranks(s, target) < 10)
        want[alpha] = (float(np.mean(last_hits)), float(np.mean(hits)))
    assert last_item_hit_rates(m, ev, batch_size=4).values["HRLI@1"] == pytest.approx(want[1.0][0], abs=1e-12)
    if has_blocks:
        rows = {r["alpha"]: r for r in alpha_sweep(m, ev, alphas=list(alphas), batch_size=4).rows}
        for alpha, (hrli, hr) in want.items():
            assert (rows[alpha]["HRLI@1"], rows[alpha]["HR@10"]) == pytest.approx((hrli, hr), abs=1e-12), alpha


def test_the_sweep_lines_print_each_alpha_as_swept():
    """diagnose's sweep printed alphas to two decimals: --alphas 0.125,0.005 read 0.12 and 0.01 (0.001: 0.00, as 0),
    beside recovery's 'alpha* 0.125'; each row's alpha, read back as a number, is the swept one."""
    from resdom.diagnostics.runner import format_summary

    swept = [1.0, 0.5, 0.125, 0.005, 0.00025, 0.0]
    stages = {"Attn": 0.5, "+Res": 0.1, "+LN": 0.1}
    rows = [{"alpha": a, "HRLI@1": 0.5, "HRL2I@1": 0.1, "HR@10": 0.3, "NDCG@10": 0.2, "mixing_all": stages}
            for a in swept]
    lines = format_summary({"split": "test", "alpha_sweep": rows}).splitlines()
    table = lines[lines.index("residual-scaling sweep:") + 2:]
    assert [float(t.split()[0]) for t in table] == swept
    assert len({len(t) for t in table}) == 1 and table[0].split()[0] == "1.00"  # aligned; round alphas as before
