"""The monitors' records: lifecycle, resources, alerts, profiler windows.

The monitors' records: each rank's run start and end (:class:`LifecycleRecord`), resource
samples and summary, alert events and torch.profiler windows."""

# The records are msgspec Structs (through the imported Record base, which ruff cannot see):
# their mutable defaults are copied per instance.
# ruff: noqa: RUF012

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from trainperf.core.stage import Stage
from trainperf.records.schema import Record

__all__ = ["AlertEvent", "LifecycleRecord", "ProfilerWindow", "ResourceSample", "ResourceSummary"]


class LifecycleRecord(Record, tag="trainperf/lifecycle", kw_only=True, frozen=True):
    """One ``perf/lifecycle.jsonl`` line: a Trainer run (``run``: ``fit``, ``validate``,
    ``test``) starting or ending on one rank at unix time ``t``; ``trainperf watch`` follows a run
    until every rank's last start has its end. ``pid`` and ``hostname`` let a watcher on the same
    host see a run that died unannounced; ``status`` is an end's (``failed``: an exception;
    ``interrupted``: a signal, named in ``signal`` (``SIGTERM``, ``SIGINT``), at training batch
    ``batch`` (processed so far) of ``epoch``)."""

    FILE: ClassVar[str] = "lifecycle.jsonl"

    t: float
    event: Literal["start", "end"]
    run: str = "fit"
    rank: int = 0
    world_size: int = 1
    pid: int = 0
    hostname: str = ""
    status: Literal["finished", "failed", "interrupted"] | None = None
    signal: str | None = None
    epoch: int | None = None
    batch: int | None = None


class ResourceSample(Record, tag="trainperf/resource-sample", kw_only=True, frozen=True):
    """One ``perf/resources.jsonl`` sample (or interval mean): ``resources/...`` metrics (finite
    values only), with the phase, epoch, step and rank it was taken in; ``workers_uss``: each
    DataLoader worker's USS in bytes by pid (samples only, where USS is read)."""

    FILE: ClassVar[str] = "resources.jsonl"

    t: float
    phase: str | None = None
    epoch: int = 0
    step: int = 0
    rank: int = 0
    metrics: dict[str, float] = {}
    workers_uss: dict[str, float] = {}


class ResourceSummary(Record, tag="trainperf/resource-summary", kw_only=True, frozen=True):
    """The resource monitor's summary at a run's end: ``status`` (sampler part -> why it is
    unavailable), ``metrics`` (``<name>_mean`` / ``<name>_max`` of each sampled metric and the
    totals), ``run`` (what was sampled: ``fit``, ``validate``, ``test``; ``None`` reads as fit)."""

    FILE: ClassVar[str] = "resources.jsonl"

    t: float | None = None
    rank: int = 0
    status: dict[str, str] = {}
    metrics: dict[str, float] = {}
    run: str | None = None

    @property
    def run_kind(self) -> str:
        return self.run or "fit"


class AlertEvent(Record, tag="trainperf/alert", kw_only=True, frozen=True):
    """One alert event; ``rank`` is the global rank of the process that saw it."""

    FILE: ClassVar[str] = "alerts.jsonl"

    t: float = 0.0
    rule: str = "unknown"
    event: str
    severity: str = "warning"
    message: str = ""
    evidence: Mapping[str, float | str | None] = {}  # NaN is written as null
    threshold: dict[str, float] = {}
    suggestion: str = ""
    step: int = 0
    epoch: int = 0
    rank: int = 0

    def __post_init__(self) -> None:
        if self.event not in ("fired", "resolved"):
            raise ValueError(f"event must be fired or resolved, got {self.event!r}")
        if self.severity not in ("warning", "critical"):
            raise ValueError(f"severity must be warning or critical, got {self.severity!r}")


class ProfilerWindow(Record, tag="trainperf/profiler-window", kw_only=True, frozen=True):
    """One torch.profiler window (a ``perf/profiler.jsonl`` line).

    Args:
        trigger: ``epochs``, ``file``, ``alert`` or ``request``; reason: why (the alert's words).
        traces: trace files, relative to the run directory.
        batches: ``[first, last]`` batch index it covered (whose time the profiler inflated).
        overhead_s: the profiler's own cost: ``export`` and ``analysis`` seconds.
        callback: the display name of the callback whose hooks ran the window (they hold that
            cost on the phase clock); None in records written before it was recorded.
        summary: the analysis's summary (``top_cpu_ops``, ``findings``, ``dataloader_time_pct``,
            ``step_time_ms``, ``phases_ms_per_step``), as ``analyze_trace``'s documented keys.
        clock_agreement: the live clock's figures beside the trace's (``trainperf.analysis.trace``).
    """

    FILE: ClassVar[str] = "profiler.jsonl"

    t: float | None = None
    stage: Stage
    epoch: int | None = None
    trigger: str | None = None
    reason: str | None = None
    steps: int = 0
    traces: list[str] = []
    batches: tuple[int, int] | None = None
    overhead_s: dict[str, float] = {}
    callback: str | None = None
    # analyze_trace's documented keys and the agreement's dict view (trainperf.analysis.trace)
    summary: dict[str, Any] = {}
    clock_agreement: dict[str, Any] | None = None

    def batch_indices(self) -> range:
        """The batch indices the window covered (empty for records without ``batches``)."""
        return range(self.batches[0], self.batches[1] + 1) if self.batches else range(0)
