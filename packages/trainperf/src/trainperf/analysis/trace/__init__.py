"""Fast analysis of torch.profiler Chrome traces (``trainperf analyze`` / ``trainperf compare``).

Ingestion (:mod:`~trainperf.analysis.trace.ingest`, per file
:mod:`~trainperf.analysis.trace.decode`) parses each file
once into one columnar event table; the step breakdown (:mod:`~trainperf.analysis.trace.steps`, in
the live clock's phase names), aggregates (:mod:`~trainperf.analysis.trace.aggregates`), measured
figures (:mod:`~trainperf.analysis.trace.measures`), finding rules (the registry
:data:`~trainperf.analysis.trace.trace_rules.TRACE_RULES`) and the
comparison (:mod:`~trainperf.analysis.trace.compare`) are vectorised numpy over that table. The
result is typed
(:class:`~trainperf.analysis.trace.trace_analysis.TraceAnalysis`); ``analyze_trace`` returns it
as the documented dict (:mod:`~trainperf.analysis.trace.documented`).
No Lightning.
"""

from trainperf.analysis.trace.analyze import analyze_path, analyze_table, analyze_trace
from trainperf.analysis.trace.compare import compare_reports
from trainperf.analysis.trace.ingest import load_traces
from trainperf.analysis.trace.table import TraceError
from trainperf.analysis.trace.trace_analysis import TraceAnalysis
from trainperf.analysis.trace.trace_metrics import TraceContext, TraceMetrics
from trainperf.analysis.trace.trace_rules import TRACE_RULES, TraceRule

__all__ = [
    "TRACE_RULES",
    "TraceAnalysis",
    "TraceContext",
    "TraceError",
    "TraceMetrics",
    "TraceRule",
    "analyze_path",
    "analyze_table",
    "analyze_trace",
    "compare_reports",
    "load_traces",
]
