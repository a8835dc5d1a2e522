"""The numbers the report's tables, findings and claims show, read from the stored JSON of one run (torch-free).

``run_values(run)`` gives every number of one run by table key (None where the run lacks it): test accuracy and
training from ``metrics.json`` / ``cell.json`` / the epoch log, and per diagnostic the keys below, each read from
that diagnostic's file (docs/architecture.md, "Diagnostics output").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from resdom.names import STAGES
from resdom.report.collect import RunRecord
from resdom.stored import number_at, seen_unseen

RECOVERY_ALPHAS: tuple[float, ...] = (0.1, 0.2, 0.3)  # the alphas the paper's recovery table reports
HRLI_KEYS: tuple[str, ...] = ("HRLI@1", "HRL2I@1", "HRL3I@1", "HRLI@10", "HRL2I@10")
SHUFFLE_METRICS: tuple[str, ...] = ("HR@10", "NDCG@10")
SHUFFLE_MODES: tuple[str, ...] = ("keep_last", "full")  # the perturbations the tables show


def mixing_values(d: dict[str, Any]) -> dict[str, float | None]:
    """``mixing.json`` -> ``mix_<scope>_<stage>``: the pooled ratios at all real positions and at the last one."""
    return {f"mix_{w}_{st}": number_at(d, "pooled", w, st) for w in ("all", "last") for st in STAGES}


def hrli_values(d: dict[str, Any]) -> dict[str, float | None]:
    """``hrli.json`` -> the rates of ``HRLI_KEYS``, and where the bands are known the share of users whose last item
    never occurs in training (``unseen_share``) and HRLI@1 over those (``HRLI@1_unseen``) and the others
    (``HRLI@1_seen``)."""
    return {**{k: number_at(d, "values", k) for k in HRLI_KEYS}, **seen_unseen(d)}


def shuffle_values(d: dict[str, Any]) -> dict[str, float | None]:
    """``shuffle.json`` -> ``shuf_orig_<metric>``, ``shuf_<mode>_<metric>``, ``shuf_<mode>_rel_<metric>`` (relative
    change) and ``shuf_<mode>_jacc`` (Jaccard@10 with the original top-10)."""
    v: dict[str, float | None] = {}
    for m in SHUFFLE_METRICS:
        v[f"shuf_orig_{m}"] = number_at(d, "original", m)
        for p in SHUFFLE_MODES:
            v[f"shuf_{p}_{m}"] = number_at(d, "perturbations", p, "metrics", m)
            v[f"shuf_{p}_rel_{m}"] = number_at(d, "perturbations", p, "relative_change", m)
    for p in SHUFFLE_MODES:
        v[f"shuf_{p}_jacc"] = number_at(d, "perturbations", p, "jaccard@10")
    return v


def recovery_values(d: dict[str, Any]) -> dict[str, float | None]:
    """``recovery.json`` -> ``rec_share`` (recoverable share of test users), ``rec_L-k`` per offset,
    ``rec_at_<alpha>`` (Recovery at each of ``RECOVERY_ALPHAS``), ``alpha_star`` and ``HR@10_at_star``."""
    v: dict[str, float | None] = {"rec_share": number_at(d, "test", "recoverable_share")}
    for off in ("L-1", "L-2", "L-3"):
        v[f"rec_{off}"] = number_at(d, "test", "offset_shares", off)
    curve = d.get("test", {}).get("curve", []) if isinstance(d.get("test"), dict) else []
    at = {round(float(row["alpha"]), 6): row for row in curve
          if isinstance(row, dict) and isinstance(row.get("alpha"), (int, float))}
    for a in RECOVERY_ALPHAS:
        v[f"rec_at_{a}"] = number_at(at.get(round(a, 6)), "recovery")
    v["alpha_star"] = number_at(d, "alpha_star")
    v["HR@10_at_star"] = number_at(d, "test_at_alpha_star", "HR@10")
    return v


# the diagnostics whose numbers the tables show, each with the reader of its JSON file
DIAGNOSTIC_VALUES: dict[str, Callable[[dict[str, Any]], dict[str, float | None]]] = {
    "mixing": mixing_values, "hrli": hrli_values, "shuffle": shuffle_values, "recovery": recovery_values}


def trained_scale(d: dict[str, Any]) -> float | None:
    """``alpha.json``'s ``trained_scale`` (per layer: a number, or one per channel; remedy variants only) -> its mean
    over layers and channels."""
    scale = d.get("trained_scale")
    flat = [float(x) for layer in scale or [] for x in (layer if isinstance(layer, list) else [layer])]
    return sum(flat) / len(flat) if flat else None


def value_source(key: str) -> str:
    """The part of a run a table key is read from: a diagnostic's name, "cell" (a results-store cell's compute) or
    "metrics" (metrics.json and the epoch log)."""
    for name, values in DIAGNOSTIC_VALUES.items():
        if key in values({}):
            return name
    return {"trained_scale": "alpha", "train_min": "cell", "train_s": "cell"}.get(key, "metrics")


def run_values(run: RunRecord) -> dict[str, float | None]:
    """Every number the tables use, for one run (None where the run lacks it)."""
    v: dict[str, float | None] = {}
    test = run.test_metrics()
    for m in ("HR@10", "NDCG@10", "HR@20", "NDCG@20"):
        v[m] = number_at(test, m)
    v["n_users"] = number_at(run.metrics, "test", "n_users") or number_at(run.diag("hrli"), "n_users")
    v["best_epoch"], v["epochs_run"] = number_at(run.metrics, "best_epoch"), number_at(run.metrics, "epochs_run")
    v["early_stopped"] = float(run.metrics["stopped"] == "early_stopping") if "stopped" in run.metrics else None
    seconds = number_at(run.cell, "compute", "train_seconds")
    v["train_min"] = None if seconds is None else seconds / 60
    epoch_s = [row.get("seconds") for row in run.curve if isinstance(row, dict)]
    logged = sum(x for x in epoch_s if isinstance(x, (int, float))) if epoch_s else None
    v["train_s"] = seconds if seconds is not None else logged  # the remedies table: store cells or run directories
    v["trained_scale"] = trained_scale(run.diag("alpha"))
    for name, values in DIAGNOSTIC_VALUES.items():
        v.update(values(run.diag(name)))
    return v
