"""What the log says when a run is stopped by SIGTERM: our own line (the signal, where it
stopped, the exit code) and the saved checkpoint by name, never Lightning's "An SIGTERMException
was raised with message: , saved checkpoint to ..." (the exception has no message).

In-process tiny Trainers: a callback sends the process SIGTERM after a known batch (Lightning's
handler turns it into a stop at the end of the next batch); the log records are collected from
our logger and from the one Lightning's ``rank_zero_info`` writes to."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import InterruptCheckpoint, PerformanceProfilerCallback
from trainperf.lightning.interruption import Interruption, _lightning_info_log, interruption_words

pytestmark = pytest.mark.slow


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Sigterm(L.Callback):
    """Sends this process SIGTERM at the end of epoch 1's batch 1, once Lightning's handler is
    in place (it is while ``fit`` runs in the main thread; without it the test fails instead of
    ending pytest)."""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        if trainer.current_epoch == 1 and args[-1] == 1:
            assert callable(signal.getsignal(signal.SIGTERM)), "Lightning's handler is missing"
            os.kill(os.getpid(), signal.SIGTERM)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lines() -> Iterator[list[str]]:
    handler = Lines()
    loggers = [logging.getLogger("trainperf"), _lightning_info_log()]
    for logger in loggers:
        assert logger is not None
        logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        for logger in loggers:
            assert logger is not None
            logger.removeHandler(handler)


def _stopped(tmp_path: Path, checkpoint: ModelCheckpoint) -> int:
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        callbacks=[PerformanceProfilerCallback(epoch_scan=None), checkpoint, Sigterm()],
    )
    data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
    with pytest.raises(SystemExit) as stopped:
        trainer.fit(Tiny(), DataLoader(data, batch_size=2))
    return int(stopped.value.code or 0)


def test_a_plain_model_checkpoint_save_is_worded_by_us(tmp_path: Path, lines: list[str]) -> None:
    saver = ModelCheckpoint(dirpath=tmp_path / "checkpoints", save_on_exception=True)
    assert _stopped(tmp_path, saver) == 143
    saved = tmp_path / "checkpoints" / "epoch=1-step=6.ckpt"  # 4 + batches 0, 1 of epoch 1
    assert saved.is_file(), sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    said = "\n".join(lines)
    assert "SIGTERM received at epoch 1, after batch 2: the run stops there (exit code 143)" in (
        lines
    ), said
    assert f"SIGTERM: saved checkpoint {saved}" in lines, said
    assert "was raised with message" not in said


def test_interrupt_checkpoint_names_its_save_once(tmp_path: Path, lines: list[str]) -> None:
    saver = InterruptCheckpoint(dirpath=tmp_path / "checkpoints", filename="last", monitor=None)
    assert _stopped(tmp_path, saver) == 143
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert last.is_file()
    said = "\n".join(lines)
    assert [line for line in lines if "received" in line] == [
        "SIGTERM received at epoch 1, after batch 2: the run stops there (exit code 143)"
    ], said
    # the epoch-0 save went to the same last.ckpt: the interruption's save is still named
    assert [line for line in lines if "saved checkpoint" in line] == [
        f"SIGTERM: saved checkpoint {last}"
    ], said


def test_where_it_stopped_in_words() -> None:
    assert interruption_words(Interruption("SIGINT", 2, 0, True, between_epochs=True)) == (
        "SIGINT received between epochs 1 and 2: the run stops there (exit code 130)"
    )
    assert interruption_words(Interruption("SIGINT", 0, 4, False)) == (
        "SIGINT received at epoch 0, in batch 5: the run stops there (exit code 130)"
    )
