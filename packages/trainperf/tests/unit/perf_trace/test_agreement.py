"""Trace vs live phase clock: the comparison logic on constructed inputs."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from trainperf.analysis.trace import analyze_path
from trainperf.analysis.trace.agreement import clock_to_trace_phases, compare_phases
from trainperf.analysis.trace.clock_windows import attach_clock_agreement, compare_with_clock
from trainperf.analysis.trace.step_phases import PHASES
from trainperf.analysis.trace.trace_analysis import StepRow, TraceAnalysis
from trainperf.core.clock import PhaseClock, set_active_clock
from trainperf.probe.clock_snapshots import ClockSnapshots
from trainperf.records.monitoring import ProfilerWindow

from trainperf_testing.run_lines import write_lines
from trainperf_testing.synth import make_trace, write

TRACE = {
    "data_wait": 10.0,
    "transfer": 0.0,
    "forward": 30.0,
    "backward": 40.0,
    "optimizer": 15.0,
    "module_hooks": 0.0,
    "callbacks": 4.0,
    "checkpoint": 0.0,
    "unattributed": 1.0,
}


def test_the_trace_breakdown_speaks_the_clocks_phase_names() -> None:
    from trainperf.core.clock import PHASES as CLOCK_PHASES

    assert set(PHASES) <= set(CLOCK_PHASES)
    # the clock phases a trace cannot separate are pooled, in one stated place
    from trainperf.core.actions import POOLED_IN_TRACE

    assert set(CLOCK_PHASES) - set(PHASES) == set(POOLED_IN_TRACE)


def test_clock_phases_pool_into_trace_phases_whatever_their_names() -> None:
    pooled = clock_to_trace_phases(
        {
            "data_wait": 1.0,
            "postprocess": 2.0,
            "forward": 3.0,
            "callbacks": 4.0,
            "module_hooks": 5.0,
            "brand_new_phase": 6.0,
        }
    )
    assert set(pooled) == set(PHASES)
    assert pooled["data_wait"] == 1.0
    assert pooled["forward"] == 5.0  # postprocess runs inside the step function
    assert pooled["callbacks"] == 4.0
    assert pooled["module_hooks"] == 5.0
    assert pooled["unattributed"] == 6.0  # unknown names: unattributed, never dropped
    assert pooled["transfer"] == 0.0  # missing = 0


def test_agreement_within_tolerance() -> None:
    clock = {
        "data_wait": 10.5,
        "forward": 29.0,
        "backward": 41.0,
        "optimizer": 14.0,
        "callbacks": 4.2,
        "unattributed": 1.3,
    }
    result = compare_phases(TRACE, clock, steps=5)
    assert result.agree
    assert result.finding() is None
    assert msgspec.to_builtins(result)["agree"] is True  # the JSON form says so too


def test_disagreement_is_a_measurement_finding() -> None:
    # the old bug: forward and backward counted as optimizer by one side
    clock = {
        "data_wait": 10.0,
        "forward": 0.5,
        "backward": 0.0,
        "optimizer": 84.5,
        "callbacks": 4.0,
        "unattributed": 1.0,
    }
    result = compare_phases(TRACE, clock, steps=5)
    assert not result.agree
    bad = {p.phase for p in result.phases if not p.agree}
    assert bad == {"forward", "backward", "optimizer"}
    finding = result.finding()
    assert finding is not None
    assert finding.id == "measurement_disagreement"
    assert finding.evidence["clock_ms_per_step"]["optimizer"] == 84.5
    assert finding.threshold["tolerance_pct"] == 10.0


def test_tiny_phases_agree_below_the_absolute_floor() -> None:
    trace = dict(TRACE, callbacks=0.2, unattributed=4.8)
    clock = {
        "data_wait": 10.0,
        "forward": 30.0,
        "backward": 40.0,
        "optimizer": 15.0,
        "callbacks": 0.5,
        "unattributed": 4.5,
    }  # callbacks 2.5x, but 0.3 % of the step
    assert compare_phases(trace, clock, steps=1).agree


def test_snapshots_over_the_profiled_steps(tmp_path: Path) -> None:
    now = [0]
    clock = PhaseClock(now=lambda: now[0])
    snaps = ClockSnapshots()
    set_active_clock(clock)
    try:
        clock.start("data_wait")
        for step in (1, 2, 3):
            snaps.begin(step)
            now[0] += 2_000_000
            clock.switch("forward")
            now[0] += 6_000_000
            clock.switch("optimizer")
            now[0] += 2_000_000
            snaps.end(step)
            clock.switch("data_wait")
        clock.start()  # a new epoch restarts the clock: a step across it has no figure
        snaps.end(4)
        snaps.begins[4] = snaps.begins[3]
    finally:
        set_active_clock(None)
    per_step = snaps.per_step_ns()
    assert sorted(per_step) == [1, 2, 3]  # step 4 spans a restart, step 9 was never seen
    for step in (1, 2, 3):
        assert per_step[step]["data_wait"] == 2_000_000
        assert per_step[step]["forward"] == 6_000_000
        assert per_step[step]["optimizer"] == 2_000_000
    report = analyze_path(write(make_trace(n_steps=3, jitter=0.0), tmp_path / "t.json"))
    report.steps = [
        StepRow(
            step=f"ProfilerStep#{n}",
            number=n,
            stage="train",
            source=0,
            rank=None,
            start_ms=10.0 * n,
            wall_ms=10.0,
            wall_ns=10_000_000,
            phases_ms=dict.fromkeys(PHASES, 0.0)
            | {"data_wait": 2.0, "forward": 6.1, "optimizer": 1.9},
            outlier=False,
        )
        for n in (1, 2, 3)
    ]
    result = compare_with_clock(report, per_step, "train")
    assert result is not None
    assert result.agree
    assert result.steps == 3
    by_phase = {p.phase: p for p in result.phases}
    assert by_phase["forward"].clock_ms == pytest.approx(6.0)
    assert by_phase["forward"].trace_ms == pytest.approx(6.1)
    assert compare_with_clock(report, per_step, "validation") is None
    assert compare_with_clock(report, {}, "train") is None


def test_no_clock_no_figures() -> None:
    set_active_clock(None)
    snaps = ClockSnapshots()
    snaps.begin(1)
    snaps.end(1)
    assert snaps.per_step_ns() == {}


def _rows(clock_forward: float) -> list[dict[str, object]]:
    trace = dict(TRACE)
    clock = dict(TRACE, forward=clock_forward)
    return [
        {
            "phase": p,
            "trace_ms": trace[p],
            "clock_ms": clock[p],
            "diff_ms": 0.0,
            "diff_pct": 0.0,
            "agree": True,
        }
        for p in PHASES
    ]


def _run_with_window(tmp_path: Path, clock_forward: float) -> TraceAnalysis:
    run = tmp_path / "run"
    (run / "profiler_traces").mkdir(parents=True)
    trace = write(make_trace(n_steps=3, jitter=0.0), run / "profiler_traces" / "epoch_0.json")
    window = {
        "stage": "train",
        "epoch": 0,
        "traces": ["profiler_traces/epoch_0.json"],
        "clock_agreement": {"steps": 3, "phases": _rows(clock_forward)},
    }
    write_lines(ProfilerWindow.path(run), ProfilerWindow, [window])
    report = analyze_path(trace)
    attach_clock_agreement(report)
    return report


def test_analyze_attaches_the_windows_clock_figures(tmp_path: Path) -> None:
    report = _run_with_window(tmp_path, clock_forward=31.0)
    agreement = report.clock_agreement
    assert agreement is not None
    assert agreement.steps == 3
    assert agreement.agree
    assert report.as_dict()["clock_agreement"]["agree"] is True
    bad = _run_with_window(tmp_path / "b", clock_forward=3.0)
    assert bad.clock_agreement is not None
    assert not bad.clock_agreement.agree
    assert "measurement_disagreement" in {f.id for f in bad.findings}


def test_foreign_traces_get_no_clock_figures(tmp_path: Path) -> None:
    report = analyze_path(write(make_trace(n_steps=3), tmp_path / "t.json"))
    attach_clock_agreement(report)
    assert report.clock_agreement is None
    assert "clock_agreement" not in report.as_dict()


def test_a_window_recorded_with_the_old_trace_phase_names_still_compares(tmp_path: Path) -> None:
    """profiler.jsonl records written before the trace spoke the clock's names
    (data_loading / hooks / other) are read under the clock's names."""
    run = tmp_path / "run"
    (run / "profiler_traces").mkdir(parents=True)
    trace = write(make_trace(n_steps=3, jitter=0.0), run / "profiler_traces" / "epoch_0.json")
    old = {"data_wait": "data_loading", "callbacks": "hooks", "unattributed": "other"}
    rows = [dict(r, phase=old.get(str(r["phase"]), r["phase"])) for r in _rows(31.0)]
    rows = [r for r in rows if r["phase"] not in ("module_hooks", "checkpoint")]
    window = {
        "stage": "train",
        "epoch": 0,
        "traces": ["profiler_traces/epoch_0.json"],
        "clock_agreement": {"steps": 3, "phases": rows},
    }
    write_lines(ProfilerWindow.path(run), ProfilerWindow, [window])
    report = analyze_path(trace)
    attach_clock_agreement(report)
    assert report.clock_agreement is not None
    assert report.clock_agreement.agree
    shown = {p.phase: p for p in report.clock_agreement.phases}
    assert set(shown) == set(PHASES)
    assert shown["data_wait"].clock_ms == TRACE["data_wait"]
    assert shown["callbacks"].clock_ms == TRACE["callbacks"]
