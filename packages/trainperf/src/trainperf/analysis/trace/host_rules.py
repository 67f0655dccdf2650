"""The trace rules about the host, each giving at most one finding from a trace's figures.

They cover sync points that block the host, the fp16 scaler's inf check, an optimizer's host loop
and per-parameter steps, and CPU dispatch overhead; the figures are a
:class:`~trainperf.analysis.trace.trace_metrics.TraceMetrics`. ``optimizer_host_bound`` supersedes
``optimizer_not_multi_tensor``: they are one cause of one optimizer, and only the first is kept.
"""

from __future__ import annotations

from typing import Any

from trainperf.analysis.trace.stacks import SyncSite
from trainperf.analysis.trace.trace_metrics import (
    TraceMetrics,
    metrics_rule,
    optimizer_loop_ms,
    rounded,
    step_pct,
)
from trainperf.core.actions import LOOP, OTHER, grammars
from trainperf.core.finding_ids import TraceFindingId
from trainperf.core.findings import Finding, threshold

__all__ = [
    "dispatch_overhead_rule",
    "fp16_scaler_rule",
    "host_sync_rule",
    "optimizer_host_bound_rule",
    "optimizer_not_multi_tensor_rule",
]


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


@metrics_rule(TraceFindingId.HOST_SYNC)
def host_sync_rule(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or not (m.sync_calls_per_step or m.sync_idle_calls_per_step) or not m.n_steps:
        return None
    pct = step_pct(m, m.sync_ms_per_step)
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
        "sync_calls_per_step": rounded(m.sync_calls_per_step),
        "sync_idle_calls_per_step": rounded(m.sync_idle_calls_per_step),
        "sync_ms_per_step": rounded(m.sync_ms_per_step, 3),
        "sync_pct_of_step": rounded(pct),
        "blocked_ms_by_phase": {p: rounded(v, 3) for p, v in m.sync_phases_ms.items()},
        "calls": m.sync_top,
        "sites": sites,
    }
    if not any(s.file for s in m.sync_sites):
        evidence["lines"] = "record the trace with with_stack=True to name the lines"
    return Finding(
        id=TraceFindingId.HOST_SYNC,
        severity="warning",
        score=rounded(pct) or 0.0,
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


@metrics_rule(TraceFindingId.FP16_SCALER)
def fp16_scaler_rule(m: TraceMetrics) -> Finding | None:
    if not m.has_gpu or not m.amp_scaler_ops or not m.device_bf16 or m.n_steps == 0:
        return None
    blocked = m.optimizer_blocked_ms_per_step or 0.0
    pct = step_pct(m, blocked)
    sites = [s.as_evidence() for s in m.sync_sites if (s.hook or "").endswith("optimizer_step")]
    return Finding(
        id=TraceFindingId.FP16_SCALER,
        severity="warning" if pct >= threshold("sync_time_pct") else "info",
        score=rounded(pct) or 0.0,
        source="trace",
        title=(
            f"fp16 with a GradScaler on {m.device_name} (compute {m.device_capability}, has "
            f"bf16): its inf check blocks the host {blocked:.1f} ms/step ({pct:.1f}% of the "
            "step) in the optimizer step"
        ),
        evidence={
            "scaler_ops": m.amp_scaler_ops,
            "optimizer_blocked_ms_per_step": rounded(blocked, 3),
            "blocked_pct_of_step": rounded(pct),
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


_FUSABLE = ("Adam", "AdamW", "SGD")


@metrics_rule(
    TraceFindingId.OPTIMIZER_HOST_BOUND, supersedes={TraceFindingId.OPTIMIZER_NOT_MULTI_TENSOR}
)
def optimizer_host_bound_rule(m: TraceMetrics) -> Finding | None:
    loop = optimizer_loop_ms(m)
    names = [n for n in m.optimizer_names if n in _FUSABLE]
    if loop is None or not names or m.optimizer_fused_ops or m.n_steps == 0:
        return None
    gpu = m.optimizer_gpu_ms_per_step or 0.0
    blocked = m.optimizer_blocked_ms_per_step or 0.0
    own = loop + gpu
    pct = step_pct(m, loop)
    if own < threshold("optimizer_host_gpu_ratio") * gpu or pct < threshold(
        "optimizer_host_bound_pct"
    ):
        return None
    return Finding(
        id=TraceFindingId.OPTIMIZER_HOST_BOUND,
        severity="warning",
        score=rounded(pct) or 0.0,
        source="trace",
        title=(
            f"{', '.join(names)} is host-bound: optimizer {m.optimizer_ms_per_step:.1f} ms/step "
            f"on the host, {gpu:.2f} ms of GPU work launched, {blocked:.1f} ms blocked: "
            f"{loop:.1f} ms/step ({pct:.1f}% of the step) of host loop with the GPU idle"
        ),
        evidence={
            "optimizer": names,
            "optimizer_ms_per_step": rounded(m.optimizer_ms_per_step, 3),
            "optimizer_gpu_ms_per_step": rounded(gpu, 3),
            "optimizer_blocked_ms_per_step": rounded(blocked, 3),
            "host_loop_ms_per_step": rounded(loop, 3),
            "host_loop_pct_of_step": rounded(pct),
            "optimizer_multi_tensor_ops_per_step": rounded(
                m.optimizer_multi_tensor_ops_per_step, 1
            ),
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


@metrics_rule(TraceFindingId.DISPATCH_OVERHEAD)
def dispatch_overhead_rule(m: TraceMetrics) -> Finding | None:
    if m.has_gpu or m.cpu_ops_per_step is None or m.tiny_op_pct is None:
        return None
    if m.tiny_op_pct < threshold("tiny_op_share_pct") or m.cpu_ops_per_step < threshold(
        "cpu_ops_per_step"
    ):
        return None
    return Finding(
        id=TraceFindingId.DISPATCH_OVERHEAD,
        severity="info",
        score=rounded(m.tiny_op_time_pct) or 0.0,
        source="trace",
        confidence="likely",
        title=(
            f"{m.cpu_ops_per_step:.0f} CPU ops per step, {m.tiny_op_pct:.0f}% shorter than "
            f"{threshold('tiny_op_us'):.0f} µs: per-op dispatch overhead"
        ),
        evidence={
            "cpu_ops_per_step": rounded(m.cpu_ops_per_step, 1),
            "tiny_op_pct": rounded(m.tiny_op_pct),
            "tiny_op_time_pct": rounded(m.tiny_op_time_pct),
            "median_op_us": rounded(m.median_op_us),
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


@metrics_rule(TraceFindingId.OPTIMIZER_NOT_MULTI_TENSOR)
def optimizer_not_multi_tensor_rule(m: TraceMetrics) -> Finding | None:
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
        id=TraceFindingId.OPTIMIZER_NOT_MULTI_TENSOR,
        severity="warning" if m.has_gpu else "info",
        score=rounded(m.optimizer_pct) or 0.0,
        source="trace",
        title=(
            f"{', '.join(m.optimizer_names)} steps parameter by parameter ({how_many}; "
            f"optimizer {m.optimizer_pct:.1f}% of the step)"
        ),
        evidence={
            "optimizer": m.optimizer_names,
            "optimizer_ops_per_step": rounded(m.optimizer_ops_per_step, 1),
            "optimizer_params": m.optimizer_params,
            "optimizer_ops_per_param": rounded(m.optimizer_ops_per_param, 2),
            "optimizer_ms_per_step": rounded(m.optimizer_ms_per_step, 3),
            "optimizer_pct": rounded(m.optimizer_pct),
        },
        threshold={
            "ops_per_param": threshold("optimizer_ops_per_param"),
            "ops_per_step_without_param_count": threshold("optimizer_ops_per_step"),
            "share_pct": threshold("optimizer_share_pct"),
        },
        suggestion=how,
    )
