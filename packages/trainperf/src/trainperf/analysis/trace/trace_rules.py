"""The trace rules' registry, :data:`TRACE_RULES`, and :func:`evaluate`, which runs them.

:data:`TRACE_RULES` holds the default list, in the order their findings are reported among equals;
:func:`evaluate` runs a list of rules on a trace's figures.

A trace rule is a :class:`~trainperf.core.rules.Rule` over
:class:`~trainperf.analysis.trace.trace_metrics.TraceContext` (the figures, and the earlier
findings it declares it reads). The built-in rules live in
:mod:`~trainperf.analysis.trace.input_gpu_rules` and :mod:`~trainperf.analysis.trace.host_rules`;
a rule of your own goes in a list (``analyze_path(path, rules=[*TRACE_RULES.default(), mine])``)
or in the registry for every later analysis (``TRACE_RULES.register(mine)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainperf.analysis.trace import host_rules as _host
from trainperf.analysis.trace import input_gpu_rules as _input_gpu
from trainperf.analysis.trace.trace_metrics import TraceContext
from trainperf.core.findings import SEVERITY_ORDER, Finding
from trainperf.core.moved import moved_module
from trainperf.core.rules import Registry, Rule
from trainperf.core.rules import evaluate as run_rules

if TYPE_CHECKING:  # bound at run time only through the old path below, which warns
    from trainperf.analysis.trace.trace_metrics import TraceMetrics

__all__ = ["TRACE_RULES", "TraceRule", "evaluate"]

# These names lived here until the rules' figures moved to trace_metrics (works until 0.3).
__getattr__ = moved_module(
    __name__,
    "trainperf.analysis.trace.trace_metrics",
    only={"COMM_ONE_RANK_HINT", "TRACE_RISKS", "TraceMetrics"},
)

#: A trace rule: reads a :class:`TraceContext`, returns findings.
TraceRule = Rule[TraceContext]

#: The trace rules every analysis runs unless given its own list.
TRACE_RULES: Registry[TraceContext] = Registry("trace")
TRACE_RULES.add_builtin(
    _input_gpu.data_loading_rule,
    _input_gpu.communication_bound_rule,
    _input_gpu.gpu_utilisation_rule,
    _input_gpu.memory_near_capacity_rule,
    _host.host_sync_rule,
    _host.fp16_scaler_rule,
    _host.optimizer_host_bound_rule,
    _input_gpu.layout_conversion_rule,
    _input_gpu.launch_overhead_rule,
    _host.dispatch_overhead_rule,
    _host.optimizer_not_multi_tensor_rule,
)


def evaluate(metrics: TraceMetrics, rules: Sequence[TraceRule] | None = None) -> list[Finding]:
    """Every finding of ``rules`` (default :data:`TRACE_RULES`) on ``metrics``, most severe
    first, then in the order of ``rules`` (a rule that reads or supersedes another's id runs
    after it, but its finding is listed where the rule stands). A superseding finding
    (``optimizer_host_bound`` over ``optimizer_not_multi_tensor``: one cause of one optimizer)
    drops the findings it supersedes."""
    chosen = TRACE_RULES.default() if rules is None else list(rules)
    place: dict[str, int] = {}
    for i, rule in enumerate(chosen):
        for finding_id in rule.emits:
            place.setdefault(finding_id, i)
    context = TraceContext(metrics)
    found = run_rules(chosen, context, context.earlier)
    return sorted(found, key=lambda f: (SEVERITY_ORDER[f.severity], place.get(f.id, len(chosen))))
