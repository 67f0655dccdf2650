"""The typed result of comparing two trace analyses (:class:`TraceComparison`).

:func:`~trainperf.analysis.trace.compare.compare_reports` builds one; ``trainperf compare`` prints
it and
writes its dict form (:meth:`TraceComparison.as_dict`) with ``--json``. Times are ms.
"""

from __future__ import annotations

from typing import Any

import msgspec

from trainperf.analysis.trace.result import _Part

__all__ = ["Delta", "FindingIds", "OpDelta", "StageComparison", "StepDelta", "TraceComparison"]


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
