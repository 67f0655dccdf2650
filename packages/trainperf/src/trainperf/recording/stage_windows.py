"""The recorder's windows: each stage's open epoch window on the shared clock.

With validation inside ``fit`` pausing the train window, and the window's ``EpochRecord`` at its
close.

:class:`StageWindows` knows neither Lightning's actions nor the ranks: the recorder tells it when
a stage's window opens and closes and when a batch ends; it keeps the figures (phases folded
from the clock, GPU time from the CUDA events, worker timings, batch times, memory peaks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from trainperf.core.clock import PhaseClock, PhaseTotals, set_active_clock
from trainperf.core.stage import Stage
from trainperf.probe.device_memory import MemorySampler
from trainperf.recording.cuda_events import CudaPhaseEvents
from trainperf.recording.stage_state import EpochWindow, StageState, named_seconds
from trainperf.records.epochs import EpochRecord

# Batch times are folded into the epoch's StreamingStats in chunks of this many.
BATCH_TIMES_CHUNK = 1024


class StageWindows:
    """Every stage's state and open window (see the module docstring).

    Args:
        clock: the recorder's clock (the innermost open window's time runs on it).
        start_clock: starts ``clock`` at the attribution's current label
            (``ActionAttribution.start_clock``).
        memory: paces memory readings for the windows' peaks.
        events: the CUDA event chain (GPU time per phase), or None off CUDA.
    """

    def __init__(
        self,
        clock: PhaseClock,
        start_clock: Callable[[], None],
        memory: MemorySampler,
        events: CudaPhaseEvents | None = None,
    ) -> None:
        self.clock = clock
        self._start_clock = start_clock
        self.memory = memory
        self.events = events
        self.states: dict[str, StageState] = {s: StageState() for s in Stage}
        self.open: list[str] = []  # open windows, innermost last (train below val)

    def innermost(self) -> EpochWindow | None:
        """The innermost open window."""
        return self.states[self.open[-1]].epoch if self.open else None

    # -- open, pause, resume ---------------------------------------------------------------

    def open_window(self, stage: str, epoch: int, timed: bool = True) -> None:
        """Open ``stage``'s window for ``epoch``, pausing the window it opens inside; a stale
        window of the stage (its end never came) is dropped. ``timed`` off (DDP after a
        failure): the window is only tracked, so the rank joins the epoch-close exchange."""
        state = self.states[stage]
        if state.epoch is not None:  # a stale window (its end never came): drop it
            if self.open and self.open[-1] == stage and self.clock.running:
                self.clock.stop()
            self.open.remove(stage)
            state.epoch = None
        outer = self.innermost()
        if outer is not None and timed and not outer.paused:
            self._pause(outer)
        window = EpochWindow(stage=stage, epoch=epoch, segment_start_ns=time.perf_counter_ns())
        state.epoch = window
        self.open.append(stage)
        if not timed:
            return
        state.timing_samples.clear()
        state.noted_samples = None
        if self.memory.track:
            self.memory.restart_peak()
            window.fold_memory(self.memory.sample())
        self._start_clock()
        window.segment_start_ns = time.perf_counter_ns()

    def _pause(self, window: EpochWindow) -> None:
        totals = self.clock.stop()
        self._fold(window, totals)
        window.closed_ns += totals.wall_ns
        window.paused = True
        if self.memory.track:
            window.fold_memory(self.memory.sample())  # the CUDA peak restarts for the inner one

    def _resume(self, window: EpochWindow) -> None:
        self._start_clock()
        window.segment_start_ns = time.perf_counter_ns()
        window.paused = False
        if self.memory.track:
            self.memory.restart_peak()

    def _fold(self, window: EpochWindow, totals: PhaseTotals) -> None:
        for name, ns in totals.phases_ns.items():
            window.phases_ns[name] += ns
        owners = window.owners_ns
        for key, ns in totals.owners_ns.items():
            owners[key] = owners.get(key, 0) + ns
        if self.events is not None:
            for name, s in self.events.take().items():
                window.gpu_s[name] = window.gpu_s.get(name, 0.0) + s

    # -- batches ---------------------------------------------------------------------------

    def count_batch(self, stage: str) -> EpochWindow | None:
        """A batch of ``stage`` ended: its time, samples and (paced) memory go into the open
        window, which is returned (None when the stage has none). The batch's window time is
        then ``last_batch_end_ns``."""
        state = self.states[stage]
        window = state.epoch
        if window is None:
            return None
        now = time.perf_counter_ns()
        elapsed = window.elapsed_ns(now)
        pending = window.pending_ns
        pending.append(elapsed - window.last_batch_end_ns)
        if len(pending) >= BATCH_TIMES_CHUNK:
            window.flush_batch_times()
        window.last_batch_end_ns = elapsed
        window.num_batches += 1
        samples = state.timing_samples
        n = samples.popleft() if samples else (state.noted_samples or 0)
        state.noted_samples = None
        if window.num_batches == 1:
            window.first_batch_samples = n
        window.samples += n
        if self.events is not None:
            self.events.drain()
        memory = self.memory
        if memory.track and now - memory.last_ns >= memory.period_ns:
            window.fold_memory(memory.sample())
        return window

    # -- close -----------------------------------------------------------------------------

    def close_window(
        self,
        stage: str,
        *,
        timed: bool,
        owner_groups: Mapping[str, tuple[str, str]],
        sync_wait_measured: str,
        global_step: int,
    ) -> EpochRecord | None:
        """Close ``stage``'s open window and resume the window it paused: this rank's record
        of it (None when ``timed`` is off: the window was only tracked). ``owner_groups`` names
        the clock's owners (``ActionAttribution.owner_groups``)."""
        state = self.states[stage]
        window = state.epoch
        assert window is not None
        self.open.remove(stage)
        state.epoch = None
        outer = self.innermost()
        if not timed:
            return None
        totals = self.clock.stop()
        self._fold(window, totals)
        wall_ns = window.closed_ns + totals.wall_ns
        memory: dict[str, float | None] = {}
        if self.memory.track:
            snap = self.memory.sample(full=True)
            window.fold_memory(snap)
            memory.update(snap)
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
        callbacks, callback_hooks, module_hooks = named_seconds(window.owners_ns, owner_groups)
        window.flush_batch_times()
        kept, stride = window.kept_batch_times()
        return EpochRecord(
            stage=Stage(window.stage),
            epoch=window.epoch,
            wall_s=wall_s,
            phases_s={name: ns / 1e9 for name, ns in window.phases_ns.items()},
            gpu_phases_s=dict(window.gpu_s),
            worker_s=worker,
            batch_stats={**window.batch_times.summary()},
            num_batches=window.num_batches,
            samples=window.samples,
            memory=memory,
            peak_rss_gb=window.peak_rss_gb,
            peak_gpu_memory_gb=window.peak_gpu_gb,
            global_samples=window.samples,
            global_batches=window.num_batches,
            global_wall_s=wall_s,
            worker_counts=counts,
            batch_times_s=list(kept),
            batch_times_stride=stride,
            num_workers=state.num_workers,
            loader=state.loader,
            batch_size=window.first_batch_samples,
            device="cuda" if self.events is not None else "cpu",
            global_step=global_step,
            callbacks_s=callbacks,
            callback_hooks_s=callback_hooks,
            module_hooks_s=module_hooks,
            sync_wait_measured=sync_wait_measured,
            data_wait_causes_s=causes,
            batch_bytes=batch_bytes,
            batch_tensors=batch_tensors,
        )

    def forget(self) -> None:
        """Drop every open window (the recorder shut down)."""
        self.open.clear()
        for state in self.states.values():
            state.epoch = None

    def discard(self, stage: str) -> None:
        """Forget worker timings received outside a recorded window (the sanity check)."""
        state = self.states[stage]
        state.worker_ns = {}
        state.worker_counts = {}
        state.take_input_figures()
        state.timing_samples.clear()
        state.noted_samples = None
