"""The report as a self-contained HTML page, as Markdown and as a short terminal summary.

The HTML and the Markdown share one list of sections (title, paragraphs, tables, plot) so they
never disagree. Nothing in them depends on when or where the report was made: times come from
the run's own files (shown in UTC) and paths are relative to the run directory.
"""

from __future__ import annotations

import html
import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from ocr.perf.clock import PHASES
from ocr.perf.findings import CONFIDENCES, Finding
from ocr.perf.gate_table import BAND_NOTE, COLUMNS, row_cells, verdict_line
from ocr.perf.mfu import epoch_utilisation, stage_utilisation
from ocr.perf.report import plots
from ocr.perf.report.build import Report
from ocr.perf.report.document import Section, Table
from ocr.perf.report.measured import measured_changes_section
from ocr.perf.report.profiled import PROFILER_PHASE, profiled_batches
from ocr.perf.report.stages import StageSummary, num
from ocr.perf.rundir import polygon_cache_hit_rate
from ocr.perf.stage import Stage

__all__ = ["print_summary", "ranked", "severity_legend", "title", "to_markdown", "write_html"]


# -- formatting ----------------------------------------------------------------------------------


def _f(value: Any, nd: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:,.{nd}f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        return ", ".join(_f(v, nd) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_f(v, nd)}" for k, v in value.items())
    return str(value)


def _utc(t: Any) -> str:
    if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t):
        return "-"
    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def candidate_lines(f: Finding) -> list[str]:
    """One line per candidate change of ``f``: the Hydra override to paste in backticks with
    its description, or the description alone when the run's config has no key for it, and
    what the change alters."""
    out = []
    for c in f.candidates:
        tags = ["alters what is computed"] if c.alters_computation else []
        if c.eval_time:
            tags.append("evaluation-time: check on the checkpoint")
        head = f"`{c.override}`: {c.description}" if c.override else c.description
        out.append(head + (f" ({'; '.join(tags)})" if tags else ""))
    return out


def _candidates_table(findings: list[Finding]) -> Table:
    rows = [
        [
            str(i),
            c.description,
            c.override or "-",
            "; ".join(
                (["alters what is computed"] if c.alters_computation else [])
                + (["evaluation-time"] if c.eval_time else [])
            ),
        ]
        for i, f in enumerate(findings, 1)
        for c in f.candidates
    ]
    return Table(
        ["finding #", "change", "override", "note"],
        rows,
        caption="Changes to try: hypotheses until measured (ocr-perf try RUN_DIR)",
        code_cols=(2,),
    )


def _evidence(evidence: dict[str, Any]) -> str:
    return "; ".join(f"{k} = {_f(v)}" for k, v in evidence.items() if v is not None)


# -- sections ------------------------------------------------------------------------------------


def _header(report: Report) -> Section:
    info = report.run.run_info
    rows = []
    for key, label in (
        ("started_at", "started"),
        ("hostname", "host"),
        ("platform", "platform"),
        ("cpu_count", "CPU cores"),
        ("cuda_devices", "CUDA devices"),
        ("world_size", "world size"),
        ("python", "Python"),
        ("torch_version", "torch"),
        ("lightning_version", "Lightning"),
        ("argv", "command"),
    ):
        value = getattr(info, key) if info is not None else None
        if value is not None:
            value = _utc(value) if key == "started_at" else value
            if key == "cuda_devices" and not value:
                value = "none (CPU run)"
            if key == "argv" and isinstance(value, list):
                value = " ".join(str(v) for v in value)
            rows.append([label, _f(value)])
    total = sum(s.wall_s for s in report.stages.values())
    paragraphs = [
        f"Device: {report.run.device.upper()}. Recorded wall time: {total:,.2f} s over "
        + (
            ", ".join(
                f"{s.epochs} {s.label} epoch(s) ({s.wall_s:,.2f} s)" for s in report.stages.values()
            )
            or "no epochs"
        )
        + "."
    ]
    return Section(
        id="run",
        title="Run",
        paragraphs=paragraphs,
        tables=[Table(["", "value"], rows)] if rows else [],
    )


def ranked(report: Report) -> list[Finding]:
    """The findings by score, highest first; equal scores keep the verdict's order (severity,
    then rule). Sorted here too so that the page's order never depends on its producer."""
    return sorted(report.findings, key=lambda f: -f.score)


def _example(thresholds: dict[str, float], key: str) -> str:
    """`` (e.g. data wait >= 40 % of a stage)`` from the verdict's own threshold; nothing when
    the table has no such key (a figure the verdict does not use would mislead)."""
    value = thresholds.get(key)
    return "" if value is None else f" (e.g. data wait >= {value:g} % of a stage)"


def severity_legend(report: Report) -> list[str]:
    """What the severities and the score mean, one line each (the verdict's legend)."""
    t = report.thresholds
    risk = ""
    if "risk_critical_score" in t and "risk_warning_score" in t:
        risk = (
            "; findings about a run that may die or give garbage rather than about its speed "
            f"score {t['risk_critical_score']:g} when critical, {t['risk_warning_score']:g} as "
            "a warning"
        )
    return [
        "Score: the share (%) of the run's recorded wall time, all stages together, that the "
        f"finding's cause accounts for{risk}. Findings are listed by score, highest first.",
        "critical: the cause passes its rule's critical threshold"
        f"{_example(t, 'input_critical_pct')} or threatens the run itself (NaN loss, disk or "
        "memory running out); act on it first.",
        f"warning: the cause passes its rule's warning threshold{_example(t, 'input_warn_pct')} "
        "or is a risk worth watching; the change is likely to pay.",
        "info: where the time goes, with no threshold passed (e.g. compute-bound): worth "
        "knowing; the change may help, or there may be no headroom.",
        "Cause: how sure the finding is of its cause: "
        + "; ".join(f"{name}: {meaning}" for name, meaning in CONFIDENCES.items())
        + ". Candidate changes are hypotheses until `ocr-perf try` measures them.",
    ]


def _verdict(report: Report) -> Section:
    rows = []
    findings = ranked(report)
    for i, f in enumerate(findings, 1):
        extra = (" Also: " + " | ".join(f.corroboration)) if f.corroboration else ""
        rows.append(
            [
                str(i),
                f.severity,
                f"{f.score:.1f}",
                f.title,
                f"cause {f.confidence}; " + _evidence(f.evidence) + extra,
                f.suggestion,
            ]
        )
    lead = []
    if findings:
        top = findings[0]
        lead.append(f"Most likely to help: {top.title}. Change: {top.suggestion}")
    return Section(
        id="verdict",
        title="Verdict",
        paragraphs=lead,
        tables=[
            Table(
                ["#", "severity", "score", "finding", "evidence", "change"],
                rows,
                collapsed=False,  # the headline of the page, however many findings
            )
        ]
        + ([_candidates_table(findings)] if any(f.candidates for f in findings) else []),
    )


def _phases(report: Report) -> Section:
    sec = Section(
        id="phases",
        title="Phase breakdown per epoch",
        plot=plots.phase_plot(report.run),
        plot_alt="stacked bars of seconds per phase for each epoch, per stage",
    )
    if not report.stages:
        sec.paragraphs.append("Not recorded: perf/epochs.jsonl is absent or empty.")
        return sec
    stages = list(report.stages.values())
    rows = []
    # the profiler's export and analysis: their own line (see ocr.perf.report.profiled)
    extra = (PROFILER_PHASE,) if any(PROFILER_PHASE in s.phases_s for s in stages) else ()
    for phase in (*PHASES, *extra):
        row = [phase]
        for s in stages:
            row.append(f"{s.phases_s.get(phase, 0.0):,.3f} s ({s.share(phase):.1f} %)")
        rows.append(row)
    rows.append(["wall"] + [f"{s.wall_s:,.3f} s" for s in stages])
    sec.tables.append(
        Table(
            ["phase"] + [s.label for s in stages],
            rows,
            "Seconds per phase, all epochs",
            collapsed=False,  # the answer to "where did the time go"
        )
    )
    parts = sorted({p for s in stages for p in s.worker_s})
    if parts:
        wrows = []
        for part in parts:
            row = [part]
            for s in stages:
                secs = s.worker_s.get(part)
                row.append(
                    "-"
                    if secs is None
                    else f"{secs:,.3f} s ({1000.0 * secs / max(s.samples, 1):.2f} ms/sample)"
                )
            wrows.append(row)
        wrows.append(["num_workers"] + [_f(s.num_workers) for s in stages])
        sec.tables.append(
            Table(
                ["worker part"] + [s.label for s in stages],
                wrows,
                "DataLoader work timed in the workers (overlaps with the phases above)",
            )
        )
    named = _named_rows(stages)
    if named:
        sec.tables.append(
            Table(
                ["callback or hook", "kind"] + [s.label for s in stages],
                named,
                f"Time by callback hook and LightningModule hook, all epochs (the {_NAMED_ROWS} "
                "largest; part of the callbacks, module_hooks and other phases above)",
            )
        )
    stragglers = _straggler_rows(stages)
    if stragglers:
        sec.tables.append(
            Table(
                ["stage", "epoch", "straggler rank", "excess s", "cause", "others' sync_wait s"],
                stragglers,
                "DDP: the rank the others waited for, per epoch (from the phases of every rank)",
            )
        )
    by_rank = _rank_callback_rows(stages)
    if by_rank:
        sec.tables.append(by_rank)
    return sec


def _rank_callback_rows(stages: list[StageSummary]) -> Table | None:
    """DDP: seconds per callback on each rank, all stages and epochs ("-": not on that rank)."""
    ranks = max((len(s.callbacks_s_by_rank) for s in stages), default=0)
    totals: list[dict[str, float]] = [{} for _ in range(ranks)]
    for s in stages:
        for acc, spent in zip(totals, s.callbacks_s_by_rank, strict=False):
            for name, secs in spent.items():
                acc[name] = acc.get(name, 0.0) + secs
    names = sorted({name for acc in totals for name in acc})
    if ranks < 2 or not names:
        return None
    rows = [[name] + [_f(acc.get(name), 3) for acc in totals] for name in names]
    return Table(
        ["callback"] + [f"rank {r} s" for r in range(ranks)],
        rows,
        "DDP: time in each callback's hooks per rank, all epochs (ranks may have different "
        "callbacks)",
    )


_NAMED_ROWS = 12


def _named_rows(stages: list[StageSummary]) -> list[list[str]]:
    totals: dict[tuple[str, str], float] = {}
    for s in stages:
        for name, secs in s.callback_hooks_s.items():
            totals[(name, "callback")] = totals.get((name, "callback"), 0.0) + secs
        for name, secs in s.module_hooks_s.items():
            totals[(name, "module hook")] = totals.get((name, "module hook"), 0.0) + secs
    top = sorted((k for k, v in totals.items() if v >= 1e-3), key=lambda k: -totals[k])
    rows = []
    for name, kind in top[:_NAMED_ROWS]:
        row = [name, kind]
        for s in stages:
            source = s.callback_hooks_s if kind == "callback" else s.module_hooks_s
            spent = source.get(name)
            row.append(
                "-"
                if spent is None or s.wall_s <= 0
                else f"{spent:,.3f} s ({100 * spent / s.wall_s:.1f} %)"
            )
        rows.append(row)
    return rows


def _straggler_rows(stages: list[StageSummary]) -> list[list[str]]:
    rows = []
    for s in stages:
        for epoch, x in s.stragglers:
            if x is None:
                rows.append([s.label, str(epoch), "none", "", "", ""])
            else:
                rows.append(
                    [
                        s.label,
                        str(epoch),
                        str(x.rank),
                        _f(x.excess_s, 3),
                        x.cause,
                        _f(x.others_wait_s, 3),
                    ]
                )
    return rows


def _batches(report: Report) -> Section:
    sec = Section(
        id="batches",
        title="Batch-time distribution and outliers",
        plot=plots.batch_times_plot(report.run),
        plot_alt="histograms of batch times per stage",
    )
    rows = []
    for e in report.run.epochs:
        st = e.batch_stats
        rows.append(
            [
                e.stage.label,
                _f(e.epoch),
                _f(int(num(st.get("count"), e.num_batches))),
                *(
                    f"{1000.0 * num(st.get(k), math.nan):,.1f}"
                    for k in ("mean", "median", "p95", "p99", "max")
                ),
            ]
        )
    if rows:
        sec.tables.append(
            Table(
                ["stage", "epoch", "batches", "mean ms", "median ms", "p95 ms", "p99 ms", "max ms"],
                rows,
                "Batch times per epoch",
            )
        )
    else:
        sec.paragraphs.append("Not recorded.")
    profiled = profiled_batches(report.run)
    for stage in report.stages:
        out = plots.batch_outliers(report.run, stage)
        if out:
            sec.tables.append(
                Table(
                    ["epoch", "batch", "ms", "x median", "note"],
                    [
                        [
                            _f(o.epoch),
                            _f(o.batch),
                            _f(o.ms),
                            _f(o.x_median),
                            # the profiler's own cost, not the training's
                            "profiled (trace recording / export)"
                            if (stage, o.epoch, o.batch) in profiled
                            else "",
                        ]
                        for o in out
                    ],
                    f"{stage.label}: outlier batches (robust z > 3.5)",
                )
            )
    if profiled:
        marks = sorted({(st, ep) for st, ep, _ in profiled})
        sec.paragraphs.append(
            "Profiled epochs (a profiler window recorded some of their batches, which are "
            "slower for it): " + ", ".join(f"{st.label} epoch {ep}" for st, ep in marks) + "."
        )
    return sec


def _ceiling_line(report: Report) -> str | None:
    """How far the run was from the machine's limit: model FLOPs per sample, the measured peak
    and each stage's MFU; ``None`` when no FLOPs were recorded (no example input)."""
    info = report.run.run_info
    flops = info.flops if info is not None else None
    if flops is None or not flops.per_sample:
        return None
    parts = []
    for name, per_sample in sorted(flops.per_sample.items()):
        stage = Stage.of_lightning(name)
        use = None if stage is None else stage_utilisation(info, report.run.epochs, stage)
        if stage is None or use is None:
            continue
        mfu = "" if use.mfu is None else f", MFU {100.0 * use.mfu:.1f} %"
        spec = "" if use.spec_mfu is None else f" ({100.0 * use.spec_mfu:.1f} % of the spec sheet)"
        parts.append(
            f"{stage.label} {per_sample / 1e9:.3g} GFLOP/sample, "
            f"{use.flops_per_sec / 1e9:.3g} GFLOP/s{mfu}{spec}"
        )
    peak = flops.peak
    measured = num(flops.peak_flops_per_sec)
    where = f"{peak.get('device', '?')} {peak.get('dtype', '?')}"
    if peak.get("threads"):
        where += f", {peak['threads']} threads"
    line = (
        f"Machine limit: measured peak {measured / 1e9:.3g} GFLOP/s ({where}, matmul/conv "
        "micro-benchmark)"
    )
    if peak.get("contended"):
        line += ","
    if peak.get("contended"):
        line += (
            " measured while the host was busy, so possibly low (it is measured again at the "
            "next run; `OCR_PEAK_REFRESH=1` on a quiet host replaces it)"
        )
    spec_peak = flops.spec_peak_flops_per_sec
    if spec_peak is not None and spec_peak > 0:
        line += f", spec-sheet peak {spec_peak / 1e12:.1f} TFLOP/s (dense)"
    shapes = flops.example_input_shapes
    line += f"; FLOPs counted on an example input {', '.join(str(tuple(s)) for s in shapes)}"
    return line + (". " + "; ".join(parts) + "." if parts else ".")


def _throughput(report: Report) -> Section:
    sec = Section(
        id="throughput",
        title="Throughput over time",
        plot=plots.throughput_plot(report.run),
        plot_alt="samples per second per epoch and over time",
    )
    rows = [
        [
            e.stage.label,
            _f(e.epoch),
            _f(e.all_wall_s),  # what samples/s divides by
            _f(e.all_samples),  # all ranks
            _f(e.samples_per_sec),
            _f(e.batches_per_sec),
            _f(e.batch_size),
            _f(e.num_workers),
            _f(e.peak_rss_gb),
            _f(e.peak_gpu_memory_gb),
        ]
        for e in report.run.epochs
    ]
    header = [
        "stage",
        "epoch",
        "wall s",
        "samples",
        "samples/s",
        "batches/s",
        "batch size",
        "workers",
        "peak RSS GiB",
        "peak GPU GiB",
    ]
    ceiling = _ceiling_line(report)
    if ceiling is not None:
        # FLOPs were counted for this run: achieved GFLOP/s and MFU per epoch, next to the rate.
        sec.paragraphs.append(ceiling)
        header[6:6] = ["GFLOP/s", "MFU %"]
        for row, e in zip(rows, report.run.epochs, strict=True):
            use = epoch_utilisation(report.run.run_info, e)
            row[6:6] = [
                "-" if use is None else _f(use.flops_per_sec / 1e9),
                "-" if use is None or use.mfu is None else _f(100.0 * use.mfu, 1),
            ]
    if rows:
        sec.tables.append(Table(header, rows, "Throughput per epoch"))
    else:
        sec.paragraphs.append("Not recorded.")
    return sec


def _resources(report: Report) -> Section:
    run = report.run
    sec = Section(
        id="resources",
        title="CPU, GPU, memory and I/O over time",
        plot=plots.resources_plot(run),
        plot_alt="resource samples over time with alerts marked",
    )
    if not run.resources:
        sec.paragraphs.append(
            "Not recorded: perf/resources.jsonl is absent (attach ResourceMonitorCallback)."
        )
    t0 = min((r.t for r in run.resources), default=None)
    if run.alerts:
        base = t0 if t0 is not None else min(a.t for a in run.alerts)
        # Under DDP every rank appends to alerts.jsonl: name the rank of each event.
        ranked = any(a.rank != 0 for a in run.alerts) or any(e.world_size > 1 for e in run.epochs)
        rows = [
            [
                f"{(a.t - base) / 60.0:.2f}",
                *([str(a.rank)] if ranked else []),
                _f(a.rule),
                _f(a.event),
                _f(a.severity),
                _f(a.message),
                _f(a.suggestion),
            ]
            for a in sorted(run.alerts, key=lambda a: a.t)
        ]
        header = ["min", *(["rank"] if ranked else []), "rule", "event", "severity", "message"]
        sec.tables.append(Table([*header, "change"], rows, "Alerts"))
    else:
        sec.paragraphs.append("No alerts recorded.")
    resource_summary = run.resource_summary
    summary = resource_summary.metrics if resource_summary is not None else {}
    if resource_summary is not None and summary:
        sec.tables.append(
            Table(
                ["figure", "value"],
                [[k, _f(v)] for k, v in sorted(summary.items())],
                f"Summary at {resource_summary.run_kind} end",
                collapsed=True,  # a listing of every metric's mean and max: look-up, not read
            )
        )
    return sec


def _trace(report: Report) -> Section:
    trace = report.trace
    sec = Section(
        id="trace",
        title="Profiler trace: memory timeline and top ops",
        plot=plots.memory_timeline_plot(trace.memory_timeline if trace is not None else None),
        plot_alt="allocated memory over the profiled window",
    )
    windows = report.run.profiler_windows
    if windows:
        sec.tables.append(
            Table(
                [
                    "stage",
                    "epoch",
                    "trigger",
                    "reason",
                    "steps",
                    "batches",
                    "export s",
                    "analysis s",
                    "traces",
                ],
                [
                    [
                        _f(str(w.stage)),
                        _f(w.epoch),
                        _f(w.trigger),
                        _f(w.reason),
                        _f(w.steps),
                        _f(w.batches),
                        _f(w.overhead_s.get("export")),
                        _f(w.overhead_s.get("analysis")),
                        _f(w.traces),
                    ]
                    for w in windows
                ],
                "Profiler windows (export and analysis are the profiler's own cost)",
            )
        )
    for w in windows:
        agreement = w.clock_agreement
        if agreement is None:
            continue
        sec.tables.append(
            Table(
                ["phase", "ms/step", "trace ms/step", "Δ %", "agree"],
                [
                    [
                        _f(p.get("phase")),
                        _f(p.get("clock_ms")),
                        _f(p.get("trace_ms")),
                        _f(p.get("diff_pct")),
                        "yes" if p.get("agree") else "NO",
                    ]
                    for p in agreement.get("phases") or []
                ],
                f"Profiled steps, {w.stage.label} epoch "
                f"{_f(w.epoch)}: one figure per phase (the phase clock) with the trace's "
                f"beside it, over the same {_f(agreement.get('steps'))} steps (tolerance "
                f"{_f(agreement.get('tolerance_pct'))} %)",
            )
        )
    if trace is None:
        sec.paragraphs.append(report.trace_note or "No trace.")
        return sec
    s = trace.summary
    sec.paragraphs.append(
        f"Files: {', '.join(report.run.trace_files)}. {s.n_steps} steps, "
        f"{_f(s.events)} events, "
        + ("GPU: " + ", ".join(s.devices) if s.has_gpu else "CPU only")
        + f"; data wait {_f(trace.dataloader_time_pct, 1)} % of the step time."
    )
    if trace.memory_peaks:
        sec.tables.append(
            Table(
                ["device", "peak allocated GiB", "% of capacity", "step", "phase"],
                [
                    [
                        _f(p.device),
                        _f(p.peak_allocated_bytes / 2**30, 3),
                        _f(p.pct_of_capacity),
                        _f(p.step),
                        _f(p.phase),
                    ]
                    for p in trace.memory_peaks
                ],
                "Memory peaks",
            )
        )
    if trace.top_cpu_ops:
        sec.tables.append(
            Table(
                ["#", "op", "calls", "self ms", "total ms", "self %", "ms/step"],
                [
                    [
                        str(i),
                        r.name,
                        _f(r.calls),
                        _f(r.self_ms),
                        _f(r.total_ms),
                        _f(r.self_pct, 1),
                        _f(r.self_ms_per_step),
                    ]
                    for i, r in enumerate(trace.top_cpu_ops, 1)
                ],
                "Top CPU ops by self time",
            )
        )
    if trace.top_cuda_ops:
        sec.tables.append(
            Table(
                ["#", "kernel", "calls", "total ms", "%", "ms/step", "launched by"],
                [
                    [
                        str(i),
                        d.name,
                        _f(d.calls),
                        _f(d.total_ms),
                        _f(d.share_pct, 1),
                        _f(d.self_ms_per_step),
                        _f(d.launched_by),
                    ]
                    for i, d in enumerate(trace.top_cuda_ops, 1)
                ],
                "Top CUDA kernels",
            )
        )
    return sec


def _cache(report: Report) -> Section:
    sec = Section(id="cache", title="Cache statistics")
    names = sorted({k for e in report.run.epochs for k in e.worker_counts})
    if not names:
        sec.paragraphs.append(
            "No worker counters recorded (polygon cache off or not instrumented)."
        )
        return sec
    rows = []
    for e in report.run.epochs:
        counts = e.worker_counts
        hit_rate = polygon_cache_hit_rate(counts)
        rate = "-" if hit_rate is None else f"{100.0 * hit_rate:.1f}"
        rows.append([e.stage.label, _f(e.epoch), rate] + [_f(counts.get(n)) for n in names])
    sec.tables.append(Table(["stage", "epoch", "hit rate %", *names], rows))
    return sec


def _baseline(report: Report) -> Section:
    sec = Section(id="baseline", title="Comparison with the baseline")
    result = report.baseline
    if result is None:
        sec.paragraphs.append(report.baseline_note or "No baseline given.")
        return sec
    # plain words: the paragraphs are shown as they are in the page, the Markdown and a terminal
    sec.paragraphs.append(f"Baseline {report.baseline_name}: {verdict_line(result)}.")
    if result.verdict == "insufficient data":
        # Said before the table: its moved rows are not regressions, whatever their ratio.
        sec.paragraphs.append(
            "Too little data to judge, so this is neither a pass nor a regression: "
            + "; ".join(result.insufficient)
            + ". Rows marked 'inconclusive (regression?)' or 'inconclusive (improvement?)' moved "
            "beyond their band, but with no measured epoch-to-epoch noise to judge them against."
        )
    sec.paragraphs.extend(result.notes)
    sec.paragraphs.append(BAND_NOTE)
    sec.tables.append(Table(list(COLUMNS), [list(row_cells(r)) for r in result.rows]))
    return sec


def _config(report: Report) -> Section:
    run = report.run
    sec = Section(id="config", title="Configuration")
    if run.overrides:
        sec.paragraphs.append("Overrides: " + " ".join(run.overrides))
    if run.config_text is not None:
        sec.pre = run.config_text
        sec.pre_label = f".hydra/config.yaml ({len(run.config_text.splitlines())} lines)"
    elif run.run_info and run.run_info.hparams:
        sec.pre = json.dumps(run.run_info.hparams, indent=2, sort_keys=True, default=str)
        sec.pre_label = (
            f"The LightningModule's hparams, from perf/run.json ({len(sec.pre.splitlines())} lines)"
        )
    else:
        sec.paragraphs.append("Not recorded (no .hydra/config.yaml, no hparams in perf/run.json).")
    if run.notes:
        sec.tables.append(
            Table(["not recorded"], [[n] for n in run.notes], "What this run did not record")
        )
    return sec


def sections(report: Report) -> list[Section]:
    """The report's sections in page order (verdict first after the run's identity)."""
    return [
        _verdict(report),
        _header(report),
        _phases(report),
        _batches(report),
        _throughput(report),
        _resources(report),
        _trace(report),
        _cache(report),
        _baseline(report),
        measured_changes_section(report),
        _config(report),
    ]


# -- Markdown ------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_details(summary: str, body: list[str]) -> list[str]:
    """``body`` folded under ``summary`` (GitHub renders ``<details>``; the blank lines let the
    Markdown inside it render)."""
    return [
        "<details>",
        f"<summary>{html.escape(summary)}</summary>",
        "",
        *body,
        "</details>",
        "",
    ]


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
            for i, f in enumerate(ranked(report), 1):
                head = f"{f.severity}, score {f.score:.1f}, cause {f.confidence}"
                lines.append(f"{i}. **[{head}] {f.title}**  ")
                lines.append(f"   Evidence: {_evidence(f.evidence) or '-'}  ")
                for c in f.corroboration:
                    lines.append(f"   Also: {c}  ")
                tries = candidate_lines(f)
                lines.append(f"   Change: {f.suggestion}" + ("  " if tries else ""))
                lines += [f"   Try: {t}  " for t in tries[:-1]]
                lines += [f"   Try: {t}" for t in tries[-1:]]
            lines.append("")
            lines += ["**Severity and score**", ""]
            lines += [f"- {item}" for item in severity_legend(report)]
            lines.append("")
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
    if t.caption:
        out.append(f"<caption>{e(t.caption)}</caption>")
    out.append(
        "<thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in t.headers) + "</tr></thead><tbody>"
    )
    for row in t.rows:
        cells = []
        for i, c in enumerate(row):
            cls = f' class="sev-{e(c)}"' if i == sev_col else ""
            text = f"<code>{e(c)}</code>" if i in t.code_cols and c != "-" else e(c)
            cells.append(f"<td{cls}>{text}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    if t.folded:
        # the caption moves into the summary line, the table folds under it
        if t.caption:
            out.pop(1)
        return f"<details><summary>{e(t.summary)}</summary>\n" + "\n".join(out) + "</details>"
    return "\n".join(out)


def _html_legend(report: Report) -> str:
    """The severity legend as a definition list (score first, then the three severities)."""
    e = html.escape
    items = []
    for line in severity_legend(report):
        term, _, text = line.partition(": ")
        cls = f' class="sev-{e(term)}"' if term in ("critical", "warning", "info") else ""
        items.append(f"<dt{cls}>{e(term)}</dt><dd>{e(text)}</dd>")
    return '<dl class="legend" id="severity-legend">' + "".join(items) + "</dl>"


def to_html(report: Report) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no scripts, no network)."""
    e = html.escape
    secs = sections(report)
    name = report.name
    body = [
        f"<h1>{e(title(report))}</h1>",
        f'<p class="subtitle">Run name from {e(name.source)}.</p>',
        "<nav>" + "".join(f'<a href="#{e(s.id)}">{e(s.title)}</a>' for s in secs) + "</nav>",
    ]
    for sec in secs:
        body.append(f'<section id="{e(sec.id)}"><h2>{e(sec.title)}</h2>')
        for i, p in enumerate(sec.paragraphs):
            cls = ' class="top"' if sec.id == "verdict" and i == 0 and report.findings else ""
            body.append(f"<p{cls}>{e(p)}</p>")
        if sec.plot is not None:
            label = e(sec.plot_alt)
            body.append(f'<figure class="plot" role="img" aria-label="{label}">{sec.plot}</figure>')
        for t in sec.tables:
            body.append(_html_table(t, sev_col=1 if sec.id == "verdict" else None))
        if sec.id == "verdict":
            body.append(_html_legend(report))
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


def print_summary(report: Report, console: Console | None = None, top: int = 3) -> None:
    """A few lines: where the time went per stage and the ``top`` findings with their change."""
    con = console or Console()
    if report.stages:
        t = RichTable(title="Where the time went", title_justify="left", header_style="bold")
        t.add_column("stage")
        t.add_column("epochs", justify="right")
        t.add_column("wall s", justify="right")
        t.add_column("largest phases")
        t.add_column("samples/s", justify="right")
        for s in report.stages.values():
            biggest = sorted(PHASES, key=lambda p: -s.phases_s.get(p, 0.0))[:3]
            rate = s.samples_per_sec
            t.add_row(
                s.label,
                str(s.epochs),
                f"{s.wall_s:,.2f}",
                ", ".join(f"{p} {s.share(p):.0f} %" for p in biggest),
                f"{rate:,.1f}",
            )
        con.print(t)
    con.print(f"[bold]Verdict[/bold] ({escape(report.name.title)})", highlight=False)
    for i, f in enumerate(ranked(report)[:top], 1):
        style = _STYLE.get(f.severity, "")
        con.print(
            f"{i}. [{style}]{f.severity}[/{style}] (score {f.score:.1f}, cause {f.confidence}) "
            f"{escape(f.title)}",
            highlight=False,
        )
        con.print(f"   change: {f.suggestion}", markup=False, highlight=False)
        for line in candidate_lines(f):
            con.print(f"   try: {line}", markup=False, highlight=False)
    if len(report.findings) > top:
        con.print(f"   ... {len(report.findings) - top} more in the report", highlight=False)
