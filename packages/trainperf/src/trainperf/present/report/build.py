"""``build_report``: a run directory (and optionally a baseline) in, one :class:`Report` out."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainperf.analysis.gate import GateOutcome
from trainperf.analysis.gpu_wait import StageWait, gpu_waits
from trainperf.analysis.run import TRACE_DIRNAME, ReportInputError, RunData, config_value, load_run
from trainperf.analysis.stages import StageSummary, summarize_stages
from trainperf.analysis.verdict import judge
from trainperf.core.findings import Finding
from trainperf.core.stage import Stage
from trainperf.errors import InputError
from trainperf.present.report.profiled import move_profiler_overhead
from trainperf.present.report.run_name import RunName, run_name

if TYPE_CHECKING:
    from trainperf.analysis.trace.result import TraceAnalysis


# Rows kept from the trace analysis for the report (the rest is in `trainperf analyze`).
_TRACE_TOP_K = 15


@dataclass
class Report:
    """Everything the page, the Markdown and the terminal summary show.

    ``findings`` are ranked (first = the change that could recover the most); ``gpu_waits``
    splits each CUDA stage's phases into own work and waiting for the GPU; ``trace`` has its top ops
    cut to what the report shows and paths relative to the run; each ``*_note`` says why its
    section has nothing; ``baseline_name`` is the file's name without its folder (so copies
    compare equal).
    """

    run: RunData
    name: RunName
    stages: dict[Stage, StageSummary]
    findings: list[Finding]
    trace: TraceAnalysis | None = None
    trace_note: str | None = None
    baseline: GateOutcome | None = None
    baseline_name: str | None = None
    baseline_note: str | None = None
    gpu_waits: dict[Stage, StageWait] = field(default_factory=dict)


def _relative(text: str, root: Path) -> str:
    """Error messages and paths with the run directory replaced by ``<run>`` (a copied run must
    give the same report)."""
    for form in {str(root), str(root.resolve())}:
        text = text.replace(form, "<run>")
    return text


def _no_trace_note(run: RunData) -> str:
    """How to get a trace, naming the run's own switch when its config has one (the default
    callbacks carry a disabled ``profiler`` entry); otherwise the callback itself."""
    if isinstance(config_value(run.config, "callbacks.profiler.enabled"), bool):
        how = "rerun with callbacks.profiler.enabled=true"
    else:
        how = "attach trainperf.lightning.ProfilerCallback"
    return f"no profiler trace recorded ({how})"


def _analyze_traces(run: RunData) -> tuple[TraceAnalysis | None, str | None]:
    if not run.trace_files:
        return None, _no_trace_note(run)
    from trainperf.analysis.trace import TraceError, analyze_path, analyze_table, load_traces
    from trainperf.analysis.trace.ingest import find_trace_files
    from trainperf.analysis.trace.rankset import group_by_rank

    root = run.run_dir
    try:
        groups = group_by_rank(find_trace_files(root / TRACE_DIRNAME))
        if groups is None:
            analysis = analyze_path(root / TRACE_DIRNAME, top_k=_TRACE_TOP_K)
        else:  # DDP: the lowest rank's traces, never the ranks summed into one breakdown
            analysis = analyze_table(load_traces(groups[min(groups)]), top_k=_TRACE_TOP_K)
    except (TraceError, OSError) as exc:
        return None, _relative(f"profiler trace unreadable: {exc}", root)
    for source in analysis.sources:
        source.path = _relative(source.path, root)
    analysis.warnings = [_relative(w, root) for w in analysis.warnings]
    analysis.input = None  # the report names the files relative to the run
    return analysis, None


def _compare_baseline(
    run_dir: Path, baseline: str | os.PathLike[str]
) -> tuple[GateOutcome | None, str | None]:
    path = Path(baseline)
    if not path.exists():
        raise ReportInputError(f"{path}: baseline not found")
    from trainperf.analysis.baseline import load_source
    from trainperf.analysis.gate import check_baseline

    try:
        reference = load_source(path)
    except (OSError, InputError) as exc:
        raise ReportInputError(f"{path}: not a usable baseline: {exc}") from exc
    try:
        return check_baseline(reference, load_source(run_dir)), None
    except (OSError, InputError) as exc:
        # The run may lack what the baseline compares: keep the rest of the report.
        return None, _relative(f"cannot compare with {path.name}: {exc}", run_dir)


def build_report(
    run_dir: str | os.PathLike[str], baseline: str | os.PathLike[str] | None = None
) -> Report:
    """Read ``run_dir`` (and compare with ``baseline``: a baseline JSON, bench JSON or run dir)
    and judge it. A missing run directory, a malformed file or an unusable baseline file is a
    :class:`~trainperf.analysis.run.ReportInputError`; an unreadable trace or an incomparable
    baseline only leaves its section with a note.
    """
    run = load_run(run_dir)
    stages = summarize_stages(run.epochs)
    move_profiler_overhead(stages, run)
    trace, trace_note = _analyze_traces(run)
    result = note = name = None
    if baseline is not None:
        name = Path(baseline).name
        result, note = _compare_baseline(run.run_dir, baseline)
    else:
        note = "no baseline given (trainperf report RUN --baseline FILE)"
    findings = judge(run, stages, trace, result)
    return Report(
        run=run,
        name=run_name(run),
        stages=stages,
        findings=findings,
        trace=trace,
        trace_note=trace_note,
        baseline=result,
        baseline_name=name,
        baseline_note=note,
        gpu_waits=gpu_waits(run.epochs),
    )
