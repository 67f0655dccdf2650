"""The one place the callbacks interpose on Lightning and torch internals.

The one place where the performance callbacks interpose on Lightning and torch beyond their
public interfaces: worker-side DataLoader timing, and the live phase split in Lightning's own
progress bars (:func:`show_phase_split`, at the end).

Work done in DataLoader workers overlaps the training step, so no hook can see it; it is timed in
the worker and carried back with the batch (``trainperf.probe.worker.InstrumentedLoader``). The
loader must be instrumented before Lightning creates its first iterator, inside ``fit`` before any
callback hook runs (``_FitLoop.setup_data`` calls ``iter()`` right after
``strategy.process_dataloader(loader)``): so we wrap ``Strategy.process_dataloader`` on the
strategy instance for the run.

What we rely on in Lightning is pinned by ``tests/integration/test_interpose_seams.py`` and
accepted only in the tested Lightning range below. What we rely on in torch is checked at run time,
each private attribute or signature once (:mod:`trainperf.probe.loader_seams`), whatever torch's
version. Either way short, the callbacks warn once naming why and measure only what the public
action stream gives (no worker-side parts).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

import lightning as L
from lightning.fabric.utilities.data import _auto_add_worker_init_fn
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar
from packaging.version import Version
from torch.utils.data import DataLoader

from trainperf.core.clock import PhaseClock
from trainperf.probe import loader_seams
from trainperf.probe.worker import InstrumentedLoader, WorkerTiming

#: Package -> [lowest, first untested) release, tested with the seam tests: Lightning 2.6 here
#: and on an H200 (``docs/performance/gpu.md``, 2026-11-26). torch has no range: its seams are
#: checked at run time (:func:`worker_timing_off`).
TESTED_VERSIONS: dict[str, tuple[str, str]] = {
    "lightning": ("2.6.0", "2.7.0"),
}


def check_versions(versions: dict[str, str] | None = None) -> str | None:
    """None when Lightning is in :data:`TESTED_VERSIONS`, else why not (one line). ``versions``
    overrides the installed versions (tests)."""
    found = versions or {"lightning": L.__version__}
    for package, (low, high) in TESTED_VERSIONS.items():
        raw = found.get(package)
        if raw is None:
            continue
        version = Version(Version(raw).base_version)  # 2.6.0rc1 -> 2.6.0
        if not Version(low) <= version < Version(high):
            return (
                f"{package} {raw} is outside the range the DataLoader instrumentation was tested "
                f"with ({low} <= version < {high}); DataLoader worker timing (fetch, collate, "
                "parts) is off, phases, callbacks and hooks are still measured"
            )
    return None


def worker_timing_off() -> str | None:
    """None when DataLoader worker timing can be installed: Lightning in the tested range and
    every torch seam of :mod:`trainperf.probe.loader_seams` present (checked once per process);
    else why not, in one line naming what is missing."""
    reason = check_versions()
    if reason is not None:
        return reason
    missing = loader_seams.missing()
    return loader_seams.describe(missing) if missing else None


def syncs_before_train_batch(world_size: int) -> bool:
    """Whether the gap between a training batch's last hook and the next batch's data fetch is
    a wait for the other ranks: Lightning 2.6 broadcasts a SIGTERM flag from rank 0 at the start
    of every training batch under DDP (no profiler action around it), so a rank that is ahead
    blocks there. Assumed only in the tested range."""
    return world_size > 1 and check_versions() is None


class LoaderInterposer:
    """Instrument each DataLoader the trainer's strategy processes (until :meth:`restore`),
    before Lightning iterates it.

    Args:
        route: called with the processed loader; returns ``(on_batch, clock)`` to instrument it
            (worker timings go to ``on_batch``; worker start-up is ``data_wait`` on ``clock``),
            or None to leave it alone.
        on_error: called with any exception of the instrumentation (the loader is then served
            as it is).
    """

    def __init__(
        self,
        trainer: L.Trainer,
        route: Callable[[DataLoader], tuple[Callable[[WorkerTiming], None], PhaseClock] | None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self._trainer = trainer
        self._route = route
        self._on_error = on_error
        self._handles: dict[int, InstrumentedLoader] = {}
        strategy = trainer.strategy
        original = strategy.process_dataloader

        def process_dataloader(dataloader: object) -> object:
            out = original(dataloader)
            try:
                self._instrument(out)
            except Exception as exc:
                on_error(exc)
            return out

        strategy.process_dataloader = process_dataloader  # type: ignore[method-assign]
        self._strategy: Any = strategy
        self._wrapper = process_dataloader

    def _instrument(self, loader: object) -> None:
        if not isinstance(loader, DataLoader) or id(loader) in self._handles:
            return
        routed = self._route(loader)
        if routed is None:
            return
        on_batch, clock = routed
        # Lightning adds its worker-seeding init function only to loaders that have none, right
        # after this call; add it first so the instrumentation chains it instead of hiding it.
        _auto_add_worker_init_fn(loader, self._trainer.global_rank)
        self._handles[id(loader)] = InstrumentedLoader(
            loader, on_batch, clock, on_error=self._on_error
        )

    def restore(self) -> None:
        """Undo everything (idempotent): the loaders' instrumentation and the strategy wrapper."""
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            handle.restore()
        strategy, self._strategy = self._strategy, None
        if strategy is not None and vars(strategy).get("process_dataloader") is self._wrapper:
            del strategy.process_dataloader


# -- the live phase split in Lightning's own progress bars --------------------------------------
#
# A plain script that keeps Lightning's ``RichProgressBar`` (its default when ``rich`` is
# installed) or ``TQDMProgressBar`` gets the live line through the documented override point of
# every Lightning progress bar, ``ProgressBar.get_metrics(trainer, pl_module)``: at setup, a
# performance monitor wraps that bound method *on the bar instance* so that its result carries
# ``phases`` (a :class:`~trainperf.lightning.live_line.LiveLine`: worded by
# :mod:`trainperf.present.live`, from the recorder's host clock, recomposed at most every
# ``REFRESH_S``). The bar calls it exactly as often as before and Lightning reads exactly the
# metrics it read before: the wrapper adds one clock read and a dict entry per call, no device
# read. Only Lightning's own two classes are touched (the exact class: a subclass of the user's
# own is left as it is), only in the tested Lightning range (outside it no line and no warning),
# once per bar instance. Piped output: tqdm writes each refresh, so the line appears in every
# update; Rich draws nothing live into a pipe and prints the bar's last state when the run ends,
# with the line in it (for a line every ``interval_s`` in a log, use ``PlainProgressBar``).

#: The bar classes whose ``get_metrics`` is wrapped (exactly these, not their subclasses).
LIGHTNING_BARS: tuple[type[ProgressBar], ...] = (TQDMProgressBar, RichProgressBar)


class BarLine(Protocol):
    """What the wrapped ``get_metrics`` adds its line with (``LiveLine``)."""

    def add_to(self, items: dict[str, Any], trainer: L.Trainer) -> None: ...


def seam_ok(version: str | None = None) -> bool:
    """Whether ``get_metrics`` may be wrapped: Lightning (``version``, default the installed one)
    in :data:`TESTED_VERSIONS`, and ``ProgressBar.get_metrics`` taking ``(trainer, pl_module)``."""
    if check_versions({"lightning": version or L.__version__}) is not None:
        return False
    params = list(inspect.signature(ProgressBar.get_metrics).parameters)
    return params == ["self", "trainer", "pl_module"]


class _WithPhases:
    """``bar.get_metrics`` plus the live line; ``original`` is the bar's own bound
    ``get_metrics``, called once per call."""

    def __init__(
        self, original: Callable[[L.Trainer, L.LightningModule], dict[str, Any]], line: BarLine
    ) -> None:
        self.original = original
        self.line = line

    def __call__(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        items = self.original(trainer, pl_module)
        self.line.add_to(items, trainer)
        return items


def show_phase_split(trainer: L.Trainer, line: Callable[[], BarLine]) -> bool:
    """Make ``trainer``'s progress bar show the live line (a new ``line()``) when it is
    Lightning's own; whether the bar shows it now (``False``: no bar, a bar of another class, or
    a Lightning outside the tested range)."""
    bar = getattr(trainer, "progress_bar_callback", None)
    if bar is None or type(bar) not in LIGHTNING_BARS:
        return False
    if isinstance(vars(bar).get("get_metrics"), _WithPhases):
        return True  # another monitor of this trainer already did
    if not seam_ok():
        return False
    bar.get_metrics = _WithPhases(bar.get_metrics, line())
    return True
