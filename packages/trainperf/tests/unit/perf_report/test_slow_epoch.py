"""An epoch far slower than its neighbours gets a finding: its cause where the run's records
show one (planted here: CPU taken by other processes during it, a few outlier batches), or an
explicit "unexplained" naming what was checked (contention, outlier batches, GC, swap). Noise,
a warm-up epoch and too few epochs get none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainperf.core.findings import Finding
from trainperf.present.report import build_report

from trainperf_testing.runs import CONFIG, T0, epoch_record, make_run

BATCHES = 20
BATCH_S = 0.4
CORES = 8


def _epoch(e: int, times: list[float]) -> dict[str, Any]:
    # the batches are the epoch: its forward holds their time
    return epoch_record("train", e, {"forward": sum(times)}, batches=len(times), batch_times=times)


def _samples(epoch: int, system: float, own: float, **more: float) -> list[dict[str, Any]]:
    return [
        {
            "t": T0 + 100 * epoch + i,
            "phase": "train",
            "epoch": epoch,
            "step": i,
            "rank": 0,
            "metrics": {
                "resources/system_cpu_percent": system,
                "resources/process_cpu_percent": own,
                "resources/workers_cpu_percent": 0.0,
                "resources/system_memory_percent": 40.0,
                "resources/iowait_percent": 0.0,
                **more,
            },
        }
        for i in range(4)
    ]


def _findings(
    root: Path, slow: list[float], resources: list[dict[str, Any]] | None = None
) -> list[Finding]:
    steady = [BATCH_S] * BATCHES
    epochs = [_epoch(0, [2 * BATCH_S] * BATCHES)]  # a slow warm-up epoch: left out
    epochs += [_epoch(e, slow if e == 3 else steady) for e in range(1, 6)]
    make_run(root, epochs, config=CONFIG, resources=resources, run_info={"cpu_count": CORES})
    return [f for f in build_report(root).findings if f.id == "slow_epoch"]


def test_a_slow_epoch_under_contention_is_named_with_its_cause(tmp_path: Path) -> None:
    # the demo's epoch 3: 8 batches of 1.1-2.2 s while other processes held the CPUs
    slow = [BATCH_S] * 12 + [1.1, 1.3, 1.5, 1.7, 1.8, 2.0, 2.1, 2.2]
    resources = [s for e in (1, 2, 4, 5) for s in _samples(e, 40.0, 300.0)]
    resources += _samples(3, 100.0, 150.0)  # the run used under 2 of its 8 cores
    (f,) = _findings(tmp_path, slow, resources)
    assert f.evidence["epoch"] == 3
    assert f.title.startswith("training epoch 3 took 2.3x the other epochs' time per batch")
    assert "cause: CPU contention (other processes held" in f.title
    assert "forward +" in f.title  # the phase that grew
    assert "measure on an idle host" in f.suggestion
    # the host's load is not the run's to recover
    assert f.recoverable_pct == 0.0
    assert f.evidence["more_slow_epochs"] == []


def test_a_few_outlier_batches_are_the_cause(tmp_path: Path) -> None:
    slow = [BATCH_S] * 18 + [5.0, 6.0]
    (f,) = _findings(tmp_path, slow)
    assert "cause: outlier batches (2 of 20 batches took 5.00-6.00 s" in f.title
    assert "batches 18, 19" in f.title
    assert f.evidence["checked"]["CPU contention"] == "no resource samples in this epoch"
    assert f.recoverable_pct == f.score > 0


def test_an_unexplained_slow_epoch_says_what_was_checked(tmp_path: Path) -> None:
    slow = [2 * BATCH_S] * BATCHES  # every batch twice as slow, a quiet host
    resources = [s for e in range(1, 6) for s in _samples(e, 30.0, 200.0)]
    (f,) = _findings(tmp_path, slow, resources)
    assert f.title.endswith("; cause unexplained")
    for checked in (
        "outlier batches: none: every batch was slower",
        "CPU contention: host CPU 30 % busy (median; other epochs 30 %)",
        "swap: host memory peaked at 40 %; swap itself is not recorded",
        "GC pauses: not recorded",
        "I/O wait: iowait 0 %",
    ):
        assert checked in f.suggestion, checked
    assert "ResourceMonitorCallback" not in f.suggestion  # its samples were recorded


def test_noise_warm_up_and_too_few_epochs_get_none(tmp_path: Path) -> None:
    jitter = [BATCH_S * 1.2] * BATCHES  # 1.2x: inside the 1.5x limit
    assert _findings(tmp_path / "noise", jitter) == []
    # three epochs: the slow warm-up left out, two steady ones are too few to judge
    epochs = [_epoch(0, [3.0] * BATCHES), _epoch(1, [BATCH_S] * BATCHES)]
    epochs.append(_epoch(2, [BATCH_S] * BATCHES))
    make_run(tmp_path / "few", epochs, config=CONFIG, run_info={"cpu_count": CORES})
    assert not [f for f in build_report(tmp_path / "few").findings if f.id == "slow_epoch"]


def test_a_saturated_host_is_a_cause_even_when_the_cpu_is_the_runs(tmp_path: Path) -> None:
    # every core busy in epoch 3, most of it this run's (its workers), 40 % in the others
    slow = [2 * BATCH_S] * BATCHES
    resources = [s for e in (1, 2, 4, 5) for s in _samples(e, 40.0, 300.0)]
    resources += _samples(3, 100.0, 700.0)
    (f,) = _findings(tmp_path, slow, resources)
    assert "cause: host CPU saturated (host CPU 100 % busy (median; other epochs 40 %)" in f.title
    assert "check what else ran on the host then" in f.suggestion
