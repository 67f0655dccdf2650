"""Lightning callbacks: thin adapters from Lightning to ``trainperf`` and the loggers."""

from trainperf.errors import PerfCallbackWarning
from trainperf.lightning.epoch_scan import EpochScanCallback
from trainperf.lightning.interruption import InterruptCheckpoint
from trainperf.lightning.live_line import PhaseRichProgressBar
from trainperf.lightning.performance_profiler import PerformanceProfilerCallback
from trainperf.lightning.plain_progress import PlainProgressBar
from trainperf.lightning.profiler_callback import ProfilerCallback
from trainperf.lightning.resource_monitor import ResourceMonitorCallback
from trainperf.lightning.throughput_monitor import ThroughputMonitorCallback
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions

__all__ = [
    "EpochScanCallback",
    "InterruptCheckpoint",
    "PerfCallbackWarning",
    "PerformanceProfilerCallback",
    "PhaseRichProgressBar",
    "PlainProgressBar",
    "ProfileSchedule",
    "ProfilerCallback",
    "ResourceMonitorCallback",
    "ThroughputMonitorCallback",
    "TraceOptions",
]
