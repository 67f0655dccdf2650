"""A run whose output is not a terminal (a cluster log, a pipe) writes the live phase split as one
plain line at most every 30 s whatever its progress bar (Rich, tqdm, none): Rich draws nothing
into a pipe until the run ends, so the split used to appear only then.

Time is a fake clock that moves 10 s at the start of each training batch (reading it moves
nothing), so which batches get a line is exact: with the 30 s interval, every third."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from torch.utils.data import DataLoader, TensorDataset
from trainperf.lightning import (
    PerformanceProfilerCallback,
    PlainProgressBar,
    ThroughputMonitorCallback,
    live_line,
    progress_choice,
)
from trainperf.lightning.live_line import PipedPhaseLine
from trainperf.lightning.progress_choice import piped_phase_line

LINE = re.compile(r"\[trainperf\] epoch (\d+) (train|val) batch (\d+): ([a-z_]+ \d+%[^\r\n]*)")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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


class Ten(L.Callback):
    """10 fake seconds per training batch."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def on_train_batch_start(self, *args: Any, **kwargs: Any) -> None:
        self.clock.now += 10.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(progress_choice, "PIPED_LINE_CLOCK", fake)
    monkeypatch.setattr(progress_choice, "stdout_is_live", lambda: False)  # a pipe
    return fake


@pytest.mark.slow
@pytest.mark.parametrize("bar", ["rich", "tqdm", "none"])
def test_a_piped_run_writes_one_phase_line_per_30_s_whatever_the_bar(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], clock: FakeClock, bar: str
) -> None:
    bars: dict[str, list[L.Callback]] = {
        "rich": [RichProgressBar()],
        "tqdm": [TQDMProgressBar()],
        "none": [],
    }
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=bar != "none",
        default_root_dir=tmp_path,
        # two monitors: one line per interval between them
        callbacks=[
            PerformanceProfilerCallback(epoch_scan=None),
            ThroughputMonitorCallback(epoch_scan=None),
            Ten(clock),
            *bars[bar],
        ],
    )
    data = TensorDataset(torch.randn(48, 4), torch.randn(48, 1))
    trainer.fit(Tiny(), DataLoader(data, batch_size=4))  # 12 batches, 120 fake seconds
    out = capsys.readouterr().out
    lines = LINE.findall(out)
    assert [(epoch, stage, batch) for epoch, stage, batch, _ in lines] == [
        ("0", "train", "3"),
        ("0", "train", "6"),
        ("0", "train", "9"),
        ("0", "train", "12"),
    ], out[-3000:]
    assert all("samples/s" in split for *_, split in lines)


def test_no_line_on_a_terminal_or_beside_a_plain_bar_or_off_rank_zero() -> None:
    class Trainer:  # what piped_phase_line reads of one (a weakly referable object)
        def __init__(self, bar: object = None, zero: bool = True) -> None:
            self.progress_bar_callback = bar
            self.is_global_zero = zero

    def trainer(bar: object = None, zero: bool = True) -> Any:
        return Trainer(bar, zero)

    assert piped_phase_line(trainer(), live=True) is None
    assert piped_phase_line(trainer(PlainProgressBar()), live=False) is None  # prints it itself
    assert piped_phase_line(trainer(zero=False), live=False) is None
    shared = trainer(TQDMProgressBar())
    made = piped_phase_line(shared, live=False)
    assert isinstance(made, PipedPhaseLine)
    assert made.interval_s == progress_choice.PIPED_LINE_INTERVAL_S == 30.0
    assert piped_phase_line(shared, live=False) is made  # the trainer's monitors share it


def test_pacing_on_a_fake_clock_and_a_failure_is_one_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    split = "forward 60% backward 30% data_wait 10%"
    monkeypatch.setattr(live_line, "live_text", lambda trainer, name_stage=True: split)
    trainer = SimpleNamespace(sanity_checking=False, current_epoch=2, progress_bar_callback=None)
    line = PipedPhaseLine(30.0, clock)
    written = []
    for second in range(0, 100, 5):  # a batch every 5 s
        clock.now = 1000.0 + second
        line.tick(trainer, "train", second // 5)  # type: ignore[arg-type]
        written += [second] * capsys.readouterr().out.count("[trainperf]")
    assert written == [30, 60, 90]
    trainer.sanity_checking = True  # the sanity check's validation batches get no line
    clock.now += 60
    line.tick(trainer, "val", 0)  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""
    trainer.sanity_checking = False
    line.tick(trainer, "val", 4)  # type: ignore[arg-type]
    assert capsys.readouterr().out == f"[trainperf] epoch 2 val batch 5: {split}\n"

    def broken(trainer: Any, name_stage: bool = True) -> str:
        raise RuntimeError("no recorder")

    monkeypatch.setattr(live_line, "live_text", broken)
    clock.now += 60
    with pytest.warns(UserWarning, match="piped phase line is off"):
        line.tick(trainer, "train", 0)  # type: ignore[arg-type]
    clock.now += 60
    line.tick(trainer, "train", 1)  # type: ignore[arg-type]  # off: no second warning
    with pytest.raises(ValueError, match="interval_s"):
        PipedPhaseLine(0)
