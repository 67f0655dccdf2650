"""Where the Lightning recorder's figures go: run files, monitors, loggers.

Where the recorder's figures go: the run files (rank zero: ``perf/run.json``,
``perf/epochs.jsonl``, ``perf/intervals.jsonl``), this rank's lines in ``perf/lifecycle.jsonl``,
the subscribed monitors, and the loggers (one ``log_metrics`` call per interval for all of
them)."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L

from trainperf.core.clock import PhaseClock
from trainperf.lightning.framework_record import framework_entries
from trainperf.lightning.interruption import Interruption
from trainperf.lightning.loggers import log_to_loggers
from trainperf.lightning.trial_fit import perf_root
from trainperf.recording.run_files import Lifecycle, RunFiles
from trainperf.recording.stage_state import EpochWindow
from trainperf.recording.subscribers import IntervalProgress, Subscriber
from trainperf.records.epochs import EpochRecord
from trainperf.records.schema import JsonValue


class RecorderOutput:
    """The recorder's outputs (see the module docstring). Our own reporting time is charged to
    ``callbacks`` on the clock, under ``performance callbacks.run_files`` and each monitor's
    ``{Class}.epoch_report``."""

    def __init__(self) -> None:
        self.files: RunFiles | None = None  # rank zero, while a subscriber writes run files
        self._lifecycle: Lifecycle | None = None

    def open_files(self, trainer: L.Trainer, world_size: int) -> None:
        """Open the run files (rank zero only) and write what ``run.json`` knows of the run."""
        if not trainer.is_global_zero:
            return
        self.files = RunFiles(perf_root(trainer))  # a try trial's own folder inside a window
        device, precision = str(trainer.strategy.root_device), str(trainer.precision)
        facts: dict[str, JsonValue] = {
            "world_size": world_size,
            "device": device,
            "precision": precision,
        }
        self.files.run_info({**facts, **framework_entries(trainer)})

    def close_files(self) -> None:
        if self.files is not None:
            self.files.close()
            self.files = None

    def start_lifecycle(self, trainer: L.Trainer, world_size: int) -> None:
        """This rank's start line in ``perf/lifecycle.jsonl``."""
        fn = trainer.state.fn
        self._lifecycle = Lifecycle(
            perf_root(trainer),
            str(fn.value) if fn is not None else "fit",
            trainer.global_rank,
            world_size,
        )

    def end(self, status: str, interruption: Interruption | None = None) -> None:
        """This rank's end line (once) and the files closed (idempotent)."""
        lifecycle, self._lifecycle = self._lifecycle, None
        if lifecycle is not None:
            lifecycle.end(status, interruption)
        if self.files is not None:
            self.files.close()

    def interval(
        self,
        trainer: L.Trainer,
        window: EpochWindow,
        elapsed_ns: int,
        world_size: int,
        clock: PhaseClock,
        subscribers: Sequence[Subscriber],
    ) -> None:
        """The open training window's progress: to the run files and, merged over the
        subscribers, to the loggers in one call at the current step."""
        files = self.files
        progress = IntervalProgress(
            window.stage,
            window.epoch,
            window.num_batches,
            window.samples,
            elapsed_ns / 1e9,
            world_size,
            trainer.global_step,
            window.phases_s(clock) if files is not None else {},  # for the record
        )
        if files is not None:
            files.interval(progress)
        # One logger call for all subscribers: each log_metrics call formats and writes a row.
        merged: dict[str, float] = {}
        for sub in tuple(subscribers):
            metrics = sub._receive_interval(progress)
            if metrics:
                merged.update(metrics)
        if merged:
            log_to_loggers(trainer, merged, progress.step)

    def epoch(
        self, report: EpochRecord, subscribers: Sequence[Subscriber], clock: PhaseClock
    ) -> None:
        """A closed (and gathered) stage epoch: to the run files, then to each subscriber."""
        if self.files is not None:
            if clock.running:
                clock.switch("callbacks", "performance callbacks.run_files")
            self.files.epoch(report)
        for sub in list(subscribers):
            if clock.running:
                clock.switch("callbacks", f"{type(sub).__name__}.epoch_report")
            sub._receive_report(report)
