"""Compute-bound, overhead-bound or slow kernels: what bounds a stage's compute phases.

The compute phases (forward / backward / optimizer) that dominate a stage are bound by arithmetic,
by the cost of each op, or by ops that run slowly for their arithmetic.

Compute is the bound only where the evidence says the arithmetic is what takes the time: the
achieved FLOP rate while computing (FLOPs per sample x samples / compute seconds, when the run
counted its FLOPs) against the measured peak (MFU). Below ``overhead_mfu_pct`` of the peak the
math takes a small part of the measured time:

- ``overhead_bound`` where a batch holds little math (under ``overhead_math_ms`` at the peak) or
  a profiler trace of the training steps counts mostly tiny ops: the step pays per-op costs
  (Python, dispatch, kernel launches), which a smaller model does not cut and a larger batch,
  ``torch.compile`` and fewer, fused ops do; without FLOPs a CPU trace of many tiny ops decides
  it alone. How sure: ``measured`` where the trace counted the tiny ops, ``likely`` from the FLOP
  rate alone.
- ``slow_kernels`` otherwise: too much math per batch for per-op costs to explain, so the ops
  themselves run slowly (memory-bound ops, a slow layout or algorithm, contended cores); a
  profiler window names them. What a change wins is unknown, as for compute-bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainperf.analysis.advice import candidates_for
from trainperf.analysis.mfu import stage_flops_per_sample, stage_utilisation
from trainperf.analysis.run import RunData
from trainperf.analysis.stages import StageSummary, split_warmup
from trainperf.analysis.verdict.context import (
    AdviceNames,
    GpuBusy,
    per_stage_rule,
    rounded,
    score,
    world_size,
)
from trainperf.analysis.verdict.gpu_rules import top_kernels
from trainperf.core.candidates import Candidate
from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding, threshold
from trainperf.core.stage import Stage

__all__ = [
    "ComputeRate",
    "OpSizes",
    "compute_bound",
    "compute_rate",
    "compute_rule",
    "op_sizes",
]


@dataclass(frozen=True)
class ComputeRate:
    """How fast a stage's compute phases do arithmetic: MFU (%) of the compute phases and of
    the whole stage, the achieved and the measured peak FLOP/s (one rank), and the FLOPs of one
    batch with the milliseconds they would take at that peak."""

    mfu_pct: float
    stage_mfu_pct: float
    achieved: float
    peak: float
    flops_per_batch: float
    math_ms_per_batch: float


@dataclass(frozen=True)
class OpSizes:
    """The training steps' ops as a trace counted them: ops (CPU) or kernels (GPU) per step,
    the share shorter than the tiny limit, the median duration (µs), and whether many tiny
    ones are the step's cost (the trace rules' ``dispatch_overhead`` / ``launch_overhead``
    limits)."""

    what: str
    per_step: float
    tiny_pct: float
    median_us: float | None
    tiny_us: float
    many_tiny: bool

    @property
    def mostly_tiny(self) -> bool:
        """The tiny share reaches the rules' limit, however many ops a step has."""
        limit = "tiny_kernel_share_pct" if self.what == "kernels" else "tiny_op_share_pct"
        return self.tiny_pct >= threshold(limit)


def compute_rate(s: StageSummary, run: RunData, compute_s: float) -> ComputeRate | None:
    """The :class:`ComputeRate` of a stage's compute phases (``compute_s`` seconds), or
    ``None`` when no FLOPs or no peak were recorded."""
    per_sample = stage_flops_per_sample(run.run_info, s.stage)
    steady = split_warmup(run.epochs, run.recompiles)[0]  # the epochs the summary sums
    whole = stage_utilisation(run.run_info, steady, s.stage)
    if per_sample is None or whole is None or whole.mfu is None or compute_s <= 0:
        return None
    peak = whole.flops_per_sec / whole.mfu / world_size(run)  # one rank's measured peak
    # StageSummary sums this rank's samples and phases: this rank's compute rate.
    achieved = per_sample * s.samples / compute_s
    per_batch = per_sample * s.samples / max(s.num_batches, 1)
    return ComputeRate(
        mfu_pct=100.0 * achieved / peak,
        stage_mfu_pct=100.0 * whole.mfu,
        achieved=achieved,
        peak=peak,
        flops_per_batch=per_batch,
        math_ms_per_batch=1000.0 * per_batch / peak,
    )


def op_sizes(names: AdviceNames, stage: Stage) -> OpSizes | None:
    """The trace's op sizes of the training steps: kernels on CUDA, CPU ops on CPU (``None``:
    no trace, another stage, a trace of the other device, or no ops counted)."""
    trace = names.trace
    if trace is None or stage != Stage.TRAIN:
        return None
    m = trace.metrics
    if m.has_gpu != (names.device == "cuda"):
        return None
    if m.has_gpu and m.kernels_per_step is not None and m.tiny_kernel_pct is not None:
        many = m.tiny_kernel_pct >= threshold("tiny_kernel_share_pct") and (
            m.kernels_per_step >= threshold("kernels_per_step")
        )
        return OpSizes(
            "kernels",
            m.kernels_per_step,
            m.tiny_kernel_pct,
            m.median_kernel_us,
            threshold("tiny_kernel_us"),
            many,
        )
    if not m.has_gpu and m.cpu_ops_per_step is not None and m.tiny_op_pct is not None:
        many = m.tiny_op_pct >= threshold("tiny_op_share_pct") and (
            m.cpu_ops_per_step >= threshold("cpu_ops_per_step")
        )
        return OpSizes(
            "CPU ops",
            m.cpu_ops_per_step,
            m.tiny_op_pct,
            m.median_op_us,
            threshold("tiny_op_us"),
            many,
        )
    return None


def compute_bound(
    s: StageSummary, run: RunData, names: AdviceNames, total_s: float
) -> Finding | None:
    """Compute phases >= ``compute_pct`` of the stage. Below ``overhead_mfu_pct`` of the
    measured peak: ``overhead_bound`` where a batch holds under ``overhead_math_ms`` of math at
    the peak or the trace's ops are mostly tiny, else ``slow_kernels``; without FLOPs,
    ``overhead_bound`` where a CPU trace's steps are many tiny ops; else ``compute_bound``. On
    CUDA host time in them is not GPU work (the host launches ahead, then waits): a training
    stage is compute-bound only with the GPU busy >= ``gpu_compute_busy_pct`` (then the trace's
    top kernels are named); below it the GPU rules class the idle time instead
    (:mod:`.gpu_rules`). Compute-bound headroom is unknown:
    the ranking puts it after every cause with a bound."""
    phases = ("forward", "backward", "optimizer") if s.stage == "train" else ("forward",)
    secs = sum(s.phases_s.get(p, 0.0) for p in phases)
    pct = 100.0 * secs / s.wall_s if s.wall_s > 0 else 0.0
    if pct < threshold("compute_pct"):
        return None
    busy = names.gpu_busy if run.device == "cuda" and s.stage == "train" else None
    if busy is not None and busy.pct < threshold("gpu_compute_busy_pct"):
        return None
    rate = compute_rate(s, run, secs)
    ops = op_sizes(names, s.stage)
    c = _Compute(phases, secs, pct, 1000.0 * secs / max(s.num_batches, 1))
    if rate is not None and rate.mfu_pct < threshold("overhead_mfu_pct"):
        # per-op costs explain it where a batch holds little math or the trace's ops are tiny
        tiny_math = rate.math_ms_per_batch < threshold("overhead_math_ms")
        if tiny_math or (ops is not None and ops.mostly_tiny):
            return _overhead_bound(s, run, names, total_s, c, rate, ops)
        return _slow_kernels(s, run, names, total_s, c, rate)
    # without FLOPs the trace decides alone on CPU; on a GPU busy with kernels (checked above)
    # tiny kernels are the GPU's work, not the host's launch overhead
    if rate is None and ops is not None and ops.many_tiny and ops.what == "CPU ops":
        return _overhead_bound(s, run, names, total_s, c, rate, ops)
    return _compute_bound(s, run, names, total_s, c, rate, busy)


@dataclass(frozen=True)
class _Compute:
    """The compute phases of one stage, summed once for the three verdicts: their names,
    seconds, share of the stage's wall time (%) and milliseconds per batch."""

    phases: tuple[str, ...]
    secs: float
    pct: float
    ms_per_batch: float


def _overhead_bound(
    s: StageSummary,
    run: RunData,
    names: AdviceNames,
    total_s: float,
    c: _Compute,
    rate: ComputeRate | None,
    ops: OpSizes | None,
) -> Finding:
    """The compute phases pay per-op costs, not arithmetic (see the module doc)."""
    phases, secs, pct, ms_per_batch = c.phases, c.secs, c.pct, c.ms_per_batch
    evidence: dict[str, Any] = {
        "compute_pct": rounded(pct),
        "compute_s": rounded(secs, 3),
        "compute_ms_per_batch": rounded(ms_per_batch, 2),
        "samples_per_sec": rounded(s.samples_per_sec, 2),
        "batch_size": s.batch_size,
        "device": run.device,
    }
    limits: dict[str, float] = {"compute_pct": threshold("compute_pct")}
    why: list[str] = []
    if rate is not None:
        limits["overhead_mfu_pct"] = threshold("overhead_mfu_pct")
        evidence.update(
            compute_mfu_pct=rounded(rate.mfu_pct, 2),
            compute_gflops_per_sec=rounded(rate.achieved / 1e9, 3),
            peak_gflops_per_sec=rounded(rate.peak / 1e9, 2),
            gflops_per_batch=rounded(rate.flops_per_batch / 1e9, 4),
            math_ms_per_batch_at_peak=rounded(rate.math_ms_per_batch, 3),
        )
        why.append(
            f"at {_pct(rate.mfu_pct)} % of this host's measured peak "
            f"({rate.math_ms_per_batch:.2g} ms of math per batch at the peak, "
            f"{ms_per_batch:.1f} ms measured)"
        )
    if ops is not None:
        evidence.update(
            {
                f"trace_{_key(ops)}_per_step": rounded(ops.per_step, 1),
                f"trace_tiny_{_key(ops)}_pct": rounded(ops.tiny_pct),
                f"trace_median_{_key(ops)[:-1]}_us": rounded(ops.median_us, 2),
            }
        )
        median = f", median {ops.median_us:.1f} µs" if ops.median_us is not None else ""
        why.append(
            f"trace: {ops.per_step:.0f} {ops.what} per step, {ops.tiny_pct:.0f} % under "
            f"{ops.tiny_us:.0f} µs{median}"
        )
    measured = ops is not None and ops.mostly_tiny
    cause = "the per-op cost (Python, dispatch, kernel launches), not arithmetic"
    if measured:
        how_sure = "measured: the profiler trace counted the tiny ops"
    elif ops is not None:
        how_sure = "likely: from the FLOP rate; the trace's ops are not mostly tiny"
    else:
        how_sure = "likely: from the FLOP rate alone; a profiler window counts the ops"
    batch = names.name(names.key("batch_size", stage=s.stage), "the batch size", s.batch_size)
    compile_words = "torch.compile (fuses small ops into fewer kernels" + (
        "; mode='reduce-overhead' adds CUDA graphs, one launch per step)"
        if run.device == "cuda"
        else ")"
    )
    suggestion = (
        f"the compute phases pay {cause}, so a smaller model would not be much faster; cut "
        f"what each step pays: a larger {batch} if memory allows (the per-op cost is paid once "
        f"per step, so per sample it falls; scale the learning rate), {compile_words}, and fewer "
        "small ops (vectorise Python loops over samples or layers, a fused or foreach "
        f"optimizer) ({how_sure})."
    )
    title = (
        f"overhead-bound, not compute-bound: {' / '.join(phases)} {_take(phases)} {pct:.0f} % of "
        f"{s.label} wall time" + (" " if rate is not None else "; ") + "; ".join(why)
    )
    cost = score(secs, total_s)
    # what cutting the overhead could save at most: the compute time beyond the math at peak
    bound = cost * (1.0 - rate.mfu_pct / 100.0) if rate is not None else cost
    return Finding(
        id=FindingId.OVERHEAD_BOUND,
        severity="warning",
        score=cost,
        title=title,
        evidence=evidence,
        threshold=limits,
        suggestion=suggestion,
        stage=s.stage,
        confidence="measured" if measured else "likely",
        candidates=candidates_for(FindingId.OVERHEAD_BOUND, names.facts(s)),
        recoverable_pct=round(bound, 1),
        recoverable_from="bound",
    )


def _slow_kernels(
    s: StageSummary,
    run: RunData,
    names: AdviceNames,
    total_s: float,
    c: _Compute,
    rate: ComputeRate,
) -> Finding:
    """Far below the peak with too much math per batch for per-op costs to explain: the ops
    themselves run slowly (memory-bound, a slow layout or algorithm, contended cores)."""
    phases, secs, pct, ms_per_batch = c.phases, c.secs, c.pct, c.ms_per_batch
    contended = names.contention
    busy_host = contended is not None and contended.present
    candidates = candidates_for(FindingId.COMPUTE_BOUND, names.facts(s, True))
    changes = _kernel_changes(s, run, names, candidates)
    title = (
        f"not compute-bound: {' / '.join(phases)} {_take(phases)} {pct:.0f} % of {s.label} "
        f"wall time at {_pct(rate.mfu_pct)} % of this host's measured peak "
        f"({rate.math_ms_per_batch:.3g} ms of math per batch at the peak, {ms_per_batch:.0f} ms "
        "measured)" + ("; the host's CPUs were contended (cpu_contention)" if busy_host else "")
    )
    suggestion = (
        "the ops run far below the machine's arithmetic rate, with too much math per batch for "
        "per-op overhead to explain: memory-bound ops (element-wise, normalisation, copies), a "
        "layout or algorithm the library runs slowly, or cores taken by other threads or "
        "processes"
        + (
            f" ({contended.sentence()}: measure on an idle host first)"
            if busy_host and contended is not None
            else ""
        )
        + "; a profiler window names the slowest ops"
        + (f"; then try {changes}" if changes else "")
        + "."
    )
    return Finding(
        id=FindingId.SLOW_KERNELS,
        severity="warning",
        score=score(secs, total_s),
        title=title,
        evidence={
            "compute_pct": rounded(pct),
            "compute_s": rounded(secs, 3),
            "compute_ms_per_batch": rounded(ms_per_batch, 2),
            "compute_mfu_pct": rounded(rate.mfu_pct, 2),
            "peak_gflops_per_sec": rounded(rate.peak / 1e9, 2),
            "math_ms_per_batch_at_peak": rounded(rate.math_ms_per_batch, 3),
            "cpu_contended": busy_host,
            "device": run.device,
        },
        threshold={
            "compute_pct": threshold("compute_pct"),
            "overhead_mfu_pct": threshold("overhead_mfu_pct"),
            "overhead_math_ms": threshold("overhead_math_ms"),
        },
        suggestion=suggestion,
        stage=s.stage,
        confidence="likely",
        candidates=candidates,
    )


def _kernel_changes(
    s: StageSummary, run: RunData, names: AdviceNames, candidates: list[Candidate]
) -> str:
    """The kernel-level candidates in words (``torch.compile and channels_last``), or ``""``."""
    words = {
        "threads": f"{names.cpu_count} cores here" if names.cpu_count else "the physical cores",
        "batch": names.name(names.key("batch_size", stage=s.stage), "the batch size", s.batch_size),
        "precision": names.name(names.key("precision", prefer=("trainer",)), "the precision"),
        "mixed": "bf16-mixed" if run.device == "cpu" else "16-mixed or bf16-mixed",
    }
    proposed = [
        _KERNEL_WORDS[c.family].format(**words) for c in candidates if c.family in _KERNEL_WORDS
    ]
    return _joined(proposed) if proposed else ""


def _take(phases: tuple[str, ...]) -> str:
    return "take" if len(phases) > 1 else "takes"


def _pct(x: float) -> str:
    """``12.3``, or two significant digits below 0.1 (``0.0021``)."""
    return f"{x:.1f}" if x >= 0.1 else f"{x:.2g}"


def _key(ops: OpSizes) -> str:
    return "kernels" if ops.what == "kernels" else "ops"


def _compute_bound(
    s: StageSummary,
    run: RunData,
    names: AdviceNames,
    total_s: float,
    c: _Compute,
    rate: ComputeRate | None,
    busy: GpuBusy | None,
) -> Finding:
    phases, secs, pct, ms_per_batch = c.phases, c.secs, c.pct, c.ms_per_batch
    speed = s.samples_per_sec
    canvas = names.name(names.key("canvas_size"), "input")
    widths = names.key("widths", parent="backbone")
    smaller_model = (
        f"a narrower backbone ({names.name(widths, '')})" if widths else "a smaller model"
    )
    evidence: dict[str, Any] = {
        "compute_pct": rounded(pct),
        "compute_s": rounded(secs, 3),
        "compute_ms_per_batch": rounded(ms_per_batch, 2),
        "samples_per_sec": rounded(speed, 2),
        "device": run.device,
    }
    limits = {"compute_pct": threshold("compute_pct")}
    kind, at = "compute-bound", ""
    if busy is not None:
        kind = "GPU-compute-bound"
        limits["gpu_compute_busy_pct"] = threshold("gpu_compute_busy_pct")
        evidence.update(gpu_busy_pct=rounded(busy.pct), busy_source=busy.source)
        named = top_kernels(names.trace)
        if named:
            evidence["top_kernels"] = named
    suggestion: str | None = None
    # How far from the machine's limit: the compute phases' achieved FLOP/s over the measured
    # peak, when the run counted its FLOPs; said once, in the title, with the figures behind it
    # (and the whole epoch's MFU) as evidence.
    if rate is not None:
        limits["compute_headroom_mfu_pct"] = threshold("compute_headroom_mfu_pct")
        limits["overhead_mfu_pct"] = threshold("overhead_mfu_pct")
        evidence.update(
            compute_mfu_pct=rounded(rate.mfu_pct, 1),
            stage_mfu_pct=rounded(rate.stage_mfu_pct, 1),
            compute_gflops_per_sec=rounded(rate.achieved / 1e9, 2),
            peak_gflops_per_sec=rounded(rate.peak / 1e9, 2),
        )
        at = f" at {rate.mfu_pct:.0f} % of this host's measured peak"
        if rate.mfu_pct >= threshold("compute_headroom_mfu_pct"):
            kind = "compute-bound near the machine's limit"
            suggestion = (
                "no headroom for faster kernels (compile, channels_last, threads gain little "
                f"here); only less work per sample (smaller {canvas}, {smaller_model}) or "
                "faster hardware makes this stage faster."
            )
        headroom = f"up to {100.0 / max(rate.mfu_pct, 1e-9):.1f}x headroom to that peak: "
        has_room: bool | None = True
    else:
        # Without FLOPs the distance to the limit is unknown: the kernel changes below are
        # guesses until `trainperf try` measures them.
        headroom = "headroom unknown (no FLOPs recorded, so no MFU): "
        has_room = None
    candidates: list[Candidate] = []
    if suggestion is None:  # room for faster kernels, or unknown
        candidates = candidates_for(FindingId.COMPUTE_BOUND, names.facts(s, has_room))
        # only the kernel changes the run does not already make (its candidates)
        changes = _kernel_changes(s, run, names, candidates)
        kernels = f"; try {changes}" if changes else ""
        where = (
            "the model's own compute dominates on CPU"
            if run.device == "cpu"
            else "the GPU work dominates"
        )
        suggestion = (
            f"{headroom}{where}: make it cheaper (smaller {canvas}, {smaller_model}){kernels}."
        )
    if busy is not None:
        at += f" with the GPU busy {busy.pct:.0f} % ({busy.source})"
        if "top_kernels" in evidence:
            suggestion = f"the top kernels: {evidence['top_kernels']}; " + suggestion
    # on CUDA without a busy share the phases are the host's clock alone: it launches ahead and
    # then waits in them, so the GPU may idle; said, and only "likely"
    host_clock_only = run.device == "cuda" and s.stage == "train" and busy is None
    if host_clock_only:
        at += " by the host's clock (the GPU's busy share was not recorded)"
        suggestion = (
            "host time in these phases includes waiting for the GPU: record its busy share "
            "(ResourceMonitorCallback's NVML samples, or a profiler window) before acting; "
            + suggestion
        )
    return Finding(
        id=FindingId.COMPUTE_BOUND,
        severity="info",
        score=score(secs, total_s),
        title=(
            f"{kind}: {pct:.0f} % of {s.label} wall time is {' / '.join(phases)}{at} "
            f"({ms_per_batch:.0f} ms/batch, {speed:.1f} samples/s)"
        ),
        evidence=evidence,
        threshold=limits,
        suggestion=suggestion,
        stage=s.stage,
        confidence="likely" if host_clock_only else "measured",
        candidates=candidates,
    )


#: How the compute-bound suggestion words each kernel-level candidate family.
_KERNEL_WORDS = {
    "threads": (
        "torch threads on {threads} (the DataLoader workers mostly wait while compute dominates)"
    ),
    "channels_last": "channels_last",
    "compile": "torch.compile",
    "precision": "mixed precision ({precision} -> {mixed})",
    "cudnn_benchmark": "cuDNN's autotuner (benchmark=True)",
    "batch_size": "a larger {batch} if memory allows",
}


def _joined(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


compute_rule = per_stage_rule(
    "compute",
    compute_bound,
    FindingId.COMPUTE_BOUND,
    FindingId.OVERHEAD_BOUND,
    FindingId.SLOW_KERNELS,
)
