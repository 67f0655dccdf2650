"""A short run beside CPU-burning processes started here: its resource samples are classified as
contended, the report has the ``cpu_contention`` finding, and the ``throughput_drop`` alert that
fires in the run (its steps slow down halfway by design) points to it and is attached to it.

Nothing here asserts a time: the burners hold every core for the whole run, so whichever samples
the monitor takes, most are contended; the step's slowdown is 7x by construction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf.alerts.catalogue import RULES
from trainperf.analysis.contention import run_contention
from trainperf.lightning import PerformanceProfilerCallback, ResourceMonitorCallback
from trainperf.present.report import build_report
from trainperf.records.files import read_records
from trainperf.records.monitoring import AlertEvent

pytestmark = pytest.mark.slow


class SlowsDown(L.LightningModule):
    """Fast steps for the first ``fast`` batches, then 7x slower ones (sleeping: little CPU)."""

    def __init__(self, fast: int) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.fast = fast

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        time.sleep(0.02 if batch_idx < self.fast else 0.14)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _burner() -> int:
    """A process spinning on one core that is not a child of this one (an orphan, as another
    job's process is): the monitor counts its own children as DataLoader workers."""
    out = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def test_a_run_beside_cpu_burners_names_the_contention(tmp_path: Path) -> None:
    rules = {name: {"enabled": False} for name in RULES}
    rules["throughput_drop"] = {"warmup_s": 0.0, "baseline_s": 0.5, "hold_s": 0.0}
    monitor = ResourceMonitorCallback(
        interval_s=0.05, log_interval_s=0.2, rate_window_s=0.3, print_summary=False, rules=rules
    )
    data = TensorDataset(torch.randn(100, 4), torch.randn(100, 1))
    burners = [_burner() for _ in range(os.cpu_count() or 2)]
    try:
        L.Trainer(
            default_root_dir=tmp_path,
            accelerator="cpu",
            devices=1,
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            enable_progress_bar=False,
            callbacks=[PerformanceProfilerCallback(), monitor],
        ).fit(SlowsDown(fast=50), DataLoader(data, batch_size=1))
    finally:
        for pid in burners:
            os.kill(pid, signal.SIGKILL)

    found = run_contention(tmp_path)
    assert found is not None
    assert found.present, found
    assert found.share >= 0.5, found  # the burners held the host for the whole run

    alerts = read_records(AlertEvent.path(tmp_path), AlertEvent)
    fired = [a for a in alerts if a.rule == "throughput_drop" and a.event == "fired"]
    assert fired, alerts
    assert any("(cpu_contention)" in a.message for a in fired), [a.message for a in fired]

    findings = {f.id: f for f in build_report(tmp_path).findings}
    assert "cpu_contention" in findings, sorted(findings)
    assert "alert:throughput_drop" not in findings  # attached to the contention, not alone
    assert any("throughput_drop" in c for c in findings["cpu_contention"].corroboration)
