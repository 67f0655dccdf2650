"""The checks that a rendered report never contradicts itself (issue 38), shared by the unit test
(the H200 folder, a demo-like run) and the integration test (a plain Lightning script with a try
record): each pair of statements that once disagreed on one page, checked on every rendering
(Markdown, HTML, the terminal summary)."""

from __future__ import annotations

import html
import io
import re

from rich.console import Console
from trainperf.core.findings import SEVERITY_ORDER, is_risk, ranked_size, threshold
from trainperf.present.report import Report, print_summary, to_html, to_markdown
from trainperf.present.report.findings_section import headline, ranked

#: Phrases that tell the tool's own history to a user ("a rule since corrected").
HISTORY = re.compile(
    r"since corrected|a rule since|rule before|before issue|\bour issue|(?<!Lightning )"
    r"issues? \d+|older rule|earlier version|previous version|now fixed|was a bug",
    re.IGNORECASE,
)


def renderings(report: Report) -> dict[str, str]:
    """The report as Markdown, as the HTML page's text and as the terminal summary."""
    console = Console(width=200, record=True, file=io.StringIO())
    print_summary(report, console, top=len(report.findings))
    page = html.unescape(re.sub(r"<[^>]+>", " ", to_html(report)))
    return {"markdown": to_markdown(report), "html": page, "terminal": console.export_text()}


def check_consistent(report: Report, max_words: int = 40) -> str:
    """Assert every pair (see the module doc) on ``report``; returns its verdict sentence."""
    sentence = headline(report)
    assert len(sentence.split()) <= max_words, (len(sentence.split()), sentence)
    texts = renderings(report)
    session = report.run.try_session
    for where, text in texts.items():
        flat = " ".join(text.split())
        if session:  # a "Measured changes" table is on the page
            assert "no change measured" not in flat.lower(), where
        if report.run.profiler_windows:  # the page lists the profiler's windows
            assert "no profiler trace recorded" not in flat, where
            assert "attach ProfilerCallback" not in flat, where
        found = HISTORY.search(flat)
        assert found is None, (where, flat[max(0, found.start() - 80) : found.end() + 80])
    if session and report.run.try_note is None:
        md = texts["markdown"]
        assert "| change | speed-up |" in md  # the table the sentence must agree with
    findings = ranked(report)
    # critical first and largest first agree: severities in order, sizes descending within each
    order = [SEVERITY_ORDER[f.severity] for f in findings]
    assert order == sorted(order), [(f.id, f.severity) for f in findings]
    for sev in SEVERITY_ORDER:
        sizes = [ranked_size(f) for f in findings if f.severity == sev]
        assert sizes == sorted(sizes, reverse=True), (sev, sizes)
    critical = threshold("severity_critical_pct")
    for f in findings:
        if not is_risk(f):
            assert (f.severity == "critical") == (ranked_size(f) >= critical), (f.id, f.severity)
    # the page lists them in that order too
    md_sev = re.findall(r"^\d+\. \*\*\[(\w+), recoverable", texts["markdown"], re.M)
    assert md_sev == [f.severity for f in findings]
    return sentence
