"""Rules on the input pipeline: input-bound (data wait, with the worker part that explains it) and
the polygon cache (hit rate after the first epoch, corrupt entries)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ocr.perf.advice import candidates_for
from ocr.perf.findings import Finding, input_bound_severity, threshold
from ocr.perf.report.load import RunData
from ocr.perf.report.stages import StageSummary
from ocr.perf.report.verdict.figures import rounded, score
from ocr.perf.report.verdict.phases import phase_finding, phase_share
from ocr.perf.report.verdict.settings import Settings, suggested_workers
from ocr.perf.stage import Stage

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


def _worker_bottleneck(s: StageSummary) -> tuple[str | None, dict[str, Any]]:
    """The worker part that explains the data wait, with per-sample / per-batch figures."""
    w = s.worker_s
    per_sample = max(s.samples, 1)
    per_batch = max(s.num_batches, 1)
    evidence: dict[str, Any] = {}
    for part, secs in sorted(w.items()):
        evidence[f"worker_{part}_ms_per_sample"] = rounded(1000.0 * secs / per_sample, 2)
    if "collate" in w:
        evidence["worker_collate_ms_per_batch"] = rounded(1000.0 * w["collate"] / per_batch, 2)
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


def input_bound(s: StageSummary, run: RunData, adv: Settings, total_s: float) -> Finding | None:
    if (pct := phase_share(s, "data_wait", "input")) is None:
        return None
    part, evidence = _worker_bottleneck(s)
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
    want = suggested_workers(s, adv.cpu_count)
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
    if run.device == "cpu":
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
        "stage_wall_s": rounded(s.wall_s, 3),
        "worker_bottleneck": part,
        "num_workers": s.num_workers,
        "samples": s.samples,
        **evidence,
    }
    return phase_finding(
        s,
        "data_wait",
        "input_bound",
        total_s,
        title,
        "; ".join(advice) + ".",
        "input",
        severity=input_bound_severity(pct),
        evidence=evidence,
        candidates=candidates_for("input_bound", adv.facts(s), part=part),
    )


def cache(
    run: RunData, stages: dict[Stage, StageSummary], adv: Settings, total_s: float
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
                score=round(score(targets_s, total_s) * (1 - rate / 100.0), 1),
                title=(
                    f"polygon cache hits only {rate:.0f} % of {s.label} lookups after the "
                    "first epoch"
                ),
                evidence={
                    "hit_rate_pct": rounded(rate),
                    "hits": hits[stage],
                    "misses": misses[stage],
                    "evictions": evictions,
                    "worker_targets_s": rounded(targets_s, 3),
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
