"""``trainperf.loop.Monitor``: the performance monitors for a plain PyTorch loop.

Three lines added to it::

    from trainperf.loop import Monitor
    with Monitor("runs/plain", model=model, optimizer=optimizer) as mon:
        for epoch in range(epochs):
            for batch in mon.train(loader):        # one training epoch
                ...forward, backward, optimizer.step()...
            for batch in mon.validate(val_loader): # one validation epoch (mon.test likewise)
                ...

Each epoch's phases (the clock's names) sum to its wall time: ``data_wait`` (inside the
loader's ``__next__``, worker start-up included), ``transfer`` (:meth:`Monitor.to_device`, or a
``perf_phase("transfer")`` block), ``forward`` / ``backward`` / ``optimizer`` / ``sync_wait``
(:mod:`trainperf.loop.hooks`), custom ``perf_phase`` blocks, ``unattributed`` the rest. The run
folder is the one the Lightning callbacks write (``perf/run.json``, ``perf/epochs.jsonl``, ...):
``trainperf report`` / ``watch`` / ``baseline`` / ``check`` / ``compare`` / ``try`` read it.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import torch

from trainperf.core.knobs import Knob
from trainperf.core.trial_window import TryWindow
from trainperf.errors import PerfCallbackWarning
from trainperf.loop.extras import ProfilerWindows, ResourceSampling
from trainperf.loop.hooks import StepHooks
from trainperf.loop.trial_knobs import KnobLog, apply_process_knobs, rebuild_loader
from trainperf.present.live import live_line, live_verdict
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions
from trainperf.recording.run_files import Interruption
from trainperf.recording.run_recorder import RunRecorder, batch_size_of
from trainperf.records.run_record import PlainLoopSetup

__all__ = ["Monitor"]

T = TypeVar("T")


class Monitor:
    """Records a plain loop's epochs into ``run_dir`` (module docstring).

    Args:
        run_dir: the run folder (``perf/`` goes inside); in a ``trainperf try`` trial the
            trial's own folder instead.
        model: the root module the loop calls (a ``DistributedDataParallel`` wrapper as it is);
            None: forward and backward are not told apart from the rest (one warning).
        optimizer: the optimizer the loop steps; None: its step is not told apart (one
            warning).
        device: where the model runs; default: the model's first parameter's device (CUDA:
            GPU time per phase from CUDA events, no per-step host read).
        live: write the live phase line to stderr at most every ``live_interval_s`` (rank
            zero); default True.
        live_interval_s: seconds between two live lines; default 30.
        track_memory: memory peaks per epoch; default True.
        sync_cuda: synchronize the device at every phase switch (opt-in); default False.
        resources: sample host, worker and GPU resources on a thread into
            ``perf/resources.jsonl`` with the alert rules; default False.
        profile: profile the epochs this :class:`ProfileSchedule` names (its ``epochs``,
            ``stages`` and cycle) with ``torch.profiler``; default None: no profiling.
        trace: what a profiled window records and where (:class:`TraceOptions`); default
            ``TraceOptions()``.
        group: the process group of the per-epoch exchange across ranks (default: the
            default group, when ``torch.distributed`` is initialized).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        device: torch.device | str | None = None,
        live: bool = True,
        live_interval_s: float = 30.0,
        track_memory: bool = True,
        sync_cuda: bool = False,
        resources: bool = False,
        profile: ProfileSchedule | None = None,
        trace: TraceOptions | None = None,
        group: torch.distributed.ProcessGroup | None = None,
    ) -> None:
        if not live_interval_s > 0:
            raise ValueError(f"Monitor: live_interval_s must be > 0, got {live_interval_s!r}")
        self.window = TryWindow.from_env()
        root = Path(run_dir) if self.window is None else self.window.perf_dir
        self.run_dir = root
        if device is None and model is not None:
            param = next(model.parameters(), None)
            device = param.device if param is not None else None
        self.model = model
        self.optimizer = optimizer
        self.recorder = RunRecorder(
            root, device=device, group=group, track_memory=track_memory, sync_cuda=sync_cuda,
            who="trainperf.loop.Monitor",
        )  # fmt: skip
        rec = self.recorder
        self.live = bool(live) and rec.rank == 0
        self.live_interval_s = float(live_interval_s)
        self._last_live = time.monotonic()
        self._stage = ""
        self._train_epochs = 0
        self._eval_epochs = {"val": 0, "test": 0}
        self._trial_batches = 0
        self._loader_knobs: tuple[Knob, ...] = ()
        self._rebuilt: dict[int, tuple[object, Iterable[Any]]] = {}  # id -> (given, rebuilt)
        self._batch = 0  # training batches of the open training epoch
        # the epochs' generators not yet finished: close() ends them (a loop that broke out)
        self._running: weakref.WeakSet[Iterator[Any]] = weakref.WeakSet()
        # epochs the loop left (break or exception) under several ranks: closed, with their
        # exchange, at the next step of the loop or a clean close; dropped after an exception
        self._left: list[str] = []
        self._setup = PlainLoopSetup()
        self._setup_written = False
        self.hooks = StepHooks(rec.clock, lambda: self._stage == "train", rec._fail)
        self._say_what_cannot_split(model, optimizer)
        if model is not None:
            self.hooks.hook_model(model)
            self.hooks.comm = rec.hook_ddp(model)
        if optimizer is not None:
            self.hooks.hook_optimizer(optimizer)
            defaults = optimizer.defaults
            self._setup = PlainLoopSetup(
                optimizer=type(optimizer).__name__,
                fused=_flag(defaults.get("fused")),
                foreach=_flag(defaults.get("foreach")),
            )
        rec.run_info({"framework": "loop"})
        self._open_trial(optimizer)
        self.resources = ResourceSampling(root, rec) if resources else None
        self.profiler = ProfilerWindows(root, profile, trace or TraceOptions(), rec.rank)
        if profile is None:
            self.profiler.off = True

    # -- setup -----------------------------------------------------------------------------

    @staticmethod
    def _say_what_cannot_split(
        model: torch.nn.Module | None, optimizer: torch.optim.Optimizer | None
    ) -> None:
        missing = []
        if model is None:
            missing.append("without model=, forward and backward stay in unattributed")
        if optimizer is None:
            what = "backward" if model is not None else "unattributed"
            missing.append(f"without optimizer=, the optimizer step is counted in {what}")
        if missing:
            warnings.warn(
                f"trainperf.loop.Monitor: {'; '.join(missing)}",
                PerfCallbackWarning,
                stacklevel=3,
            )

    def _open_trial(self, optimizer: torch.optim.Optimizer | None) -> None:
        window = self.window
        if window is None:
            return
        if self.recorder.rank == 0 and not window.opened_by_ocr_perf_try():
            warnings.warn(window.announcement(), UserWarning, stacklevel=3)
        log = KnobLog(window.perf_dir, self.recorder.rank == 0, "this plain loop")
        apply_process_knobs(window.knobs, optimizer, log)
        self._loader_knobs = tuple(k for k in window.knobs if k.spec.target == "loader")
        self._knob_log = log

    def _trial_loader(self, loader: Iterable[T]) -> Iterable[T]:
        """The training ``loader`` rebuilt with the trial's DataLoader knobs (once per loader:
        later epochs get the same rebuilt one, its persistent workers kept)."""
        if not self._loader_knobs:
            return loader
        known = self._rebuilt.get(id(loader))
        if known is not None and known[0] is loader:
            return known[1]
        try:
            new, note = rebuild_loader(loader, self._loader_knobs)
        except ValueError as exc:
            raise self._knob_log.refuse(self._loader_knobs, str(exc)) from exc
        if not self._rebuilt:
            for knob in self._loader_knobs:
                self._knob_log.write(knob, "applied", note)
        self._rebuilt[id(loader)] = (loader, new)
        return new

    # -- the stages ------------------------------------------------------------------------

    def train(self, loader: Iterable[T]) -> Iterator[T]:
        """One training epoch over ``loader``: its batches, each timed."""
        return self._epoch("train", loader)

    def validate(self, loader: Iterable[T]) -> Iterator[T]:
        """One validation epoch over ``loader`` (inside a training epoch it pauses it)."""
        return self._epoch("val", loader)

    def test(self, loader: Iterable[T]) -> Iterator[T]:
        """One test epoch over ``loader``."""
        return self._epoch("test", loader)

    def _epoch(self, stage: str, loader: Iterable[T]) -> Iterator[T]:
        window = self.window
        if window is not None:
            if stage == "train":
                if self._trial_batches >= window.total_batches:
                    return iter(())  # the trial's window is full: no more training
                loader = self._trial_loader(loader)
            elif "val" not in window.keep:
                return iter(())
        batches = self._batches(stage, loader)
        self._running.add(batches)
        return batches

    def _batches(self, stage: str, loader: Iterable[T]) -> Iterator[T]:
        rec = self.recorder
        self._close_left()
        if stage == "train":
            epoch = self._train_epochs
            self._train_epochs += 1
            self._note_loader(loader)
        else:
            epoch = self._train_epochs - 1 if self._train_epochs else self._eval_epochs[stage]
            self._eval_epochs[stage] += 1
        timed = rec.instrument(loader, stage)
        outer = self._stage
        self._stage = stage
        rec.open_epoch(stage, epoch)
        profiler = self.profiler.open(stage, epoch)
        clock = rec.clock
        trial = self.window is not None and stage == "train"
        signals = self.resources.signals if self.resources is not None else None
        left = False
        try:
            clock.switch("data_wait")
            it = iter(loader)
            while True:
                clock.switch("data_wait")
                try:
                    batch = next(it)
                except StopIteration:
                    break
                clock.switch("unattributed")
                try:
                    yield batch
                except GeneratorExit:
                    left = True
                    raise
                if self._left:
                    self._close_left()  # an inner epoch the loop broke out of
                win = rec.batch_end(stage, None if timed else batch_size_of(batch))
                if signals is not None and stage == "train":
                    signals.train_batch_end(None)
                if profiler is not None:
                    profiler.step()
                if win is not None:
                    if stage == "train":
                        self._batch = win.num_batches
                    if self.live and time.monotonic() - self._last_live >= self.live_interval_s:
                        self._live_line(stage, epoch, win.num_batches)
                if trial:
                    self._trial_batches += 1
                    if self._trial_batches >= self.window.total_batches:  # type: ignore[union-attr]
                        break
        finally:
            if profiler is not None:
                self.profiler.close(profiler)
            self._stage = outer
            if left and rec.world_size > 1:
                # the loop broke out, or raised: only the next step or close tells which, and
                # after an exception the ranks are out of step (an exchange would wait forever)
                self._left.append(stage)
            else:
                rec.close_epoch(stage)
            if stage == "train" and not self._setup_written:
                self._write_setup()

    def _close_left(self) -> None:
        """Close the epochs the loop left: it went on, so the ranks are in step."""
        left, self._left = self._left, []
        for stage in reversed(left):  # innermost first
            self.recorder.close_epoch(stage)

    # -- helpers for the loop --------------------------------------------------------------

    def to_device(self, batch: T, device: torch.device | str, non_blocking: bool = False) -> T:
        """``batch`` (a tensor, or tensors in tuples, lists and dicts) moved to ``device``,
        charged to ``transfer``."""
        clock = self.recorder.clock
        previous = clock.switch("transfer")
        try:
            return _moved(batch, torch.device(device), non_blocking)
        finally:
            if previous:
                clock.switch(previous)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the block to phase ``name`` (as ``trainperf.perf_phase``)."""
        from trainperf.core.clock import perf_phase

        with perf_phase(name):
            yield

    # -- what the loop showed ----------------------------------------------------------------

    def _note_loader(self, loader: object) -> None:
        if self._setup.num_workers is not None or self._setup_written:
            return
        from torch.utils.data import DataLoader

        if isinstance(loader, DataLoader):
            self._setup = _replace(
                self._setup,
                num_workers=int(loader.num_workers),
                pin_memory=bool(loader.pin_memory),
                persistent_workers=bool(loader.persistent_workers),
                prefetch_factor=loader.prefetch_factor,
                batch_size=loader.batch_size,
            )

    def _write_setup(self) -> None:
        self._setup_written = True
        precision = self.hooks.precision
        setup = _replace(self._setup, precision=precision)
        import msgspec

        info: dict[str, Any] = {"plain_loop": msgspec.to_builtins(setup)}
        if precision is not None:
            info["precision"] = precision
        self.recorder.run_info(info)

    def _live_line(self, stage: str, epoch: int, batches: int) -> None:
        rec = self.recorder
        try:
            win = rec.open_window()
            if win is None:
                return
            phases = win.phases_s(rec.clock)
            straggler = rec.straggler.rank if rec.straggler is not None else None
            rate = win.samples_per_sec(time.perf_counter_ns())
            line = live_line(
                phases, rate, live_verdict(stage, phases, straggler), world_size=rec.world_size
            )
            if line:
                self._last_live = time.monotonic()
                print(f"[trainperf] epoch {epoch} {stage} batch {batches}: {line}", file=sys.stderr)
        except Exception as exc:
            self.live = False
            warnings.warn(
                f"the live phase line is off ({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=2,
            )

    # -- the end ---------------------------------------------------------------------------

    def close(self, status: str = "finished", interruption: Interruption | None = None) -> None:
        """End the run's recording (idempotent): hooks off, files closed, this rank's end.
        Under several ranks an epoch the loop left by an exception ends without its exchange."""
        for batches in list(self._running):
            batches.close()  # type: ignore[attr-defined]  # generators: their epoch closes
        if status == "finished":
            self._close_left()
        self._left = []  # after an exception: dropped, no exchange (recorder.close)
        self.hooks.remove()
        if self.resources is not None:
            self.resources.close()
            self.resources = None
        if not self._setup_written and self._train_epochs:
            self._write_setup()
        self.recorder.close(status, interruption)

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        elif issubclass(exc_type, KeyboardInterrupt):
            epoch = max(self._train_epochs - 1, 0)
            self.close("interrupted", Interruption("SIGINT", epoch, self._batch, False))
        else:
            self.close("failed")


def _flag(value: object) -> bool | None:
    return None if value is None else bool(value)


def _replace(setup: PlainLoopSetup, **changes: Any) -> PlainLoopSetup:
    import msgspec

    return msgspec.structs.replace(setup, **changes)


def _moved(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: _moved(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        moved = [_moved(v, device, non_blocking) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch
