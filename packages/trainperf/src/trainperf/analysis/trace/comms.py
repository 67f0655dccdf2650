"""Communication in a trace: time in collectives per step, overlapped and exposed.

Communication in a trace: time in collectives per step, the share of it overlapped with
compute, and the share exposed (the rank waits on it).

Two views, picked per source file:

- ``device`` (a GPU trace with NCCL kernels): collectives are the ``nccl*`` kernels; the part of
  their time during which no other kernel of the source runs is *exposed*, the rest
  *overlapped* (HTA's communication / computation overlap). The exposed time is charged to the
  host phase that launched the collectives (backward for DDP's gradient all-reduce), in
  proportion to the collectives' device time per launching phase.
- ``host`` (gloo on CPU, or a GPU trace without device collectives): collectives are the host
  spans ``gloo:*`` / ``nccl:*`` / ``c10d::*`` / ``record_param_comms`` on any thread of the
  step's process (gloo runs the all-reduce on its own thread: ``gloo:all_reduce`` there, a short
  ``c10d::allreduce_`` launch on the main thread); exposed is the part during which the step's
  thread runs no other op (it waits in ``work.wait()``), charged exactly to the phase segment it
  falls in.

Pure and vectorised over an :class:`~trainperf.analysis.trace.table.EventTable` and its
:class:`~trainperf.analysis.trace.steps.StepTable`; times are int64 ns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainperf.analysis.trace.step_phases import (
    PHASES,
    launch_calls,
    merge_intervals,
    union_in_windows,
)
from trainperf.analysis.trace.steps import StepTable, locate, process_key
from trainperf.analysis.trace.table import EventTable, Kind
from trainperf.analysis.trace.trace_analysis import CommSummary
from trainperf.analysis.trace.trace_metrics import TraceMetrics

#: Host spans of collectives: the process-group backends' record_functions and the c10d ops.
HOST_COMM_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:", "c10d::", "record_param_comms")


def is_host_comm(name: str) -> bool:
    """A host span of a collective (``gloo:all_reduce``, ``c10d::allreduce_``...)."""
    return name.startswith(HOST_COMM_PREFIXES)


def is_device_comm(name: str) -> bool:
    """A device kernel of a collective (``ncclKernel_SendRecv``, ``ncclDevKernel_AllReduce...``)."""
    return name.lower().startswith("nccl")


@dataclass
class CommTable:
    """Communication per step (rows align with the :class:`StepTable`).

    Args:
        method: per source index, ``"device"``, ``"host"`` or ``None`` (no collectives).
        total: ns per step in collectives (union of their intervals inside the step).
        overlapped: of which ns while compute ran (device: other kernels; host: an op of the
            step's thread).
        exposed: ``total - overlapped``.
        exposed_phases: (n_steps, len(PHASES)) ns of exposed communication per host phase.
        calls: collective name -> calls inside steps (device kernels or outermost host spans).
    """

    method: dict[int, str | None]
    total: np.ndarray
    overlapped: np.ndarray
    exposed: np.ndarray
    exposed_phases: np.ndarray
    calls: dict[int, dict[str, int]]


def _inside(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Whether each time ``t`` lies in one of the disjoint sorted intervals ``[ms, me)``."""
    if ms.size == 0:
        return np.zeros(t.size, bool)
    k = np.searchsorted(ms, t, side="right") - 1
    return (k >= 0) & (t < me[np.maximum(k, 0)])


def subtract(
    a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the union of intervals ``a`` not covered by the union of ``b``, as disjoint
    sorted ``(starts, ends)``."""
    as_, ae = merge_intervals(a_s, a_e)
    if as_.size == 0:
        return as_, ae
    bs, be = merge_intervals(b_s, b_e)
    cuts = np.unique(np.concatenate([as_, ae, bs, be]))
    left, right = cuts[:-1], cuts[1:]
    keep = _inside(as_, ae, left) & ~_inside(bs, be, left)
    return merge_intervals(left[keep], right[keep])


def _window(
    start: np.ndarray, end: np.ndarray, lookback: int, s: int, e: int
) -> tuple[np.ndarray, np.ndarray]:
    """Intervals (sorted by start, longest ``lookback``) overlapping ``[s, e)``, clipped to it."""
    a = np.searchsorted(start, s - lookback, side="left")
    b = np.searchsorted(start, e, side="left")
    cs, ce = start[a:b], end[a:b]
    keep = ce > s
    return np.maximum(cs[keep], s), np.minimum(ce[keep], e)


def _sorted_spans(table: EventTable, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    start = table.start[idx]
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = s + table.dur[idx][order]
    return s, e, int((e - s).max()) if s.size else 0


def _ancestors(table: EventTable, idx: np.ndarray) -> np.ndarray:
    """Boolean mask over all events: the ancestors (parent chain) of ``idx``."""
    out = np.zeros(len(table), bool)
    cur = table.parent[idx]
    for _ in range(256):  # call stacks are shallow; the bound guards malformed parents
        cur = cur[cur >= 0]
        if cur.size == 0:
            break
        cur = cur[~out[cur]]
        out[cur] = True
        cur = table.parent[cur]
    return out


def communication(table: EventTable, steps: StepTable) -> CommTable:
    """Communication per step of ``table`` (see the module doc)."""
    n = len(steps)
    out = CommTable(
        method={},
        total=np.zeros(n, np.int64),
        overlapped=np.zeros(n, np.int64),
        exposed=np.zeros(n, np.int64),
        exposed_phases=np.zeros((n, len(PHASES)), np.int64),
        calls={},
    )
    host_name = table.name_ids(is_host_comm)
    dev_name = table.name_ids(is_device_comm)
    host_kind = np.isin(table.kind, Kind.HOST)
    is_host_comm_ev = host_name[table.name] & host_kind
    is_dev_comm_ev = dev_name[table.name] & (table.kind == Kind.KERNEL)
    # outermost host collective spans only (c10d::allreduce_ holds record_param_comms)
    outer_host = is_host_comm_ev.copy()
    par = table.parent
    valid = par >= 0
    outer_host[valid] &= ~is_host_comm_ev[par[valid]]
    # host ops that are not collectives and hold none: compute of the step's thread
    holds_comm = _ancestors(table, np.flatnonzero(is_host_comm_ev))
    busy_op = (table.kind == Kind.CPU_OP) & ~is_host_comm_ev & ~holds_comm & (table.dur > 0)
    proc_of_thread = process_key(table)
    for src in range(len(table.sources)):
        in_src = table.src == src
        dev_comm = np.flatnonzero(is_dev_comm_ev & in_src)
        host_comm = np.flatnonzero(outer_host & in_src)
        method = "device" if dev_comm.size else ("host" if host_comm.size else None)
        out.method[src] = method
        rows = np.flatnonzero(steps.src == src)
        if method is None or rows.size == 0:
            continue
        if method == "device":
            compute = np.flatnonzero(in_src & (table.kind == Kind.KERNEL) & ~is_dev_comm_ev)
            _device_rows(table, steps, out, rows, dev_comm, compute)
            comm_idx = dev_comm
        else:
            _host_rows(table, steps, out, rows, host_comm, busy_op, proc_of_thread)
            comm_idx = host_comm
        step_of, _ = locate(steps, table, comm_idx, by_source=method == "device")
        codes, counts = np.unique(table.name[comm_idx[step_of >= 0]], return_counts=True)
        out.calls[src] = {
            table.names[c]: k for c, k in zip(codes.tolist(), counts.tolist(), strict=True)
        }
    return out


def concat_comm(parts: list[CommTable]) -> CommTable:
    """The :class:`CommTable` of consecutive time windows of one file (rows follow
    :func:`~trainperf.analysis.trace.steps.concat_steps`; a source measures on the device where any
    window does)."""
    method: dict[int, str | None] = {}
    calls: dict[int, Counter[str]] = {}
    for p in parts:
        for src, m in p.method.items():
            if m == "device" or method.get(src) is None:
                method[src] = m
        for src, d in p.calls.items():
            calls.setdefault(src, Counter()).update(d)
    return CommTable(
        method=method,
        total=np.concatenate([p.total for p in parts]),
        overlapped=np.concatenate([p.overlapped for p in parts]),
        exposed=np.concatenate([p.exposed for p in parts]),
        exposed_phases=np.concatenate([p.exposed_phases for p in parts]),
        calls={src: dict(c) for src, c in calls.items()},
    )


def _host_rows(
    table: EventTable,
    steps: StepTable,
    out: CommTable,
    rows: np.ndarray,
    comm: np.ndarray,
    busy_op: np.ndarray,
    proc_of_thread: np.ndarray,
) -> None:
    comm_proc = proc_of_thread[table.thread[comm]]
    busy_of: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
    seg_order = np.argsort(steps.seg_step, kind="stable")  # the segments of each step together
    seg_bounds = np.searchsorted(steps.seg_step[seg_order], np.arange(len(steps) + 1))
    for i in rows.tolist():
        s, e, t = int(steps.start[i]), int(steps.end[i]), int(steps.thread[i])
        mine = comm[comm_proc == proc_of_thread[t]]
        cs = np.maximum(table.start[mine], s)
        ce = np.minimum(table.start[mine] + table.dur[mine], e)
        keep = ce > cs
        cs, ce = cs[keep], ce[keep]
        if cs.size == 0:
            continue
        if t not in busy_of:
            busy_of[t] = _sorted_spans(table, np.flatnonzero(busy_op & (table.thread == t)))
        bs, be = _window(*busy_of[t], s, e)
        ex_s, ex_e = _fill(out, i, cs, ce, bs, be)
        seg = seg_order[seg_bounds[i] : seg_bounds[i + 1]]  # the step's phase segments
        per_seg = union_in_windows(ex_s, ex_e, steps.seg_start[seg], steps.seg_end[seg])
        out.exposed_phases[i] = np.bincount(
            steps.seg_phase[seg], weights=per_seg, minlength=len(PHASES)
        ).astype(np.int64)


def _device_rows(
    table: EventTable,
    steps: StepTable,
    out: CommTable,
    rows: np.ndarray,
    comm: np.ndarray,
    compute: np.ndarray,
) -> None:
    cs_all, ce_all, clook = _sorted_spans(table, comm)
    ks_all, ke_all, klook = _sorted_spans(table, compute)
    # launching phase of each collective kernel (through its runtime call)
    rt = launch_calls(table, comm)
    step_of = np.full(comm.size, -1, np.int64)
    phase_of = np.full(comm.size, -1, np.int64)
    known = rt >= 0
    step_of[known], phase_of[known] = locate(steps, table, rt[known])
    for i in rows.tolist():
        s, e = int(steps.start[i]), int(steps.end[i])
        cs, ce = _window(cs_all, ce_all, clook, s, e)
        if cs.size == 0:
            continue
        ks, ke = _window(ks_all, ke_all, klook, s, e)
        _fill(out, i, cs, ce, ks, ke)
        mine = (step_of == i) & (phase_of >= 0)
        weights = np.bincount(
            phase_of[mine], weights=table.dur[comm[mine]], minlength=len(PHASES)
        ).astype(np.float64)
        if weights.sum() <= 0:  # launches not in the trace: nobody claims the wait
            weights[PHASES.index("unattributed")] = 1.0
        share = weights / weights.sum()
        # charged to the launching phases, never beyond what each phase holds
        out.exposed_phases[i] = np.minimum(
            np.rint(share * out.exposed[i]).astype(np.int64), steps.phases[i]
        )


def _fill(
    out: CommTable, i: int, cs: np.ndarray, ce: np.ndarray, bs: np.ndarray, be: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Step ``i``'s total, exposed and overlapped ns from its collectives ``c`` and compute
    ``b`` (both clipped to the step); returns the exposed intervals."""
    ms, me = merge_intervals(cs, ce)
    ex_s, ex_e = subtract(cs, ce, bs, be)
    out.total[i] = int((me - ms).sum())
    out.exposed[i] = int((ex_e - ex_s).sum())
    out.overlapped[i] = out.total[i] - out.exposed[i]
    return ex_s, ex_e


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def summarise(comm: CommTable, steps: StepTable, ranks: Sequence[int | None]) -> list[CommSummary]:
    """One :class:`~trainperf.analysis.trace.trace_analysis.CommSummary` per (source with
    collectives, stage); ``ranks`` per source index."""
    out = []
    stage_of = np.asarray(steps.stage, dtype=object)
    for src, method in sorted(comm.method.items()):
        if method is None:
            continue
        for stage in sorted(set(steps.stage), key=lambda s: (s != "train", s)):
            rows = np.flatnonzero((steps.src == src) & (stage_of == stage))
            if rows.size == 0:
                continue
            n = rows.size
            total = int(comm.total[rows].sum())
            wall = int(steps.wall[rows].sum())
            exposed = int(comm.exposed[rows].sum())
            out.append(
                CommSummary(
                    source=src,
                    rank=ranks[src],
                    stage=stage,
                    method=method,
                    steps=n,
                    ms_per_step=_ms(total / n),
                    overlapped_ms_per_step=_ms(comm.overlapped[rows].sum() / n),
                    exposed_ms_per_step=_ms(exposed / n),
                    exposed_pct=round(100.0 * exposed / wall, 2) if wall else 0.0,
                    overlap_pct=(round(100.0 * (total - exposed) / total, 2) if total else None),
                    exposed_phases_ms={
                        p: _ms(v / n)
                        for p, v in zip(PHASES, comm.exposed_phases[rows].sum(axis=0), strict=True)
                        if v
                    },
                    calls=comm.calls.get(src, {}),
                )
            )
    return out


def add_metrics(m: TraceMetrics, comm: CommTable, steps: StepTable) -> None:
    """Fill the ``comm_*`` figures of ``m`` over all steps."""
    methods = sorted({x for x in comm.method.values() if x is not None})
    if not methods or len(steps) == 0:
        return
    n = len(steps)
    wall = int(steps.wall.sum())
    total = int(comm.total.sum())
    exposed = int(comm.exposed.sum())
    m.comm_method = "+".join(methods)
    m.comm_ms_per_step = total / n / 1e6
    m.comm_exposed_ms_per_step = exposed / n / 1e6
    m.comm_exposed_pct = 100.0 * exposed / wall if wall else 0.0
    m.comm_overlap_pct = 100.0 * (total - exposed) / total if total else None
    m.comm_exposed_phases_ms = {
        p: v / n / 1e6
        for p, v in zip(PHASES, comm.exposed_phases.sum(axis=0).tolist(), strict=True)
        if v
    }
    calls: Counter[str] = Counter()
    for per in comm.calls.values():
        calls.update(per)
    m.comm_calls = dict(calls)
