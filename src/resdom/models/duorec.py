"""DuoRec (Qiu et al., WSDM 2022): SASRec plus a contrastive loss between two views of each sequence (spec §2).

Loss = objective + lambda * InfoNCE(z, z'), z the last-position state (column L-1, left padding). Views
(``cfg.duorec_views``):

- ``unsup``: z = the training pass, z' = a second pass over the same input under another dropout mask
  (the reference paper's code, with ``ce_all``);
- ``sup``:   z = the training pass, z' = the pass over ``batch.sup_items``, another training input with the
  same target (DuoRec's supervised positive sampling);
- ``both``:  BSARec's code (``ssl="us_x"``, with ``ce_last``): z = a second dropout pass over the input,
  z' = the pass over ``batch.sup_items``; the training pass itself is not in the contrastive term.

InfoNCE follows DuoRec's ``info_nce`` with ``sim="dot"``: over the 2N views of the batch, each view's
positive is its partner and the other 2N - 2 views are negatives (same-target pairs are not masked, as in
the reference code).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F

from resdom.errors import ResdomError
from resdom.models.base import SequentialRecommender, TrainBatch
from resdom.models.config import DuoRecConfig

NCE_BLOCK_FLOATS = 2**26  # the (2N, 2N) similarities of a larger batch are made a block of rows at a time


def info_nce(z1: torch.Tensor, z2: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """z1, z2 (N, d) paired views -> scalar mean InfoNCE over the 2N views (dot similarity / tau).

    For view i of ``cat(z1, z2)`` the logits are its similarities to the other 2N - 1 views; the positive
    is its partner (i + N mod 2N). Up to ``NCE_BLOCK_FLOATS`` similarities (N = 4,096: 256 MB) in one (2N, 2N)
    matrix, as DuoRec's code; past it (a batch of 50,000 made 40 GB of similarities, and as much again for the
    softmax and its gradient) ``_BlockedInfoNCE``, a block of rows at a time, the same loss and gradients to
    float rounding.
    """
    n = z1.shape[0]
    z = torch.cat([z1, z2], dim=0)  # (2N, d)
    if (2 * n) ** 2 > NCE_BLOCK_FLOATS:
        with torch.autocast(z.device.type, enabled=False):
            wide = z.float() if z.dtype in (torch.float16, torch.bfloat16) else z  # float32 at least
            return _BlockedInfoNCE.apply(wide, float(tau), max(1, NCE_BLOCK_FLOATS // (2 * n)))
    sim = (z @ z.T) / tau  # (2N, 2N)
    self_mask = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    sim = sim.masked_fill(self_mask, float("-inf"))
    labels = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, labels)


class _BlockedInfoNCE(torch.autograd.Function):
    """``info_nce`` of the views ``z`` (2N, d) (float32 or float64), ``rows`` views a block: each block's
    similarities to every view (rows, 2N), its softmax, loss and both gradient products made while it is in
    memory, then dropped; the gradient (2N, d) is kept for backward (which only scales it by the upstream gradient)."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, tau: float, rows: int) -> torch.Tensor:
        m = z.shape[0]
        half = m // 2
        grad = torch.zeros_like(z)
        total = z.new_zeros(())
        for s in range(0, m, rows):
            zb = z[s : s + rows]
            r = torch.arange(zb.shape[0], device=z.device)
            sim = (zb @ z.T) / tau  # (rows, 2N)
            sim[r, s + r] = -math.inf  # a view is not its own negative
            labels = (s + r + half) % m
            top = sim.amax(1, keepdim=True)
            p = sim.sub(top).exp_()
            norm = p.sum(1, keepdim=True)
            total += (norm.log().squeeze(1) + top.squeeze(1) - sim[r, labels]).sum()
            p.div_(norm)
            p[r, labels] -= 1.0  # softmax minus the one-hot positive: d loss_i / d sim_i.
            grad[s : s + rows] += (p @ z) / tau  # through the block's own views
            grad += (p.T @ zb) / tau  # through every view as a column
        ctx.save_for_backward(grad / m)
        return total / m

    @staticmethod
    def backward(ctx, upstream: torch.Tensor):  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        return grad * upstream, None, None


class DuoRec(SequentialRecommender):
    """SASRec encoder with DuoRec's contrastive regulariser as ``auxiliary_loss``.

    Defaults (``experiments.PROTOCOL_DEFAULTS``): BSARec's code base under LOO; under GTS the reference paper's
    DuoRec (its block, ``PaperDuoRecBlock``: attention MHA(Q, Q, Q) on Q = LN_a(X) with dropout on its output; max
    length 200, the unsupervised view, ``ce_all``, up to 300 epochs). ``duorec-tts`` keeps the earlier GTS DuoRec,
    on time-to-split's SASRec block (keys and values from the raw X, no dropout on A).
    """

    name: ClassVar[str] = "duorec"
    cfg: DuoRecConfig

    def __init__(self, cfg: DuoRecConfig) -> None:
        super().__init__(cfg)
        self.views = VIEWS[cfg.duorec_views]  # the contrastive pair, chosen once

    def needs_partners(self) -> bool:
        return self.views is not unsup_views

    def last_state(self, items: torch.Tensor) -> torch.Tensor:
        """items (B, L) left-padded -> (B, d) the prediction state at column L-1 (the readout of a fresh pass,
        dropout as in the mode)."""
        return self.readout(self.encode(items, self.readout_width()), items)[:, -1]

    def sup_items(self, batch: TrainBatch) -> torch.Tensor:
        """The supervised view's input (B, L2); a ResdomError where the batch has none."""
        if batch.sup_items is None:
            raise ResdomError(
                f"model.duorec_views={self.cfg.duorec_views!r} needs the supervised view: the training batch has "
                "no sup_items (another training sequence with the same target); use duorec_views='unsup' or a "
                "trainer that fills sup_items"
            )
        return batch.sup_items

    def auxiliary_loss(self, batch: TrainBatch, hidden: torch.Tensor) -> torch.Tensor:
        """batch.items (B, L), hidden = encode(batch.items) (B, L, d) -> scalar lambda * InfoNCE."""
        z1, z2 = self.views(self, batch, hidden)
        return self.cfg.duorec_lambda * info_nce(z1, z2, self.cfg.duorec_tau)


# ``duorec_views`` -> the pair (z, z') (B, d) each, from the model, the batch and the training pass's states
def unsup_views(model: DuoRec, batch: TrainBatch, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The training pass, and a second pass over the same input under another dropout mask."""
    return model.readout(hidden, batch.items)[:, -1], model.last_state(batch.items)


def sup_views(model: DuoRec, batch: TrainBatch, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The training pass, and the pass over another training input with the same target."""
    return model.readout(hidden, batch.items)[:, -1], model.last_state(model.sup_items(batch))


def both_views(model: DuoRec, batch: TrainBatch, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """BSARec's us_x: a second dropout pass over the input, and the pass over the supervised input."""
    sup = model.sup_items(batch)
    return model.last_state(batch.items), model.last_state(sup)


VIEWS: dict[str, Callable[[DuoRec, TrainBatch, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
    "unsup": unsup_views, "sup": sup_views, "both": both_views,
}
