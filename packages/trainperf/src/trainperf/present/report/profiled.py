"""What the profiler windows changed in a run, so the report does not blame the training for it.

Profiled steps are slower, and the phase clock books the trace export and analysis under
``callbacks`` (they run in ``ProfilerCallback``'s hooks). From ``perf/profiler.jsonl`` this marks
the profiled batches among the outliers and moves the export and analysis to a phase-table line
of their own.
"""

from __future__ import annotations

from trainperf.analysis.run import RunData
from trainperf.analysis.stages import StageSummary
from trainperf.core.stage import Stage

#: The phase-table line that holds the profiler's own cost (not a phase of the live clock).
PROFILER_PHASE = "profiler"


def profiled_batches(run: RunData) -> set[tuple[Stage, int, int]]:
    """``(stage, epoch, batch index)`` of every batch a profiler window recorded."""
    out: set[tuple[Stage, int, int]] = set()
    for w in run.profiler_windows:
        if w.epoch is not None:
            out.update((w.stage, w.epoch, b) for b in w.batch_indices())
    return out


def move_profiler_overhead(stages: dict[Stage, StageSummary], run: RunData) -> None:
    """Move each stage's profiler cost from ``callbacks`` to its own :data:`PROFILER_PHASE` line
    (never more than ``callbacks`` holds: the clock may not have run during a window)."""
    overhead: dict[Stage, float] = {}  # trace export and analysis, summed over the windows
    for w in run.profiler_windows:
        overhead[w.stage] = overhead.get(w.stage, 0.0) + sum(w.overhead_s.values())
    for stage, secs in overhead.items():
        summary = stages.get(stage)
        if summary is None or secs <= 0:
            continue
        take = min(secs, summary.phases_s.get("callbacks", 0.0))
        if take <= 0:
            continue
        summary.phases_s["callbacks"] = summary.phases_s.get("callbacks", 0.0) - take
        summary.phases_s[PROFILER_PHASE] = summary.phases_s.get(PROFILER_PHASE, 0.0) + take
