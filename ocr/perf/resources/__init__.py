"""Resource sampling off the training thread (no Lightning): :mod:`~ocr.perf.resources.sampler`
reads every source once per call (names in :mod:`~ocr.perf.resources.metrics`; process handles in
:mod:`~ocr.perf.resources.host`, GPUs in :mod:`~ocr.perf.resources.nvml`);
:mod:`~ocr.perf.resources.monitor` runs it on a daemon thread with the hooks' stamps
(:mod:`~ocr.perf.resources.signals`), the alert engine, the records and the run summary.
"""

from __future__ import annotations

from ocr.perf.resources.metrics import METRIC_DOCS
from ocr.perf.resources.monitor import ResourceMonitor
from ocr.perf.resources.sampler import ResourceMonitorWarning, ResourceSampler
from ocr.perf.resources.signals import StepSignals

__all__ = [
    "METRIC_DOCS",
    "ResourceMonitor",
    "ResourceMonitorWarning",
    "ResourceSampler",
    "StepSignals",
]
