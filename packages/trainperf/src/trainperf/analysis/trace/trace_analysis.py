"""The typed result of a trace analysis (:class:`TraceAnalysis`) and its parts.

:func:`~trainperf.analysis.trace.analyze.analyze_table` builds one; every reader (the console and
Markdown rendering, the comparison, the clock agreement, the profiler callback, ``trainperf
report``) reads its attributes. The dict forms exist only at the public edge:
:meth:`TraceAnalysis.as_dict` is what ``trainperf analyze --json`` writes, and
``analyze_trace(path)`` returns it in the original project's documented shape
(:mod:`~trainperf.analysis.trace.documented`: ``top_cpu_ops``, ``top_cuda_ops`` and
``memory_peaks`` as pairs, ``dataloader_time_pct``...). Phase names are the live clock's
(:data:`trainperf.analysis.trace.step_phases.PHASES`). Times are ms unless a name says otherwise.
"""

from __future__ import annotations

from typing import Any

import msgspec

from trainperf.analysis.trace.agreement import Agreement
from trainperf.analysis.trace.integrity import Integrity
from trainperf.analysis.trace.trace_metrics import TraceMetrics
from trainperf.core.findings import Finding

__all__ = [
    "REPORT_VERSION",
    "CommSummary",
    "DeviceInfo",
    "DeviceOpRow",
    "MemoryPeak",
    "OpRow",
    "Outlier",
    "PhaseShare",
    "PhaseSummary",
    "RankRow",
    "SourceInfo",
    "StepRow",
    "StepStats",
    "Summary",
    "Timing",
    "TraceAnalysis",
]

#: Version of the dict form (:meth:`TraceAnalysis.as_dict`).
REPORT_VERSION = 1


class _Part(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Fields with a default are left out of the dict form while they hold it (an optional part
    a trace lacks: a device view on a CPU trace)."""


class DeviceInfo(_Part):
    """A device of a trace file's ``deviceProperties``: its id, name and memory (bytes)."""

    id: int | None
    name: str | None
    total_mem: int | None


class SourceInfo(_Part):
    """One trace file that went into the analysis (see :class:`~trainperf.analysis.trace.ingest.
    TraceSource`): where it is, its rank, its layout and how long it took to parse (s)."""

    path: str
    rank: int | None
    rank_from: str | None
    world_size: int | None
    schema: str
    framework: str | None
    devices: list[DeviceInfo]
    n_events: int
    parse_s: float


class Summary(_Part):
    """What the trace holds: events, span, devices, ranks, steps and their stages;
    ``origin_ns``: the absolute epoch ns that ``start_ms`` 0 of the steps stands for."""

    events: int
    span_ms: float
    has_gpu: bool
    devices: list[str]
    ranks: list[int]
    n_steps: int
    stages: list[str]
    origin_ns: int | None = None


class OpRow(_Part):
    """Host events of one name: calls, self and total time, share of all host self time (%),
    self time per step (``None`` without steps)."""

    name: str
    calls: int
    self_ms: float
    total_ms: float
    self_pct: float
    self_ms_per_step: float | None


class DeviceOpRow(_Part):
    """Kernels / copies / memsets of one name: calls, time, mean (µs), share of device busy
    time (%), time per step and the CPU op that launched them most often."""

    name: str
    kind: str
    calls: int
    total_ms: float
    self_ms: float
    mean_us: float
    share_pct: float
    self_ms_per_step: float | None
    launched_by: str | None


class MemoryPeak(_Part):
    """Peak memory of one (source, device), where it happened (step and phase) and its share of
    the device's capacity (%). ``estimated``: the trace has no allocator totals, the peak is the
    growth since profiling started."""

    device: str
    source: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    estimated: bool
    at_ms: float
    step: str | None
    phase: str | None
    capacity_bytes: int | None
    pct_of_capacity: float | None
    events: int


class StepRow(_Part):
    """One step: its wall time and the phases that partition it; with device events, the GPU's
    view of it (``gpu_ms`` by :data:`~trainperf.analysis.trace.step_phases.GPU_PARTS`, device
    time by launching phase) and the host time blocked in sync points by phase (``blocked_ms``:
    part of each phase's time, the host waiting for the device)."""

    step: str
    number: int
    stage: str
    source: int
    rank: int | None
    start_ms: float
    wall_ms: float
    wall_ns: int
    phases_ms: dict[str, float]
    outlier: bool
    gpu_ms: dict[str, float] | None = None
    gpu_busy_pct: float | None = None
    cuda_runtime_ms: float | None = None
    gpu_phases_ms: dict[str, float] | None = None
    blocked_ms: dict[str, float] | None = None


class PhaseShare(_Part):
    """Mean ms per step of one phase and its share of the steps' wall time (%), where known."""

    mean_ms: float
    pct: float | None = None


class PhaseSummary(_Part):
    """One stage's steps: mean wall time and each phase's mean and share; with device events the
    GPU parts, host time in the CUDA runtime, device time launched from each phase and the host
    time blocked in sync points in each phase (``blocked``: "waiting for the GPU", part of the
    phase's time; the rest is the phase's own host work)."""

    steps: int
    mean_wall_ms: float
    phases: dict[str, PhaseShare]
    gpu: dict[str, PhaseShare] | None = None
    cuda_runtime_mean_ms: float | None = None
    gpu_phases: dict[str, PhaseShare] | None = None
    blocked: dict[str, PhaseShare] | None = None


class Outlier(_Part):
    """A step whose wall time is a robust outlier (modified z-score)."""

    step: str
    ms: float
    robust_z: float


class StepStats(_Part):
    """Step wall times of one stage (ms) with their robust outliers."""

    count: int
    mean_ms: float
    median_ms: float
    std_ms: float
    cv: float
    min_ms: float
    p90_ms: float
    max_ms: float
    total_ms: float
    outliers: list[Outlier]


class RankRow(_Part):
    """One source file (one rank under DDP): steps, median step and data wait share (%)."""

    source: int
    path: str
    rank: int | None
    steps: int
    median_step_ms: float | None
    data_wait_pct: float | None


class CommSummary(_Part):
    """Communication of one source file (one rank) in one stage's steps, per step (ms): time in
    collectives, the part overlapped with compute and the part exposed (see
    :mod:`~trainperf.analysis.trace.comms`).

    Args:
        source, rank, stage: which steps.
        method: ``"device"`` (NCCL kernels vs the other kernels) or ``"host"`` (gloo / c10d
            spans vs the step thread's ops).
        steps: steps counted.
        ms_per_step, overlapped_ms_per_step, exposed_ms_per_step: per step.
        exposed_pct: exposed share of the steps' wall time (%).
        overlap_pct: overlapped share of the time in collectives (%).
        exposed_phases_ms: exposed ms per step by the host phase it falls in (or launched from).
        calls: collective name -> calls in these steps.
    """

    source: int
    rank: int | None
    stage: str
    method: str
    steps: int
    ms_per_step: float
    overlapped_ms_per_step: float
    exposed_ms_per_step: float
    exposed_pct: float
    overlap_pct: float | None
    exposed_phases_ms: dict[str, float]
    calls: dict[str, int]


class Timing(_Part):
    """Seconds spent loading (of which parsing JSON) and in all."""

    load_s: float
    parse_s: float
    total_s: float


class TraceAnalysis(_Part):
    """Everything ``trainperf analyze`` says about one trace (or the files of one directory).

    Args:
        sources: the files analysed.
        summary: what they hold.
        top_cpu_ops, top_annotations: host ops and user annotations by self time.
        top_cuda_ops: device ops by time.
        memory_peaks: peak memory per device.
        memory_timeline: ``"device[@source]" -> [[ms, allocated bytes], ...]`` (downsampled,
            keeping each bin's maximum).
        dataloader_time_pct: data wait share of the step time (%); of the traced host time when
            the trace has no steps.
        steps: one row per step.
        phase_summary, step_stats: per stage.
        per_rank: per source file.
        metrics: the figures the finding rules judged.
        findings: what the rules found (and a measurement finding when the trace and the clock
            disagree), most severe first.
        thresholds: the post-hoc thresholds judged with.
        warnings: what the loader or the step finder skipped or doubted.
        integrity: the problems of the trace that make figures less certain (``clean`` when
            none).
        communication: collectives per source and stage (empty without any).
        version: :data:`REPORT_VERSION`.
        clock_agreement: the live phase clock over the same steps, when known.
        timing: how long the analysis took (set by ``analyze_trace``).
        input: the path given to ``analyze_trace``.
    """

    sources: list[SourceInfo]
    summary: Summary
    top_cpu_ops: list[OpRow]
    top_annotations: list[OpRow]
    top_cuda_ops: list[DeviceOpRow]
    memory_peaks: list[MemoryPeak]
    memory_timeline: dict[str, list[list[float]]]
    dataloader_time_pct: float
    steps: list[StepRow]
    phase_summary: dict[str, PhaseSummary]
    step_stats: dict[str, StepStats]
    per_rank: list[RankRow]
    metrics: TraceMetrics
    findings: list[Finding]
    thresholds: dict[str, float]
    warnings: list[str]
    integrity: Integrity
    communication: list[CommSummary] = []
    version: int = REPORT_VERSION
    clock_agreement: Agreement | None = None
    timing: Timing | None = None
    input: str | None = None

    def add_agreement(self, agreement: Agreement) -> None:
        """Set the clock agreement, and add its measurement finding when a phase disagrees."""
        self.clock_agreement = agreement
        finding = agreement.finding()
        if finding is not None:
            self.findings.append(finding)

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready dict form (``trainperf analyze --json``; ``analyze_trace`` reshapes
        it, :mod:`~trainperf.analysis.trace.documented`): the same keys as the attributes;
        ``version`` always present."""
        return {"version": self.version, **msgspec.to_builtins(self)}
