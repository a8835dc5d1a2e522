"""Run the diagnostics on a trained run directory and write ``RUN_DIR/diagnostics/`` (JSON + CSV, atomically).

The diagnostics and what they write come from ``resdom.records``. ``plan`` checks a call's options against
the model and data, ``compute`` is the one diagnose loop (``run_all`` and ``resdom.diagnose`` both run it), and
``run_all`` writes, for each diagnostic, ``<name>.json`` (``to_dict``, schema in docs/architecture.md) and its CSV
files (``to_frame``; mixing also ``mixing_per_position.csv``), then ``summary.json``: the headline numbers of every
diagnostic file present for the same split (so running a subset keeps the others' figures). Recovery always
selects alpha* on the validation split and reports the test split (spec §4), whatever ``part`` says. Under
``torch.distributed`` every process computes its shard of the users (``common.batches``), rank 0 alone writes
the files, and every process returns rank 0's summary. ``users`` in ``what`` (part of "all"): also
``users.npz``, the per-user evidence on the test split (``diagnostics.evidence``), from the ranks the alpha sweep
and recovery of the same call computed where they ran; it is a file of run_all's, not a diagnostic result.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from resdom.checks import naming_flags
from resdom.data.sequences import SplitData
from resdom.diagnostics import options as opts
from resdom.diagnostics.common import jsonable
from resdom.diagnostics.evidence import UserEvidence, read_header, user_evidence
from resdom.diagnostics.mixing import has_attention, require_attention
from resdom.diagnostics.options import DiagnoseOptions, diagnose_options
from resdom.diagnostics.recovery import K_RECOVERY
from resdom.diagnostics.registry import REGISTRY, Context, Diagnostic, compute_of, diagnostic_names
from resdom.distributed import on_main_rank, rank_and_world
from resdom.errors import OptionError, ResdomError
from resdom.io import (
    atomic_write_bytes,
    atomic_write_files,
    atomic_write_json,
    csv_text,
    directory_lock,
    json_bytes,
    remove_temporaries,
)
from resdom.limits import visible
from resdom.models.interface import Diagnosable
from resdom.names import USERS
from resdom.records import RECOVERY, counted
from resdom.rundir import RunDir, check_links
from resdom.runs import Run, load_run


def parse_what(what: str | Sequence[str], with_users: bool = False) -> list[str]:
    """"all" or a comma-separated subset of the registered diagnostics (or a list) -> the chosen names in canonical
    order; with ``with_users`` (what run_all writes) also ``users``, the per-user evidence, which "all" then
    includes. An unknown name is an OptionError naming ``what``."""
    choices = (*diagnostic_names(), USERS) if with_users else diagnostic_names()
    try:
        return list(opts.parse_what(what, choices))
    except ValueError as e:
        raise OptionError([("what", str(e))]) from None


# ---------------------------------------------------------------------------------------------------------
# The diagnose loop (run_all and resdom.diagnose)


def applicable(model: Any, names: list[str], note: bool = True) -> list[str]:
    """``names`` without the diagnostics that do not apply to ``model`` (those that need attention blocks, for a
    model without them: GRU4Rec), skipped with a note on stderr when every diagnostic was asked for, refused in one
    line (ResdomError) when one was asked for by name."""
    skipped = [n for n in names if REGISTRY[n].needs_attention] if not has_attention(model) else []
    if not skipped:
        return names
    if names != list(diagnostic_names()):
        require_attention(model, skipped[0])
    if note:
        name = getattr(getattr(model, "cfg", None), "name", None) or type(model).__name__
        print(f"note: {name} has no attention blocks, so {' and '.join(skipped)} do not apply and are skipped",
              file=sys.stderr)
    return [n for n in names if n not in skipped]


def plan(model: Diagnosable, split: SplitData, options: DiagnoseOptions, *, note: bool = True,
         where: str = "split") -> list[Diagnostic]:
    """The diagnostics ``options.what`` chooses that apply to ``model`` (``applicable``), after checking the options
    against the model (``layers`` in range: an OptionError naming it) and the data (users in every part a chosen
    diagnostic reads: a ResdomError naming ``where``). Nothing is computed."""
    names = applicable(model, list(options.diagnostics), note) if options.diagnostics else []
    n_layers = len(model.attention_blocks())
    if options.layers is not None and any(not 0 <= x < n_layers for x in options.layers):
        has = f"{n_layers} blocks (0..{n_layers - 1})" if n_layers else "no attention blocks (no residual to scale)"
        raise OptionError([("layers", f"the model has {has}; got {list(options.layers)}")])
    chosen = [REGISTRY[n] for n in names]
    for d in chosen:
        empty = [p for p in d.parts(options.part) if len(getattr(split, p)) == 0]
        if empty:
            none = (split.manifest or {}).get("protocol") == "none"  # says why, as evaluate does
            raise ResdomError(f"{where}: {d.name} needs users in {' and '.join(d.parts(options.part))} (the "
                              f"{' and '.join(empty)} split has none"
                              + (f"; {_none_hint(options, split)}" if none else "") + ")")
    return chosen


def _none_hint(options: DiagnoseOptions, split: SplitData) -> str:
    """What diagnoses a run of protocol none, which holds out no test users (and valid users only with a monitoring
    slice, ``holdout_users``): a loo or gts run of the same data, or the part valid of a run with a slice, without
    what reports test users whatever the part (recovery); in the CLI's flags or the API's keywords."""
    cli = naming_flags()
    asked = list(options.what)
    runs = [n for n in asked if n == USERS or REGISTRY[n].reports is None]
    what = "" if runs == asked or not runs else (f" --what {','.join(runs)}" if cli else f", what={','.join(runs)!r}")
    part = f"--part valid{what}" if cli else f"part='valid'{what}"
    slice_ = "diagnose it with " if len(split.valid) else (
        "train with --protocol none --holdout-users N (a monitoring slice of validation users) and diagnose that "
        "run with " if cli else "prepare_split(..., protocol='none', holdout_users=N) (a monitoring slice of "
        "validation users), train on it and diagnose that with ")
    again = f"{slice_}{part}" if runs else ""
    held = "no test users held out" if len(split.valid) else "nothing held out"
    return (f"protocol none: {held}; diagnose a loo or gts run of the same data"
            + (f", or {again}" if again else ""))


@dataclass
class Diagnosed:
    """The results of one diagnose call by name (in the order computed) and the seconds each took."""

    results: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


OnResult = Callable[[int, int, Diagnostic, Any, float], None]  # (step, steps, diagnostic, result, seconds)


def compute(chosen: Sequence[Diagnostic], model: Diagnosable, split: SplitData, options: DiagnoseOptions, *,
            device: str | torch.device | None = None, progress: bool = False,
            on_result: OnResult | None = None) -> Diagnosed:
    """The one diagnose loop: each diagnostic of ``chosen`` (``plan``) of ``model`` on ``split``'s ``options.part``,
    in order, sharing one ``Context`` (the alpha sweep's ranks reach recovery). A result describes the part chosen
    (its ``split``) unless its diagnostic always reports one part. ``on_result(step, steps, diagnostic, result,
    seconds)`` after each (``run_all`` writes its files there)."""
    ctx = Context(options.part, options, device, progress)
    out = Diagnosed()
    for step, d in enumerate(chosen, start=1):
        t0 = time.perf_counter()
        result = compute_of(d)(model, split, ctx)
        if d.reports is None:
            result.split = options.part
        out.results[d.name] = result
        out.seconds[d.name] = time.perf_counter() - t0
        if on_result is not None:
            on_result(step, len(chosen), d, result, out.seconds[d.name])
    return out


# ---------------------------------------------------------------------------------------------------------
# Files


def run_all(run_dir: str | Path, options: DiagnoseOptions | None = None, *, device: str = "cpu",
            progress: bool = True, **values: Any) -> dict[str, Any]:
    """Diagnose the run in ``run_dir``; write the files; return the summary (also summary.json).

    ``options``, or the same as keywords (``DiagnoseOptions`` fields; ``split`` is ``part``); bad values are an
    OptionError naming the field."""
    if "split" in values:
        values["part"] = values.pop("split")
    if options is not None and values:
        raise TypeError(f"run_all: give options or keywords, not both (got {', '.join(values)})")
    if options is not None and not isinstance(options, DiagnoseOptions):  # was an AttributeError when first read
        raise ResdomError(f"options: expected a DiagnoseOptions or None (got {type(options).__name__}); or give its "
                          "fields as keywords")
    options = options if options is not None else diagnose_options(**values)
    run = load_run(run_dir, device=device)
    rank, world = rank_and_world()
    if run.training_note() and rank == 0:
        print(visible(run.training_note() or ""), file=sys.stderr)
    chosen = plan(run.model, run.split, options, note=rank == 0, where=f"{run.directory}/data")
    files = RunDir(run_dir)
    check_links(files.dir, (files.diagnostics.name,), "RUN_DIR")  # never delete or write through a link out
    with ExitStack() as held:
        # one writer of RUN_DIR/diagnostics at a time (two calls would leave each other's files mixed): rank 0 holds
        # the lock, and every rank ends with its line where another process holds it
        on_main_rank(lambda: held.enter_context(directory_lock(files.diagnostics, "diagnosing", "stop it")),
                     rank == 0, world)
        if rank == 0:  # under the lock: what a killed diagnose left (results of another checkpoint, temporaries)
            discard_stale(files.diagnostics, run.checkpoint)
            remove_temporaries(files.diagnostics)
        return _diagnose_into(files, run, chosen, options, device, progress, rank, world)


def _diagnose_into(files: RunDir, run: Run, chosen: list[Diagnostic], options: DiagnoseOptions,
                   device: str | torch.device | None, progress: bool, rank: int, world: int) -> dict[str, Any]:
    """``run_all``'s computing and writing, with RUN_DIR/diagnostics locked by rank 0."""
    lines = progress and rank == 0 and not sys.stderr.isatty()  # a log gets one line per stage instead of bars

    def write(step: int, steps: int, d: Diagnostic, result: Any, seconds: float) -> None:
        if rank == 0:
            # the summary describes the files as they were: stale from this call's first file until it is
            # rewritten at the end (a call that fails half-way leaves none, and is_finished then says so)
            files.summary.unlink(missing_ok=True)
            write_result(files, d, result, seconds, run.checkpoint)
        if lines:
            print(visible(f"diagnose [{step}/{steps}] {d.name}: done in {seconds:.0f} s -> {files.diagnostic(d.name)}"),
                  file=sys.stderr, flush=True)

    done = compute(chosen, run.model, run.split, options, device=device, progress=progress, on_result=write)
    if options.users:  # the per-user evidence, after the diagnostics whose ranks it reuses
        t0 = time.perf_counter()
        ev = users_evidence(run.model, run.split, done.results, options, device, progress)
        ev.header.update(checkpoint=run.checkpoint, seconds=round(time.perf_counter() - t0, 3))
        if rank == 0:
            files.summary.unlink(missing_ok=True)
            atomic_write_bytes(files.users, ev.to_bytes())
        if lines:
            print(visible(f"diagnose users: done in {time.perf_counter() - t0:.0f} s -> {files.users}"),
                  file=sys.stderr, flush=True)
    summary: dict[str, Any] = {}
    if rank == 0:
        summary = summarise(files.diagnostics, options.part, run.checkpoint)
        # every diagnostic file of this checkpoint says what it cost, also those an earlier call computed
        costs = {n: _read_file(files.diagnostic(n)) for n in REGISTRY if files.diagnostic(n).is_file()}
        users = read_header(files.users) if files.users.is_file() else None
        if users is not None:
            costs[USERS] = users
        summary["seconds"] = {n: d["seconds"] for n, d in costs.items()
                              if d.get("checkpoint") == run.checkpoint and "seconds" in d}
        atomic_write_json(files.summary, summary)
    if world > 1:
        box = [summary]
        dist.broadcast_object_list(box, src=0)
        summary = box[0]
    return summary


def users_evidence(model: Diagnosable, data: SplitData, results: dict[str, Any], options: DiagnoseOptions,
                   device: str | torch.device | None, progress: bool) -> UserEvidence:
    """The per-user evidence on the test split, from the ranks of this call's alpha sweep (where it ran on the test
    split) and recovery (``results``), the rest computed (``evidence.user_evidence``)."""
    sweep = results["alpha"].user_ranks if "alpha" in results and options.part == "test" else None
    rec = results.get(RECOVERY)
    return user_evidence(model, data, list(options.alphas), options.layer_list(),
                         rec.K if rec is not None else K_RECOVERY, sweep=sweep,
                         recoverable=rec.test.recoverable_users if rec is not None else None,
                         batch_size=options.batch_size, device=device, progress=progress)


def _frame_csv(table: Any, end: str) -> str:
    return table.to_csv(index=False, lineterminator=end)


def write_result(files: RunDir, d: Diagnostic, result: Any, seconds: float, checkpoint: str) -> None:
    """``<name>.json`` (``result.to_dict()``, with the seconds it took and the checkpoint it describes) and its CSV
    files, each the result's table (``d.frames``: ``to_frame()``), atomically and together: a failure half-way (a
    full disk) leaves the previous call's files, never a JSON file of this call beside a CSV file of another."""
    data = {**result.to_dict(), "seconds": round(seconds, 3), "checkpoint": checkpoint}
    tables = {files.diagnostic(d.name, f"{suffix}.csv"): csv_text(functools.partial(_frame_csv, frame(result)))
              for suffix, frame in d.frames.items()}
    # the JSON file, which names the checkpoint, is renamed into place last
    atomic_write_files({**{path: text.encode("utf-8") for path, text in tables.items()},
                        files.diagnostic(d.name): json_bytes(data)})


# ---------------------------------------------------------------------------------------------------------
# Summary


def _read_file(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return {}


def discard_stale(out_dir: Path, checkpoint: str) -> list[str]:
    """Delete the diagnostics files in ``out_dir`` computed on another checkpoint than ``checkpoint`` (or naming
    none): they describe a model that is no longer there. Returns the names of the results removed."""
    removed = []
    for name in (*REGISTRY, "summary"):
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
    """Headline numbers (each diagnostic's ``headline``) of the diagnostics files in ``out_dir`` computed on
    ``split`` (a diagnostic that always reports one part, recovery: whatever part that is) and on the checkpoint
    ``checkpoint`` (``resdom.runs.checkpoint_id``); files of any other checkpoint are left out. ``n_users``: the
    number of users of ``split`` the files describe."""
    s: dict[str, Any] = {"split": split, "checkpoint": checkpoint}
    for d in REGISTRY.values():
        data = _read_file(out_dir / f"{d.name}.json")
        if not data or data.get("checkpoint") != checkpoint or (d.reports is None and data.get("split") != split):
            continue
        if (d.reports or split) == split:
            s.setdefault("n_users", data.get("n_users"))
        s.update(d.headline(data))
    if s.get("n_users") is None:  # only the per-user evidence (--what users): its header counts the users
        header = read_header(out_dir / f"{USERS}.npz") or {}
        if header.get("checkpoint") == checkpoint and header.get("split") == split:
            s["n_users"] = header.get("n_users")
    return jsonable(s)


# ---------------------------------------------------------------------------------------------------------
# Readable summary for the CLI


def format_summary(summary: dict[str, Any]) -> str:
    """A few aligned lines / small tables of the summary, for the terminal: a header, then each diagnostic's
    ``lines``."""
    n = summary.get("n_users")
    lines = [f"split {summary.get('split')}" + (f", {counted(n)}" if n is not None else "")]
    for d in REGISTRY.values():
        lines += d.lines(summary)
    return "\n".join(lines)
