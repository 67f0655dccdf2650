"""What each finding's change could recover, filled in one place after every rule has spoken.

The figures are :mod:`trainperf.core.findings`' ``recoverable_pct`` and ``recoverable_from``; the
severity is set from them and the ranking made by them (:func:`trainperf.core.findings.grade`:
critical from 20 % of the run, warning from 10 %, info below, a critical risk first whatever its
size).

- **measured**: ``trainperf try`` recommended one of the finding's candidates in the run's latest
  session (``perf/try.jsonl``): the time it saves, ``1 - 1 / speed-up`` of the finding's stage, as
  a share of the run, counted by that size (a 0.6 % gain is 0.6 %, below any larger bound); when
  every candidate was measured and none helped (a regression, no change), 0 (measured); a gain
  inside the noise (inconclusive) leaves the finding its bound.
- **bound**, set by the rule that knows it (the GPU rules: a wait no longer than the GPU's idle
  time; the optimizer's own host time), else the finding's score: the share of time its cause
  costs, which removing or overlapping the cause saves at most (data wait, a slow phase, a
  straggler's excess).
- **risk**: a run that may die (:data:`RISK_IDS`, every ``alert:``): its risk score.
- **unknown**: :data:`UNKNOWN_HEADROOM`, causes that cost time without a figure for what a change
  wins (compute-bound: faster kernels may or may not exist; channels_last without a trace).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from trainperf.analysis.run import RunData
from trainperf.analysis.stages import StageSummary
from trainperf.analysis.trace.trace_metrics import TRACE_RISKS
from trainperf.analysis.trials import quality_drop
from trainperf.analysis.verdict.context import score
from trainperf.core.finding_ids import ALERT_PREFIX, FindingId, in_verdict
from trainperf.core.findings import Finding, grade, share_of_run
from trainperf.core.significance import Outcome
from trainperf.core.stage import STAGE_ORDER, Stage
from trainperf.records.try_record import TryRecord

#: Findings about a run that may die or give garbage: ranked by their risk score.
#: The trace's own risks are its rules' (:data:`~trainperf.analysis.trace.trace_rules.TRACE_RISKS`).
RISK_IDS = frozenset(
    {
        FindingId.MEMORY_CREEP,
        FindingId.PROCESS_MEMORY_GROWTH,
        FindingId.WORKER_MEMORY,
        FindingId.HOST_MEMORY_HIGH,
    }
    | {in_verdict(i) for i in TRACE_RISKS}
)

#: Findings whose cause costs time but whose change has no bound here.
UNKNOWN_HEADROOM = frozenset(
    {FindingId.COMPUTE_BOUND, FindingId.SLOW_KERNELS, FindingId.LAYOUT_CONVERSION}
)

#: Findings about how the run was measured, not about a change to it: nothing to recover (the
#: verdict's sentence carries them as a caveat instead).
CAVEAT_IDS = frozenset({FindingId.CPU_CONTENTION})

#: Outcomes of a measured change that say it did not help.
_NO_GAIN = frozenset({str(Outcome.NO_CHANGE), str(Outcome.REGRESSION)})  # and a quality drop


def _records(run: RunData) -> list[TryRecord]:
    # an unreadable perf/try.jsonl loads as no session: the "Measured changes" section says why
    return [r for r in run.try_session if r.kind == "candidate"]


def _measured(
    f: Finding, records: Sequence[TryRecord], stage_share: float
) -> tuple[float, TryRecord | None] | None:
    """(recovered % of the run, the record) of ``f``'s best recommended candidate; ``(0,
    None)`` when every candidate was measured without a gain; ``None`` when not measured."""
    changes = {x for c in f.candidates for x in (c.override, c.knob.text if c.knob else None) if x}
    if not changes:
        return None
    mine = [r for r in records if r.override in changes]
    won = [r for r in mine if r.status == "recommended" and r.median and r.median > 1.0]
    if won:
        best = max(won, key=lambda r: r.median or 0.0)
        saved = 100.0 * (1.0 - 1.0 / (best.median or 1.0))
        return share_of_run(saved, stage_share), best
    tried = {r.override for r in mine if r.status in _NO_GAIN or quality_drop(r.status)}
    return (0.0, None) if tried >= changes else None


def assess(
    findings: list[Finding],
    run: RunData,
    stages: dict[Stage, StageSummary],
    total_s: float,
) -> list[Finding]:
    """``findings`` with their recoverable figure filled (see the module doc), their severity
    set from it and ranked (:func:`~trainperf.core.findings.grade`)."""
    records = _records(run)
    out = []
    for f in findings:
        stage = stages.get(Stage(f.stage)) if f.stage in STAGE_ORDER else None
        stage = stage or stages.get(Stage.TRAIN)
        share = score(stage.wall_s, total_s) if stage is not None else 100.0
        measured = _measured(f, records, share) if records else None
        if measured is not None:
            pct, record = measured
            evidence = dict(f.evidence)
            if record is not None:
                evidence["measured_change"] = record.override
                evidence["measured_speedup"] = round(record.median or 1.0, 3)
            f = replace(f, recoverable_pct=pct, recoverable_from="measured", evidence=evidence)
        elif f.recoverable_pct is not None:
            pass  # the rule bounded it
        elif f.id in CAVEAT_IDS:
            f = replace(f, recoverable_pct=0.0, recoverable_from="bound")
        elif f.id in UNKNOWN_HEADROOM:
            f = replace(f, recoverable_from="unknown")
        elif f.id in RISK_IDS or f.id.startswith(ALERT_PREFIX):
            f = replace(f, recoverable_pct=f.score, recoverable_from="risk")
        else:
            f = replace(f, recoverable_pct=f.score, recoverable_from="bound")
        out.append(f)
    return grade(out)
