"""Per-trainer measurement behind the performance callbacks, driven by Lightning's action stream.

One :class:`StageRecorder` per ``Trainer`` is shared by every monitor attached to it (reference
counted): one clock, one set of instrumented DataLoaders and one cross-rank gather per epoch,
however many monitors subscribe. The recorder is an ``ActionListener``
(``callbacks/action_stream.py``): Lightning's own start/stop of every hook, callback, strategy
call and data fetch drives it, so no callback drives it and no hook is hidden or patched.

Attribution: each action is classified once (``ocr.perf.actions``); the innermost running action
that is not transparent owns the time, with its owner (a callback's class and hook, a module's
``Class.hook``) kept as a finer split. Two moments have no action of their own and are
recognised from the stream: under ``manual_backward`` the backward pass runs between the
module's ``on_before_backward`` and the first ``on_after_backward`` (the precision plugin
brackets it in both optimization modes); and the all-reduce wait at the end of a DDP backward
starts when DDP hands its last gradient bucket to the communication hook we register
(``DistributedDataParallel.register_comm_hook``, public torch API), so that stretch becomes
``sync_wait`` instead of ``backward``.

Windows: ``train`` from the first ``on_train_epoch_start`` action to the next one or
``on_train_end`` (lazily, so the module's epoch-end work and checkpointing stay in the epoch that
caused them); ``val`` / ``test`` from the first ``on_{validation,test}_start`` action to the end
of the strategy's ``on_{validation,test}_end`` (the last hook Lightning dispatches there).
Validation inside ``fit`` pauses the train window, so each stage's phases sum to its own wall
time. The sanity check is not recorded. A resumed run that starts mid-epoch opens its train
window at the first data fetch.

DDP: every rank measures itself; at each epoch close one ``all_gather`` of a fixed-order float
vector (figures, phases, per-callback and per-module-hook seconds) gives the per-rank figures and
the straggler (``ocr.perf.ranks.find_straggler``). A health flag travels with it: a rank whose
recording failed keeps joining the gathers with the flag down and, at that gather, every rank
turns recording off together.
"""

from __future__ import annotations

import math
import time
import warnings
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import lightning as L
import numpy as np
import torch
from lightning.pytorch.core.hooks import CheckpointHooks, DataHooks, ModelHooks
from lightning.pytorch.utilities.data import extract_batch_size
from torch.utils.data import DataLoader

from ocr.lightning_modules.callbacks import action_stream
from ocr.lightning_modules.callbacks.cuda_events import CudaPhaseEvents, EventClock
from ocr.lightning_modules.callbacks.epoch_report import (
    MAX_KEPT_BATCH_TIMES,
    EpochReport,
    IntervalProgress,
    log_to_loggers,
    per_second,
)
from ocr.lightning_modules.callbacks.errors import PerfCallbackWarning
from ocr.lightning_modules.callbacks.interpose import (
    LoaderInterposer,
    check_versions,
    syncs_before_train_batch,
)
from ocr.lightning_modules.callbacks.run_files import RunFiles
from ocr.lightning_modules.callbacks.try_window import perf_root
from ocr.lightning_modules.callbacks.untimed import lightning_own_hook, untimed_hook
from ocr.perf.actions import CALLBACK, DATAMODULE, MODULE, STRATEGY, classify_action
from ocr.perf.clock import PHASES, PhaseClock, PhaseTotals, set_active_clock
from ocr.perf.memory import memory_snapshot, reset_peak_memory
from ocr.perf.ranks import find_straggler, rank_spread
from ocr.perf.stage import Stage
from ocr.perf.stats import StreamingStats
from ocr.perf.worker import WorkerTiming

__all__ = ["MODULE_HOOK_NAMES", "StageRecorder", "Subscriber"]

# Figures gathered across ranks at an epoch close, in this fixed order (after a leading health
# flag, and before the per-callback and per-module-hook seconds). Durations first: their spread
# names a slowest rank.
_DURATION_FIGURES: tuple[str, ...] = (
    "epoch_time",
    *(f"{phase}_time" for phase in PHASES),
    "worker_fetch_time",
    "worker_collate_time",
    "batch_mean",
)
_OTHER_FIGURES: tuple[str, ...] = (
    "samples",
    "batches",
    "samples_per_sec",
    "batches_per_sec",
    "peak_rss_gb",
    "peak_gpu_memory_gb",
)
_FIGURES = _DURATION_FIGURES + _OTHER_FIGURES
#: LightningModule hook names, in a fixed order (every rank runs the same Lightning): the
#: per-module-hook slots of the DDP gather.
MODULE_HOOK_NAMES: tuple[str, ...] = tuple(
    sorted(
        {
            name
            for cls in (ModelHooks, DataHooks, CheckpointHooks)
            for name in vars(cls)
            if not name.startswith("_") and callable(getattr(cls, name))
        }
    )
)
_MODULE_HOOK_INDEX = {name: i for i, name in enumerate(MODULE_HOOK_NAMES)}
# In-epoch memory samples (for the RSS peak) at most this often: a snapshot costs ~100 us.
_MEMORY_PERIOD_NS = 1_000_000_000
# Batch times are folded into the epoch's StreamingStats in chunks of this many.
_BATCH_TIMES_CHUNK = 1024

# Events recognised in the action stream (by hook name, independent of which callback or module
# dispatched it).
_EV_NONE = 0
_EV_TRAIN_EPOCH_START = 1
_EV_TRAIN_END = 2
_EV_VAL_START = 3
_EV_VAL_END = 4  # the strategy's on_validation_end: the last action of a validation run
_EV_TEST_START = 5
_EV_TEST_END = 6
_EV_TRAIN_FETCH = 7
_EV_TRAIN_BATCH_END = 8  # the module's on_*_batch_end: the last action of a batch
_EV_VAL_BATCH_END = 9
_EV_TEST_BATCH_END = 10
_EV_BEFORE_BACKWARD_DONE = 11  # the module's on_before_backward: backward runs right after
_EV_AFTER_BACKWARD = 12  # any on_after_backward: backward has returned
_EV_FIT_START = 13
_START_EVENTS = {
    "on_train_epoch_start": _EV_TRAIN_EPOCH_START,
    "on_train_end": _EV_TRAIN_END,
    "on_validation_start": _EV_VAL_START,
    "on_test_start": _EV_TEST_START,
    "train_dataloader_next": _EV_TRAIN_FETCH,
    "on_after_backward": _EV_AFTER_BACKWARD,
    "on_fit_start": _EV_FIT_START,
}
_MODULE_STOP_EVENTS = {
    "on_train_batch_end": _EV_TRAIN_BATCH_END,
    "on_validation_batch_end": _EV_VAL_BATCH_END,
    "on_test_batch_end": _EV_TEST_BATCH_END,
    "on_before_backward": _EV_BEFORE_BACKWARD_DONE,
}
_STRATEGY_STOP_EVENTS = {"on_validation_end": _EV_VAL_END, "on_test_end": _EV_TEST_END}
_BATCH_END_STAGE = {
    _EV_TRAIN_BATCH_END: "train",
    _EV_VAL_BATCH_END: "val",
    _EV_TEST_BATCH_END: "test",
}


class Subscriber(Protocol):
    """What the recorder needs of a monitor that subscribes to it (``RecorderCallback`` and the
    resource monitor's adapter)."""

    stages: frozenset[Stage]
    log_interval: int
    track_memory: bool
    sync_cuda: bool
    write_run_files: bool

    def _receive_report(self, report: EpochReport) -> None: ...

    def _receive_interval(self, progress: IntervalProgress) -> Mapping[str, float] | None: ...


# -- per-stage state -----------------------------------------------------------------------------


@dataclass
class _Epoch:
    stage: str
    epoch: int
    segment_start_ns: int
    phases_ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    owners_ns: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_s: dict[str, float] = field(default_factory=dict)
    closed_ns: int = 0  # wall time of the closed segments (train around validation)
    paused: bool = False
    batch_times: StreamingStats = field(default_factory=StreamingStats)
    pending_ns: list[int] = field(default_factory=list)  # batch times not yet in batch_times
    last_batch_end_ns: int = 0  # window time (pauses excluded) of the previous batch end
    num_batches: int = 0
    samples: int = 0
    peak_rss_gb: float = math.nan
    peak_gpu_gb: float = math.nan
    first_batch_samples: int = 0
    kept_chunks: list[np.ndarray] = field(default_factory=list)  # every batch time, in ns

    def elapsed_ns(self, now: int) -> int:
        return self.closed_ns if self.paused else self.closed_ns + now - self.segment_start_ns

    def flush_batch_times(self) -> None:
        pending = self.pending_ns
        if pending:
            chunk = np.asarray(pending, dtype=np.int64)
            self.kept_chunks.append(chunk)
            self.batch_times.add_many(chunk / 1e9)
            pending.clear()

    def kept_batch_times(self) -> tuple[tuple[float, ...], int]:
        """All batch times (s) when at most ``MAX_KEPT_BATCH_TIMES``, else every k-th; and k."""
        if not self.kept_chunks:
            return (), 1
        times = np.concatenate(self.kept_chunks)
        stride = max(1, -(-len(times) // MAX_KEPT_BATCH_TIMES))
        return tuple((times[::stride] / 1e9).tolist()), stride


@dataclass
class _StageState:
    # Worker timings arrive with batches; they accumulate here and move into the epoch at its
    # close, so a batch prefetched before the window opened still counts for that epoch.
    worker_ns: dict[str, int] = field(default_factory=dict)
    worker_counts: dict[str, int] = field(default_factory=dict)
    num_workers: int | None = None
    # Sample counts of batches received but not yet finished (Lightning may prefetch one).
    timing_samples: deque[int] = field(default_factory=lambda: deque(maxlen=8))
    noted_samples: int | None = None  # size of the batch in flight, from a batch hook
    epoch: _Epoch | None = None

    def add_timing(self, timing: WorkerTiming) -> None:
        acc = self.worker_ns
        if timing.fetch_timed:  # else fetch_ns is 0 by convention, not a measurement
            acc["fetch"] = acc.get("fetch", 0) + timing.fetch_ns
        acc["collate"] = acc.get("collate", 0) + timing.collate_ns
        for name, ns in timing.parts_ns.items():
            acc[name] = acc.get(name, 0) + ns
        if timing.counts:
            counts = self.worker_counts
            for name, n in timing.counts.items():
                counts[name] = counts.get(name, 0) + n
        self.timing_samples.append(timing.samples)


class _Tap:
    """``on_batch`` of one instrumented DataLoader: routes its timings to a stage. Timings are
    delivered inside the consuming loop's ``next()``, so the innermost open window is the
    consumer, even for a loader shared by two stages; before any window opens (Lightning's first
    iterator) the loader's own stage is used."""

    __slots__ = ("recorder", "stage")

    def __init__(self, recorder: StageRecorder, stage: str) -> None:
        self.recorder = recorder
        self.stage = stage

    def __call__(self, timing: WorkerTiming) -> None:
        recorder = self.recorder
        if recorder.measuring:
            stage = recorder._open[-1] if recorder._open else self.stage
            recorder._states[stage].add_timing(timing)


class _CommTimer:
    """State of the DDP communication hook :func:`_timed_allreduce`: the process group, and the
    time the last gradient bucket was handed over (local backward compute is done then; what
    follows until backward returns is the wait for the other ranks). Keeps working, harmlessly,
    after the recorder is gone."""

    def __init__(self, process_group: Any) -> None:
        self.process_group = process_group
        self.ready_ns = 0


def _timed_allreduce(
    state: _CommTimer, bucket: torch.distributed.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (the same arithmetic as the built-in hook), stamping the time.
    The annotations are required: DDP checks them at registration."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    future = allreduce_hook(state.process_group, bucket)
    state.ready_ns = time.perf_counter_ns()
    return future


if torch.distributed.is_available():
    # DDP compares the annotation objects themselves; this module's annotations are strings.
    _timed_allreduce.__annotations__ = {
        "state": _CommTimer,
        "bucket": torch.distributed.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }


# -- the recorder --------------------------------------------------------------------------------


class StageRecorder:
    """Per-trainer measurement shared by the performance monitors (see the module docstring).

    Use :meth:`attach` / :meth:`detach`. Every entry point turns an internal error into one
    :class:`PerfCallbackWarning` and stops measuring; training never sees an exception.

    Args:
        trainer: the Trainer measured.
    """

    _registry: ClassVar[weakref.WeakKeyDictionary[L.Trainer, StageRecorder]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, trainer: L.Trainer) -> None:
        self._trainer_ref = weakref.ref(trainer)
        self.subscribers: list[Subscriber] = []
        self.stages: frozenset[Stage] = frozenset()
        self.measuring = True  # measurement on (off after a failure)
        self.finished = False  # fully off: no listener, no gathers
        self.world_size = max(1, int(trainer.world_size))
        self._interval = 0
        self._memory_ns = 0  # when memory was last sampled
        self._track_memory = False
        self._sync_cuda = False
        self.clock: PhaseClock = PhaseClock()
        self._events: CudaPhaseEvents | None = None
        self._device: torch.device | None = None  # set when measuring a CUDA device
        self._states: dict[str, _StageState] = {s: _StageState() for s in Stage}
        self._open: list[str] = []  # open windows, innermost last (train below val)
        self._train_epoch_marked = -1  # the epoch whose train window an action opened
        # Actions running now, innermost last: (action, phase, owner, event); a transparent one
        # carries the enclosing action's phase and owner.
        self._stack: list[tuple[str, str, str, int]] = []
        self._info: dict[str, tuple[str, str, str, int]] = {}  # action -> its stack entry
        self._owner_group: dict[str, tuple[str, str]] = {}  # owner -> (group, name)
        self._callback_names: dict[str, str] = {}  # callback state_key -> display name
        self._callback_slots: list[str] = []  # display names in trainer.callbacks order
        self._in_backward = False
        self._backward_start_ns = 0
        # Under DDP Lightning syncs the ranks between two training batches (see
        # interpose.syncs_before_train_batch): that gap is sync_wait, not unattributed.
        self._sync_between_batches = syncs_before_train_batch(self.world_size)
        self._between_batches = False
        self._comm: _CommTimer | None = None
        self._interposer: LoaderInterposer | None = None
        self._listening = False
        self.sync_wait_measured = "none" if self.world_size <= 1 else "gather"
        self.files: RunFiles | None = None

    # -- membership ------------------------------------------------------------------------

    @classmethod
    def attach(cls, trainer: L.Trainer, subscriber: Subscriber) -> StageRecorder:
        """The trainer's recorder (created and installed on first use) with ``subscriber``
        added."""
        recorder = cls._registry.get(trainer)
        if recorder is None or recorder.finished:
            recorder = cls(trainer)
            cls._registry[trainer] = recorder
        if subscriber not in recorder.subscribers:
            recorder.subscribers.append(subscriber)
            recorder._configure()
            if len(recorder.subscribers) == 1:
                try:
                    recorder._install(trainer)
                except BaseException:
                    recorder.shutdown()  # leave nothing half-installed behind
                    raise
            elif recorder.files is None and subscriber.write_run_files:
                recorder._open_files(trainer)
        return recorder

    def detach(self, subscriber: Subscriber) -> None:
        """Remove ``subscriber``; the last one out shuts the recorder down."""
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)
        if self.subscribers:
            self._configure()
        else:
            self.shutdown()

    def _configure(self) -> None:
        subs = self.subscribers
        self.stages = frozenset().union(*(s.stages for s in subs)) if subs else frozenset()
        intervals = [s.log_interval for s in subs if s.log_interval > 0]
        self._interval = math.gcd(*intervals) if intervals else 0
        self._track_memory = any(s.track_memory for s in subs)
        self._sync_cuda = any(s.sync_cuda for s in subs)
        if self.files is not None and not any(s.write_run_files for s in subs):
            self.files.close()
            self.files = None
        if isinstance(self.clock, EventClock) and self._device is not None:
            device = self._device
            self.clock.sync = (lambda: torch.cuda.synchronize(device)) if self._sync_cuda else None

    def _install(self, trainer: L.Trainer) -> None:
        device = trainer.strategy.root_device
        if device.type == "cuda" and torch.cuda.is_available():
            self._device = device
            self._events = CudaPhaseEvents()
            self.clock = EventClock(self._events, None)
            self._configure()  # sets the clock's sync
        self._name_callbacks(trainer)
        if any(s.write_run_files for s in self.subscribers):
            self._open_files(trainer)
        reason = check_versions()
        if reason is None:
            self._interposer = LoaderInterposer(trainer, self._route_loader, self._fail)
        else:
            warnings.warn(f"performance callbacks: {reason}", PerfCallbackWarning, stacklevel=4)
        action_stream.add_listener(trainer, self)
        self._listening = True

    def _open_files(self, trainer: L.Trainer) -> None:
        if not trainer.is_global_zero:
            return
        self.files = RunFiles(perf_root(trainer))  # a try trial's own folder inside a window
        self.files.run_info(
            {"world_size": self.world_size, "device": str(trainer.strategy.root_device)}
        )

    def _name_callbacks(self, trainer: L.Trainer) -> None:
        """Display names of the trainer's callbacks by ``state_key`` (what Lightning's action
        names carry): the class name, ``#2``, ``#3``... for further instances of a class whose
        state keys differ (instances with equal state keys are indistinguishable in the action
        stream and share one name)."""
        names: dict[str, str] = {}
        slots: list[str] = []
        count: dict[str, int] = {}
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            key = callback.state_key
            if key in names:
                continue
            base = type(callback).__name__
            count[base] = count.get(base, 0) + 1
            name = base if count[base] == 1 else f"{base}#{count[base]}"
            names[key] = name
            slots.append(name)
        self._callback_names = names
        self._callback_slots = slots
        self._info.clear()

    def _route_loader(self, loader: DataLoader) -> tuple[_Tap, PhaseClock] | None:
        trainer = self._trainer_ref()
        if trainer is None or not self.measuring:
            return None
        running = trainer.state.stage
        stage = Stage.of_lightning(running.value if running is not None else None)
        if stage is None or stage not in self.stages:
            return None
        self._states[stage].num_workers = int(loader.num_workers)
        return _Tap(self, stage), self.clock

    def shutdown(self) -> None:
        """Stop everything and undo what was installed (idempotent)."""
        self.measuring = False
        self.finished = True
        if self.files is not None:
            self.files.close()
        if self.clock.running:
            self.clock.stop()
        set_active_clock(None)
        self._open.clear()
        for state in self._states.values():
            state.epoch = None
        trainer = self._trainer_ref()
        try:
            if self._listening and trainer is not None:
                self._listening = False
                action_stream.remove_listener(trainer, self)
            interposer, self._interposer = self._interposer, None
            if interposer is not None:
                interposer.restore()
        except Exception as exc:  # never raise into Lightning's hooks
            warnings.warn(
                f"performance callbacks: could not undo the instrumentation "
                f"({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=2,
            )
        finally:
            if trainer is not None and self._registry.get(trainer) is self:
                del self._registry[trainer]

    # -- failure ---------------------------------------------------------------------------

    def _fail(self, exc: BaseException, *, warn: bool = True) -> None:
        """Turn measurement off after an internal error: one warning. On one process the
        recorder shuts down at once; under DDP it keeps joining the epoch-close gathers (with its
        health flag down) until every rank has seen the failure, so no rank blocks forever."""
        if not self.measuring:
            return
        self.measuring = False
        if warn:
            names = ", ".join(type(s).__name__ for s in self.subscribers) or "performance callbacks"
            warnings.warn(
                f"{names}: performance recording failed and is off for the rest of this run "
                f"({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=2,
            )
        if self.clock.running:
            self.clock.stop()
        set_active_clock(None)
        if self.world_size <= 1:
            self._finish_subscribers()

    def fail_subscriber(self, subscriber: Subscriber) -> None:
        """A subscriber's own presentation failed (it already warned): it gets no more
        reports."""
        if self.world_size > 1:
            # All ranks must leave together: stop measuring here, tell the peers at the next
            # gather.
            self._fail(RuntimeError("a subscriber failed"), warn=False)
            return
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)
        if self.subscribers:
            self._configure()
        else:
            self.shutdown()

    def _finish_subscribers(self) -> None:
        subs = list(self.subscribers)
        self.shutdown()
        for sub in subs:
            off = getattr(sub, "_recorder_off", None)
            if off is not None:
                off()

    # -- the action stream (hot path) ------------------------------------------------------

    def wants(self, name: str) -> bool:
        """Whether the stream should tell us about ``name`` (asked once per name; see
        ``ActionStream``). Left out: transparent actions without a window event (their time stays
        with the enclosing action either way) and hooks whose function does nothing
        (:func:`_does_nothing`): Lightning dispatches every callback hook to every callback, so
        most of a step's actions are inherited no-ops. The module's own ``on_after_backward``
        closes the backward bracket, so the callbacks' no-op ones are not needed for it."""
        try:
            _, phase, _, event = self._info.get(name) or self._learn(name)
            action = classify_action(name)
            idle = phase != "" and self._hook_does_nothing(action.kind, action.target, action.hook)
            if event and not (action.kind == CALLBACK and action.hook == "on_after_backward"):
                if idle:
                    # Wanted for its event only (the module's inherited on_train_batch_end,
                    # on_before_backward...): transparent, so it switches no clock.
                    self._info[name] = (name, "", "", event)
                return True
            if (
                phase not in ("", "module_hooks")
                and not idle
                and action.kind in (MODULE, DATAMODULE)
                and (trainer := self._trainer_ref()) is not None
                and lightning_own_hook(trainer, action.kind, action.hook)
            ):
                # Lightning's own transfer / optimizer / checkpoint hook, not the user's: no
                # owner, so inside the strategy's batch_to_device or the module's
                # optimizer_step it continues the enclosing interval.
                self._info[name] = (name, phase, "", event)
            return phase != "" and not idle
        except Exception:
            return True  # when in doubt, listen

    def _hook_does_nothing(self, kind: str, target: str, hook: str) -> bool:
        trainer = self._trainer_ref()
        return trainer is not None and untimed_hook(trainer, kind, target, hook)

    def _learn(self, name: str) -> tuple[str, str, str, int]:
        action = classify_action(name)
        owner = action.owner
        if action.kind == CALLBACK:
            display = self._callback_names.get(action.target, action.owner)
            owner = f"{display}.{action.hook}"
            self._owner_group[owner] = ("callbacks", display)
        elif action.kind in (MODULE, DATAMODULE):
            self._owner_group[owner] = ("module_hooks", owner)
        event = _START_EVENTS.get(action.hook, _EV_NONE)
        if action.kind == MODULE:
            event = _MODULE_STOP_EVENTS.get(action.hook, event)
        elif action.kind == STRATEGY:
            event = _STRATEGY_STOP_EVENTS.get(action.hook, event)
        info = (name, action.phase, owner if action.phase else "", event)
        self._info[name] = info
        return info

    def action_start(self, name: str) -> None:
        if self.finished:
            return
        try:
            entry = self._info.get(name) or self._learn(name)
            event = entry[3]
            if not self.measuring:
                # DDP after a failure: windows are still tracked (not timed), so this rank joins
                # the next epoch-close gather and every rank learns of the failure together.
                if event:
                    self._event_start(event)
                return
            self._between_batches = False
            if event:
                self._event_start(event)
            stack = self._stack
            if entry[1]:
                stack.append(entry)
                clock = self.clock
                # Same label as the open interval (a hook inside a hook of one owner): the
                # interval simply goes on.
                if clock.running and (entry[1] != clock.current or entry[2] != clock.current_owner):
                    clock.switch(entry[1], entry[2])
            elif stack:
                top = stack[-1]
                stack.append((name, top[1], top[2], event))  # transparent: the enclosing label
            else:
                stack.append(entry)
        except Exception as exc:
            self._fail(exc)

    def action_stop(self, name: str) -> None:
        if self.finished:
            return
        try:
            if not self.measuring:  # DDP after a failure: see action_start
                info = self._info.get(name)
                if info is not None and info[3]:
                    self._event_stop(info[3])
                return
            stack = self._stack
            if stack and stack[-1][0] == name:
                event = stack.pop()[3]
            else:
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i][0] == name:
                        event = stack[i][3]
                        del stack[i:]
                        break
                else:
                    return  # started before we listened
            clock = self.clock
            if clock.running:
                if event == _EV_BEFORE_BACKWARD_DONE:
                    # The backward pass runs next (automatic and manual optimization alike).
                    clock.switch("backward")
                    self._in_backward = True
                    self._backward_start_ns = time.perf_counter_ns()
                elif stack and stack[-1][1]:
                    top = stack[-1]
                    if top[1] != clock.current or top[2] != clock.current_owner:
                        clock.switch(top[1], top[2])
                elif clock.current != "unattributed" or clock.current_owner:
                    clock.switch("unattributed")
            if event:
                self._event_stop(event)
        except Exception as exc:
            self._fail(exc)

    def _event_start(self, event: int) -> None:
        if event == _EV_AFTER_BACKWARD:
            if self._in_backward:
                self._in_backward = False
                comm = self._comm
                if comm is not None and comm.ready_ns > self._backward_start_ns:
                    self.clock.switch_since("sync_wait", comm.ready_ns)
            return
        trainer = self._trainer_ref()
        if trainer is None:
            return
        if event == _EV_TRAIN_EPOCH_START:
            epoch = int(trainer.current_epoch)
            if self._train_epoch_marked != epoch:
                self._train_epoch_marked = epoch
                self.close_epoch("train", reopen=True)
        elif event == _EV_TRAIN_FETCH:
            if "train" not in self._open and self._states["train"].epoch is None:
                # Resumed mid-epoch: Lightning skips on_train_epoch_start.
                self._train_epoch_marked = int(trainer.current_epoch)
                self.open_epoch("train")
        elif event == _EV_TRAIN_END:
            if "train" in self._open:
                self.close_epoch("train")
        elif event == _EV_VAL_START:
            if not trainer.sanity_checking and "val" not in self._open:
                self.open_epoch("val")
        elif event == _EV_TEST_START:
            if "test" not in self._open:
                self.open_epoch("test")
        elif event == _EV_FIT_START:
            self._hook_ddp(trainer)

    def _event_stop(self, event: int) -> None:
        stage = _BATCH_END_STAGE.get(event)
        if stage is not None:
            self._batch_end(stage)
            return
        if event == _EV_VAL_END:
            trainer = self._trainer_ref()
            if trainer is not None and trainer.sanity_checking:
                self.discard("val")
            elif "val" in self._open:
                self.close_epoch("val")
        elif event == _EV_TEST_END and "test" in self._open:
            self.close_epoch("test")

    def _current_label(self) -> tuple[str, str]:
        stack = self._stack
        if self._in_backward:
            return "backward", ""
        if stack and stack[-1][1]:
            return stack[-1][1], stack[-1][2]
        return ("sync_wait" if self._between_batches else "unattributed"), ""

    def _hook_ddp(self, trainer: L.Trainer) -> None:
        """Register the timing communication hook on a DistributedDataParallel model (public
        torch API; once per model). A model that already has one (the user's) is left alone:
        ``sync_wait`` then covers our epoch gather only."""
        if self.world_size <= 1 or self._comm is not None:
            return
        from torch.nn.parallel import DistributedDataParallel

        model = trainer.strategy.model
        if not isinstance(model, DistributedDataParallel):
            return
        timer = _CommTimer(model.process_group)
        try:
            model.register_comm_hook(state=timer, hook=_timed_allreduce)
        except (RuntimeError, ValueError):
            return  # a hook is already registered (the user's): not ours to replace
        self._comm = timer
        self.sync_wait_measured = "ddp_comm_hook"

    # -- batches ---------------------------------------------------------------------------

    def note_batch(self, stage: str, batch: Any) -> None:
        """A batch hook saw ``batch``: remember its size when no instrumented DataLoader
        reported one (any iterable that is not a DataLoader)."""
        state = self._states[stage]
        if state.timing_samples or state.noted_samples is not None or not self.measuring:
            return
        try:
            state.noted_samples = int(extract_batch_size(batch))
        except Exception:
            state.noted_samples = 0

    def _batch_end(self, stage: str) -> None:
        state = self._states[stage]
        epoch = state.epoch
        if epoch is None or not self.measuring:
            return
        now = time.perf_counter_ns()
        elapsed = epoch.elapsed_ns(now)
        pending = epoch.pending_ns
        pending.append(elapsed - epoch.last_batch_end_ns)
        if len(pending) >= _BATCH_TIMES_CHUNK:
            epoch.flush_batch_times()
        epoch.last_batch_end_ns = elapsed
        epoch.num_batches += 1
        samples = state.timing_samples
        n = samples.popleft() if samples else (state.noted_samples or 0)
        state.noted_samples = None
        if epoch.num_batches == 1:
            epoch.first_batch_samples = n
        epoch.samples += n
        if self._events is not None:
            self._events.drain()
        if self._track_memory and now - self._memory_ns >= _MEMORY_PERIOD_NS:
            self._sample_memory(epoch)
        interval = self._interval
        if interval and epoch.num_batches % interval == 0 and stage == "train":
            self._on_interval(epoch, elapsed)
        if stage == "train" and self._sync_between_batches:
            self._between_batches = True  # until the next action starts
            if self.clock.running and self._current_label()[0] == "sync_wait":
                self.clock.switch("sync_wait")

    def _on_interval(self, epoch: _Epoch, elapsed_ns: int) -> None:
        trainer = self._trainer_ref()
        assert trainer is not None
        progress = IntervalProgress(
            epoch.stage,
            epoch.epoch,
            epoch.num_batches,
            epoch.samples,
            elapsed_ns / 1e9,
            self.world_size,
            trainer.global_step,
        )
        if self.files is not None:
            self.files.interval(progress)
        # One logger call for all subscribers: each log_metrics call formats and writes a row.
        merged: dict[str, float] = {}
        for sub in tuple(self.subscribers):
            metrics = sub._receive_interval(progress)
            if metrics:
                merged.update(metrics)
        if merged:
            log_to_loggers(trainer, merged, progress.step)

    def _sample_memory(self, epoch: _Epoch) -> dict[str, float]:
        snap = memory_snapshot()
        self._memory_ns = time.perf_counter_ns()
        epoch.peak_rss_gb = _nanmax(epoch.peak_rss_gb, snap.get("process_rss_gb"))
        epoch.peak_gpu_gb = _nanmax(epoch.peak_gpu_gb, snap.get("cuda_max_allocated_gb"))
        return snap

    # -- windows ---------------------------------------------------------------------------

    def open_epoch(self, stage: str) -> None:
        """Open ``stage``'s window (pausing an open train window)."""
        if stage not in self.stages or self.finished:
            return
        try:
            self._open_epoch(stage)
        except Exception as exc:
            self._fail(exc)

    def _open_epoch(self, stage: str) -> None:
        trainer = self._trainer_ref()
        assert trainer is not None
        state = self._states[stage]
        if state.epoch is not None:  # a stale window (its end never came): drop it
            if self._open and self._open[-1] == stage and self.clock.running:
                self.clock.stop()
            self._open.remove(stage)
            state.epoch = None
        outer = self._states[self._open[-1]].epoch if self._open else None
        if outer is not None and self.measuring and not outer.paused:
            self._pause(outer)
        now = time.perf_counter_ns()
        epoch = _Epoch(stage=stage, epoch=int(trainer.current_epoch), segment_start_ns=now)
        state.epoch = epoch
        self._open.append(stage)
        if not self.measuring:
            return  # DDP after a failure: windows are tracked only to join the gathers
        state.timing_samples.clear()
        state.noted_samples = None
        if self._track_memory:
            reset_peak_memory()
            self._sample_memory(epoch)
        self._start_clock()
        epoch.segment_start_ns = time.perf_counter_ns()

    def _start_clock(self) -> None:
        phase, owner = self._current_label()
        self.clock.start(phase)
        if owner:
            self.clock.switch(phase, owner)
        set_active_clock(self.clock)

    def _pause(self, epoch: _Epoch) -> None:
        totals = self.clock.stop()
        self._fold(epoch, totals)
        epoch.closed_ns += totals.wall_ns
        epoch.paused = True
        if self._track_memory:
            self._sample_memory(epoch)  # the CUDA peak restarts for the inner window

    def _resume(self, epoch: _Epoch) -> None:
        self._start_clock()
        epoch.segment_start_ns = time.perf_counter_ns()
        epoch.paused = False
        if self._track_memory:
            reset_peak_memory()

    def _fold(self, epoch: _Epoch, totals: PhaseTotals) -> None:
        for name, ns in totals.phases_ns.items():
            epoch.phases_ns[name] += ns
        owners = epoch.owners_ns
        for key, ns in totals.owners_ns.items():
            owners[key] = owners.get(key, 0) + ns
        if self._events is not None:
            for name, s in self._events.take().items():
                epoch.gpu_s[name] = epoch.gpu_s.get(name, 0.0) + s

    def close_epoch(self, stage: str, reopen: bool = False) -> None:
        """Close ``stage``'s window (if open) and resume the window it paused; with ``reopen``
        open the stage's next window; then gather across ranks and hand the report to the
        subscribers. Our gather is ``sync_wait`` and our reporting ``callbacks`` (named after
        each monitor) in the window open by then."""
        if self.finished:
            return
        state = self._states[stage]
        epoch = state.epoch
        vector: list[float] | None = None
        partial: dict[str, Any] | None = None
        if epoch is not None:
            try:
                vector, partial = self._close(state, epoch)
            except Exception as exc:
                self._fail(exc)
        if reopen:
            self.open_epoch(stage)
        if epoch is None or self.finished:
            return
        clock = self.clock
        label = self._current_label()
        try:
            if clock.running:
                clock.switch("sync_wait")
            report = self._gather_report(vector, partial)
            if report is not None and self.files is not None:
                if clock.running:
                    clock.switch("callbacks", "performance callbacks.run_files")
                self.files.epoch(report)
            if report is not None:
                for sub in list(self.subscribers):
                    if clock.running:
                        clock.switch("callbacks", f"{type(sub).__name__}.epoch_report")
                    sub._receive_report(report)
        except Exception as exc:
            self._fail(exc)
        finally:
            if clock.running:
                clock.switch(*label)

    def _named_seconds(
        self, owners_ns: Mapping[tuple[str, str], int]
    ) -> dict[str, dict[str, float]]:
        """Per-callback, per-callback-hook and per-module-hook seconds from the clock's owners."""
        callbacks: dict[str, float] = {}
        callback_hooks: dict[str, float] = {}
        module_hooks: dict[str, float] = {}
        groups = self._owner_group
        for (_, owner), ns in owners_ns.items():
            group = groups.get(owner)
            if group is None:
                continue
            seconds = ns / 1e9
            if group[0] == "callbacks":
                callbacks[group[1]] = callbacks.get(group[1], 0.0) + seconds
                callback_hooks[owner] = callback_hooks.get(owner, 0.0) + seconds
            else:
                module_hooks[owner] = module_hooks.get(owner, 0.0) + seconds
        return {
            "callbacks": callbacks,
            "callback_hooks": callback_hooks,
            "module_hooks": module_hooks,
        }

    def _close(self, state: _StageState, epoch: _Epoch) -> tuple[list[float], dict[str, Any]]:
        self._open.remove(epoch.stage)
        state.epoch = None
        outer = self._states[self._open[-1]].epoch if self._open else None
        if not self.measuring:
            return self._failed_vector(), {}
        totals = self.clock.stop()
        self._fold(epoch, totals)
        wall_ns = epoch.closed_ns + totals.wall_ns
        memory: dict[str, float] = {}
        if self._track_memory:
            memory = self._sample_memory(epoch)
        worker = {name: ns / 1e9 for name, ns in state.worker_ns.items()}
        counts, state.worker_counts = state.worker_counts, {}
        state.worker_ns = {}
        state.timing_samples.clear()
        if outer is not None and outer.paused:
            self._resume(outer)
        else:
            set_active_clock(None)
        wall_s = wall_ns / 1e9
        phases_s = {name: ns / 1e9 for name, ns in epoch.phases_ns.items()}
        named = self._named_seconds(epoch.owners_ns)
        epoch.flush_batch_times()
        stats = epoch.batch_times.summary()
        kept, stride = epoch.kept_batch_times()
        trainer = self._trainer_ref()
        partial = {
            "stage": epoch.stage,
            "epoch": epoch.epoch,
            "wall_s": wall_s,
            "phases_s": phases_s,
            "gpu_phases_s": dict(epoch.gpu_s),
            "worker_s": worker,
            "batch_stats": stats,
            "num_batches": epoch.num_batches,
            "samples": epoch.samples,
            "memory": memory,
            "peak_rss_gb": epoch.peak_rss_gb,
            "peak_gpu_memory_gb": epoch.peak_gpu_gb,
            "worker_counts": counts,
            "batch_times_s": kept,
            "batch_times_stride": stride,
            "num_workers": state.num_workers,
            "batch_size": epoch.first_batch_samples,
            "device": "cuda" if self._events is not None else "cpu",
            "global_step": int(trainer.global_step) if trainer is not None else 0,
            "callbacks_s": named["callbacks"],
            "callback_hooks_s": named["callback_hooks"],
            "module_hooks_s": named["module_hooks"],
            "sync_wait_measured": self.sync_wait_measured,
        }
        figures = {
            "epoch_time": wall_s,
            **{f"{name}_time": s for name, s in phases_s.items()},
            "worker_fetch_time": worker.get("fetch", math.nan),
            "worker_collate_time": worker.get("collate", math.nan),
            "batch_mean": stats["mean"],
            "samples": float(epoch.samples),
            "batches": float(epoch.num_batches),
            "samples_per_sec": per_second(epoch.samples, wall_s),
            "batches_per_sec": per_second(epoch.num_batches, wall_s),
            "peak_rss_gb": epoch.peak_rss_gb,
            "peak_gpu_memory_gb": epoch.peak_gpu_gb,
        }
        vector = [1.0] + [float(figures[name]) for name in _FIGURES]
        vector += [named["callbacks"].get(name, 0.0) for name in self._callback_slots]
        hooks = [0.0] * len(MODULE_HOOK_NAMES)
        for owner, seconds in named["module_hooks"].items():
            index = _MODULE_HOOK_INDEX.get(owner.rpartition(".")[2])
            if index is not None:
                hooks[index] += seconds
        return vector + hooks, partial

    def _failed_vector(self) -> list[float]:
        size = len(_FIGURES) + len(self._callback_slots) + len(MODULE_HOOK_NAMES)
        return [0.0] + [math.nan] * size

    def _gather_report(
        self, vector: list[float] | None, partial: dict[str, Any] | None
    ) -> EpochReport | None:
        if self.world_size <= 1:
            if vector is None or partial is None or not self.measuring:
                return None
            return EpochReport(
                **partial,
                world_size=1,
                global_samples=partial["samples"],
                global_batches=partial["num_batches"],
                global_wall_s=partial["wall_s"],
            )
        trainer = self._trainer_ref()
        assert trainer is not None
        if vector is None:
            vector = self._failed_vector()
        rows = _all_gather(trainer, vector)
        if any(row[0] != 1.0 for row in rows):
            if self.measuring:
                warnings.warn(
                    "performance recording is off for the rest of this run: it failed on rank(s) "
                    f"{[r for r, row in enumerate(rows) if row[0] != 1.0]}",
                    PerfCallbackWarning,
                    stacklevel=2,
                )
            self._finish_subscribers()
            return None
        assert partial is not None
        return self._ddp_report(rows, partial)

    def _ddp_report(self, rows: list[list[float]], partial: dict[str, Any]) -> EpochReport:
        n_fig = len(_FIGURES)
        per_rank = {name: [row[1 + i] for row in rows] for i, name in enumerate(_FIGURES)}
        spreads = {name: rank_spread(values) for name, values in per_rank.items()}
        for name in _OTHER_FIGURES:
            spreads[name].pop("slowest_rank")  # the largest rate or count is not the slowest
        cb0 = 1 + n_fig
        hook0 = cb0 + len(self._callback_slots)
        phases = [{p: row[1 + _FIGURES.index(f"{p}_time")] for p in PHASES} for row in rows]
        named = [
            {
                "callbacks": dict(zip(self._callback_slots, row[cb0:hook0], strict=True)),
                "module_hooks": dict(zip(MODULE_HOOK_NAMES, row[hook0:], strict=True)),
            }
            for row in rows
        ]
        straggler = find_straggler(per_rank["epoch_time"], phases, named)
        return EpochReport(
            **partial,
            world_size=len(rows),
            spreads=spreads,
            global_samples=int(sum(per_rank["samples"])),
            global_batches=int(sum(per_rank["batches"])),
            global_wall_s=max(per_rank["epoch_time"]),
            straggler=straggler,
        )

    def discard(self, stage: str) -> None:
        """Forget worker timings received outside a recorded window (the sanity check)."""
        state = self._states[stage]
        state.worker_ns = {}
        state.worker_counts = {}
        state.timing_samples.clear()
        state.noted_samples = None

    def abort(self) -> None:
        """An exception ends the run: close everything without gathering (ranks may be out of
        step) and undo the instrumentation."""
        self.shutdown()


def _all_gather(trainer: L.Trainer, vector: list[float]) -> list[list[float]]:
    device = trainer.strategy.root_device
    dtype = torch.float32 if device.type == "mps" else torch.float64
    tensor = torch.tensor(vector, dtype=dtype, device=device)
    gathered = trainer.strategy.all_gather(tensor)
    return gathered.reshape(-1, len(vector)).cpu().tolist()


def _nanmax(current: float, value: float | None) -> float:
    if value is None or math.isnan(value):
        return current
    return value if math.isnan(current) else max(current, value)
