"""Comparison tables on per-user evidence: read the ``users.npz`` of results-store cells and compare two model labels
of one data set on one metric, with the statistics of ``report.stats`` (paired bootstrap over users with the seeds
resampled hierarchically, Holm across the comparisons of one table, TOST for equivalence). NumPy only (no torch).

A cell ``STORE/<data set>/<label>/seed<k>/`` may hold ``users.npz`` (an ``.npz`` archive, any member compression)::

    header                  0-d str array, JSON: {"version": 1, "split": "test", "n_users": U, "n_items": N,
                            "alphas": [...], "rank_cap": C, ...}
    user                    (U,) int   test-user ids, the same users in the same order in every cell of a data set
    target_rank             (U,) int   filtered 1-based pessimistic rank of the target
    target_rank_unfiltered  (U,) int
    last_rank               (U,) int   1-based rank of the last input item in the unfiltered ranking
    last_seen               (U,) bool  the last item has training interactions
    last_freq               (U,) int   the last item's training frequency
    alpha_target_rank       (A, U) int filtered target rank at each alpha of header["alphas"], capped at rank_cap
    alpha_last_rank         (A, U) int likewise for the last input item
    recoverable             (U,) bool  missed at the final position, hit by an earlier one

Other arrays (e.g. ``alpha_target_rank_unfiltered``) and header keys are allowed and ignored. Where the header has
``caps`` ({array name: cap}), that array's ranks are capped there (an entry equal to its cap means ">= cap", as
for ``rank_cap``): a metric at cutoff K needs K < cap, and asking for more is refused (``metric_values``).

Metrics (``metric_values``): ``HR@K`` and ``NDCG@K`` on the filtered target rank (``HR@K/unfiltered``,
``NDCG@K/unfiltered`` on the unfiltered one) and ``HRLI@K`` on the last item's rank.

A comparison's difference is other - baseline. Where both sides are the same checkpoints seed for seed (the
``checkpoint`` of each cell's ``users.npz`` header, else of its ``cell.json``; every seed compared, the same seeds on
both sides) the verdict is "identical": not a test, left out of the Holm families. Every tested row carries the
smallest difference its design detects (``TestedRow.detectable``), which an "undecided" verdict states
(``verdict_text``). A row whose cells lack ``users.npz`` (or whose label has no cells)
gets no numbers and the verdict "undecided" (never "level" or "equivalent"); its ``note`` says "no per-user evidence
(retrain or re-diagnose: resdom diagnose RUN --what users)" and names the cells.

Where the cells are: ``EvidenceIndex``, from a results store's folders (``from_store``: each cell's ``users.npz`` as
it is) or from the runs a report reads (``from_runs``: each run's ``users.npz`` where it is of the test split and the
run's kept checkpoint, ``RunRecord.users_path``; a stale one is no evidence, as in every other table of the
report).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from resdom.bounded import load_npz
from resdom.errors import ResdomError
from resdom.limits import short
from resdom.report.collect import users_file
from resdom.report.markdown import markdown_lines
from resdom.report.stats import (
    IDENTICAL,
    BootstrapResult,
    Margin,
    SeedTest,
    bootstrap_diff,
    detectable_difference,
    equivalence_test,
    hit_at,
    holm_or_none,
    joint_verdict,
    ndcg_at,
    seed_test,
)

USERS_FILE = "users.npz"
VERSION = 1
HEADER_KEYS = ("version", "split", "n_users", "n_items", "alphas", "rank_cap")
PER_USER = ("user", "target_rank", "target_rank_unfiltered", "last_rank", "last_seen", "last_freq", "recoverable")
PER_ALPHA = ("alpha_target_rank", "alpha_last_rank")
BOOLS = ("last_seen", "recoverable")
NO_EVIDENCE = "no per-user evidence"
REDIAGNOSE = "retrain or re-diagnose: resdom diagnose RUN --what users"
UNDECIDED = "undecided"
_METRIC = re.compile(r"^(HR|NDCG|HRLI)@([1-9][0-9]*)(/unfiltered)?$")
_SEED_DIR = re.compile(r"^seed([0-9]+)$")


# --- reading users.npz ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class UserEvidence:
    """One cell's per-user evidence (the arrays of ``users.npz``; (U,) per user, (A, U) per alpha)."""

    path: Path
    header: dict[str, Any]
    user: np.ndarray
    target_rank: np.ndarray
    target_rank_unfiltered: np.ndarray
    last_rank: np.ndarray
    last_seen: np.ndarray
    last_freq: np.ndarray
    recoverable: np.ndarray
    alpha_target_rank: np.ndarray
    alpha_last_rank: np.ndarray

    @property
    def n_users(self) -> int:
        return int(self.user.size)

    @property
    def split(self) -> str:
        return str(self.header["split"])


def _bad(path: Path, what: str) -> ResdomError:
    return ResdomError(f"{path}: {what}".replace("\n", " "))


def _header(path: Path, raw: np.ndarray) -> dict[str, Any]:
    if raw.ndim != 0 or raw.dtype.kind not in "US":
        raise _bad(path, f"'header' must be a 0-d string array (got dtype {raw.dtype}, shape {raw.shape})")
    text = raw.item()
    try:
        header = json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(path, f"'header' is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise _bad(path, "'header' must be a JSON object")
    missing = [k for k in HEADER_KEYS if k not in header]
    if missing:
        raise _bad(path, f"header lacks {', '.join(missing)}")
    if header["version"] != VERSION:
        raise _bad(path, f"header version {header['version']!r} is not supported (expected {VERSION})")
    for key in ("n_users", "n_items", "rank_cap"):
        if not isinstance(header[key], int) or isinstance(header[key], bool) or header[key] < 1:
            raise _bad(path, f"header {key} must be a positive integer (got {header[key]!r})")
    if not isinstance(header["split"], str):
        raise _bad(path, f"header split must be a string (got {header['split']!r})")
    caps = header.get("caps", {})
    if not isinstance(caps, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                             for v in caps.values()):
        raise _bad(path, f"header caps must map array names to positive integers (got {caps!r})")
    alphas = header["alphas"]
    if not isinstance(alphas, list) or not all(isinstance(a, (int, float)) and not isinstance(a, bool)
                                               and 0 <= a <= 1 for a in alphas):  # NaN fails the bounds too
        raise _bad(path, f"header alphas must be a list of residual scales in [0, 1] (got {short(alphas, 80)})")
    return header


def _cap(header: dict[str, Any], name: str) -> int:
    """The largest rank array ``name`` may hold: its ``caps`` entry, else rank_cap (per alpha) or n_items."""
    caps = header.get("caps") or {}
    if name in caps:
        return int(caps[name])
    return int(header["rank_cap"] if name in PER_ALPHA else header["n_items"])


def _check_array(path: Path, name: str, arr: np.ndarray, shape: tuple[int, ...], header: dict[str, Any]) -> np.ndarray:
    if arr.shape != shape:
        raise _bad(path, f"'{name}' has shape {arr.shape}, expected {shape}")
    if name in BOOLS:
        if arr.dtype.kind == "b":
            return arr
        if arr.dtype.kind in "iu" and np.all((arr == 0) | (arr == 1)):
            return arr.astype(bool)
        raise _bad(path, f"'{name}' must be boolean (got dtype {arr.dtype})")
    if arr.dtype.kind not in "iu":
        raise _bad(path, f"'{name}' must be integer (got dtype {arr.dtype})")
    if name == "user" or arr.size == 0:
        return arr
    if name == "last_freq":
        if np.min(arr) < 0:
            raise _bad(path, f"'{name}' has a negative frequency")
        return arr
    hi = _cap(header, name)
    bad = np.flatnonzero(((arr < 1) | (arr > hi)).ravel())
    if bad.size:
        value = arr.ravel()[bad[0]]
        raise _bad(path, f"'{name}' holds rank {value} outside 1..{hi} ({bad.size} such entries)")
    return arr


def read_users(path: str | Path) -> UserEvidence:
    """Read and check one ``users.npz`` (module docstring). A malformed file is a ResdomError naming it."""
    path = Path(path)
    if not path.is_file():
        raise _bad(path, "no such file")
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":  # numpy would try it as a pickle and say so
            raise _bad(path, "not an .npz archive (damaged, or not written by resdom); rerun `resdom diagnose "
                             "--what users` on its run")
    try:  # every member within the limits of resdom.limits (a few MB must not expand to gigabytes)
        arrays = load_npz(path)
    except ResdomError as e:
        raise _bad(path, f"not a readable .npz file ({e})") from None
    missing = [k for k in ("header", *PER_USER, *PER_ALPHA) if k not in arrays]
    if missing:
        raise _bad(path, f"lacks {', '.join(missing)}")
    header = _header(path, arrays["header"])
    n_users, n_alphas = header["n_users"], len(header["alphas"])
    checked = {name: _check_array(path, name, arrays[name], (n_users,), header) for name in PER_USER}
    checked.update({name: _check_array(path, name, arrays[name], (n_alphas, n_users), header) for name in PER_ALPHA})
    if np.unique(checked["user"]).size != n_users:
        raise _bad(path, "'user' repeats a user id")
    return UserEvidence(path=path, header=header, **checked)


def parse_metric(metric: str) -> tuple[str, int, bool]:
    """``"NDCG@10"`` -> ``("NDCG", 10, False)``; ``"HR@10/unfiltered"`` -> ``("HR", 10, True)``."""
    m = _METRIC.match(metric)
    if m is None or (m.group(1) == "HRLI" and m.group(3)):
        raise ResdomError(f"metric {metric!r}: expected HR@K, NDCG@K, HR@K/unfiltered, NDCG@K/unfiltered or HRLI@K")
    return m.group(1), int(m.group(2)), bool(m.group(3))


def metric_values(ev: UserEvidence, metric: str) -> np.ndarray:
    """(U,) the per-user values of ``metric`` in one cell: HR@K = rank <= K, NDCG@K = 1/log2(rank + 1) within K,
    HRLI@K = last_rank <= K."""
    kind, k, unfiltered = parse_metric(metric)
    name = "last_rank" if kind == "HRLI" else "target_rank_unfiltered" if unfiltered else "target_rank"
    cap = (ev.header.get("caps") or {}).get(name)
    if cap is not None and k >= cap:
        raise ResdomError(f"{ev.path}: {metric} needs ranks up to {k}, but {name} is capped at {cap} "
                          f"(exact for K <= {cap - 1})")
    rank = getattr(ev, name)
    return ndcg_at(rank, k) if kind == "NDCG" else hit_at(rank, k)


def default_margin(metric: str) -> Margin:
    """±5% of the baseline's value for HR and NDCG; ±0.02 (absolute) for HRLI, a proportion of users."""
    kind, _, _ = parse_metric(metric)
    return Margin(0.02, relative=False) if kind == "HRLI" else Margin(0.05, relative=True)


def compact_cells(cells: list[str]) -> str:
    """``"d/a/seed1, d/a/seed2, d/b (no cells)"`` -> ``"d/a/seed1,2, d/b (no cells)"`` (order kept, duplicates
    dropped)."""
    seeds: dict[str, list[str]] = {}
    for cell in cells:
        m = re.match(r"^(.*)/seed([0-9]+)$", cell)
        head, k = (m.group(1), m.group(2)) if m else (cell, "")
        if k not in seeds.setdefault(head, []):
            seeds[head].append(k)
    return ", ".join(f"{h}/seed{','.join(ks)}" if ks != [""] else h for h, ks in seeds.items())


def no_evidence_note(missing: list[str]) -> str:
    """``no per-user evidence (retrain or re-diagnose: resdom diagnose RUN --what users): <cells>``."""
    return f"{NO_EVIDENCE} ({REDIAGNOSE}): {compact_cells(missing)}"


def _seed_cells(root: Path) -> list[tuple[int, Path]]:
    """(seed, cell folder) of every ``seed<k>`` folder of ``root`` (a label's folder), in seed order."""
    return sorted((int(m.group(1)), p) for p in (root.iterdir() if root.is_dir() else [])
                  if p.is_dir() and (m := _SEED_DIR.match(p.name)))


class _Run(Protocol):  # what EvidenceIndex.from_runs reads of a report.collect.RunRecord
    path: Path
    dataset: str
    model: str
    seed: int | None

    @property
    def users_path(self) -> Path | None: ...


@dataclass
class EvidenceIndex:
    """The seed cells of each (data set, label), in seed order: ``{(data set, label): [(seed, cell folder)]}``;
    ``evidence`` reads their ``users.npz`` (each file once). ``usable``: {cell folder: its evidence, None where it
    has none to use}, for the cells whose reader decided (``from_runs``); any other cell's is its ``users_file``."""

    cells: dict[tuple[str, str], list[tuple[int, Path]]]
    usable: dict[Path, Path | None] = field(default_factory=dict)
    _read: dict[Path, UserEvidence] = field(default_factory=dict, repr=False)

    @classmethod
    def from_store(cls, store: str | Path) -> EvidenceIndex:
        """Every ``STORE/<data set>/<label>/seed<k>/`` folder."""
        store = Path(store)
        cells = {}
        for ds in sorted(p for p in store.iterdir() if p.is_dir()) if store.is_dir() else []:
            for lb in sorted(p for p in ds.iterdir() if p.is_dir()):
                if found := _seed_cells(lb):
                    cells[(ds.name, lb.name)] = found
        return cls(cells)

    @classmethod
    def from_runs(cls, runs: Iterable[_Run]) -> EvidenceIndex:
        """The run directories of ``runs`` (report.collect.RunRecord) by (data set, model label); a run without a
        seed counts as seed 0. A run's evidence is its ``users_path``: none where its ``users.npz`` is of another
        checkpoint or split (the report leaves it out and says so)."""
        cells: dict[tuple[str, str], list[tuple[int, Path]]] = {}
        usable: dict[Path, Path | None] = {}
        for r in runs:
            cells.setdefault((r.dataset, r.model), []).append((r.seed if r.seed is not None else 0, Path(r.path)))
            usable[Path(r.path)] = r.users_path
        return cls({k: sorted(v) for k, v in cells.items()}, usable)

    def users_at(self, cell: Path) -> Path | None:
        """The per-user evidence of ``cell`` to read (``usable``), None where it has none."""
        if cell in self.usable:
            return self.usable[cell]
        path = users_file(cell)
        return path if path.is_file() else None

    def seeds(self, dataset: str, label: str) -> list[int]:
        """The seeds of the cells of ``label`` on ``dataset``, in order."""
        return [k for k, _ in self.cells.get((dataset, label), [])]

    def evidence(self, dataset: str, label: str, only: Collection[int] | None = None
                 ) -> tuple[list[UserEvidence], list[str]]:
        """The evidence of every seed cell of ``label`` on ``dataset`` (seed order; ``only``: of those seeds) and the
        cells without any (``"<data set>/<label>/seed<k>"``, or ``"<data set>/<label> (no cells)"``)."""
        seeds = [(k, c) for k, c in self.cells.get((dataset, label), []) if only is None or k in only]
        if not seeds:
            return [], [f"{dataset}/{label} (no cells)"]
        found, missing = [], []
        for k, cell in seeds:
            path = self.users_at(cell)
            if path is not None:
                if path not in self._read:
                    self._read[path] = read_users(path)
                found.append(self._read[path])
            else:
                missing.append(f"{dataset}/{label}/seed{k}")
        return found, missing

    def labels_with_evidence(self) -> list[tuple[str, str]]:
        """(data set, label) pairs with a ``users.npz`` in some seed cell, sorted."""
        return sorted(k for k, seeds in self.cells.items() if any(self.users_at(c) is not None for _, c in seeds))


def as_index(store: str | Path | EvidenceIndex) -> EvidenceIndex:
    """``store`` itself if it is an EvidenceIndex, else the index of the results store at that path."""
    return store if isinstance(store, EvidenceIndex) else EvidenceIndex.from_store(store)


def label_evidence(store: str | Path, dataset: str, label: str) -> tuple[list[UserEvidence], list[str]]:
    """The evidence of every seed cell of ``label`` on ``dataset`` (in seed order) and the cells without any
    (``"<data set>/<label>/seed<k>"``, or ``"<data set>/<label> (no cells)"``)."""
    seeds = _seed_cells(Path(store) / dataset / label)
    return EvidenceIndex({(dataset, label): seeds} if seeds else {}).evidence(dataset, label)


def checkpoint_of(ev: UserEvidence) -> str | None:
    """The checkpoint a cell's evidence was computed on: its ``users.npz`` header's ``checkpoint``, else the
    ``checkpoint`` of the ``cell.json`` beside it; None where neither names one."""
    found = ev.header.get("checkpoint")
    if isinstance(found, str) and found:
        return found
    cell = ev.path.parent / "cell.json"
    try:
        found = json.loads(cell.read_text(encoding="utf-8")).get("checkpoint") if cell.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) and found else None


def same_checkpoints(base: list[UserEvidence], other: list[UserEvidence], base_seeds: list[int],
                     other_seeds: list[int]) -> bool:
    """Whether both sides are the same seeds and each seed's checkpoint is the same on both (every one known)."""
    if base_seeds != other_seeds or len(base) != len(other) or not base:
        return False
    pairs = [(checkpoint_of(b), checkpoint_of(o)) for b, o in zip(base, other)]
    return all(b is not None and b == o for b, o in pairs)


def _check_pairing(evidence: list[UserEvidence]) -> None:
    first = evidence[0]
    for ev in evidence[1:]:
        for key in ("split", "n_items"):
            if ev.header[key] != first.header[key]:
                raise ResdomError(f"{ev.path}: {key} {ev.header[key]!r} differs from {first.path} "
                                  f"({first.header[key]!r}); per-user evidence cannot be paired")
        if not np.array_equal(ev.user, first.user):
            raise ResdomError(f"{ev.path}: its users (or their order) differ from {first.path}'s; per-user evidence "
                              "cannot be paired")


# --- the comparison table -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """Compare ``other`` against ``baseline`` (model labels of the store) on ``dataset`` and ``metric``; ``margin``:
    the equivalence margin (None: ``default_margin(metric)``); ``paired_seeds``: seed k of both is one training run
    (``experiments.shares_runs``), so the seeds both have are compared seed against seed (``bootstrap_diff``)."""

    dataset: str
    baseline: str
    other: str
    metric: str
    margin: Margin | None = None
    paired_seeds: bool = False


@dataclass(kw_only=True)
class TestedRow:
    """What ``set_verdicts`` reads and writes in a row of a table of tested differences (``ComparisonRow``,
    ``echo.EchoRow``): the margin, the bootstrap of the difference (``diff``) and the seeds' own t-test of it
    (``seeds``; None with a single seed on both sides), the TOST p at the margin's absolute value, the Holm-adjusted
    p-values of the difference and of equivalence under each test, the verdict, whether both sides are one checkpoint
    seed for seed (``identical``) and the smallest difference the row's tests detect (``detectable``)."""

    margin: Margin
    verdict: str = ""
    diff: BootstrapResult | None = None
    margin_abs: float | None = None
    p_equiv: float | None = None  # TOST, unadjusted
    seeds: SeedTest | None = None
    p_holm: float | None = None
    p_equiv_holm: float | None = None
    p_seed_holm: float | None = None
    p_seed_equiv_holm: float | None = None
    identical: bool = False  # the same checkpoints on both sides, seed for seed: verdict "identical", no test
    detectable: float | None = None  # the smallest difference both tests detect (``set_verdicts``)


@dataclass(kw_only=True)
class ComparisonRow(TestedRow):
    """One row: the means (mean over seeds of the mean over users) and the tests of other - baseline
    (``TestedRow``). Numbers are None for a row without per-user evidence (``missing`` names the cells)."""

    comparison: Comparison
    baseline_mean: float | None = None
    other_mean: float | None = None
    n_seeds_baseline: int = 0
    n_seeds_other: int = 0
    n_users: int = 0
    missing: list[str] = field(default_factory=list)

    @property
    def note(self) -> str:
        """Why a row has no numbers (``no_evidence_note``), else empty."""
        return no_evidence_note(self.missing) if self.missing else ""


@dataclass
class ComparisonTable:
    """The rows of one table; ``n_boot``: the bootstrap replicates each row used."""

    title: str
    rows: list[ComparisonRow]
    n_boot: int
    alpha: float


def _effective_n_boot(n_boot: int, m: int, alpha: float) -> int:
    """At least enough replicates that the smallest Holm-adjusted p (m * 2 / (n_boot + 1)) is a fifth of alpha."""
    return max(n_boot, math.ceil(10 * m / alpha))


def _evidence_row(c: Comparison, margin: Margin, base: list[UserEvidence], other: list[UserEvidence],
                  n_boot: int, seed: int, alpha: float, identical: bool = False) -> ComparisonRow:
    _check_pairing(base + other)
    a = [metric_values(ev, c.metric) for ev in other]
    b = [metric_values(ev, c.metric) for ev in base]
    result = bootstrap_diff(a, b, n_boot=n_boot, seed=seed, paired_seeds=c.paired_seeds)
    base_mean, other_mean = float(np.mean([x.mean() for x in b])), float(np.mean([x.mean() for x in a]))
    m_abs = margin.absolute(base_mean)
    p_equiv = equivalence_test(result, m_abs, alpha).p_value if m_abs > 0 else None
    return ComparisonRow(comparison=c, margin=margin, baseline_mean=base_mean, other_mean=other_mean, diff=result,
                         margin_abs=m_abs, p_equiv=p_equiv, seeds=seed_test(a, b, paired_seeds=c.paired_seeds),
                         n_seeds_baseline=len(base), n_seeds_other=len(other), n_users=result.n_users,
                         identical=identical)


def compare_table(store: str | Path | EvidenceIndex, comparisons: list[Comparison], title: str = "",
                  n_boot: int = 2000, seed: int = 0, alpha: float = 0.05) -> ComparisonTable:
    """Compare each of ``comparisons`` on the per-user evidence of ``store`` (a results store's path, or an
    ``EvidenceIndex``); Holm across the rows that have evidence, in four families: the difference p-values and the
    equivalence p-values, of the bootstrap and of the seeds' t-test (``SeedTest``); a verdict needs both tests
    (``set_verdicts``); a row whose sides are the same checkpoints seed for seed is "identical", outside the
    families. Row i's bootstrap uses seed ``seed + i``; ``n_boot`` is raised where needed so that
    Holm's smallest p can fall below alpha / 5. A row without evidence in every cell is "undecided"."""
    index = as_index(store)
    rows: list[ComparisonRow] = []
    pending: list[tuple[int, Comparison, Margin, list[UserEvidence], list[UserEvidence], bool]] = []
    for i, c in enumerate(comparisons):
        margin = c.margin or default_margin(c.metric)
        common = set(index.seeds(c.dataset, c.baseline)) & set(index.seeds(c.dataset, c.other)) \
            if c.paired_seeds else None
        base, miss_b = index.evidence(c.dataset, c.baseline, common)
        other, miss_o = index.evidence(c.dataset, c.other, common)
        missing = miss_b + miss_o
        if common is not None and not common and index.seeds(c.dataset, c.baseline) and index.seeds(c.dataset, c.other):
            missing = [f"{c.dataset}/{c.other} (no seed in common with {c.baseline}, paired seeds)"]
        if missing:
            rows.append(ComparisonRow(comparison=c, verdict=UNDECIDED, margin=margin, missing=missing))
        else:
            rows.append(ComparisonRow(comparison=c, margin=margin))
            seeds_b = [k for k in index.seeds(c.dataset, c.baseline) if common is None or k in common]
            seeds_o = [k for k in index.seeds(c.dataset, c.other) if common is None or k in common]
            pending.append((i, c, margin, base, other, same_checkpoints(base, other, seeds_b, seeds_o)))
    n_boot = _effective_n_boot(n_boot, len(pending), alpha)
    for i, c, margin, base, other, identical in pending:
        rows[i] = _evidence_row(c, margin, base, other, n_boot, seed + i, alpha, identical)
    done = [rows[i] for i, *_ in pending]
    set_verdicts(done, alpha)
    return ComparisonTable(title, rows, n_boot, alpha)


def detectable(r: TestedRow, alpha: float) -> float:
    """The smallest true difference ``r``'s verdict detects with 80% power at two-sided level ``alpha`` (``stats.
    detectable_difference``): the larger of the bootstrap's (normal, SE the replicates' standard deviation) and the
    seeds' t-test's (its SE and df), since a difference needs both; the bootstrap's alone without a seeds' test."""
    assert r.diff is not None
    d = r.diff.distribution
    found = detectable_difference(float(np.std(d, ddof=1)) if d.size > 1 else 0.0, math.inf, alpha)
    if r.seeds is not None:
        found = max(found, detectable_difference(r.seeds.se, r.seeds.df, alpha))
    return found


def set_verdicts(done: Sequence[TestedRow], alpha: float) -> None:
    """Holm across ``done`` (rows with a bootstrap) in four families, the bootstrap's and the seeds' test's p of the
    difference and of equivalence, then each row's ``joint_verdict``; rows whose sides are the same checkpoints seed
    for seed (``identical``) are left out of the families and get the verdict "identical". Each tested row's
    ``detectable`` difference is at Holm's strictest level, alpha / m over the m tested rows (a difference that
    large is detected with 80% power whatever the other rows show)."""
    for r in done:
        if r.identical:
            r.verdict = IDENTICAL
    done = [r for r in done if not r.identical]
    families = {  # raw p-values per row (None: no such test in that row)
        "p_holm": [None if r.diff is None else r.diff.p_value for r in done],
        "p_equiv_holm": [r.p_equiv for r in done],
        "p_seed_holm": [None if r.seeds is None else r.seeds.p_value() for r in done],
        "p_seed_equiv_holm": [None if r.seeds is None or r.p_equiv is None or r.margin_abs is None
                              else r.seeds.p_equiv(r.margin_abs) for r in done],
    }
    for name, raw in families.items():
        for r, p in zip(done, holm_or_none(raw)):
            setattr(r, name, p)
    for r in done:
        if r.diff is None or r.p_holm is None:  # every row here has its bootstrap (``done``)
            raise ValueError("a tested row without its bootstrap")
        r.verdict = joint_verdict(r.diff.estimate, r.p_holm, r.p_seed_holm, r.p_equiv_holm, r.p_seed_equiv_holm,
                                  r.margin.text(), alpha)
        r.detectable = detectable(r, alpha / len(done))


def verdict_text(r: TestedRow) -> str:
    """The verdict as a table shows it: an "undecided" row with a test states the smallest difference it detects,
    ``undecided (detects ±0.0031)``, and where that is 1 or more, more than any difference of the metrics compared
    (rates and NDCG in [0, 1]), says so: ``undecided (detects ±2.5000: no possible difference)``; where it is 0 the
    row's values do not vary at all (every user 0 on both sides, say: a standard error of 0 measures no power), and it
    says that instead of a detectable ±0; every other verdict as it is."""
    if r.verdict == UNDECIDED and r.detectable == 0.0:
        return f"{UNDECIDED} (no variation in the values: no detectable difference to state)"
    if r.verdict == UNDECIDED and r.detectable is not None:
        beyond = ": no possible difference" if r.detectable >= 1.0 else ""
        return f"{UNDECIDED} (detects ±{r.detectable:.4f}{beyond})"
    return r.verdict


def count_tested(rows: Sequence[TestedRow]) -> int:
    """The rows tested (a bootstrap, not identical): the m of Holm's families."""
    return sum(r.diff is not None and not r.identical for r in rows)


# --- Markdown -------------------------------------------------------------------------------------------------------

COLUMNS = ("data set", "comparison", "metric", "baseline", "other", "difference [95% CI]", "Holm p", "verdict",
           "seeds", "users")


SEEDS_TEST = ("paired seeds: their differences, df S - 1; else Welch's, or with a single seed on one side the other "
              "side's variance for both, df S - 1")


def _label(name: str, n_seeds: int) -> str:
    return f"{name} (1 seed)" if n_seeds == 1 else name


def holm_p_text(p: float, d: BootstrapResult) -> str:
    """The Holm p; ``≤`` where no replicate fell on the other side of 0 (the raw p is at its floor, 2/(n_boot+1))."""
    if p < 0.001:
        return "<0.001"
    return f"≤{p:.3f}" if d.p_value <= 2 / (d.n_boot + 1) else f"{p:.3f}"


def row_p_text(r: TestedRow) -> str:
    """``≤0.010 bootstrap, 0.480 seeds' t``: the row's Holm-adjusted p of the difference under both tests (the
    bootstrap's alone where the row has no seeds' test: a single seed on both sides); ``not tested`` for an identical
    row."""
    if r.identical:
        return "not tested"
    assert r.diff is not None and r.p_holm is not None  # set wherever the row has evidence
    text = f"{holm_p_text(r.p_holm, r.diff)} bootstrap"
    if r.p_seed_holm is None:
        return text
    return f"{text}, {'<0.001' if r.p_seed_holm < 0.001 else f'{r.p_seed_holm:.3f}'} seeds' t"


def _cells(r: ComparisonRow) -> list[str]:
    c = r.comparison
    head = [c.dataset, f"{_label(c.other, r.n_seeds_other)} vs {_label(c.baseline, r.n_seeds_baseline)}", c.metric]
    if r.diff is None:
        return head + ["–", "–", r.note, "–", r.verdict, "–", "–"]
    d = r.diff
    return head + [f"{r.baseline_mean:.4f}", f"{r.other_mean:.4f}", f"{d.estimate:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}]",
                   row_p_text(r), verdict_text(r),
                   f"{r.n_seeds_baseline} / {r.n_seeds_other}" + (", paired" if d.paired_seeds else ""), str(r.n_users)]


def comparison_markdown(table: ComparisonTable) -> str:
    """The table as Markdown: a header row, one row per comparison (difference = other - baseline; seeds:
    baseline / other), and a note on the method."""
    lines = [f"**{table.title}**", ""] if table.title else []
    lines += markdown_lines(COLUMNS, [_cells(r) for r in table.rows])
    m = count_tested(table.rows)
    note = (f"Difference: other - baseline, mean over seeds of the mean over users; 95% CI from a paired bootstrap "
            f"over users with each side's seeds resampled ({table.n_boot} replicates; per comparison, not "
            f"adjusted); seeds' t: a t-test on the seeds' own means ({SEEDS_TEST}). Holm across the {m} comparisons "
            f"with evidence, for each test. Verdict at alpha {table.alpha:g}: higher/lower where both Holm-adjusted p "
            "are below it; else equivalent where two one-sided tests (Holm-adjusted) pass the stated margin under "
            "both (a relative margin is a share of the baseline's mean); else undecided, with the difference both "
            f"tests would detect with 80% power at alpha {table.alpha:g} / {m} (\"detects ±d\"). Identical: the same "
            "checkpoints on both sides seed for seed (no test, not counted among the comparisons). Seeds \"paired\": "
            "seed k of both sides starts from the same weights and data order (Comparison.paired_seeds), compared "
            "seed against seed (one seed draw for both in the bootstrap; the paired t). A (1 seed) side "
            "adds no seed-to-seed variation to the bootstrap; one seed on both sides: no seeds' t, the bootstrap "
            "alone.")
    lines += ["", note]
    return "\n".join(lines) + "\n"
