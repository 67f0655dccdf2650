"""trainperf.core.findings: one Finding type and one thresholds table shared by the alert rules, the
trace rules and the verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest
from trainperf.alerts import AlertEvent, alert_finding, build_rules
from trainperf.alerts.resource_rules import GpuStarvation
from trainperf.analysis.trace import analyze_trace
from trainperf.analysis.trace.trace_metrics import TraceMetrics
from trainperf.analysis.trace.trace_rules import evaluate
from trainperf.core import findings as vocab
from trainperf.core.candidates import Candidate
from trainperf.core.findings import THRESHOLDS, Finding, input_bound_severity, threshold
from trainperf.present.report import ReportInputError, build_report

from trainperf_testing.runs import CONFIG, epoch_record, make_run
from trainperf_testing.synth import make_trace, write


def _trace_severity(pct: float) -> str | None:
    metrics = TraceMetrics(has_gpu=False, n_steps=10, step_wall_ms=1000.0, data_wait_pct=pct)
    found = [f for f in evaluate(metrics) if f.id == "data_loading"]
    return found[0].severity if found else None


def _verdict_input(root: Path, pct: float) -> Finding | None:
    """The verdict's input-bound finding of a validation stage with ``pct`` % data wait."""
    val = {"data_wait": pct / 10.0, "forward": (100.0 - pct) / 10.0}
    make_run(root, [epoch_record("val", 0, val)], config=CONFIG, run_info={"cpu_count": 8})
    found = [f for f in build_report(root).findings if f.id == "input_bound"]
    return found[0] if found else None


def test_every_entry_has_a_unit_and_a_reason_where_live_differs() -> None:
    for name, t in THRESHOLDS.items():
        assert t.unit, name
        assert t.meaning, name
        assert t.value is not None or t.live is not None, name
        if t.value is not None and t.live is not None and t.live != t.value:
            assert t.why, name
    with pytest.raises(KeyError, match="no threshold named 'nope'"):
        threshold("nope")
    with pytest.raises(KeyError, match="no post-hoc value"):
        threshold("input_clear_pct")
    # the input-bound cause: one post-hoc pair, a stricter live value and its reason
    assert threshold("input_warn_pct") == 10.0
    assert threshold("input_warn_pct", live=True) == 30.0
    assert threshold("input_critical_pct", live=True) == 20.0  # no live value: the post-hoc one


@pytest.mark.parametrize("pct", [5.0, 12.0, 29.0, 31.0, 70.0])
def test_the_same_data_wait_share_gets_the_same_severity_from_trace_and_verdict(
    tmp_path: Path, pct: float
) -> None:
    verdict = _verdict_input(tmp_path, pct)
    assert _trace_severity(pct) == (verdict.severity if verdict else None)
    assert _trace_severity(pct) == input_bound_severity(pct)


@pytest.mark.parametrize("data_us", [20.0, 150.0, 600.0])
def test_a_real_trace_and_the_verdict_agree_on_its_data_wait_share(
    tmp_path: Path, data_us: float
) -> None:
    trace = analyze_trace(write(make_trace(data_us=data_us, jitter=0.0), tmp_path / "t.json"))
    pct = float(trace["dataloader_time_pct"])
    found = [f for f in trace["findings"] if f["id"] == "data_loading"]
    verdict = _verdict_input(tmp_path / "run", pct)
    assert (found[0]["severity"] if found else None) == (verdict.severity if verdict else None)


def test_changing_a_table_entry_changes_the_alert_the_trace_and_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert GpuStarvation().settings["data_wait_share"] == pytest.approx(0.30)
    assert _trace_severity(15.0) == "warning"
    assert _verdict_input(tmp_path / "before", 15.0) is not None

    entry = THRESHOLDS["input_warn_pct"]
    monkeypatch.setitem(
        THRESHOLDS, "input_warn_pct", dataclasses.replace(entry, value=20.0, live=45.0)
    )
    assert GpuStarvation().settings["data_wait_share"] == pytest.approx(0.45)
    (rule,) = [r for r in build_rules() if r.name == "gpu_starvation"]
    assert rule.settings["data_wait_share"] == pytest.approx(0.45)
    assert _trace_severity(15.0) is None
    assert _verdict_input(tmp_path / "after", 15.0) is None
    assert _verdict_input(tmp_path / "above", 25.0) is not None
    # a per-rule setting still overrides the table
    (rule,) = [
        r
        for r in build_rules({"gpu_starvation": {"data_wait_share": 0.2}})
        if r.name == "gpu_starvation"
    ]
    assert rule.settings["data_wait_share"] == 0.2


def test_finding_round_trips_and_reads_the_older_trace_form() -> None:
    f = Finding(
        id="input_bound",
        severity="critical",
        score=42.0,
        title="t",
        evidence={"data_wait_pct": 60.0},
        threshold={"warning_pct": 10.0},
        suggestion="s",
        stage="val",
        candidates=[Candidate("workers", "more workers", "data.num_workers=4")],
    )
    assert Finding.from_dict(f.as_dict()) == f
    old = {
        "id": "data_loading",
        "severity": "warning",
        "title": "Data loading takes 12.0% of the step time",
        "evidence": {"data_loading_pct": 12.0},
        "threshold": {"warning_pct": 10.0},
        "suggestion": "raise num_workers",
    }
    read = Finding.from_dict(old)
    assert (read.score, read.source, read.candidates) == (0.0, "trace", [])
    with pytest.raises(ValueError, match="x: severity must be one of"):
        Finding.from_dict({**old, "severity": "fatal"}, "x")
    with pytest.raises(ValueError, match=r"x: Expected `str`, got `null` - at `\$.title`"):
        Finding.from_dict({**old, "title": None}, "x")


def test_alert_events_read_back_and_become_one_finding() -> None:
    def event(kind: str, t: float, severity: str = "warning") -> AlertEvent:
        return AlertEvent(
            t=t,
            rule="gpu_memory_near_oom",
            event=kind,
            severity=severity,
            message=f"{kind} at {t}",
            evidence={"used_fraction": 0.97},
            threshold={"used_fraction": 0.95},
            suggestion="lower the batch size",
            step=3,
            epoch=1,
            rank=0,
        )

    events = [event("fired", 1.0), event("resolved", 2.0), event("fired", 3.0, "critical")]
    assert [msgspec.convert(msgspec.to_builtins(e), AlertEvent) for e in events] == events
    f = alert_finding(events)
    assert f is not None
    assert (f.id, f.severity, f.source, f.confidence) == (
        "alert:gpu_memory_near_oom",
        "critical",
        "alerts",
        "likely",
    )
    assert f.evidence["times_fired"] == 2
    assert f.evidence["still_active_at_end"] is True
    assert alert_finding([event("resolved", 1.0)]) is None


def test_severities_and_confidences_are_explained() -> None:
    assert set(vocab.SEVERITY_ORDER) == {"critical", "warning", "info"}
    assert set(vocab.CONFIDENCES) == {"measured", "likely", "guess"}


def test_a_malformed_alert_record_names_the_file_and_record(tmp_path: Path) -> None:
    alert = {"t": 1.0, "rule": "nan_loss", "event": "fired", "step": "three"}
    make_run(tmp_path, [epoch_record("train", 0, {"forward": 1.0})], alerts=[alert])
    with pytest.raises(ReportInputError, match=r"alerts\.jsonl: line 1: .*`\$\.step`"):
        build_report(tmp_path)


def test_trace_rules_score_in_the_one_unit() -> None:
    """Every trace finding scores the share of the profiled steps' wall time its cause costs
    (%), a risk the risk table's score; none is left at 0 for lack of a unit."""
    gpu = TraceMetrics(
        has_gpu=True,
        n_steps=10,
        step_wall_ms=1000.0,
        data_wait_pct=0.0,
        kernels_per_step=900.0,
        tiny_kernel_pct=80.0,
        launch_ms_per_step=12.0,
        memory_peak_pct=97.0,
        memory_peak_device="cuda:0",
    )
    by_id = {f.id: f for f in evaluate(gpu)}
    assert by_id["launch_overhead"].score == pytest.approx(12.0)  # 10 x 12 ms of 1000 ms
    assert by_id["memory_near_capacity"].score == vocab.risk_score("warning")
    cpu = TraceMetrics(
        has_gpu=False,
        n_steps=10,
        step_wall_ms=1000.0,
        data_wait_pct=0.0,
        cpu_ops_per_step=5000.0,
        tiny_op_pct=90.0,
        tiny_op_time_pct=35.0,
    )
    assert {f.id: f.score for f in evaluate(cpu)}["dispatch_overhead"] == pytest.approx(35.0)
    assert vocab.share_of_run(35.0, 50.0) == 17.5


def test_a_traced_dispatch_overhead_scores_its_tiny_ops_time(tmp_path: Path) -> None:
    from trainperf.analysis.trace import analyze_path

    analysis = analyze_path(write(make_trace(n_steps=4, jitter=0.0), tmp_path / "t.json"))
    m = analysis.metrics
    assert m.tiny_op_time_pct is not None
    assert 0.0 <= m.tiny_op_time_pct <= 100.0
