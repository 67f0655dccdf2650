"""Rules that turn the measured figures of a trace into findings with evidence and advice.

Each rule reads :class:`TraceMetrics` (figures measured by :mod:`trainperf.analysis.trace.measures`)
and returns at most one :class:`~trainperf.core.findings.Finding`. A finding always carries its
evidence figures, the threshold it crossed and a concrete suggestion; CUDA-specific rules stay
silent on CPU-only traces and the CPU rules phrase their advice for CPU runs. Scores are in the one
unit of :mod:`trainperf.core.findings`: the share of the profiled steps' wall time (%) the cause
costs (the verdict scales it by the stage's share of the run); the memory risk scores by the risk
table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainperf.analysis.trace.short_names import short_name
from trainperf.analysis.trace.stacks import SyncSite
from trainperf.core.actions import LOOP, OTHER, grammars
from trainperf.core.findings import (
    SEVERITY_ORDER,
    Finding,
    input_bound_severity,
    risk_score,
    threshold,
)

__all__ = ["COMM_ONE_RANK_HINT", "TRACE_RISKS", "TraceMetrics", "evaluate"]

#: Rules whose finding is a risk (scored by :func:`~trainperf.core.findings.risk_score`, a share of
# the
#: whole run) rather than a share of the profiled steps' time.
TRACE_RISKS = frozenset({"memory_near_capacity"})


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


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


def _data_loading(m: TraceMetrics) -> Finding | None:
    pct = m.data_wait_pct
    if m.n_steps == 0 or pct < threshold("input_warn_pct"):
        return None
    single = any("SingleProcess" in k for k in m.loader_kinds)
    if single:
        how = (
            "The DataLoader runs in the main process (num_workers=0): set num_workers > 0 "
            "(start near the number of free cores), persistent_workers=True and prefetch_factor"
        )
    else:
        how = (
            "Workers cannot keep up: raise num_workers or prefetch_factor, make __getitem__ "
            "cheaper (decode/resize once, cache), or move augmentation to the device"
        )
    if m.has_gpu:
        how += "; use pin_memory=True with non_blocking=True copies."
    else:
        how += (
            "; on CPU the workers share cores with the compute threads, so balance num_workers "
            "against torch.set_num_threads."
        )
    return Finding(
        id="data_loading",
        severity=input_bound_severity(pct) or "warning",
        score=_r(pct) or 0.0,
        source="trace",
        title=f"Data loading takes {pct:.1f}% of the step time",
        evidence={
            "data_wait_pct": _r(pct),
            "data_wait_ms_per_step": _r(m.data_wait_ms_per_step, 3),
            "loader": m.loader_kinds,
            "steps": m.n_steps,
        },
        threshold={
            "warning_pct": threshold("input_warn_pct"),
            "critical_pct": threshold("input_critical_pct"),
        },
        suggestion=how,
    )


def _gpu_utilisation(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or m.gpu_busy_pct is None or m.gpu_busy_pct >= threshold("gpu_busy_low_pct"):
        return None
    critical = m.gpu_busy_pct < threshold("gpu_busy_critical_pct")
    # (short name for the title, the sentence for the suggestion)
    causes: list[tuple[str, str]] = []
    if m.data_wait_pct >= threshold("input_warn_pct"):
        causes.append(("input", "the GPU waits for input (see data_loading)"))
    sync_pct = _step_pct(m, m.sync_ms_per_step)
    if sync_pct >= threshold("sync_time_pct") or (m.sync_calls_per_step or 0) >= threshold(
        "sync_calls_per_step"
    ):
        top = m.sync_sites[0] if m.sync_sites else None
        causes.append(
            (
                "host syncs",
                f"the host blocks {m.sync_ms_per_step or 0:.1f} ms/step in "
                f"{m.sync_calls_per_step or 0:.1f} sync points per step"
                + (f" (most in {top.hook or top.op})" if top else "")
                + " and the queue runs dry behind them (see host_sync)",
            )
        )
    loop = _optimizer_loop_ms(m)
    if loop is not None and _step_pct(m, loop) >= threshold("optimizer_host_bound_pct"):
        causes.append(
            (
                "the optimizer's host loop",
                f"the optimizer's host loop runs {loop:.1f} ms/step with "
                f"{m.optimizer_gpu_ms_per_step or 0:.2f} ms of GPU work (see optimizer_host_bound)",
            )
        )
    if m.tiny_kernel_pct and m.tiny_kernel_pct >= threshold("tiny_kernel_share_pct"):
        causes.append(("launch overhead", "kernels are too small to cover launch latency"))
    if (m.comm_exposed_pct or 0) >= threshold("comm_exposed_warn_pct"):
        causes.append(("communication", "it waits on communication (see communication_bound)"))
    # the title stays short enough for one log line; the causes' figures go to the suggestion
    why = ("; likely: " + ", ".join(short for short, _ in causes)) if causes else ""
    because = ("Likely: " + "; ".join(long for _, long in causes) + ". ") if causes else ""
    return Finding(
        id="low_gpu_utilisation",
        severity="critical" if critical else "warning",
        score=_r(100.0 - m.gpu_busy_pct) or 0.0,
        source="trace",
        confidence="likely" if causes else "measured",
        title=f"GPU busy only {m.gpu_busy_pct:.1f}% of the step time{why}",
        evidence={
            "gpu_busy_pct": _r(m.gpu_busy_pct),
            "gpu_idle_ms_per_step": _r(m.gpu_idle_ms_per_step, 3),
        },
        threshold={
            "warning_below_pct": threshold("gpu_busy_low_pct"),
            "critical_below_pct": threshold("gpu_busy_critical_pct"),
        },
        suggestion=(
            because + "Keep the GPU fed: fix input loading first, remove per-step host syncs, "
            "raise the batch size, and fuse small ops (torch.compile, CUDA graphs"
            + (", channels_last + AMP" if m.convolutional is not False else " + AMP")
            + ")."
        ),
    )


def _memory(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or m.memory_peak_pct is None:
        return None
    if m.memory_peak_pct < threshold("gpu_memory_high_pct"):
        return None
    return Finding(
        id="memory_near_capacity",
        severity="warning",
        score=risk_score("warning"),
        source="trace",
        title=f"Device memory peaks at {m.memory_peak_pct:.1f}% of {m.memory_peak_device}",
        evidence={"peak_pct_of_capacity": _r(m.memory_peak_pct), "device": m.memory_peak_device},
        threshold={"pct_of_capacity": threshold("gpu_memory_high_pct")},
        suggestion=(
            "Little headroom for fragmentation or larger inputs: use AMP (bf16/fp16), activation "
            "checkpointing, a smaller batch with gradient accumulation, or "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
        ),
    )


def _step_pct(m: TraceMetrics, ms_per_step: float | None) -> float:
    """``ms_per_step`` in % of the mean step (0 without steps or a figure)."""
    if not ms_per_step or not m.step_wall_ms or not m.n_steps:
        return 0.0
    return 100.0 * ms_per_step * m.n_steps / m.step_wall_ms


_GENERIC_SYNC_CHANGE = (
    "each .item(), .cpu(), print(tensor), bool(tensor) or blocking copy waits for the GPU: "
    "accumulate on the device and read once per N steps, use non_blocking=True copies from "
    "pinned memory, and avoid data-dependent Python branches"
)


def _site_change(site: SyncSite, m: TraceMetrics) -> str:
    """The change that removes the sync points of one site, by where they are (the framework's
    own words come from its registered grammar's ``sync_advice``)."""
    hook = site.hook or ""
    if hook.endswith(".optimizer_step") and m.amp_scaler_ops:
        return (
            f"{hook} holds GradScaler's inf check (found_inf.item(), 16-mixed): bf16-mixed "
            "needs no scaler (see fp16_scaler); a fused optimizer keeps found_inf on the device"
        )
    for grammar in grammars():
        if hook and hook == grammar.loop_place:
            advice = grammar.sync_advice.get(LOOP)
        else:
            kind = grammar.classify(hook).kind if hook else OTHER
            advice = grammar.sync_advice.get(kind) if kind != OTHER else None
        if advice:
            return advice.format(hook=hook)
    return f"{site.where}: {_GENERIC_SYNC_CHANGE}"


def _sync(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or not (m.sync_calls_per_step or m.sync_idle_calls_per_step) or not m.n_steps:
        return None
    pct = _step_pct(m, m.sync_ms_per_step)
    stalled, idle = m.sync_calls_per_step or 0.0, m.sync_idle_calls_per_step or 0.0
    # many blocking calls per step are a finding even where they found the GPU idle this time
    if pct < threshold("sync_time_pct") and stalled + idle < threshold("sync_calls_per_step"):
        return None
    top = m.sync_sites[0] if m.sync_sites else None
    sites = []
    for site in m.sync_sites[:5]:
        sites.append({**site.as_evidence(), "change": _site_change(site, m)})
    changes = list(dict.fromkeys(str(s["change"]) for s in sites[:3]))
    evidence: dict[str, Any] = {
        "sync_calls_per_step": _r(m.sync_calls_per_step),
        "sync_idle_calls_per_step": _r(m.sync_idle_calls_per_step),
        "sync_ms_per_step": _r(m.sync_ms_per_step, 3),
        "sync_pct_of_step": _r(pct),
        "blocked_ms_by_phase": {p: _r(v, 3) for p, v in m.sync_phases_ms.items()},
        "calls": m.sync_top,
        "sites": sites,
    }
    if not any(s.file for s in m.sync_sites):
        evidence["lines"] = "record the trace with with_stack=True to name the lines"
    return Finding(
        id="host_sync",
        severity="warning",
        score=_r(pct) or 0.0,
        source="trace",
        title=(
            (
                f"{stalled:.1f} sync points per step block the host "
                f"{m.sync_ms_per_step or 0:.2f} ms ({pct:.1f}% of the step)"
                if stalled
                else f"{idle:.1f} blocking calls per step found the GPU idle"
            )
            + (f"; most in {top.where}: {top.per_step:.1f}/step" if top else "")
            + (f"; {idle:.1f} more found the GPU idle" if idle and stalled else "")
        ),
        evidence=evidence,
        threshold={
            "time_pct": threshold("sync_time_pct"),
            "calls_per_step": threshold("sync_calls_per_step"),
        },
        suggestion="; ".join(changes) + "." if changes else _GENERIC_SYNC_CHANGE + ".",
    )


#: Optimizers that torch can run fused on CUDA (``fused=True``).
_FUSABLE = ("Adam", "AdamW", "SGD")


def _optimizer_loop_ms(m: TraceMetrics) -> float | None:
    """The optimizer phase's host time with the GPU idle, per step (ms): its host time less
    the time blocked in sync points and the device work it launched; ``None`` where unknown."""
    if not m.has_gpu or m.optimizer_ms_per_step is None or m.optimizer_gpu_ms_per_step is None:
        return None
    own = m.optimizer_ms_per_step - (m.optimizer_blocked_ms_per_step or 0.0)
    return max(own - m.optimizer_gpu_ms_per_step, 0.0)


def _optimizer_host_bound(m: TraceMetrics) -> Finding | None:
    loop = _optimizer_loop_ms(m)
    names = [n for n in m.optimizer_names if n in _FUSABLE]
    if loop is None or not names or m.optimizer_fused_ops or m.n_steps == 0:
        return None
    gpu = m.optimizer_gpu_ms_per_step or 0.0
    blocked = m.optimizer_blocked_ms_per_step or 0.0
    own = loop + gpu
    pct = _step_pct(m, loop)
    if own < threshold("optimizer_host_gpu_ratio") * gpu or pct < threshold(
        "optimizer_host_bound_pct"
    ):
        return None
    return Finding(
        id="optimizer_host_bound",
        severity="warning",
        score=_r(pct) or 0.0,
        source="trace",
        title=(
            f"{', '.join(names)} is host-bound: optimizer {m.optimizer_ms_per_step:.1f} ms/step "
            f"on the host, {gpu:.2f} ms of GPU work launched, {blocked:.1f} ms blocked: "
            f"{loop:.1f} ms/step ({pct:.1f}% of the step) of host loop with the GPU idle"
        ),
        evidence={
            "optimizer": names,
            "optimizer_ms_per_step": _r(m.optimizer_ms_per_step, 3),
            "optimizer_gpu_ms_per_step": _r(gpu, 3),
            "optimizer_blocked_ms_per_step": _r(blocked, 3),
            "host_loop_ms_per_step": _r(loop, 3),
            "host_loop_pct_of_step": _r(pct),
            "optimizer_multi_tensor_ops_per_step": _r(m.optimizer_multi_tensor_ops_per_step, 1),
            "optimizer_params": m.optimizer_params,
        },
        threshold={
            "host_gpu_ratio": threshold("optimizer_host_gpu_ratio"),
            "pct": threshold("optimizer_host_bound_pct"),
        },
        suggestion=(
            "Pass fused=True to the optimizer (Adam / AdamW / SGD on CUDA): each update stage "
            "is one kernel over all parameters, with no per-parameter host work (the foreach "
            "path still computes each parameter's bias correction on the host from its CPU "
            "step tensor); with a GradScaler a fused optimizer also keeps found_inf on the "
            "device, without a sync."
        ),
    )


def _fp16_scaler(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or not m.amp_scaler_ops or not m.device_bf16 or m.n_steps == 0:
        return None
    blocked = m.optimizer_blocked_ms_per_step or 0.0
    pct = _step_pct(m, blocked)
    sites = [s.as_evidence() for s in m.sync_sites if (s.hook or "").endswith("optimizer_step")]
    return Finding(
        id="fp16_scaler",
        severity="warning" if pct >= threshold("sync_time_pct") else "info",
        score=_r(pct) or 0.0,
        source="trace",
        title=(
            f"fp16 with a GradScaler on {m.device_name} (compute {m.device_capability}, has "
            f"bf16): its inf check blocks the host {blocked:.1f} ms/step ({pct:.1f}% of the "
            "step) in the optimizer step"
        ),
        evidence={
            "scaler_ops": m.amp_scaler_ops,
            "optimizer_blocked_ms_per_step": _r(blocked, 3),
            "blocked_pct_of_step": _r(pct),
            "sites": sites,
            "device": m.device_name,
            "compute_capability": m.device_capability,
        },
        threshold={"bf16_from_compute_capability": 8.0, "time_pct": threshold("sync_time_pct")},
        suggestion=(
            "Train in bf16-mixed precision: bfloat16 has float32's range, so there is no loss "
            "scaling, no GradScaler and no per-step inf check that waits for the backward "
            "kernels; compare the loss curve once (bf16 keeps fewer mantissa bits)."
        ),
    )


def _layout_conversion(m: TraceMetrics) -> Finding | None:
    pct = m.layout_kernel_pct
    if not m.has_gpu or pct is None or pct < threshold("layout_conversion_pct"):
        return None
    step_pct = _step_pct(m, m.layout_kernel_ms_per_step)
    kernels: dict[str, int] = {}
    for name, calls in sorted(m.layout_kernels.items(), key=lambda kv: -kv[1]):
        kernels[short_name(name)] = kernels.get(short_name(name), 0) + calls
    return Finding(
        id="layout_conversion",
        severity="warning",
        score=_r(step_pct) or 0.0,
        source="trace",
        title=(
            f"NCHW <-> NHWC conversion kernels take {pct:.1f}% of the GPU time "
            f"({m.layout_kernel_ms_per_step or 0:.1f} ms/step, {step_pct:.1f}% of the step)"
        ),
        evidence={
            "pct_of_gpu_time": _r(pct),
            "ms_per_step": _r(m.layout_kernel_ms_per_step, 3),
            "pct_of_step": _r(step_pct),
            "gpu_work_ms_per_step": _r(m.gpu_work_ms_per_step, 3),
            "kernels": kernels,
        },
        threshold={"pct_of_gpu_time": threshold("layout_conversion_pct")},
        suggestion=(
            "Use channels_last: model.to(memory_format=torch.channels_last) and the input batch "
            "too; cuDNN then runs convolutions and batch norm in NHWC without converting the "
            "layout around each one."
        ),
    )


def _tiny_kernels(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or m.kernels_per_step is None or m.tiny_kernel_pct is None:
        return None
    if m.tiny_kernel_pct < threshold("tiny_kernel_share_pct") or m.kernels_per_step < threshold(
        "kernels_per_step"
    ):
        return None
    launch_pct = (
        100.0 * (m.launch_ms_per_step or 0.0) * m.n_steps / m.step_wall_ms
        if m.step_wall_ms
        else 0.0
    )
    return Finding(
        id="launch_overhead",
        severity="warning",
        score=_r(launch_pct) or 0.0,
        source="trace",
        confidence="likely",
        title=(
            f"{m.kernels_per_step:.0f} kernels per step, {m.tiny_kernel_pct:.0f}% shorter than "
            f"{threshold('tiny_kernel_us'):.0f} µs: launch overhead"
        ),
        evidence={
            "kernels_per_step": _r(m.kernels_per_step, 1),
            "tiny_kernel_pct": _r(m.tiny_kernel_pct),
            "median_kernel_us": _r(m.median_kernel_us),
            "launch_ms_per_step": _r(m.launch_ms_per_step, 3),
            "launch_pct_of_step": _r(launch_pct),
        },
        threshold={
            "tiny_kernel_us": threshold("tiny_kernel_us"),
            "tiny_share_pct": threshold("tiny_kernel_share_pct"),
            "kernels_per_step": threshold("kernels_per_step"),
        },
        suggestion=(
            "Fuse small kernels: torch.compile (mode='reduce-overhead' adds CUDA graphs), fused or "
            "foreach optimizers, larger batches; avoid Python loops over tensors."
        ),
    )


def _tiny_cpu_ops(m: TraceMetrics) -> Finding | None:
    if m.has_gpu or m.cpu_ops_per_step is None or m.tiny_op_pct is None:
        return None
    if m.tiny_op_pct < threshold("tiny_op_share_pct") or m.cpu_ops_per_step < threshold(
        "cpu_ops_per_step"
    ):
        return None
    return Finding(
        id="dispatch_overhead",
        severity="info",
        score=_r(m.tiny_op_time_pct) or 0.0,
        source="trace",
        confidence="likely",
        title=(
            f"{m.cpu_ops_per_step:.0f} CPU ops per step, {m.tiny_op_pct:.0f}% shorter than "
            f"{threshold('tiny_op_us'):.0f} µs: per-op dispatch overhead"
        ),
        evidence={
            "cpu_ops_per_step": _r(m.cpu_ops_per_step, 1),
            "tiny_op_pct": _r(m.tiny_op_pct),
            "tiny_op_time_pct": _r(m.tiny_op_time_pct),
            "median_op_us": _r(m.median_op_us),
        },
        threshold={
            "tiny_op_us": threshold("tiny_op_us"),
            "tiny_share_pct": threshold("tiny_op_share_pct"),
            "ops_per_step": threshold("cpu_ops_per_step"),
        },
        suggestion=(
            "On CPU many tiny ops cost more in dispatch than in math: torch.compile the model, "
            "batch work instead of looping over samples (a larger batch pays each op's cost "
            "once for more samples), "
            + ("use channels_last for convolutions, " if m.convolutional else "")
            + "and check torch.get_num_threads() matches the physical cores."
        ),
    )


def _optimizer(m: TraceMetrics) -> Finding | None:
    if not m.optimizer_names or m.optimizer_ops_per_step is None:
        return None
    if m.optimizer_multi_tensor_ops > 0:
        return None
    # advice only where the optimizer is a material share of the step
    if m.optimizer_pct is None or m.optimizer_pct < threshold("optimizer_share_pct"):
        return None
    if m.optimizer_ops_per_param is not None:
        if m.optimizer_ops_per_param < threshold("optimizer_ops_per_param"):
            return None
        how_many = (
            f"{m.optimizer_ops_per_param:.1f} ops per parameter, {m.optimizer_params} parameters"
        )
    else:
        if m.optimizer_ops_per_step < threshold("optimizer_ops_per_step"):
            return None
        how_many = f"{m.optimizer_ops_per_step:.0f} ops per step"
    if m.has_gpu:
        how = (
            "Pass foreach=True (or fused=True for Adam/AdamW/SGD on CUDA) to the optimizer: one "
            "multi-tensor kernel instead of one launch per parameter."
        )
    else:
        how = (
            "Pass fused=True (Adam/AdamW/SGD support it on CPU since torch 2.4) or foreach=True; "
            "the default on CPU is the per-parameter loop."
        )
    return Finding(
        id="optimizer_not_multi_tensor",
        severity="warning" if m.has_gpu else "info",
        score=_r(m.optimizer_pct) or 0.0,
        source="trace",
        title=(
            f"{', '.join(m.optimizer_names)} steps parameter by parameter ({how_many}; "
            f"optimizer {m.optimizer_pct:.1f}% of the step)"
        ),
        evidence={
            "optimizer": m.optimizer_names,
            "optimizer_ops_per_step": _r(m.optimizer_ops_per_step, 1),
            "optimizer_params": m.optimizer_params,
            "optimizer_ops_per_param": _r(m.optimizer_ops_per_param, 2),
            "optimizer_ms_per_step": _r(m.optimizer_ms_per_step, 3),
            "optimizer_pct": _r(m.optimizer_pct),
        },
        threshold={
            "ops_per_param": threshold("optimizer_ops_per_param"),
            "ops_per_step_without_param_count": threshold("optimizer_ops_per_step"),
            "share_pct": threshold("optimizer_share_pct"),
        },
        suggestion=how,
    )


def _communication(m: TraceMetrics) -> Finding | None:
    pct = m.comm_exposed_pct
    if m.comm_method is None or pct is None or pct < threshold("comm_exposed_warn_pct"):
        return None
    phases = m.comm_exposed_phases_ms
    where = max(sorted(phases), key=lambda p: phases[p]) if phases else None
    if where == "backward":
        how = (
            "The gradient all-reduce is not hidden behind backward: keep DDP's overlap working "
            "(find_unused_parameters=False, or static_graph=True), tune bucket_cap_mb (smaller "
            "buckets start earlier) and set gradient_as_bucket_view=True; with gradient "
            "accumulation, all-reduce only on the last micro-batch (no_sync)"
        )
    else:
        how = (
            f"Collectives outside backward (mostly in {where}) block the step: sync fewer "
            "times (self.log(..., sync_dist=True) per step, per-step all_gather or .item() of "
            "a reduced metric: reduce once per epoch), broadcast_buffers=False when no buffer "
            "needs it"
        )
    if m.has_gpu:
        how += (
            "; when bandwidth-bound, compress gradients with a DDP comm hook "
            "(bf16_compress_hook, PowerSGD)."
        )
    else:
        how += "; on CPU, gloo runs over TCP: fewer, larger all-reduces help most."
    how += COMM_ONE_RANK_HINT
    evidence: dict[str, Any] = {
        "exposed_pct": _r(pct),
        "exposed_ms_per_step": _r(m.comm_exposed_ms_per_step, 3),
        "comm_ms_per_step": _r(m.comm_ms_per_step, 3),
        "overlap_pct": _r(m.comm_overlap_pct),
        "exposed_in": where,
        "method": m.comm_method,
        "calls": m.comm_calls,
    }
    if m.live_sync_wait is not None:
        evidence["live_sync_wait"] = m.live_sync_wait
    critical = pct >= threshold("comm_exposed_critical_pct")
    return Finding(
        id="communication_bound",
        severity="critical" if critical else "warning",
        score=_r(pct) or 0.0,
        source="trace",
        title=(
            f"Exposed communication takes {pct:.1f}% of the step time "
            f"({m.comm_exposed_ms_per_step or 0:.3g} ms/step, "
            f"{m.comm_overlap_pct or 0:.0f}% of collectives hidden behind compute)"
        ),
        evidence=evidence,
        threshold={
            "warning_pct": threshold("comm_exposed_warn_pct"),
            "critical_pct": threshold("comm_exposed_critical_pct"),
        },
        suggestion=how,
    )


_RULES = (
    _data_loading,
    _communication,
    _gpu_utilisation,
    _memory,
    _sync,
    _fp16_scaler,
    _optimizer_host_bound,
    _layout_conversion,
    _tiny_kernels,
    _tiny_cpu_ops,
    _optimizer,
)


def evaluate(metrics: TraceMetrics) -> list[Finding]:
    """All findings that fire, most severe first. The optimizer's host loop
    (``optimizer_host_bound``) and its per-parameter ops (``optimizer_not_multi_tensor``) are
    one cause of one optimizer: only the first is kept."""
    found = [f for rule in _RULES if (f := rule(metrics)) is not None]
    if any(f.id == "optimizer_host_bound" for f in found):
        found = [f for f in found if f.id != "optimizer_not_multi_tensor"]
    return sorted(found, key=lambda f: SEVERITY_ORDER[f.severity])
