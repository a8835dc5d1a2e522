"""The numbers the report's tables, findings and claims show, read from the stored JSON of one run (torch-free).

``run_values(run)`` gives every number of one run by table key (None where the run lacks it): test accuracy and
training from ``metrics.json`` / ``cell.json`` / the epoch log, and per diagnostic the keys its record's ``values``
reads from that diagnostic's file (``resdom.records``; docs/architecture.md, "Diagnostics output").
"""

from __future__ import annotations

from typing import Any

from resdom.records import (
    HRLI_KEYS,
    RECOVERY_ALPHAS,
    REGISTRY,
    SHUFFLE_METRICS,
    SHUFFLE_SHOWN,
    Values,
    alpha_values,
    hrli_values,
    mixing_values,
    recovery_values,
    shuffle_values,
)
from resdom.report.collect import RunRecord
from resdom.stored import number_at

__all__ = ["HRLI_KEYS", "NO_VALIDATION", "RECOVERY_ALPHAS", "SHUFFLE_METRICS", "SHUFFLE_MODES", "diagnostic_values",
           "hrli_values", "mixing_values", "no_validation", "recovery_values", "run_values", "shuffle_values",
           "trained_scale", "value_source"]

SHUFFLE_MODES = SHUFFLE_SHOWN  # the perturbations the tables show


def diagnostic_values() -> dict[str, Values]:
    """The diagnostics whose numbers the tables may show, each with the reader of its JSON file (its record's
    ``values``), in canonical order."""
    return {d.name: d.values for d in REGISTRY.values()}


def trained_scale(d: dict[str, Any]) -> float | None:
    """``alpha.json``'s ``trained_scale`` (per layer: a number, or one per channel; remedy variants only) -> its mean
    over layers and channels."""
    return alpha_values(d)["trained_scale"]


def value_source(key: str) -> str:
    """The part of a run a table key is read from: a diagnostic's name, "cell" (a results-store cell's compute) or
    "metrics" (metrics.json and the epoch log)."""
    for name, values in diagnostic_values().items():
        if key in values({}):
            return name
    return {"train_min": "cell", "train_s": "cell"}.get(key, "metrics")


NO_VALIDATION = "no validation split (protocol none without --holdout-users): the last epoch kept, no best epoch"


def no_validation(run: RunRecord) -> bool:
    """Whether the run trained without a validation split (``--protocol none`` without ``--holdout-users``: its
    metrics.json's ``valid`` covers no user), so that its ``best_epoch`` is the last epoch, not one chosen by
    validation."""
    valid = run.metrics.get("valid")
    return isinstance(valid, dict) and valid.get("n_users") == 0


def run_values(run: RunRecord) -> dict[str, float | None]:
    """Every number the tables use, for one run (None where the run lacks it)."""
    v: dict[str, float | None] = {}
    test = run.test_metrics()
    for m in ("HR@10", "NDCG@10", "HR@20", "NDCG@20"):
        v[m] = number_at(test, m)
    v["n_users"] = number_at(run.metrics, "test", "n_users") or number_at(run.diag("hrli"), "n_users")
    v["best_epoch"], v["epochs_run"] = number_at(run.metrics, "best_epoch"), number_at(run.metrics, "epochs_run")
    if no_validation(run):  # the last epoch kept: no best epoch by validation NDCG@10 to show
        v["best_epoch"] = None
    v["early_stopped"] = float(run.metrics["stopped"] == "early_stopping") if "stopped" in run.metrics else None
    seconds = number_at(run.cell, "compute", "train_seconds")
    v["train_min"] = None if seconds is None else seconds / 60
    epoch_s = [row.get("seconds") for row in run.curve if isinstance(row, dict)]
    logged = sum(x for x in epoch_s if isinstance(x, (int, float))) if epoch_s else None
    # the remedies table: store cells or run directories; an unfinished run's (no metrics.json) epochs so far are
    # not the training time of a seed, and a sum of them was averaged in as one
    v["train_s"] = seconds if seconds is not None else (logged if run.metrics else None)
    for name, values in diagnostic_values().items():
        v.update(values(run.diag(name)))
    return v
