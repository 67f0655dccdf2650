"""Training signals stamped on the training thread for the sampler thread.

Training signals stamped by the callback's hooks on the training thread and read by the
sampler thread: data wait, step counts, the latest loss, the last straggler."""

from __future__ import annotations

import math
import time
from typing import Any

from trainperf.alerts.engine import GrowthSignal, StragglerSignal


class StepSignals:
    """Counters stamped by the training thread's hooks (a few attribute writes per step) and
    read by the sampler thread. Single writer; plain int/float attribute reads and writes are
    atomic in CPython, and a reading one sample late is harmless.

    Data wait: the time from one training batch's end to the next one's start (the loop
    fetching the next batch, plus other callbacks' batch hooks: an upper bound of the data
    wait), summed in ``wait_ns``. The first batch after an epoch start or a validation run is not
    counted (no previous end in the same stretch of training).
    """

    __slots__ = (
        "batches",
        "checkpoint_bytes",
        "epoch",
        "growth",
        "last_end_ns",
        "last_train_end_ns",
        "loss",
        "phase",
        "steps",
        "straggler",
        "train_clock",
        "wait_ns",
    )

    def __init__(self) -> None:
        self.phase = "idle"
        self.epoch = 0
        self.steps = 0  # training batches completed
        self.batches = 0  # batches of any stage completed
        self.wait_ns = 0
        # (ns of closed train stretches, start of the open one or 0): one tuple, so the sampler
        # thread never reads one half updated.
        self.train_clock = (0, 0)
        self.last_end_ns = 0  # any stage, for the hang rule
        self.last_train_end_ns = 0  # 0: no previous training batch in this stretch
        # The latest training loss, kept by reference: the sampler thread reads it (for a CUDA
        # tensor that read waits for the step on the sampler thread, not the training thread).
        self.loss: Any = None
        self.checkpoint_bytes = 0.0
        self.straggler: StragglerSignal | None = None
        self.growth: GrowthSignal | None = None  # the last epoch scan's (EpochScanCallback)

    def set_phase(self, phase: str) -> None:
        """Enter ``phase`` ("train", "val", "test", "idle"); closes the train stretch."""
        now = time.perf_counter_ns()
        closed, since = self.train_clock
        if since:
            closed += now - since
        self.train_clock = (closed, now if phase == "train" else 0)
        self.last_train_end_ns = 0
        self.phase = phase

    def train_time_ns(self, now: int) -> int:
        """Training wall time so far (the open stretch included)."""
        closed, since = self.train_clock
        return closed + (now - since if since else 0)

    def train_batch_start(self) -> None:
        if self.last_train_end_ns:
            self.wait_ns += time.perf_counter_ns() - self.last_train_end_ns

    def train_batch_end(self, loss: Any) -> None:
        now = time.perf_counter_ns()
        self.last_train_end_ns = self.last_end_ns = now
        self.steps += 1
        self.batches += 1
        self.loss = loss

    def eval_batch_end(self) -> None:
        self.last_end_ns = time.perf_counter_ns()
        self.batches += 1


def is_nonfinite(loss: Any) -> float | None:
    """1.0 / 0.0 for the latest loss (a tensor or a number), None when there is none."""
    if loss is None:
        return None
    try:
        value = float(loss.detach()) if hasattr(loss, "detach") else float(loss)
    except (TypeError, ValueError, RuntimeError):
        return None
    return 0.0 if math.isfinite(value) else 1.0
