"""Per-trainer measurement behind the performance callbacks, driven by Lightning's action stream.

One :class:`StageRecorder` per ``Trainer`` is shared by every monitor attached to it (reference
counted): one clock, one set of instrumented DataLoaders and one cross-rank gather per epoch. It
composes one collaborator per job and owns only what joins them (membership, failure, which
action opens or closes which window):

- attribution (``attribution.ActionAttribution``): the ``ActionListener`` that Lightning's own
  start/stop of every hook, callback, strategy call and data fetch drives; it charges the clock
  to the running action (no hook is hidden or patched);
- windows (``stage_windows.StageWindows``): each stage's epoch window and its record;
- memory (``trainperf.probe.device_memory.MemorySampler``): paced readings for the peaks;
- CUDA events (``cuda_events``): GPU time per phase, on a CUDA device;
- the DDP exchange (``cross_rank.RankExchange``): one gather per epoch close, the straggler, the
  gradient all-reduce timer;
- loader interposition (``interpose.LoaderInterposer``): worker-side DataLoader timing;
- output (``recorder_output.RecorderOutput``): run files, lifecycle lines, subscribers, loggers.

Windows: ``train`` from the first ``on_train_epoch_start`` action to the next one or
``on_train_end`` (lazily, so the module's epoch-end work and checkpointing stay in the epoch that
caused them); ``val`` / ``test`` from the first ``on_{validation,test}_start`` action to the end
of the strategy's ``on_{validation,test}_end`` (the last hook Lightning dispatches there).
Validation inside ``fit`` pauses the train window. The sanity check is not recorded. A run
resumed mid-epoch opens its train window at the first data fetch.

DDP: at each epoch close one exchange of every rank's figures gives the per-rank figures and the
straggler; a rank whose recording failed keeps joining the exchanges with its health flag down,
and at that exchange every rank turns recording off together.
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import lightning as L
from lightning.pytorch.utilities.data import extract_batch_size
from torch.utils.data import DataLoader

from trainperf.core.clock import PhaseClock, set_active_clock
from trainperf.core.ranks import Straggler
from trainperf.core.stage import Stage
from trainperf.errors import PerfCallbackWarning
from trainperf.lightning import action_stream
from trainperf.lightning.attribution import ActionAttribution
from trainperf.lightning.interpose import LoaderInterposer, worker_timing_off
from trainperf.lightning.interruption import Interruption
from trainperf.lightning.recorder_output import RecorderOutput
from trainperf.lightning.window_events import (
    BATCH_END_STAGE,
    EV_FIT_START,
    EV_TEST_END,
    EV_TEST_START,
    EV_TRAIN_END,
    EV_TRAIN_EPOCH_START,
    EV_TRAIN_FETCH,
    EV_VAL_END,
    EV_VAL_START,
)
from trainperf.probe.device_memory import MemorySampler
from trainperf.probe.worker import WorkerTiming
from trainperf.recording.cross_rank import RankExchange
from trainperf.recording.cuda_events import EventClock, device_clock
from trainperf.recording.run_files import RunFiles
from trainperf.recording.stage_state import EpochWindow
from trainperf.recording.stage_windows import StageWindows
from trainperf.recording.subscribers import Subscriber
from trainperf.records.epochs import EpochRecord, LoaderSettings

#: Why worker timing was off, each said once per process (a sweep or a notebook fits again and
#: again with the same torch).
WORKER_TIMING_WARNED: set[str] = set()


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
        self.world_size = max(1, int(trainer.world_size))
        self._interval = 0
        self._sync_cuda = False
        self.clock: PhaseClock
        self.clock, events = device_clock(trainer.strategy.root_device)
        self.attribution = ActionAttribution(
            trainer,
            self.clock,
            world_size=self.world_size,
            on_event_start=self._event_start,
            on_event_stop=self._event_stop,
            on_error=self._fail,
        )
        self.memory = MemorySampler()
        self.windows = StageWindows(self.clock, self.attribution.start_clock, self.memory, events)
        self.exchange = RankExchange(self.world_size)
        self.output = RecorderOutput()
        self._interposer: LoaderInterposer | None = None
        self._listening = False
        self._train_epoch_marked = -1  # the epoch whose train window an action opened

    # -- what the collaborators know -------------------------------------------------------

    @property
    def measuring(self) -> bool:
        """Measurement on (off after a failure)."""
        return self.attribution.measuring

    @property
    def finished(self) -> bool:
        """Fully off: no listener, no gathers."""
        return self.attribution.finished

    @property
    def files(self) -> RunFiles | None:
        """The run files (rank zero, while a subscriber writes them)."""
        return self.output.files

    @property
    def straggler(self) -> Straggler | None:
        """The straggler of the last gathered epoch."""
        return self.exchange.straggler

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
                recorder.output.open_files(trainer, recorder.world_size)
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
        self.memory.track = any(s.track_memory for s in subs)
        self._sync_cuda = any(s.sync_cuda for s in subs)
        if self.files is not None and not any(s.write_run_files for s in subs):
            self.output.close_files()
        if isinstance(self.clock, EventClock):
            self.clock.sync_each_switch(self._sync_cuda)

    def _install(self, trainer: L.Trainer) -> None:
        self.attribution.name_callbacks(trainer)
        if any(s.write_run_files for s in self.subscribers):
            self.output.open_files(trainer, self.world_size)
            self.output.start_lifecycle(trainer, self.world_size)
        reason = worker_timing_off()
        if reason is None:
            self._interposer = LoaderInterposer(trainer, self._route_loader, self._fail)
        elif reason not in WORKER_TIMING_WARNED:
            WORKER_TIMING_WARNED.add(reason)
            warnings.warn(f"performance callbacks: {reason}", PerfCallbackWarning, stacklevel=4)
        action_stream.add_listener(trainer, self.attribution)
        self._listening = True

    def _route_loader(
        self, loader: DataLoader
    ) -> tuple[Callable[[WorkerTiming], None], PhaseClock] | None:
        trainer = self._trainer_ref()
        if trainer is None or not self.measuring:
            return None
        running = trainer.state.stage
        stage = Stage.of_running(running.value if running is not None else None)
        if stage is None or stage not in self.stages:
            return None
        state = self.windows.states[stage]
        state.num_workers = int(loader.num_workers)
        state.loader = LoaderSettings.of(loader)
        return partial(self._on_timing, stage), self.clock

    def _on_timing(self, stage: str, timing: WorkerTiming) -> None:
        """A worker timing of a loader routed to ``stage``. Timings are delivered inside the
        consuming loop's ``next()``, so the innermost open window is the consumer, even for a
        loader shared by two stages; before any window opens (Lightning's first iterator) the
        loader's own stage is used."""
        if self.attribution.measuring:
            windows = self.windows
            windows.states[windows.open[-1] if windows.open else stage].add_timing(timing)

    def shutdown(self, status: str = "finished", interruption: Interruption | None = None) -> None:
        """Stop everything and undo what was installed (idempotent); ``status`` (``finished``,
        ``failed``; ``interrupted`` with ``interruption``) goes to this rank's end in
        ``perf/lifecycle.jsonl``."""
        self.attribution.measuring = False
        self.attribution.finished = True
        self.output.end(status, interruption)
        if self.clock.running:
            self.clock.stop()
        set_active_clock(None)
        self.windows.forget()
        trainer = self._trainer_ref()
        try:
            if self._listening and trainer is not None:
                self._listening = False
                action_stream.remove_listener(trainer, self.attribution)
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
        self.attribution.measuring = False
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

    # -- window events (from the attribution) ----------------------------------------------

    def _event_start(self, event: int) -> None:
        trainer = self._trainer_ref()
        if trainer is None:
            return
        open_ = self.windows.open
        if event == EV_TRAIN_EPOCH_START:
            epoch = int(trainer.current_epoch)
            if self._train_epoch_marked != epoch:
                self._train_epoch_marked = epoch
                self.close_epoch("train", reopen=True)
        elif event == EV_TRAIN_FETCH:
            if "train" not in open_ and self.windows.states["train"].epoch is None:
                # Resumed mid-epoch: Lightning skips on_train_epoch_start.
                self._train_epoch_marked = int(trainer.current_epoch)
                self.open_epoch("train")
        elif event == EV_TRAIN_END:
            if "train" in open_:
                self.close_epoch("train")
        elif event == EV_VAL_START:
            if not trainer.sanity_checking and "val" not in open_:
                self.open_epoch("val")
        elif event == EV_TEST_START:
            if "test" not in open_:
                self.open_epoch("test")
        elif event == EV_FIT_START and self.world_size > 1:
            # Our gather is sync_wait; with the timing hook, so is DDP's gradient all-reduce
            # wait. A model that already has a hook (the user's) is left alone.
            self.attribution.comm = self.exchange.hook(trainer.strategy.model)

    def _event_stop(self, event: int) -> None:
        stage = BATCH_END_STAGE.get(event)
        if stage is not None:
            self._batch_end(stage)
            return
        if event == EV_VAL_END:
            trainer = self._trainer_ref()
            if trainer is not None and trainer.sanity_checking:
                self.discard("val")
            elif "val" in self.windows.open:
                self.close_epoch("val")
        elif event == EV_TEST_END and "test" in self.windows.open:
            self.close_epoch("test")

    # -- batches ---------------------------------------------------------------------------

    def note_batch(self, stage: str, batch: Any) -> None:
        """A batch hook saw ``batch``: remember its size when no instrumented DataLoader
        reported one (any iterable that is not a DataLoader)."""
        state = self.windows.states[stage]
        if state.timing_samples or state.noted_samples is not None or not self.measuring:
            return
        try:
            state.noted_samples = int(extract_batch_size(batch))
        except Exception:
            state.noted_samples = 0

    def _batch_end(self, stage: str) -> None:
        if not self.attribution.measuring:
            return
        window = self.windows.count_batch(stage)
        if window is None:
            return
        interval = self._interval
        # training only: the step does not advance during evaluation, nothing to plot against
        if interval and window.num_batches % interval == 0 and stage == "train":
            trainer = self._trainer_ref()
            assert trainer is not None
            self.output.interval(
                trainer,
                window,
                window.last_batch_end_ns,
                self.world_size,
                self.clock,
                self.subscribers,
            )
        if stage == "train" and self.attribution.sync_between_batches:
            self.attribution.batch_gap()

    @classmethod
    def of(cls, trainer: L.Trainer) -> StageRecorder | None:
        """The trainer's recorder, if a performance monitor attached one."""
        return cls._registry.get(trainer)

    def open_window(self) -> EpochWindow | None:
        """The innermost open window (a live progress line reads it)."""
        return self.windows.innermost() if self.measuring else None

    # -- windows ---------------------------------------------------------------------------

    def open_epoch(self, stage: str) -> None:
        """Open ``stage``'s window (pausing an open train window)."""
        if stage not in self.stages or self.finished:
            return
        try:
            trainer = self._trainer_ref()
            assert trainer is not None
            self.windows.open_window(stage, int(trainer.current_epoch), timed=self.measuring)
        except Exception as exc:
            self._fail(exc)

    def close_epoch(self, stage: str, reopen: bool = False) -> None:
        """Close ``stage``'s window (if open) and resume the window it paused; with ``reopen``
        open the stage's next window; then gather across ranks and hand the report to the
        outputs. Our gather is ``sync_wait`` and our reporting ``callbacks`` (named after each
        monitor) in the window open by then."""
        if self.finished:
            return
        was_open = self.windows.states[stage].epoch is not None
        local: EpochRecord | None = None
        if was_open:
            try:
                trainer = self._trainer_ref()
                local = self.windows.close_window(
                    stage,
                    timed=self.measuring,
                    owner_groups=self.attribution.owner_groups,
                    sync_wait_measured=self.exchange.sync_wait_measured,
                    global_step=int(trainer.global_step) if trainer is not None else 0,
                )
            except Exception as exc:
                self._fail(exc)
        if reopen:
            self.open_epoch(stage)
        if not was_open or self.finished:
            return
        clock = self.clock
        label = self.attribution.current_label()
        try:
            if clock.running:
                clock.switch("sync_wait")
            report = self._gather_report(local)
            if report is not None:
                self.output.epoch(report, self.subscribers, clock)
        except Exception as exc:
            self._fail(exc)
        finally:
            if clock.running:
                clock.switch(*label)

    def _gather_report(self, local: EpochRecord | None) -> EpochRecord | None:
        """The epoch's report across ranks (``local`` itself on one process); None when
        recording is off here, or (DDP) on any rank: then it goes off on every rank together."""
        measuring = self.measuring
        report, off = self.exchange.gather(local if measuring else None)
        if off is not None:
            if measuring:
                warnings.warn(
                    f"performance recording is off for the rest of this run: {off}",
                    PerfCallbackWarning,
                    stacklevel=2,
                )
            self._finish_subscribers()
        return report

    def discard(self, stage: str) -> None:
        """Forget worker timings received outside a recorded window (the sanity check)."""
        self.windows.discard(stage)
