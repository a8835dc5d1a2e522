"""``resdom recommend RUN_DIR``: the top K items for users of a run (trained or imported), in the data's own ids,
as CSV (user, item, rank, score)."""

from __future__ import annotations

from pathlib import Path

import typer

from resdom.cli.values import parse_alphas, positive_int
from resdom.data.readers import parser_error, refuse_binary
from resdom.distributed import resolve_device
from resdom.errors import ResdomError
from resdom.io import atomic_write_bytes
from resdom.recommend import recommend as top_items
from resdom.rundir import check_output_file
from resdom.runs import load_run

USERS_HELP = ("'all' (every user), a file of user ids: one id a line, exactly as in the data (a .csv file: its "
              "'user_id' or 'user' column, else its first), or ids themselves, comma-separated (where no such file "
              "exists: --users u1,u2); an id listed twice gets its rows once")


def user_ids(users: str) -> list[str] | None:
    """What ``--users`` asks for: None for ``all``; the ids of the file it names (``read_user_ids``); else the ids
    themselves, comma-separated, each kept exactly (empty pieces skipped)."""
    if users == "all":
        return None
    if _names_a_file(users):
        return read_user_ids(Path(users))
    ids = [u for u in users.split(",") if u]
    if not ids:
        raise ResdomError(f"--users {users!r}: no user ids in it")
    return ids


def _names_a_file(users: str) -> bool:
    """Whether ``--users`` names something on disk (a file of ids, or what is refused as one), not ids themselves."""
    return Path(users).exists() or Path(users).is_symlink()


def read_user_ids(path: Path) -> list[str]:
    """The user ids of ``path``: one a line, kept exactly but for the line break (blank lines skipped); a ``.csv``
    file: its ``user_id`` or ``user`` column (else the first), every value as text. [] is a ResdomError."""
    if path.is_dir():
        raise ResdomError(f"--users {path}: is a directory; give a file of user ids or 'all'")
    if not path.is_file():
        raise ResdomError(f"--users {path}: no such file (give a file of user ids, one a line, the ids themselves, "
                          "comma-separated, or 'all')")
    try:
        refuse_binary(path, advice=False)  # a zip or Parquet file: say what it is
        if path.suffix.lower() == ".csv":
            ids = _csv_ids(path)
        else:
            try:
                text = path.read_bytes().decode("utf-8-sig")  # without a leading byte-order mark
            except OSError as e:
                raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None
            except UnicodeDecodeError:
                raise ResdomError(f"{path}: not UTF-8 text") from None
            ids = [line for line in text.splitlines() if line.strip()]
    except ResdomError as e:
        raise ResdomError(f"--users {e}") from None
    if not ids:
        raise ResdomError(f"--users {path}: no user ids in it")
    return ids


def _csv_ids(path: Path) -> list[str]:
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except UnicodeDecodeError:
        raise ResdomError(f"{path}: not UTF-8 text") from None
    except pd.errors.ParserError as e:
        raise parser_error(path, e) from None
    except pd.errors.EmptyDataError:
        raise ResdomError(f"{path}: file is empty") from None
    except OSError as e:
        raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None
    if df.shape[1] == 0:
        raise ResdomError(f"{path}: no columns")
    column = next((c for c in ("user_id", "user") if c in df.columns), None)
    if column is None:  # a file of bare ids would lose its first one to the header without a word
        column = df.columns[0]
        typer.echo(f"note: --users {path}: no column 'user_id' or 'user'; read the first column, taking its first "
                   f"line {column!r} as the header (name the column user_id to say so; a file of ids alone: .txt)",
                   err=True)
    return [v for v in df[column].tolist() if v != ""]


def recommend(
    run_dir: Path = typer.Argument(..., help="a run directory (`resdom train`, an import, or Fitted.save)"),
    users: str = typer.Option("all", "--users", help=USERS_HELP),
    k: int = typer.Option(10, "--k", help="items per user"),
    out: Path | None = typer.Option(None, "--out", "-o", help="CSV file to write (user,item,rank,score); default: "
                                    "print the CSV"),
    alpha: float = typer.Option(1.0, "--alpha", help="residual scale at inference, in [0, 1] (1: as trained)"),
    filter_seen: bool | None = typer.Option(
        None, "--filter/--no-filter",
        help="never (or also) recommend items the user already has; default: the data set's setting (filtered, "
             "but for data sets that keep seen items, as evaluation)"),
    history: str = typer.Option("all", "--history", help="all (each user's whole history), or test / valid (that "
                                "part's inputs, as evaluation scores them)"),
    device: str = typer.Option("auto", "--device", help="auto (cuda, then mps, then cpu) | cpu | cuda | mps"),
    batch_size: int = typer.Option(256, "--batch-size", help="users per chunk"),
) -> None:
    """Top K items per user, in the data's own user and item ids, as CSV: user,item,rank,score."""
    positive_int(k, "--k")
    positive_int(batch_size, "--batch-size")
    (scale,) = parse_alphas(str(alpha), "--alpha") or [1.0]
    if out is not None:
        check_output_file(out, "--out", "user,item,rank,score", "a recommendations file")
    wanted = user_ids(users)
    dev = resolve_device(device, "--device")
    run = load_run(run_dir, device=dev)
    if run.training_note():
        typer.echo(run.training_note(), err=True)
    filtered = run.split.filter_seen if filter_seen is None else filter_seen
    try:
        frame = top_items(run.model, run.split, wanted, k, filter_seen=filtered, alpha=scale, history=history,
                          batch_size=batch_size, device=dev)
    except ResdomError as e:
        where = f"--users {users}" if str(e).startswith("users:") else ""
        message = str(e).replace("users: ", f"{where}: ", 1) if where else str(e).replace("history:", "--history:")
        if where and wanted is not None and len(wanted) == 1 and not _names_a_file(users):  # a mistyped file name?
            message = f"--users {users}: no such file, nor a user id of the data (give a file of user ids, the ids " \
                      "themselves, comma-separated, or 'all')"
        raise ResdomError(message) from None
    if frame.attrs.get("note"):
        typer.echo(f"note: {frame.attrs['note']}", err=True)
    text = frame.to_csv(index=False, lineterminator="\n")
    if out is None:
        typer.echo(text, nl=False)
        return
    atomic_write_bytes(out, text.encode("utf-8"))
    n_users = frame["user"].nunique()
    typer.echo(f"{out}: {len(frame):,} recommendations for {n_users:,} users (top {k}, seen items "
               f"{'filtered' if filtered else 'kept'}{'' if scale == 1.0 else f', alpha {scale:g}'})", err=True)


def register(app: typer.Typer) -> None:
    app.command("recommend")(recommend)
