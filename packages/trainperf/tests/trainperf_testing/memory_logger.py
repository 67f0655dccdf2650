"""A Lightning logger that keeps every ``log_metrics`` call in memory (shared by the
callback tests)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import Logger


class MemoryLogger(Logger):
    """Keeps every ``log_metrics`` call in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[dict[str, float], int | None]] = []

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> str:
        return "0"

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append((dict(metrics), step))

    def metric_names(self) -> set[str]:
        return {k for metrics, _ in self.calls for k in metrics}

    def epochs(self, stage: str) -> list[dict[str, float]]:
        """The epoch-end rows of the performance profiler for ``stage``, in order."""
        return [m for m, _ in self.calls if f"performance/{stage}_epoch_time" in m]

    def throughput(self, stage: str) -> list[dict[str, float]]:
        """The epoch-end rows of the throughput monitor for ``stage``, in order."""
        return [m for m, _ in self.calls if f"throughput/{stage}_data_wait_share" in m]
