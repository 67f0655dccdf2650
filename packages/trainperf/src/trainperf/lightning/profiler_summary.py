"""A closed ``ProfilerCallback`` window summarised, printed and recorded.

A closed ``ProfilerCallback`` window summarised: all its cycles analysed as one trace table,
the trace's phases set beside the live phase clock's over the same steps, the tables and
findings printed (rank zero), a few scalars sent to every logger, and the window's
``profiler.jsonl`` record."""

from __future__ import annotations

import logging
import time

import lightning as L

from trainperf.analysis.trace import analyze_table, load_traces
from trainperf.analysis.trace.clock_windows import compare_with_clock
from trainperf.core.stage import Stage
from trainperf.lightning.loggers import log_to_loggers
from trainperf.lightning.profiler_window import Window
from trainperf.present.trace_tables import print_analysis
from trainperf.probe.sync_debug import sync_lines_finding
from trainperf.records.monitoring import ProfilerWindow

log = logging.getLogger("trainperf.lightning.profiler_callback")


def summarise_window(
    trainer: L.Trainer, window: Window, top_k: int, traces: list[str], callback: str
) -> ProfilerWindow:
    """Analyse ``window``'s traces (``top_k`` rows per operator table), print and log the
    summary, and return its ``profiler.jsonl`` record (``traces``: the files it names;
    ``callback``: the display name of the callback that ran the window)."""
    stage = window.stage
    t0 = time.perf_counter()
    # every cycle of the window in one table: the summary covers all of them
    report = analyze_table(load_traces(window.traces), top_k=top_k)
    trace_stage = Stage(stage).trace_name
    agreement = compare_with_clock(report, window.clock.per_step_ns(), trace_stage)
    if agreement is not None:
        report.add_agreement(agreement)
    lines = sync_lines_finding(window.sync_lines, window.steps, stage)
    if lines is not None:
        report.findings.append(lines)
    if trainer.is_global_zero:
        print_analysis(report)
    analysis_s = time.perf_counter() - t0
    steps = [row.wall_ms for row in report.steps if row.stage == trace_stage] or [
        row.wall_ms for row in report.steps
    ]
    metrics = {f"profiler/{stage}_dataloader_pct": float(report.dataloader_time_pct)}
    if steps:
        metrics[f"profiler/{stage}_step_time_ms"] = sum(steps) / len(steps)
    top = report.top_cpu_ops
    if top:
        per_step = top[0].self_ms_per_step
        metrics[f"profiler/{stage}_top_op_self_ms"] = float(
            per_step if per_step is not None else top[0].self_ms
        )
    log_to_loggers(trainer, metrics)
    view = report.as_dict()  # the record is JSON
    record = ProfilerWindow(
        t=time.time(),
        stage=Stage(stage),
        epoch=window.epoch,
        trigger=window.trigger,
        reason=window.reason,
        steps=report.summary.n_steps,
        traces=traces,
        # batches whose time the profiler inflated (recording, export at the last one)
        batches=None
        if window.first_batch is None or window.last_batch is None
        else (window.first_batch, window.last_batch),
        # the profiler's own cost; the phase clock books it under the callbacks phase
        overhead_s={"export": round(window.export_s, 6), "analysis": round(analysis_s, 6)},
        callback=callback,
        summary={
            "top_cpu_ops": view["top_cpu_ops"],
            "findings": view["findings"],
            "dataloader_time_pct": report.dataloader_time_pct,
            "step_time_ms": metrics.get(f"profiler/{stage}_step_time_ms"),
            "phases_ms_per_step": {
                st: {p: v.mean_ms for p, v in ps.phases.items()}
                for st, ps in report.phase_summary.items()
            },
        },
        clock_agreement=view.get("clock_agreement"),
    )
    log.info(
        "%s: %s window %s (%d trace(s)): %d steps, mean %.3f ms, data loading %.1f%%, %d findings",
        "ProfilerCallback",
        stage,
        window.basename,
        len(window.traces),
        len(steps),
        metrics.get(f"profiler/{stage}_step_time_ms", float("nan")),
        metrics[f"profiler/{stage}_dataloader_pct"],
        len(report.findings),
    )
    return record
