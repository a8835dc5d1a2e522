"""Training objectives (spec §2), as a small registry: name -> Objective.

Every objective reads the model's final states at real positions only: the states are gathered (``P`` rows)
*before* the product with the item embeddings, so padded positions cost no ``(B, L, N)`` scores. Scores are
over the real items 1..N (the padding row is not a class, as in evaluation).

- ``ce_all``: full-softmax CE at every real position (layout ``all``);
- ``ce_last``: full-softmax CE at the last position, every prefix a sample (layout ``last``);
- ``bce``: binary CE of the target against one sampled negative per position (original SASRec);
- ``ce_sampled``: softmax over the target and K negatives shared by the whole batch, drawn from Q
  (popularity or uniform), each logit corrected by ``- log Q(item)`` (sampled softmax, Jean et al. 2015);
  accidental hits (a negative equal to the target) are masked;
- ``mlm``: masked-item CE (BERT4Rec, spec §7): the model's ``training_states`` masks the window of layout
  ``window`` and keeps labels at the masked positions only; full-softmax CE there.

On CPU the full softmax (``full_cross_entropy``) never holds a (P, N) score matrix: it scores 64 rows at a time, so
memory is O(64 * N) plus the gradients, at any catalogue size; on any other device (a GPU) it scores all P rows in
one block, a (N, P) matrix, or blocks of at most 2^30 scores where that would be larger (docs/scaling.md).
(``TrainConfig.item_chunk``, an item-chunked variant that recomputed scores in backward, was slower and larger at 1M
items, and was removed; the field is accepted and ignored.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F

from resdom.models.base import SequentialRecommender, TrainBatch
from resdom.models.interface import prediction_states


@dataclass
class LossContext:
    """What an objective may need beyond the batch.

    n_negatives: ce_sampled's K. log_q: float (N,) log proposal probabilities of items 1..N (ce_sampled).
    """

    n_negatives: int = 256
    log_q: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)


class Objective:
    """A training loss. ``layout`` says which samples it trains on (see training.batches); the trainer reads its
    traits, never its name."""

    name: str = ""
    layout: Literal["all", "last", "window"] = "all"
    needs_negatives: bool = False  # batches carry one sampled negative per target (bce)
    needs_popularity: bool = False  # LossContext.log_q: the training items' popularity, what it samples by
    # a mean over targets that a batch cut into length groups reproduces exactly: nothing is drawn per call (the
    # sampled softmax draws its negatives, masked-item CE its masks, at every call)
    exact_in_groups: bool = False

    def loss(self, model: SequentialRecommender, batch: TrainBatch, hidden: torch.Tensor, ctx: LossContext
             ) -> torch.Tensor:
        """hidden (B, L, d) = model.encode(batch.items) -> scalar loss (mean over targets)."""
        raise NotImplementedError


def real_positions(hidden: torch.Tensor, batch: TrainBatch, model: SequentialRecommender | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(states (P, d), targets (P,) in 1..N) at the positions that have a target.

    With ``model`` the states are its prediction states (``interface.prediction_states``: the readout of column
    c is the prediction after the prefix ending at c), so every objective trains the readout it is evaluated by.

    Layout ``all``: targets (B, L) with 0 at padding (``mlm``: 0 where not masked); layout ``last``: targets (B,)
    at column L-1.
    """
    if model is not None:
        hidden = prediction_states(model, hidden, batch.items)
    if batch.targets.dim() == 1:
        return hidden[:, -1], batch.targets
    mask = batch.targets > 0
    return hidden[mask], batch.targets[mask]


CPU_ROWS = 64  # rows of the (rows, N) score blocks of _CrossEntropy on CPU: a block stays in the core's cache
BLOCK_FLOATS = 2**30  # elsewhere (a GPU) a block holds every row up to this many scores (4 GB in float32)


def block_rows(device_type: str, positions: int, n_items: int) -> int:
    """Rows of each score block of ``_CrossEntropy``: ``CPU_ROWS`` on CPU; elsewhere every position of the batch in
    one block, as many rows as keep it within ``BLOCK_FLOATS`` scores where they would not (at a million items one
    block of 256 x 200 positions was 205 GB: CUDA ran out of memory at the first batch). The registered data sets'
    blocks (at most 256 x 200 x 12,101 scores) are far inside: one block, as always."""
    if device_type == "cpu":
        return CPU_ROWS
    return max(1, min(positions, BLOCK_FLOATS // max(1, n_items)))



class _CrossEntropy(torch.autograd.Function):
    """mean_p (logsumexp_n h_p . e_n - h_p . e_{t_p}) over blocks of ``rows`` rows of h, with its gradients
    (S - Y) E / P and (S - Y)^T H / P over the P rows (S the softmax probabilities, Y the one-hot targets)
    computed in the same pass: backward only scales them by the upstream gradient (the loss is a scalar).

    ``F.cross_entropy`` of ``h @ emb.T`` in value and gradient without a (P, N) tensor: each block of scores of
    ``rows`` rows of h is made, turned into probabilities and both gradient products while it sits in cache (on CPU
    64 rows; elsewhere one block of all rows), then dropped; one exponential and three block products a score, none
    recomputed. The block is held transposed, items by rows (``emb @ h_b.T``, (N, rows)): the layout in which MKL
    runs the three products fastest on CPU (1.1-2x the (rows, N) layout at 12k-50k items, one thread), the same
    sums, so the same loss and gradients to float rounding (``tests/test_training_objectives.py``). Against
    ``F.cross_entropy`` on CPU: ``benchmarks/RESULTS.md``, section "ce"."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, emb: torch.Tensor, t: torch.Tensor, rows: int, grads: bool,
                low: torch.dtype | None = None) -> torch.Tensor:
        if low is not None:  # under autocast: the products in ``low``, everything else float32
            return _CrossEntropy.forward_low(ctx, h, emb, t, rows, grads, low)
        lse = torch.empty(h.shape[0], dtype=h.dtype, device=h.device)
        gh = torch.empty_like(h) if grads else h.new_empty(0)
        ge = torch.zeros_like(emb) if grads else emb.new_empty(0)
        block_rows = torch.arange(min(rows, h.shape[0]), device=h.device)
        for s in range(0, h.shape[0], rows):
            hb = h[s : s + rows]
            scores = emb @ hb.T  # (N, rows): column p holds row p's scores
            top = scores.amax(0, keepdim=True)
            z = scores.sub_(top).exp_().sum(0, keepdim=True)  # scores now exp(score - top)
            lse[s : s + rows] = z.log().add_(top).squeeze(0)
            if grads:
                g = scores.div_(z)  # the softmax probabilities of the block, (N, rows)
                g[t[s : s + rows], block_rows[: len(hb)]] -= 1.0
                torch.mm(g.T, emb, out=gh[s : s + rows])
                ge.addmm_(g, hb)
        ctx.save_for_backward(gh, ge)
        return (lse - (h * emb[t]).sum(-1)).mean()

    @staticmethod
    def forward_low(ctx, h: torch.Tensor, emb: torch.Tensor, t: torch.Tensor, rows: int, grads: bool,
                    low: torch.dtype) -> torch.Tensor:
        """``forward`` under autocast to ``low`` (bfloat16): the three block products take ``low`` operands (the
        kernels accumulate in float32, their results are rounded to ``low`` once) and everything else is float32:
        the scores are widened before the softmax and the log-sum-exp, the gradients are summed over the blocks and
        returned in float32 (autograd casts each to its input's dtype), the loss is float32."""
        with torch.autocast(h.device.type, enabled=False):
            P = h.shape[0]
            h32, e32 = h.float(), emb.float()
            el = emb.to(low)
            # the last block padded with zero rows: every block product has the same shape, so the kernels that
            # the low-precision products build per shape (oneDNN's primitives on CPU) are built once, not once for
            # every row count a batch ends with; a zero row adds nothing to the item gradient and its outputs are
            # dropped
            hl = F.pad(h.to(low), (0, 0, 0, (-P) % rows))
            lse = torch.empty(P, dtype=torch.float32, device=h.device)
            gh = torch.empty_like(h32) if grads else h32.new_empty(0)
            ge = torch.zeros_like(e32) if grads else e32.new_empty(0)
            block_rows = torch.arange(rows, device=h.device)
            for s in range(0, P, rows):
                n = min(rows, P - s)
                hb = hl[s : s + rows]
                scores = (el @ hb.T).float()  # (N, rows)
                top = scores.amax(0, keepdim=True)
                z = scores.sub_(top).exp_().sum(0, keepdim=True)
                lse[s : s + n] = z.log().add_(top).squeeze(0)[:n]
                if grads:
                    g = scores.div_(z)
                    g[t[s : s + n], block_rows[:n]] -= 1.0
                    gl = g.to(low)
                    gh[s : s + n] = (gl.T @ el)[:n]
                    ge += gl @ hb
            ctx.save_for_backward(gh, ge)
            return (lse - (h32 * e32[t]).sum(-1)).mean()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        gh, ge = ctx.saved_tensors
        scale = grad / gh.shape[0]
        return gh * scale, ge * scale, None, None, None, None


# torch.compiler.disable imports torch's compiler (torch._dynamo) where it is applied: at import, seconds of every
# command's start, and TORCHINDUCTOR_CACHE_DIR set in os.environ, a folder made in TMPDIR and a warnings filter added
# for a program that only imported resdom. torch._disable_dynamo is the same mark, the compiler imported at first call.
_eager_under_compile = getattr(torch, "_disable_dynamo", torch.compiler.disable)


@_eager_under_compile  # eager under torch.compile: its loop over blocks would be traced again for every row count
def full_cross_entropy(h: torch.Tensor, emb: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """h (P, d), emb (N, d) = rows of items 1..N, targets (P,) in 1..N -> mean CE over all N items (``_CrossEntropy``:
    on CPU no (P, N) tensor, blocks of ``CPU_ROWS`` rows; on any other device one block of all P rows, or blocks of
    at most ``BLOCK_FLOATS`` scores: ``block_rows``). Under
    ``torch.autocast`` (``train.precision`` bf16) the block products run in the autocast dtype and the softmax,
    log-sum-exp, loss and gradients' sums in float32 (``_CrossEntropy.forward_low``);
    without it every op is the float32 one it always was (the same bits)."""
    if h.shape[0] == 0:
        return h.sum() * 0.0
    grads = torch.is_grad_enabled() and (h.requires_grad or emb.requires_grad)  # else the value only
    rows = block_rows(h.device.type, h.shape[0], emb.shape[0])
    low = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else None
    if low is None:  # float32: exactly as before autocast was supported
        return _CrossEntropy.apply(h, emb, targets - 1, rows, grads)
    return _CrossEntropy.apply(h, emb, targets - 1, rows, grads, low)


class CEAll(Objective):
    name, exact_in_groups = "ce_all", True  # layout "all", the base's

    def loss(self, model, batch, hidden, ctx):
        h, t = real_positions(hidden, batch, model)
        return full_cross_entropy(h, model.item_embeddings()[1:], t)


class CELast(CEAll):
    name, layout = "ce_last", "last"


class MaskedItemCE(CEAll):
    """Labels only where the model masked its input (``training_states``), so CE at every position with a target."""

    name, layout, exact_in_groups = "mlm", "window", False


class BCE(Objective):
    name, layout, needs_negatives, exact_in_groups = "bce", "all", True, True

    def loss(self, model, batch, hidden, ctx):
        if batch.negatives is None:
            raise ValueError("bce needs batch.negatives")
        mask = batch.targets > 0
        h = prediction_states(model, hidden, batch.items)[mask]
        emb = model.item_embeddings()
        pos = (h * emb[batch.targets[mask]]).sum(-1)
        neg = (h * emb[batch.negatives[mask]]).sum(-1)
        return F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos)) + F.binary_cross_entropy_with_logits(
            neg, torch.zeros_like(neg)
        )


class CESampled(Objective):
    name, layout, needs_popularity = "ce_sampled", "all", True

    def loss(self, model, batch, hidden, ctx):
        if ctx.log_q is None:
            raise ValueError("ce_sampled needs LossContext.log_q")
        h, t = real_positions(hidden, batch, model)
        emb = model.item_embeddings()
        log_q = ctx.log_q.to(h.device)
        negs = draw_items(log_q, ctx.n_negatives).to(h.device) + 1  # (K,) in 1..N
        pos = (h * emb[t]).sum(-1, keepdim=True) - log_q[t - 1, None]  # (P, 1)
        neg = h @ emb[negs].T - log_q[negs - 1][None, :]  # (P, K)
        neg = neg.masked_fill(negs[None, :] == t[:, None], -torch.inf)  # accidental hits
        logits = torch.cat([pos, neg], 1)
        return F.cross_entropy(logits, torch.zeros(len(t), dtype=torch.long, device=h.device))


MULTINOMIAL_MAX = 2**24  # the most categories torch.multinomial takes ("number of categories cannot exceed 2^24")


def draw_items(log_q: torch.Tensor, k: int) -> torch.Tensor:
    """int64 (k,): ``k`` draws with replacement of indices 0..N-1 with probabilities ``exp(log_q)`` (N,).
    ``torch.multinomial`` up to ``MULTINOMIAL_MAX`` items (the draws every run has made), past it the inverse of
    the cumulative distribution (float64) at ``k`` uniform numbers: multinomial refuses a larger catalogue, and
    ce_sampled, the large-catalogue objective, stopped at its first batch there with torch's RuntimeError."""
    probs = log_q.exp()
    if probs.numel() <= MULTINOMIAL_MAX:
        return torch.multinomial(probs, k, replacement=True)
    cdf = torch.cumsum(probs.double(), 0)
    u = torch.rand(k, dtype=torch.float64, device=cdf.device) * cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp_max(probs.numel() - 1)


OBJECTIVES: dict[str, Objective] = {o.name: o for o in (CEAll(), CELast(), BCE(), CESampled(), MaskedItemCE())}
# train.objective's choices: the names of OBJECTIVES, in its order (tests/test_training_objectives.py holds them equal)
ObjectiveName = Literal["ce_all", "ce_last", "bce", "ce_sampled", "mlm"]


def get_objective(name: str) -> Objective:
    """The registered objective ``name``; ValueError listing the known ones otherwise."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown objective {name!r}; one of {', '.join(OBJECTIVES)}") from None


def popularity_log_q(item_counts: torch.Tensor, kind: str = "popularity") -> torch.Tensor:
    """item_counts (N,) training counts of items 1..N -> log Q (N,): add-one smoothed popularity, or uniform."""
    counts = item_counts.double() + 1.0 if kind == "popularity" else torch.ones_like(item_counts, dtype=torch.double)
    return (counts / counts.sum()).log().float()
