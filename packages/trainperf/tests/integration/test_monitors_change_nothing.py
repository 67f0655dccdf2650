"""The monitors never change what a run computes: a seeded fit with dropout and a shuffling
DataLoader gives bit-identical losses with every monitor attached and with none. (A probe that
built a DataLoader iterator on torch's global generator once shifted every random number the
training drew afterwards: the demo's H-mean moved with no change to the model.)"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import (
    PerformanceProfilerCallback,
    ResourceMonitorCallback,
    ThroughputMonitorCallback,
)
from trainperf.probe import loader_seams


class _Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
        )
        self.losses: list[float] = []

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _losses(root: Path, monitored: bool) -> list[float]:
    L.seed_everything(3, verbose=False)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    callbacks: list[L.Callback] = (
        [
            PerformanceProfilerCallback(),
            ThroughputMonitorCallback(flops=False),
            ResourceMonitorCallback(interval_s=0.5, print_summary=False),
        ]
        if monitored
        else []
    )
    module = _Net()
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        default_root_dir=root,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(data, batch_size=8, shuffle=True, num_workers=0))
    return module.losses


def test_a_monitored_fit_computes_what_an_unmonitored_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the seam checks run inside the monitored fit, as on first use in a user's process
    monkeypatch.setattr(loader_seams, "_FOUND", None)
    plain = _losses(tmp_path / "plain", monitored=False)
    monitored = _losses(tmp_path / "monitored", monitored=True)
    assert len(plain) == 16
    assert monitored == plain  # bit-identical
    assert loader_seams._FOUND is not None  # the checks did run during the monitored fit


def test_the_seam_checks_leave_torchs_generator_alone() -> None:
    torch.manual_seed(11)
    before = torch.get_rng_state()
    loader_seams.recheck()
    assert torch.equal(torch.get_rng_state(), before)
