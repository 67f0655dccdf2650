"""Typed rows and per-stage summaries of a trace's step table.

Rows and summaries of a :class:`~trainperf.analysis.trace.steps.StepTable`: one typed row per
step, the phase summary and step statistics per stage, and steps per source file."""

from __future__ import annotations

import numpy as np

from trainperf.analysis.trace.aggregates import ms, step_statistics
from trainperf.analysis.trace.step_phases import GPU_PARTS, PHASES
from trainperf.analysis.trace.steps import StepTable
from trainperf.analysis.trace.table import TraceSource
from trainperf.analysis.trace.trace_analysis import (
    PhaseShare,
    PhaseSummary,
    RankRow,
    StepRow,
    StepStats,
)

__all__ = ["per_rank", "phase_summaries", "step_rows"]

_P_DATA = PHASES.index("data_wait")


def phase_summaries(
    steps: StepTable,
) -> tuple[dict[str, PhaseSummary], dict[str, StepStats], set[tuple[str, str]]]:
    """Per stage (``train`` first): the phase summary and the step statistics; and the
    ``(stage, step label)`` of the outlier steps."""
    stages = sorted(set(steps.stage), key=lambda s: (s != "train", s))
    step_stats: dict[str, StepStats] = {}
    summary = {}
    for stage in stages:
        rows = np.flatnonzero(np.asarray(steps.stage) == stage)
        stats = step_statistics(steps.wall[rows], [steps.label[i] for i in rows])
        if stats is not None:  # every stage listed has steps
            step_stats[stage] = stats
        summary[stage] = _phase_summary(steps, rows)
    outliers = {(stage, o.step) for stage, st in step_stats.items() for o in st.outliers}
    return summary, step_stats, outliers


def step_rows(
    steps: StepTable, sources: list[TraceSource], outliers: set[tuple[str, str]]
) -> list[StepRow]:
    """One :class:`StepRow` per step."""
    return [
        _step_row(steps, i, sources, (steps.stage[i], steps.label[i]) in outliers)
        for i in range(len(steps))
    ]


def _by_phase(names: tuple[str, ...], values: list[int]) -> dict[str, float]:
    return {p: ms(v) for p, v in zip(names, values, strict=True)}


def _step_row(steps: StepTable, i: int, sources: list[TraceSource], outlier: bool) -> StepRow:
    wall = int(steps.end[i] - steps.start[i])
    row = StepRow(
        step=steps.label[i],
        number=int(steps.number[i]),
        stage=steps.stage[i],
        source=int(steps.src[i]),
        rank=sources[int(steps.src[i])].rank,
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
    if steps.gpu is not None and steps.blocked is not None:
        row.blocked_ms = _by_phase(PHASES, steps.blocked[i].tolist())
    return row


def _shares(names: tuple[str, ...], parts: np.ndarray, total: int) -> dict[str, PhaseShare]:
    """Mean ms and share of ``total`` (%) of each column of ``parts`` (steps x names, ns)."""
    return {
        p: PhaseShare(
            mean_ms=ms(parts[:, k].mean()), pct=round(100.0 * float(parts[:, k].sum()) / total, 2)
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
    if steps.gpu is not None and steps.blocked is not None:
        out.blocked = _shares(PHASES, steps.blocked[rows], total)
    return out


def per_rank(steps: StepTable, sources: list[TraceSource]) -> list[RankRow]:
    """Steps, median step and data wait share per source file."""
    out = []
    for i, s in enumerate(sources):
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
