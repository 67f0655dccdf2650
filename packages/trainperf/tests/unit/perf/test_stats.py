"""StreamingStats against numpy: exact moments, quantiles within 1 %, bounded memory, chunks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from trainperf.core.stats import StreamingStats

QS = (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def _data(kind: str) -> np.ndarray:
    rng = np.random.default_rng(1234)
    if kind == "lognormal":
        return rng.lognormal(mean=-3.0, sigma=1.0, size=20_000)
    if kind == "uniform":
        return rng.uniform(0.0, 2.0, size=20_000)
    if kind == "constant":
        return np.full(5_000, 0.437)
    if kind == "single":
        return np.array([0.3125])
    if kind == "few":
        return rng.exponential(0.2, size=7)
    raise AssertionError(kind)


KINDS = ("lognormal", "uniform", "constant", "single", "few")


@pytest.mark.parametrize("kind", KINDS)
def test_matches_numpy(kind: str) -> None:
    data = _data(kind)
    stats = StreamingStats()
    stats.add_many(data)
    assert stats.count == data.size
    # Exact moments: 1e-9 relative (absolute near zero: numpy's own std of a constant is not 0).
    assert stats.mean == pytest.approx(float(np.mean(data)), rel=1e-9)
    assert stats.std == pytest.approx(float(np.std(data)), rel=1e-9, abs=1e-12)
    assert stats.min == float(data.min())
    assert stats.max == float(data.max())
    expected = np.quantile(data, QS)
    got = stats.quantiles(QS)
    for q, e, g in zip(QS, expected, got, strict=True):
        assert g == pytest.approx(float(e), rel=0.01), f"q={q}"
    for q in (0.5, 0.95, 0.99):
        assert stats.quantiles([q])[0] == pytest.approx(float(np.quantile(data, q)), rel=0.01)

    summary = stats.summary()
    assert list(summary) == ["count", "mean", "median", "p95", "p99", "std", "min", "max"]
    assert all(isinstance(v, float) for v in summary.values())
    assert summary["count"] == data.size
    assert summary["median"] == pytest.approx(float(np.median(data)), rel=0.01)
    assert summary["p95"] == pytest.approx(float(np.quantile(data, 0.95)), rel=0.01)
    assert summary["p99"] == pytest.approx(float(np.quantile(data, 0.99)), rel=0.01)
    assert summary["std"] == stats.std


@pytest.mark.parametrize("kind", KINDS)
def test_add_many_equals_adding_one_by_one(kind: str) -> None:
    data = _data(kind)
    one, many = StreamingStats(), StreamingStats()
    for v in data:
        one.add_many([float(v)])
    many.add_many(data)
    assert many.count == one.count
    assert many.mean == pytest.approx(one.mean, rel=1e-12)
    assert many.std == pytest.approx(one.std, rel=1e-9, abs=1e-12)
    assert (many.min, many.max) == (one.min, one.max)
    assert many.quantiles(QS) == pytest.approx(one.quantiles(QS), rel=1e-12)


def test_values_below_min_value_and_zeros() -> None:
    data = np.array([0.0, 0.0, 1e-12, 0.5, 0.5, 2.0])
    stats = StreamingStats()
    stats.add_many(data)
    assert stats.min == 0.0
    assert stats.quantiles([0.2])[0] == pytest.approx(float(np.quantile(data, 0.2)), abs=1e-9)
    assert stats.quantiles([0.5])[0] == pytest.approx(
        float(np.quantile(data, 0.5)), rel=0.01, abs=1e-9
    )
    assert stats.mean == pytest.approx(float(data.mean()), rel=1e-12)


def _buckets(stats: StreamingStats) -> int:
    """Histogram buckets in use (the only storage that depends on the data)."""
    return len(stats._buckets) + (1 if stats._zeros else 0)


def test_memory_is_bounded_by_the_range_not_the_count() -> None:
    rng = np.random.default_rng(0)
    stats = StreamingStats()
    # Values in [0.01, 1] s can fall in at most log(100)/log(gamma) + 1 buckets.
    bound = math.ceil(math.log(100) / math.log((1.005) / (0.995))) + 1
    values = rng.uniform(0.01, 1.0, size=1_000_000).tolist()
    for v in values[:20_000]:
        stats.add_many([v])
    after_small = _buckets(stats)
    stats.add_many(values[20_000:])
    assert stats.count == 1_000_000
    assert after_small <= _buckets(stats) <= bound

    wild = StreamingStats()
    wild.add_many(10.0 ** rng.uniform(-15, 15, size=1_000_000))  # far beyond MIN_VALUE / MAX_VALUE
    wild.add_many(np.array([0.0, 1e18]))
    # [1e-9, 1e9] s: at most log(1e18)/log(gamma) + 1 buckets, plus the one below MIN_VALUE
    assert _buckets(wild) <= math.ceil(math.log(1e18) / math.log((1.005) / (0.995))) + 2 < 10_000
    assert wild.max == 1e18
    assert wild.quantiles([1.0])[0] == 1e18


def test_chunks_equal_adding_everything() -> None:
    data = _data("lognormal")
    parts = np.array_split(data, [3, 5000, 12000])
    chunked = StreamingStats()
    for part in parts:
        chunked.add_many(part)
    chunked.add_many([])  # an empty chunk changes nothing
    whole = StreamingStats()
    for v in data:
        whole.add_many([float(v)])
    assert chunked.count == whole.count
    assert chunked.mean == pytest.approx(whole.mean, rel=1e-12)
    assert chunked.std == pytest.approx(whole.std, rel=1e-9)
    assert (chunked.min, chunked.max) == (whole.min, whole.max)
    assert chunked.quantiles(QS) == whole.quantiles(QS)  # same buckets, same answers


def test_empty_summary_is_nan_with_count_zero() -> None:
    stats = StreamingStats()
    summary = stats.summary()
    assert summary["count"] == 0.0
    assert all(math.isnan(v) for k, v in summary.items() if k != "count")
    assert math.isnan(stats.quantiles([0.5])[0])
    assert _buckets(stats) == 0


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, -1e-300])
def test_invalid_values_are_rejected(bad: float) -> None:
    stats = StreamingStats()
    with pytest.raises(ValueError, match=r"finite values >= 0, got .* at index 1"):
        stats.add_many([0.5, bad])
    assert stats.count == 0  # nothing half-added
