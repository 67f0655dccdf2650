"""Hand-made run folders for the regression gate's tests: epochs.jsonl lines and run.json (no
Trainer, no wall clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainperf.records.epochs import EpochRecord
from trainperf.records.run_info import write_run_info

from trainperf_testing.run_lines import write_lines

PHASES = ("data_wait", "forward", "postprocess", "metric", "callbacks", "unattributed")


def epoch_record(
    epoch: int,
    *,
    stage: str = "val",
    scale: float = 1.0,
    jitter: float = 0.0,
    hits: int = 40,
    misses: int = 0,
    samples: int = 40,
) -> dict[str, Any]:
    """One epochs.jsonl line: phases of 0.1/2.0/1.0/... s times ``scale`` (+ ``jitter``)."""
    base = {"data_wait": 0.1, "forward": 2.0, "postprocess": 1.0, "metric": 0.01}
    phases = {name: base.get(name, 0.005) * scale + jitter for name in PHASES}
    wall = sum(phases.values())
    batches = [wall / 5 * f for f in (0.9, 1.0, 1.1, 0.95, 1.05)]
    return {
        "t": 1.0e9 + epoch,
        "stage": stage,
        "epoch": epoch,
        "global_step": 10 * epoch,
        "wall_s": wall,
        "phases_s": phases,
        "gpu_phases_s": {},
        "worker_s": {"fetch": 0.3 * scale, "collate": 0.2 * scale, "targets": 0.08 * scale},
        "worker_counts": {"polygon_cache_hits": hits, "polygon_cache_misses": misses},
        "batch_stats": {"median": sorted(batches)[2], "p95": max(batches), "mean": wall / 5},
        "batch_times_s": batches,
        "batch_times_stride": 1,
        "num_batches": 5,
        "samples": samples,
        "samples_per_sec": samples / wall,
        "num_workers": 2,
        "batch_size": 8,
        "peak_rss_gb": 1.0,
        "world_size": 1,
        "device": "cpu",
    }


def make_run(root: Path, records: list[dict[str, Any]], cpu_count: int = 2) -> Path:
    write_lines(EpochRecord.path(root), EpochRecord, records)
    write_run_info(root, {"cpu_count": cpu_count, "hostname": "host-a"})
    return root
