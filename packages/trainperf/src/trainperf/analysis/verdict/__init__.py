"""The verdict: one ranked list of findings from the step-time attribution, the live clock's CUDA
events, the resource samples, the alerts, any profiler trace and the baseline comparison, ranked
by what each finding's change could recover (:mod:`.recoverable`: measured by ``trainperf try``,
else a bound, else unknown; a critical risk first), not by the share of time its cause costs.
On a GPU the training stage is classed by the GPU's busy share (:mod:`.gpu_rules`).

Advice names the run's own settings and their current values when ``.hydra/config.yaml`` was
recorded (``data.num_workers`` now 2), found by leaf name
(:func:`trainperf.analysis.advice.find_key`), so
it never names a key the run does not have; without a key it says the change in words. It is
phrased for the device the run used: CPU runs get CPU advice (cores shared by DataLoader workers
and compute threads, no AMP / pinned memory). Each finding also carries candidate changes
(:func:`trainperf.analysis.advice.candidates_for`) that ``trainperf try`` can measure. The rules are
in :mod:`.stage_rules` (per stage), :mod:`.gpu_rules` (GPU busy share, waits, classes),
:mod:`.sources` (resources, trace, baseline), :mod:`.compute_rule` (compute- or
overhead-bound), :mod:`.slow_epoch_rule` (an epoch far slower than the others) and
:mod:`.context`.
"""

from __future__ import annotations

from trainperf.alerts import alert_findings
from trainperf.analysis.gpu_wait import gpu_waits
from trainperf.analysis.memory_growth.attributes import growth_findings_of
from trainperf.analysis.recompile_rules import recompile_findings_of
from trainperf.analysis.run import RunData, hint
from trainperf.analysis.stages import StageSummary, split_warmup
from trainperf.analysis.verdict import gpu_rules, sources
from trainperf.analysis.verdict import stage_rules as rules
from trainperf.analysis.verdict.context import Settings, score, world_size
from trainperf.analysis.verdict.recoverable import assess
from trainperf.analysis.verdict.slow_epoch_rule import slow_epoch_findings
from trainperf.core.findings import Finding, share_of_run
from trainperf.core.stage import Stage

__all__ = ["judge"]


def judge(run: RunData, stages: dict[Stage, StageSummary]) -> list[Finding]:
    """The ranked verdict for a loaded run and its stage summaries (see the module doc for the
    ranking); reads no file: the run's trace analysis (``None``: the profiler windows' summaries
    stand in), epoch scans, ``trainperf try`` session and baseline outcome were loaded with it
    (:func:`~trainperf.analysis.run.load_run`)."""
    trace = run.trace
    adv = Settings(run, trace)
    adv.cuda_bf16, adv.cuda_bf16_how = gpu_rules.cuda_bf16(run.run_info)
    adv.gpu_busy = gpu_rules.gpu_busy(run, trace)
    total_s = sum(s.wall_s for s in stages.values())
    findings: list[Finding] = []
    for s in stages.values():
        findings += [f for rule in rules.ONE_FINDING_RULES if (f := rule(s, run, adv, total_s))]
        findings += rules.overheads(s, adv, total_s)
        if (f := rules.straggler(s, total_s)) is not None:
            findings.append(f)
    train = stages.get(Stage.TRAIN)
    if run.device == "cuda" and train is not None:
        findings += _gpu_findings(train, run, adv, total_s)
    findings.extend(rules.cache(run, stages, adv, total_s))
    findings.extend(slow_epoch_findings(run, total_s))  # an epoch far slower, and why
    findings.extend(sources.resource_findings(run, stages, adv, total_s, findings))
    # memory creep named by attribute, recompiles (EpochScanCallback's records), before the
    # alerts: the memory_creep alert corroborates its finding
    findings.extend(growth_findings_of(run.growth) + recompile_findings_of(run.recompiles, total_s))
    # workers' memory classified; main-process growth that no attribute explains
    explained = any(f.id == "memory_creep" for f in findings)
    findings.extend(sources.memory_findings(run, stages, adv, explained))
    findings.extend(alert_findings(run.alerts, findings, world_size(run)))
    findings.extend(sources.trace_findings(trace, run, adv, findings, total_s, stages))
    findings = sources.merge_same_cause(findings)
    if train is not None and adv.gpu_busy is not None:
        classed = gpu_rules.gpu_class(train, adv.gpu_busy, adv, total_s, findings)
        if classed is not None:
            # the trace's low-utilisation finding is the same fact from one source
            same = [f for f in findings if f.id == "trace:low_gpu_utilisation"]
            classed.corroboration += [f"profiler trace: {f.title}" for f in same]
            findings = [f for f in findings if f not in same] + [classed]
    findings.extend(sources.baseline_findings(run.baseline, adv))
    if not stages:
        findings.append(
            Finding(
                id="not_recorded",
                severity="info",
                score=0.0,
                title="no step-time attribution was recorded for this run",
                evidence={},
                threshold={},
                suggestion=(f"{hint(run, 'record')} so each epoch's time is attributed to phases."),
                source="step-time",
            )
        )
    return assess(findings, run, stages, total_s)


def _gpu_findings(
    train: StageSummary, run: RunData, adv: Settings, total_s: float
) -> list[Finding]:
    """The training stage's waits for the GPU, the optimizer's host loop (both from the live
    clock's CUDA events) and the layout from the config (:mod:`.gpu_rules`)."""
    out: list[Finding] = []
    busy = adv.gpu_busy
    idle_run = (
        share_of_run(100.0 - busy.pct, score(train.wall_s, total_s)) if busy is not None else None
    )
    wait = gpu_waits(split_warmup(run.epochs, run.recompiles)[0]).get(Stage.TRAIN)
    if wait is not None:
        out += gpu_rules.wait_findings(train, wait, run, adv, total_s, idle_run)
        if (loop := gpu_rules.optimizer_loop(train, wait, run, adv, total_s, idle_run)) is not None:
            out.append(loop)
    if (layout := gpu_rules.layout(train, run, adv)) is not None:
        out.append(layout)
    return out
