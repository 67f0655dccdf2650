"""The verdict section: the findings ranked by what their change could recover, their evidence
and candidate changes, and the legend of what the severities, the score and the recoverable
figure mean."""

from __future__ import annotations

import re
from typing import Any

from trainperf.core.candidates import Candidate
from trainperf.core.findings import CONFIDENCES, RECOVERABLE, Finding, rank, threshold
from trainperf.present.report.build import Report
from trainperf.present.report.document import Section, Table, cell
from trainperf.present.report.measured import best_measured


def candidate_lines(f: Finding) -> list[str]:
    """One line per candidate change of ``f``: the override to paste (when the run's config has
    the key) with its description, and what the change alters."""
    out = []
    for c in f.candidates:
        notes = _notes(c, "evaluation-time: check on the checkpoint")
        head = f"`{c.override}`: {c.description}" if c.override else c.description
        out.append(head + (f" ({notes})" if notes else ""))
    return out


def _notes(c: Candidate, eval_time: str) -> str:
    """What the change alters, ``eval_time`` naming an evaluation-time change ("" if nothing)."""
    tags = ["alters what is computed"] if c.alters_computation else []
    return "; ".join(tags + ([eval_time] if c.eval_time else []))


def _candidates_table(findings: list[Finding]) -> Table:
    same = repeats(findings)
    rows = [
        [str(i + 1), c.description, c.override or "-", _notes(c, "evaluation-time")]
        for i, f in enumerate(findings)
        if i not in same
        for c in f.candidates
    ]
    return Table(
        ["finding #", "change", "override", "note"],
        rows,
        caption="Changes to try: hypotheses until measured (trainperf try RUN_DIR)",
        code_cols=(2,),
    )


def evidence_text(evidence: dict[str, Any]) -> str:
    return "; ".join(f"{k} = {cell(v)}" for k, v in evidence.items() if v is not None)


def ranked(report: Report) -> list[Finding]:
    """The findings in the verdict's order (:func:`~trainperf.core.findings.rank_key`: what their
    change could recover); sorted here too so that the page's order never depends on its
    producer."""
    return rank(report.findings)


def recoverable_text(f: Finding) -> str:
    """``<= 37.2 % (bound)``, ``12.0 % (measured)``, ``risk`` or ``unknown``: the table cell."""
    pct = f.recoverable_pct
    if f.recoverable_from == "unknown" or pct is None:
        return "unknown"
    if f.recoverable_from == "risk":
        return f"risk ({pct:.0f})"
    return f"{'<= ' if f.recoverable_from == 'bound' else ''}{pct:.1f} % ({f.recoverable_from})"


def _first_change(f: Finding) -> str | None:
    """The finding's first candidate as the headline names it: the override to paste, else its
    description (a knob's says the change in words)."""
    if not f.candidates:
        return None
    c = f.candidates[0]
    return f"`{c.override}`" if c.override else c.description


def _gain(f: Finding) -> str:
    pct = f.recoverable_pct
    if f.recoverable_from == "measured" and pct is not None:
        speedup = f.evidence.get("measured_speedup")
        how = f" ({speedup:.2f}x)" if isinstance(speedup, float) else ""
        return f"measured: it recovers {pct:.0f} % of the run's time{how}"
    if f.recoverable_from == "bound" and pct is not None and pct > 0:
        return f"it could recover up to {pct:.0f} % of the run's time (a bound)"
    if f.recoverable_from == "unknown":
        return "what a change recovers here is unknown"
    return ""


def headline(report: Report) -> str:
    """The verdict in one sentence: the cause whose change could recover the most (its
    parenthesised figures left to the list), that change and what it could recover, and the
    best change ``trainperf try`` measured on the run, or that none is measured."""
    findings = ranked(report)
    if not findings:
        return "Nothing found to change."
    first = findings[0]
    parts = [re.sub(r"\s*\([^()]*\)$", "", first.title)]
    change = _first_change(first)
    if change:
        parts.append(f"change: {change}")
    if gain := _gain(first):
        parts.append(gain)
    best = best_measured(report)
    if best is not None:
        parts.append(
            f"measured best change: {best.override or best.description} {best.median:.2f}x"
        )
    elif any(f.candidates for f in findings):
        parts.append("no change measured yet (trainperf try RUN_DIR measures the candidates)")
    contended = next((f for f in findings if f.id == "cpu_contention"), None)
    if contended is not None and contended is not first:
        parts.append(f"measured under {contended.title[0].lower()}{contended.title[1:]}")
    return "; ".join(parts) + "."


def repeats(findings: list[Finding]) -> dict[int, int]:
    """Finding index -> the index of an earlier finding with the same change (same rule and the
    same suggestion but for its figures): the list says "as #N" instead of the paragraph."""
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for i, f in enumerate(findings):
        key = (f.id, re.sub(r"\d[\d.,]*", "#", f.suggestion))
        if key in seen:
            out[i] = seen[key]
        else:
            seen[key] = i
    return out


def change_text(findings: list[Finding], i: int, same: dict[int, int]) -> str:
    """Finding ``i``'s change, or ``as #N`` when an earlier finding says the same."""
    return f"as #{same[i] + 1}" if i in same else findings[i].suggestion


def severity_legend() -> list[str]:
    """What the severities and the score mean, one line each (the verdict's legend), with the
    verdict's own thresholds."""
    example = " (e.g. data wait >= {:g} % of a stage)".format
    return [
        "Order: by what the finding's change could recover, in % of the run's recorded wall "
        "time (the recoverable column): a critical risk first, then changes trainperf try "
        "measured, then bounds (the most that overlapping or removing the cause saves), then "
        "causes of unknown headroom (compute-bound), then findings with nothing to recover; "
        "the first is the verdict's sentence. Recoverable: "
        + "; ".join(f"{name}: {meaning}" for name, meaning in RECOVERABLE.items())
        + ".",
        "Score: the share (%) of the run's recorded wall time, all stages together, that the "
        "finding's cause accounts for (what it costs, not what a change wins back); findings "
        "about a run that may die or give garbage rather than about its speed score "
        f"{threshold('risk_critical_score'):g} when critical, "
        f"{threshold('risk_warning_score'):g} as a warning.",
        "critical: the cause passes its rule's critical threshold"
        f"{example(threshold('input_critical_pct'))} or threatens the run itself (NaN loss, disk "
        "or memory running out); act on it first.",
        "warning: the cause passes its rule's warning threshold"
        f"{example(threshold('input_warn_pct'))} or is a risk worth watching; the change is "
        "likely to pay.",
        "info: where the time goes, with no threshold passed (e.g. compute-bound): worth "
        "knowing; the change may help, or there may be no headroom.",
        "Cause: how sure the finding is of its cause: "
        + "; ".join(f"{name}: {meaning}" for name, meaning in CONFIDENCES.items())
        + ". Candidate changes are hypotheses until `trainperf try` measures them.",
    ]


def verdict_section(report: Report) -> Section:
    rows = []
    findings = ranked(report)
    same = repeats(findings)
    for i, f in enumerate(findings):
        extra = (" Also: " + " | ".join(f.corroboration)) if f.corroboration else ""
        rows.append(
            [
                str(i + 1),
                f.severity,
                recoverable_text(f),
                f"{f.score:.1f}",
                f.title,
                f"cause {f.confidence}; " + evidence_text(f.evidence) + extra,
                change_text(findings, i, same),
            ]
        )
    return Section(
        id="verdict",
        title="Verdict",
        paragraphs=[headline(report)],
        tables=[
            Table(
                ["#", "severity", "recoverable", "score", "finding", "evidence", "change"],
                rows,
                collapsed=False,  # the headline of the page, however many findings
            )
        ]
        + ([_candidates_table(findings)] if any(f.candidates for f in findings) else []),
    )
