"""The one exception type for a user's mistake (bad file, bad id, bad config value, mismatched checkpoint).

The CLI prints its message on one line and exits with status 2; no traceback is shown. Raise it at the
boundary where the input is read, and name the file, line or field in the message.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from resdom.limits import cut_message

if TYPE_CHECKING:
    from pydantic import ValidationError

_LINE_BREAKS = re.compile(r"[ \t]*[\r\n]+\s*")  # a line break and the indentation after it: one space


class ResdomError(Exception):
    """A user-facing error: the message says what is wrong and where (file:line, field name).

    A value the message quotes whole from a file (a 50 MB timestamp, a 20 MB id) is cut to a readable length
    (``limits.cut_message``: ``RESDOM_MAX_MESSAGE_CHARS`` characters a value), and is one line: a quoted repr
    that spans lines (a DataFrame's, a 2-D array's) has each line break, with the spaces around it, as one space,
    as the CLI prints it."""

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str):
            args = (cut_message(_LINE_BREAKS.sub(" ", args[0].strip())),)
        super().__init__(*args)


class OptionError(ResdomError):
    """Bad option values: ``problems`` pairs each option's field name with what is wrong with it, and the message
    names every one (``field: problem; field: problem``). ``renamed`` names the fields as a front end calls them
    (the CLI's flags), so one validation serves the API (``part``) and the CLI (``--part``)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"{name}: {problem}" for name, problem in self.problems))

    def renamed(self, names: dict[str, str]) -> OptionError:
        """The same problems with each field named ``names[field]`` (fields not in ``names`` keep their name)."""
        return OptionError([(names.get(name, name), problem) for name, problem in self.problems])


def validation_error(e: ValidationError, section: str | None = None) -> OptionError:
    """pydantic's ValidationError as an OptionError, one problem a bad field: (``section.field``, or ``field``
    without a section, message (got value)); a front end renames the fields by where their values came from
    (``OptionError.renamed``)."""
    problems = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        message = err["msg"].removeprefix("Value error, ")  # a validator's own message, as it wrote it
        value = err.get("input")
        quoted = isinstance(value, str) and repr(value) in message  # a message that quotes the value says it once
        got = f" (got {value!r})" if "input" in err and not isinstance(value, dict) and not quoted else ""
        name = ".".join(x for x in (section, loc) if x) or "value"
        problems.append((name, f"{message}{got}"))
    return OptionError(problems)
