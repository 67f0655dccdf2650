"""The report's profiler section: windows, agreement, memory and top ops.

The profiler section: the windows the profiler recorded, how its trace agrees with the phase
clock, and the trace's memory peaks and top ops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainperf.analysis.run import TRACE_DIRNAME
from trainperf.analysis.trace.short_names import short_names
from trainperf.present.report import plots
from trainperf.present.report.build import Report
from trainperf.present.report.document import Section, Table, cell

if TYPE_CHECKING:
    from trainperf.analysis.trace.trace_analysis import DeviceOpRow, OpRow


# ProfilerWindow fields shown as they are, each under its own name
_WINDOW_FIELDS = ("stage", "epoch", "trigger", "reason", "steps", "batches")


def _numbered(
    headers: list[str], ops: Sequence[OpRow | DeviceOpRow], fields: tuple[str, ...], caption: str
) -> Table:
    """One numbered row per op: its name (template and argument lists folded, the full name on
    hover), then its ``fields`` (percentages to one decimal)."""
    shown = short_names([op.name for op in ops])
    rows = [
        [str(i), name, *(cell(getattr(op, f), 1 if f.endswith("pct") else 2) for f in fields)]
        for i, (op, name) in enumerate(zip(ops, shown, strict=True), 1)
    ]
    titles = {
        (r, 1): op.name
        for r, (op, name) in enumerate(zip(ops, shown, strict=True))
        if name != op.name
    }
    return Table(["#", *headers], rows, caption, titles=titles)


def trace_section(report: Report) -> Section:
    trace = report.run.trace
    sec = Section(
        id="trace",
        title="Profiler trace: memory timeline and top ops",
        plot=plots.memory_timeline_plot(trace.memory_timeline if trace is not None else None),
        plot_alt="allocated memory over the profiled window",
    )
    windows = report.run.profiler_windows
    rows = [
        [
            *(cell(getattr(w, f)) for f in _WINDOW_FIELDS),
            cell(w.overhead_s.get("export")),
            cell(w.overhead_s.get("analysis")),
            cell(w.traces),
        ]
        for w in windows
    ]
    sec.add(
        Table(
            [*_WINDOW_FIELDS, "export s", "analysis s", "traces"],
            rows,
            "Profiler windows (export and analysis are the profiler's own cost)",
        )
    )
    for w in windows:
        agreement = w.clock_agreement
        if agreement is None:
            continue
        sec.tables.append(
            Table(
                ["phase", "ms/step", "trace ms/step", "Δ %", "agree"],
                [
                    [
                        *(cell(p.get(k)) for k in ("phase", "clock_ms", "trace_ms", "diff_pct")),
                        "yes" if p.get("agree") else "NO",
                    ]
                    for p in agreement.get("phases") or []
                ],
                f"Profiled steps, {w.stage.label} epoch "
                f"{cell(w.epoch)}: one figure per phase (the phase clock) with the trace's "
                f"beside it, over the same {cell(agreement.get('steps'))} steps (tolerance "
                f"{cell(agreement.get('tolerance_pct'))} %)",
            )
        )
    if trace is None:
        sec.paragraphs.append(report.run.trace_note or "No trace.")
        return sec
    s = trace.summary
    sec.paragraphs.append(
        f"Files: {', '.join(report.run.trace_files)}. {s.n_steps} steps, "
        f"{cell(s.events)} events, "
        + ("GPU: " + ", ".join(s.devices) if s.has_gpu else "CPU only")
        + f"; data wait {cell(trace.dataloader_time_pct, 1)} % of the step time."
    )
    if len(trace.sources) < len(report.run.trace_files) and s.ranks:
        sec.paragraphs.append(
            f"DDP: the figures below are rank {s.ranks[0]}'s; `trainperf analyze "
            f"{TRACE_DIRNAME}/` sets every rank side by side with the straggler."
        )
    # the trace's integrity: one line per problem, nothing when clean
    sec.paragraphs += [f"Trace integrity: {line}." for line in trace.integrity.lines()]
    sec.add(
        Table(
            ["device", "peak allocated GiB", "% of capacity", "step", "phase"],
            [
                [
                    cell(p.device),
                    cell(p.peak_allocated_bytes / 2**30, 3),
                    cell(p.pct_of_capacity),
                    cell(p.step),
                    cell(p.phase),
                ]
                for p in trace.memory_peaks
            ],
            "Memory peaks",
        )
    )
    sec.add(
        _numbered(
            ["op", "calls", "self ms", "total ms", "self %", "ms/step"],
            trace.top_cpu_ops,
            ("calls", "self_ms", "total_ms", "self_pct", "self_ms_per_step"),
            "Top CPU ops by self time",
        )
    )
    sec.add(
        _numbered(
            ["kernel", "calls", "total ms", "%", "ms/step", "launched by"],
            trace.top_cuda_ops,
            ("calls", "total_ms", "share_pct", "self_ms_per_step", "launched_by"),
            "Top CUDA kernels",
        )
    )
    return sec
