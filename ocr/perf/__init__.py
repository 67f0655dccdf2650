"""Measurement core of the performance toolkit; imports no Lightning and never logs.

Phase clock (:mod:`ocr.perf.clock`), streaming statistics (:mod:`ocr.perf.stats`), DataLoader
worker timing (:mod:`ocr.perf.worker`), DDP rank spread (:mod:`ocr.perf.ranks`) and memory
snapshots (:mod:`ocr.perf.memory`).
"""

from ocr.perf.clock import (
    PHASES,
    PhaseClock,
    PhaseTotals,
    active_clock,
    perf_phase,
    set_active_clock,
)
from ocr.perf.memory import memory_snapshot, reset_peak_memory
from ocr.perf.ranks import rank_spread
from ocr.perf.stats import StreamingStats
from ocr.perf.worker import InstrumentedLoader, TimedBatch, WorkerTiming, report_part

__all__ = [
    "PHASES",
    "InstrumentedLoader",
    "PhaseClock",
    "PhaseTotals",
    "StreamingStats",
    "TimedBatch",
    "WorkerTiming",
    "active_clock",
    "memory_snapshot",
    "perf_phase",
    "rank_spread",
    "report_part",
    "reset_peak_memory",
    "set_active_clock",
]
