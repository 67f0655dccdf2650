"""The report's "Measured changes" section from the latest try session.

The report's "Measured changes" section: the latest ``trainperf try`` session of the run
(``perf/try.jsonl``), one row per change with its speed-up interval and outcome."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainperf.analysis.trials import QUALITY_TOLERANCE, RECOMMEND_ABOVE, code_lines, paste_line
from trainperf.present.report.document import Section, Table, cell
from trainperf.present.trial_table import labels
from trainperf.records.try_record import TryRecord

if TYPE_CHECKING:
    from trainperf.present.report.build import Report


def _row(r: TryRecord) -> list[str]:
    interval = "-" if r.low is None else f"[{cell(r.low, 3)}, {cell(r.high, 3)}]"
    change = r.override or r.description
    if r.kind == "combined":
        change = f"together: {change}"
    return [change, cell(r.median, 3), interval, str(r.pairs), r.status, labels(r), r.note]


def measured_changes_section(report: Report) -> Section:
    """The section for ``report`` (a hint to run ``trainperf try`` when the run has no session)."""
    sec = Section(id="measured-changes", title="Measured changes")
    if report.run.try_note is not None:
        sec.paragraphs.append(report.run.try_note)
        return sec
    records = report.run.try_session
    if not records:
        sec.paragraphs.append(
            "No change measured yet: `trainperf try RUN_DIR` re-runs this run's command with the "
            "findings' candidate changes (or --candidate overrides) and measures each."
        )
        return sec
    sec.paragraphs.append(
        f"`trainperf try` session of {records[0].session}: each change against the unchanged "
        "command in short training windows, pairs run back to back in alternating order; "
        "speed-up = geometric mean of the paired ratios (changed / unchanged samples/s) with "
        "its t interval, 95 % over the looks that may decide it (3, 5, 8 pairs). Recommended "
        f"only when the interval's low end is above {RECOMMEND_ABOVE}, a regression only when "
        f"its high end is below {1 / RECOMMEND_ABOVE:.3f}; eval-time changes are checked on "
        "the run's checkpoint and never recommended when its quality figure drops by more "
        f"than {QUALITY_TOLERANCE}."
    )
    headers = ["change", "speed-up", "95 % interval", "pairs", "outcome", "labels", "note"]
    sec.tables.append(Table(headers, [_row(r) for r in records]))
    paste = paste_line(records)
    if paste:
        sec.paragraphs.append(f"To apply: {paste}")
    code = code_lines(records, report.run.framework)
    if code:
        sec.paragraphs.append("In your code: " + "; ".join(f"`{line}`" for line in code))
    return sec


def best_measured(report: Report) -> TryRecord | None:
    """The recommended change of the run's latest ``trainperf try`` session with the largest
    median speed-up (the combined winners included); ``None`` when none was recommended or the
    file could not be read (the section says why)."""
    records = report.run.try_session
    winners = [r for r in records if r.status == "recommended" and r.median is not None]
    return max(winners, key=lambda r: r.median or 0.0, default=None)
