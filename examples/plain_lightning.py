"""A plain Lightning script with trainperf's four monitors: `python plain_lightning.py RUN`."""

import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import (
    PerformanceProfilerCallback,  # every second of every epoch, by phase, hook and callback
    ProfilerCallback,  # a torch.profiler window (the second epoch), analysed when it closes
    ResourceMonitorCallback,  # CPU, GPU (NVML), memory, I/O, with alerts
    ThroughputMonitorCallback,  # samples/s, FLOPs and MFU, no per-step sync
)


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
        )

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    data = TensorDataset(torch.randn(1024, 32), torch.randint(0, 4, (1024,)))
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        default_root_dir=sys.argv[1] if len(sys.argv) > 1 else "runs/plain",
        callbacks=[
            PerformanceProfilerCallback(),
            ThroughputMonitorCallback(),
            ResourceMonitorCallback(),
            ProfilerCallback(),
        ],
    )
    trainer.fit(Classifier(), DataLoader(data, batch_size=32, shuffle=True))
