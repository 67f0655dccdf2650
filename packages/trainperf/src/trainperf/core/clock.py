"""Exclusive phase accounting for one epoch: every nanosecond belongs to exactly one phase.

A :class:`PhaseClock` always has exactly one open phase while it runs. :meth:`PhaseClock.switch`
closes the open interval at ``now()`` and opens the next one at the same instant, so the
per-phase totals telescope to ``stop - start``: they sum to the wall time exactly, by
construction, whatever the callers do. Time nobody claimed stays in ``unattributed``.

One clock is made "active" process-wide (:func:`set_active_clock`) so code far from the
callbacks (the LightningModule's postprocess and metric) can claim its time with
:func:`perf_phase` without a reference to the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

PHASES: tuple[str, ...] = (
    "data_wait",
    "transfer",
    "forward",
    "backward",
    "optimizer",
    "sync_wait",
    "postprocess",
    "metric",
    "module_hooks",
    "callbacks",
    "checkpoint",
    "unattributed",
)
_PHASE_SET = frozenset(PHASES)


def _check_phase(phase: str) -> None:
    if phase not in _PHASE_SET:
        raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")


@dataclass(frozen=True)
class PhaseTotals:
    """Totals of one clock window (``start()`` to ``stop()`` or ``peek()``), in ns: every name
    of :data:`PHASES` is in ``phases_ns`` and they sum to ``wall_ns`` exactly; ``owners_ns``
    splits the intervals opened with an owner finer (not in addition)."""

    wall_ns: int
    phases_ns: dict[str, int]
    owners_ns: dict[tuple[str, str], int] = field(default_factory=dict)


class PhaseClock:
    """Exclusive phase accounting (module docstring); ``now`` returns monotonic integer ns.
    Each interval may carry an *owner* (who spent it: a callback's class name, a module's
    ``Class.hook``; ``""`` for none). Not thread-safe: one clock is driven from the training
    loop's thread."""

    def __init__(self, now: Callable[[], int] = time.perf_counter_ns) -> None:
        self._now = now
        self._totals: dict[str, int] = dict.fromkeys(PHASES, 0)
        self._owned: dict[tuple[str, str], int] = {}
        self._start_ns = 0
        self._since_ns = 0
        self.running = False
        self.current: str | None = None
        self.current_owner = ""

    def start(self, phase: str = "unattributed") -> None:
        """Reset the totals and open ``phase`` (restarts a running clock, dropping its totals)."""
        _check_phase(phase)
        self._totals = dict.fromkeys(PHASES, 0)
        self._owned = {}
        self._start_ns = self._since_ns = self._now()
        self.current = phase
        self.current_owner = ""
        self.running = True

    def switch(self, phase: str, owner: str = "") -> str:
        """Close the open interval and open ``phase`` (owned by ``owner``); return the phase that
        was open, or ``""`` and do nothing when the clock is not running."""
        # Hot path (dozens of calls per training step): the check is inlined.
        if phase not in _PHASE_SET:  # also when stopped: a typo must fail in tests, not in runs
            _check_phase(phase)
        if not self.running:
            return ""
        now = self._now()
        previous = self.current
        assert previous is not None  # invariant while running
        elapsed = now - self._since_ns
        self._totals[previous] += elapsed
        if self.current_owner:
            key = (previous, self.current_owner)
            self._owned[key] = self._owned.get(key, 0) + elapsed
        self._since_ns = now
        self.current = phase
        self.current_owner = owner
        return previous

    def switch_since(self, phase: str, at_ns: int) -> None:
        """Charge the open interval from ``at_ns`` on to ``phase`` (no owner), as if the switch
        had happened then: for a wait recognised only after it ended (the gradient all-reduce
        wait is known once backward returns). ``at_ns`` is clamped to the open interval."""
        _check_phase(phase)
        if not self.running:
            return
        at_ns = min(max(at_ns, self._since_ns), self._now())
        self._charge(self._totals, self._owned, at_ns)
        self._since_ns = at_ns
        self.current = phase
        self.current_owner = ""

    def _charge(
        self, totals: dict[str, int], owned: dict[tuple[str, str], int], until: int
    ) -> None:
        assert self.current is not None  # invariant while running
        totals[self.current] += until - self._since_ns
        if self.current_owner:
            key = (self.current, self.current_owner)
            owned[key] = owned.get(key, 0) + until - self._since_ns

    def peek(self) -> PhaseTotals:
        """Totals so far, with the open phase counted up to now; the clock keeps running."""
        if not self.running:
            raise RuntimeError("PhaseClock.peek() called on a clock that is not running")
        now = self._now()
        totals, owned = dict(self._totals), dict(self._owned)
        self._charge(totals, owned, now)
        return PhaseTotals(wall_ns=now - self._start_ns, phases_ns=totals, owners_ns=owned)

    def stop(self) -> PhaseTotals:
        """Close the open phase and return the window's totals; the clock is stopped after."""
        if not self.running:
            raise RuntimeError("PhaseClock.stop() called on a clock that is not running")
        totals = self.peek()
        self.running = False
        self.current = None
        self.current_owner = ""
        return totals


_active: PhaseClock | None = None


def set_active_clock(clock: PhaseClock | None) -> None:
    """Make ``clock`` the process-wide clock that :func:`perf_phase` charges (None: no clock)."""
    global _active
    _active = clock


def active_clock() -> PhaseClock | None:
    return _active


@contextmanager
def perf_phase(name: str) -> Iterator[None]:
    """Charge the block to phase ``name`` on the active clock, then reopen the previous phase.

    Nests: an inner block returns to the outer block's phase. Without an active, running clock it
    does nothing but check the name. The previous phase is reopened even if the block raises;
    not if the clock was stopped inside the block. The block keeps the owner of the interval it
    interrupts (a module hook's metric work stays named after the hook).
    """
    _check_phase(name)
    clock = _active
    if clock is None or not clock.running:
        yield
        return
    owner = clock.current_owner
    previous = clock.switch(name, owner)
    try:
        yield
    finally:
        if clock.running:
            clock.switch(previous, owner)
