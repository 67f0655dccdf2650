"""Moved to :mod:`trainperf.analysis.trace.window_sums` (this path works until 0.3)."""

from trainperf.core.moved import moved_module

__getattr__ = moved_module(
    __name__,
    "trainperf.analysis.trace.window_sums",
    renamed={
        "TablePartial": "WindowSums",
        "partial_of": "sums_of",
        "Named": "HookTimes",
        "named": "hook_times",
    },
)
