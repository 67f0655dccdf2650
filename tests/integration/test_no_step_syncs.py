"""Our own callbacks never read a logged tensor for a step they print nothing for.

On a GPU every host read of a device tensor (``.item()``, ``float(t)``) is a host-device sync,
and reading Lightning's progress-bar metrics converts every ``prog_bar=True`` tensor with
``.item()`` (Lightning issues 21232, 20995). On an H200 in bf16-mixed our plain progress bar
did that at every batch, to build a line it printed every 30 s: 13-22 ms of "callbacks" per
batch. On the CPU the same reads are plain calls, so these tests count them: every tensor read
made (directly or through Lightning) from a frame of our callbacks' package or ``ocr/console.py``
on the training thread, per training batch, against the lines the bar printed. The bars run on
a fake clock that advances one second per training batch, so which batches print is exact.

The resource monitor's sampler thread reads the latest loss once per sample interval (not per
step, and not on the training thread); reads on other threads are not counted.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import CSVLogger
from omegaconf import open_dict
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import (
    PerformanceProfilerCallback,
    PhaseRichProgressBar,
    PlainProgressBar,
    ResourceMonitorCallback,
    ThroughputMonitorCallback,
)

from ocr.runtime import build_callbacks
from tests.unit.test_runtime import _compose

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
OURS = (
    str(REPO_ROOT / "packages" / "trainperf" / "src" / "trainperf" / "lightning"),
    str(REPO_ROOT / "packages" / "trainperf" / "src" / "trainperf" / "present" / "console.py"),
)
TRAIN_BATCHES = 60


class TinyModule(L.LightningModule):
    """Linear regression logging like ``OCRLightningModule``: ``train/loss`` on the progress
    bar every step, ``val/loss`` and ``val/hmean`` (what the default checkpoint monitors)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def _loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch[0]))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = self._loss(batch)
        self.log("val/loss", loss, prog_bar=True, batch_size=len(batch[0]))
        self.log("val/hmean", 1.0 / (1.0 + loss), prog_bar=True, batch_size=len(batch[0]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Ticks(L.Callback):
    """The fake clock: one second per training batch; remembers the batch being run."""

    def __init__(self) -> None:
        self.now = 0.0
        self.batch: int | None = None

    def __call__(self) -> float:
        return self.now

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, i: int) -> None:
        self.now += 1.0
        self.batch = i

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.batch = None  # a validation's reads (at its end) belong to no training batch

    on_train_epoch_end = on_validation_start


class Reads:
    """Counts tensor reads (``item``, ``__float__``, ``tolist``) made from our code on the
    training thread, keyed by the batch that was running (``None``: outside a batch)."""

    def __init__(self, ticks: Ticks) -> None:
        self.ticks = ticks
        self.per_batch: Counter[int | None] = Counter()
        self.thread = threading.get_ident()

    def ours(self) -> bool:
        if threading.get_ident() != self.thread:
            return False
        frame: Any = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename.startswith(OURS):
                return True
            frame = frame.f_back
        return False

    def wrap(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        original = getattr(torch.Tensor, name)

        def read(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if self.ours():
                self.per_batch[self.ticks.batch] += 1
            return original(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, read)


@pytest.fixture
def ticks_and_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[Ticks, Reads]:
    ticks = Ticks()
    reads = Reads(ticks)
    for name in ("item", "__float__", "tolist"):
        reads.wrap(monkeypatch, name)
    return ticks, reads


def _monitoring_callbacks(run_dir: Path) -> list[L.Callback]:
    """What ``callbacks=monitoring`` builds, with the plain progress bar it gets when stdout is
    not a terminal (as under pytest)."""
    cfg = _compose("callbacks=monitoring")
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(cfg)
    return build_callbacks(cfg)


def _loaders() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(4 * TRAIN_BATCHES, 4, generator=g),
        torch.randn(4 * TRAIN_BATCHES, 1, generator=g),
    )
    return DataLoader(data, batch_size=4), DataLoader(data, batch_size=4)


def _fit(tmp_path: Path, callbacks: list[L.Callback]) -> None:
    train, val = _loaders()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_val_batches=3,
        num_sanity_val_steps=2,
        log_every_n_steps=1_000,  # Lightning's own log reads stay out of the way (not ours anyway)
        default_root_dir=tmp_path,
        logger=CSVLogger(tmp_path),  # the learning-rate monitor needs one
        callbacks=callbacks,
    )
    trainer.fit(TinyModule(), train, val)


def test_monitoring_with_the_plain_bar_reads_logged_tensors_only_for_printed_lines(
    tmp_path: Path, ticks_and_reads: tuple[Ticks, Reads], capsys: pytest.CaptureFixture[str]
) -> None:
    ticks, reads = ticks_and_reads
    callbacks = _monitoring_callbacks(tmp_path / "run")
    kinds = {type(c) for c in callbacks}
    assert {
        PlainProgressBar,
        PerformanceProfilerCallback,
        ThroughputMonitorCallback,
        ResourceMonitorCallback,
    } <= kinds
    (bar,) = [c for c in callbacks if isinstance(c, PlainProgressBar)]
    assert bar.interval_s == 30.0  # what ocr-train gives a run whose stdout is a log file
    bar.clock = ticks
    _fit(tmp_path, [ticks, *callbacks])

    printed = {29, 59}  # one second per batch, a line every 30: after batches 30 and 60
    read_batches = {b for b in reads.per_batch if b is not None}
    assert read_batches == printed, reads.per_batch
    for b in printed:  # one logged tensor (train/loss) per printed line, read once
        assert reads.per_batch[b] == 1, reads.per_batch
    unprinted = [b for b in range(TRAIN_BATCHES) if b not in printed]
    assert all(reads.per_batch[b] == 0 for b in unprinted)
    lines = capsys.readouterr().out.splitlines()
    train_lines = [line for line in lines if line.startswith("Epoch 0/0 train ")]
    assert [line.split()[3] for line in train_lines] == ["30/60", "60/60"]
    assert all("train/loss=" in line for line in train_lines)
    assert [line for line in lines if " done in " in line]


def test_the_rich_bar_reads_metrics_every_refresh_not_every_batch(
    tmp_path: Path, ticks_and_reads: tuple[Ticks, Reads]
) -> None:
    """Lightning's Rich bar reads (and converts) the progress-bar metrics at every training
    batch; ours every ``REFRESH_S`` (2 s: here every second batch of the fake clock)."""
    ticks, reads = ticks_and_reads
    bar = PhaseRichProgressBar(clock=ticks)
    _fit(tmp_path, [ticks, bar, PerformanceProfilerCallback()])
    read_batches = sorted(b for b in reads.per_batch if b is not None)
    assert read_batches == list(range(0, TRAIN_BATCHES, 2)), reads.per_batch
    assert all(reads.per_batch[b] == 1 for b in read_batches)
