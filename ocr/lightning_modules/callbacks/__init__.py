"""The original project's import path for its performance callbacks, kept for its users
(``../shared/seeds``: ``000_…`` and ``001_…`` import ``PerformanceProfilerCallback`` from here,
``004_…`` names the ``throughput_monitor``, ``profiler_callback`` and ``resource_monitor``
modules). Each name is the toolkit's own class from :mod:`trainperf.lightning`, re-exported: no
second copy of any logic lives in the app.

    from ocr.lightning_modules.callbacks import PerformanceProfilerCallback
"""

from ocr.lightning_modules.callbacks.performance_profiler import PerformanceProfilerCallback
from ocr.lightning_modules.callbacks.profiler_callback import (
    ProfilerCallback,
    ProfileSchedule,
    TraceOptions,
)
from ocr.lightning_modules.callbacks.resource_monitor import ResourceMonitorCallback
from ocr.lightning_modules.callbacks.throughput_monitor import ThroughputMonitorCallback

__all__ = [
    "PerformanceProfilerCallback",
    "ProfileSchedule",
    "ProfilerCallback",
    "ResourceMonitorCallback",
    "ThroughputMonitorCallback",
    "TraceOptions",
]
