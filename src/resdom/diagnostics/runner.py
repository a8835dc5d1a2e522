"""Run every diagnostic on a trained run directory and write ``RUN_DIR/diagnostics/`` (JSON + CSV, atomically).

Files (schema in docs/architecture.md): ``shuffle``, ``hrli``, ``mixing``, ``alpha``, ``recovery`` as
``.json`` and ``.csv`` (mixing also ``mixing_per_position.csv``), ``summary.json``: the headline numbers
of every diagnostic file present for the same split (so running a subset keeps the others' figures), and
``users.npz`` (``users`` in ``--what``, part of "all"): the per-user evidence on the test split
(``diagnostics.evidence``), from the ranks the alpha sweep and recovery of the same call computed where they ran.
Recovery always selects alpha* on the validation split and reports the test split (spec §4), whatever
``split`` says. Under ``torch.distributed`` every process computes its shard of the users (``common.batches``),
rank 0 alone writes the files, and every process returns rank 0's summary.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from resdom.data.sequences import SplitData, item_counts
from resdom.diagnostics.alpha import ALPHAS, alpha_sweep
from resdom.diagnostics.common import DEFAULT_BATCH, jsonable
from resdom.diagnostics.evidence import UserEvidence, read_header, user_evidence
from resdom.diagnostics.hrli import last_item_hit_rates
from resdom.diagnostics.mixing import DEFINITIONS, NEEDS_ATTENTION, has_attention, mixing_ratios, require_attention
from resdom.diagnostics.recovery import K_RECOVERY, miss_recovery
from resdom.diagnostics.shuffle import MODES, position_shuffle
from resdom.distributed import rank_and_world
from resdom.errors import ResdomError
from resdom.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from resdom.models.interface import Diagnosable
from resdom.names import DIAGNOSTICS, STAGES
from resdom.rundir import RunDir
from resdom.runs import load_run

WHAT: tuple[str, ...] = DIAGNOSTICS
USERS = "users"  # the per-user evidence (users.npz): a choice of run_all's --what, not a diagnostic result
SPLITS = ("valid", "test")


def parse_what(what: str | Sequence[str], with_users: bool = False) -> list[str]:
    """"all" or a comma-separated subset of WHAT (or a list) -> the chosen names in canonical order; with
    ``with_users`` (what run_all writes) also ``users``, the per-user evidence, which "all" then includes."""
    choices = (*WHAT, USERS) if with_users else WHAT
    names = [w.strip() for w in (what.split(",") if isinstance(what, str) else what) if w.strip()]
    if not names or names == ["all"]:
        return list(choices)
    bad = [w for w in names if w not in choices]
    if bad:
        raise ResdomError(f"--what: unknown diagnostic {bad[0]!r} (choose all or from {', '.join(choices)})")
    return [w for w in choices if w in names]


def applicable(model: Any, names: list[str], note: bool = True) -> list[str]:
    """``names`` without the diagnostics that do not apply to ``model`` (mixing and alpha need attention blocks;
    GRU4Rec has none), skipped with a note on stderr when every diagnostic was asked for, refused in one line
    (ResdomError) when one was asked for by name."""
    skipped = [n for n in names if n in NEEDS_ATTENTION] if not has_attention(model) else []
    if not skipped:
        return names
    if names != list(WHAT):
        require_attention(model, skipped[0])
    if note:
        name = getattr(getattr(model, "cfg", None), "name", None) or type(model).__name__
        print(f"note: {name} has no attention blocks, so {' and '.join(skipped)} do not apply and are skipped; "
              "recovery is alpha-free", file=sys.stderr)
    return [n for n in names if n not in NEEDS_ATTENTION]


def compute_diagnostic(
    name: str, model: Diagnosable, split: SplitData, part: str = "test", *, recency: Sequence[int] = (1, 2, 3),
    cutoffs: Sequence[int] = (1, 5, 10), definition: str = "norm_of_sums", seeds: Sequence[int] = (0, 1, 2),
    alphas: Sequence[float] = ALPHAS, layers: Sequence[int] | None = None, per_head: bool = False,
    batch_size: int = DEFAULT_BATCH, device: str | torch.device | None = None, progress: bool = False,
    ranks: dict[str, Any] | None = None,
) -> Any:
    """The result object of diagnostic ``name`` (one of WHAT) of ``model`` on ``split``'s ``part`` (valid | test),
    its ``split`` set to ``part``; recovery selects alpha* on valid and reports test whatever ``part`` says.
    The shuffles' metrics, the sweep's HR@10 / NDCG@10 and recovery follow the split's evaluation setting
    (``SplitData.filter_seen``); the last-item hit rates never filter.
    ``recency`` / ``cutoffs``: the k / K of HRLkI@K. What ``run_all`` writes and ``resdom.diagnose`` returns.
    ``ranks``: a dict a caller keeps across the diagnostics of one model (same ``layers`` and ``alphas``): the
    alpha sweep leaves its target ranks there under ``part`` and recovery reuses them, so the split is not
    ranked at every alpha twice."""
    evalset = getattr(split, part)
    common = {"batch_size": batch_size, "device": device, "progress": progress}
    seen = split.filter_seen  # the data set's evaluation setting (diginetica, zvuk: seen items kept)
    if name == "shuffle":
        res = position_shuffle(model, evalset, seeds=seeds, filter_seen=seen, **common)
    elif name == "hrli":
        res = last_item_hit_rates(model, evalset, ks=recency, Ks=cutoffs,
                                  train_counts=item_counts(split.train, split.n_items), **common)
    elif name == "mixing":
        res = mixing_ratios(model, evalset, definition=definition, per_head=per_head, **common)
    elif name == "alpha":
        res = alpha_sweep(model, evalset, alphas=alphas, layers=layers, definition=definition, filter_seen=seen,
                          **common)
        if ranks is not None:
            ranks[part] = res.target_ranks
    elif name == "recovery":
        return miss_recovery(model, split.valid, split.test, alphas=alphas, layers=layers, known_ranks=ranks,
                             filter_seen=seen, **common)
    else:
        raise ValueError(f"unknown diagnostic {name!r} (one of {', '.join(WHAT)})")
    res.split = part
    return res


def run_all(
    run_dir: str | Path, what: str | Sequence[str] = "all", split: str = "test", device: str = "cpu",
    batch_size: int = DEFAULT_BATCH, progress: bool = True, definition: str = "norm_of_sums",
    seeds: Sequence[int] = (0, 1, 2), alphas: Sequence[float] = ALPHAS, layers: Sequence[int] | None = None,
    per_head: bool = False,
) -> dict[str, Any]:
    """Diagnose the run in ``run_dir`` on ``split``; write the files; return the summary (also summary.json)."""
    names = parse_what(what, with_users=True)
    evidence = USERS in names
    names = [n for n in names if n != USERS]
    if split not in SPLITS:
        raise ResdomError(f"--split: must be one of {', '.join(SPLITS)} (got {split!r})")
    if definition not in DEFINITIONS:
        raise ResdomError(f"--definition: must be one of {', '.join(DEFINITIONS)} (got {definition!r})")
    if batch_size < 1:
        raise ResdomError(f"--batch-size: must be >= 1 (got {batch_size})")
    run = load_run(run_dir, device=device)
    if run.training_note() and rank_and_world()[0] == 0:
        print(run.training_note(), file=sys.stderr)
    names = applicable(run.model, names, rank_and_world()[0] == 0) if names else []
    n_layers = len(run.model.attention_blocks())
    if layers is not None and any(not 0 <= int(x) < n_layers for x in layers):
        raise ResdomError(f"--layers: the model has {n_layers} blocks (0..{n_layers - 1}); got {list(layers)}")
    evalset = getattr(run.split, split)
    if len(evalset) == 0:
        raise ResdomError(f"{run.directory}/data: the {split} split has no users")
    files = RunDir(run_dir)
    out_dir = files.diagnostics
    if rank_and_world()[0] == 0:
        discard_stale(out_dir, run.checkpoint)
    model, common = run.model, {"batch_size": batch_size, "device": device, "progress": progress}
    timings: dict[str, float] = {}
    ranks: dict[str, Any] = {}  # the alpha sweep's target ranks, reused by recovery
    rank, world = rank_and_world()
    lines = progress and rank == 0 and not sys.stderr.isatty()  # a log gets one line per stage instead of bars
    results: dict[str, Any] = {}
    for i, name in enumerate(names, start=1):
        t0 = time.perf_counter()
        res = results[name] = compute_diagnostic(name, model, run.split, split, definition=definition, seeds=seeds,
                                                 alphas=alphas, layers=layers, per_head=per_head, ranks=ranks,
                                                 **common)
        data = res.to_dict()
        timings[name] = time.perf_counter() - t0
        data["seconds"] = round(timings[name], 3)
        data["checkpoint"] = run.checkpoint
        if rank == 0:
            atomic_write_json(files.diagnostic(name), data)
            for suffix, text in CSV_WRITERS[name](data).items():
                atomic_write_text(files.diagnostic(name, f"{suffix}.csv"), text)
        if lines:
            print(f"diagnose [{i}/{len(names)}] {name}: done in {timings[name]:.0f} s -> {files.diagnostic(name)}",
                  file=sys.stderr, flush=True)
    if evidence:
        t0 = time.perf_counter()
        ev = users_evidence(model, run.split, results, split, alphas, layers, common)
        ev.header.update(checkpoint=run.checkpoint, seconds=round(time.perf_counter() - t0, 3))
        if rank == 0:
            atomic_write_bytes(files.users, ev.to_bytes())
        if lines:
            print(f"diagnose users: done in {time.perf_counter() - t0:.0f} s -> {files.users}", file=sys.stderr,
                  flush=True)
    summary: dict[str, Any] = {}
    if rank == 0:
        summary = summarise(out_dir, split, run.checkpoint)
        # every diagnostic file of this checkpoint says what it cost, also those an earlier call computed
        done = {n: _read_file(files.diagnostic(n)) for n in WHAT if files.diagnostic(n).is_file()}
        users = read_header(files.users) if files.users.is_file() else None
        if users is not None:
            done[USERS] = users
        summary["seconds"] = {n: d["seconds"] for n, d in done.items()
                              if d.get("checkpoint") == run.checkpoint and "seconds" in d}
        atomic_write_json(files.summary, summary)
    if world > 1:
        box = [summary]
        dist.broadcast_object_list(box, src=0)
        summary = box[0]
    return summary


def users_evidence(model: Diagnosable, data: SplitData, results: dict[str, Any], part: str,
                   alphas: Sequence[float], layers: Sequence[int] | None, common: dict[str, Any]) -> UserEvidence:
    """The per-user evidence on the test split, from the ranks of this call's alpha sweep (where it ran on the test
    split) and recovery (``results``), the rest computed (``evidence.user_evidence``)."""
    sweep = results["alpha"].user_ranks if "alpha" in results and part == "test" else None
    rec = results.get("recovery")
    return user_evidence(model, data, alphas, layers, rec.K if rec is not None else K_RECOVERY, sweep=sweep,
                         recoverable=rec.test.recoverable_users if rec is not None else None, **common)


# ---------------------------------------------------------------------------------------------------------
# CSV


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(["" if v is None else v for v in row] for row in rows)
    return buf.getvalue()


def _shuffle_csv(d: dict[str, Any]) -> dict[str, str]:
    rows = [["original", m, v, 0.0, 0.0, 1.0] for m, v in d["original"].items()]
    for name, p in d["perturbations"].items():
        rows += [[name, m, v, p["metrics_std"][m], p["relative_change"][m], p["jaccard@10"]]
                 for m, v in p["metrics"].items()]
    return {"": _csv(["perturbation", "metric", "mean", "std", "relative_change", "jaccard@10"], rows)}


def _hrli_csv(d: dict[str, Any]) -> dict[str, str]:
    groups = [("all", d["n_users"], d["values"])]
    groups += [(band, b["n_users"], b["values"]) for band, b in (d.get("by_frequency") or {}).items()]
    return {"": _csv(["band", "n_users", "metric", "value"],
                     [[band, n, k, v] for band, n, values in groups for k, v in values.items()])}


def _mixing_csv(d: dict[str, Any]) -> dict[str, str]:
    rows = [[row["layer"], scope, st, row[scope][st]] for row in d["layers"] for scope in ("all", "last")
            for st in d["stages"]]
    rows += [["pooled", scope, st, d["pooled"][scope][st]] for scope in ("all", "last") for st in d["stages"]]
    pos = [[e["layer"], o, st, e[st][o]] for e in d["per_position"] for st in d["stages"]
           for o in e["offset_from_end"]]
    return {"": _csv(["layer", "scope", "stage", "r"], rows),
            "_per_position": _csv(["layer", "offset_from_end", "stage", "r"], pos)}


def _alpha_csv(d: dict[str, Any]) -> dict[str, str]:
    if not d["rows"]:
        return {"": ""}
    stages = list(d["rows"][0]["mixing_all"])
    metrics = [k for k in d["rows"][0] if k not in ("alpha", "mixing_all", "mixing_last")]
    header = ["alpha", *[f"mixing_all_{s}" for s in stages], *[f"mixing_last_{s}" for s in stages], *metrics]
    rows = [[r["alpha"], *[r["mixing_all"][s] for s in stages], *[r["mixing_last"][s] for s in stages],
             *[r[m] for m in metrics]] for r in d["rows"]]
    return {"": _csv(header, rows)}


def _recovery_csv(d: dict[str, Any]) -> dict[str, str]:
    K = d["K"]
    rows = [[sp, r["alpha"], r["recovery"], r[f"HR@{K}"], r["alpha"] == d["alpha_star"]]
            for sp in ("valid", "test") for r in d[sp]["curve"]]
    return {"": _csv(["split", "alpha", "recovery", f"HR@{K}", "alpha_star"], rows)}


CSV_WRITERS = {"shuffle": _shuffle_csv, "hrli": _hrli_csv, "mixing": _mixing_csv, "alpha": _alpha_csv,
               "recovery": _recovery_csv}


# ---------------------------------------------------------------------------------------------------------
# Summary


def _read_file(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def discard_stale(out_dir: Path, checkpoint: str) -> list[str]:
    """Delete the diagnostics files in ``out_dir`` computed on another checkpoint than ``checkpoint`` (or naming
    none): they describe a model that is no longer there. Returns the names of the results removed."""
    removed = []
    for name in (*WHAT, "summary"):
        path = out_dir / f"{name}.json"  # RunDir.diagnostic's naming
        if path.is_file() and _read_file(path).get("checkpoint") != checkpoint:
            for stale in (path, *out_dir.glob(f"{name}*.csv")):
                stale.unlink(missing_ok=True)
            removed.append(name)
    users = out_dir / f"{USERS}.npz"
    if users.is_file() and (read_header(users) or {}).get("checkpoint") != checkpoint:
        users.unlink(missing_ok=True)
        removed.append(USERS)
    return removed


def summarise(out_dir: Path, split: str, checkpoint: str) -> dict[str, Any]:
    """Headline numbers of the diagnostics files in ``out_dir`` computed on ``split`` (recovery: always test) and on
    the checkpoint ``checkpoint`` (``resdom.runs.checkpoint_id``); files of any other checkpoint are left out."""
    s: dict[str, Any] = {"split": split, "checkpoint": checkpoint}

    def _read(path: Path) -> dict[str, Any]:
        d = _read_file(path)
        return d if d.get("checkpoint") == checkpoint else {}

    hrli = _read(out_dir / "hrli.json")
    if hrli.get("split") == split:
        s["n_users"] = hrli["n_users"]
        s.update({k: hrli["values"].get(k) for k in ("HRLI@1", "HRL2I@1", "HRL3I@1", "HRLI@10")})
        if isinstance(hrli.get("by_frequency"), dict):
            s["HRLI@1_by_frequency"] = {b: {"n_users": v["n_users"], "HRLI@1": v["values"].get("HRLI@1")}
                                        for b, v in hrli["by_frequency"].items()}
    mix = _read(out_dir / "mixing.json")
    if mix.get("split") == split:
        s["n_users"] = mix["n_users"]
        s["mixing_definition"] = mix["definition"]
        s["mixing_pooled_all"] = mix["pooled"]["all"]
        s["mixing_pooled_last"] = mix["pooled"]["last"]
        if "frequency_branch" in mix:
            s["frequency_share_all"] = mix["frequency_branch"]["pooled"]["all"]["frequency_share"]
    sh = _read(out_dir / "shuffle.json")
    if sh.get("split") == split:
        s["n_users"] = sh["n_users"]
        s["original"] = {k: sh["original"].get(k) for k in ("HR@10", "NDCG@10")}
        s["shuffle_NDCG@10_change"] = {k: p["relative_change"].get("NDCG@10") for k, p in sh["perturbations"].items()}
        s["shuffle_jaccard@10"] = {k: p["jaccard@10"] for k, p in sh["perturbations"].items()}
    al = _read(out_dir / "alpha.json")
    if al.get("split") == split and al.get("rows"):
        s.setdefault("n_users", al.get("n_users"))
        keys = ("alpha", "HRLI@1", "HRL2I@1", "HR@10", "NDCG@10")
        s["alpha_sweep"] = [{**{k: r.get(k) for k in keys}, "mixing_all": r["mixing_all"]} for r in al["rows"]]
    rec = _read(out_dir / "recovery.json")
    if rec:
        t = rec["test"]
        if split == "test":
            s.setdefault("n_users", t["n_users"])
        s["recovery"] = {"alpha_star": rec["alpha_star"], "recoverable_share": t["recoverable_share"],
                         "offset_shares": t["offset_shares"], "n_users": t["n_users"],
                         "recovery_at_alpha_star": rec["test_at_alpha_star"].get("recovery"),
                         "HR@10_at_alpha_star": rec["test_at_alpha_star"].get(f"HR@{rec['K']}"),
                         "HR@10_at_alpha_1": rec["test_at_alpha_star"].get(f"HR@{rec['K']}_at_alpha_1"),
                         "max_recovery": max((r["recovery"] for r in t["curve"] if r["recovery"] is not None),
                                             default=None)}
    return jsonable(s)


# ---------------------------------------------------------------------------------------------------------
# Readable summary for the CLI


def _fmt(v: Any) -> str:
    return "   n/a" if v is None else f"{v:6.3f}" if isinstance(v, float) else str(v)


def _ordered(keys: Any, canonical: Sequence[str]) -> list[str]:
    keys = list(keys)
    return [k for k in canonical if k in keys] + [k for k in keys if k not in canonical]


def format_summary(summary: dict[str, Any]) -> str:
    """A few aligned lines / small tables of the summary, for the terminal."""
    lines = [f"split {summary.get('split')}, {summary.get('n_users', '?')} users"]
    if "mixing_pooled_all" in summary:
        stages = _ordered(summary["mixing_pooled_all"], STAGES)
        lines.append(f"mixing ratio ({summary.get('mixing_definition')}), pooled over layers:")
        lines.append("  " + " " * 6 + "".join(f"{st:>8}" for st in stages))
        for scope in ("all", "last"):
            vals = summary[f"mixing_pooled_{scope}"]
            lines.append(f"  {scope:<6}" + "".join(f"{_fmt(vals[st]):>8}" for st in stages))
        if "frequency_share_all" in summary:
            lines.append(f"  frequency-branch share of the mixed norm: {_fmt(summary['frequency_share_all'])}")
    if "HRLI@1" in summary:
        keys = ("HRLI@1", "HRL2I@1", "HRL3I@1", "HRLI@10")
        lines.append("last-item hit rates (unfiltered): " + "  ".join(f"{k} {_fmt(summary.get(k))}" for k in keys))
        if "HRLI@1_by_frequency" in summary:
            lines.append("  HRLI@1 by the last item's occurrences in training: " + "  ".join(
                f"{b}: {_fmt(v['HRLI@1'])} ({v['n_users']:,} users)"
                for b, v in summary["HRLI@1_by_frequency"].items()))
    if "shuffle_NDCG@10_change" in summary:
        o = summary["original"]
        lines.append(f"shuffles (original HR@10 {_fmt(o.get('HR@10'))}, NDCG@10 {_fmt(o.get('NDCG@10'))}):")
        lines.append(f"  {'perturbation':<12} {'dNDCG@10':>9} {'Jaccard@10':>11}")
        for k in _ordered(summary["shuffle_NDCG@10_change"], MODES):
            v = summary["shuffle_NDCG@10_change"][k]
            change = "      n/a" if v is None else f"{100 * v:+8.1f}%"
            lines.append(f"  {k:<12} {change:>9} {_fmt(summary['shuffle_jaccard@10'][k]):>11}")
    if "alpha_sweep" in summary:
        rows = summary["alpha_sweep"]
        stages = _ordered(rows[0]["mixing_all"], STAGES) if rows else []
        lines.append("residual-scaling sweep:")
        lines.append("  " + f"{'alpha':>5}" + "".join(f"{'r ' + st:>9}" for st in stages)
                     + "".join(f"{k:>9}" for k in ("HRLI@1", "HRL2I@1", "HR@10", "NDCG@10")))
        for r in rows:
            lines.append("  " + f"{r['alpha']:5.2f}" + "".join(f"{_fmt(r['mixing_all'][st]):>9}" for st in stages)
                         + "".join(f"{_fmt(r[k]):>9}" for k in ("HRLI@1", "HRL2I@1", "HR@10", "NDCG@10")))
    if "recovery" in summary:
        r = summary["recovery"]
        shares = ", ".join(f"{k} {_fmt(v)}" for k, v in r["offset_shares"].items())
        lines.append(f"miss recovery (test, {r['n_users']} users): recoverable {_fmt(r['recoverable_share'])} "
                     f"({shares})")
        lines.append(f"  alpha* {r['alpha_star']} (chosen on valid): recovery {_fmt(r['recovery_at_alpha_star'])}, "
                     f"HR@10 {_fmt(r['HR@10_at_alpha_star'])} vs {_fmt(r['HR@10_at_alpha_1'])} at alpha 1; "
                     f"max recovery over alphas {_fmt(r['max_recovery'])}")
    return "\n".join(lines)
