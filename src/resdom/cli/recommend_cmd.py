"""``resdom recommend RUN_DIR``: the top K items for users of a run (trained or imported), or for sessions of item
ids, in the data's own ids, as CSV in RecTools' columns (user_id, item_id, score, rank); ``resdom similar RUN_DIR``:
each item's nearest items by the model's output embeddings (target_item_id, item_id, score, rank)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from resdom.bounded import load_json, refuse_special
from resdom.checks import launch_env
from resdom.cli.values import one_filter, parse_alphas, positive_int, print_file, printed_if_dash, progress_option, say
from resdom.data.readers import (
    DEFAULT_COLUMNS,
    parser_error,
    refuse_binary,
    refuse_spanning_lines,
    text_lines,
    time_column_seconds,
)
from resdom.distributed import resolve_device
from resdom.errors import ResdomError
from resdom.io import atomic_stream, csv_text
from resdom.limits import quote
from resdom.recommend import (
    COLUMNS,
    OLD_HEADER,
    SIMILAR_COLUMNS,
    item_lookup,
    label_texts,
    other_spelling,
    recommend_lists,
    similar_lists,
)
from resdom.records import counted
from resdom.rundir import check_output_file
from resdom.runs import load_run

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

HEADER, SIMILAR_HEADER = ",".join(COLUMNS), ",".join(SIMILAR_COLUMNS)
TIME_COLUMN = DEFAULT_COLUMNS["time_col"]  # a --sequences table's rows are ordered by it where it has it

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


def _refuse_special(path: Path, option: str) -> None:
    """A device, a FIFO or a socket named by ``option`` is refused as such (reading one may never end), not as
    a file that is not there."""
    try:
        refuse_special(path)
    except ResdomError as e:
        raise ResdomError(f"{option} {e}") from None


def _missing(path: Path) -> str:
    """Why ``path``, which is no file, cannot be read: a link to nothing (or a loop of links), or nothing there."""
    return "a symbolic link to nothing (or a loop of links)" if path.is_symlink() else "no such file"


def read_user_ids(path: Path) -> list[str]:
    """The user ids of ``path``: one a line, kept exactly but for the line break (blank lines skipped); a ``.csv``
    file: its ``user_id`` or ``user`` column (else the first), every value as text. [] is a ResdomError."""
    return read_ids(path, "--users", ("user_id", "user"))


def read_ids(path: Path, option: str, columns: tuple[str, str]) -> list[str]:
    """The ids of ``path`` (``read_user_ids``) for ``option``; a .csv file's column is the first of ``columns``
    it has (else its first column)."""
    what, everyone = columns[1], "'all'" if option == "--users" else ""
    if path.is_dir():
        raise ResdomError(f"{option} {path}: is a directory; give a file of {what} ids"
                          f"{' or ' + everyone if everyone else ''}")
    _refuse_special(path, option)
    if not path.is_file():
        raise ResdomError(f"{option} {path}: {_missing(path)} (give a file of {what} ids, one a line, the ids "
                          f"themselves, comma-separated{', or ' + everyone if everyone else ''})")
    try:
        refuse_binary(path, advice=False)  # a zip or Parquet file: say what it is
        if path.suffix.lower() == ".csv":
            ids = _csv_ids(path, option, columns)
        else:
            try:
                text = path.read_bytes().decode("utf-8-sig")  # without a leading byte-order mark
            except OSError as e:
                raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None
            except UnicodeDecodeError:
                raise ResdomError(f"{path}: not UTF-8 text") from None
            ids = [line for line in text_lines(text) if line.strip()]
    except ResdomError as e:
        raise ResdomError(f"{option} {e}") from None
    if not ids:
        raise ResdomError(f"{option} {path}: no {what} ids in it")
    return ids


def _csv_ids(path: Path, option: str, columns: tuple[str, str]) -> list[str]:
    df = _read_table(path, ",")
    if df.shape[1] == 0:
        raise ResdomError(f"{path}: no columns")
    column = next((c for c in columns if c in df.columns), None)
    if column is None:  # a file of bare ids would lose its first one to the header without a word
        column = df.columns[0]
        say(f"note: {option} {path}: no column '{columns[0]}' or '{columns[1]}'; read the first column, "
            f"taking its first line {quote(column)} as the header (name the column {columns[0]} to say so; a "
            "file of ids alone: .txt)", err=True)
    return [v for v in df[column].tolist() if v != ""]


SEQUENCES_HELP = ("sessions to score instead of --users, in the data's item ids, oldest first: a .csv / .tsv file "
                  "of rows (session_id or user_id, item_id; a session's rows in order, or by its timestamp column "
                  "where it has one), a .json file (an object mapping each session id to its item list, or a list of "
                  "item lists), or a text file with one session a line, its items comma-separated (ids 0, 1, ...: a "
                  "blank line is an empty session); item ids not in the data are left out and named in one note")
ITEMS_HELP = ("item ids, exactly as in the data: a file (one id a line; a .csv file: its 'item_id' or 'item' "
              "column, else its first), or the ids themselves, comma-separated")


def item_ids(value: str, option: str) -> list[str]:
    """The item ids ``value`` names: those of the file it names (one a line; a .csv file's ``item_id`` / ``item``
    column), else the ids themselves, comma-separated."""
    if _names_a_file(value):
        return read_ids(Path(value), option, ("item_id", "item"))
    ids = [u for u in value.split(",") if u]
    if not ids:
        raise ResdomError(f"{option} {value!r}: no item ids in it")
    return ids


def check_item_option(value: str | None, ids: list[str] | None, split: Any, option: str) -> None:
    """One id that is neither a file on disk nor an item of the data is most likely a mistyped file name: one error
    (as for --users), not a whitelist of nothing or exclusions left out with a note."""
    if value is None or ids is None or len(ids) != 1 or _names_a_file(value):
        return
    lookup = item_lookup(split, option)
    if ids[0] not in lookup:
        raise ResdomError(f"{option} {value}: no such file, nor an item id of the data (give a file of item ids, the "
                          f"ids themselves, comma-separated){other_spelling(ids, lookup)}")


def read_sequences(path: Path) -> dict[str, list[str]] | list[list[str]]:
    """The sessions of ``--sequences`` (``SEQUENCES_HELP``), every id as text; none is a ResdomError."""
    sessions = _read_sequences(path)
    if not sessions:
        raise ResdomError(f"--sequences {path}: no sessions in it")
    return sessions


def _read_sequences(path: Path) -> dict[str, list[str]] | list[list[str]]:
    option = "--sequences"
    if path.is_dir():
        raise ResdomError(f"{option} {path}: is a directory; give a file of sessions")
    _refuse_special(path, option)
    if not path.is_file():
        raise ResdomError(f"{option} {path}: {_missing(path)}")
    try:
        refuse_binary(path, advice=False)
        suffix = path.suffix.lower()
        if suffix in (".csv", ".tsv"):
            df = _read_table(path, "\t" if suffix == ".tsv" else ",")
            sid = next((c for c in ("session_id", "user_id", "session", "user") if c in df.columns), None)
            iid = next((c for c in ("item_id", "item") if c in df.columns), None)
            if sid is None or iid is None:
                raise ResdomError(f"{path}: expected the columns session_id (or user_id) and item_id (found "
                                  f"{', '.join(map(str, df.columns[:5]))})")
            blank = [j for j, s in enumerate(df[sid].tolist()) if s == ""]
            if blank:  # its items would be recommended for a session written as an empty id: whose?
                raise ResdomError(f"{path}:{blank[0] + 2}: no {sid} on this row ({len(blank):,} row(s) without one); "
                                  "give every row its session's id")
            out: dict[str, list[str]] = {}
            sessions, items = df[sid].tolist(), df[iid].tolist()
            for r in _session_row_order(df, sid, path):
                out.setdefault(sessions[r], [])  # a session whose items are all empty: no item, named in the note
                if items[r] != "":
                    out[sessions[r]].append(items[r])
            return out
        text = _text(path)
        if suffix == ".json":
            data = load_json(text, str(path), object_pairs_hook=lambda pairs: _unique_keys(pairs, path))
            if isinstance(data, dict) and "" in data:  # its items would be recommended for a blank id: whose?
                raise ResdomError(f"{path}: a session's id is empty (\"\": [...]); give every session its id")
            if isinstance(data, dict) and all(isinstance(v, list) for v in data.values()):
                return {str(key): _json_ids(v, path, key) for key, v in data.items()}
            if isinstance(data, list) and all(isinstance(v, list) for v in data):
                return [_json_ids(v, path, j) for j, v in enumerate(data)]
            raise ResdomError(f"{path}: expected a JSON object {{id: [item ids]}} or a list of item-id lists")
        lines = text_lines(text)
        while lines and not lines[-1].strip():  # blank lines at the end: no session
            lines.pop()
        return [[x for x in line.split(",") if x] for line in lines]  # session j: line j + 1, a blank one too
    except ResdomError as e:
        raise ResdomError(f"{option} {e}") from None


def _session_row_order(df: pd.DataFrame, sid: str, path: Path) -> np.ndarray:
    """The rows of a sessions table in the order their items are read: file order, or where the table has a
    ``timestamp`` column (Unix seconds or dates, checked as the data's readers check them), each session's rows by
    it, equal times in file order (a stable sort, as ``data split`` orders a user's rows); sessions stay in the
    order they first appear. The rows of a table exported unsorted kept the file's order without a word."""
    import numpy as np
    import pandas as pd

    rows = np.arange(len(df))
    if TIME_COLUMN not in df.columns:
        return rows
    times = time_column_seconds(df[TIME_COLUMN], lambda k: f"{path}:{k + 2}", TIME_COLUMN)
    first = pd.factorize(df[sid])[0]  # each session's place: its first row
    return np.lexsort((rows, times, first))


def _unique_keys(pairs: list[tuple[str, Any]], path: Path) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a key given twice is a ResdomError (``json`` keeps its last value alone:
    a session id given twice would lose its first items without a word)."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ResdomError(f"{path}: the key {quote(key)} is given twice (give each session id once, its "
                              "items in one list)")
        seen.add(key)
    return dict(pairs)


def _json_ids(values: list[Any], path: Path, session: Any) -> list[str]:
    """The item ids of one JSON session as text: strings as they are, integers as digits; any other value (a
    fraction, true, null, a list) is no id (``1e3`` would be matched as '1000.0') and a ResdomError."""
    for x in values:
        if not isinstance(x, (str, int)) or isinstance(x, bool):
            raise ResdomError(f"{path}: session {quote(session)}: {json.dumps(x)[:40]} is not an item id (give "
                              "ids as strings or integers)")
    return [str(x) for x in values]


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")  # without a leading byte-order mark
    except OSError as e:
        raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ResdomError(f"{path}: not UTF-8 text") from None


def _read_table(path: Path, sep: str) -> pd.DataFrame:
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, sep=sep, encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ResdomError(f"{path}: not UTF-8 text") from None
    except pd.errors.ParserError as e:
        raise parser_error(path, e) from None
    except pd.errors.EmptyDataError:
        raise ResdomError(f"{path}: file is empty") from None
    except OSError as e:
        raise ResdomError(f"{path}: cannot read it ({e.strerror})") from None
    if not isinstance(df.index, pd.RangeIndex):  # rows longer than the header: their first fields became an index
        fields, held = df.shape[1] + df.index.nlevels, "a tab" if sep == "\t" else "a comma"
        raise ResdomError(f"{path}: its rows hold {fields} fields but its header line names {df.shape[1]} "
                          f"column(s) (an id holding {held}? quote it in \"...\")")
    for column in df.columns:  # a stray quote read the lines up to the next quote as one id
        refuse_spanning_lines(df[column], lambda k: f"{path}:{k + 2}", str(column))
    return df


def lead_rank() -> bool:
    """Whether this process writes the lists: outside torchrun, or its rank 0 (nothing here is sharded over ranks:
    the others would print the same lists again and write the same --out). The others check the command as rank 0
    does and stop before the lists are made: a mistake (--items, --users) ended rank 0 with status 2, them with 0."""
    return launch_env()[0] == 0


def _write(frames: Iterable[pd.DataFrame], out: Path | None) -> None:
    """The CSV of ``frames`` (parts of one table: ``Lists.frames``), the header once, part by part: printed, or
    into ``out`` through a temporary file renamed into place at the end (``io.atomic_stream``: an error or
    Ctrl-C leaves ``out`` as it was). The bytes of the whole table's ``to_csv`` (``csv_text``), in the memory of
    one part: the whole table and its text held every row of ``--k 100000`` for every user at once. Printed, an
    error part-way says that the rows before it are not the whole table."""
    pieces = (csv_text(functools.partial(_part_csv, frame, j == 0)) for j, frame in enumerate(frames))
    if out is None:
        printed = False
        try:
            for text in pieces:
                print_file(text)
                printed = True
        except ResdomError as e:  # a model that scores some user's items as NaN: part of the table is out already
            if not printed:
                raise
            raise ResdomError(f"{e} (the rows printed before this error are not the whole table; --out FILE is "
                              "written whole or not at all)") from None
        return
    with atomic_stream(out) as f:
        for text in pieces:
            f.write(text.encode("utf-8"))


def _part_csv(frame: pd.DataFrame, header: bool, end: str) -> str:
    return frame.to_csv(index=False, header=header, lineterminator=end)


def recommend(
    run_dir: Path = typer.Argument(..., help="a run directory (`resdom train`, an import, or Fitted.save)"),
    users: str = typer.Option("all", "--users", help=USERS_HELP),
    sequences: Path | None = typer.Option(None, "--sequences", help=SEQUENCES_HELP),
    k: int = typer.Option(10, "--k", "-k", help="items per user"),
    items: str | None = typer.Option(None, "--items", help="a whitelist: only these may be recommended; "
                                     + ITEMS_HELP),
    exclude: str | None = typer.Option(None, "--exclude", help="items never recommended; " + ITEMS_HELP),
    out: Path | None = typer.Option(None, "--out", "-o", help="CSV file to write (columns user_id, item_id, score, "
                                    "rank); default (or -): print the CSV"),
    alpha: float = typer.Option(1.0, "--alpha", help="residual scale at inference, in [0, 1] (1: as trained)"),
    filter_seen: bool | None = typer.Option(
        None, "--filter-seen/--no-filter-seen",
        help="never (or also) recommend items the user already has; default: the data set's setting (filtered, "
             "but for data sets that keep seen items, as evaluation); --filter / --no-filter say the same"),
    filter_old: bool | None = typer.Option(None, "--filter/--no-filter", hidden=True),
    history: str = typer.Option("all", "--history", help="all (each user's whole history), or test / valid (that "
                                "part's inputs, as evaluation scores them)"),
    device: str = typer.Option("auto", "--device", help="auto (cuda, then mps, then cpu) | cpu | cuda | mps"),
    batch_size: int = typer.Option(256, "--batch-size",
                                   help="users per chunk (memory only: a list does not depend on it)"),
    progress: bool = progress_option(),
) -> None:
    """Top K items per user (or per session of --sequences), in the data's own user and item ids, as CSV in
    RecTools' columns: user_id,item_id,score,rank."""
    filter_seen = one_filter(filter_seen, filter_old)
    out = printed_if_dash(out)
    positive_int(k, "--k")
    positive_int(batch_size, "--batch-size")
    (scale,) = parse_alphas(str(alpha), "--alpha") or [1.0]
    if out is not None:
        check_output_file(out, "--out", (HEADER, OLD_HEADER), "a recommendations file",
                          {"--users": None if users == "all" else users, "--sequences": sequences, "--items": items,
                           "--exclude": exclude})
    if sequences is not None and users != "all":
        raise ResdomError("--sequences: give --users or --sequences, not both")
    wanted = user_ids(users) if sequences is None else None
    sessions = read_sequences(sequences) if sequences is not None else None
    whitelist = item_ids(items, "--items") if items is not None else None
    excluded = item_ids(exclude, "--exclude") if exclude is not None else None
    dev = resolve_device(device, "--device")
    run = load_run(run_dir, device=dev)
    if run.training_note() and lead_rank():
        say(run.training_note(), err=True)
    filtered = run.split.filter_seen if filter_seen is None else filter_seen
    check_item_option(items, whitelist, run.split, "--items")
    check_item_option(exclude, excluded, run.split, "--exclude")
    try:
        lists = recommend_lists(run.model, run.split, wanted, k, sequences=sessions, items=whitelist,
                                exclude=excluded, filter_seen=filtered, alpha=scale, history=history,
                                batch_size=batch_size, device=dev, progress=progress)
    except ResdomError as e:
        where = f"--users {users}" if str(e).startswith("users:") else ""
        message = str(e).replace("users: ", f"{where}: ", 1) if where else str(e).replace("history:", "--history:")
        for name in ("items", "exclude", "sequences"):
            if message.startswith(f"{name}:"):
                message = "--" + message
        if where and wanted is not None and len(wanted) == 1 and not _names_a_file(users):  # a mistyped file name?
            known = label_texts(run.split.user_labels) if run.split.user_labels is not None else []
            message = f"--users {users}: no such file, nor a user id of the data (give a file of user ids, the ids " \
                      f"themselves, comma-separated, or 'all'){other_spelling(wanted, known)}"
        raise ResdomError(message) from None
    if not lead_rank():  # checked as rank 0 checks (a mistake ends every process non-zero); the lists are its to make
        return
    _write(lists.frames(), out)
    if lists.note:  # after the lists: the users with short lists are known then
        note = lists.note
        for name in ("items", "exclude", "sequences"):
            note = note.replace(f"{name}: ", f"--{name}: ")
        say(f"note: {note}", err=True)
    if out is None:
        return
    who = counted(lists.n_lists, "session" if sessions else "user")
    say(f"{out}: {counted(lists.n_rows, 'recommendation')} for {who} (top "
        f"{k}, seen items {'filtered' if filtered else 'kept'}{'' if scale == 1.0 else f', alpha {scale:g}'}"
        f"{', whitelist' if whitelist else ''}{', exclusions' if excluded else ''})", err=True)


def similar(
    run_dir: Path = typer.Argument(..., help="a run directory (`resdom train`, an import, or Fitted.save)"),
    items: str = typer.Option("all", "--items", help="'all' (every item), or " + ITEMS_HELP),
    k: int = typer.Option(10, "--k", "-k", help="similar items per item"),
    out: Path | None = typer.Option(None, "--out", "-o", help="CSV file to write (columns target_item_id, item_id, "
                                    "score, rank); default (or -): print the CSV"),
    device: str = typer.Option("auto", "--device", help="auto (cuda, then mps, then cpu) | cpu | cuda | mps"),
    progress: bool = progress_option(),
) -> None:
    """The K items nearest each item by cosine over the model's output item embeddings (the item itself left out),
    in the data's own ids, as CSV in RecTools' columns: target_item_id,item_id,score,rank."""
    out = printed_if_dash(out)
    positive_int(k, "--k")
    if out is not None:
        check_output_file(out, "--out", SIMILAR_HEADER, "a similar-items file",
                          {"--items": None if items == "all" else items})
    wanted = None if items == "all" else item_ids(items, "--items")
    dev = resolve_device(device, "--device")
    run = load_run(run_dir, device=dev)
    check_item_option(None if items == "all" else items, wanted, run.split, "--items")
    try:
        lists = similar_lists(run.model, run.split, wanted, k, device=dev, progress=progress)
    except ResdomError as e:
        raise ResdomError(f"--{e}" if str(e).startswith("items:") else str(e)) from None
    if not lead_rank():  # as recommend: checked on every process, made and written by rank 0
        return
    _write(lists.frames(), out)
    if lists.note:
        note = re.sub(r"(^|; )(items|k): ", lambda m: f"{m[1]}{'-k' if m[2] == 'k' else '--items'}: ",
                      lists.note)  # each note's field as the option that sets it
        say(f"note: {note}", err=True)
    if out is not None:
        targets = counted(lists.n_lists, "item")
        say(f"{out}: {counted(lists.n_rows, 'similar item')} for {targets} (top {k}, "
            "cosine over the output item embeddings)", err=True)


def register(app: typer.Typer) -> None:
    app.command("recommend")(recommend)
    app.command("similar")(similar)
