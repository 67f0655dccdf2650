from __future__ import annotations

import pytest
from trainperf.analysis.trials import MIN_PAIRS, status
from trainperf.core.significance import Outcome, paired_ratios


def test_interval_is_repeatable_and_brackets_the_estimate() -> None:
    ratios = [1.9, 2.1, 2.0, 1.95, 2.05]
    a, b = paired_ratios(ratios), paired_ratios(ratios)
    assert a == b
    assert a.estimate == pytest.approx(2.0, rel=0.01)
    assert a.low <= a.estimate <= a.high
    assert a.pairs == 5


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [
        ([1.9, 2.1, 2.0], "recommended"),
        ([0.98, 1.01, 1.02, 0.99], "no significant change"),
        # all above 1 but inside the +-3 % band: no change that counts
        ([1.005, 1.01, 1.008], "no significant change"),
        ([0.6, 0.62, 0.65], "regression"),  # the shared word (was "slower")
        # faster, but perhaps by less than 3 %
        ([1.02, 1.05, 1.08], "inconclusive"),
        ([2.0, 2.1], "inconclusive"),  # too few pairs, however clear
    ],
)
def test_outcome_words(ratios: list[float], expected: str) -> None:
    found = status(paired_ratios(ratios))
    assert found == expected
    assert found == "recommended" or found in set(Outcome)


def test_min_pairs_is_what_the_docstring_says() -> None:
    assert status(paired_ratios([2.0] * MIN_PAIRS)) == "recommended"
    assert status(paired_ratios([2.0] * (MIN_PAIRS - 1))) == "inconclusive"


def test_no_ratio_is_an_error() -> None:
    with pytest.raises(ValueError, match="no ratios"):
        paired_ratios([])
