"""The built-in diagnostics' compute functions (``compute(model, split, ctx) -> result``), which their records in
``resdom.records`` name (``"resdom.diagnostics.registry:compute_shuffle"``), and ``compute_of``, which resolves a
record's reference. The records themselves, and the registry of them, are ``resdom.records`` (torch-free, so the report
reads them too); the names below are re-exported from there.

The shuffles' metrics, the sweep's HR@10 / NDCG@10 and recovery follow the split's evaluation setting
(``SplitData.filter_seen``); the last-item hit rates never filter.
"""

from __future__ import annotations

from resdom.data.sequences import SplitData, item_counts
from resdom.diagnostics.alpha import AlphaResult, alpha_sweep
from resdom.diagnostics.hrli import HRLIResult, last_item_hit_rates
from resdom.diagnostics.mixing import MixingResult, mixing_ratios
from resdom.diagnostics.options import Compute, Context
from resdom.diagnostics.recovery import RecoveryResult, miss_recovery
from resdom.diagnostics.shuffle import ShuffleResult, position_shuffle
from resdom.models.interface import Diagnosable
from resdom.records import REGISTRY, Diagnostic, diagnostic_names, fmt, get, ordered, register, registered, resolve

__all__ = ["REGISTRY", "Compute", "Context", "Diagnostic", "compute_alpha", "compute_hrli", "compute_mixing",
           "compute_of", "compute_recovery", "compute_shuffle", "diagnostic_names", "fmt", "get", "ordered", "register",
           "registered"]


def compute_of(diagnostic: Diagnostic) -> Compute:
    """The compute function a record names (imported on first use)."""
    compute: Compute = resolve(diagnostic.compute)
    return compute


def compute_shuffle(model: Diagnosable, split: SplitData, ctx: Context) -> ShuffleResult:
    return position_shuffle(model, getattr(split, ctx.part), seeds=list(ctx.options.seeds),
                            filter_seen=split.filter_seen, **ctx.common())


def compute_hrli(model: Diagnosable, split: SplitData, ctx: Context) -> HRLIResult:
    return last_item_hit_rates(model, getattr(split, ctx.part), ks=list(ctx.options.recency),
                               Ks=list(ctx.options.cutoffs), train_counts=item_counts(split.train, split.n_items),
                               **ctx.common())


def compute_mixing(model: Diagnosable, split: SplitData, ctx: Context) -> MixingResult:
    return mixing_ratios(model, getattr(split, ctx.part), definition=ctx.options.definition,
                         per_head=ctx.options.per_head, **ctx.common())


def compute_alpha(model: Diagnosable, split: SplitData, ctx: Context) -> AlphaResult:
    o = ctx.options
    res = alpha_sweep(model, getattr(split, ctx.part), alphas=list(o.alphas), layers=o.layer_list(),
                      definition=o.definition, filter_seen=split.filter_seen, **ctx.common())
    ctx.shared.setdefault("alpha_ranks", {})[ctx.part] = res.target_ranks  # recovery reuses them
    return res


def compute_recovery(model: Diagnosable, split: SplitData, ctx: Context) -> RecoveryResult:
    o = ctx.options
    return miss_recovery(model, split.valid, split.test, alphas=list(o.alphas), layers=o.layer_list(),
                         known_ranks=ctx.shared.get("alpha_ranks"), filter_seen=split.filter_seen, **ctx.common())
