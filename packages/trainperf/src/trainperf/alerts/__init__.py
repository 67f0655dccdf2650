"""Live alert rules that fire once, with evidence, and resolve.

Their state is kept client-side, so they work offline.

Modules: ``engine`` (the ``Rule`` base, each rule's state machine, the engine), ``catalogue``
(the registry ``ALERT_RULES``, ``build_rules``; its old path ``trainperf.alerts.rules`` works
until 0.3 with a ``DeprecationWarning``), ``resource_rules`` and ``run_rules``
(the built-in rules), ``sinks`` (log, ``alerts.jsonl``, wandb) and ``as_findings`` (events ->
verdict findings per rank and rule).
"""

from __future__ import annotations

from trainperf.alerts.as_findings import alert_finding, alert_findings
from trainperf.alerts.catalogue import ALERT_RULES, RULES, AlertRegistry, build_rules
from trainperf.alerts.engine import (
    AlertEngine,
    AlertWindow,
    Check,
    Rule,
    RuleContext,
    RuleState,
    StragglerSignal,
)
from trainperf.alerts.sinks import AlertSink, AlertWarning, JsonlSink, LogSink, WandbSink
from trainperf.records.monitoring import AlertEvent

__all__ = [
    "ALERT_RULES",
    "RULES",
    "AlertEngine",
    "AlertEvent",
    "AlertRegistry",
    "AlertSink",
    "AlertWarning",
    "AlertWindow",
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
