"""The training monitor: the cheap diagnostics (HRLI@1 / HRL2I@1 and the mixing ratio) on a fixed validation
subsample, for a curve of last-item reliance against epoch (``train.monitor_every``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from resdom.data.sequences import EvalSet, item_counts
from resdom.diagnostics.hrli import last_item_hit_rates
from resdom.diagnostics.mixing import has_attention, mixing_ratios
from resdom.models.interface import Diagnosable
from resdom.stored import seen_unseen
from resdom.training.trainer import EpochEnd


def cheap_diagnostics(model: Diagnosable, evalset: EvalSet, device: Any = None,
                      train_counts: np.ndarray | None = None) -> dict[str, Any]:
    """{"n_users", "HRLI@1", "HRL2I@1", "mixing_all": {stage: r}, "mixing_last": {stage: r}} of ``model``
    (unfiltered last-item hit rates; mixing by norm of sums, pooled over layers; None for a model without attention
    blocks, GRU4Rec); with ``train_counts`` (``data.sequences.item_counts`` of the training sequences) also
    "unseen_share" and "HRLI@1_seen" (HRLI@1 over the users whose last item occurs in training; None if none does).
    Leaves the model in eval mode."""
    if isinstance(model, torch.nn.Module):
        model.eval()
    hrli = last_item_hit_rates(model, evalset, ks=(1, 2), Ks=(1,), device=device, train_counts=train_counts)
    pooled = mixing_ratios(model, evalset, device=device).to_dict()["pooled"] if has_attention(model) else {}
    out = {"n_users": hrli.n_users, "HRLI@1": hrli.values["HRLI@1"], "HRL2I@1": hrli.values["HRL2I@1"],
           "mixing_all": pooled.get("all"), "mixing_last": pooled.get("last")}
    if train_counts is not None:
        table = seen_unseen(hrli.to_dict())
        out.update({"unseen_share": table["unseen_share"], "HRLI@1_seen": table["HRLI@1_seen"]})
    return out


def epoch_monitor(end: EpochEnd) -> None:
    """The training monitor, an epoch hook of ``training.trainer.fit`` (``fit(..., hooks=(epoch_monitor,))``): every
    ``train.monitor_every`` epochs, ``cheap_diagnostics`` of the current model on ``train.monitor_users`` validation
    users drawn with ``train.seed``, with the items' training frequencies, into the epoch's record as
    ``"monitor"``; nothing in the other epochs or with ``monitor_every`` 0."""
    cfg = end.train_cfg
    if not cfg.monitor_every or end.epoch % cfg.monitor_every:
        return
    split = end.split
    end.record["monitor"] = cheap_diagnostics(end.model, split.valid.subset(cfg.monitor_users, cfg.seed),
                                              end.device, train_counts=item_counts(split.train, split.n_items))
