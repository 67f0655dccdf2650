"""Bounded-memory summary statistics of a stream of non-negative values (durations in seconds)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


class StreamingStats:
    """Bounded-memory summary of a stream of non-negative values (seconds): exact count/mean/std
    (Welford)/min/max; quantiles from a log-bucketed histogram with <= 1 % relative error; memory
    independent of the number of samples.

    The histogram is a relative-error sketch (as in DDSketch): bucket ``i`` holds the values in
    ``(gamma**(i-1), gamma**i]`` with ``gamma = (1 + a) / (1 - a)``, and reports its values as
    ``2 gamma**i / (gamma + 1)``, which is within ``a`` of every one of them. Only the buckets seen
    are stored, and values are clamped into ``[min_value, max_value]`` first, so the number of
    buckets is bounded by that range however long the stream. Quantiles interpolate
    linearly between the two nearest order statistics, like ``numpy.quantile``'s default, so they
    are within ``a`` of numpy's answer on the same data. The extremes (q = 0, q = 1) are exact.

    ``std`` is the population standard deviation (``ddof=0``, like ``numpy.std``).

    Args:
        relative_accuracy: ``a``, in ``(0, 0.5)``; the default is half of the 1 % promised, so
            rounding at bucket edges stays inside it.
        min_value: values below this (1 ns by default) count as zero for the quantiles.
        max_value: values above this (~32 years by default) go in the top bucket for the
            quantiles (then clipped to the exact maximum).
    """

    def __init__(
        self,
        relative_accuracy: float = 0.005,
        min_value: float = 1e-9,
        max_value: float = 1e9,
    ) -> None:
        if not 0.0 < relative_accuracy < 0.5:
            raise ValueError(f"relative_accuracy must be in (0, 0.5), got {relative_accuracy!r}")
        if not 0.0 < min_value < max_value < math.inf:
            raise ValueError(
                f"need 0 < min_value < max_value < inf, got min_value={min_value!r}, "
                f"max_value={max_value!r}"
            )
        self.relative_accuracy = float(relative_accuracy)
        self.min_value = float(min_value)
        self.max_value = float(max_value)
        self._gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy)
        self._inv_log_gamma = 1.0 / math.log(self._gamma)
        self.count = 0
        self._mean = 0.0
        self._m2 = 0.0  # sum of squared deviations from the mean (Welford)
        self._min = math.inf
        self._max = -math.inf
        self._zeros = 0  # values below min_value
        self._buckets: dict[int, int] = {}

    # -- adding -----------------------------------------------------------------------------

    def _key(self, value: float) -> int:
        return math.ceil(math.log(min(value, self.max_value)) * self._inv_log_gamma)

    def add(self, value: float) -> None:
        """Add one value (finite, >= 0)."""
        v = float(value)
        if not 0.0 <= v < math.inf:  # also rejects NaN
            raise ValueError(f"StreamingStats.add: expected a finite value >= 0, got {value!r}")
        self.count += 1
        delta = v - self._mean
        self._mean += delta / self.count
        self._m2 += delta * (v - self._mean)
        if v < self._min:
            self._min = v
        if v > self._max:
            self._max = v
        if v < self.min_value:
            self._zeros += 1
        else:
            key = self._key(v)
            self._buckets[key] = self._buckets.get(key, 0) + 1

    def add_many(self, values: Iterable[float] | np.ndarray) -> None:
        """Add many values at once (vectorised; same result as calling :meth:`add` for each)."""
        arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), np.float64)
        arr = arr.ravel()
        if arr.size == 0:
            return
        bad = ~((arr >= 0.0) & (arr < math.inf))
        if bad.any():
            raise ValueError(
                "StreamingStats.add_many: expected finite values >= 0, got "
                f"{arr[bad][0]!r} at index {int(np.flatnonzero(bad)[0])}"
            )
        other = StreamingStats(self.relative_accuracy, self.min_value, self.max_value)
        other.count = int(arr.size)
        other._mean = float(arr.mean())
        other._m2 = float(np.square(arr - other._mean).sum())
        other._min = float(arr.min())
        other._max = float(arr.max())
        small = arr < self.min_value
        other._zeros = int(small.sum())
        big = np.minimum(arr[~small], self.max_value)
        keys, counts = np.unique(
            np.ceil(np.log(big) * self._inv_log_gamma).astype(np.int64), return_counts=True
        )
        other._buckets = dict(zip(keys.tolist(), counts.tolist(), strict=True))
        self.merge(other)

    def merge(self, other: StreamingStats) -> None:
        """Fold ``other`` in: afterwards ``self`` summarises both streams (``other`` unchanged)."""
        if not isinstance(other, StreamingStats):
            raise TypeError(f"can only merge a StreamingStats, got {type(other).__name__}")
        if (other.relative_accuracy, other.min_value, other.max_value) != (
            self.relative_accuracy,
            self.min_value,
            self.max_value,
        ):
            raise ValueError(
                "cannot merge StreamingStats with different settings: "
                f"{(self.relative_accuracy, self.min_value, self.max_value)} vs "
                f"{(other.relative_accuracy, other.min_value, other.max_value)}"
            )
        if other.count == 0:
            return
        n_a, n_b = self.count, other.count
        n = n_a + n_b
        delta = other._mean - self._mean
        # Chan et al.'s pairwise update: exact combination of two Welford states.
        self._mean += delta * n_b / n
        self._m2 += other._m2 + delta * delta * n_a * n_b / n
        self.count = n
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)
        self._zeros += other._zeros
        for key, c in other._buckets.items():
            self._buckets[key] = self._buckets.get(key, 0) + c

    # -- reading ----------------------------------------------------------------------------

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
                value = 2.0 * self._gamma**key / (self._gamma + 1.0)
                i += 1
            # The estimate is within the relative error of every value in its bucket; clipping to
            # the exact extremes can only bring it closer.
            out.append(min(max(value, self._min), self._max))
        return out

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Values below which fractions ``qs`` (each in [0, 1]) of the values lie (one pass over the
        buckets); nan when empty. Linear interpolation between order statistics (numpy's default
        method), each estimated within ``relative_accuracy``."""
        qs = list(qs)
        for q in qs:
            if not 0.0 <= q <= 1.0:
                raise ValueError(f"quantile q must be in [0, 1], got {q!r}")
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
