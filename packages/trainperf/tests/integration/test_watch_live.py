"""A run you can watch: the live phase line in the plain progress output, each rank's start and
end in ``perf/lifecycle.jsonl``, interval records with their phases, and ``trainperf watch``
following a run that another process is writing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import PerformanceProfilerCallback, PlainProgressBar
from trainperf.records.epochs import IntervalRecord
from trainperf.records.files import read_records
from trainperf.records.monitoring import LifecycleRecord

from trainperf_testing.paths import child_pythonpath

pytestmark = pytest.mark.slow


class SleepyStep(L.LightningModule):
    """A module whose training step sleeps: forward dominates every epoch."""

    def __init__(self, sleep_s: float = 0.03, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.sleep_s, self.fail_at = sleep_s, fail_at

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        if batch_idx == self.fail_at:
            raise RuntimeError("planted failure")
        time.sleep(self.sleep_s)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader() -> DataLoader[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(48, 4, generator=g), torch.randn(48, 1)), 4)


def _trainer(root: Path, **kwargs: object) -> L.Trainer:
    return L.Trainer(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[PerformanceProfilerCallback(log_interval=2), PlainProgressBar(interval_s=0.05)],
        **kwargs,  # type: ignore[arg-type]
    )


def test_plain_progress_lines_carry_the_live_phase_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _trainer(tmp_path).fit(SleepyStep(), _loader())
    lines = [line for line in capsys.readouterr().out.splitlines() if " train " in line]
    live = [re.search(r" · forward (\d+)%.* · ([\d.]+) samples/s · (.+)$", line) for line in lines]
    found = [m for m in live if m]
    assert found, "\n".join(lines)
    # the sleeping training step is forward: the line names it first, with most of the time
    assert all(int(m.group(1)) >= 60 for m in found), "\n".join(lines)
    assert all(m.group(3) == "compute-bound" for m in found)
    assert all(float(m.group(2)) > 0 for m in found)

    # the run's files: a start and a finished end for rank 0, intervals with their phases
    events = read_records(LifecycleRecord.path(tmp_path), LifecycleRecord)
    assert [(e.event, e.status, e.rank, e.pid) for e in events] == [
        ("start", None, 0, os.getpid()),
        ("end", "finished", 0, os.getpid()),
    ]
    intervals = read_records(IntervalRecord.path(tmp_path), IntervalRecord)
    assert len(intervals) == 2 * (12 // 2)
    assert all(max(r.phases_s, key=r.phases_s.__getitem__) == "forward" for r in intervals)
    assert all(r.samples_per_sec is not None and r.samples_per_sec > 0 for r in intervals)


class SleepyValidation(SleepyStep):
    """Its validation step sleeps too: the validation window has its own phase split."""

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        time.sleep(self.sleep_s)


def test_a_validation_windows_live_line_names_its_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Rich bar keeps a line for a while, so a validation split could stand beside the next
    training bar: it names its stage; a training split does not need to."""
    _trainer(tmp_path, num_sanity_val_steps=0).fit(SleepyValidation(), _loader(), _loader())
    lines = capsys.readouterr().out.splitlines()
    val = [line for line in lines if " val " in line and " · " in line]
    train = [line for line in lines if " train " in line and " · " in line]
    assert val, "\n".join(lines)
    assert all(" · val: forward " in line for line in val), "\n".join(val)
    assert train
    assert not [line for line in train if "val:" in line], "\n".join(train)


def test_a_failed_run_ends_failed(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="planted failure"):
        _trainer(tmp_path).fit(SleepyStep(fail_at=3), _loader())
    events = read_records(LifecycleRecord.path(tmp_path), LifecycleRecord)
    assert [(e.event, e.status) for e in events] == [("start", None), ("end", "failed")]


SCRIPT = """
import time, lightning as L, torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import PerformanceProfilerCallback

class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, batch, i):
        time.sleep(0.05)
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

data = DataLoader(TensorDataset(torch.randn(60, 4), torch.randn(60, 1)), 4)
L.Trainer(default_root_dir={root!r}, max_epochs=4, accelerator="cpu", logger=False,
          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
          callbacks=[PerformanceProfilerCallback()]).fit(M(), data)
"""


def test_watch_follows_a_run_being_written_and_exits_when_it_ends(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT.format(root=str(run))))
    env = dict(os.environ, PYTHONPATH=child_pythonpath(), WANDB_MODE="offline", COLUMNS="200")
    watch = subprocess.Popen(
        [sys.executable, "-m", "trainperf.cli.main", "watch", str(run), "--poll", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    received: list[tuple[float, str]] = []

    def read() -> None:
        assert watch.stdout is not None
        for line in watch.stdout:
            received.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read)
    reader.start()
    train = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    trained_at = time.monotonic()
    assert train.returncode == 0, train.stderr[-3000:]
    assert watch.wait(timeout=120) == 0, watch.stderr.read() if watch.stderr else ""
    reader.join(timeout=10)
    lines = [line for _, line in received]
    epochs = [(t, line) for t, line in received if re.match(r"epoch \d train ", line)]
    assert [line.split()[1] for _, line in epochs] == ["0", "1", "2", "3"], "\n".join(lines)
    # printed as they landed: the first epoch while the run was still going
    assert epochs[0][0] < trained_at, "\n".join(lines)
    assert "forward" in epochs[0][1]
    assert lines[0].startswith("waiting for ")  # started before the run
    assert lines[1].startswith("rank 0 fit started")
    assert "rank 0 fit finished" in lines
    assert "watch: finished (fit)" in lines
    assert any(line.startswith("  train: 4 epoch(s); last: epoch 3 train") for line in lines)
