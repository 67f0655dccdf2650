"""Alert rules that fire once, with evidence, and resolve: state kept client-side (works offline).

One job per module:

- :mod:`~ocr.perf.alerts.engine`: a rule's state machine (hold time, hysteresis, cool-down), the
  :class:`Rule` base (a rule owns its metadata) and the :class:`AlertEngine` that runs rules over
  samples and sends their events to sinks;
- :mod:`~ocr.perf.alerts.rules`: the catalogue, every default rule (:data:`RULES`) and
  :func:`build_rules`; adding a rule touches this file (and its test) only;
- :mod:`~ocr.perf.alerts.events`: the event and its ``perf/alerts.jsonl`` line (schema
  ``receipt-ocr/alert``), with the global rank of the process that saw it;
- :mod:`~ocr.perf.alerts.sinks`: the log, ``alerts.jsonl`` and ``wandb.alert`` (never an error
  offline or without wandb); a failing sink is one warning and then off;
- :mod:`~ocr.perf.alerts.findings`: events as verdict findings, one per (rank, rule).
"""

from __future__ import annotations

from ocr.perf.alerts.engine import (
    AlertEngine,
    Check,
    Rule,
    RuleContext,
    RuleState,
    StragglerSignal,
    ThresholdRule,
)
from ocr.perf.alerts.events import ALERT_SCHEMA, AlertEvent
from ocr.perf.alerts.findings import alert_finding, alert_findings
from ocr.perf.alerts.rules import RULES, build_rules, rule_defaults
from ocr.perf.alerts.sinks import AlertSink, AlertWarning, JsonlSink, LogSink, WandbSink

__all__ = [
    "ALERT_SCHEMA",
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
    "ThresholdRule",
    "WandbSink",
    "alert_finding",
    "alert_findings",
    "build_rules",
    "rule_defaults",
]
