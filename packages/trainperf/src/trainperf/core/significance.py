"""Is a measured change real? The statistics every comparison of the toolkit uses, and its words.

Used by ``trainperf compare`` (step times of two traces, :mod:`trainperf.analysis.trace.compare`),
``trainperf check`` (a run against a baseline, :mod:`trainperf.analysis.gate`) and ``trainperf try``
(paired speed ratios, :mod:`trainperf.analysis.trials`): the :class:`Outcome` words, a one-sided
Mann-Whitney U test, one seeded percentile bootstrap of a ratio of medians (a rerun on the same
figures gives the same interval), Student's t interval of paired ratios (few pairs) and a robust
noise allowance. Only the words are shared, not one
threshold: each command decides what change counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

import numpy as np

#: Significance level of the one-sided tests.
ALPHA = 0.05
#: Coverage of the bootstrap intervals.
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0
#: :func:`noise_allowance` is this many robust standard deviations.
NOISE_SIGMAS = 3.0
#: The interquartile range of normal noise in standard deviations (2 Phi^-1(3/4)).
_IQR_PER_SIGMA = 1.349


class Outcome(StrEnum):
    """What a comparison found, in the same words in every command, its JSON and its report.

    * ``regression``: worse beyond what counts, and the noise test says it is real;
    * ``improvement``: better beyond what counts, and the noise test says it is real;
    * ``no significant change``: within what counts (or, for an interval, any change is
      smaller than what counts);
    * ``inconclusive``: beyond what counts, but the data cannot tell it from noise (a test
      that is not significant, too few values, an interval that straddles the bar).
    """

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no significant change"
    INCONCLUSIVE = "inconclusive"


#: How the terminal shows each outcome (rich style names).
OUTCOME_STYLE: dict[str, str] = {
    Outcome.REGRESSION: "bold red",
    Outcome.IMPROVEMENT: "bold green",
    Outcome.INCONCLUSIVE: "yellow",
    Outcome.NO_CHANGE: "green",
}


@lru_cache(maxsize=256)
def _u_distribution(m: int, n: int) -> tuple[int, ...]:
    """Counts of each U value (0..m*n) over all C(m+n, m) orderings without ties."""
    if m == 0 or n == 0:
        return (1,)
    a = _u_distribution(m - 1, n)  # largest value from the first sample: it beats all n
    b = _u_distribution(m, n - 1)
    out = [0] * (m * n + 1)
    for u, c in enumerate(a):
        out[u + n] += c
    for u, c in enumerate(b):
        out[u] += c
    return tuple(out)


def mann_whitney_greater(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """One-sided p-value that ``y`` tends to be larger than ``x`` (Mann-Whitney U): exact without
    ties for up to 20 values per side, else the normal approximation with tie and continuity
    corrections; ``nan`` when a side is empty."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    m, n = int(xa.size), int(ya.size)
    if m == 0 or n == 0:
        return math.nan
    diff = ya[None, :] - xa[:, None]
    u = float((diff > 0).sum() + 0.5 * (diff == 0).sum())  # pairs where y beats x
    allv = np.concatenate([xa, ya])
    ties = np.unique(allv).size < m + n
    if not ties and m <= 20 and n <= 20:
        dist = _u_distribution(n, m)  # U counted for y over x
        return sum(dist[int(u) :]) / sum(dist)
    _, counts = np.unique(allv, return_counts=True)
    nn = m + n
    tie_term = float((counts**3 - counts).sum()) / (nn * (nn - 1))
    sigma = math.sqrt(m * n / 12.0 * ((nn + 1) - tie_term))
    if sigma == 0:
        return 1.0
    z = (u - m * n / 2.0 - 0.5) / sigma
    return 0.5 * math.erfc(z / math.sqrt(2))


def _resampled_medians(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    picks = rng.integers(0, values.size, size=(BOOTSTRAP_RESAMPLES, values.size))
    return np.median(values[picks], axis=1)


def _tails(samples: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - CONFIDENCE) / 2
    low, high = np.nanquantile(samples, [tail, 1.0 - tail])
    return float(low), float(high)


def ratio_of_medians_interval(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray
) -> tuple[float, float]:
    """The :data:`CONFIDENCE` bootstrap interval of ``median(b) / median(a)`` (two independent
    samples, each resampled on its own)."""
    aa, ba = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if aa.size == 0 or ba.size == 0:
        raise ValueError("ratio_of_medians_interval: a side has no values")
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    ma, mb = _resampled_medians(aa, rng), _resampled_medians(ba, rng)
    return _tails(mb / np.where(ma > 0, ma, np.nan))


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: int) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"student_t_cdf: df must be >= 1, got {df}")
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=256)
def student_t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on
    :func:`student_t_cdf`, to 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"student_t_quantile: p must lie in (0, 1), got {p}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        low, high = high, 2.0 * high
    while high - low > 1e-10 * max(1.0, high):
        mid = 0.5 * (low + high)
        if student_t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


@dataclass(frozen=True)
class PairedRatios:
    """Paired ratios (one per pair in run order, e.g. ``speed(B) / speed(A)``): their
    ``estimate``, the geometric mean, and its two-sided ``confidence`` interval ``[low, high]``
    from Student's t on the logarithms of the ratios. The pairs are the independent units (a
    pair's two trials share the machine's state of the moment); the t interval is valid for
    few of them, where a percentile bootstrap of three values is just their range."""

    ratios: tuple[float, ...]
    estimate: float
    low: float
    high: float
    confidence: float = CONFIDENCE

    @property
    def pairs(self) -> int:
        return len(self.ratios)


def paired_ratios(ratios: Sequence[float], confidence: float = CONFIDENCE) -> PairedRatios:
    """The geometric mean of ``ratios`` with its t interval at ``confidence`` (see
    :class:`PairedRatios`; one ratio: the interval is that ratio). ``ValueError`` when empty or
    when a ratio is not a positive number."""
    values = np.asarray(ratios, dtype=np.float64)
    if values.size == 0:
        raise ValueError("paired_ratios: no ratios")
    if not (np.all(np.isfinite(values)) and np.all(values > 0)):
        raise ValueError(f"paired_ratios: ratios must be positive numbers, got {values.tolist()}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"paired_ratios: confidence must lie in (0, 1), got {confidence}")
    logs = np.log(values)
    centre = float(logs.mean())
    half = 0.0
    if values.size > 1:
        se = float(logs.std(ddof=1)) / math.sqrt(values.size)
        half = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, values.size - 1) * se
    return PairedRatios(
        tuple(values.tolist()),
        math.exp(centre),
        math.exp(centre - half),
        math.exp(centre + half),
        confidence,
    )


def ratio_outcome(low: float, high: float, bar: float, *, enough: bool = True) -> Outcome:
    """What an interval ``[low, high]`` of a ratio (above 1 = better) says against ``bar`` (> 1,
    the smallest ratio that counts, either way): ``improvement`` when it lies above the bar;
    ``regression`` when it lies below ``1 / bar``; ``no significant change`` when it lies inside
    ``[1 / bar, bar]`` (any change is smaller than what counts); else (an interval that
    straddles a bar), or without ``enough`` data, ``inconclusive``."""
    if not enough:
        return Outcome.INCONCLUSIVE
    if low > bar:
        return Outcome.IMPROVEMENT
    if high < 1.0 / bar:
        return Outcome.REGRESSION
    if low >= 1.0 / bar and high <= bar:
        return Outcome.NO_CHANGE
    return Outcome.INCONCLUSIVE


def noise_allowance(values: Sequence[float], *, relative: bool = True) -> float:
    """The change a series' own noise can explain: :data:`NOISE_SIGMAS` standard deviations of
    ``values``, estimated robustly as the interquartile range / 1.349; in percent of the median
    when ``relative`` (0 when it is not positive), else in the values' unit; 0 for fewer than two
    values. Unlike the max - min spread, outlying values (fewer than a quarter on a side) cannot
    widen it; unlike the median absolute deviation it stays steady on three or four values, where
    that one can fall to nearly 0.
    """
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size < 2:
        return 0.0
    median = float(np.median(arr))
    q25, q75 = np.quantile(arr, [0.25, 0.75])
    allowance = NOISE_SIGMAS * float(q75 - q25) / _IQR_PER_SIGMA
    if not relative:
        return allowance
    return 100.0 * allowance / median if median > 0 else 0.0
