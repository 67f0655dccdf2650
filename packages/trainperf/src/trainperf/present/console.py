"""Terminal output that coexists with the training progress bar.

* :func:`print_renderable` prints a Rich table / text through Rich's global console. Lightning's
  ``RichProgressBar`` draws its live display on that same console (``rich.get_console()``, see
  ``lightning/pytorch/callbacks/progress/rich_progress.py``), so Rich clears the live lines,
  prints the table above them and redraws the bar. A second ``Console()`` writes behind the live
  display's back: the next refresh moves the cursor up over the bar's height and erases the
  table's last rows.
* :func:`fit_table` drops optional columns of a table, in a fixed order, until it fits the
  terminal (80 columns included) instead of letting Rich squeeze a column to nothing.
* :func:`make_console` / :func:`widen_for_logs`: output read from a log file or CI (stdout not a
  terminal) is as wide as ``COLUMNS`` says, or :data:`LOG_WIDTH` when it is unset (Rich's own
  default there is 80 columns, which folds outcome words and names mid-word).
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import rich
from rich.console import Console, RenderableType
from rich.table import Table

__all__ = [
    "fit_table",
    "print_renderable",
    "stdout_is_live",
]

#: Columns of command output that is not a terminal when ``COLUMNS`` is unset.
LOG_WIDTH = 200


def _log_width(console: Console) -> int | None:
    """:data:`LOG_WIDTH` for a console that is not a terminal without ``COLUMNS``, else None."""
    if console.is_terminal or console.is_jupyter or os.environ.get("COLUMNS", "").isdigit():
        return None
    return LOG_WIDTH


def make_console(**kwargs: Any) -> Console:
    """A Rich console for a command's output: the terminal's width, else ``COLUMNS``, else
    :data:`LOG_WIDTH`; ``kwargs`` go to :class:`rich.console.Console`."""
    console = Console(**kwargs)
    width = _log_width(console)
    return console if width is None else Console(width=width, **kwargs)


def widen_for_logs() -> None:
    """Apply :func:`make_console`'s width to Rich's global console (progress bars, the model
    summary, :func:`print_renderable`); call once at a command's start."""
    console = rich.get_console()
    width = _log_width(console)
    if width is not None:
        rich.reconfigure(width=width, stderr=console.stderr)


def print_renderable(obj: RenderableType, **kwargs: Any) -> None:
    """Print ``obj`` (a Rich renderable or a string) above a live progress bar, or plainly when
    there is none; ``kwargs`` go to :meth:`rich.console.Console.print` (e.g. ``markup=False``)."""
    rich.get_console().print(obj, **kwargs)


def stdout_is_live(console: Console | None = None) -> bool:
    """Whether a live (redrawn in place) progress display can be seen: a terminal (Rich honours
    ``FORCE_TERMINAL`` / ``TTY_COMPATIBLE``) or a Jupyter notebook."""
    con = console or rich.get_console()
    return bool(con.is_terminal or con.is_jupyter)


def fit_table(
    build: Callable[[frozenset[str]], Table], drop_order: Sequence[str], width: int
) -> Table:
    """The table ``build(dropped)`` makes, dropping the optional columns of ``drop_order`` (in
    that order, one at a time) until its narrowest rendering fits ``width`` characters.

    ``build`` gets the names dropped so far and returns a fresh table. Its columns decide their
    narrowest width: ``no_wrap`` numbers keep their widest cell, text columns that may wrap
    (``overflow="fold"``) say how narrow they may go with ``min_width``. Rich squeezes a table
    that does not fit, down to columns of zero width; dropping columns first keeps every cell
    readable, the remaining ones whole."""
    dropped: set[str] = set()
    table = build(frozenset())
    for name in drop_order:
        if _min_width(table) <= width:
            break
        dropped.add(name)
        table = build(frozenset(dropped))
    return table


def _min_width(table: Table) -> int:
    """Narrowest width at which ``table`` shows every cell: ``no_wrap`` columns at their widest
    cell, ``fold`` columns (which break words) at their ``min_width``, other text at its longest
    word; plus padding and borders. (Rich's own measurement ignores ``no_wrap``.)"""
    probe = Console(width=10_000, file=io.StringIO(), color_system=None)
    _, right, _, left = table.padding
    total = table._extra_width  # edges and separators: the one figure Rich does not expose
    for column in table.columns:
        cells = [column.header, *column.cells]
        if column.no_wrap:
            need = max(probe.measure(c).maximum for c in cells)
        elif column.overflow == "fold" and column.min_width:
            need = column.min_width
        else:
            need = max(probe.measure(c).minimum for c in cells)
        total += max(need, column.min_width or 0) + left + right
    return total


def write_json(path: Path, obj: Any) -> None:
    """A command's ``--json OUT``: ``obj`` as indented strict JSON into ``OUT``, or onto stdout
    for ``-`` (the command then prints its tables to stderr)."""
    text = json.dumps(obj, indent=2, allow_nan=False, default=str)
    if str(path) == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
