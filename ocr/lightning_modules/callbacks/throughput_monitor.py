"""``ThroughputMonitorCallback`` where the original project's documents put it
(``../shared/seeds``): the toolkit's class, :class:`trainperf.lightning.ThroughputMonitorCallback`,
re-exported."""

from trainperf.lightning import ThroughputMonitorCallback

__all__ = ["ThroughputMonitorCallback"]
