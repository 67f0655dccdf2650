"""Whether a trace can be trusted: the problems found in what it holds.

Each with the figures it makes less certain.

One check per problem, each returning at most one :class:`IntegrityProblem` per source file:

- ``events_outside_steps``: host ops' and annotations' time outside every step (the top op
  tables count it, the step breakdown does not).
- ``unlinked_device_events``: kernels / copies whose launching runtime call is not in the trace
  (dropped correlation: device time per phase, "launched by" and transfers miss them).
- ``cut_steps``: a step cut by the window's edge (its open spans closed together with it, or
  kernels it launched missing).
- ``mixed_processes``: host events of more than one process (or rank) in one file.
- ``invalid_durations``: negative, missing, overflowing or implausible (longer than twice the
  whole trace) durations.
- ``no_device_timeline``: a GPU run (CUDA runtime calls, or devices listed) without device events.
- ``clock_skew``: ranks whose step ends, which DDP's collectives align, disagree (a rank set,
  :func:`clock_skew`).

A clean trace has no problem; :class:`Integrity` says so with ``clean``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from trainperf.analysis.trace.field_sums import FieldSums, later
from trainperf.analysis.trace.step_phases import launch_calls
from trainperf.analysis.trace.steps import StepTable, locate
from trainperf.analysis.trace.table import EventTable, Kind, TraceSource
from trainperf.core.finding_ids import TraceFindingId

#: Host self time outside every step, % of all host self time, from which it is a problem.
OUTSIDE_STEPS_PCT = 1.0
#: Device time without a launching call, % of all device time, from which it is a problem.
UNLINKED_DEVICE_PCT = 0.5
#: A span ending within this many ns of its step's end was closed with it (the window's edge).
CUT_TOLERANCE_NS = 1_000
#: An event longer than this many times the span of all event starts (and than
#: :data:`IMPLAUSIBLE_MIN_NS`) is implausible.
IMPLAUSIBLE_FACTOR = 2.0
IMPLAUSIBLE_MIN_NS = 1_000_000_000
#: Ranks' clocks disagree when the median offset of their aligned step ends exceeds this many ns
#: and :data:`SKEW_STEP_SHARE` of the median step.
SKEW_MIN_NS = 5_000_000
SKEW_STEP_SHARE = 0.1

_RUNTIME_LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


class IntegrityProblem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One problem of a trace.

    Args:
        id: which check found it (see the module doc).
        message: one line saying what is wrong, with its figures.
        affects: the figures it makes less certain (``--json`` keys of the analysis).
        count: events (steps, ranks) concerned.
        share_pct: their share where one applies (of host or device time, %).
        source: the file, where one file is concerned.
        rank: its rank, where known.
    """

    id: str
    message: str
    affects: list[str]
    count: int
    share_pct: float | None = None
    source: str | None = None
    rank: int | None = None


class Integrity(msgspec.Struct, kw_only=True):
    """The problems of an analysis; ``clean`` when there are none."""

    clean: bool
    problems: list[IntegrityProblem]

    @classmethod
    def of(cls, problems: Sequence[IntegrityProblem]) -> Integrity:
        """The integrity section holding ``problems``."""
        return cls(clean=not problems, problems=list(problems))

    def lines(self) -> list[str]:
        """One line per problem (nothing when clean)."""
        return [f"{p.message} (less certain: {', '.join(p.affects)})" for p in self.problems]


@dataclass
class IntegritySums(FieldSums):
    """What the per-file checks need, per source index, as sums over the time windows of one
    file (a table is one window): host self time (ops and annotations) and of it outside every
    step, device time and of it without a launching call, the processes of host events, events
    of implausible length, device events and kernel launches, and the steps cut by the window's
    edge (step indexes; looked for in the last window with steps only)."""

    host_self: Counter[int] = field(default_factory=Counter)
    outside_self: Counter[int] = field(default_factory=Counter)
    outside_n: Counter[int] = field(default_factory=Counter)
    dev_ns: Counter[int] = field(default_factory=Counter)
    lost_ns: Counter[int] = field(default_factory=Counter)
    lost_n: Counter[int] = field(default_factory=Counter)
    pids: dict[int, set[str]] = field(default_factory=dict)
    step_pids: dict[int, set[str]] = field(default_factory=dict)
    implausible: Counter[int] = field(default_factory=Counter)
    dev_events: Counter[int] = field(default_factory=Counter)
    launches: Counter[int] = field(default_factory=Counter)
    cut: dict[int, list[int]] = field(default_factory=dict, metadata={"merge": later})


def implausible_limits(table: EventTable) -> dict[int, int]:
    """Per source of a whole table, the duration above which an event is implausible."""
    out = {}
    for src in range(len(table.sources)):
        mine = table.src == src
        if mine.any():
            hi = int(np.max(table.start, where=mine, initial=np.iinfo(np.int64).min))
            lo = int(np.min(table.start, where=mine, initial=np.iinfo(np.int64).max))
            out[src] = implausible_limit(lo, hi)
    return out


def implausible_limit(lo: int, hi: int) -> int:
    """The implausible duration for events starting between ``lo`` and ``hi`` (ns)."""
    return int(max(IMPLAUSIBLE_FACTOR * (hi - lo), IMPLAUSIBLE_MIN_NS))


def integrity_sums(
    table: EventTable,
    steps: StepTable,
    limits: Mapping[int, int],
    cut: bool = True,
    step_offset: int = 0,
) -> IntegritySums:
    """The :class:`IntegritySums` of ``table``'s counted events with its ``steps``; ``limits``
    from :func:`implausible_limits`; ``cut``: look for the steps the window's edge cut (the
    table holds the file's last steps; their indexes shifted by ``step_offset``)."""
    out = IntegritySums()
    member = table.members()
    launches = table.name_ids(lambda n: n in _RUNTIME_LAUNCH)
    for src in range(len(table.sources)):
        mine = (table.src == src) & member
        host = np.flatnonzero(mine & np.isin(table.kind, (Kind.CPU_OP, Kind.USER_ANNOTATION)))
        out.host_self[src] = int(table.self_ns[host].sum())
        step_of, _ = locate(steps, table, host)
        outside = host[step_of < 0]
        out.outside_self[src] = int(table.self_ns[outside].sum())
        out.outside_n[src] = int(outside.size)
        threads = np.unique(table.thread[host])
        out.pids[src] = {table.thread_keys[t][1] for t in threads.tolist()}
        out.step_pids[src] = {
            table.thread_keys[int(t)][1] for t in steps.thread[steps.src == src].tolist()
        }
        dev = np.flatnonzero(mine & np.isin(table.kind, Kind.DEVICE))
        lost = dev[launch_calls(table, dev) < 0]
        out.dev_ns[src] = int(table.dur[dev].sum())
        out.lost_ns[src] = int(table.dur[lost].sum())
        out.lost_n[src] = int(lost.size)
        out.dev_events[src] = int(dev.size)
        out.launches[src] = int((mine & (table.kind == Kind.RUNTIME) & launches[table.name]).sum())
        if src in limits:
            out.implausible[src] = int(np.count_nonzero(mine & (table.dur > limits[src])))
        if cut:
            out.cut[src] = [i + step_offset for i in _cut_steps(table, steps, src)]
    return out


def check_integrity(sums: IntegritySums, steps: StepTable, sources: list[TraceSource]) -> Integrity:
    """Every per-file check of the module doc from the file's sums and its (merged) ``steps``."""
    problems: list[IntegrityProblem] = []
    for src in range(len(sources)):
        for check in _CHECKS:
            found = check(sums, steps, sources, src)
            if found is not None:
                problems.append(found)
    return Integrity.of(problems)


def _problem(
    sources: list[TraceSource],
    src: int,
    id: str,
    message: str,
    affects: list[str],
    count: int,
    share_pct: float | None = None,
) -> IntegrityProblem:
    """A problem of source ``src`` (its file name, also before the message, and rank filled
    in)."""
    source = sources[src]
    return IntegrityProblem(
        id=id,
        message=f"{source.path.name}: {message}",
        affects=affects,
        count=count,
        share_pct=share_pct,
        source=source.path.name,
        rank=source.rank,
    )


def _outside_steps(
    sums: IntegritySums, steps: StepTable, sources: list[TraceSource], src: int
) -> IntegrityProblem | None:
    if not (steps.src == src).any():
        return None  # without steps every figure is over the whole trace
    # what the op tables count (the profiler's own runtime calls at its stop are no problem)
    total = sums.host_self[src]
    if not total:
        return None
    share = 100.0 * float(sums.outside_self[src]) / total
    if share < OUTSIDE_STEPS_PCT:
        return None
    n = sums.outside_n[src]
    return _problem(
        sources,
        src,
        id=TraceFindingId.EVENTS_OUTSIDE_STEPS,
        message=f"{n} host events ({share:.1f}% of host time) lie outside every step",
        affects=["top_cpu_ops", "top_annotations", "top_cuda_ops"],
        count=n,
        share_pct=round(share, 2),
    )


def _unlinked_device(
    sums: IntegritySums, steps: StepTable, sources: list[TraceSource], src: int
) -> IntegrityProblem | None:
    total = sums.dev_ns[src]
    if not total:
        return None
    share = 100.0 * float(sums.lost_ns[src]) / total
    if share < UNLINKED_DEVICE_PCT:
        return None
    n = sums.lost_n[src]
    return _problem(
        sources,
        src,
        id=TraceFindingId.UNLINKED_DEVICE_EVENTS,
        message=(
            f"{n} device events ({share:.1f}% of device time) have no launching call in the "
            "trace (dropped correlation)"
        ),
        affects=["steps.gpu_phases_ms", "phase_summary.gpu_phases", "top_cuda_ops.launched_by"],
        count=n,
        share_pct=round(share, 2),
    )


def _cut_steps(table: EventTable, steps: StepTable, src: int) -> list[int]:
    """The last step of each thread of ``src`` if the window's edge cut it (step indexes)."""
    rows = np.flatnonzero(steps.src == src)
    if rows.size == 0:
        return []
    host = (table.src == src) & np.isin(table.kind, Kind.HOST) & (table.dur > 0)
    launches = table.name_ids(lambda n: n in _RUNTIME_LAUNCH)
    dev = np.flatnonzero((table.src == src) & np.isin(table.kind, Kind.DEVICE))
    launched = set(table.correlation[dev].tolist()) if dev.size else set()
    cut: list[int] = []
    # the window's edge cuts the last step of each thread (stop mid-step)
    last: dict[int, int] = {}
    for i in rows.tolist():
        t = int(steps.thread[i])
        if t not in last or steps.start[i] > steps.start[last[t]]:
            last[t] = i
    for i in last.values():
        s, e = int(steps.start[i]), int(steps.end[i])
        inside = host & (table.thread == steps.thread[i]) & (table.start > s) & (table.start < e)
        # ends of the step's own events only (a full-trace column would cost 8 B per event)
        ins = np.flatnonzero(inside)
        del inside
        closed_with_it = np.abs(table.start[ins] + table.dur[ins] - e) <= CUT_TOLERANCE_NS
        missing = 0
        if dev.size:
            rt = np.flatnonzero(
                (table.src == src)
                & (table.kind == Kind.RUNTIME)
                & launches[table.name]
                & (table.start >= s)
                & (table.start < e)
                & (table.correlation >= 0)
            )
            missing = sum(c not in launched for c in table.correlation[rt].tolist())
        if closed_with_it.any() or missing:
            cut.append(i)
    return cut


def _cut(
    sums: IntegritySums, steps: StepTable, sources: list[TraceSource], src: int
) -> IntegrityProblem | None:
    cut = sums.cut.get(src, [])
    if not cut:
        return None
    return _problem(
        sources,
        src,
        id=TraceFindingId.CUT_STEPS,
        message=(
            f"{', '.join(steps.label[i] for i in cut)} cut by the window's edge (spans closed "
            "with the step or kernels it launched missing)"
        ),
        affects=["steps", "step_stats", "phase_summary"],
        count=len(cut),
    )


def _mixed_processes(
    sums: IntegritySums, steps: StepTable, sources: list[TraceSource], src: int
) -> IntegrityProblem | None:
    pids = sorted(sums.pids.get(src, set()))
    if len(pids) < 2:
        return None
    step_pids = sorted(sums.step_pids.get(src, set()))
    return _problem(
        sources,
        src,
        id=TraceFindingId.MIXED_PROCESSES,
        message=(
            f"host events of {len(pids)} processes in one file "
            f"(pids {', '.join(pids[:4])}{'...' if len(pids) > 4 else ''}; "
            f"{len(step_pids)} with steps): ranks or runs mixed"
        ),
        affects=["steps", "phase_summary", "per_rank", "top_cpu_ops"],
        count=len(pids),
    )


def _invalid_durations(
    sums: IntegritySums, steps: StepTable, sources: list[TraceSource], src: int
) -> IntegrityProblem | None:
    source = sources[src]
    invalid = source.invalid_durations
    implausible = sums.implausible[src]
    if not invalid and not implausible:
        return None
    parts = []
    if invalid:
        parts.append(f"{invalid} negative, missing or overflowing (counted as zero)")
    if implausible:
        parts.append(f"{implausible} longer than twice the whole trace")
    return _problem(
        sources,
        src,
        id=TraceFindingId.INVALID_DURATIONS,
        message=f"event durations {' and '.join(parts)}",
        affects=["top_cpu_ops", "top_cuda_ops", "steps", "summary.span_ms"],
        count=invalid + implausible,
    )


def _no_device_timeline(
    sums: IntegritySums, steps: StepTable, sources: list[TraceSource], src: int
) -> IntegrityProblem | None:
    if sums.dev_events[src]:
        return None
    n_launch = sums.launches[src]
    gpus = [d for d in sources[src].device_properties if d.get("name")]
    if not n_launch and not gpus:
        return None
    why = f"{n_launch} kernel launches" if n_launch else f"{len(gpus)} GPUs listed"
    return _problem(
        sources,
        src,
        id=TraceFindingId.NO_DEVICE_TIMELINE,
        message=f"a GPU run ({why}) without device events (CUDA activity not recorded)",
        affects=["top_cuda_ops", "metrics.gpu_busy_pct", "communication", "memory_peaks"],
        count=n_launch,
    )


_CHECKS = (
    _outside_steps,
    _unlinked_device,
    _cut,
    _mixed_processes,
    _invalid_durations,
    _no_device_timeline,
)


def clock_skew(
    step_ends_ns: Mapping[int, Mapping[str, int]], median_step_ns: float
) -> IntegrityProblem | None:
    """The clock skew between ranks, from the absolute end (ns) of each training step per rank
    (``rank -> step label -> ns``, ranks with collectives in their steps only): DDP's gradient
    all-reduce makes ranks leave every step
    together, so the median offset of a rank's step ends from the lowest rank's is its clock's
    offset. A problem when one exceeds :data:`SKEW_MIN_NS` and :data:`SKEW_STEP_SHARE` of the
    median step."""
    ranks = sorted(step_ends_ns)
    if len(ranks) < 2:
        return None
    ref = step_ends_ns[ranks[0]]
    limit = max(SKEW_MIN_NS, SKEW_STEP_SHARE * median_step_ns)
    skewed: dict[int, float] = {}
    for r in ranks[1:]:
        common = sorted(set(ref) & set(step_ends_ns[r]))
        if not common:
            continue
        offset = statistics.median(step_ends_ns[r][k] - ref[k] for k in common)
        if abs(offset) > limit:
            skewed[r] = offset
    if not skewed:
        return None
    worst = max(skewed, key=lambda r: abs(skewed[r]))
    return IntegrityProblem(
        id=TraceFindingId.CLOCK_SKEW,
        message=(
            f"ranks' clocks disagree: rank {worst}'s steps end {skewed[worst] / 1e6:+.1f} ms from "
            f"rank {ranks[0]}'s (median over common steps; DDP ends them together)"
        ),
        affects=["the cross-rank timeline (which rank waits when)"],
        count=len(skewed),
        rank=worst,
    )
