"""Figures across DDP ranks: the spread of one figure and the straggler.

Figures across DDP ranks (pure; the gather happens in the callbacks): the spread of one
figure, and the straggler with its cause.

Why not epoch time: ranks synchronise in every backward (the gradient all-reduce), so they finish
their epochs together (measured: 1.127 vs 1.130 s with one rank sleeping 20 ms per step). The
rank that waits shows the wait as ``sync_wait``; the straggler is the rank that *works* longest
(wall time minus its own ``sync_wait``), and its cause is the phase (or callback, or hook) in
which it spends the most beyond the other ranks' median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainperf.core.findings import threshold

#: A rank is named a straggler when it works at least this share of the epoch's (median) wall
#: time longer than the median of the other ranks (``straggler_work_pct`` of the thresholds
#: table) ...
STRAGGLER_MIN_SHARE = threshold("straggler_work_pct") / 100.0
#: ... and at least this many seconds per epoch (short epochs are noisy; ``straggler_work_s``).
STRAGGLER_MIN_S = threshold("straggler_work_s")
# Phases that are not work of the rank's own: the wait for others, and time nobody claimed.
_NOT_WORK = frozenset({"sync_wait", "unattributed"})
# Phases refined into the named callback or hook that spent the time.
_NAMED_PHASES = {
    "callbacks": "callbacks",
    "module_hooks": "module_hooks",
    "checkpoint": "callbacks",
}


@dataclass(frozen=True)
class Straggler:
    """The rank the others wait for, and why (seconds per epoch).

    Args:
        excess_s: its work time (wall minus ``sync_wait``) beyond the median of the other
            ranks'.
        share: ``excess_s`` over the median wall time of the epoch (0-1).
        cause: the phase in which it spends the most beyond the others (``forward``...),
            refined to ``callbacks: ClassName`` or ``module_hooks: Module.hook``.
        others_wait_s: the median ``sync_wait`` of the other ranks (their wait for it).
    """

    rank: int
    excess_s: float
    share: float
    cause: str
    cause_excess_s: float
    others_wait_s: float


def _median_others(values: Sequence[float], rank: int) -> float:
    others = [v for r, v in enumerate(values) if r != rank and math.isfinite(v)]
    return float(statistics.median(others)) if others else math.nan


def _excess(
    rows: Sequence[Mapping[str, float]], rank: int, skip: frozenset[str] = frozenset()
) -> dict[str, float]:
    """Per key of ``rows`` (one per rank; missing = 0): ``rank``'s value beyond the others'."""
    keys = {k for row in rows for k in row if k not in skip}
    return {
        k: rows[rank].get(k, 0.0) - _median_others([row.get(k, 0.0) for row in rows], rank)
        for k in keys
    }


def find_straggler(
    wall_s: Sequence[float],
    phases_s: Sequence[Mapping[str, float]],
    named_s: Sequence[Mapping[str, Mapping[str, float]]] = (),
) -> Straggler | None:
    """The straggling rank of one stage epoch (both :data:`STRAGGLER_MIN_SHARE` and
    :data:`STRAGGLER_MIN_S` met), or None.

    Args:
        phases_s: per rank, seconds per phase (``trainperf.core.clock.PHASES`` names; missing = 0).
        named_s: optional, per rank: phase group (``"callbacks"``, ``"module_hooks"``) -> name
            -> seconds, to name the callback or hook behind a callbacks / hooks cause.
    """
    n = len(wall_s)
    if n < 2 or len(phases_s) != n:
        return None
    work = [
        wall_s[r] - phases_s[r].get("sync_wait", 0.0) if math.isfinite(wall_s[r]) else math.nan
        for r in range(n)
    ]
    finite = [r for r in range(n) if math.isfinite(work[r])]
    if len(finite) < 2:
        return None
    rank = max(finite, key=lambda r: (work[r], -r))
    excess = work[rank] - _median_others(work, rank)
    wall = float(statistics.median(wall_s[r] for r in finite))
    if not (wall > 0 and excess >= STRAGGLER_MIN_S and excess >= STRAGGLER_MIN_SHARE * wall):
        return None
    deltas = _excess(phases_s, rank, _NOT_WORK)
    cause = max(sorted(deltas), key=lambda p: deltas[p])
    cause_excess = deltas[cause]
    group = _NAMED_PHASES.get(cause)
    if group is not None and len(named_s) == n:
        named = _excess([row.get(group, {}) for row in named_s], rank)
        if named:
            top = max(sorted(named), key=lambda k: named[k])
            if named[top] > 0.5 * cause_excess:
                cause = f"{group}: {top}"
                cause_excess = named[top]
    others_wait = _median_others([row.get("sync_wait", 0.0) for row in phases_s], rank)
    return Straggler(
        rank=rank,
        excess_s=excess,
        share=excess / wall,
        cause=cause,
        cause_excess_s=cause_excess,
        others_wait_s=others_wait,
    )


def rank_spread(values: Sequence[float]) -> dict[str, float]:
    """Summarise one figure gathered from every rank, indexed by rank.

    Returns ``{"min", "median", "max", "slowest_rank"}`` where ``slowest_rank`` is the index of the
    largest value (the lowest index on ties). NaN entries (a rank with nothing to report) are
    ignored; when every entry is NaN all four values are NaN. An empty sequence is an error.
    """
    if len(values) == 0:
        raise ValueError("rank_spread needs at least one value (one per rank), got none")
    finite = [(float(v), rank) for rank, v in enumerate(values) if not math.isnan(v)]
    if not finite:
        return {"min": math.nan, "median": math.nan, "max": math.nan, "slowest_rank": math.nan}
    top, slowest = max(finite, key=lambda pair: (pair[0], -pair[1]))
    return {
        "min": min(v for v, _ in finite),
        "median": float(statistics.median(v for v, _ in finite)),
        "max": top,
        "slowest_rank": float(slowest),
    }
