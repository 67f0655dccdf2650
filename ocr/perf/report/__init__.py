"""``ocr-perf report``: one page that tells where a run's time went.

Reads what the performance callbacks wrote into a run directory (:mod:`ocr.perf.rundir`), ranks
the bottlenecks into a verdict with evidence and a concrete change, and renders a self-contained
HTML page, Markdown and a terminal summary. No Lightning; every input file is optional.

    from ocr.perf.report import build_report, write_html
    report = build_report("runs/demo")
    write_html(report, "runs/demo/perf/report.html")
"""

from ocr.perf.report.build import Report, build_report
from ocr.perf.report.load import ReportInputError, RunData, load_run
from ocr.perf.report.render import print_summary, to_html, to_markdown, write_html
from ocr.perf.report.verdict import THRESHOLDS, Finding

__all__ = [
    "THRESHOLDS",
    "Finding",
    "Report",
    "ReportInputError",
    "RunData",
    "build_report",
    "load_run",
    "print_summary",
    "to_html",
    "to_markdown",
    "write_html",
]
