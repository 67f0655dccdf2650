"""One truth: the trace's step breakdown set beside the live phase clock over the same steps.

The live phase clock (``trainperf.core.clock``) and the trace analyzer classify Lightning's action
names
with the same function (``trainperf.core.actions.classify_action``), so over the same steps they
must
agree. :class:`ClockSnapshots` records the clock's running totals at every ``ProfilerStep``
boundary of a profiler window; :func:`compare_with_clock` turns them into per-phase ms/step for
exactly the steps the trace holds and compares them with the trace's breakdown. A disagreement
beyond the tolerance is a finding about the measurement itself (one of the two is wrong about
where the time went), not about the training.

Both sides use the clock's phase names; the few clock phases a trace cannot separate are pooled
into the trace phase that holds them (:func:`trainperf.core.actions.trace_phase`); a name the clock
does not know counts as ``unattributed``, a phase missing on either side as 0, so a clock with
more or fewer phases compares all the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from trainperf.analysis.trace.steps import PHASES
from trainperf.core.actions import trace_phase
from trainperf.core.clock import active_clock
from trainperf.core.findings import Finding

if TYPE_CHECKING:
    from trainperf.analysis.trace.result import TraceAnalysis

__all__ = [
    "AGREEMENT_TOLERANCE_PCT",
    "Agreement",
    "ClockSnapshots",
    "PhaseAgreement",
    "clock_to_trace_phases",
    "compare_phases",
    "compare_with_clock",
]

#: Largest relative difference (% of the larger figure) at which a phase still agrees.
AGREEMENT_TOLERANCE_PCT = 10.0
#: Below this share of the step (%), a difference is within what neither side can resolve (the
#: Python between a hook's return and the next action): such a phase agrees whatever its ratio.
ABSOLUTE_FLOOR_PCT_OF_STEP = 1.0


@dataclass
class ClockSnapshots:
    """The active phase clock's totals at the start and end of each profiler step.

    ``begin(n)`` right after the profiler opened step ``n`` (``ProfilerStep#n``), ``end(n)`` right
    before it closes it, so a step's clock time covers the same instants as its trace span. Steps
    where no clock runs, or where the clock was replaced in between (a new stage epoch), have no
    figure.
    """

    begins: dict[int, tuple[int, dict[str, int]]] = field(default_factory=dict)
    ends: dict[int, tuple[int, dict[str, int]]] = field(default_factory=dict)

    @staticmethod
    def _snap(into: dict[int, tuple[int, dict[str, int]]], step: int) -> None:
        clock = active_clock()
        if clock is not None and clock.running:
            into[step] = (id(clock), clock.peek().phases_ns)

    def begin(self, step: int) -> None:
        """Snapshot at the start of step ``step``."""
        self._snap(self.begins, step)

    def end(self, step: int) -> None:
        """Snapshot at the end of step ``step``."""
        self._snap(self.ends, step)

    def usable(self, steps: Iterable[int]) -> list[int]:
        """The steps of ``steps`` with both snapshots taken from one clock."""
        out = []
        for n in steps:
            a, b = self.begins.get(n), self.ends.get(n)
            # same clock object, not restarted in between (a restart resets its totals)
            if (
                a is not None
                and b is not None
                and a[0] == b[0]
                and all(b[1].get(p, 0) >= v for p, v in a[1].items())
            ):
                out.append(n)
        return out

    def per_step_ms(self, steps: Iterable[int]) -> tuple[int, dict[str, float]]:
        """``(steps used, clock phase -> mean ms per step)`` over the :meth:`usable` ones of
        ``steps``."""
        totals: dict[str, int] = {}
        used = 0
        for n in self.usable(steps):
            a, b = self.begins[n], self.ends[n]
            used += 1
            for phase in set(a[1]) | set(b[1]):
                totals[phase] = totals.get(phase, 0) + b[1].get(phase, 0) - a[1].get(phase, 0)
        if not used:
            return 0, {}
        return used, {p: ns / used / 1e6 for p, ns in totals.items()}


def clock_to_trace_phases(clock_ms: Mapping[str, float]) -> dict[str, float]:
    """Clock phases pooled into the trace's :data:`~trainperf.analysis.trace.steps.PHASES` (see
    :func:`trainperf.core.actions.trace_phase`)."""
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
            id="measurement_disagreement",
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
                "(code between Lightning hooks, threads the clock does not see) or a label one "
                "side lacks. Trust neither figure for this phase until they agree; the trace's "
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


def compare_with_clock(
    analysis: TraceAnalysis, snapshots: ClockSnapshots, stage: str
) -> Agreement | None:
    """The analysis' steps of ``stage`` (analyzer stage name) against the clock snapshots
    taken at the same step boundaries; ``None`` when no step has a clock figure."""
    rows = [r for r in analysis.steps if r.stage == stage]
    numbers = [r.number for r in rows]
    used, clock_ms = snapshots.per_step_ms(numbers)
    if not used:
        return None
    good = set(snapshots.usable(numbers))
    kept = [r for r in rows if r.number in good]
    trace_ms = {p: sum(r.phases_ms.get(p, 0.0) for r in kept) / len(kept) for p in PHASES}
    return compare_phases(trace_ms, clock_ms, used, stage)
