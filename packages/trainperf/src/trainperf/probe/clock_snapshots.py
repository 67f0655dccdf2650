"""The live phase clock read at each profiler step boundary, for setting beside the trace.

``ProfilerCallback`` calls :meth:`ClockSnapshots.begin` right after the profiler opened step ``n``
(``ProfilerStep#n``) and :meth:`ClockSnapshots.end` right before it closes it, so a step's clock
time covers the same instants as its trace span. The comparison with the trace's breakdown is
offline analysis (:func:`trainperf.analysis.trace.clock_windows.compare_with_clock`): this module
only reads the running clock (:func:`trainperf.core.clock.active_clock`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainperf.core.clock import active_clock

__all__ = ["ClockSnapshots"]


@dataclass
class ClockSnapshots:
    """The active phase clock's totals (ns per phase) at the start and end of each profiler step.

    Steps where no clock runs, or where the clock was replaced or restarted in between (a new
    stage epoch), have no figure.
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

    def per_step_ns(self) -> dict[int, dict[str, int]]:
        """Clock phase -> ns spent in it, for each step with both snapshots taken from one clock
        that was not restarted in between (a restart resets its totals)."""
        out: dict[int, dict[str, int]] = {}
        for n, (clock, before) in sorted(self.begins.items()):
            after = self.ends.get(n)
            if after is None or after[0] != clock:
                continue
            if any(after[1].get(p, 0) < v for p, v in before.items()):
                continue
            phases = set(before) | set(after[1])
            out[n] = {p: after[1].get(p, 0) - before.get(p, 0) for p in phases}
        return out
