"""The limits within which resdom reads a file a user hands it (torch-free, imports nothing of resdom).

A file from elsewhere (a checkpoint from a colleague, a store copied from a server, a half-downloaded archive)
decides sizes: how far an archive member unpacks, how many nodes a YAML alias expands to, how large a model its
description asks for. Each such size is checked against one limit here before anything is allocated, so that no
input of 1 MB or less makes a command use more than 1 GB of memory. Each limit is raised (or lowered) by one
environment variable, ``RESDOM_MAX_...`` (docs/limits.md lists them); ``resdom.bounded`` holds the readers that
apply them, and ``short`` cuts a value quoted in a message to a readable length.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Limit:
    """One limit: its environment variable, its default and what it bounds (for messages and docs/limits.md)."""

    env: str
    default: int
    what: str

    @property
    def value(self) -> int:
        """The limit in force: the environment variable where set (a whole number >= 1, ``_`` allowed, or with a
        K / M / G suffix: powers of 1024), else the default. A malformed value is ignored for the default."""
        raw = os.environ.get(self.env, "").strip().replace("_", "")
        if not raw:
            return self.default
        scale = {"K": KIB, "M": MIB, "G": GIB}.get(raw[-1].upper(), 1)
        digits = raw[:-1] if scale > 1 else raw
        try:
            number = int(digits)
        except ValueError:
            return self.default
        return number * scale if number >= 1 else self.default


MEMBER_BYTES = Limit("RESDOM_MAX_MEMBER_BYTES", 4 * GIB,
                     "bytes one archive member (zip, gz, npz, a checkpoint's record) may unpack to")
EXPANSION = Limit("RESDOM_MAX_EXPANSION", 100,
                  "how many times its own size an archive may unpack to, beyond an allowance of 64 MiB")
EXPANSION_ALLOWANCE = 64 * MIB  # any archive may unpack to this much, whatever its ratio (tiny test files)
YAML_ALIASES = Limit("RESDOM_MAX_YAML_ALIASES", 100, "aliases (*name) in one YAML document")
YAML_DEPTH = Limit("RESDOM_MAX_YAML_DEPTH", 50, "nesting depth of a YAML document")
YAML_NODES = Limit("RESDOM_MAX_YAML_NODES", 100_000, "values of a YAML document once its aliases are expanded")
SYNTHETIC_USERS = Limit("RESDOM_MAX_SYNTHETIC_USERS", 1_000_000, "users of a synthetic data set")
SYNTHETIC_ITEMS = Limit("RESDOM_MAX_SYNTHETIC_ITEMS", 1_000_000, "items of a synthetic data set")
SYNTHETIC_INTERACTIONS = Limit("RESDOM_MAX_SYNTHETIC_INTERACTIONS", 50_000_000,
                               "interactions (users x max_len) of a synthetic data set")
MODEL_BYTES = Limit("RESDOM_MAX_MODEL_BYTES", 4 * GIB,
                    "estimated bytes of the weights a model configuration asks for")
PICKLE_DIMS = Limit("RESDOM_MAX_PICKLE_DIMS", 64, "dimensions of a torch.Size in a checkpoint's pickle")
DOWNLOAD_BYTES = Limit("RESDOM_MAX_DOWNLOAD_BYTES", 1 * GIB, "bytes one downloaded data file may hold")
MESSAGE_CHARS = Limit("RESDOM_MAX_MESSAGE_CHARS", 300, "characters of one value quoted in an error message")
RENDEZVOUS_SECONDS = Limit("RESDOM_MAX_RENDEZVOUS_SECONDS", 30,
                           "seconds the processes of a torchrun launch wait for each other to join")

ALL_LIMITS = (MEMBER_BYTES, EXPANSION, YAML_ALIASES, YAML_DEPTH, YAML_NODES, SYNTHETIC_USERS, SYNTHETIC_ITEMS,
              SYNTHETIC_INTERACTIONS, MODEL_BYTES, PICKLE_DIMS, DOWNLOAD_BYTES, MESSAGE_CHARS, RENDEZVOUS_SECONDS)


def expansion_cap(packed_bytes: int) -> int:
    """The most bytes an archive of ``packed_bytes`` may unpack to (all its members together): ``EXPANSION`` times
    its size plus ``EXPANSION_ALLOWANCE``, and never more than ``MEMBER_BYTES``."""
    return min(MEMBER_BYTES.value, EXPANSION.value * max(int(packed_bytes), 0) + EXPANSION_ALLOWANCE)


def short(value: object, limit: int | None = None) -> str:
    """``repr(value)`` cut to ``limit`` characters (``MESSAGE_CHARS``) with how much was left out, e.g.
    ``'1111...' (50,000,000 characters)``; a long str is cut before its repr is built. The cut text is at most
    ``limit`` characters without a space, so ``cut_message`` leaves it as it is; a repr that spans lines (a
    DataFrame's, an array's) is one line, each run of spaces and line breaks one space."""
    limit = MESSAGE_CHARS.value if limit is None else limit
    if isinstance(value, (str, bytes)) and len(value) > limit:
        unit = "characters" if isinstance(value, str) else "bytes"
        head = repr(value[: max(limit - 5, 1)])  # quotes and "..." within ``limit`` where no character is escaped
        return f"{head[:max(limit - 3, 1)]}... ({len(value):,} {unit})"
    text = repr(value)
    if "\n" in text or "\r" in text:  # never a str's or bytes' repr: those escape their line breaks
        text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:max(limit - 3, 1)]}... ({len(text):,} characters)"


def why_unread(e: BaseException) -> str:
    """Why a file could not be read, for "PATH: cannot read it (WHY)": an OSError's own words ("Permission denied"),
    not its text "[Errno 13] Permission denied: 'PATH'", which named the path a second time; anything else as
    ``short`` quotes it."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return short(str(e))


def quote(value: object, limit: int | None = None) -> str:
    """An id as a message names it: a str quoted (``repr``: an id may hold a comma or a space), anything else as
    ``str`` gives it (``7``, not ``np.int64(7)``), either cut as ``short`` cuts."""
    if isinstance(value, (str, bytes)):
        return short(value, limit)
    text = str(value)
    return text if len(text) <= (MESSAGE_CHARS.value if limit is None else limit) else short(text, limit)


# what a terminal would act on rather than show: C0 controls but the tab and the line break (ESC starts a sequence
# that clears the screen, moves the cursor, sets the title), DEL, C1 controls (0x9b: CSI), and the marks and
# overrides of text direction (one reverses what follows it on the line)
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` for a terminal, each character it would act on rather than show (``_UNSHOWN``: an escape sequence's
    ESC, a carriage return, a right-to-left override) written as its code, ``\\x1b``, ``\\u202e``: a file, id or
    label in a message is shown as it is, never run by the terminal."""
    return _UNSHOWN.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def cut_message(message: str, limit: int | None = None) -> str:
    """``message`` with each run of characters without a space longer than ``limit`` (``MESSAGE_CHARS``) cut to
    ``limit`` (a value quoted whole, a 50 MB timestamp), and the whole cut to 8 x ``limit`` (its head and its end,
    where the advice stands): what an error message may quote of a file. Cutting a cut message changes nothing, so a
    message that quotes another (``f"{path}: {error}"``) keeps the counts of what the first cut left out."""
    limit = MESSAGE_CHARS.value if limit is None else limit
    if len(message) <= limit:
        return message
    words = message.split(" ")
    if any(len(w) > limit for w in words):
        message = " ".join(w if len(w) <= limit else f"{w[:max(limit - 3, 1)]}... ({len(w):,} characters)"
                           for w in words)
    most = 8 * limit
    if len(message) > most:
        keep = 7 * limit  # room for the marker and for a message quoting this one to stay within ``most``
        head, tail = message[: keep * 3 // 4], message[len(message) - keep // 4:]
        message = f"{head} ...({len(message) - len(head) - len(tail):,} characters left out)... {tail}"
    return message


def model_params(fields: dict[str, object]) -> tuple[int, int]:
    """(a lower bound, an estimate) of the parameters of the model a description (``ModelConfig``'s fields:
    name, n_items, max_len, hidden, layers, inner_size / inner_mult, output) asks for, from those fields alone, before
    anything is built. The lower bound holds for every model resdom builds (its item embedding and 3 hidden^2 a
    layer); the estimate adds each block's attention and feed-forward weights and
    an untied output table. A field that is no whole number counts as 0 (the config's own check refuses it)."""

    def whole(name: str, default: int) -> int:
        value = fields.get(name, default)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    items, max_len, hidden, layers = whole("n_items", 0) + 2, whole("max_len", 50), whole("hidden", 64), \
        whole("layers", 2)
    inner = whole("inner_size", 0) or whole("inner_mult", 4) * hidden
    positions = (max_len + 1) * hidden  # a position table (none in a recurrent model: the estimate's excess only)
    lower = items * hidden + layers * 3 * hidden * hidden
    tables = 2 if fields.get("output") in ("untied", "projected") else 1
    estimate = tables * items * hidden + positions + layers * (4 * hidden * hidden + 2 * hidden * inner + 10 * hidden)
    return lower, estimate
