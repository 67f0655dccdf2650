"""What the performance monitors add at their defaults: epoch scan, live line.

What the performance monitors give a plain script at their defaults, beyond their own figures:
the epoch scan (memory creep named by attribute, ``torch.compile`` recompiles) run from their own
hooks, and the live phase split in Lightning's own progress bar (and, when stdout is not a
terminal, as one plain line every 30 s whatever the bar).

Both cost nothing per step. The scan runs at training epoch ends only (and at setup, teardown and
the start of training); it installs no per-batch hook unless asked to count batch shapes. The
progress bar's line is composed when the bar reads its metrics anyway
(:func:`trainperf.lightning.interpose.show_phase_split`).

One scan per trainer, however the scan was asked for: an :class:`EpochScanCallback` attached as a
callback of its own runs and every monitor's nested scan steps aside; otherwise the first monitor
(in ``trainer.callbacks`` order) that was given a scan explicitly runs it, else the first monitor
with its default scan. So ``[PerformanceProfilerCallback(), ThroughputMonitorCallback(),
EpochScanCallback()]`` writes one ``growth.jsonl`` line per epoch, from the standalone scan.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import lightning as L

from trainperf.errors import ConfigError
from trainperf.lightning.epoch_scan import EpochScanCallback
from trainperf.lightning.interpose import show_phase_split
from trainperf.lightning.live_line import LiveLine
from trainperf.lightning.progress_choice import piped_phase_line
from trainperf.lightning.recorder_callback import RecorderCallback

#: Hooks forwarded to a nested scan whatever its settings (its own setup and teardown).
_LIFECYCLE = ("setup", "teardown")


def nested_scan(
    owner: str, epoch_scan: object, enabled: bool, write_run_files: bool = True
) -> tuple[EpochScanCallback | None, bool]:
    """The scan a monitor runs from its hooks and whether it is the default one: ``True`` (the
    default) is an ``EpochScanCallback()`` with its defaults while the monitor is ``enabled``
    (a disabled monitor does no work, so no default scan either), writing its run files when
    the monitor does; ``False`` or ``None`` none; an ``EpochScanCallback`` that one (it runs
    even when the monitor is disabled)."""
    if epoch_scan is True:
        scan = EpochScanCallback(write_run_files=write_run_files) if enabled else None
        return scan, True
    if epoch_scan is None or epoch_scan is False:
        return None, False
    if isinstance(epoch_scan, EpochScanCallback):
        return epoch_scan, False
    raise ConfigError(
        f"{owner}: epoch_scan must be an EpochScanCallback, True (the default scan) or None, "
        f"got {type(epoch_scan).__name__}"
    )


def scan_runner(trainer: L.Trainer) -> L.Callback | None:
    """The one callback of ``trainer`` whose scan runs (module doc): a standalone
    ``EpochScanCallback``, else the first monitor given a scan explicitly, else the first with
    its default scan; ``None`` when there is no scan."""
    callbacks = list(trainer.callbacks)  # type: ignore[attr-defined]
    for callback in callbacks:
        if isinstance(callback, EpochScanCallback):
            return callback
    hosts = [c for c in callbacks if isinstance(c, MonitorDefaults) and c.epoch_scan is not None]
    explicit = [c for c in hosts if not c._scan_is_default]
    first = explicit or hosts
    return first[0] if first else None


class MonitorDefaults(RecorderCallback):
    """Base of :class:`~trainperf.lightning.PerformanceProfilerCallback` and
    :class:`~trainperf.lightning.ThroughputMonitorCallback`: the nested epoch scan and the phase
    split in Lightning's own progress bar (module doc).

    Args:
        epoch_scan: keyword only; see :func:`nested_scan`. The scan's hooks run right after this
            callback's own part of each hook, as a callback listed just after this one would,
            each inside its own action ``[Callback]EpochScanCallback.<hook>`` (the clock names
            its time after the scan, not after this callback).
        **kwargs: :class:`~trainperf.lightning.recorder_callback.RecorderCallback`'s.
    """

    def __init__(self, *, epoch_scan: object = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.epoch_scan, self._scan_is_default = nested_scan(
            type(self).__name__, epoch_scan, self.enabled, self.write_run_files
        )
        self._scan_runs = False  # this run: the trainer's one scan is this callback's
        self._scan_hooks = self._nest(self.epoch_scan)

    def _nest(self, scan: EpochScanCallback | None) -> dict[str, str]:
        """Install on this instance the hooks that run ``scan``'s (only those an enabled scan
        uses: the others stay inherited no-ops, which the clock leaves out); hook -> the action
        name the scan's hook runs under. ``setup`` and ``teardown`` forward themselves."""
        if scan is None:
            return {}
        hooks = list(_LIFECYCLE)
        if scan.enabled:
            # on_train_epoch_end runs inside the training epoch's window, like a separate scan's:
            # the recorder closes that window only at the next epoch's start or training's end.
            installed = ["on_train_start", "on_train_epoch_end"]
            if scan.batch_shapes:  # the scan's one per-step hook, only when it has one
                installed.append("on_train_batch_start")
            for hook in installed:
                setattr(self, hook, partial(self._run_scan, hook))
            hooks += installed
        return {hook: f"[Callback]{scan.state_key}.{hook}" for hook in hooks}

    def _untimed_hook(self, hook: str) -> bool:
        # The scan's hooks time themselves under the scan's own action; this callback's hook
        # around one only forwards it (setup and teardown are this callback's own work too).
        return (hook in self._scan_hooks and hook not in _LIFECYCLE) or super()._untimed_hook(hook)

    def _run_scan(self, hook: str, trainer: L.Trainer, *args: Any) -> None:
        """The nested scan's ``hook``, inside its own action of ``trainer.profiler``, when this
        callback runs the trainer's scan."""
        scan = self.epoch_scan
        if scan is not None and self._scan_runs:
            with trainer.profiler.profile(self._scan_hooks[hook]):  # type: ignore[attr-defined]
                getattr(scan, hook)(trainer, *args)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self._enabled_run:
            show_phase_split(trainer, LiveLine)
            self._piped = piped_phase_line(trainer)  # output not a terminal: a line every 30 s
        self._scan_runs = self.epoch_scan is not None and scan_runner(trainer) is self
        self._run_scan("setup", trainer, pl_module, stage)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().teardown(trainer, pl_module, stage)
        self._run_scan("teardown", trainer, pl_module, stage)
        self._scan_runs = False
