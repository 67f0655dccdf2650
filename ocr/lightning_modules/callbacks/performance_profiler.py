"""``PerformanceProfilerCallback`` where the original project's documents put it
(``../shared/seeds``): the toolkit's class,
:class:`trainperf.lightning.PerformanceProfilerCallback`, re-exported."""

from trainperf.lightning import PerformanceProfilerCallback

__all__ = ["PerformanceProfilerCallback"]
