"""The trace analyzer's entry points: one loaded trace in, one typed analysis out.

``analyze_table`` / ``analyze_path``: one loaded trace in, one typed
:class:`~trainperf.analysis.trace.trace_analysis.TraceAnalysis` out; ``analyze_trace``: its dict
form, the public API (documented keys ``top_cpu_ops``, ``top_cuda_ops``, ``memory_peaks``,
``dataloader_time_pct``...)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainperf.analysis.trace.documented import documented_dict
from trainperf.analysis.trace.ingest import load_or_spill
from trainperf.analysis.trace.integrity import implausible_limits
from trainperf.analysis.trace.memory_timeline import MemoryPeaks, device_ranges
from trainperf.analysis.trace.spill import Spilled
from trainperf.analysis.trace.steps import compute_steps
from trainperf.analysis.trace.table import EventTable, Kind
from trainperf.analysis.trace.trace_analysis import Timing, TraceAnalysis
from trainperf.analysis.trace.trace_rules import TraceRule
from trainperf.analysis.trace.window_sums import HookTimes, WindowSums, finish, hook_times, sums_of
from trainperf.analysis.trace.windowed import analyze_spilled

__all__ = ["analyze_path", "analyze_table", "analyze_trace", "trace_analysis"]


def analyze_trace(path: str | Path, top_k: int | None = 20) -> dict[str, Any]:
    """Analyse a torch.profiler Chrome trace (``.json``/``.json.gz``) or a directory of them.

    Returns the dict the original project documents
    (:func:`~trainperf.analysis.trace.documented.documented_dict`): ``top_cpu_ops`` and
    ``top_cuda_ops`` as ``(op_name, time_us)`` pairs, ``memory_peaks`` as ``(time_us, bytes)``,
    ``dataloader_time_pct``; and the rest of the analysis: ``steps`` (per-step breakdown whose
    phases sum to the step's wall time), ``phase_summary``, ``step_stats`` (per stage, with
    outlier steps), ``findings``, ``sources``, the full op rows under ``top_cpu_op_rows`` /
    ``top_cuda_op_rows`` / ``memory_peak_rows``. ``top_k`` ops per table (``None``: every op).
    The typed analysis: :func:`trace_analysis`. Raises
    :class:`~trainperf.analysis.trace.table.TraceError` for unreadable or malformed input.
    """
    return documented_dict(analyze_path(path, top_k))


def analyze_path(
    path: str | Path, top_k: int | None = 20, *, rules: Sequence[TraceRule] | None = None
) -> TraceAnalysis:
    """The typed analysis of a torch.profiler Chrome trace (``.json``/``.json.gz``) or a
    directory of them: ``top_k`` ops per table (``None``: every op), attributes as
    :func:`analyze_trace`'s keys (``analysis.top_cpu_ops[0].self_ms``, ``analysis.findings``...),
    its ``timing`` and ``input`` set, ``as_dict()`` the JSON view ``trainperf analyze --json``
    writes. Raises :class:`~trainperf.analysis.trace.table.TraceError` for unreadable or
    malformed input. ``rules`` replaces the trace rules (default ``TRACE_RULES.default()``,
    :mod:`~trainperf.analysis.trace.trace_rules`)."""
    analysis, _ = timed_analysis(path, str(path), top_k, rules=rules)
    return analysis


#: :func:`analyze_path` under the name the package exports (``trainperf.trace_analysis``).
trace_analysis = analyze_path


def timed_analysis(
    source: str | Path | Sequence[Path],
    label: str,
    top_k: int | None = 20,
    *,
    rules: Sequence[TraceRule] | None = None,
) -> tuple[TraceAnalysis, HookTimes]:
    """Load ``source`` (a file, a directory or files of one rank), analyse it and set the
    analysis's ``timing`` and ``input`` (``label``); with its time per callback and hook in the
    steps (the rank view). A single file too large for one table is analysed in time windows
    (:mod:`~trainperf.analysis.trace.windowed`), with the same results."""
    t0 = time.perf_counter()
    loaded = load_or_spill(source)
    t_load = time.perf_counter() - t0
    if isinstance(loaded, Spilled):
        parse_s = loaded.source.parse_s
        analysis, by_hook = analyze_spilled(loaded, top_k, rules)
    else:
        parse_s = sum(s.parse_s for s in loaded.sources)
        analysis, part = _analyze(loaded, top_k, rules)
        by_hook = hook_times(part)
    analysis.timing = Timing(
        load_s=round(t_load, 4),
        parse_s=round(parse_s, 4),
        total_s=round(time.perf_counter() - t0, 4),
    )
    analysis.input = label
    return analysis, by_hook


def analyze_table(
    table: EventTable, top_k: int | None = 20, *, rules: Sequence[TraceRule] | None = None
) -> TraceAnalysis:
    """The analysis of an already loaded table (see :func:`analyze_trace`), with the findings
    of ``rules`` (default: ``TRACE_RULES.default()``)."""
    return _analyze(table, top_k, rules)[0]


def _analyze(
    table: EventTable, top_k: int | None, rules: Sequence[TraceRule] | None = None
) -> tuple[TraceAnalysis, WindowSums]:
    """The analysis of a whole table (one window of itself) and its window sums."""
    steps = compute_steps(table)
    has_gpu = bool(np.isin(table.kind, Kind.DEVICE).any())
    part = sums_of(table, steps, has_gpu, implausible_limits(table))
    memory = MemoryPeaks(device_ranges(table.memory))
    memory.add(table.memory, steps)
    analysis = finish(
        part,
        table.sources,
        table.names,
        table.origin_ns,
        memory,
        list(table.warnings),
        top_k,
        rules,
    )
    return analysis, part
