"""The one vocabulary of diagnoses: :class:`Finding` and the thresholds table.

The one vocabulary of diagnoses: :class:`Finding`, its severities and confidences, and the one
thresholds table (:data:`THRESHOLDS`) that the live alert rules (:mod:`trainperf.alerts`), the
trace rules (:mod:`trainperf.analysis.trace.trace_rules`) and the verdict
(:mod:`trainperf.analysis.verdict`)
read their numbers from.

Severity says what to do about a finding, and in a verdict it follows one number: what the
finding's change could recover of the **whole run** (its ``recoverable_pct``, below), set in one
place (:func:`severity_for`) after every rule has spoken: ``critical`` from
``severity_critical_pct`` (20 %), ``warning`` from ``severity_warning_pct`` (10 %), ``info``
below; between ``severity_deadband_pct`` (5 %) and 10 % a change that ``trainperf try``
measured is a ``warning`` (its gain is outside the noise) and a bound stays ``info`` (an upper
bound there may recover nothing); below 5 % (the deadband) everything is ``info``. A cause of
unknown headroom (compute-bound) is ``info``. The exception: a risk to the run itself (NaN loss,
a disk or memory running out, creep that will OOM) keeps the severity its rule gave it, and a
critical risk is critical whatever its size. So "critical first" and "largest first" agree
(:func:`rank_key`). A rule's own severity stands where no verdict ranks its findings
(``trainperf analyze``: the trace rules judge the profiled steps).
Confidence (:data:`CONFIDENCES`) is about the finding's *cause*, not its advice, which stays a
hypothesis until ``trainperf try`` measures it.

Score: one unit for every finding, **the share of wall time (%) its cause costs**. A rule scores
the share of the wall time it looked at: a stage's epochs (the verdict) or the profiled steps (the
trace rules); the verdict turns a share of a stage into a share of the run with
:func:`share_of_run`. A risk (a run that may die) has no time share; a dead run loses all of it,
so a risk scores by :func:`risk_score`. A finding about the measurement itself (trace and clock
disagree) scores 0. Severity comes from :data:`THRESHOLDS` too, never from the score.

Recoverable: what the finding's change could win back, ``recoverable_pct`` (% of the run's wall
time) with where the figure comes from (:data:`RECOVERABLE`): ``measured`` by ``trainperf try``,
a ``bound`` (the time that overlapping or removing the cause could save at most: the data wait
with idle cores, the optimizer's host loop with the GPU idle, a blocked wait, the cause's share),
a ``risk`` (the run may die: its risk score), or ``unknown`` (a cause that costs time but no
figure says how much of it a change recovers: compute-bound with unknown headroom). The verdict
ranks by it (:func:`rank_key`), not by the score: the first finding names the cause whose fix
could recover the most time. A measured gain counts by its measured size and a bound by its bound;
a measured regression, or a gain inside the noise (not recommended), never counts as a gain.

Thresholds. Each entry of :data:`THRESHOLDS` has a post-hoc ``value`` (the verdict and the trace
rules judge a whole stage or a profiled window after the fact) and, where a live alert needs a
different number, a ``live`` value with the reason (``why``). An alert sees one sampling window
while the run goes on: a value that is right over a whole epoch would fire on a single noisy
window (worker start-up, an epoch boundary), and an alert interrupts someone, so live values sit
on the side of firing less. Entries used by one side only leave the other ``None``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import msgspec

from trainperf.core.candidates import Candidate

SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}

#: How sure a finding is of its cause.
CONFIDENCES: dict[str, str] = {
    "measured": "the cause's seconds (bytes, counts) were measured on this run",
    "likely": "inferred from a correlated signal (resource samples, an alert, op-count heuristics)",
    "guess": "a rule of thumb that nothing in this run measured",
}


#: Where a finding's ``recoverable_pct`` comes from (see the module doc), in ranking order.
RECOVERABLE: dict[str, str] = {
    "risk": "the run may die or give garbage: a critical risk could lose all of its time",
    "measured": (
        "trainperf try measured the change's speed-up on this run (a gain it recommended; a "
        "measured regression or a gain inside the noise recovers 0)"
    ),
    "bound": (
        "the most the change could save: the time that overlapping or removing the cause "
        "frees (an upper bound, not a promise)"
    ),
    "unknown": "the cause costs time, but nothing here bounds what a change would recover",
}


@dataclass(frozen=True)
class Threshold:
    """One entry of the thresholds table (see the module doc; its unit test checks every entry):
    ``value`` post hoc and ``live`` (when it differs, with ``why``) in ``unit``: ``%`` (of a
    stage's or step's wall time unless ``meaning`` says otherwise), ``s``, ``GB``, ``MB``,
    ``MB/min``, ``h``, ``us``, ``count`` or ``x`` (a factor or a correlation)."""

    value: float | None
    unit: str
    meaning: str
    live: float | None = None
    why: str = ""


_LIVE_WINDOW = (
    "the alert judges one sampling window while the run goes on, where worker start-up and "
    "epoch boundaries make short spikes; it fires only at the critical level, held for hold_s, "
    "so it interrupts for a sustained problem the verdict would call critical"
)

#: The thresholds of every rule, name -> :class:`Threshold` (see the module doc).
THRESHOLDS: dict[str, Threshold] = {
    # -- input-bound: data wait share (alert gpu_starvation, trace data_loading, verdict) --------
    "input_warn_pct": Threshold(
        10.0,
        "%",
        "share of wall time the loop waits for data from which input-bound is a warning",
        live=30.0,
        why=_LIVE_WINDOW,
    ),
    "input_critical_pct": Threshold(
        20.0,
        "%",
        "data wait share from which input-bound is critical (the verdict's "
        "severity_critical_pct: a trace and a one-stage run's verdict agree)",
    ),
    "input_clear_pct": Threshold(
        None, "%", "data wait share below which the starvation alert resolves", live=15.0
    ),
    # -- GPU busy / utilisation (alert gpu_starvation, trace low_gpu_utilisation, verdict) --------
    "gpu_busy_low_pct": Threshold(
        60.0,
        "%",
        "GPU busy share (trace) or median utilisation (samples) below which the GPU is underused",
        live=30.0,
        why=_LIVE_WINDOW,
    ),
    "gpu_busy_critical_pct": Threshold(30.0, "%", "GPU busy share below which it is critical"),
    "gpu_busy_clear_pct": Threshold(
        None, "%", "GPU utilisation above which the starvation alert resolves", live=50.0
    ),
    # -- device memory (alert gpu_memory_near_oom, trace memory_near_capacity) ---------------------
    "gpu_memory_high_pct": Threshold(
        90.0,
        "%",
        "device memory peak in % of its capacity",
        live=95.0,
        why=(
            "the trace's peak warns that headroom is thin; the live alert is critical (an OOM "
            "ends the run) and held for hold_s, so it fires only close to the limit"
        ),
    ),
    "gpu_memory_clear_pct": Threshold(
        None, "%", "device memory below which the near-OOM alert resolves", live=90.0
    ),
    "gpu_alloc_retries": Threshold(
        None,
        "count",
        "allocator retries rising by this many between two samples (0: ignore)",
        live=1.0,
    ),
    # -- host ------------------------------------------------------------------------------------
    "host_memory_pct": Threshold(90.0, "%", "max system memory in use"),
    "host_memory_growth_mb_per_min": Threshold(
        None, "MB/min", "memory growth trend from which a leak is suspected", live=10.0
    ),
    "host_memory_horizon_h": Threshold(
        None, "h", "the leak alert fires when memory runs out within this many hours", live=2.0
    ),
    "cpu_saturated_pct": Threshold(90.0, "%", "median system CPU over the samples"),
    "iowait_pct": Threshold(10.0, "%", "median iowait over the samples"),
    "disk_min_free_gb": Threshold(
        None, "GB", "free space reserve on top of the next checkpoints", live=1.0
    ),
    "disk_checkpoints_ahead": Threshold(
        None, "count", "checkpoints that must still fit on the disk", live=2.0
    ),
    "disk_clear_margin": Threshold(
        None, "x", "free space factor above the limit at which the disk alert resolves", live=1.1
    ),
    # -- throughput and hangs (alerts only: the verdict sees whole epochs) ------------------------
    "throughput_drop_pct": Threshold(
        None, "%", "training steps/s below the post-warm-up baseline", live=30.0
    ),
    "throughput_clear_pct": Threshold(
        None, "%", "drop below which the throughput alert resolves", live=15.0
    ),
    "hang_factor": Threshold(
        None, "x", "no batch for this many median step times means a hang", live=10.0
    ),
    "hang_min_s": Threshold(None, "s", "and at least this long", live=300.0),
    # -- DDP stragglers (trainperf.core.ranks, alert straggler_rank, verdict)
    # --------------------------
    "straggler_work_pct": Threshold(
        10.0, "%", "a rank's work beyond the median rank, in % of the epoch"
    ),
    "straggler_work_s": Threshold(0.05, "s", "and at least this many seconds"),
    "straggler_clear_pct": Threshold(
        None, "%", "excess below which the straggler alert resolves", live=5.0
    ),
    "straggler_epochs_pct": Threshold(
        50.0, "%", "share of a stage's epochs with the same straggler for the verdict to name it"
    ),
    # -- communication (trace communication_bound) ----------------------------------------------
    "comm_exposed_warn_pct": Threshold(
        10.0, "%", "exposed communication (no compute beside it) share of the step time"
    ),
    "comm_exposed_critical_pct": Threshold(
        30.0, "%", "exposed communication share from which it is critical"
    ),
    # -- step-time phases (verdict) --------------------------------------------------------------
    "metric_warn_pct": Threshold(15.0, "%", "metric phase share (warning)"),
    "metric_critical_pct": Threshold(35.0, "%", "metric phase share (critical)"),
    "postprocess_warn_pct": Threshold(15.0, "%", "postprocess phase share (warning)"),
    "postprocess_critical_pct": Threshold(35.0, "%", "postprocess phase share (critical)"),
    "compute_pct": Threshold(
        50.0, "%", "forward + backward + optimizer share from which a stage is compute-bound"
    ),
    "compute_headroom_mfu_pct": Threshold(
        50.0,
        "%",
        "MFU of the compute phases below which compute changes have room to pay; above it the "
        "kernels already run near the measured limit",
    ),
    # -- advice that fits the model (issue 38) ---------------------------------------------------
    "overhead_mfu_pct": Threshold(
        5.0,
        "%",
        "MFU of the compute phases below which they are not compute-bound: the time goes to "
        "per-op dispatch / kernel launches (or memory-bound small ops), not to arithmetic",
    ),
    "overhead_math_ms": Threshold(
        1.0,
        "ms",
        "arithmetic of one batch at the measured peak below which a step's fixed per-op costs "
        "(dispatch, launches) dominate it: a low MFU there is per-op overhead, above it slow "
        "kernels",
    ),
    "conv_share_pct": Threshold(
        10.0,
        "%",
        "convolutions' share of a trace's op time, or of a model's parameters, from which the "
        "model is convolutional (channels_last advice applies)",
    ),
    "slow_epoch_x": Threshold(
        1.5, "x", "an epoch's time per batch over the median of the stage's other epochs"
    ),
    "slow_epoch_mad": Threshold(
        3.5, "x", "and beyond this many robust deviations (1.4826 x MAD) of the others"
    ),
    "callbacks_warn_pct": Threshold(15.0, "%", "callbacks / module hooks / checkpoint phase share"),
    "unattributed_warn_pct": Threshold(15.0, "%", "time attributed to no phase"),
    "worker_part_dominant_pct": Threshold(
        50.0, "%", "share of fetch / collate from which a finer part (targets, decode) is named"
    ),
    "workers_waiting_pct": Threshold(
        50.0,
        "%",
        "a DataLoader worker's median CPU (% of one core) below which it mostly waits (I/O, "
        "sleep): more workers than cores can still help",
    ),
    "cache_hit_min_pct": Threshold(
        50.0, "%", "a worker cache's hit rate (X_hits / X_misses) after the first epoch"
    ),
    # -- main-process growth from the resource samples (trainperf.analysis.memory_growth.process)
    # ---------------
    "process_growth_mb_per_min": Threshold(
        5.0, "MB/min", "main-process memory slope (post hoc, any run length) worth reporting"
    ),
    "process_growth_min_r2": Threshold(0.8, "x", "R² of that slope: steady growth, not noise"),
    "process_growth_min_s": Threshold(60.0, "s", "and fitted over at least this long"),
    # -- DataLoader workers' memory (trainperf.analysis.memory_growth.workers)
    # -----------------------------------
    "worker_memory_growth_mb": Threshold(64.0, "MB", "a worker's USS growth worth classifying"),
    "worker_memory_tail_pct": Threshold(
        15.0, "%", "share of a worker's growth in the last third of its readings: below, a plateau"
    ),
    "worker_memory_tail_mb": Threshold(
        32.0, "MB", "and at least this much of it: a short run's warm-up is not continuing growth"
    ),
    "copy_on_read_container_mb": Threshold(
        32.0, "MB", "Python objects in one dataset container from which copy-on-read matters"
    ),
    "copy_on_read_min_r": Threshold(
        0.9, "x", "correlation of a worker's USS with the distinct samples it fetched"
    ),
    # -- the verdict's severity from what a change recovers of the whole run (severity_for) ------
    "severity_deadband_pct": Threshold(
        5.0,
        "%",
        "recoverable share of the run below which a finding is info whatever its source (within "
        "run-to-run noise); from here to severity_warning_pct a measured gain is a warning",
    ),
    "severity_warning_pct": Threshold(
        10.0, "%", "recoverable share of the run from which a finding is a warning"
    ),
    "severity_critical_pct": Threshold(
        20.0, "%", "recoverable share of the run from which a finding is critical"
    ),
    "risk_critical_score": Threshold(
        100.0, "%", "score of a critical risk: a run that may die loses all of its wall time"
    ),
    "risk_warning_score": Threshold(10.0, "%", "score of a warning about a risk"),
    # -- trace heuristics (trace rules) ----------------------------------------------------------
    "sync_time_pct": Threshold(2.0, "%", "host time in sync calls per step"),
    "sync_calls_per_step": Threshold(5.0, "count", "host-device sync calls per step"),
    "sync_stall_us": Threshold(
        50.0,
        "us",
        "a blocking call that neither waited for device work seen in the trace nor blocked this "
        "long found the device idle: it is counted apart from the sync points that stalled",
    ),
    "tiny_kernel_us": Threshold(10.0, "us", "a kernel shorter than this is tiny"),
    "tiny_kernel_share_pct": Threshold(50.0, "%", "share of tiny kernels (of all kernels)"),
    "kernels_per_step": Threshold(500.0, "count", "kernels per step"),
    "tiny_op_us": Threshold(10.0, "us", "a CPU op shorter than this is tiny"),
    "tiny_op_share_pct": Threshold(60.0, "%", "share of tiny CPU ops (of all ops)"),
    "cpu_ops_per_step": Threshold(1000.0, "count", "CPU ops per step"),
    "optimizer_ops_per_step": Threshold(
        20.0, "count", "optimizer ops per step (when the parameter count is unknown)"
    ),
    "optimizer_ops_per_param": Threshold(
        1.0, "count", "optimizer ops per parameter: the per-parameter loop"
    ),
    "optimizer_share_pct": Threshold(5.0, "%", "optimizer phase share of the step"),
    "optimizer_host_gpu_ratio": Threshold(
        3.0,
        "x",
        "the optimizer phase's own host work (its host time less the time blocked in sync "
        "points) over the device time it launched, from which its host loop is the cost",
    ),
    "optimizer_host_bound_pct": Threshold(
        5.0,
        "%",
        "the optimizer's host loop with the GPU idle (host time less device work launched less "
        "time blocked) in % of the step, from which optimizer_host_bound is a finding",
    ),
    "layout_conversion_pct": Threshold(
        5.0, "%", "NCHW <-> NHWC conversion kernels in % of the device time (not of the step)"
    ),
    # -- the verdict on a GPU (live clock with CUDA events, GPU busy share; issue 31) ---------
    "gpu_compute_busy_pct": Threshold(
        85.0,
        "%",
        "GPU busy share (trace, else NVML utilisation) from which a CUDA stage whose compute "
        "phases dominate is GPU-compute-bound; below it the GPU idles and the cause is elsewhere",
    ),
    "gpu_wait_warn_pct": Threshold(
        10.0,
        "%",
        "host time a phase spends beyond its CUDA-event span (waiting for the GPU's backlog), "
        "in % of the stage, from which the wait is named",
    ),
    "optimizer_host_over_gpu_x": Threshold(
        2.0,
        "x",
        "optimizer phase host time over its CUDA-event span (live clock) from which a non-fused "
        "optimizer's host loop is named",
    ),
}


def threshold(name: str, *, live: bool = False) -> float:
    """The number of entry ``name``: its post-hoc ``value``, or with ``live=True`` its ``live``
    value (the post-hoc one when the entry has no live value). A missing entry or side is a
    ``KeyError`` naming it."""
    entry = THRESHOLDS.get(name)
    if entry is None:
        raise KeyError(f"no threshold named {name!r} in trainperf.core.findings.THRESHOLDS")
    number = (entry.live if entry.live is not None else entry.value) if live else entry.value
    if number is None:
        side = "live" if live else "post-hoc"
        raise KeyError(f"threshold {name!r} has no {side} value")
    return float(number)


def post_hoc_thresholds() -> dict[str, float]:
    """``name -> value`` of every entry with a post-hoc value."""
    return {name: float(t.value) for name, t in THRESHOLDS.items() if t.value is not None}


def input_bound_severity(data_wait_pct: float) -> str | None:
    """``critical``, ``warning`` or ``None`` for a data wait share (% of wall time) judged after
    the fact: the one rule the verdict (a stage's epochs) and the trace (its profiled steps)
    share, so the same share gets the same severity from both."""
    if data_wait_pct >= threshold("input_critical_pct"):
        return "critical"
    if data_wait_pct >= threshold("input_warn_pct"):
        return "warning"
    return None


def risk_score(severity: str) -> float:
    """The score (% of the run's wall time) of a risk of ``severity`` (see the module doc)."""
    return threshold("risk_critical_score" if severity == "critical" else "risk_warning_score")


def share_of_run(share_pct: float, stage_share_pct: float) -> float:
    """A score measured as ``share_pct`` % of one stage's (or profiled steps') wall time, as a
    share of the run's wall time, given the stage's share of the run ``stage_share_pct`` (%),
    rounded to 0.1."""
    return round(share_pct * stage_share_pct / 100.0, 1)


@dataclass
class Finding:
    """One diagnosis, from whichever rule made it.

    Args:
        id: rule identifier (``input_bound``, ``data_loading``, ``alert:nan_loss``, ...).
        score: the share of wall time its cause costs, in % (0-100; see the module doc): of
            the run's in a verdict, of the profiled steps' in a trace rule's finding.
        threshold: the thresholds it was judged with, in the evidence's units.
        suggestion: the change in plain language; names only settings that exist in the run's
            configuration (see :mod:`trainperf.analysis.advice`).
        source: ``step-time``, ``resources``, ``alerts``, ``trace``, ``baseline``, ``growth``
            or ``compile``.
        confidence: ``measured``, ``likely`` or ``guess`` (:data:`CONFIDENCES`).
        corroboration: other sources that saw the same cause (an alert, a trace).
        candidates: machine-applicable changes to measure (``trainperf try``), best first.
        recoverable_pct: what the change could win back, % of the run's wall time (``None``:
            unknown); the verdict fills it for rules that leave it (see the module doc).
        recoverable_from: ``measured``, ``bound``, ``risk`` or ``unknown`` (:data:`RECOVERABLE`).
    """

    id: str
    severity: str
    score: float
    title: str
    evidence: dict[str, Any]
    threshold: dict[str, float]
    suggestion: str
    stage: str | None = None
    source: str = "step-time"
    confidence: str = "measured"
    corroboration: list[str] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    recoverable_pct: float | None = None
    recoverable_from: str = "unknown"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (candidates as objects)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, where: str = "finding") -> Finding:
        """Read :meth:`as_dict`'s form, or the older one of the trace rules (no score, source,
        confidence or candidates: a ``likely`` trace finding); unknown keys are ignored.
        ``ValueError`` naming ``where`` and the field when it is not a finding."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        older = {
            "score": 0.0,
            "severity": "info",
            "suggestion": "",
            "source": "trace",
            "confidence": "likely",
        }
        try:
            found = msgspec.convert(older | data, cls)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if found.severity not in SEVERITY_ORDER:
            raise ValueError(f"{where}: severity must be one of {list(SEVERITY_ORDER)}")
        if found.recoverable_from not in RECOVERABLE:
            raise ValueError(f"{where}: recoverable_from must be one of {list(RECOVERABLE)}")
        return found


def is_risk(f: Finding) -> bool:
    """Whether ``f`` is about the run itself (it may die or give garbage), not its speed."""
    return f.recoverable_from == "risk"


def ranked_size(f: Finding) -> float:
    """The figure the verdict ranks ``f`` by, % of the run: a critical risk the whole run
    (``risk_critical_score``: a run that dies loses all of it, however small its symptom), another
    risk its score, a measured gain or a bound its ``recoverable_pct``; a cause of unknown
    headroom ranks as if it could recover the deadband (``severity_deadband_pct``): after every
    figure above it, before the smaller ones."""
    if is_risk(f):
        if f.severity == "critical":
            return threshold("risk_critical_score")
        return f.recoverable_pct if f.recoverable_pct is not None else f.score
    if f.recoverable_from == "unknown" or f.recoverable_pct is None:
        return threshold("severity_deadband_pct") if f.recoverable_from == "unknown" else 0.0
    return max(f.recoverable_pct, 0.0)


def severity_for(f: Finding) -> str:
    """The severity of ``f`` in a verdict (see the module doc): a risk's own; else from what its
    change could recover of the run."""
    if is_risk(f):
        return f.severity
    pct = f.recoverable_pct
    if f.recoverable_from == "unknown" or pct is None:
        return "info"
    if pct >= threshold("severity_critical_pct"):
        return "critical"
    if pct >= threshold("severity_warning_pct"):
        return "warning"
    if pct >= threshold("severity_deadband_pct") and f.recoverable_from == "measured":
        return "warning"
    return "info"


def rank_key(f: Finding) -> tuple[int, float, int, float, str, str]:
    """Sort key of the verdict (first = the change that could recover the most): by severity
    (:func:`severity_for`: critical, warning, info), then by :func:`ranked_size` (a critical
    risk scores 100, so it leads), a cause of unknown headroom after a figure of the same size,
    then the larger score, then id and stage. Severity and size never disagree: severity is a
    function of the size, but for the measured-gain warnings of 5-10 % and the risks."""
    unknown = 1 if f.recoverable_from == "unknown" or f.recoverable_pct is None else 0
    return (
        SEVERITY_ORDER.get(f.severity, 3),
        -ranked_size(f),
        unknown,
        -f.score,
        f.id,
        f.stage or "",
    )


def rank(findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` in the verdict's order (:func:`rank_key`), their severities as they are."""
    return sorted(findings, key=rank_key)


def grade(findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` (their recoverable figures filled) with the verdict's severities
    (:func:`severity_for`), in the verdict's order: the one place a verdict's severity is set."""
    return rank(replace(f, severity=severity_for(f)) for f in findings)
