"""The recorder's part of the run directory.

``perf/run.json``, ``perf/epochs.jsonl``, ``perf/intervals.jsonl`` and ``perf/lifecycle.jsonl``
(records in ``trainperf.records``), and the :class:`Interruption` a lifecycle's end records (telling
an interruption from a failure is the adapter's: ``trainperf.lightning.interruption``)."""

from __future__ import annotations

import os
import signal
import socket
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from trainperf.core.stage import Stage
from trainperf.errors import PerfCallbackWarning
from trainperf.recording.subscribers import IntervalProgress, per_second
from trainperf.records.epochs import EpochRecord, IntervalRecord
from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import LifecycleRecord
from trainperf.records.run_info import write_run_info
from trainperf.records.schema import JsonValue


@dataclass(frozen=True)
class Interruption:
    """A run stopped by a signal: ``signal`` (``SIGTERM``, ``SIGINT``), the ``epoch`` it was in
    and the training ``batch`` count of that epoch processed so far (resuming starts after it);
    ``safe``: it stopped at the end of a batch (Lightning's SIGTERM path, a first SIGINT with
    :class:`InterruptCheckpoint`), not inside one (a ``KeyboardInterrupt``);
    ``between_epochs``: epoch ``epoch - 1`` had ended (its end hooks ran) and ``epoch`` had not
    started."""

    signal: str
    epoch: int
    batch: int
    safe: bool
    between_epochs: bool = False

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number."""
        return 128 + int(signal.Signals[self.signal])


#: Seconds between two writes of pending interval records while an epoch runs.
LIVE_WRITE_S = 10.0


def epoch_record(report: EpochRecord, t: float) -> EpochRecord:
    """``report`` as written at unix time ``t``, with the global rates (samples and batches of
    all ranks over the slowest rank's wall time; NaN -> null)."""
    return msgspec.structs.replace(
        report,
        t=t,
        samples_per_sec=per_second(report.global_samples, report.all_wall_s),
        batches_per_sec=per_second(report.global_batches, report.all_wall_s),
    )


class RunFiles:
    """Writes ``perf/run.json``, ``perf/epochs.jsonl`` and ``perf/intervals.jsonl`` (rank zero
    only). The first write error is one warning and turns the writing off; measurement and
    logging go on."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.epochs = RecordWriter(EpochRecord.path(self.run_dir))
        self.intervals = RecordWriter(IntervalRecord.path(self.run_dir))
        # Interval records wait here and are written at most every LIVE_WRITE_S (and when the
        # epoch closes): a write + flush every few steps would land on the training hot path;
        # one line every 10 s keeps `trainperf watch` and the live view current.
        self._pending_intervals: list[tuple[float, IntervalProgress]] = []
        self._last_write = time.monotonic()
        self.ok = True

    def _guard(self, write: Callable[[], object]) -> None:
        if not self.ok:
            return
        try:
            write()
        except (OSError, TypeError, ValueError) as exc:
            self.ok = False
            warnings.warn(
                f"performance callbacks: cannot write the run files under {self.run_dir} "
                f"({type(exc).__name__}: {exc}); metrics are still logged",
                PerfCallbackWarning,
                stacklevel=3,
            )

    def run_info(self, extra: Mapping[str, JsonValue]) -> None:
        self._guard(lambda: write_run_info(self.run_dir, extra))

    def epoch(self, report: EpochRecord) -> None:
        self.flush_intervals()
        self._guard(lambda: self.epochs.write(epoch_record(report, time.time())))

    def interval(self, progress: IntervalProgress) -> None:
        if self.ok:
            self._pending_intervals.append((time.time(), progress))
            if time.monotonic() - self._last_write >= LIVE_WRITE_S:
                self.flush_intervals()

    def flush_intervals(self) -> None:
        pending, self._pending_intervals = self._pending_intervals, []
        self._last_write = time.monotonic()
        for t, progress in pending:
            record = IntervalRecord(
                t=t,
                **{**progress._asdict(), "stage": Stage(progress.stage)},
                samples_per_sec=per_second(progress.samples, progress.elapsed_s),
            )
            self._guard(lambda r=record: self.intervals.write(r))  # type: ignore[misc]

    def close(self) -> None:
        self.flush_intervals()
        self.epochs.close()
        self.intervals.close()


class Lifecycle:
    """This rank's start and end of a Trainer run in ``perf/lifecycle.jsonl`` (every rank
    writes its own lines; ``trainperf watch`` follows the run until each rank's end). The first
    write error is one warning and turns it off."""

    def __init__(self, run_dir: Path, run: str, rank: int, world_size: int) -> None:
        self._writer: RecordWriter | None = RecordWriter(LifecycleRecord.path(run_dir))
        self._fields = {
            "run": run,
            "rank": rank,
            "world_size": world_size,
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
        }
        self._write("start", None)

    def _write(self, event: str, status: str | None, **extra: JsonValue) -> None:
        writer = self._writer
        if writer is None:
            return
        try:
            writer.write(
                msgspec.convert(
                    {"t": time.time(), "event": event, "status": status, **self._fields, **extra},
                    LifecycleRecord,
                )
            )
        except OSError as exc:
            self._writer = None
            warnings.warn(
                f"performance callbacks: cannot write {writer.path} ({exc}); the run goes on",
                PerfCallbackWarning,
                stacklevel=3,
            )

    def end(self, status: str, interruption: Interruption | None = None) -> None:
        """Write the end once (``finished``, ``failed`` or ``interrupted``, with the signal,
        epoch and batch of ``interruption``) and close."""
        if interruption is None:
            self._write("end", status)
        else:
            where = {"epoch": interruption.epoch, "batch": interruption.batch}
            self._write("end", "interrupted", signal=interruption.signal, **where)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
