"""``PlainProgressBar``: progress as plain log lines, for output that is not a terminal.

Rich's live progress bar redraws one line in place; written to a file or a pipe (a batch job's
log, ``| tee``) it shows nothing until the run ends. This bar prints a line every
``interval_s`` seconds while a loop runs and one line per finished epoch, e.g.::

    Epoch 3/10 train 120/240 (50%) 2.10 it/s elapsed 0:00:57 eta 0:00:57 train/loss=0.532
    Epoch 3/10 done in 0:02:04 train/loss=0.501 val/hmean=0.712

Time-based rather than every N batches, so a slow and a fast run both log at a readable rate.
With a performance monitor on the trainer, each progress line ends with the live phase line.

A line is composed only when it is printed. Reading Lightning's progress-bar metrics converts
every ``prog_bar=True`` tensor with ``.item()`` (Lightning issues 21232, 20995): on a GPU that is
a host-device sync, so a bar that built its text at every batch would make every step wait for
the GPU (13-22 ms per batch on an H200 in bf16-mixed). Between two lines a batch costs one clock
read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import lightning as L
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

from trainperf.errors import ConfigError
from trainperf.lightning.batch_hooks import BatchEndHooks
from trainperf.lightning.live_line import live_text


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


def _value(v: Any) -> str:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class PlainProgressBar(BatchEndHooks, ProgressBar):
    """Plain-text progress lines on stdout (rank zero only, like every Lightning progress bar).

    Args:
        interval_s: seconds between two lines while a loop runs (> 0).
        clock: monotonic seconds; default :func:`time.monotonic` (tests pass a fake one).
    """

    def __init__(
        self, interval_s: float = 30.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        if not interval_s > 0:
            raise ConfigError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self.clock = clock
        self._enabled = True
        # set when a loop starts: a training epoch, validation, test, and the start of a fit (a
        # run resumed mid-epoch gets no on_train_epoch_start for the epoch it resumes)
        self._loop_start = 0.0
        self._last_line = 0.0
        self._epoch_start = 0.0
        self._loop_batches = 0  # batches of the current loop seen by this bar

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self._enabled:
            kwargs.setdefault("flush", True)
            print(*args, **kwargs)

    def _epoch_label(self, trainer: L.Trainer) -> str:
        # Lightning counts epochs from 0 and its bars show "Epoch 0/9" for 10 epochs: same here
        total = trainer.max_epochs
        of = f"/{total - 1}" if total is not None and total > 0 else ""
        return f"Epoch {trainer.current_epoch}{of}"

    def _metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> str:
        items = self.get_metrics(trainer, pl_module)
        return " ".join(f"{k}={_value(v)}" for k, v in items.items() if k != "v_num")

    def _progress_line(self, stage: str, done: int, total: int | float) -> str:
        """``done`` of ``total`` batches; the rate counts the batches this loop ran since it
        started here (a resumed epoch starts at its saved batch, not at 0)."""
        elapsed = self.clock() - self._loop_start
        rate = self._loop_batches / elapsed if elapsed > 0 else 0.0
        parts = [f"{stage} {done}"]
        if isinstance(total, int) or (isinstance(total, float) and math.isfinite(total)):
            total = int(total)
            pct = f" ({100 * done / total:.0f}%)" if total > 0 else ""
            parts = [f"{stage} {done}/{total}{pct}"]
            if rate > 0 and total >= done:
                parts.append(f"eta {_clock((total - done) / rate)}")
        parts.insert(1, f"{rate:.2f} it/s elapsed {_clock(elapsed)}")
        return " ".join(parts)

    def _due(self) -> bool:
        """Whether a line is due now (then the next one is ``interval_s`` away)."""
        now = self.clock()
        if now - self._last_line < self.interval_s:
            return False
        self._last_line = now
        return True

    def _print_with_live(self, line: str, trainer: L.Trainer) -> None:
        live = live_text(trainer)
        self.print(f"{line} · {live}" if live else line)

    def _start_loop(self) -> None:
        self._loop_start = self._last_line = self.clock()
        self._loop_batches = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning calls on_train_epoch_start only for an epoch that starts from its first
        # batch: a fit resumed mid-epoch runs the rest of that epoch without it, so the epoch's
        # clock starts here (else "done in" would count from the monotonic clock's zero).
        self._start_loop()
        self._epoch_start = self._loop_start

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start_loop()
        self._epoch_start = self._loop_start

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # runs after the epoch's validation, so the line carries the validation metrics too
        took = _clock(self.clock() - self._epoch_start)
        metrics = self._metrics(trainer, pl_module)
        self.print(f"{self._epoch_label(trainer)} done in {took} {metrics}".rstrip())

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start_loop()

    on_test_start = on_validation_start

    def _batch_end(
        self, trainer: L.Trainer, stage: str, outputs: Any, batch: Any, batch_idx: int, loader: int
    ) -> None:
        self._loop_batches += 1
        if (stage == "val" and trainer.sanity_checking) or not self._due():
            return  # nothing is read (no metrics: no .item(), no sync) for a line not printed
        if stage == "train":
            line = self._progress_line("train", batch_idx + 1, self.total_train_batches)
            metrics = self._metrics(trainer, trainer.lightning_module)
            self._print_with_live(
                f"{self._epoch_label(trainer)} {line} {metrics}".rstrip(), trainer
            )
        elif stage == "val":
            line = self._progress_line("val", batch_idx + 1, trainer.num_val_batches[loader])
            self._print_with_live(f"{self._epoch_label(trainer)} {line}", trainer)
        elif stage == "test":
            total = trainer.num_test_batches[loader]
            self._print_with_live(self._progress_line("test", batch_idx + 1, total), trainer)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.print(f"test done in {_clock(self.clock() - self._loop_start)}")
