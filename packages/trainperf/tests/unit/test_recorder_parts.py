"""The ``StageRecorder``'s collaborators one by one, without a Trainer run: the attribution (the
action listener), the stage windows, the memory sampler, the rank exchange on one process, the
device clock and the output's one logger call per interval. Clocks run on a hand-advanced
``now``, so the phase totals are exact."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from trainperf.core.clock import PhaseClock, active_clock
from trainperf.core.stage import Stage
from trainperf.lightning import attribution as attribution_module
from trainperf.lightning.attribution import ActionAttribution
from trainperf.lightning.recorder_output import RecorderOutput
from trainperf.lightning.window_events import (
    EV_TRAIN_BATCH_END,
    EV_TRAIN_EPOCH_START,
    EV_TRAIN_FETCH,
)
from trainperf.probe.device_memory import MemorySampler
from trainperf.probe.worker import WorkerTiming
from trainperf.recording.cross_rank import CommTimer, RankExchange
from trainperf.recording.cuda_events import device_clock
from trainperf.recording.stage_windows import StageWindows
from trainperf.recording.subscribers import IntervalProgress
from trainperf.records.epochs import EpochRecord

MS = 1_000_000


class Now:
    """A hand-advanced ``perf_counter_ns``."""

    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        return self.t

    def advance(self, ms: int) -> None:
        self.t += ms * MS


class _Trainer:
    """What the attribution reads of a trainer (weakly referenced)."""

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = callbacks


def _trainer(callbacks: list[Any] | None = None) -> Any:
    return _Trainer(callbacks or [])


STEP = "[Strategy]SingleDeviceStrategy.training_step"
FETCH = "[_TrainingEpochLoop].train_dataloader_next"
BEFORE_BACKWARD = "[LightningModule]M.on_before_backward"
AFTER_BACKWARD = "[LightningModule]M.on_after_backward"
OPTIMIZER = "[LightningModule]M.optimizer_step"
BATCH_END = "[LightningModule]M.on_train_batch_end"


def _attribution(**kwargs: Any) -> tuple[ActionAttribution, PhaseClock, Now, list[Any]]:
    now = Now()
    clock = PhaseClock(now=now)
    seen: list[Any] = []
    trainer = _trainer()
    attribution = ActionAttribution(
        trainer,
        clock,
        on_event_start=lambda e: seen.append(("start", e)),
        on_event_stop=lambda e: seen.append(("stop", e)),
        **kwargs,
    )
    attribution._keep_trainer = trainer  # type: ignore[attr-defined]  # the weakref's target
    return attribution, clock, now, seen


def _run(attribution: ActionAttribution, now: Now, name: str, ms: int) -> None:
    attribution.action_start(name)
    now.advance(ms)
    attribution.action_stop(name)


def test_attribution_charges_the_innermost_action_and_the_backward_bracket() -> None:
    attribution, clock, now, seen = _attribution()
    attribution.start_clock()
    assert active_clock() is clock
    _run(attribution, now, FETCH, 3)
    now.advance(1)  # between actions: unattributed
    attribution.action_start(OPTIMIZER)
    _run(attribution, now, STEP, 5)  # nested inside the optimizer step: forward
    _run(attribution, now, BEFORE_BACKWARD, 1)  # its stop opens the backward pass
    now.advance(7)
    _run(attribution, now, AFTER_BACKWARD, 1)  # closes backward
    now.advance(2)  # back in the optimizer step
    attribution.action_stop(OPTIMIZER)
    _run(attribution, now, BATCH_END, 0)
    totals = clock.stop()
    ms = {k: v // MS for k, v in totals.phases_ns.items() if v}
    assert ms == {
        "data_wait": 3,
        "unattributed": 1,
        "forward": 5,
        "module_hooks": 2,
        "backward": 7,
        "optimizer": 2,
    }
    assert totals.wall_ns == 20 * MS
    # the window events were handed on: the fetch and the batch end
    assert ("start", EV_TRAIN_FETCH) in seen
    assert ("stop", EV_TRAIN_BATCH_END) in seen
    assert attribution.owner_groups["M.on_before_backward"] == (
        "module_hooks",
        "M.on_before_backward",
    )


def test_the_wait_after_ddps_last_bucket_is_sync_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    attribution, clock, now, _ = _attribution()
    monkeypatch.setattr(attribution_module, "time", SimpleNamespace(perf_counter_ns=now))
    attribution.comm = CommTimer(None)
    attribution.start_clock()
    _run(attribution, now, BEFORE_BACKWARD, 0)
    now.advance(4)
    attribution.comm.ready_ns = now.t  # the last gradient bucket handed over
    now.advance(6)
    attribution.action_start(AFTER_BACKWARD)
    attribution.action_stop(AFTER_BACKWARD)
    totals = clock.stop()
    assert totals.phases_ns["backward"] == 4 * MS
    assert totals.phases_ns["sync_wait"] == 6 * MS


def test_the_ddp_gap_between_training_batches_is_sync_wait() -> None:
    attribution, clock, now, _ = _attribution()
    attribution.start_clock()
    attribution.batch_gap()
    now.advance(3)
    _run(attribution, now, FETCH, 2)  # the next action ends the gap
    now.advance(1)
    totals = clock.stop()
    assert totals.phases_ns["sync_wait"] == 3 * MS
    assert totals.phases_ns["data_wait"] == 2 * MS
    assert totals.phases_ns["unattributed"] == 1 * MS


def test_attribution_off_still_hands_window_events_on_and_finished_nothing() -> None:
    attribution, clock, now, seen = _attribution()
    attribution.measuring = False
    attribution.action_start("[Callback]Busy.on_train_epoch_start")
    _run(attribution, now, BATCH_END, 1)
    # every event, on its start and its stop (the recorder ignores a batch end's start)
    assert seen == [
        ("start", EV_TRAIN_EPOCH_START),
        ("start", EV_TRAIN_BATCH_END),
        ("stop", EV_TRAIN_BATCH_END),
    ]
    assert not clock.running
    attribution.finished = True
    attribution.action_start("[Callback]Busy.on_train_epoch_start")
    assert len(seen) == 3


def test_an_internal_error_goes_to_on_error_not_into_the_loop() -> None:
    errors: list[BaseException] = []

    def broken(event: int) -> None:
        raise RuntimeError("planted")

    now = Now()
    trainer = _trainer()
    attribution = ActionAttribution(
        trainer, PhaseClock(now=now), on_event_start=broken, on_error=errors.append
    )
    attribution.action_start(FETCH)  # no exception here
    assert [str(e) for e in errors] == ["planted"]


def test_callbacks_are_named_by_class_then_numbered() -> None:
    class Cb:
        def __init__(self, key: str) -> None:
            self.state_key = key

    attribution, *_ = _attribution()
    attribution.name_callbacks(_trainer([Cb("a"), Cb("b"), Cb("a")]))  # type: ignore[arg-type]
    attribution.action_start("[Callback]b.on_train_epoch_start")
    assert attribution.owner_groups["Cb#2.on_train_epoch_start"] == ("callbacks", "Cb#2")


# -- windows -------------------------------------------------------------------------------------


def _windows(track_memory: bool = False) -> tuple[StageWindows, PhaseClock, Now]:
    now = Now()
    clock = PhaseClock(now=now)
    memory = MemorySampler()
    memory.track = track_memory

    def start_clock() -> None:
        clock.start("unattributed")

    return StageWindows(clock, start_clock, memory), clock, now


def _close(windows: StageWindows, stage: str) -> EpochRecord:
    record = windows.close_window(
        stage, timed=True, owner_groups={}, sync_wait_measured="none", global_step=7
    )
    assert record is not None
    return record


def test_validation_pauses_the_train_window_and_each_keeps_its_own_time() -> None:
    windows, _, now = _windows()
    windows.open_window("train", 0)
    now.advance(10)
    windows.count_batch("train")
    windows.open_window("val", 0)  # pauses train
    assert windows.open == ["train", "val"]
    now.advance(4)
    windows.count_batch("val")
    windows.count_batch("val")
    val = _close(windows, "val")  # resumes train
    assert windows.open == ["train"]
    now.advance(6)
    windows.count_batch("train")
    train = _close(windows, "train")
    assert windows.open == []
    assert (val.stage, val.wall_s, val.num_batches) == (Stage.VAL, 0.004, 2)
    assert (train.stage, train.wall_s, train.num_batches) == (Stage.TRAIN, 0.016, 2)
    assert sum(train.phases_s.values()) == pytest.approx(train.wall_s)
    assert train.global_step == 7
    assert train.device == "cpu"


def test_worker_timings_give_samples_and_input_figures() -> None:
    windows, _, now = _windows()
    windows.open_window("train", 3)
    state = windows.states["train"]
    timing = WorkerTiming(
        worker_id=0,
        fetch_ns=2 * MS,
        collate_ns=MS,
        parts_ns={},
        samples=4,
        wait_ns=3 * MS,
        worker_wait_ns=2 * MS,
        fetch_timed=True,
    )
    state.add_timing(timing)
    now.advance(5)
    windows.count_batch("train")
    record = _close(windows, "train")
    assert record.epoch == 3
    assert (record.samples, record.batch_size) == (4, 4)
    assert record.worker_s == {"fetch": 0.002, "collate": 0.001}
    assert record.data_wait_causes_s == {"worker": 0.002, "receive": 0.001}


def test_a_closed_window_tracked_only_gives_no_record_and_a_stale_one_is_dropped() -> None:
    windows, clock, _ = _windows()
    windows.open_window("val", 0, timed=False)
    assert not clock.running
    assert (
        windows.close_window(
            "val", timed=False, owner_groups={}, sync_wait_measured="none", global_step=0
        )
        is None
    )
    windows.open_window("test", 0)
    windows.open_window("test", 0)  # its end never came: the stale one goes
    assert windows.open == ["test"]
    windows.forget()
    assert windows.open == []
    assert windows.innermost() is None


def test_memory_peaks_and_gauges_when_tracked() -> None:
    windows, _, _ = _windows(track_memory=True)
    windows.open_window("train", 0)
    record = _close(windows, "train")
    assert record.peak_rss_gb > 0
    assert record.memory["process_rss_gb"] is not None
    assert "system_memory_percent" in record.memory  # the full snapshot at the close
    untracked, _, _ = _windows()
    untracked.open_window("train", 0)
    assert _close(untracked, "train").memory == {}


def test_memory_sampler_paces_in_epoch_samples() -> None:
    sampler = MemorySampler(period_ns=1000)
    assert not sampler.due(10**12)  # tracking off
    sampler.track = True
    snap = sampler.sample()
    assert set(snap) <= {"process_rss_gb", "cuda_max_allocated_gb"}
    assert not sampler.due(sampler.last_ns + 999)
    assert sampler.due(sampler.last_ns + 1000)
    assert "system_memory_percent" in sampler.sample(full=True)


# -- ranks, device, output -----------------------------------------------------------------------


def test_one_process_exchange_is_the_identity_and_hooks_nothing() -> None:
    exchange = RankExchange(1)
    assert exchange.sync_wait_measured == "none"
    assert exchange.hook(torch.nn.Linear(2, 2)) is None
    record: Any = object()
    assert exchange.gather(record) == (record, None)
    assert exchange.gather(None) == (None, None)
    assert exchange.straggler is None


def test_ranks_without_a_process_group_turn_recording_off_with_the_reason() -> None:
    exchange = RankExchange(2)
    assert exchange.sync_wait_measured == "gather"
    assert exchange.hook(torch.nn.Linear(2, 2)) is None  # not a DDP model
    report, off = exchange.gather(None)
    assert report is None
    assert off == "2 ranks but no torch.distributed process group to exchange through"


def test_a_cpu_run_gets_a_plain_clock_and_no_events() -> None:
    clock, events = device_clock(torch.device("cpu"))
    assert type(clock) is PhaseClock
    assert events is None


class _Sub:
    def __init__(self, metrics: Mapping[str, float] | None) -> None:
        self.metrics = metrics
        self.reports: list[EpochRecord] = []
        self.progress: list[IntervalProgress] = []

    def _receive_interval(self, progress: IntervalProgress) -> Mapping[str, float] | None:
        self.progress.append(progress)
        return self.metrics

    def _receive_report(self, report: EpochRecord) -> None:
        self.reports.append(report)


class _Logger:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int | None]] = []

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append((metrics, step))


def test_the_interval_is_one_logger_call_for_every_subscriber() -> None:
    windows, clock, now = _windows()
    windows.open_window("train", 2)
    now.advance(8)
    window = windows.count_batch("train")
    assert window is not None
    logger = _Logger()
    trainer: Any = SimpleNamespace(loggers=[logger], is_global_zero=True, global_step=11)
    subs = [_Sub({"a/x": 1.0}), _Sub(None), _Sub({"b/y": 2.0})]
    RecorderOutput().interval(trainer, window, window.last_batch_end_ns, 1, clock, subs)  # type: ignore[arg-type]
    assert logger.calls == [({"a/x": 1.0, "b/y": 2.0}, 11)]
    (progress,) = subs[1].progress
    assert (progress.stage, progress.epoch, progress.num_batches) == ("train", 2, 1)
    assert progress.elapsed_s == window.last_batch_end_ns / 1e9  # the window's (real) time
    assert progress.phases_s == {}  # no run files: nothing to record


def test_epoch_reports_are_charged_to_each_monitor_under_callbacks() -> None:
    windows, clock, _ = _windows()
    windows.open_window("train", 0)
    record = _close(windows, "train")
    clock.start("sync_wait")
    subs = [_Sub(None)]
    RecorderOutput().epoch(record, subs, clock)  # type: ignore[arg-type]
    assert subs[0].reports == [record]
    assert clock.current == "callbacks"
    assert clock.current_owner == "_Sub.epoch_report"
