"""Moved to :mod:`trainperf.analysis.memory_growth.process` (this path works until 0.3)."""

from trainperf.core.moved import moved_module

__getattr__ = moved_module(__name__, "trainperf.analysis.memory_growth.process")
