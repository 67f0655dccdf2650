"""CPU contention from resource samples: which samples are contended, the run-level summary
(DDP ranks are not each other's contention), the ``cpu_contention`` finding, and the
``throughput_drop`` alert pointing to it (live message, and attached in the verdict)."""

from __future__ import annotations

from pathlib import Path

from trainperf.alerts import alert_findings
from trainperf.alerts.engine import RuleContext
from trainperf.alerts.run_rules import ThroughputDrop
from trainperf.analysis.contention import (
    contention_note,
    summarize,
    trials_contention_note,
)
from trainperf.analysis.run import RunData
from trainperf.analysis.verdict.contention_rule import contention_finding
from trainperf.core.cpu_shares import cpu_shares
from trainperf.records.files import RecordWriter, write_run_record
from trainperf.records.monitoring import AlertEvent, ResourceSample
from trainperf.records.run_record import RunRecord


def _metrics(system: float, process: float, workers: float = 0.0) -> dict[str, float]:
    return {
        "resources/system_cpu_percent": system,
        "resources/process_cpu_percent": process,
        "resources/workers_cpu_percent": workers,
    }


def _sample(t: float, system: float, process: float, rank: int = 0, phase: str = "train"):
    return ResourceSample(t=t, phase=phase, rank=rank, metrics=_metrics(system, process))


def test_a_busy_host_is_contended_only_when_others_hold_the_cpus() -> None:
    # 4 cores: this run at 360 % of one core = 90 % of the host: saturated by itself
    own = cpu_shares(_metrics(95.0, 300.0, 60.0), cpu_count=4)
    assert own is not None
    assert not own.contended
    # this run at 40 % of one core = 10 % of the host, the host at 100 %: others hold 90 %
    other = cpu_shares(_metrics(100.0, 40.0), cpu_count=4)
    assert other is not None
    assert other.contended
    assert round(other.others_pct) == 90
    # others busy but the host not: no contention
    idle = cpu_shares(_metrics(60.0, 10.0), cpu_count=4)
    assert idle is not None
    assert not idle.contended
    assert cpu_shares({"resources/process_cpu_percent": 50.0}, cpu_count=4) is None


def test_ddp_ranks_count_as_the_run_not_as_others() -> None:
    # 2 cores, two ranks each at 95 % of one core, host at 100 %: the run holds the host
    samples = [_sample(t + 0.01 * r, 100.0, 95.0, rank=r) for t in range(6) for r in (0, 1)]
    found = summarize(samples, cpu_count=2)
    assert found is not None
    assert found.contended == 0
    assert not found.present
    # one rank alone would have read the other as a neighbour
    assert all(cpu_shares(s.metrics, 2) and cpu_shares(s.metrics, 2).contended for s in samples)  # type: ignore[union-attr]


def test_idle_samples_are_not_judged() -> None:
    samples = [_sample(float(t), 100.0, 5.0, phase="idle") for t in range(5)]
    assert summarize(samples, cpu_count=2) is None


def _run(samples: list[ResourceSample], alerts: list[AlertEvent] = []) -> RunData:  # noqa: B006
    return RunData(
        run_dir=Path("run"), run_info=RunRecord(cpu_count=2), resources=samples, alerts=alerts
    )


def test_the_finding_names_the_others_share() -> None:
    samples = [_sample(float(t), 100.0, 20.0) for t in range(8)]
    finding = contention_finding(_run(samples))
    assert finding is not None
    assert finding.id == "cpu_contention"
    assert finding.evidence["contended_samples"] == 8
    assert finding.evidence["others_cpu_median_pct"] == 90.0
    assert "other processes held 90 %" in finding.title
    assert contention_finding(_run([_sample(float(t), 100.0, 190.0) for t in range(8)])) is None


def test_a_throughput_drop_under_contention_says_so_and_is_attached_to_the_finding() -> None:
    rule = ThroughputDrop(warmup_s=0.0, baseline_s=1.0, hold_s=0.0)
    ctx = RuleContext(phase="train")
    quiet = _metrics(30.0, 10.0)
    for t in range(3):
        steady = rule.check(float(t), {"resources/train_steps_per_s": 10.0, **quiet}, ctx)
        assert steady is None or not steady.breach
        assert steady is None or "cpu_contention" not in steady.message
    busy = {"resources/train_steps_per_s": 1.0, **_metrics(100.0, 5.0)}
    check = rule.check(3.0, busy, ctx)
    assert check is not None
    assert check.breach
    assert "(cpu_contention)" in check.message
    assert check.evidence["others_cpu_pct"] > 40.0

    alert = AlertEvent(t=3.0, rule="throughput_drop", event="fired", message=check.message)
    finding = contention_finding(_run([_sample(float(t), 100.0, 5.0) for t in range(6)], [alert]))
    assert finding is not None
    standalone = alert_findings([alert], [])
    assert [f.id for f in standalone] == ["alert:throughput_drop"]
    assert alert_findings([alert], [finding]) == []  # attached, not standing alone
    assert any("alert throughput_drop fired 1x" in c for c in finding.corroboration)


def _run_folder(root: Path, process_cpu: float) -> Path:
    write_run_record(root, {"cpu_count": 2})
    writer = RecordWriter(ResourceSample.path(root))
    for t in range(6):
        writer.write(_sample(float(t), 100.0, process_cpu))
    writer.close()
    return root


def test_check_and_try_notes_say_when_they_measured_under_contention(tmp_path: Path) -> None:
    contended = _run_folder(tmp_path / "a", process_cpu=10.0)
    alone = _run_folder(tmp_path / "b", process_cpu=195.0)
    note = contention_note("the current run", contended)
    assert note is not None
    assert note.startswith("the current run was measured under CPU contention (cpu_contention)")
    assert contention_note("the current run", alone) is None
    assert contention_note("the current run", tmp_path / "missing") is None
    trials = trials_contention_note(tmp_path)  # both folders judged together: 6 of 12 samples
    assert trials is not None
    assert "in 6 of 12 samples" in trials
