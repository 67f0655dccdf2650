"""What the profiler windows changed in a run, so the report does not blame the training for it.

A profiled epoch is slower in the steps the profiler recorded (recording, and the trace export at
the window's last step) and the phase clock books the export and the analysis under
``callbacks``, since they run inside ``ProfilerCallback``'s hooks. ``perf/profiler.jsonl`` records
which batches each window covered (``batches``) and what the export and analysis cost
(``overhead_s``); this module turns those into the report's marks: the profiled batches (labelled
among the batch-time outliers) and a ``profiler`` line of its own in the phase table, taken out of
``callbacks``.
"""

from __future__ import annotations

from typing import Any

from ocr.perf.report.load import RunData
from ocr.perf.report.stages import StageSummary, num

__all__ = ["PROFILER_PHASE", "move_profiler_overhead", "profiled_batches", "profiler_overhead_s"]

#: The phase-table line that holds the profiler's own cost (not a phase of the live clock).
PROFILER_PHASE = "profiler"


def profiled_batches(run: RunData) -> set[tuple[str, int, int]]:
    """``(stage, epoch, batch index)`` of every batch a profiler window recorded."""
    out: set[tuple[str, int, int]] = set()
    for w in run.profiler_windows:
        batches = w.get("batches")
        if not (isinstance(batches, list) and len(batches) == 2):
            continue
        first, last = batches
        if not (isinstance(first, int) and isinstance(last, int)):
            continue
        epoch = w.get("epoch")
        if not isinstance(epoch, int):
            continue
        out.update((str(w.get("stage")), epoch, b) for b in range(first, last + 1))
    return out


def profiler_overhead_s(run: RunData) -> dict[str, float]:
    """Stage -> seconds of trace export and analysis, summed over its windows."""
    out: dict[str, float] = {}
    for w in run.profiler_windows:
        cost = w.get("overhead_s")
        if not isinstance(cost, dict):
            continue
        secs = sum(num(v) for v in cost.values())
        stage = str(w.get("stage"))
        out[stage] = out.get(stage, 0.0) + secs
    return out


def move_profiler_overhead(stages: dict[str, StageSummary], run: RunData) -> dict[str, float]:
    """Move each stage's profiler cost from ``callbacks`` to its own :data:`PROFILER_PHASE` line
    (never more than ``callbacks`` holds: the clock may not have run during a window). Returns the
    seconds moved per stage."""
    moved: dict[str, float] = {}
    for stage, secs in profiler_overhead_s(run).items():
        summary = stages.get(stage)
        if summary is None or secs <= 0:
            continue
        take = min(secs, summary.phases_s.get("callbacks", 0.0))
        if take <= 0:
            continue
        summary.phases_s["callbacks"] = summary.phases_s.get("callbacks", 0.0) - take
        summary.phases_s[PROFILER_PHASE] = summary.phases_s.get(PROFILER_PHASE, 0.0) + take
        moved[stage] = take
    return moved


def window_rows(run: RunData) -> list[dict[str, Any]]:
    """The windows' records with the fields the report shows, defaults for older records."""
    rows = []
    for w in run.profiler_windows:
        raw = w.get("overhead_s")
        cost: dict[str, Any] = raw if isinstance(raw, dict) else {}
        rows.append(
            {
                "stage": w.get("stage"),
                "epoch": w.get("epoch"),
                "trigger": w.get("trigger"),
                "reason": w.get("reason"),
                "steps": w.get("steps"),
                "batches": w.get("batches"),
                "export_s": cost.get("export"),
                "analysis_s": cost.get("analysis"),
                "traces": w.get("traces"),
                "clock_agreement": w.get("clock_agreement"),
            }
        )
    return rows
