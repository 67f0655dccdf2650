"""Verdict rules over the run's other records: growth scans, recompiles and live alerts.

Memory growth named by attribute (``perf/growth.jsonl``), recompiles (``perf/recompiles.jsonl``;
both from ``EpochScanCallback``) and the live alerts (``perf/alerts.jsonl``), each a
:class:`~trainperf.core.rules.Rule` over the :class:`.context.VerdictContext`."""

from __future__ import annotations

from trainperf.alerts import RULES, alert_findings
from trainperf.analysis.memory_growth.attributes import growth_findings_of
from trainperf.analysis.recompile_rules import recompile_findings_of
from trainperf.analysis.verdict.context import VerdictContext, world_size
from trainperf.core.finding_ids import AlertName, FindingId, alert_finding_id
from trainperf.core.findings import Finding
from trainperf.core.rules import function_rule

__all__ = ["ALERTS_CORROBORATE", "alerts_rule", "memory_creep_rule", "recompiles_rule"]


@function_rule(FindingId.MEMORY_CREEP, emits={FindingId.MEMORY_CREEP})
def memory_creep_rule(ctx: VerdictContext) -> list[Finding]:
    """Memory that grows epoch after epoch, named by the attribute that holds it."""
    return growth_findings_of(ctx.run.growth)


@function_rule(FindingId.RECOMPILES, emits={FindingId.RECOMPILES})
def recompiles_rule(ctx: VerdictContext) -> list[Finding]:
    """Dynamo recompiling, and the time it took (the run's recorded wall time is the base)."""
    return recompile_findings_of(ctx.run.recompiles, ctx.total_s)


#: The finding ids the alert rules of the catalogue corroborate (an alert of such a rule is
#: attached to that finding instead of standing alone).
ALERTS_CORROBORATE = frozenset(m.corroborates for m in RULES.values() if m.corroborates)


@function_rule(
    "alerts",
    emits={alert_finding_id(n) for n in AlertName},
    reads=ALERTS_CORROBORATE,
)
def alerts_rule(ctx: VerdictContext) -> list[Finding]:
    """One finding per (rank, alert rule) that fired, or a line of corroboration on the finding
    its rule corroborates (:func:`trainperf.alerts.alert_findings`)."""
    corroborated = ctx.earlier.of(*ALERTS_CORROBORATE)
    return alert_findings(ctx.run.alerts, corroborated, world_size(ctx.run))
