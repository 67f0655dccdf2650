"""The report and profiler windows: profiled epochs marked, the trace export as its own line,
profiled outlier batches labelled, trace-vs-clock disagreement as a finding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainperf.analysis.stages import PROFILER_PHASE, profiled_batches
from trainperf.present.report import build_report
from trainperf.present.report.writers import to_markdown
from trainperf.records.monitoring import ProfilerWindow

from trainperf_testing.run_lines import write_lines
from trainperf_testing.runs import epoch_record, make_run
from trainperf_testing.synth import make_trace, write


def _window(agree: bool) -> dict[str, Any]:
    rows = [
        {
            "phase": "forward",
            "trace_ms": 30.0,
            "clock_ms": 30.5 if agree else 2.0,
            "diff_ms": 0.0,
            "diff_pct": 0.0,
            "agree": True,
        },
    ]
    findings = []
    if not agree:
        findings.append(
            {
                "id": "measurement_disagreement",
                "severity": "warning",
                "title": "Trace and phase clock disagree on forward",
                "evidence": {"steps": 3},
                "threshold": {"tolerance_pct": 10.0},
                "suggestion": "check the labels",
            }
        )
    return {
        "t": 1.0,
        "stage": "train",
        "epoch": 0,
        "trigger": "epoch",
        "reason": "epoch 0",
        "steps": 3,
        "batches": [0, 3],
        "overhead_s": {"export": 0.4, "analysis": 0.1},
        "traces": ["profiler_traces/epoch_0.json"],
        "summary": {"findings": findings, "top_cpu_ops": [], "dataloader_time_pct": 0.0},
        "clock_agreement": {
            "steps": 3,
            "step_ms": 50.0,
            "tolerance_pct": 10.0,
            "phases": rows,
            "agree": agree,
        },
    }


def _run(tmp_path: Path, agree: bool) -> Path:
    # batch 3 is slow because the profiler exported its trace there; batch 9 is a real outlier
    times = [0.1] * 12
    times[3] = 0.9
    times[9] = 0.8
    phases = {"forward": 1.0, "backward": 0.5, "callbacks": 0.6, "data_wait": sum(times) - 2.1}
    epochs = [epoch_record("train", 0, phases, batch_times=times, batches=12)]
    run = make_run(tmp_path / "run", epochs)
    (run / "profiler_traces").mkdir()
    write(make_trace(n_steps=3, jitter=0.0), run / "profiler_traces" / "epoch_0.json")
    write_lines(ProfilerWindow.path(run), ProfilerWindow, [_window(agree)])
    return run


def test_profiled_epoch_marked_and_export_out_of_callbacks(tmp_path: Path) -> None:
    run = _run(tmp_path, agree=True)
    report = build_report(run)
    assert profiled_batches(report.run.profiler_windows) == {("train", 0, b) for b in range(4)}
    train = report.stages["train"]
    assert train.phases_s[PROFILER_PHASE] == 0.5
    assert abs(train.phases_s["callbacks"] - 0.1) < 1e-9
    md = to_markdown(report)
    assert "| profiler |" in md
    assert "Profiled epochs" in md
    assert "profiled (trace recording / export)" in md  # batch 3, not batch 9
    assert md.count("profiled (trace recording / export)") == 1
    assert "one figure per phase (the phase clock)" in md
    assert not [f for f in report.findings if "measurement" in f.id]


def test_disagreement_is_a_finding_of_the_report(tmp_path: Path) -> None:
    report = build_report(_run(tmp_path, agree=False))
    found = [f for f in report.findings if f.id == "trace:measurement_disagreement"]
    assert len(found) == 1
    assert found[0].source == "trace"
