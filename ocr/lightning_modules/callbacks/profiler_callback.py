"""``ProfilerCallback``: torch.profiler windows over chosen epochs, analysed as soon as they close.

Each profiled epoch of a stage gets one window: a ``torch.profiler.profile`` started at the
stage's epoch start, stepped at every batch end (so a ``ProfilerStep`` span covers the step and the
fetch of the next batch, as in a plain PyTorch loop) under the schedule ``skip_first / wait /
warmup / active / repeat``, and stopped when the schedule is done or the stage's epoch ends. The
trace goes to ``<output_dir>/epoch_{N}.json[.gz]`` and is analysed with
:func:`ocr.perf.trace.analyze_trace`: rank zero prints the top-k tables and findings, every logger
gets a few scalars.

Outside a window nothing is attached: the profiler object is stopped and dropped, and every hook
returns after one attribute read. Any profiler failure (cannot start, unwritable directory, export
error) is one :class:`PerfCallbackWarning`; the callback then turns itself off and training goes on.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.profiler import ProfilerActivity

from ocr.lightning_modules.callbacks._shared import (
    PerfCallbackWarning,
    log_to_loggers,
    normalize_stages,
)
from ocr.perf.trace import analyze_trace
from ocr.perf.trace.render import print_analysis

__all__ = ["ProfilerCallback"]

log = logging.getLogger(__name__)

# Analyzer stage names (``ocr.perf.trace``) for our metric stage names.
_ANALYZER_STAGE = {"train": "train", "val": "validation", "test": "test"}
_ACTIVITIES = {name.lower(): act for name, act in ProfilerActivity.__members__.items()}


def _nonneg_int(owner: str, name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


class _Window:
    """One open profiling window: the live profiler and the files its cycles wrote."""

    def __init__(self, stage: str, epoch: int, prof: torch.profiler.profile) -> None:
        self.stage = stage
        self.epoch = epoch
        self.prof = prof
        self.steps = 0
        self.traces: list[Path] = []
        self.error: BaseException | None = None
        self.discarded = False  # stop without exporting (exception, failure)


class ProfilerCallback(Callback):
    """torch.profiler over chosen epochs, with the trace analysed and summarised after each window.

    Args:
        enabled: master switch (default ``True``); ``False`` makes every hook a no-op.
        profile_epochs: 0-based epoch numbers (``trainer.current_epoch``) to profile
            (default ``(1,)``: the second epoch, past the first epoch's warm-up effects).
            Test runs are profiled whenever ``"test"`` is in ``stages``, whatever the epoch.
        profile_steps: steps recorded per cycle (the schedule's ``active``), default 5.
        warmup_steps: steps traced but discarded before each active phase, default 1.
        skip_first: steps ignored once at the start of a window, default 0.
        wait: idle steps before each cycle's warm-up, default 0.
        repeat: cycles per window, default 1; 0 = cycles until the stage's epoch ends. Each cycle
            is one trace file (the second and later ones suffixed ``_cycle{k}``).
        activities: any of ``"cpu"``, ``"cuda"`` (also ``"xpu"``, ``"mtia"``, ``"hpu"``),
            default ``("cpu", "cuda")``; an activity this build or machine cannot record is
            dropped with one info line (a CPU-only run profiles the CPU).
        record_shapes: record operator input shapes (default ``True``).
        profile_memory: record allocations as ``[memory]`` events (default ``True``; CPU too).
        with_stack: record Python stacks (default ``False``; large traces, slower).
        output_dir: trace directory (default ``"profiler_traces"``); a relative path is resolved
            under ``trainer.default_root_dir``.
        export_chrome_trace: keep the Chrome trace ``epoch_{N}.json[.gz]`` (default ``True``).
            ``False`` still writes it for the analysis, then deletes it.
        gzip: write ``.json.gz`` (default ``False``).
        tensorboard: also place a copy, named as ``tensorboard_trace_handler`` names its files
            (``{host}_{pid}.{time_ns}.pt.trace.json[.gz]``), in ``<output_dir>/tensorboard``
            (default ``False``).
        log_top_k_ops: rows in the printed top-k operator tables (default 10).
        stages: which stages to profile, any of ``"train"``, ``"validate"`` (or ``"val"``),
            ``"test"`` (default ``("train",)``). Validation and test traces are named
            ``val_epoch_{N}`` / ``test_epoch_{N}``.

    Under DDP every rank profiles itself and the file names get a ``_rank{R}`` suffix; only rank
    zero prints and logs. Logged after each window (``{stage}`` = ``train``, ``val``, ``test``):
    ``profiler/{stage}_step_time_ms`` (mean traced step), ``profiler/{stage}_dataloader_pct``,
    ``profiler/{stage}_top_op_self_ms`` (self time per step of the costliest CPU operator).
    """

    def __init__(
        self,
        enabled: bool = True,
        profile_epochs: Iterable[int] = (1,),
        profile_steps: int = 5,
        warmup_steps: int = 1,
        skip_first: int = 0,
        wait: int = 0,
        repeat: int = 1,
        activities: Sequence[str] = ("cpu", "cuda"),
        record_shapes: bool = True,
        profile_memory: bool = True,
        with_stack: bool = False,
        output_dir: str | os.PathLike[str] = "profiler_traces",
        export_chrome_trace: bool = True,
        gzip: bool = False,
        tensorboard: bool = False,
        log_top_k_ops: int = 10,
        stages: Iterable[str] = ("train",),
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        epochs = []
        for e in profile_epochs:
            epochs.append(_nonneg_int(owner, "profile_epochs entries", e))
        self.enabled = bool(enabled)
        self.profile_epochs = frozenset(epochs)
        self.profile_steps = _nonneg_int(owner, "profile_steps", profile_steps, 1)
        self.warmup_steps = _nonneg_int(owner, "warmup_steps", warmup_steps)
        self.skip_first = _nonneg_int(owner, "skip_first", skip_first)
        self.wait = _nonneg_int(owner, "wait", wait)
        self.repeat = _nonneg_int(owner, "repeat", repeat)
        if isinstance(activities, str):
            raise ValueError(f"{owner}: activities must be a list, got the string {activities!r}")
        self.activities: tuple[str, ...] = ()
        for name in activities:
            key = str(name).lower()
            if key not in _ACTIVITIES:
                raise ValueError(
                    f"{owner}: unknown activity {name!r} in activities; expected some of "
                    f"{', '.join(sorted(_ACTIVITIES))}"
                )
            self.activities += (key,)
        if not self.activities:
            raise ValueError(f"{owner}: activities is empty")
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.output_dir = Path(output_dir)
        self.export_chrome_trace = bool(export_chrome_trace)
        self.gzip = bool(gzip)
        self.tensorboard = bool(tensorboard)
        self.log_top_k_ops = _nonneg_int(owner, "log_top_k_ops", log_top_k_ops, 1)
        self.stages = normalize_stages(stages, owner)

        self._active = False  # enabled and not failed, for the current run
        self._warned = False
        self._window: _Window | None = None
        self._dir: Path | None = None
        self._rank_suffix = ""
        self._torch_activities: list[ProfilerActivity] = []
        #: Trace files written in this run, in order (rank-local).
        self.trace_paths: list[Path] = []

    # -- configuration -----------------------------------------------------------------------

    def _resolve_activities(self) -> list[ProfilerActivity]:
        supported = torch.profiler.supported_activities()
        available = {
            "cuda": torch.cuda.is_available(),
            "xpu": hasattr(torch, "xpu") and torch.xpu.is_available(),
        }
        out: list[ProfilerActivity] = []
        dropped: list[str] = []
        for name in self.activities:
            act = _ACTIVITIES[name]
            if act in supported and available.get(name, True):
                out.append(act)
            else:
                dropped.append(name)
        if dropped:
            log.info(
                "%s: %s not available here, profiling %s",
                type(self).__name__,
                ", ".join(dropped),
                ", ".join(a.name.lower() for a in out) or "cpu",
            )
        return out or [ProfilerActivity.CPU]

    # -- lifecycle ---------------------------------------------------------------------------

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._warned = False  # one warning per run
        self._active = self.enabled and bool(self.stages)
        if not self._active:
            return
        try:
            out = self.output_dir
            if not out.is_absolute():
                out = Path(trainer.default_root_dir) / out
            self._dir = out
            self._rank_suffix = f"_rank{trainer.global_rank}" if trainer.world_size > 1 else ""
            self._torch_activities = self._resolve_activities()
        except Exception as exc:
            self._fail(exc)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._close(trainer, analyse=True)
        self._active = False

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._discard()
        self._active = False

    def _fail(self, exc: BaseException) -> None:
        """One warning per run, then off; a live profiler is stopped and dropped."""
        self._active = False
        self._discard()
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"{type(self).__name__} failed and is off for the rest of this run "
                f"({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=2,
            )

    # -- windows -----------------------------------------------------------------------------

    def _trace_path(self, stage: str, epoch: int, cycle: int) -> Path:
        assert self._dir is not None
        prefix = "" if stage == "train" else f"{stage}_"
        suffix = f"_cycle{cycle}" if cycle else ""
        ext = ".json.gz" if self.gzip else ".json"
        return self._dir / f"{prefix}epoch_{epoch}{suffix}{self._rank_suffix}{ext}"

    def _open(self, trainer: L.Trainer, stage: str) -> None:
        if not self._active or stage not in self.stages:
            return
        epoch = trainer.current_epoch
        if stage != "test" and epoch not in self.profile_epochs:
            return
        self._close(trainer, analyse=True)  # a window left open (mid-epoch validation)
        if not self._active:
            return
        try:
            assert self._dir is not None
            # Fail before the window, not at export time after it (unwritable / not a directory).
            self._dir.mkdir(parents=True, exist_ok=True)
            if not os.access(self._dir, os.W_OK | os.X_OK):
                raise PermissionError(f"output_dir {str(self._dir)!r} is not writable")
            schedule = torch.profiler.schedule(
                wait=self.wait,
                warmup=self.warmup_steps,
                active=self.profile_steps,
                repeat=self.repeat,
                skip_first=self.skip_first,
            )
            prof = torch.profiler.profile(
                activities=self._torch_activities,
                schedule=schedule,
                on_trace_ready=self._on_trace_ready,
                record_shapes=self.record_shapes,
                profile_memory=self.profile_memory,
                with_stack=self.with_stack,
            )
            self._window = _Window(stage, epoch, prof)
            prof.start()
        except Exception as exc:
            self._fail(exc)

    def _on_trace_ready(self, prof: torch.profiler.profile) -> None:
        # Called by torch from inside step()/stop(): never raise through its state machine;
        # the error is picked up right after the call returns.
        window = self._window
        if window is None or window.discarded:
            return
        try:
            path = self._trace_path(window.stage, window.epoch, len(window.traces))
            prof.export_chrome_trace(str(path))
            window.traces.append(path)
            if self.tensorboard:
                tb = path.parent / "tensorboard"
                tb.mkdir(exist_ok=True)
                name = f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json"
                shutil.copyfile(path, tb / (name + (".gz" if self.gzip else "")))
        except Exception as exc:
            window.error = exc

    def _step(self, trainer: L.Trainer, stage: str) -> None:
        window = self._window
        if window is None or window.stage != stage:
            return
        try:
            window.prof.step()
            window.steps += 1
            if window.error is not None:
                raise window.error
        except Exception as exc:
            self._fail(exc)
            return
        total = self.skip_first + (self.wait + self.warmup_steps + self.profile_steps) * self.repeat
        if self.repeat and window.steps >= total:
            self._close(trainer, analyse=True)

    def _release(self) -> _Window | None:
        """Stop and drop the live profiler; the window (with its error, if any) is returned."""
        window = self._window
        if window is not None:
            try:
                window.prof.stop()  # may fire _on_trace_ready (a cycle in progress)
            except Exception as exc:
                window.error = window.error or exc
            finally:
                self._window = None
                window.prof = None  # type: ignore[assignment]
        return window

    def _discard(self) -> None:
        window = self._window
        if window is not None:
            window.discarded = True
            self._release()

    def _close(self, trainer: L.Trainer, analyse: bool) -> None:
        window = self._release()
        if window is None:
            return
        if window.error is not None:
            self._fail(window.error)
            return
        self.trace_paths.extend(window.traces)
        if not analyse:
            return
        try:
            for path in window.traces:
                self._report(trainer, window.stage, path)
                if not self.export_chrome_trace:
                    path.unlink()
        except Exception as exc:
            self._fail(exc)

    def _report(self, trainer: L.Trainer, stage: str, path: Path) -> None:
        report = analyze_trace(path, top_k=self.log_top_k_ops)
        if trainer.is_global_zero:
            print_analysis(report)
        steps = [
            row["wall_ms"] for row in report["steps"] if row["stage"] == _ANALYZER_STAGE[stage]
        ] or [row["wall_ms"] for row in report["steps"]]
        metrics = {f"profiler/{stage}_dataloader_pct": float(report["dataloader_time_pct"])}
        if steps:
            metrics[f"profiler/{stage}_step_time_ms"] = sum(steps) / len(steps)
        top = report["top_cpu_ops"]
        if top:
            per_step = top[0]["self_ms_per_step"]
            metrics[f"profiler/{stage}_top_op_self_ms"] = float(
                per_step if per_step is not None else top[0]["self_ms"]
            )
        log_to_loggers(trainer, metrics)
        log.info(
            "%s: %s trace %s: %d steps, mean %.3f ms, data loading %.1f%%, %d findings",
            type(self).__name__,
            stage,
            path,
            len(steps),
            metrics.get(f"profiler/{stage}_step_time_ms", float("nan")),
            metrics[f"profiler/{stage}_dataloader_pct"],
            len(report["findings"]),
        )

    # -- hooks -------------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._active:
            self._open(trainer, "train")

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._window is not None:
            self._step(trainer, "train")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._window is not None:
            self._close(trainer, analyse=True)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Validation runs inside the training epoch: the train window ends before it, so a
        # train trace never holds validation steps.
        if self._window is not None:
            self._close(trainer, analyse=True)
        if self._active and not trainer.sanity_checking:
            self._open(trainer, "val")

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._window is not None:
            self._step(trainer, "val")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._window is not None:
            self._close(trainer, analyse=True)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._active:
            self._open(trainer, "test")

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._window is not None:
            self._step(trainer, "test")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._window is not None:
            self._close(trainer, analyse=True)
