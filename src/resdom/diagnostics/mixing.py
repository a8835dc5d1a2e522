"""Mixing ratios of every attention block over an evaluation set (spec §4): the per-block ratios of
``resdom.diagnostics.decomposition``, aggregated over users, positions and layers.

Aggregation: "all" = mean over every real position of every evaluated user (position-weighted, the first
position's r = 0 included); "last" = mean at the last real position (column L-1); pooled = mean over layers
(every layer has the same positions). Per head (on request): the Attn-stage ratio of each head's own terms
``a^h_ij f^h(x_j)``.

Positions are those the blocks see (``interface.block_tokens``): for BERT4Rec the input items and the appended
``[MASK]``, so "last" is the ``[MASK]`` position, where its prediction is read (as the last column is for the
causal models). A model without attention blocks (GRU4Rec) has no mixing ratio: ``require_attention`` refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from resdom.data.sequences import EvalSet
from resdom.diagnostics.common import (
    DEFAULT_BATCH,
    batches,
    check_model,
    inference,
    jsonable,
    sum_over_ranks,
)
from resdom.diagnostics.decomposition import DEFINITIONS, head_ratios, ratios, stages_of
from resdom.errors import ResdomError
from resdom.models.block import BlockRecord, trim_record
from resdom.models.interface import Diagnosable, block_tokens, block_width, recording

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEFINITIONS", "MixingAccumulator", "MixingResult", "RecordStream", "mixing_ratios", "require_attention"]


def has_attention(model: Diagnosable) -> bool:
    """Whether ``model`` has attention blocks (and so a mixing ratio and a residual to scale)."""
    return len(model.attention_blocks()) > 0


def require_attention(model: Diagnosable, what: str) -> None:
    """ResdomError (one line) when ``model`` has no attention blocks: ``what`` (mixing / alpha) does not apply."""
    if not has_attention(model):
        name = getattr(getattr(model, "cfg", None), "name", None) or type(model).__name__
        raise ResdomError(f"{what}: {name} has no attention blocks (no attention, no residual around it), so the "
                          "mixing ratio and the residual-scaling sweep do not apply; shuffle, hrli and recovery do")

Definition = Literal["norm_of_sums", "sum_of_norms"]


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
        """values (B, L) per position, real (B, L) bool; column L-1 is the last position. One sum per column (in
        float64) gives the three: all positions, the last, and each offset from the end (o = L-1-col)."""
        v = torch.where(real, values, 0.0).cpu().double().sum(0).numpy()  # float64 on the CPU: MPS has none
        n = real.sum(0).cpu().numpy().astype(np.float64)
        L = values.shape[1]
        self.all_sum[layer] += v.sum()
        self.all_n[layer] += n.sum()
        self.last_sum[layer] += v[-1]
        self.last_n[layer] += n[-1]
        self.pos_sum[layer, :L] += v[::-1]
        self.pos_n[layer, :L] += n[::-1]

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
    """Mixing ratios per layer / pooled, "all" real positions and "last" position, per stage (spec §4).

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

    def to_frame(self, per_position: bool = False) -> pd.DataFrame:
        """pandas DataFrame of the ratios r in [0, 1]: columns ``layer`` (an int, or "pooled"), ``scope`` ("all"
        positions or the "last"), ``stage``, ``r``; with ``per_position``: ``layer``, ``offset_from_end`` (0 = the
        last position), ``stage``, ``r``."""
        import pandas as pd

        if per_position:
            rows = [(e["layer"], o, st, e[st][o]) for e in self.per_position for st in self.stages
                    for o in e["offset_from_end"]]
            return pd.DataFrame(rows, columns=["layer", "offset_from_end", "stage", "r"])
        rows = [(row["layer"], scope, st, row[scope][st]) for row in self.layers for scope in ("all", "last")
                for st in self.stages]
        rows += [("pooled", scope, st, self.pooled[scope][st]) for scope in ("all", "last") for st in self.stages]
        return pd.DataFrame(rows, columns=["layer", "scope", "stage", "r"])


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
        for layer, rec in enumerate(records):
            self.add_layer(layer, rec, items)
        self.n_users += items.shape[0]

    def add_layer(self, layer: int, rec: BlockRecord, items: torch.Tensor) -> None:
        """One layer's record of the batch ``items`` (B, L); the batch's users are counted by ``add`` (or by the
        caller, ``n_users``, when the layers come one by one: ``RecordStream``)."""
        if self.stages is None:
            self.stages = list(stages_of(rec))
            self.means = {st: _Mean(self.n_layers, self.max_len) for st in self.stages}
        real = items > 0
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
        freq = rec.freq_out
        if freq is None:
            raise ValueError("a frequency branch's share needs a block that has one (BSARec)")
        self.freq["frequency"].add(layer, freq.norm(dim=-1), real)
        self.freq["attention"].add(layer, (rec.sublayer_out - freq).norm(dim=-1), real)

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


class RecordStream:
    """A ``recording`` sink that feeds each block's record into a MixingAccumulator as the block makes it, in the
    middle of the forward pass, so no record outlives its layer: the same numbers as adding the batch's stored
    records after the pass, with fewer tensors alive at once (on CPU, fewer freshly mapped pages: at max length 200
    the stored records cost the forward pass about a third more page faults).

    Per batch: ``start(items)``, the model's forward pass, ``finish()`` (checks one record per block and counts the
    users). A record wider than the batch's block tokens (a ``full_window`` model pads to its window) is cut to
    their width as ``encode_tokens`` cuts stored ones (``trim_record``).
    """

    def __init__(self, model: Diagnosable, acc: MixingAccumulator) -> None:
        self.model, self.acc = model, acc
        self.tokens: torch.Tensor | None = None
        self.seen = [False] * acc.n_layers

    def start(self, items: torch.Tensor) -> None:
        self.tokens = block_tokens(self.model, items)
        self.seen = [False] * self.acc.n_layers

    def __call__(self, layer: int, rec: BlockRecord) -> None:
        if self.tokens is None or self.seen[layer]:
            raise ValueError(f"block {layer} recorded more than once in one forward pass (or outside a batch)")
        width = self.tokens.shape[1]
        if rec.z.shape[1] != width:
            rec = trim_record(rec, width)
        self.acc.add_layer(layer, rec, self.tokens)
        self.seen[layer] = True

    def finish(self) -> None:
        if self.tokens is None or not all(self.seen):
            raise ValueError(f"expected one record from each of {self.acc.n_layers} blocks, got {sum(self.seen)}")
        self.acc.n_users += self.tokens.shape[0]
        self.tokens = None


def mixing_ratios(
    model: Diagnosable, evalset: EvalSet, definition: Definition = "norm_of_sums", per_head: bool = False,
    batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None, progress: bool = False,
) -> MixingResult:
    """Mixing ratios of every attention block over ``evalset``'s inputs (the model's eval mode, its alphas)."""
    model = check_model(model)
    require_attention(model, "mixing")
    n_layers = len(model.attention_blocks())
    acc = MixingAccumulator(n_layers, block_width(model), definition, per_head)
    light = definition == "norm_of_sums" and not per_head  # no (B, H, L, L) weights needed
    stream = RecordStream(model, acc)  # each record consumed as its block makes it
    with inference(model), recording(model, weights=not light, sink=stream):
        for _, items, _ in batches(model, evalset, batch_size, device, "mixing", progress):
            stream.start(items)
            model.encode(items)
            stream.finish()
    acc.merge_ranks(len(evalset))
    return acc.result()
