"""The report's verdict section: ranked findings and their legend.

The verdict section: the findings ranked by what their change could recover, their evidence
and candidate changes, and the legend of what the severities, the score and the recoverable
figure mean."""

from __future__ import annotations

import re
from typing import Any

from trainperf.core.candidates import Candidate
from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import CONFIDENCES, RECOVERABLE, Finding, rank, threshold
from trainperf.present.evidence import evidence_text as evidence_line
from trainperf.present.report.build import Report
from trainperf.present.report.document import Section, Table
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
    """A finding's evidence as people read it (:func:`trainperf.present.evidence.evidence_text`)."""
    return evidence_line(evidence)


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
    description (a knob's says the change in words), a long one up to its first colon."""
    if not f.candidates:
        return None
    c = f.candidates[0]
    if c.override:
        return f"`{c.override}`"
    text = c.description
    if len(text.split()) > _CHANGE_WORDS and ": " in text:
        text = text.split(": ")[0]
    words = text.split()
    if len(words) > _CHANGE_MAX_WORDS:  # no colon to cut at: the sentence keeps its limit
        text = " ".join(words[:_CHANGE_MAX_WORDS]) + "..."
    return text


def _gain(f: Finding) -> str:
    pct = f.recoverable_pct
    if f.recoverable_from == "measured" and pct is not None:
        speedup = f.evidence.get("measured_speedup")
        how = f" ({speedup:.2f}x)" if isinstance(speedup, float) else ""
        return f"measured: it recovers {pct:.0f} % of the run{how}"
    if f.recoverable_from == "bound" and pct is not None and pct > 0:
        return f"it could recover up to {pct:.0f} % of the run (a bound)"
    if f.recoverable_from == "unknown":
        return "what a change recovers here is unknown"
    return ""


#: The verdict sentence's length limit, in words (the detail is in the findings below it).
HEADLINE_WORDS = 40

#: Words of the first finding's title the sentence keeps at most (its first clause, whole, when
#: the sentence has room).
_CAUSE_WORDS = 24

#: A change described in more words is named up to its first colon ...
_CHANGE_WORDS = 8

#: ... and in at most this many words (with the cause's 4 and the other clauses' at most 22, the
#: sentence stays within :data:`HEADLINE_WORDS`).
_CHANGE_MAX_WORDS = 12


def _words(text: str) -> int:
    return len(text.split())


def short_title(title: str, limit: int = _CAUSE_WORDS) -> str:
    """A finding's title as the verdict sentence names it: its parentheses dropped, up to its
    first ``;`` (the clauses after it are the finding's detail), at most ``limit`` words."""
    text = title
    while True:  # innermost parentheses first: "(a (b) c)" goes whole
        shorter = re.sub(r"\s*\([^()]*\)", "", text)
        if shorter == text:
            break
        text = shorter
    text = text.split("; ")[0].strip().rstrip(":,")
    words = text.split()
    return " ".join(words[:limit]) + ("..." if len(words) > limit else "")


def measured_clause(report: Report) -> str | None:
    """What ``trainperf try`` measured, in the words the "Measured changes" section backs: the
    best recommended change; that none beat the noise (how many were measured); that the record
    could not be read; ``None`` without a session or candidates (nothing to say)."""
    if report.run.try_note is not None:
        return "the try record could not be read (see Measured changes)"
    records = report.run.try_session
    gains = [
        f
        for f in report.findings
        if f.recoverable_from == "measured" and (f.recoverable_pct or 0.0) > 0
    ]
    top = max(gains, key=lambda f: f.recoverable_pct or 0.0, default=None)
    if top is not None and isinstance(top.evidence.get("measured_speedup"), float):
        # by what it recovers of the run: 1.12x of a short validation stage is little
        return (
            f"best measured change: {top.evidence.get('measured_change')} "
            f"{top.evidence['measured_speedup']:.2f}x, {top.recoverable_pct:.0f} % of the run"
        )
    best = best_measured(report)
    if best is not None:
        return f"best measured change: {best.override or best.description} {best.median:.2f}x"
    if records:
        measured = sum(1 for r in records if r.pairs > 0)
        return f"no measured change beat the noise ({measured} of {len(records)} measured)"
    if any(f.candidates for f in report.findings):
        return "no change measured yet (trainperf try RUN_DIR)"
    return None


def headline(report: Report) -> str:
    """The verdict in one sentence of at most :data:`HEADLINE_WORDS` words: the cause whose
    change could recover the most (its title's first clause, the rest left to the list), that
    change and what it could recover, then, separately, the best change ``trainperf try``
    measured (or what the try session says)."""
    findings = ranked(report)
    if not findings:
        return "Nothing found to change."
    first = findings[0]
    cause = short_title(first.title)
    tail = []
    change = _first_change(first)
    gain = _gain(first)
    if change:
        tail.append(f"change: {change}")
    if gain:
        tail.append(gain)
    if (measured := measured_clause(report)) is not None:
        tail.append(measured)
    contended = next((f for f in findings if f.id == FindingId.CPU_CONTENTION), None)
    if contended is not None and contended is not first:
        tail.append("measured under CPU contention")
    # over the limit: the caveat goes first, then the cause's words shrink (never the change)
    while (
        tail
        and _words("; ".join([cause, *tail])) > HEADLINE_WORDS
        and tail[-1].startswith("measured under")
    ):
        tail.pop()
    spare = HEADLINE_WORDS - _words("; ".join(tail))
    if _words(cause) > spare:
        cause = short_title(first.title, max(spare - 1, 4))
    return "; ".join([cause, *tail]) + "."


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
    """What the order, severities and score mean, one line each (the verdict's legend), with the
    verdict's own thresholds (:func:`~trainperf.core.findings.severity_for`)."""
    dead, warn, crit = (threshold(f"severity_{n}_pct") for n in ("deadband", "warning", "critical"))
    return [
        "Order: critical, then warning, then info; within each, by what the finding's change "
        "could recover, in % of the run's recorded wall time (the recoverable column), so the "
        "largest comes first. The first is the verdict's sentence. Recoverable: "
        + "; ".join(f"{name}: {meaning}" for name, meaning in RECOVERABLE.items())
        + ".",
        "Score: the share (%) of the run's recorded wall time, all stages together, that the "
        "finding's cause accounts for (what it costs, not what a change wins back); findings "
        "about a run that may die or give garbage rather than about its speed score "
        f"{threshold('risk_critical_score'):g} when critical, "
        f"{threshold('risk_warning_score'):g} as a warning.",
        f"critical: the change could recover {crit:g} % of the run or more, or the run itself is "
        "at risk (NaN loss, disk or memory running out), whatever the size; act on it first.",
        f"warning: the change could recover {warn:g} % of the run or more (from {dead:g} % when "
        "trainperf try measured it); likely to pay.",
        f"info: less (below {dead:g} %: within run-to-run noise), nothing to recover, or a cause "
        "whose headroom is unknown (compute-bound: it ranks as if it could recover "
        f"{dead:g} %); worth knowing.",
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
