"""trainperf.core.significance: the U test, the one bootstrap, paired ratios (Student's t), the
noise allowance and the one set of outcome words (no other module spells them)."""

from __future__ import annotations

import ast
from math import comb
from pathlib import Path

import numpy as np
import pytest
from trainperf.core.significance import (
    Outcome,
    mann_whitney_greater,
    noise_allowance,
    paired_ratios,
    ratio_of_medians_interval,
    ratio_outcome,
    student_t_cdf,
    student_t_quantile,
)

OCR = Path(__file__).resolve().parents[3] / "ocr"


def test_mann_whitney_exact_small_samples() -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = np.array([5.0, 6.0, 7.0, 8.0])
    assert mann_whitney_greater(a, b) == pytest.approx(1 / comb(8, 4))
    assert mann_whitney_greater(b, a) == pytest.approx(1.0)
    # interleaved samples: no evidence either way
    assert 0.3 < mann_whitney_greater(np.array([1.0, 3, 5, 7]), np.array([2.0, 4, 6, 8])) < 0.6
    assert np.isnan(mann_whitney_greater([], [1.0]))


def test_mann_whitney_normal_approximation_with_ties() -> None:
    rng = np.random.default_rng(0)
    a = np.round(rng.normal(10, 1, 40))
    assert mann_whitney_greater(a, a + 3) < 1e-6
    assert mann_whitney_greater(a, a.copy()) > 0.3
    assert mann_whitney_greater([1.0, 1.0], [1.0, 1.0]) == 1.0  # all tied: no evidence


def test_bootstrap_intervals_are_seeded_and_bracket_the_estimate() -> None:
    a, b = np.arange(10.0, 20.0), 1.5 * np.arange(10.0, 20.0)
    low, high = ratio_of_medians_interval(a, b)
    assert low <= 1.5 <= high
    assert ratio_of_medians_interval(a, b) == (low, high)
    with pytest.raises(ValueError, match="no values"):
        ratio_of_medians_interval([], [1.0])


def test_paired_ratios() -> None:
    values = [1.9, 2.1, 2.0, 1.95, 2.05]
    s = paired_ratios(values)
    assert (s.estimate, s.pairs, s.confidence) == (pytest.approx(2.0, rel=0.01), 5, 0.95)
    assert s.low <= s.estimate <= s.high
    assert (s.low, s.high) == (paired_ratios(values).low, paired_ratios(values).high)
    # more confidence, a wider interval; one ratio: the interval is that ratio
    wider = paired_ratios(values, 0.99)
    assert wider.low < s.low
    assert wider.high > s.high
    one = paired_ratios([1.2])
    assert (one.low, one.estimate, one.high) == (pytest.approx(1.2),) * 3
    with pytest.raises(ValueError, match="no ratios"):
        paired_ratios([])
    with pytest.raises(ValueError, match="positive"):
        paired_ratios([1.0, 0.0])


def test_paired_ratios_on_three_pairs_is_a_t_interval_not_their_range() -> None:
    """The user's flip: 1.049, 1.177, 1.267 (three pairs of channels_last on a tiny model) gave
    "recommended [1.049, 1.267]" from a bootstrap, whose 95 % interval of three values is their
    range. The t interval on the logarithms: mean +- t(0.975, 2) s / sqrt(3)."""
    values = [1.049, 1.177, 1.267]
    logs = np.log(values)
    half = 4.302653 * logs.std(ddof=1) / np.sqrt(3)
    s = paired_ratios(values)
    assert s.estimate == pytest.approx(np.exp(logs.mean()))
    assert (s.low, s.high) == (
        pytest.approx(np.exp(logs.mean() - half), rel=1e-6),
        pytest.approx(np.exp(logs.mean() + half), rel=1e-6),
    )
    assert s.low < 1.0 < s.high


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    # Student's t quantiles from tables
    [
        (0.975, 1, 12.706205),
        (0.975, 2, 4.302653),
        (0.975, 4, 2.776445),
        (0.995, 3, 5.840909),
        (0.975, 10, 2.228139),
        (0.99, 30, 2.457262),
        (0.025, 2, -4.302653),
    ],
)
def test_student_t_quantile(p: float, df: int, expected: float) -> None:
    assert student_t_quantile(p, df) == pytest.approx(expected, abs=1e-5)
    assert student_t_cdf(expected, df) == pytest.approx(p, abs=1e-7)


@pytest.mark.parametrize(
    ("low", "high", "enough", "expected"),
    [
        (1.2, 1.4, True, Outcome.IMPROVEMENT),
        (0.98, 1.02, True, Outcome.NO_CHANGE),
        (1.005, 1.02, True, Outcome.NO_CHANGE),  # above 1 but inside the band
        (0.6, 0.7, True, Outcome.REGRESSION),
        (0.96, 0.99, True, Outcome.INCONCLUSIVE),  # slower, maybe by less than the bar
        (0.8, 1.3, True, Outcome.INCONCLUSIVE),  # wide: contains 1 and both bars
        (1.01, 1.08, True, Outcome.INCONCLUSIVE),  # better, maybe by less than the bar
        (1.2, 1.4, False, Outcome.INCONCLUSIVE),  # too little data, however clear
    ],
)
def test_ratio_outcome(low: float, high: float, enough: bool, expected: Outcome) -> None:
    assert ratio_outcome(low, high, 1.03, enough=enough) is expected


def test_noise_allowance_is_robust_to_outlying_epochs() -> None:
    steady = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99, 1.00, 1.01]
    with_outliers = [*steady, 1.45, 1.46]
    iqr = float(np.subtract(*np.quantile(steady, [0.75, 0.25])))
    assert noise_allowance(steady) == pytest.approx(100 * 3 * iqr / 1.349 / np.median(steady))
    # the max - min spread would be 48 %; three robust sigmas stay near 4 %
    assert noise_allowance(with_outliers) <= noise_allowance(steady)
    assert noise_allowance(with_outliers) < 5.0
    # steady on three values (the median absolute deviation of these is 0.1 %: 0.4 % allowed)
    assert noise_allowance([1.0, 1.001, 1.2]) == pytest.approx(22.2, abs=0.1)
    assert noise_allowance([2.0]) == 0.0  # one value says nothing about noise
    assert noise_allowance([2.0, 3.0], relative=False) == pytest.approx(3 * 0.5 / 1.349)
    assert noise_allowance([-1.0, 1.0]) == 0.0  # no positive median to be relative to


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    }


def test_the_outcome_words_are_spelled_in_one_place() -> None:
    # and the gate's old private ones (the try's "slower" is tested in test_paired)
    words = {str(Outcome.NO_CHANGE), str(Outcome.INCONCLUSIVE), "ok", "unjudged"}
    spelled = {
        str(path.relative_to(OCR.parent)): sorted(words & _string_constants(path))
        for path in sorted((OCR / "perf").rglob("*.py"))
        if path.name != "significance.py"
    }
    assert {path: found for path, found in spelled.items() if found} == {}
