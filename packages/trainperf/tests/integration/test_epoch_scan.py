"""EpochScanCallback on tiny Trainer runs with LightningModules written here: a loss kept with its
graph in a list is named (log, perf/growth.jsonl, the verdict) within the first 3 epochs; a loss
kept as a number is not; a compiled module fed 6 batch sizes has its recompiles counted with the
changing dimension named; fixed sizes give none. The same scan nested in a
PerformanceProfilerCallback (what callbacks=monitoring builds) finds the same, runs with the
profiler disabled, feeds the resource monitor's memory_creep alert, and its time is named after
the scan. At their defaults the monitors carry the scan (a plain script with only
PerformanceProfilerCallback() names the loss), and a trainer runs one scan however many ask."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from trainperf.alerts import RULES
from trainperf.analysis.run import load_run
from trainperf.analysis.stages import summarize_stages
from trainperf.analysis.verdict import judge
from trainperf.lightning import (
    EpochScanCallback,
    PerformanceProfilerCallback,
    ResourceMonitorCallback,
    ThroughputMonitorCallback,
)
from trainperf.present.report import build_report, to_markdown
from trainperf.records.epoch_scans import GrowthRecord, RecompilesRecord
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records, read_run_record
from trainperf.records.monitoring import AlertEvent

SIZES = (8, 10, 12, 14, 16, 18)


class Sized(Dataset[torch.Tensor]):
    """One image of side ``sizes[i]`` per item (batch_size=1: one batch shape per size)."""

    def __init__(self, sizes: tuple[int, ...]) -> None:
        self.sizes = sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randn(3, self.sizes[i], self.sizes[i])


class Collecting(L.LightningModule):
    """Keeps every step's loss in ``self.losses``: as the tensor (``keep="tensor"``, its graph
    with it), or as ``loss.item()``."""

    def __init__(self, keep: str, compiled: bool = False, dynamic: bool | None = None) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.keep = keep
        self.losses: list[object] = []
        self.net = torch.compile(self.conv, backend="eager", dynamic=dynamic) if compiled else None

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        net = self.net if self.net is not None else self.conv
        loss = net(batch).pow(2).mean()
        self.losses.append(loss if self.keep == "tensor" else loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(
    tmp_path: Path,
    module: L.LightningModule,
    sizes: tuple[int, ...],
    epochs: int,
    callbacks: list[L.Callback] | None = None,
) -> L.Trainer:
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochScanCallback(batch_shapes=True)] if callbacks is None else callbacks,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, DataLoader(Sized(sizes), batch_size=1))
    return trainer


def _nested(scan: EpochScanCallback, **profiler: bool) -> list[L.Callback]:
    """The scan nested in a performance profiler, as callbacks=monitoring builds it."""
    return [PerformanceProfilerCallback(epoch_scan=scan, **profiler)]


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("nested", [False, True], ids=["apart", "nested"])
def test_loss_kept_with_graph_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, nested: bool
) -> None:
    callbacks = _nested(EpochScanCallback(batch_shapes=True)) if nested else None
    with caplog.at_level(logging.WARNING):
        trainer = _fit(tmp_path, Collecting("tensor"), (8,) * 4, epochs=3, callbacks=callbacks)
    standalone = [c for c in trainer.callbacks if isinstance(c, EpochScanCallback)]
    assert len(standalone) == (0 if nested else 1)
    warned = [r.getMessage() for r in caplog.records if "memory creep" in r.getMessage()]
    assert len(warned) == 1
    assert "Collecting.losses" in warned[0]
    assert "autograd graph" in warned[0]
    scans = read_records(GrowthRecord.path(tmp_path), GrowthRecord)
    assert [s.epoch for s in scans] == [0, 1, 2]
    assert all(s.scan_ms >= 0 and s.items > 0 for s in scans)
    run = load_run(tmp_path)
    findings = [f for f in judge(run, summarize_stages(run.epochs)) if f.id == "memory_creep"]
    assert len(findings) == 1
    assert "Collecting.losses" in findings[0].title
    assert "autograd graph" in findings[0].title
    assert findings[0].confidence == "measured"


def test_loss_kept_as_number_is_not(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        _fit(tmp_path, Collecting("item"), (8,) * 4, epochs=3)
    assert not [r for r in caplog.records if "memory creep" in r.getMessage()]
    run = load_run(tmp_path)
    assert not [f for f in judge(run, summarize_stages(run.epochs)) if f.id == "memory_creep"]
    assert len(read_records(GrowthRecord.path(tmp_path), GrowthRecord)) == 3


def test_compiled_module_six_sizes_recompiles(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        _fit(tmp_path, Collecting("item", compiled=True, dynamic=False), SIZES, epochs=2)
    epochs = read_records(RecompilesRecord.path(tmp_path), RecompilesRecord)
    assert epochs[0].compiles == len(SIZES)
    assert epochs[0].recompiles == len(SIZES) - 1
    assert epochs[0].reasons[0].dimension is not None
    assert "dimension 2" in epochs[0].reasons[0].dimension
    assert epochs[0].batch_shapes == len(SIZES)
    assert epochs[1].recompiles == 0
    assert any("torch.compile recompiles" in r.getMessage() for r in caplog.records)
    run = load_run(tmp_path)
    found = [f for f in judge(run, summarize_stages(run.epochs)) if f.id == "recompiles"]
    assert len(found) == 1
    assert "dimension 2" in found[0].title
    assert "mark_dynamic" in found[0].suggestion


def test_compiled_module_fixed_size_no_finding(tmp_path: Path) -> None:
    _fit(tmp_path, Collecting("item", compiled=True, dynamic=False), (12,) * 6, epochs=2)
    epochs = read_records(RecompilesRecord.path(tmp_path), RecompilesRecord)
    assert [e.compiles for e in epochs] == [1, 0]
    assert [e.recompiles for e in epochs] == [0, 0]
    assert [e.batch_shapes for e in epochs] == [1, 1]
    run = load_run(tmp_path)
    assert not [f for f in judge(run, summarize_stages(run.epochs)) if f.id == "recompiles"]


def test_reading_the_records_imports_no_torch() -> None:
    code = (
        "import sys\n"
        "import trainperf.probe.growth_scan, trainperf.probe.recompiles\n"
        "import trainperf.analysis.verdict\n"
        "print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_no_per_step_hook_at_the_defaults() -> None:
    """At the defaults every per-batch hook is Lightning's inherited no-op (which the clock
    leaves out); batch_shapes=True installs the one counting hook."""
    from lightning.pytorch.callbacks import Callback
    from trainperf.lightning.untimed_hooks import does_nothing

    default = EpochScanCallback()
    for hook in ("on_train_batch_start", "on_train_batch_end", "on_before_backward"):
        assert getattr(type(default), hook) is getattr(Callback, hook)
        assert does_nothing(getattr(default, hook).__func__)
    counting = EpochScanCallback(batch_shapes=True)
    assert not does_nothing(counting.on_train_batch_start.__func__)


def test_disabled_writes_nothing(tmp_path: Path) -> None:
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochScanCallback(enabled=False, batch_shapes=True)],
        default_root_dir=tmp_path,
    )
    trainer.fit(Collecting("tensor"), DataLoader(Sized((8,) * 2), batch_size=1))
    assert not (tmp_path / "perf").exists()


class HoldsRows(Sized):
    """A dataset that also holds a Python list of ~45 MB (tuples of floats)."""

    def __init__(self, sizes: tuple[int, ...]) -> None:
        super().__init__(sizes)
        self.rows = [(float(i), float(i + 1)) for i in range(400_000)]


def test_dataset_containers_recorded_at_train_start(tmp_path: Path) -> None:
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochScanCallback()],
        default_root_dir=tmp_path,
    )
    trainer.fit(Collecting("number"), DataLoader(HoldsRows((8, 8)), batch_size=1))
    info = read_run_record(tmp_path)
    assert [c.attribute for c in info.dataset_containers] == ["HoldsRows.rows"]
    assert info.dataset_containers[0].length == 400_000
    assert 35 < info.dataset_containers[0].mb < 60


def test_growth_alert_in_alerts_jsonl_corroborates_the_finding(tmp_path: Path) -> None:
    """With a resource monitor beside it, the scan's growth becomes a memory_creep alert in
    perf/alerts.jsonl (the attribute named), and the verdict attaches it to the memory_creep
    finding instead of listing it twice; only that rule is on."""
    rules = {name: {"enabled": name == "memory_creep"} for name in RULES}
    monitor = ResourceMonitorCallback(
        interval_s=0.05, log_interval_s=0.2, rate_window_s=0.5, print_summary=False, rules=rules
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochScanCallback(), monitor],
        default_root_dir=tmp_path,
    )
    trainer.fit(Collecting("tensor"), DataLoader(Sized((8,) * 4), batch_size=1))
    alerts = read_records(AlertEvent.path(tmp_path), AlertEvent)
    fired = [a for a in alerts if a.rule == "memory_creep" and a.event == "fired"]
    assert len(fired) == 1
    assert "Collecting.losses" in fired[0].message
    assert "epoch 2" in fired[0].message
    assert fired[0].suggestion.startswith("append loss.detach()")
    run = load_run(tmp_path)
    found = judge(run, summarize_stages(run.epochs))
    assert not [f for f in found if f.id == "alert:memory_creep"]
    (creep,) = [f for f in found if f.id == "memory_creep"]
    assert any("memory_creep" in line for line in creep.corroboration)


# -- nested in the performance profiler (callbacks=monitoring) -----------------------------------


def _train_epochs(root: Path) -> list[EpochRecord]:
    return [r for r in read_records(EpochRecord.path(root), EpochRecord) if r.stage == "train"]


def test_nested_scan_time_is_named_after_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delay planted in the nested scan's work is the EpochScanCallback's callback time in the
    training epoch's record (its own action inside the profiler's hook: self-time, not counted
    twice), not the profiler callback's; each epoch's phases still sum to its wall time."""
    scan = EpochScanCallback()
    planted: list[float] = []
    real_scan = scan._scan

    def slow_scan(*args: object) -> None:
        start = time.perf_counter()
        time.sleep(0.05)
        planted.append(time.perf_counter() - start)
        real_scan(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(scan, "_scan", slow_scan)
    _fit(tmp_path, Collecting("item"), (8,) * 4, epochs=3, callbacks=_nested(scan))
    epochs = _train_epochs(tmp_path)
    assert len(epochs) == len(planted) == 3
    for record, delay in zip(epochs, planted, strict=True):
        assert sum(record.phases_s.values()) == pytest.approx(record.wall_s, rel=0.02)
        named = record.callbacks_s.get("EpochScanCallback", 0.0)
        assert named >= delay  # the sleep and the scan itself
        assert named == pytest.approx(delay, rel=0.5)
        assert record.callback_hooks_s["EpochScanCallback.on_train_epoch_end"] == named
        # the profiler's forwarding hook is not timed: what it spends is its epoch report only
        assert record.callbacks_s.get("PerformanceProfilerCallback", 0.0) < 0.2 * delay
        assert record.phases_s["callbacks"] >= named


def test_nested_scan_runs_with_the_profiler_disabled(tmp_path: Path) -> None:
    """A disabled profiler records nothing (no epochs.jsonl) yet runs the enabled scan nested in
    it: growth.jsonl, recompiles.jsonl with the batch shapes its one per-step hook counted."""
    callbacks = _nested(EpochScanCallback(batch_shapes=True), enabled=False)
    _fit(tmp_path, Collecting("tensor"), (8, 10, 12), epochs=3, callbacks=callbacks)
    assert not EpochRecord.path(tmp_path).exists()
    growth = read_records(GrowthRecord.path(tmp_path), GrowthRecord)
    assert [g.epoch for g in growth] == [0, 1, 2]
    compiles = read_records(RecompilesRecord.path(tmp_path), RecompilesRecord)
    assert [c.batch_shapes for c in compiles] == [3, 3, 3]
    run = load_run(tmp_path)
    assert [f for f in judge(run, summarize_stages(run.epochs)) if f.id == "memory_creep"]


def test_nested_disabled_scan_installs_nothing(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import Callback

    profiler = PerformanceProfilerCallback(epoch_scan=EpochScanCallback(enabled=False))
    for hook in ("on_train_start", "on_train_epoch_end", "on_train_batch_start"):
        assert hook not in vars(profiler)
        assert getattr(type(profiler), hook) is getattr(Callback, hook)
    _fit(tmp_path, Collecting("tensor"), (8,) * 2, epochs=1, callbacks=[profiler])
    assert not GrowthRecord.path(tmp_path).exists()
    assert EpochRecord.path(tmp_path).exists()


def test_nested_scan_adds_no_per_step_hook_at_its_defaults() -> None:
    """Nested at its defaults the scan gives the profiler no batch hook (Lightning's dispatch
    reaches the same inherited no-ops as without it); batch_shapes=True installs one, which the
    clock leaves to the scan's own action."""
    from lightning.pytorch.callbacks import Callback
    from trainperf.lightning.untimed_hooks import does_nothing

    plain = PerformanceProfilerCallback(epoch_scan=None)
    nested = PerformanceProfilerCallback(epoch_scan=EpochScanCallback())
    default = PerformanceProfilerCallback()
    per_step = [h for h in vars(Callback) if "batch" in h or "backward" in h or "optimizer" in h]
    assert "on_train_batch_start" in per_step
    for hook in per_step:
        assert getattr(nested, hook).__func__ is getattr(plain, hook).__func__, hook
        assert getattr(default, hook).__func__ is getattr(plain, hook).__func__, hook
    assert does_nothing(nested.on_train_batch_start.__func__)
    counting = PerformanceProfilerCallback(epoch_scan=EpochScanCallback(batch_shapes=True))
    assert not does_nothing(counting.on_train_batch_start)
    assert counting._untimed_hook("on_train_batch_start")
    assert counting._untimed_hook("on_train_epoch_end")
    assert not counting._untimed_hook("setup")


def test_epoch_scan_argument_is_checked() -> None:
    with pytest.raises(ValueError, match="epoch_scan must be an EpochScanCallback"):
        PerformanceProfilerCallback(epoch_scan={"enabled": True})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ThroughputMonitorCallback: epoch_scan must be"):
        ThroughputMonitorCallback(epoch_scan="yes")  # type: ignore[arg-type]


def test_growth_alert_with_the_scan_nested(tmp_path: Path) -> None:
    """The nested scan feeds the resource monitor's memory_creep alert like a separate one."""
    rules = {name: {"enabled": name == "memory_creep"} for name in RULES}
    monitor = ResourceMonitorCallback(
        interval_s=0.05, log_interval_s=0.2, rate_window_s=0.5, print_summary=False, rules=rules
    )
    callbacks = [*_nested(EpochScanCallback()), monitor]
    _fit(tmp_path, Collecting("tensor"), (8,) * 4, epochs=3, callbacks=callbacks)
    alerts = read_records(AlertEvent.path(tmp_path), AlertEvent)
    fired = [a for a in alerts if a.rule == "memory_creep" and a.event == "fired"]
    assert len(fired) == 1
    assert "Collecting.losses" in fired[0].message
    run = load_run(tmp_path)
    (creep,) = [f for f in judge(run, summarize_stages(run.epochs)) if f.id == "memory_creep"]
    assert any("memory_creep" in line for line in creep.corroboration)


# -- the scan at the monitors' defaults ----------------------------------------------------------


@pytest.mark.slow
def test_default_profiler_names_a_loss_kept_with_its_graph(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain script with only PerformanceProfilerCallback() (no arguments): the module that
    keeps each step's loss with its graph is named, attribute and "autograd graph", in the log
    warning, perf/growth.jsonl and the report; the scan's cost is recorded with each scan."""
    with caplog.at_level(logging.WARNING):
        _fit(
            tmp_path,
            Collecting("tensor"),
            (8,) * 4,
            epochs=3,
            callbacks=[PerformanceProfilerCallback()],
        )
    warned = [r.getMessage() for r in caplog.records if "memory creep" in r.getMessage()]
    assert len(warned) == 1
    assert "Collecting.losses" in warned[0]
    assert "autograd graph" in warned[0]
    scans = read_records(GrowthRecord.path(tmp_path), GrowthRecord)
    assert [s.epoch for s in scans] == [0, 1, 2]
    assert all(s.scan_ms > 0 for s in scans)
    report = build_report(tmp_path)
    (creep,) = [f for f in report.findings if f.id == "memory_creep"]
    assert "Collecting.losses" in creep.title
    assert "autograd graph" in creep.title
    text = to_markdown(report)
    assert "Collecting.losses" in text
    assert "autograd graph" in text
    # the scan's time is named after the scan in the epoch record, as when nested explicitly
    (first, *_) = _train_epochs(tmp_path)
    assert first.callback_hooks_s.get("EpochScanCallback.on_train_epoch_end", 0.0) > 0


def test_default_scans_off_with_the_monitor() -> None:
    """A disabled monitor at its defaults carries no scan (disabled means no work); None is no
    scan; a scan passed explicitly stays, and runs even with the monitor disabled."""
    assert PerformanceProfilerCallback(enabled=False).epoch_scan is None
    assert ThroughputMonitorCallback(enabled=False).epoch_scan is None
    assert PerformanceProfilerCallback(epoch_scan=None).epoch_scan is None
    assert PerformanceProfilerCallback(epoch_scan=False).epoch_scan is None
    assert isinstance(ThroughputMonitorCallback().epoch_scan, EpochScanCallback)
    explicit = EpochScanCallback()
    assert PerformanceProfilerCallback(enabled=False, epoch_scan=explicit).epoch_scan is explicit


def _scanned(scan: EpochScanCallback | None) -> list[int]:
    """The epochs ``scan`` scanned in the last run (its bounded history)."""
    return [] if scan is None else [record.epoch for record in scan._scans]


@pytest.mark.slow
def test_one_scan_per_trainer(tmp_path: Path) -> None:
    """However many ask for a scan, a trainer runs one: a standalone EpochScanCallback over the
    monitors' default scans; else a monitor's explicit scan over another's default; else the
    first monitor's default. One growth.jsonl line per epoch."""
    profiler, throughput, alone = (
        PerformanceProfilerCallback(),
        ThroughputMonitorCallback(),
        EpochScanCallback(),
    )
    _fit(tmp_path / "a", Collecting("item"), (8,) * 2, 2, [profiler, throughput, alone])
    assert _scanned(alone) == [0, 1]
    assert _scanned(profiler.epoch_scan) == _scanned(throughput.epoch_scan) == []
    assert [g.epoch for g in read_records(GrowthRecord.path(tmp_path / "a"), GrowthRecord)] == [
        0,
        1,
    ]

    explicit = EpochScanCallback()
    throughput, profiler = (
        ThroughputMonitorCallback(),
        PerformanceProfilerCallback(epoch_scan=explicit),
    )
    _fit(tmp_path / "b", Collecting("item"), (8,) * 2, 2, [throughput, profiler])
    assert _scanned(explicit) == [0, 1]
    assert _scanned(throughput.epoch_scan) == []

    profiler, throughput = PerformanceProfilerCallback(), ThroughputMonitorCallback()
    _fit(tmp_path / "c", Collecting("item"), (8,) * 2, 2, [profiler, throughput])
    assert _scanned(profiler.epoch_scan) == [0, 1]
    assert _scanned(throughput.epoch_scan) == []
    assert len(read_records(GrowthRecord.path(tmp_path / "c"), GrowthRecord)) == 2

    # the same instance nested and attached: its hooks run once per epoch, as the callback's
    same = EpochScanCallback()
    _fit(
        tmp_path / "d",
        Collecting("item"),
        (8,) * 2,
        2,
        [PerformanceProfilerCallback(epoch_scan=same), same],
    )
    assert _scanned(same) == [0, 1]
    assert len(read_records(GrowthRecord.path(tmp_path / "d"), GrowthRecord)) == 2
