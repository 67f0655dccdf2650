"""The recorder writes what the trained module is made of into ``perf/run.json`` (its
convolutions, for channels_last advice), for a module written here with and without them."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import PerformanceProfilerCallback
from trainperf.records.files import read_run_record


class Net(L.LightningModule):
    def __init__(self, conv: bool) -> None:
        super().__init__()
        first = torch.nn.Conv2d(3, 8, 3, padding=1) if conv else torch.nn.Linear(8, 8)
        self.body = torch.nn.Sequential(first, torch.nn.Flatten(), torch.nn.LazyLinear(1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.body(batch[0]).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.parametrize("conv", [True, False])
def test_the_run_records_the_models_convolutions(tmp_path: Path, conv: bool) -> None:
    x = torch.randn(4, 3, 8, 8) if conv else torch.randn(4, 3, 8)
    net = Net(conv)
    net.body(x)  # materialise the lazy layer
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
        callbacks=[PerformanceProfilerCallback()],
    )
    trainer.fit(net, DataLoader(TensorDataset(x), batch_size=2))
    model = read_run_record(tmp_path).model
    assert model is not None
    assert model.parameters == sum(p.numel() for p in net.parameters())
    assert model.conv2d_modules == (1 if conv else 0)
