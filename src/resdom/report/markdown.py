"""Markdown tables. A cell may hold text a user chose (a data set's file name, a model label, a run folder), so
every cell is written through ``md_cell``: a ``|`` is escaped and a line break becomes a space, and one row stays
one row of the table."""

from __future__ import annotations

import re
from collections.abc import Sequence

NO_DATA = "(no data)"


def md_cell(text: object) -> str:
    """``text`` as one Markdown table cell: line breaks as spaces, every ``|`` not yet escaped as ``\\|``."""
    return re.sub(r"(?<!\\)\|", r"\\|", re.sub(r"[\r\n]+", " ", str(text)))


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
