"""The verdict: one ranked list of findings from the step-time attribution, the resource samples,
the alerts, any profiler trace and the baseline comparison, sorted by score (the share of the
run's recorded wall time its cause accounts for; a risk scores 100 when critical, 10 as a
warning: :mod:`ocr.perf.findings`), then severity, then id.

Advice names the run's own settings and their current values when ``.hydra/config.yaml`` was
recorded (``data.num_workers`` now 2), found by leaf name (:func:`ocr.perf.advice.find_key`), so
it never names a key the run does not have; without a key it says the change in words. It is
phrased for the device the run used: CPU runs get CPU advice (cores shared by DataLoader workers
and compute threads, no AMP / pinned memory). Each finding also carries candidate changes
(:func:`ocr.perf.advice.candidates_for`) that ``ocr-perf try`` can measure. The rules are in
:mod:`.stage_rules` (per stage), :mod:`.sources` (resources, trace, baseline) and :mod:`.context`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ocr.perf.alerts import alert_findings
from ocr.perf.findings import SEVERITY_ORDER, Finding
from ocr.perf.growth import growth_findings
from ocr.perf.recompiles import recompile_findings
from ocr.perf.records import RunDirError
from ocr.perf.report.load import ReportInputError, RunData
from ocr.perf.report.stages import StageSummary
from ocr.perf.report.verdict import sources
from ocr.perf.report.verdict import stage_rules as rules
from ocr.perf.report.verdict.context import Settings, world_size
from ocr.perf.stage import Stage

if TYPE_CHECKING:
    from ocr.perf.gate import GateOutcome
    from ocr.perf.trace.result import TraceAnalysis

__all__ = ["judge"]


def judge(
    run: RunData,
    stages: dict[Stage, StageSummary],
    trace: TraceAnalysis | None = None,
    baseline: GateOutcome | None = None,
) -> list[Finding]:
    """The ranked verdict for a loaded run (see the module doc for the ranking). ``trace``: the
    profiler trace's analysis (``None``: the profiler windows' summaries stand in);
    ``baseline``: the gate's outcome, if a baseline was given."""
    adv = Settings(run)
    total_s = sum(s.wall_s for s in stages.values())
    findings: list[Finding] = []
    for s in stages.values():
        findings += [f for rule in rules.ONE_FINDING_RULES if (f := rule(s, run, adv, total_s))]
        findings += rules.overheads(s, adv, total_s)
        if (f := rules.straggler(s, total_s)) is not None:
            findings.append(f)
    findings.extend(rules.cache(run, stages, adv, total_s))
    findings.extend(sources.resource_findings(run, stages, adv, total_s))
    # memory creep named by attribute, recompiles (EpochScanCallback's records), before the
    # alerts: the memory_creep alert corroborates its finding
    try:
        findings.extend(growth_findings(run.run_dir) + recompile_findings(run.run_dir, total_s))
    except RunDirError as exc:  # a malformed record, named with its file
        raise ReportInputError(str(exc)) from exc
    # workers' memory classified; main-process growth that no attribute explains
    explained = any(f.id == "memory_creep" for f in findings)
    findings.extend(sources.memory_findings(run, stages, adv, explained))
    findings.extend(alert_findings(run.alerts, findings, world_size(run)))
    findings.extend(sources.trace_findings(trace, run, adv, findings, total_s, stages))
    findings.extend(sources.baseline_findings(baseline, adv))
    if not stages:
        findings.append(
            Finding(
                id="not_recorded",
                severity="info",
                score=0.0,
                title="no step-time attribution was recorded for this run",
                evidence={},
                threshold={},
                suggestion=(
                    "attach the performance callbacks (PerformanceProfilerCallback; with "
                    "ocr-train: callbacks=monitoring) so each epoch's time is attributed to "
                    "phases."
                ),
                source="step-time",
            )
        )
    findings.sort(key=lambda f: (-f.score, SEVERITY_ORDER.get(f.severity, 3), f.id, f.stage or ""))
    return findings
