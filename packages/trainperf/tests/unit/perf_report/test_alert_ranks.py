"""Alerts keep their rank through the verdict and the report: under DDP every rank appends to the
same alerts.jsonl, and one rank's events never merge with another's."""

from __future__ import annotations

from pathlib import Path

from trainperf.present.report import build_report, to_markdown

from trainperf_testing.runs import T0, epoch_record, make_run

TRAIN = {"forward": 3.0, "backward": 2.0, "optimizer": 0.5, "data_wait": 0.1}


def _event(rank: int, event: str, t: float, epoch: int) -> dict[str, object]:
    return {
        "t": T0 + t,
        "rule": "gpu_starvation",
        "event": event,
        "severity": "warning",
        "message": f"GPU starved on rank {rank}" if event == "fired" else "keeps up again",
        "evidence": {"data_wait_share": 0.6},
        "threshold": {"data_wait_share": 0.3},
        "suggestion": "more workers",
        "step": 10 * epoch,
        "epoch": epoch,
        "rank": rank,
    }


def _two_rank_run(root: Path) -> None:
    epochs = [{**epoch_record("train", e, TRAIN), "world_size": 2} for e in range(3)]
    alerts = [
        _event(0, "fired", 10.0, 0),
        _event(1, "fired", 250.0, 2),  # rank 1 starts starving in epoch 2 and never recovers
        _event(0, "resolved", 260.0, 2),  # rank 0 writes last: its resolve must not end rank 1's
    ]
    make_run(root, epochs, alerts=alerts)


def test_the_verdict_groups_alerts_by_rank_and_rule(tmp_path: Path) -> None:
    _two_rank_run(tmp_path)
    found = {
        f.evidence.get("rank"): f
        for f in build_report(tmp_path).findings
        if f.id == "alert:gpu_starvation"
    }
    assert set(found) == {0, 1}
    one, zero = found[1], found[0]
    assert one.title == "rank 1: alert gpu_starvation since epoch 2: GPU starved on rank 1"
    assert (one.evidence["times_fired"], one.evidence["still_active_at_end"]) == (1, True)
    assert zero.title == "rank 0: alert gpu_starvation in epoch 0: GPU starved on rank 0"
    assert (zero.evidence["times_fired"], zero.evidence["still_active_at_end"]) == (1, False)


def test_a_corroborating_alert_names_its_rank(tmp_path: Path) -> None:
    starved = {**TRAIN, "data_wait": 8.0}
    epochs = [{**epoch_record("train", e, starved), "world_size": 2} for e in range(3)]
    make_run(tmp_path, epochs, alerts=[_event(1, "fired", 250.0, 2)])
    (bound,) = [f for f in build_report(tmp_path).findings if f.id == "input_bound"]
    assert bound.corroboration == [
        "rank 1: alert gpu_starvation fired 1x since epoch 2: GPU starved on rank 1"
    ]


def test_the_report_s_alert_table_names_the_rank(tmp_path: Path) -> None:
    _two_rank_run(tmp_path)
    page = to_markdown(build_report(tmp_path))
    assert "| min | rank | rule | event |" in page
    assert "rank 1: alert gpu_starvation since epoch 2" in page


def test_a_single_process_run_reads_without_ranks(tmp_path: Path) -> None:
    epochs = [epoch_record("train", e, TRAIN) for e in range(2)]
    make_run(tmp_path, epochs, alerts=[_event(0, "fired", 10.0, 0)])
    (finding,) = [f for f in build_report(tmp_path).findings if f.id == "alert:gpu_starvation"]
    assert finding.title == "alert gpu_starvation: GPU starved on rank 0"
    assert "rank" not in finding.evidence
    page = to_markdown(build_report(tmp_path))
    assert "| min | rule | event |" in page
