"""The figures the trace's finding rules judge (:class:`~ocr.perf.trace.findings.TraceMetrics`),
measured over one :class:`~ocr.perf.trace.table.EventTable` and its steps: data wait share, GPU
busy share, memory peak, host syncs, kernel and op sizes, the optimizer's own work."""

from __future__ import annotations

import re

import numpy as np

from ocr.perf.findings import threshold
from ocr.perf.trace.findings import TraceMetrics
from ocr.perf.trace.result import MemoryPeak
from ocr.perf.trace.stacks import sync_sites
from ocr.perf.trace.steps import (
    PHASES,
    StepTable,
    classify_phase,
    locate,
    union_in_windows,
)
from ocr.perf.trace.table import EventTable, Kind

__all__ = ["data_share_without_steps", "measure"]

_P_DATA = PHASES.index("data_wait")
_P_OPT = PHASES.index("optimizer")
_SYNC_OPS = ("aten::_local_scalar_dense", "aten::item")
_SYNC_RUNTIME = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
)
_LOADER = re.compile(r"^enumerate\(DataLoader\)#(\w+)")
_OPTIMIZER = re.compile(r"^Optimizer\.step#(\w+)\.step$")


def data_share_without_steps(table: EventTable) -> float:
    """Without steps: union of DataLoader spans over the host span of the trace (%)."""
    is_dl = table.name_ids(
        lambda n: n.startswith("enumerate(DataLoader)#") or n.endswith("_dataloader_next")
    )
    host = np.isin(table.kind, Kind.HOST)
    m = is_dl[table.name] & host
    if not m.any():
        return 0.0
    span = int(table.end[host].max() - table.start[host].min()) or 1
    covered = union_in_windows(
        table.start[m],
        table.end[m],
        np.array([table.start[host].min()]),
        np.array([table.end[host].max()]),
    )
    return 100.0 * float(covered[0]) / span


def measure(
    table: EventTable,
    steps: StepTable,
    has_gpu: bool,
    dl_pct: float,
    peaks: list[MemoryPeak],
) -> TraceMetrics:
    """The figures of ``table`` (with its ``steps``, whether it ``has_gpu``, its data wait
    share ``dl_pct`` and memory ``peaks``); events outside the steps count only when there are
    no steps."""
    n = len(steps)
    wall_total = int(steps.wall.sum())
    m = TraceMetrics(
        has_gpu=has_gpu, n_steps=n, step_wall_ms=wall_total / 1e6, data_wait_pct=dl_pct
    )
    if n:
        m.data_wait_ms_per_step = float(steps.phases[:, _P_DATA].mean()) / 1e6
    m.loader_kinds = sorted({g.group(1) for name in table.names if (g := _LOADER.match(name))})
    m.optimizer_names = sorted(
        {g.group(1) for name in table.names if (g := _OPTIMIZER.match(name))}
    )
    per = max(n, 1)

    if has_gpu and steps.gpu is not None and wall_total:
        idle = int(steps.gpu[:, -1].sum())
        m.gpu_busy_pct = 100.0 * (wall_total - idle) / wall_total
        m.gpu_idle_ms_per_step = idle / n / 1e6
    cuda_peaks = [(pct, p.device) for p in peaks if (pct := p.pct_of_capacity) is not None]
    if cuda_peaks:
        m.memory_peak_pct, m.memory_peak_device = max(cuda_peaks)

    # events inside steps (all when there are no steps)
    def in_steps(mask: np.ndarray, by_source: bool = False) -> tuple[np.ndarray, np.ndarray]:
        idx = np.flatnonzero(mask)
        if not n:
            return idx, np.full(idx.size, -1, np.int64)
        step_of, phase_of = locate(steps, table, idx, by_source=by_source)
        keep = step_of >= 0
        return idx[keep], phase_of[keep]

    if has_gpu:
        sync_name = table.name_ids(lambda s: s in _SYNC_OPS or s in _SYNC_RUNTIME)
        sync = sync_name[table.name] & np.isin(table.kind, (Kind.CPU_OP, Kind.RUNTIME))
        # only the outermost sync call of a chain (item -> _local_scalar_dense -> cudaMemcpy...)
        outer = sync.copy()
        anc = table.parent.copy()
        for _ in range(6):
            valid = anc >= 0
            outer[valid] &= ~sync[anc[valid]]
            anc = np.where(valid, table.parent[np.maximum(anc, 0)], -1)
        idx, _ = in_steps(outer)
        m.sync_calls_per_step = idx.size / per
        m.sync_ms_per_step = float(table.dur[idx].sum()) / per / 1e6
        m.sync_sites = sync_sites(table, idx, n)
        names, counts = np.unique(table.name[idx], return_counts=True)
        m.sync_top = {
            table.names[c]: int(k) for c, k in zip(names.tolist(), counts.tolist(), strict=True)
        }

        kidx, _ = in_steps(table.kind == Kind.KERNEL, by_source=True)
        if kidx.size:
            kd = table.dur[kidx]
            m.kernels_per_step = kidx.size / per
            m.tiny_kernel_pct = 100.0 * float((kd < threshold("tiny_kernel_us") * 1e3).mean())
            m.median_kernel_us = float(np.median(kd)) / 1e3
        is_launch = table.name_ids(
            lambda s: s in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel")
        )
        lidx, _ = in_steps(is_launch[table.name] & (table.kind == Kind.RUNTIME))
        m.launch_ms_per_step = float(table.dur[lidx].sum()) / per / 1e6

    oidx, ophase = in_steps(table.kind == Kind.CPU_OP)
    if oidx.size:
        od = table.dur[oidx]
        m.cpu_ops_per_step = oidx.size / per
        tiny = od < threshold("tiny_op_us") * 1e3
        m.tiny_op_pct = 100.0 * float(tiny.mean())
        if wall_total:
            m.tiny_op_time_pct = 100.0 * float(table.self_ns[oidx][tiny].sum()) / wall_total
        m.median_op_us = float(np.median(od)) / 1e3
    if n and m.optimizer_names:
        _optimizer_metrics(table, steps, m, oidx, ophase)
    return m


def _optimizer_metrics(
    table: EventTable, steps: StepTable, m: TraceMetrics, oidx: np.ndarray, ophase: np.ndarray
) -> None:
    """The optimizer's own work: outermost ops in the optimizer phase (the forward and backward
    Lightning runs inside ``Optimizer.step``'s closure are their own phases), per optimizer step
    and per parameter (parameters = gradients accumulated by one backward pass)."""
    is_label = table.name_ids(
        lambda s: s.startswith(("Optimizer.", "[pl]", "ProfilerStep#")) or classify_phase(s) >= 0
    )
    in_opt = oidx[(ophase == _P_OPT) & ~is_label[table.name[oidx]]]
    # outermost: the parent is not itself an op (aten::add_ inside aten::lerp_ is one step)
    par = table.parent[in_opt]
    safe = np.maximum(par, 0)
    nested = (par >= 0) & (table.kind[safe] == Kind.CPU_OP) & ~is_label[table.name[safe]]
    own = in_opt[~nested]
    is_step = table.name_ids(lambda s: _OPTIMIZER.match(s) is not None)
    opt_spans = np.flatnonzero(is_step[table.name] & np.isin(table.kind, Kind.HOST))
    opt_step_of, _ = locate(steps, table, opt_spans)
    # an optimizer step annotated twice (a subclass calling super().step()) counts once
    par_o = table.parent[opt_spans]
    outer = ~((par_o >= 0) & is_step[table.name[np.maximum(par_o, 0)]])
    n_opt_steps = int(((opt_step_of >= 0) & outer).sum()) or len(steps)
    m.optimizer_steps = n_opt_steps
    m.optimizer_ops_per_step = own.size / n_opt_steps
    multi = table.name_ids(lambda s: "_foreach_" in s or "_fused_" in s)
    m.optimizer_multi_tensor_ops = int(multi[table.name[in_opt]].sum())
    m.optimizer_multi_tensor_ops_per_step = int(multi[table.name[own]].sum()) / n_opt_steps
    m.optimizer_ms_per_step = float(steps.phases[:, _P_OPT].mean()) / 1e6
    wall = int(steps.wall.sum())
    m.optimizer_pct = 100.0 * float(steps.phases[:, _P_OPT].sum()) / wall if wall else 0.0
    acc = table.name_ids(lambda s: s.endswith("AccumulateGrad") and "evaluate_function" in s)
    grads = np.flatnonzero(acc[table.name] & (table.kind == Kind.CPU_OP))
    if grads.size == 0:  # traces without the engine's wrapper op
        acc = table.name_ids(lambda s: s.endswith("AccumulateGrad"))
        grads = np.flatnonzero(acc[table.name] & (table.kind == Kind.CPU_OP))
    g_step, _ = locate(steps, table, grads)
    counts = np.bincount(g_step[g_step >= 0], minlength=len(steps))
    if counts.size and counts.max() > 0:
        m.optimizer_params = int(counts.max())
        m.optimizer_ops_per_param = m.optimizer_ops_per_step / m.optimizer_params
