"""A ``trainperf try`` trial window on a plain Lightning app (no Hydra, no config of ours): the
performance callbacks stop the fit after warm-up + measured batches, run no validation, write no
checkpoint and no logs, and put their perf files in the trial's folder."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset
from trainperf.cli.trial.trial_process import stage_speed
from trainperf.core.trial_window import ENV_VAR, TryWindow
from trainperf.lightning import ThroughputMonitorCallback
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records


class Counting(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.val_steps = 0

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.val_steps += 1
        self.log("val_loss", self.layer(batch[0]).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(root: Path, min_epochs: int | None = None) -> tuple[L.Trainer, Counting]:
    data = TensorDataset(torch.randn(40, 4))
    module = Counting()
    trainer = L.Trainer(
        max_epochs=3,
        min_epochs=min_epochs,
        default_root_dir=root,
        accelerator="cpu",
        callbacks=[
            ThroughputMonitorCallback(flops=False, peak_memory=False),
            ModelCheckpoint(dirpath=root / "ckpt", save_last=True),
            LearningRateMonitor(),  # requires a logger: the window must leave it one
        ],
        logger=CSVLogger(root, name="csv"),
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(module, DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    return trainer, module


def test_window_stops_after_warmup_and_measured_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trial = tmp_path / "trial"
    monkeypatch.setenv(ENV_VAR, TryWindow(2, 5, trial).to_env())
    trainer, module = _fit(tmp_path / "app_root", min_epochs=2)  # min_epochs must not hold it
    assert trainer.global_step == 7
    assert module.val_steps == 0
    assert not (tmp_path / "app_root" / "ckpt").exists()
    # Lightning creates the loggers' experiments (a CSV logger's empty folder) before any
    # callback's setup; nothing is logged into it
    assert [p for p in (tmp_path / "app_root" / "csv").rglob("*") if p.is_file()] == []
    assert not (tmp_path / "app_root" / "perf").exists()
    epochs = read_records(EpochRecord.path(trial), EpochRecord)
    assert sum(len(r.batch_times_s) for r in epochs if r.stage == "train") == 7
    speed = stage_speed(trial, "train", 2, 5)
    assert speed is not None
    assert speed > 0


def test_window_keeps_what_the_change_concerns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trial = tmp_path / "trial"
    window = TryWindow(1, 12, trial, frozenset({"val", "checkpoint", "loggers"}))
    monkeypatch.setenv(ENV_VAR, window.to_env())
    trainer, module = _fit(tmp_path / "app_root")
    assert trainer.global_step == 13  # into the second epoch (10 batches each)
    assert module.val_steps > 0
    assert (tmp_path / "app_root" / "ckpt" / "last.ckpt").is_file()
    assert (tmp_path / "app_root" / "csv").is_dir()


def test_without_the_variable_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    trainer, module = _fit(tmp_path / "app_root")
    assert trainer.global_step == 30
    assert module.val_steps > 0
    assert (tmp_path / "app_root" / "perf" / "epochs.jsonl").is_file()


def _window_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if ENV_VAR in str(w.message)]


def test_a_stray_window_announces_itself_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # exported in a shell (no owner, or an owner that is no ancestor): the window applies, and
    # says so once, naming the variable and what it does
    trial = tmp_path / "trial"
    monkeypatch.setenv(ENV_VAR, TryWindow(1, 3, trial).to_env())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer, _ = _fit(tmp_path / "app_root")
    assert trainer.global_step == 4
    (message,) = _window_warnings(record)
    assert f"{ENV_VAR} is set" in message
    assert "outside `trainperf try`" in message
    assert (
        "It stops after 4 training batches, runs no validation, saves no checkpoint, logs to no "
        "logger, and writes its perf/ files into"
    ) in message
    assert f"Unset {ENV_VAR}" in message


def test_a_window_set_by_ocr_perf_try_is_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # trainperf try names itself as the owner; it is an ancestor of the trial's process (here:
    # the test's parent process stands for it)
    window = TryWindow(1, 3, tmp_path / "trial", owner=os.getppid())
    monkeypatch.setenv(ENV_VAR, window.to_env())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer, _ = _fit(tmp_path / "app_root")
    assert trainer.global_step == 4
    assert _window_warnings(record) == []
