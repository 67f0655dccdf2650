"""The report as a document: sections of paragraphs and tables, before any output format.

Every section builder (``*_section(s).py``, ``measured.py``) makes these, their cells formatted
by :func:`cell`; ``writers.py`` writes them as Markdown and HTML.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

#: A table with more rows than this is collapsed (``<details>``) unless it says otherwise: the
#: page should read top to bottom as headlines, with the long listings one click away.
OPEN_ROWS = 10


@dataclass
class Table:
    """Rows of already formatted cells under ``headers``; ``caption`` above it. ``collapsed``:
    folded in a ``<details>`` element; ``None`` folds it beyond :data:`OPEN_ROWS` rows."""

    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    collapsed: bool | None = None
    code_cols: tuple[int, ...] = ()  # cells shown as code in HTML (overrides to paste)
    #: (row, column) -> the full text of a cell shown shortened (HTML: on hover, ``title``)
    titles: dict[tuple[int, int], str] = field(default_factory=dict)

    @property
    def folded(self) -> bool:
        """Whether the table is shown collapsed."""
        return len(self.rows) > OPEN_ROWS if self.collapsed is None else self.collapsed

    @property
    def summary(self) -> str:
        """The line a collapsed table shows: its caption and its number of rows."""
        label = self.caption or "Table"
        return f"{label} ({len(self.rows)} rows)"


@dataclass
class Section:
    """One part of the report: ``paragraphs`` and ``tables`` under ``title``, an optional
    inline SVG ``plot`` (HTML only), ``pre`` verbatim text (the config, shown collapsed under
    ``pre_label``)."""

    id: str
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plot: str | None = None
    plot_alt: str = ""
    pre: str | None = None
    pre_label: str = ""

    def add(self, table: Table, empty: str | None = None) -> None:
        """Add ``table`` when it has rows; otherwise the note ``empty``, if given."""
        if table.rows:
            self.tables.append(table)
        elif empty is not None:
            self.paragraphs.append(empty)


def cell(value: Any, nd: int = 2) -> str:
    """``value`` as a table cell: ``-`` for none or not finite, thousands separated, ``nd``
    decimals for floats, yes / no, lists and maps joined."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:,.{nd}f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v, nd) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell(v, nd)}" for k, v in value.items())
    return str(value)
