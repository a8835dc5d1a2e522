"""Markdown tables. A cell may hold text a user chose (a data set's file name, a model label, a run folder), so
every cell is written through ``md_cell``: a ``|`` is escaped and a line break becomes a space, and one row stays
one row of the table; and every such text (a cell, a line under a table: ``md_text``) has a ``<`` that would open
an HTML tag (``<script>``, ``</b>``, ``<!--``) escaped, so that a label is shown as written, never run or hidden by
a Markdown viewer."""

from __future__ import annotations

import re
from collections.abc import Sequence

from resdom.limits import visible

NO_DATA = "(no data)"


def md_text(text: object) -> str:
    """``text`` as one line of Markdown showing it as written: line breaks as spaces, a ``<`` that would open an
    HTML tag, comment or processing instruction (``<`` then a letter, ``/``, ``!`` or ``?``) as ``&lt;`` (an entity,
    not ``\\<``, which a backslash in the text before it would cancel); ``p < 0.05`` is left as it is; any other
    control character as its code (``visible``: an escape sequence reaches no terminal that shows the file)."""
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", visible(re.sub(r"[\r\n]+", " ", str(text))))


def md_cell(text: object) -> str:
    """``text`` as one Markdown table cell: ``md_text``, every ``|`` not yet escaped as ``\\|``."""
    return re.sub(r"(?<!\\)\|", r"\\|", md_text(text))


def markdown_lines(header: Sequence[object], rows: Sequence[Sequence[object]], empty: str | None = None) -> list[str]:
    """The lines of a table: the header, the rule, one line per row (``empty``: a row saying so where there are
    none, e.g. ``NO_DATA``)."""
    if not rows and empty is not None:
        rows = [[empty] + [""] * (len(header) - 1)]
    return ["| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows)]


def markdown_table(header: Sequence[object], rows: Sequence[Sequence[object]], empty: str | None = NO_DATA) -> str:
    """``markdown_lines`` as text ending in a line break; a ``NO_DATA`` row where there are no rows."""
    return "\n".join(markdown_lines(header, rows, empty)) + "\n"
