"""Questions 1 and 2 of docs/results.md, "Beyond the paper": the comparisons of the probes of the
residual account against their base model, for ``report.compare.compare_table``. No torch.

- Q1, readout position: ``<model>-query`` reads out at a learned query token appended after the prefix (no
  own-item residual at the readout position). The residual account predicts HRLI@1 near 0.
- Q2, tied embeddings: ``<model>-untied`` (separate output item embeddings) and ``<model>-projected`` (a learned
  projection before the tied output). Does HRLI@1 fall, and what happens to accuracy?

Each probe is compared with its base model (the label before the first "-") on NDCG@10 (margin ±5% of the base
model's value) and HRLI@1 (±0.02, absolute), on beauty-ts and toys-ts. The labels are those of
``resdom.experiments.PROBES`` and ``PROBE_MODELS`` (torch-free).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from resdom.experiments import PROBE_MODELS, PROBES
from resdom.report.compare import Comparison
from resdom.report.stats import Margin

PROBE_BASE = "sasrec"  # the model whose probes (and remedy variants) the study asks for: the paper's model
PROBE_VARIANTS: tuple[str, ...] = tuple(PROBES)
PROBE_DATASETS: tuple[str, ...] = ("beauty-ts", "toys-ts")
PROBE_METRICS: dict[str, Margin] = {"NDCG@10": Margin(0.05, relative=True), "HRLI@1": Margin(0.02, relative=False)}
# A probe's second base, trained with the probe's own objective (the query token has one readout a sequence, so the
# probe trains ce_last while its base trains ce_all): "<model>-<probe>" is also compared with "<model>-<suffix>"
# (``experiments.TRAINING_VARIANTS``) wherever that base has cells, so accuracy is read without the objective.
SAME_OBJECTIVE_BASE: dict[str, str] = {"query": "celast"}


def probe_comparisons(datasets: Sequence[str] = PROBE_DATASETS, models: Sequence[str] = PROBE_MODELS,
                      variants: Sequence[str] = PROBE_VARIANTS,
                      metrics: Mapping[str, Margin] = PROBE_METRICS) -> list[Comparison]:
    """``<model>-<variant>`` against ``<model>`` for every data set, model, variant and metric, in that order
    (data set outermost, metric innermost), each with its metric's margin."""
    return [Comparison(ds, model, f"{model}-{variant}", metric, margin)
            for ds in datasets for model in models for variant in variants for metric, margin in metrics.items()]


def question_comparisons(question: int, datasets: Sequence[str] = PROBE_DATASETS,
                         models: Sequence[str] = PROBE_MODELS) -> list[Comparison]:
    """Question 1 (the ``query`` probe) or 2 (``untied`` and ``projected``) alone."""
    variants = {1: ("query",), 2: ("untied", "projected")}
    if question not in variants:
        raise ValueError(f"question {question}: the probes answer questions 1 and 2")
    return probe_comparisons(datasets, models, variants[question])
