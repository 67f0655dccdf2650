"""The verdict ranks by what a change could recover, not by the share of time a cause costs: a
critical, fixable cause with a bound outranks compute-bound of unknown headroom; a speed-up
``trainperf try`` measured counts by its size; findings never contradict each other (a saturated
CPU does not say more workers cannot help beside a finding that proposes them). The planted-size
ranking rule itself: ``test_ranking_rule.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainperf.core.findings import Finding, grade, rank
from trainperf.present.report import build_report
from trainperf.present.report.findings_section import headline
from trainperf.records.files import RecordWriter
from trainperf.records.try_record import TryRecord

from trainperf_testing.runs import T0, epoch_record, make_run


def _finding(fid: str, severity: str, score: float, pct: float | None, source: str) -> Finding:
    return Finding(
        fid, severity, score, fid, {}, {}, "s", recoverable_pct=pct, recoverable_from=source
    )


def test_rank_key_orders_by_severity_then_size() -> None:
    compute = _finding("compute_bound", "info", 54.0, None, "unknown")
    inputs = _finding("input_bound", "critical", 44.0, 44.0, "bound")
    small = _finding("callback_overhead", "warning", 3.0, 3.0, "bound")
    measured = _finding("slow_postprocess", "warning", 5.0, 4.0, "measured")
    nan_loss = _finding("alert:nan_loss", "critical", 100.0, 100.0, "risk")
    nothing = _finding("cpu_saturated", "info", 0.0, 0.0, "bound")
    shuffled = [nothing, compute, small, inputs, measured, nan_loss]
    graded = grade(shuffled)
    assert [(f.id, f.severity) for f in graded] == [
        ("alert:nan_loss", "critical"),  # the run may die
        ("input_bound", "critical"),  # 44 % of the run: critical
        ("compute_bound", "info"),  # unknown headroom: ranks as the deadband, before smaller
        ("slow_postprocess", "info"),  # a measured 4 %: inside the deadband
        ("callback_overhead", "info"),  # a 3 % bound
        ("cpu_saturated", "info"),  # nothing to recover
    ]
    assert rank(graded) == graded  # the order is a fixed point


# A plain script's CPU run: 44 % data wait with num_workers=0 (10 ms of numpy per sample in the
# main process), 54 % forward / backward / optimizer, every core busy.
TRAIN = {"data_wait": 4.4, "forward": 2.7, "backward": 2.2, "optimizer": 0.5, "unattributed": 0.2}


def _resources(cpu: float) -> list[dict[str, Any]]:
    return [
        {
            "t": T0 + i,
            "phase": "train",
            "epoch": 0,
            "step": i,
            "rank": 0,
            "metrics": {
                "resources/system_cpu_percent": cpu,
                "resources/process_cpu_percent": 190.0,
                "resources/workers_cpu_percent": 0.0,
            },
        }
        for i in range(6)
    ]


def cpu_run(root: Path, num_workers: int = 0) -> Path:
    epochs = [
        epoch_record(
            "train",
            e,
            TRAIN,
            worker_s={"fetch": 4.2},
            num_workers=num_workers,
            batches=100,
            batch_size=4,
        )
        for e in range(2)
    ]
    info = {"cpu_count": 2, "torch_threads": 2, "cpu_bf16": False}
    return make_run(root, epochs, resources=_resources(97.0), run_info=info)


def test_a_critical_fixable_cause_outranks_compute_bound_of_unknown_headroom(
    tmp_path: Path,
) -> None:
    report = build_report(cpu_run(tmp_path))
    ids = [f.id for f in report.findings]
    assert ids.index("input_bound") < ids.index("compute_bound")
    first = report.findings[0]
    assert first.id == "input_bound"
    assert first.severity == "critical"
    assert first.recoverable_from == "bound"
    compute = next(f for f in report.findings if f.id == "compute_bound")
    assert compute.score > first.score  # the larger share, ranked second all the same
    assert compute.recoverable_from == "unknown"
    sentence = headline(report)
    assert sentence.startswith("input-bound: 44 % of training wall time is data wait")
    assert "num_workers" in sentence
    assert "could recover up to 44 %" in sentence
    assert len(sentence.split()) <= 40


def test_a_saturated_cpu_never_says_more_workers_cannot_help_beside_a_finding_proposing_them(
    tmp_path: Path,
) -> None:
    report = build_report(cpu_run(tmp_path / "zero"))
    saturated = next(f for f in report.findings if f.id == "cpu_saturated")
    assert any(c.family == "workers" for f in report.findings for c in f.candidates)
    for f in report.findings:
        assert "cannot add speed" not in f.suggestion, f.id
        assert "will not help" not in f.suggestion, f.id
    assert "num_workers=0" in saturated.suggestion
    assert saturated.evidence["process_cpu_median_pct"] == pytest.approx(190.0)
    # with workers already on every core and none proposed, it still says so
    busy = build_report(cpu_run(tmp_path / "two", num_workers=2))
    proposed = [c for f in busy.findings for c in f.candidates if c.family == "workers"]
    saturated = next(f for f in busy.findings if f.id == "cpu_saturated")
    assert proposed == []
    assert "cannot add speed" in saturated.suggestion


def test_a_measured_speed_up_counts_by_its_size_not_above_a_larger_bound(tmp_path: Path) -> None:
    run = cpu_run(tmp_path)
    compute = next(f for f in build_report(run).findings if f.id == "compute_bound")
    knob = next(c.knob for c in compute.candidates if c.knob is not None)
    writer = RecordWriter(TryRecord.path(run))
    writer.write(
        TryRecord(
            session="2026-11-27T00:00:00+00:00",
            kind="candidate",
            override=knob.text,
            description="a compute change",
            family=knob.spec.family,
            alters_computation=False,
            eval_time=False,
            status="recommended",
            pairs=5,
            median=1.10,
            low=1.05,
            high=1.2,
        )
    )
    writer.close()
    report = build_report(run)
    first = report.findings[0]
    assert first.id == "input_bound"  # a 44 % bound over a measured 9 % of the run
    compute = next(f for f in report.findings if f.id == "compute_bound")
    assert compute.recoverable_from == "measured"
    assert compute.recoverable_pct == pytest.approx(100 * (1 - 1 / 1.10), abs=0.1)
    assert compute.severity == "warning"  # a measured 9 %: outside the 5 % deadband
    assert compute.evidence["measured_change"] == knob.text
    # the verdict names the largest cause and, separately, the best measured change
    sentence = headline(report)
    assert sentence.startswith("input-bound")
    assert f"best measured change: {knob.text} 1.10x, 9 % of the run" in sentence
