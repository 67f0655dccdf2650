"""One ``trainperf try`` session: pairs of trials per candidate, within a time budget.

Each candidate's trials interleave with the unchanged command; then the recommended changes are
measured together. Its records go to ``<run>/perf/try.jsonl`` (one
:class:`~trainperf.records.try_record.TryRecord` per candidate, and one for the winners together);
sessions append, readers show the latest.

The session starts with one run of the unchanged command that is not counted (the warm-up: the
first run meets cold caches and would bias its pair). The budget is planned
(:mod:`trainperf.analysis.trial_plan`) once the first trial has run and the cost of one is known:
changes in order get the :data:`MIN_PAIRS` pairs a verdict needs while the budget holds them,
what is left goes one pair at a time up to ``--pairs``, and a change the budget cannot measure
is left out and named (the plan is said at the start, through ``on_plan``). Rounds go over the
planned changes (round 1: a pair for each, round 2: another pair for each, ...); after each
round a change at one of its :func:`~trainperf.analysis.trials.looks` (3, 5, 8, ... pairs) that
is decided (recommended, a regression, no significant change) or whose interval lies below
:data:`RECOMMEND_ABOVE` (it cannot be recommended) stops early, and the budget is planned again
from the measured pair costs: its pairs go to the changes still undecided, or the session ends
sooner.

Within a pair the order alternates (A B, then B A, ...; A the unchanged command) so a steady
drift of the machine cancels; a runtime knob's pairs start with B, since a knob the run cannot
take ends its trial at setup and the change is then "not applicable" with the trial's reason.
The speed-up is the geometric mean of the pairs' ratios ``speed(B) / speed(A)`` with its t
interval at the looks' confidence (:func:`trainperf.analysis.trials.measure`); :func:`status` is
the rule that decides a change. Before each pair the session checks that the longest pair of
that kind so far still fits in what is left of the budget (and, in the first pair of a kind,
that its second trial does), and stops cleanly when it does not, naming what it measured and
what it left out. A trial may not run past the budget's end (it is stopped there).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from trainperf.analysis.trial_plan import BudgetPlan, allocate, duration
from trainperf.analysis.trials import (
    MIN_PAIRS,
    QUALITY_TOLERANCE,
    RECOMMEND_ABOVE,
    TrialEvent,
    looks,
    status,
)
from trainperf.cli.trial.arms import Arm, arm_record, base_record, keep_for
from trainperf.cli.trial.trial_process import TrialResult, run_eval_trial, run_training_trial
from trainperf.core.candidates import Candidate
from trainperf.core.knobs import family_knob, has_knob, is_knob
from trainperf.records.command import RecordedCommand
from trainperf.records.files import RecordWriter
from trainperf.records.try_record import TryRecord

__all__ = [
    "MIN_PAIRS",
    "QUALITY_TOLERANCE",
    "RECOMMEND_ABOVE",
    "TrialEvent",
    "TryOptions",
    "TrySession",
    "write_records",
]

# A trial of known cost is stopped after this many times the longest one of its kind.
_TRIAL_TIMEOUT_FACTOR = 4.0
# How a failure of the unchanged command (A) starts its note.
_BASE_FAILED = "the unchanged command"
#: The progress label of the warm-up run (:meth:`TrySession._warm_up`).
WARM_UP = "unchanged (warm-up, not counted)"


@dataclass(frozen=True)
class TryOptions:
    """The session's wall-clock budget (seconds), pairs per candidate at most, per trial the
    training batches skipped (``warmup``) and then measured (``batches``), and whether the
    session warms up (``warm_up``, below)."""

    budget_s: float
    pairs: int
    warmup: int = 5
    batches: int = 20
    #: one unchanged run of each kind (training, evaluation) before the first pair, not counted:
    #: the session's first run meets cold caches (files, compiled code) and would bias its pair
    warm_up: bool = True


class TrySession:
    """Measure ``candidates`` on the run of ``command`` (see the module docstring).

    Args:
        command: the run's recorded command.
        candidates: the changes to measure.
        options: budget, pairs, window.
        work_dir: a new folder for the trials' output folders (made here, one per trial).
        checkpoint: the run's checkpoint for eval-time candidates, or ``None``.
        on_trial: called after every trial (progress output).
        clock: seconds, monotonic (tests pass a fake).
        on_plan: called with the budget's plan once the first trial has run, and again when a
            revised plan measures other changes (progress output).
        refused: candidate -> why the run's framework cannot take it
            (:func:`~trainperf.cli.trial.candidate_options.applicable`): recorded "not
            applicable" with that reason, never tried.
    """

    def __init__(
        self,
        command: RecordedCommand,
        candidates: Sequence[Candidate],
        options: TryOptions,
        work_dir: Path,
        checkpoint: Path | None = None,
        on_trial: Callable[[TrialEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_plan: Callable[[BudgetPlan], None] | None = None,
        refused: Mapping[Candidate, str] | None = None,
    ) -> None:
        self.command = command
        self.refused = dict(refused or {})
        self.candidates = list(candidates)
        self.options = options
        self.work_dir = work_dir
        self.checkpoint = checkpoint
        self.on_trial = on_trial
        self.clock = clock
        self.on_plan = on_plan
        self.session = datetime.now(UTC).isoformat(timespec="seconds")
        #: the budget's latest plan (``None`` before a trial has run)
        self.plan: BudgetPlan | None = None
        self._arms: list[Arm] = []
        self._started = 0.0
        self._deadline = 0.0
        self._pair_cost: dict[str, float] = {}
        self._trial_cost: dict[str, float] = {}
        self._done = 0
        self._planned = 0
        self._count = 0
        self.budget_note = ""

    # -- what can be measured --------------------------------------------------------------

    def _change(self, c: Candidate) -> str | None:
        """What the trial applies: the override on a Hydra app, else the knob."""
        if c.override is not None and (self.command.takes_overrides or c.knob is None):
            return c.override
        return c.knob.text if c.knob is not None else None

    def _not_applicable(self, c: Candidate) -> str | None:
        if c in self.refused:
            return self.refused[c]
        if c.override is None and c.knob is None:
            if has_knob(c.family):
                return (
                    "its runtime knob does not apply to the run as it is (it needs the "
                    "finding's first change, e.g. worker processes): make that change, record "
                    "the run again and measure this one"
                )
            return (
                "a plain-language change: no config key or runtime knob makes it; make it by "
                "hand and compare"
            )
        if c.override is not None and not self.command.takes_overrides and c.knob is None:
            value = c.override.partition("=")[2]  # the knob of the family makes it with this
            knob = family_knob(c.family, value) if value else None
            instead = (
                f"measure it with --candidate {knob.text}"
                if knob is not None
                else "no runtime knob makes this change; make it by hand"
            )
            return (
                f"the run's command is not a Hydra app, so the override {c.override} cannot be "
                f"applied; {instead}"
            )
        if c.eval_time:
            if self.command.evaluation is None:
                return (
                    "eval-time changes are checked on the run's checkpoint with the app's "
                    'evaluation command, and the run recorded none (perf/run.json\'s "eval"): '
                    "name it with --eval-command and --eval-quality"
                )
            if self.checkpoint is None:
                return f"eval-time: no checkpoint in {self.command.run_dir}/checkpoints to check"
        return None

    # -- running ---------------------------------------------------------------------------

    def _trial(
        self, arm: Arm, changes: tuple[str, ...], label: str, pair: int | None = None
    ) -> TrialResult:
        """Run one trial of ``arm`` with ``changes``; ``pair`` for progress (its next pair's
        number when ``None``, 0 for the warm-up)."""
        self._count += 1
        folder = self.work_dir / f"{self._count:03d}-{'B' if changes else 'A'}"
        remaining = max(self._deadline - self.clock(), 1.0)
        known = self._trial_cost.get(arm.kind)
        limit = remaining if known is None else min(remaining, known * _TRIAL_TIMEOUT_FACTOR)
        timeout = max(limit, 1.0)
        started = self.clock()
        if arm.kind == "eval":
            evaluation = self.command.evaluation
            assert self.checkpoint is not None
            assert evaluation is not None
            result = run_eval_trial(
                self.command,
                folder,
                changes,
                self.checkpoint,
                evaluation=evaluation,
                timeout=timeout,
            )
        else:
            result = run_training_trial(
                self.command,
                folder,
                changes,
                warmup=self.options.warmup,
                batches=self.options.batches,
                timeout=timeout,
                keep=arm.keep,
            )
        self._done += 1
        took = max(result.seconds, self.clock() - started)
        self._trial_cost[arm.kind] = max(self._trial_cost.get(arm.kind, 0.0), took)
        if self.on_trial is not None:
            refused = result.not_applicable
            why = result.error if refused is None else f"not applicable: {refused}"
            number = arm.pairs + 1 if pair is None else pair
            event = TrialEvent(
                label, number, result.seconds, result.speed, why, self._done, self._planned
            )
            self.on_trial(event)
        return result

    def _pair(self, arm: Arm, index: int) -> bool:
        """Run one pair of ``arm`` (order by ``index``); False when it did not fit or failed."""
        cost = self._pair_cost.get(arm.kind)
        if cost is not None and self.clock() + cost > self._deadline:
            return False
        started = self.clock()
        # the plan is an estimate from the longest pair so far: a shorter one leaves room for
        # a pair it did not count
        self._planned = max(self._planned, self._done + 2)
        first_b = any(is_knob(c) for c in arm.changes)
        order = ("A", "B") if (index + first_b) % 2 == 0 else ("B", "A")
        results: dict[str, TrialResult] = {}
        for n, side in enumerate(order):
            first_of_kind = arm.kind not in self._pair_cost
            if n and first_of_kind and self.clock() + self._trial_cost[arm.kind] > self._deadline:
                return False  # the pair's second trial would not end within the budget
            changes = arm.changes if side == "B" else ()
            result = self._trial(arm, changes, arm.label if side == "B" else "unchanged")
            if result.not_applicable is not None:
                arm.failed, arm.refused = result.not_applicable, True
                return False
            if result.error is not None or result.speed is None:
                who = "the change" if side == "B" else _BASE_FAILED
                arm.failed = f"{who}: {result.error}"
                return False
            results[side] = result
            if self.plan is None:  # the first trial that ran: the cost of one is known
                self._plan(in_flight=arm, rest=len(order) - n - 1)
        arm.base.append(results["A"])
        arm.changed.append(results["B"])
        self._pair_cost[arm.kind] = max(self._pair_cost.get(arm.kind, 0.0), self.clock() - started)
        return True

    def _measure(self, arms: list[Arm]) -> list[Arm]:
        """Rounds of pairs over ``arms`` until each has its planned pairs (``options.pairs``
        before a plan) or the budget ends; returns the arms short of their plan when the budget
        ended. When the unchanged command itself fails, every arm of its kind fails with that
        reason: it would fail again for each."""
        self._arms = arms
        for arm in arms:
            arm.target = self.options.pairs
        if self.plan is not None:
            self._plan()  # (the recommended changes together) against what is left
        while True:
            runnable = [a for a in arms if a.open and a.pairs < a.target]
            if not runnable:
                return []
            for arm in runnable:
                if not (arm.open and arm.pairs < arm.target):
                    continue  # failed with the unchanged command, or planned out, above
                if not self._pair(arm, arm.pairs):
                    if arm.failed is None:
                        return [a for a in arms if a.open and a.pairs < a.target]  # budget
                    if arm.failed.startswith(_BASE_FAILED):
                        for other in arms:
                            if other.open and other.kind == arm.kind:
                                other.failed = arm.failed
            self._stop_decided(arms)
            if self.plan is not None:
                self._plan()

    def _warm_up(self, arms: list[Arm]) -> None:
        """One run of the unchanged command for each kind of the arms, before the first pair and
        not counted (:data:`WARM_UP`): the session's first run is the slow one (cold page cache,
        first compile), and in a pair it would make the unchanged side (or, for a knob, the
        changed side) look slow. The budget is planned once it has run. When it fails, the arms
        of its kind fail with its reason (every pair would fail the same way)."""
        self._arms = arms
        for kind in dict.fromkeys(a.kind for a in arms):
            arm = next(a for a in arms if a.kind == kind)
            self._planned += 1
            result = self._trial(arm, (), WARM_UP, pair=0)
            if result.error is not None or result.speed is None:
                for other in arms:
                    if other.open and other.kind == kind:
                        other.failed = f"{_BASE_FAILED}: {result.error}"
        if self._trial_cost:
            self._plan()

    def _stop_decided(self, arms: list[Arm]) -> None:
        """Stop each arm, short of its plan, at one of its looks, that is decided (recommended,
        a regression, no significant change) or whose interval lies below
        :data:`RECOMMEND_ABOVE` (more pairs cannot make it recommended)."""
        most = self.options.pairs
        for arm in arms:
            if not (arm.open and arm.pairs < arm.target and arm.pairs in looks(most)):
                continue
            s = arm.ratios(most)
            word = status(s)
            if word == "inconclusive" and s.high >= RECOMMEND_ABOVE:
                continue
            arm.decided = word if word != "inconclusive" else "cannot be recommended"
            says = f"lies below {RECOMMEND_ABOVE}" if word == "inconclusive" else "decides it"
            arm.stopped = (
                f"stopped early after {arm.pairs} of {arm.target} planned pairs: its "
                f"{100 * s.confidence:.1f} % interval [{s.low:.3f}, {s.high:.3f}] {says}: "
                f"{arm.decided}"
            )

    def _pair_s(self, arm: Arm) -> float:
        """Expected seconds of one more pair of ``arm``: its kind's longest pair so far, else
        twice its kind's (else any kind's) longest trial."""
        if arm.kind in self._pair_cost:
            return self._pair_cost[arm.kind]
        trial = self._trial_cost.get(arm.kind) or max(self._trial_cost.values(), default=0.0)
        return 2.0 * trial

    def _plan(self, in_flight: Arm | None = None, rest: int = 0) -> None:
        """Plan the budget over the current arms (:func:`~trainperf.analysis.trial_plan.allocate`)
        and set their targets; ``in_flight`` has a pair under way with ``rest`` trials to go (it is
        counted as done and its rest as spent, when the rest fits). Says the plan when it is the
        first, or when it measures other changes than the last one said."""
        arms = self._arms
        left = max(self._deadline - self.clock(), 0.0)
        rest_s = rest * self._trial_cost.get(in_flight.kind, 0.0) if in_flight else 0.0
        counted = in_flight if in_flight is not None and rest_s <= left else None
        if counted is None:
            rest = 0  # (the pair under way cannot end in time: it stops before its rest)
        else:
            left -= rest_s
        done = [a.pairs + (a is counted) for a in arms]
        targets = allocate(
            done,
            [self._pair_s(a) for a in arms],
            [a.open for a in arms],
            left,
            self.options.pairs,
            MIN_PAIRS,
        )
        for arm, target in zip(arms, targets, strict=True):
            arm.target = target
        todo = sum(t - d for a, t, d in zip(arms, targets, done, strict=True) if a.open)
        self._planned = self._done + rest + 2 * todo
        floor = min(MIN_PAIRS, self.options.pairs)
        whole = (self.clock() - self._started) + rest_s * (counted is not None)
        whole += sum(
            max(0, floor - d) * self._pair_s(a) for a, d in zip(arms, done, strict=True) if a.open
        )
        plan = BudgetPlan(
            budget_s=self.options.budget_s,
            trial_s=max(self._trial_cost.values(), default=0.0),
            left_s=left,
            pairs=tuple((a.label, t) for a, t in zip(arms, targets, strict=True) if a.open and t),
            left_out=tuple(a.label for a, t in zip(arms, targets, strict=True) if a.open and not t),
            most=self.options.pairs,
            floor=MIN_PAIRS,
            stopped=tuple(a.label for a in arms if a.stopped),
            revised=self.plan is not None,
            whole_s=whole,
            capacity=sum(done) + int(left // max(self._pair_s(a) for a in arms)),
        )
        said = self.plan
        self.plan = plan
        changed = said is None or (
            [c for c, _ in said.pairs] != [c for c, _ in plan.pairs]
            or said.left_out != plan.left_out
        )
        if changed and self.on_plan is not None:
            self.on_plan(plan)

    def _budget_note(self, arms: list[Arm]) -> str:
        """What the budget covered: changes measured, pairs, time; what it left out or short."""
        if not arms:
            return ""
        measured = [a for a in arms if a.pairs]
        pairs = sum(a.pairs for a in arms)
        parts = [
            f"{len(measured)} of {len(arms)} change(s) measured, {pairs} pair"
            f"{'s' if pairs != 1 else ''} in {duration(self.clock() - self._started)} of the "
            f"{duration(self.options.budget_s)} budget"
        ]
        left_out = [a.label for a in arms if a.open and not a.pairs]
        short = [
            f"{a.label} ({a.pairs} of {self.options.pairs} pairs)"
            for a in arms
            if a.open and 0 < a.pairs < self.options.pairs
        ]
        stopped = [f"{a.label} after {a.pairs} pairs ({a.decided})" for a in arms if a.stopped]
        if left_out:
            parts.append("left out: " + ", ".join(left_out))
        if short:
            parts.append("left short: " + ", ".join(short))
        if stopped:
            parts.append("stopped early, decided: " + ", ".join(stopped))
        return "; ".join(parts)

    def _record(self, arm: Arm, kind: str = "candidate") -> TryRecord:
        """``arm``'s record (:func:`~trainperf.cli.trial.arms.arm_record`) in this session."""
        evaluation = self.command.evaluation if arm.kind == "eval" else None
        return arm_record(arm, self.session, evaluation, self.options.pairs, self.plan, kind)

    def run(self) -> list[TryRecord]:
        """Measure every candidate, then the recommended training changes together; the
        records in candidate order, the combination last."""
        self._started = self.clock()
        self._deadline = self._started + self.options.budget_s
        self.work_dir.mkdir(parents=True)
        slots: list[TryRecord | Arm] = []
        arms: list[Arm] = []
        for c in self.candidates:
            why = self._not_applicable(c)
            if why is not None:
                slots.append(  # a knob the framework refused keeps its text (c.change)
                    base_record(self.session, c, "not applicable", why, c.change, "candidate", "")
                )
                continue
            change = self._change(c)
            assert change is not None
            kind = "eval" if c.eval_time else "train"
            arms.append(Arm(c, (change,), kind, keep_for((change,))))
            slots.append(arms[-1])
        self._planned = 2 * len(arms) * self.options.pairs
        if self.options.warm_up:
            self._warm_up(arms)
        self._measure(arms)
        self.budget_note = self._budget_note(arms)
        measured = {id(a): self._record(a) for a in arms}
        result = [s if isinstance(s, TryRecord) else measured[id(s)] for s in slots]
        winners = [a for a in arms if measured[id(a)].recommended and a.kind == "train"]
        if len(winners) >= 2:
            result.append(self._together(winners))
        return result

    def _together(self, winners: list[Arm]) -> TryRecord:
        changes = tuple(c for a in winners for c in a.changes)
        together = Candidate(
            "combined",
            "the recommended changes together",
            " ".join(changes),
            any(a.candidate.alters_computation for a in winners),
            False,
        )
        arm = Arm(together, changes, "train", keep_for(changes))
        self._planned = self._done + 2 * self.options.pairs
        left = self._measure([arm])
        if left:
            self.budget_note = (self.budget_note + "; " if self.budget_note else "") + (
                "the budget ran out while verifying the recommended changes together"
            )
        return self._record(arm, kind="combined")


def write_records(run_dir: str | os.PathLike[str], records: list[TryRecord]) -> Path:
    """Append ``records`` to the run's ``perf/try.jsonl``; returns its path."""
    writer = RecordWriter(TryRecord.path(run_dir))
    try:
        for record in records:
            writer.write(record)
    finally:
        writer.close()
    return writer.path
