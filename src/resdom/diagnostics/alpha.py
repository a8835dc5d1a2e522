"""Residual-scaling sweep (spec §4): ``h_i = alpha * x_i + Attn(x)_i`` at inference, alpha from 1.0 to 0.0.

For each alpha (set with ``residual_scale`` in all or the chosen layers, same trained weights) one recorded
pass over the set gives: pooled mixing ratios per stage ("all" real positions and "last" position),
HRLI@1 and HRL2I@1 (unfiltered), HR@10 and NDCG@10 filtered (the whole input's items, as evaluation) and
unfiltered. With ``filter_seen=False`` (a data set that keeps seen items at evaluation, ``SplitData.filter_seen``)
HR@10 and NDCG@10 are unfiltered too, as that data set's evaluation, and the result says ``"filter_seen": false``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from resdom.checks import residual_scales
from resdom.data.sequences import EvalSet
from resdom.diagnostics.common import (
    DEFAULT_BATCH,
    all_users,
    batches,
    check_model,
    inference,
    jsonable,
    ranks_of,
    recent_items,
    scores_at,
    seen_items,
)
from resdom.diagnostics.hrli import hrli_from_ranks
from resdom.diagnostics.mixing import MixingAccumulator, RecordStream, require_attention
from resdom.evaluation.ranking import mask_seen, metrics_from_ranks
from resdom.models.interface import (
    Diagnosable,
    block_width,
    final_states,
    recording,
    residual_scale,
    trained_scale,
)

if TYPE_CHECKING:
    import pandas as pd

ALPHAS: tuple[float, ...] = tuple(round(1.0 - 0.1 * i, 1) for i in range(11))  # 1.0, 0.9, ..., 0.0


def check_alphas(alphas: Sequence[float]) -> list[float]:
    """``alphas`` as floats by the one rule of residual scales (``checks.residual_scales``: numbers in [0, 1], at
    least one, none twice); a ValueError otherwise."""
    return list(residual_scales(alphas))


@dataclass
class AlphaResult:
    """rows: one dict per alpha: {"alpha", "mixing_all": {stage: r}, "mixing_last": {...}, "HRLI@1", "HRL2I@1",
    "HR@10", "NDCG@10", "HR@10_unfiltered", "NDCG@10_unfiltered"}.

    ``alpha`` multiplies the residual scale each block was trained with (``interface.residual_scale``).
    ``trained_scale``: one entry per block (a number, or one per channel for a per-channel gate), present only when
    some block was trained with a scale other than 1 (docs/remedies.md); the scale used at row alpha in a swept
    layer is then ``trained_scale * alpha``. Without it every trained scale is 1 and alpha is the scale used."""

    layers: str | list[int]
    rows: list[dict[str, Any]]
    n_users: int
    definition: str = "norm_of_sums"
    split: str | None = None
    trained_scale: list[Any] | None = None
    target_ranks: dict[float, np.ndarray] = field(default_factory=dict, repr=False)
    filter_seen: bool = True
    user_ranks: dict[float, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {} if self.trained_scale is None else {
            "trained_scale": self.trained_scale, "scale_used": "trained_scale * alpha"}
        if not self.filter_seen:
            extra["filter_seen"] = False
        return jsonable({"split": self.split, "n_users": self.n_users, "layers": self.layers,
                         "definition": self.definition, **extra, "rows": self.rows})

    def to_frame(self) -> pd.DataFrame:
        """pandas DataFrame, one row per alpha: ``alpha``, ``mixing_all_<stage>`` and ``mixing_last_<stage>`` (pooled
        ratios), then HRLI@1, HRL2I@1, HR@10, NDCG@10 and their unfiltered HR / NDCG."""
        import pandas as pd

        flat = []
        for r in self.rows:
            row = {"alpha": r["alpha"]}
            for scope in ("all", "last"):
                row.update({f"mixing_{scope}_{st}": v for st, v in r[f"mixing_{scope}"].items()})
            row.update({k: v for k, v in r.items() if k not in ("alpha", "mixing_all", "mixing_last")})
            flat.append(row)
        return pd.DataFrame(flat)


def batch_ranks(
    model: Diagnosable, evalset: EvalSet, idx: np.ndarray, items: torch.Tensor, targets: torch.Tensor,
    states: torch.Tensor, filter_seen: bool = True,
) -> dict[str, torch.Tensor]:
    """0-based pessimistic ranks of one batch from its final-position states (B, d), one score matrix:
    ``target`` (B,) as evaluation ranks it (filtered by the whole input's items unless ``filter_seen`` is False),
    ``target_unfiltered`` (B,), and ``recent`` (B, 2) unfiltered ranks of the last and the second-to-last input
    item (MISS where the input is shorter)."""
    recent = torch.from_numpy(np.stack([recent_items(evalset.inputs, idx, k) for k in (1, 2)], 1))
    wanted = torch.cat([targets[:, None], recent.to(targets.device)], 1)  # (B, 3)
    scores = scores_at(model, states, None)
    u = ranks_of(scores, wanted)
    if filter_seen:
        mask_seen(scores, seen_items(evalset.inputs, idx, items.device))  # now filtered
    return {"target": ranks_of(scores, targets), "target_unfiltered": u[:, 0], "recent": u[:, 1:]}


def alpha_row(
    model: Diagnosable, evalset: EvalSet, alpha: float, layers: Sequence[int] | None, definition: str,
    batch_size: int, device: str | torch.device | None, progress: bool, filter_seen: bool = True,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The sweep's row at one alpha and its per-user 0-based ranks, all users in order: ``target`` (n,) as
    evaluation ranks it (filtered unless ``filter_seen`` is False),
    ``target_unfiltered`` (n,), ``last`` (n,) unfiltered rank of the last input item (model already in inference
    mode)."""
    acc = MixingAccumulator(len(model.attention_blocks()), block_width(model), definition)
    filt, unfilt, last, order = [], [], [], []
    stream = RecordStream(model, acc)  # each record consumed as its block makes it
    with residual_scale(model, alpha, layers), recording(model, weights=definition != "norm_of_sums", sink=stream):
        for idx, items, targets in batches(model, evalset, batch_size, device, f"alpha {alpha:g}", progress):
            stream.start(items)
            states = final_states(model, items)
            stream.finish()
            r = batch_ranks(model, evalset, idx, items, targets, states, filter_seen)
            filt.append(r["target"].cpu())
            unfilt.append(r["target_unfiltered"].cpu())
            last.append(r["recent"].cpu().numpy())
            order.append(idx)
    n, idx = len(evalset), np.concatenate(order)
    acc.merge_ranks(n)
    mix = acc.result()
    ranks = all_users(torch.cat(filt).numpy(), n, idx)
    unranks = all_users(torch.cat(unfilt).numpy(), n, idx)
    recent = all_users(np.concatenate(last), n, idx)
    mf = metrics_from_ranks(torch.from_numpy(ranks), (10,))
    mu = metrics_from_ranks(torch.from_numpy(unranks), (10,))
    row: dict[str, Any] = {"alpha": alpha, "mixing_all": mix.pooled["all"], "mixing_last": mix.pooled["last"]}
    row.update(hrli_from_ranks(recent, (1, 2), (1,)))
    row.update({"HR@10": mf["HR@10"], "NDCG@10": mf["NDCG@10"],
                "HR@10_unfiltered": mu["HR@10"], "NDCG@10_unfiltered": mu["NDCG@10"]})
    return row, {"target": ranks, "target_unfiltered": unranks, "last": recent[:, 0]}


def alpha_sweep(
    model: Diagnosable, evalset: EvalSet, alphas: Sequence[float] = ALPHAS, layers: Sequence[int] | None = None,
    definition: str = "norm_of_sums", batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None,
    progress: bool = False, filter_seen: bool = True,
) -> AlphaResult:
    """One row per alpha in ``alphas``; ``layers`` = the blocks whose residual is scaled (default all).
    ``filter_seen``: the evaluation setting of HR@10 / NDCG@10 (module docstring)."""
    model = check_model(model)
    require_attention(model, "alpha")
    alphas = check_alphas(alphas)
    chosen = None if layers is None else [int(x) for x in layers]
    with inference(model):
        done = [alpha_row(model, evalset, a, chosen, definition, batch_size, device, progress, filter_seen)
                for a in alphas]
    return AlphaResult("all" if chosen is None else chosen, [row for row, _ in done], len(evalset), definition,
                       trained_scale=trained_scales(model),
                       target_ranks={a: r["target"] for a, (_, r) in zip(alphas, done)},
                       user_ranks={a: r for a, (_, r) in zip(alphas, done)}, filter_seen=filter_seen)


def trained_scales(model: Diagnosable) -> list[Any] | None:
    """Per block, the residual scale it was trained with (a float, or a list per channel); None when all are 1."""
    scales = [trained_scale(b) for b in model.attention_blocks()]
    plain = [s.tolist() if isinstance(s, torch.Tensor) else s for s in scales]
    return None if all(s == 1.0 for s in plain) else plain
