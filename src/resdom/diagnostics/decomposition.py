"""The norm-based decomposition of an attention block (spec §4; Kobayashi et al. 2021) and the mixing ratios of
one block's record, under both definitions. Aggregation over users and layers is ``resdom.diagnostics.mixing``.

Per layer, query position i and key position j, with s the branch scale (BSARec's 1 - a, else 1)::

    g_ij(Attn) = s * sum_h a^h_ij f^h(x_j)                          f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h
    g_ij(+Res) = g_ij(Attn) + [i == j] * s * alpha * x_i           (pre-LN: the raw x_i; no +LN stage)
    g_ij(+LN)  = gamma * (g_ij(+Res) - mean_d g_ij(+Res)) / sqrt(Var_d(z_i) + eps)

(x_i is what the residual carries: LN_a(x_i) in the query-LN block; alpha is the record's residual scale, the one
the pass used: a float, or a (d,) vector for a per-channel residual gate, multiplied channel-wise.)
Bias terms: ``s * b_O`` (Attn, +Res) and
``s * (gamma * (b_O - mean b_O) / sqrt(Var(z_i) + eps) + beta)`` (+LN); the terms plus the bias terms rebuild
``s * attn_out``, ``s * z`` and ``s * LN(z)`` (= H1 minus BSARec's frequency branch). The factor s cancels in
every ratio.

Mixing ratio at position i: ``||sum_{j!=i} g_ij|| / (||sum_{j!=i} g_ij|| + ||g_ii||)`` (``norm_of_sums``, the
default) or ``sum_{j!=i} ||g_ij|| / sum_j ||g_ij||`` (``sum_of_norms``). ``norm_of_sums`` needs no (B, L, L, d)
tensor: ``sum_j g_ij(Attn) = s * (attn_out_i - b_O)``, ``g_ii`` comes from the diagonal of the attention
weights and the head values, and the +LN stage is linear in g. ``sum_of_norms`` needs none either: off the
diagonal ||g_ij||^2 is a quadratic form in the attention weights with the Gram matrix of key j's head values
(B L^2 H^2 work). A ratio with a zero denominator is 0; the first real position (it attends only to itself
under the causal mask) has r = 0 exactly; padding is excluded.

A bidirectional block (``rec.causal`` False: BERT4Rec) has no causal mask: query i may attend to every real key,
before and after it, so "others" are all real positions j != i and no position is special (the first real
position's r is computed like any other; only a row's single real token, which sees nothing else, has r = 0).
The terms and the rebuild are the same: they never assumed j <= i.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from resdom.diagnostics.common import first_real
from resdom.models.block import BlockRecord

DEFINITIONS: tuple[str, ...] = ("norm_of_sums", "sum_of_norms")
RATIO_ROWS = 16384  # norm_of_sums works through the positions in chunks of this many rows, bounding its (rows, d)
# intermediates (4 MB each at d 64); every step is row-wise, so the numbers are those of one chunk. Measured
# against 2,048 (interleaved, both orders): 1.13-1.21x a forward pass at max length 50 against 1.21-1.27x, and
# 1.12x against 1.15-1.17x at 200 (fewer, larger row-wise ops; their fixed cost weighed more than the cache)
RATIO_GATHER_BELOW = 0.5  # norm_of_sums gathers the positions with a ratio below this share of the batch (mostly
# padding), else computes every position and zeroes the rest (length-sorted batches are mostly real)


def stages_of(rec: BlockRecord) -> tuple[str, ...]:
    """("Attn", "+Res", "+LN") for post-LN blocks, ("Attn", "+Res") for pre-LN."""
    return ("Attn", "+Res") if rec.norm_first else ("Attn", "+Res", "+LN")


# ---------------------------------------------------------------------------------------------------------
# The decomposition itself


def full_record(rec: BlockRecord) -> tuple[torch.Tensor, torch.Tensor]:
    """(attn_weights, head_values) of a full record; a light record (``recording(model, weights=False)``) keeps
    neither."""
    if rec.attn_weights is None or rec.head_values is None:
        raise ValueError("this needs a full record (recording(model, weights=True)): a light record keeps only the "
                         "self terms")
    return rec.attn_weights, rec.head_values


def post_ln(rec: BlockRecord) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(gamma, beta, eps) of the LayerNorm a post-LN block applies to z; a pre-LN block has none."""
    if rec.ln_weight is None or rec.ln_bias is None or rec.ln_eps is None:
        raise ValueError("a pre-LN block has no +LN stage")
    return rec.ln_weight, rec.ln_bias, rec.ln_eps


def self_terms(rec: BlockRecord) -> torch.Tensor:
    """g_ii(Attn) = s * sum_h a^h_ii f^h(x_i): (B, L, d) from the diagonal of the weights and the head values (a
    light record holds the sum itself)."""
    if rec.attn_self is not None:
        return rec.attn_self if rec.branch_scale == 1.0 else rec.attn_self * rec.branch_scale
    weights, hv = full_record(rec)
    diag = torch.diagonal(weights, dim1=-2, dim2=-1)  # (B, H, L)
    own = diag[:, 0, :, None] * hv[:, 0]  # a loop over heads reads each head's values once (faster than einsum)
    for h in range(1, hv.shape[1]):
        own.addcmul_(diag[:, h, :, None], hv[:, h])
    return own if rec.branch_scale == 1.0 else own.mul_(rec.branch_scale)


def residual_term(rec: BlockRecord, own: torch.Tensor) -> torch.Tensor:
    """g_ii(+Res) = g_ii(Attn) + s * alpha * x_i (B, L, d); alpha a float or a per-channel (d,) scale."""
    return _with_residual(rec, own, rec.x)


def _with_residual(rec: BlockRecord, own: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """own + s * alpha * x for self terms and residual inputs of the same positions (..., d)."""
    if isinstance(rec.alpha, torch.Tensor):
        return own + (rec.branch_scale * rec.alpha.to(x.dtype)) * x
    return torch.add(own, x, alpha=rec.branch_scale * rec.alpha)


def ln_inverse_scale(rec: BlockRecord) -> torch.Tensor:
    """(B, L, 1): 1 / sqrt(Var_d(z_i) + eps), the real LayerNorm's scale (biased variance, as LayerNorm)."""
    z = rec.z
    return torch.rsqrt(z.var(-1, unbiased=False, keepdim=True) + post_ln(rec)[2])


def ln_linear(rec: BlockRecord, v: torch.Tensor, inv: torch.Tensor | float) -> torch.Tensor:
    """The +LN stage's linear map ``gamma * (v - mean_d v) * inv``; v (..., d), inv broadcastable to v."""
    return post_ln(rec)[0] * (v - v.mean(-1, keepdim=True)) * inv


def bias_terms(rec: BlockRecord, stage: str) -> torch.Tensor:
    """(B, L, d): what the stage's output holds beside sum_j g_ij (b_O, and after LN: its share and beta)."""
    s = rec.branch_scale
    b = rec.out_bias.to(rec.z.dtype).expand_as(rec.z)
    if stage in ("Attn", "+Res"):
        return s * b
    if stage == "+LN" and not rec.norm_first:
        return s * (ln_linear(rec, b, ln_inverse_scale(rec)) + post_ln(rec)[1])
    raise ValueError(f"unknown stage {stage!r} for this block (stages: {stages_of(rec)})")


def attention_terms(rec: BlockRecord, stage: str, queries: slice | None = None) -> torch.Tensor:
    """g_ij at ``stage`` for query positions ``queries`` (default all): (B, c, L, d), rows i, columns j.

    Materialises c * L vectors per user (for tests and inspection; the ratios never need it).
    """
    queries = slice(0, rec.z.shape[1]) if queries is None else queries
    q0 = queries.start or 0
    s = rec.branch_scale
    weights, values = full_record(rec)
    g = s * torch.einsum("bhij,bhjd->bijd", weights[:, :, queries, :], values)
    if stage == "Attn":
        return g
    c = g.shape[1]
    rows = torch.arange(c, device=g.device)
    g[:, rows, q0 + rows, :] += s * rec.alpha * rec.x[:, queries, :]
    if stage == "+Res":
        return g
    if stage == "+LN" and not rec.norm_first:
        return ln_linear(rec, g, ln_inverse_scale(rec)[:, queries, None, :])
    raise ValueError(f"unknown stage {stage!r} for this block (stages: {stages_of(rec)})")


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    return torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny), torch.zeros_like(num))


def norm_of_sums(rec: BlockRecord, items: torch.Tensor) -> dict[str, torch.Tensor]:
    """{stage: r (B, L)} by norm of sums; items (B, L) left-padded; padding rows hold 0, and in a causal block the
    first real position's r is 0.

    As the decomposition's own sums, but leaving out the +LN stage's 1/sqrt(Var(z_i)+eps): a positive factor common to
    both terms of position i, it cancels in r_i (and costs a variance per position). Computed at the positions
    that have a ratio only where they are under ``RATIO_GATHER_BELOW`` of the batch (a batch of mixed lengths is
    mostly padding), else at every position (no gathers), the others set to 0: the same numbers.
    """
    B, L, d = rec.z.shape
    keep = ~_excluded(rec, items).flatten()
    gather = float(keep.float().mean()) < RATIO_GATHER_BELOW  # mostly padding: only the positions with a ratio
    # flat (b, i) of the positions with a ratio, where gathered
    rows = torch.nonzero(keep).flatten() if gather else keep.new_empty(0, dtype=torch.long)

    def take(t: torch.Tensor) -> torch.Tensor:  # (B, L, d) -> (N, d) at ``rows`` (every position: (B * L, d))
        return t.reshape(B * L, d).index_select(0, rows) if gather else t.reshape(B * L, d)

    own, out, x = take(self_terms(rec)), take(rec.attn_out), take(rec.x)
    n = own.shape[0]
    parts = [_stage_norms(rec, own[i : i + RATIO_ROWS], out[i : i + RATIO_ROWS], x[i : i + RATIO_ROWS])
             for i in (range(0, n, RATIO_ROWS) if n else [0])]
    norms = {st: tuple(torch.cat([p[st][k] for p in parts]) for k in (0, 1)) for st in parts[0]}
    if gather:
        return {st: rec.z.new_zeros(B * L).index_copy_(0, rows, _ratio(a, a + b)).view(B, L)
                for st, (a, b) in norms.items()}
    return {st: torch.where(keep, _ratio(a, a + b), 0.0).view(B, L) for st, (a, b) in norms.items()}


def _stage_norms(rec: BlockRecord, own: torch.Tensor, attn_out: torch.Tensor, x: torch.Tensor
                 ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{stage: (||sum_{j!=i} g_ij||, ||g_ii||)} (n,) each, from the self terms ``own``, A and x of n positions
    (n, d) each; every step is row-wise."""
    others = torch.sub(attn_out, rec.out_bias)
    if rec.branch_scale != 1.0:
        others.mul_(rec.branch_scale)
    others.sub_(own)
    own_res = _with_residual(rec, own, x)
    no = torch.linalg.vector_norm(others, dim=-1)
    norms = {"Attn": (no, torch.linalg.vector_norm(own, dim=-1)),
             "+Res": (no, torch.linalg.vector_norm(own_res, dim=-1))}
    if not rec.norm_first:
        gamma = post_ln(rec)[0]
        norms["+LN"] = (_centred_norm(others, gamma), _centred_norm(own_res, gamma))
    return norms


def _excluded(rec: BlockRecord, items: torch.Tensor) -> torch.Tensor:
    """bool (B, L): positions whose r is 0 by definition: padding, and the positions that attend only to
    themselves: under the causal mask the first real one, in a bidirectional block the only real one of a row."""
    if rec.causal:
        return first_real(items) | (items == 0)
    return (items == 0) | ((items > 0).sum(1, keepdim=True) == 1)


def _centred_norm(v: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """||gamma * (v - mean_d v)|| over the last dimension: (..., d) -> (...)."""
    return torch.linalg.vector_norm((v - v.mean(-1, keepdim=True)).mul_(gamma), dim=-1)


def _allowed_keys(items: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """bool (B, L, L): what query i may attend to under the masks: key j is real and (causal) j <= i."""
    L = items.shape[1]
    real = (items > 0)[:, None, :].expand(items.shape[0], L, L)
    if not causal:
        return real
    return real & torch.ones(L, L, dtype=torch.bool, device=items.device).tril()[None]


def _term_norms(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """||sum_h a^h_ij v^h_j|| for every (i, j): weights (B, H, L, L), values (B, H, L, d) -> (B, L, L).

    Via the per-key Gram matrices G_j[h, k] = <v^h_j, v^k_j>: ||.||^2 = sum_{h,k} a^h_ij a^k_ij G_j[h, k], so
    the cost is B L^2 H^2 and no (B, L, L, d) tensor is built.
    """
    gram = torch.einsum("bhjd,bkjd->bjhk", values, values)  # (B, L, H, H)
    q = torch.einsum("bhij,bjhk->bkij", weights, gram)  # (B, H, L, L)
    return (q * weights).sum(1).clamp_min(0.0).sqrt()


def sum_of_norms(rec: BlockRecord, items: torch.Tensor) -> dict[str, torch.Tensor]:
    """{stage: r (B, L)} by sum of norms, ``sum_{j!=i} ||g_ij|| / sum_j ||g_ij||``.

    Off the diagonal g_ij(+Res) = g_ij(Attn), and g_ij(+LN) is the same linear map of every head value
    (gamma * centred * 1/sqrt(Var(z_i)+eps)), so all off-diagonal norms come from Gram matrices of the (mapped)
    head values (``_term_norms``); the diagonal terms g_ii are built directly, (B, L, d) each.

    The (L, L) work is done per group of rows of similar length, each cut to its last ``w`` columns (w a power
    of two >= the group's real lengths): a left-padded row's real queries and keys are its last columns, padded
    keys are no term of any ratio, so the cut changes no number and a batch padded to one long user costs what
    its own lengths cost.
    """
    B, L = items.shape
    n_real = (items > 0).sum(1).cpu().clamp_min(1).double()  # float64 on the CPU: MPS has none
    widths = torch.clamp(2 ** torch.ceil(torch.log2(n_real)), max=L).long().to(items.device)
    out = {st: torch.zeros(B, L, dtype=rec.z.dtype, device=rec.z.device) for st in stages_of(rec)}
    for w in torch.unique(widths).tolist():
        rows = torch.nonzero(widths == w).flatten()
        part = _dense_sum_of_norms(_rows(rec, rows, w), items[rows, -w:])
        for st, r in part.items():
            out[st][rows, -w:] = r
    return out


def _rows(rec: BlockRecord, rows: torch.Tensor, width: int) -> BlockRecord:
    """The record of batch rows ``rows``, cut to their last ``width`` positions (queries and keys)."""
    def take(t: torch.Tensor) -> torch.Tensor:
        return t[rows, -width:]

    def maybe(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else take(t)

    return replace(
        rec, x=take(rec.x), attn_in=take(rec.attn_in), attn_out=take(rec.attn_out), z=take(rec.z),
        sublayer_out=take(rec.sublayer_out), freq_out=maybe(rec.freq_out), attn_self=maybe(rec.attn_self),
        attn_weights=None if rec.attn_weights is None else rec.attn_weights[rows][:, :, -width:, -width:],
        head_values=None if rec.head_values is None else rec.head_values[rows][:, :, -width:])


def _dense_sum_of_norms(rec: BlockRecord, items: torch.Tensor) -> dict[str, torch.Tensor]:
    """``sum_of_norms`` over the record's full (L, L) block."""
    s = abs(rec.branch_scale)
    allowed = _allowed_keys(items, rec.causal)
    off = allowed & ~torch.eye(items.shape[1], dtype=torch.bool, device=items.device)[None]
    own_attn = self_terms(rec)
    own_res = residual_term(rec, own_attn)
    weights, values = full_record(rec)
    others = {"Attn": s * _term_norms(weights, values)}
    others["+Res"] = others["Attn"]
    own = {"Attn": own_attn.norm(dim=-1), "+Res": own_res.norm(dim=-1)}
    if not rec.norm_first:  # 1/sqrt(Var(z_i)+eps) is common to every term of query i: it cancels in r_i
        mapped = ln_linear(rec, values, 1.0)  # gamma * centred f^h_j, (B, H, L, d)
        others["+LN"] = s * _term_norms(weights, mapped)
        own["+LN"] = ln_linear(rec, own_res, 1.0).norm(dim=-1)
    drop = _excluded(rec, items)
    out = {}
    for st in stages_of(rec):
        total_others = (others[st] * off).sum(-1)
        out[st] = torch.where(drop, 0.0, _ratio(total_others, total_others + own[st]))
    return out


def head_ratios(rec: BlockRecord, items: torch.Tensor, definition: str) -> torch.Tensor:
    """(B, H, L): Attn-stage mixing ratio of each head's own terms a^h_ij f^h(x_j)."""
    w, hv = full_record(rec)
    diag = torch.diagonal(w, dim1=-2, dim2=-1)  # (B, H, L)
    own_norm = diag * hv.norm(dim=-1)  # ||a^h_ii f^h(x_i)||
    if definition == "norm_of_sums":
        others = torch.einsum("bhij,bhjd->bhid", w, hv) - diag[..., None] * hv
        no = others.norm(dim=-1)
    else:  # ||a^h_ij f^h(x_j)|| = a^h_ij ||f^h(x_j)||
        off = _allowed_keys(items, rec.causal) & ~torch.eye(items.shape[1], dtype=torch.bool, device=items.device)[None]
        no = torch.einsum("bhij,bhj->bhi", w * off[:, None], hv.norm(dim=-1))
    r = _ratio(no, no + own_norm)
    mask = _excluded(rec, items)[:, None, :]
    return torch.where(mask, 0.0, r)


def ratios(rec: BlockRecord, items: torch.Tensor, definition: str = "norm_of_sums") -> dict[str, torch.Tensor]:
    """{stage: r (B, L)} for one block's record under ``definition``."""
    if definition == "norm_of_sums":
        return norm_of_sums(rec, items)
    if definition == "sum_of_norms":
        return sum_of_norms(rec, items)
    raise ValueError(f"unknown mixing-ratio definition {definition!r} (choose from {', '.join(DEFINITIONS)})")
