"""Bounded-memory summary statistics of a stream of non-negative values (durations in seconds)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

#: ``a`` below: half of the 1 % promised, so rounding at bucket edges stays inside it.
RELATIVE_ACCURACY = 0.005
#: Values below this (1 ns) count as zero for the quantiles.
MIN_VALUE = 1e-9
#: Values above this (~32 years) go in the top bucket for the quantiles (then clipped to the
#: exact maximum).
MAX_VALUE = 1e9
_GAMMA = (1.0 + RELATIVE_ACCURACY) / (1.0 - RELATIVE_ACCURACY)
_INV_LOG_GAMMA = 1.0 / math.log(_GAMMA)


class StreamingStats:
    """Bounded-memory summary of a stream of non-negative values (seconds): exact count/mean/std
    (Welford)/min/max; quantiles from a log-bucketed histogram with <= 1 % relative error; memory
    independent of the number of samples.

    The histogram is a relative-error sketch (as in DDSketch): bucket ``i`` holds the values in
    ``(gamma**(i-1), gamma**i]`` with ``gamma = (1 + a) / (1 - a)``, and reports its values as
    ``2 gamma**i / (gamma + 1)``, which is within ``a`` of every one of them. Only the buckets seen
    are stored, and values are clamped into ``[MIN_VALUE, MAX_VALUE]`` first, so the number of
    buckets is bounded by that range however long the stream. Quantiles interpolate
    linearly between the two nearest order statistics, like ``numpy.quantile``'s default, so they
    are within ``a`` of numpy's answer on the same data. The extremes (q = 0, q = 1) are exact.

    ``std`` is the population standard deviation (``ddof=0``, like ``numpy.std``).
    """

    def __init__(self) -> None:
        self.count = 0
        self._mean = 0.0
        self._m2 = 0.0  # sum of squared deviations from the mean (Welford)
        self._min = math.inf
        self._max = -math.inf
        self._zeros = 0  # values below MIN_VALUE
        self._buckets: dict[int, int] = {}

    def add_many(self, values: Sequence[float] | np.ndarray) -> None:
        """Add a chunk of values (finite, >= 0); chunks of any size give the same summary."""
        arr = np.asarray(values, np.float64).ravel()
        if arr.size == 0:
            return
        bad = ~((arr >= 0.0) & (arr < math.inf))
        if bad.any():
            raise ValueError(
                "StreamingStats.add_many: expected finite values >= 0, got "
                f"{arr[bad][0]!r} at index {int(np.flatnonzero(bad)[0])}"
            )
        n_a, n_b = self.count, int(arr.size)
        n = n_a + n_b
        mean_b = float(arr.mean())
        delta = mean_b - self._mean
        # Chan et al.'s pairwise update: exact combination of two Welford states.
        self._mean += delta * n_b / n
        self._m2 += float(np.square(arr - mean_b).sum()) + delta * delta * n_a * n_b / n
        self.count = n
        self._min = min(self._min, float(arr.min()))
        self._max = max(self._max, float(arr.max()))
        small = arr < MIN_VALUE
        self._zeros += int(small.sum())
        big = np.minimum(arr[~small], MAX_VALUE)
        keys, counts = np.unique(
            np.ceil(np.log(big) * _INV_LOG_GAMMA).astype(np.int64), return_counts=True
        )
        for key, c in zip(keys.tolist(), counts.tolist(), strict=True):
            self._buckets[key] = self._buckets.get(key, 0) + c

    # mean, std, min and max are exact; nan when empty

    @property
    def mean(self) -> float:
        return self._mean if self.count else math.nan

    @property
    def std(self) -> float:
        return math.sqrt(max(self._m2, 0.0) / self.count) if self.count else math.nan

    @property
    def min(self) -> float:
        return self._min if self.count else math.nan

    @property
    def max(self) -> float:
        return self._max if self.count else math.nan

    def _order_statistics(self, ranks: list[int]) -> list[float]:
        """Estimates of the values at 0-based sorted positions ``ranks`` (ascending)."""
        out: list[float] = []
        keys = sorted(self._buckets)
        i = 0
        seen = self._zeros  # values at positions < seen are already passed
        value = 0.0  # estimate of the zero bucket
        for rank in ranks:
            if rank == 0:
                out.append(self._min)
                continue
            if rank == self.count - 1:
                out.append(self._max)
                continue
            while seen <= rank:
                key = keys[i]
                seen += self._buckets[key]
                value = 2.0 * _GAMMA**key / (_GAMMA + 1.0)
                i += 1
            # The estimate is within the relative error of every value in its bucket; clipping to
            # the exact extremes can only bring it closer.
            out.append(min(max(value, self._min), self._max))
        return out

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Values below which fractions ``qs`` (each in [0, 1]) of the values lie (one pass over the
        buckets); nan when empty. Linear interpolation between order statistics (numpy's default
        method), each estimated within :data:`RELATIVE_ACCURACY`."""
        qs = list(qs)
        if self.count == 0:
            return [math.nan] * len(qs)
        positions = [q * (self.count - 1) for q in qs]
        ranks = sorted({r for p in positions for r in (math.floor(p), math.ceil(p))})
        values = dict(zip(ranks, self._order_statistics(ranks), strict=True))
        out = []
        for p in positions:
            lo, hi = math.floor(p), math.ceil(p)
            out.append(values[lo] + (values[hi] - values[lo]) * (p - lo))
        return out

    def summary(self) -> dict[str, float]:
        """``count, mean, median, p95, p99, std, min, max``; all nan but ``count`` when empty."""
        median, p95, p99 = self.quantiles([0.5, 0.95, 0.99])
        return {
            "count": float(self.count),
            "mean": self.mean,
            "median": median,
            "p95": p95,
            "p99": p99,
            "std": self.std,
            "min": self.min,
            "max": self.max,
        }
