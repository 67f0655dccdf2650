"""Console (rich) and Markdown rendering of the trace analysis and comparison reports.

They are what ``trainperf analyze`` and ``trainperf compare`` show; the run report's writers are
:mod:`trainperf.present.report`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainperf.analysis.trace.agreement import PhaseAgreement
from trainperf.analysis.trace.compare import TraceComparison
from trainperf.analysis.trace.short_names import short_name, short_names
from trainperf.analysis.trace.step_phases import GPU_PARTS, PHASES
from trainperf.analysis.trace.trace_analysis import DeviceOpRow, OpRow, TraceAnalysis
from trainperf.core.findings import Finding
from trainperf.core.moved import moved_module
from trainperf.core.significance import OUTCOME_STYLE
from trainperf.present.console import fit_table
from trainperf.present.evidence import evidence_text

__all__ = ["print_analysis", "print_comparison", "trace_markdown"]

# The old name of trace_markdown, until 0.3 (the run report's writer is the one to_markdown).
__getattr__ = moved_module(__name__, __name__, renamed={"to_markdown": "trace_markdown"})

_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _round(v: Any) -> str:
    """A figure for prose: 4 significant digits (``0.1235``, ``1235``, ``1.235e+07``)."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_round(x) for x in v) + "]"
    if isinstance(v, dict):
        return _pairs(v)
    return str(v)


def _pairs(d: Any) -> str:
    """``k=v, k=v`` of a finding's evidence / threshold dict (never its repr)."""
    if not isinstance(d, dict):
        return _round(d)
    return ", ".join(f"{k}={_round(v)}" for k, v in d.items()) or "-"


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def _op_cells(i: int, r: OpRow | DeviceOpRow, name: str) -> dict[str, str]:
    """One row of :func:`_op_table`: column -> text (``name``: the op's name as shown)."""
    row = {"#": str(i), "name": name, "calls": str(r.calls), "total ms": _fmt(r.total_ms)}
    row["ms/step"] = _fmt(r.self_ms_per_step)
    if isinstance(r, DeviceOpRow):
        row["%"] = _fmt(r.share_pct, 1)
        row["launched by"] = short_name(r.launched_by) if r.launched_by else "-"
    else:
        row["self ms"] = _fmt(r.self_ms)
        row["%"] = _fmt(r.self_pct, 1)
    return row


def _op_table(title: str, rows: Sequence[OpRow | DeviceOpRow], device: bool, width: int) -> Table:
    """Top ops. Numbers never wrap; op names are never cut (two long names cut to the same
    prefix read as one op): their template and argument lists are folded (``kernel<…>(…)``,
    :func:`~trainperf.analysis.trace.short_names.short_names`, kept apart where two would read
    alike) and
    what remains folds onto more lines. When the terminal is too narrow even so, columns go in a
    fixed order: ``total ms`` (CPU), ``launched by`` (device), ``calls``."""
    columns: list[tuple[str, str]] = [("#", "num"), ("name", "text"), ("calls", "num")]
    if device:
        columns += [("total ms", "num"), ("%", "num"), ("ms/step", "num"), ("launched by", "text")]
    else:
        columns += [("self ms", "num"), ("total ms", "num"), ("%", "num"), ("ms/step", "num")]
    shown = short_names([r.name for r in rows])
    cells = [_op_cells(i, r, name) for i, (r, name) in enumerate(zip(rows, shown, strict=True), 1)]

    def build(dropped: frozenset[str]) -> Table:
        t = Table(title=title, title_justify="left", header_style="bold")
        keep = [(name, kind) for name, kind in columns if name not in dropped]
        for name, kind in keep:
            if kind == "num":
                t.add_column(name, justify="right", no_wrap=True)
            else:  # names fold (wrap mid-word) rather than being cut
                t.add_column(name, overflow="fold", min_width=24 if name == "name" else 12)
        for row in cells:
            t.add_row(*(row[name] for name, _ in keep))
        return t

    drop = ("launched by", "calls") if device else ("total ms", "calls")
    return fit_table(build, drop, width)


def print_analysis(report: TraceAnalysis, console: Console | None = None) -> None:
    """Top-k tables (ms and %), the step breakdown per stage, step statistics and findings."""
    con = console or Console()
    s = report.summary
    files = ", ".join(
        src.path.rsplit("/", 1)[-1] + (f" (rank {src.rank})" if src.rank is not None else "")
        for src in report.sources
    )
    con.print(
        f"[bold]Trace[/bold] {files}: {s.events:,} events, {s.span_ms:.1f} ms, "
        f"{s.n_steps} steps, {'GPU: ' + ', '.join(s.devices) if s.has_gpu else 'CPU only'}"
    )
    con.print(_op_table("Top CPU ops by self time", report.top_cpu_ops, False, con.width))
    if report.top_cuda_ops:
        con.print(_op_table("Top device kernels / copies", report.top_cuda_ops, True, con.width))
    for stage, ps in report.phase_summary.items():
        t = Table(
            title=f"Step breakdown — {stage} ({ps.steps} steps, mean {ps.mean_wall_ms:.3f} ms)",
            title_justify="left",
            header_style="bold",
        )
        t.add_column("phase")
        t.add_column("mean ms", justify="right")
        t.add_column("% of step", justify="right")
        # the host waiting for the GPU in sync points, part of the phase's time
        blocked = ps.blocked
        if blocked:
            t.add_column("blocked ms", justify="right")
        # the live phase clock over the same steps (ProfilerCallback's windows), when known
        clock = _clock_rows(report, stage)
        if clock:
            t.add_column("clock ms", justify="right")
            t.add_column("agree", justify="center")
        gpu_ph = ps.gpu_phases
        if gpu_ph:
            t.add_column("gpu ms launched", justify="right")
        for p in PHASES:
            ph = ps.phases.get(p)
            cells = [p, _fmt(ph and ph.mean_ms), _fmt(ph and ph.pct, 1)]
            if blocked:
                wait = blocked.get(p)
                cells.append(_fmt(wait and wait.mean_ms))
            if clock:
                row = clock.get(p)
                cells += [_fmt(row and row.clock_ms), "yes" if row and row.agree else "NO"]
            if gpu_ph:
                launched = gpu_ph.get(p)
                cells.append(_fmt(launched and launched.mean_ms))
            t.add_row(*cells)
        if ps.gpu is not None:
            t.add_section()
            for p in GPU_PARTS:
                t.add_row(f"gpu {p}", _fmt(ps.gpu[p].mean_ms), _fmt(ps.gpu[p].pct, 1))
            t.add_row("host cuda runtime", _fmt(ps.cuda_runtime_mean_ms), "")
            if blocked:
                waits = [b.mean_ms for b in blocked.values()]
                shares = [b.pct or 0.0 for b in blocked.values()]
                t.add_row("host blocked in syncs", _fmt(sum(waits)), _fmt(sum(shares), 1))
        con.print(t)
        st = report.step_stats[stage]
        con.print(
            f"  step ms: median {st.median_ms:.3f}, mean {st.mean_ms:.3f}, p90 "
            f"{st.p90_ms:.3f}, min {st.min_ms:.3f}, max {st.max_ms:.3f}, cv {st.cv:.3f}"
        )
        for o in st.outliers:
            con.print(f"  [yellow]outlier[/yellow] {o.step}: {o.ms:.3f} ms (z {o.robust_z})")
    basis = "step time" if s.n_steps else "traced host time (no ProfilerStep spans)"
    con.print(f"Data wait: {report.dataloader_time_pct:.1f}% of {basis}")
    for m in report.memory_peaks:
        cap = f" ({m.pct_of_capacity:.1f}% of device)" if m.pct_of_capacity else ""
        est = " (growth during profiling)" if m.estimated else ""
        where = f" in {m.step}/{m.phase}" if m.step else ""
        con.print(
            f"Memory peak {m.device}: {m.peak_allocated_bytes / 2**20:,.1f} MiB{est}{cap}{where}"
        )
    if report.findings:
        con.print("[bold]Findings[/bold]")
        for f in report.findings:
            style = _SEVERITY_STYLE.get(f.severity, "bold")
            # figures hold brackets ("[cudaStreamSynchronize]", "[Callback]X"): never markup
            con.print(f"[{style}]{f.severity.upper()}[/{style}] {escape(f.title)}")
            ev, th = escape(evidence_text(f.evidence)), escape(_pairs(f.threshold))
            con.print(f"    evidence: {ev}\n    threshold: {th}\n    → {escape(f.suggestion)}")
    else:
        con.print("[green]No findings above the thresholds.[/green]")
    for w in report.warnings:
        con.print(f"[dim]note: {w}[/dim]")


def _clock_rows(report: TraceAnalysis, stage: str) -> dict[str, PhaseAgreement]:
    agreement = report.clock_agreement
    if agreement is None or stage != agreement.stage:
        return {}
    return {row.phase: row for row in agreement.phases}


def print_comparison(result: TraceComparison, console: Console | None = None) -> None:
    """Verdict, per-stage step and phase deltas, and the largest per-op changes."""
    con = console or Console()
    v = result.verdict
    style = OUTCOME_STYLE.get(v["verdict"], "bold")
    con.print(f"[bold]A[/bold] {result.a}\n[bold]B[/bold] {result.b}")
    if "median_a_ms" in v:
        extra = ""
        if v.get("p_slower") is not None:
            # the test of the direction observed, named so that it cannot read as "98 % sure
            # B is slower": a small p-value says the change is unlikely to be noise
            faster = v["change_pct"] < 0
            p = v["p_faster"] if faster else v["p_slower"]
            extra = (
                f", B {'faster' if faster else 'slower'}: Mann-Whitney p={p:.4f}, 95% CI of "
                f"the change [{v['ci95_pct'][0]:+.1f}%, {v['ci95_pct'][1]:+.1f}%]"
            )
        con.print(
            f"[{style}]{v['verdict'].upper()}[/{style}] ({result.primary_stage}): median step "
            f"{v['median_a_ms']:.3f} → {v['median_b_ms']:.3f} ms ({v['change_pct']:+.2f}%, "
            f"threshold {v['threshold_pct']}%{extra})"
        )
    else:
        con.print(f"[{style}]{v['verdict'].upper()}[/{style}]")
    if v.get("note"):
        con.print(f"  [dim]{v['note']}[/dim]")
    for stage, entry in result.stages.items():
        t = Table(title=f"{stage}: mean ms per step", title_justify="left", header_style="bold")
        t.add_column("part")
        t.add_column("A", justify="right")
        t.add_column("B", justify="right")
        t.add_column("Δ ms", justify="right")
        t.add_column("Δ %", justify="right")
        rows = [("step " + k.removesuffix("_ms"), d) for k, d in entry.step_stats.items()]
        rows += list(entry.phases_ms.items())
        rows += [("gpu " + k, d) for k, d in (entry.gpu_ms or {}).items()]
        for name, d in rows:
            t.add_row(name, _fmt(d.a), _fmt(d.b), _fmt(d.delta), _fmt(d.delta_pct, 1))
        con.print(t)
    columns = ("op", "table", "A", "B", "Δ ms", "Δ %")
    shown = short_names([r.name for r in result.ops])
    op_rows: list[tuple[str, ...]] = [
        (name, r.table, _fmt(r.a_ms), _fmt(r.b_ms), _fmt(r.delta_ms), _fmt(r.delta_pct, 1))
        for r, name in zip(result.ops, shown, strict=True)
    ]

    def build(dropped: frozenset[str]) -> Table:
        t = Table(
            title="Largest op changes (ms per step)", title_justify="left", header_style="bold"
        )
        keep = [i for i, c in enumerate(columns) if c not in dropped]
        for i in keep:
            if columns[i] == "op":  # folded, never cut: see _op_table
                t.add_column("op", overflow="fold", min_width=24)
            else:
                t.add_column(columns[i], justify="left" if i == 1 else "right", no_wrap=True)
        for row in op_rows:
            t.add_row(*(row[i] for i in keep))
        return t

    con.print(fit_table(build, ("table", "Δ ms"), con.width))


def _finding_line(f: Finding) -> str:
    return (
        f"- **{f.severity}** {f.title}. Evidence: {evidence_text(f.evidence)}. "
        f"Threshold: {_pairs(f.threshold)}. Suggestion: {f.suggestion}"
    )


def trace_markdown(report: TraceAnalysis) -> str:
    """The analysis as Markdown (tables for ops and phases, a list of findings)."""
    out = ["# Trace analysis", ""]
    s = report.summary
    out.append(
        f"{s.events:,} events, {s.span_ms:.1f} ms, {s.n_steps} steps, "
        f"{'GPU' if s.has_gpu else 'CPU only'}; data wait "
        f"{report.dataloader_time_pct:.1f}% of step time."
    )
    out += ["", "## Top CPU ops (self time)", "", "| op | calls | self ms | total ms | % |"]
    out.append("|---|---:|---:|---:|---:|")
    for r, shown in zip(
        report.top_cpu_ops, short_names([r.name for r in report.top_cpu_ops]), strict=True
    ):
        name = shown.replace("|", "\\|")
        out.append(
            f"| `{name}` | {r.calls} | {r.self_ms:.3f} | {r.total_ms:.3f} | {r.self_pct:.1f} |"
        )
    if report.top_cuda_ops:
        out += [
            "",
            "## Top device ops",
            "",
            "| op | kind | calls | ms | % |",
            "|---|---|---:|---:|---:|",
        ]
        device_shown = short_names([d.name for d in report.top_cuda_ops])
        for d, short in zip(report.top_cuda_ops, device_shown, strict=True):
            name = short.replace("|", "\\|")
            out.append(
                f"| `{name}` | {d.kind} | {d.calls} | {d.total_ms:.3f} | {d.share_pct:.1f} |"
            )
    for stage, ps in report.phase_summary.items():
        out += ["", f"## Step breakdown: {stage} ({ps.steps} steps)", "", "| part | mean ms | % |"]
        out.append("|---|---:|---:|")
        for p in PHASES:
            if p not in ps.phases:  # a report written before this phase existed
                continue
            out.append(f"| {p} | {ps.phases[p].mean_ms:.3f} | {_fmt(ps.phases[p].pct, 1)} |")
        gpu = ps.gpu or {}
        out += [f"| gpu {p} | {gpu[p].mean_ms:.3f} | {_fmt(gpu[p].pct, 1)} |" for p in gpu]
        for p, b in (ps.blocked or {}).items():
            if b.mean_ms:  # the host waiting for the device in sync points, part of phase p
                out.append(f"| host blocked in syncs: {p} | {b.mean_ms:.3f} | {_fmt(b.pct, 1)} |")
    out += ["", "## Findings", ""]
    if not report.findings:
        out.append("None above the thresholds.")
    out += [_finding_line(f) for f in report.findings]
    return "\n".join(out) + "\n"
