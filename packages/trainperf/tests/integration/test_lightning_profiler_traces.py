"""``analyze_trace`` on the per-stage trace files of Lightning's own ``PyTorchProfiler``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.profilers import PyTorchProfiler
from torch.utils.data import DataLoader, TensorDataset
from trainperf.analysis.trace import analyze_trace

pytestmark = pytest.mark.slow


class SmallCnn(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(8 * 14 * 14, 4),
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_lightning_per_stage_traces_are_read_and_broken_down(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(40, 3, 16, 16, generator=g), torch.randint(0, 4, (40,)))
    out = tmp_path / "lightning_traces"
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=8,
        limit_val_batches=3,
        profiler=PyTorchProfiler(
            dirpath=out, filename="prof", export_to_chrome=True, profile_memory=True
        ),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(SmallCnn(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    files = sorted(p.name for p in out.glob("*.pt.trace.json"))
    assert any("training_step" in f for f in files)
    assert any("validation_step" in f for f in files)

    report = analyze_trace(out)
    assert len(report["sources"]) == len(files)  # one source per stage file, none merged
    assert {"train", "validation"} <= set(report["summary"]["stages"])
    steps = report["steps"]
    for step in steps:
        assert sum(step["phases_ms"].values()) == pytest.approx(step["wall_ms"], abs=1e-5)
        assert min(step["phases_ms"].values()) >= 0
    train = [s for s in steps if s["stage"] == "train"]
    # full training steps: forward, backward and optimizer, with data loading seen
    full = [s for s in train if s["phases_ms"]["backward"] > 0]
    assert len(full) >= 2
    for s in full:
        assert s["phases_ms"]["forward"] > 0
        assert s["phases_ms"]["optimizer"] > 0
        assert s["phases_ms"]["data_wait"] > 0
    val = [s for s in steps if s["stage"] == "validation"]
    assert val
    assert all(s["phases_ms"]["backward"] == 0 and s["phases_ms"]["optimizer"] == 0 for s in val)
    assert not any(f["id"].startswith("cuda") or "gpu" in f["id"] for f in report["findings"])
