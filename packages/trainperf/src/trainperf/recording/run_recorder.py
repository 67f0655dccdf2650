"""One run's recording that any training loop can drive (no framework): :class:`RunRecorder`.

A framework adapter (``trainperf.loop`` for a plain PyTorch loop; ``trainperf.hf``) tells it
when a stage epoch opens and closes, when a batch ends and with how many samples, and which
phase runs (the clock's names, ``trainperf.core.clock.PHASES``); it composes the same parts the
Lightning recorder does:

- the phase clock (:func:`~trainperf.recording.cuda_events.device_clock`: on a CUDA device CUDA
  events at each phase switch give GPU time per phase, read without blocking; no per-step host
  read of a device tensor), active for ``perf_phase`` blocks while a window is open;
- the windows (:class:`~trainperf.recording.stage_windows.StageWindows`): each stage's epoch and
  its :class:`~trainperf.records.epochs.EpochRecord`, validation inside training pausing it;
- DataLoader worker timing (:class:`~trainperf.probe.worker.InstrumentedLoader`,
  :meth:`RunRecorder.instrument`);
- memory peaks (:class:`~trainperf.probe.device_memory.MemorySampler`);
- the cross-rank exchange at each epoch close over any ``torch.distributed`` process group
  (:class:`~trainperf.recording.cross_rank.RankExchange`: every rank the same collectives with
  the same shapes), and the DDP gradient all-reduce timer (its wait is ``sync_wait``);
- the run files (rank zero: ``perf/run.json``, ``perf/epochs.jsonl``, ``perf/intervals.jsonl``;
  every rank its ``perf/lifecycle.jsonl`` lines), so ``trainperf report`` / ``watch`` /
  ``baseline`` / ``check`` / ``compare`` read the folder as any other.

A failure inside the recorder is one :class:`~trainperf.errors.PerfCallbackWarning` and turns
recording off (under several ranks it stays in the epoch-close exchanges with its health flag
down, so every rank turns off together); training never sees an exception.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from trainperf.core.clock import PhaseClock, set_active_clock
from trainperf.core.ranks import Straggler
from trainperf.errors import PerfCallbackWarning
from trainperf.probe import loader_seams
from trainperf.probe.device_memory import MemorySampler
from trainperf.probe.worker import InstrumentedLoader, WorkerTiming
from trainperf.recording.cross_rank import CommTimer, RankExchange
from trainperf.recording.cuda_events import EventClock, device_clock
from trainperf.recording.run_files import Interruption, Lifecycle, RunFiles
from trainperf.recording.stage_state import EpochWindow
from trainperf.recording.stage_windows import StageWindows
from trainperf.recording.subscribers import IntervalProgress
from trainperf.records.epochs import EpochRecord, LoaderSettings
from trainperf.records.schema import JsonValue

__all__ = ["INTERVAL_BATCHES", "RunRecorder", "batch_size_of", "distributed_layout"]

#: Training batches between two progress records (``perf/intervals.jsonl``, written at most
#: every 10 s): ``trainperf watch`` follows them.
INTERVAL_BATCHES = 50


def distributed_layout(
    group: torch.distributed.ProcessGroup | None = None,
) -> tuple[int, int]:
    """``(rank, world_size)`` of this process in ``group`` (default: the default process group,
    however it was set up: ``torchrun``, ``accelerate``, Lightning); ``(0, 1)`` without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank(group)), int(dist.get_world_size(group))
    return 0, 1


def batch_size_of(batch: Any, depth: int = 0) -> int:
    """Samples in ``batch``: the first dimension of its first tensor (in a tuple, list or
    mapping, searched a few levels deep), else ``len`` of a sequence; 0 when none is found."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if depth < 3:
        if isinstance(batch, Mapping):
            for value in batch.values():
                n = batch_size_of(value, depth + 1)
                if n:
                    return n
        elif isinstance(batch, list | tuple):
            for value in batch:
                n = batch_size_of(value, depth + 1)
                if n:
                    return n
            return len(batch)
    return 0


class RunRecorder:
    """One run's recording on this process (module docstring).

    Args:
        run_dir: the run folder; the files go to ``run_dir/perf/`` (rank zero) and this rank's
            lifecycle lines too.
        device: where the model runs (a CUDA device gives GPU time per phase); default CPU.
        group: the process group of the cross-rank exchange (None: the default group, if any).
        track_memory: memory peaks per epoch (a reading at open, close and at most once a
            second in between).
        sync_cuda: synchronize the device at every phase switch (opt-in: host phases then hold
            their GPU work; costs the overlap). Off: CUDA events only.
        write_run_files: write the ``perf/`` files (off: measure only).
        run: the lifecycle's name of what runs (``fit``, ``validate``, ``test``).
        who: how warnings name the recorder (the adapter's class).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        device: torch.device | str | None = None,
        group: torch.distributed.ProcessGroup | None = None,
        track_memory: bool = True,
        sync_cuda: bool = False,
        write_run_files: bool = True,
        run: str = "fit",
        who: str = "RunRecorder",
    ) -> None:
        self.run_dir = Path(run_dir)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.rank, self.world_size = distributed_layout(group)
        self.who = who
        self.clock: PhaseClock
        self.clock, events = device_clock(self.device)
        if sync_cuda and isinstance(self.clock, EventClock):
            self.clock.sync_each_switch(True)
        self.memory = MemorySampler()
        self.memory.track = bool(track_memory)
        self.windows = StageWindows(self.clock, self._start_clock, self.memory, events)
        self.exchange = RankExchange(self.world_size, group)
        self.measuring = True
        self.finished = False
        self.global_step = 0
        self.files: RunFiles | None = None
        self._lifecycle: Lifecycle | None = None
        self._loaders: list[InstrumentedLoader] = []
        self._worker_timing_warned = False
        if write_run_files:
            self._guard(lambda: self._open_files(run))

    # -- what it knows ---------------------------------------------------------------------

    @property
    def straggler(self) -> Straggler | None:
        """The straggler of the last gathered epoch (several ranks)."""
        return self.exchange.straggler

    def open_window(self) -> EpochWindow | None:
        """The innermost open window (a live line reads it), None when none or off."""
        return self.windows.innermost() if self.measuring else None

    # -- files -----------------------------------------------------------------------------

    def _open_files(self, run: str) -> None:
        if self.rank == 0:
            self.files = RunFiles(self.run_dir)
            self.files.run_info({"world_size": self.world_size, "device": str(self.device)})
        self._lifecycle = Lifecycle(self.run_dir, run, self.rank, self.world_size)

    def run_info(self, extra: Mapping[str, JsonValue]) -> None:
        """Merge ``extra`` (``RunRecord`` fields) into ``perf/run.json`` (rank zero)."""
        if self.files is not None:
            self.files.run_info(extra)

    # -- phases ----------------------------------------------------------------------------

    def _start_clock(self) -> None:
        self.clock.start("unattributed")
        set_active_clock(self.clock)

    def switch(self, phase: str, owner: str = "") -> str:
        """Charge from now on to ``phase`` (the clock's names); the phase that ran, ``""`` when no
        window is open."""
        return self.clock.switch(phase, owner)

    # -- windows ---------------------------------------------------------------------------

    def open_epoch(self, stage: str, epoch: int) -> None:
        """Open ``stage``'s window for ``epoch`` (validation inside an open train window pauses
        it)."""
        if self.finished:
            return
        try:
            self.windows.open_window(stage, epoch, timed=self.measuring)
        except Exception as exc:
            self._fail(exc)

    def batch_end(
        self, stage: str, samples: int | None = None, global_step: int | None = None
    ) -> EpochWindow | None:
        """A batch of ``stage`` ended; ``samples`` its size when no instrumented DataLoader
        reported one; ``global_step`` the loop's optimizer steps so far (None: one per training
        batch). Every :data:`INTERVAL_BATCHES` training batches the progress goes to
        ``perf/intervals.jsonl``. The open window, or None."""
        if not self.measuring:
            return None
        try:
            state = self.windows.states[stage]
            if samples is not None and not state.timing_samples:
                state.noted_samples = samples
            window = self.windows.count_batch(stage)
            if window is not None and stage == "train":
                self.global_step = self.global_step + 1 if global_step is None else global_step
                if window.num_batches % INTERVAL_BATCHES == 0:
                    self._interval(window)
            return window
        except Exception as exc:
            self._fail(exc)
            return None

    def _interval(self, window: EpochWindow) -> None:
        """The open training window's progress so far to ``perf/intervals.jsonl`` (written at
        most every 10 s; ``trainperf watch`` follows it)."""
        files = self.files
        if files is not None:
            files.interval(
                IntervalProgress(
                    window.stage,
                    window.epoch,
                    window.num_batches,
                    window.samples,
                    window.last_batch_end_ns / 1e9,
                    self.world_size,
                    self.global_step,
                    window.phases_s(self.clock),
                )
            )

    def close_epoch(self, stage: str) -> EpochRecord | None:
        """Close ``stage``'s open window, exchange across ranks (every rank calls this at the
        same closes) and write its record; the gathered record, or None (none open, or
        recording off)."""
        if self.finished or self.windows.states[stage].epoch is None:
            return None
        local: EpochRecord | None = None
        try:
            local = self.windows.close_window(
                stage,
                timed=self.measuring,
                owner_groups={},
                sync_wait_measured=self.exchange.sync_wait_measured,
                global_step=self.global_step,
            )
        except Exception as exc:
            self._fail(exc)
        try:
            report, off = self._gather(local if self.measuring else None)
            if off is not None:
                if self.measuring:
                    warnings.warn(
                        f"{self.who}: performance recording is off for the rest of this run: {off}",
                        PerfCallbackWarning,
                        stacklevel=2,
                    )
                self.close("failed")
                return None
            if report is not None and self.files is not None:
                self.files.epoch(report)
            return report
        except Exception as exc:
            self._fail(exc)
            return None

    def _gather(self, local: EpochRecord | None) -> tuple[EpochRecord | None, str | None]:
        """The exchange, charged to ``sync_wait`` in the window open by then (validation's close
        inside a training epoch): the wait for the other ranks, as ``sync_wait_measured`` says."""
        if self.world_size <= 1:
            return self.exchange.gather(local)
        previous = self.clock.switch("sync_wait")
        try:
            return self.exchange.gather(local)
        finally:
            if previous:
                self.clock.switch(previous)

    # -- DataLoaders and DDP ---------------------------------------------------------------

    def instrument(self, loader: object, stage: str) -> bool:
        """Time ``loader``'s worker-side work (fetch, collate, parts) for ``stage`` when it is a
        DataLoader and this torch has the seams; whether it is instrumented now. A loader
        already instrumented (by us) stays so."""
        if not isinstance(loader, DataLoader) or not self.measuring:
            return False
        state = self.windows.states[stage]
        state.num_workers = int(loader.num_workers)
        state.loader = LoaderSettings.of(loader)
        if getattr(type(loader), "_ocr_perf_base", None) is not None:
            return True
        missing = loader_seams.missing()
        if missing:
            if not self._worker_timing_warned:
                self._worker_timing_warned = True
                warnings.warn(
                    f"{self.who}: {loader_seams.describe(missing)}; DataLoader worker timing is "
                    "off, phases are still measured",
                    PerfCallbackWarning,
                    stacklevel=3,
                )
            return False
        try:
            handle = InstrumentedLoader(loader, self._on_timing, self.clock, on_error=self._fail)
        except Exception as exc:
            self._fail(exc)
            return False
        self._loaders.append(handle)
        return True

    def _on_timing(self, timing: WorkerTiming) -> None:
        if self.measuring and self.windows.open:
            self.windows.states[self.windows.open[-1]].add_timing(timing)

    def hook_ddp(self, model: torch.nn.Module | None) -> CommTimer | None:
        """Time a ``DistributedDataParallel`` model's gradient all-reduce (once; None for any
        other model or one with the user's own communication hook)."""
        return self.exchange.hook(model)

    # -- failure and close -----------------------------------------------------------------

    def _guard(self, work: Callable[[], object]) -> None:
        try:
            work()
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Recording off after an internal error: one warning; under several ranks the
        recorder keeps joining the epoch-close exchanges with its flag down."""
        if not self.measuring:
            return
        self.measuring = False
        warnings.warn(
            f"{self.who}: performance recording failed and is off for the rest of this run "
            f"({type(exc).__name__}: {exc})",
            PerfCallbackWarning,
            stacklevel=3,
        )
        if self.clock.running:
            self.clock.stop()
        set_active_clock(None)
        if self.world_size <= 1:
            self.close("failed")

    def close(self, status: str = "finished", interruption: Interruption | None = None) -> None:
        """Stop everything and undo the instrumentation (idempotent); ``status`` (``finished``,
        ``failed``; ``interrupted`` with ``interruption``) is this rank's end line."""
        if self.finished:
            return
        self.finished = True
        self.measuring = False
        if self.clock.running:
            self.clock.stop()
        set_active_clock(None)
        self.windows.forget()
        loaders, self._loaders = self._loaders, []
        for handle in loaders:
            try:
                handle.restore()
            except Exception as exc:  # never raise into the loop
                warnings.warn(
                    f"{self.who}: could not undo the DataLoader instrumentation "
                    f"({type(exc).__name__}: {exc})",
                    PerfCallbackWarning,
                    stacklevel=2,
                )
        lifecycle, self._lifecycle = self._lifecycle, None
        if lifecycle is not None:
            lifecycle.end(status, interruption)
        if self.files is not None:
            self.files.close()
