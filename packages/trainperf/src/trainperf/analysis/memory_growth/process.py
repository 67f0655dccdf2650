"""The main process's memory growth from the resource samples, on runs of any length.

Lightning-free.

The live ``host_memory_leak`` alert needs a ten-minute window; a short run whose memory climbs
with a steady slope is evidence too. :func:`process_growth` fits a straight line (least squares)
to the main process's USS (RSS where USS was not sampled) over the samples taken while a stage
ran, after the first epoch when later epochs exist (start-up allocations are not growth), and
:func:`process_growth_finding` reports it when the slope is at least ``process_growth_mb_per_min``
and steady (R² >= ``process_growth_min_r2``) over at least ``process_growth_min_s`` seconds.

What grows is named by :mod:`trainperf.probe.growth_scan` when it is an attribute of the module,
the data module or a callback (the ``memory_creep`` finding); this finding is for growth that no
attribute explains, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding, risk_score, threshold
from trainperf.core.stage import STAGE_ORDER
from trainperf.records.monitoring import ResourceSample

__all__ = ["ProcessGrowth", "process_growth", "process_growth_finding"]

_METRICS = ("resources/process_uss_gb", "resources/process_rss_gb")
_MIN_POINTS = 6


@dataclass(frozen=True)
class ProcessGrowth:
    """A straight line through the main process's memory (``metric``: USS, else RSS): ``r2``
    how well it fits (1 = every sample on it), ``start_mb`` / ``end_mb`` its value at the first
    and last sample, ``span_s`` the seconds between them, ``points`` the samples fitted."""

    metric: str
    slope_mb_per_min: float
    r2: float
    start_mb: float
    end_mb: float
    span_s: float
    points: int
    from_epoch: int


def process_growth(samples: Sequence[ResourceSample]) -> ProcessGrowth | None:
    """The fitted line of rank 0's samples (see the module doc); ``None`` with fewer than six
    samples or no memory metric."""
    mine = [s for s in samples if s.rank == 0 and s.phase in STAGE_ORDER]
    metric = next((m for m in _METRICS if any(m in s.metrics for s in mine)), None)
    if metric is None:
        return None
    mine = [s for s in mine if metric in s.metrics]
    epochs = sorted({s.epoch for s in mine})
    first = epochs[1] if len(epochs) > 1 else epochs[0] if epochs else 0
    mine = [s for s in mine if s.epoch >= first]
    if len(mine) < _MIN_POINTS:
        return None
    t = np.array([s.t for s in mine], float)
    mb = np.array([s.metrics[metric] for s in mine], float) * 1024.0
    t = t - t[0]
    if float(np.ptp(t)) <= 0.0:
        return None
    slope, intercept = np.polyfit(t, mb, 1)
    fit = slope * t + intercept
    ss_res = float(((mb - fit) ** 2).sum())
    ss_tot = float(((mb - mb.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    return ProcessGrowth(
        metric=metric,
        slope_mb_per_min=round(float(slope) * 60.0, 3),
        r2=round(r2, 3),
        start_mb=round(float(fit[0]), 1),
        end_mb=round(float(fit[-1]), 1),
        span_s=round(float(t[-1]), 1),
        points=len(mine),
        from_epoch=first,
    )


def process_growth_finding(growth: ProcessGrowth | None, explained: bool) -> Finding | None:
    """A finding when ``growth`` is steep and steady enough; ``explained``: a ``memory_creep``
    finding already names what grows (then this one adds nothing and is left out)."""
    if growth is None or explained:
        return None
    if (
        growth.slope_mb_per_min < threshold("process_growth_mb_per_min")
        or growth.r2 < threshold("process_growth_min_r2")
        or growth.span_s < threshold("process_growth_min_s")
    ):
        return None
    what = "USS" if growth.metric.endswith("uss_gb") else "RSS"
    return Finding(
        id=FindingId.PROCESS_MEMORY_GROWTH,
        severity="warning",
        score=risk_score("warning"),
        title=(
            f"The main process grows {growth.slope_mb_per_min:.1f} MB/min ({what}, steady: "
            f"R² {growth.r2:.2f} over {growth.span_s / 60:.1f} min from epoch "
            f"{growth.from_epoch}); no attribute of the module, data module or callbacks "
            "explains it"
        ),
        evidence={
            "metric": growth.metric,
            "slope_mb_per_min": growth.slope_mb_per_min,
            "r2": growth.r2,
            "start_mb": growth.start_mb,
            "end_mb": growth.end_mb,
            "span_s": growth.span_s,
            "samples": growth.points,
        },
        threshold={
            "mb_per_min": threshold("process_growth_mb_per_min"),
            "min_r2": threshold("process_growth_min_r2"),
            "min_s": threshold("process_growth_min_s"),
        },
        suggestion=(
            "Look outside the objects the epoch scan walks: module-level lists or caches, "
            "functools.lru_cache without maxsize, logged objects kept by a logger, tensors kept "
            "by a closure or a global; tracemalloc snapshots two epochs apart "
            "(snapshot.compare_to) name the allocating lines; native growth (no Python object) "
            "points at an extension or the allocator."
        ),
        source="resources",
        confidence="likely",
    )
