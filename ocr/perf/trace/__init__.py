"""Fast analysis of torch.profiler Chrome traces (``ocr-perf analyze`` / ``ocr-perf compare``).

Ingestion (:mod:`~ocr.perf.trace.load`, per file :mod:`~ocr.perf.trace.decode`) parses each file
once into one columnar event table; the step breakdown (:mod:`~ocr.perf.trace.steps`, in the live
clock's phase names), aggregates (:mod:`~ocr.perf.trace.aggregates`), measured figures
(:mod:`~ocr.perf.trace.metrics`), finding rules (:mod:`~ocr.perf.trace.findings`) and the
comparison (:mod:`~ocr.perf.trace.compare`) are vectorised numpy over that table. The result is
typed (:class:`~ocr.perf.trace.result.TraceAnalysis`); ``analyze_trace`` returns its dict form.
No Lightning.
"""

from ocr.perf.trace.compare import compare_reports
from ocr.perf.trace.load import load_traces
from ocr.perf.trace.report import analyze_path, analyze_table, analyze_trace
from ocr.perf.trace.result import TraceAnalysis
from ocr.perf.trace.table import TraceError

__all__ = [
    "TraceAnalysis",
    "TraceError",
    "analyze_path",
    "analyze_table",
    "analyze_trace",
    "compare_reports",
    "load_traces",
]
