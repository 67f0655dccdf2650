"""What the recorder hands to its subscribers, and the protocol they implement.

The :class:`Subscriber` protocol a monitor implements, each open epoch's :class:`IntervalProgress`
besides its ``EpochRecord``, and :func:`per_second`, the rate every subscriber derives from them
(framework-neutral; the Lightning loggers' part is ``trainperf.lightning.loggers``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple, Protocol

from trainperf.core.stage import Stage
from trainperf.records.epochs import EpochRecord


def per_second(count: float, seconds: float) -> float:
    """``count / seconds``; nan for an empty (zero-length) window."""
    return count / seconds if seconds > 0 else math.nan


class IntervalProgress(NamedTuple):
    """Progress of an open training epoch (this rank's), every ``gcd`` of the subscribers'
    ``log_interval`` batches. A NamedTuple: it is built on the training hot path, where a frozen
    dataclass's ``__init__`` costs several times more.

    Args:
        elapsed_s: window time so far (seconds, pauses excluded).
        step: ``trainer.global_step`` when it was taken (the step to log at).
        phases_s: the epoch's seconds per phase so far.
    """

    stage: str
    epoch: int
    num_batches: int
    samples: int
    elapsed_s: float
    world_size: int
    step: int
    phases_s: dict[str, float] = {}  # noqa: RUF012 - a NamedTuple default, never mutated


class Subscriber(Protocol):
    """A monitor subscribed to the recorder (``RecorderCallback``, the resource monitor's feed)."""

    stages: frozenset[Stage]
    log_interval: int
    track_memory: bool
    sync_cuda: bool
    write_run_files: bool

    def _receive_report(self, report: EpochRecord) -> None: ...

    def _receive_interval(self, progress: IntervalProgress) -> Mapping[str, float] | None: ...

    def _recorder_off(self) -> None: ...
