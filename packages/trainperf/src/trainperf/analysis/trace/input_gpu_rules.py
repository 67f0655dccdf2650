"""The trace rules about input, the GPU's use and memory, launches, layout and communication.

Each reads a trace's figures (:class:`~trainperf.analysis.trace.trace_metrics.TraceMetrics`) and
returns at most one finding with its evidence, threshold and advice.

CUDA-specific rules stay silent on CPU-only traces. Scores are in the one unit of
:mod:`trainperf.core.findings`: the share of the profiled steps' wall time (%) the cause costs; the
memory risk scores by the risk table.
"""

from __future__ import annotations

from typing import Any

from trainperf.analysis.trace.short_names import short_name
from trainperf.analysis.trace.trace_metrics import (
    COMM_ONE_RANK_HINT,
    TraceMetrics,
    metrics_rule,
    optimizer_loop_ms,
    rounded,
    step_pct,
)
from trainperf.core.finding_ids import TraceFindingId
from trainperf.core.findings import Finding, input_bound_severity, risk_score, threshold

__all__ = [
    "communication_bound_rule",
    "data_loading_rule",
    "gpu_utilisation_rule",
    "launch_overhead_rule",
    "layout_conversion_rule",
    "memory_near_capacity_rule",
]


@metrics_rule(TraceFindingId.DATA_LOADING)
def data_loading_rule(m: TraceMetrics) -> Finding | None:
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
        id=TraceFindingId.DATA_LOADING,
        severity=input_bound_severity(pct) or "warning",
        score=rounded(pct) or 0.0,
        source="trace",
        title=f"Data loading takes {pct:.1f}% of the step time",
        evidence={
            "data_wait_pct": rounded(pct),
            "data_wait_ms_per_step": rounded(m.data_wait_ms_per_step, 3),
            "loader": m.loader_kinds,
            "steps": m.n_steps,
        },
        threshold={
            "warning_pct": threshold("input_warn_pct"),
            "critical_pct": threshold("input_critical_pct"),
        },
        suggestion=how,
    )


@metrics_rule(TraceFindingId.COMMUNICATION_BOUND)
def communication_bound_rule(m: TraceMetrics) -> Finding | None:
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
        "exposed_pct": rounded(pct),
        "exposed_ms_per_step": rounded(m.comm_exposed_ms_per_step, 3),
        "comm_ms_per_step": rounded(m.comm_ms_per_step, 3),
        "overlap_pct": rounded(m.comm_overlap_pct),
        "exposed_in": where,
        "method": m.comm_method,
        "calls": m.comm_calls,
    }
    if m.live_sync_wait is not None:
        evidence["live_sync_wait"] = m.live_sync_wait
    critical = pct >= threshold("comm_exposed_critical_pct")
    return Finding(
        id=TraceFindingId.COMMUNICATION_BOUND,
        severity="critical" if critical else "warning",
        score=rounded(pct) or 0.0,
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


@metrics_rule(TraceFindingId.LOW_GPU_UTILISATION)
def gpu_utilisation_rule(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or m.gpu_busy_pct is None or m.gpu_busy_pct >= threshold("gpu_busy_low_pct"):
        return None
    critical = m.gpu_busy_pct < threshold("gpu_busy_critical_pct")
    # (short name for the title, the sentence for the suggestion)
    causes: list[tuple[str, str]] = []
    if m.data_wait_pct >= threshold("input_warn_pct"):
        causes.append(("input", "the GPU waits for input (see data_loading)"))
    sync_pct = step_pct(m, m.sync_ms_per_step)
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
    loop = optimizer_loop_ms(m)
    if loop is not None and step_pct(m, loop) >= threshold("optimizer_host_bound_pct"):
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
        id=TraceFindingId.LOW_GPU_UTILISATION,
        severity="critical" if critical else "warning",
        score=rounded(100.0 - m.gpu_busy_pct) or 0.0,
        source="trace",
        confidence="likely" if causes else "measured",
        title=f"GPU busy only {m.gpu_busy_pct:.1f}% of the step time{why}",
        evidence={
            "gpu_busy_pct": rounded(m.gpu_busy_pct),
            "gpu_idle_ms_per_step": rounded(m.gpu_idle_ms_per_step, 3),
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


@metrics_rule(TraceFindingId.MEMORY_NEAR_CAPACITY)
def memory_near_capacity_rule(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or m.memory_peak_pct is None:
        return None
    if m.memory_peak_pct < threshold("gpu_memory_high_pct"):
        return None
    return Finding(
        id=TraceFindingId.MEMORY_NEAR_CAPACITY,
        severity="warning",
        score=risk_score("warning"),
        source="trace",
        title=f"Device memory peaks at {m.memory_peak_pct:.1f}% of {m.memory_peak_device}",
        evidence={
            "peak_pct_of_capacity": rounded(m.memory_peak_pct),
            "device": m.memory_peak_device,
        },
        threshold={"pct_of_capacity": threshold("gpu_memory_high_pct")},
        suggestion=(
            "Little headroom for fragmentation or larger inputs: use AMP (bf16/fp16), activation "
            "checkpointing, a smaller batch with gradient accumulation, or "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
        ),
    )


@metrics_rule(TraceFindingId.LAYOUT_CONVERSION)
def layout_conversion_rule(m: TraceMetrics) -> Finding | None:
    pct = m.layout_kernel_pct
    if not m.has_gpu or pct is None or pct < threshold("layout_conversion_pct"):
        return None
    of_step = step_pct(m, m.layout_kernel_ms_per_step)
    kernels: dict[str, int] = {}
    for name, calls in sorted(m.layout_kernels.items(), key=lambda kv: -kv[1]):
        kernels[short_name(name)] = kernels.get(short_name(name), 0) + calls
    return Finding(
        id=TraceFindingId.LAYOUT_CONVERSION,
        severity="warning",
        score=rounded(of_step) or 0.0,
        source="trace",
        title=(
            f"NCHW <-> NHWC conversion kernels take {pct:.1f}% of the GPU time "
            f"({m.layout_kernel_ms_per_step or 0:.1f} ms/step, {of_step:.1f}% of the step)"
        ),
        evidence={
            "pct_of_gpu_time": rounded(pct),
            "ms_per_step": rounded(m.layout_kernel_ms_per_step, 3),
            "pct_of_step": rounded(of_step),
            "gpu_work_ms_per_step": rounded(m.gpu_work_ms_per_step, 3),
            "kernels": kernels,
        },
        threshold={"pct_of_gpu_time": threshold("layout_conversion_pct")},
        suggestion=(
            "Use channels_last: model.to(memory_format=torch.channels_last) and the input batch "
            "too; cuDNN then runs convolutions and batch norm in NHWC without converting the "
            "layout around each one."
        ),
    )


@metrics_rule(TraceFindingId.LAUNCH_OVERHEAD)
def launch_overhead_rule(m: TraceMetrics) -> Finding | None:
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
        id=TraceFindingId.LAUNCH_OVERHEAD,
        severity="warning",
        score=rounded(launch_pct) or 0.0,
        source="trace",
        confidence="likely",
        title=(
            f"{m.kernels_per_step:.0f} kernels per step, {m.tiny_kernel_pct:.0f}% shorter than "
            f"{threshold('tiny_kernel_us'):.0f} µs: launch overhead"
        ),
        evidence={
            "kernels_per_step": rounded(m.kernels_per_step, 1),
            "tiny_kernel_pct": rounded(m.tiny_kernel_pct),
            "median_kernel_us": rounded(m.median_kernel_us),
            "launch_ms_per_step": rounded(m.launch_ms_per_step, 3),
            "launch_pct_of_step": rounded(launch_pct),
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
