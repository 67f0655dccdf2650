"""The verdict on a GPU: how busy it was, what kept it idle, and findings without a trace.

The findings without a trace are those a run folder supports on its own (issue 31).

**Busy share** (:func:`gpu_busy`): the trace's ``gpu_busy_pct`` where a trace was analysed; else
a profiler window's summary (``perf/profiler.jsonl``: the figure, or the evidence of its
``low_gpu_utilisation`` finding); else NVML's median utilisation while training (resource
samples; NVML counts a kernel running on any SM as busy, so it reads high). The live clock's CUDA
events cannot give a busy share (a phase's span holds its kernels and the idle gaps between them);
they split each phase's host time into its own work and the wait for the GPU
(:mod:`trainperf.analysis.gpu_wait`).

**Classes** (:func:`gpu_class`): at or above ``gpu_compute_busy_pct`` a stage whose compute
phases dominate is GPU-compute-bound (the compute rule names the top kernels); below it the GPU
idles, and the stage is *input-bound*, *sync-bound* (the host blocks on the GPU, then runs with
nothing queued) or *host-bound* (launches, Python, the optimizer's loop), after the cause whose
change could recover the most. That finding is ``gpu_underused`` (one name whatever the source of
the busy share) and scores the GPU's idle share: nothing on the host side can win back more.

**Findings from the run folder** (the ids of the trace rules: one name per concept; a trace's
finding of the same id takes their place): ``fp16_scaler`` (16-mixed on a GPU with bf16, the
host waiting in ``optimizer_step``), ``host_sync`` (a wait elsewhere, named by the phase and the
callback or hook), ``optimizer_host_bound`` (a non-fused Adam / AdamW / SGD whose optimizer phase
takes far longer on the host than on the GPU) and ``layout_conversion`` (``channels_last`` off in
mixed precision on CUDA).

**bf16** (:func:`cuda_bf16`): recorded compute capability (``run.json`` ``cuda_capability``,
major >= 8) where the run has it; for older folders the device name's family, said ``likely``:
:data:`BF16_FAMILIES`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from trainperf.analysis.advice import candidates_for
from trainperf.analysis.config_keys import (
    FUSED_OPTIMIZERS,
    RUNNER_SECTIONS,
    find_key,
    optimizer_node,
)
from trainperf.analysis.gpu_wait import PhaseWait, StageWait
from trainperf.analysis.run import RunData
from trainperf.analysis.stages import StageSummary
from trainperf.analysis.verdict.context import (
    AdviceNames,
    GpuBusy,
    VerdictContext,
    resource_stat,
    rounded,
    score,
)
from trainperf.analysis.verdict.sources import merge_same_cause
from trainperf.core.candidates import Candidate
from trainperf.core.finding_ids import TRACE_PREFIX, FindingId, TraceFindingId, in_verdict
from trainperf.core.findings import Finding, share_of_run, threshold
from trainperf.core.rules import function_rule
from trainperf.core.stage import Stage
from trainperf.records.run_record import RunRecord

if TYPE_CHECKING:
    from trainperf.analysis.trace.trace_analysis import TraceAnalysis

#: Device-name families with native bf16 (compute capability >= 8.0: Ampere, Ada, Hopper,
#: Blackwell), for runs recorded before ``cuda_capability``: data-centre A100 / A800 / A10(G) /
#: A16 / A30 / A40 / A2, L4 / L20 / L40(S), H100 / H800 / H20 / H200 / GH200, B100 / B200 /
#: GB200; GeForce RTX 30xx / 40xx / 50xx; workstation RTX Axxxx and the Ada generation.
BF16_FAMILIES = re.compile(
    r"\b(?:A100|A800|A10G?|A16|A2|A30|A40|L4|L20|L40S?|H100|H800|H20|H200|GH200|B100|B200|GB200|"
    r"RTX\s+(?:30|40|50)\d\d(?:\s*Ti)?|RTX\s+A\d{3,4}|RTX\s+\d{4}\s+Ada|RTX\s+PRO)\b",
    re.IGNORECASE,
)

_PRECISION_16 = ("16-mixed", "16")


def cuda_bf16(info: RunRecord | None) -> tuple[bool | None, str]:
    """(whether every CUDA device of the run computes bf16 natively, how it is known): from the
    recorded compute capability, else ``likely`` from the device names; ``(None, "")`` when
    neither tells."""
    if info is None:
        return None, ""
    caps = [c for c in info.cuda_capability if c]
    if caps:
        majors = [int(c.split(".")[0]) for c in caps if c.split(".")[0].isdigit()]
        if majors:
            ok = min(majors) >= 8
            return ok, f"compute capability {min(caps)}{'' if ok else ' (bf16 from 8.0)'}"
    names = [n for n in info.cuda_devices if n]
    if names and all(BF16_FAMILIES.search(n) for n in names):
        return True, f"likely: {names[0]} is of a bf16-capable family"
    return None, ""


def gpu_busy(run: RunData, trace: TraceAnalysis | None) -> GpuBusy | None:
    """The training step's GPU busy share from the best source (see the module doc), or
    ``None`` on CPU runs and when nothing recorded it."""
    if run.device != "cuda":
        return None
    metrics = trace.metrics if trace is not None else None
    if metrics is not None and metrics.gpu_busy_pct is not None:
        return GpuBusy(
            metrics.gpu_busy_pct,
            "profiler trace",
            "measured",
            metrics.gpu_idle_ms_per_step,
        )
    for w in reversed(run.profiler_windows):
        if w.stage != "train":
            continue
        figure = w.summary.get("gpu_busy_pct")
        idle = w.summary.get("gpu_idle_ms_per_step")
        for f in w.summary.get("findings") or []:
            evidence = f.get("evidence") if isinstance(f, dict) else None
            if isinstance(evidence, dict) and figure is None:
                figure = evidence.get("gpu_busy_pct")
                idle = evidence.get("gpu_idle_ms_per_step")
        if isinstance(figure, int | float):
            ms = float(idle) if isinstance(idle, int | float) else None
            return GpuBusy(float(figure), f"profiler window of epoch {w.epoch}", "measured", ms)
    gpus = (f"resources/gpu{i}_util_percent" for i in range(16))
    utils = [u for n in gpus if (u := resource_stat(run.resources, n, ("train",))) is not None]
    if utils:
        return GpuBusy(min(utils), "NVML utilisation, median while training", "likely")
    return None


def precision_of(run: RunData, names: AdviceNames) -> str | None:
    """The run's precision as it ran (``run.json``), else as its framework recorded it, else as
    its app's config sets it."""
    if names.precision:
        return names.precision
    for info in (run.framework, run.app):
        setting = info.setting("precision") if info is not None else None
        if setting is not None and setting.value is not None:
            return str(setting.value)
    key = find_key(run.config, ("precision",), prefer=RUNNER_SECTIONS)
    return str(key.value) if key is not None and key.value is not None else None


def _place(s: StageSummary, phase: str) -> str:
    """Where a phase's wait sits, in Lightning's words."""
    if phase == "optimizer":
        return "optimizer_step"
    named = {"callbacks": s.callback_hooks_s, "module_hooks": s.module_hooks_s}.get(phase)
    if named:
        top = max(sorted(named), key=lambda k: named[k])
        return f"{top} ({phase})"
    return f"the {phase} phase"


_WAIT_ADVICE = {
    "callbacks": (
        "a callback reads a device tensor every step (a progress bar or logger converts logged "
        "metrics with .item() whenever it reads them): read metrics only for the lines you "
        "print or every N steps, give the progress bar a refresh_rate, or log with "
        "on_step=False"
    ),
    "module_hooks": (
        "the model module's hook reads a device tensor every step (.item(), .cpu(), print, "
        "a data-dependent branch): accumulate on the device and read it every N steps"
    ),
    "optimizer": (
        "something in optimizer_step reads the GPU every step (a GradScaler's inf check, "
        "gradient clipping that checks on the host, .item() in the closure)"
    ),
}


def _wait_evidence(w: StageWait, p: PhaseWait) -> dict[str, float | None]:
    return {
        f"{p.phase}_host_ms_per_batch": rounded(w.ms_per_batch(p.host_s), 2),
        f"{p.phase}_gpu_span_ms_per_batch": rounded(w.ms_per_batch(p.gpu_s), 2),
        f"{p.phase}_waiting_ms_per_batch": rounded(w.ms_per_batch(p.waiting_s), 2),
        "epochs_with_cuda_events": w.epochs,
    }


_BOUND_NOTE = (
    " (the live clock's CUDA events: the phase's host time beyond its GPU span is at most the "
    "blocked wait; a profiler trace names the sync)"
)


def wait_findings(
    s: StageSummary,
    w: StageWait,
    run: RunData,
    names: AdviceNames,
    total_s: float,
    idle_run_pct: float | None,
) -> list[Finding]:
    """The host's waits for the GPU in ``s`` (each phase waiting >= ``gpu_wait_warn_pct``):
    ``fp16_scaler`` where 16-mixed waits in ``optimizer_step`` on a GPU with bf16, else
    ``host_sync`` named by where it sits. Bound: the wait, and no more than the GPU's idle time
    (removing a sync lets the host's later work overlap the GPU's backlog; it cannot make the
    GPU's own work shorter)."""
    out: list[Finding] = []
    stage_share = score(s.wall_s, total_s)
    precision = precision_of(run, names)
    bf16, how = names.cuda_bf16, names.cuda_bf16_how
    for p in sorted(w.phases.values(), key=lambda p: -p.waiting_s):
        pct = w.pct(p.waiting_s)
        if pct < threshold("gpu_wait_warn_pct") or p.phase == "data_wait":
            continue
        cost = share_of_run(pct, stage_share)
        bound = min(cost, idle_run_pct) if idle_run_pct is not None else cost
        ms = w.ms_per_batch(p.waiting_s)
        place = _place(s, p.phase)
        head = (
            f"the host waits for the GPU up to {ms:.0f} ms/batch in {place} "
            f"({pct:.0f} % of {s.label} wall time)"
        )
        evidence = {**_wait_evidence(w, p), "precision": precision}
        scaler = p.phase == "optimizer" and precision in _PRECISION_16
        if scaler and bf16:
            info = run.run_info
            device = info.cuda_devices[0] if info is not None and info.cuda_devices else "GPU"
            evidence.update(device=device, bf16=how)
            title = (
                f"{head}: 16-mixed's GradScaler reads found_inf on the host every step, on the "
                f"{device}, which has bf16 ({how})"
            )
            key = names.key("precision", prefer=("trainer",))
            suggestion = (
                f"bf16-mixed needs no GradScaler, so no per-step sync "
                f"({names.name(key, 'the Trainer precision')} -> bf16-mixed; numerics change: "
                "check the metric); or a fused optimizer (fused=True), whose step takes "
                "found_inf on the device" + _BOUND_NOTE + "."
            )
            finding_id = TraceFindingId.FP16_SCALER
            cands = candidates_for(TraceFindingId.FP16_SCALER, names.facts(s))
        else:
            title = head + (
                ": 16-mixed's GradScaler inf check (found_inf.item())" if scaler else ""
            )
            what = _WAIT_ADVICE.get(
                p.phase,
                f"a read of a device tensor in the {p.phase} phase (.item(), .cpu(), print, "
                "bool) waits for the GPU's backlog",
            )
            suggestion = what + _BOUND_NOTE + "."
            finding_id = TraceFindingId.HOST_SYNC
            cands = candidates_for(TraceFindingId.FP16_SCALER, names.facts(s)) if scaler else []
        out.append(
            Finding(
                id=finding_id,
                severity="warning",
                score=cost,
                title=title,
                evidence=evidence,
                threshold={"wait_pct_of_stage": threshold("gpu_wait_warn_pct")},
                suggestion=suggestion,
                stage=s.stage,
                confidence="likely",
                candidates=cands,
                recoverable_pct=bound,
                recoverable_from="bound",
            )
        )
    return out


def optimizer_loop(
    s: StageSummary,
    w: StageWait,
    run: RunData,
    names: AdviceNames,
    total_s: float,
    idle_run_pct: float | None,
) -> Finding | None:
    """``optimizer_host_bound``: the optimizer phase's host time >= ``optimizer_host_over_gpu_x``
    times its GPU span, its own part (beyond the wait) >= ``optimizer_share_pct`` of the stage,
    with a non-fused Adam / AdamW / SGD in the config (or no optimizer node to tell: a plain
    script). Its own host time is the loop over parameters while the GPU has little queued;
    bound: that, and no more than the GPU's idle time."""
    p = w.phases.get("optimizer")
    if p is None or p.host_s <= 0:
        return None
    node = optimizer_node(run.config)
    if node is not None and (node.name not in FUSED_OPTIMIZERS or node.fused is True):
        return None
    own_pct = w.pct(p.own_s)
    if p.host_s < threshold("optimizer_host_over_gpu_x") * p.gpu_s or own_pct < threshold(
        "optimizer_share_pct"
    ):
        return None
    cost = share_of_run(own_pct, score(s.wall_s, total_s))
    name = f"{node.name} (not fused)" if node is not None else "the optimizer"
    title = (
        f"optimizer host loop: {name} steps parameter by parameter on the host, "
        f"{w.ms_per_batch(p.own_s):.0f} ms/batch beside the wait, with little GPU work queued"
    )
    suggestion = (
        "a fused step (fused=True: one kernel for all parameters) takes the loop off the host"
        + ("" if node is not None else " (Adam, AdamW and SGD take it)")
        + "; the optimizer phase's GPU span holds its kernels and the GPU's idle gaps, so its "
        "own host time bounds what fusing saves."
    )
    return Finding(
        id=FindingId.OPTIMIZER_HOST_BOUND,
        severity="warning",
        score=cost,
        title=title,
        evidence={
            **_wait_evidence(w, p),
            "optimizer_own_ms_per_batch": rounded(w.ms_per_batch(p.own_s), 2),
            "optimizer": node.name if node is not None else None,
        },
        threshold={
            "host_over_gpu_x": threshold("optimizer_host_over_gpu_x"),
            "own_pct_of_stage": threshold("optimizer_share_pct"),
        },
        suggestion=suggestion,
        stage=s.stage,
        confidence="likely",
        candidates=candidates_for(FindingId.OPTIMIZER_HOST_BOUND, names.facts(s)),
        recoverable_pct=min(cost, idle_run_pct) if idle_run_pct is not None else cost,
        recoverable_from="bound",
    )


def layout(s: StageSummary, run: RunData, names: AdviceNames) -> Finding | None:
    """``layout_conversion`` from the config: ``channels_last`` false in mixed precision on CUDA
    (cuDNN's tensor-core convolutions want NHWC and convert NCHW tensors around each one; a
    trace measures it). Nothing recovered is known without the trace."""
    key = names.key("channels_last", prefer=())
    precision = precision_of(run, names) or ""
    if key is None or key.value is not False or "mixed" not in precision:
        return None
    if names.convolutional is False:
        return None  # no convolutions (recorded layers, or the trace): no layout to convert
    return Finding(
        id=FindingId.LAYOUT_CONVERSION,
        severity="info",
        score=0.0,
        title=(
            f"`{key.path}` is false in {precision} on CUDA: cuDNN likely converts NCHW <-> NHWC "
            "around each convolution (nchwToNhwcKernel) and uses slower NCHW batch-norm kernels"
        ),
        evidence={"channels_last": False, "precision": precision},
        threshold={},
        suggestion=(
            f"channels-last layout (`{key.path}` -> true); a profiler trace measures the "
            "conversion kernels' share of the GPU time."
        ),
        stage=s.stage,
        confidence="likely",
        candidates=candidates_for(FindingId.LAYOUT_CONVERSION, names.facts(s)),
    )


#: Finding id -> the kind of cause that keeps a GPU idle (``gpu_class``).
CAUSE_KINDS: dict[str, str] = {
    FindingId.INPUT_BOUND: "input-bound",
    in_verdict(TraceFindingId.DATA_LOADING): "input-bound",
    TraceFindingId.FP16_SCALER: "sync-bound",
    in_verdict(TraceFindingId.FP16_SCALER): "sync-bound",
    TraceFindingId.HOST_SYNC: "sync-bound",
    in_verdict(TraceFindingId.HOST_SYNC): "sync-bound",
    FindingId.OPTIMIZER_HOST_BOUND: "host-bound",
    in_verdict(TraceFindingId.OPTIMIZER_HOST_BOUND): "host-bound",
    in_verdict(TraceFindingId.LAUNCH_OVERHEAD): "host-bound",
    in_verdict(TraceFindingId.DISPATCH_OVERHEAD): "host-bound",
}


_CAUSE_WORDS: dict[str, str] = {
    FindingId.INPUT_BOUND: "input loading",
    TraceFindingId.DATA_LOADING: "input loading",
    TraceFindingId.FP16_SCALER: "the GradScaler's per-step sync",
    TraceFindingId.HOST_SYNC: "the host's per-step sync",
    FindingId.OPTIMIZER_HOST_BOUND: "the optimizer's host loop",
    TraceFindingId.LAUNCH_OVERHEAD: "kernel launches",
    TraceFindingId.DISPATCH_OVERHEAD: "op dispatch",
}


def _size(f: Finding) -> float:
    return f.recoverable_pct if f.recoverable_pct is not None else f.score


def gpu_class(
    s: StageSummary,
    busy: GpuBusy,
    names: AdviceNames,
    total_s: float,
    findings: list[Finding],
) -> Finding | None:
    """``gpu_underused`` for a training stage whose GPU is busy below ``gpu_compute_busy_pct``:
    classed after the cause (of ``findings``) whose change could recover the most; scored and
    bounded by the GPU's idle share of the run; its candidates are each cause's first."""
    if busy.pct >= threshold("gpu_compute_busy_pct"):
        return None
    idle = 100.0 - busy.pct
    idle_run = share_of_run(idle, score(s.wall_s, total_s))
    causes = sorted(
        (
            f
            for f in findings
            if f.id in CAUSE_KINDS and f.stage in (s.stage, None) and _size(f) > 0
        ),
        key=lambda f: -_size(f),
    )
    where = f"{busy.pct:.1f} % busy, {busy.source}"
    if busy.idle_ms_per_step is not None:
        where += f": idle {busy.idle_ms_per_step:.1f} ms per step"
    head = f"the GPU is idle {idle:.0f} % of the {s.label} step ({where})"
    candidates: list[Candidate] = []
    if causes:
        top = causes[0]
        kind = CAUSE_KINDS[top.id]
        title = f"{kind}: {head}; " + re.sub(rf"^{kind}:\s*", "", top.title)
        named = dict.fromkeys(_CAUSE_WORDS[f.id.removeprefix(TRACE_PREFIX)] for f in causes)
        suggestion = (
            "the GPU waits on the host: remove what keeps it idle, largest first ("
            + ", ".join(named)
            + ": their findings below); faster kernels pay only once the GPU is busy."
        )
        seen: set[str] = set()
        for f in causes:
            first = next((c for c in f.candidates if (c.change or c.description) not in seen), None)
            if first is not None:
                seen.add(first.change or first.description)
                candidates.append(first)
    else:
        title = f"host-bound: {head}; no single cause was measured"
        suggestion = (
            "keep the GPU fed: remove per-step host syncs, queue work faster (larger batches, "
            "fewer small kernels: torch.compile, CUDA graphs), and check input loading."
        )
        candidates = candidates_for(FindingId.GPU_UNDERUSED, names.facts(s))
    critical = busy.pct < threshold("gpu_busy_critical_pct")
    return Finding(
        id=FindingId.GPU_UNDERUSED,
        severity="critical"
        if critical
        else "warning"
        if busy.pct < threshold("gpu_busy_low_pct")
        else "info",
        score=idle_run,
        title=title,
        evidence={
            "gpu_busy_pct": rounded(busy.pct),
            "gpu_idle_pct": rounded(idle),
            "gpu_idle_ms_per_step": rounded(busy.idle_ms_per_step, 2),
            "busy_source": busy.source,
            "causes": [f.id for f in causes],
        },
        threshold={
            "compute_busy_pct": threshold("gpu_compute_busy_pct"),
            "warning_below_pct": threshold("gpu_busy_low_pct"),
            "critical_below_pct": threshold("gpu_busy_critical_pct"),
        },
        suggestion=suggestion,
        stage=s.stage,
        source="step-time",
        confidence=busy.confidence,
        candidates=candidates,
        recoverable_pct=idle_run,
        recoverable_from="bound",
    )


def top_kernels(trace: TraceAnalysis | None, n: int = 3) -> str | None:
    """``name 23 %, name 18 %`` of the trace's top kernels by share of GPU time, or ``None``."""
    if trace is None:
        return None
    rows = [r for r in trace.top_cuda_ops if r.kind == "kernel"][:n]
    if not rows:
        return None
    return ", ".join(f"{r.name[:60]} {r.share_pct:.0f} %" for r in rows)


@function_rule(
    "gpu_waits",
    emits={
        TraceFindingId.FP16_SCALER,
        TraceFindingId.HOST_SYNC,
        FindingId.OPTIMIZER_HOST_BOUND,
        FindingId.LAYOUT_CONVERSION,
    },
)
def gpu_waits_rule(ctx: VerdictContext) -> list[Finding]:
    """On CUDA, the training stage's waits for the GPU, the optimizer's host loop (both from the
    live clock's CUDA events) and the layout from the config."""
    train, run, names = ctx.train, ctx.run, ctx.names
    if run.device != "cuda" or train is None:
        return []
    out: list[Finding] = []
    busy = names.gpu_busy
    idle_run = (
        share_of_run(100.0 - busy.pct, score(train.wall_s, ctx.total_s))
        if busy is not None
        else None
    )
    wait = ctx.waits.get(Stage.TRAIN)
    if wait is not None:
        out += wait_findings(train, wait, run, names, ctx.total_s, idle_run)
        loop = optimizer_loop(train, wait, run, names, ctx.total_s, idle_run)
        if loop is not None:
            out.append(loop)
    if (found := layout(train, run, names)) is not None:
        out.append(found)
    return out


#: What the GPU class reads: the causes, and the overhead-bound finding that takes the trace's
#: dispatch / launch overhead in (:func:`.sources.merge_same_cause`).
_CLASS_READS = frozenset(CAUSE_KINDS) | {FindingId.OVERHEAD_BOUND}
_LOW_UTILISATION = in_verdict(TraceFindingId.LOW_GPU_UTILISATION)


@function_rule(
    "gpu_class",
    emits={FindingId.GPU_UNDERUSED},
    reads=_CLASS_READS,
    supersedes={_LOW_UTILISATION},
)
def gpu_class_rule(ctx: VerdictContext) -> Finding | None:
    """The training stage classed by the GPU's busy share (:func:`gpu_class`), over its causes
    as they stand once each cause is one finding (:func:`.sources.merge_same_cause`); the trace's
    low-utilisation finding is the same fact from one source: this finding takes its place."""
    train, busy = ctx.train, ctx.names.gpu_busy
    if train is None or busy is None:
        return None
    causes = merge_same_cause(ctx.earlier.of(*_CLASS_READS))
    classed = gpu_class(train, busy, ctx.names, ctx.total_s, causes)
    if classed is not None:
        same = ctx.earlier.of(_LOW_UTILISATION)
        classed.corroboration += [f"profiler trace: {f.title}" for f in same]
    return classed
