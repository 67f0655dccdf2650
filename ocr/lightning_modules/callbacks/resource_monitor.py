"""``ResourceMonitorCallback`` where the original project's documents put it
(``../shared/seeds``): the toolkit's class, :class:`trainperf.lightning.ResourceMonitorCallback`,
re-exported."""

from trainperf.lightning import ResourceMonitorCallback

__all__ = ["ResourceMonitorCallback"]
