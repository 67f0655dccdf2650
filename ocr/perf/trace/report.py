"""``analyze_table`` / ``analyze_path``: one loaded trace in, one typed
:class:`~ocr.perf.trace.result.TraceAnalysis` out; ``analyze_trace``: its dict form, the public
API (documented keys ``top_cpu_ops``, ``top_cuda_ops``, ``memory_peaks``,
``dataloader_time_pct``...)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ocr.perf.findings import post_hoc_thresholds
from ocr.perf.trace.aggregates import device_ops, host_ops, memory_report, ms, step_statistics
from ocr.perf.trace.comms import add_metrics, communication, summarise
from ocr.perf.trace.findings import evaluate
from ocr.perf.trace.integrity import check_integrity
from ocr.perf.trace.load import load_traces
from ocr.perf.trace.metrics import data_share_without_steps, measure
from ocr.perf.trace.result import (
    DeviceInfo,
    PhaseShare,
    PhaseSummary,
    RankRow,
    SourceInfo,
    StepRow,
    StepStats,
    Summary,
    Timing,
    TraceAnalysis,
)
from ocr.perf.trace.steps import GPU_PARTS, PHASES, StepTable, compute_steps
from ocr.perf.trace.table import EventTable, Kind, TraceSource

__all__ = ["analyze_path", "analyze_table", "analyze_trace"]

_P_DATA = PHASES.index("data_wait")


def analyze_trace(path: str | Path, top_k: int | None = 20) -> dict[str, Any]:
    """Analyse a torch.profiler Chrome trace (``.json``/``.json.gz``) or a directory of them.

    Returns the JSON-ready dict form of :func:`analyze_path`'s result, with (among others)
    ``top_cpu_ops``, ``top_cuda_ops``, ``memory_peaks``, ``dataloader_time_pct``, ``steps``
    (per-step breakdown whose phases sum to the step's wall time), ``phase_summary``,
    ``step_stats`` (per stage, with outlier steps), ``findings`` and ``sources``. ``top_k=None``
    keeps every op. Raises :class:`~ocr.perf.trace.table.TraceError` for unreadable or malformed
    input.
    """
    return analyze_path(path, top_k).as_dict()


def analyze_path(path: str | Path, top_k: int | None = 20) -> TraceAnalysis:
    """The typed analysis of a trace file or directory (see :func:`analyze_trace`), with its
    ``timing`` and ``input``."""
    analysis, _ = timed_analysis(path, str(path), top_k)
    return analysis


def timed_analysis(
    source: str | Path | Sequence[Path], label: str, top_k: int | None = 20
) -> tuple[TraceAnalysis, EventTable]:
    """Load ``source`` (a file, a directory or files of one rank), analyse it and set the
    analysis's ``timing`` and ``input`` (``label``); the table comes back for callers that look
    further (the rank view)."""
    t0 = time.perf_counter()
    table = load_traces(source)
    t_load = time.perf_counter() - t0
    analysis = analyze_table(table, top_k=top_k)
    analysis.timing = Timing(
        load_s=round(t_load, 4),
        parse_s=round(sum(s.parse_s for s in table.sources), 4),
        total_s=round(time.perf_counter() - t0, 4),
    )
    analysis.input = label
    return analysis, table


def analyze_table(table: EventTable, top_k: int | None = 20) -> TraceAnalysis:
    """The analysis of an already loaded table (see :func:`analyze_trace`)."""
    warnings = list(table.warnings)
    steps = compute_steps(table, warnings)
    n_steps = len(steps)
    has_gpu = bool(np.isin(table.kind, Kind.DEVICE).any())
    wall = steps.wall
    wall_total = int(wall.sum())
    phase_tot = steps.phases.sum(axis=0) if n_steps else np.zeros(len(PHASES), np.int64)

    if n_steps:
        dl_pct = 100.0 * float(phase_tot[_P_DATA]) / wall_total if wall_total else 0.0
    else:
        dl_pct = data_share_without_steps(table)

    peaks, timeline = memory_report(table, steps)
    metrics = measure(table, steps, has_gpu, dl_pct, peaks)
    comm = communication(table, steps)
    add_metrics(metrics, comm, steps)

    stages = sorted(set(steps.stage), key=lambda s: (s != "train", s))
    step_stats: dict[str, StepStats] = {}
    phase_summary = {}
    for stage in stages:
        rows = np.flatnonzero(np.asarray(steps.stage) == stage)
        stats = step_statistics(wall[rows], [steps.label[i] for i in rows])
        if stats is not None:  # every stage listed has steps
            step_stats[stage] = stats
        phase_summary[stage] = _phase_summary(steps, rows)
    outlier_labels = {(stage, o.step) for stage, st in step_stats.items() for o in st.outliers}

    span_start = int(table.start.min()) if len(table) else 0
    span_end = int(table.end.max()) if len(table) else 0
    return TraceAnalysis(
        sources=[_source(s) for s in table.sources],
        summary=Summary(
            events=len(table),
            span_ms=ms(span_end - span_start),
            has_gpu=has_gpu,
            devices=sorted(
                {n for s in table.sources for d in s.device_properties if (n := d.get("name"))}
            ),
            ranks=sorted({s.rank for s in table.sources if s.rank is not None}),
            n_steps=n_steps,
            stages=stages,
            origin_ns=table.origin_ns,
        ),
        top_cpu_ops=host_ops(table, (Kind.CPU_OP,), top_k, n_steps),
        top_annotations=host_ops(table, (Kind.USER_ANNOTATION,), top_k, n_steps),
        top_cuda_ops=device_ops(table, top_k, n_steps),
        memory_peaks=peaks,
        memory_timeline=timeline,
        dataloader_time_pct=round(float(dl_pct), 3),
        steps=[
            _step_row(steps, i, table, (steps.stage[i], steps.label[i]) in outlier_labels)
            for i in range(n_steps)
        ],
        phase_summary=phase_summary,
        step_stats=step_stats,
        per_rank=_per_rank(table, steps),
        metrics=metrics,
        findings=evaluate(metrics),
        thresholds=post_hoc_thresholds(),
        warnings=warnings,
        integrity=check_integrity(table, steps),
        communication=summarise(comm, steps, [s.rank for s in table.sources]),
    )


def _source(s: TraceSource) -> SourceInfo:
    def number(v: object) -> int | None:
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    return SourceInfo(
        path=str(s.path),
        rank=s.rank,
        rank_from=s.rank_from,
        world_size=s.world_size,
        schema=s.schema,
        framework=s.framework,
        devices=[
            DeviceInfo(
                id=number(d.get("id")),
                name=str(d["name"]) if d.get("name") is not None else None,
                total_mem=number(d.get("totalGlobalMem")),
            )
            for d in s.device_properties
        ],
        n_events=s.n_events,
        parse_s=round(s.parse_s, 4),
    )


def _by_phase(names: tuple[str, ...], values: list[int]) -> dict[str, float]:
    return {p: ms(v) for p, v in zip(names, values, strict=True)}


def _step_row(steps: StepTable, i: int, table: EventTable, outlier: bool) -> StepRow:
    wall = int(steps.end[i] - steps.start[i])
    row = StepRow(
        step=steps.label[i],
        number=int(steps.number[i]),
        stage=steps.stage[i],
        source=int(steps.src[i]),
        rank=table.sources[int(steps.src[i])].rank,
        start_ms=ms(steps.start[i]),
        wall_ms=ms(wall),
        wall_ns=wall,
        phases_ms=_by_phase(PHASES, steps.phases[i].tolist()),
        outlier=outlier,
    )
    if steps.gpu is not None:
        row.gpu_ms = _by_phase(GPU_PARTS, steps.gpu[i].tolist())
        if wall:
            row.gpu_busy_pct = round(float(100.0 * (1 - steps.gpu[i][-1] / wall)), 2)
        row.cuda_runtime_ms = ms(steps.runtime_ns[i])
    if steps.gpu_phases is not None:
        row.gpu_phases_ms = _by_phase(PHASES, steps.gpu_phases[i].tolist())
    return row


def _shares(names: tuple[str, ...], parts: np.ndarray, total: int) -> dict[str, PhaseShare]:
    """Mean ms and share of ``total`` (%) of each column of ``parts`` (steps x names, ns)."""
    return {
        p: PhaseShare(
            mean_ms=ms(parts[:, k].mean()),
            pct=round(100.0 * float(parts[:, k].sum()) / total, 2),
        )
        for k, p in enumerate(names)
    }


def _phase_summary(steps: StepTable, rows: np.ndarray) -> PhaseSummary:
    wall = steps.wall[rows]
    total = int(wall.sum()) or 1
    out = PhaseSummary(
        steps=int(rows.size),
        mean_wall_ms=ms(wall.mean()),
        phases=_shares(PHASES, steps.phases[rows], total),
    )
    if steps.gpu is not None:
        out.gpu = _shares(GPU_PARTS, steps.gpu[rows], total)
        out.cuda_runtime_mean_ms = ms(steps.runtime_ns[rows].mean())
    if steps.gpu_phases is not None:
        # device time launched from each host phase (kernels and copies, summed over streams)
        out.gpu_phases = {
            p: PhaseShare(mean_ms=ms(steps.gpu_phases[rows, k].mean()))
            for k, p in enumerate(PHASES)
        }
    return out


def _per_rank(table: EventTable, steps: StepTable) -> list[RankRow]:
    out = []
    for i, s in enumerate(table.sources):
        rows = np.flatnonzero(steps.src == i)
        wall = int(steps.wall[rows].sum()) if rows.size else 0
        out.append(
            RankRow(
                source=i,
                path=s.path.name,
                rank=s.rank,
                steps=int(rows.size),
                median_step_ms=ms(np.median(steps.wall[rows])) if rows.size else None,
                data_wait_pct=(
                    round(100.0 * float(steps.phases[rows, _P_DATA].sum()) / wall, 2)
                    if wall
                    else None
                ),
            )
        )
    return out
