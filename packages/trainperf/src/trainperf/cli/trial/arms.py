"""A change under measurement in a ``trainperf try`` session, and the record it ends as.

An :class:`Arm` holds its pairs of trials so far; it ends as a
:class:`~trainperf.records.try_record.TryRecord`: its speed-up decided, a quality drop on the
checkpoint, why it was left out or stopped.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from msgspec.structs import replace

from trainperf.analysis.trial_plan import BudgetPlan
from trainperf.analysis.trials import (
    MIN_PAIRS,
    QUALITY_DROP_SUFFIX,
    QUALITY_TOLERANCE,
    measure,
    status,
)
from trainperf.cli.trial.trial_process import TrialResult
from trainperf.core.candidates import Candidate
from trainperf.core.knobs import apply_lines, is_knob, knobs_of
from trainperf.core.significance import PairedRatios
from trainperf.records.command import override_key
from trainperf.records.run_record import EvalCommand
from trainperf.records.try_record import TryRecord


@dataclass
class Arm:
    """A change under measurement: its pairs so far."""

    candidate: Candidate
    changes: tuple[str, ...]
    kind: str  # "train" or "eval"
    keep: frozenset[str] = frozenset()
    base: list[TrialResult] = field(default_factory=list)
    changed: list[TrialResult] = field(default_factory=list)
    failed: str | None = None
    refused: bool = False  # the run cannot take a knob of the change (failed says why)
    target: int = 0  # pairs planned in all
    stopped: str | None = None  # why it stopped early (decided, or it cannot be recommended)
    decided: str = ""  # what stopped it early, in a word: its outcome, or "cannot be recommended"

    @property
    def pairs(self) -> int:
        return len(self.changed)

    @property
    def open(self) -> bool:
        """Still takes pairs: neither failed nor stopped."""
        return self.failed is None and self.stopped is None

    @property
    def label(self) -> str:
        return " ".join(self.changes)

    def ratios(self, most: int) -> PairedRatios:
        """The speed-up so far, its interval at the looks' confidence for ``most`` pairs."""
        return measure(
            [
                b.speed / a.speed
                for a, b in zip(self.base, self.changed, strict=True)
                if a.speed is not None and b.speed is not None
            ],
            most,
        )


def keep_for(changes: Sequence[str]) -> frozenset[str]:
    """What the window must leave on because a change concerns it."""
    keep: set[str] = set()
    for change in changes:
        if is_knob(change):
            continue  # knobs change no validation, checkpoint or logger
        key = override_key(change).lower()
        if "val" in key.split(".")[-1] or "sanity" in key:
            keep.add("val")
        if "checkpoint" in key:
            keep.add("checkpoint")
        if "log" in key:
            keep.add("loggers")
    return frozenset(keep)


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values measured (``None``: not measured), ``None`` when none was."""
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def base_record(
    session: str,
    c: Candidate,
    status: str,
    note: str,
    override: str | None,
    kind: str,
    apply: str,
) -> TryRecord:
    """``c``'s record in ``session`` without figures (:func:`arm_record` adds them)."""
    return TryRecord(
        session=session,
        kind=kind,
        override=override,
        description=c.description,
        family=c.family,
        alters_computation=c.alters_computation,
        eval_time=c.eval_time,
        status=status,
        note=note,
        apply=apply,
    )


def arm_record(
    arm: Arm,
    session: str,
    evaluation: EvalCommand | None,
    most: int,
    plan: BudgetPlan | None,
    kind: str = "candidate",
) -> TryRecord:
    """What ``arm`` measured, decided (:func:`~trainperf.analysis.trials.status`, a quality
    drop on the checkpoint overriding it): ``evaluation`` for an eval-time change, ``most``
    the pairs asked for, ``plan`` the budget's latest (why a change got no pair)."""
    c = arm.candidate
    apply = "; ".join(apply_lines(knobs_of(arm.changes)))
    override = " ".join(arm.changes) or c.override
    if arm.refused:
        note = f"the run cannot take it: {arm.failed}"
        return base_record(session, c, "not applicable", note, override, kind, apply)
    if arm.pairs == 0:
        word = "failed" if arm.failed else "untried"
        note = arm.failed or "the budget ran out before its first pair"
        if not arm.failed and plan is not None and arm.label in plan.left_out:
            note += (
                f": the plan left it out, the budget could not hold the {MIN_PAIRS} pairs a "
                f"verdict needs after the changes before it (one run of the command takes "
                f"~{plan.trial_s:.1f} s)"
            )
        return base_record(session, c, word, note, override, kind, apply)
    s = arm.ratios(most)
    word = status(s)
    notes: list[str] = []
    base = median([r.quality for r in arm.base]) if evaluation else None
    changed = median([r.quality for r in arm.changed]) if evaluation else None
    if evaluation is not None and base is not None and changed is not None:
        drop = base - changed
        if drop > QUALITY_TOLERANCE:
            name = evaluation.quality_name
            word = name + QUALITY_DROP_SUFFIX
            notes.append(
                f"{name} {base:.4f} -> {changed:.4f} on the checkpoint "
                f"(drop {drop:.4f} > {QUALITY_TOLERANCE}): not recommended"
            )
    if arm.failed:
        notes.append(f"stopped after {arm.pairs} pairs: {arm.failed}")
    elif arm.stopped:
        notes.append(arm.stopped)
    elif arm.pairs < most:
        notes.append(f"{arm.pairs} of {most} pairs (budget)")
    if evaluation is not None:
        notes.append(f"speed of evaluation ({evaluation.label} on the checkpoint)")
    return replace(
        base_record(session, c, word, "; ".join(notes), override, kind, apply),
        pairs=s.pairs,
        ratios=s.ratios,
        median=s.estimate,
        low=s.low,
        high=s.high,
        base_samples_per_sec=median([r.speed for r in arm.base]),
        changed_samples_per_sec=median([r.speed for r in arm.changed]),
        quality_base=base,
        quality_changed=changed,
        quality_name=evaluation.quality_name if evaluation else None,
    )
