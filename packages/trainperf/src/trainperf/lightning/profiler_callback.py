"""``ProfilerCallback``: torch.profiler windows, analysed as they close.

``ProfilerCallback``: torch.profiler windows over chosen epochs or on demand, analysed as soon
as they close.

A window is a ``torch.profiler.profile`` started at the stage's epoch start (or, on demand, at a
step boundary), stepped at every batch end (so a ``ProfilerStep`` span covers the step and the
fetch of the next batch, as in a plain PyTorch loop) and stopped when its schedule is done or the
stage's epoch ends. All its cycles are then analysed together with :mod:`trainperf.analysis.trace`.

Outside a window nothing is attached: every hook returns after an attribute read (plus a counter
decrement in on-demand mode). Any profiler failure (cannot start, unwritable directory, export
error) is one :class:`PerfCallbackWarning`, then the callback is off and training goes on; a
failure to write ``profiler.jsonl`` is one warning too, and profiling goes on without the record.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
import warnings
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.profiler import ProfilerActivity

from trainperf.alerts.catalogue import RULES
from trainperf.analysis.trace import analyze_trace
from trainperf.core import triggers
from trainperf.errors import ConfigError, PerfCallbackWarning, warn_off
from trainperf.lightning.action_stream import remove_listener
from trainperf.lightning.batch_hooks import BatchEndHooks
from trainperf.lightning.profiler_summary import summarise_window
from trainperf.lightning.profiler_window import Window
from trainperf.lightning.trial_fit import output_path, perf_root
from trainperf.probe.sync_debug import SyncDetector
from trainperf.recording.profiler_settings import (
    ACTIVITIES,
    ProfileSchedule,
    TraceOptions,
    apply_flat,
)
from trainperf.recording.setting_checks import int_at_least
from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import ProfilerWindow

log = logging.getLogger(__name__)


def cuda_sync_config(activities: Sequence[ProfilerActivity]) -> tuple[Any, str | None]:
    """The profiler's experimental config that records CUDA synchronization events
    (``_ExperimentalConfig(enable_cuda_sync_events=True)``, pytorch#105187: Kineto then writes
    ``cuda_sync`` events, which name every blocking sync of the trace) when CUDA is among
    ``activities``; ``(None, None)`` without CUDA (nothing to record), ``(None, why)`` where the
    installed torch cannot (``why`` names its version)."""
    if ProfilerActivity.CUDA not in activities:
        return None, None
    try:
        return torch.profiler._ExperimentalConfig(enable_cuda_sync_events=True), None
    except (TypeError, AttributeError) as exc:
        return None, (
            f"torch {torch.__version__} cannot record CUDA sync events "
            f"(_ExperimentalConfig(enable_cuda_sync_events=True): {exc}); sync points are read "
            "from the runtime calls alone"
        )


def _trigger_kind(reason: str) -> str:
    """``"alert"`` for a request made by an alert rule of the catalogue (the engine's reasons
    read ``"<rule>: <message>"``), else ``"request"``."""
    rule = reason.split(":", 1)[0].strip()
    return "alert" if rule in RULES else "request"


class ProfilerCallback(BatchEndHooks):
    """torch.profiler over chosen epochs or on demand (see the module docstring).

    Traces go to ``<output_dir>/epoch_{N}.json[.gz]``. When a window closes, rank zero prints the
    top-k tables and findings and appends one
    :class:`~trainperf.records.monitoring.ProfilerWindow` to ``<run>/perf/profiler.jsonl``; every
    logger gets a few scalars.

    Args:
        enabled: ``False`` makes every hook a no-op.
        schedule: when to profile: which stage epochs, the ``torch.profiler`` cycle inside a
            window, the on-demand triggers (:class:`ProfileSchedule`; default: its defaults,
            the second training epoch, 1 warm-up step and 5 recorded steps, no trigger).
        trace: what a window records and where its traces go (:class:`TraceOptions`;
            default: its defaults, CPU and CUDA with shapes and memory, to
            ``profiler_traces/``).
        log_top_k_ops: rows in the printed top-k operator tables; default 10.
        profile_epochs, profile_steps, warmup_steps, activities, record_shapes, with_stack,
            output_dir, export_chrome_trace: the original project's flat arguments (keyword
            only; None: not given), each one grouped setting with its unit and meaning
            (:data:`~trainperf.recording.profiler_settings.FLAT_SETTINGS`): ``profile_epochs`` =
            ``schedule.epochs`` (0-based epochs), ``profile_steps`` = ``schedule.active`` (steps
            recorded per window), ``warmup_steps`` = ``schedule.warmup``, the others
            ``trace.<same name>``. A grouped setting left at its default yields to its flat
            twin; given otherwise and contradicted, it is one ``ConfigError`` naming both.

    On-demand windows are named ``ondemand_e{E}_s{S}`` (training; ``S`` = ``global_step`` at the
    trigger) or ``{val,test}_ondemand_e{E}_b{B}`` (``B`` = batch index); a trigger seen while a
    window is open waits for it to close; a window that ends with its stage's epoch before
    recording a step is opened again at the next step boundary.

    Under DDP every rank profiles itself (file names get a ``_rank{R}`` suffix) and polls the
    trigger file at the same step counts, firing once per file (identified by inode and mtime;
    rank zero removes it when its window closes); only rank zero prints, logs and writes
    ``profiler.jsonl``.

    With CUDA among the activities, a window also records CUDA synchronization events where the
    installed torch can (:func:`cuda_sync_config`; one warning naming the torch version where it
    cannot), so the analysis sees every blocking sync.

    While a window records, every Lightning action is a range ``[pl][profile]{action}`` in the
    trace. Logged after each window (``{stage}`` = ``train``, ``val``, ``test``):
    ``profiler/{stage}_step_time_ms`` (mean traced step), ``profiler/{stage}_dataloader_pct``,
    ``profiler/{stage}_top_op_self_ms`` (self time per step of the costliest CPU operator).
    """

    def __init__(
        self,
        enabled: bool = True,
        schedule: ProfileSchedule | None = None,
        trace: TraceOptions | None = None,
        log_top_k_ops: int = 10,
        *,
        profile_epochs: Collection[int] | None = None,
        profile_steps: int | None = None,
        warmup_steps: int | None = None,
        activities: Collection[str] | None = None,
        record_shapes: bool | None = None,
        with_stack: bool | None = None,
        output_dir: str | os.PathLike[str] | None = None,
        export_chrome_trace: bool | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.enabled = bool(enabled)
        schedule = ProfileSchedule() if schedule is None else schedule
        trace = TraceOptions() if trace is None else trace
        for name, value, kind in (
            ("schedule", schedule, ProfileSchedule),
            ("trace", trace, TraceOptions),
        ):
            if not isinstance(value, kind):
                raise ConfigError(
                    f"{owner}: {name} must be a {kind.__name__}, got {type(value).__name__} "
                    f"{value!r}"
                )
        flat = {
            "profile_epochs": profile_epochs,
            "profile_steps": profile_steps,
            "warmup_steps": warmup_steps,
            "activities": activities,
            "record_shapes": record_shapes,
            "with_stack": with_stack,
            "output_dir": output_dir,
            "export_chrome_trace": export_chrome_trace,
        }
        self.schedule, self.trace = apply_flat(owner, schedule, trace, flat)
        self.log_top_k_ops = int_at_least(owner, "log_top_k_ops", log_top_k_ops, 1)

        self._active = False  # enabled and not failed, for the current run
        self._warned = False
        self._window: Window | None = None
        self._dir: Path | None = None
        self._rank_suffix = ""
        self._torch_activities: list[ProfilerActivity] = []
        # on-demand state
        self._ondemand = False  # polling on (active and a trigger configured)
        self._countdown = 0  # profiled-stage steps until the next poll
        self._trigger_path: Path | None = None
        self._pending: tuple[str, str] | None = None  # (trigger, reason) waiting for a window
        self._taken_file: tuple[int, int] | None = None  # (inode, mtime_ns) of the last file taken
        self._unlink_pending = False  # DDP: rank zero removes the taken file at window close
        self._run_dir: Path | None = None
        self._jsonl: RecordWriter | None = None
        self._is_zero = True
        self._world_size = 1
        self._syncs_said = False  # detect_syncs on a CPU-only run: said once
        self._experimental: Any = None  # the profiler's experimental config (CUDA sync events)
        self._sync_events_said = False  # torch without CUDA sync events: said once
        #: Trace files written in this run, in order (rank-local).
        self.trace_paths: list[Path] = []
        #: The profiler.jsonl record of each closed window of this run (on every rank).
        self.windows: list[ProfilerWindow] = []

    #: ``ProfilerCallback.analyze_trace(trace_path)`` (also on an instance): a Chrome trace or a
    #: folder of them analysed, in the original project's documented shape
    #: (:func:`trainperf.analysis.trace.analyze_trace` itself).
    analyze_trace = staticmethod(analyze_trace)

    def _resolve_activities(self) -> list[ProfilerActivity]:
        supported = torch.profiler.supported_activities()
        available = {"cuda": torch.cuda.is_available(), "xpu": torch.xpu.is_available()}
        out: list[ProfilerActivity] = []
        dropped: list[str] = []
        for name in self.trace.activities:
            act = ACTIVITIES[name]
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
        self._active = self.enabled and bool(self.schedule.stages)
        self._ondemand = False
        self._pending = None
        self._taken_file = None
        self._unlink_pending = False
        if not self._active:
            return
        self._warn_never_profiled(trainer, stage)
        try:
            run_dir = perf_root(trainer)  # a `trainperf try` trial: the trial's own folder
            self._run_dir = run_dir
            self._dir = output_path(trainer, Path(self.trace.output_dir))
            self._world_size = trainer.world_size
            self._is_zero = trainer.is_global_zero
            self._rank_suffix = f"_rank{trainer.global_rank}" if trainer.world_size > 1 else ""
            self._torch_activities = self._resolve_activities()
            self._experimental, why = cuda_sync_config(self._torch_activities)
            if why is not None and not self._sync_events_said:
                self._sync_events_said = True
                log.warning("%s: %s", type(self).__name__, why)
            self._jsonl = RecordWriter(ProfilerWindow.path(run_dir)) if self._is_zero else None
            tf = self.schedule.trigger_file
            self._trigger_path = None if tf is None else run_dir / tf
            self._ondemand = self.schedule.on_demand
            self._countdown = self.schedule.check_every_n_steps
        except Exception as exc:
            self._fail(exc)

    def _warn_never_profiled(self, trainer: L.Trainer, stage: str) -> None:
        """One warning at setup naming what this run can never profile (epochs at or beyond
        ``max_epochs``, stages this run never enters): such a run would end with no trace and no
        word why."""
        problem = self.schedule.never_profiled(stage, trainer.max_epochs)
        if problem is None:
            return
        warnings.warn(
            f"{type(self).__name__}: schedule.{problem}, so they produce no trace; adjust "
            "schedule.epochs / schedule.stages or max_epochs",
            PerfCallbackWarning,
            stacklevel=2,
        )

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._close(trainer)
        self._consume_taken_file()
        self._active = False
        self._ondemand = False
        self._pending = None
        if self._jsonl is not None:
            self._jsonl.close()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._discard()
        self._active = False

    def _fail(self, exc: BaseException) -> None:
        """One warning per run, then off; a live profiler is stopped and dropped."""
        self._active = False
        self._ondemand = False
        self._discard()
        if not self._warned:
            self._warned = True
            warn_off(type(self).__name__, exc)

    # -- windows -----------------------------------------------------------------------------

    def _trace_path(self, window: Window, cycle: int) -> Path:
        assert self._dir is not None
        suffix = f"_cycle{cycle}" if cycle else ""
        ext = ".json.gz" if self.trace.gzip else ".json"
        return self._dir / f"{window.basename}{suffix}{self._rank_suffix}{ext}"

    def _open(self, trainer: L.Trainer, stage: str) -> None:
        epoch = trainer.current_epoch
        if not self._active or not self.schedule.profiles(stage, epoch):
            return
        self._close(trainer)  # a window left open (mid-epoch validation)
        if not self._active:
            return
        prefix = "" if stage == "train" else f"{stage}_"
        reason = "test stage" if stage == "test" else f"epoch {epoch} in schedule.epochs"
        self._start_window(trainer, stage, epoch, f"{prefix}epoch_{epoch}", "epoch", reason)

    def _open_ondemand(self, trainer: L.Trainer, stage: str, batch_idx: int) -> None:
        assert self._pending is not None
        trigger, reason = self._pending
        self._pending = None
        epoch = trainer.current_epoch
        if stage == "train":
            name = f"ondemand_e{epoch}_s{trainer.global_step}"
        else:
            name = f"{stage}_ondemand_e{epoch}_b{batch_idx}"
        log.info("%s: on-demand window (%s: %s)", type(self).__name__, trigger, reason)
        self._start_window(trainer, stage, epoch, name, trigger, reason)

    def _start_window(
        self, trainer: L.Trainer, stage: str, epoch: int, basename: str, trigger: str, reason: str
    ) -> None:
        try:
            assert self._dir is not None
            # Fail before the window, not at export time after it (unwritable / not a directory).
            self._dir.mkdir(parents=True, exist_ok=True)
            if not os.access(self._dir, os.W_OK | os.X_OK):
                raise PermissionError(f"output_dir {str(self._dir)!r} is not writable")
            sched = self.schedule
            schedule = torch.profiler.schedule(
                wait=sched.wait,
                warmup=sched.warmup,
                active=sched.active,
                repeat=sched.repeat,
                skip_first=sched.skip_first,
            )
            prof = torch.profiler.profile(
                activities=self._torch_activities,
                schedule=schedule,
                on_trace_ready=self._on_trace_ready,
                record_shapes=self.trace.record_shapes,
                profile_memory=self.trace.profile_memory,
                with_stack=self.trace.with_stack,
                experimental_config=self._experimental,
            )
            window = Window(stage, epoch, prof, basename, trigger, reason)
            self._window = window
            prof.start()
            if self.trace.detect_syncs:
                self._start_syncs(window)
            window.clock.begin(prof.step_num)
            # Lightning's actions as ranges in the trace, only while the window records.
            window.ranges.attach(trainer)
            window.trainer = trainer
        except Exception as exc:
            self._fail(exc)

    def _start_syncs(self, window: Window) -> None:
        detector = SyncDetector()
        if detector.start():
            window.syncs = detector
        elif not self._syncs_said:
            self._syncs_said = True
            log.info(
                "ProfilerCallback: detect_syncs: no CUDA device, host-device syncs do not apply"
            )

    def _on_trace_ready(self, prof: torch.profiler.profile) -> None:
        # Called by torch from inside step()/stop(): never raise through its state machine;
        # the error is picked up right after the call returns.
        window = self._window
        if window is None or window.discarded:
            return
        try:
            path = self._trace_path(window, len(window.traces))
            prof.export_chrome_trace(str(path))
            window.traces.append(path)
            if self.trace.tensorboard:
                tb = path.parent / "tensorboard"
                tb.mkdir(exist_ok=True)
                name = f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json"
                shutil.copyfile(path, tb / (name + (".gz" if self.trace.gzip else "")))
        except Exception as exc:
            window.error = exc

    def _step(self, trainer: L.Trainer, stage: str, batch_idx: int) -> None:
        window = self._window
        if window is None or window.stage != stage:
            return
        if window.first_batch is None:
            window.first_batch = batch_idx
        window.last_batch = batch_idx
        try:
            prof = window.prof
            window.clock.end(prof.step_num)
            exported = len(window.traces)
            t0 = time.perf_counter()
            prof.step()
            if len(window.traces) != exported:
                window.export_s += time.perf_counter() - t0
            window.clock.begin(prof.step_num)
            window.steps += 1
            if window.error is not None:
                raise window.error
        except Exception as exc:
            self._fail(exc)
            return
        total = self.schedule.window_steps
        if total and window.steps >= total:
            self._close(trainer)

    def _tick(self, trainer: L.Trainer, stage: str, batch_idx: int) -> None:
        """Outside a window, at a step boundary of a profiled stage: poll every n-th step and open
        an on-demand window when a trigger is pending."""
        if stage not in self.schedule.stages:
            return
        self._countdown -= 1
        if self._countdown <= 0:
            self._countdown = self.schedule.check_every_n_steps
            try:
                self._poll()
            except Exception as exc:
                self._fail(exc)
                return
        if self._pending is not None:
            self._open_ondemand(trainer, stage, batch_idx)

    def _poll(self) -> None:
        if self._pending is not None:
            return
        if self.schedule.on_request:
            reason = triggers.take_profile_request()
            if reason is not None:
                self._pending = (_trigger_kind(reason), reason)
                return
        path = self._trigger_path
        if path is None:
            return
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        identity = (st.st_ino, st.st_mtime_ns)
        if identity == self._taken_file:
            return  # DDP: already served, rank zero has not removed it yet
        self._taken_file = identity
        self._pending = ("file", f"trigger file {path}")
        if self._world_size == 1:
            self._remove_trigger_file()
        else:
            # Every rank must see this file at its own poll of the same step: rank zero removes
            # it only when its window closes.
            self._unlink_pending = self._is_zero

    def _remove_trigger_file(self) -> None:
        assert self._trigger_path is not None
        try:
            self._trigger_path.unlink(missing_ok=True)
        except OSError as exc:
            # (inode, mtime) of the file taken keeps it from firing again
            log.warning("%s: cannot remove %s (%s)", type(self).__name__, self._trigger_path, exc)

    def _consume_taken_file(self) -> None:
        if self._unlink_pending:
            self._unlink_pending = False
            self._remove_trigger_file()

    def _release(self) -> Window | None:
        """Stop and drop the live profiler; the window (with its error, if any) is returned."""
        window = self._window
        if window is not None:
            if window.syncs is not None:
                try:
                    window.sync_lines = window.syncs.stop(window.steps)
                except Exception as exc:
                    window.error = window.error or exc
                window.syncs = None
            window.ranges.close_all()
            if window.trainer is not None:
                remove_listener(window.trainer, window.ranges)
                window.trainer = None
            try:
                exported = len(window.traces)
                t0 = time.perf_counter()
                window.prof.stop()  # may fire _on_trace_ready (a cycle in progress)
                if len(window.traces) != exported:
                    window.export_s += time.perf_counter() - t0
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

    def _close(self, trainer: L.Trainer) -> None:
        window = self._release()
        if window is None:
            return
        if window.trigger != "epoch":
            self._consume_taken_file()
        if window.error is not None:
            self._fail(window.error)
            return
        self.trace_paths.extend(window.traces)
        if not window.traces:
            if window.trigger != "epoch" and self._pending is None:
                # the stage's epoch ended before a step was recorded: open again at the next one
                self._pending = (window.trigger, window.reason)
            return
        try:
            keep = self.trace.export_chrome_trace
            traces = [self._relative(p) for p in window.traces] if keep else []
            record = summarise_window(
                trainer, window, self.log_top_k_ops, traces, type(self).__name__
            )
            self.windows.append(record)
            self._write_record(record)
            if not self.trace.export_chrome_trace:
                for path in window.traces:
                    path.unlink()
        except Exception as exc:
            self._fail(exc)

    def _relative(self, path: Path) -> str:
        assert self._run_dir is not None
        try:
            return path.relative_to(self._run_dir).as_posix()
        except ValueError:
            return str(path)  # output_dir outside the run directory

    def _write_record(self, record: ProfilerWindow) -> None:
        if self._jsonl is None:
            return
        try:
            self._jsonl.write(record)
        except OSError as exc:
            self._jsonl = None  # one warning: no more writes this run
            warnings.warn(
                f"{type(self).__name__}: cannot write the profiler record "
                f"({type(exc).__name__}: {exc}); traces are still written",
                PerfCallbackWarning,
                stacklevel=2,
            )

    # -- hooks -------------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._active:
            self._open(trainer, "train")

    def _batch_end(
        self, trainer: L.Trainer, stage: str, outputs: Any, batch: Any, batch_idx: int, loader: int
    ) -> None:
        if self._window is not None:
            self._step(trainer, stage, batch_idx)
        elif self._ondemand and not (stage == "val" and trainer.sanity_checking):
            self._tick(trainer, stage, batch_idx)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._window is not None:
            self._close(trainer)

    on_validation_end = on_test_end = on_train_epoch_end  # each stage's window ends with it

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Validation runs inside the training epoch: the train window ends before it, so a
        # train trace never holds validation steps.
        if self._window is not None:
            self._close(trainer)
        if self._active and not trainer.sanity_checking:
            self._open(trainer, "val")

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._active:
            self._open(trainer, "test")
