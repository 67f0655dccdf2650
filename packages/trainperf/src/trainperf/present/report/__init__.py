"""``trainperf report``: one page that tells where a run's time went.

Shows what the performance callbacks wrote into a run directory (:mod:`trainperf.records`),
read once by :func:`trainperf.analysis.run.load_run`: ranks the bottlenecks into a verdict with
evidence and a concrete change, and renders a self-contained HTML page, Markdown and a terminal
summary. Building and rendering read no file. No Lightning; every input file is optional.

    from trainperf.analysis.run import load_run
    from trainperf.present.report import build_report, write_html
    report = build_report(load_run("runs/demo", baseline=None))
    write_html(report, "runs/demo/perf/report.html")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainperf.core.lazy import lazy_getattr

# Lazy (PEP 562): `trainperf --help` imports trainperf.cli.report_command, which must not pay for
# matplotlib and numpy.
_EXPORTS = {
    "Report": "trainperf.present.report.build",
    "build_report": "trainperf.present.report.build",
    "ReportInputError": "trainperf.analysis.run",
    "print_summary": "trainperf.present.report.writers",
    "to_html": "trainperf.present.report.writers",
    "to_markdown": "trainperf.present.report.writers",
    "write_html": "trainperf.present.report.writers",
}

__all__ = [
    "Report",
    "ReportInputError",
    "build_report",
    "print_summary",
    "to_html",
    "to_markdown",
    "write_html",
]

if TYPE_CHECKING:
    from trainperf.analysis.run import ReportInputError
    from trainperf.present.report.build import Report, build_report
    from trainperf.present.report.writers import print_summary, to_html, to_markdown, write_html


__getattr__ = lazy_getattr(__name__, _EXPORTS)
