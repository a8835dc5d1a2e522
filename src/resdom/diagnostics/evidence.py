"""Per-user evidence (``users.npz``): for every test user, the ranks behind the diagnostics' rates, so that
statistics over users (paired bootstrap, Wilson intervals) can be computed from a stored cell.

``resdom diagnose`` writes ``RUN_DIR/diagnostics/users.npz``; the results store copies it to ``<cell>/users.npz``.
An ``.npz`` archive (``np.load`` reads it) holding, version 1:

    header                        0-d str, JSON: version, split ("test"), n_users U, n_items N, alphas (the
                                  sweep's, in its order; [1.0] for a model without attention blocks), rank_cap
                                  (the alpha target arrays' cap), caps (every rank array's cap), K (recovery's
                                  cutoff), offsets, filter_seen, layers, checkpoint, seconds
    user                          (U,) int32  test-user ids (the prepared split's user index), in evaluation order:
                                  the same users in the same order for every model of one data set split
    target_rank                   (U,)  filtered target rank, as evaluation ranks it (the whole input filtered)
    target_rank_unfiltered        (U,)  the same without the filter
    last_rank                     (U,)  the last input item's rank in the unfiltered ranking, as HRLI ranks it
    last_seen                     (U,) bool   the last input item occurs in the training sequences
    last_freq                     (U,) int32  how often it occurs there (``data.sequences.item_counts``)
    alpha_target_rank             (A, U) filtered target rank at each alpha of header["alphas"]
    alpha_target_rank_unfiltered  (A, U) unfiltered target rank at each alpha
    alpha_last_rank               (A, U) unfiltered last-item rank at each alpha
    recoverable                   (U,) bool   recovery's set R at alpha = 1: missed at the final position (rank > K)
                                  and hit (rank <= K) from one of the columns L-1-k, k in offsets

Ranks are 1-based and pessimistic (ties count against the item); a user whose input lacks the item has the cap.
Every rank array is capped at its ``header["caps"][name]``: an entry equal to the cap means ">= cap", so a rate
at cutoff K can be read from an array whose cap exceeds K. Caps (``CAPS``): 255 for the three (U,) arrays (every
HR@K / NDCG@K / HRLI@K with K <= 254 exact), 21 for the alpha target arrays (K <= 20), 2 for ``alpha_last_rank``
(HRLI@1 at each alpha, what the sweep reports). Rank arrays are uint8, the (A, U) ones stored column-major, and the
archive's members are LZMA-compressed: together what keeps a cell of the largest stored test split
(yelp-ts, 11,526 users) within ``MAX_BYTES`` (60 KB; tests/test_diagnostics_evidence.py builds a worst case).
Full-precision ranks would not fit: ``user`` and ``last_freq`` alone take about 16 KB, and an exact rank about
13-19 KB per (U,) array.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resdom.bounded import load_npz
from resdom.data.sequences import EvalSet, SplitData, item_counts
from resdom.diagnostics.alpha import ALPHAS, batch_ranks, check_alphas
from resdom.diagnostics.common import DEFAULT_BATCH, all_users, batches, check_model, inference, recent_items
from resdom.diagnostics.recovery import K_RECOVERY, OFFSETS, position_ranks, recoverable_set
from resdom.errors import ResdomError
from resdom.models.interface import Diagnosable, final_states, residual_scale
from resdom.records import RECOVERY_CURVE
from resdom.stored import users_header

USERS_FILE = "users.npz"
VERSION = 1
SPLIT = "test"
MAX_BYTES = 60_000
CAPS: dict[str, int] = {"target_rank": 255, "target_rank_unfiltered": 255, "last_rank": 255,
                        "alpha_target_rank": 21, "alpha_target_rank_unfiltered": 21, "alpha_last_rank": 2}
RANK_CAP = CAPS["alpha_target_rank"]
# the archive's members, in order (header first)
NAMES = ("header", "user", "target_rank", "target_rank_unfiltered", "last_rank", "last_seen", "last_freq",
         "alpha_target_rank", "alpha_target_rank_unfiltered", "alpha_last_rank", "recoverable")


def rank_dtype(cap: int) -> type[np.unsignedinteger[Any]]:
    """The smallest unsigned integer type holding 1..cap."""
    return np.uint8 if cap <= 0xFF else np.uint16 if cap <= 0xFFFF else np.uint32


@dataclass
class UserEvidence:
    """header: the JSON header (module docstring); arrays: the exact arrays, ranks 1-based int64 not yet capped
    ((U,) or (A, U)), ``user`` / ``last_freq`` int64, ``last_seen`` / ``recoverable`` bool."""

    header: dict[str, Any]
    arrays: dict[str, np.ndarray]

    def stored(self) -> dict[str, np.ndarray]:
        """The arrays as written: ranks capped at ``CAPS`` in their ``rank_dtype``, ids and counts int32."""
        out: dict[str, np.ndarray] = {"header": np.array(json.dumps(self.header, sort_keys=True))}
        for name in NAMES[1:]:
            a = self.arrays[name]
            if name in CAPS:
                out[name] = np.minimum(a, CAPS[name]).astype(rank_dtype(CAPS[name]))
            elif name in ("user", "last_freq"):
                out[name] = a.astype(np.int32)
            else:
                out[name] = a.astype(bool)
        return out

    def to_bytes(self) -> bytes:
        """The ``users.npz`` archive (``npz_bytes`` of ``stored()``)."""
        return npz_bytes(self.stored())


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An ``.npz`` archive of ``arrays`` (``np.load`` reads it), members LZMA-compressed, 2-d arrays column-major,
    fixed member dates: the same arrays give the same bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_LZMA) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_LZMA
            with zf.open(info, "w") as f:
                a = np.asfortranarray(arr) if np.ndim(arr) == 2 else np.asanyarray(arr)
                np.lib.format.write_array(f, a, allow_pickle=False)
    return buf.getvalue()


def read_users(source: str | Path | bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(header, arrays) of a ``users.npz`` (a path or its bytes). Raises OSError / ValueError / KeyError /
    zipfile.BadZipFile on a file that is not one, or one past ``resdom.limits`` (``bounded.load_npz``: its members'
    declared and actual sizes are bounded before they are unpacked)."""
    try:
        arrays = load_npz(source, "users.npz" if isinstance(source, bytes) else str(source))
    except ResdomError as e:
        raise ValueError(str(e)) from None
    header = json.loads(str(arrays.pop("header").item()))
    if not isinstance(header, dict):
        raise ValueError("users.npz: the header is not a JSON object")
    return header, arrays


def read_header(path: str | Path) -> dict[str, Any] | None:
    """The header of the ``users.npz`` at ``path``, or None where it is absent or unreadable (``stored.users_header``,
    torch-free for the report)."""
    return users_header(path)


def evidence_alphas(model: Diagnosable, alphas: Sequence[float]) -> list[float]:
    """The alphas of the evidence: ``alphas`` (checked), or [1.0] for a model without attention blocks."""
    return [1.0] if not model.attention_blocks() else check_alphas(alphas)


def sweep_ranks(
    model: Diagnosable, evalset: EvalSet, alphas: Sequence[float], layers: Sequence[int] | None,
    batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None, progress: bool = False,
    filter_seen: bool = True,
) -> dict[float, dict[str, np.ndarray]]:
    """{alpha: {"target", "target_unfiltered", "last"}}: 0-based ranks (n,) of every user at each alpha, as the
    alpha sweep computes them (``alpha.batch_ranks``) but without recording the blocks (model in inference
    mode)."""
    out = {}
    n = len(evalset)
    for a in alphas:
        parts: dict[str, list[np.ndarray]] = {"target": [], "target_unfiltered": [], "last": []}
        order: list[np.ndarray] = []
        with residual_scale(model, a, layers):
            for idx, items, targets in batches(model, evalset, batch_size, device, f"evidence alpha {a:g}", progress):
                r = batch_ranks(model, evalset, idx, items, targets, final_states(model, items), filter_seen)
                parts["target"].append(r["target"].cpu().numpy())
                parts["target_unfiltered"].append(r["target_unfiltered"].cpu().numpy())
                parts["last"].append(r["recent"][:, 0].cpu().numpy())
                order.append(idx)
        idx = np.concatenate(order) if order else np.zeros(0, dtype=np.int64)
        out[a] = {k: all_users(np.concatenate(v) if v else np.zeros(0, dtype=np.int64), n, idx)
                  for k, v in parts.items()}
    return out


def user_evidence(
    model: Diagnosable, split: SplitData, alphas: Sequence[float] = ALPHAS, layers: Sequence[int] | None = None,
    K: int = K_RECOVERY, *, sweep: Mapping[float, Mapping[str, np.ndarray]] | None = None,
    recoverable: np.ndarray | None = None, batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None,
    progress: bool = False,
) -> UserEvidence:
    """The per-user evidence of ``model`` on ``split.test`` (module docstring).

    ``sweep``: {alpha: {"target", "target_unfiltered", "last"}} 0-based ranks (n,) already computed on the test
    split at these ``layers`` (``AlphaResult.user_ranks``), ``recoverable``: R (n,) bool at ``K``
    (``SplitRecovery.recoverable_users``); what is not given is computed here."""
    model = check_model(model)
    evalset = split.test
    alphas = evidence_alphas(model, alphas)
    chosen = None if layers is None else [int(x) for x in layers]
    known = {a: dict(r) for a, r in (sweep or {}).items()}
    need = [a for a in dict.fromkeys([*alphas, 1.0]) if a not in known]  # alpha = 1: the (U,) arrays
    n = len(evalset)
    seen = split.filter_seen  # the data set's evaluation setting: target ranks as its evaluation ranks them
    with inference(model):
        known.update(sweep_ranks(model, evalset, need, chosen, batch_size, device, progress, seen))
        if recoverable is None:
            with residual_scale(model, 1.0, chosen):
                base = position_ranks(model, evalset, (0, *OFFSETS), batch_size, device, progress,
                                      "evidence recovery", filter_seen=seen)
            recoverable = recoverable_set(base, K)
    last = recent_items(evalset.inputs, np.arange(n), 1)
    freq = item_counts(split.train, split.n_items)[last]  # id 0 (no input item): 0
    one = known[1.0]

    def at_alphas(key: str) -> np.ndarray:
        return np.stack([known[a][key] for a in alphas]).astype(np.int64) + 1

    arrays = {
        "user": np.asarray(evalset.inputs.users, dtype=np.int64),
        "target_rank": one["target"] + 1, "target_rank_unfiltered": one["target_unfiltered"] + 1,
        "last_rank": one["last"] + 1, "last_seen": freq > 0, "last_freq": freq.astype(np.int64),
        "alpha_target_rank": at_alphas("target"), "alpha_target_rank_unfiltered": at_alphas("target_unfiltered"),
        "alpha_last_rank": at_alphas("last"), "recoverable": np.asarray(recoverable, dtype=bool),
    }
    header = {
        "version": VERSION, "split": SPLIT, "n_users": n, "n_items": int(split.n_items), "alphas": alphas,
        "rank_cap": RANK_CAP, "caps": dict(CAPS), "K": int(K), "offsets": list(OFFSETS), "filter_seen": seen,
        "layers": "all" if chosen is None else chosen,
        "ranks": "1-based, pessimistic; an entry equal to its array's cap means >= cap; last_rank and "
                 "alpha_last_rank unfiltered, target_rank and alpha_target_rank as evaluation ranks them (filtered by "
                 "the whole input unless filter_seen is false)",
    }
    return UserEvidence(header, arrays)


def recovery_from_evidence(header: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> list[dict[str, float]]:
    """Recovery(alpha) and HR@K at each alpha of a read ``users.npz`` (``read_users``): the test curve of
    ``recovery.json`` (Recovery undefined, NaN, where R is empty)."""
    K, R = header["K"], np.asarray(arrays["recoverable"], dtype=bool)
    out = []
    for i, a in enumerate(header["alphas"]):
        hit = arrays["alpha_target_rank"][i].astype(np.int64) <= K
        rec = float((hit & R).sum() / R.sum()) if R.any() else math.nan
        out.append({"alpha": a, RECOVERY_CURVE: rec, f"HR@{K}": float(hit.mean()) if hit.size else math.nan})
    return out
