"""``ocr-perf report``: one page that tells where a run's time went.

Reads what the performance callbacks wrote into a run directory (:mod:`ocr.perf.records`), ranks
the bottlenecks into a verdict with evidence and a concrete change, and renders a self-contained
HTML page, Markdown and a terminal summary. No Lightning; every input file is optional.

    from ocr.perf.report import build_report, write_html
    report = build_report("runs/demo")
    write_html(report, "runs/demo/perf/report.html")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Lazy (PEP 562): `ocr-perf --help` imports ocr.perf.report.cli, which must not pay for
# matplotlib and numpy.
_EXPORTS = {
    "Report": "ocr.perf.report.build",
    "build_report": "ocr.perf.report.build",
    "ReportInputError": "ocr.perf.report.load",
    "print_summary": "ocr.perf.report.writers",
    "to_html": "ocr.perf.report.writers",
    "to_markdown": "ocr.perf.report.writers",
    "write_html": "ocr.perf.report.writers",
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
    from ocr.perf.report.build import Report, build_report
    from ocr.perf.report.load import ReportInputError
    from ocr.perf.report.writers import print_summary, to_html, to_markdown, write_html


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ocr.perf.report' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
