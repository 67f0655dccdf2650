"""Resource sampling off the training thread: host, DataLoader workers, disk, network, GPU.

One job per module:

- :mod:`~ocr.perf.resources.sampler`: :class:`ResourceSampler` reads every source once per call
  into a flat ``{"resources/<name>": float}`` dict (names and meanings in
  :data:`~ocr.perf.resources.metrics.METRIC_DOCS`);
- :mod:`~ocr.perf.resources.host`: kept process handles (CPU, I/O, USS/PSS) and the
  cgroup-aware memory limit; :mod:`~ocr.perf.resources.nvml`: the GPUs through NVML;
- :mod:`~ocr.perf.resources.signals`: :class:`StepSignals`, stamped by the callback's hooks;
- :mod:`~ocr.perf.resources.monitor`: :class:`ResourceMonitor` runs the sampler on a daemon
  thread every ``interval_s``, adds the training signals, feeds an
  :class:`ocr.perf.alerts.AlertEngine`, averages samples into one record per logging interval
  (``<run>/perf/resources.jsonl``) and keeps a run summary.

Nothing here imports Lightning.
"""

from __future__ import annotations

from ocr.perf.resources.host import memory_limit
from ocr.perf.resources.metrics import METRIC_DOCS
from ocr.perf.resources.monitor import (
    RESOURCE_SAMPLE_SCHEMA,
    RESOURCE_SUMMARY_SCHEMA,
    THREAD_NAME,
    ResourceMonitor,
)
from ocr.perf.resources.nvml import normalize_uuid
from ocr.perf.resources.sampler import ResourceMonitorWarning, ResourceSampler
from ocr.perf.resources.signals import StepSignals

__all__ = [
    "METRIC_DOCS",
    "RESOURCE_SAMPLE_SCHEMA",
    "RESOURCE_SUMMARY_SCHEMA",
    "THREAD_NAME",
    "ResourceMonitor",
    "ResourceMonitorWarning",
    "ResourceSampler",
    "StepSignals",
    "memory_limit",
    "normalize_uuid",
]
