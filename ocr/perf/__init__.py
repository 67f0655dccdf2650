"""Measurement core of the performance toolkit; imports no Lightning and never logs.

Phase clock (:mod:`ocr.perf.clock`), streaming statistics (:mod:`ocr.perf.stats`), DataLoader
worker timing (:mod:`ocr.perf.worker`), DDP rank spread (:mod:`ocr.perf.ranks`), memory
snapshots (:mod:`ocr.perf.memory`) and trace analysis (:mod:`ocr.perf.trace`).

Names are re-exported lazily (PEP 562): ``ocr-perf analyze`` imports ``ocr.perf.trace`` and must
not pay for importing torch through ``ocr.perf.worker``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "PHASES": "ocr.perf.clock",
    "PhaseClock": "ocr.perf.clock",
    "PhaseTotals": "ocr.perf.clock",
    "active_clock": "ocr.perf.clock",
    "perf_phase": "ocr.perf.clock",
    "set_active_clock": "ocr.perf.clock",
    "memory_snapshot": "ocr.perf.memory",
    "reset_peak_memory": "ocr.perf.memory",
    "rank_spread": "ocr.perf.ranks",
    "StreamingStats": "ocr.perf.stats",
    "InstrumentedLoader": "ocr.perf.worker",
    "TimedBatch": "ocr.perf.worker",
    "WorkerTiming": "ocr.perf.worker",
    "report_part": "ocr.perf.worker",
}

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

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ocr.perf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
