"""The input-bound verdict says which part of the data wait is the ceiling (issue 32), on tiny
CPU Trainers with the performance callbacks attached and the report built from the folder:

* idle workers, a batch of many large tensors (tiny work, most of the wait after the workers
  were done): the main process's receive / pin is named, with compact batches and fewer tensors
  as candidates, and not "more workers";
* a slow ``__getitem__`` in one worker: the wait is named as waiting for a worker.

Shares only, with wide margins; no wall time is asserted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from trainperf.lightning import PerformanceProfilerCallback
from trainperf.present.report import build_report
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:.*does not have many workers")]

TENSORS_PER_ITEM = 24
FLOATS_PER_TENSOR = 64 * 1024  # 256 KiB each: 24 MiB in 96 tensors per batch of 4


class LargeItems(Dataset[list[torch.Tensor]]):
    """Items of ``tensors`` tensors of ``floats`` each, made with next to no work (by default
    many large ones); ``sleep_s`` per item."""

    def __init__(
        self,
        n: int,
        sleep_s: float = 0.0,
        tensors: int = TENSORS_PER_ITEM,
        floats: int = FLOATS_PER_TENSOR,
    ) -> None:
        self.n = n
        self.sleep_s = sleep_s
        self.tensors = tensors
        self.floats = floats

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> list[torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return [torch.empty(self.floats) for _ in range(self.tensors)]


def flat_collate(items: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """Every tensor of the batch as it is: one shared-memory segment each to receive."""
    return [tensor for item in items for tensor in item]


class Module(L.LightningModule):
    """A linear layer on a fixed input: the step touches none of the batch's bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.x = torch.randn(4, 8)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(self.x).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(root: Path, loader: DataLoader, batches: int) -> Path:
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=batches,
        limit_val_batches=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=[PerformanceProfilerCallback()],
    )
    trainer.fit(Module(), loader)
    return root


def test_idle_workers_and_a_slow_receive_name_the_receive_not_more_workers(
    tmp_path: Path,
) -> None:
    loader = DataLoader(LargeItems(48), batch_size=4, num_workers=2, collate_fn=flat_collate)
    run = _fit(tmp_path / "run", loader, batches=10)
    (epoch,) = [e for e in read_records(run / "perf" / EpochRecord.FILE, EpochRecord)]
    assert epoch.batch_tensors == 4 * TENSORS_PER_ITEM
    assert epoch.batch_bytes == 4 * TENSORS_PER_ITEM * FLOATS_PER_TENSOR * 4
    causes = epoch.data_wait_causes_s
    assert causes["receive"] > causes["worker"]
    (finding,) = [f for f in build_report(run).findings if f.id == "input_bound"]
    assert "receive / pin" in finding.title
    assert "more workers will not help" in finding.suggestion
    assert "raise" not in finding.suggestion
    assert "fewer tensors" in finding.suggestion
    assert "fewer bytes" in finding.suggestion
    assert all(c.family != "workers" for c in finding.candidates)
    assert finding.evidence["batch_tensors"] == 4 * TENSORS_PER_ITEM
    assert finding.evidence["workers_busy_pct"] < 50


def test_a_slow_worker_is_named_as_waiting_for_it(tmp_path: Path) -> None:
    loader = DataLoader(
        LargeItems(16, sleep_s=0.08, tensors=1, floats=16),
        batch_size=2,
        num_workers=1,
        collate_fn=flat_collate,
    )
    run = _fit(tmp_path / "run", loader, batches=6)
    (finding,) = [f for f in build_report(run).findings if f.id == "input_bound"]
    assert "waiting for a worker to finish its batch" in finding.title
    assert "receive / pin" not in finding.title
    assert finding.evidence["data_wait_worker_ms_per_batch"] > 0
