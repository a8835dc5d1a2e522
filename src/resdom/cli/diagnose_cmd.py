"""``resdom diagnose RUN_DIR``: the spec §4 diagnostics of a trained run, written under RUN_DIR/diagnostics/."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import typer

from resdom.api import diagnose_run
from resdom.cli.values import interrupted, progress_option, say
from resdom.diagnostics.options import DEFAULTS, USED_BY, DiagnoseOptions, diagnose_options, refuse_unused
from resdom.diagnostics.registry import diagnostic_names
from resdom.diagnostics.runner import format_summary
from resdom.distributed import setup
from resdom.errors import OptionError, ResdomError
from resdom.names import USERS
from resdom.report.collect import older_readings, read_run
from resdom.rundir import RunDir

# DiagnoseOptions field -> the flag that sets it (an OptionError names the flag)
FLAGS: dict[str, str] = {"what": "--what", "part": "--part", "definition": "--definition", "seeds": "--seeds",
                         "alphas": "--alphas", "layers": "--layers", "per_head": "--per-head",
                         "batch_size": "--batch-size"}


ALPHAS_TEXT = ", ".join(f"{a:g}" for a in DEFAULTS.alphas)  # --alphas' default, as the help shows it (wrapped whole)


def options_from_flags(**values: object) -> DiagnoseOptions:
    """The command's options, validated by ``DiagnoseOptions`` (lists as the comma-separated text given), with a
    bad value's error naming its flag. An empty ``--alphas`` is its default, as ``--what`` and ``--layers`` are
    (``main.EMPTY_MEANS_ALL``)."""
    if isinstance(values.get("alphas"), str) and not str(values["alphas"]).strip():
        values["alphas"] = None
    try:
        return diagnose_options(**{k: v for k, v in values.items() if v is not None})
    except OptionError as e:
        raise e.renamed(FLAGS) from None


def _mtimes(run_dir: Path, names: list[str]) -> dict[str, int | None]:
    """Modification time (ns) of each diagnostic's JSON file (``users``: users.npz) under RUN_DIR/diagnostics
    (None: absent)."""
    out: dict[str, int | None] = {}
    for name in names:
        path = RunDir(run_dir).users if name == USERS else RunDir(run_dir).diagnostic(name)
        out[name] = path.stat().st_mtime_ns if path.is_file() else None
    return out


def _interrupted_message(run_dir: Path, names: list[str], before: dict[str, int | None],
                         given: dict[str, str]) -> str:
    """What an interrupted ``diagnose`` kept (the diagnostics it finished: each file is written when its
    diagnostic is done) and the command that computes the rest: ``given`` (flag -> value as typed, ``""`` for a
    flag without a value) of the command line, less those no diagnostic left reads (``--alphas`` once alpha is
    done), which that command would refuse."""
    now = _mtimes(run_dir, names)
    done = [n for n in names if now[n] is not None and now[n] != before[n]]
    left = [n for n in names if n not in done]
    kept = (f"{Path(run_dir) / 'diagnostics'}/ keeps the diagnostics finished before the interruption "
            f"({', '.join(done)})" if done else "no diagnostic had finished, nothing new was written")
    readers = {FLAGS[k]: v for k, v in USED_BY.items() if k in FLAGS}
    rest = [f"{flag} {shlex.quote(value)}" if value else flag for flag, value in given.items()
            if flag not in readers or any(n in left for n in readers[flag])]
    command = " ".join(["resdom diagnose", shlex.quote(str(run_dir)), "--what", ",".join(left), *rest])
    return f"interrupted: {kept}; to compute the rest, run `{command}` (summary.json then covers all of them)"


def diagnose(
    run_dir: Path = typer.Argument(..., help="a run directory written by `resdom train`"),
    what: str = typer.Option("all", "--what", help=f"all, or some of {', '.join((*diagnostic_names(), USERS))}, "
                              f"comma-separated ({USERS}: the per-user evidence, {USERS}.npz)"),
    split: str = typer.Option(DEFAULTS.part, "--part", "--split",
                              help="valid or test: the part of the split diagnosed (resdom.diagnose's part; --split is "
                                   "its older name); recovery always selects on valid, reports test"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    device: str = typer.Option("auto", "--device", help="auto (cuda, then mps, then cpu), cpu, cuda or mps; under "
                               "torchrun users are sharded"),
    definition: str = typer.Option(None, "--definition",
                                   help=f"mixing ratio: norm_of_sums or sum_of_norms (default {DEFAULTS.definition})"),
    batch_size: int = typer.Option(DEFAULTS.batch_size, "--batch-size",
                                   help="users per batch (lowered for large catalogs)"),
    seeds: str = typer.Option(None, "--seeds", help="shuffle seeds, comma-separated (default "
                              f"{','.join(map(str, DEFAULTS.seeds))})"),
    alphas: str = typer.Option(None, "--alphas", help="residual scales in [0, 1], comma-separated (default "
                               f"{ALPHAS_TEXT})"),
    layers: str = typer.Option(None, "--layers", help="blocks whose residual is scaled (default all), e.g. 0,1"),
    per_head: bool = typer.Option(DEFAULTS.per_head, "--per-head", help="also report per-head mixing ratios"),
    progress: bool = progress_option(),
) -> None:
    """Diagnose last-item reliance: every registered diagnostic (see --what), written under RUN_DIR/diagnostics/."""
    options = options_from_flags(what=what, part=split, definition=definition, batch_size=batch_size, seeds=seeds,
                                 alphas=alphas, layers=layers, per_head=per_head)
    given = {"seeds": seeds, "definition": definition, "per_head": per_head, "alphas": alphas, "layers": layers}
    try:  # a flag of a diagnostic --what leaves out (unset: None, --per-head not given, "" for the default)
        refuse_unused(options, [k for k, v in given.items()
                                if not (v is None or v is False or (isinstance(v, str) and not v.strip()))], "--what ")
    except OptionError as e:
        raise e.renamed(FLAGS) from None
    names = list(options.what)
    before = _mtimes(run_dir, names)
    ctx = setup(device, "--device")  # under torchrun: join the process group; each rank diagnoses its shard of users
    try:
        summary = diagnose_run(run_dir, options, device=ctx.device, progress=progress and ctx.is_main)
    except OptionError as e:  # checked against the model (--layers)
        raise e.renamed(FLAGS) from None
    except KeyboardInterrupt:
        typed: dict[str, str | None] = {
            "--part": split, "--definition": definition, "--batch-size": str(batch_size), "--seeds": seeds,
            "--alphas": alphas, "--layers": layers, "--device": device}
        defaults = {"--part": DEFAULTS.part, "--batch-size": str(DEFAULTS.batch_size), "--device": "auto"}
        flags = {k: v for k, v in typed.items() if v is not None and v.strip() and v != defaults.get(k)}
        flags |= {"--per-head": ""} if per_head else {}
        raise interrupted(_interrupted_message(run_dir, names, before, flags) if ctx.is_main else None) from None
    finally:
        ctx.close()
    if not ctx.is_main:
        return
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
    else:
        say(format_summary(summary))
        say(f"written: {Path(run_dir) / 'diagnostics'}/")
        try:  # a file an earlier call left, of an older resdom's meaning (the summary shows it as stored)
            notes = older_readings(read_run(run_dir))
        except ResdomError:
            notes = []  # what report cannot read is its to name
        for note in notes:
            say(f"note: {note}", err=True)


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose)
