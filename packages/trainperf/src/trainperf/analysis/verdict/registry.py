"""The verdict's default rules, :data:`VERDICT_RULES`, in the order the verdict runs them.

That is the order of :func:`trainperf.analysis.verdict.judge`: each rule's module defines it, this
list orders them; a rule added from outside (``VERDICT_RULES.register(rule)``) runs after the
built-ins, and after any rule emitting an id it declares it reads or supersedes."""

from __future__ import annotations

from trainperf.analysis.verdict.cache_rule import cache_rule
from trainperf.analysis.verdict.compute_rule import compute_rule
from trainperf.analysis.verdict.contention_rule import contention_rule
from trainperf.analysis.verdict.context import VerdictContext
from trainperf.analysis.verdict.gpu_rules import gpu_class_rule, gpu_waits_rule
from trainperf.analysis.verdict.record_rules import (
    alerts_rule,
    memory_creep_rule,
    recompiles_rule,
)
from trainperf.analysis.verdict.slow_epoch_rule import slow_epoch_rule
from trainperf.analysis.verdict.sources import (
    baseline_rule,
    process_memory_growth_rule,
    resources_rule,
    trace_rule,
    worker_memory_rule,
)
from trainperf.analysis.verdict.stage_rules import (
    input_bound_rule,
    not_recorded_rule,
    phase_overheads_rule,
    slow_metric_rule,
    slow_postprocess_rule,
    straggler_rule,
)
from trainperf.core.rules import Registry

__all__ = ["VERDICT_RULES"]

#: The verdict's rules. ``default()`` is the list a run is judged with when none is given.
VERDICT_RULES: Registry[VerdictContext] = Registry("verdict")
VERDICT_RULES.add_builtin(
    input_bound_rule,
    slow_metric_rule,
    slow_postprocess_rule,
    compute_rule,
    phase_overheads_rule,
    straggler_rule,
    gpu_waits_rule,
    cache_rule,
    slow_epoch_rule,
    contention_rule,
    resources_rule,
    memory_creep_rule,
    recompiles_rule,
    worker_memory_rule,
    process_memory_growth_rule,
    alerts_rule,
    trace_rule,
    gpu_class_rule,
    baseline_rule,
    not_recorded_rule,
)
