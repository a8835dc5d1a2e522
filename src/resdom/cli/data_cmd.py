"""``resdom data``: statistics, splits and the registry of named data sets (SPEC 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

SOURCE_HELP = (
    "A registered data set (see 'resdom data list'), 'synthetic' or 'synthetic:knob=value,...', or a path: "
    "one file, 'items.txt,times.txt' (paired files), or a folder with one *item* and one *time* file."
)
DATA_DIR_HELP = (
    "Folder laid out like shared/data/raw (bsarec/Beauty.txt, ...) holding the registered files. "
    "Default: $RESDOM_DATA_DIR, then the user cache ($RESDOM_CACHE_DIR or ~/.cache/resdom), then download."
)
FORMAT_HELP = "Input format: user-lines, paired, interactions, recbole, csv, tsv, parquet, movielens (default: detect)."

data_app = typer.Typer(help="Data sets: statistics, splits (loo / gts), the registry.", no_args_is_help=True)


def _options(
    k_core: int | None, remove_repeats: bool | None, user_col: str | None, item_col: str | None,
    time_col: str | None,
) -> dict[str, Any]:
    """Only the options the user gave (None = the source's preset / the default)."""
    opts: dict[str, Any] = {"user_col": user_col, "item_col": item_col, "time_col": time_col}
    if k_core is not None:
        opts["k_core"] = k_core
    if remove_repeats is not None:
        opts["remove_repeats"] = remove_repeats
    return {k: v for k, v in opts.items() if v is not None}


_K_CORE = typer.Option(None, "--k-core", help="Iterative k-core (0: off). Default 5; ml-100k / ml-1m-part: off.")
_REPEATS = typer.Option(
    None, "--remove-repeats/--keep-repeats", help="Remove consecutive repeats of an item within a user (default keep)."
)
_USER_COL = typer.Option(None, "--user-col", help="User column (csv/tsv/parquet/recbole; default user_id).")
_ITEM_COL = typer.Option(None, "--item-col", help="Item column (csv/tsv/parquet/recbole; default item_id).")
_TIME_COL = typer.Option(None, "--time-col", help="Timestamp column (csv/tsv/parquet/recbole; default timestamp).")


@data_app.command("stats")
def stats_cmd(
    source: str = typer.Argument(..., help=SOURCE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
    fmt: str | None = typer.Option(None, "--format", help=FORMAT_HELP),
    k_core: int | None = _K_CORE,
    remove_repeats: bool | None = _REPEATS,
    user_col: str | None = _USER_COL,
    item_col: str | None = _ITEM_COL,
    time_col: str | None = _TIME_COL,
) -> None:
    """Users, items, interactions, average / max length, density and span in days, after preprocessing."""
    from resdom.data.prepare import load_prepared
    from resdom.data.stats import format_stats

    _, manifest = load_prepared(source, data_dir, fmt, **_options(k_core, remove_repeats, user_col, item_col,
                                                                   time_col))
    if as_json:
        out = {**manifest["dataset"], "source": manifest["source"], "preprocessing": manifest["preprocessing"]}
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    typer.echo(f"{source} ({manifest['source'].get('format', manifest['source']['kind'])})")
    for line in format_stats(manifest["dataset"]):
        typer.echo(f"  {line}")
    typer.echo(f"  {_preprocessing_line(manifest['preprocessing']['steps'])}")


def _preprocessing_line(steps: list[dict[str, Any]]) -> str:
    parts = []
    for s in steps:
        if s["step"] == "k_core":
            parts.append(f"k-core {s['k']}: -{s['removed_interactions']:,}" if s.get("applied", True) else "no k-core")
        elif s["step"] == "remove_consecutive_repeats":
            parts.append(f"repeats removed: {s['removed_interactions']:,}" if s.get("applied", True)
                         else f"repeats kept: {s['consecutive_repeats_kept']:,}")
        elif s["step"] == "order":
            parts.append(s["rule"])
    return "preprocessing: " + "; ".join(parts)


@data_app.command("split")
def split_cmd(
    source: str = typer.Argument(..., help=SOURCE_HELP),
    out: Path = typer.Option(..., "--out", help="Output folder (arrays.npz + manifest.json)."),
    protocol: str = typer.Option("loo", "--protocol", help="loo (leave-one-out) or gts (global temporal split)."),
    quantile: float = typer.Option(0.9, "--quantile", help="GTS: T_test = this quantile of all timestamps."),
    valid_quantile: float | None = typer.Option(
        None, "--valid-quantile", help="GTS: T_val = this quantile of the training pool's times (default: --quantile)."
    ),
    data_dir: Path | None = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
    fmt: str | None = typer.Option(None, "--format", help=FORMAT_HELP),
    k_core: int | None = _K_CORE,
    remove_repeats: bool | None = _REPEATS,
    user_col: str | None = _USER_COL,
    item_col: str | None = _ITEM_COL,
    time_col: str | None = _TIME_COL,
) -> None:
    """Prepare and split SOURCE; write OUT/arrays.npz and OUT/manifest.json and print a summary."""
    from resdom.data.prepare import prepare_split

    opts = _options(k_core, remove_repeats, user_col, item_col, time_col)
    if valid_quantile is not None:
        opts["valid_quantile"] = valid_quantile
    split = prepare_split(source, protocol, quantile, data_dir, fmt, **opts)
    split.save(out)
    m = split.manifest
    typer.echo(f"{source}: {protocol} split, {m['n_users']:,} users, {split.n_items:,} items -> {out}")
    if m.get("thresholds"):
        t = m["thresholds"]
        typer.echo(f"  T_test {t['T_test_iso']} ({t['T_test']}), T_val {t['T_val_iso']} ({t['T_val']})")
    for part in ("train", "valid", "test"):
        c = m["counts"][part]
        extra = f", {c['targets']:,} targets ({c['cold_targets']:,} cold)" if "targets" in c else ""
        typer.echo(
            f"  {part:<6}{c['users']:>9,} users {c['items']:>8,} items {c['interactions']:>10,} interactions{extra}"
        )


@data_app.command("list")
def list_cmd() -> None:
    """The registered data sets, their format and upstream files."""
    from resdom.data.registry import DATASETS

    for spec in DATASETS.values():
        typer.echo(f"{spec.name:<12} {spec.fmt:<11} {spec.description}")
    typer.echo(f"{'synthetic':<12} {'generated':<11} planted structure; knobs: synthetic:p_last=0.6,n_users=3000,...")


@data_app.command("download")
def download_cmd(
    names: list[str] = typer.Argument(..., help="Registered data set names."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
) -> None:
    """Make sure the files of registered data sets are available locally (verify or download)."""
    from resdom.data.download import resolve_dataset_files
    from resdom.data.registry import get_dataset

    for name in names:
        for f in resolve_dataset_files(get_dataset(name), data_dir):
            typer.echo(f"{name}: {f.path} ({f.origin}, sha256 ok)")


def register(app: typer.Typer) -> None:
    """Add the ``data`` group to the ``resdom`` app."""
    app.add_typer(data_app, name="data")
