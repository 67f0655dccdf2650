"""The recorder's part of the run directory: ``perf/run.json``, ``perf/epochs.jsonl`` and
``perf/intervals.jsonl`` (format in ``ocr.perf.rundir``)."""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ocr.lightning_modules.callbacks.epoch_report import EpochReport, IntervalProgress, per_second
from ocr.lightning_modules.callbacks.errors import PerfCallbackWarning
from ocr.perf.rundir import PERF_DIRNAME, JsonlWriter, write_run_info

__all__ = ["EPOCH_SCHEMA", "INTERVAL_SCHEMA", "RunFiles"]

EPOCH_SCHEMA = "receipt-ocr/perf-epoch"
INTERVAL_SCHEMA = "receipt-ocr/perf-interval"


class RunFiles:
    """Writes the recorder's part of the run directory (``ocr.perf.rundir``): ``perf/run.json``
    at setup, one ``perf/epochs.jsonl`` line per stage epoch and ``perf/intervals.jsonl`` lines
    at the training log interval; rank zero only. The first write error is one warning and turns
    the writing off; measurement and logging go on.

    Args:
        run_dir: the run directory (``trainer.default_root_dir``).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        perf = self.run_dir / PERF_DIRNAME
        self.epochs = JsonlWriter(perf / "epochs.jsonl", EPOCH_SCHEMA)
        self.intervals = JsonlWriter(perf / "intervals.jsonl", INTERVAL_SCHEMA)
        # Interval records wait here until the epoch closes: a write + flush every few steps
        # would land on the training hot path.
        self._pending_intervals: list[dict[str, Any]] = []
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

    def run_info(self, extra: Mapping[str, Any]) -> None:
        self._guard(lambda: write_run_info(self.run_dir, extra))

    def epoch(self, report: EpochReport) -> None:
        record = dataclasses.asdict(report)
        record["t"] = time.time()
        # nan is written as null.
        record["samples_per_sec"] = per_second(report.global_samples, report.global_wall_s)
        record["batches_per_sec"] = per_second(report.global_batches, report.global_wall_s)
        self.flush_intervals()
        self._guard(lambda: self.epochs.write(record))

    def interval(self, progress: IntervalProgress) -> None:
        if self.ok:
            self._pending_intervals.append({"t": time.time(), **progress._asdict()})

    def flush_intervals(self) -> None:
        pending, self._pending_intervals = self._pending_intervals, []
        for record in pending:
            self._guard(lambda r=record: self.intervals.write(r))  # type: ignore[misc]

    def close(self) -> None:
        self.flush_intervals()
        self.epochs.close()
        self.intervals.close()
