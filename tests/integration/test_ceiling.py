"""The ceiling on tiny CPU Trainers: ThroughputMonitorCallback logs achieved FLOP/s and MFU
when the module has an ``example_input_array`` (nothing, and no error, when it has none), writes
them to ``perf/run.json`` for the report, and OCRLightningModule's example input comes from the
configured canvas so Lightning's model summary shows real FLOPs. No wall clock is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import PerfCallbackWarning, ThroughputMonitorCallback
from trainperf.present.report import build_report, to_markdown
from trainperf.probe import peak_flops as peak_module

from ocr.data.synth import generate_dataset
from trainperf_testing.memory_logger import MemoryLogger
from trainperf_testing.run_lines import read_run_dict

pytestmark = pytest.mark.slow


class ConvModule(L.LightningModule):
    """A 2-layer conv net on 3 x 16 x 16 images; ``example`` sets ``example_input_array``."""

    def __init__(self, example: bool = True) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 1))
        if example:
            self.example_input_array = torch.zeros(2, 3, 16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        return self(x).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.log("val/loss", self(x).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.fixture(autouse=True)
def _temp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(peak_module, "_MEASURE_S", 0.01)  # keep the peak measurement short


def fit(tmp_path: Path, module: L.LightningModule) -> MemoryLogger:
    log = MemoryLogger()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        logger=log,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        callbacks=[ThroughputMonitorCallback()],
    )
    data = DataLoader(TensorDataset(torch.randn(8, 3, 16, 16)), batch_size=4)
    trainer.fit(module, data, data)
    return log


def test_mfu_is_logged_recorded_and_reported(tmp_path: Path) -> None:
    log = fit(tmp_path, ConvModule())
    names = log.metric_names()
    for stage in ("train", "val"):
        row = next(m for m, _ in log.calls if f"throughput/{stage}_mfu" in m)
        assert row[f"throughput/{stage}_flops_per_sec"] > 0
        assert row[f"throughput/{stage}_mfu"] > 0
    assert "throughput/train_mfu_spec" not in names  # no spec sheet on CPU
    flops = read_run_dict(tmp_path)["flops"]
    # FLOPs per sample, exact: conv 3->8 3x3 and conv 8->1 1x1 on 16 x 16.
    forward = 2 * 16 * 16 * (3 * 8 * 9 + 8 * 1)
    assert flops["per_sample"]["val"] == forward
    assert flops["per_sample"]["train"] > 2 * forward
    assert flops["example_input_shapes"] == [[2, 3, 16, 16]]
    assert flops["peak_flops_per_sec"] > 0
    assert flops["peak"]["dtype"] == "float32"
    assert (tmp_path / "cache" / "peak_flops.json").is_file()  # the cache, not the run folder
    assert not list((tmp_path / "perf").glob("peak*"))

    md = to_markdown(build_report(tmp_path))
    assert "Machine limit: measured peak" in md
    assert "| GFLOP/s | MFU % |" in md  # the throughput table's columns
    assert "GFLOP/sample" in md
    assert "MFU" in md


def test_a_module_without_an_example_input_gets_no_flops_and_no_error(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = fit(tmp_path, ConvModule(example=False))
    assert not [w for w in caught if issubclass(w.category, PerfCallbackWarning)]
    names = log.metric_names()
    assert "throughput/train_samples_per_sec" in names
    assert not any("mfu" in n or "flops" in n for n in names)
    assert "flops" not in read_run_dict(tmp_path)


def test_ocr_train_summary_shows_real_flops_and_mfu_is_logged(tmp_path: Path) -> None:
    dataset = tmp_path / "synth"
    generate_dataset(dataset, splits={"train": 4, "val": 2, "test": 2}, seed=3)
    run = tmp_path / "run"
    overrides = [
        "experiment=synthetic_debug",
        "callbacks=throughput_monitor",
        "data.synthetic=null",
        f"data.dataset_dir={dataset}",
        "data.canvas_size=96",
        "data.batch_size=2",
        "data.num_workers=0",
        "data.persistent_workers=false",
        "trainer.accelerator=cpu",
        "trainer.devices=1",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.enable_progress_bar=false",
        "trainer.num_sanity_val_steps=0",
        "trainer.precision=32-true",
        f"hydra.run.dir={run}",
    ]
    env = dict(
        os.environ,
        WANDB_MODE="offline",
        PYTHONUNBUFFERED="1",
        OCR_CACHE_DIR=str(tmp_path / "c"),
        TRAINPERF_CACHE_DIR=str(tmp_path / "c"),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ocr.train", *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    summary = next(line for line in proc.stdout.splitlines() if "Total FLOPs" in line)
    assert summary.split()[0] not in ("0", "0.0")  # the model summary counts real FLOPs
    flops = read_run_dict(run)["flops"]
    assert flops["example_input_shapes"] == [[1, 3, 96, 96]]  # the configured canvas
    metrics = (run / "csv" / "metrics.csv").read_text()
    assert "throughput/train_mfu" in metrics
    assert "throughput/val_mfu" in metrics
