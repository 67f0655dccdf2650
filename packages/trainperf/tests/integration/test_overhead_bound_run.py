"""A tiny model trained by a real Trainer (written here: 24 layers of 8 x 8, a few kFLOPs per
sample, its steps all per-op cost) is called overhead-bound from its counted FLOPs and the
measured peak, never "compute-bound ... use a smaller model"; its run records no convolution,
so nothing proposes channels_last. The margin is orders of magnitude (MFU far below 1 %), so no
wall-clock figure is asserted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import PerformanceProfilerCallback, ThroughputMonitorCallback
from trainperf.present.report import build_report
from trainperf.probe import peak_flops as peak_module

pytestmark = pytest.mark.slow


class TinyDeep(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(24):
            layers += [nn.Linear(8, 8), nn.Tanh()]
        self.net = nn.Sequential(*layers)
        self.example_input_array = torch.zeros(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        return self(x).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_tiny_model_is_overhead_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(peak_module, "_MEASURE_S", 0.05)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        callbacks=[PerformanceProfilerCallback(), ThroughputMonitorCallback()],
    )
    data = DataLoader(TensorDataset(torch.randn(160, 8)), batch_size=4)
    trainer.fit(TinyDeep(), data)
    report = build_report(tmp_path)
    assert report.run.run_info is not None
    model = report.run.run_info.model
    assert model is not None
    assert model.conv_modules == 0
    ids = [f.id for f in report.findings]
    assert "compute_bound" not in ids
    (f,) = [f for f in report.findings if f.id == "overhead_bound"]
    assert f.evidence["compute_mfu_pct"] < 1.0
    assert "a smaller model would not be much faster" in f.suggestion
    assert "torch.compile" in f.suggestion
    assert report.stages[next(iter(report.stages))].epoch_numbers == [1, 2]
    assert not any(c.family == "channels_last" for x in report.findings for c in x.candidates)
