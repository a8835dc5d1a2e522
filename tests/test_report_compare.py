"""report.compare: reading users.npz (and refusing malformed ones), per-user metrics, and comparison tables end to
end on a synthetic results store written in tmp_path."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from resdom.errors import ResdomError
from resdom.report.collect import users_file
from resdom.report.compare import (
    NO_EVIDENCE,
    REDIAGNOSE,
    Comparison,
    EvidenceIndex,
    _effective_n_boot,
    compare_table,
    comparison_markdown,
    count_tested,
    default_margin,
    label_evidence,
    metric_values,
    parse_metric,
    read_users,
    verdict_text,
)
from resdom.report.stats import Margin, bootstrap_diff, holm, seed_test, t_ppf

N_ITEMS, ALPHAS, CAP = 500, [0.0, 0.5, 1.0], 100


def write_users(path: Path, target_rank: np.ndarray, last_rank: np.ndarray | None = None, /, *,
                users: np.ndarray | None = None, meta: dict[str, Any] | None = None, drop: tuple[str, ...] = (),
                **override: Any) -> Path:
    """A users.npz in the contract's format; ``meta`` updates the JSON header, ``override`` replaces arrays (the
    ``header`` array too). Its checkpoint is its cell's own (data set / label / seed) unless ``meta`` names one."""
    n = target_rank.size
    last_rank = np.full(n, 1) if last_rank is None else last_rank
    head = {"version": 1, "split": "test", "n_users": n, "n_items": N_ITEMS, "alphas": ALPHAS, "rank_cap": CAP,
            "checkpoint": "/".join(path.parts[-4:-1])}
    head.update(meta or {})
    arrays: dict[str, Any] = {
        "header": np.array(json.dumps(head)),
        "user": np.arange(n) * 3 + 7 if users is None else users,
        "target_rank": target_rank.astype(np.int32),
        "target_rank_unfiltered": np.minimum(target_rank + 1, N_ITEMS).astype(np.int32),
        "last_rank": last_rank.astype(np.int32),
        "last_seen": np.arange(n) % 5 != 0,
        "last_freq": (np.arange(n) % 7).astype(np.int32),
        "alpha_target_rank": np.minimum(np.stack([target_rank] * len(ALPHAS)), CAP).astype(np.int16),
        "alpha_last_rank": np.minimum(np.stack([last_rank] * len(ALPHAS)), CAP).astype(np.int16),
        "recoverable": np.arange(n) % 11 == 0,
    }
    arrays.update(override)
    for name in drop:
        del arrays[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return path


# --- reading --------------------------------------------------------------------------------------------------------

def test_read_users_round_trip(tmp_path: Path) -> None:
    ranks = np.array([1, 2, 3, 10, 11, 500])
    path = write_users(tmp_path / "users.npz", ranks, np.array([1, 1, 2, 1, 5, 3]))
    ev = read_users(path)
    assert ev.n_users == 6 and ev.split == "test" and ev.header["checkpoint"] == "/".join(path.parts[-4:-1])
    assert ev.user.tolist() == [7, 10, 13, 16, 19, 22]
    assert ev.target_rank.tolist() == ranks.tolist() and ev.alpha_target_rank.shape == (3, 6)
    assert ev.last_seen.dtype == bool and ev.recoverable.tolist() == [True] + [False] * 5
    assert metric_values(ev, "HR@10").tolist() == [1, 1, 1, 1, 0, 0]
    assert metric_values(ev, "NDCG@10") == pytest.approx([1, 1 / math.log2(3), 0.5, 1 / math.log2(11), 0, 0])
    assert metric_values(ev, "HR@2/unfiltered").tolist() == [1, 0, 0, 0, 0, 0]  # unfiltered = filtered + 1 here
    assert metric_values(ev, "NDCG@3/unfiltered") == pytest.approx([1 / math.log2(3), 0.5, 0, 0, 0, 0])
    assert metric_values(ev, "HRLI@1").tolist() == [1, 1, 0, 1, 0, 0]
    ints = write_users(tmp_path / "b" / "users.npz", ranks, last_seen=np.ones(6, np.uint8))  # 0/1 ints are read
    assert read_users(ints).last_seen.dtype == bool


def _lzma_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """An .npz as the evidence writer makes it: LZMA members, 2-d arrays column-major."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_LZMA) as zf:
        for name, arr in arrays.items():
            with zf.open(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), "w") as f:
                np.lib.format.write_array(f, np.asfortranarray(arr) if arr.ndim == 2 else arr, allow_pickle=False)
    return path


def test_read_users_with_caps_and_extra_arrays(tmp_path: Path) -> None:
    """Ranks capped per array (header "caps"; an entry at its cap means >= cap), uint8, LZMA members and an extra
    array: read as written; a cutoff at or beyond an array's cap is refused."""
    caps = {"target_rank": 255, "target_rank_unfiltered": 255, "last_rank": 255, "alpha_target_rank": 21,
            "alpha_target_rank_unfiltered": 21, "alpha_last_rank": 2}
    head = {"version": 1, "split": "test", "n_users": 4, "n_items": 3000, "alphas": [0.5, 1.0], "rank_cap": 21,
            "caps": caps, "K": 10}
    rank = np.array([1, 9, 254, 255], np.uint8)  # 255: beyond 254
    arrays = {"header": np.array(json.dumps(head)), "user": np.arange(4, dtype=np.int32), "target_rank": rank,
              "target_rank_unfiltered": rank, "last_rank": np.array([1, 2, 255, 1], np.uint8),
              "last_seen": np.array([True, True, False, True]), "last_freq": np.array([3, 1, 0, 9], np.int32),
              "alpha_target_rank": np.full((2, 4), 21, np.uint8),
              "alpha_target_rank_unfiltered": np.ones((2, 4), np.uint8),
              "alpha_last_rank": np.array([[1, 2, 2, 1], [1, 2, 2, 1]], np.uint8), "recoverable": np.zeros(4, bool)}
    path = _lzma_npz(tmp_path / "users.npz", arrays)
    ev = read_users(path)
    assert ev.header["K"] == 10 and ev.alpha_last_rank.tolist() == [[1, 2, 2, 1]] * 2
    assert metric_values(ev, "HR@254").tolist() == [1, 1, 1, 0]
    assert metric_values(ev, "NDCG@10") == pytest.approx([1, 1 / math.log2(10), 0, 0])
    assert metric_values(ev, "HRLI@1").tolist() == [1, 0, 0, 1]
    with pytest.raises(ResdomError, match=r"users.npz: HR@255 needs ranks up to 255, but target_rank is capped at "
                                          r"255 \(exact for K <= 254\)"):
        metric_values(ev, "HR@255")
    arrays["alpha_last_rank"] = np.full((2, 4), 3, np.uint8)
    with pytest.raises(ResdomError, match="'alpha_last_rank' holds rank 3 outside 1..2"):
        read_users(_lzma_npz(tmp_path / "over" / "users.npz", arrays))
    arrays["header"] = np.array(json.dumps({**head, "caps": {"last_rank": 0}}))
    with pytest.raises(ResdomError, match="header caps must map"):
        read_users(_lzma_npz(tmp_path / "caps" / "users.npz", arrays))


def _malformed(tmp: Path) -> dict[str, tuple[Path, str]]:
    ranks = np.arange(1, 6)
    cases: dict[str, tuple[Path, str]] = {}

    def case(name: str, match: str, **kw: Any) -> None:
        cases[name] = (write_users(tmp / name / "users.npz", ranks, **kw), match)

    case("no_header", "lacks header", drop=("header",))
    case("no_field", "lacks last_rank", drop=("last_rank",))
    case("header_2d", "0-d string", header=np.array(["{}", "{}"]))
    case("header_text", "not JSON", header=np.array("{oops"))
    case("header_list", "JSON object", header=np.array("[1]"))
    case("header_keys", "header lacks n_items, rank_cap", header=np.array('{"version": 1, "split": "test", '
                                                                          '"n_users": 5, "alphas": []}'))
    case("version", "version 2", meta={"version": 2})
    case("n_users", "shape", meta={"n_users": 6})
    case("n_items", "n_items must be a positive integer", meta={"n_items": "500"})
    case("alphas", "alphas must be a list", meta={"alphas": "0,1"})
    case("alpha_range", "alphas must be a list of residual scales in [0, 1] (got [0.5, 2.0, 1.0])",
         meta={"alphas": [0.5, 2.0, 1.0]})
    case("rank_zero", "'target_rank' holds rank 0 outside 1..500", target_rank=np.array([0, 1, 2, 3, 4]))
    case("rank_high", "'last_rank' holds rank 501", last_rank=np.array([1, 1, 501, 1, 1]))
    case("alpha_cap", "'alpha_last_rank' holds rank 101 outside 1..100",
         alpha_last_rank=np.full((3, 5), 101, np.int16))
    case("alpha_shape", "'alpha_target_rank' has shape (2, 5), expected (3, 5)",
         alpha_target_rank=np.ones((2, 5), np.int16))
    case("float_rank", "'target_rank' must be integer", target_rank=np.linspace(1, 5, 5))
    case("bool_field", "'recoverable' must be boolean", recoverable=np.full(5, 0.5))
    case("freq", "negative frequency", last_freq=np.array([0, 1, -1, 2, 3]))
    case("repeat", "repeats a user id", users=np.array([1, 2, 2, 3, 4]))
    case("object", "not a readable .npz", last_freq=np.array([1, "a", None, 2, 3], dtype=object))
    text = tmp / "text" / "users.npz"
    text.parent.mkdir()
    text.write_text("not a zip\n")
    cases["text"] = (text, "not an .npz archive (damaged, or not written by resdom); rerun `resdom diagnose")
    garbage = tmp / "garbage" / "users.npz"  # numpy tried it as a pickle: "...load it unsafely using allow_pickle="
    garbage.parent.mkdir()
    garbage.write_bytes(b"\xff\xfe{")
    cases["garbage"] = (garbage, "not an .npz archive (damaged")
    npy = tmp / "npy" / "users.npz"
    npy.parent.mkdir()
    with open(npy, "wb") as f:
        np.save(f, np.arange(3))
    cases["npy"] = (npy, "not an .npz archive")
    truncated = tmp / "truncated" / "users.npz"
    truncated.parent.mkdir()
    truncated.write_bytes(write_users(tmp / "whole" / "users.npz", ranks).read_bytes()[:200])
    cases["truncated"] = (truncated, "not a readable .npz")
    cases["missing"] = (tmp / "nowhere" / "users.npz", "no such file")
    return cases


def test_read_users_refuses_malformed_files_with_one_line(tmp_path: Path) -> None:
    for name, (path, match) in _malformed(tmp_path).items():
        with pytest.raises(ResdomError) as err:
            read_users(path)
        message = str(err.value)
        assert message.startswith(str(path)), name
        assert match in message, (name, message)
        assert "\n" not in message, name


def test_metric_names() -> None:
    assert parse_metric("NDCG@10") == ("NDCG", 10, False)
    assert parse_metric("HR@20/unfiltered") == ("HR", 20, True)
    assert parse_metric("HRLI@1") == ("HRLI", 1, False)
    for bad in ("ndcg@10", "HR@0", "HR10", "HRLI@1/unfiltered", "MRR@10"):
        with pytest.raises(ResdomError, match="metric"):
            parse_metric(bad)
    assert default_margin("NDCG@10") == Margin(0.05) and default_margin("HRLI@1") == Margin(0.02, relative=False)


# --- a synthetic store ----------------------------------------------------------------------------------------------

U = 3000


def _ranks(rng: np.random.Generator, difficulty: np.ndarray, quality: float, seed_noise: float = 0.3) -> np.ndarray:
    score = 2.5 - quality + difficulty + seed_noise * rng.normal(size=difficulty.size)
    return np.clip(np.round(np.exp(score)), 1, N_ITEMS).astype(np.int64)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    rng = np.random.default_rng(0)
    difficulty = rng.normal(size=U)
    echo = rng.random(U) < 0.6  # users whose last item the base models echo at rank 1
    for label, quality, seeds, echo_rate in (("base", 0.0, 3, 1.0), ("better", 0.6, 3, 1.0), ("same", 0.0, 3, 1.0),
                                             ("noecho", 0.0, 3, 0.3), ("solo", 0.6, 1, 1.0)):
        for s in range(1, seeds + 1):
            last = np.where(echo & (rng.random(U) < echo_rate), 1, 2 + rng.integers(0, 50, U))
            write_users(root / "toy" / label / f"seed{s}" / "users.npz", _ranks(rng, difficulty, quality), last)
    write_users(root / "toy" / "partial" / "seed1" / "users.npz", _ranks(rng, difficulty, 0.0))
    (root / "toy" / "partial" / "seed2").mkdir(parents=True)
    (root / "toy" / "partial" / "seed2" / "metrics.json").write_text("{}")
    small = rng.normal(size=25)
    for label, quality in (("base", 0.0), ("other", 0.1)):
        for s in (1, 2, 3):
            write_users(root / "small" / label / f"seed{s}" / "users.npz", _ranks(rng, small, quality))
    return root


def _evidence_values(store: Path, dataset: str, label: str, metric: str) -> list[np.ndarray]:
    found, missing = label_evidence(store, dataset, label)
    assert not missing
    return [metric_values(ev, metric) for ev in found]


COMPARISONS = [
    Comparison("toy", "base", "better", "NDCG@10"),
    Comparison("toy", "base", "same", "NDCG@10"),
    Comparison("toy", "base", "noecho", "HRLI@1"),
    Comparison("toy", "base", "solo", "HR@10"),
    Comparison("toy", "base", "partial", "NDCG@10"),
    Comparison("toy", "base", "nolabel", "NDCG@10"),
    Comparison("small", "base", "other", "NDCG@10"),
    Comparison("toy", "base", "same", "HR@10", Margin(0.001, relative=False)),
]


@pytest.fixture(scope="module")
def table(store: Path):
    return compare_table(store, COMPARISONS, title="toy comparisons", n_boot=1000, seed=0)


def test_label_evidence(store: Path) -> None:
    found, missing = label_evidence(store, "toy", "partial")
    assert len(found) == 1 and missing == ["toy/partial/seed2"]
    assert label_evidence(store, "toy", "nolabel") == ([], ["toy/nolabel (no cells)"])
    found, missing = label_evidence(store, "toy", "base")
    assert [ev.path.parent.name for ev in found] == ["seed1", "seed2", "seed3"] and missing == []


def test_table_verdicts(table) -> None:
    verdicts = [r.verdict for r in table.rows]
    assert verdicts == [
        "higher",
        "equivalent (within ±5%)",
        "lower",
        "higher",
        "undecided",  # no per-user evidence in toy/partial/seed2
        "undecided",  # no cells at all
        "undecided",
        "undecided",  # the same models, but a margin of 0.001 is tighter than the data can resolve
    ]


def test_table_numbers_are_the_evidence(store: Path, table) -> None:
    done = [r for r in table.rows if r.diff is not None]
    assert len(done) == 6 and table.n_boot == 1200  # raised from 1000 for Holm over 6: 10 * 6 / 0.05
    for i, r in enumerate(table.rows):
        c = r.comparison
        if r.diff is None:
            assert r.baseline_mean is None and r.p_holm is None and r.missing
            continue
        base = _evidence_values(store, c.dataset, c.baseline, c.metric)
        other = _evidence_values(store, c.dataset, c.other, c.metric)
        assert r.baseline_mean == pytest.approx(np.mean([x.mean() for x in base]), abs=1e-12)
        assert r.other_mean == pytest.approx(np.mean([x.mean() for x in other]), abs=1e-12)
        assert r.diff.estimate == pytest.approx(r.other_mean - r.baseline_mean, abs=1e-12)
        again = bootstrap_diff(other, base, n_boot=table.n_boot, seed=i)  # row i: seed + i
        assert r.diff.lo == again.lo and r.diff.hi == again.hi and r.diff.p_value == again.p_value
        assert (r.n_seeds_baseline, r.n_seeds_other, r.n_users) == (len(base), len(other), base[0].size)
        assert r.margin_abs == pytest.approx(r.margin.absolute(r.baseline_mean))
    assert [r.p_holm for r in done] == pytest.approx(holm([r.diff.p_value for r in done]).tolist())
    assert [r.p_equiv_holm for r in done] == pytest.approx(holm([r.p_equiv for r in done]).tolist())
    for r in done:  # the seeds' t-test of the same per-seed values, in its own Holm family
        c = r.comparison
        again = seed_test(_evidence_values(store, c.dataset, c.other, c.metric),
                          _evidence_values(store, c.dataset, c.baseline, c.metric))
        assert again == r.seeds
    assert [r.p_seed_holm for r in done] == pytest.approx(holm([r.seeds.p_value() for r in done]).tolist())
    assert [r.p_seed_equiv_holm for r in done] == pytest.approx(
        holm([r.seeds.p_equiv(r.margin_abs) for r in done]).tolist())
    for r in done:  # a difference needs both tests, equivalence both TOSTs
        decided = max(r.p_holm, r.p_seed_holm) < table.alpha
        assert (r.verdict in ("higher", "lower")) == decided
        assert r.verdict.startswith("equivalent") == (not decided and max(r.p_equiv_holm, r.p_seed_equiv_holm) < 0.05)
    solo = table.rows[3]
    assert solo.diff.single_seed and (solo.n_seeds_baseline, solo.n_seeds_other) == (3, 1)


def test_markdown(table) -> None:
    md = comparison_markdown(table)
    lines = md.splitlines()
    assert lines[0] == "**toy comparisons**"
    assert lines[2] == ("| data set | comparison | metric | baseline | other | difference [95% CI] | Holm p | verdict "
                        "| seeds | users |")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[4:4 + len(COMPARISONS)]]
    assert all(len(r) == 10 for r in rows)
    better = table.rows[0]
    assert rows[0][:5] == ["toy", "better vs base", "NDCG@10", f"{better.baseline_mean:.4f}",
                           f"{better.other_mean:.4f}"]
    d = better.diff
    assert rows[0][5] == f"{d.estimate:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}]" and d.estimate > 0
    assert better.diff.p_value == pytest.approx(2 / 1201)  # no replicate at or below 0: p at its floor
    assert better.p_holm == pytest.approx(6 * 2 / 1201) and better.p_seed_holm < 0.001
    assert rows[0][6] == "≤0.010 bootstrap, <0.001 seeds' t"  # the bootstrap's at its floor: shown as a bound
    same = table.rows[1]
    assert rows[1][6] == f"{same.p_holm:.3f} bootstrap, {same.p_seed_holm:.3f} seeds' t"
    assert same.diff.p_value > 2 / 1201
    solo = table.rows[3]
    assert solo.seeds.kind == "pooled" and rows[3][6].endswith(" seeds' t")
    assert rows[0][7:] == ["higher", "3 / 3", str(U)]
    assert rows[3][1] == "solo (1 seed) vs base" and rows[3][8] == "3 / 1"
    assert rows[4] == ["toy", "partial vs base", "NDCG@10", "–", "–",
                       f"{NO_EVIDENCE} ({REDIAGNOSE}): toy/partial/seed2", "–", "undecided", "–", "–"]
    assert table.rows[5].missing == ["toy/nolabel (no cells)"]
    assert "level" not in md.replace("per-user evidence", "")
    assert "Holm across the 6 comparisons" in md and "1200 replicates" in md


def test_users_must_pair(store: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    ranks = np.arange(1, 11)
    write_users(root / "d" / "a" / "seed1" / "users.npz", ranks)
    write_users(root / "d" / "b" / "seed1" / "users.npz", ranks, users=(np.arange(10) * 3 + 7)[::-1].copy())
    with pytest.raises(ResdomError, match=r"b/seed1/users.npz: its users .* differ from .*a/seed1/users.npz"):
        compare_table(root, [Comparison("d", "a", "b", "HR@10")], n_boot=50)
    write_users(root / "e" / "a" / "seed1" / "users.npz", ranks)
    write_users(root / "e" / "b" / "seed1" / "users.npz", ranks, meta={"split": "valid"})
    with pytest.raises(ResdomError, match="split 'valid' differs"):
        compare_table(root, [Comparison("e", "a", "b", "HR@10")], n_boot=50)
    write_users(root / "f" / "a" / "seed1" / "users.npz", ranks, drop=("recoverable",))
    write_users(root / "f" / "b" / "seed1" / "users.npz", ranks)
    with pytest.raises(ResdomError, match="f/a/seed1/users.npz: lacks recoverable"):
        compare_table(root, [Comparison("f", "a", "b", "HR@10")], n_boot=50)


def test_no_evidence_anywhere(tmp_path: Path) -> None:
    (tmp_path / "d" / "a" / "seed1").mkdir(parents=True)
    t = compare_table(tmp_path, [Comparison("d", "a", "b", "NDCG@10")])
    assert [r.verdict for r in t.rows] == ["undecided"]
    assert t.rows[0].note == ("no per-user evidence (retrain or re-diagnose: resdom diagnose RUN --what users): "
                              "d/a/seed1, d/b (no cells)")
    assert "Holm across the 0 comparisons" in comparison_markdown(t)


def test_replicates_suffice_for_holm() -> None:
    assert _effective_n_boot(2000, 6, 0.05) == 2000
    assert _effective_n_boot(2000, 50, 0.05) == 10000
    m = 50
    assert m * 2 / (_effective_n_boot(2000, m, 0.05) + 1) < 0.05 / 5


def test_a_zero_baseline_has_no_relative_margin(tmp_path: Path) -> None:
    """±5% of 0 is no margin: no equivalence test, so identical all-miss models are "undecided", not equivalent."""
    ranks = np.full(40, 50)  # every target beyond 10: NDCG@10 = 0 on both sides
    for label in ("a", "b"):
        write_users(tmp_path / "d" / label / "seed1" / "users.npz", ranks)
    row = compare_table(tmp_path, [Comparison("d", "a", "b", "NDCG@10")], n_boot=200).rows[0]
    assert row.baseline_mean == 0.0 and row.margin_abs == 0.0 and row.p_equiv is None
    assert row.diff.p_value == 1.0 and row.verdict == "undecided"
    # no spread on either side: a standard error of 0 is no power, not a detectable ±0.0000
    assert row.detectable == 0.0 and "detects" not in verdict_text(row)
    assert verdict_text(row) == "undecided (no variation in the values: no detectable difference to state)"


def test_evidence_index_from_runs_and_store(store: Path) -> None:
    """The index of a report's runs finds the same files as the store's folders; a run without users.npz is named."""
    from types import SimpleNamespace

    runs = [SimpleNamespace(path=store / "toy" / "partial" / f"seed{k}", dataset="toy", model="partial", seed=k,
                            users_path=users_file(store / "toy" / "partial" / f"seed{k}") if k == 1 else None)
            for k in (2, 1)]
    index = EvidenceIndex.from_runs(runs)
    found, missing = index.evidence("toy", "partial")
    assert [ev.path for ev in found] == [store / "toy" / "partial" / "seed1" / "users.npz"]
    assert missing == ["toy/partial/seed2"] and index.labels_with_evidence() == [("toy", "partial")]
    assert index.evidence("toy", "base") == ([], ["toy/base (no cells)"])
    whole = EvidenceIndex.from_store(store)
    assert ("toy", "base") in whole.labels_with_evidence() and ("small", "other") in whole.labels_with_evidence()
    assert [p.name for _, p in whole.cells[("toy", "base")]] == ["seed1", "seed2", "seed3"]
    via = compare_table(index, [Comparison("toy", "partial", "partial", "NDCG@10")], n_boot=50)
    assert via.rows[0].verdict == "undecided" and via.rows[0].missing == ["toy/partial/seed2", "toy/partial/seed2"]


def test_a_report_compares_no_users_npz_of_another_checkpoint(tmp_path: Path) -> None:
    """The runs a report reads keep a users.npz only where it is of the cell's kept checkpoint (``RunRecord.
    users_path``); the comparison of those runs does too: a stale file (re-trained cell, old evidence) is no evidence
    and its row says which cell lacks it, where it used to be compared as the cell's own."""
    from resdom.pipeline.store import store_cells
    from resdom.report import read_runs

    rng = np.random.default_rng(3)
    difficulty = rng.normal(size=U)
    for label, quality in (("sasrec", 0.0), ("duorec", 0.3)):
        for s in (1, 2):
            cell = tmp_path / "d" / label / f"seed{s}"
            write_users(cell / "users.npz", _ranks(rng, difficulty, quality))
            kept = "d/" + label + f"/seed{s}" if (label, s) != ("duorec", 1) else "retrained"
            (cell / "cell.json").write_text(json.dumps({"dataset": "d", "label": label, "model": label, "seed": s,
                                                        "checkpoint": kept}))
            (cell / "config.json").write_text(json.dumps({"label": label, "model": {"name": label}}))
    runs = read_runs(store_cells(tmp_path))
    assert [r.users_path is None for r in runs if r.model == "duorec"] == [True, False]
    index = EvidenceIndex.from_runs(runs)
    row = compare_table(index, [Comparison("d", "sasrec", "duorec", "NDCG@10")], n_boot=50).rows[0]
    assert row.diff is None and row.verdict == "undecided" and row.missing == ["d/duorec/seed1"]
    assert index.labels_with_evidence() == [("d", "duorec"), ("d", "sasrec")]
    assert EvidenceIndex.from_store(tmp_path).evidence("d", "duorec")[1] == []  # the folders as they are


def test_two_seeds_a_side_cannot_outweigh_their_spread(tmp_path: Path) -> None:
    """The bootstrap draws from the seeds at hand as if they were all there are: two seeds a side whose HRLI@1 differs
    by 0.3 give it a p at its floor, but the seeds' t-test (Welch, about 2 df) cannot call it, so the row stays
    undecided; a third seed a side settles it."""
    rng = np.random.default_rng(5)
    difficulty = rng.normal(size=U)
    for label, echo_rates in (("base", (0.8, 0.6, 0.7)), ("other", (0.4, 0.35, 0.45))):
        for s, rate in enumerate(echo_rates, 1):
            last = np.where(rng.random(U) < rate, 1, 3)
            write_users(tmp_path / "three" / label / f"seed{s}" / "users.npz", _ranks(rng, difficulty, 0.0), last)
            if s <= 2:
                write_users(tmp_path / "two" / label / f"seed{s}" / "users.npz", _ranks(rng, difficulty, 0.0), last)
    two, three = compare_table(tmp_path, [Comparison(ds, "base", "other", "HRLI@1") for ds in ("two", "three")],
                               n_boot=500).rows
    assert two.diff.p_value <= 2 / 501 and two.seeds.kind == "welch" and two.p_seed_holm > 0.05
    assert two.verdict == "undecided" and three.verdict == "lower"


def test_paired_seeds_compare_the_seeds_both_have_seed_against_seed(tmp_path: Path) -> None:
    """A stopping variant's seed k is its base's seed k, stopped by another rule: with ``paired_seeds`` only the
    seeds both labels have enter, drawn together; where every common seed kept the same checkpoint, the difference
    is exactly 0 and the verdict "identical" (no test; outside Holm's families); the same per-user values from other
    checkpoints are tested: equivalent, where the unpaired comparison of the same files cannot decide."""
    rng = np.random.default_rng(3)
    difficulty = rng.normal(size=U)
    runs = {s: _ranks(rng, difficulty, q) for s, q in zip((1, 2, 3, 4, 5), (0.0, 0.6, -0.5, 0.3, -0.4))}
    for s, ranks in runs.items():
        write_users(tmp_path / "toy" / "base" / f"seed{s}" / "users.npz", ranks, meta={"checkpoint": f"run{s}"})
        if s <= 3:
            write_users(tmp_path / "toy" / "longer" / f"seed{s}" / "users.npz", ranks, meta={"checkpoint": f"run{s}"})
            write_users(tmp_path / "toy" / "retrained" / f"seed{s}" / "users.npz", ranks)
    (tmp_path / "toy" / "longer" / "seed6").mkdir()  # a variant's cell with no evidence yet, a seed base lacks
    write_users(tmp_path / "toy" / "other" / "seed1" / "users.npz", runs[1])
    pairs = [Comparison("toy", "base", "longer", "NDCG@10", paired_seeds=True),
             Comparison("toy", "base", "longer", "NDCG@10"),
             Comparison("toy", "base", "other", "NDCG@10", paired_seeds=True)]
    table = compare_table(tmp_path, pairs, n_boot=500)
    paired, unpaired, one = table.rows
    assert "| 3 / 3, paired |" in comparison_markdown(table) and "| 1 / 1, paired |" in comparison_markdown(table)
    assert (paired.n_seeds_baseline, paired.n_seeds_other) == (3, 3) and paired.diff.paired_seeds
    assert np.all(paired.diff.distribution == 0.0) and (paired.diff.lo, paired.diff.hi) == (0.0, 0.0)
    three = [metric_values(ev, "NDCG@10") for ev in label_evidence(tmp_path, "toy", "longer")[0]]
    assert len(three) == 3
    assert paired.baseline_mean == paired.other_mean == pytest.approx(np.mean([x.mean() for x in three]))
    assert paired.verdict == "identical" and paired.identical and paired.p_holm is None
    again = compare_table(tmp_path, [Comparison("toy", "base", "retrained", "NDCG@10", paired_seeds=True)],
                          n_boot=500).rows[0]
    assert not again.identical and again.verdict == "equivalent (within ±5%)" and again.p_holm is not None
    # unpaired: base's five seeds against the variant's four, each side's seeds drawn on their own; seed6 of the
    # variant has no users.npz, so the row waits for it
    assert unpaired.diff is None and unpaired.missing == ["toy/longer/seed6"] and unpaired.verdict == "undecided"
    assert (one.n_seeds_baseline, one.n_seeds_other) == (1, 1) and one.verdict.startswith("equivalent")
    unpaired = compare_table(tmp_path, [Comparison("toy", "base", "other", "NDCG@10")], n_boot=500).rows[0]
    assert unpaired.diff.lo < 0 < unpaired.diff.hi and unpaired.verdict == "undecided"
    write_users(tmp_path / "toy" / "late" / "seed9" / "users.npz", runs[1])  # a seed base does not have
    late = compare_table(tmp_path, [Comparison("toy", "base", "late", "NDCG@10", paired_seeds=True)]).rows[0]
    assert late.verdict == "undecided" and late.missing == ["toy/late (no seed in common with base, paired seeds)"]


def test_identical_checkpoints_are_identical_not_equivalent_and_leave_holm(tmp_path: Path) -> None:
    """Two labels whose every seed is the same checkpoint (from the users.npz header, else the cell.json beside it)
    get "identical", are left out of Holm's families (the other rows' m is theirs alone) and of the note's count;
    one seed's checkpoint differing, or the seeds differing, makes a tested row."""
    rng = np.random.default_rng(2)
    difficulty = rng.normal(size=U)
    for s in (1, 2, 3):
        ranks = _ranks(rng, difficulty, 0.0)
        write_users(tmp_path / "d" / "base" / f"seed{s}" / "users.npz", ranks, meta={"checkpoint": f"c{s}"})
        write_users(tmp_path / "d" / "twin" / f"seed{s}" / "users.npz", ranks, meta={"checkpoint": f"c{s}"})
        write_users(tmp_path / "d" / "near" / f"seed{s}" / "users.npz", ranks,
                    meta={"checkpoint": f"c{s}" if s < 3 else "other"})
        # no checkpoint in the header: the cell.json beside it names it
        path = write_users(tmp_path / "d" / "celled" / f"seed{s}" / "users.npz", ranks, meta={"checkpoint": None})
        (path.parent / "cell.json").write_text(json.dumps({"checkpoint": f"c{s}"}))
        write_users(tmp_path / "d" / "better" / f"seed{s}" / "users.npz", _ranks(rng, difficulty, 0.8))
    write_users(tmp_path / "d" / "fewer" / "seed1" / "users.npz", _ranks(rng, difficulty, 0.0),
                meta={"checkpoint": "c1"})
    rows = [Comparison("d", "base", x, "NDCG@10") for x in ("twin", "near", "celled", "better", "fewer")]
    table = compare_table(tmp_path, rows, n_boot=400)
    twin, near, celled, better, fewer = table.rows
    assert twin.verdict == celled.verdict == "identical" and twin.diff.estimate == 0.0
    assert twin.p_holm is None and twin.detectable is None and verdict_text(twin) == "identical"
    assert not near.identical and not fewer.identical and near.verdict != "identical"
    assert count_tested(table.rows) == 3
    tested = (near, better, fewer)
    assert [r.p_holm for r in tested] == pytest.approx(list(holm([r.diff.p_value for r in tested])))
    md = comparison_markdown(table)
    assert "Holm across the 3 comparisons" in md and "| identical |" in md


def test_an_undecided_row_states_the_difference_it_could_detect(tmp_path: Path) -> None:
    """detectable: (q(1 - a/2) + q(0.8)) SE at Holm's strictest level a = alpha / m, the larger of the bootstrap's
    (normal, the replicates' SD) and the seeds' t's (its SE and df), by hand from the row's own tests; the verdict
    text of an undecided row states it, other verdicts do not."""
    rng = np.random.default_rng(6)
    difficulty = rng.normal(size=150)
    for label, q in (("base", 0.0), ("other", 0.05), ("far", 2.5)):
        for s in (1, 2, 3):
            write_users(tmp_path / "d" / label / f"seed{s}" / "users.npz", _ranks(rng, difficulty, q))
    table = compare_table(tmp_path, [Comparison("d", "base", "other", "NDCG@10"),
                                     Comparison("d", "base", "far", "NDCG@10")], n_boot=400)
    r, far = table.rows
    assert r.verdict == "undecided" and far.verdict == "higher"
    a = 0.05 / 2
    boot = (NormalDist().inv_cdf(1 - a / 2) + NormalDist().inv_cdf(0.8)) * np.std(r.diff.distribution, ddof=1)
    seeds = (t_ppf(1 - a / 2, r.seeds.df) + t_ppf(0.8, r.seeds.df)) * r.seeds.se
    assert r.detectable == pytest.approx(max(boot, seeds), rel=1e-9)
    assert verdict_text(r) == f"undecided (detects ±{r.detectable:.4f})" and verdict_text(far) == "higher"
    assert f"undecided (detects ±{r.detectable:.4f})" in comparison_markdown(table)
    r.detectable = 1.25  # two seeds with about one df at alpha / m: more than any difference of a rate
    assert verdict_text(r) == "undecided (detects ±1.2500: no possible difference)"
