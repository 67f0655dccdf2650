"""The report's timing sections: where the time went.

Where the time went: the phase breakdown per epoch (with the DataLoader workers, the named
hooks and DDP stragglers), the batch-time distribution and outliers, and the throughput with
the machine's ceiling."""

from __future__ import annotations

import math

from trainperf.analysis.mfu import epoch_utilisation, stage_utilisation
from trainperf.analysis.stages import (
    PROFILER_PHASE,
    StageSummary,
    accumulate,
    batch_outliers,
    num,
    profiled_batches,
)
from trainperf.core.clock import PHASES
from trainperf.core.stage import Stage
from trainperf.present.report import plots
from trainperf.present.report.build import Report
from trainperf.present.report.document import Section, Table, cell


def phases_section(report: Report) -> Section:
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
    extra = (PROFILER_PHASE,) if any(PROFILER_PHASE in s.phases_s for s in stages) else ()
    waits = report.gpu_waits

    def shown(s: StageSummary, phase: str) -> str:
        note = waits[s.stage].note(phase) if s.stage in waits else ""
        share = f"{s.share(phase):.1f} %" + (f"; {note}" if note else "")
        return f"{s.phases_s.get(phase, 0.0):,.3f} s ({share})"

    rows = [[phase] + [shown(s, phase) for s in stages] for phase in (*PHASES, *extra)]
    rows.append(["wall"] + [f"{s.wall_s:,.3f} s" for s in stages])
    sec.tables.append(
        Table(
            ["phase"] + [s.label for s in stages],
            rows,
            "Seconds per phase, all epochs",
            collapsed=False,  # the answer to "where did the time go"
        )
    )
    sec.add(_waiting_table(report))
    parts = sorted({p for s in stages for p in s.worker_s})
    if parts:
        wrows = [
            [part]
            + [
                "-"
                if (secs := s.worker_s.get(part)) is None
                else f"{secs:,.3f} s ({1000.0 * secs / max(s.samples, 1):.2f} ms/sample)"
                for s in stages
            ]
            for part in parts
        ]
        wrows.append(["num_workers"] + [cell(s.num_workers) for s in stages])
        sec.tables.append(
            Table(
                ["worker part"] + [s.label for s in stages],
                wrows,
                "DataLoader work timed in the workers (overlaps with the phases above)",
            )
        )
    sec.add(
        Table(
            ["callback or hook", "kind"] + [s.label for s in stages],
            _named_rows(stages),
            f"Time by callback hook and model module hook, all epochs (the {_NAMED_ROWS} "
            "largest; part of the callbacks, module_hooks and other phases above)",
        )
    )
    sec.add(
        Table(
            ["stage", "epoch", "straggler rank", "excess s", "cause", "others' sync_wait s"],
            _straggler_rows(stages),
            "DDP: the rank the others waited for, per epoch (from the phases of every rank)",
        )
    )
    sec.add(_rank_spread_table(stages))
    sec.add(_rank_callback_table(stages))
    return sec


def _waiting_table(report: Report) -> Table:
    """Each CUDA stage's phases split into own host work and waiting for the GPU, per batch
    (:mod:`trainperf.analysis.gpu_wait`); no rows without CUDA events."""
    rows = []
    for stage, w in report.gpu_waits.items():
        for p in w.phases.values():
            if p.host_s <= 0 and p.gpu_s <= 0:
                continue
            rows.append(
                [stage.label, p.phase]
                + [cell(w.ms_per_batch(x), 2) for x in (p.host_s, p.gpu_s, p.waiting_s, p.own_s)]
                + [f"{w.pct(p.waiting_s):.1f} %"]
            )
    return Table(
        [
            "stage",
            "phase",
            "host ms/batch",
            "GPU span ms/batch",
            "waiting ms/batch",
            "own ms/batch",
            "waiting % of stage",
        ],
        rows,
        "Waiting for the GPU (live clock's CUDA events): a phase's host time beyond its GPU "
        "span is host time spent while the GPU still ran earlier phases' work, at most the time "
        "blocked in a sync there (two events per phase cannot tell blocked time from host work "
        "done meanwhile; a profiler trace can); 'own' is the rest",
    )


def _rank_spread_table(stages: list[StageSummary]) -> Table:
    """DDP: each figure's min / median / max across ranks (and the rank with the max), from the
    last epoch of each stage: the ranks side by side; no rows with one rank."""
    rows = []
    for s in stages:
        for name in ("epoch_time", *(f"{p}_time" for p in PHASES)):
            spread = s.spreads.get(name)
            if not spread or not spread.get("max"):
                continue
            slowest = spread.get("slowest_rank")
            rows.append(
                [s.label, name.removesuffix("_time") if name != "epoch_time" else "epoch"]
                + [cell(spread.get(k), 3) for k in ("min", "median", "max")]
                + ["-" if slowest is None or math.isnan(slowest) else str(int(slowest))]
            )
    return Table(
        ["stage", "figure", "min s", "median s", "max s", "rank of max"],
        rows,
        "DDP: each phase across ranks, last epoch of each stage (a rank that waits shows "
        "sync_wait; the one it waits for, the phase it works longer in)",
    )


def _rank_callback_table(stages: list[StageSummary]) -> Table:
    """DDP: seconds per callback on each rank, all stages and epochs ("-": not on that rank); no
    rows with one rank."""
    ranks = max((len(s.callbacks_s_by_rank) for s in stages), default=0)
    totals: list[dict[str, float]] = [{} for _ in range(ranks)]
    for s in stages:
        for acc, spent in zip(totals, s.callbacks_s_by_rank, strict=False):
            accumulate(acc, spent)
    names = sorted({name for acc in totals for name in acc}) if ranks > 1 else []
    rows = [[name] + [cell(acc.get(name), 3) for acc in totals] for name in names]
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
            found = (
                ["none", "", "", ""]
                if x is None
                else [str(x.rank), cell(x.excess_s, 3), x.cause, cell(x.others_wait_s, 3)]
            )
            rows.append([s.label, str(epoch), *found])
    return rows


def batches_section(report: Report) -> Section:
    sec = Section(
        id="batches",
        title="Batch-time distribution and outliers",
        plot=plots.batch_times_plot(report.run),
        plot_alt="histograms of batch times per stage",
    )
    rows = [
        [
            e.stage.label,
            cell(e.epoch),
            cell(int(num(e.batch_stats.get("count"), e.num_batches))),
            *(
                f"{1000.0 * num(e.batch_stats.get(k), math.nan):,.1f}"
                for k in ("mean", "median", "p95", "p99", "max")
            ),
        ]
        for e in report.run.epochs
    ]
    sec.add(
        Table(
            ["stage", "epoch", "batches", "mean ms", "median ms", "p95 ms", "p99 ms", "max ms"],
            rows,
            "Batch times per epoch",
        ),
        empty="Not recorded.",
    )
    profiled = profiled_batches(report.run.profiler_windows)
    for stage in report.stages:
        sec.add(
            Table(
                ["epoch", "batch", "ms", "x median", "note"],
                [
                    [
                        *(cell(v) for v in (o.epoch, o.batch, o.ms, o.x_median)),
                        # the profiler's own cost, not the training's
                        "profiled (trace recording / export)"
                        if (stage, o.epoch, o.batch) in profiled
                        else "",
                    ]
                    for o in batch_outliers(report.run.epochs, stage)
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
        stage = Stage.of_running(name)
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
        line += (
            ", measured while the host was busy, so possibly low (it is measured again at the "
            "next run; `TRAINPERF_PEAK_REFRESH=1` on a quiet host replaces it)"
        )
    spec_peak = flops.spec_peak_flops_per_sec
    if spec_peak is not None and spec_peak > 0:
        line += f", spec-sheet peak {spec_peak / 1e12:.1f} TFLOP/s (dense)"
    shapes = flops.example_input_shapes
    line += f"; FLOPs counted on an example input {', '.join(str(tuple(s)) for s in shapes)}"
    return line + (". " + "; ".join(parts) + "." if parts else ".")


# (header, EpochRecord field): the wall time samples/s divides by, the samples of all ranks
_THROUGHPUT_COLUMNS = (
    ("wall s", "all_wall_s"),
    ("samples", "all_samples"),
    ("samples/s", "samples_per_sec"),
    ("batches/s", "batches_per_sec"),
    ("batch size", "batch_size"),
    ("workers", "num_workers"),
    ("peak RSS GiB", "peak_rss_gb"),
    ("peak GPU GiB", "peak_gpu_memory_gb"),
)


def throughput_section(report: Report) -> Section:
    sec = Section(
        id="throughput",
        title="Throughput over time",
        plot=plots.svg(plots.throughput_figure(report.run)),
        plot_alt="samples per second per epoch and over time",
    )
    rows = [
        [e.stage.label, cell(e.epoch), *(cell(getattr(e, f)) for _, f in _THROUGHPUT_COLUMNS)]
        for e in report.run.epochs
    ]
    header = ["stage", "epoch", *(h for h, _ in _THROUGHPUT_COLUMNS)]
    ceiling = _ceiling_line(report)
    if ceiling is not None:
        # FLOPs were counted for this run: achieved GFLOP/s and MFU per epoch, next to the rate.
        sec.paragraphs.append(ceiling)
        header[6:6] = ["GFLOP/s", "MFU %"]
        for row, e in zip(rows, report.run.epochs, strict=True):
            use = epoch_utilisation(report.run.run_info, e)
            row[6:6] = [
                "-" if use is None else cell(use.flops_per_sec / 1e9),
                "-" if use is None or use.mfu is None else cell(100.0 * use.mfu, 1),
            ]
    sec.add(Table(header, rows, "Throughput per epoch"), empty="Not recorded.")
    return sec
