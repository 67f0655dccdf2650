"""rank_spread: min / median / max and the slowest rank of one per-rank figure."""

from __future__ import annotations

import math

import pytest
from trainperf.core.ranks import rank_spread


def test_spread_and_slowest_rank() -> None:
    assert rank_spread([3.0, 9.5, 1.0, 4.0]) == {
        "min": 1.0,
        "median": 3.5,
        "max": 9.5,
        "slowest_rank": 1.0,
    }


def test_single_rank() -> None:
    assert rank_spread([2.5]) == {"min": 2.5, "median": 2.5, "max": 2.5, "slowest_rank": 0.0}


def test_ties_name_the_lowest_rank() -> None:
    assert rank_spread([1.0, 7.0, 2.0, 7.0])["slowest_rank"] == 1.0


def test_nan_ranks_are_ignored() -> None:
    spread = rank_spread([math.nan, 2.0, 6.0, math.nan, 4.0])
    assert spread == {"min": 2.0, "median": 4.0, "max": 6.0, "slowest_rank": 2.0}


def test_all_nan_gives_nan() -> None:
    spread = rank_spread([math.nan, math.nan])
    assert set(spread) == {"min", "median", "max", "slowest_rank"}
    assert all(math.isnan(v) for v in spread.values())


def test_empty_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        rank_spread([])


def test_accepts_any_sequence_and_returns_floats() -> None:
    spread = rank_spread((1, 2, 3))
    assert all(type(v) is float for v in spread.values())
    assert spread["slowest_rank"] == 2.0
