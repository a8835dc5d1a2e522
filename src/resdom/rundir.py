"""The layout of a run directory: the one place that names its files (no torch here, so reports stay light).

    config.json        resolved config: {"model": ModelConfig, "train": TrainConfig, "data": {...}, "versions"}
    data/              the prepared split (SplitData.save: arrays.npz + manifest.json), so a run is self-contained
    model.safetensors  best weights (by validation metric); model.json its sidecar (config, fingerprint, epoch)
    metrics.jsonl      one JSON line per epoch
    metrics.json       final metrics per split, with the number of evaluated users and the checkpoint hash
    state/             resume state (state/trainer.json, the last epoch's weights and optimiser)
    diagnostics/       <name>.json (+ .csv) of ``resdom diagnose``, summary.json, and users.npz (the per-user
                       evidence, ``diagnostics.evidence``)
    error.txt          the message of a failed grid cell (pipeline.reproduce)
    .lock              held by the process training there

A results-store cell (``pipeline.store``) uses the same names for what it shares with a run directory, plus
``cell.json`` (identity, checkpoint, compute) and ``curve.jsonl`` (the epoch log), keeps the per-user evidence at
its top (``users.npz``, ``cell_users``), and holds no weights.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from resdom.errors import ResdomError
from resdom.io import LOCK, atomic_write_json, directory_lock, is_locked, is_temporary, not_a_file_to_replace
from resdom.limits import cut_message
from resdom.names import USERS


class RunDir:
    """Paths of one run directory."""

    def __init__(self, path: str | Path) -> None:
        self.dir = Path(path)
        self.config = self.dir / "config.json"
        self.data = self.dir / "data"
        self.model = self.dir / "model.safetensors"
        self.sidecar = self.model.with_suffix(".json")
        self.log = self.dir / "metrics.jsonl"
        self.final = self.dir / "metrics.json"
        self.state_dir = self.dir / "state"
        self.state = self.state_dir / "trainer.json"
        self.diagnostics = self.dir / "diagnostics"
        self.error = self.dir / "error.txt"
        self.lock = self.dir / LOCK
        # a results-store cell only (pipeline.store): identity and compute, and the training curve
        self.cell = self.dir / "cell.json"
        self.curve = self.dir / "curve.jsonl"
        self.cell_users = self.dir / "users.npz"

    def diagnostic(self, name: str, suffix: str = ".json") -> Path:
        """``diagnostics/<name><suffix>`` (e.g. ``hrli.json``, ``mixing_per_position.csv``)."""
        return self.diagnostics / f"{name}{suffix}"

    @property
    def summary(self) -> Path:
        return self.diagnostic("summary")

    @property
    def users(self) -> Path:
        """``diagnostics/users.npz``: the per-user evidence of a run directory (a cell keeps it as ``cell_users``)."""
        return self.diagnostic(USERS, ".npz")

    def is_run(self) -> bool:
        """Whether the folder looks like a run directory or a results-store cell (a config or diagnostics)."""
        return self.config.is_file() or self.diagnostics.is_dir()


def _early_names() -> frozenset[str]:
    run = RunDir(".")
    return frozenset(p.name for p in (run.data, run.lock, run.error))


EARLY_NAMES = _early_names()  # what a run directory may hold before its config.json: the split, the lock, an error


def _refuse_broken_link(path: Path, option: str) -> None:
    """A ResdomError naming ``option`` where ``path``, or a folder above it, is a symbolic link to nothing (creating
    the folders below it was a FileExistsError)."""
    broken = next((p for p in (path, *path.parents) if p.is_symlink() and not p.exists()), None)
    if broken is not None:
        raise ResdomError(f"{option} {path}: {broken} is a link to {os.readlink(broken)}, which "
                          f"{'leads back to it (a loop of links)' if is_link_loop(broken) else 'does not exist'}")


def is_link_loop(link: Path) -> bool:
    """Whether following ``link`` comes back to a link already followed (ELOOP), rather than to nothing."""
    try:
        os.stat(link)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


STANDARD_OUTPUT = "-"  # on the command line: standard output (``--out -``), where a command prints one file


def refuse_standard_output(path: str | Path, option: str, what: str) -> None:
    """A ResdomError where the command-line option ``option`` (``--out``, ``--doc``...: an API parameter's name has
    no dashes, and no such convention) gives ``-`` for an output ``what`` (a folder, a file) that is no one stream:
    it made a folder or file named ``-`` in the working folder, where the user meant standard output. Commands
    that print one file (``recommend``, ``similar``, ``config show``) read ``--out -`` as printing it, before this."""
    if option.startswith("--") and str(path) == STANDARD_OUTPUT:
        kind = what.split()[-1]
        raise ResdomError(f"{option} -: the output is {what}, not standard output; give a {kind} name (a {kind} "
                          "named '-': its full path)")


def require_folder_path(path: str | Path, option: str = "--out") -> bool:
    """Whether the output folder ``path`` exists; a ResdomError naming ``option`` when it, or a folder above it,
    exists and is not a directory (a file: nothing would be written into it; one above it was a NotADirectoryError
    when the first file was written), or is ``-`` on the command line (``refuse_standard_output``)."""
    refuse_standard_output(path, option, "a folder")
    path = Path(path)
    _refuse_broken_link(path, option)
    if path.exists() and not path.is_dir():
        raise ResdomError(f"{option} {path}: exists and is not a directory (choose a folder name)")
    above = next((p for p in path.parents if p.exists()), None)
    if not path.exists() and above is not None and not above.is_dir():
        raise ResdomError(f"{option} {path}: {above} is a file, not a folder (choose a folder name)")
    cell = cell_above(path)
    if cell is not None:  # a new folder inside a cell is written into the cell all the same
        raise ResdomError(f"{option} {path}: is inside a results-store cell ({cell}); resdom never writes into a "
                          f"cell's evidence; choose another {option}")
    return path.exists()


def cell_above(path: str | Path) -> Path | None:
    """The results-store cell that ``path`` lies inside (a folder above it holding ``cell.json``: as spelled, or
    after links and ``..`` are resolved, the working folder's own parents included), or None."""
    path = Path(path)
    try:
        resolved = [*path.resolve().parents]
    except (OSError, RuntimeError):  # a loop of links: the writer's own check names it
        resolved = []
    spelled = [p for p in path.parents if p != Path(".")]  # the working folder: named in full, as resolved
    return next((p for p in (*spelled, *resolved) if is_cell(p)), None)


def check_output_file(path: Path, option: str, first_line: str | tuple[str, ...], what: str,
                      inputs: dict[str, str | Path | None] | None = None) -> None:
    """Refuse ``path`` as an output file, in one line naming ``option``: a folder, a path through a file, or an
    existing file that is neither empty nor an earlier output of the same writer (its first line starts with
    ``first_line``, or one of them: a writer whose header changed names the old one too; ``what`` names such a
    file), so that no other file (the data, a list of ids, a config written by hand) is ever replaced; and a file
    inside a results-store cell, new or not (a cell's evidence is never added to). ``inputs``: the command's input
    files by option (values that name no file are passed over): ``path`` may be none of them, even where it is an
    earlier output (``--users recs.csv --out recs.csv`` wrote over the list it read)."""
    heads = (first_line,) if isinstance(first_line, str) else tuple(first_line)
    refuse_standard_output(path, option, "a file")
    _refuse_broken_link(path, option)
    if path.is_dir():
        raise ResdomError(f"{option} {path}: is a directory; give a file name")
    if any(p.exists() and not p.is_dir() for p in path.parents):
        raise ResdomError(f"{option} {path}: a folder on its path is a file")
    if (why := not_a_file_to_replace(path)) is not None:  # before reading its first line: a FIFO's never comes
        printed = f" (without {option}, the output is printed)" if option == "--out" else ""
        raise ResdomError(f"{option} {path}: {why}; give a file name{printed}")
    cell = cell_above(path)
    if cell is not None:
        raise ResdomError(f"{option} {path}: is inside a results-store cell ({cell}); resdom never writes into a "
                          f"cell's evidence; choose a file elsewhere")
    if not path.exists():
        return
    refuse_read_only(path, option)
    try:
        with path.open("rb") as f:
            first = f.readline(max(len(h.encode()) for h in heads) + 2)
    except OSError as e:
        raise ResdomError(f"{option} {path}: cannot be read ({e.strerror})") from None
    if first and not any(first.startswith(h.encode()) for h in heads):
        raise ResdomError(f"{option} {path}: exists and is not {what} (its first line does not begin "
                          f"'{heads[0]}'); choose another file name, or remove it first")
    for name, given in (inputs or {}).items():
        if given is not None and _same_file(path, Path(given)):
            raise ResdomError(f"{option} {path}: is the file {name} reads ({given}); write the output to another "
                              "file")


def refuse_read_only(path: Path, option: str) -> None:
    """A ResdomError naming ``option`` where the existing file ``path`` may not be written, as ``>`` would find it
    (``chmod a-w``, a file of another user): resdom writes a new file and renames it into place, which a writable
    folder allows, so a file made read-only to keep it was replaced all the same, and left writable."""
    if path.is_file() and not os.access(path, os.W_OK):
        raise ResdomError(f"{option} {path}: is read-only (its permissions forbid writing it); make it writable "
                          "(chmod u+w) or choose another file")


def _within(inner: Path, outer: Path) -> bool:
    """Whether ``inner`` is ``outer`` or below it, both resolved (links, ``..``, other spellings of one folder)."""
    try:
        a, b = inner.resolve(), outer.resolve()
    except (OSError, RuntimeError, ValueError):  # a loop of links: the caller's own check names it
        return False
    return a == b or b in a.parents


InputPaths = Mapping[str, str | Path | None | tuple[str | Path, ...]]  # a command's inputs by option (one or more)


def check_output_inputs(path: str | Path, option: str, inputs: InputPaths, *, replaced: bool = False,
                        read_whole: Iterable[str] = ()) -> None:
    """Refuse the output folder ``path``, in one line naming ``option`` and the input, where writing it would touch
    one of the command's ``inputs`` (files or folders, by the option that names them; values that name nothing on
    disk are passed over): ``path`` is one of them, or (for the options in ``read_whole``: a split folder, which
    holds its two files and nothing else) inside one; or, where ``replaced`` (the folder
    is moved aside, ``--force``), ``path`` holds one of them, which would be moved away with it."""
    path, whole = Path(path), set(read_whole)
    for name, values in inputs.items():
        for given in values if isinstance(values, tuple) else (values,):
            if given is not None and str(given) and Path(given).exists():
                _check_output_input(path, option, name, Path(given), replaced, name in whole)


def _check_output_input(path: Path, option: str, name: str, given: Path, replaced: bool, whole: bool) -> None:
    """``check_output_inputs`` for the one input ``given`` of option ``name``."""
    if _within(path, given) and (whole or _within(given, path)):
        where = "is" if _within(given, path) else "is inside"
        article = "an" if option.startswith("--") or option[:1] in "aeiou" else "a"  # an --out, an out, a path
        raise ResdomError(f"{option} {path}: {where} {name} {given}, which the command reads; choose {article} "
                          f"{option} outside it")
    if replaced and _passes_through(given, path):
        raise ResdomError(f"{option} {path}: holds {name} {given}, which the command reads and --force would move "
                          f"aside with the folder; choose another {option}")


def _passes_through(given: Path, folder: Path) -> bool:
    """Whether ``given`` lies in ``folder``, or is reached through it: a folder on its path as spelled (a link
    inside ``folder`` to a file elsewhere, ``folder/x/../y``) is ``folder`` or inside it. Moving ``folder`` aside
    takes ``given`` away in either case."""
    return any(_within(p, folder) for p in (given, *given.parents) if p != Path("."))


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one existing file (through links, other spellings, hard links)."""
    try:
        return a.exists() and b.is_file() and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def first_names(names: list[str]) -> str:
    """The first three of ``names``, comma-separated, with ``...`` where there are more: what a refused folder holds."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def not_a_run_dir(path: Path) -> ResdomError:
    """The error for a run directory argument that is no directory: a file, or nothing at all."""
    return ResdomError(f"{path}: " + ("a file, not a run directory" if path.is_file() else "run directory not found"))


def _has_run_config(run: RunDir) -> bool:
    """Whether ``run.config`` is a resdom run's config.json (a JSON object with ``model`` and ``versions``)."""
    try:
        data = json.loads(run.config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("model"), dict) and "versions" in data


def _checkpoint_before_config(run: RunDir, entries: list[str]) -> bool:
    """Whether ``run`` is what an import or ``Fitted.save`` killed before its config.json leaves: the split, a
    resdom checkpoint (its sidecar of format ``resdom-checkpoint/...``) and what ``EARLY_NAMES`` allows, no more.
    Such a folder was "not a resdom run directory", refused even with --force: no rerun could write there."""
    if run.config.exists() or run.sidecar.name not in entries:
        return False
    if not all(n in EARLY_NAMES or n in (run.model.name, run.sidecar.name) for n in entries):
        return False
    try:
        with open(run.sidecar, "rb") as f:
            data = json.loads(f.read(MAX_MARKER_BYTES))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and str(data.get("format", "")).startswith("resdom-checkpoint/")


def check_output_folder(path: str | Path, option: str = "--out", *, runs: bool, force: bool = False) -> bool:
    """Refuse ``path`` as an output folder, with one line naming ``option``, when it cannot take the output; True
    when it holds a run that the writer replaces (``force``): the caller moves it aside first (``move_aside``), so
    nothing of it is deleted.

    Refused: an existing file (or anything not a directory); a results-store cell (``cell.json``), even with
    ``force`` (its evidence is never written over); a non-empty folder that is not a run directory, ``force`` or
    not (``runs=True``: a run is resumed / redone in place, but a folder of other files is never written into);
    with ``runs=True`` a finished or imported run that has no resume state (training would start afresh and replace
    its model, metrics and diagnostics) unless ``force``; with ``runs=False`` any non-empty run unless ``force``.
    ``force`` on a run always answers True: the run is kept, moved aside, and the writer starts anew. A folder
    counts as a run when its marker says so (``MARKER``), when its
    config.json is a resdom run's (with ``model`` and ``versions``), or when it has no config.json and holds only
    what a run holds before writing one (``EARLY_NAMES``, a writer's temporaries, and the checkpoint an import writes
    before it: ``_checkpoint_before_config``); a folder of other files that
    happens to hold a ``config.json`` or ``metrics.json`` of its own does not. A symbolic link where the run writes
    (``data/``, ``state/``, ``diagnostics/``, the log) that leads out of the folder is refused."""
    path = Path(path)
    entries = target_entries(path, option)
    if not entries:
        return False
    run = RunDir(path)
    kind = marked_kind(path)
    if kind is not None and kind != RUN:
        raise ResdomError(f"{option} {path}: holds {KIND_NAMES.get(kind, kind)}, not a run directory; choose another "
                          f"{option}")
    is_run = (kind == RUN or _has_run_config(run) or all(n in EARLY_NAMES for n in entries)
              or _checkpoint_before_config(run, entries))
    if not is_run:
        raise ResdomError(f"{option} {path}: exists, is not empty and is not a resdom run directory (it holds "
                          f"{first_names(entries)}); choose another {option} or "
                          "an empty folder")
    check_links(path, WRITTEN_BY_RUNS, option)
    if force:  # whatever run is there is kept, renamed; the writer starts anew
        refuse_store(path, option)
        return True
    if not runs:
        raise ResdomError(f"{path}: exists and is not empty (choose another {option}{or_force(path, 'write anew')})")
    if run.state.is_file() or not holds_results(run):
        return False
    if not force:
        raise ResdomError(f"{option} {path}: holds a {'finished' if run.final.is_file() else 'trained or imported'} "
                          "run with no resume state (state/); training there would start afresh and replace its "
                          f"model, metrics and diagnostics: choose another {option}{or_force(path, 'train anew')}")
    return True


def holds_results(run: RunDir) -> bool:
    """Whether a run holds results that training afresh would replace: final metrics, diagnostics, or weights that
    were imported (config.json's ``imported_from``) rather than trained there. The diagnostics folder's lock and a
    killed writer's temporaries (``io.is_temporary``) are not results."""
    if run.final.is_file() or (run.diagnostics.is_dir() and any(p.name != LOCK and not is_temporary(p.name)
                                                                 for p in run.diagnostics.iterdir())):
        return True
    try:
        config = json.loads(run.config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("imported_from")) and run.model.is_file()


# ---------------------------------------------------------------------------------------------------------
# Output folders: the marker each writing command leaves, and what --force does (docs/choices.md, "--force")

MARKER = ".resdom-output"  # {"format": MARKER_FORMAT, "kind": KIND, "files": [...]}: who wrote this folder
MARKER_FORMAT = "resdom-output/1"
RUN, SPLIT, REPORT, DEMO, GRID = "run", "split", "report", "demo", "grid"
KIND_NAMES = {RUN: "a resdom run directory", SPLIT: "a split saved by `resdom data split`",
              REPORT: "a report written by `resdom report`", DEMO: "the output of `resdom demo`",
              GRID: "a grid of `resdom reproduce`"}
WRITERS = {RUN: "a run", SPLIT: "a split", REPORT: "a report", DEMO: "the demo", GRID: "a grid"}
WRITTEN_BY_RUNS = ("data", "state", "diagnostics", "metrics.jsonl", ".lock")  # where train / import / diagnose write
MAX_MARKER_BYTES = 1 << 20


def target_entries(path: Path, option: str) -> list[str]:
    """A writer's target folder ``path``: its own entries (``own_entries``; none where it is absent or empty), a
    results-store cell refused whatever the writer (``refuse_cell``)."""
    if not require_folder_path(path, option):
        return []
    refuse_cell(path, option)
    return own_entries(path)


def own_entries(path: Path) -> list[str]:
    """The names in folder ``path``, sorted, without the marker, the lock (``output_lock``) and a writer's temporaries
    (``is_temporary``)."""
    return sorted(p.name for p in path.iterdir() if p.name not in (MARKER, LOCK) and not is_temporary(p.name))


def read_marker(path: str | Path) -> dict[str, Any] | None:
    """The marker of folder ``path`` (None where there is none, or it is not a resdom marker: a link, too large,
    not JSON, another format)."""
    marker = Path(path) / MARKER
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > MAX_MARKER_BYTES:
            return None
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MARKER_FORMAT or data.get("kind") not in KIND_NAMES:
        return None
    return data


def marked_kind(path: str | Path) -> str | None:
    """The kind of output the marker of folder ``path`` names (None: no marker)."""
    marker = read_marker(path)
    return marker["kind"] if marker is not None else None


def marked_files(path: str | Path) -> set[str]:
    """The files (relative paths) the marker of folder ``path`` lists as written by resdom."""
    files = (read_marker(path) or {}).get("files")
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


def write_marker(path: str | Path, kind: str, files: Iterable[str | Path] = ()) -> None:
    """Mark folder ``path`` as ``kind``'s output; ``files`` (relative to ``path``, or inside it) join those an
    earlier marker of the same kind lists."""
    path = Path(path)
    names = set()
    for f in files:
        try:
            names.add(Path(f).relative_to(path).as_posix())
        except ValueError:  # already relative to ``path``
            names.add(Path(f).as_posix())
    if marked_kind(path) == kind:
        names |= marked_files(path)
    atomic_write_json(path / MARKER, {"format": MARKER_FORMAT, "kind": kind, "files": sorted(names)})


def is_cell(path: str | Path) -> bool:
    """Whether folder ``path`` is a results-store cell (it holds ``cell.json``)."""
    return RunDir(path).cell.is_file()


def refuse_cell(path: str | Path, option: str = "--out") -> None:
    """A ResdomError when ``path`` is a results-store cell: no command writes over a cell's evidence, --force
    included."""
    if is_cell(path):
        raise ResdomError(f"{option} {path}: is a results-store cell (it holds {RunDir(path).cell.name}); resdom "
                          f"never writes over a cell's evidence, --force included; choose another {option}")


MAX_SCANNED = 200_000  # entries ``cell_below`` looks at before it gives up (and --force refuses the folder)


def cell_below(path: str | Path) -> Path | None:
    """A results-store cell inside folder ``path`` (a folder holding ``cell.json``, ``path`` itself included; symbolic
    links not followed), or None where there is none. A folder of more than ``MAX_SCANNED`` entries is a
    ResdomError: it cannot be shown to hold no cell."""
    name, seen = RunDir(".").cell.name, 0
    for root, dirs, files in os.walk(path):
        if name in files:
            return Path(root)
        seen += len(dirs) + len(files)
        if seen > MAX_SCANNED:
            raise ResdomError(f"{path}: holds more than {MAX_SCANNED:,} entries, too many to check that none is a "
                              "results-store cell (which resdom never moves or writes over); choose another folder")
    return None


def refuse_store(path: str | Path, option: str = "--out") -> None:
    """A ResdomError when folder ``path`` is or holds a results-store cell: --force never moves a cell's evidence
    aside, not even inside the folder it renames (a whole store given as --out); nor the working folder or one above
    it (the shell would be left in the renamed folder, the output written to a new one under its old name)."""
    if _holds_working_folder(path):
        what = "the working folder" if _within(Path(path), Path.cwd()) else "above the working folder"
        raise ResdomError(f"{option} {path}: is {what}, which is never moved aside; choose another {option}")
    cell = cell_below(path)
    if cell is not None:
        raise ResdomError(f"{option} {path}: holds a results-store cell ({cell}); resdom never moves a cell's "
                          f"evidence aside, --force included; choose another {option}")


def aside_name(path: str | Path) -> Path:
    """Where ``move_aside`` would move ``path``: ``NAME.replaced-K``, the first K not taken."""
    path = Path(path)
    if path.name in ("", ".."):  # ".", "..", "/": the folder's own name, as resolved
        path = Path(os.path.abspath(path))
    for k in range(1, 10_000):
        aside = path.with_name(f"{path.name}.replaced-{k}")
        if not aside.exists() and not aside.is_symlink():
            return aside
    raise ResdomError(f"{path}: 9999 folders {path.name}.replaced-K already; remove some")


def or_force(path: str | Path, then: str) -> str:
    """A refusal's way out with --force, ``, or --force to move it aside to NAME and THEN``; none where ``path`` is
    the working folder or above it, which --force never moves (``refuse_store``)."""
    return "" if _holds_working_folder(path) else f", or --force to move it aside to {aside_name(path)} and {then}"


def _holds_working_folder(path: str | Path) -> bool:
    """Whether folder ``path`` is the working folder or above it (False where the working folder is gone)."""
    try:
        cwd = Path.cwd()
    except OSError:
        return False
    return _within(cwd, Path(path))


def move_aside(path: str | Path, *, held: bool = False, option: str = "--out") -> Path:
    """Rename folder ``path`` to ``aside_name(path)`` (what --force does to an output it replaces: nothing is
    deleted); returns the new name. A folder that is or holds a results-store cell, or holds the working folder, is
    refused (``refuse_store``, naming ``option``), and so is one another process writes in (a trainer, a diagnose,
    ``output_lock``; ``held``: the caller holds ``path``'s lock itself)."""
    path = Path(path)
    refuse_store(path, option)
    if (not held and is_locked(path)) or is_locked(RunDir(path).diagnostics):
        # a writer there would go on writing into the renamed folder
        raise ResdomError(f"{path}: another process is writing there (training or diagnosing); wait for it to "
                          "finish or choose another folder")
    aside = aside_name(path)
    path.rename(aside)
    return aside


@contextmanager
def output_lock(path: str | Path, check: Callable[[], bool], option: str = "--out") -> Iterator[Path | None]:
    """Hold folder ``path``'s lock (``resdom.io.directory_lock``) while a command writes its output there: a second
    command writing the same folder meanwhile is refused in one line naming ``option`` instead of mixing its files
    with the first's, or replacing them unasked. ``check()``: the command's check of the folder (a ResdomError, or
    True: move it aside, ``move_aside``), made before the lock file is written into the folder and again under the
    lock (another command may have written there meanwhile). Yields where the folder was moved (None: it was not)."""
    path = Path(path)
    aside = move_aside(path, option=option) if check() else None  # moved as it was: no lock file written into it

    with ExitStack() as held:
        held.enter_context(directory_lock(path, "writing", f"choose another {option}"))
        if check():
            aside = move_aside(path, held=True, option=option)  # its lock goes with it: the new folder is locked
            # in its place
            held.enter_context(directory_lock(path, "writing", f"choose another {option}"))
        yield aside


def check_links(path: str | Path, names: Iterable[str], option: str = "--out") -> None:
    """A ResdomError when one of ``names`` in folder ``path`` (where a command writes) is a symbolic link that
    leads out of ``path``: no write follows it out of the folder."""
    path = Path(path)
    root = path.resolve()
    for name in names:
        entry = path / name
        if entry.is_symlink() and root not in entry.resolve().parents:
            raise ResdomError(f"{option} {path}: {name} is a symbolic link out of the folder (to "
                              f"{cut_message(str(os.readlink(entry)), 200)}); resdom does not write through it: "
                              "remove the link or choose another folder")


def check_kind_folder(path: str | Path, kind: str, option: str = "--out", *, force: bool = False,
                      legacy: Callable[[Path, list[str]], bool] | None = None,
                      writes: Iterable[str] = ()) -> bool:
    """Refuse ``path`` as the output folder of a writer of ``kind`` (``KIND_NAMES``), in one line naming
    ``option``, unless it is absent, empty, marked as ``kind``'s output, or (written before markers existed) one
    ``legacy(path, entries)`` recognises; anything else needs ``force``, and then True is returned: the caller moves
    the folder aside (``move_aside``) and writes anew, so nothing in it is deleted or written over. A results-store
    cell is refused even with ``force``, and so is a symbolic link among ``writes`` (the entries the writer writes
    into) that leads out of the folder."""
    path, writes = Path(path), tuple(writes)
    entries = target_entries(path, option)
    if not entries:
        return False
    marked = marked_kind(path)
    if marked == kind or (marked is None and legacy is not None and legacy(path, entries)):
        check_links(path, writes, option)
        return False
    if force:
        refuse_store(path, option)  # refused before anything is written, not when it would be moved
        return True
    others = [n for n in entries if n not in writes] or entries  # what the writer would not write, first
    what = (f"{KIND_NAMES[marked]}, not {KIND_NAMES[kind]}" if marked is not None else
            f"what {WRITERS[kind]} does not write ({first_names(others)})")
    raise ResdomError(f"{option} {path}: holds {what}; choose another {option} or an empty folder"
                      f"{or_force(path, 'write anew')}")
