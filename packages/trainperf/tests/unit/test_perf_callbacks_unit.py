"""The performance callbacks' pure parts, without a Trainer: argument checks, metric names,
logging rules, the CUDA event bookkeeping (with fake events) and the end-of-epoch table."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from rich.console import Console
from trainperf.core.clock import PHASES
from trainperf.core.ranks import rank_spread
from trainperf.core.stage import Stage
from trainperf.core.stats import StreamingStats
from trainperf.lightning import PerformanceProfilerCallback, ThroughputMonitorCallback
from trainperf.lightning.loggers import log_to_loggers
from trainperf.lightning.performance_profiler import (
    performance_metrics,
    render_table,
)
from trainperf.lightning.throughput_monitor import throughput_metrics
from trainperf.recording.cuda_events import CudaPhaseEvents
from trainperf.recording.cuda_events import EventClock as _EventClock
from trainperf.recording.setting_checks import normalize_stages
from trainperf.recording.stage_state import EpochWindow
from trainperf.recording.stage_windows import BATCH_TIMES_CHUNK
from trainperf.records.epochs import EpochRecord


def report(stage: str = "val", **overrides: Any) -> EpochRecord:
    phases = dict.fromkeys(PHASES, 0.0)
    phases.update(data_wait=1.0, forward=2.0, metric=0.5, callbacks=0.5)
    fields: dict[str, Any] = {
        "stage": Stage(stage),
        "epoch": 3,
        "wall_s": 4.0,
        "phases_s": phases,
        "gpu_phases_s": {},
        "worker_s": {"fetch": 3.0, "collate": 1.5, "targets": 1.2},
        "batch_stats": {
            "count": 8.0,
            "mean": 0.5,
            "median": 0.45,
            "p95": 0.9,
            "p99": 0.95,
            "std": 0.1,
            "min": 0.3,
            "max": 1.0,
        },
        "num_batches": 8,
        "samples": 30,
        "memory": {"process_rss_gb": 1.5, "system_memory_percent": 40.0},
        "peak_rss_gb": 1.7,
        "peak_gpu_memory_gb": math.nan,
        "world_size": 1,
        "global_samples": 30,
        "global_batches": 8,
        "global_wall_s": 4.0,
    }
    fields.update(overrides)
    return EpochRecord(**fields)


# -- arguments -----------------------------------------------------------------------------------


def test_stage_names_are_checked() -> None:
    assert normalize_stages(["train", "validate", "test"], "X") == {"train", "val", "test"}
    assert normalize_stages(("val",), "X") == {"val"}
    with pytest.raises(ValueError, match=r"PerformanceProfilerCallback: unknown stage 'fit'"):
        PerformanceProfilerCallback(stages=("train", "fit"))
    with pytest.raises(ValueError, match="got the string 'train'"):
        ThroughputMonitorCallback(stages="train")


@pytest.mark.parametrize("bad", [-1, 2.5, True, "10"])
def test_log_interval_is_checked(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"ThroughputMonitorCallback: log_interval must be"):
        ThroughputMonitorCallback(log_interval=bad)


# -- metric names --------------------------------------------------------------------------------


def test_performance_metrics_of_a_validation_epoch() -> None:
    metrics = performance_metrics(report("val"))
    assert metrics["performance/val_epoch_time"] == 4.0
    assert sum(metrics[f"performance/val_{p}_time"] for p in PHASES) == pytest.approx(4.0)
    for stat in ("mean", "median", "p95", "p99", "std"):
        assert f"performance/val_batch_{stat}" in metrics
    assert metrics["performance/val_num_batches"] == 8
    assert metrics["performance/val_worker_targets_time"] == 1.2
    # The historical unprefixed memory names belong to validation.
    assert metrics["performance/cpu_memory_percent"] == 40.0
    assert metrics["performance/process_rss_gb"] == 1.5
    assert "performance/gpu_memory_gb" not in metrics  # no CUDA figures in the snapshot
    assert metrics["epoch"] == 3
    assert not [k for k in metrics if k.endswith(("_min", "_max", "_slowest_rank"))]


def test_test_stage_memory_names_carry_the_stage_and_memory_can_be_off() -> None:
    cuda = {"cuda_allocated_gb": 2.0, "cuda_reserved_gb": 3.0, "system_memory_percent": 10.0}
    metrics = performance_metrics(report("test", memory=cuda))
    assert metrics["performance/test_gpu_memory_gb"] == 2.0
    assert metrics["performance/test_gpu_memory_reserved_gb"] == 3.0
    assert metrics["performance/test_cpu_memory_percent"] == 10.0
    assert "performance/gpu_memory_gb" not in metrics
    quiet = performance_metrics(report("test", memory=cuda), memory=False)
    assert not [k for k in quiet if "memory" in k]


def test_ddp_spreads_have_no_rank_numbers_in_names() -> None:
    spreads = {
        "epoch_time": rank_spread([4.0, 4.1]),
        "forward_time": rank_spread([2.0, 3.0]),
        "samples_per_sec": {"min": 7.0, "median": 7.5, "max": 8.0},
    }
    r = report("train", world_size=2, spreads=spreads, global_samples=60, global_wall_s=4.1)
    perf = performance_metrics(r)
    assert perf["performance/train_forward_time_slowest_rank"] == 1
    assert perf["performance/train_forward_time_max"] == 3.0
    assert perf["performance/train_epoch_time_median"] == pytest.approx(4.05)
    tput = throughput_metrics(r)
    assert tput["throughput/train_samples_per_sec"] == pytest.approx(60 / 4.1)
    assert tput["throughput/train_samples_per_sec_max"] == 8.0
    assert "throughput/train_samples_per_sec_slowest_rank" not in tput
    for key in [*perf, *tput]:
        assert not re.search(r"rank_?\d|_\d+$", key), key


def test_throughput_metrics() -> None:
    metrics = throughput_metrics(report("train"))
    assert metrics["throughput/train_samples_per_sec"] == pytest.approx(30 / 4.0)
    assert metrics["throughput/train_batches_per_sec"] == pytest.approx(8 / 4.0)
    assert metrics["throughput/train_data_wait_share"] == pytest.approx(0.25)
    assert metrics["performance/train_peak_rss_gb"] == 1.7
    assert math.isnan(metrics["performance/train_peak_gpu_memory_gb"])  # dropped when logged
    assert "performance/train_peak_rss_gb" not in throughput_metrics(report("train"), False)
    empty = throughput_metrics(report("val", wall_s=0.0, global_wall_s=0.0))
    assert math.isnan(empty["throughput/val_samples_per_sec"])


# -- logging -------------------------------------------------------------------------------------


class FakeLogger:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.calls.append((metrics, step))


class FakeTrainer:
    def __init__(self, zero: bool, loggers: list[FakeLogger]) -> None:
        self.is_global_zero = zero
        self.loggers = loggers
        self.global_step = 17


def fake_trainer(zero: bool, loggers: list[FakeLogger]) -> Any:
    return FakeTrainer(zero, loggers)


def test_log_to_loggers_rank_zero_only_and_drops_non_finite() -> None:
    a, b = FakeLogger(), FakeLogger()
    log_to_loggers(fake_trainer(True, [a, b]), {"x": 1.0, "y": math.nan, "z": math.inf})
    assert a.calls == [({"x": 1.0}, 17)]
    assert b.calls == a.calls
    c = FakeLogger()
    log_to_loggers(fake_trainer(False, [c]), {"x": 1.0})
    log_to_loggers(fake_trainer(True, [c]), {"y": math.nan})
    assert c.calls == []
    log_to_loggers(fake_trainer(True, []), {"x": 1.0})  # no logger


def test_log_to_loggers_at_an_explicit_step() -> None:
    a = FakeLogger()
    log_to_loggers(fake_trainer(True, [a]), {"x": 2.0}, step=40)
    assert a.calls == [({"x": 2.0}, 40)]


def test_buffered_batch_times_summarise_like_one_add_per_batch() -> None:
    # Batch times wait in a list and are folded in chunks; the summary must not change.
    epoch = EpochWindow(stage="train", epoch=0, segment_start_ns=0)
    reference = StreamingStats()
    durations_ns = [1_000_000 + 37_013 * (i % 53) for i in range(BATCH_TIMES_CHUNK + 77)]
    for i, ns in enumerate(durations_ns):
        epoch.pending_ns.append(ns)
        reference.add_many([ns / 1e9])
        if len(epoch.pending_ns) >= BATCH_TIMES_CHUNK:
            epoch.flush_batch_times()
            assert epoch.pending_ns == []
            assert epoch.batch_times.count == i + 1
    epoch.flush_batch_times()
    got, want = epoch.batch_times.summary(), reference.summary()
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-12), key


# -- CUDA events (fakes) -------------------------------------------------------------------------


class FakeTimeline:
    """GPU timeline for fake events: ``now_ms`` advances by hand; ``done_ms`` is how far the
    'GPU' has executed."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.done_ms = 0.0
        self.created = 0
        self.syncs = 0


class FakeEvent:
    def __init__(self, timeline: FakeTimeline) -> None:
        self.timeline = timeline
        self.at = math.nan
        timeline.created += 1

    def record(self) -> None:
        self.at = self.timeline.now_ms

    def query(self) -> bool:
        return self.at <= self.timeline.done_ms

    def synchronize(self) -> None:
        self.timeline.syncs += 1
        self.timeline.done_ms = max(self.timeline.done_ms, self.at)

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.query(), "elapsed_time from an unfinished event"
        assert other.query(), "elapsed_time to an unfinished event"
        return other.at - self.at


def test_cuda_phase_events_attribute_intervals_without_blocking() -> None:
    tl = FakeTimeline()
    events = CudaPhaseEvents(lambda: FakeEvent(tl))
    events.anchor()
    tl.now_ms = 5.0
    events.mark("forward")  # [0, 5] forward
    tl.now_ms = 12.0
    events.mark("backward")  # [5, 12] backward
    tl.done_ms = 6.0  # the GPU finished only the forward interval
    events.drain()
    assert events.totals_ms["forward"] == 5.0
    assert events.totals_ms["backward"] == 0.0
    assert tl.syncs == 0  # nothing blocked
    seconds = events.take()  # blocks once for the rest
    assert seconds["backward"] == pytest.approx(0.007)
    assert seconds["forward"] == 0.005
    assert tl.syncs >= 1
    assert events.totals_ms["backward"] == 0.0
    # Events are recycled: a second window creates no new ones beyond the chain's length.
    created = tl.created
    events.anchor()
    tl.now_ms = 20.0
    events.mark("optimizer")
    events.take()
    assert tl.created == created


def test_event_clock_marks_switches_and_syncs_only_when_asked() -> None:
    tl = FakeTimeline()
    events = CudaPhaseEvents(lambda: FakeEvent(tl))
    syncs: list[str] = []
    clock = _EventClock(events)
    clock.start("unattributed")
    tl.now_ms = 1.0
    clock.switch("forward")
    tl.now_ms = 4.0
    clock.switch("backward")
    tl.now_ms = 10.0
    clock.stop()
    tl.done_ms = 10.0
    gpu = events.take()
    assert gpu["unattributed"] == pytest.approx(0.001)
    assert gpu["forward"] == pytest.approx(0.003)
    assert gpu["backward"] == pytest.approx(0.006)
    assert syncs == []
    clock.sync = lambda: syncs.append(clock.current or "")
    clock.start("forward")
    clock.switch("optimizer")
    clock.stop()
    assert syncs == ["", "forward", "optimizer"]  # before start, each switch and the stop


# -- table ---------------------------------------------------------------------------------------


def test_table_shows_phases_shares_workers_and_ddp_max() -> None:
    console = Console(width=120, record=True)
    console.print(render_table(report("val")))
    text = console.export_text()
    assert "val epoch 3: 4.000 s, 8 batches, 30 samples" in text
    assert "data_wait" in text
    assert "25.0 %" in text
    assert "worker targets" in text
    assert "overlaps" in text
    spreads = {"forward_time": rank_spread([2.0, 3.0])}
    console = Console(width=120, record=True)
    console.print(render_table(report("train", spreads=spreads, world_size=2)))
    assert "3.000 (1)" in console.export_text()


def test_no_hook_is_hidden_from_lightning_dispatch() -> None:
    """Design rule: our callbacks never hide hooks (no attribute set to None, which Lightning's
    callable() check would skip): attribution comes from the public action stream instead."""
    from lightning.pytorch.callbacks import Callback
    from trainperf.lightning import ProfilerCallback, ResourceMonitorCallback

    for callback in (
        ResourceMonitorCallback(),
        ProfilerCallback(),
        PerformanceProfilerCallback(),
        ThroughputMonitorCallback(),
    ):
        hooks = [name for name in vars(Callback) if name.startswith("on_") or name == "setup"]
        assert hooks
        for name in hooks:
            assert callable(getattr(callback, name)), (type(callback).__name__, name)
        assert not any(value is None for value in vars(callback).values() if callable(value))
