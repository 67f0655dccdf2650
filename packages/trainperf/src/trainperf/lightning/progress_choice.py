"""Which progress bar a run gets: a live bar on a terminal, plain lines elsewhere.

:func:`plain_progress_when_not_a_terminal` swaps Lightning's Rich or tqdm bar for a
:class:`~trainperf.lightning.plain_progress.PlainProgressBar` when stdout is not a terminal (a log
file, a pipe), where a live bar prints nothing until the run ends.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar

from trainperf.lightning.live_line import PhaseRichProgressBar
from trainperf.lightning.plain_progress import PlainProgressBar
from trainperf.present.console import stdout_is_live

__all__ = ["PLAIN_PROGRESS_INTERVAL_S", "plain_progress_when_not_a_terminal"]

#: Seconds between two plain progress lines.
PLAIN_PROGRESS_INTERVAL_S = 30.0


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
