"""The verdict: one ranked list of findings from the step-time attribution, the resource samples,
the alerts, any profiler trace and the baseline comparison.

Ranking. Every finding has a ``score``: the share of the run's recorded wall time (all stages,
in %) that its cause accounts for, so "61 % of validation is data wait" in a run where
validation is half the time scores 30.5. Findings about risk rather than time (a run that may die:
critical alerts such as ``nan_loss`` or ``disk_space``) score 100, since a dead run loses
everything; warnings about risk score 10. Findings are sorted by score, then severity, then id.

Advice names the run's own settings and their current values when ``.hydra/config.yaml`` was
recorded (``data.num_workers`` now 2), found by leaf name (:func:`ocr.perf.advice.find_key`), so
it never names a key the run does not have; without a key it says the change in words. It is
phrased for the device the run used: CPU runs get CPU advice (cores shared by DataLoader workers
and compute threads, no AMP / pinned memory). Each finding also carries candidate changes
(:func:`ocr.perf.advice.candidates_for`) that ``ocr-perf try`` can measure.

Findings, severities and thresholds are the shared vocabulary of :mod:`ocr.perf.findings`;
alerts come in as typed events (:class:`~ocr.perf.records.AlertEvent`), trace findings as
:class:`~ocr.perf.findings.Finding` and the baseline comparison as
:class:`~ocr.perf.gate.GateOutcome`.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ocr.perf.advice import ConfigKey, RunFacts, candidates_for, find_key
from ocr.perf.alerts import alert_findings
from ocr.perf.findings import (
    SEVERITY_ORDER,
    THRESHOLDS,
    Finding,
    input_bound_severity,
    share_of_run,
    threshold,
)
from ocr.perf.growth import growth_findings
from ocr.perf.ranks import STRAGGLER_MIN_S, STRAGGLER_MIN_SHARE
from ocr.perf.recompiles import recompile_findings
from ocr.perf.records import RunDirError, RunRecord
from ocr.perf.report.load import ReportInputError, RunData
from ocr.perf.report.stages import StageSummary
from ocr.perf.significance import Outcome
from ocr.perf.stage import Stage
from ocr.perf.trace.findings import TRACE_RISKS

if TYPE_CHECKING:
    from ocr.perf.gate import GateOutcome
    from ocr.perf.trace.result import TraceAnalysis

__all__ = ["THRESHOLDS", "Finding", "judge", "trace_findings"]

# Worker parts: finer parts inside fetch (dataset) and collate.
_FETCH_PARTS = ("decode", "transform")
_COLLATE_PARTS = ("targets",)
_PART_WORDS = {
    "fetch": "the dataset's __getitem__ (fetch)",
    "decode": "image decoding",
    "transform": "augmentation / transforms",
    "collate": "the collate function",
    "targets": "target generation",
}


# -- helpers -------------------------------------------------------------------------------------


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


class _Advice:
    """Names settings for advice: the run's own config key with its current value when the
    config has one (found by leaf name, :func:`ocr.perf.advice.find_key`: our app's
    ``data.num_workers``, another app's ``loader.num_workers``), a generic description
    otherwise, so advice never names a key the run does not have."""

    def __init__(self, run: RunData) -> None:
        self.config = run.config
        self.device = run.device
        self.cpu_count = None
        self.cpu_bf16 = None
        if run.run_info is not None:
            self.cpu_count = run.run_info.cpu_count
            self.cpu_bf16 = run.run_info.cpu_bf16
        self.torch_threads = _torch_threads(run.run_info)

    def key(
        self,
        leaf: str,
        *,
        stage: str | None = None,
        parent: str | None = None,
        prefer: Sequence[str] = ("data", "loader", "dataloader", "datamodule"),
        aliases: Sequence[str] = (),
    ) -> ConfigKey | None:
        return find_key(
            self.config, (leaf,), stage=stage, parent=parent, prefer=prefer, aliases=aliases
        )

    def name(self, key: ConfigKey | None, generic: str, current: Any = None) -> str:
        """```data.num_workers` (now 2)`` or ``the DataLoader's num_workers (now 2)``."""
        shown = key.value if key is not None and key.value is not None else current
        label = f"`{key.path}`" if key is not None else generic
        return f"{label} (now {shown})" if shown is not None else label

    def facts(self, s: StageSummary | None, headroom: bool | None = None) -> RunFacts:
        """What the candidate generator needs to know about this run and stage."""
        return RunFacts(
            config=self.config,
            device=self.device,
            cpu_count=self.cpu_count,
            stage=s.stage if s is not None else None,
            num_workers=s.num_workers if s is not None else None,
            suggested_workers=_suggested_workers(s, self.cpu_count) if s is not None else None,
            batch_size=s.batch_size if s is not None else None,
            compute_headroom=headroom,
            cpu_bf16=self.cpu_bf16,
            torch_threads=self.torch_threads,
        )


def _torch_threads(info: RunRecord | None) -> int | None:
    """torch's compute threads in the run: ``torch_threads`` of run.json, else the thread count
    its peak was measured with (the same process)."""
    if info is None:
        return None
    peak = info.flops.peak if info.flops is not None else {}
    for value in (info.torch_threads, peak.get("threads")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _severity(pct: float, warn: float, critical: float) -> str:
    return "critical" if pct >= critical else "warning"


def _score(seconds: float, total_s: float) -> float:
    return round(100.0 * seconds / total_s, 1) if total_s > 0 else 0.0


# -- step-time rules -----------------------------------------------------------------------------


def _worker_bottleneck(s: StageSummary) -> tuple[str | None, dict[str, Any]]:
    """The worker part that explains the data wait, with per-sample / per-batch figures."""
    w = s.worker_s
    per_sample = max(s.samples, 1)
    per_batch = max(s.num_batches, 1)
    evidence: dict[str, Any] = {}
    for part, secs in sorted(w.items()):
        evidence[f"worker_{part}_ms_per_sample"] = _r(1000.0 * secs / per_sample, 2)
    if "collate" in w:
        evidence["worker_collate_ms_per_batch"] = _r(1000.0 * w["collate"] / per_batch, 2)
    fetch, collate = w.get("fetch", 0.0), w.get("collate", 0.0)
    if fetch <= 0 and collate <= 0:
        return None, evidence
    dominant_pct = threshold("worker_part_dominant_pct") / 100.0
    children: tuple[str, ...]
    if fetch >= collate:
        part, parent, children = "fetch", fetch, _FETCH_PARTS
    else:
        part, parent, children = "collate", collate, _COLLATE_PARTS
    best = max(children, key=lambda c: w.get(c, 0.0))
    if w.get(best, 0.0) >= dominant_pct * parent:
        part = best
    return part, evidence


def _suggested_workers(s: StageSummary, cpu_count: int | None) -> int | None:
    """Workers needed so input keeps up with the main loop: serial worker seconds per batch /
    main-loop seconds per batch (rounded up); capped at the cores when known."""
    if s.num_batches == 0:
        return None
    worker_per_batch = (
        s.worker_s.get("fetch", 0.0) + s.worker_s.get("collate", 0.0)
    ) / s.num_batches
    loop_per_batch = (s.wall_s - s.phases_s.get("data_wait", 0.0)) / s.num_batches
    if worker_per_batch <= 0:
        return None
    needed = math.ceil(worker_per_batch / max(loop_per_batch, 1e-6))
    if cpu_count:
        needed = min(needed, cpu_count)
    return max(needed, 1)


def _input_bound(s: StageSummary, run: RunData, adv: _Advice, total_s: float) -> Finding | None:
    pct = s.share("data_wait")
    if s.wall_s <= 0 or pct < threshold("input_warn_pct"):
        return None
    part, evidence = _worker_bottleneck(s)
    data_wait_s = s.phases_s.get("data_wait", 0.0)
    title = f"input-bound: {pct:.0f} % of {s.label} wall time is data wait"
    if part is not None:
        secs = s.worker_s.get(part, 0.0)
        if part == "collate":
            title += (
                f"; {_PART_WORDS[part]} takes {1000.0 * secs / max(s.num_batches, 1):.0f} ms/batch"
                + (" in the workers" if s.num_workers else " in the main process")
            )
        else:
            where = "worker-side " if s.num_workers else ""
            ms = 1000.0 * secs / max(s.samples, 1)
            title += f"; {where}{_PART_WORDS[part]} takes {ms:.0f} ms/sample"
    workers_key = adv.key("num_workers", stage=s.stage, aliases=("workers",))
    workers = adv.name(workers_key, "the DataLoader's num_workers", s.num_workers)
    advice: list[str] = []
    cpu = run.device == "cpu"
    want = _suggested_workers(s, adv.cpu_count)
    if part == "targets":
        cache = adv.key("enabled", parent="polygon_cache")
        if cache is None:
            advice.append(
                "compute the per-sample targets once and read them back (cache them keyed by "
                "the un-augmented sample) instead of in every epoch"
            )
        elif cache.value is not True:
            advice.append(
                f"enable `{cache.path}=true`"
                + (" (now false)" if cache.value is False else "")
                + " so DB targets are computed once and read back"
                + (
                    " (training uses it only when augmentation keeps polygons fixed)"
                    if s.stage == "train"
                    else ""
                )
            )
    elif part in ("fetch", "decode", "transform"):
        advice.append(
            f"make {_PART_WORDS[part]} cheaper (decode once at the training size, cache decoded "
            "images, lighter augmentation)"
        )
    elif part == "collate":
        advice.append(
            "make the collate function cheaper: vectorise it or move per-sample work into "
            "__getitem__"
        )
    if not s.num_workers:
        n = max(2, min(want or 2, adv.cpu_count or 4))
        advice.append(f"load in parallel: set {workers} to {n}")
    elif want is not None and want > s.num_workers:
        advice.append(f"raise {workers} to {want}")
    elif adv.cpu_count and s.num_workers >= adv.cpu_count:
        advice.append(
            f"{workers} already uses all {adv.cpu_count} cores: more workers will not help"
        )
    if cpu:
        advice.append(
            "on CPU the workers share cores with the compute threads"
            + (f" ({adv.cpu_count} cores here)" if adv.cpu_count else "")
            + ", so balance workers against torch.set_num_threads"
        )
    else:
        pin = adv.key("pin_memory", stage=s.stage)
        if pin is None or pin.value is not True:
            advice.append(f"use pinned memory ({adv.name(pin, 'pin_memory')})")
    evidence = {
        "data_wait_pct": _r(pct),
        "data_wait_s": _r(data_wait_s, 3),
        "stage_wall_s": _r(s.wall_s, 3),
        "worker_bottleneck": part,
        "num_workers": s.num_workers,
        "samples": s.samples,
        **evidence,
    }
    return Finding(
        id="input_bound",
        severity=input_bound_severity(pct) or "warning",
        score=_score(data_wait_s, total_s),
        title=title,
        evidence=evidence,
        threshold={
            "warning_pct": threshold("input_warn_pct"),
            "critical_pct": threshold("input_critical_pct"),
        },
        suggestion="; ".join(advice) + ".",
        stage=s.stage,
        candidates=candidates_for("input_bound", adv.facts(s), part=part),
    )


def _slow_metric(s: StageSummary, run: RunData, adv: _Advice, total_s: float) -> Finding | None:
    pct = s.share("metric")
    if s.wall_s <= 0 or pct < threshold("metric_warn_pct"):
        return None
    secs = s.phases_s.get("metric", 0.0)
    per_epoch = secs / max(s.epochs, 1)
    advice = [
        "the metric runs in the main loop and blocks it: vectorise its matching or accumulate "
        "counts per batch and compute once per epoch"
    ]
    if s.stage == "val":
        trainer = ("trainer",)
        every = adv.name(
            adv.key("check_val_every_n_epoch", prefer=trainer),
            "the Trainer's check_val_every_n_epoch",
        )
        fewer = adv.name(
            adv.key("limit_val_batches", prefer=trainer), "the Trainer's limit_val_batches"
        )
        advice.append(f"validate less often ({every}) or on fewer batches ({fewer})")
    if run.device == "cpu":
        advice.append(
            "on CPU keep it out of the DataLoader workers' cores (it runs in the main process)"
        )
    return Finding(
        id="slow_metric",
        severity=_severity(pct, threshold("metric_warn_pct"), threshold("metric_critical_pct")),
        score=_score(secs, total_s),
        title=(
            f"slow metric: {pct:.0f} % of {s.label} wall time is metric computation "
            f"({per_epoch:.2f} s per epoch)"
        ),
        evidence={
            "metric_pct": _r(pct),
            "metric_s": _r(secs, 3),
            "metric_s_per_epoch": _r(per_epoch, 3),
            "metric_ms_per_batch": _r(1000.0 * secs / max(s.num_batches, 1), 2),
            "stage_wall_s": _r(s.wall_s, 3),
        },
        threshold={
            "warning_pct": threshold("metric_warn_pct"),
            "critical_pct": threshold("metric_critical_pct"),
        },
        suggestion="; ".join(advice) + ".",
        stage=s.stage,
    )


def _slow_postprocess(
    s: StageSummary, run: RunData, adv: _Advice, total_s: float
) -> Finding | None:
    pct = s.share("postprocess")
    if s.wall_s <= 0 or pct < threshold("postprocess_warn_pct"):
        return None
    secs = s.phases_s.get("postprocess", 0.0)
    post = ("postprocess",)
    cands = adv.name(adv.key("max_candidates", prefer=post), "the postprocessor's candidate cap")
    box = adv.name(adv.key("box_thresh", prefer=post), "its box score threshold")
    return Finding(
        id="slow_postprocess",
        severity=_severity(
            pct, threshold("postprocess_warn_pct"), threshold("postprocess_critical_pct")
        ),
        score=_score(secs, total_s),
        title=(
            f"slow postprocessing: {pct:.0f} % of {s.label} wall time turns maps into boxes "
            f"({1000.0 * secs / max(s.samples, 1):.1f} ms/sample)"
        ),
        evidence={
            "postprocess_pct": _r(pct),
            "postprocess_s": _r(secs, 3),
            "postprocess_ms_per_sample": _r(1000.0 * secs / max(s.samples, 1), 2),
        },
        threshold={
            "warning_pct": threshold("postprocess_warn_pct"),
            "critical_pct": threshold("postprocess_critical_pct"),
        },
        suggestion=(
            f"fewer contours per image: lower {cands} or raise {box}; "
            "an untrained model yields many candidates, so early epochs are slowest."
        ),
        stage=s.stage,
        candidates=candidates_for("slow_postprocess", adv.facts(s)),
    )


def _compute_bound(s: StageSummary, run: RunData, adv: _Advice, total_s: float) -> Finding | None:
    phases: tuple[str, ...] = (
        ("forward", "backward", "optimizer") if s.stage == "train" else ("forward",)
    )
    secs = sum(s.phases_s.get(p, 0.0) for p in phases)
    pct = 100.0 * secs / s.wall_s if s.wall_s > 0 else 0.0
    if pct < threshold("compute_pct"):
        return None
    ms_per_batch = 1000.0 * secs / max(s.num_batches, 1)
    rate = s.samples_per_sec
    canvas = adv.name(adv.key("canvas_size"), "the input size")
    batch = adv.name(adv.key("batch_size", stage=s.stage), "the batch size", s.batch_size)
    widths = adv.key("widths", parent="backbone")
    smaller_model = f"a narrower backbone ({adv.name(widths, '')})" if widths else "a smaller model"
    evidence: dict[str, Any] = {
        "compute_pct": _r(pct),
        "compute_s": _r(secs, 3),
        "compute_ms_per_batch": _r(ms_per_batch, 2),
        "samples_per_sec": _r(rate, 2),
        "device": run.device,
    }
    limits = {"compute_pct": threshold("compute_pct")}
    # How far from the machine's limit: the compute phases' achieved FLOP/s over the measured
    # peak (samples x FLOPs per sample / compute seconds), when the run counted its FLOPs.
    limit = _compute_mfu(s, run, secs)
    if limit is not None:
        mfu_pct, stage_mfu_pct, achieved, peak = limit
        limits["compute_headroom_mfu_pct"] = threshold("compute_headroom_mfu_pct")
        evidence.update(
            compute_mfu_pct=_r(mfu_pct, 1),
            stage_mfu_pct=_r(stage_mfu_pct, 1),
            compute_gflops_per_sec=_r(achieved / 1e9, 2),
            peak_gflops_per_sec=_r(peak / 1e9, 2),
        )
        where = (
            f"how far from the machine's limit: while computing, the model runs at "
            f"{mfu_pct:.0f} % of this host's measured peak ({achieved / 1e9:.3g} of "
            f"{peak / 1e9:.3g} GFLOP/s; {stage_mfu_pct:.0f} % over the whole {s.label} epoch)"
        )
        if mfu_pct >= threshold("compute_headroom_mfu_pct"):
            return Finding(
                id="compute_bound",
                severity="info",
                score=_score(secs, total_s),
                title=(
                    f"compute-bound near the machine's limit: {pct:.0f} % of {s.label} wall "
                    f"time is {' / '.join(phases)} at {mfu_pct:.0f} % of the measured peak"
                ),
                evidence=evidence,
                threshold=limits,
                suggestion=(
                    f"{where}: no headroom for faster kernels (compile, channels_last, threads "
                    f"gain little here); only less work per sample (smaller {canvas}, "
                    f"{smaller_model}) or faster hardware makes this stage faster."
                ),
                stage=s.stage,
            )
        headroom = f"{where}, up to {100.0 / max(mfu_pct, 1e-9):.1f}x headroom: "
        has_room: bool | None = True
    else:
        # Without FLOPs the distance to the limit is unknown: the kernel changes below are
        # guesses until `ocr-perf try` measures them.
        headroom = "headroom unknown (no FLOPs recorded, so no MFU): "
        has_room = None
    if run.device == "cpu":
        threads = f"{adv.cpu_count} cores here" if adv.cpu_count else "the physical cores"
        suggestion = headroom + (
            f"the model's own compute dominates on CPU: make it cheaper (smaller {canvas}, "
            f"{smaller_model}), try torch.compile and channels_last, and give torch threads "
            f"{threads} (the DataLoader workers mostly wait while compute dominates)."
        )
    else:
        precision = adv.name(adv.key("precision", prefer=("trainer",)), "the precision")
        suggestion = headroom + (
            f"the GPU work dominates: mixed precision ({precision} -> 16-mixed or bf16-mixed), "
            f"a larger {batch} if memory allows, torch.compile and channels_last."
        )
    return Finding(
        id="compute_bound",
        severity="info",
        score=_score(secs, total_s),
        title=(
            f"compute-bound: {pct:.0f} % of {s.label} wall time is "
            f"{' / '.join(phases)} ({ms_per_batch:.0f} ms/batch, {rate:.1f} samples/s)"
        ),
        evidence=evidence,
        threshold=limits,
        suggestion=suggestion,
        stage=s.stage,
        candidates=candidates_for("compute_bound", adv.facts(s, has_room)),
    )


def _compute_mfu(
    s: StageSummary, run: RunData, compute_s: float
) -> tuple[float, float, float, float] | None:
    """(MFU % of the compute phases, MFU % of the whole stage, achieved FLOP/s while computing,
    measured peak FLOP/s of all ranks) of a stage, or ``None`` when no FLOPs were recorded."""
    from ocr.perf.mfu import stage_flops_per_sample, stage_utilisation

    per_sample = stage_flops_per_sample(run.run_info, s.stage)
    whole = stage_utilisation(run.run_info, run.epochs, s.stage)
    if per_sample is None or whole is None or whole.mfu is None or compute_s <= 0:
        return None
    peak = whole.flops_per_sec / whole.mfu  # the measured peak x world size
    # StageSummary sums this rank's samples and phases: this rank's compute rate.
    world = _world_size(run)
    achieved = per_sample * s.samples / compute_s
    return 100.0 * achieved / (peak / world), 100.0 * whole.mfu, achieved, peak / world


def _phase_finding(
    s: StageSummary,
    phase: str,
    finding_id: str,
    title: str,
    suggestion: str,
    total_s: float,
    top: tuple[str, float] | None = None,
) -> Finding:
    """A warning that ``phase`` takes a material share of the stage: evidence
    ``{phase}_pct`` / ``{phase}_s`` (and the slowest named callback or hook when known)."""
    secs = s.phases_s.get(phase, 0.0)
    return Finding(
        id=finding_id,
        severity="warning",
        score=_score(secs, total_s),
        title=title,
        evidence={
            f"{phase}_pct": _r(s.share(phase)),
            f"{phase}_s": _r(secs, 3),
            **({"slowest": top[0], "slowest_s": _r(top[1], 3)} if top else {}),
        },
        threshold={"warning_pct": threshold("callbacks_warn_pct")},
        suggestion=suggestion,
        stage=s.stage,
    )


def _overheads(s: StageSummary, run: RunData, adv: _Advice, total_s: float) -> list[Finding]:
    out: list[Finding] = []
    warn = threshold("callbacks_warn_pct")
    pct = s.share("callbacks")
    if s.wall_s > 0 and pct >= warn:
        top = _top_named(s.callback_hooks_s)
        if top is not None:
            name, name_s = top
            title = (
                f"{pct:.0f} % of {s.label} wall time is spent in callbacks, "
                f"{100 * name_s / s.wall_s:.0f} % in {name}"
            )
            advice = (
                f"{name} takes {name_s:.3f} s: make it cheaper, run it less often or only on "
                "rank zero, or remove it."
            )
        else:  # a run recorded before callbacks were named
            every = adv.name(
                adv.key("log_every_n_steps", prefer=("trainer",)), "the Trainer's log_every_n_steps"
            )
            title = f"{pct:.0f} % of {s.label} wall time is spent in callbacks and logging"
            advice = f"log less often ({every}) and look for a slow callback in a profiler trace."
        out.append(_phase_finding(s, "callbacks", "callback_overhead", title, advice, total_s, top))
    pct = s.share("module_hooks")
    if s.wall_s > 0 and pct >= warn:
        top = _top_named(s.module_hooks_s)
        name = top[0] if top else "the LightningModule's hooks"
        title = (
            f"{pct:.0f} % of {s.label} wall time is spent in the LightningModule's own hooks, "
            f"most in {name}"
        )
        advice = (
            f"{name} is your module's code: time its parts (wrap metric work in "
            "ocr.perf.perf_phase('metric') to see it as its own phase), compute it less often, "
            "or vectorise it."
        )
        out.append(
            _phase_finding(s, "module_hooks", "module_hook_overhead", title, advice, total_s, top)
        )
    pct = s.share("checkpoint")
    if s.wall_s > 0 and pct >= warn:
        title = f"{pct:.0f} % of {s.label} wall time is spent saving checkpoints"
        advice = (
            "save less often (ModelCheckpoint every_n_epochs / every_n_train_steps, save_top_k) "
            "or to a faster disk."
        )
        out.append(_phase_finding(s, "checkpoint", "checkpoint_overhead", title, advice, total_s))
    pct = s.share("unattributed")
    if s.wall_s > 0 and pct >= threshold("unattributed_warn_pct"):
        secs = s.phases_s.get("unattributed", 0.0)
        key = adv.key("persistent_workers", stage=s.stage)
        persistent = key.value if key is not None else None
        advice = "worker start-up and epoch-start hooks land here"
        if persistent is False or (persistent is None and s.num_workers):
            setting = adv.name(key, "the DataLoader's persistent_workers")
            advice += f"; keep workers alive between epochs ({setting} -> true)"
        out.append(
            Finding(
                id="unattributed",
                severity="warning",
                score=_score(secs, total_s),
                title=f"{pct:.0f} % of {s.label} wall time is not attributed to any phase",
                evidence={"unattributed_pct": _r(pct), "unattributed_s": _r(secs, 3)},
                threshold={"warning_pct": threshold("unattributed_warn_pct")},
                suggestion=advice + "; a profiler window on an early epoch shows what it is.",
                stage=s.stage,
                candidates=candidates_for("unattributed", adv.facts(s)),
            )
        )
    return out


def _cache(
    run: RunData, stages: dict[Stage, StageSummary], adv: _Advice, total_s: float
) -> list[Finding]:
    """Polygon cache hit rate after the first epoch (the first fills it) and corrupt entries."""
    out: list[Finding] = []
    hits: dict[str, int] = defaultdict(int)
    misses: dict[str, int] = defaultdict(int)
    evictions = corrupt = 0
    for e in run.epochs:
        counts = e.worker_counts
        corrupt += counts.get("polygon_cache_corrupt", 0)
        evictions += counts.get("polygon_cache_evictions", 0)
        if (e.epoch or 0) >= 1:
            hits[e.stage] += counts.get("polygon_cache_hits", 0)
            misses[e.stage] += counts.get("polygon_cache_misses", 0)
    for stage, s in stages.items():
        lookups = hits[stage] + misses[stage]
        if lookups == 0:
            continue
        rate = 100.0 * hits[stage] / lookups
        if rate >= threshold("cache_hit_min_pct"):
            continue
        targets_s = s.worker_s.get("targets", 0.0)
        advice = "keys must not depend on augmentation, and all workers must share one cache"
        if evictions:
            advice = (
                f"{evictions} evictions: raise "
                f"{adv.name(adv.key('max_bytes', parent='polygon_cache'), 'the cache size limit')}"
                "; " + advice
            )
        out.append(
            Finding(
                id="cache_misses",
                severity="warning",
                score=round(_score(targets_s, total_s) * (1 - rate / 100.0), 1),
                title=(
                    f"polygon cache hits only {rate:.0f} % of {s.label} lookups after the "
                    "first epoch"
                ),
                evidence={
                    "hit_rate_pct": _r(rate),
                    "hits": hits[stage],
                    "misses": misses[stage],
                    "evictions": evictions,
                    "worker_targets_s": _r(targets_s, 3),
                },
                threshold={"min_hit_rate_pct": threshold("cache_hit_min_pct")},
                suggestion=advice + ".",
                stage=stage,
            )
        )
    if corrupt:
        out.append(
            Finding(
                id="cache_corrupt",
                severity="warning",
                score=0.0,
                title=f"{corrupt} corrupt polygon cache entries were read (and recomputed)",
                evidence={"corrupt": corrupt},
                threshold={"corrupt": 0.0},
                suggestion=(
                    "check the cache directory's disk; delete the cache folder if it persists."
                ),
            )
        )
    return out


def _top_named(seconds: dict[str, float]) -> tuple[str, float] | None:
    """The callback or hook with the most time, or None when nothing was named."""
    if not seconds:
        return None
    name = max(sorted(seconds), key=lambda k: seconds[k])
    return (name, seconds[name]) if seconds[name] > 0 else None


def _straggler(s: StageSummary, total_s: float) -> Finding | None:
    """The rank the others wait for, from each epoch's straggler record (the rank that works
    longest beyond the median, and the phase / callback / hook where it does); never from epoch
    time alone: synchronised ranks finish their epochs together."""
    named = [x for _, x in s.stragglers if x]
    if not s.stragglers or not named:
        return None
    pct = 100.0 * len(named) / len(s.stragglers)
    if pct < threshold("straggler_epochs_pct"):
        return None
    by_rank = Counter(x.rank for x in named)
    rank = by_rank.most_common(1)[0][0]
    mine = [x for x in named if x.rank == rank]
    cause = Counter(x.cause for x in mine).most_common(1)[0][0]
    excess = sum(x.excess_s for x in mine)
    cause_s = sum(x.cause_excess_s for x in mine if x.cause == cause)
    wait = sum(x.others_wait_s for x in mine)
    return Finding(
        id="straggler",
        severity="warning",
        score=_score(excess, total_s),
        title=(
            f"straggler: rank {rank} holds the other ranks back in {len(mine)} of "
            f"{len(s.stragglers)} {s.label} epochs; cause: {cause}"
        ),
        evidence={
            "rank": rank,
            "cause": cause,
            "excess_s": _r(excess, 3),
            "cause_excess_s": _r(cause_s, 3),
            "others_sync_wait_s": _r(wait, 3),
        },
        threshold={
            "work_excess_pct_of_epoch": 100 * STRAGGLER_MIN_SHARE,
            "work_excess_s": STRAGGLER_MIN_S,
            "epochs_pct": threshold("straggler_epochs_pct"),
        },
        suggestion=(
            f"rank {rank} spends {cause_s:.3f} s more than the median rank in {cause}, while the "
            f"others wait {wait:.3f} s for it in sync_wait: "
            + _STRAGGLER_ADVICE.get(cause.split(":")[0], "look at what differs on that rank.")
        ),
        stage=s.stage,
    )


_STRAGGLER_ADVICE = {
    "data_wait": "its data is slower (a larger shard, a slower disk, fewer workers).",
    "forward": "its steps compute more (uneven batch shapes) or its device or host is slower.",
    "backward": "its backward computes more or its device or host is slower.",
    "optimizer": "its optimizer step is slower (host contention).",
    "callbacks": "a callback does more work on that rank: make it rank-zero-only or cheaper.",
    "module_hooks": "a LightningModule hook does more work on that rank.",
    "checkpoint": "it writes checkpoints while the others wait: save from rank zero only.",
    "transfer": "its host-to-device copies are slower (pin memory, check its PCIe link).",
}


# -- resources, alerts, trace, baseline ----------------------------------------------------------


def _median_metric(run: RunData, name: str, phases: tuple[str, ...] | None = None) -> float | None:
    values = [
        float(v)
        for r in run.resources
        if (phases is None or r.phase in phases)
        and (v := r.metrics.get(name)) is not None
        and math.isfinite(v)
    ]
    return statistics.median(values) if values else None


def _max_metric(run: RunData, name: str) -> float | None:
    values = [
        float(v)
        for r in run.resources
        if (v := r.metrics.get(name)) is not None and math.isfinite(v)
    ]
    return max(values) if values else None


def _resources(
    run: RunData, stages: dict[Stage, StageSummary], adv: _Advice, total_s: float
) -> list[Finding]:
    out: list[Finding] = []
    if not run.resources:
        return out
    cpu = _median_metric(run, "resources/system_cpu_percent", ("train", "val", "test"))
    if cpu is not None and cpu >= threshold("cpu_saturated_pct"):
        out.append(
            Finding(
                id="cpu_saturated",
                severity="info",
                score=0.0,
                title=f"CPU saturated: median system CPU {cpu:.0f} % while running",
                evidence={"system_cpu_median_pct": _r(cpu)},
                threshold={"median_pct": threshold("cpu_saturated_pct")},
                suggestion=(
                    "every core is busy: more DataLoader workers or torch threads cannot add "
                    "speed; make the work cheaper or use a bigger machine."
                ),
                source="resources",
                confidence="likely",
            )
        )
    iowait = _median_metric(run, "resources/iowait_percent", ("train", "val", "test"))
    if iowait is not None and iowait >= threshold("iowait_pct"):
        out.append(
            Finding(
                id="io_wait",
                severity="warning",
                score=_r(iowait) or 0.0,
                title=f"I/O wait: the CPUs stall on disk {iowait:.0f} % of the time (median)",
                evidence={"iowait_median_pct": _r(iowait)},
                threshold={"median_pct": threshold("iowait_pct")},
                suggestion=(
                    "the data sits on a slow disk: copy the dataset to local SSD / tmpfs, or "
                    "cache decoded images; more workers only queue more reads."
                ),
                source="resources",
                confidence="likely",
            )
        )
    train = stages.get(Stage.TRAIN)
    if run.device == "cuda" and train is not None:
        utils = [
            u
            for i in range(16)
            if (u := _median_metric(run, f"resources/gpu{i}_util_percent", ("train",))) is not None
        ]
        if utils and min(utils) < threshold("gpu_busy_low_pct"):
            util = min(utils)
            out.append(
                Finding(
                    id="gpu_underused",
                    severity="warning",
                    score=round((100.0 - util) / 100.0 * _score(train.wall_s, total_s), 1),
                    title=f"GPU underused: median utilisation {util:.0f} % while training",
                    evidence={"gpu_util_median_pct": _r(util)},
                    threshold={"median_below_pct": threshold("gpu_busy_low_pct")},
                    suggestion=(
                        "keep the GPU fed: fix input first (see data wait), then raise the batch "
                        "size and remove host syncs."
                    ),
                    stage="train",
                    source="resources",
                    confidence="likely",
                    candidates=candidates_for("gpu_underused", adv.facts(train)),
                )
            )
    mem = _max_metric(run, "resources/system_memory_percent")
    if mem is not None and mem >= threshold("host_memory_pct"):
        out.append(
            Finding(
                id="host_memory_high",
                severity="warning",
                score=threshold("risk_warning_score"),
                title=f"host memory reached {mem:.0f} %",
                evidence={"system_memory_max_pct": _r(mem)},
                threshold={"max_pct": threshold("host_memory_pct")},
                suggestion=(
                    "close to swapping or the OOM killer: fewer DataLoader workers or a smaller "
                    "prefetch_factor (each worker holds prefetch_factor batches)."
                ),
                source="resources",
                confidence="likely",
            )
        )
    return out


def _world_size(run: RunData) -> int:
    """Processes of the run (DDP ranks), from its epoch records; 1 without them."""
    return max((e.world_size for e in run.epochs), default=1)


def trace_findings(trace: TraceAnalysis | None, run: RunData) -> list[Finding]:
    """The findings of the trace analysis as its rules made them, with the profiler windows'
    trace-vs-clock disagreements (``perf/profiler.jsonl``); without a readable trace, every
    finding of the windows' summaries. A malformed record is a
    :class:`~ocr.perf.report.load.ReportInputError` naming where it came from."""
    out = list(trace.findings) if trace is not None else []
    path = run.run_dir / "perf" / "profiler.jsonl"
    for i, w in enumerate(run.profiler_windows, start=1):
        for j, f in enumerate(w.summary.get("findings") or [], start=1):
            if trace is not None and f.get("id") != "measurement_disagreement":
                continue  # the analysis of the same traces has its own
            try:
                out.append(Finding.from_dict(f, f"{path}: record {i}: finding {j}"))
            except ValueError as exc:
                raise ReportInputError(str(exc)) from exc
    return out


# trace finding -> the cause whose candidates it gets
_TRACE_CAUSES = {
    "data_loading": "data_loading",
    "low_gpu_utilisation": "gpu_underused",
    "launch_overhead": "launch_overhead",
    "dispatch_overhead": "dispatch_overhead",
}


def _trace(
    found: Sequence[Finding],
    adv: _Advice,
    findings: list[Finding],
    total_s: float,
    stages: dict[Stage, StageSummary],
) -> list[Finding]:
    """Trace findings ranked with the others; data loading corroborates an input-bound finding
    instead of repeating it."""
    seen: set[str] = set()
    out: list[Finding] = []
    train = stages.get(Stage.TRAIN)
    train_share = _score(train.wall_s, total_s) if train is not None else 100.0
    for f in found:
        if f.id in seen:
            continue
        seen.add(f.id)
        if f.id == "data_loading":
            related = [x for x in findings if x.id == "input_bound"]
            if related:
                related[0].corroboration.append(f"profiler trace: {f.title}")
                continue
        # a trace rule scores a share of the profiled (train) steps: as a share of the run, the
        # train stage's share of it; a risk's score is already the run's
        score = f.score if f.id in TRACE_RISKS else share_of_run(f.score, train_share)
        cause = _TRACE_CAUSES.get(f.id)
        out.append(
            replace(
                f,
                id=f"trace:{f.id}",
                score=score,
                source="trace",
                candidates=(
                    candidates_for(cause, adv.facts(train)) if cause else list(f.candidates)
                ),
            )
        )
    return out


def _baseline(outcome: GateOutcome | None, adv: _Advice) -> list[Finding]:
    epochs = adv.name(adv.key("max_epochs", prefer=("trainer",)), "the Trainer's max_epochs")
    if outcome is not None and outcome.verdict == "insufficient data":
        # Too few epochs or batches on a side: rows that moved are noise of unknown size, so
        # this is an info line (score 0), never a ranked regression.
        return [
            Finding(
                id="baseline_insufficient_data",
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
            id="baseline_regression",
            severity="warning",
            score=round(min(100.0, abs(ratio - 1.0) * 100.0), 1),
            title=(
                f"regression against the baseline: {worst.figure} {worst.current} "
                f"vs {worst.baseline} {worst.unit} ({ratio:.2f}x)".rstrip()
            ),
            evidence={
                "regressed_figures": [r.figure for r in rows],
                "worst_ratio": _r(ratio, 3),
            },
            threshold={"threshold": worst.threshold or 0.0},
            suggestion=(
                "compare this run's phase breakdown with the baseline's: the phase that grew "
                "names the change to look at."
            ),
            source="baseline",
        )
    ]


def _epoch_scan(run: RunData, total_s: float) -> list[Finding]:
    """The findings of ``perf/growth.jsonl`` and ``perf/recompiles.jsonl``; a malformed record
    is a :class:`~ocr.perf.report.load.ReportInputError` naming the file and record."""
    try:
        return growth_findings(run.run_dir) + recompile_findings(run.run_dir, total_s)
    except RunDirError as exc:
        raise ReportInputError(str(exc)) from exc


def judge(
    run: RunData,
    stages: dict[Stage, StageSummary],
    trace: Sequence[Finding] | None = None,
    baseline: GateOutcome | None = None,
) -> list[Finding]:
    """The ranked verdict for a loaded run (see the module doc for the ranking). ``trace``:
    the profiler trace's findings (:func:`trace_findings`; ``None``: those of the profiler
    windows' summaries); ``baseline``: the gate's outcome, if a baseline was given."""
    adv = _Advice(run)
    total_s = sum(s.wall_s for s in stages.values())
    findings: list[Finding] = []
    for s in stages.values():
        for rule in (_input_bound, _slow_metric, _slow_postprocess, _compute_bound):
            if (f := rule(s, run, adv, total_s)) is not None:
                findings.append(f)
        findings.extend(_overheads(s, run, adv, total_s))
        if (f := _straggler(s, total_s)) is not None:
            findings.append(f)
    findings.extend(_cache(run, stages, adv, total_s))
    findings.extend(_resources(run, stages, adv, total_s))
    findings.extend(alert_findings(run.alerts, findings, _world_size(run)))
    found = trace_findings(None, run) if trace is None else trace
    findings.extend(_trace(found, adv, findings, total_s, stages))
    findings.extend(_baseline(baseline, adv))
    # issue 22: memory creep named by attribute, recompiles (EpochScanCallback's records)
    findings.extend(_epoch_scan(run, total_s))
    if not stages:
        findings.append(
            Finding(
                id="not_recorded",
                severity="info",
                score=0.0,
                title="no step-time attribution was recorded for this run",
                evidence={},
                threshold={},
                suggestion=(
                    "attach the performance callbacks (PerformanceProfilerCallback; with "
                    "ocr-train: callbacks=monitoring) so each epoch's time is attributed to "
                    "phases."
                ),
                source="step-time",
            )
        )
    findings.sort(key=lambda f: (-f.score, SEVERITY_ORDER.get(f.severity, 3), f.id, f.stage or ""))
    return findings
