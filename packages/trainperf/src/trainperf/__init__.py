"""trainperf: why a PyTorch training or validation run is slow, and what to change.

Layers, each a package that imports only the ones below it (checked by import-linter in CI)::

    cli | lightning    commands; the callbacks and progress bars (the only users of Lightning)
    frameworks         framework knowledge as data (Lightning's action names; no import of it)
    present            console output, the report document and its writers, tables
    analysis | probe   files in -> typed results out | in-process measurement
    alerts             rules and engine
    records            the run-folder contract (every record kind, the try results)
    core               clock, stats, significance, stage, actions, findings, candidates, knobs
    errors             the error types

The public API, importable from here without importing Lightning, Rich or matplotlib (each name
is loaded on first use):

* instrumentation: :func:`perf_phase` (a phase of your own on the live clock),
  :func:`report_part` / :func:`report_count` (time and counts from DataLoader workers; counters
  named ``X_hits`` / ``X_misses`` give a hit rate);
* the callbacks: :mod:`trainperf.lightning`;
* analysis: :func:`load_run` (a run folder, loaded once), :func:`analyze_trace`, :func:`judge`
  (the verdict), :func:`check_baseline` (the regression gate);
* presentation: :func:`build_report` (pure: a loaded run in, a document out) and its writers
  :func:`to_html`, :func:`to_markdown`, :func:`write_html`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainperf.core.clock import perf_phase
from trainperf.core.lazy import lazy_getattr
from trainperf.frameworks import register_known

# Framework words reach the neutral layers as data (Lightning's action names for the live clock
# and ``analyze``), registered once here, so no entry point can miss them.
register_known()

_LAZY = {
    "report_part": "trainperf.probe.worker",
    "report_count": "trainperf.probe.worker",
    "load_run": "trainperf.analysis.run",
    "RunData": "trainperf.analysis.run",
    "analyze_trace": "trainperf.analysis.trace.analyze",
    "judge": "trainperf.analysis.verdict",
    "check_baseline": "trainperf.analysis.gate",
    "build_report": "trainperf.present.report.build",
    "to_html": "trainperf.present.report.writers",
    "to_markdown": "trainperf.present.report.writers",
    "write_html": "trainperf.present.report.writers",
}

__all__ = [
    "RunData",
    "analyze_trace",
    "build_report",
    "check_baseline",
    "judge",
    "load_run",
    "perf_phase",
    "report_count",
    "report_part",
    "to_html",
    "to_markdown",
    "write_html",
]

if TYPE_CHECKING:
    from trainperf.analysis.gate import check_baseline
    from trainperf.analysis.run import RunData, load_run
    from trainperf.analysis.trace.analyze import analyze_trace
    from trainperf.analysis.verdict import judge
    from trainperf.present.report.build import build_report
    from trainperf.present.report.writers import to_html, to_markdown, write_html
    from trainperf.probe.worker import report_count, report_part


__getattr__ = lazy_getattr(__name__, _LAZY)
