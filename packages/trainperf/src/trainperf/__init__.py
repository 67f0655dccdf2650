"""trainperf: why a PyTorch training or validation run is slow, and what to change.

Layers, each a package that imports only the ones below it (checked by import-linter in CI)::

    cli | lightning | loop | hf   commands; the adapters (callbacks, bars, the plain-loop Monitor)
    frameworks                    framework knowledge as data (Lightning's action names)
    recording                     what every adapter records the same way (stage windows, run files)
    present                       console output, the report document and its writers, tables
    analysis | probe              files in -> typed results out | in-process measurement
    alerts                        rules and engine
    records                       the run-folder contract (every record kind, the try results)
    core                          clock, stats, significance, stage, findings and their ids, rules
    errors                        the error types

The public API, importable from here without importing Lightning, Rich or matplotlib (each name
is loaded on first use), typed (the distribution ships ``py.typed``; ``mypy --strict`` checks a
script that uses it), version :data:`__version__`:

* instrumentation: :func:`perf_phase` (a phase of your own on the live clock),
  :func:`report_part` / :func:`report_count` (time and counts from DataLoader workers; counters
  named ``X_hits`` / ``X_misses`` give a hit rate);
* the adapters: :mod:`trainperf.lightning`, :mod:`trainperf.loop`, :mod:`trainperf.hf`;
* a run: :func:`load_run` (a run folder, loaded once) -> :class:`RunData`;
* the verdict: :func:`judge` -> a ranked list of :class:`Finding`, whose ``id`` is one of
  :class:`FindingId`, :class:`TraceFindingId` (``trace:``-prefixed in a verdict) or an alert's
  ``alert:`` + :class:`AlertName`;
* rules: :class:`Rule` (the one rule shape), :func:`function_rule` (a plain function as a
  rule), the registries with the default rules :data:`VERDICT_RULES`, :data:`TRACE_RULES`,
  :data:`ALERT_RULES` and the context each domain's rules read (:class:`VerdictContext`,
  :class:`TraceContext`, :class:`AlertWindow`): docs/toolkit/rules.md;
* traces: :func:`trace_analysis` -> the typed :class:`TraceAnalysis`; :func:`analyze_trace` -> the
  dict the original project documents (``top_cpu_ops`` as ``(op_name, time_us)`` pairs, ...);
* the regression gate: :func:`check_baseline` (a baseline file or run folder, and the current run)
  -> :class:`GateOutcome`;
* presentation: :func:`build_report` (pure: a loaded run in, a :class:`Report` out) and its
  writers :func:`to_html`, :func:`to_markdown`, :func:`write_html`;
* errors: :class:`InputError`, the base of every error the user can correct.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainperf.core.clock import perf_phase
from trainperf.core.lazy import lazy_getattr
from trainperf.errors import InputError
from trainperf.frameworks import register_known

#: The release (the distribution's version: packages/trainperf/pyproject.toml reads it from here).
__version__ = "0.2.0"

# Framework words reach the neutral layers as data (Lightning's action names for the live clock
# and ``analyze``), registered once here, so no entry point can miss them.
register_known()

# Each name's module, imported on first use.
_LAZY = {
    "report_part": "trainperf.probe.worker",
    "report_count": "trainperf.probe.worker",
    "load_run": "trainperf.analysis.run",
    "RunData": "trainperf.analysis.run",
    "analyze_trace": "trainperf.analysis.trace.analyze",
    "trace_analysis": "trainperf.analysis.trace.analyze",
    "TraceAnalysis": "trainperf.analysis.trace",
    "judge": "trainperf.analysis.verdict",
    "check_baseline": "trainperf.analysis.gate",
    "GateOutcome": "trainperf.analysis.gate",
    "build_report": "trainperf.present.report.build",
    "Report": "trainperf.present.report.build",
    "to_html": "trainperf.present.report.writers",
    "to_markdown": "trainperf.present.report.writers",
    "write_html": "trainperf.present.report.writers",
    "Finding": "trainperf.core.findings",
    "FindingId": "trainperf.core.finding_ids",
    "TraceFindingId": "trainperf.core.finding_ids",
    "AlertName": "trainperf.core.finding_ids",
    "Rule": "trainperf.core.rules",
    "function_rule": "trainperf.core.rules",
    # the registries with the default rules, and the context each domain's rules read
    "VERDICT_RULES": "trainperf.analysis.verdict",
    "VerdictContext": "trainperf.analysis.verdict",
    "TRACE_RULES": "trainperf.analysis.trace",
    "TraceContext": "trainperf.analysis.trace",
    "ALERT_RULES": "trainperf.alerts",
    "AlertWindow": "trainperf.alerts",
}

__all__ = [
    "ALERT_RULES",
    "TRACE_RULES",
    "VERDICT_RULES",
    "AlertName",
    "AlertWindow",
    "Finding",
    "FindingId",
    "GateOutcome",
    "InputError",
    "Report",
    "Rule",
    "RunData",
    "TraceAnalysis",
    "TraceContext",
    "TraceFindingId",
    "VerdictContext",
    "__version__",
    "analyze_trace",
    "build_report",
    "check_baseline",
    "function_rule",
    "judge",
    "load_run",
    "perf_phase",
    "report_count",
    "report_part",
    "to_html",
    "to_markdown",
    "trace_analysis",
    "write_html",
]

if TYPE_CHECKING:
    from trainperf.alerts import ALERT_RULES, AlertWindow
    from trainperf.analysis.gate import GateOutcome, check_baseline
    from trainperf.analysis.run import RunData, load_run
    from trainperf.analysis.trace import TRACE_RULES, TraceAnalysis, TraceContext
    from trainperf.analysis.trace.analyze import analyze_trace, trace_analysis
    from trainperf.analysis.verdict import VERDICT_RULES, VerdictContext, judge
    from trainperf.core.finding_ids import AlertName, FindingId, TraceFindingId
    from trainperf.core.findings import Finding
    from trainperf.core.rules import Rule, function_rule
    from trainperf.present.report.build import Report, build_report
    from trainperf.present.report.writers import to_html, to_markdown, write_html
    from trainperf.probe.worker import report_count, report_part


__getattr__ = lazy_getattr(__name__, _LAZY)
