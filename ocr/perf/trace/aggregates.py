"""Aggregates over an :class:`~ocr.perf.trace.table.EventTable`: per-op totals (host and
device), memory peaks with their timeline, and step-time statistics.

Pure and vectorised, like :mod:`~ocr.perf.trace.steps`; results are the typed rows of
:mod:`~ocr.perf.trace.result` (ms, µs and bytes as their names say).
"""

from __future__ import annotations

import math

import numpy as np

from ocr.perf.trace.result import DeviceOpRow, MemoryPeak, OpRow, Outlier, StepStats
from ocr.perf.trace.steps import PHASES, STEP_NAME, StepTable, launch_calls
from ocr.perf.trace.table import EventTable, Kind

__all__ = ["device_ops", "host_ops", "memory_report", "ms", "step_statistics"]


def ms(ns: float) -> float:
    """ns -> ms, rounded to the ns."""
    return round(float(ns) / 1e6, 6)


def host_ops(
    table: EventTable, kinds: tuple[int, ...], top_k: int | None, n_steps: int
) -> list[OpRow]:
    """Per-name aggregates of host events of ``kinds``: calls, self and total time, share of all
    host self time; sorted by self time. ``ProfilerStep#N`` names are pooled as
    ``ProfilerStep*`` (as torch's ``key_averages`` does)."""
    host = np.isin(table.kind, Kind.HOST)
    total_self = float(table.self_ns[host].sum()) or 1.0
    sel = np.isin(table.kind, kinds)
    step_alias = table.name_ids(lambda n: STEP_NAME.match(n) is not None)
    names = table.name[sel]
    pooled = "ProfilerStep*"
    alias_code = len(table.names)
    names = np.where(step_alias[names], alias_code, names)
    size = alias_code + 1
    calls = np.bincount(names, minlength=size)
    self_ns = np.bincount(names, weights=table.self_ns[sel], minlength=size)
    # total time: nested calls of the same name are not double counted (only the outermost)
    parent = table.parent[sel]
    par_name = np.where(parent >= 0, table.name[np.maximum(parent, 0)], -1)
    par_name = np.where((par_name >= 0) & step_alias[np.maximum(par_name, 0)], alias_code, par_name)
    outer = par_name != names
    total_ns = np.bincount(names[outer], weights=table.dur[sel][outer], minlength=size)
    order = np.argsort(-self_ns, kind="stable")
    order = order[calls[order] > 0]
    if top_k is not None:
        order = order[:top_k]
    rows = []
    for c in order.tolist():
        rows.append(
            OpRow(
                name=pooled if c == alias_code else table.names[c],
                calls=int(calls[c]),
                self_ms=ms(self_ns[c]),
                total_ms=ms(total_ns[c]),
                self_pct=round(float(100.0 * self_ns[c] / total_self), 3),
                self_ms_per_step=ms(self_ns[c] / n_steps) if n_steps else None,
            )
        )
    return rows


def device_ops(table: EventTable, top_k: int | None, n_steps: int) -> list[DeviceOpRow]:
    """Per-name aggregates of kernels, memcpy and memset: calls, total (= self) time, mean, share
    of device busy time, and the CPU op that launched them most often (via ``correlation``)."""
    dev = np.flatnonzero(np.isin(table.kind, Kind.DEVICE))
    if dev.size == 0:
        return []
    total = float(table.dur[dev].sum()) or 1.0
    names = table.name[dev]
    size = len(table.names)
    calls = np.bincount(names, minlength=size)
    dur = np.bincount(names, weights=table.dur[dev], minlength=size)
    launcher = _launchers(table, dev)
    order = np.argsort(-dur, kind="stable")
    order = order[calls[order] > 0]
    if top_k is not None:
        order = order[:top_k]
    kind_of: dict[int, int] = {}
    for c, k in zip(names.tolist(), table.kind[dev].tolist(), strict=True):
        kind_of.setdefault(c, k)
    rows = []
    for c in order.tolist():
        launched = launcher[names == c]
        launched = launched[launched >= 0]
        by = table.names[int(np.bincount(launched).argmax())] if launched.size else None
        rows.append(
            DeviceOpRow(
                name=table.names[c],
                kind=_DEVICE_KINDS[kind_of[c]],
                calls=int(calls[c]),
                total_ms=ms(dur[c]),
                self_ms=ms(dur[c]),
                mean_us=round(float(dur[c]) / float(calls[c]) / 1e3, 3),
                share_pct=round(float(100.0 * dur[c] / total), 3),
                self_ms_per_step=ms(dur[c] / n_steps) if n_steps else None,
                launched_by=by,
            )
        )
    return rows


_DEVICE_KINDS = {Kind.KERNEL: "kernel", Kind.MEMCPY: "memcpy", Kind.MEMSET: "memset"}


def _launchers(table: EventTable, dev: np.ndarray) -> np.ndarray:
    """Name code of the CPU op that launched each device event (runtime call's parent op), -1
    where unknown. Joined on (source, correlation id)."""
    out = np.full(dev.size, -1, np.int64)
    rt = launch_calls(table, dev)
    par = np.where(rt >= 0, table.parent[np.maximum(rt, 0)], -1)
    ok = par >= 0
    out[ok] = table.name[par[ok]]
    return out


def memory_report(
    table: EventTable, steps: StepTable, points: int = 200
) -> tuple[list[MemoryPeak], dict[str, list[list[float]]]]:
    """Peak memory per (source, device) and a downsampled timeline of allocated bytes.

    Uses ``Total Allocated``/``Total Reserved`` where the trace writes them; older traces only have
    per-event ``Bytes``, so the running sum is used and the peak is marked ``estimated`` (growth
    since profiling started; allocations made before are unknown)."""
    mem = table.memory
    peaks: list[MemoryPeak] = []
    timeline: dict[str, list[list[float]]] = {}
    if len(mem) == 0:
        return peaks, timeline
    dev_key = mem.src * 1_000_000 + mem.device_type * 1000 + (mem.device_id + 1)
    for key in np.unique(dev_key).tolist():
        rows = np.flatnonzero(dev_key == key)
        rows = rows[np.argsort(mem.ts[rows], kind="stable")]
        src = int(mem.src[rows[0]])
        dtype, did = int(mem.device_type[rows[0]]), int(mem.device_id[rows[0]])
        device = "cpu" if dtype == 0 else (f"cuda:{did}" if dtype == 1 else f"type{dtype}:{did}")
        alloc = mem.total_allocated[rows]
        estimated = bool((alloc < 0).any())
        if estimated:
            alloc = np.cumsum(mem.nbytes[rows])
            alloc = alloc - min(0, int(alloc.min()))
        reserved = mem.total_reserved[rows]
        k = int(np.argmax(alloc))
        t_peak = int(mem.ts[rows[k]])
        label = f"{device}" if len(table.sources) == 1 else f"{device}@{src}"
        capacity = None
        if dtype == 1:
            for d in table.sources[src].device_properties:
                if d.get("id") == did and isinstance(d.get("totalGlobalMem"), int | float):
                    capacity = int(d["totalGlobalMem"])
        step_label = None
        phase = None
        if len(steps):
            inside = np.flatnonzero(
                (steps.src == src) & (steps.start <= t_peak) & (steps.end > t_peak)
            )
            if inside.size:
                si = int(inside[0])
                step_label = steps.label[si]
                seg = np.flatnonzero(
                    (steps.seg_step == si) & (steps.seg_start <= t_peak) & (steps.seg_end > t_peak)
                )
                if seg.size:
                    phase = PHASES[int(steps.seg_phase[seg[0]])]
        peak_reserved = int(reserved.max()) if (reserved >= 0).any() else None
        peaks.append(
            MemoryPeak(
                device=device,
                source=src,
                peak_allocated_bytes=int(alloc[k]),
                peak_reserved_bytes=peak_reserved,
                estimated=estimated,
                at_ms=ms(t_peak),
                step=step_label,
                phase=phase,
                capacity_bytes=capacity,
                pct_of_capacity=(
                    round(100.0 * max(int(alloc[k]), peak_reserved or 0) / capacity, 2)
                    if capacity
                    else None
                ),
                events=int(rows.size),
            )
        )
        # downsample keeping each bin's maximum so the peak survives
        bins = np.minimum(
            ((mem.ts[rows] - mem.ts[rows[0]]) * points) // max(1, int(np.ptp(mem.ts[rows])) + 1),
            points - 1,
        )
        hi = np.full(points, -1, np.int64)
        np.maximum.at(hi, bins, alloc)
        t_bin = np.zeros(points, np.int64)
        np.maximum.at(t_bin, bins, mem.ts[rows])
        used = hi >= 0
        timeline[label] = [[ms(t), int(v)] for t, v in zip(t_bin[used], hi[used], strict=True)]
    return peaks, timeline


def step_statistics(wall_ns: np.ndarray, labels: list[str]) -> StepStats | None:
    """Summary of step wall times (ms) with robust outliers (|modified z| > 3.5, MAD based);
    ``None`` without steps."""
    if wall_ns.size == 0:
        return None
    w = wall_ns.astype(np.float64) / 1e6  # the steps in ms
    med = float(np.median(w))
    mad = float(np.median(np.abs(w - med)))
    outliers = []
    if mad > 0:
        z = 0.6745 * (w - med) / mad
        # a tight distribution makes tiny deviations "significant": also ask for 10 % off median
        far = np.abs(w - med) > 0.1 * med
        for i in np.flatnonzero((np.abs(z) > 3.5) & far).tolist():
            outliers.append(
                Outlier(step=labels[i], ms=round(float(w[i]), 4), robust_z=round(float(z[i]), 2))
            )
    mean = float(w.mean())
    std = float(w.std())
    return StepStats(
        count=int(w.size),
        mean_ms=round(mean, 4),
        median_ms=round(med, 4),
        std_ms=round(std, 4),
        cv=round(std / mean, 4) if mean > 0 else math.nan,
        min_ms=round(float(w.min()), 4),
        p90_ms=round(float(np.quantile(w, 0.9)), 4),
        max_ms=round(float(w.max()), 4),
        total_ms=round(float(w.sum()), 4),
        outliers=outliers,
    )
