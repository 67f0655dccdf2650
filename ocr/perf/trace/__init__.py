"""Fast analysis of torch.profiler Chrome traces (``ocr-perf analyze`` / ``ocr-perf compare``).

Ingestion (:mod:`~ocr.perf.trace.load`) parses each file once into one columnar event table;
the analyses (:mod:`~ocr.perf.trace.analyses`), findings (:mod:`~ocr.perf.trace.findings`) and
comparison (:mod:`~ocr.perf.trace.compare`) are vectorised numpy over that table. No Lightning.
"""

from ocr.perf.trace.compare import compare_reports, compare_traces
from ocr.perf.trace.findings import THRESHOLDS, Finding, TraceMetrics
from ocr.perf.trace.load import EventTable, TraceError, TraceSource, load_traces
from ocr.perf.trace.report import analyze_table, analyze_trace

__all__ = [
    "THRESHOLDS",
    "EventTable",
    "Finding",
    "TraceError",
    "TraceMetrics",
    "TraceSource",
    "analyze_table",
    "analyze_trace",
    "compare_reports",
    "compare_traces",
    "load_traces",
]
