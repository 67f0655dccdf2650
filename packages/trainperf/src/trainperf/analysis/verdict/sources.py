"""Verdict rules over the other evidence: resources, memory, the trace and the baseline.

Their findings rank with the stage rules'. The sources are the resource samples (CPU saturated, I/O
wait, host memory high; the workers' and the main process's memory), the profiler trace and its
windows' summaries, and the baseline comparison (a regression, or too little data to judge).
:func:`merge_same_cause` is the fixed step after the rules that keeps one finding per cause."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from trainperf.analysis.advice import candidates_for
from trainperf.analysis.memory_growth.process import process_growth, process_growth_finding
from trainperf.analysis.memory_growth.workers import classify_samples, worker_memory_finding
from trainperf.analysis.run import ReportInputError, RunData
from trainperf.analysis.stages import StageSummary
from trainperf.analysis.trace.trace_metrics import TRACE_RISKS
from trainperf.analysis.verdict.context import (
    AdviceNames,
    VerdictContext,
    resource_stat,
    rounded,
    score,
)
from trainperf.core.finding_ids import FindingId, TraceFindingId, in_verdict
from trainperf.core.findings import Finding, share_of_run, threshold
from trainperf.core.rules import function_rule
from trainperf.core.significance import Outcome
from trainperf.core.stage import STAGE_ORDER, Stage

if TYPE_CHECKING:
    from trainperf.analysis.gate import GateOutcome
    from trainperf.analysis.trace.trace_analysis import TraceAnalysis

_resource_finding = partial(Finding, source="resources", confidence="likely")


def resource_findings(
    run: RunData,
    stages: dict[Stage, StageSummary],
    names: AdviceNames,
    findings: Sequence[Finding] = (),
    contended: bool = False,
) -> list[Finding]:
    """CPU saturated, I/O wait and host memory from the resource samples. (The GPU's
    utilisation is a source of the GPU rules' busy share: :mod:`.gpu_rules`.) ``findings``: the
    stage rules' so far: the saturation finding never contradicts one that proposes workers;
    ``contended``: other processes held the cores (:mod:`.contention_rule`), which is that
    finding's to say, not saturation advice."""
    out: list[Finding] = []
    samples = run.resources
    cpu = resource_stat(samples, "resources/system_cpu_percent", STAGE_ORDER)
    if not contended and cpu is not None and cpu >= threshold("cpu_saturated_pct"):
        out.append(_cpu_saturated(cpu, run, stages, names, list(findings)))
    iowait = resource_stat(samples, "resources/iowait_percent", STAGE_ORDER)
    if iowait is not None and iowait >= threshold("iowait_pct"):
        out.append(
            _resource_finding(
                id=FindingId.IO_WAIT,
                severity="warning",
                score=rounded(iowait) or 0.0,
                title=f"I/O wait: the CPUs stall on disk {iowait:.0f} % of the time (median)",
                evidence={"iowait_median_pct": rounded(iowait)},
                threshold={"median_pct": threshold("iowait_pct")},
                suggestion=(
                    "the data sits on a slow disk: copy the dataset to local SSD / tmpfs, or "
                    "cache decoded images; more workers only queue more reads."
                ),
            )
        )
    memory = resource_stat(samples, "resources/system_memory_percent", stat=max)
    if memory is not None and memory >= threshold("host_memory_pct"):
        out.append(
            _resource_finding(
                id=FindingId.HOST_MEMORY_HIGH,
                severity="warning",
                score=threshold("risk_warning_score"),
                title=f"host memory reached {memory:.0f} %",
                evidence={"system_memory_max_pct": rounded(memory)},
                threshold={"max_pct": threshold("host_memory_pct")},
                suggestion=(
                    "close to swapping or the OOM killer: fewer DataLoader workers or a smaller "
                    "prefetch_factor (each worker holds prefetch_factor batches)."
                ),
            )
        )
    return out


def _cpu_saturated(
    cpu: float,
    run: RunData,
    stages: dict[Stage, StageSummary],
    names: AdviceNames,
    findings: list[Finding],
) -> Finding:
    """Every core busy. "More workers or threads cannot add speed" holds only where the run has
    DataLoader workers and nothing proposes more of them: with ``num_workers=0`` the input is
    loaded by the training process itself between its steps, and workers would load it in
    parallel on the cores its compute threads leave idle meanwhile (they spin, so the CPU reads
    busy), which is what an input-bound finding's workers change measures."""
    own = resource_stat(run.resources, "resources/process_cpu_percent", STAGE_ORDER)
    workers_cpu = resource_stat(run.resources, "resources/workers_cpu_percent", STAGE_ORDER)
    train = stages.get(Stage.TRAIN)
    no_workers = train is not None and not train.num_workers
    proposed = [f for f in findings if any(c.family == "workers" for c in f.candidates)]
    cores = f" of {names.cpu_count} cores" if names.cpu_count else ""
    if no_workers or proposed:
        mine = (own or 0.0) + (workers_cpu or 0.0)  # % of one core
        used = cpu * (names.cpu_count or 0)
        if own is not None and used and mine < 0.5 * used:
            who = (
                f"other processes use most of it (this run: {mine:.0f} % of a core{cores}), "
                "taking cores from this run whatever its settings"
            )
        elif own is not None:
            who = f"much of it is the training process's own threads ({own:.0f} % of a core{cores})"
        else:
            who = "the CPU is busy"
        suggestion = (
            who
            + (
                "; with num_workers=0 the training process loads each batch itself between "
                "steps, so DataLoader workers would load in parallel with its compute"
                if no_workers
                else "; DataLoader workers share the cores with its compute threads"
            )
            + (
                f": the workers change of {proposed[0].id.replace('_', '-')} is the one to "
                "measure (trainperf try), balancing workers against torch.set_num_threads."
                if proposed
                else ": balance workers against torch.set_num_threads."
            )
        )
    else:
        suggestion = (
            "every core is busy: more DataLoader workers or torch threads cannot add speed; "
            "make the work cheaper or use a bigger machine."
        )
    return _resource_finding(
        id=FindingId.CPU_SATURATED,
        severity="info",
        score=0.0,
        title=f"CPU saturated: median system CPU {cpu:.0f} % while running",
        evidence={
            "system_cpu_median_pct": rounded(cpu),
            "process_cpu_median_pct": rounded(own),
            "workers_cpu_median_pct": rounded(workers_cpu),
            "num_workers": train.num_workers if train is not None else None,
        },
        threshold={"median_pct": threshold("cpu_saturated_pct")},
        suggestion=suggestion,
    )


def worker_memory_findings(
    run: RunData, stages: dict[Stage, StageSummary], names: AdviceNames
) -> list[Finding]:
    """Each DataLoader worker's USS series (the resource samples) classified, with the
    training dataset's Python containers (``run.json``) for copy-on-read."""
    if not run.resources:
        return []
    info = run.run_info
    containers = info.dataset_containers if info is not None else []
    key = names.key("persistent_workers", stage="train")
    persistent = key.value if key is not None and isinstance(key.value, bool) else None
    workers = worker_memory_finding(classify_samples(run.resources, containers), persistent)
    if workers is None:
        return []
    train = stages.get(Stage.TRAIN)
    workers.candidates = candidates_for(FindingId.WORKER_MEMORY, names.facts(train))
    return [workers]


def main_memory_findings(run: RunData, explained: bool) -> list[Finding]:
    """The main process's growth in the resource samples (``explained``: a ``memory_creep``
    finding already names what grows)."""
    if not run.resources:
        return []
    main = process_growth_finding(process_growth(run.resources), explained)
    return [main] if main is not None else []


# trace finding -> the cause whose candidates it gets (host_sync: none; its change is in the
# code that reads the tensor, in the finding's words)
_TRACE_CAUSES: dict[str, str] = {
    TraceFindingId.DATA_LOADING: TraceFindingId.DATA_LOADING,
    TraceFindingId.LOW_GPU_UTILISATION: FindingId.GPU_UNDERUSED,
    TraceFindingId.LAUNCH_OVERHEAD: TraceFindingId.LAUNCH_OVERHEAD,
    TraceFindingId.DISPATCH_OVERHEAD: TraceFindingId.DISPATCH_OVERHEAD,
    FindingId.OPTIMIZER_HOST_BOUND: FindingId.OPTIMIZER_HOST_BOUND,
    TraceFindingId.FP16_SCALER: TraceFindingId.FP16_SCALER,
    FindingId.LAYOUT_CONVERSION: FindingId.LAYOUT_CONVERSION,
}

#: Ops that the trace rules counted as syncs before issue 31: reads of a scalar, which sync only
#: when the tensor is on the device (a CPU ``step`` tensor of AdamW does not).
_SCALAR_READS = ("aten::item", "aten::_local_scalar_dense")


def _older_sync_count(f: Finding, steps: int) -> Finding:
    """A window summary's ``host_sync`` recorded by the rule that counted every scalar read as
    a sync, recounted from its own evidence: the blocking runtime calls only, an info line
    (its time is what the live clock's wait finding measures)."""
    calls = f.evidence.get("calls")
    if not isinstance(calls, dict) or not any(op in calls for op in _SCALAR_READS):
        return f
    blocking = {k: v for k, v in calls.items() if k.startswith("cuda") and "Synchronize" in k}
    reads = sum(int(calls.get(op, 0)) for op in _SCALAR_READS)
    n = sum(int(v) for v in blocking.values())
    names = ", ".join(sorted(blocking)) or "no blocking runtime call"
    return replace(
        f,
        severity="info",
        score=0.0,
        title=(
            f"{n} blocking sync call(s) in {steps} profiled steps ({names}); the {reads} "
            "scalar reads (aten::item) in the window's summary are not syncs: reads of CPU "
            "tensors (AdamW's step counters) wait for nothing"
        ),
        # the per-step figures of the older rule counted the scalar reads: left out
        evidence={"calls": calls, "blocking_calls": n, "scalar_reads": reads, "steps": steps},
        suggestion=(
            "where the host waits is in the live clock's wait findings; record a new profiler "
            "window for the sync sites by name."
        ),
        recoverable_pct=0.0,
        recoverable_from="bound",
    )


def trace_findings(
    trace: TraceAnalysis | None,
    run: RunData,
    names: AdviceNames,
    findings: Sequence[Finding],
    total_s: float,
    stages: dict[Stage, StageSummary],
) -> list[Finding]:
    """The findings of the trace analysis as its rules made them, with the profiler windows'
    trace-vs-clock disagreements (``perf/profiler.jsonl``); without a readable trace, every
    finding of the windows' summaries. Ranked with the others' ``findings``: data loading
    corroborates an input-bound finding instead of repeating it. A malformed record is a
    :class:`~trainperf.analysis.run.ReportInputError` naming where it came from."""
    found = list(trace.findings) if trace is not None else []
    path = run.run_dir / "perf" / "profiler.jsonl"
    for i, w in enumerate(run.profiler_windows, start=1):
        for j, f in enumerate(w.summary.get("findings") or [], start=1):
            if trace is not None and f.get("id") != TraceFindingId.MEASUREMENT_DISAGREEMENT:
                continue  # the analysis of the same traces has its own
            try:
                finding = Finding.from_dict(f, f"{path}: record {i}: finding {j}")
            except ValueError as exc:
                raise ReportInputError(str(exc)) from exc
            if finding.id == TraceFindingId.HOST_SYNC:
                finding = _older_sync_count(finding, w.steps)
            found.append(finding)
    first: dict[str, Finding] = {}  # one finding per rule: the first
    for f in found:
        first.setdefault(f.id, f)
    out: list[Finding] = []
    train = stages.get(Stage.TRAIN)
    train_share = score(train.wall_s, total_s) if train is not None else 100.0
    bound = next((x for x in findings if x.id == FindingId.INPUT_BOUND), None)
    for f in first.values():
        if f.id == TraceFindingId.DATA_LOADING and bound is not None:
            bound.corroboration.append(f"profiler trace: {f.title}")
            continue
        # a trace rule scores a share of the profiled (train) steps: as a share of the run, the
        # train stage's share of it; a risk's score is already the run's
        share = f.score if f.id in TRACE_RISKS else share_of_run(f.score, train_share)
        if f.recoverable_pct is not None and f.id not in TRACE_RISKS:
            f = replace(f, recoverable_pct=share_of_run(f.recoverable_pct, train_share))
        cause = _TRACE_CAUSES.get(f.id)
        out.append(
            replace(
                f,
                id=in_verdict(f.id),
                score=share,
                source="trace",
                candidates=(
                    candidates_for(cause, names.facts(train)) if cause else list(f.candidates)
                ),
            )
        )
    return out


#: Causes both the live clock (run folder) and a trace may name: the trace's finding stays.
SHARED_CAUSES = (
    TraceFindingId.FP16_SCALER,
    FindingId.OPTIMIZER_HOST_BOUND,
    FindingId.LAYOUT_CONVERSION,
    TraceFindingId.HOST_SYNC,
)


def merge_same_cause(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per cause: where a trace rule (``trace:ID``) found a cause the run folder's
    rules also found (``ID``), the trace's finding keeps it (it names the kernels or the sync
    site) with the other as corroboration; an ``overhead_bound`` stage whose trace counted the
    tiny ops takes the trace's ``dispatch_overhead`` / ``launch_overhead`` the same way. Pure:
    a finding that gains corroboration is a copy, so a rule may ask how the causes will stand
    (the GPU class) before this step runs on the verdict's list."""
    out = list(findings)
    where = {f.id: i for i, f in enumerate(out)}
    drop: set[int] = set()

    def absorb(keeper: int, source: str, gone: list[int], *, candidates: bool = False) -> None:
        """``out[keeper]`` (a copy) names ``gone`` as corroboration from ``source`` and, with
        ``candidates`` and none of its own, takes the first of theirs that has some."""
        kept = out[keeper]
        mine = list(kept.candidates)
        if candidates and not mine:
            mine = next((list(out[i].candidates) for i in gone if out[i].candidates), [])
        lines = [f"{source}: {out[i].title}" for i in gone]
        out[keeper] = replace(kept, corroboration=[*kept.corroboration, *lines], candidates=mine)
        drop.update(gone)

    for cause in SHARED_CAUSES:
        traced = where.get(in_verdict(cause))
        live = [i for i, f in enumerate(out) if f.id == cause]
        if traced is not None and live:
            absorb(traced, "live clock", live, candidates=True)
    # the live rule's overhead-bound finding holds the trace's tiny ops in its evidence
    overhead = where.get(FindingId.OVERHEAD_BOUND)
    if overhead is not None and out[overhead].confidence == "measured":
        tiny = (
            in_verdict(TraceFindingId.DISPATCH_OVERHEAD),
            in_verdict(TraceFindingId.LAUNCH_OVERHEAD),
        )
        ops = [i for i, f in enumerate(out) if f.id in tiny]
        if ops:
            absorb(overhead, "profiler trace", ops)
    return [f for i, f in enumerate(out) if i not in drop]


def baseline_findings(outcome: GateOutcome | None, names: AdviceNames) -> list[Finding]:
    epochs = names.name(names.key("max_epochs", prefer=("trainer",)), "the Trainer's max_epochs")
    if outcome is not None and outcome.verdict == "insufficient data":
        # Too few epochs or batches on a side: rows that moved are noise of unknown size, so
        # this is an info line (score 0), never a ranked regression.
        return [
            Finding(
                id=FindingId.BASELINE_INSUFFICIENT_DATA,
                severity="info",
                score=0.0,
                title=(
                    "the baseline comparison has too little data to judge: "
                    + "; ".join(outcome.insufficient)
                ),
                evidence={
                    "unjudged_figures": [r.figure for r in outcome.rows if r.moved is not None]
                },
                threshold={},
                suggestion=(
                    f"record the baseline and this run with more epochs ({epochs}; the first is "
                    "skipped) so the gate can measure epoch-to-epoch noise."
                ),
                source="baseline",
            )
        ]
    if outcome is None or outcome.verdict != "regression":
        return []
    rows = [r for r in outcome.rows if r.status == Outcome.REGRESSION]
    worst = max(rows, key=lambda r: abs((r.ratio or 1.0) - 1.0), default=None)
    if worst is None:
        return []
    ratio = worst.ratio if worst.ratio is not None else 1.0
    return [
        Finding(
            id=FindingId.BASELINE_REGRESSION,
            severity="warning",
            score=round(min(100.0, abs(ratio - 1.0) * 100.0), 1),
            title=(
                f"regression against the baseline: {worst.figure} {worst.current} "
                f"vs {worst.baseline} {worst.unit} ({ratio:.2f}x)".rstrip()
            ),
            evidence={
                "regressed_figures": [r.figure for r in rows],
                "worst_ratio": rounded(ratio, 3),
            },
            threshold={"threshold": worst.threshold or 0.0},
            suggestion=(
                "compare this run's phase breakdown with the baseline's: the phase that grew "
                "names the change to look at."
            ),
            source="baseline",
        )
    ]


@function_rule(
    "resources",
    emits={FindingId.CPU_SATURATED, FindingId.IO_WAIT, FindingId.HOST_MEMORY_HIGH},
    reads={FindingId.INPUT_BOUND, FindingId.CPU_CONTENTION},
)
def resources_rule(ctx: VerdictContext) -> list[Finding]:
    """CPU saturated, I/O wait and host memory (:func:`resource_findings`); saturation reads the
    input-bound findings (their workers change) and the contention finding."""
    contended = ctx.earlier.has(FindingId.CPU_CONTENTION)
    proposing = ctx.earlier.of(FindingId.INPUT_BOUND)
    return resource_findings(ctx.run, ctx.stages, ctx.names, proposing, contended)


@function_rule(FindingId.WORKER_MEMORY, emits={FindingId.WORKER_MEMORY})
def worker_memory_rule(ctx: VerdictContext) -> list[Finding]:
    """The DataLoader workers' memory classified (:func:`worker_memory_findings`)."""
    return worker_memory_findings(ctx.run, ctx.stages, ctx.names)


@function_rule(
    FindingId.PROCESS_MEMORY_GROWTH,
    emits={FindingId.PROCESS_MEMORY_GROWTH},
    reads={FindingId.MEMORY_CREEP},
)
def process_memory_growth_rule(ctx: VerdictContext) -> list[Finding]:
    """The main process's growth, said as explained where a ``memory_creep`` finding names what
    grows (:func:`main_memory_findings`)."""
    return main_memory_findings(ctx.run, ctx.earlier.has(FindingId.MEMORY_CREEP))


@function_rule(
    "trace",
    emits={in_verdict(i) for i in TraceFindingId},
    reads={FindingId.INPUT_BOUND},
)
def trace_rule(ctx: VerdictContext) -> list[Finding]:
    """The trace analysis's findings (or the profiler windows' summaries), as shares of the run
    (:func:`trace_findings`); data loading corroborates an input-bound finding."""
    bound = ctx.earlier.of(FindingId.INPUT_BOUND)
    return trace_findings(ctx.run.trace, ctx.run, ctx.names, bound, ctx.total_s, ctx.stages)


@function_rule(
    "baseline",
    emits={FindingId.BASELINE_REGRESSION, FindingId.BASELINE_INSUFFICIENT_DATA},
)
def baseline_rule(ctx: VerdictContext) -> list[Finding]:
    """The baseline comparison's regression, or too little data to judge."""
    return baseline_findings(ctx.run.baseline, ctx.names)
