"""GPU time per phase from CUDA events, read without blocking.

The events are recorded at phase switches; :func:`device_clock` is the recorder's clock for its
device."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from trainperf.core.clock import PHASES, PhaseClock, PhaseTotals

# Drain CUDA events with a blocking read past this many pending switches (a GPU running far
# behind the host); bounds the event memory of very long epochs.
_MAX_PENDING_EVENTS = 4096


class CudaPhaseEvents:
    """A chain of CUDA events: the interval between two consecutive events belongs to the phase
    that was open on the host between the two records. :meth:`drain` folds finished intervals
    into :attr:`totals_ms` and recycles their events.

    Args:
        event_factory: makes one timing event; default ``torch.cuda.Event(enable_timing=True)``
            (tests pass fakes).
    """

    def __init__(self, event_factory: Callable[[], Any] | None = None) -> None:
        self._factory = event_factory or (lambda: torch.cuda.Event(enable_timing=True))
        self._chain: deque[tuple[Any, str]] = deque()
        self._pool: list[Any] = []
        self.totals_ms: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def _record(self, label: str) -> None:
        event = self._pool.pop() if self._pool else self._factory()
        event.record()
        self._chain.append((event, label))
        if len(self._chain) > _MAX_PENDING_EVENTS:
            self.drain(block=True)

    def anchor(self) -> None:
        """Start a new chain (a window opened); earlier pending events are dropped."""
        self._pool.extend(event for event, _ in self._chain)
        self._chain.clear()
        self._record("")

    def mark(self, closed_phase: str) -> None:
        """Record the end of an interval that belonged to ``closed_phase``."""
        if self._chain:
            self._record(closed_phase)

    def drain(self, block: bool = False) -> None:
        """Fold finished intervals into :attr:`totals_ms`; ``block`` waits for all of them."""
        chain = self._chain
        while len(chain) >= 2:
            end, label = chain[1]
            if block:
                end.synchronize()
            elif not end.query():
                return
            start = chain.popleft()[0]
            self.totals_ms[label] += float(start.elapsed_time(end))
            self._pool.append(start)

    def take(self) -> dict[str, float]:
        """Block until every pending interval is read; return seconds per phase and reset."""
        self.drain(block=True)
        out = {name: ms / 1e3 for name, ms in self.totals_ms.items()}
        self.totals_ms = dict.fromkeys(PHASES, 0.0)
        return out


class EventClock(PhaseClock):
    """PhaseClock that also records CUDA events at switches and, with ``sync`` set, synchronises
    before them.

    Args:
        events: the event chain the switches record into.
        device: the CUDA device :meth:`sync_each_switch` synchronizes (default: the current).
    """

    def __init__(self, events: CudaPhaseEvents, device: torch.device | None = None) -> None:
        super().__init__()
        self.events = events
        self.device = device
        self.sync: Callable[[], None] | None = None

    def sync_each_switch(self, on: bool) -> None:
        """Synchronize the device before every phase change (opt-in ``sync_cuda``: host phases
        then hold their GPU work too) or not."""
        device = self.device
        self.sync = (lambda: torch.cuda.synchronize(device)) if on else None

    def start(self, phase: str = "unattributed") -> None:
        if self.sync is not None:
            self.sync()
        super().start(phase)
        self.events.anchor()

    def switch(self, phase: str, owner: str = "") -> str:
        changes = phase != self.current  # events and syncs only where the phase changes
        if changes and self.running and self.sync is not None:
            self.sync()  # the closing phase's GPU work completes inside that phase
        previous = super().switch(phase, owner)
        if changes and previous:
            self.events.mark(previous)
        return previous

    def switch_since(self, phase: str, at_ns: int) -> None:
        closing = self.current
        super().switch_since(phase, at_ns)
        if closing and closing != phase:
            self.events.mark(closing)  # recorded now: the GPU interval ends at the host's now

    def stop(self) -> PhaseTotals:
        if self.sync is not None:
            self.sync()
        closing = self.current
        totals = super().stop()
        if closing:
            self.events.mark(closing)
        return totals


def device_clock(device: torch.device) -> tuple[PhaseClock, CudaPhaseEvents | None]:
    """The recorder's clock for a run on ``device``: on an available CUDA device an
    :class:`EventClock` with its event chain (GPU time per phase), else a plain
    :class:`~trainperf.core.clock.PhaseClock` and None."""
    if device.type == "cuda" and torch.cuda.is_available():
        events = CudaPhaseEvents()
        return EventClock(events, device), events
    return PhaseClock(), None
