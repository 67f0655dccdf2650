"""How a ``trainperf try`` budget is spent: which changes get how many pairs.

A pair of trials costs what two runs of the command cost (30 s a trial on an H200 at 640 px: a
minute a pair), so a 10-minute budget holds about ten pairs, not the 30 that six changes with five
pairs each would need. Fewer than ``floor`` pairs (the session's ``MIN_PAIRS``) tell nothing
whatever they show, so the plan gives changes, in their order (the ``--candidate`` ones first,
then the findings' by rank), ``floor`` pairs each while the budget holds them, then spreads what
is left one pair at a time up to the pairs asked for. A change that cannot get ``floor`` pairs is
left out, named, rather than measured too little to mean anything; only when not even the first
change can get ``floor`` pairs does it get what fits. The session plans once its first trial has
run (the cost of a trial is then known) and again after every round, from the measured cost of
the pairs and the time left: the pairs of a change stopped early (decided at a look) go to the
changes still measured, or the session ends sooner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BudgetPlan", "allocate", "duration"]


def duration(seconds: float) -> str:
    """``45 s``, ``2 min``, ``1 min 30 s``, ``1.5 h``: a budget or an elapsed time, as a person
    says it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    return f"{seconds / 3600:.1f} h"


def _minutes(seconds: float) -> str:
    """A ``--budget`` value of whole minutes at least ``seconds`` long: ``17m``."""
    return f"{max(1, -(-int(seconds) // 60))}m"


def allocate(
    done: Sequence[int],
    pair_s: Sequence[float],
    measurable: Sequence[bool],
    left_s: float,
    most: int,
    floor: int,
) -> list[int]:
    """Total pairs planned per change (module doc): ``done`` pairs each so far, ``pair_s`` the
    expected seconds of one more of its pairs, ``measurable`` False for a change that takes no
    more pairs (failed, stopped); ``left_s`` the seconds the budget has left, ``most`` the pairs
    asked per change, ``floor`` the fewest pairs that can say anything. A change planned at 0
    pairs is left out."""
    targets = list(done)
    spare = left_s
    floor = min(floor, most)
    anyone = any(d > 0 for d in done)  # a change decided early is an answer too
    for i, (d, cost, ok) in enumerate(zip(done, pair_s, measurable, strict=True)):
        if not ok:
            continue
        need = max(0, floor - d)
        if need * cost <= spare:
            targets[i] += need
            spare -= need * cost
            anyone = anyone or targets[i] > 0
        elif d > 0 or not anyone:  # measured already, or nothing would be: what fits
            fit = int(spare // cost) if cost > 0 else need
            targets[i] += fit
            spare -= fit * cost
            anyone = anyone or targets[i] > 0
    grew = True
    while grew:  # what is left, one pair at a time in order, up to ``most`` each
        grew = False
        for i, cost in enumerate(pair_s):
            if measurable[i] and 0 < targets[i] < most and cost <= spare:
                targets[i] += 1
                spare -= cost
                grew = True
    return targets


@dataclass(frozen=True)
class BudgetPlan:
    """What the budget will cover, said when the session plans (:func:`allocate`).

    ``budget_s``: the whole budget; ``trial_s``: what one run of the command took (the longest
    so far); ``left_s``: the budget left when planned; ``pairs``: ``(change, pairs planned)`` of
    the changes to be measured, in order; ``left_out``: the changes the budget cannot measure;
    ``stopped``: changes stopped early (decided, or they cannot be recommended); ``most``: the
    pairs asked per change; ``floor``: the fewest pairs that tell anything; ``revised``: a plan
    after the first; ``whole_s``: the budget that would give every change still measurable
    ``floor`` pairs; ``capacity``: the pairs the whole budget holds at the expected cost (done
    ones included).
    """

    budget_s: float
    trial_s: float
    left_s: float
    pairs: tuple[tuple[str, int], ...]
    left_out: tuple[str, ...]
    most: int
    floor: int
    stopped: tuple[str, ...] = ()
    revised: bool = False
    whole_s: float = 0.0
    capacity: int = 0

    def line(self) -> str:
        """One line for the terminal and the log, e.g. ``Plan: one run of the command takes
        ~29.0 s, so the 2 min budget holds about 2 pairs (~58 s each); measuring 2 pairs:
        trainer.benchmark=true 2 pairs (fewer than the 3 pairs a verdict needs); left out:
        model.channels_last=true (--budget 5m would give every change 3 pairs).``"""
        head = f"Plan (revised with {duration(self.left_s)} left)" if self.revised else "Plan"
        planned = sum(n for _, n in self.pairs)
        measured = ", ".join(
            f"{change} {n} pair{'s' if n != 1 else ''}" for change, n in self.pairs
        )
        text = (
            f"{head}: one run of the command takes ~{self.trial_s:.1f} s, so the "
            f"{duration(self.budget_s)} budget holds about {self.capacity} "
            f"pair{'s' if self.capacity != 1 else ''} (~{2 * self.trial_s:.0f} s each); measuring "
            f"{planned} pair{'s' if planned != 1 else ''}: {measured or 'nothing'}"
        )
        if any(n < self.floor for _, n in self.pairs):
            text += f" (fewer than the {self.floor} pairs a verdict needs)"
        if self.stopped:
            text += f"; stopped early, decided: {', '.join(self.stopped)}"
        if self.left_out:
            text += (
                f"; left out: {', '.join(self.left_out)} (--budget {_minutes(self.whole_s)} would "
                f"give every change {self.floor} pairs)"
            )
        return text + "."
