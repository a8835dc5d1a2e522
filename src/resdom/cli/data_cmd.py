"""``resdom data``: statistics, splits and the registry of named data sets (spec §1)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import typer

from resdom.cli.data_options import DATA_DIR_HELP, SOURCE_HELP, DataOptions, data_options, is_split_dir
from resdom.cli.values import say
from resdom.data.download import data_folders, resolve_dataset_files
from resdom.data.prepare import source_paths
from resdom.data.registry import DATASETS, get_dataset
from resdom.data.sequences import check_split_folder
from resdom.data.stats import format_stats
from resdom.errors import ResdomError
from resdom.rundir import SPLIT, InputPaths, check_output_inputs, or_force, output_lock, write_marker

data_app = typer.Typer(help="Data sets: statistics, splits (loo / gts / none), the registry.", no_args_is_help=True)


@data_app.command("stats")
@data_options(split=False)
def stats_cmd(
    source: str = typer.Argument(..., help=SOURCE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
    data: DataOptions = DataOptions(),
) -> None:
    """Users, items, interactions, average / max length, density and span in days, after preprocessing."""
    _, manifest = data.load_prepared(source)  # a split folder: its manifest, which holds the same statistics
    try:
        if as_json:
            out = {**manifest["dataset"], "source": manifest["source"], "preprocessing": manifest["preprocessing"]}
            text = json.dumps(out, indent=2, sort_keys=True)
        else:
            lines = [f"{source} ({manifest['source'].get('format', manifest['source']['kind'])})",
                     *(f"  {line}" for line in format_stats(manifest["dataset"])),
                     f"  {_preprocessing_line(manifest['preprocessing']['steps'])}"]
            text = "\n".join(lines)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a hand-edited manifest.json of a split folder
        detail = f"no field {e}" if isinstance(e, KeyError) else str(e)[:200] or type(e).__name__
        raise ResdomError(f"{source}: its manifest.json is not what `resdom data split` writes ({detail}); run "
                          "`resdom data split` again") from None
    say(text)


def _preprocessing_line(steps: list[dict[str, Any]]) -> str:
    parts = []
    for s in steps:
        if s["step"] == "sample_users":
            parts.append(f"{s['users']:,} users sampled (seed {s['seed']})")
        elif s["step"] == "k_core":
            if s.get("applied", True):  # a count, as the data: line gives it ("k-core 5: -0" read as a sign)
                removed = s["removed_interactions"]
                parts.append(f"k-core {s['k']}: {removed:,} interaction{'' if removed == 1 else 's'} removed")
            else:
                parts.append("no k-core")
        elif s["step"] == "remove_consecutive_repeats":
            parts.append(f"repeats removed: {s['removed_interactions']:,}" if s.get("applied", True)
                         else f"repeats kept: {s['consecutive_repeats_kept']:,}")
        elif s["step"] == "order":
            parts.append(s["rule"])
    return "preprocessing: " + "; ".join(parts)


@data_app.command("split")
@data_options(split=True)
def split_cmd(
    source: str = typer.Argument(..., help=SOURCE_HELP),
    out: Path = typer.Option(..., "--out", help="Output folder (arrays.npz + manifest.json); `resdom train OUT` "
                             "trains on exactly this split."),
    force: bool = typer.Option(False, "--force", help="replace another split saved in --out (the old one is moved "
                               "aside, OUT.replaced-K; a folder of other files or a run is refused even then)"),
    data: DataOptions = DataOptions(),
) -> None:
    """Prepare and split SOURCE; write OUT/arrays.npz and OUT/manifest.json and print a summary."""
    check_split_folder(out, "--out")  # before the work: a folder of other files is refused at once
    inputs: InputPaths = {"SOURCE": tuple(source_paths(source)), **data_folders(data.data_dir)}
    check_output_inputs(out, "--out", inputs, read_whole=("SOURCE",) if is_split_dir(source) else ())
    split = data.split(source)
    made = json.loads(json.dumps(split.manifest))

    def check() -> bool:  # again under the lock: another `data split --out` may have saved there meanwhile
        replace = _check_out(out, check_split_folder(out, "--out"), made, force)
        check_output_inputs(out, "--out", inputs, replaced=replace)  # never moved aside with what it splits
        return replace

    with output_lock(out, check) as aside:
        if aside is not None:
            say(f"--force: {out} moved aside to {aside}", err=True)
        split.save(out)
        write_marker(out, SPLIT)
    protocol = split.manifest.get("protocol", data.protocol_choice)
    m = split.manifest
    say(f"{source}: {protocol} split, {m['n_users']:,} users, {split.n_items:,} items -> {out}")
    if m.get("thresholds"):
        t = m["thresholds"]
        say(f"  T_test {t['T_test_iso']} ({t['T_test']}), T_val {t['T_val_iso']} ({t['T_val']})")
    for part in ("train", "valid", "test"):
        c = m["counts"][part]
        extra = f", {c['targets']:,} targets ({c['cold_targets']:,} cold)" if "targets" in c else ""
        say(
            f"  {part:<6}{c['users']:>9,} users {c['items']:>8,} items {c['interactions']:>10,} interactions{extra}"
        )
    if m["counts"]["valid"]["users"] == 0 and protocol != "none":  # train refuses it: say so now, not after the
        # split is used (a none split trains its epochs and keeps the last: nothing to stop early on)
        hint = "; a lower --valid-quantile moves T_val earlier" if protocol == "gts" else ""
        say(f"note: the valid part is empty, so `resdom train {shlex.quote(str(out))}` will refuse this split (early "
            f"stopping and the best checkpoint need validation users){hint}", err=True)


def _check_out(out: Path, saved: dict[str, Any] | None, made: dict[str, Any], force: bool) -> bool:
    """Whether --out, holding the split ``saved`` (None: nothing), is to be moved aside before the split ``made`` is
    saved there; a ResdomError where it holds another split and ``force`` is not given."""
    if saved is None or saved == made:
        return False
    if not force:
        raise ResdomError(f"--out {out}: holds another split ({_made_from(saved)}); choose another --out"
                          f"{or_force(out, 'save this one')}")
    return True


def _made_from(manifest: dict[str, Any]) -> str:
    """What a saved split was made from, for a message: its source and protocol."""
    source = manifest.get("source")
    name = source.get("name") if isinstance(source, dict) else None
    return f"made from {name or 'an unknown source'}, {manifest.get('protocol', 'unknown')} protocol"


@data_app.command("list")
def list_cmd() -> None:
    """The registered data sets, their format and description; \\[by hand]: resdom cannot download a file of it
    (`resdom data download NAME` says which file to fetch and where to put it)."""
    width = max(len(name) for name in DATASETS) + 1
    for spec in DATASETS.values():
        hand = " [by hand]" if spec.manual else ""
        say(f"{spec.name:<{width}} {spec.fmt:<17} {spec.description}{hand}")
    say(f"{'synthetic':<{width}} {'generated':<17} planted structure; knobs: "
        "synthetic:p_last=0.6,n_users=3000,...")


@data_app.command("download")
def download_cmd(
    names: list[str] = typer.Argument(..., help="Registered data set names."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
) -> None:
    """Make sure the files of registered data sets are available locally (verify or download)."""
    for name in names:
        for f in resolve_dataset_files(get_dataset(name), data_dir):
            say(f"{name}: {f.path} ({f.origin}, sha256 ok)")


def register(app: typer.Typer) -> None:
    """Add the ``data`` group to the ``resdom`` app."""
    app.add_typer(data_app, name="data")
