"""Moved to :mod:`trainperf.cli.trial.run_guard` (this path works until 0.3)."""

from trainperf.core.moved import moved_module

__getattr__ = moved_module(__name__, "trainperf.cli.trial.run_guard")
