"""One truth: the trace's step breakdown set beside the live phase clock over the same steps.

The live phase clock (``trainperf.core.clock``) and the trace analyzer classify a framework's
action names with the same classifier (its grammar, :mod:`trainperf.core.actions`), so over the
same steps they must agree. :func:`compare_phases` sets the two per-phase ms/step side by side:
the live clock's are recorded at every ``ProfilerStep`` boundary by
:class:`trainperf.probe.clock_snapshots.ClockSnapshots` and averaged over the trace's steps by
:func:`trainperf.analysis.trace.clock_windows.compare_with_clock`. A disagreement beyond the
tolerance is a finding about the measurement itself (one of the two is wrong about
where the time went), not about the training.

Both sides use the clock's phase names; the few clock phases a trace cannot separate are pooled
into the trace phase that holds them (:func:`trainperf.core.actions.trace_phase`); a name the clock
does not know counts as ``unattributed``, a phase missing on either side as 0, so a clock with
more or fewer phases compares all the same.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from trainperf.analysis.trace.step_phases import PHASES
from trainperf.core.actions import trace_phase
from trainperf.core.finding_ids import TraceFindingId
from trainperf.core.findings import Finding

__all__ = [
    "AGREEMENT_TOLERANCE_PCT",
    "Agreement",
    "PhaseAgreement",
    "clock_to_trace_phases",
    "compare_phases",
]

#: Largest relative difference (% of the larger figure) at which a phase still agrees.
AGREEMENT_TOLERANCE_PCT = 10.0
#: Below this share of the step (%), a difference is within what neither side can resolve (the
#: Python between a hook's return and the next action): such a phase agrees whatever its ratio.
ABSOLUTE_FLOOR_PCT_OF_STEP = 1.0


def clock_to_trace_phases(clock_ms: Mapping[str, float]) -> dict[str, float]:
    """Clock phases pooled into the trace's :data:`~trainperf.analysis.trace.step_phases.PHASES`
    (see :func:`trainperf.core.actions.trace_phase`)."""
    out = dict.fromkeys(PHASES, 0.0)
    for phase, ms in clock_ms.items():
        out[trace_phase(phase)] += float(ms)
    return out


class PhaseAgreement(msgspec.Struct):
    """One phase: ms/step by the trace and by the clock, their difference and the verdict."""

    phase: str
    trace_ms: float
    clock_ms: float
    diff_ms: float
    diff_pct: float | None
    agree: bool


class Agreement(msgspec.Struct, kw_only=True):
    """Trace vs clock over the same steps (``msgspec.to_builtins`` gives its JSON form).

    Args:
        steps: steps compared.
        step_ms: mean step wall time by the trace.
        tolerance_pct: the relative tolerance used.
        phases: one row per trace phase.
        agree: every phase agrees.
        stage: the analyzer's stage name of the steps.
    """

    steps: int
    step_ms: float
    tolerance_pct: float
    phases: list[PhaseAgreement]
    agree: bool
    stage: str = "train"

    def finding(self) -> Finding | None:
        """A measurement finding when a phase disagrees."""
        bad = [p for p in self.phases if not p.agree]
        if not bad:
            return None
        worst = max(bad, key=lambda p: abs(p.diff_ms))
        parts = ", ".join(
            f"{p.phase} trace {p.trace_ms:.3f} vs clock {p.clock_ms:.3f} ms/step" for p in bad
        )
        return Finding(
            id=TraceFindingId.MEASUREMENT_DISAGREEMENT,
            severity="warning",
            score=0.0,
            source="trace",
            title=(
                f"Trace and phase clock disagree on {', '.join(p.phase for p in bad)} "
                f"over the same {self.steps} steps ({parts})"
            ),
            evidence={
                "steps": self.steps,
                "worst_phase": worst.phase,
                "trace_ms_per_step": {p.phase: round(p.trace_ms, 3) for p in self.phases},
                "clock_ms_per_step": {p.phase: round(p.clock_ms, 3) for p in self.phases},
            },
            threshold={
                "tolerance_pct": self.tolerance_pct,
                "floor_pct_of_step": ABSOLUTE_FLOOR_PCT_OF_STEP,
            },
            suggestion=(
                "One of the two measurements misplaces time: time outside any labelled span "
                "(code between the framework's hooks, threads the clock does not see) or a label "
                "one side lacks. Trust neither figure for this phase until they agree; the trace's "
                "per-op detail shows what runs there."
            ),
        )


def compare_phases(
    trace_ms: Mapping[str, float], clock_ms: Mapping[str, float], steps: int, stage: str = "train"
) -> Agreement:
    """Compare per-step ms by trace phase (``trace_ms``) with the clock's (clock phase names,
    pooled with :func:`clock_to_trace_phases`) over ``steps`` steps of ``stage``. A phase agrees
    when the difference is at most :data:`AGREEMENT_TOLERANCE_PCT` of the larger figure, or below
    :data:`ABSOLUTE_FLOOR_PCT_OF_STEP` of the step."""
    pooled = clock_to_trace_phases(clock_ms)
    step_ms = float(sum(trace_ms.get(p, 0.0) for p in PHASES))
    floor = step_ms * ABSOLUTE_FLOOR_PCT_OF_STEP / 100.0
    rows = []
    for phase in PHASES:
        t, c = float(trace_ms.get(phase, 0.0)), pooled[phase]
        diff = t - c
        big = max(abs(t), abs(c))
        pct = 100.0 * diff / big if big > 0 else None
        within = pct is not None and abs(pct) <= AGREEMENT_TOLERANCE_PCT
        ok = abs(diff) <= floor or within or big == 0
        rows.append(
            PhaseAgreement(
                phase=phase,
                trace_ms=round(t, 6),
                clock_ms=round(c, 6),
                diff_ms=round(diff, 6),
                diff_pct=None if pct is None else round(pct, 2),
                agree=bool(ok),
            )
        )
    return Agreement(
        steps=steps,
        step_ms=round(step_ms, 6),
        tolerance_pct=AGREEMENT_TOLERANCE_PCT,
        phases=rows,
        agree=all(r.agree for r in rows),
        stage=stage,
    )
