"""One test per seam the performance callbacks rely on in Lightning. Each fails when Lightning
changes the behaviour relied on (then widen or narrow ``interpose.TESTED_VERSIONS`` accordingly);
torch's seams are checked at run time (``trainperf.probe.loader_seams``, one unit test each):

1. the action stream: names, nesting and order of Lightning's profiler actions;
2. ``trainer.profiler`` can be replaced after Lightning set it up, and Lightning calls the one
   in place for every later action and for ``describe()`` after the callbacks' teardown;
3. ``Strategy.process_dataloader`` sees each DataLoader before Lightning creates its iterator;
4. manual optimization: the precision plugin brackets ``manual_backward`` with the
   ``on_before_backward`` / ``on_after_backward`` hooks, and ``optimizer_step`` is an action;
5. DDP: Lightning syncs the ranks before every training batch (``_broadcast_sigterm_tensor``);
6. the gates: a Lightning outside the tested range, or a torch without one of the seams, gives
   one warning and no DataLoader interposition, while phases are still measured; with every
   seam present, worker timing and no warning.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.profilers import Profiler
from torch.utils.data import DataLoader, TensorDataset
from trainperf.frameworks.lightning_grammar import classify_action
from trainperf.lightning import (
    PerfCallbackWarning,
    PerformanceProfilerCallback,
    interpose,
    recorder,
)
from trainperf.lightning.action_stream import add_listener, remove_listener
from trainperf.probe import loader_seams
from trainperf.records.epochs import EpochRecord

from trainperf_testing.run_lines import read_dicts

pytestmark = pytest.mark.slow


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, tuple[str, ...]]] = []  # (start|stop, name, stack)
        self.stack: list[str] = []

    def action_start(self, name: str) -> None:
        self.events.append(("start", name, tuple(self.stack)))
        self.stack.append(name)

    def action_stop(self, name: str) -> None:
        if self.stack and self.stack[-1] == name:
            self.stack.pop()
        self.events.append(("stop", name, tuple(self.stack)))


class Listen(L.Callback):
    def __init__(self) -> None:
        self.rec = Recorder()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        add_listener(trainer, self.rec)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        remove_listener(trainer, self.rec)


class Module(L.LightningModule):
    def __init__(self, manual: bool = False) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.automatic_optimization = not manual

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = self.net(batch[0]).pow(2).mean()
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        assert not isinstance(opt, list)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return None

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v", self.net(batch[0]).sum())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


def fit(tmp_path: Path, callbacks: list[L.Callback], manual: bool = False, **kw: Any) -> L.Trainer:
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "max_epochs": 1,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "default_root_dir": tmp_path,
        "callbacks": callbacks,
    }
    options.update(kw)
    trainer = L.Trainer(**options)
    trainer.fit(Module(manual), loader(), loader())
    return trainer


def starts(rec: Recorder) -> list[tuple[str, tuple[str, ...]]]:
    return [(name, stack) for kind, name, stack in rec.events if kind == "start"]


def test_seam_action_stream_names_and_nesting(tmp_path: Path) -> None:
    listen = Listen()
    fit(tmp_path, [listen], enable_checkpointing=True)
    seen = starts(listen.rec)
    names = [n for n, _ in seen]
    phases = {classify_action(n).phase for n in names}
    assert {"data_wait", "transfer", "forward", "backward", "optimizer", "checkpoint"} <= phases
    assert {"callbacks", "module_hooks"} <= phases
    # Automatic optimization: training_step and backward run inside the optimizer step.
    step = next(s for n, s in seen if n.endswith("].training_step") or n.endswith(".training_step"))
    assert any(a.endswith("Module.optimizer_step") for a in step)
    backward = next(s for n, s in seen if n == "[Strategy]SingleDeviceStrategy.backward")
    assert any(a.endswith("Module.optimizer_step") for a in backward)
    # The module's batch-end hook is the last action of a batch (after every callback's).
    batch_end = [
        i for i, n in enumerate(names) if n == "[LightningModule]Module.on_train_batch_end"
    ]
    assert batch_end
    for i in batch_end:
        assert names[i - 1].endswith(".on_train_batch_end")
    # Transfer hooks run inside the strategy's batch_to_device.
    transfer = next(s for n, s in seen if n == "[LightningModule]Module.transfer_batch_to_device")
    assert transfer[-1] == "[Strategy]SingleDeviceStrategy.batch_to_device"
    # The strategy's on_validation_end is the last action of a validation run.
    val_end = names.index("[Strategy]SingleDeviceStrategy.on_validation_end")
    assert not any("validation" in n for n in names[val_end + 1 :])
    assert "save_checkpoint" in names
    # Every action is stopped in order (the stream is well nested), the teardown in which the
    # listener left too: a span's stop reaches the listeners its start reached.
    assert listen.rec.stack == []


def test_seam_manual_backward_is_bracketed_by_the_backward_hooks(tmp_path: Path) -> None:
    listen = Listen()
    fit(tmp_path, [listen], manual=True, limit_val_batches=0)
    names = [n for n, _ in starts(listen.rec)]
    i = names.index("[LightningModule]Module.on_before_backward")
    assert names[i + 1].endswith(".on_after_backward")  # nothing in between: backward ran there
    assert "[Strategy]SingleDeviceStrategy.backward" not in names  # no action of its own
    opt = next(s for n, s in starts(listen.rec) if n == "optimizer_step")
    assert opt[-1] == "[Strategy]SingleDeviceStrategy.training_step"


class CountingProfiler(Profiler):
    def __init__(self) -> None:
        super().__init__()
        self.starts = 0
        self.described = 0

    def start(self, action_name: str) -> None:
        self.starts += 1

    def stop(self, action_name: str) -> None:
        pass

    def summary(self) -> str:
        return ""

    def describe(self) -> None:
        self.described += 1


def test_seam_replaced_profiler_receives_actions_and_describe_goes_to_the_users(
    tmp_path: Path,
) -> None:
    user = CountingProfiler()
    listen = Listen()
    trainer = fit(tmp_path, [listen], profiler=user)
    assert trainer.profiler is user
    assert user.described == 1
    ours = sum(1 for kind, *_ in listen.rec.events if kind == "start")
    # The user's profiler saw every action we saw, plus the ones before our setup.
    assert user.starts >= ours > 50


class LoaderWatch(L.Callback):
    def __init__(self) -> None:
        self.order: list[str] = []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        strategy = trainer.strategy
        original = strategy.process_dataloader

        def process(dataloader: Any) -> Any:
            out = original(dataloader)
            self.order.append("process")
            watch = self

            class Watched(type(out)):  # type: ignore[misc]
                def __iter__(self) -> Any:
                    watch.order.append("iter")
                    return super().__iter__()

            out.__class__ = Watched
            return out

        strategy.process_dataloader = process  # type: ignore[method-assign]


def test_seam_process_dataloader_sees_each_loader_before_its_iterator(tmp_path: Path) -> None:
    watch = LoaderWatch()
    fit(tmp_path, [watch], limit_val_batches=0)
    assert watch.order[:2] == ["process", "iter"]


def test_seam_ddp_syncs_ranks_before_every_training_batch() -> None:
    """Lightning broadcasts a SIGTERM flag at the start of each DDP training batch, outside any
    profiler action; the recorder counts that gap as sync_wait
    (``interpose.syncs_before_train_batch``)."""
    assert callable(getattr(_TrainingEpochLoop, "_broadcast_sigterm_tensor", None))
    source = inspect.getsource(_TrainingEpochLoop.advance)
    sync = source.index("_broadcast_sigterm_tensor()")
    fetch = source.index("next(data_fetcher)")
    assert sync < fetch  # before the batch is fetched, i.e. right after the previous batch ended
    assert "torch.distributed.broadcast" in inspect.getsource(
        _TrainingEpochLoop._broadcast_sigterm_tensor
    )


@pytest.fixture
def unwarned(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test sees the once-per-process warning afresh; the torch seams are checked again."""
    monkeypatch.setattr(recorder, "WORKER_TIMING_WARNED", set())
    monkeypatch.setattr(loader_seams, "_FOUND", None)


def _ours(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, PerfCallbackWarning)]


def _assert_public_stream_only(tmp_path: Path, trainer: L.Trainer) -> None:
    (record,) = read_dicts(tmp_path / "perf" / "epochs.jsonl", EpochRecord)
    assert record["worker_s"] == {}  # no worker-side timing ...
    assert record["phases_s"]["forward"] > 0  # ... but the phases are there
    assert record["samples"] == 8  # batch sizes from the batch hooks instead
    assert "process_dataloader" not in vars(trainer.strategy)


def test_seam_version_gate_degrades_to_the_public_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unwarned: None
) -> None:
    assert interpose.check_versions() is None  # the installed Lightning is the tested one
    assert "outside the range" in str(interpose.check_versions({"lightning": "3.0.0"}))
    assert interpose.check_versions({"torch": "2.99.0+cu128"}) is None  # torch: no range
    monkeypatch.setitem(interpose.TESTED_VERSIONS, "lightning", ("0.0.1", "0.0.2"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path, [PerformanceProfilerCallback()], limit_val_batches=0)
    (message,) = _ours(caught)
    assert "DataLoader worker timing" in message
    assert "lightning" in message
    _assert_public_stream_only(tmp_path, trainer)


def test_seam_missing_torch_seam_turns_worker_timing_off_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unwarned: None
) -> None:
    """A torch whose worker loop no longer takes ``init_fn``: one warning naming it, for the
    process (a second fit says nothing), and the public stream only."""

    def _worker_loop(dataset_kind, dataset, index_queue, data_queue, done_event, auto_collation,
                     collate_fn, drop_last, base_seed, worker_setup, worker_id, num_workers,
                     persistent_workers, shared_seed):  # fmt: skip  # type: ignore[no-untyped-def]
        raise AssertionError("never called")

    monkeypatch.setattr(torch.utils.data._utils.worker, "_worker_loop", _worker_loop)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path / "a", [PerformanceProfilerCallback()], limit_val_batches=0)
        fit(tmp_path / "b", [PerformanceProfilerCallback()], limit_val_batches=0)
    (message,) = _ours(caught)
    assert "torch.utils.data._utils.worker._worker_loop(collate_fn, init_fn, worker_id)" in message
    assert "no parameter init_fn" in message
    _assert_public_stream_only(tmp_path / "a", trainer)


def test_seam_all_torch_seams_present_times_workers_without_a_word(
    tmp_path: Path, unwarned: None
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path, [PerformanceProfilerCallback()], limit_val_batches=0)
    assert _ours(caught) == []
    (record,) = read_dicts(tmp_path / "perf" / "epochs.jsonl", EpochRecord)
    assert record["worker_s"]["collate"] > 0
    assert record["worker_s"]["fetch"] > 0
    assert "process_dataloader" not in vars(trainer.strategy)  # restored after the fit
