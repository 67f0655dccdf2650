"""Spread of one per-rank figure across DDP ranks (pure; the gather happens in the callbacks)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["rank_spread"]


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
