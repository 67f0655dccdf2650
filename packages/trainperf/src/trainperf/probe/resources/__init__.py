"""Resource sampling off the training thread.

Resource sampling off the training thread (no Lightning): ``sampler`` reads every source once
per call (names in ``metrics``, process handles in ``host``, GPUs in ``nvml``); ``monitor`` runs
it on a daemon thread with the hooks' stamps (``signals``), the alert engine and the records.
"""

from __future__ import annotations

from trainperf.probe.resources.metric_names import METRIC_DOCS
from trainperf.probe.resources.monitor import ResourceMonitor
from trainperf.probe.resources.sampler import ResourceMonitorWarning, ResourceSampler
from trainperf.probe.resources.signals import StepSignals

__all__ = [
    "METRIC_DOCS",
    "ResourceMonitor",
    "ResourceMonitorWarning",
    "ResourceSampler",
    "StepSignals",
]
