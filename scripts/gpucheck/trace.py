"""The profiled epoch's trace: what the document shows of a ``trainperf analyze --json`` report,
and the gzip trace saved as a test fixture."""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FIXTURE_MAX_BYTES = 2 * 1024 * 1024


def h2d_copies(device_ops: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Host-to-device copies by source memory (``Memcpy HtoD (Pinned -> Device)`` /
    ``(Pageable -> Device)``) from the analyzer's device-op rows: calls and ms."""
    out: dict[str, dict[str, float]] = {}
    for op in device_ops:
        name = str(op.get("name", ""))
        if op.get("kind") != "memcpy" or "HtoD" not in name:
            continue
        source = "pinned" if "Pinned" in name else "pageable" if "Pageable" in name else "other"
        entry = out.setdefault(source, {"calls": 0.0, "ms": 0.0})
        entry["calls"] += float(op.get("calls") or 0)
        entry["ms"] += float(op.get("total_ms") or 0.0)
    return out


def trace_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """What the document shows of a ``trainperf analyze --json`` report: steps, GPU busy and idle,
    device time per phase (mean over steps), H2D copies, the trace-vs-clock agreement and the
    findings."""
    metrics = report.get("metrics") or {}
    steps = [s for s in report.get("steps") or [] if s.get("gpu_phases_ms")]
    per_phase: dict[str, float] = {}
    for step in steps:
        for phase, ms in step["gpu_phases_ms"].items():
            per_phase[phase] = per_phase.get(phase, 0.0) + float(ms) / len(steps)
    agreement = report.get("clock_agreement") or {}
    return {
        "has_gpu": bool(metrics.get("has_gpu")),
        "steps": metrics.get("n_steps"),
        "step_ms": metrics.get("step_wall_ms"),
        "gpu_busy_pct": metrics.get("gpu_busy_pct"),
        "gpu_idle_ms_per_step": metrics.get("gpu_idle_ms_per_step"),
        "kernels_per_step": metrics.get("kernels_per_step"),
        "device_ms_per_phase": per_phase,
        "h2d": h2d_copies(report.get("top_cuda_ops") or []),
        "clock_agrees": agreement.get("agree"),
        "findings": [f"{f.get('severity')}: {f.get('title')}" for f in report.get("findings", [])],
    }


#: Fixture names by the run's configuration: the default one (16-mixed) and the A/B's fast one.
FIXTURE_CONFIGS = {"default": "16mixed", "fast": "bf16mixed_cl_fused"}


def fixture_name(device_name: str, config: str = FIXTURE_CONFIGS["default"]) -> str:
    """``dbnet_r18_640_<config>_<device>.pt.trace.json.gz``, the device name as a slug."""
    slug = "".join(c if c.isalnum() else "_" for c in device_name.lower()).strip("_")
    return f"dbnet_r18_640_{config}_{slug}.pt.trace.json.gz"


def save_fixture(
    trace: Path, dest_dir: Path, device_name: str, config: str = FIXTURE_CONFIGS["default"]
) -> dict[str, Any]:
    """Copy the gzip trace ``trace`` to ``dest_dir`` as :func:`fixture_name` (recompressed at
    level 9 when over :data:`FIXTURE_MAX_BYTES`; refused when still over)."""
    dest = dest_dir / fixture_name(device_name, config)
    data = trace.read_bytes()
    if not trace.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9)
    elif len(data) > FIXTURE_MAX_BYTES:
        data = gzip.compress(gzip.decompress(data), compresslevel=9)
    if len(data) > FIXTURE_MAX_BYTES:
        raise ValueError(
            f"{trace}: {len(data) / 2**20:.2f} MiB gzip, over the fixture limit of "
            f"{FIXTURE_MAX_BYTES / 2**20:.0f} MiB; profile fewer steps "
            "(callbacks.profiler.schedule.active=2) or without "
            "callbacks.profiler.trace.record_shapes"
        )
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return {"path": str(dest), "bytes": len(data), "source": str(trace)}
