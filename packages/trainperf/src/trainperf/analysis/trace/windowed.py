"""A trace file too large for one table, analysed in time windows.

A file too large for one table (:class:`~trainperf.analysis.trace.spill.Spilled`), analysed in
time windows with the same results as the whole.

The windows are cut at step starts where no step of any thread is open, each holding about
:data:`WINDOW_EVENTS` events. A window's table counts (``member``) the host events that start in
it, the device events whose launching runtime call starts in it (by their own start when the
trace has no launch for them) and the ``[memory]`` events in it; it also holds, uncounted, every
event that overlaps its time range (the spans around its steps, kernels still running from the
window before), so that nesting, phases, device busy time and communication overlap see what
the whole file would show there. A host span that crosses a cut gets its self time from all the
windows it spans (a first pass over the windows sums the time of its children in each).
Per-window :class:`~trainperf.analysis.trace.window_sums.WindowSums` are merged in time order and
finished as one table's would be. Memory: one window's table at a time, plus the step spans, the
kernel launches' correlation ids (16 bytes each, GPU traces) and the straddling spans.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from trainperf.analysis.trace.decode import _MEM_FIELDS, Parsed, release_free_heap
from trainperf.analysis.trace.ingest import _normalise_name, table_of
from trainperf.analysis.trace.integrity import implausible_limit
from trainperf.analysis.trace.memory_timeline import DeviceRange, MemoryPeaks, device_ranges
from trainperf.analysis.trace.spill import Spilled
from trainperf.analysis.trace.step_phases import STEP_NAME
from trainperf.analysis.trace.steps import compute_steps
from trainperf.analysis.trace.table import EventTable, Kind, MemoryTable, category_kind
from trainperf.analysis.trace.trace_analysis import TraceAnalysis
from trainperf.analysis.trace.trace_rules import TraceRule
from trainperf.analysis.trace.window_sums import (
    HookTimes,
    WindowSums,
    finish,
    hook_times,
    merge,
    sums_of,
)

__all__ = ["WINDOW_EVENTS", "analyze_spilled"]

#: Events a window holds, about (read when called, so tests can lower it).
WINDOW_EVENTS = 2_000_000

_NO_END = np.iinfo(np.int64).max
_NO_START = np.iinfo(np.int64).min


@dataclass
class _Plan:
    """What one pass over the file decides: the cuts, the launches, the file's extent."""

    device_key: np.ndarray  # per key: a device event
    cuts: np.ndarray  # sorted cut times (absolute ns); window w is [cuts[w-1], cuts[w])
    launch_corr: np.ndarray  # sorted correlation ids of runtime calls
    launch_start: np.ndarray  # their start (absolute ns)
    has_gpu: bool
    origin: int
    limit: int  # implausible duration
    last_step_window: int
    memory: dict[int, DeviceRange]

    @property
    def windows(self) -> int:
        return int(self.cuts.size) + 1

    def window_of(self, t: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.cuts, t, side="right")

    def bounds(self, w: int) -> tuple[int, int]:
        """Window ``w``'s time range (absolute ns)."""
        lo = int(self.cuts[w - 1]) if w > 0 else _NO_START
        return lo, int(self.cuts[w]) if w < self.cuts.size else _NO_END


def analyze_spilled(
    sp: Spilled, top_k: int | None, rules: Sequence[TraceRule] | None = None
) -> tuple[TraceAnalysis, HookTimes]:
    """The analysis of a spilled file (see the module doc) and its time per callback and hook,
    with the findings of ``rules`` (default: the registry's); the spill is removed afterwards."""
    try:
        plan = _plan(sp, WINDOW_EVENTS)
        self_ns = _straddler_self(sp, plan)
        parts: list[WindowSums] = []
        memory = MemoryPeaks(plan.memory)
        names: list[str] = []
        offset = 0
        for w, table, gid in _windows(sp, plan):
            fix = np.flatnonzero(np.isin(gid, list(self_ns)))
            if fix.size:
                table.self_ns[fix] = [self_ns[g] for g in gid[fix].tolist()]
            steps = compute_steps(table)
            parts.append(
                sums_of(
                    table,
                    steps,
                    plan.has_gpu,
                    {0: plan.limit},
                    cut=w == plan.last_step_window,
                    step_offset=offset,
                )
            )
            memory.add(table.memory, steps, offset)
            offset += len(steps)
            names = table.names
            del table, steps
            release_free_heap()
        part = merge(parts)
        analysis = finish(
            part, [sp.source], names, plan.origin, memory, list(sp.warnings), top_k, rules
        )
        return analysis, hook_times(part)
    finally:
        sp.close()


def _plan(sp: Spilled, window_events: int) -> _Plan:
    # per distinct key: its kind and whether it names a step span
    kinds = np.fromiter((category_kind(c) for c, _, _, _ in sp.keys), np.int8, len(sp.keys))
    is_step_key = np.fromiter(
        (STEP_NAME.match(_normalise_name(n)) is not None for _, n, _, _ in sp.keys),
        bool,
        len(sp.keys),
    )
    host = np.isin(kinds, Kind.HOST)
    device = np.isin(kinds, Kind.DEVICE)
    step_s: list[np.ndarray] = []
    step_e: list[np.ndarray] = []
    rt_corr: list[np.ndarray] = []
    rt_start: list[np.ndarray] = []
    lo, hi = _NO_END, _NO_START
    has_gpu = False
    for b in sp.blocks():
        k = b.key
        if len(b):
            lo, hi = min(lo, int(b.start.min())), max(hi, int(b.start.max()))
        has_gpu |= bool(device[k].any())
        st = is_step_key[k] & host[k] & (b.dur > 0)
        step_s.append(b.start[st])
        step_e.append(b.start[st] + b.dur[st])
        rt = (kinds[k] == Kind.RUNTIME) & (b.corr >= 0)
        rt_corr.append(b.corr[rt])
        rt_start.append(b.start[rt])
    mem_lo, mem_ranges = _memory_ranges(sp)
    origin = min(lo, mem_lo)
    starts, ends = np.concatenate(step_s), np.concatenate(step_e)
    cuts = _cuts(sp, starts, ends, window_events)
    corr = np.concatenate(rt_corr) if has_gpu else np.zeros(0, np.int64)
    order = np.argsort(corr, kind="stable")
    launch_start = np.concatenate(rt_start)[order] if has_gpu else np.zeros(0, np.int64)
    last = int(np.searchsorted(cuts, starts.max(), side="right")) if starts.size else -1
    return _Plan(
        device_key=device,
        cuts=cuts,
        launch_corr=corr[order],
        launch_start=launch_start,
        has_gpu=has_gpu,
        origin=origin,
        limit=implausible_limit(lo, hi) if sp.n_events else 0,
        last_step_window=last,
        memory={
            k: DeviceRange(r.first - origin, r.last - origin, r.estimated)
            for k, r in mem_ranges.items()
        },
    )


def _cuts(sp: Spilled, starts: np.ndarray, ends: np.ndarray, window_events: int) -> np.ndarray:
    """Step starts where no step is open, chosen so each window holds about
    ``window_events`` events."""
    if starts.size < 2:
        return np.zeros(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    open_until = np.maximum.accumulate(e)
    free = np.concatenate(([False], s[1:] >= open_until[:-1]))
    candidates = np.unique(s[free])
    if candidates.size == 0:
        return candidates
    counts = np.zeros(candidates.size + 1, np.int64)
    for b in sp.blocks():
        counts += np.bincount(
            np.searchsorted(candidates, b.start, side="right"), minlength=counts.size
        )
    chosen: list[int] = []
    held = 0
    for i in range(candidates.size):
        held += int(counts[i])
        if held >= window_events:
            chosen.append(int(candidates[i]))
            held = 0
    return np.asarray(chosen, np.int64)


def _memory_ranges(sp: Spilled) -> tuple[int, dict[int, DeviceRange]]:
    """One pass over the ``[memory]`` events: the earliest time (absolute ns) and, per device
    key (source 0), the first and last time (absolute ns) and whether it is estimated."""
    spans: dict[int, DeviceRange] = {}
    for m in sp.memory():
        for key, r in device_ranges(MemoryTable(src=np.zeros_like(m["ts"]), **m)).items():
            if (was := spans.get(key)) is not None:
                first, last = min(r.first, was.first), max(r.last, was.last)
                r = DeviceRange(first, last, r.estimated or was.estimated)
            spans[key] = r
    return min((r.first for r in spans.values()), default=_NO_END), spans


def _windows(
    sp: Spilled, plan: _Plan, memory: bool = True
) -> Iterator[tuple[int, EventTable, np.ndarray]]:
    """Each window's table (nested, ``member`` set; its ``[memory]`` events with ``memory``)
    and the file rows of its events."""
    for w in range(plan.windows):
        yield w, *_window(sp, plan, w, memory)


def _window(sp: Spilled, plan: _Plan, w: int, memory: bool) -> tuple[EventTable, np.ndarray]:
    lo, hi = plan.bounds(w)
    device = plan.device_key
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("key", "start", "dur", "corr", "gid", "m")}
    for b in sp.blocks():
        own = plan.window_of(b.start) == w
        dev = device[b.key]
        if dev.any() and plan.launch_corr.size:
            own[dev] = _launch_window(plan, b.corr[dev], b.start[dev]) == w
        keep = own | ((b.start < hi) & (b.start + b.dur > lo))
        idx = np.flatnonzero(keep)
        cols["key"].append(b.key[idx])
        cols["start"].append(b.start[idx])
        cols["dur"].append(b.dur[idx])
        cols["corr"].append(b.corr[idx])
        cols["gid"].append(idx + b.offset)
        cols["m"].append(own[idx])
    mem = _window_memory(sp, lo, hi, memory)
    parsed = Parsed(
        source=sp.source,
        keys=sp.keys,
        key=np.concatenate(cols["key"]),
        start=np.concatenate(cols["start"]),
        dur=np.concatenate(cols["dur"]),
        corr=np.concatenate(cols["corr"]),
        mem=mem,
        warnings=[],
    )
    gid = np.concatenate(cols["gid"])
    member = np.concatenate(cols["m"])
    cols.clear()
    table = table_of([parsed], [], sp.source.path, origin=plan.origin)
    table.member = member
    return table, gid


def _launch_window(plan: _Plan, corr: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The window of each device event's launching call (its own start's without one)."""
    k = np.clip(np.searchsorted(plan.launch_corr, corr), 0, plan.launch_corr.size - 1)
    hit = (plan.launch_corr[k] == corr) & (corr >= 0)
    return plan.window_of(np.where(hit, plan.launch_start[k], start))


def _window_memory(sp: Spilled, lo: int, hi: int, read: bool) -> dict[str, np.ndarray]:
    """The ``[memory]`` events with ``lo <= ts < hi`` (none without ``read``)."""
    parts = {k: [np.zeros(0, np.int64)] for k in _MEM_FIELDS}
    for m in sp.memory() if read else ():
        keep = (m["ts"] >= lo) & (m["ts"] < hi)
        for k, v in m.items():
            parts[k].append(v[keep])
    return {k: np.concatenate(v) for k, v in parts.items()}


def _straddler_self(sp: Spilled, plan: _Plan) -> dict[int, int]:
    """Self time (ns) of each host span that crosses a cut (file row -> ns): its duration less
    the part of each direct child inside it, the children gathered from every window."""
    if plan.windows == 1:
        return {}
    child: Counter[int] = Counter()
    dur: dict[int, int] = {}
    for w, table, gid in _windows(sp, plan, memory=False):  # nesting needs no [memory] events
        lo, hi = plan.bounds(w)
        abs_start = table.start + table.origin_ns
        abs_end = abs_start + table.dur
        host = np.isin(table.kind, Kind.HOST) & (table.dur > 0)
        crossing = host & ((abs_start < lo) | (abs_end > hi))
        for r in np.flatnonzero(crossing & table.members()).tolist():
            dur[int(gid[r])] = int(table.dur[r])
        par = table.parent
        kids = np.flatnonzero(table.members() & (par >= 0))
        kids = kids[crossing[par[kids]]]
        p = par[kids]
        overlap = np.minimum(table.end[kids], table.end[p]) - table.start[kids]
        for g, v in zip(gid[p].tolist(), overlap.tolist(), strict=True):
            child[int(g)] += int(v)
        del table
        release_free_heap()
    return {g: max(d - child[g], 0) for g, d in dur.items()}
