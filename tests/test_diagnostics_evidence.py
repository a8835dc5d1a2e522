"""The per-user evidence (users.npz): its arrays against the diagnostics' files of a tiny trained run, its ranks
against a slow reference, its reuse of the sweep's ranks, and its size at the largest stored test split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import invoke

from resdom.data.sequences import EvalSet, Sequences, SplitData, item_counts
from resdom.diagnostics.evidence import (
    CAPS,
    MAX_BYTES,
    NAMES,
    RANK_CAP,
    UserEvidence,
    read_header,
    read_users,
    recovery_from_evidence,
    user_evidence,
)
from resdom.diagnostics.hrli import band_masks
from resdom.diagnostics.runner import discard_stale, run_all
from resdom.evaluation.evaluate import evaluate
from resdom.models import build_model, residual_scale
from resdom.models.config import make_model_config

REPO = Path(__file__).resolve().parents[1]
ALPHAS = (1.0, 0.5, 0.3, 0.0)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny trained run diagnosed by run_all (all, the evidence included): 300 items, so ranks pass every cap."""
    from resdom.data.prepare import prepare_split
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import fit

    torch.set_num_threads(1)
    split = prepare_split("synthetic:n_users=200,n_items=300,min_len=6,max_len=14,seed=3", "loo")
    out = tmp_path_factory.mktemp("run")
    fit(split, make_model_config(max_len=12, hidden=16, layers=2, heads=2), TrainConfig(epochs=3, device="cpu",
        batch_size=64), out, progress=False)
    run_all(out, alphas=ALPHAS, seeds=(0,), progress=False, batch_size=40)
    return out


def _json(run: Path, name: str) -> dict:
    return json.loads((run / "diagnostics" / f"{name}.json").read_text())


def hit(rank: np.ndarray, K: int) -> np.ndarray:
    return rank.astype(np.int64) <= K


def ndcg(rank: np.ndarray, K: int) -> np.ndarray:
    r = rank.astype(np.float64)
    return np.where(r <= K, 1.0 / np.log2(r + 1.0), 0.0)


@pytest.mark.slow
def test_users_npz_agrees_with_every_diagnostic_file(run_dir):
    header, a = read_users(run_dir / "diagnostics" / "users.npz")
    split = SplitData.load(run_dir / "data")
    U = len(split.test)
    assert (header["version"], header["split"], header["n_users"], header["n_items"]) == (1, "test", U, 300)
    assert header["alphas"] == list(ALPHAS) and header["rank_cap"] == RANK_CAP == 21 and header["K"] == 10
    assert header["caps"] == CAPS and header["filter_seen"] is True and header["layers"] == "all"
    assert header["checkpoint"] == _json(run_dir, "hrli")["checkpoint"] and header["seconds"] >= 0
    assert sorted(a) == sorted(NAMES[1:])
    assert {k: (v.dtype.name, v.shape) for k, v in a.items()} == {
        "user": ("int32", (U,)), "target_rank": ("uint8", (U,)), "target_rank_unfiltered": ("uint8", (U,)),
        "last_rank": ("uint8", (U,)), "last_seen": ("bool", (U,)), "last_freq": ("int32", (U,)),
        "alpha_target_rank": ("uint8", (4, U)), "alpha_target_rank_unfiltered": ("uint8", (4, U)),
        "alpha_last_rank": ("uint8", (4, U)), "recoverable": ("bool", (U,))}
    assert np.array_equal(a["user"], split.test.inputs.users)
    # the filtered target rank is evaluation's: every metric of metrics.json
    metrics = json.loads((run_dir / "metrics.json").read_text())["test"]["metrics"]
    for K in (1, 5, 10, 20):
        assert hit(a["target_rank"], K).mean() == pytest.approx(metrics[f"HR@{K}"], abs=1e-12)
        assert ndcg(a["target_rank"], K).mean() == pytest.approx(metrics[f"NDCG@{K}"], abs=1e-9)
    assert (a["target_rank"] == 255).any() and (a["target_rank"] < 255).any()  # the cap is reached, not passed
    # the last item's rank is HRLI's, and its frequency gives hrli.json's bands
    hrli = _json(run_dir, "hrli")
    for K in (1, 5, 10):
        assert hit(a["last_rank"], K).mean() == pytest.approx(hrli["values"][f"HRLI@{K}"], abs=1e-12)
    assert np.array_equal(a["last_seen"], a["last_freq"] > 0)
    last = split.test.inputs.items[split.test.inputs.offsets[1:] - 1]
    assert np.array_equal(a["last_freq"], item_counts(split.train, split.n_items)[last])
    for band, mask in band_masks(a["last_freq"]).items():
        assert int(mask.sum()) == hrli["by_frequency"][band]["n_users"]
        if mask.any():
            assert hit(a["last_rank"][mask], 1).mean() == pytest.approx(
                hrli["by_frequency"][band]["values"]["HRLI@1"], abs=1e-12)
    # every alpha's row of alpha.json
    for i, row in enumerate(_json(run_dir, "alpha")["rows"]):
        assert row["alpha"] == header["alphas"][i]
        assert hit(a["alpha_target_rank"][i], 10).mean() == pytest.approx(row["HR@10"], abs=1e-12)
        assert ndcg(a["alpha_target_rank"][i], 10).mean() == pytest.approx(row["NDCG@10"], abs=1e-9)
        unf = a["alpha_target_rank_unfiltered"][i]
        assert hit(unf, 10).mean() == pytest.approx(row["HR@10_unfiltered"], abs=1e-12)
        assert ndcg(unf, 10).mean() == pytest.approx(row["NDCG@10_unfiltered"], abs=1e-9)
        assert hit(a["alpha_last_rank"][i], 1).mean() == pytest.approx(row["HRLI@1"], abs=1e-12)
    assert np.array_equal(a["alpha_target_rank"][0], np.minimum(a["target_rank"], 21))
    assert np.array_equal(a["alpha_last_rank"][0], np.minimum(a["last_rank"], 2))
    # recovery's test curve and set
    rec = _json(run_dir, "recovery")["test"]
    assert int(a["recoverable"].sum()) == rec["recoverable"] > 0
    curve = recovery_from_evidence(header, a)
    assert [r["alpha"] for r in curve] == [r["alpha"] for r in rec["curve"]]
    assert [r["recovery"] for r in curve] == pytest.approx([r["recovery"] for r in rec["curve"]], abs=1e-12)
    assert [r["HR@10"] for r in curve] == pytest.approx([r["HR@10"] for r in rec["curve"]], abs=1e-12)
    assert max(r["recovery"] for r in curve) > 0, "no recovery to compare"
    assert json.loads((run_dir / "diagnostics" / "summary.json").read_text())["seconds"]["users"] >= 0


@pytest.mark.slow
def test_the_reports_reader_takes_the_file_as_written(run_dir):
    """report.compare (the statistics' reader) on the users.npz run_all wrote: the evaluation's numbers."""
    from resdom.errors import ResdomError
    from resdom.report.compare import metric_values
    from resdom.report.compare import read_users as report_read

    ev = report_read(run_dir / "diagnostics" / "users.npz")
    metrics = json.loads((run_dir / "metrics.json").read_text())["test"]["metrics"]
    assert metric_values(ev, "NDCG@10").mean() == pytest.approx(metrics["NDCG@10"], abs=1e-9)
    assert metric_values(ev, "HR@20").mean() == pytest.approx(metrics["HR@20"], abs=1e-12)
    assert metric_values(ev, "HRLI@1").mean() == pytest.approx(_json(run_dir, "hrli")["values"]["HRLI@1"], abs=1e-12)
    with pytest.raises(ResdomError, match="capped at 255"):
        metric_values(ev, "HR@300")


@pytest.mark.slow
def test_evidence_alone_computes_the_same_arrays_as_with_the_sweep(run_dir, tmp_path):
    """`--what users` without the sweep and recovery of the same call ranks everything itself: the same file."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "diagnostics" / "users.npz").unlink()
    assert invoke("diagnose", str(run), "--what", "users", "--alphas", "1,0.5,0.3,0", "--batch-size", "17",
                  "--no-progress") == 0
    h1, a1 = read_users(run_dir / "diagnostics" / "users.npz")
    h2, a2 = read_users(run / "diagnostics" / "users.npz")
    assert {k: v for k, v in h1.items() if k != "seconds"} == {k: v for k, v in h2.items() if k != "seconds"}
    for name in a1:
        assert np.array_equal(a1[name], a2[name]), name
    # the other files are left as they were
    assert _json(run, "alpha") == _json(run_dir, "alpha")


def test_what_names_users_among_the_choices(capsys):
    assert invoke("diagnose", "nowhere", "--what", "user") == 2
    assert "choose all or from shuffle, hrli, mixing, alpha, recovery, users" in capsys.readouterr().err


@pytest.mark.slow
def test_a_stale_users_npz_is_discarded(run_dir, tmp_path):
    out = tmp_path / "diagnostics"
    shutil.copytree(run_dir / "diagnostics", out)
    assert "users" not in discard_stale(out, read_header(out / "users.npz")["checkpoint"])
    assert (out / "users.npz").is_file()
    assert "users" in discard_stale(out, "another") and not (out / "users.npz").exists()


# --------------------------------------------------------------------------------------------------------------
# against a slow reference


N_ITEMS = 300


def toy_split(seed: int = 0) -> SplitData:
    rng = np.random.default_rng(seed)

    def seqs(n: int) -> list[list[int]]:
        return [rng.integers(1, N_ITEMS + 1, size=int(rng.integers(1, 14))).tolist() for _ in range(n)]

    test = seqs(40)
    test[0], test[1] = [4], [4, 9]  # shorter than the offsets
    train = Sequences.from_lists(seqs(60))
    valid = EvalSet(Sequences.from_lists(seqs(10)), rng.integers(1, N_ITEMS + 1, size=10))
    targets = rng.integers(1, N_ITEMS + 1, size=len(test))
    targets[2] = test[2][0]  # a target among the inputs: filtered out
    users = np.arange(100, 100 + 3 * len(test), 3)
    return SplitData(train, valid, EvalSet(Sequences.from_lists(test, users), targets), N_ITEMS)


def toy_model(seed: int = 0, name: str = "sasrec") -> torch.nn.Module:
    torch.manual_seed(seed)
    heads = {} if name == "gru4rec" else {"heads": 2}  # gru4rec has no attention heads
    cfg = make_model_config(name=name, n_items=N_ITEMS, max_len=8, hidden=16, layers=2, init_std=0.5, **heads)
    return build_model(cfg).eval()


def slow_rank(scores: np.ndarray, item: int) -> int:
    """1-based pessimistic rank by counting (every item scoring at least the item's, itself included); an item
    filtered out (score -inf) cannot be recommended: MISS + 1, as evaluation ranks it."""
    from resdom.evaluation.ranking import MISS

    return MISS + 1 if scores[item] == -np.inf else int((scores >= scores[item]).sum())


def test_ranks_match_a_slow_reference():
    split, m, K = toy_split(), toy_model(), 60  # K = 60: a recoverable set of some size on a random model
    alphas = (1.0, 0.4)
    ev = user_evidence(m, split, alphas=alphas, K=K, batch_size=7)
    lists = split.test.inputs.to_lists()
    emb = m.item_embeddings().detach().numpy()
    with torch.no_grad():
        hid = {}
        for alpha in alphas:
            with residual_scale(m, alpha):
                hid[alpha] = m.encode(torch.from_numpy(split.test.inputs.padded(m.max_len))).numpy()
    L = hid[1.0].shape[1]
    counts = np.bincount(split.train.items, minlength=N_ITEMS + 1)
    want: dict[str, list] = {k: [] for k in ("target", "unfiltered", "last", "freq", "recoverable")}
    per_alpha: dict[float, dict[str, list]] = {a: {"target": [], "unfiltered": [], "last": []} for a in alphas}
    def scores(state: np.ndarray, seq: list[int], filtered: bool) -> np.ndarray:
        s = (state @ emb.T).astype(np.float64)
        s[0] = -np.inf
        if filtered:
            s[seq] = -np.inf  # the whole input, as evaluation
        return s

    for u, seq in enumerate(lists):
        target = int(split.test.targets[u])

        for a in alphas:
            per_alpha[a]["target"].append(slow_rank(scores(hid[a][u, -1], seq, True), target))
            per_alpha[a]["unfiltered"].append(slow_rank(scores(hid[a][u, -1], seq, False), target))
            per_alpha[a]["last"].append(slow_rank(scores(hid[a][u, -1], seq, False), seq[-1]))
        final_miss = per_alpha[1.0]["target"][-1] > K
        earlier = [len(seq) >= k + 1 and slow_rank(scores(hid[1.0][u, L - 1 - k], seq, True), target) <= K
                   for k in (1, 2, 3)]
        want["recoverable"].append(final_miss and any(earlier))
        want["freq"].append(int(counts[seq[-1]]))
    got = ev.arrays
    assert got["target_rank"].tolist() == per_alpha[1.0]["target"]
    assert got["target_rank_unfiltered"].tolist() == per_alpha[1.0]["unfiltered"]
    assert got["last_rank"].tolist() == per_alpha[1.0]["last"]
    from resdom.evaluation.ranking import MISS

    assert got["target_rank"][2] == MISS + 1  # the filtered-out target is a miss at every K
    for i, a in enumerate(alphas):
        assert got["alpha_target_rank"][i].tolist() == per_alpha[a]["target"]
        assert got["alpha_target_rank_unfiltered"][i].tolist() == per_alpha[a]["unfiltered"]
        assert got["alpha_last_rank"][i].tolist() == per_alpha[a]["last"]
    assert got["recoverable"].tolist() == want["recoverable"] and 0 < sum(want["recoverable"]) < len(lists)
    assert got["last_freq"].tolist() == want["freq"] and got["last_seen"].tolist() == [f > 0 for f in want["freq"]]
    assert got["user"].tolist() == list(range(100, 220, 3))
    # as stored: each rank capped at its cap (the value cap meaning >= cap)
    header, stored = read_users(ev.to_bytes())
    assert header["alphas"] == list(alphas) and header["K"] == K and header["n_users"] == len(lists)
    for name, cap in CAPS.items():
        assert np.array_equal(stored[name], np.minimum(got[name], cap)), name
        assert (got[name] > cap).any(), f"{name}: the test never reaches the cap {cap}"
    # the filtered ranks are evaluation's
    assert np.array_equal(got["target_rank"], evaluate(m, split.test, return_ranks=True).ranks + 1)


def test_a_model_without_attention_has_the_alpha_free_evidence():
    split, m = toy_split(), toy_model(name="gru4rec")
    ev = user_evidence(m, split, alphas=(1.0, 0.5, 0.0), batch_size=16)
    assert ev.header["alphas"] == [1.0] and ev.arrays["alpha_target_rank"].shape == (1, len(split.test))
    assert np.array_equal(ev.arrays["alpha_target_rank"][0], ev.arrays["target_rank"])
    assert np.array_equal(ev.arrays["target_rank"], evaluate(m, split.test, return_ranks=True).ranks + 1)


def test_the_bytes_are_deterministic_and_read_back_by_np_load():
    ev = user_evidence(toy_model(), toy_split(), alphas=(1.0, 0.5), batch_size=16)
    data = ev.to_bytes()
    assert data == ev.to_bytes()
    import io

    with np.load(io.BytesIO(data), allow_pickle=False) as npz:  # what a reader does
        assert npz.files == list(NAMES)
        assert json.loads(npz["header"].item())["version"] == 1
        assert npz["alpha_target_rank"].shape == (2, 40)


# --------------------------------------------------------------------------------------------------------------
# size


def realistic_evidence(U: int, n_items: int, alphas: list[float], seed: int = 0) -> UserEvidence:
    """Random ranks shaped like a weak recommender on a sparse set (yelp-ts SASRec: HR@10 about 0.03, HRLI@1 about
    0.6 falling to 0.01 at alpha 0, 5% unseen last items), with more noise across alphas than a model has."""
    rng = np.random.default_rng(seed)
    A = len(alphas)
    users = np.sort(rng.choice(int(U * 2.64), size=U, replace=False))  # yelp-ts: 11,526 test users of 30,431
    freq = np.round(np.exp(rng.normal(2.7, 1.3, U))).astype(np.int64)
    freq[rng.random(U) < 0.046] = 0
    drift = rng.normal(0.0, 1.0, U)

    def clip(x: np.ndarray) -> np.ndarray:
        return np.clip(np.round(x), 1, n_items + 1).astype(np.int64)

    target = np.exp(rng.normal(np.log(4000), 3.2, U))
    unfiltered = target * np.exp(rng.normal(-0.2, 0.3, U))
    at = np.array(alphas)[:, None]
    noise = rng.normal(0, 0.15, (A, U)) * (at < 1)
    alpha_target = clip(target * np.exp(drift * (1 - at) + noise))
    alpha_unf = clip(unfiltered * np.exp(drift * (1 - at) + noise))
    base = np.where(freq > 0, rng.normal(-0.4, 2.0, U), rng.normal(8, 1, U))  # log rank of the last item
    alpha_last = clip(np.exp(np.maximum(base + (1 - at) * rng.normal(7, 1.5, (A, 1)), 0)))
    i1 = alphas.index(1.0)
    arrays = {"user": users, "target_rank": alpha_target[i1], "target_rank_unfiltered": alpha_unf[i1],
              "last_rank": alpha_last[i1], "last_seen": freq > 0, "last_freq": freq,
              "alpha_target_rank": alpha_target, "alpha_target_rank_unfiltered": alpha_unf,
              "alpha_last_rank": alpha_last, "recoverable": (alpha_target[i1] > 10) & (rng.random(U) < 0.035)}
    header = {"version": 1, "split": "test", "n_users": U, "n_items": n_items, "alphas": alphas,
              "rank_cap": RANK_CAP, "caps": dict(CAPS), "K": 10, "offsets": [1, 2, 3], "filter_seen": True,
              "layers": "all", "checkpoint": "0123456789abcdef", "seconds": 123.456,
              "ranks": "1-based, pessimistic; an entry equal to its array's cap means >= cap"}
    return UserEvidence(header, arrays)


def largest_stored_split() -> tuple[int, int]:
    """(test users, items) of the largest data set in the results store (hrli.json, config.json), at least
    yelp-ts's (11,526 users, 20,033 items) where the store is not at hand."""
    best = (11_526, 20_033)
    for f in REPO.glob("results/*/*/seed1/diagnostics/hrli.json"):
        n = json.loads(f.read_text()).get("n_users", 0)
        cfg = f.parents[1] / "config.json"
        items = json.loads(cfg.read_text()).get("data", {}).get("n_items", 0) if cfg.is_file() else 0
        best = max(best, (n, items))
    return best


def test_a_worst_case_cell_stays_within_the_budget():
    U, n_items = largest_stored_split()
    ev = realistic_evidence(U, n_items, [round(1.0 - 0.1 * i, 1) for i in range(11)])
    a = ev.arrays
    assert 0.02 < hit(a["target_rank"], 10).mean() < 0.06 and 0.5 < hit(a["last_rank"], 1).mean() < 0.75
    assert hit(a["alpha_last_rank"][-1], 1).mean() < 0.05
    size = len(ev.to_bytes())
    assert size <= MAX_BYTES, f"{size:,} bytes for {U:,} users"


def test_every_stored_users_npz_is_within_the_budget_and_of_its_cells_checkpoint():
    files = sorted(REPO.glob("results/*/*/seed*/users.npz"))
    if not files:
        pytest.skip("no users.npz in the results store yet")
    big = [(str(f.relative_to(REPO)), f.stat().st_size) for f in files if f.stat().st_size > MAX_BYTES]
    assert not big
    for f in files:
        header, arrays = read_users(f)
        assert header["checkpoint"] == json.loads((f.parent / "cell.json").read_text())["checkpoint"], f
        assert header["n_users"] == json.loads((f.parent / "metrics.json").read_text())["test"]["n_users"], f
