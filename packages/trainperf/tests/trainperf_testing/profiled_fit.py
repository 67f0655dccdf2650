"""A tiny Lightning module and fit that record whether a profiler ran at each step, for the
profiler callback's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader, TensorDataset


class TinyModule(L.LightningModule):
    """Linear regression; records whether a profiler was running at each training step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.profiled_steps: list[tuple[int, bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.profiled_steps.append(
            (self.current_epoch, torch.autograd.profiler._is_profiler_enabled)
        )
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(n: int = 32) -> DataLoader[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1)), batch_size=4
    )


def _fit(
    root: Path,
    *callbacks: Callback,
    epochs: int = 4,
    logger: Logger | None = None,
    validate: bool = True,
) -> TinyModule:
    """Train TinyModule for ``epochs`` (8 batches each; 2 validation batches when ``validate``)."""
    module = TinyModule()
    trainer = L.Trainer(
        default_root_dir=root,
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        callbacks=list(callbacks),
        logger=logger if logger is not None else False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=2 if validate else 0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, _loader(), _loader(8) if validate else None)
    assert trainer.current_epoch == epochs  # training completed
    return module


def _profiler_off() -> bool:
    return not torch.autograd.profiler._is_profiler_enabled and not (
        torch._C._autograd._profiler_enabled()
    )
