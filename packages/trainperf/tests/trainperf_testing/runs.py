"""Hand-made run directories in the run-dir contract's formats (lines of the real record
schemas, ``trainperf.records``), for the report's unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from trainperf.core.clock import PHASES
from trainperf.records.epochs import EpochRecord, IntervalRecord
from trainperf.records.monitoring import AlertEvent, ResourceSample
from trainperf.records.run_info import write_run_info
from trainperf.records.schema import PERF_DIRNAME, Record

from trainperf_testing.run_lines import write_lines

T0 = 1_750_000_000.0  # a fixed unix time: reports must not depend on when they are made


def epoch_record(
    stage: str,
    epoch: int,
    phases: dict[str, float],
    *,
    worker_s: dict[str, float] | None = None,
    worker_counts: dict[str, int] | None = None,
    batches: int = 10,
    batch_size: int = 4,
    num_workers: int | None = 2,
    device: str = "cpu",
    batch_times: list[float] | None = None,
    spreads: dict[str, Any] | None = None,
    gpu_phases: dict[str, float] | None = None,
) -> dict[str, Any]:
    """One perf-epoch record whose phases sum to its wall time (``gpu_phases``: the CUDA-event
    span per phase, of a ``device="cuda"`` epoch)."""
    full = {p: float(phases.get(p, 0.0)) for p in PHASES}
    wall = sum(full.values())
    times = batch_times if batch_times is not None else [wall / batches] * batches
    samples = batches * batch_size
    return {
        "t": T0 + 100.0 * epoch + {"train": 0, "val": 50, "test": 90}[stage],
        "stage": stage,
        "epoch": epoch,
        "global_step": batches * (epoch + 1),
        "wall_s": wall,
        "phases_s": full,
        "gpu_phases_s": {p: float((gpu_phases or {}).get(p, 0.0)) for p in PHASES}
        if gpu_phases
        else {},
        "worker_s": worker_s or {},
        "worker_counts": worker_counts or {},
        "batch_stats": {
            "count": len(times),
            "mean": sum(times) / len(times),
            "median": sorted(times)[len(times) // 2],
            "p95": max(times),
            "p99": max(times),
            "std": 0.0,
            "min": min(times),
            "max": max(times),
        },
        "batch_times_s": times,
        "batch_times_stride": 1,
        "num_batches": batches,
        "samples": samples,
        "samples_per_sec": samples / wall,
        "batches_per_sec": batches / wall,
        "num_workers": num_workers,
        "batch_size": batch_size,
        "memory": {"process_rss_gb": 1.5, "system_memory_percent": 40.0},
        "peak_rss_gb": 1.6,
        "peak_gpu_memory_gb": None,
        "world_size": 1,
        "spreads": spreads or {},
        "device": device,
    }


def make_run(
    root: Path,
    epochs: list[dict[str, Any]] | None = None,
    *,
    config: dict[str, Any] | None = None,
    resources: list[dict[str, Any]] | None = None,
    alerts: list[dict[str, Any]] | None = None,
    intervals: list[dict[str, Any]] | None = None,
    run_info: dict[str, Any] | None = None,
) -> Path:
    """Write the given files of a run directory under ``root`` and return it."""
    root.mkdir(parents=True, exist_ok=True)
    perf = root / PERF_DIRNAME
    files: tuple[tuple[type[Record], list[dict[str, Any]] | None], ...] = (
        (EpochRecord, epochs),
        (IntervalRecord, intervals),
        (ResourceSample, resources),
        (AlertEvent, alerts),
    )
    for kind, records in files:
        if records is not None:
            write_lines(perf / kind.FILE, kind, records)
    if run_info is not None:
        write_run_info(root, run_info)
    if config is not None:
        hydra = root / ".hydra"
        hydra.mkdir(parents=True, exist_ok=True)
        (hydra / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (hydra / "overrides.yaml").write_text(yaml.safe_dump(["experiment=synthetic_debug"]))
    return root


#: The parts of a Hydra config the advice reads (as ocr-train writes them).
CONFIG: dict[str, Any] = {
    "data": {
        "canvas_size": 384,
        "batch_size": 8,
        "num_workers": 2,
        "persistent_workers": True,
        "pin_memory": None,
        "polygon_cache": {"enabled": False, "max_bytes": 1073741824},
    },
    "model": {"postprocess": {"box_thresh": 0.5, "max_candidates": 1000}},
    "trainer": {"check_val_every_n_epoch": 1, "log_every_n_steps": 5, "precision": "32-true"},
}
