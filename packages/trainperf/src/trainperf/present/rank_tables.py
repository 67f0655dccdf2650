"""Console tables of a rank set, communication and trace integrity.

Console rendering of a rank set (per-rank side by side, stragglers, findings), of an
analysis's communication and of its integrity section (one line per problem, nothing when
clean)."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console
from rich.table import Table

from trainperf.analysis.trace.integrity import Integrity
from trainperf.analysis.trace.rankset import RankSetAnalysis, RankSummary, StragglerView
from trainperf.analysis.trace.trace_analysis import CommSummary
from trainperf.present.trace_tables import _SEVERITY_STYLE, _fmt


def print_integrity(integrity: Integrity, console: Console) -> None:
    """One line per problem; nothing when clean."""
    if integrity.clean:
        return
    console.print("[bold]Integrity[/bold]")
    for line in integrity.lines():
        console.print(f"  [yellow]![/yellow] {line}", highlight=False)


def integrity_markdown(integrity: Integrity) -> str:
    """The integrity section in Markdown: one item per problem; empty when clean."""
    if integrity.clean:
        return ""
    return "\n## Integrity\n\n" + "".join(f"- {line}\n" for line in integrity.lines())


def print_communication(rows: list[CommSummary], console: Console) -> None:
    """Time in collectives per source and stage: overlapped and exposed per step."""
    if not rows:
        return
    t = Table(title="Communication (ms per step)")
    for col in ("rank", "stage", "method", "in collectives", "overlapped", "exposed", "% of step"):
        t.add_column(col, justify="left" if col in ("stage", "method") else "right")
    for c in rows:
        t.add_row(
            "-" if c.rank is None else str(c.rank),
            c.stage,
            c.method,
            _fmt(c.ms_per_step, 3),
            _fmt(c.overlapped_ms_per_step, 3),
            _fmt(c.exposed_ms_per_step, 3),
            _fmt(c.exposed_pct, 1),
        )
    console.print(t)


def _side_by_side(stage: str, rows: list[RankSummary]) -> Table:
    t = Table(title=f"Per rank — {stage} (ms per step)")
    t.add_column("", justify="left")
    for r in rows:
        t.add_column(f"rank {r.rank}", justify="right")
    t.add_row("steps", *(str(r.steps) for r in rows))
    t.add_row("step (mean)", *(_fmt(r.step_ms, 3) for r in rows))
    t.add_row("step (median)", *(_fmt(r.median_step_ms, 3) for r in rows))
    phases = [p for p in rows[0].phases_ms if any(r.phases_ms.get(p, 0.0) for r in rows)]
    for p in phases:
        t.add_row(f"  {p}", *(_fmt(r.phases_ms.get(p), 3) for r in rows))
    if any(r.gpu_busy_pct is not None for r in rows):
        t.add_row("GPU busy %", *(_fmt(r.gpu_busy_pct, 1) for r in rows))
        t.add_row("GPU idle", *(_fmt(r.gpu_idle_ms, 3) for r in rows))
    if any(r.comm_ms is not None for r in rows):
        t.add_row("collectives", *(_fmt(r.comm_ms, 3) for r in rows))
        t.add_row("  exposed", *(_fmt(r.comm_exposed_ms, 3) for r in rows))
        t.add_row("  overlapped %", *(_fmt(r.comm_overlap_pct, 1) for r in rows))
    return t


def _stages(
    result: RankSetAnalysis,
) -> Iterator[tuple[str, list[RankSummary], StragglerView | None]]:
    """Per stage (in the order of the rows): its rows by rank and its straggler view."""
    for stage in dict.fromkeys(r.stage for r in result.ranks):
        rows = sorted((r for r in result.ranks if r.stage == stage), key=lambda r: r.rank)
        yield stage, rows, next((x for x in result.stragglers if x.stage == stage), None)


def print_rank_set(result: RankSetAnalysis, console: Console) -> None:
    """The rank set: per stage the ranks side by side and the straggler (or "no straggler"),
    then the findings and the integrity lines."""
    ranks = sorted({r.rank for r in result.ranks})
    console.print(
        f"[bold]{result.input}[/bold]: {len(ranks)} ranks ({', '.join(map(str, ranks))}), "
        f"analysed {result.jobs} at a time in {result.total_s:.2f} s",
        highlight=False,
    )
    for stage, rows, s in _stages(result):
        console.print(_side_by_side(stage, rows))
        if s is None:
            continue
        if s.rank is None:
            console.print(f"  {stage}: no straggler", highlight=False)
        else:
            console.print(
                f"  {stage}: straggler rank {s.rank}, cause {s.cause} "
                f"(+{_fmt(s.cause_excess_ms, 3)} ms/step; works +{_fmt(s.excess_ms, 3)} ms/step, "
                f"{_fmt(s.share_pct, 1)}% of the step, beyond the median rank; the others wait "
                f"{_fmt(s.others_wait_ms, 3)} ms/step in communication)",
                highlight=False,
            )
    if result.findings:
        console.print("[bold]Findings[/bold]")
        for f in result.findings:
            style = _SEVERITY_STYLE.get(f.severity, "")
            console.print(f"[{style}]{f.severity.upper()}[/{style}] {f.title}", highlight=False)
            console.print(f"    → {f.suggestion}", highlight=False)
    else:
        console.print("No findings above the thresholds.")
    print_integrity(result.integrity, console)


def rank_set_markdown(result: RankSetAnalysis) -> str:
    """The rank set as Markdown: the side-by-side tables, stragglers, findings, integrity."""
    out = [f"# Rank traces: {result.input}", ""]
    for stage, rows, s in _stages(result):
        out += [f"## {stage} (ms per step)", ""]
        out.append("| | " + " | ".join(f"rank {r.rank}" for r in rows) + " |")
        out.append("|---|" + "---:|" * len(rows))
        out.append("| step | " + " | ".join(_fmt(r.step_ms, 3) for r in rows) + " |")
        for p in rows[0].phases_ms:
            out.append(f"| {p} | " + " | ".join(_fmt(r.phases_ms.get(p), 3) for r in rows) + " |")
        if any(r.comm_ms is not None for r in rows):
            out.append("| collectives | " + " | ".join(_fmt(r.comm_ms, 3) for r in rows) + " |")
            out.append("| exposed | " + " | ".join(_fmt(r.comm_exposed_ms, 3) for r in rows) + " |")
        if s is not None:
            who = "no straggler" if s.rank is None else f"straggler: rank {s.rank} ({s.cause})"
            out += ["", who]
        out.append("")
    if result.findings:
        out += ["## Findings", ""]
        out += [f"- **{f.severity}** {f.title}: {f.suggestion}" for f in result.findings]
        out.append("")
    return "\n".join(out) + integrity_markdown(result.integrity)
