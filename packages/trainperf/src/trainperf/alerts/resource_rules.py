"""The alert rules on the machine's resources.

GPU starvation, GPU memory near OOM, a host memory leak, disk space for checkpoints and thermal
throttling; their catalogue is :mod:`trainperf.alerts.catalogue`."""

from __future__ import annotations

import math
import re
import statistics
from collections import deque
from collections.abc import Mapping
from typing import ClassVar

from trainperf.alerts.engine import Check, Rule, RuleContext, Setting
from trainperf.core.finding_ids import AlertName, FindingId

__all__ = [
    "DiskSpace",
    "GpuMemoryNearOom",
    "GpuStarvation",
    "HostMemoryLeak",
    "ThermalThrottle",
    "duration",
    "gpu_values",
]

_GB = float(1 << 30)
_MB = float(1 << 20)
_GPU_KEY = re.compile(r"^resources/gpu(\d+)_(\w+)$")


def gpu_values(values: Mapping[str, float], field_name: str) -> dict[int, float]:
    """The finite ``resources/gpu<i>_<field_name>`` values by device index ``i``."""
    matches = ((_GPU_KEY.match(key), value) for key, value in values.items())
    return {int(m[1]): v for m, v in matches if m and m[2] == field_name and math.isfinite(v)}


def duration(seconds: float) -> str:
    """``seconds`` in the unit that reads best (s, min, h)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class GpuStarvation(Rule):
    """The training loop waits for data: data-wait share above ``data_wait_share`` (CPU or
    GPU), or mean GPU utilisation of this process's devices below ``gpu_util_percent``, during
    training. Resolves when the share is below ``data_wait_clear`` and utilisation above
    ``gpu_util_clear``."""

    name = AlertName.GPU_STARVATION.value
    per_rank = True
    corroborates = FindingId.INPUT_BOUND.value
    DEFAULTS: ClassVar[dict[str, Setting]] = {"hold_s": 60.0, "cooldown_s": 1800.0}
    FROM_TABLE: ClassVar[dict[str, tuple[str, float]]] = {
        "data_wait_share": ("input_warn_pct", 100.0),
        "data_wait_clear": ("input_clear_pct", 100.0),
        "gpu_util_percent": ("gpu_busy_low_pct", 1.0),
        "gpu_util_clear": ("gpu_busy_clear_pct", 1.0),
    }

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        if ctx.phase != "train":
            return None
        s = self.settings
        share = values.get("resources/data_wait_share")
        utils = gpu_values(values, "util_percent")
        util = statistics.fmean(utils.values()) if utils else None
        if share is None and util is None:
            return None
        share_bad = share is not None and share > s["data_wait_share"]
        util_bad = util is not None and util < s["gpu_util_percent"]
        clear = (share is None or share < s["data_wait_clear"]) and (
            util is None or util > s["gpu_util_clear"]
        )
        evidence: dict[str, float | str] = {}
        parts = []
        if share is not None:
            evidence["data_wait_share"] = share
            parts.append(f"the training loop waited for data {share:.0%} of the time")
        if util is not None:
            evidence["gpu_util_percent"] = util
            parts.append(f"GPU utilisation is {util:.0f} %")
        if "resources/workers_count" in values:
            evidence["workers_count"] = values["resources/workers_count"]
            evidence["workers_cpu_percent"] = values.get("resources/workers_cpu_percent", math.nan)
        figures = " and ".join(parts)
        return Check(
            breach=share_bad or util_bad,
            clear=clear,
            message=(
                f"GPU starved: {figures} (thresholds: data wait > "
                f"{s['data_wait_share']:.0%}, GPU utilisation < {s['gpu_util_percent']:.0f} %)."
            ),
            resolve=f"Data supply keeps up again: {figures}.",
            evidence=evidence,
            suggestion=(
                "Raise the DataLoader's num_workers (with persistent_workers=true and "
                "pin_memory=true on GPU), move decoding/augmentation/target generation into the "
                "workers or cache it (a disk cache shared by the workers), and check "
                "workers_cpu_percent: workers at 100 % each need more workers or cheaper "
                "transforms."
            ),
        )


class GpuMemoryNearOom(Rule):
    """GPU memory near its limit: used / total above ``used_fraction`` (NVML, all processes on
    the device; else the torch allocator's reserved / total), or the allocator's retry count
    rising by ``alloc_retries`` or more between two samples (0: ignore retries). Resolves below
    ``clear_fraction`` without new retries."""

    name = AlertName.GPU_MEMORY_NEAR_OOM.value
    severity = "critical"
    per_rank = True
    risk = True
    DEFAULTS: ClassVar[dict[str, Setting]] = {"hold_s": 10.0, "cooldown_s": 1800.0}
    FROM_TABLE: ClassVar[dict[str, tuple[str, float]]] = {
        "used_fraction": ("gpu_memory_high_pct", 100.0),
        "clear_fraction": ("gpu_memory_clear_pct", 100.0),
        "alloc_retries": ("gpu_alloc_retries", 1.0),
    }

    def __init__(self, **settings: object) -> None:
        super().__init__(**settings)
        self._retries: float | None = None

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        s = self.settings
        used = gpu_values(values, "memory_used_gb")
        total = gpu_values(values, "memory_total_gb")
        fractions = {i: used[i] / total[i] for i in used if total.get(i)}
        source = "NVML"
        if not fractions and values.get("resources/cuda_total_gb"):
            reserved = values.get("resources/cuda_reserved_gb", 0.0)
            fractions = {0: reserved / values["resources/cuda_total_gb"]}
            source = "torch reserved"
        retries = values.get("resources/cuda_alloc_retries")
        rise = 0.0
        if retries is not None:
            rise = 0.0 if self._retries is None else max(retries - self._retries, 0.0)
            self._retries = retries
        if not fractions and retries is None:
            return None
        device, fraction = max(fractions.items(), key=lambda kv: kv[1], default=(0, 0.0))
        retry_bad = s["alloc_retries"] > 0 and rise >= s["alloc_retries"]
        evidence: dict[str, float | str] = {
            "gpu": float(device),
            "memory_used_fraction": fraction,
            "source": source,
            "alloc_retries_rise": rise,
        }
        if device in used:
            evidence["memory_used_gb"] = used[device]
            evidence["memory_total_gb"] = total[device]
        return Check(
            breach=fraction > s["used_fraction"] or retry_bad,
            clear=fraction < s["clear_fraction"] and rise == 0,
            message=(
                f"GPU {device} memory at {fraction:.0%} of its capacity ({source}), allocator "
                f"retries +{rise:.0f} since the last sample: close to out-of-memory."
            ),
            resolve=f"GPU {device} memory back to {fraction:.0%} of capacity.",
            evidence=evidence,
            suggestion=(
                "Lower the batch size or canvas size, enable mixed precision (the Trainer's "
                "precision 16-mixed / bf16-mixed), or set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation."
            ),
        )


class HostMemoryLeak(Rule):
    """Host memory of the run (main RSS + workers' USS) grows steadily: the least-squares slope
    over the last ``window_s`` seconds exceeds ``min_growth_mb_per_min`` and, at that rate, the
    memory still available runs out within ``horizon_h`` hours. Needs at least half a window of
    samples. Resolves when growth falls below half the minimum or the projection exceeds twice
    the horizon."""

    name = AlertName.HOST_MEMORY_LEAK.value
    per_rank = True
    risk = True
    DEFAULTS: ClassVar[dict[str, Setting]] = {
        "hold_s": 120.0,
        "cooldown_s": 3600.0,
        "window_s": 600.0,
    }
    FROM_TABLE: ClassVar[dict[str, tuple[str, float]]] = {
        "min_growth_mb_per_min": ("host_memory_growth_mb_per_min", 1.0),
        "horizon_h": ("host_memory_horizon_h", 1.0),
    }

    def __init__(self, **settings: object) -> None:
        super().__init__(**settings)
        self._points: deque[tuple[float, float]] = deque()

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        s = self.settings
        memory = values.get("resources/process_tree_memory_gb")
        if memory is None:
            return None
        points = self._points
        points.append((t, memory))
        while points and points[0][0] < t - s["window_s"]:
            points.popleft()
        span = points[-1][0] - points[0][0]
        if len(points) < 3 or span < s["window_s"] / 2:
            return None
        times, sizes = zip(*points, strict=True)
        # least-squares slope (span > 0: the times are not all equal)
        slope_gb_s = statistics.linear_regression(times, sizes).slope if span else 0.0
        growth = slope_gb_s * 60 * _GB / _MB  # MiB per minute
        available = values.get("resources/memory_available_gb", math.inf)
        to_limit = available / slope_gb_s if slope_gb_s > 0 else math.inf
        horizon = s["horizon_h"] * 3600
        return Check(
            breach=growth > s["min_growth_mb_per_min"] and to_limit < horizon,
            clear=growth < s["min_growth_mb_per_min"] / 2 or to_limit > 2 * horizon,
            message=(
                f"Host memory of the run grows {growth:.0f} MiB/min ({points[0][1]:.2f} -> "
                f"{points[-1][1]:.2f} GiB over {duration(span)}); the {available:.1f} GiB still "
                f"available run out in about {duration(to_limit)} at this rate."
            ),
            resolve=f"Host memory growth stopped ({growth:.1f} MiB/min over {duration(span)}).",
            evidence={
                "growth_mb_per_min": growth,
                "memory_gb": points[-1][1],
                "memory_gb_window_start": points[0][1],
                "window_s": span,
                "available_gb": available,
                "time_to_limit_s": to_limit,
                "process_rss_gb": values.get("resources/process_rss_gb", math.nan),
                "workers_uss_gb": values.get("resources/workers_uss_gb", math.nan),
            },
            suggestion=(
                "Look for state that grows per sample in the Dataset, collate function or "
                "model's module (lists of outputs, unbounded caches: bound them, e.g. "
                "a max_bytes limit); workers_uss_gb vs process_rss_gb shows which process grows."
            ),
        )


class DiskSpace(Rule):
    """Free space where checkpoints go is below ``min_free_gb`` plus ``checkpoints_ahead``
    times the estimated checkpoint size. Resolves when free space exceeds ``clear_margin`` times
    that need."""

    name = AlertName.DISK_SPACE.value
    severity = "critical"
    risk = True
    DEFAULTS: ClassVar[dict[str, Setting]] = {"hold_s": 0.0, "cooldown_s": 3600.0}
    FROM_TABLE: ClassVar[dict[str, tuple[str, float]]] = {
        "min_free_gb": ("disk_min_free_gb", 1.0),
        "checkpoints_ahead": ("disk_checkpoints_ahead", 1.0),
        "clear_margin": ("disk_clear_margin", 1.0),
    }

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        s = self.settings
        free = values.get("resources/checkpoint_dir_free_gb")
        if free is None:
            return None
        ckpt_gb = ctx.checkpoint_bytes / _GB
        need = s["min_free_gb"] + s["checkpoints_ahead"] * ckpt_gb
        return Check(
            breach=free < need,
            clear=free > need * max(s["clear_margin"], 1.0),
            message=(
                f"Only {free:.2f} GiB free where checkpoints go; the next "
                f"{s['checkpoints_ahead']:.0f} checkpoint(s) of ~{ckpt_gb:.2f} GiB plus a "
                f"{s['min_free_gb']:.2f} GiB reserve need {need:.2f} GiB."
            ),
            resolve=f"Free space where checkpoints go is {free:.2f} GiB again "
            f"(need {need:.2f} GiB).",
            evidence={"free_gb": free, "checkpoint_gb": ckpt_gb, "needed_gb": need},
            suggestion=(
                "Free space or point the checkpoint dirpath elsewhere; keep fewer checkpoints "
                "(ModelCheckpoint save_top_k) or save weights only (save_weights_only=true)."
            ),
        )


class ThermalThrottle(Rule):
    """A GPU of this process cuts its clocks for heat (HW slowdown, SW/HW thermal) or a power
    brake; with ``include_power_cap`` also for running at its software power cap (usual under
    full load, so off by default)."""

    name = AlertName.THERMAL_THROTTLE.value
    per_rank = True
    risk = True
    DEFAULTS: ClassVar[dict[str, Setting]] = {
        "hold_s": 30.0,
        "cooldown_s": 3600.0,
        "include_power_cap": False,
    }
    _THERMAL = 0x8 | 0x20 | 0x40 | 0x80  # HW slowdown, SW thermal, HW thermal, HW power brake
    _POWER_CAP = 0x4

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        masks = gpu_values(values, "throttle_reasons")
        if not masks:
            return None
        bad = self._THERMAL | (self._POWER_CAP if self.settings["include_power_cap"] else 0)
        hit = {i: int(m) & bad for i, m in masks.items() if int(m) & bad}
        device = min(hit) if hit else min(masks)
        mask = int(masks[device])
        figures = {
            k: gpu_values(values, k).get(device, math.nan)
            for k in ("temperature_c", "sm_clock_mhz", "power_w")
        }
        evidence: dict[str, float | str] = {"gpu": float(device), "reasons_mask": float(mask)}
        evidence.update({k: v for k, v in figures.items() if math.isfinite(v)})
        return Check(
            breach=bool(hit),
            clear=not hit,
            message=(
                f"GPU {device} is throttling (clock-event reasons 0x{mask:x}) at "
                f"{figures['temperature_c']:.0f} C, SM clock {figures['sm_clock_mhz']:.0f} MHz."
            ),
            resolve=f"GPU {device} no longer throttles.",
            evidence=evidence,
            threshold={"reasons_mask": float(bad)},
            suggestion=(
                "Check the machine's cooling and airflow, the GPU's power limit "
                "(nvidia-smi -q -d PERFORMANCE) and other jobs on the same GPU."
            ),
        )
