"""One window of ``ProfilerCallback``: the live profiler and its trace files.

One window of ``ProfilerCallback``: the live ``torch.profiler`` object and the trace files of its
cycles, and the ranges that name every Lightning action in the trace while it records."""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
import torch

from trainperf.frameworks.lightning_grammar import classify_action
from trainperf.lightning.action_stream import add_listener
from trainperf.lightning.untimed_hooks import untimed_hook
from trainperf.probe.clock_snapshots import ClockSnapshots
from trainperf.probe.sync_debug import SyncDetector, SyncLine


class ActionRanges:
    """Action listener that opens a ``record_function`` range ``[pl][profile]{action}`` (as
    Lightning's ``PyTorchProfiler`` names them) per Lightning action while a window records. A
    stop without its start (an action that began before the window) is ignored; ranges still
    open when the window ends are closed then."""

    __slots__ = ("_open", "_trainer")

    def __init__(self) -> None:
        self._open: list[tuple[str, object]] = []
        self._trainer: weakref.ref[L.Trainer] | None = None

    def attach(self, trainer: L.Trainer) -> None:
        self._trainer = weakref.ref(trainer)
        add_listener(trainer, self)

    def wants(self, name: str) -> bool:
        """Every action but those whose hook does nothing
        (:mod:`trainperf.lightning.untimed_hooks`): the clock leaves the same ones out, so trace
        and clock agree on the hooks' time."""
        trainer = self._trainer() if self._trainer is not None else None
        if trainer is None:
            return True
        try:
            action = classify_action(name)
            return not untimed_hook(trainer, action.kind, action.target, action.hook)
        except Exception:
            return True

    def action_start(self, name: str) -> None:
        try:
            handle = torch.ops.profiler._record_function_enter_new("[pl][profile]" + name, None)
        except Exception:  # a listener must never raise inside Lightning's loop
            return
        self._open.append((name, handle))

    def action_stop(self, name: str) -> None:
        stack = self._open
        for k in range(len(stack) - 1, -1, -1):
            if stack[k][0] == name:
                handle = stack.pop(k)[1]
                # never raise inside Lightning's loop
                with contextlib.suppress(Exception):
                    torch.ops.profiler._record_function_exit._RecordFunction(handle)
                return

    def close_all(self) -> None:
        while self._open:
            self.action_stop(self._open[-1][0])


@dataclass(eq=False)
class Window:
    """One open profiling window."""

    stage: str
    epoch: int
    prof: torch.profiler.profile
    basename: str  # trace file name without cycle, rank and extension
    trigger: str  # "epoch" | "file" | "alert" | "request"
    reason: str
    steps: int = 0
    traces: list[Path] = field(default_factory=list)
    error: BaseException | None = None
    discarded: bool = False  # stop without exporting (exception, failure)
    ranges: ActionRanges = field(default_factory=ActionRanges)
    # the live phase clock at each ProfilerStep boundary
    clock: ClockSnapshots = field(default_factory=ClockSnapshots)
    first_batch: int | None = None  # batch_idx of the first and last step recorded
    last_batch: int | None = None
    export_s: float = 0.0  # time in prof.step()/stop() calls that exported a trace
    trainer: L.Trainer | None = None  # set while the action listener is attached
    syncs: SyncDetector | None = None  # detect_syncs: on while the window records
    sync_lines: list[SyncLine] = field(default_factory=list)  # what it found, at the close
