"""Alert rules that fire once, with evidence, and resolve; state kept client-side (works offline).
Modules: ``engine`` (state machine, ``Rule`` base, engine), ``rules`` (the catalogue), ``sinks``
(log, ``alerts.jsonl``, wandb) and ``findings`` (events -> verdict findings per rank and rule).
"""

from __future__ import annotations

from trainperf.alerts.as_findings import alert_finding, alert_findings
from trainperf.alerts.engine import (
    AlertEngine,
    Check,
    Rule,
    RuleContext,
    RuleState,
    StragglerSignal,
)
from trainperf.alerts.rules import RULES, build_rules
from trainperf.alerts.sinks import AlertSink, AlertWarning, JsonlSink, LogSink, WandbSink
from trainperf.records.monitoring import AlertEvent

__all__ = [
    "RULES",
    "AlertEngine",
    "AlertEvent",
    "AlertSink",
    "AlertWarning",
    "Check",
    "JsonlSink",
    "LogSink",
    "Rule",
    "RuleContext",
    "RuleState",
    "StragglerSignal",
    "WandbSink",
    "alert_finding",
    "alert_findings",
    "build_rules",
]
