"""The live phase clock's figures for traces written by ``ProfilerCallback``.

During a profiler window, :func:`compare_with_clock` sets the clock's per-step figures (taken by
:class:`trainperf.probe.clock_snapshots.ClockSnapshots`) beside the window's trace analysis.
Each profiler window appends one record to ``<run>/perf/profiler.jsonl`` with the clock's ms/step
per phase over the window's steps (``clock_agreement``). When ``trainperf analyze`` reads traces of
such a run, those figures are set beside the trace's again, pooled (step-weighted) over the windows
whose trace files are all among the analysed ones, so the printed breakdown shows one figure per
phase with the trace's detail beside it, and a disagreement is a finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainperf.analysis.trace.agreement import Agreement, compare_phases
from trainperf.analysis.trace.step_phases import PHASES
from trainperf.analysis.trace.trace_analysis import TraceAnalysis
from trainperf.records.files import read_records
from trainperf.records.monitoring import ProfilerWindow
from trainperf.records.schema import Record, RunDirError

__all__ = ["attach_clock_agreement", "compare_with_clock", "run_dir"]


def compare_with_clock(
    analysis: TraceAnalysis, clock_ns: Mapping[int, Mapping[str, int]], stage: str
) -> Agreement | None:
    """The analysis' steps of ``stage`` (analyzer stage name) against the live clock's figures
    for the same steps (``clock_ns``: step number -> clock phase -> ns, as
    :meth:`~trainperf.probe.clock_snapshots.ClockSnapshots.per_step_ns` gives them), both
    averaged over the steps that have both; ``None`` when no step of ``stage`` has a clock
    figure."""
    kept = [r for r in analysis.steps if r.stage == stage and r.number in clock_ns]
    if not kept:
        return None
    totals: dict[str, int] = {}
    for r in kept:
        for phase, ns in clock_ns[r.number].items():
            totals[phase] = totals.get(phase, 0) + ns
    clock_ms = {p: ns / len(kept) / 1e6 for p, ns in totals.items()}
    trace_ms = {p: sum(r.phases_ms.get(p, 0.0) for r in kept) / len(kept) for p in PHASES}
    return compare_phases(trace_ms, clock_ms, len(kept), stage)


def run_dir(files: list[Path], record: type[Record]) -> Path | None:
    """The run directory above the trace files: the nearest one (up to three levels up) with
    ``record``'s file."""
    return next((d for d in files[0].parents[:3] if record.path(d).is_file()), None)


def attach_clock_agreement(analysis: TraceAnalysis) -> None:
    """Add ``clock_agreement`` (and a measurement finding on disagreement) to ``analysis`` when
    its trace files come from profiler windows that recorded the clock. Leaves ``analysis``
    alone otherwise (foreign traces, runs without the clock, unreadable records)."""
    files = [Path(s.path).resolve() for s in analysis.sources if s.path]
    run = run_dir(files, ProfilerWindow) if files else None
    if run is None:
        return
    try:
        windows = read_records(ProfilerWindow.path(run), ProfilerWindow)
    except (RunDirError, OSError, ValueError):
        return  # the analysis stands on its own; the record is only a companion
    analysed = set(files)
    pooled: dict[str, list[dict[str, Any]]] = {}
    for w in windows:
        agreement = w.clock_agreement
        traces = [(run / t).resolve() for t in w.traces]
        if agreement is None or not traces or not set(traces) <= analysed:
            continue
        pooled.setdefault(w.stage.trace_name, []).append(agreement)
    stage = "train" if "train" in pooled else next(iter(sorted(pooled)), None)
    if stage is None:
        return
    steps = 0
    trace_ms: dict[str, float] = {}
    clock_ms: dict[str, float] = {}
    for agreement in pooled[stage]:
        n = int(agreement.get("steps") or 0)
        steps += n
        for row in agreement.get("phases") or []:
            phase = _OLD_NAMES.get(str(row["phase"]), str(row["phase"]))
            trace_ms[phase] = trace_ms.get(phase, 0.0) + n * float(row["trace_ms"])
            clock_ms[phase] = clock_ms.get(phase, 0.0) + n * float(row["clock_ms"])
    if not steps:
        return
    # clock figures are already pooled into trace phases, which are clock phase names
    result = compare_phases(
        {p: v / steps for p, v in trace_ms.items()},
        {p: v / steps for p, v in clock_ms.items()},
        steps,
        stage,
    )
    analysis.add_agreement(result)


# records written before the trace used the clock's phase names: old name -> clock name
_OLD_NAMES = {"data_loading": "data_wait", "hooks": "callbacks", "other": "unattributed"}
