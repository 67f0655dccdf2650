"""Where alert events go: the log, ``perf/alerts.jsonl`` and ``wandb.alert``.

A sink that raises is turned off by the engine with one :class:`AlertWarning`; the others go on.
"""

from __future__ import annotations

import logging
import os
import sys

from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import AlertEvent


class AlertWarning(UserWarning):
    """An alert sink failed and is off for the run."""


class AlertSink:
    """Receives alert events."""

    name = "sink"

    def emit(self, event: AlertEvent) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (idempotent)."""


class LogSink(AlertSink):
    """Events as log records on ``logger`` (default ``trainperf.alerts``): critical firings at
    ERROR, other events at WARNING (so they show on the console without logging set up)."""

    name = "log"

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("trainperf.alerts")

    def emit(self, event: AlertEvent) -> None:
        critical = event.event == "fired" and event.severity == "critical"
        level = logging.ERROR if critical else logging.WARNING
        text = f"[alert {event.rule} {event.event}] {event.message}"
        if event.event == "fired" and event.suggestion:
            text += f" Suggestion: {event.suggestion}"
        self.logger.log(level, "%s (rank %d, step %d)", text, event.rank, event.step)


class JsonlSink(AlertSink):
    """Events as ``trainperf/alert`` lines in ``path`` (``<run>/perf/alerts.jsonl``)."""

    name = "jsonl"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.writer = RecordWriter(path)

    def emit(self, event: AlertEvent) -> None:
        self.writer.write(event)

    def close(self) -> None:
        self.writer.close()


class WandbSink(AlertSink):
    """``wandb.alert`` for each event when wandb is imported and a run is active (offline runs
    record it locally); otherwise nothing. Never imports wandb itself."""

    name = "wandb"

    def emit(self, event: AlertEvent) -> None:
        wandb = sys.modules.get("wandb")
        run = getattr(wandb, "run", None) if wandb is not None else None
        if run is None:
            return
        level = None
        if (levels := getattr(wandb, "AlertLevel", None)) is not None:
            name = "ERROR" if event.severity == "critical" else "WARN"
            level = getattr(levels, "INFO" if event.event == "resolved" else name)
        text = event.message + (f"\n{event.suggestion}" if event.event == "fired" else "")
        run.alert(title=f"{event.rule} {event.event}", text=text, level=level, wait_duration=0)
