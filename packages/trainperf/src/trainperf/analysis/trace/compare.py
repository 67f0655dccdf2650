"""Compare two analysed traces: per-op, per-phase and per-step deltas plus a noise-aware verdict.

The verdict looks at the distributions of step wall times, never at two sums: the relative change
of the median, a one-sided Mann-Whitney U test and a seeded bootstrap confidence interval of the
median ratio (both from :mod:`trainperf.core.significance`, whose words it answers in). A change
counts only when it is beyond the threshold *and* the step distributions say it is not noise; beyond
the threshold but within the noise it is ``inconclusive``.

The result is typed (:class:`TraceComparison`, times in ms); ``trainperf compare`` prints it and
writes its dict form (:meth:`TraceComparison.as_dict`) with ``--json``.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from trainperf.analysis.trace.step_phases import GPU_PARTS, PHASES
from trainperf.analysis.trace.trace_analysis import PhaseShare, TraceAnalysis, _Part
from trainperf.core.significance import (
    ALPHA,
    Outcome,
    mann_whitney_greater,
    ratio_of_medians_interval,
)

__all__ = [
    "MIN_STEPS",
    "Delta",
    "FindingIds",
    "OpDelta",
    "StageComparison",
    "StepDelta",
    "TraceComparison",
    "compare_reports",
]


def _change(a: float | None, b: float | None) -> tuple[float | None, float | None]:
    """``(b - a, its share of a in %)``; ``None`` where a side is unknown (or ``a`` is 0)."""
    if a is None or b is None:
        return None, None
    return round(b - a, 4), (round(100.0 * (b / a - 1.0), 3) if a else None)


class Delta(_Part):
    """A figure in A and in B; the change (B - A) and its share of A (%) when both are known
    (``delta_pct`` also needs A non-zero)."""

    a: float | None
    b: float | None
    delta: float | None = None
    delta_pct: float | None = None

    @classmethod
    def of(cls, a: float | None, b: float | None) -> Delta:
        """The delta of ``a`` -> ``b``."""
        delta, pct = _change(a, b)
        return cls(a=a, b=b, delta=delta, delta_pct=pct)


class StepDelta(_Part):
    """The ``index``-th step of a stage: wall ms in A and B and the change (as :class:`Delta`)."""

    index: int
    a: float | None
    b: float | None
    delta: float | None = None
    delta_pct: float | None = None

    @classmethod
    def at(cls, index: int, a: float | None, b: float | None) -> StepDelta:
        """Step ``index``: ``a`` -> ``b``."""
        delta, pct = _change(a, b)
        return cls(index=index, a=a, b=b, delta=delta, delta_pct=pct)


class StageComparison(_Part):
    """One stage both analyses have: the noise-aware verdict on its step times, and the
    deltas of its step statistics, phases (mean ms per step), steps and GPU parts."""

    verdict: dict[str, Any]
    step_stats: dict[str, Delta]
    phases_ms: dict[str, Delta]
    steps: list[StepDelta]
    gpu_ms: dict[str, Delta] | None = None


class OpDelta(_Part):
    """One op (CPU ``table`` ``cpu`` or device ``cuda``): ms per step in A and B (total ms
    when a trace has no steps), the change, and the side it exists on only, if any."""

    name: str
    table: str
    a_ms: float
    b_ms: float
    delta_ms: float
    delta_pct: float | None
    only_in: str | None


class FindingIds(_Part):
    """The finding ids of A and of B."""

    a: list[str]
    b: list[str]


class TraceComparison(_Part):
    """Trace B against trace A.

    Args:
        a, b: the inputs as given.
        primary_stage: the stage whose verdict is the comparison's (train when both have it),
            ``None`` when they share no stage with steps.
        verdict: that stage's verdict (``verdict``, ``change_pct``, p-values, interval...), or
            ``not comparable`` with a ``note``.
        stages: per shared stage.
        ops: the largest op changes, largest first.
        ops_basis: what the op figures are.
        dataloader_time_pct: the data wait share in A and B.
        findings: the finding ids of each side.
    """

    a: str | None
    b: str | None
    primary_stage: str | None
    verdict: dict[str, Any]
    stages: dict[str, StageComparison]
    ops: list[OpDelta]
    ops_basis: str
    dataloader_time_pct: Delta
    findings: FindingIds

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready dict form (``trainperf compare --json``)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


#: Fewer steps than this per side: the verdict rests on the point estimate alone.
MIN_STEPS = 4


def _step_walls(report: TraceAnalysis, stage: str) -> np.ndarray:
    return np.asarray([s.wall_ns for s in report.steps if s.stage == stage], dtype=np.float64)


def _verdict(a: np.ndarray, b: np.ndarray, threshold_pct: float) -> dict[str, object]:
    med_a, med_b = float(np.median(a)), float(np.median(b))
    change = 100.0 * (med_b / med_a - 1.0) if med_a > 0 else math.nan
    out: dict[str, object] = {
        "steps_a": int(a.size),
        "steps_b": int(b.size),
        "median_a_ms": round(med_a / 1e6, 4),
        "median_b_ms": round(med_b / 1e6, 4),
        "change_pct": round(change, 3),
        "threshold_pct": threshold_pct,
    }
    if min(a.size, b.size) < MIN_STEPS:
        out.update(p_slower=None, p_faster=None, ci95_pct=None, confidence="low")
        out["note"] = (
            f"fewer than {MIN_STEPS} steps on a side: no noise check, verdict from the medians"
        )
        if change > threshold_pct:
            out["verdict"] = str(Outcome.REGRESSION)
        elif change < -threshold_pct:
            out["verdict"] = str(Outcome.IMPROVEMENT)
        else:
            out["verdict"] = str(Outcome.NO_CHANGE)
        return out
    p_slower = mann_whitney_greater(a, b)
    p_faster = mann_whitney_greater(b, a)
    lo, hi = (100.0 * (r - 1.0) for r in ratio_of_medians_interval(a, b))
    # p_slower / p_faster are one-sided p-values, not probabilities: p_slower near 1 means
    # "no evidence that B is slower", not "B is slower". p_value is the test of the direction
    # the medians moved in, which is the one a reader wants.
    out.update(
        direction="slower" if change > 0 else "faster" if change < 0 else "unchanged",
        p_value=round(p_faster if change < 0 else p_slower, 5),
        p_slower=round(p_slower, 5),
        p_faster=round(p_faster, 5),
        ci95_pct=[round(lo, 3), round(hi, 3)],
        confidence="normal",
    )
    if change > threshold_pct and p_slower < ALPHA and lo > 0:
        out["verdict"] = str(Outcome.REGRESSION)
    elif change < -threshold_pct and p_faster < ALPHA and hi < 0:
        out["verdict"] = str(Outcome.IMPROVEMENT)
    elif abs(change) > threshold_pct:
        out["verdict"] = str(Outcome.INCONCLUSIVE)
        out["note"] = "the change exceeds the threshold but is within step-to-step noise"
    else:
        out["verdict"] = str(Outcome.NO_CHANGE)
    return out


def _op_rows(report: TraceAnalysis) -> dict[str, tuple[str, float]]:
    """name -> (table, time per step or in total, ms) for every CPU op and device op."""
    rows: dict[str, tuple[str, float]] = {}
    for table, ops in (("cpu", report.top_cpu_ops), ("cuda", report.top_cuda_ops)):
        for r in ops:
            v = r.self_ms_per_step if r.self_ms_per_step is not None else r.self_ms
            rows[f"{table}:{r.name}"] = (table, float(v))
    return rows


_STEP_FIGURES = ("mean_ms", "median_ms", "p90_ms", "min_ms", "max_ms", "std_ms")


def _means(parts: dict[str, PhaseShare], names: tuple[str, ...]) -> dict[str, float]:
    """Mean ms of each of ``names`` that ``parts`` has (an older analysis may lack one)."""
    return {p: parts[p].mean_ms for p in names if p in parts}


def compare_reports(
    a: TraceAnalysis, b: TraceAnalysis, threshold_pct: float = 5.0, top_k: int = 20
) -> TraceComparison:
    """Compare two analyses from :func:`~trainperf.analysis.trace.analyze.analyze_path` (best made
    with ``top_k=None`` so every op can be matched). ``verdict`` is that of the primary stage (train
    when both have it)."""
    stages = [s for s in a.summary.stages if s in b.summary.stages]
    per_stage: dict[str, StageComparison] = {}
    for stage in stages:
        wa, wb = _step_walls(a, stage), _step_walls(b, stage)
        sa, sb = a.step_stats[stage], b.step_stats[stage]
        pa, pb = a.phase_summary[stage], b.phase_summary[stage]
        ma, mb = _means(pa.phases, PHASES), _means(pb.phases, PHASES)
        entry = StageComparison(
            verdict=_verdict(wa, wb, threshold_pct),
            step_stats={k: Delta.of(getattr(sa, k), getattr(sb, k)) for k in _STEP_FIGURES},
            # only phases both have (an analysis saved before a phase existed lacks it)
            phases_ms={p: Delta.of(ma[p], mb[p]) for p in PHASES if p in ma and p in mb},
            steps=[
                StepDelta.at(i, round(x / 1e6, 4), round(y / 1e6, 4))
                for i, (x, y) in enumerate(zip(wa.tolist(), wb.tolist(), strict=False))
            ],
        )
        if pa.gpu is not None and pb.gpu is not None:
            ga, gb = _means(pa.gpu, GPU_PARTS), _means(pb.gpu, GPU_PARTS)
            entry.gpu_ms = {p: Delta.of(ga[p], gb[p]) for p in GPU_PARTS if p in ga and p in gb}
        per_stage[stage] = entry

    ops_a, ops_b = _op_rows(a), _op_rows(b)
    op_deltas: list[OpDelta] = []
    for key in set(ops_a) | set(ops_b):
        va = ops_a.get(key, (None, 0.0))[1]
        vb = ops_b.get(key, (None, 0.0))[1]
        op_deltas.append(
            OpDelta(
                name=key.split(":", 1)[1],
                table=(ops_a.get(key) or ops_b[key])[0],
                a_ms=round(va, 4),
                b_ms=round(vb, 4),
                delta_ms=round(vb - va, 4),
                delta_pct=round(100.0 * (vb / va - 1.0), 2) if va else None,
                only_in="a" if key not in ops_b else ("b" if key not in ops_a else None),
            )
        )
    op_deltas.sort(key=lambda r: (-abs(r.delta_ms), -r.a_ms, r.name))
    if not stages:
        verdict: dict[str, Any] = {
            "verdict": "not comparable",
            "note": "the traces share no stage with steps (ProfilerStep spans)",
        }
        primary = None
    else:
        primary = "train" if "train" in stages else stages[0]
        verdict = per_stage[primary].verdict
    return TraceComparison(
        a=a.input,
        b=b.input,
        primary_stage=primary,
        verdict=verdict,
        stages=per_stage,
        ops=op_deltas[:top_k],
        ops_basis="self ms per step (total self ms when a trace has no steps)",
        dataloader_time_pct=Delta.of(a.dataloader_time_pct, b.dataloader_time_pct),
        findings=FindingIds(a=[f.id for f in a.findings], b=[f.id for f in b.findings]),
    )
