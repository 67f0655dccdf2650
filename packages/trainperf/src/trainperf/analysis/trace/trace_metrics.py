"""The trace rules' context: a trace's measured figures, what a rule reads, and shared helpers.

:class:`TraceMetrics` holds the figures, :class:`TraceContext` is what a trace rule reads (those
figures and the earlier findings), and the functions below are the helpers the rules share.

The figures come from :mod:`trainperf.analysis.trace.measures`; the rules are in
:mod:`~trainperf.analysis.trace.input_gpu_rules` and :mod:`~trainperf.analysis.trace.host_rules`,
their registry in :mod:`~trainperf.analysis.trace.trace_rules`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trainperf.analysis.trace.stacks import SyncSite
from trainperf.core.finding_ids import TraceFindingId
from trainperf.core.findings import Finding, threshold
from trainperf.core.rules import Earlier, FunctionRule, function_rule

__all__ = [
    "COMM_ONE_RANK_HINT",
    "TRACE_RISKS",
    "TraceContext",
    "TraceMetrics",
    "metrics_rule",
    "optimizer_loop_ms",
    "rounded",
    "step_pct",
]

#: Rules whose finding is a risk (scored by :func:`~trainperf.core.findings.risk_score`, a share of
#: the whole run) rather than a share of the profiled steps' time.
TRACE_RISKS = frozenset({TraceFindingId.MEMORY_NEAR_CAPACITY})


@dataclass
class TraceMetrics:
    """Figures the rules look at; ``None`` where the trace cannot tell.

    Args:
        has_gpu: the trace has kernels/memcpy/memset.
        n_steps: number of steps (``ProfilerStep#N`` spans).
        step_wall_ms: total wall time of all steps (ms).
        data_wait_pct: share of step wall time in data loading (%).
        data_wait_ms_per_step: mean data loading per step (ms).
        loader_kinds: DataLoader iterator classes seen (``_SingleProcessDataLoaderIter``, ...).
        gpu_busy_pct: device busy share of step wall time (%), GPU traces only.
        gpu_idle_ms_per_step: mean GPU idle per step (ms).
        memory_peak_pct: highest device memory peak in % of ``totalGlobalMem``.
        memory_peak_device: that device.
        sync_calls_per_step: sync points per step: blocking CUDA calls on the step's host
            thread that stalled it, waiting for queued device work
            (:mod:`~trainperf.analysis.trace.syncs`; an ``aten::item`` of a CPU tensor is none).
        sync_idle_calls_per_step: blocking calls per step that found the device idle (they
            cost microseconds now, and block as soon as work is queued before them).
        sync_ms_per_step: host time blocked in both per step (ms).
        sync_top: the blocking calls' names with counts.
        sync_sites: where they are (hook, operator, user's frame), most time blocked first.
        sync_phases_ms: host time blocked per step by the phase it is in (ms, phases with any).
        gpu_work_ms_per_step: device time of the kernels, copies and memsets per step (ms,
            summed over streams).
        kernels_per_step: device kernels per step.
        tiny_kernel_pct: kernels shorter than ``tiny_kernel_us`` (%).
        median_kernel_us: median kernel duration (µs).
        launch_ms_per_step: host time in ``cudaLaunchKernel`` per step (ms).
        cpu_ops_per_step: CPU ops per step.
        tiny_op_pct: CPU ops shorter than ``tiny_op_us`` (%).
        tiny_op_time_pct: self time of those tiny ops in % of step wall time.
        median_op_us: median CPU op duration (µs).
        optimizer_names: optimizers seen (from ``Optimizer.step#X.step``).
        optimizer_ops_per_step: the optimizer's own ops (outermost ops of the optimizer phase)
            per optimizer step.
        optimizer_multi_tensor_ops: ``_foreach_``/``_fused_`` ops in the optimizer phase.
        optimizer_ms_per_step: optimizer phase per step (ms).
        optimizer_multi_tensor_ops_per_step: outermost ``_foreach_``/``_fused_`` ops per optimizer
            step (one per update stage, whatever the number of parameters).
        optimizer_steps: optimizer steps in the profiled steps.
        optimizer_params: parameters (gradients accumulated by one backward pass), if known.
        optimizer_ops_per_param: ``optimizer_ops_per_step / optimizer_params``: about 1 or more
            for the per-parameter loop, well below for foreach and fused implementations.
        optimizer_pct: optimizer phase in % of step wall time.
        optimizer_fused_ops: ``_fused_`` ops in the optimizer phase (a fused optimizer).
        optimizer_gpu_ms_per_step: device time launched from the optimizer phase per step (ms).
        optimizer_blocked_ms_per_step: host time blocked in sync points in the optimizer phase
            per step (ms).
        amp_scaler_ops: the AMP grad scaler's ops (``_amp_foreach_non_finite_check_and_unscale_``,
            ``_amp_update_scale_``) in the steps, with counts.
        device_name, device_capability: the trace's first CUDA device and its compute
            capability (``"9.0"``), from ``deviceProperties``.
        device_bf16: whether that device runs bfloat16 natively (compute capability >= 8.0).
        layout_kernel_ms_per_step: NCHW <-> NHWC conversion kernels per step (ms).
        layout_kernel_pct: their share of the device time (``gpu_work_ms_per_step``, %).
        layout_kernels: their names with counts.
        comm_method: how communication was measured (``"device"``, ``"host"``), ``None``
            without collectives.
        comm_ms_per_step: time in collectives per step (ms).
        comm_exposed_ms_per_step: of which exposed (no compute beside it) per step (ms).
        comm_exposed_pct: exposed communication in % of step wall time.
        comm_overlap_pct: overlapped share of the time in collectives (%).
        comm_exposed_phases_ms: exposed ms per step by host phase.
        comm_calls: collective name -> calls in the steps.
        conv_pct: convolutions' share (%): of the outermost CPU ops' time, or of the kernels'
            device time where that is larger; ``None`` without ops. From
            ``conv_share_pct`` on the model is convolutional (channels_last applies).
        live_sync_wait: the live clock's ``sync_wait`` of the same run and stage where known:
            ``ms_per_batch`` (this rank) and ``ranks_min_ms`` / ``ranks_median_ms`` /
            ``ranks_max_ms`` (per batch, across ranks).
    """

    has_gpu: bool
    n_steps: int
    step_wall_ms: float
    data_wait_pct: float
    data_wait_ms_per_step: float | None = None
    loader_kinds: list[str] = field(default_factory=list)
    gpu_busy_pct: float | None = None
    gpu_idle_ms_per_step: float | None = None
    memory_peak_pct: float | None = None
    memory_peak_device: str | None = None
    sync_calls_per_step: float | None = None
    sync_idle_calls_per_step: float | None = None
    sync_ms_per_step: float | None = None
    sync_top: dict[str, int] = field(default_factory=dict)
    sync_sites: list[SyncSite] = field(default_factory=list)
    sync_phases_ms: dict[str, float] = field(default_factory=dict)
    gpu_work_ms_per_step: float | None = None
    kernels_per_step: float | None = None
    tiny_kernel_pct: float | None = None
    median_kernel_us: float | None = None
    launch_ms_per_step: float | None = None
    cpu_ops_per_step: float | None = None
    tiny_op_pct: float | None = None
    tiny_op_time_pct: float | None = None
    median_op_us: float | None = None
    optimizer_names: list[str] = field(default_factory=list)
    optimizer_ops_per_step: float | None = None
    optimizer_multi_tensor_ops: int = 0
    optimizer_ms_per_step: float | None = None
    optimizer_multi_tensor_ops_per_step: float | None = None
    optimizer_steps: int | None = None
    optimizer_params: int | None = None
    optimizer_ops_per_param: float | None = None
    optimizer_pct: float | None = None
    optimizer_fused_ops: int = 0
    optimizer_gpu_ms_per_step: float | None = None
    optimizer_blocked_ms_per_step: float | None = None
    amp_scaler_ops: dict[str, int] = field(default_factory=dict)
    device_name: str | None = None
    device_capability: str | None = None
    device_bf16: bool | None = None
    layout_kernel_ms_per_step: float | None = None
    layout_kernel_pct: float | None = None
    layout_kernels: dict[str, int] = field(default_factory=dict)
    comm_method: str | None = None
    comm_ms_per_step: float | None = None
    comm_exposed_ms_per_step: float | None = None
    comm_exposed_pct: float | None = None
    comm_overlap_pct: float | None = None
    comm_exposed_phases_ms: dict[str, float] = field(default_factory=dict)
    comm_calls: dict[str, int] = field(default_factory=dict)
    live_sync_wait: dict[str, float] | None = None
    conv_pct: float | None = None

    @property
    def convolutional(self) -> bool | None:
        """Whether convolutions hold a meaningful share (``conv_share_pct``); ``None`` unknown."""
        return None if self.conv_pct is None else self.conv_pct >= threshold("conv_share_pct")


#: The end of the communication_bound advice for one rank's trace (a rank set names the
#: straggler instead).
COMM_ONE_RANK_HINT = (
    " If the other ranks barely wait, this rank waits for a slower one: analyse every "
    "rank's trace together (trainperf analyze DIR) to name the straggler."
)


@dataclass
class TraceContext:
    """What a trace rule reads: the trace's figures (``metrics``) and the findings of the rules
    before it (``earlier``, readable by the ids the rule declares in ``reads``)."""

    metrics: TraceMetrics
    earlier: Earlier = field(default_factory=Earlier)


def metrics_rule(
    finding_id: str, *, supersedes: Iterable[str] = ()
) -> Callable[[Callable[[TraceMetrics], Finding | None]], FunctionRule[TraceContext]]:
    """Decorator: a function of the figures alone (``TraceMetrics -> Finding | None``) as a trace
    rule named and emitting ``finding_id``, superseding ``supersedes``
    (:func:`~trainperf.core.rules.function_rule` over the context's ``metrics``)."""
    name = str(finding_id)
    as_rule = function_rule(name, emits={name}, supersedes={str(s) for s in supersedes})

    def wrap(fn: Callable[[TraceMetrics], Finding | None]) -> FunctionRule[TraceContext]:
        @functools.wraps(fn)
        def on_context(context: TraceContext) -> Finding | None:
            return fn(context.metrics)

        return as_rule(on_context)

    return wrap


def rounded(x: float | None, nd: int = 2) -> float | None:
    """``x`` rounded to ``nd`` digits (``None`` stays ``None``)."""
    return None if x is None else round(float(x), nd)


def step_pct(m: TraceMetrics, ms_per_step: float | None) -> float:
    """``ms_per_step`` in % of the mean step (0 without steps or a figure)."""
    if not ms_per_step or not m.step_wall_ms or not m.n_steps:
        return 0.0
    return 100.0 * ms_per_step * m.n_steps / m.step_wall_ms


def optimizer_loop_ms(m: TraceMetrics) -> float | None:
    """The optimizer phase's host time with the GPU idle, per step (ms): its host time less
    the time blocked in sync points and the device work it launched; ``None`` where unknown."""
    if not m.has_gpu or m.optimizer_ms_per_step is None or m.optimizer_gpu_ms_per_step is None:
        return None
    own = m.optimizer_ms_per_step - (m.optimizer_blocked_ms_per_step or 0.0)
    return max(own - m.optimizer_gpu_ms_per_step, 0.0)
