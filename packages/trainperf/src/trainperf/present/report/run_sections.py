"""The report's sections about the run around its timing.

The sections about the run around its timing: its identity, resources and alerts, cache
counters, the comparison with a baseline and its configuration. Times are the run's own (shown
in UTC)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from trainperf.analysis.run import RunData
from trainperf.present.gate_table import BAND_NOTE, COLUMNS, row_cells, verdict_line
from trainperf.present.report import plots
from trainperf.present.report.build import Report
from trainperf.present.report.document import Section, Table, cell
from trainperf.records.run_info import cache_names, hit_rate


def _utc(t: Any) -> str:
    if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t):
        return "-"
    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def run_section(report: Report) -> Section:
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
        ("framework", "framework"),
        ("argv", "command"),
    ):
        value = getattr(info, key) if info is not None else None
        if key == "framework":
            value = _framework(report.run)
        if value is not None:
            value = _utc(value) if key == "started_at" else value
            if key == "cuda_devices" and not value:
                value = "none (CPU run)"
            if key == "argv" and isinstance(value, list):
                value = " ".join(str(v) for v in value)
            rows.append([label, cell(value)])
    total = sum(s.wall_s + s.warmup_s for s in report.stages.values())  # warm-up included
    paragraphs = [
        f"Device: {report.run.device.upper()}. Recorded wall time: {total:,.2f} s over "
        + (
            ", ".join(
                f"{s.epochs} {s.label} epoch(s) ({s.wall_s:,.2f} s: {s.epochs_words()})"
                for s in report.stages.values()
            )
            or "no epochs"
        )
        + "."
    ]
    if report.run.interruption is not None:
        paragraphs.append(report.run.interruption)
    return Section(
        id="run",
        title="Run",
        paragraphs=paragraphs,
        tables=[Table(["", "value"], rows)] if rows else [],
    )


_ALERT_FIELDS = ("rule", "event", "severity", "message", "suggestion")


def resources_section(report: Report) -> Section:
    run = report.run
    sec = Section(
        id="resources",
        title="CPU, GPU, memory and I/O over time",
        plot=plots.svg(plots.resources_figure(run)),
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
                *(cell(getattr(a, f)) for f in _ALERT_FIELDS),
            ]
            for a in sorted(run.alerts, key=lambda a: a.t)
        ]
        header = ["min", *(["rank"] if ranked else []), "rule", "event", "severity", "message"]
        sec.tables.append(Table([*header, "change"], rows, "Alerts"))
    else:
        sec.paragraphs.append("No alerts recorded.")
    summary = run.resource_summary
    if summary is not None:
        sec.add(
            Table(
                ["figure", "value"],
                [[k, cell(v)] for k, v in sorted(summary.metrics.items())],
                f"Summary at {summary.run_kind} end",
                collapsed=True,  # a listing of every metric's mean and max: look-up, not read
            )
        )
    return sec


def cache_section(report: Report) -> Section:
    sec = Section(id="cache", title="Cache statistics")
    names = sorted({k for e in report.run.epochs for k in e.worker_counts})
    if not names:
        sec.paragraphs.append(
            "No worker counters recorded (no cache counted with report_count, or the loader "
            "was not instrumented)."
        )
        return sec
    caches = cache_names(names)  # X of X_hits / X_misses: a hit-rate column each
    rate_columns = [f"{c} hit rate %" if len(caches) > 1 else "hit rate %" for c in caches]
    rows = []
    for e in report.run.epochs:
        counts = e.worker_counts
        rates = [hit_rate(counts, c) for c in caches]
        shown = ["-" if r is None else f"{100.0 * r:.1f}" for r in rates]
        rows.append([e.stage.label, cell(e.epoch), *shown] + [cell(counts.get(n)) for n in names])
    sec.tables.append(Table(["stage", "epoch", *rate_columns, *names], rows))
    return sec


def baseline_section(report: Report) -> Section:
    sec = Section(id="baseline", title="Comparison with the baseline")
    result = report.run.baseline
    if result is None:
        sec.paragraphs.append(report.run.baseline_note or "No baseline given.")
        return sec
    # plain words: the paragraphs are shown as they are in the page, the Markdown and a terminal
    sec.paragraphs.append(f"Baseline {report.run.baseline_name}: {verdict_line(result)}.")
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


def _framework(run: RunData) -> str | None:
    """``lightning 2.6.0`` (the framework that recorded the run, and the app above it)."""
    fw = run.framework
    if fw is None:
        return None
    text = f"{fw.name} {fw.version}" if fw.version else fw.name
    return f"{text} (app: {run.app.name})" if run.app is not None else text


def config_section(report: Report) -> Section:
    run = report.run
    sec = Section(id="config", title="Configuration")
    if run.overrides:
        sec.paragraphs.append("Overrides: " + " ".join(run.overrides))
    if run.config_text is not None:
        sec.pre = run.config_text
        where = run.config_label or "the app's configuration"
        sec.pre_label = f"{where} ({len(run.config_text.splitlines())} lines)"
    elif run.run_info and run.run_info.hparams:
        sec.pre = json.dumps(run.run_info.hparams, indent=2, sort_keys=True, default=str)
        sec.pre_label = (
            f"The model's hparams, from perf/run.json ({len(sec.pre.splitlines())} lines)"
        )
    else:
        sec.paragraphs.append("Not recorded (no app configuration, no hparams in perf/run.json).")
    if run.notes:
        sec.tables.append(
            Table(["not recorded"], [[n] for n in run.notes], "What this run did not record")
        )
    return sec
