"""Norm-based decomposition of the attention block and its mixing ratios (SPEC 4; Kobayashi et al. 2021).

Per layer, query position i and key position j, with s the branch scale (BSARec's 1 - a, else 1)::

    g_ij(Attn) = s * sum_h a^h_ij f^h(x_j)                          f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h
    g_ij(+Res) = g_ij(Attn) + [i == j] * s * alpha * x_i           (pre-LN: the raw x_i; no +LN stage)
    g_ij(+LN)  = gamma * (g_ij(+Res) - mean_d g_ij(+Res)) / sqrt(Var_d(z_i) + eps)

Bias terms: ``s * b_O`` (Attn, +Res) and ``s * (gamma * (b_O - mean b_O) / sqrt(Var(z_i) + eps) + beta)`` (+LN);
the terms plus the bias terms rebuild ``s * attn_out``, ``s * z`` and ``s * LN(z)`` (= H1 minus BSARec's
frequency branch). The factor s cancels in every ratio.

Mixing ratio at position i: ``||sum_{j!=i} g_ij|| / (||sum_{j!=i} g_ij|| + ||g_ii||)`` (``norm_of_sums``, the
default) or ``sum_{j!=i} ||g_ij|| / sum_j ||g_ij||`` (``sum_of_norms``). ``norm_of_sums`` needs no (B, L, L, d)
tensor: ``sum_j g_ij(Attn) = s * (attn_out_i - b_O)``, ``g_ii`` comes from the diagonal of the attention
weights and the head values, and the +LN stage is linear in g. ``sum_of_norms`` needs none either: off the
diagonal ||g_ij||^2 is a quadratic form in the attention weights with the Gram matrix of key j's head values
(B L^2 H^2 work). A ratio with a zero denominator is 0; the first real position (it attends only to itself
under the causal mask) has r = 0 exactly; padding is excluded.

Aggregation: "all" = mean over every real position of every evaluated user (position-weighted, the first
position's r = 0 included); "last" = mean at the last real position (column L-1); pooled = mean over layers
(every layer has the same positions). Per head (on request): the Attn-stage ratio of each head's own terms
``a^h_ij f^h(x_j)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from resdom.data.sequences import EvalSet
from resdom.diagnostics.common import (
    DEFAULT_BATCH,
    batches,
    check_model,
    first_real,
    inference,
    jsonable,
    sum_over_ranks,
)
from resdom.models.block import BlockRecord
from resdom.models.interface import Diagnosable, recording

Definition = Literal["norm_of_sums", "sum_of_norms"]
DEFINITIONS: tuple[str, ...] = ("norm_of_sums", "sum_of_norms")


def stages_of(rec: BlockRecord) -> tuple[str, ...]:
    """("Attn", "+Res", "+LN") for post-LN blocks, ("Attn", "+Res") for pre-LN."""
    return ("Attn", "+Res") if rec.norm_first else ("Attn", "+Res", "+LN")


# ---------------------------------------------------------------------------------------------------------
# The decomposition itself


def self_terms(rec: BlockRecord) -> torch.Tensor:
    """g_ii(Attn) = s * sum_h a^h_ii f^h(x_i): (B, L, d) from the diagonal of the weights and the head values."""
    diag = torch.diagonal(rec.attn_weights, dim1=-2, dim2=-1)  # (B, H, L)
    hv = rec.head_values
    own = diag[:, 0, :, None] * hv[:, 0]  # a loop over heads reads each head's values once (faster than einsum)
    for h in range(1, hv.shape[1]):
        own.addcmul_(diag[:, h, :, None], hv[:, h])
    return own if rec.branch_scale == 1.0 else own.mul_(rec.branch_scale)


def ln_inverse_scale(rec: BlockRecord) -> torch.Tensor:
    """(B, L, 1): 1 / sqrt(Var_d(z_i) + eps), the real LayerNorm's scale (biased variance, as LayerNorm)."""
    z = rec.z
    return torch.rsqrt(z.var(-1, unbiased=False, keepdim=True) + rec.ln_eps)


def ln_linear(rec: BlockRecord, v: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """The +LN stage's linear map ``gamma * (v - mean_d v) * inv``; v (..., d), inv broadcastable to v."""
    return rec.ln_weight * (v - v.mean(-1, keepdim=True)) * inv


def bias_terms(rec: BlockRecord, stage: str) -> torch.Tensor:
    """(B, L, d): what the stage's output holds beside sum_j g_ij (b_O, and after LN: its share and beta)."""
    s = rec.branch_scale
    b = rec.out_bias.to(rec.z.dtype).expand_as(rec.z)
    if stage in ("Attn", "+Res"):
        return s * b
    if stage == "+LN" and not rec.norm_first:
        return s * (ln_linear(rec, b, ln_inverse_scale(rec)) + rec.ln_bias)
    raise ValueError(f"unknown stage {stage!r} for this block (stages: {stages_of(rec)})")


def attention_terms(rec: BlockRecord, stage: str, queries: slice | None = None) -> torch.Tensor:
    """g_ij at ``stage`` for query positions ``queries`` (default all): (B, c, L, d), rows i, columns j.

    Materialises c * L vectors per user (for tests and inspection; the ratios never need it).
    """
    queries = slice(0, rec.z.shape[1]) if queries is None else queries
    q0 = queries.start or 0
    s = rec.branch_scale
    g = s * torch.einsum("bhij,bhjd->bijd", rec.attn_weights[:, :, queries, :], rec.head_values)
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


def others_and_self(rec: BlockRecord) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Fast path: {stage: (sum_{j!=i} g_ij, g_ii)}, each (B, L, d), without any (B, L, L, d) tensor."""
    s = rec.branch_scale
    own = self_terms(rec)
    others = s * (rec.attn_out - rec.out_bias) - own  # sum_j g_ij(Attn) minus the diagonal
    own_res = own + s * rec.alpha * rec.x
    out = {"Attn": (others, own), "+Res": (others, own_res)}
    if not rec.norm_first:
        inv = ln_inverse_scale(rec)
        out["+LN"] = (ln_linear(rec, others, inv), ln_linear(rec, own_res, inv))
    return out


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    return torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny), torch.zeros_like(num))


def norm_of_sums(rec: BlockRecord, items: torch.Tensor) -> dict[str, torch.Tensor]:
    """{stage: r (B, L)} by norm of sums; items (B, L) left-padded; padding rows hold 0, first real r = 0.

    As ``others_and_self`` but leaving out the +LN stage's 1/sqrt(Var(z_i)+eps): a positive factor common to
    both terms of position i, it cancels in r_i (and costs a variance per position).
    """
    s = rec.branch_scale
    own = self_terms(rec)
    others = torch.sub(rec.attn_out, rec.out_bias)
    if s != 1.0:
        others.mul_(s)
    others.sub_(own)
    own_res = torch.add(own, rec.x, alpha=s * rec.alpha)
    no = torch.linalg.vector_norm(others, dim=-1)
    norms = {"Attn": (no, torch.linalg.vector_norm(own, dim=-1)),
             "+Res": (no, torch.linalg.vector_norm(own_res, dim=-1))}
    if not rec.norm_first:
        norms["+LN"] = (_centred_norm(others, rec.ln_weight), _centred_norm(own_res, rec.ln_weight))
    drop = first_real(items) | (items == 0)
    return {st: torch.where(drop, 0.0, _ratio(a, a + b)) for st, (a, b) in norms.items()}


def _centred_norm(v: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """||gamma * (v - mean_d v)|| over the last dimension: (..., d) -> (...)."""
    return torch.linalg.vector_norm((v - v.mean(-1, keepdim=True)).mul_(gamma), dim=-1)


def _allowed_keys(items: torch.Tensor) -> torch.Tensor:
    """bool (B, L, L): key j is real and j <= i (what query i may attend to under the masks)."""
    L = items.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=items.device).tril()
    return (items > 0)[:, None, :] & causal[None]


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
    """
    s = abs(rec.branch_scale)
    allowed = _allowed_keys(items)
    off = allowed & ~torch.eye(items.shape[1], dtype=torch.bool, device=items.device)[None]
    own_attn = self_terms(rec)
    own_res = own_attn + rec.branch_scale * rec.alpha * rec.x
    others = {"Attn": s * _term_norms(rec.attn_weights, rec.head_values)}
    others["+Res"] = others["Attn"]
    own = {"Attn": own_attn.norm(dim=-1), "+Res": own_res.norm(dim=-1)}
    if not rec.norm_first:  # 1/sqrt(Var(z_i)+eps) is common to every term of query i: it cancels in r_i
        mapped = ln_linear(rec, rec.head_values, 1.0)  # gamma * centred f^h_j, (B, H, L, d)
        others["+LN"] = s * _term_norms(rec.attn_weights, mapped)
        own["+LN"] = ln_linear(rec, own_res, 1.0).norm(dim=-1)
    first = first_real(items)
    out = {}
    for st in stages_of(rec):
        total_others = (others[st] * off).sum(-1)
        out[st] = torch.where(first | (items == 0), 0.0, _ratio(total_others, total_others + own[st]))
    return out


def head_ratios(rec: BlockRecord, items: torch.Tensor, definition: str) -> torch.Tensor:
    """(B, H, L): Attn-stage mixing ratio of each head's own terms a^h_ij f^h(x_j)."""
    w, hv = rec.attn_weights, rec.head_values
    diag = torch.diagonal(w, dim1=-2, dim2=-1)  # (B, H, L)
    own_norm = diag * hv.norm(dim=-1)  # ||a^h_ii f^h(x_i)||
    if definition == "norm_of_sums":
        others = torch.einsum("bhij,bhjd->bhid", w, hv) - diag[..., None] * hv
        no = others.norm(dim=-1)
    else:  # ||a^h_ij f^h(x_j)|| = a^h_ij ||f^h(x_j)||
        off = _allowed_keys(items) & ~torch.eye(items.shape[1], dtype=torch.bool, device=items.device)[None]
        no = torch.einsum("bhij,bhj->bhi", w * off[:, None], hv.norm(dim=-1))
    r = _ratio(no, no + own_norm)
    mask = (first_real(items) | (items == 0))[:, None, :]
    return torch.where(mask, 0.0, r)


def ratios(rec: BlockRecord, items: torch.Tensor, definition: str = "norm_of_sums") -> dict[str, torch.Tensor]:
    """{stage: r (B, L)} for one block's record under ``definition``."""
    if definition == "norm_of_sums":
        return norm_of_sums(rec, items)
    if definition == "sum_of_norms":
        return sum_of_norms(rec, items)
    raise ValueError(f"unknown mixing-ratio definition {definition!r} (choose from {', '.join(DEFINITIONS)})")


# ---------------------------------------------------------------------------------------------------------
# Aggregation over an evaluation set


class _Mean:
    """Running sums for means over (layer, scope) and per offset from the end."""

    def __init__(self, n_layers: int, max_len: int) -> None:
        self.all_sum = np.zeros(n_layers)
        self.all_n = np.zeros(n_layers)
        self.last_sum = np.zeros(n_layers)
        self.last_n = np.zeros(n_layers)
        self.pos_sum = np.zeros((n_layers, max_len))
        self.pos_n = np.zeros((n_layers, max_len))

    def add(self, layer: int, values: torch.Tensor, real: torch.Tensor) -> None:
        """values (B, L) per position, real (B, L) bool; column L-1 is the last position."""
        v = torch.where(real, values, 0.0).double()
        self.all_sum[layer] += v.sum().item()
        self.all_n[layer] += real.sum().item()
        self.last_sum[layer] += v[:, -1].sum().item()
        self.last_n[layer] += real[:, -1].sum().item()
        L = values.shape[1]
        # offset from end o = L-1-col
        self.pos_sum[layer, :L] += v.sum(0).flip(0).cpu().numpy()
        self.pos_n[layer, :L] += real.sum(0).flip(0).double().cpu().numpy()

    @staticmethod
    def _mean(s: np.ndarray, n: np.ndarray) -> np.ndarray:
        return np.divide(s, n, out=np.full_like(s, np.nan), where=n > 0)

    def layer_all(self) -> np.ndarray:
        return self._mean(self.all_sum, self.all_n)

    def layer_last(self) -> np.ndarray:
        return self._mean(self.last_sum, self.last_n)

    def pooled_all(self) -> float:
        return float(self._mean(self.all_sum.sum(keepdims=True), self.all_n.sum(keepdims=True))[0])

    def pooled_last(self) -> float:
        return float(self._mean(self.last_sum.sum(keepdims=True), self.last_n.sum(keepdims=True))[0])

    def per_position(self, layer: int) -> list[float]:
        n = self.pos_n[layer]
        width = int(np.max(np.nonzero(n)[0], initial=-1)) + 1
        return self._mean(self.pos_sum[layer, :width], n[:width]).tolist()


@dataclass
class MixingResult:
    """Mixing ratios per layer / pooled, "all" real positions and "last" position, per stage (SPEC 4).

    layers[l] = {"layer": l, "all": {stage: r}, "last": {stage: r}}; pooled = {"all": {...}, "last": {...}};
    per_position[l] = {"layer": l, "offset_from_end": [0, 1, ...], stage: [r, ...]};
    per_head (optional): [{"layer": l, "stage": "Attn", "all": [r_h], "last": [r_h]}];
    frequency_branch (BSARec): per layer and pooled mean norms of a * DSP and of (1 - a) * LN(Z).
    """

    definition: str
    stages: list[str]
    layers: list[dict[str, Any]]
    pooled: dict[str, dict[str, float]]
    per_position: list[dict[str, Any]]
    n_users: int
    per_head: list[dict[str, Any]] | None = None
    frequency_branch: dict[str, Any] | None = None
    split: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "split": self.split, "n_users": self.n_users, "definition": self.definition, "stages": self.stages,
            "layers": self.layers, "pooled": self.pooled, "per_position": self.per_position,
        }
        if self.per_head is not None:
            d["per_head"] = self.per_head
        if self.frequency_branch is not None:
            d["frequency_branch"] = self.frequency_branch
        return jsonable(d)


class MixingAccumulator:
    """Streams BlockRecords of successive batches into a MixingResult (also used by the alpha sweep)."""

    def __init__(self, n_layers: int, max_len: int, definition: str = "norm_of_sums", per_head: bool = False):
        if definition not in DEFINITIONS:
            raise ValueError(f"unknown mixing-ratio definition {definition!r} (choose from {', '.join(DEFINITIONS)})")
        self.n_layers, self.max_len, self.definition, self.per_head = n_layers, max_len, definition, per_head
        self.stages: list[str] | None = None
        self.means: dict[str, _Mean] = {}
        self.heads: list[_Mean] | None = None
        self.freq: dict[str, _Mean] | None = None
        self.n_users = 0

    def add(self, records: list[BlockRecord], items: torch.Tensor) -> None:
        """records: one BlockRecord per layer for the batch ``items`` (B, L)."""
        if len(records) != self.n_layers:
            raise ValueError(f"expected {self.n_layers} block records, got {len(records)}")
        if self.stages is None:
            self.stages = list(stages_of(records[0]))
            self.means = {st: _Mean(self.n_layers, self.max_len) for st in self.stages}
        real = items > 0
        self.n_users += items.shape[0]
        for layer, rec in enumerate(records):
            for st, r in ratios(rec, items, self.definition).items():
                self.means[st].add(layer, r, real)
            if self.per_head:
                self._add_heads(layer, rec, items, real)
            if rec.freq_out is not None:
                self._add_freq(layer, rec, real)

    def _add_heads(self, layer: int, rec: BlockRecord, items: torch.Tensor, real: torch.Tensor) -> None:
        hr = head_ratios(rec, items, self.definition)  # (B, H, L)
        if self.heads is None:
            self.heads = [_Mean(self.n_layers, self.max_len) for _ in range(hr.shape[1])]
        for h, m in enumerate(self.heads):
            m.add(layer, hr[:, h], real)

    def _add_freq(self, layer: int, rec: BlockRecord, real: torch.Tensor) -> None:
        if self.freq is None:
            self.freq = {k: _Mean(self.n_layers, self.max_len) for k in ("frequency", "attention")}
        self.freq["frequency"].add(layer, rec.freq_out.norm(dim=-1), real)
        self.freq["attention"].add(layer, (rec.sublayer_out - rec.freq_out).norm(dim=-1), real)

    def merge_ranks(self, n: int) -> None:
        """After the last batch of a set of ``n`` users fed through ``common.batches``: add up the running sums
        of every rank (no-op in one process). Call once."""
        if self.stages is None:  # every rank has users whenever they are sharded (common.shard)
            return
        means = [*self.means.values(), *(self.heads or []), *(self.freq or {}).values()]
        fields = ("all_sum", "all_n", "last_sum", "last_n", "pos_sum", "pos_n")
        arrays = [getattr(m, f) for m in means for f in fields]
        total = sum_over_ranks(np.concatenate([[float(self.n_users)], *[a.ravel() for a in arrays]]), n)
        self.n_users, start = int(round(total[0])), 1
        for m in means:
            for f in fields:
                a = getattr(m, f)
                setattr(m, f, total[start : start + a.size].reshape(a.shape))
                start += a.size

    def result(self) -> MixingResult:
        if self.stages is None:
            raise ValueError("no batches were seen (empty evaluation set?)")
        la = {st: m.layer_all() for st, m in self.means.items()}
        ll = {st: m.layer_last() for st, m in self.means.items()}
        layers = [{"layer": i, "all": {st: la[st][i] for st in self.stages},
                   "last": {st: ll[st][i] for st in self.stages}} for i in range(self.n_layers)]
        pooled = {"all": {st: m.pooled_all() for st, m in self.means.items()},
                  "last": {st: m.pooled_last() for st, m in self.means.items()}}
        per_position = []
        for i in range(self.n_layers):
            row: dict[str, Any] = {"layer": i}
            for st, m in self.means.items():
                row[st] = m.per_position(i)
            row["offset_from_end"] = list(range(len(row[self.stages[0]])))
            per_position.append(row)
        per_head = None
        if self.heads is not None:
            per_head = [{"layer": i, "stage": "Attn", "all": [m.layer_all()[i] for m in self.heads],
                         "last": [m.layer_last()[i] for m in self.heads]} for i in range(self.n_layers)]
        return MixingResult(self.definition, list(self.stages), layers, pooled, per_position, self.n_users,
                            per_head, self._freq_summary())

    def _freq_summary(self) -> dict[str, Any] | None:
        if self.freq is None:
            return None
        f, a = self.freq["frequency"], self.freq["attention"]

        def share(x: float, y: float) -> float:
            return x / (x + y) if x + y > 0 else float("nan")

        def entry(fn: float, an: float) -> dict[str, float]:
            return {"frequency_norm": fn, "attention_norm": an, "frequency_share": share(fn, an)}

        fa, aa, fl, al = f.layer_all(), a.layer_all(), f.layer_last(), a.layer_last()
        layers = [{"layer": i, "all": entry(fa[i], aa[i]), "last": entry(fl[i], al[i])} for i in range(self.n_layers)]
        return {
            "definition": "mean ||a * DSP_i|| (frequency) vs mean ||(1 - a) * LN(z_i)|| (attention branch)",
            "layers": layers,
            "pooled": {"all": entry(f.pooled_all(), a.pooled_all()), "last": entry(f.pooled_last(), a.pooled_last())},
        }


def mixing_ratios(
    model: Diagnosable, evalset: EvalSet, definition: Definition = "norm_of_sums", per_head: bool = False,
    batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None, progress: bool = False,
) -> MixingResult:
    """Mixing ratios of every attention block over ``evalset``'s inputs (the model's eval mode, its alphas)."""
    model = check_model(model)
    n_layers = len(model.attention_blocks())
    acc = MixingAccumulator(n_layers, model.max_len, definition, per_head)
    with inference(model), recording(model) as store:
        for _, items, _ in batches(model, evalset, batch_size, device, "mixing", progress):
            model.encode(items)
            acc.add([layer.pop() for layer in store], items)
    acc.merge_ranks(len(evalset))
    return acc.result()
