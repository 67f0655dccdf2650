"""Moved to :mod:`trainperf.lightning.untimed_hooks` (this path works until 0.3)."""

from trainperf.core.moved import moved_module

__getattr__ = moved_module(__name__, "trainperf.lightning.untimed_hooks")
