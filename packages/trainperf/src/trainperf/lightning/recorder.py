"""Per-trainer measurement behind the performance callbacks, driven by Lightning's action stream.

One :class:`StageRecorder` per ``Trainer`` is shared by every monitor attached to it (reference
counted): one clock, one set of instrumented DataLoaders and one cross-rank gather per epoch. It
is an ``ActionListener`` (``callbacks/action_stream.py``): Lightning's own start/stop of every
hook, callback, strategy call and data fetch drives it; no hook is hidden or patched.

Attribution: the innermost running action that is not transparent owns the time, with its owner
(a callback's class and hook, a module's ``Class.hook``) as a finer split. Two moments have no
action of their own: the backward pass runs between the module's ``on_before_backward`` and the
first ``on_after_backward`` (the precision plugin brackets it in both optimization modes, also
under ``manual_backward``); and the all-reduce wait at the end of a DDP backward starts when DDP
hands its last gradient bucket to our communication hook, so that stretch is ``sync_wait``.

Windows: ``train`` from the first ``on_train_epoch_start`` action to the next one or
``on_train_end`` (lazily, so the module's epoch-end work and checkpointing stay in the epoch that
caused them); ``val`` / ``test`` from the first ``on_{validation,test}_start`` action to the end
of the strategy's ``on_{validation,test}_end`` (the last hook Lightning dispatches there).
Validation inside ``fit`` pauses the train window. The sanity check is not recorded. A run
resumed mid-epoch opens its train window at the first data fetch.

DDP: at each epoch close one exchange of every rank's figures (``callbacks/cross_rank.py``) gives
the per-rank figures and the straggler; a rank whose recording failed keeps joining the exchanges
with its health flag down, and at that exchange every rank turns recording off together.
"""

from __future__ import annotations

import math
import time
import warnings
import weakref
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.utilities.data import extract_batch_size
from torch.utils.data import DataLoader

from trainperf.core.actions import CALLBACK, DATAMODULE, MODULE, classify_action
from trainperf.core.clock import PhaseClock, PhaseTotals, set_active_clock
from trainperf.core.ranks import Straggler
from trainperf.core.stage import Stage
from trainperf.errors import PerfCallbackWarning
from trainperf.lightning import action_stream
from trainperf.lightning.cross_rank import CommTimer, gather_ranks, hook_ddp
from trainperf.lightning.cuda_events import CudaPhaseEvents, EventClock
from trainperf.lightning.epoch_report import (
    IntervalProgress,
    Subscriber,
    log_to_loggers,
)
from trainperf.lightning.interpose import (
    LoaderInterposer,
    check_versions,
    syncs_before_train_batch,
)
from trainperf.lightning.interruption import Interruption
from trainperf.lightning.run_files import Lifecycle, RunFiles
from trainperf.lightning.stage_state import (
    EpochWindow,
    StageState,
    named_seconds,
)
from trainperf.lightning.trial_fit import perf_root
from trainperf.lightning.untimed import lightning_own_hook, untimed_hook
from trainperf.lightning.window_events import (
    BATCH_END_STAGE,
    EV_AFTER_BACKWARD,
    EV_BEFORE_BACKWARD_DONE,
    EV_FIT_START,
    EV_TEST_END,
    EV_TEST_START,
    EV_TRAIN_END,
    EV_TRAIN_EPOCH_START,
    EV_TRAIN_FETCH,
    EV_VAL_END,
    EV_VAL_START,
    window_event,
)
from trainperf.probe.device_memory import memory_snapshot, peak_sample, reset_peak_memory
from trainperf.probe.worker import WorkerTiming
from trainperf.records.kinds import EpochRecord, LoaderSettings

# In-epoch memory samples (for the peaks) at most this often: a peak sample costs ~10 us (natively).
_MEMORY_PERIOD_NS = 1_000_000_000
# Batch times are folded into the epoch's StreamingStats in chunks of this many.
_BATCH_TIMES_CHUNK = 1024


class StageRecorder:
    """Per-trainer measurement shared by the performance monitors; use :meth:`attach` /
    :meth:`detach`. Every entry point turns an internal error into one
    :class:`PerfCallbackWarning` and stops measuring; training never sees an exception."""

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
        self._states: dict[str, StageState] = {s: StageState() for s in Stage}
        self._open: list[str] = []  # open windows, innermost last (train below val)
        self._train_epoch_marked = -1  # the epoch whose train window an action opened
        # Actions running now, innermost last: (action, phase, owner, event); a transparent one
        # carries the enclosing action's phase and owner.
        self._stack: list[tuple[str, str, str, int]] = []
        self._info: dict[str, tuple[str, str, str, int]] = {}  # action -> its stack entry
        self._owner_group: dict[str, tuple[str, str]] = {}  # owner -> (group, name)
        self._callback_names: dict[str, str] = {}  # callback state_key -> display name
        self._in_backward = False
        self._backward_start_ns = 0
        # Under DDP Lightning syncs the ranks between two training batches (see
        # interpose.syncs_before_train_batch): that gap is sync_wait, not unattributed.
        self._sync_between_batches = syncs_before_train_batch(self.world_size)
        self._between_batches = False
        self._comm: CommTimer | None = None
        self._interposer: LoaderInterposer | None = None
        self._listening = False
        self.sync_wait_measured = "none" if self.world_size <= 1 else "gather"
        self.files: RunFiles | None = None
        self._lifecycle: Lifecycle | None = None
        self.straggler: Straggler | None = None  # of the last gathered epoch

    # -- membership ------------------------------------------------------------------------

    @classmethod
    def attach(cls, trainer: L.Trainer, subscriber: Subscriber) -> StageRecorder:
        """The trainer's recorder (created and installed on first use) with ``subscriber`` in."""
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
            self.clock = EventClock(self._events)
            self._configure()  # sets the clock's sync
        self._name_callbacks(trainer)
        if any(s.write_run_files for s in self.subscribers):
            self._open_files(trainer)
            fn = trainer.state.fn
            self._lifecycle = Lifecycle(
                perf_root(trainer),
                str(fn.value) if fn is not None else "fit",
                trainer.global_rank,
                self.world_size,
            )
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
        device, precision = str(trainer.strategy.root_device), str(trainer.precision)
        self.files.run_info(
            {"world_size": self.world_size, "device": device, "precision": precision}
        )

    def _name_callbacks(self, trainer: L.Trainer) -> None:
        """Display names of the trainer's callbacks by ``state_key`` (what action names carry):
        the class name, then ``#2``, ``#3``... (instances with equal state keys share one)."""
        names: dict[str, str] = {}
        count: Counter[str] = Counter()
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if callback.state_key not in names:
                base = type(callback).__name__
                count[base] += 1
                names[callback.state_key] = base if count[base] == 1 else f"{base}#{count[base]}"
        self._callback_names = names
        self._info.clear()

    def _route_loader(
        self, loader: DataLoader
    ) -> tuple[Callable[[WorkerTiming], None], PhaseClock] | None:
        trainer = self._trainer_ref()
        if trainer is None or not self.measuring:
            return None
        running = trainer.state.stage
        stage = Stage.of_lightning(running.value if running is not None else None)
        if stage is None or stage not in self.stages:
            return None
        self._states[stage].num_workers = int(loader.num_workers)
        self._states[stage].loader = LoaderSettings.of(loader)
        return partial(self._on_timing, stage), self.clock

    def _on_timing(self, stage: str, timing: WorkerTiming) -> None:
        """A worker timing of a loader routed to ``stage``. Timings are delivered inside the
        consuming loop's ``next()``, so the innermost open window is the consumer, even for a
        loader shared by two stages; before any window opens (Lightning's first iterator) the
        loader's own stage is used."""
        if self.measuring:
            self._states[self._open[-1] if self._open else stage].add_timing(timing)

    def shutdown(self, status: str = "finished", interruption: Interruption | None = None) -> None:
        """Stop everything and undo what was installed (idempotent); ``status`` (``finished``,
        ``failed``; ``interrupted`` with ``interruption``) goes to this rank's end in
        ``perf/lifecycle.jsonl``."""
        self.measuring = False
        self.finished = True
        lifecycle, self._lifecycle = self._lifecycle, None
        if lifecycle is not None:
            lifecycle.end(status, interruption)
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
            # All ranks must leave together: stop here, tell the peers at the next gather.
            self._fail(RuntimeError("a subscriber failed"), warn=False)
        else:
            self.detach(subscriber)

    def _finish_subscribers(self) -> None:
        subs = list(self.subscribers)
        self.shutdown()
        for sub in subs:
            sub._recorder_off()

    # -- the action stream (hot path) ------------------------------------------------------

    def wants(self, name: str) -> bool:
        """Whether the stream should tell us about ``name`` (asked once per name). Left out:
        transparent actions without a window event (their time stays with the enclosing action
        either way) and hooks that do nothing. The module's own ``on_after_backward`` closes the
        backward bracket, so the callbacks' no-op ones are not needed for it."""
        try:
            _, phase, _, event = self._info.get(name) or self._learn(name)
            action = classify_action(name)
            trainer = self._trainer_ref()
            idle = (
                phase != ""
                and trainer is not None
                and untimed_hook(trainer, action.kind, action.target, action.hook)
            )
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
                and trainer is not None
                and lightning_own_hook(trainer, action.kind, action.hook)
            ):
                # Lightning's own transfer / optimizer / checkpoint hook, not the user's: no
                # owner, so inside the strategy's batch_to_device or the module's
                # optimizer_step it continues the enclosing interval.
                self._info[name] = (name, phase, "", event)
            return phase != "" and not idle
        except Exception:
            return True  # when in doubt, listen

    def _learn(self, name: str) -> tuple[str, str, str, int]:
        action = classify_action(name)
        owner = action.owner
        if action.kind == CALLBACK:
            display = self._callback_names.get(action.target, action.owner)
            owner = f"{display}.{action.hook}"
            self._owner_group[owner] = ("callbacks", display)
        elif action.kind in (MODULE, DATAMODULE):
            self._owner_group[owner] = ("module_hooks", owner)
        event = window_event(action.kind, action.hook)
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
                if event == EV_BEFORE_BACKWARD_DONE:
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
        if event == EV_AFTER_BACKWARD:
            if self._in_backward:
                self._in_backward = False
                comm = self._comm
                if comm is not None and comm.ready_ns > self._backward_start_ns:
                    self.clock.switch_since("sync_wait", comm.ready_ns)
            return
        trainer = self._trainer_ref()
        if trainer is None:
            return
        if event == EV_TRAIN_EPOCH_START:
            epoch = int(trainer.current_epoch)
            if self._train_epoch_marked != epoch:
                self._train_epoch_marked = epoch
                self.close_epoch("train", reopen=True)
        elif event == EV_TRAIN_FETCH:
            if "train" not in self._open and self._states["train"].epoch is None:
                # Resumed mid-epoch: Lightning skips on_train_epoch_start.
                self._train_epoch_marked = int(trainer.current_epoch)
                self.open_epoch("train")
        elif event == EV_TRAIN_END:
            if "train" in self._open:
                self.close_epoch("train")
        elif event == EV_VAL_START:
            if not trainer.sanity_checking and "val" not in self._open:
                self.open_epoch("val")
        elif event == EV_TEST_START:
            if "test" not in self._open:
                self.open_epoch("test")
        elif event == EV_FIT_START:
            self._hook_ddp(trainer)

    def _event_stop(self, event: int) -> None:
        stage = BATCH_END_STAGE.get(event)
        if stage is not None:
            self._batch_end(stage)
            return
        if event == EV_VAL_END:
            trainer = self._trainer_ref()
            if trainer is not None and trainer.sanity_checking:
                self.discard("val")
            elif "val" in self._open:
                self.close_epoch("val")
        elif event == EV_TEST_END and "test" in self._open:
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
        if self.world_size <= 1 or self._comm is not None or trainer.strategy.model is None:
            return
        self._comm = hook_ddp(trainer.strategy.model)
        if self._comm is not None:
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
        # training only: the step does not advance during evaluation, nothing to plot against
        if interval and epoch.num_batches % interval == 0 and stage == "train":
            self._on_interval(epoch, elapsed)
        if stage == "train" and self._sync_between_batches:
            self._between_batches = True  # until the next action starts
            if self.clock.running and self._current_label()[0] == "sync_wait":
                self.clock.switch("sync_wait")

    @classmethod
    def of(cls, trainer: L.Trainer) -> StageRecorder | None:
        """The trainer's recorder, if a performance monitor attached one."""
        return cls._registry.get(trainer)

    def open_window(self) -> EpochWindow | None:
        """The innermost open window (a live progress line reads it)."""
        return self._states[self._open[-1]].epoch if self._open and self.measuring else None

    def _on_interval(self, epoch: EpochWindow, elapsed_ns: int) -> None:
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
            epoch.phases_s(self.clock) if self.files is not None else {},  # for the record
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

    def _sample_memory(self, epoch: EpochWindow, full: bool = False) -> dict[str, float]:
        """Fold a memory reading into the window's peaks; ``full``: the whole snapshot (the
        epoch-end gauges), else only what the peaks need (``peak_sample``: in-epoch samples,
        once a second at most, are a quarter of a snapshot's cost)."""
        snap = memory_snapshot() if full else peak_sample()
        self._memory_ns = time.perf_counter_ns()
        epoch.fold_memory(snap)
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
        epoch = EpochWindow(stage=stage, epoch=int(trainer.current_epoch), segment_start_ns=now)
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

    def _pause(self, epoch: EpochWindow) -> None:
        totals = self.clock.stop()
        self._fold(epoch, totals)
        epoch.closed_ns += totals.wall_ns
        epoch.paused = True
        if self._track_memory:
            self._sample_memory(epoch)  # the CUDA peak restarts for the inner window

    def _resume(self, epoch: EpochWindow) -> None:
        self._start_clock()
        epoch.segment_start_ns = time.perf_counter_ns()
        epoch.paused = False
        if self._track_memory:
            reset_peak_memory()

    def _fold(self, epoch: EpochWindow, totals: PhaseTotals) -> None:
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
        local: EpochRecord | None = None
        if epoch is not None:
            try:
                local = self._close(state, epoch)
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
            report = self._gather_report(local)
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

    def _close(self, state: StageState, epoch: EpochWindow) -> EpochRecord | None:
        """Close the window: this rank's report (None when measurement is off)."""
        self._open.remove(epoch.stage)
        state.epoch = None
        outer = self._states[self._open[-1]].epoch if self._open else None
        if not self.measuring:
            return None
        totals = self.clock.stop()
        self._fold(epoch, totals)
        wall_ns = epoch.closed_ns + totals.wall_ns
        memory: dict[str, float | None] = {}
        if self._track_memory:
            memory.update(self._sample_memory(epoch, full=True))
        worker = {name: ns / 1e9 for name, ns in state.worker_ns.items()}
        causes, batch_bytes, batch_tensors = state.take_input_figures()
        counts, state.worker_counts = state.worker_counts, {}
        state.worker_ns = {}
        state.timing_samples.clear()
        if outer is not None and outer.paused:
            self._resume(outer)
        else:
            set_active_clock(None)
        wall_s = wall_ns / 1e9
        callbacks, callback_hooks, module_hooks = named_seconds(epoch.owners_ns, self._owner_group)
        epoch.flush_batch_times()
        kept, stride = epoch.kept_batch_times()
        trainer = self._trainer_ref()
        return EpochRecord(
            stage=Stage(epoch.stage),
            epoch=epoch.epoch,
            wall_s=wall_s,
            phases_s={name: ns / 1e9 for name, ns in epoch.phases_ns.items()},
            gpu_phases_s=dict(epoch.gpu_s),
            worker_s=worker,
            batch_stats={**epoch.batch_times.summary()},
            num_batches=epoch.num_batches,
            samples=epoch.samples,
            memory=memory,
            peak_rss_gb=epoch.peak_rss_gb,
            peak_gpu_memory_gb=epoch.peak_gpu_gb,
            global_samples=epoch.samples,
            global_batches=epoch.num_batches,
            global_wall_s=wall_s,
            worker_counts=counts,
            batch_times_s=list(kept),
            batch_times_stride=stride,
            num_workers=state.num_workers,
            loader=state.loader,
            batch_size=epoch.first_batch_samples,
            device="cuda" if self._events is not None else "cpu",
            global_step=int(trainer.global_step) if trainer is not None else 0,
            callbacks_s=callbacks,
            callback_hooks_s=callback_hooks,
            module_hooks_s=module_hooks,
            sync_wait_measured=self.sync_wait_measured,
            data_wait_causes_s=causes,
            batch_bytes=batch_bytes,
            batch_tensors=batch_tensors,
        )

    def _gather_report(self, local: EpochRecord | None) -> EpochRecord | None:
        """The epoch's report across ranks (``local`` itself on one process); None when
        recording is off here, or (DDP) on any rank: then it goes off on every rank together."""
        if self.world_size <= 1:
            return local if self.measuring else None
        report, off = gather_ranks(local if self.measuring else None, self.world_size)
        if report is not None:
            self.straggler = report.straggler  # the live line names it until the next epoch
        if off is not None:
            if self.measuring:
                warnings.warn(
                    f"performance recording is off for the rest of this run: {off}",
                    PerfCallbackWarning,
                    stacklevel=2,
                )
            self._finish_subscribers()
        return report

    def discard(self, stage: str) -> None:
        """Forget worker timings received outside a recorded window (the sanity check)."""
        state = self._states[stage]
        state.worker_ns = {}
        state.worker_counts = {}
        state.take_input_figures()
        state.timing_samples.clear()
        state.noted_samples = None
