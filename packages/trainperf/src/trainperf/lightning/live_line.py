"""The live phase line in Lightning's progress bars.

The live phase line in the progress bars: ``forward 52% backward 41% data_wait 3% · 17.0
samples/s · compute-bound``, read from the performance monitors' recorder (its open window, the
phase clock so far, the last gathered epoch's straggler) and worded by
:mod:`trainperf.present.live`.

Nothing is measured for it: the recorder keeps these figures anyway. The line is composed only
when a bar is about to show it (a time check per batch); a run without a performance monitor
shows no line.

:class:`PhaseRichProgressBar` also reads the progress-bar metrics at most every
:data:`REFRESH_S` during training: Lightning's Rich bar reads them at every batch, which converts
each ``prog_bar=True`` tensor with ``.item()`` (Lightning issues 21232, 20995), a host-device sync
per step on a GPU.

:class:`PipedPhaseLine` writes the same split as one plain line at most every 30 s when the output
is not a terminal, whatever the progress bar (Rich, tqdm, none).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

from trainperf.core.stage import Stage
from trainperf.errors import PerfCallbackWarning
from trainperf.lightning.recorder import StageRecorder
from trainperf.present.live import live_line, live_verdict

#: Seconds between two updates of the line in the Rich bar.
REFRESH_S = 2.0

_failed = False


def live_text(trainer: L.Trainer, *, name_stage: bool = True) -> str:
    """The live line of ``trainer``'s open epoch, or ``""`` (a validation or test window's line
    starts with its stage unless ``name_stage`` is off). An error is one warning, then the line
    stays empty for the process: a progress bar never fails training."""
    global _failed
    recorder = StageRecorder.of(trainer)
    if recorder is None or _failed:
        return ""
    try:
        epoch = recorder.open_window()
        if epoch is None:
            return ""
        phases = epoch.phases_s(recorder.clock)
        straggler = recorder.straggler.rank if recorder.straggler is not None else None
        verdict = live_verdict(epoch.stage, phases, straggler)
        rate = epoch.samples_per_sec(time.perf_counter_ns())  # this rank's
        line = live_line(phases, rate, verdict, world_size=trainer.world_size)
        # a validation window's split names its stage: the Rich bar keeps a line up to
        # REFRESH_S, so it can still stand beside the next training epoch's bar
        if not line or not name_stage or epoch.stage == Stage.TRAIN:
            return line
        return f"{epoch.stage}: {line}"
    except Exception as exc:
        _failed = True
        warnings.warn(
            f"the progress bar's live phase line is off ({type(exc).__name__}: {exc})",
            PerfCallbackWarning,
            stacklevel=2,
        )
        return ""


class LiveLine:
    """The live line of a progress bar, composed at most every :data:`REFRESH_S` (while it is
    empty: at each call, so a short epoch shows it from its first batches; composing an empty line
    costs a lookup). Nothing is read from a device: the figures are the recorder's host clock.

    Args:
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.text = ""
        self._at = float("-inf")

    def add_to(self, items: dict[str, Any], trainer: L.Trainer) -> None:
        """Put the line into a progress bar's metrics ``items`` as ``phases``, when there is one."""
        now = self.clock()
        if not self.text or now - self._at >= REFRESH_S:
            self._at = now
            self.text = live_text(trainer)
        if self.text:
            items["phases"] = self.text


class PipedPhaseLine:
    """One plain line with the live phase split at most every ``interval_s`` while a run whose
    output is not a terminal (a batch job's log, a pipe) trains, validates or tests::

        [trainperf] epoch 3 train batch 120: forward 52% backward 41% data_wait 3% · 17.0 samples/s

    Rich draws nothing into a pipe until the run ends and tqdm's redrawn bar is hard to read in a
    log, so the split would otherwise show only at the end. The monitors call :meth:`tick` at
    each batch end (one clock read; the line is composed only when due, from the recorder's
    figures: nothing is read from a device). It is written through a tqdm bar's ``print`` while
    one is drawn (the bar is cleared, the line written, the bar redrawn), else to stdout.
    :func:`trainperf.lightning.progress_choice.piped_phase_line` decides when a run gets one. An
    error is one warning, then no more lines.

    Args:
        interval_s: seconds between two lines (> 0); the first comes ``interval_s`` after the
            start.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self.clock = clock
        self._last = clock()
        self._off = False

    def tick(self, trainer: L.Trainer, stage: str, batch_idx: int) -> None:
        """A batch of ``stage`` ended: write the line when one is due."""
        if self._off or self.clock() - self._last < self.interval_s:
            return
        try:
            if stage == "val" and trainer.sanity_checking:
                return
            split = live_text(trainer, name_stage=False)
            if not split:
                return  # nothing timed yet: the next batch tries again
            self._last = self.clock()
            line = f"[trainperf] epoch {trainer.current_epoch} {stage} batch {batch_idx + 1}"
            self._write(trainer, f"{line}: {split}")
        except Exception as exc:
            self._off = True
            warnings.warn(
                f"the piped phase line is off ({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=2,
            )

    @staticmethod
    def _write(trainer: L.Trainer, line: str) -> None:
        bar = trainer.progress_bar_callback
        if isinstance(bar, TQDMProgressBar) and bar.is_enabled:
            bar.print(line)  # tqdm.write on the drawn bar's stream
        else:
            print(line, flush=True)


class PhaseRichProgressBar(RichProgressBar):
    """Lightning's ``RichProgressBar`` (same arguments) showing the live phase line after the
    metrics, both updated every :data:`REFRESH_S` seconds during training (the batch counter at
    every batch, as Lightning's); at an epoch's end the metrics are read as Lightning reads them.

    Args:
        clock: keyword only, monotonic seconds; default :func:`time.monotonic` (tests pass a
            fake one). Every other argument is ``RichProgressBar``'s.
    """

    def __init__(
        self, *args: Any, clock: Callable[[], float] = time.monotonic, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.clock = clock
        self._line = LiveLine(lambda: self.clock())
        self._metrics_at = float("-inf")
        self._skip_metrics = False

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        now = self.clock()
        self._skip_metrics = now - self._metrics_at < REFRESH_S
        if not self._skip_metrics:
            self._metrics_at = now
        try:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        finally:
            self._skip_metrics = False

    def _update_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning's private step that reads get_metrics() (at every batch in its Rich bar)
        if not self._skip_metrics:
            super()._update_metrics(trainer, pl_module)

    def get_metrics(
        self, trainer: L.Trainer, pl_module: L.LightningModule
    ) -> dict[str, int | str | float | dict[str, float]]:
        items = super().get_metrics(trainer, pl_module)
        self._line.add_to(items, trainer)
        return items
