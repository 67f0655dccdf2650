"""What the recorder hands to its subscribers besides each epoch's ``EpochRecord``, and the small
helpers that present them (framework-neutral; the Lightning loggers' part is
``trainperf.lightning.loggers``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from trainperf.core.stage import Stage
from trainperf.errors import ConfigError
from trainperf.records.kinds import EpochRecord


def normalize_stages(stages: Iterable[str], owner: str) -> frozenset[Stage]:
    """The :class:`~trainperf.core.stage.Stage` of each user stage name (``"train"``, ``"validate"``
    or ``"val"``, ``"test"``); anything else is a ``ConfigError`` naming ``owner`` and it."""
    if isinstance(stages, str):
        raise ConfigError(
            f"{owner}: stages must be a list of stage names, got the string {stages!r}"
        )
    out = set()
    for name in stages:
        try:
            out.add(Stage.parse(name))
        except ValueError as exc:
            raise ConfigError(f"{owner}: {exc} in stages") from None
    return frozenset(out)


def int_at_least(owner: str, name: str, value: Any, minimum: int = 0) -> int:
    """``value`` when it is an integer (not a bool) >= ``minimum``, else a ``ConfigError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


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
