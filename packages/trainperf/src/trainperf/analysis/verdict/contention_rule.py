"""The ``cpu_contention`` finding: other processes held the host's CPUs while the run did not.

:mod:`trainperf.analysis.contention` judges the resource samples. A ``throughput_drop`` alert of the
same run is attached to the finding (the rule corroborates it), rather than standing alone."""

from __future__ import annotations

from trainperf.analysis.contention import Contention, summarize
from trainperf.analysis.run import RunData
from trainperf.analysis.verdict.context import VerdictContext, rounded
from trainperf.core.cpu_shares import OTHERS_PCT, SYSTEM_BUSY_PCT
from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding
from trainperf.core.rules import function_rule


def contention_finding(run: RunData) -> Finding | None:
    """``cpu_contention`` when at least a quarter of the running samples were contended; scored
    as that share times the others' median CPU (%): the part of the run's CPU they took."""
    cpu_count = run.run_info.cpu_count if run.run_info is not None else None
    return _finding(summarize(run.resources, cpu_count), cpu_count)


def _finding(found: Contention | None, cpu_count: int | None) -> Finding | None:
    """The finding of the samples as :func:`~trainperf.analysis.contention.summarize` judged
    them (:func:`contention_finding`)."""
    if found is None or not found.present:
        return None
    return Finding(
        id=FindingId.CPU_CONTENTION,
        severity="warning",
        score=rounded(found.share * found.others_median_pct) or 0.0,
        title=f"CPU contention: {found.sentence()}",
        evidence={
            "others_cpu_median_pct": rounded(found.others_median_pct),
            "run_cpu_median_pct": rounded(found.ours_median_pct),
            "system_cpu_median_pct": rounded(found.system_median_pct),
            "contended_samples": found.contended,
            "samples": found.samples,
            "cpu_count": cpu_count,
        },
        threshold={"system_busy_pct": SYSTEM_BUSY_PCT, "others_pct": OTHERS_PCT},
        suggestion=(
            "other processes on this host slowed the run: its timings (and a throughput drop "
            "in the same window) measure the machine's load, not the code. Measure again on an "
            "idle host or dedicated cores before acting on speed findings."
        ),
        source="resources",
        confidence="likely",
    )


@function_rule(FindingId.CPU_CONTENTION, emits={FindingId.CPU_CONTENTION})
def contention_rule(ctx: VerdictContext) -> Finding | None:
    """Other processes held the host's CPUs (:func:`contention_finding`, over the samples the
    context judged once)."""
    return _finding(ctx.names.contention, ctx.names.cpu_count)
