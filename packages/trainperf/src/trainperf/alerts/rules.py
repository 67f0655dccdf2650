"""Moved to :mod:`trainperf.alerts.catalogue` (this path works until 0.3)."""

from trainperf.core.moved import moved_module

__getattr__ = moved_module(__name__, "trainperf.alerts.catalogue")
