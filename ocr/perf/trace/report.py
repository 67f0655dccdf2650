"""``analyze_trace``: one trace file or directory in, one JSON-ready report dict out."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from ocr.perf.findings import post_hoc_thresholds, threshold
from ocr.perf.trace.analyses import (
    _P_DATA,
    _P_OPT,
    GPU_PARTS,
    PHASES,
    StepTable,
    classify_phase,
    compute_steps,
    device_ops,
    host_ops,
    locate,
    memory_report,
    step_statistics,
    union_in_windows,
)
from ocr.perf.trace.findings import TraceMetrics, evaluate
from ocr.perf.trace.load import EventTable, Kind, load_traces

__all__ = ["REPORT_VERSION", "analyze_table", "analyze_trace"]

REPORT_VERSION = 1

_SYNC_OPS = ("aten::_local_scalar_dense", "aten::item")
_SYNC_RUNTIME = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
)
_LOADER = re.compile(r"^enumerate\(DataLoader\)#(\w+)")
_OPTIMIZER = re.compile(r"^Optimizer\.step#(\w+)\.step$")


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 6)


def analyze_trace(path: str | Path, top_k: int | None = 20) -> dict[str, Any]:
    """Analyse a torch.profiler Chrome trace (``.json``/``.json.gz``) or a directory of them.

    Returns a JSON-ready dict with (among others) ``top_cpu_ops``, ``top_cuda_ops``,
    ``memory_peaks``, ``dataloader_time_pct``, ``steps`` (per-step breakdown whose phases sum to
    the step's wall time), ``phase_summary``, ``step_stats`` (per stage, with outlier steps),
    ``findings`` and ``sources``. ``top_k=None`` keeps every op. Raises
    :class:`~ocr.perf.trace.load.TraceError` for unreadable or malformed input.
    """
    t0 = time.perf_counter()
    table = load_traces(path)
    t_load = time.perf_counter() - t0
    report = analyze_table(table, top_k=top_k)
    report["timing"] = {
        "load_s": round(t_load, 4),
        "parse_s": round(sum(s.parse_s for s in table.sources), 4),
        "total_s": round(time.perf_counter() - t0, 4),
    }
    report["input"] = str(path)
    return report


# Names the trace report's "thresholds" used before the shared table (kept so older readers
# find them): old name -> entry of ocr.perf.findings.THRESHOLDS.
_OLD_NAMES = {
    "data_loading_warn_pct": "input_warn_pct",
    "data_loading_critical_pct": "input_critical_pct",
    "gpu_busy_warn_pct": "gpu_busy_low_pct",
    "memory_capacity_pct": "gpu_memory_high_pct",
}


def _thresholds() -> dict[str, float]:
    """The post-hoc thresholds judged with, under the table's names and the older ones."""
    return post_hoc_thresholds() | {old: threshold(new) for old, new in _OLD_NAMES.items()}


def analyze_table(table: EventTable, top_k: int | None = 20) -> dict[str, Any]:
    """The report for an already loaded table (see :func:`analyze_trace`)."""
    warnings = list(table.warnings)
    steps = compute_steps(table, warnings)
    n_steps = len(steps)
    has_gpu = bool(np.isin(table.kind, Kind.DEVICE).any())
    wall = steps.wall
    wall_total = int(wall.sum())
    phase_tot = steps.phases.sum(axis=0) if n_steps else np.zeros(len(PHASES), np.int64)

    if n_steps:
        dl_pct = 100.0 * phase_tot[_P_DATA] / wall_total if wall_total else 0.0
    else:
        dl_pct = _data_share_without_steps(table)

    peaks, timeline = memory_report(table, steps)
    metrics = _metrics(table, steps, has_gpu, dl_pct, peaks)
    findings = [f.as_dict() for f in evaluate(metrics)]

    stages = sorted(set(steps.stage), key=lambda s: (s != "train", s))
    step_stats = {}
    phase_summary = {}
    for stage in stages:
        rows = np.flatnonzero(np.asarray(steps.stage) == stage)
        labels = [steps.label[i] for i in rows]
        step_stats[stage] = step_statistics(wall[rows], labels)
        phase_summary[stage] = _phase_summary(steps, rows)
    outlier_labels = {
        (stage, o["step"]) for stage, st in step_stats.items() for o in st.get("outliers", [])
    }

    span_start = int(table.start.min()) if len(table) else 0
    span_end = int(table.end.max()) if len(table) else 0
    return {
        "version": REPORT_VERSION,
        "sources": [s.describe() for s in table.sources],
        "summary": {
            "events": len(table),
            "span_ms": _ms(span_end - span_start),
            "has_gpu": has_gpu,
            "devices": sorted(
                {d.get("name") for s in table.sources for d in s.device_properties} - {None}
            ),
            "ranks": sorted({s.rank for s in table.sources if s.rank is not None}),
            "n_steps": n_steps,
            "stages": stages,
        },
        "top_cpu_ops": host_ops(table, (Kind.CPU_OP,), top_k, n_steps),
        "top_annotations": host_ops(table, (Kind.USER_ANNOTATION,), top_k, n_steps),
        "top_cuda_ops": device_ops(table, top_k, n_steps),
        "memory_peaks": peaks,
        "memory_timeline": timeline,
        "dataloader_time_pct": round(float(dl_pct), 3),
        "steps": [
            _step_row(steps, i, table, (steps.stage[i], steps.label[i]) in outlier_labels)
            for i in range(n_steps)
        ],
        "phase_summary": phase_summary,
        "step_stats": step_stats,
        "per_rank": _per_rank(table, steps),
        "metrics": {k: v for k, v in vars(metrics).items()},
        "findings": findings,
        "thresholds": _thresholds(),
        "warnings": warnings,
    }


def _step_row(steps: StepTable, i: int, table: EventTable, outlier: bool) -> dict[str, Any]:
    wall = int(steps.end[i] - steps.start[i])
    row: dict[str, Any] = {
        "step": steps.label[i],
        "number": int(steps.number[i]),
        "stage": steps.stage[i],
        "source": int(steps.src[i]),
        "rank": table.sources[int(steps.src[i])].rank,
        "start_ms": _ms(steps.start[i]),
        "wall_ms": _ms(wall),
        "wall_ns": wall,
        "phases_ms": {p: _ms(v) for p, v in zip(PHASES, steps.phases[i].tolist(), strict=True)},
        "outlier": outlier,
    }
    if steps.gpu is not None:
        row["gpu_ms"] = {p: _ms(v) for p, v in zip(GPU_PARTS, steps.gpu[i].tolist(), strict=True)}
        row["gpu_busy_pct"] = (
            round(float(100.0 * (1 - steps.gpu[i][-1] / wall)), 2) if wall else None
        )
        row["cuda_runtime_ms"] = _ms(steps.runtime_ns[i])
    if steps.gpu_phases is not None:
        row["gpu_phases_ms"] = {
            p: _ms(v) for p, v in zip(PHASES, steps.gpu_phases[i].tolist(), strict=True)
        }
    return row


def _phase_summary(steps: StepTable, rows: np.ndarray) -> dict[str, Any]:
    wall = steps.wall[rows]
    total = int(wall.sum()) or 1
    out: dict[str, Any] = {
        "steps": int(rows.size),
        "mean_wall_ms": _ms(wall.mean()),
        "phases": {
            p: {
                "mean_ms": _ms(steps.phases[rows, k].mean()),
                "pct": round(100.0 * steps.phases[rows, k].sum() / total, 2),
            }
            for k, p in enumerate(PHASES)
        },
    }
    if steps.gpu is not None:
        out["gpu"] = {
            p: {
                "mean_ms": _ms(steps.gpu[rows, k].mean()),
                "pct": round(100.0 * steps.gpu[rows, k].sum() / total, 2),
            }
            for k, p in enumerate(GPU_PARTS)
        }
        out["cuda_runtime_mean_ms"] = _ms(steps.runtime_ns[rows].mean())
    if steps.gpu_phases is not None:
        # device time launched from each host phase (kernels and copies, summed over streams)
        out["gpu_phases"] = {
            p: {"mean_ms": _ms(steps.gpu_phases[rows, k].mean())} for k, p in enumerate(PHASES)
        }
    return out


def _per_rank(table: EventTable, steps: StepTable) -> list[dict[str, Any]]:
    out = []
    for i, s in enumerate(table.sources):
        rows = np.flatnonzero(steps.src == i)
        out.append(
            {
                "source": i,
                "path": s.path.name,
                "rank": s.rank,
                "steps": int(rows.size),
                "median_step_ms": _ms(np.median(steps.wall[rows])) if rows.size else None,
                "data_loading_pct": (
                    round(100.0 * steps.phases[rows, _P_DATA].sum() / steps.wall[rows].sum(), 2)
                    if rows.size and steps.wall[rows].sum()
                    else None
                ),
            }
        )
    return out


def _data_share_without_steps(table: EventTable) -> float:
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


def _metrics(
    table: EventTable,
    steps: StepTable,
    has_gpu: bool,
    dl_pct: float,
    peaks: list[dict[str, Any]],
) -> TraceMetrics:
    n = len(steps)
    wall_total = int(steps.wall.sum())
    m = TraceMetrics(
        has_gpu=has_gpu, n_steps=n, step_wall_ms=wall_total / 1e6, data_loading_pct=dl_pct
    )
    if n:
        m.data_loading_ms_per_step = float(steps.phases[:, _P_DATA].mean()) / 1e6
    m.loader_kinds = sorted({g.group(1) for name in table.names if (g := _LOADER.match(name))})
    m.optimizer_names = sorted(
        {g.group(1) for name in table.names if (g := _OPTIMIZER.match(name))}
    )
    per = max(n, 1)

    if has_gpu and steps.gpu is not None and wall_total:
        idle = int(steps.gpu[:, -1].sum())
        m.gpu_busy_pct = 100.0 * (wall_total - idle) / wall_total
        m.gpu_idle_ms_per_step = idle / n / 1e6
    cuda_peaks = [p for p in peaks if p["pct_of_capacity"] is not None]
    if cuda_peaks:
        top = max(cuda_peaks, key=lambda p: p["pct_of_capacity"])
        m.memory_peak_pct = float(top["pct_of_capacity"])
        m.memory_peak_device = str(top["device"])

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
        m.tiny_op_pct = 100.0 * float((od < threshold("tiny_op_us") * 1e3).mean())
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
