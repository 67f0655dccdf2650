"""ResourceMonitorCallback on tiny CPU Trainers: metrics and files, planted problems that must
each raise their alert exactly once, and a sampler thread that never outlives the fit."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainperf.alerts import RULES
from trainperf.lightning import ResourceMonitorCallback
from trainperf.present.report import build_report, to_markdown
from trainperf.probe.resources.monitor import THREAD_NAME
from trainperf.records.monitoring import AlertEvent, ResourceSample, ResourceSummary

from trainperf_testing.memory_logger import MemoryLogger
from trainperf_testing.run_lines import read_dicts

pytestmark = pytest.mark.slow

FAST = {"interval_s": 0.05, "log_interval_s": 0.2, "rate_window_s": 0.5, "print_summary": False}


class Pairs(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``n`` random regression pairs; ``delay`` seconds of sleep per item; ``leak_bytes`` kept
    per item in a list that only grows (a planted leak)."""

    def __init__(self, n: int, delay: float = 0.0, leak_bytes: int = 0) -> None:
        self.n = n
        self.delay = delay
        self.leak_bytes = leak_bytes
        self.kept: list[bytes] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        if self.leak_bytes:
            self.kept.append(b"\x01" * self.leak_bytes)  # written pages: RSS really grows
        g = torch.Generator().manual_seed(index)
        return torch.randn(8, generator=g), torch.randn(1, generator=g)


class Tiny(L.LightningModule):
    """A linear layer; from training batch ``nan_from`` on, the loss is NaN."""

    def __init__(self, nan_from: int | None = None, fail_at: int | None = None) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 1)
        self.nan_from = nan_from
        self.fail_at = fail_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at is not None and batch_idx == self.fail_at:
            raise RuntimeError("planted failure in training_step")
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        if self.nan_from is not None and batch_idx >= self.nan_from:
            loss = loss * float("nan")
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def quiet(**rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every rule off except those given (with their settings)."""
    return {name: rules.get(name, {"enabled": False}) for name in RULES}


def fit(
    tmp_path: Path,
    callback: ResourceMonitorCallback,
    train: Dataset[Any],
    module: L.LightningModule | None = None,
    val: Dataset[Any] | None = None,
    num_workers: int = 0,
    epochs: int = 1,
) -> MemoryLogger:
    logger = MemoryLogger()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=logger,
        callbacks=[callback],
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=2 if val is not None else 0,
    )
    loader = DataLoader(train, batch_size=1, num_workers=num_workers)
    val_loader = DataLoader(val, batch_size=4) if val is not None else None
    trainer.fit(module or Tiny(), loader, val_loader)
    return logger


def fired(tmp_path: Path) -> list[str]:
    records = read_dicts(tmp_path / "perf" / "alerts.jsonl", AlertEvent)
    return [r["rule"] for r in records if r["event"] == "fired"]


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_metrics_records_summary_and_no_alerts_on_a_healthy_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    callback = ResourceMonitorCallback(**(FAST | {"print_summary": True}), worker_refresh_s=0.1)
    logger = fit(tmp_path, callback, Pairs(40, delay=0.01), val=Pairs(8), num_workers=2, epochs=2)
    assert not sampler_threads()
    names = logger.metric_names()
    for name in (
        "process_rss_gb",
        "process_cpu_percent",
        "system_cpu_percent",
        "system_memory_percent",
        "checkpoint_dir_free_gb",
        "io_train_read_mb",
    ):
        assert f"resources/{name}" in names, name
    assert "resources/process_rss_gb_max" in names  # the fit-end summary
    perf = tmp_path / "perf"
    records = read_dicts(perf / "resources.jsonl", ResourceSample)
    assert len(records) >= 2
    assert {"train"} <= {r["phase"] for r in records}
    assert all(r["rank"] == 0 for r in records)
    assert max(r["metrics"].get("resources/workers_count", 0) for r in records) >= 1
    assert any("resources/data_wait_share" in r["metrics"] for r in records)
    summary = read_dicts(perf / "resources.jsonl", ResourceSummary)
    assert len(summary) == 1
    assert summary[0]["metrics"]["resources/samples"] >= 3
    assert summary[0]["status"]["gpu"].startswith("unavailable (")
    assert fired(tmp_path) == []  # default thresholds: nothing on a healthy short run
    out = capsys.readouterr().out
    assert "Resources over the run" in out
    assert "alerts fired: none" in out


def test_planted_leak_fires_host_memory_leak_once(tmp_path: Path) -> None:
    rules = quiet(
        host_memory_leak={
            "hold_s": 0.2,
            "window_s": 0.6,
            "min_growth_mb_per_min": 60.0,
            "horizon_h": 1e6,
        }
    )
    callback = ResourceMonitorCallback(**FAST, memory_detail_s=0, rules=rules)
    dataset = Pairs(120, delay=0.01, leak_bytes=1 << 20)  # ~1 MiB per sample, ~100 MiB/s
    fit(tmp_path, callback, dataset)
    assert fired(tmp_path) == ["host_memory_leak"]
    assert callback.summary["alerts/fired"] == 1.0


def test_planted_nan_loss_fires_nan_loss_once(tmp_path: Path) -> None:
    callback = ResourceMonitorCallback(**FAST, rules=quiet(nan_loss={}))
    fit(tmp_path, callback, Pairs(40, delay=0.005), module=Tiny(nan_from=5))
    assert fired(tmp_path) == ["nan_loss"]
    record = read_dicts(tmp_path / "perf" / "alerts.jsonl", AlertEvent)[0]
    assert record["severity"] == "critical"
    assert record["step"] >= 5


def test_slow_dataset_without_workers_fires_starvation_once(tmp_path: Path) -> None:
    rules = quiet(gpu_starvation={"hold_s": 0.2})
    callback = ResourceMonitorCallback(**FAST, rules=rules)
    fit(tmp_path, callback, Pairs(40, delay=0.02), num_workers=0)
    assert fired(tmp_path) == ["gpu_starvation"]
    record = read_dicts(tmp_path / "perf" / "alerts.jsonl", AlertEvent)[0]
    assert record["evidence"]["data_wait_share"] > 0.3


def test_disk_threshold_fires_disk_space_once(tmp_path: Path) -> None:
    rules = quiet(disk_space={"min_free_gb": 1e9})  # more than any disk has
    callback = ResourceMonitorCallback(**FAST, rules=rules)
    fit(tmp_path, callback, Pairs(20, delay=0.005))
    assert fired(tmp_path) == ["disk_space"]


def test_sampler_thread_is_gone_after_an_exception_in_training_step(tmp_path: Path) -> None:
    callback = ResourceMonitorCallback(**FAST)
    with pytest.raises(RuntimeError, match="planted failure"):
        fit(tmp_path, callback, Pairs(40, delay=0.01), module=Tiny(fail_at=10))
    assert not sampler_threads()
    assert callback.monitor is None
    # The summary is still written for a post-mortem.
    assert read_dicts(tmp_path / "perf" / "resources.jsonl", ResourceSummary)


def test_sampler_thread_is_gone_after_keyboard_interrupt(tmp_path: Path) -> None:
    class Interrupting(Tiny):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 5:
                raise KeyboardInterrupt
            return super().training_step(batch, batch_idx)

    handler = signal.getsignal(signal.SIGINT)
    try:
        # Lightning turns KeyboardInterrupt into on_exception hooks, then sys.exit(1).
        with pytest.raises(SystemExit):
            fit(
                tmp_path,
                ResourceMonitorCallback(**FAST),
                Pairs(20, delay=0.01),
                module=Interrupting(),
            )
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores SIGINT after an interrupt
    assert not sampler_threads()


class LeaveTheGroup(L.Callback):
    """Ends each spawned rank as the README says a DDP script ends, with
    ``torch.distributed.destroy_process_group()`` (after the strategy's and the monitor's
    teardown): without it a finished gloo rank can abort at the interpreter's exit whatever its
    callbacks (pytorch/pytorch#190489), which failed this file's DDP test once under load."""

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


class SlowRankOne(Tiny):
    """Rank 1 sleeps in every training step: the straggler, with ``forward`` as its cause."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_rank == 1:
            time.sleep(0.02)
        return super().training_step(batch, batch_idx)


def test_ddp_straggler_rule_names_the_slow_rank_and_its_cause(tmp_path: Path) -> None:
    """Two CPU ranks (ddp_spawn, gloo), rank 1 slow in training_step: the straggler comes from
    the recorder's one epoch gather (no performance callback attached), names rank 1 and its
    cause, and fires once on rank zero (the ranks' epoch times alone are equal)."""
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_epochs=2,
        logger=False,
        callbacks=[
            ResourceMonitorCallback(**FAST, rules=quiet(straggler_rank={})),
            LeaveTheGroup(),
        ],
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(SlowRankOne(), DataLoader(Pairs(32), batch_size=2))
    records = read_dicts(tmp_path / "perf" / "alerts.jsonl", AlertEvent)
    fired_records = [r for r in records if r["event"] == "fired"]
    assert [r["rule"] for r in fired_records] == ["straggler_rank"]
    assert fired_records[0]["rank"] == 0
    assert fired_records[0]["evidence"]["rank"] == 1.0
    assert fired_records[0]["evidence"]["cause"] == "forward"
    assert "Rank 1 is a straggler" in fired_records[0]["message"]
    samples = read_dicts(tmp_path / "perf" / "resources.jsonl", ResourceSample)
    assert samples
    assert {r["rank"] for r in samples} == {0}  # rank zero writes the records
    assert not (tmp_path / "perf" / "epochs.jsonl").exists()  # the feed asks for no files


class StarvedOnRankOne(Pairs):
    """Items are slow to load on rank 1 only: rank 1 waits for data, rank 0 waits for rank 1
    in the gradient all-reduce (not for data)."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if torch.distributed.is_initialized() and torch.distributed.get_rank() == 1:
            time.sleep(0.03)
        return super().__getitem__(index)


def test_ddp_starvation_on_one_rank_is_reported_for_that_rank(tmp_path: Path) -> None:
    """Two CPU ranks (ddp_spawn, gloo) appending to one alerts.jsonl, only rank 1 starved of
    data: the alert is rank 1's, and the verdict and the report say so instead of merging it
    with rank 0's (silent) rule."""
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_epochs=3,
        logger=False,
        callbacks=[
            ResourceMonitorCallback(**FAST, rules=quiet(gpu_starvation={"hold_s": 0.2})),
            LeaveTheGroup(),
        ],
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny(), DataLoader(StarvedOnRankOne(48), batch_size=2))
    records = read_dicts(tmp_path / "perf" / "alerts.jsonl", AlertEvent)
    assert [(r["rule"], r["event"], r["rank"]) for r in records] == [("gpu_starvation", "fired", 1)]
    epoch = records[0]["epoch"]
    (finding,) = [f for f in build_report(tmp_path).findings if f.id == "alert:gpu_starvation"]
    assert finding.title.startswith(f"rank 1: alert gpu_starvation since epoch {epoch}: ")
    assert finding.evidence["still_active_at_end"] is True
    page = to_markdown(build_report(tmp_path))
    assert f"rank 1: alert gpu_starvation since epoch {epoch}" in page


def test_disabled_callback_starts_nothing(tmp_path: Path) -> None:
    callback = ResourceMonitorCallback(enabled=False)
    fit(tmp_path, callback, Pairs(8))
    assert callback.monitor is None
    assert not (tmp_path / "perf" / "resources.jsonl").exists()


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        ResourceMonitorCallback(interval_s=0)
    with pytest.raises(ValueError, match="unknown rule"):
        ResourceMonitorCallback(rules={"gpu_hot": {}})


def test_hydra_groups_instantiate_the_callback_with_overrides() -> None:
    with initialize_config_module(config_module="ocr.configs", version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "callbacks=monitoring",
                "callbacks.resource_monitor.interval_s=2.0",
                "callbacks.resource_monitor.rules.hang.enabled=false",
                "callbacks.resource_monitor.rules.gpu_starvation.data_wait_share=0.5",
            ],
        )
    assert "performance_profiler" in cfg.callbacks
    callback = instantiate(cfg.callbacks.resource_monitor)
    assert isinstance(callback, ResourceMonitorCallback)
    assert callback.interval_s == 2.0
    assert callback.rules["hang"]["enabled"] is False
    assert callback.rules["gpu_starvation"]["data_wait_share"] == 0.5


@pytest.mark.parametrize("run", ["validate", "test"])
def test_standalone_validate_and_test_are_sampled(tmp_path: Path, run: str) -> None:
    logger = MemoryLogger()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=logger,
        callbacks=[ResourceMonitorCallback(**FAST)],
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = Tiny()
    module.test_step = module.validation_step  # type: ignore[method-assign]
    getattr(trainer, run)(module, DataLoader(Pairs(24, delay=0.01), batch_size=2))
    assert not sampler_threads()
    phase = "val" if run == "validate" else "test"
    perf = tmp_path / "perf"
    records = read_dicts(perf / "resources.jsonl", ResourceSample)
    assert len(records) >= 2
    assert phase in {r["phase"] for r in records}
    assert "train" not in {r["phase"] for r in records}
    (summary,) = read_dicts(perf / "resources.jsonl", ResourceSummary)
    assert summary["run"] == run
    assert summary["metrics"]["resources/samples"] >= 2
    assert "resources/process_rss_gb_max" in logger.metric_names()


def test_a_test_after_the_fit_keeps_the_fit_summary_in_the_report(tmp_path: Path) -> None:
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=MemoryLogger(),
        callbacks=[ResourceMonitorCallback(**FAST)],
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    module = Tiny()
    module.test_step = module.validation_step  # type: ignore[method-assign]
    trainer.fit(module, DataLoader(Pairs(16, delay=0.01), batch_size=2))
    trainer.test(module, DataLoader(Pairs(16, delay=0.01), batch_size=2))
    assert not sampler_threads()
    summaries = read_dicts(tmp_path / "perf" / "resources.jsonl", ResourceSummary)
    assert [s["run"] for s in summaries] == ["fit", "test"]
    report = build_report(tmp_path)
    assert report.run.resource_summary is not None
    assert report.run.resource_summary.run == "fit"
    assert "Summary at fit end" in to_markdown(report)
