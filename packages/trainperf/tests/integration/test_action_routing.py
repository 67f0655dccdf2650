"""Which actions reach which listener: the stream's per-name routing and the recorder's choice of
names (its cost goal: Lightning dispatches every callback hook to every callback, and the
inherited no-ops among them must cost a dict lookup, not a clock switch)."""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.profilers import PassThroughProfiler, SimpleProfiler
from torch.utils.data import DataLoader, TensorDataset
from trainperf.core.clock import PHASES, PhaseClock
from trainperf.lightning.action_stream import ActionStream
from trainperf.lightning.attribution import ActionAttribution
from trainperf.lightning.untimed_hooks import does_nothing as _does_nothing


class Picky:
    """A listener that wants only names containing ``keep``."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.seen: list[tuple[str, str]] = []

    def wants(self, name: str) -> bool:
        self.asked.append(name)
        return "keep" in name

    def action_start(self, name: str) -> None:
        self.seen.append(("start", name))

    def action_stop(self, name: str) -> None:
        self.seen.append(("stop", name))


class Everything:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def action_start(self, name: str) -> None:
        self.seen.append(("start", name))

    def action_stop(self, name: str) -> None:
        self.seen.append(("stop", name))


def test_a_listener_gets_only_the_names_it_wants_and_is_asked_once_per_name() -> None:
    stream = ActionStream(PassThroughProfiler())
    picky = Picky()
    stream.add(picky)
    for _ in range(3):
        with stream.profile("keep.a"), stream.profile("drop.b"):
            pass
    assert picky.seen == [("start", "keep.a"), ("stop", "keep.a")] * 3
    assert sorted(picky.asked) == ["drop.b", "keep.a"]


def test_an_unwanted_name_gets_the_shared_no_op_span_only_without_a_user_profiler() -> None:
    stream = ActionStream(PassThroughProfiler())
    stream.add(Picky())
    assert stream.profile("drop.x") is stream.profile("drop.y")  # one shared object
    assert stream.profile("keep.x") is not stream.profile("drop.x")


def test_a_name_nested_in_itself_is_started_and_stopped_twice() -> None:
    # One span object per name serves every use: it must hold no per-use state.
    stream = ActionStream(PassThroughProfiler())
    picky = Picky()
    stream.add(picky)
    with stream.profile("keep.a"), stream.profile("keep.a"):
        pass
    assert picky.seen == [("start", "keep.a")] * 2 + [("stop", "keep.a")] * 2

    users = SimpleProfiler()
    timed = ActionStream(users)
    timed.add(Picky())
    with timed.profile("drop.x"):
        pass
    # The user's profiler still times what no listener wants.
    assert len(users.recorded_durations["drop.x"]) == 1


def test_a_listener_without_wants_gets_everything_and_order_is_nested() -> None:
    stream = ActionStream(PassThroughProfiler())
    everything, picky = Everything(), Picky()
    stream.add(everything)
    stream.add(picky)
    with stream.profile("keep.outer"), stream.profile("drop.inner"):
        pass
    assert everything.seen == [
        ("start", "keep.outer"),
        ("start", "drop.inner"),
        ("stop", "drop.inner"),
        ("stop", "keep.outer"),
    ]
    assert picky.seen == [("start", "keep.outer"), ("stop", "keep.outer")]


def test_adding_a_listener_re_routes_names_already_seen() -> None:
    stream = ActionStream(PassThroughProfiler())
    stream.add(Picky())
    with stream.profile("drop.x"):
        pass
    late = Everything()
    stream.add(late)
    with stream.profile("drop.x"):
        pass
    assert late.seen == [("start", "drop.x"), ("stop", "drop.x")]


# -- what the recorder listens to ---------------------------------------------------------------


def _empty() -> None:
    pass


def _documented() -> None:
    """Docstring and pass, like Lightning's base hooks."""


def _identity(self: Any, batch: Any) -> Any:
    return batch


def _works(self: Any) -> int:
    return len(str(self))


def test_does_nothing_recognises_only_bodies_without_work() -> None:
    assert _does_nothing(_empty)
    assert _does_nothing(_documented)
    assert _does_nothing(_identity)
    assert _does_nothing(L.Callback.on_train_batch_start)
    assert not _does_nothing(_works)
    assert not _does_nothing(L.LightningModule.optimizer_zero_grad)
    assert not _does_nothing(L.LightningModule.transfer_batch_to_device)
    assert not _does_nothing(print)  # a builtin: no code to read
    assert not _does_nothing(None)


class TinyModule(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.log("seen", 1.0)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Busy(L.Callback):
    def __init__(self) -> None:
        self.calls = 0

    def on_train_batch_end(self, *args: Any) -> None:
        self.calls += 1


@pytest.fixture
def recorder() -> ActionAttribution:
    busy = Busy()
    trainer = L.Trainer(
        max_epochs=1,
        callbacks=[busy],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = TinyModule()
    trainer.strategy.connect(module)
    rec = ActionAttribution(trainer, PhaseClock())
    rec.name_callbacks(trainer)
    return rec


def test_the_recorder_skips_inherited_no_op_hooks_and_transparent_names(
    recorder: ActionAttribution,
) -> None:
    key = "Busy"
    assert recorder.wants(f"[Callback]{key}.on_train_batch_end")  # the user's own body
    assert not recorder.wants(f"[Callback]{key}.on_before_zero_grad")  # inherited pass
    # Per-step on_after_backward of a callback: the module's own one closes backward.
    assert not recorder.wants(f"[Callback]{key}.on_after_backward")
    assert recorder.wants("[LightningModule]TinyModule.on_after_backward")
    # Once-per-epoch window events stay, no-op or not.
    assert recorder.wants(f"[Callback]{key}.on_train_epoch_start")
    # Module hooks: overridden with work, inherited work, inherited no-op.
    assert recorder.wants("[LightningModule]TinyModule.on_train_batch_start")
    assert recorder.wants("[LightningModule]TinyModule.optimizer_zero_grad")
    assert recorder.wants("[LightningModule]TinyModule.transfer_batch_to_device")
    assert not recorder.wants("[LightningModule]TinyModule.on_before_optimizer_step")
    # The batch-end event of the module stays even though it is an inherited no-op.
    assert recorder.wants("[LightningModule]TinyModule.on_train_batch_end")
    # Strategy steps and data fetches always; Lightning's transparent bookkeeping never.
    assert recorder.wants("[Strategy]SingleDeviceStrategy.training_step")
    assert recorder.wants("[_TrainingEpochLoop].train_dataloader_next")
    assert not recorder.wants("run_training_batch")


def test_a_hook_set_on_the_instance_is_judged_by_itself(recorder: ActionAttribution) -> None:
    trainer = recorder._trainer_ref()
    assert trainer is not None
    callback = trainer.callbacks[0]  # type: ignore[attr-defined]
    calls: list[int] = []
    callback.on_before_zero_grad = lambda *a: calls.append(1)
    assert recorder.wants("[Callback]Busy.on_before_zero_grad")


def test_skipped_no_op_hooks_leave_phases_summing_to_the_epoch(tmp_path: Any) -> None:
    from trainperf.lightning import PerformanceProfilerCallback

    class Logger(L.pytorch.loggers.logger.Logger):  # collects the epoch metrics
        def __init__(self) -> None:
            super().__init__()
            self.metrics: dict[str, float] = {}

        @property
        def name(self) -> str:
            return "mem"

        @property
        def version(self) -> int:
            return 0

        def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
            pass

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            self.metrics.update(metrics)

    busy, logger = Busy(), Logger()
    data = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4)
    trainer = L.Trainer(
        max_epochs=1,
        callbacks=[busy, PerformanceProfilerCallback()],
        logger=logger,
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyModule(), data)
    assert busy.calls == 8
    wall = logger.metrics["performance/train_epoch_time"]
    phases = sum(logger.metrics.get(f"performance/train_{phase}_time", 0.0) for phase in PHASES)
    assert phases == pytest.approx(wall, rel=0.05)


def test_our_own_batch_bookkeeping_is_not_timed_but_a_subclass_override_is() -> None:
    from trainperf.lightning import PerformanceProfilerCallback

    class Mine(PerformanceProfilerCallback):
        def on_train_batch_end(self, *args: Any) -> None:
            super().on_train_batch_end(*args)
            sum(range(100))

    trainer = L.Trainer(
        callbacks=[PerformanceProfilerCallback(), Mine()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.strategy.connect(TinyModule())
    rec = ActionAttribution(trainer, PhaseClock())
    rec.name_callbacks(trainer)
    assert not rec.wants("[Callback]PerformanceProfilerCallback.on_train_batch_end")
    assert not rec.wants("[Callback]PerformanceProfilerCallback.on_validation_batch_end")
    assert rec.wants("[Callback]Mine.on_train_batch_end")  # the user's work in it


def test_an_idle_module_hook_kept_for_its_event_switches_no_clock(
    recorder: ActionAttribution,
) -> None:
    name = "[LightningModule]TinyModule.on_train_batch_end"
    assert recorder.wants(name)
    _, phase, owner, event = recorder._info[name]
    assert (phase, owner) == ("", "")  # transparent
    assert event  # the event kept


def test_lightnings_own_module_hooks_carry_no_owner_the_users_do(
    recorder: ActionAttribution,
) -> None:
    trainer = recorder._trainer_ref()
    assert trainer is not None
    name = "[LightningModule]TinyModule.transfer_batch_to_device"
    assert recorder.wants(name)
    assert recorder._info[name][1:3] == ("transfer", "")  # Lightning's: continues batch_to_device
    module = trainer.lightning_module
    calls: list[int] = []
    module.optimizer_zero_grad = lambda *a: calls.append(1)  # the user's own, on the instance
    name = "[LightningModule]TinyModule.optimizer_zero_grad"
    assert recorder.wants(name)
    assert recorder._info[name][1:3] == ("optimizer", "TinyModule.optimizer_zero_grad")


def test_profiler_ranges_leave_out_the_same_idle_hooks_as_the_clock(
    recorder: ActionAttribution,
) -> None:
    from trainperf.lightning.profiler_window import ActionRanges

    trainer = recorder._trainer_ref()
    assert trainer is not None
    ranges = ActionRanges()
    ranges.attach(trainer)
    assert not ranges.wants("[Callback]Busy.on_before_zero_grad")  # inherited pass
    assert ranges.wants("[Callback]Busy.on_train_batch_end")  # the user's work
    assert ranges.wants("[Strategy]SingleDeviceStrategy.training_step")
    assert ranges.wants("run_training_batch")  # structure stays in the trace
