"""Comparison: the verdict and the deltas on traces with a planted regression (the U test is
tested with :mod:`trainperf.core.significance`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainperf.analysis.trace import analyze_path, compare_reports
from trainperf.analysis.trace.compare import TraceComparison

from trainperf_testing.synth import make_trace, write


def compare_traces(a: Path, b: Path, threshold_pct: float) -> TraceComparison:
    return compare_reports(analyze_path(a, top_k=None), analyze_path(b, top_k=None), threshold_pct)


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    base = write(make_trace(seed=1, conv_us=400), tmp_path / "base.json")
    again = write(make_trace(seed=2, conv_us=400), tmp_path / "again.json")
    slow = write(make_trace(seed=3, conv_us=600), tmp_path / "slow.json.gz")
    return base, again, slow


def test_planted_regression_is_found_and_attributed(pair: tuple[Path, Path, Path]) -> None:
    base, _, slow = pair
    result = compare_traces(base, slow, threshold_pct=10)
    v = result.verdict
    assert v["verdict"] == "regression"
    assert v["change_pct"] > 20
    assert v["p_slower"] < 0.05
    assert v["ci95_pct"][0] > 0
    assert result.ops[0].name == "aten::mkldnn_convolution"
    assert result.ops[0].delta_ms == pytest.approx(0.2, rel=0.05)
    phases = result.stages["train"].phases_ms
    assert phases["forward"].delta == pytest.approx(0.2, rel=0.05)
    assert abs(phases["backward"].delta or 0.0) < 0.02
    assert len(result.stages["train"].steps) == 6
    # the --json form is the same figures as plain data
    data = result.as_dict()
    assert data["stages"]["train"]["phases_ms"]["forward"]["delta"] == phases["forward"].delta
    assert data["ops"][0]["only_in"] is None


def test_same_workload_is_not_a_regression(pair: tuple[Path, Path, Path]) -> None:
    base, again, slow = pair
    assert compare_traces(base, again, threshold_pct=5).verdict["verdict"] == (
        "no significant change"
    )
    assert compare_traces(slow, base, threshold_pct=10).verdict["verdict"] == "improvement"


def test_few_steps_fall_back_to_the_point_estimate(tmp_path: Path) -> None:
    a = write(make_trace(n_steps=2, seed=1), tmp_path / "a.json")
    b = write(make_trace(n_steps=2, seed=2, conv_us=800), tmp_path / "b.json")
    v = compare_traces(a, b, threshold_pct=10).verdict
    assert v["confidence"] == "low"
    assert v["verdict"] == "regression"
    assert v["p_slower"] is None


def test_a_saved_report_from_before_the_transfer_phase_still_compares(tmp_path: Path) -> None:
    import copy

    from trainperf.analysis.trace import analyze_path
    from trainperf.analysis.trace.compare import compare_reports
    from trainperf.present.trace_tables import trace_markdown

    new = analyze_path(write(make_trace(n_steps=6), tmp_path / "a.json"), top_k=None)
    old = copy.deepcopy(new)
    for ps in old.phase_summary.values():
        del ps.phases["transfer"]  # reports written before the phase existed
    result = compare_reports(old, new)
    phases = result.stages["train"].phases_ms
    assert "transfer" not in phases
    assert "forward" in phases
    assert "| transfer |" not in trace_markdown(old)
