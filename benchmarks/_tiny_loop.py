"""The tiny training loop the overhead benchmarks share (a helper module, not a script).

A regression model small enough that Lightning's loop and the callbacks are a visible part of
each step, trained on in-memory tensors with ``num_workers=0``, timed by :class:`StepClock` from
step ``warmup`` to the end of the first epoch (steady state: no start-up, no worker spawn).
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class StepClock(Callback):
    """First in the callback list: times steps ``warmup``..end of the first training epoch.

    Two clocks: wall time, and the main thread's CPU time. With ``num_workers=0`` and one torch
    thread every step runs on the main thread, so its CPU time holds all the work, callbacks
    included, but not time the thread spent descheduled while another tenant of a shared VM ran.
    """

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.start_ns = self.end_ns = 0
        self.start_cpu_ns = self.end_cpu_ns = 0
        self.steps = 0

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.warmup:
            self.start_ns = time.perf_counter_ns()
            self.start_cpu_ns = time.thread_time_ns()

    def on_train_epoch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.end_ns = time.perf_counter_ns()
        self.end_cpu_ns = time.thread_time_ns()
        self.steps = trainer.global_step - self.warmup

    def per_step_s(self) -> float:
        return (self.end_ns - self.start_ns) / self.steps / 1e9

    def cpu_per_step_s(self) -> float:
        return (self.end_cpu_ns - self.start_cpu_ns) / self.steps / 1e9

    def us_per_step(self) -> float:
        return self.per_step_s() * 1e6


class Tiny(L.LightningModule):
    """``width`` -> 1 regression: one linear layer, or ``width`` -> ``hidden`` -> 1 with a ReLU."""

    def __init__(self, width: int, hidden: int | None = None) -> None:
        super().__init__()
        self.net: nn.Module = (
            nn.Linear(width, 1)
            if hidden is None
            else nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x).squeeze(-1), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def fit_tiny(
    callbacks: list[Callback],
    *,
    steps: int,
    warmup: int,
    width: int,
    batch_size: int,
    root: str,
    hidden: int | None = None,
    **trainer_kwargs: Any,
) -> StepClock:
    """One epoch of ``warmup + steps`` training steps with ``callbacks`` after the clock;
    returns the clock. ``trainer_kwargs`` override the quiet defaults (no logger, no
    checkpointing, no validation, no progress bar)."""
    n = (steps + warmup) * batch_size
    data = TensorDataset(torch.randn(n, width), torch.randn(n))
    clock = StepClock(warmup)
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "logger": False,
        "default_root_dir": root,  # run files (perf/) go there, not into the working folder
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 0,
    }
    options.update(trainer_kwargs)
    trainer = L.Trainer(callbacks=[clock, *callbacks], **options)
    trainer.fit(Tiny(width, hidden), DataLoader(data, batch_size=batch_size))
    return clock
