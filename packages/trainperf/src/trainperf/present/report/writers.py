"""The report as a self-contained HTML page, as Markdown and as a short terminal summary.

The HTML and the Markdown write one list of sections (title, paragraphs, tables, plot) so they
never disagree. Nothing in them depends on when or where the report was made: times come from
the run's own files (shown in UTC) and paths are relative to the run directory.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from trainperf.analysis.gpu_wait import StageWait
from trainperf.core.clock import PHASES
from trainperf.present.report.build import Report
from trainperf.present.report.document import Section, Table
from trainperf.present.report.findings_section import (
    candidate_lines,
    change_text,
    evidence_text,
    headline,
    ranked,
    recoverable_text,
    repeats,
    severity_legend,
    verdict_section,
)
from trainperf.present.report.measured import measured_changes_section
from trainperf.present.report.run_sections import (
    baseline_section,
    cache_section,
    config_section,
    resources_section,
    run_section,
)
from trainperf.present.report.timing_sections import (
    batches_section,
    phases_section,
    throughput_section,
)
from trainperf.present.report.trace_section import trace_section


def sections(report: Report) -> list[Section]:
    """The report's sections in page order (the verdict first, then the run's identity)."""
    return [
        verdict_section(report),
        run_section(report),
        phases_section(report),
        batches_section(report),
        throughput_section(report),
        resources_section(report),
        trace_section(report),
        cache_section(report),
        baseline_section(report),
        measured_changes_section(report),
        config_section(report),
    ]


# -- Markdown ------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_details(summary: str, body: list[str]) -> list[str]:
    """``body`` folded under ``summary`` (GitHub renders ``<details>``; the blank lines let the
    Markdown inside it render)."""
    return ["<details>", f"<summary>{html.escape(summary)}</summary>", "", *body, "</details>", ""]


def _md_table(t: Table) -> list[str]:
    lines = [f"*{t.caption}*", ""] if t.caption and not t.folded else []
    lines.append("| " + " | ".join(_md_cell(h) for h in t.headers) + " |")
    lines.append("|" + "|".join(" --- " for _ in t.headers) + "|")
    lines.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows)
    lines.append("")
    return _md_details(t.summary, lines) if t.folded else lines


def title(report: Report) -> str:
    """The page's title: the run's name (and folder)."""
    return f"Performance report: {report.name.title}"


def to_markdown(report: Report) -> str:
    """The report as Markdown (tables, no plots)."""
    lines = [f"# {title(report)}", "", f"Run name from {report.name.source}.", ""]
    for sec in sections(report):
        lines += [f"## {sec.title}", ""]
        for p in sec.paragraphs:
            lines += [p, ""]
        if sec.id == "verdict":
            findings = ranked(report)
            same = repeats(findings)
            for i, f in enumerate(findings):
                head = (
                    f"{f.severity}, recoverable {recoverable_text(f)}, score {f.score:.1f}, "
                    f"cause {f.confidence}"
                )
                lines.append(f"{i + 1}. **[{head}] {f.title}**  ")
                lines.append(f"   Evidence: {evidence_text(f.evidence) or '-'}  ")
                lines += [f"   Also: {c}  " for c in f.corroboration]
                tries = [] if i in same else candidate_lines(f)
                change = change_text(findings, i, same)
                lines.append(f"   Change: {change}" + ("  " if tries else ""))
                lines += [f"   Try: {t}  " for t in tries[:-1]]
                lines += [f"   Try: {t}" for t in tries[-1:]]
            legend = [f"- {item}" for item in severity_legend()]
            lines += ["", "**Order, severity and score**", "", *legend, ""]
        else:
            for t in sec.tables:
                lines += _md_table(t)
        if sec.pre is not None:
            lines += _md_details(sec.pre_label, ["```yaml", sec.pre.rstrip("\n"), "```", ""])
    return "\n".join(lines).rstrip("\n") + "\n"


# -- HTML ----------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:1rem 2rem;color:#222;line-height:1.4}
h1{margin-bottom:.2rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.85rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}caption{text-align:left;font-weight:600;padding:.2rem 0}
.plot svg{max-width:100%;height:auto}
pre{background:#f7f7f7;padding:.6rem;overflow:auto;font-size:.8rem}
.sev-critical{color:#b00020;font-weight:700}.sev-warning{color:#b36b00;font-weight:700}
.sev-info{color:#00639b;font-weight:700}nav a{margin-right:.8rem}
.top{background:#fff6e5;border-left:4px solid #ff9800;padding:.5rem .8rem}
.subtitle{color:#555;margin-top:0}details{margin:.5rem 0 1rem}
summary{cursor:pointer;font-weight:600;font-size:.9rem}
dl.legend{font-size:.85rem;display:grid;grid-template-columns:max-content auto;gap:.2rem .8rem}
dl.legend dt{font-weight:700}dl.legend dd{margin:0}
"""


def _html_table(t: Table, sev_col: int | None = None) -> str:
    e = html.escape
    out = ["<table>"]
    if t.caption and not t.folded:  # a folded table's caption is its summary line
        out.append(f"<caption>{e(t.caption)}</caption>")
    out.append(
        "<thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in t.headers) + "</tr></thead><tbody>"
    )
    for r, row in enumerate(t.rows):
        cells = []
        for i, c in enumerate(row):
            cls = f' class="sev-{e(c)}"' if i == sev_col else ""
            if (r, i) in t.titles:
                cls += f' title="{e(t.titles[r, i])}"'
            text = f"<code>{e(c)}</code>" if i in t.code_cols and c != "-" else e(c)
            cells.append(f"<td{cls}>{text}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    if t.folded:
        return f"<details><summary>{e(t.summary)}</summary>\n" + "\n".join(out) + "</details>"
    return "\n".join(out)


def _html_legend() -> str:
    """The severity legend as a definition list (score first, then the three severities)."""
    e = html.escape
    items = []
    for line in severity_legend():
        term, _, text = line.partition(": ")
        cls = f' class="sev-{e(term)}"' if term in ("critical", "warning", "info") else ""
        items.append(f"<dt{cls}>{e(term)}</dt><dd>{e(text)}</dd>")
    return '<dl class="legend" id="severity-legend">' + "".join(items) + "</dl>"


def to_html(report: Report) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no scripts, no network)."""
    e = html.escape
    secs = sections(report)
    body = [
        f"<h1>{e(title(report))}</h1>",
        f'<p class="subtitle">Run name from {e(report.name.source)}.</p>',
        "<nav>" + "".join(f'<a href="#{e(s.id)}">{e(s.title)}</a>' for s in secs) + "</nav>",
    ]
    for sec in secs:
        body.append(f'<section id="{e(sec.id)}"><h2>{e(sec.title)}</h2>')
        for i, p in enumerate(sec.paragraphs):
            cls = ' class="top"' if sec.id == "verdict" and i == 0 and report.findings else ""
            body.append(f"<p{cls}>{e(p)}</p>")
        if sec.plot is not None:
            alt = e(sec.plot_alt)
            body.append(f'<figure class="plot" role="img" aria-label="{alt}">{sec.plot}</figure>')
        for t in sec.tables:
            body.append(_html_table(t, sev_col=1 if sec.id == "verdict" else None))
        if sec.id == "verdict":
            body.append(_html_legend())
        if sec.pre is not None:
            body.append(
                f"<details><summary>{e(sec.pre_label)}</summary><pre>{e(sec.pre)}</pre></details>"
            )
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title(report))}</title>"
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_html(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write the page to ``path`` (creating its folder) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_html(report), encoding="utf-8")
    return out


# -- terminal ------------------------------------------------------------------------------------

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def to_json(report: Report) -> dict[str, Any]:
    """What the terminal summary and the page's verdict state, JSON-ready (``trainperf report
    --json``): the one-sentence headline, the per-stage figures (samples/s over all ranks) and
    the ranked findings with their candidates."""
    stages = {
        str(stage): {
            **msgspec.to_builtins(s),
            "samples_per_sec": s.samples_per_sec,
            "shares_pct": {p: s.share(p) for p in PHASES if s.phases_s.get(p)},
        }
        for stage, s in report.stages.items()
    }
    return {
        "run": report.name.title,
        "headline": headline(report),
        "stages": stages,
        "findings": [f.as_dict() for f in ranked(report)],
    }


def _note(wait: StageWait | None, phase: str) -> str:
    note = wait.note(phase) if wait is not None else ""
    return f" ({note})" if note else ""


def print_summary(report: Report, console: Console, top: int = 3) -> None:
    """A few lines: where the time went per stage and the ``top`` findings with their change."""
    if report.stages:
        t = RichTable(title="Where the time went", title_justify="left", header_style="bold")
        for name in ("stage", "epochs", "wall s", "largest phases", "samples/s"):
            t.add_column(name, justify="left" if name in ("stage", "largest phases") else "right")
        for s in report.stages.values():
            biggest = sorted(PHASES, key=lambda p: -s.phases_s.get(p, 0.0))[:3]
            wait = report.gpu_waits.get(s.stage)
            t.add_row(
                s.label,
                str(s.epochs),
                f"{s.wall_s:,.2f}",
                ", ".join(f"{p} {s.share(p):.0f} %{_note(wait, p)}" for p in biggest),
                f"{s.samples_per_sec:,.1f}",
            )
        console.print(t)
    console.print(f"[bold]Verdict[/bold] ({escape(report.name.title)})", highlight=False)
    console.print(headline(report), markup=False, highlight=False, soft_wrap=True)
    findings = ranked(report)
    same = repeats(findings)
    for i, f in enumerate(findings[:top]):
        style = _STYLE.get(f.severity, "")
        console.print(
            f"{i + 1}. [{style}]{f.severity}[/{style}] (recoverable "
            f"{escape(recoverable_text(f))}, score {f.score:.1f}, cause {f.confidence}) "
            f"{escape(f.title)}",
            highlight=False,
        )
        # prose lines are never folded (a log keeps each on one line)
        change = change_text(findings, i, same)
        console.print(f"   change: {change}", markup=False, highlight=False, soft_wrap=True)
        for line in [] if i in same else candidate_lines(f):
            console.print(f"   try: {line}", markup=False, highlight=False, soft_wrap=True)
    if len(report.findings) > top:
        console.print(f"   ... {len(report.findings) - top} more in the report", highlight=False)
