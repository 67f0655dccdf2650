"""The verdict: one ranked list of findings from all of a run's evidence.

The evidence is the step-time attribution, the live clock's CUDA events, the resource samples, the
alerts, any profiler trace and the baseline comparison; findings rank by what each one's change
could recover (:mod:`.recoverable`: measured by ``trainperf try``, else a bound, else unknown; a
critical risk first), not by the share of time its cause costs. On a GPU the training stage is
classed by the GPU's busy share (:mod:`.gpu_rules`).

Advice names the run's own settings and their current values when ``.hydra/config.yaml`` was
recorded (``data.num_workers`` now 2), found by leaf name
(:func:`trainperf.analysis.config_keys.find_key`), so
it never names a key the run does not have; without a key it says the change in words. It is
phrased for the device the run used: CPU runs get CPU advice (cores shared by DataLoader workers
and compute threads, no AMP / pinned memory). Each finding also carries candidate changes
(:func:`trainperf.analysis.advice.candidates_for`) that ``trainperf try`` can measure. The rules are
in :mod:`.stage_rules` (per stage), :mod:`.compute_rule` (compute- or overhead-bound),
:mod:`.gpu_rules` (GPU busy share, waits, classes), :mod:`.cache_rule` (worker caches),
:mod:`.slow_epoch_rule` (an epoch far slower than the others), :mod:`.contention_rule`,
:mod:`.sources` (resources, memory, trace, baseline) and :mod:`.record_rules` (growth scans,
recompiles, alerts); each is a :class:`~trainperf.core.rules.Rule` over one
:class:`.context.VerdictContext`, and :data:`.registry.VERDICT_RULES` holds the default list.

How a verdict is made: the rules run in the registry's order, except that a rule that reads or
supersedes an id runs after the rules that emit it (:func:`trainperf.core.rules.ordered`); then
two fixed steps: one finding per cause (:func:`.sources.merge_same_cause`: a trace's finding
keeps a cause the live clock also found) and the ranking by what each change could recover
(:func:`.recoverable.assess`). ``docs/toolkit/rules.md`` shows how to add a rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainperf.analysis.gpu_wait import gpu_waits
from trainperf.analysis.run import RunData
from trainperf.analysis.stages import (
    StageSummary,
    move_profiler_overhead,
    split_warmup,
    summarize_stages,
)
from trainperf.analysis.verdict import gpu_rules
from trainperf.analysis.verdict.context import AdviceNames, VerdictContext
from trainperf.analysis.verdict.recoverable import assess
from trainperf.analysis.verdict.registry import VERDICT_RULES
from trainperf.analysis.verdict.sources import merge_same_cause
from trainperf.core.findings import Finding
from trainperf.core.rules import Rule, evaluate
from trainperf.core.stage import Stage

__all__ = ["VERDICT_RULES", "VerdictContext", "context_of", "judge", "stages_of", "verdict_of"]


def stages_of(run: RunData) -> dict[Stage, StageSummary]:
    """The run's per-stage summaries as the report shows them: warm-up epochs left out, the
    profiler windows' own cost moved to a line of its own."""
    stages = summarize_stages(run.epochs, run.recompiles)
    move_profiler_overhead(stages, run.profiler_windows)
    return stages


def context_of(run: RunData, stages: dict[Stage, StageSummary]) -> VerdictContext:
    """The verdict's context for ``run`` and its ``stages``: how advice names its settings, the
    GPU's bf16 and the training step's busy share (:mod:`.gpu_rules`) and the steady epochs' waits
    for the GPU, worked out once (the report shows the same waits)."""
    names = AdviceNames(run, run.trace)
    names.cuda_bf16, names.cuda_bf16_how = gpu_rules.cuda_bf16(run.run_info)
    names.gpu_busy = gpu_rules.gpu_busy(run, run.trace)
    waits = gpu_waits(split_warmup(run.epochs, run.recompiles)[0])
    return VerdictContext(run, stages, sum(s.wall_s for s in stages.values()), names, waits)


def judge(
    run: RunData,
    stages: dict[Stage, StageSummary] | None = None,
    *,
    rules: Sequence[Rule[VerdictContext]] | None = None,
) -> list[Finding]:
    """The ranked verdict for a loaded run (see the module doc for the ranking); reads no file:
    the run's trace analysis (``None``: the profiler windows' summaries stand in), epoch scans,
    ``trainperf try`` session and baseline outcome were loaded with it
    (:func:`~trainperf.analysis.run.load_run`). ``stages``: its summaries, worked out as the
    report does when not given (:func:`stages_of`); ``rules``: the rules to run, else
    ``VERDICT_RULES.default()``."""
    return verdict_of(context_of(run, stages_of(run) if stages is None else stages), rules)


def verdict_of(
    ctx: VerdictContext, rules: Sequence[Rule[VerdictContext]] | None = None
) -> list[Finding]:
    """The ranked verdict of a fresh context (:func:`context_of`; :func:`judge` makes one):
    ``rules`` (else ``VERDICT_RULES.default()``) run on it, then one finding per cause and the
    ranking."""
    chosen = VERDICT_RULES.default() if rules is None else list(rules)
    found = evaluate(chosen, ctx, ctx.earlier)
    return assess(merge_same_cause(found), ctx.run, ctx.stages, ctx.total_s)
