"""The live phase split in Lightning's own progress bars, for a plain script that keeps them.

Our bars (:class:`~trainperf.lightning.PhaseRichProgressBar`,
:class:`~trainperf.lightning.PlainProgressBar`) show the live line themselves. A script that
keeps Lightning's ``RichProgressBar`` (its default when ``rich`` is installed) or
``TQDMProgressBar`` gets the same line through the documented override point of every Lightning
progress bar, ``ProgressBar.get_metrics(trainer, pl_module)``: at setup, a performance monitor
wraps that bound method *on the bar instance* (this module is the one place that does it) so
that its result carries ``phases`` (:class:`~trainperf.lightning.live_line.LiveLine`: worded by
:mod:`trainperf.present.live`, from the recorder's host clock, recomposed at most every
``REFRESH_S``). The bar calls it exactly as often as before and Lightning reads exactly the
metrics it read before: the wrapper adds one clock read and a dict entry per call, no device read.

Only Lightning's own two classes are touched (the exact class: a subclass of the user's own is
left as it is), only in the tested Lightning range (``interpose.TESTED_VERSIONS``; outside it no
line and no warning: the bar is unchanged), once per bar instance.

Piped output (not a terminal): tqdm writes each refresh, so the line appears in every update;
Rich draws nothing live into a pipe and prints the bar's last state when the run ends, with the
line in it. For a line every ``interval_s`` in a log, use ``PlainProgressBar``
(``trainperf.lightning.progress_choice.plain_progress_when_not_a_terminal`` does for the app).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar
from packaging.version import Version

from trainperf.lightning.interpose import TESTED_VERSIONS
from trainperf.lightning.live_line import LiveLine

#: The bar classes whose ``get_metrics`` is wrapped (exactly these, not their subclasses).
LIGHTNING_BARS: tuple[type[ProgressBar], ...] = (TQDMProgressBar, RichProgressBar)


def seam_ok(version: str | None = None) -> bool:
    """Whether ``get_metrics`` may be wrapped: Lightning (``version``, default the installed one)
    in the tested range, and ``ProgressBar.get_metrics`` taking ``(trainer, pl_module)``."""
    low, high = TESTED_VERSIONS["lightning"]
    found = Version(Version(version or L.__version__).base_version)
    if not Version(low) <= found < Version(high):
        return False
    params = list(inspect.signature(ProgressBar.get_metrics).parameters)
    return params == ["self", "trainer", "pl_module"]


class _WithPhases:
    """``bar.get_metrics`` plus the live line (module doc); ``original`` is the bar's own bound
    ``get_metrics``, called once per call."""

    def __init__(self, original: Callable[[L.Trainer, L.LightningModule], dict[str, Any]]) -> None:
        self.original = original
        self.line = LiveLine()

    def __call__(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        items = self.original(trainer, pl_module)
        self.line.add_to(items, trainer)
        return items


def show_phase_split(trainer: L.Trainer) -> bool:
    """Make ``trainer``'s progress bar show the live line when it is Lightning's own (module
    doc); whether the bar shows it now (``False``: no bar, a bar of another class, or a Lightning
    outside the tested range)."""
    bar = getattr(trainer, "progress_bar_callback", None)
    if bar is None or type(bar) not in LIGHTNING_BARS:
        return False
    if isinstance(vars(bar).get("get_metrics"), _WithPhases):
        return True  # another monitor of this trainer already did
    if not seam_ok():
        return False
    bar.get_metrics = _WithPhases(bar.get_metrics)
    return True
