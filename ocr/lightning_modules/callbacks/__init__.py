"""Lightning callbacks: thin adapters from Lightning to ``ocr.perf`` and the loggers."""

from ocr.lightning_modules.callbacks.epoch_scan import EpochScanCallback
from ocr.lightning_modules.callbacks.errors import PerfCallbackWarning
from ocr.lightning_modules.callbacks.interruption import InterruptCheckpoint
from ocr.lightning_modules.callbacks.live_line import PhaseRichProgressBar
from ocr.lightning_modules.callbacks.performance_profiler import PerformanceProfilerCallback
from ocr.lightning_modules.callbacks.plain_progress import PlainProgressBar
from ocr.lightning_modules.callbacks.profiler_callback import ProfilerCallback
from ocr.lightning_modules.callbacks.resource_monitor import ResourceMonitorCallback
from ocr.lightning_modules.callbacks.throughput_monitor import ThroughputMonitorCallback

__all__ = [
    "EpochScanCallback",
    "InterruptCheckpoint",
    "PerfCallbackWarning",
    "PerformanceProfilerCallback",
    "PhaseRichProgressBar",
    "PlainProgressBar",
    "ProfilerCallback",
    "ResourceMonitorCallback",
    "ThroughputMonitorCallback",
]
