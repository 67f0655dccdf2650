"""Whether a trace can be trusted: the problems found in what it holds, each with the figures it
makes less certain.

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
from collections.abc import Callable, Mapping, Sequence

import msgspec
import numpy as np

from ocr.perf.trace.steps import StepTable, launch_calls, locate
from ocr.perf.trace.table import EventTable, Kind

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


def check_integrity(table: EventTable, steps: StepTable) -> Integrity:
    """Every per-file check of the module doc over ``table`` and its ``steps``."""
    problems: list[IntegrityProblem] = []
    for src in range(len(table.sources)):
        for check in _CHECKS:
            found = check(table, steps, src)
            if found is not None:
                problems.append(found)
    return Integrity.of(problems)


def _problem(
    table: EventTable,
    src: int,
    id: str,
    message: str,
    affects: list[str],
    count: int,
    share_pct: float | None = None,
) -> IntegrityProblem:
    """A problem of source ``src`` (its file name and rank filled in)."""
    source = table.sources[src]
    return IntegrityProblem(
        id=id,
        message=message,
        affects=affects,
        count=count,
        share_pct=share_pct,
        source=source.path.name,
        rank=source.rank,
    )


def _outside_steps(table: EventTable, steps: StepTable, src: int) -> IntegrityProblem | None:
    if not (steps.src == src).any():
        return None  # without steps every figure is over the whole trace
    # what the op tables count (the profiler's own runtime calls at its stop are no problem)
    host = np.flatnonzero(
        (table.src == src) & np.isin(table.kind, (Kind.CPU_OP, Kind.USER_ANNOTATION))
    )
    total = int(table.self_ns[host].sum())
    if not total:
        return None
    step_of, _ = locate(steps, table, host)
    out = host[step_of < 0]
    share = 100.0 * float(table.self_ns[out].sum()) / total
    if share < OUTSIDE_STEPS_PCT:
        return None
    return _problem(
        table,
        src,
        id="events_outside_steps",
        message=(
            f"{table.sources[src].path.name}: {out.size} host events ({share:.1f}% of host time) "
            "lie outside every step"
        ),
        affects=["top_cpu_ops", "top_annotations", "top_cuda_ops"],
        count=int(out.size),
        share_pct=round(share, 2),
    )


def _unlinked_device(table: EventTable, steps: StepTable, src: int) -> IntegrityProblem | None:
    dev = np.flatnonzero((table.src == src) & np.isin(table.kind, Kind.DEVICE))
    total = int(table.dur[dev].sum())
    if not total:
        return None
    lost = dev[launch_calls(table, dev) < 0]
    share = 100.0 * float(table.dur[lost].sum()) / total
    if share < UNLINKED_DEVICE_PCT:
        return None
    return _problem(
        table,
        src,
        id="unlinked_device_events",
        message=(
            f"{table.sources[src].path.name}: {lost.size} device events ({share:.1f}% of device "
            "time) have no launching call in the trace (dropped correlation)"
        ),
        affects=["steps.gpu_phases_ms", "phase_summary.gpu_phases", "top_cuda_ops.launched_by"],
        count=int(lost.size),
        share_pct=round(share, 2),
    )


def _cut_steps(table: EventTable, steps: StepTable, src: int) -> IntegrityProblem | None:
    rows = np.flatnonzero(steps.src == src)
    if rows.size == 0:
        return None
    host = (table.src == src) & np.isin(table.kind, Kind.HOST) & (table.dur > 0)
    ends = table.start + table.dur
    launches = table.name_ids(lambda n: n in _RUNTIME_LAUNCH)
    dev = np.flatnonzero((table.src == src) & np.isin(table.kind, Kind.DEVICE))
    launched = set(table.correlation[dev].tolist()) if dev.size else set()
    cut: list[str] = []
    # the window's edge cuts the last step of each thread (stop mid-step)
    last: dict[int, int] = {}
    for i in rows.tolist():
        t = int(steps.thread[i])
        if t not in last or steps.start[i] > steps.start[last[t]]:
            last[t] = i
    for i in last.values():
        s, e = int(steps.start[i]), int(steps.end[i])
        inside = host & (table.thread == steps.thread[i]) & (table.start > s) & (table.start < e)
        closed_with_it = inside & (np.abs(ends - e) <= CUT_TOLERANCE_NS)
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
            cut.append(steps.label[i])
    if not cut:
        return None
    return _problem(
        table,
        src,
        id="cut_steps",
        message=(
            f"{table.sources[src].path.name}: {', '.join(cut)} cut by the window's edge (spans "
            "closed with the step or kernels it launched missing)"
        ),
        affects=["steps", "step_stats", "phase_summary"],
        count=len(cut),
    )


def _mixed_processes(table: EventTable, steps: StepTable, src: int) -> IntegrityProblem | None:
    host = (table.src == src) & np.isin(table.kind, (Kind.CPU_OP, Kind.USER_ANNOTATION))
    threads = np.unique(table.thread[host])
    pids = sorted({table.thread_keys[t][1] for t in threads.tolist()})
    if len(pids) < 2:
        return None
    step_pids = sorted({table.thread_keys[int(t)][1] for t in steps.thread[steps.src == src]})
    return _problem(
        table,
        src,
        id="mixed_processes",
        message=(
            f"{table.sources[src].path.name}: host events of {len(pids)} processes in one file "
            f"(pids {', '.join(pids[:4])}{'...' if len(pids) > 4 else ''}; "
            f"{len(step_pids)} with steps): ranks or runs mixed"
        ),
        affects=["steps", "phase_summary", "per_rank", "top_cpu_ops"],
        count=len(pids),
    )


def _invalid_durations(table: EventTable, steps: StepTable, src: int) -> IntegrityProblem | None:
    source = table.sources[src]
    invalid = source.invalid_durations
    mine = np.flatnonzero(table.src == src)
    implausible = 0
    if mine.size:
        starts = table.start[mine]
        span = int(starts.max() - starts.min())
        limit = max(IMPLAUSIBLE_FACTOR * span, IMPLAUSIBLE_MIN_NS)
        implausible = int((table.dur[mine] > limit).sum())
    if not invalid and not implausible:
        return None
    parts = []
    if invalid:
        parts.append(f"{invalid} negative, missing or overflowing (counted as zero)")
    if implausible:
        parts.append(f"{implausible} longer than twice the whole trace")
    return _problem(
        table,
        src,
        id="invalid_durations",
        message=f"{source.path.name}: event durations {' and '.join(parts)}",
        affects=["top_cpu_ops", "top_cuda_ops", "steps", "summary.span_ms"],
        count=invalid + implausible,
    )


def _no_device_timeline(table: EventTable, steps: StepTable, src: int) -> IntegrityProblem | None:
    mine = table.src == src
    if (mine & np.isin(table.kind, Kind.DEVICE)).any():
        return None
    launches = table.name_ids(lambda n: n in _RUNTIME_LAUNCH)
    n_launch = int((mine & (table.kind == Kind.RUNTIME) & launches[table.name]).sum())
    gpus = [d for d in table.sources[src].device_properties if d.get("name")]
    if not n_launch and not gpus:
        return None
    why = f"{n_launch} kernel launches" if n_launch else f"{len(gpus)} GPUs listed"
    return _problem(
        table,
        src,
        id="no_device_timeline",
        message=(
            f"{table.sources[src].path.name}: a GPU run ({why}) without device events (CUDA "
            "activity not recorded)"
        ),
        affects=["top_cuda_ops", "metrics.gpu_busy_pct", "communication", "memory_peaks"],
        count=n_launch,
    )


_CHECKS: tuple[Callable[[EventTable, StepTable, int], IntegrityProblem | None], ...] = (
    _outside_steps,
    _unlinked_device,
    _cut_steps,
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
        id="clock_skew",
        message=(
            f"ranks' clocks disagree: rank {worst}'s steps end {skewed[worst] / 1e6:+.1f} ms from "
            f"rank {ranks[0]}'s (median over common steps; DDP ends them together)"
        ),
        affects=["the cross-rank timeline (which rank waits when)"],
        count=len(skewed),
        rank=worst,
    )
