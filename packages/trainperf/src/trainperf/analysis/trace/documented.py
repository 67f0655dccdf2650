"""The dict ``analyze_trace`` returns: a typed trace analysis in the documented shape.

The shape is the one the original project documents (its task 3.2, a contract:
``trainperf.analyze_trace(path)`` and ``ProfilerCallback.analyze_trace(trace_path)`` both return
it).

Documented keys, in the documented shape:

* ``top_cpu_ops``: ``[(op_name, time_us), ...]``: each CPU op's self time in µs, slowest first;
* ``top_cuda_ops``: ``[(op_name, time_us), ...]``: each device op's (kernel, copy, set) time in µs;
* ``memory_peaks``: ``[(time, bytes), ...]``: when each device's allocated memory peaked (µs into
  the trace) and the peak in bytes;
* ``dataloader_time_pct``: the share of the profiled steps' wall time spent waiting for data (%).

Every other key of :meth:`~trainperf.analysis.trace.TraceAnalysis.as_dict` is kept as it is
(``steps``, ``phase_summary``, ``step_stats``, ``findings``, ``sources``, ``metrics``...), and the
full rows the pairs are made from stay under ``top_cpu_op_rows``, ``top_cuda_op_rows`` and
``memory_peak_rows`` (self and total ms, calls, per step, device...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainperf.analysis.trace.trace_analysis import TraceAnalysis

__all__ = ["documented_dict"]


def documented_dict(analysis: TraceAnalysis) -> dict[str, Any]:
    """``analysis`` as the documented dict (module docstring): the pairs under the documented
    keys, the rows beside them, every other key of its ``as_dict()`` unchanged."""
    view = analysis.as_dict()
    return {
        **view,
        "top_cpu_ops": [(r.name, _us(r.self_ms)) for r in analysis.top_cpu_ops],
        "top_cuda_ops": [(r.name, _us(r.total_ms)) for r in analysis.top_cuda_ops],
        "memory_peaks": [(_us(p.at_ms), p.peak_allocated_bytes) for p in analysis.memory_peaks],
        "top_cpu_op_rows": view["top_cpu_ops"],
        "top_cuda_op_rows": view["top_cuda_ops"],
        "memory_peak_rows": view["memory_peaks"],
    }


def _us(ms: float) -> float:
    """Milliseconds as microseconds, to the nanosecond the trace is kept in."""
    return round(ms * 1e3, 3)
