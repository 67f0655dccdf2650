"""One resource sample's CPU split and whether the moment was contended.

One resource sample's CPU split: the host busy, this run's part, the others' (in % of all the
host's cores), and whether the moment was contended. Read by the ``throughput_drop`` alert and
by the contention analysis (:mod:`trainperf.analysis.contention`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["OTHERS_PCT", "SYSTEM_BUSY_PCT", "CpuShares", "cpu_shares"]

#: Host CPU busy (% of all cores) from which a sample can be contended.
SYSTEM_BUSY_PCT = 80.0
#: CPU held by other processes (% of all cores) that makes a busy host's sample contended.
OTHERS_PCT = 40.0
#: The phases in which the run works (idle samples are not judged).


@dataclass(frozen=True)
class CpuShares:
    """One moment's CPU, in % of all the host's cores: the host busy, this run's part."""

    system_pct: float
    ours_pct: float

    @property
    def others_pct(self) -> float:
        """What other processes held."""
        return max(0.0, self.system_pct - self.ours_pct)

    @property
    def contended(self) -> bool:
        return self.system_pct >= SYSTEM_BUSY_PCT and self.others_pct >= OTHERS_PCT


def cpu_shares(metrics: Mapping[str, float], cpu_count: int, ranks: int = 1) -> CpuShares | None:
    """The shares of one sample's ``metrics`` on a host with ``cpu_count`` cores; ``ranks``:
    processes of this run on the host doing the same work (the sample's own counted that many
    times). ``None`` when the sample has no system CPU, no CPU of its own (then whose the busy
    cores are is unknown) or ``cpu_count`` is unknown."""
    system = metrics.get("resources/system_cpu_percent")
    own = metrics.get("resources/process_cpu_percent")
    if system is None or own is None or cpu_count < 1:
        return None
    own += metrics.get("resources/workers_cpu_percent", 0.0)
    return CpuShares(float(system), max(1, ranks) * float(own) / cpu_count)
