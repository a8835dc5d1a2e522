"""Miss recovery (spec §4).

At alpha = 1 and K = 10, a user's prediction is read at the final column (L-1, "position L") and at columns
L-1-k for k = 1, 2, 3 ("positions L-1, L-2, L-3": the output state at index last - k of the same input;
inputs are left-padded, so those are the states after the user's (k+1)-th most recent item). Every
prediction is ranked against the same target with the same seen-item filter as the final position: all
items of the user's whole input (as evaluation), also for the earlier positions, so an earlier position is
not credited for items it could not have filtered. Users with fewer than k+1 items are not hit at offset k.
With ``filter_seen=False`` (a data set whose evaluation keeps seen items, ``SplitData.filter_seen``) no position
filters, as that data set's evaluation, and the result says ``"filter_seen": false``.

- recoverable set R = users whose final position misses (rank >= K) and some offset k hits;
- per-offset shares = #(hit at L-k and miss at L) / #evaluated users;
- Recovery(alpha) = share of R that the final position hits at alpha (0 at alpha = 1 by definition);
- alpha* = argmax Recovery on validation subject to HR@10(alpha) >= (1 - eps) HR@10(1), the paper's tie rule:
  over the alphas in increasing order the first with the highest recovery wins (ties go to the smaller alpha),
  and an empty R counts as Recovery 0 at every alpha (so alpha* is then the smallest alpha passing the guard,
  not 1). Test metrics are then reported at alpha*.

BERT4Rec reads its prediction at an appended ``[MASK]`` (column L-1 of ``encode``); column L-1-k sits on its
k-th most recent input item, so offset k is hit only where that column holds an item
(``interface.state_tokens``). A query-token readout reads offset k from the prefix without the last k items,
encoded on its own (``interface.prefix_needs_own_pass``). BSARec's columns are those of the same input too, but
its frequency filter mixes the whole window into every column, so "the state after the (k+1)-th most recent
item" has there seen the later items as well (spec §4's definition, "columns of the same input", holds). A model
without attention blocks (GRU4Rec) has no residual to scale: its recovery is alpha-free (the recoverable set and
the per-offset shares; the curve holds alpha = 1 only, alpha* = 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from resdom.data.sequences import EvalSet
from resdom.diagnostics.alpha import ALPHAS, check_alphas
from resdom.diagnostics.common import (
    DEFAULT_BATCH,
    MISS,
    all_users,
    batches,
    check_model,
    inference,
    jsonable,
    rank_items,
    seen_items,
)
from resdom.evaluation.ranking import KS, metrics_from_ranks
from resdom.models.interface import (
    Diagnosable,
    final_states,
    last_prediction_states,
    prefix_needs_own_pass,
    residual_scale,
    state_tokens,
)
from resdom.records import select_alpha

if TYPE_CHECKING:
    import pandas as pd

OFFSETS = (1, 2, 3)
K_RECOVERY = 10  # the cutoff K of the recoverable set and of Recovery(alpha) (spec §4)


def position_ranks(
    model: Diagnosable, evalset: EvalSet, offsets: Sequence[int] = (0, *OFFSETS), batch_size: int = DEFAULT_BATCH,
    device: str | torch.device | None = None, progress: bool = False, desc: str = "recovery",
    filter_seen: bool = True,
) -> np.ndarray:
    """int64 (n, len(offsets)): filtered (unless ``filter_seen`` is False) rank of the target read at column L-1-k
    for each k in ``offsets``.

    Read from the model's prediction states (``interface.prediction_states``): with a readout other than the
    last state, column L-1-k is the readout of the prefix that ends at it (the mean of its last k' real states,
    or the attention pooling over its real states), never a raw encoder state; a model whose query token stands
    after the input (``interface.prefix_needs_own_pass``) has offset k read from the prediction of the prefix
    without the last k items, encoded on its own (one more pass per offset).

    For k >= 1, columns that hold no token (``state_tokens``: padding) get MISS. A batch narrower than
    ``max(offsets) + 1`` columns is left-padded to that width (at most the model's ``max_len``; columns beyond
    the window get MISS), so every user's ranks are those of any batch width: BERT4Rec's column L-1-k sits on the
    k-th most recent item, which is real for a user of exactly k items. Runs at the model's current alphas, in
    inference mode.
    """
    out, order = [], []
    own = prefix_needs_own_pass(model)
    for idx, items, targets in batches(model, evalset, batch_size, device, desc, progress):
        width = max(items.shape[1], min(max(offsets) + 1, model.max_len))
        items = torch.nn.functional.pad(items, (width - items.shape[1], 0))  # left: padding columns
        hidden = last_prediction_states(model, items, 1 if own else max(offsets) + 1)  # read at L-1-k only
        tokens = items if own else state_tokens(model, items)  # own: column c real where the prefix ends on an item
        seen = seen_items(evalset.inputs, idx, items.device) if filter_seen else None
        L = items.shape[1]
        cols = []
        for k in offsets:
            c = L - 1 - k
            if c < 0:
                cols.append(torch.full_like(targets, MISS))
                continue
            state = final_states(model, torch.nn.functional.pad(items[:, : c + 1], (k, 0))) if own and k else \
                hidden[:, c]
            r = rank_items(model, state, targets, seen)
            real = tokens[:, c] > 0
            cols.append(r if k == 0 else torch.where(real, r, torch.full_like(r, MISS)))
        out.append(torch.stack(cols, 1).cpu().numpy())
        order.append(idx)
    local = np.concatenate(out) if out else np.zeros((0, len(offsets)), dtype=np.int64)
    return all_users(local, len(evalset), np.concatenate(order) if order else np.zeros(0, dtype=np.int64))


def final_ranks(
    model: Diagnosable, evalset: EvalSet, alpha: float, layers: Sequence[int] | None, batch_size: int,
    device: str | torch.device | None, progress: bool, filter_seen: bool = True,
) -> np.ndarray:
    """int64 (n,): filtered (unless ``filter_seen`` is False) final-position ranks of the targets at ``alpha``."""
    with residual_scale(model, alpha, layers):
        return position_ranks(model, evalset, (0,), batch_size, device, progress, f"recovery alpha {alpha:g}",
                              filter_seen)[:, 0]


@dataclass
class SplitRecovery:
    """The recoverable set of one split and its Recovery(alpha) curve."""

    n_users: int
    recoverable: int
    recoverable_share: float
    offset_shares: dict[str, float]
    curve: list[dict[str, float]]
    ranks_by_alpha: dict[float, np.ndarray]
    recoverable_users: np.ndarray | None = None  # bool (n,): the users of R, in user order

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"n_users": self.n_users, "recoverable": self.recoverable,
                         "recoverable_share": self.recoverable_share, "offset_shares": self.offset_shares,
                         "curve": self.curve})


# recovery.json of a model whose offsets are read from each prefix encoded alone (a query token after the input)
# says so: a file without it, of such a model, read its offsets from raw item columns (resdom before 2026-12-07;
# records.older_reading names such a file)
OFFSETS_READ, PREFIX_PASSES = "offsets_read", "prefix passes"


def recoverable_set(base: np.ndarray, K: int = K_RECOVERY) -> np.ndarray:
    """base int (n, 1 + len(OFFSETS)): 0-based filtered target ranks read at columns L-1, L-1-k (``position_ranks``
    at alpha = 1) -> bool (n,): R, the users the final position misses (rank >= K) and some offset k hits."""
    return (base[:, 0] >= K) & (base[:, 1:] < K).any(1)


def split_recovery(
    model: Diagnosable, evalset: EvalSet, alphas: Sequence[float], K: int = K_RECOVERY,
    layers: Sequence[int] | None = None, batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None,
    progress: bool = False, known: Mapping[float, np.ndarray] | None = None, filter_seen: bool = True,
) -> SplitRecovery:
    """Recoverable set at alpha = 1 and Recovery(alpha) / HR@K(alpha) for each alpha (model in inference mode).
    ``known``: {alpha: final-position ranks (n,)} already computed on this split at these layers (the alpha
    sweep's), used instead of ranking again."""
    n = len(evalset)
    with residual_scale(model, 1.0, layers):
        base = position_ranks(model, evalset, (0, *OFFSETS), batch_size, device, progress, filter_seen=filter_seen)
    final_hit = base[:, 0] < K
    offset_hit = base[:, 1:] < K  # (n, 3)
    recoverable = recoverable_set(base, K)
    shares = {f"L-{k}": float((offset_hit[:, i] & ~final_hit).mean()) if n else float("nan")
              for i, k in enumerate(OFFSETS)}
    curve, by_alpha = [], {}
    for a in alphas:
        if a == 1.0:
            ranks = base[:, 0]
        elif known is not None and a in known:
            ranks = known[a]
        else:
            ranks = final_ranks(model, evalset, a, layers, batch_size, device, progress, filter_seen)
        by_alpha[a] = ranks
        hit = ranks < K
        rec = float((hit & recoverable).sum() / recoverable.sum()) if recoverable.any() else float("nan")
        curve.append({"alpha": a, "recovery": rec, f"HR@{K}": float(hit.mean()) if n else float("nan")})
    return SplitRecovery(n, int(recoverable.sum()), float(recoverable.mean()) if n else float("nan"), shares, curve,
                         by_alpha, recoverable)


@dataclass
class RecoveryResult:
    """Validation and test recovery, alpha* (chosen on validation) and test metrics at alpha*."""

    K: int
    eps: float
    valid: SplitRecovery
    test: SplitRecovery
    alpha_star: float
    test_at_alpha_star: dict[str, float]
    layers: str | list[int] = "all"
    split: str = "test"
    filter_seen: bool = True
    prefix_passes: bool = False  # the offsets read from each prefix encoded alone (``prefix_needs_own_pass``)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"split": self.split, "n_users": self.test.n_users, "K": self.K, "eps": self.eps,
                         "layers": self.layers, "valid": self.valid.to_dict(), "test": self.test.to_dict(),
                         "alpha_star": self.alpha_star, "test_at_alpha_star": self.test_at_alpha_star,
                         **({} if self.filter_seen else {"filter_seen": False}),
                         **({OFFSETS_READ: PREFIX_PASSES} if self.prefix_passes else {})})

    def to_frame(self) -> pd.DataFrame:
        """pandas DataFrame, one row per (split, alpha): ``split`` (valid, test), ``alpha``, ``recovery`` (share of the
        recoverable misses hit), ``HR@K``, ``alpha_star`` (whether it is the alpha chosen on valid)."""
        import pandas as pd

        rows = [(name, r["alpha"], r["recovery"], r[f"HR@{self.K}"], r["alpha"] == self.alpha_star)
                for name, sr in (("valid", self.valid), ("test", self.test)) for r in sr.curve]
        return pd.DataFrame(rows, columns=["split", "alpha", "recovery", f"HR@{self.K}", "alpha_star"])


def miss_recovery(
    model: Diagnosable, valid: EvalSet, test: EvalSet, alphas: Sequence[float] = ALPHAS, K: int = K_RECOVERY,
    eps: float = 0.01, layers: Sequence[int] | None = None, batch_size: int = DEFAULT_BATCH,
    device: str | torch.device | None = None, progress: bool = False,
    known_ranks: Mapping[str, Mapping[float, np.ndarray]] | None = None, filter_seen: bool = True,
) -> RecoveryResult:
    """spec §4 miss recovery: alpha* selected on ``valid``, everything reported on ``test`` as well.
    ``known_ranks``: {"valid" | "test": {alpha: final-position target ranks}} from an alpha sweep of the same
    model, split and ``layers`` (``diagnostics.alpha.AlphaResult.target_ranks``, computed with the same
    ``filter_seen``), reused, not recomputed. ``filter_seen``: the evaluation setting (module docstring)."""
    model = check_model(model)
    alphas = check_alphas(alphas)
    if not model.attention_blocks():  # nothing to scale (GRU4Rec): alpha-free
        alphas = [1.0]
    if 1.0 not in alphas:
        alphas = [1.0, *alphas]
    if K < 1 or not 0.0 <= eps < 1.0:
        raise ValueError(f"need K >= 1 and 0 <= eps < 1 (got K={K}, eps={eps})")
    chosen = None if layers is None else [int(x) for x in layers]
    with inference(model):
        known = known_ranks or {}
        v = split_recovery(model, valid, alphas, K, chosen, batch_size, device, progress, known.get("valid"),
                           filter_seen)
        t = split_recovery(model, test, alphas, K, chosen, batch_size, device, progress, known.get("test"),
                           filter_seen)
    a_star = select_alpha(v.curve, K, eps)
    ranks = t.ranks_by_alpha[a_star]
    at_star = metrics_from_ranks(torch.from_numpy(ranks), tuple(sorted({*KS, K})))
    rec_row = next(r for r in t.curve if r["alpha"] == a_star)
    at_star.update({"alpha": a_star, "recovery": rec_row["recovery"],
                    f"HR@{K}_at_alpha_1": next(r for r in t.curve if r["alpha"] == 1.0)[f"HR@{K}"]})
    return RecoveryResult(K, eps, v, t, a_star, at_star, "all" if chosen is None else chosen,
                          filter_seen=filter_seen, prefix_passes=prefix_needs_own_pass(model))
