"""Alert events as verdict findings: one ``alert:<rule>`` finding per (rank, rule).

Each finding carries the rule's metadata (risk, corroboration) from the catalogue.

Under DDP every rank appends to the same ``perf/alerts.jsonl``: a rule's events are kept apart
by the rank that saw them, so "still active at the end" and "fired 3x" describe one rank, and
the finding says which ("rank 1: alert gpu_starvation since epoch 2: ...").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from trainperf.alerts.catalogue import ALERT_RULES
from trainperf.core.finding_ids import alert_finding_id
from trainperf.core.findings import Finding, risk_score
from trainperf.records.monitoring import AlertEvent


def _when(events: Sequence[AlertEvent]) -> str:
    """``since epoch E`` (still active: E is the epoch of the firing that never resolved) or
    ``in epoch E`` / ``in epochs A-B`` (the epochs of its firings)."""
    fired = [e for e in events if e.event == "fired"]
    if events[-1].event == "fired":
        return f"since epoch {fired[-1].epoch}"
    first, last = fired[0].epoch, fired[-1].epoch
    return f"in epoch {first}" if first == last else f"in epochs {first}-{last}"


def alert_finding(events: Sequence[AlertEvent], rank: int | None = None) -> Finding | None:
    """One rule's events of one rank as an ``alert:<rule>`` finding (``None`` when it never
    fired), the rank named unless ``None``; score 0 (:func:`alert_findings` ranks it), confidence
    ``likely``: an alert judges sampling windows, not the whole run."""
    fired = [e for e in events if e.event == "fired"]
    if not fired:
        return None
    last = fired[-1]
    evidence: dict[str, float | str | int | bool | None] = {
        **last.evidence,
        "times_fired": len(fired),
        "still_active_at_end": events[-1].event == "fired",
    }
    message = last.message or "(no message)"
    title = f"alert {last.rule}: {message}"
    if rank is not None:
        evidence["rank"] = rank
        title = f"rank {rank}: alert {last.rule} {_when(events)}: {message}"
    return Finding(
        id=alert_finding_id(last.rule),
        severity="critical" if any(e.severity == "critical" for e in fired) else "warning",
        score=0.0,
        title=title,
        evidence=evidence,
        threshold=dict(last.threshold),
        suggestion=last.suggestion or "see the alert's message.",
        source="alerts",
        confidence="likely",
    )


def alert_findings(
    events: Sequence[AlertEvent], findings: Sequence[Finding], world_size: int = 1
) -> list[Finding]:
    """One finding per (rank, rule) that fired, scored against the time ``findings``: a rule
    marked ``risk`` in the catalogue scores by its severity (``risk_critical_score`` /
    ``risk_warning_score``), any other alert (a speed alert no time finding confirms has no
    measured share of the run) ``risk_warning_score``; an alert whose rule ``corroborates`` a
    finding present in ``findings`` (starvation for ``input_bound``) is attached to that
    finding's corroboration instead. Ranks are named when ``world_size`` > 1 or an event comes
    from a rank other than 0."""
    by_key: dict[tuple[int, str], list[AlertEvent]] = defaultdict(list)
    for e in events:
        by_key[(e.rank, e.rule)].append(e)
    named = world_size > 1 or any(rank != 0 for rank, _ in by_key)
    out: list[Finding] = []
    for rank, rule in sorted(by_key, key=lambda k: (k[1], k[0])):
        group = by_key[(rank, rule)]
        finding = alert_finding(group, rank if named else None)
        if finding is None:
            continue
        meta = ALERT_RULES.get(rule)
        related = next((f for f in findings if meta and f.id == meta.corroborates), None)
        if related is not None:
            fired = [e for e in group if e.event == "fired"]
            who, when = (f"rank {rank}: ", f" {_when(group)}") if named else ("", "")
            related.corroboration.append(
                f"{who}alert {rule} fired {len(fired)}x{when}: {fired[-1].message}"
            )
            continue
        risk = meta is not None and meta.risk
        out.append(replace(finding, score=risk_score(finding.severity if risk else "warning")))
    return out
