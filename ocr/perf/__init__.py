"""Measurement core of the performance toolkit; imports no Lightning and never logs.

Phase clock (:mod:`ocr.perf.clock`), streaming statistics (:mod:`ocr.perf.stats`), DataLoader
worker timing (:mod:`ocr.perf.worker`), DDP rank spread (:mod:`ocr.perf.ranks`), memory
snapshots (:mod:`ocr.perf.memory`) and trace analysis (:mod:`ocr.perf.trace`). Import names from
their modules; the package itself offers only :func:`~ocr.perf.clock.perf_phase`, the one name
user code calls (``ocr.perf.perf_phase("postprocess")``), and imports nothing heavy for it.
"""

from ocr.perf.clock import perf_phase

__all__ = ["perf_phase"]
