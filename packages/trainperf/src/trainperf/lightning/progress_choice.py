"""Which progress bar a run gets: a live bar on a terminal, plain lines elsewhere.

:func:`plain_progress_when_not_a_terminal` swaps Lightning's Rich or tqdm bar for a
:class:`~trainperf.lightning.plain_progress.PlainProgressBar` when stdout is not a terminal (a log
file, a pipe), where a live bar prints nothing until the run ends (``ocr-train`` does).

A plain script keeps the bar it chose; its performance monitors then write the phase split as
one plain line at most every :data:`PIPED_LINE_INTERVAL_S` when stdout is not a terminal,
whatever the bar (:func:`piped_phase_line`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar

from trainperf.lightning.live_line import PhaseRichProgressBar, PipedPhaseLine
from trainperf.lightning.plain_progress import PlainProgressBar
from trainperf.present.console import stdout_is_live

__all__ = [
    "PIPED_LINE_INTERVAL_S",
    "PLAIN_PROGRESS_INTERVAL_S",
    "piped_phase_line",
    "plain_progress_when_not_a_terminal",
]

#: Seconds between two plain progress lines.
PLAIN_PROGRESS_INTERVAL_S = 30.0
#: Seconds between two plain phase lines of a run whose output is not a terminal.
PIPED_LINE_INTERVAL_S = 30.0
#: The clock of those lines (monotonic seconds; tests put a fake one here).
PIPED_LINE_CLOCK: Callable[[], float] = time.monotonic

#: One piped line per trainer, shared by its monitors (the first one's setup makes it).
_piped: weakref.WeakKeyDictionary[L.Trainer, PipedPhaseLine | None] = weakref.WeakKeyDictionary()


def piped_phase_line(trainer: L.Trainer, live: bool | None = None) -> PipedPhaseLine | None:
    """The :class:`PipedPhaseLine` of ``trainer`` (on rank zero) when stdout is not live
    (``live=None``: :func:`stdout_is_live`) and its progress bar does not print the split itself
    (a :class:`PlainProgressBar` does, every ``interval_s``); else ``None``. The monitors of a
    trainer share one (made when the first asks), so a run writes one line per interval."""
    if trainer not in _piped:
        shown = stdout_is_live() if live is None else live
        plain = isinstance(trainer.progress_bar_callback, PlainProgressBar)
        quiet = shown or plain or not trainer.is_global_zero  # rank zero writes, as the bars do
        made = None if quiet else PipedPhaseLine(PIPED_LINE_INTERVAL_S, PIPED_LINE_CLOCK)
        _piped[trainer] = made
    return _piped[trainer]


def plain_progress_when_not_a_terminal(
    callbacks: list[Any], live: bool | None = None, add_if_missing: bool = True
) -> list[Any]:
    """``callbacks`` with Lightning's Rich or tqdm progress bar replaced by a ``PlainProgressBar``
    when stdout is not live (``live=None``: :func:`stdout_is_live`); with ``add_if_missing``, one
    is added when the list has no progress bar (Lightning would add its tqdm bar). A progress bar
    class of the user's own (a subclass) is kept as it is."""

    if stdout_is_live() if live is None else live:
        return callbacks
    out = [
        PlainProgressBar(PLAIN_PROGRESS_INTERVAL_S)
        if type(c) in (RichProgressBar, PhaseRichProgressBar, TQDMProgressBar)
        else c
        for c in callbacks
    ]
    if add_if_missing and not any(isinstance(c, ProgressBar) for c in out):
        out.append(PlainProgressBar(PLAIN_PROGRESS_INTERVAL_S))
    return out
