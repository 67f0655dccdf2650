"""What every verdict rule reads: :class:`VerdictContext`, the one typed context of a verdict.

It holds the run, its stage summaries, its recorded wall time, how advice names its settings and the
earlier findings a rule declared it reads. The module also has what the candidate generator
(:func:`trainperf.analysis.advice.candidates_for`) needs to know, and the figures of a finding
(evidence rounding, a score from seconds, the world size)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainperf.analysis.advice import RunFacts, workers_wait
from trainperf.analysis.config_keys import ConfigKey, find_key
from trainperf.analysis.contention import Contention, summarize
from trainperf.analysis.gpu_wait import StageWait
from trainperf.analysis.run import RunData
from trainperf.analysis.stages import StageSummary
from trainperf.core.findings import Finding
from trainperf.core.rules import Earlier, FunctionRule, function_rule
from trainperf.core.stage import Stage
from trainperf.records.monitoring import ResourceSample
from trainperf.records.run_record import RunRecord

if TYPE_CHECKING:
    from trainperf.analysis.trace.trace_analysis import TraceAnalysis


@dataclass(frozen=True)
class GpuBusy:
    """The GPU's busy share of the training step (%), where it comes from (words), how sure
    (``measured`` from a trace, ``likely`` from NVML) and the idle ms per step where known."""

    pct: float
    source: str
    confidence: str
    idle_ms_per_step: float | None = None


class AdviceNames:
    """How advice names the run's settings (the run's own key, else words: see
    :mod:`..verdict`), and what the GPU rules share: whether the GPU has bf16 (``cuda_bf16``,
    how it is known in ``cuda_bf16_how``), the training step's GPU busy share (``gpu_busy``)
    and the trace analysis, when one was read (all set by
    :func:`trainperf.analysis.verdict.context_of`); whether other processes held the host's
    CPUs (``contention``: the resource samples judged once, for every rule that asks)."""

    def __init__(self, run: RunData, trace: TraceAnalysis | None = None) -> None:
        self.config = run.config
        self.framework = run.framework
        self.app = run.app
        self.device = run.device
        info = run.run_info
        self.cpu_count = info.cpu_count if info is not None else None
        self.cpu_bf16 = info.cpu_bf16 if info is not None else None
        self.torch_threads = _torch_threads(info)
        self.contention: Contention | None = summarize(run.resources, self.cpu_count)
        self.precision = info.precision if info is not None else None
        self.cuda_bf16: bool | None = None
        self.cuda_bf16_how = ""
        self.trace = trace
        self.gpu_busy: GpuBusy | None = None  # the training step's, on CUDA
        self.convolutional = convolutional(info, trace)
        self._resources = run.resources
        self._workers_cpu: dict[Stage, float | None] = {}

    def workers_busy(self, s: StageSummary) -> float | None:
        """A DataLoader worker's median CPU share during ``s`` (fraction of one core): the
        resource samples' workers' CPU over the workers; ``None`` without samples or workers."""
        if s.stage not in self._workers_cpu:  # every finding's facts ask: one pass a stage
            self._workers_cpu[s.stage] = resource_stat(
                self._resources, "resources/workers_cpu_percent", (s.stage,)
            )
        median = self._workers_cpu[s.stage]
        if median is None or not s.num_workers:
            return None
        return median / s.num_workers / 100.0

    def key(
        self,
        leaf: str,
        *,
        stage: str | None = None,
        parent: str | None = None,
        prefer: Sequence[str] = ("data", "loader", "dataloader", "datamodule"),
        aliases: Sequence[str] = (),
    ) -> ConfigKey | None:
        return find_key(
            self.config, (leaf,), stage=stage, parent=parent, prefer=prefer, aliases=aliases
        )

    def name(self, key: ConfigKey | None, generic: str, current: Any = None) -> str:
        """```data.num_workers` (now 2)`` or ``the DataLoader's num_workers (now 2)``."""
        shown = key.value if key is not None and key.value is not None else current
        label = f"`{key.path}`" if key is not None else generic
        return f"{label} (now {shown})" if shown is not None else label

    def facts(self, s: StageSummary | None, headroom: bool | None = None) -> RunFacts:
        """What the candidate generator needs to know about this run and stage."""
        busy = self.workers_busy(s) if s is not None else None
        loader = s.loader if s is not None else None
        return RunFacts(
            config=self.config,
            device=self.device,
            cpu_count=self.cpu_count,
            stage=s.stage if s is not None else None,
            num_workers=s.num_workers if s is not None else None,
            suggested_workers=suggested_workers(s, self.cpu_count, busy) if s is not None else None,
            batch_size=s.batch_size if s is not None else None,
            compute_headroom=headroom,
            cpu_bf16=self.cpu_bf16,
            torch_threads=self.torch_threads,
            workers_busy=busy,
            persistent_workers=loader.persistent_workers if loader is not None else None,
            pin_memory=loader.pin_memory if loader is not None else None,
            prefetch_factor=loader.prefetch_factor if loader is not None else None,
            precision=self.precision,
            cuda_bf16=self.cuda_bf16,
            convolutional=self.convolutional,
            framework=self.framework,
            app=self.app,
        )


@dataclass
class VerdictContext:
    """What a verdict rule (:class:`trainperf.core.rules.Rule` over this context) reads: the
    loaded ``run``, its per-stage summaries (``stages``: warm-up left out, the profiler's cost
    moved to a line of its own), ``total_s`` (their wall time, the base of every score), how
    advice names the run's settings (``names``), the steady epochs' waits for the GPU per CUDA
    stage (``waits``: the live clock's CUDA events, :mod:`trainperf.analysis.gpu_wait`; the
    report shows the same) and, through ``earlier``, the findings of the rules before it whose
    ids it declared in ``reads`` or ``supersedes``."""

    run: RunData
    stages: dict[Stage, StageSummary]
    total_s: float
    names: AdviceNames
    waits: dict[Stage, StageWait] = field(default_factory=dict)
    earlier: Earlier = field(default_factory=Earlier)

    @property
    def train(self) -> StageSummary | None:
        """The training stage's summary, when the run trained."""
        return self.stages.get(Stage.TRAIN)


#: A rule of one stage: ``(stage, run, names, total_s) -> finding or None``.
StageRule = Callable[[StageSummary, RunData, AdviceNames, float], "Finding | None"]


def per_stage_rule(name: str, fn: StageRule, *emits: str) -> FunctionRule[VerdictContext]:
    """A verdict rule named ``name`` that runs ``fn`` on each stage (in the stages' order) and
    keeps the findings it makes."""

    @function_rule(name, emits=emits)
    def evaluate(ctx: VerdictContext) -> list[Finding]:
        return [f for s in ctx.stages.values() if (f := fn(s, ctx.run, ctx.names, ctx.total_s))]

    return evaluate


def convolutional(info: RunRecord | None, trace: TraceAnalysis | None) -> bool | None:
    """Whether the model is convolutional: its recorded layers (``run.json``'s ``"model"``),
    else the trace's convolution share; ``None`` when neither tells."""
    if info is not None and info.model is not None and info.model.parameters > 0:
        return info.model.convolutional
    return trace.metrics.convolutional if trace is not None else None


def _torch_threads(info: RunRecord | None) -> int | None:
    """torch's compute threads in the run: ``torch_threads`` of run.json, else the thread count
    its peak was measured with (the same process)."""
    if info is None:
        return None
    peak = info.flops.peak if info.flops is not None else {}
    for value in (info.torch_threads, peak.get("threads")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def suggested_workers(
    s: StageSummary, cpu_count: int | None, busy: float | None = None
) -> int | None:
    """Workers needed so input keeps up with the main loop: serial worker seconds per batch /
    main-loop seconds per batch (rounded up); capped at the cores when known, at twice the
    cores when the workers mostly wait (``busy``: a worker's CPU share, :func:`workers_wait`)."""
    if s.num_batches == 0:
        return None
    worker_per_batch = (
        s.worker_s.get("fetch", 0.0) + s.worker_s.get("collate", 0.0)
    ) / s.num_batches
    loop_per_batch = (s.wall_s - s.phases_s.get("data_wait", 0.0)) / s.num_batches
    if worker_per_batch <= 0:
        return None
    needed = math.ceil(worker_per_batch / max(loop_per_batch, 1e-6))
    if cpu_count:
        needed = min(needed, 2 * cpu_count if workers_wait(busy) else cpu_count)
    return max(needed, 1)


def resource_stat(
    samples: Sequence[ResourceSample],
    name: str,
    phases: Sequence[str] = (),
    stat: Callable[[list[float]], float] = statistics.median,
) -> float | None:
    """``stat`` (the median) of the finite ``samples`` of metric ``name`` taken during
    ``phases`` (all when empty), or ``None`` without any."""
    values = [
        float(v)
        for r in samples
        if (not phases or r.phase in phases)
        and (v := r.metrics.get(name)) is not None
        and math.isfinite(v)
    ]
    return stat(values) if values else None


def rounded(x: float | None, nd: int = 1) -> float | None:
    """``x`` rounded to ``nd`` places for evidence; ``None`` when missing or not finite."""
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def score(seconds: float, total_s: float) -> float:
    """``seconds`` as a share (%) of the run's recorded wall time ``total_s``, to 0.1."""
    return round(100.0 * seconds / total_s, 1) if total_s > 0 else 0.0


def world_size(run: RunData) -> int:
    """Processes of the run (DDP ranks), from its epoch records; 1 without them."""
    return max((e.world_size for e in run.epochs), default=1)
