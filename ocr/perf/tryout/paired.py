"""Paired speed ratios and what they let us say.

A pair is two trials run back to back, the unchanged command (A) and the candidate (B), their
order alternating from pair to pair (A B, B A, A B, ...) so a steady drift of the machine cancels.
The ratio is ``speed(B) / speed(A)`` (above 1: the change is faster). The speed-up is the median
of the ratios; its interval is a percentile bootstrap of that median (resampling the pairs,
seeded, so a rerun on the same figures gives the same interval).

Outcomes (:func:`outcome`), with ``lo``, ``hi`` the interval:

* ``recommended``: ``lo > RECOMMEND_ABOVE`` (faster by more than 3 %, with 95 % confidence).
* ``no significant change``: the interval contains 1, or lies wholly inside the band
  ``[1 / RECOMMEND_ABOVE, RECOMMEND_ABOVE]`` (any change is smaller than what counts).
* ``slower``: ``hi < 1`` (and the interval is not inside the band).
* ``inconclusive``: anything else (faster, but maybe by less than 3 %), or fewer than
  :data:`MIN_PAIRS` pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CONFIDENCE",
    "MIN_PAIRS",
    "RECOMMEND_ABOVE",
    "SpeedUp",
    "outcome",
    "speed_up",
]

#: Smallest speed-up that counts: the interval's low end must be above it to recommend.
RECOMMEND_ABOVE = 1.03
#: Fewer pairs than this are inconclusive whatever they show.
MIN_PAIRS = 3
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class SpeedUp:
    """Median paired ratio and its bootstrap interval.

    Args:
        ratios: ``speed(B) / speed(A)`` per pair, in run order.
        median: their median.
        low, high: the :data:`CONFIDENCE` percentile-bootstrap interval of the median.
    """

    ratios: tuple[float, ...]
    median: float
    low: float
    high: float

    @property
    def pairs(self) -> int:
        return len(self.ratios)


def speed_up(ratios: Sequence[float], seed: int = BOOTSTRAP_SEED) -> SpeedUp:
    """The median of ``ratios`` with its bootstrap interval (``ValueError`` when empty)."""
    values = np.asarray([float(r) for r in ratios], dtype=float)
    if values.size == 0:
        raise ValueError("speed_up: no ratios")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.size, size=(BOOTSTRAP_RESAMPLES, values.size))
    medians = np.median(values[picks], axis=1)
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return SpeedUp(tuple(values.tolist()), float(np.median(values)), float(low), float(high))


def outcome(s: SpeedUp) -> str:
    """The words for ``s`` (module docstring)."""
    if s.pairs < MIN_PAIRS:
        return "inconclusive"
    if s.low > RECOMMEND_ABOVE:
        return "recommended"
    if s.low <= 1.0 <= s.high or (s.low >= 1 / RECOMMEND_ABOVE and s.high <= RECOMMEND_ABOVE):
        return "no significant change"
    if s.high < 1.0:
        return "slower"
    return "inconclusive"
