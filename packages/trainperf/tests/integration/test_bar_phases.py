"""The live phase split in Lightning's own progress bars, for a plain script with only our
monitors: a script run as a subprocess with its output piped shows ``forward NN%`` in Lightning's
default bar (Rich), in ``RichProgressBar()`` and in ``TQDMProgressBar()``. A bar class of the
user's own and our own bars are left alone; the bar reads Lightning's metrics exactly as often
as without us; the seam (``ProgressBar.get_metrics`` wrapped on the instance) is checked against
the installed Lightning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import (
    PerformanceProfilerCallback,
    PhaseRichProgressBar,
    PlainProgressBar,
    ThroughputMonitorCallback,
)
from trainperf.lightning.interpose import LIGHTNING_BARS, seam_ok, show_phase_split
from trainperf.lightning.live_line import LiveLine

from trainperf_testing.paths import child_pythonpath

SPLIT = re.compile(r"forward \d+%")

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import lightning as L, torch
    from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
    from torch.utils.data import DataLoader, TensorDataset
    from trainperf.lightning import PerformanceProfilerCallback

    class Plain(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            time.sleep(0.01)  # the forward phase dominates the split
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train/loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    bars = {"default": [], "rich": [RichProgressBar()], "tqdm": [TQDMProgressBar()]}
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
        enable_model_summary=False, default_root_dir=sys.argv[2],
        callbacks=[PerformanceProfilerCallback(), *bars[sys.argv[1]]],
    )
    data = TensorDataset(torch.randn(48, 4), torch.randn(48, 1))
    trainer.fit(Plain(), DataLoader(data, batch_size=4))
    print("bar:", type(trainer.progress_bar_callback).__name__)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("bar", ["default", "rich", "tqdm"])
def test_plain_script_piped_shows_the_split(tmp_path: Path, bar: str) -> None:
    script = tmp_path / "plain.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(PYTHONPATH=child_pythonpath(), WANDB_MODE="offline")
    proc = subprocess.run(
        [sys.executable, str(script), bar, str(tmp_path / "run")],
        env=env,
        capture_output=True,  # both piped: not a terminal
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    shown = "RichProgressBar" if bar != "tqdm" else "TQDMProgressBar"
    assert f"bar: {shown}" in proc.stdout
    output = " ".join((proc.stdout + proc.stderr).split())  # Rich folds the metrics column
    assert SPLIT.search(output), proc.stdout[-3000:]
    assert "phases" in output


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(tmp_path: Path, callbacks: list[L.Callback]) -> L.Trainer:
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=callbacks,
    )
    data = TensorDataset(torch.randn(24, 4), torch.randn(24, 1))
    trainer.fit(Tiny(), DataLoader(data, batch_size=4))
    return trainer


class OwnBar(TQDMProgressBar):
    """A user's own bar class (a subclass of Lightning's)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "make",
    [OwnBar, PhaseRichProgressBar, lambda: PlainProgressBar(0.01)],
    ids=["own_subclass", "phase_rich", "plain"],
)
def test_other_bars_are_left_alone(tmp_path: Path, make: Any) -> None:
    """A subclass of the user's own and our bars (which show the line themselves) keep their
    own get_metrics: nothing is set on the instance."""
    bar = make()
    _fit(tmp_path, [bar, PerformanceProfilerCallback(epoch_scan=None)])
    assert "get_metrics" not in vars(bar)


@pytest.mark.slow
@pytest.mark.parametrize("bar_type", LIGHTNING_BARS, ids=lambda t: t.__name__)
def test_the_bar_reads_metrics_as_often_as_without_us(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bar_type: type[ProgressBar]
) -> None:
    """Lightning's own get_metrics (what converts the logged tensors) runs as many times with
    both monitors as without them; the wrapped one adds ``phases`` to what it returns."""
    calls: Counter[str] = Counter()
    original = bar_type.get_metrics
    added: list[bool] = []

    def counted(self: ProgressBar, trainer: L.Trainer, pl_module: L.LightningModule) -> Any:
        calls[self.label] += 1  # type: ignore[attr-defined]
        return original(self, trainer, pl_module)

    monkeypatch.setattr(bar_type, "get_metrics", counted)
    for label, monitors in (
        ("without", []),
        ("with", [PerformanceProfilerCallback(), ThroughputMonitorCallback()]),
    ):
        bar = bar_type()
        bar.label = label  # type: ignore[attr-defined]
        trainer = _fit(tmp_path / label, [bar, *monitors])
        assert trainer.progress_bar_callback is bar
        added.append("phases" in bar.get_metrics(trainer, trainer.lightning_module))
    assert calls["with"] == calls["without"] > 1
    assert added == [False, True]


def test_seam_is_checked_against_the_installed_lightning() -> None:
    """``ProgressBar.get_metrics(trainer, pl_module)`` is what the wrapper calls and stands in
    for; the tested range is Lightning's (as the DataLoader seam's)."""
    assert seam_ok()
    assert not seam_ok("2.7.0")
    assert not seam_ok("2.5.9")
    for bar_type in LIGHTNING_BARS:  # neither class hides the documented override point
        assert "get_metrics" not in vars(bar_type) or bar_type is RichProgressBar


def test_two_monitors_wrap_the_bar_once() -> None:
    bar = TQDMProgressBar()
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, callbacks=[bar]
    )
    assert show_phase_split(trainer, LiveLine)
    wrapped = vars(bar)["get_metrics"]
    assert show_phase_split(trainer, LiveLine)
    assert vars(bar)["get_metrics"] is wrapped
    assert wrapped.original.__func__ is TQDMProgressBar.get_metrics
    no_bar = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    assert not show_phase_split(no_bar, LiveLine)
