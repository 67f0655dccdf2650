"""The report as a document: sections of paragraphs and tables, before any output format.

Every section builder (``render.py``, ``measured.py``) makes these; ``render.py`` writes them as
terminal text, Markdown and HTML.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["OPEN_ROWS", "Section", "Table"]


#: A table with more rows than this is collapsed (``<details>``) unless it says otherwise: the
#: page should read top to bottom as headlines, with the long listings one click away.
OPEN_ROWS = 10


@dataclass
class Table:
    """Rows of already formatted cells under ``headers``; ``caption`` above it.

    ``collapsed``: shown folded in a ``<details>`` element (HTML and Markdown); ``None`` (the
    default) folds it when it has more than :data:`OPEN_ROWS` rows. Headline tables (the
    verdict, the phase breakdown) say ``False``, listings (the resource summary) ``True``.
    """

    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    collapsed: bool | None = None
    code_cols: tuple[int, ...] = ()  # cells shown as code in HTML (overrides to paste)

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
