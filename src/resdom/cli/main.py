"""``resdom`` entry point: user mistakes (a ResdomError, or a command line Click cannot parse) become one line on
stderr and exit status 2."""

# ruff: noqa: E402  (the imports after the Ctrl-C handler below are the ones it covers)
from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import signal
import sys
import tempfile
import threading
from typing import Any


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C (or SIGTERM, SIGHUP) while the command's modules load (seconds: torch, pandas): one line, exit 128 +
    the signal, as once the command runs (``values.stop_as_on_ctrl_c``), not a traceback of import machinery (nor,
    for SIGTERM, an end without a word)."""
    named = "" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"
    with contextlib.suppress(OSError):  # a terminal that is gone (SIGHUP) takes no line
        print(f"interrupted{named}", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


# only while the imports below run, in the main thread, and only where Ctrl-C raises KeyboardInterrupt (a shell that
# started resdom in the background with SIGINT ignored keeps it ignored) and SIGTERM / SIGHUP would kill (not
# ignored: nohup; not under torchrun, whose agent stops its workers); restored at the end of this module
_MAIN = threading.current_thread() is threading.main_thread()
_STARTING = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if _MAIN and signal.getsignal(s) is (
    signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL) and (
    s == signal.SIGINT or os.environ.get("WORLD_SIZE", "1").strip() == "1")]
for _signum in _STARTING:
    signal.signal(_signum, _interrupted_while_starting)

STDOUT = "standard output"  # the name a failed write to fd 1 carries (OSError.filename)
READER_GONE = 141  # the exit status where the reader of the output went away (``| head -1``): 128 + SIGPIPE


class ReaderGone(BaseException):
    """The reader of stdout or stderr went away (``resdom recommend RUN | head -1``: a broken pipe). Not an
    OSError, which Click turned into a silent exit 1 and a command's own ``except OSError`` into a message about a
    file; the entry point ends quietly with ``READER_GONE``, as a Unix tool killed by SIGPIPE does."""


class NamedStdout(io.FileIO):
    """fd 1, whose write errors name it: ``> /dev/full`` is "standard output: no space left", not an unnamed
    write error read as a file's; a closed stdout (``>&-``, held by a read-only placeholder) fails its first write
    with EBADF instead of losing the output and exiting 0. A reader that went away (EPIPE) raises ``ReaderGone``
    once; what is written after it (the flush at exit) goes nowhere, so nothing is "ignored" on stderr at exit.
    ``named``: whether other write errors name it (fd 2, stderr, only ends quietly on EPIPE)."""

    def __init__(self, fd: int, named: bool = True) -> None:
        super().__init__(fd, "w", closefd=False)
        self.named, self.gone = named, False

    def write(self, data: Any, /) -> int:
        if self.gone:
            return len(data)
        try:
            return super().write(data)
        except OSError as e:
            if e.errno == errno.EPIPE:
                self.gone = True
                raise ReaderGone from None
            if not self.named:
                raise
            raise OSError(e.errno, e.strerror, STDOUT) from None


def guard_standard_streams(closed: frozenset[int] | None = None) -> frozenset[int]:
    """A closed stdin, stdout or stderr (``>&-``, ``2>&-``, a daemon's) gets a placeholder on its descriptor before
    any file is opened, so no file resdom writes takes fd 1 or 2 and receives what a library prints there; a closed
    stderr drops the notes (``sys.stderr`` was None: ``isatty()`` failed, ``print(file=None)`` wrote to stdout).
    ``closed``: the descriptors to treat as closed (tests); None: those that are. -> the descriptors it covered."""
    if closed is None:
        closed = frozenset(fd for fd in (0, 1, 2) if not _is_open(fd))
    for fd in sorted(closed):
        placeholder = os.open(os.devnull, os.O_WRONLY if fd == 2 else os.O_RDONLY)  # fd 1: a write fails (EBADF)
        if placeholder != fd:
            os.dup2(placeholder, fd)
            os.close(placeholder)
    if 2 in closed:
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115 (the process's own)
    return closed


def name_stdout(closed: bool = False) -> None:
    """Make ``sys.stdout`` write through ``NamedStdout`` (``closed``: fd 1 was closed, sys.stdout is None, and now
    fails its first write, where the output would have been lost without a word), and ``sys.stderr`` too, for a
    reader that goes away (``2>&1 | head -1``); a captured stream (tests, a program that calls ``app``) is left as
    it is."""
    old = sys.stdout
    if closed or not (old is None or old is not sys.__stdout__ or _fileno(old) != 1):
        sys.stdout = _through_named(old, 1, named=True)
    err = sys.stderr
    if err is not None and err is sys.__stderr__ and _fileno(err) == 2:
        sys.stderr = _through_named(err, 2, named=False)


def _through_named(old: Any, fd: int, named: bool) -> io.TextIOWrapper:
    """A text stream like ``old`` (its encoding, errors, line buffering) on ``fd`` through ``NamedStdout``; what its
    encoding cannot write is written as its code (``\\xb1``), as Python writes stderr: the help's '±' on an ASCII
    stdout (PYTHONIOENCODING=ascii, a C locale without UTF-8 mode) was a UnicodeEncodeError traceback. Files a
    command prints go out as bytes (``values.print_file``), never through this."""
    if old is not None:
        old.flush()
    return io.TextIOWrapper(io.BufferedWriter(NamedStdout(fd, named)),
                            encoding=getattr(old, "encoding", None) or "utf-8", errors="backslashreplace",
                            line_buffering=bool(getattr(old, "line_buffering", False)))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _fileno(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None


def check_temporary_folder() -> None:
    """Exit 2 with one line where no temporary folder is writable (TMPDIR, /tmp, /var/tmp, the working folder):
    importing torch, which every command but a few does below, ended in a FileNotFoundError traceback from inside
    torch (its compile cache's default path is made from ``tempfile.gettempdir``)."""
    try:
        tempfile.gettempdir()
    except FileNotFoundError:
        where = f"TMPDIR ({os.environ['TMPDIR']}), " if os.environ.get("TMPDIR") else ""
        print(f"error: no writable temporary folder ({where}/tmp, /var/tmp or the working folder); set TMPDIR to a "
              "writable folder", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def check_working_folder() -> None:
    """Exit 2 with one line where the working folder is gone (deleted while the shell was in it):
    every command ended in torch's "Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so", repeated, an
    absolute --out and input paths or not, and a relative path would name nothing."""
    try:
        os.getcwd()
    except FileNotFoundError:
        print("error: the working folder no longer exists (deleted while the shell was in it); cd to a "
              "folder that exists and rerun", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


_CLOSED = guard_standard_streams()
check_temporary_folder()
check_working_folder()

import typer

from resdom.bounded import command_budget
from resdom.checks import cli_names, launch_env
from resdom.cli import config_cmd, data_cmd, diagnose_cmd, import_cmd, pipeline_cmd, recommend_cmd, train_cmd
from resdom.cli.values import INTERRUPTED, stop_as_on_ctrl_c, stopped_by, stopped_status
from resdom.errors import ResdomError
from resdom.io import NO_SPACE, no_space_message
from resdom.limits import cut_message, short, visible
from resdom.version import __version__

try:  # typer >= 0.26 carries its own copy of Click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer, with Click installed beside it
    from click import exceptions as click_exceptions  # type: ignore[no-redef]
_LINE_BREAKS = re.compile(r"[ \t]*[\r\n]+[ \t]*")
_NO_ARGS_IS_HELP = getattr(click_exceptions, "NoArgsIsHelpError", ())  # Click >= 8.2 raises it to print the help

for _signum in _STARTING:  # loaded: Ctrl-C is a KeyboardInterrupt again, SIGTERM and SIGHUP as they were
    signal.signal(_signum, signal.default_int_handler if _signum == signal.SIGINT else signal.SIG_DFL)

_typer_app = typer.Typer(
    name="resdom",
    help="Train causal self-attention recommenders and diagnose their last-item reliance.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@_typer_app.callback()
def _main() -> None:
    """resdom: why causal self-attention recommenders lean on the last item (residual dominance)."""


@_typer_app.command()
def version() -> None:
    """Print resdom's version and its main dependencies' versions."""
    import torch

    typer.echo(f"resdom {__version__} (torch {torch.__version__})")


def _register() -> None:
    for module in (data_cmd, train_cmd, diagnose_cmd, pipeline_cmd, import_cmd, config_cmd, recommend_cmd):
        module.register(_typer_app)


_register()


def keep_freed_memory() -> bool:
    """Under glibc, keep freed blocks of up to 32 MB in the heap instead of handing them back to the system, so
    the tensors a training step frees and makes again cost no fresh pages (page faults: about 5% of a CPU epoch,
    docs/choices.md); the price is a resident size that stays near its peak. ``RESDOM_MALLOC=system``
    leaves malloc as it is. -> whether the settings were made."""
    import ctypes
    import platform

    if os.environ.get("RESDOM_MALLOC") == "system" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    return all(libc.mallopt(option, value) == 1 for option, value in
               ((m_mmap_threshold, 32 << 20), (m_trim_threshold, 1 << 30), (m_top_pad, 256 << 20)))


class MatplotlibCacheNote(logging.Filter):
    """matplotlib's warnings where it cannot write its settings and cache folder (a container's read-only HOME, an
    unwritable MPLCONFIGDIR): "mkdir -p failed for path P: [Errno 13] Permission denied: 'P'" or "P is not a
    writable directory", then a sentence of advice, on every command that draws a figure (report, demo, reproduce,
    remedies). One note instead; the figures are drawn as before, with matplotlib's temporary folder."""

    _DROPPED = ("mkdir -p failed for path %s: %s", "%s is not a writable directory")
    _ISSUE = re.compile(r"(MPLCONFIGDIR|the default path) \((.*)\)", re.DOTALL)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in self._DROPPED:
            return False
        if not (isinstance(record.msg, str) and record.msg.startswith("Matplotlib created a temporary cache")
                and isinstance(record.args, tuple) and len(record.args) == 2):
            return True
        issue = self._ISSUE.fullmatch(str(record.args[1]))
        where = ("no home folder" if issue is None else
                 f"MPLCONFIGDIR {issue.group(2)}" if issue.group(1) == "MPLCONFIGDIR" else issue.group(2))
        with contextlib.suppress(OSError):
            print(visible(f"note: matplotlib's cache folder ({cut_message(where)}) is not writable: figures are drawn "
                          "with a temporary one, made anew each run; set MPLCONFIGDIR to a writable folder to keep "
                          "it"), file=sys.stderr, flush=True)
        return False


def app() -> None:
    """Run the CLI; a ResdomError exits 2 with its one-line message, never a traceback. A process that joined
    torchrun's process group and left it ends through ``distributed.leave`` (no interpreter teardown, where gloo
    may abort a finished run)."""
    keep_freed_memory()
    name_stdout(1 in _CLOSED)
    logging.getLogger("matplotlib").addFilter(MatplotlibCacheNote())  # before any command imports matplotlib
    try:
        try:
            with stop_as_on_ctrl_c():
                _run()
        finally:
            _flush_output()  # now, not at exit: a reader gone by then is a ReaderGone here too
    except ReaderGone:  # the reader went away (``| head -1``): quietly, as a Unix tool killed by SIGPIPE
        _leave_group_process(READER_GONE)
        sys.exit(READER_GONE)
    except SystemExit as e:
        _leave_group_process(e.code)
        raise
    _leave_group_process(0)


def _flush_output() -> None:
    """Flush stdout and stderr; a ReaderGone is raised (once: what follows goes nowhere), any other error is for
    the flush at exit to report."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()


def _leave_group_process(code: int | str | None) -> None:
    distributed = sys.modules.get("resdom.distributed")  # not imported: no process group was joined
    if distributed is not None and distributed.left_group():
        distributed.leave(code)


_SYMLINK_LOOP = re.compile(r"Symlink loop from (['\"])(.*)\1", re.DOTALL)  # pathlib's RuntimeError (Python < 3.13)
PATH_ERRORS = frozenset({errno.ENAMETOOLONG, errno.EACCES, errno.EPERM, errno.EROFS, errno.ELOOP, errno.ENOTDIR,
                         errno.ENOENT, errno.EISDIR})  # what the system says of a path a user gave: one line naming it
EMPTY_MEANS_ALL = frozenset({"--what", "--layers", "--alphas"})  # "" there: every diagnostic / block, the default


_ALLOCATION_FAILED = re.compile(r"out of memory|can't allocate memory", re.IGNORECASE)


# what lowers the memory a command takes, in its own options (``train`` has no --batch-size: --set sets its batches)
_TRAINING_MEMORY = ("lower --set train.batch_size=N (--set train.eval_batch_size=N where it evaluates) or --set "
                    "model.max_len=N; a large catalogue trains with --set train.objective=ce_sampled on a GPU "
                    "(docs/scaling.md)")
_SCORING_MEMORY = "lower --batch-size (users scored at once)"
MEMORY_ADVICE: dict[str, str] = {"train": _TRAINING_MEMORY, "remedies": _TRAINING_MEMORY,
                                 "evaluate": _SCORING_MEMORY, "diagnose": _SCORING_MEMORY,
                                 "recommend": _SCORING_MEMORY}
OTHER_MEMORY = "the model or its batches are too large for this device (docs/scaling.md)"


LAUNCHED = frozenset({"train", "evaluate", "diagnose", "recommend", "similar", "version"})  # run under torchrun


def one_process_only(args: list[str]) -> str | None:
    """The line refusing a command that is not split over processes, run by several (torchrun, WORLD_SIZE > 1):
    ``torchrun --nproc_per_node 2 -m resdom report RUN --out REP`` ran the report twice, and one process ended with
    "REP: another process is already writing there" (its lock taken by its twin), a failed launch for a report
    written; demo, data split, an import wrote their output twice over the same way. Those of ``LAUNCHED`` split
    their work or leave it to rank 0; None for them, for --help, and outside a launch."""
    words = [a for a in args if not a.startswith("-")]
    if not words or words[0] in LAUNCHED or "--help" in args:
        return None
    try:
        world = launch_env()[1]
    except ResdomError:  # the launcher's variables: a command of LAUNCHED names them where it reads them
        return None
    if world <= 1:
        return None
    command = command_words(args)
    launched = ", ".join(sorted(LAUNCHED - {"version"}))
    return (f"resdom {command} runs in one process (WORLD_SIZE={world}: each process would do it all again and write "
            f"the same files); run it once, without torchrun (the commands that run under it: {launched})")


def command_words(args: list[str]) -> str | None:
    """The command of a command line (``resdom`` left out): its first word, with the next for a group
    (``data split``, ``config show``); None for none."""
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return None
    return " ".join(words[:2]) if words[0] in ("data", "config") else words[0]


def out_of_memory_line(e: RuntimeError, command: str | None = None) -> str | None:
    """The one line for torch's own allocation failure, which is no MemoryError: a GPU's ``torch.OutOfMemoryError``
    ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has ...", a page of advice on the allocator after it),
    MPS's "MPS backend out of memory", the CPU allocator's "can't allocate memory"; None for any other error.
    ``command`` (``command_words``): the advice names what lowers the memory in that command's own options."""
    torch = sys.modules.get("torch")
    text = " ".join(str(e).split())
    if not (torch is not None and isinstance(e, torch.OutOfMemoryError)) and not _ALLOCATION_FAILED.search(text):
        return None
    found = _ALLOCATION_FAILED.search(text)
    if found is None:  # a torch.OutOfMemoryError in other words
        said = text[:200]
    else:  # its sentence: "CUDA out of memory", "MPS backend out of memory", "DefaultCPUAllocator: can't ..."
        said = re.split(r"\. |\] ", text[: found.end()])[-1]
        amount = re.search(r"tried to allocate ([\d.]+ ?\w+)", text, re.IGNORECASE)
        said += f", tried to allocate {amount.group(1)}" if amount else ""
    return f"out of memory ({cut_message(said)}); {MEMORY_ADVICE.get(command or '', OTHER_MEMORY)}"


def empty_argument(args: list[str]) -> str | None:
    """The message for an empty argument, or None: a shell variable left unset (``--out "$OUT"``) would otherwise
    be read as the working folder (Path("") is "."), and a report written into it. Options where "" means all
    (``EMPTY_MEANS_ALL``) are left alone."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        option, eq, value = arg.partition("=")
        if arg.startswith("--") and eq and not value and option not in EMPTY_MEANS_ALL:
            return f"{option}: an empty value (an unset shell variable?); give one"
        if arg == "":
            before = args[i - 1] if i else ""
            if before.startswith("-") and "=" not in before:
                if before in EMPTY_MEANS_ALL:
                    continue
                return f"{before}: an empty value (an unset shell variable?); give one"
            return "an empty argument (an unset shell variable?); give a value or leave it out"
    return None


def _run() -> None:
    if (message := empty_argument(sys.argv[1:]) or one_process_only(sys.argv[1:])) is not None:
        _error(message)
        sys.exit(2)
    try:
        # messages name options by their flags (--user-col), not their Python arguments; resdom.limits hold over
        # the whole command, not only each file it reads
        with cli_names(), command_budget():
            code = _typer_app(prog_name="resdom", standalone_mode=False)  # Click's errors come here, not boxed
    except click_exceptions.UsageError as e:
        if isinstance(e, _NO_ARGS_IS_HELP):  # a bare ``resdom`` or ``resdom data``: the help, as before
            e.show()
            sys.exit(e.exit_code)
        _error(usage_line(e))
        sys.exit(2)
    except click_exceptions.ClickException as e:  # e.g. a file Click could not open
        _error(e.format_message())
        sys.exit(e.exit_code)
    except typer.Abort as e:  # end of input at a prompt, or (Click's doing) any EOFError a reader let through
        cause = e.__cause__
        if isinstance(cause, EOFError) and str(cause):  # a truncated file, not the user's Ctrl-D
            _error(f"a file ended before its data did, it is truncated ({short(str(cause))})")
            sys.exit(2)
        _error("aborted")
        sys.exit(1)
    except MemoryError:  # the last line of defence: resdom.limits refuses what it foresees before allocating
        _error("out of memory (an input larger than this machine can hold, or a crafted file past what resdom's "
               "limits foresee; docs/limits.md)")
        sys.exit(2)
    except RecursionError:
        _error("an input nested too deeply to read (a crafted or damaged file?)")
        sys.exit(2)
    except RuntimeError as e:  # Path.resolve() of a path through a loop of links, before Python 3.13 (then ELOOP)
        if (memory := out_of_memory_line(e, command_words(sys.argv[1:]))) is not None:
            _error(memory)
            sys.exit(2)
        if _peer_gone(e):
            _error("another process of this launch stopped while this one waited for it (its own error says "
                   "why); this one stops too")
            sys.exit(1)
        loop = _SYMLINK_LOOP.fullmatch(str(e))
        if loop is None:
            raise
        _error(f"{cut_message(loop.group(2))}: a loop of symbolic links (each leads to the next, none to a file "
               "or folder)")
        sys.exit(2)
    except ResdomError as e:  # one line even where it quotes a library's message that spans lines (pyarrow's)
        _error(_LINE_BREAKS.sub(' ', str(e).strip()))
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C before Click's own handling began (while the command line is read)
        _interrupted()
    except OSError as e:  # a full disk at a write that io.writing does not wrap (a log, a lock file, ...), or a
        # path the system refuses wherever a command first touches it (a name too long, no permission, a loop)
        if e.filename == STDOUT and e.errno != errno.EPIPE:  # > /dev/full, >&-: what the output could not do
            _drop_stdout()
            closed = " (closed: >&-?)" if e.errno == errno.EBADF else ""
            _error(f"{STDOUT}: {e.strerror or 'write error'}{closed}; the output is incomplete")
        elif e.errno in NO_SPACE:
            _error(no_space_message(e.filename, e.errno))
        elif e.errno in PATH_ERRORS and e.filename is not None:
            _error(f"{cut_message(str(e.filename))}: {e.strerror}")
        else:
            raise
        sys.exit(2)
    if code == INTERRUPTED:  # Click's answer to a Ctrl-C no command caught (those that do exit by SystemExit)
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)


def _interrupted() -> None:
    """Ctrl-C (or SIGTERM, SIGHUP: ``stop_as_on_ctrl_c``): one line, exit 128 + the signal (every file is written
    whole or not at all: nothing half-written is left); a terminal that is gone takes no line."""
    with contextlib.suppress(OSError):
        print(f"interrupted{stopped_by()}", file=sys.stderr, flush=True)
    sys.exit(stopped_status())


def _drop_stdout() -> None:
    """After a failed write to stdout: what is still buffered goes nowhere (the flush at exit would fail again, a
    second message and exit status 120)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (kept until exit)


def _error(message: str) -> None:
    """``error: MESSAGE`` on stderr: red on a terminal, plain where ``NO_COLOR`` is set (no-color.org) or
    ``TERM=dumb`` (Click strips the colour only where stderr is no terminal). A control character in it (an
    escape sequence in a file name, an id or a label the message quotes) is written as its code (``visible``), never
    sent to the terminal to act on. Under torchrun only the first process of each machine writes it (it still exits
    non-zero, and torchrun names every process that failed): a bad input each process sees printed the same line
    once per process, N lines for one mistake (``_echoes_first_process``)."""
    if _echoes_first_process():
        return
    message = visible(message)
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        typer.echo(f"error: {message}", err=True)
    else:
        typer.secho(f"error: {message}", err=True, fg="red")


_PEER_GONE = re.compile(r"connection (closed|reset) by peer|broken pipe", re.IGNORECASE)


def _peer_gone(error: RuntimeError) -> bool:
    """Whether ``error`` is gloo's word for a process of the launch that ended (an error of its own, say a file rank 0
    alone writes) while this one waited for it in a collective: "[.../gloo/transport/tcp/pair.cc:553] Connection
    closed by peer", which came out as a traceback on the process that had done nothing wrong."""
    distributed = sys.modules.get("resdom.distributed")  # not imported: no process group was joined
    joined = distributed is not None and (distributed.left_group() or distributed.rank_and_world()[1] > 1)
    return joined and _PEER_GONE.search(str(error)) is not None


def _echoes_first_process() -> bool:
    """Whether this process is one of several that torchrun started on this machine, and not the first
    (LOCAL_RANK > 0): its error line is the one the first process writes to the same terminal or log (the same
    command line, files and checks; a refusal rank 0 alone can see is raised on every rank with rank 0's words,
    ``distributed.raise_everywhere``). Each machine of a multi-node launch writes its own line."""
    try:
        _, world, local_rank = launch_env()
    except ResdomError:  # the launcher's variables are the error: every process says so
        return False
    return world > 1 and local_rank > 0


def usage_line(error: click_exceptions.UsageError) -> str:
    """A command line Click cannot parse, in one line: which command, what is wrong, where the help is, e.g.
    ``resdom train: missing option '--out' / '-o' (see resdom train --help)``."""
    command = error.ctx.command_path if error.ctx is not None else "resdom"
    message = " ".join(error.format_message().split()).rstrip(".")
    return f"{command}: {message[:1].lower()}{message[1:]} (see {command} --help)"
