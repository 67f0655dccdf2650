"""Shared measurement behind the performance callbacks: Lightning hooks -> ``ocr.perf``.

One :class:`StageRecorder` per ``Trainer`` is shared by every performance callback attached to
it (reference counted), so two callbacks mean one clock, one set of instrumented DataLoaders and
one cross-rank gather per epoch, not two. The first attached callback *drives* it (its hooks call
the recorder); every subscriber receives the finished :class:`EpochReport` and presents it.

Windows. A stage epoch is a clock window: ``train`` from ``on_train_epoch_start`` to the next
``on_train_epoch_start`` or ``on_train_end`` (closing lazily keeps the module's epoch-end work,
checkpointing and logging inside the epoch that caused them); ``val`` and ``test`` from
``on_{validation,test}_start`` to the driver's ``on_{validation,test}_end``, which comes after the
module's ``on_*_epoch_end`` (its metric computation). Validation inside ``fit`` *pauses* the train
window, so each stage's phases sum to its own wall time and the train epoch time excludes
validation. The sanity check is not recorded.

Phases (``ocr.perf.clock.PHASES``): ``data_wait`` is charged by the instrumented DataLoader
iterator around each blocking ``next()``; ``forward`` from ``on_*_batch_start`` (training: the
training step and its loss); ``optimizer`` from ``on_before_zero_grad`` / ``on_after_backward`` /
``on_before_optimizer_step`` (zeroing, clipping, the step); ``backward`` from
``on_before_backward``; ``postprocess`` / ``metric`` where the LightningModule wraps its work in
``perf_phase()``; ``callbacks`` from ``on_*_batch_end`` until the next batch (other callbacks,
logging, checkpointing, LR scheduling, the host-to-device copy of the next batch) and for the
performance callbacks' own epoch-end reporting; ``unattributed`` opens each window (iterator
creation, DataLoader worker start-up, other callbacks' epoch-start hooks) so time nobody claims
stays visible.

GPU: without ``sync_cuda`` the host clock never synchronises; CUDA events are recorded at phase
switches and read back without blocking (``query()``) at batch ends, and once per epoch at its
close, giving ``gpu_phases_s`` (GPU stream time between switches, per phase).

DDP: every rank measures itself; at each epoch close one ``all_gather`` of a fixed-order float
vector gives per-rank figures, summarised with ``ocr.perf.ranks.rank_spread``. The vector carries a
health flag: a rank whose recording failed keeps joining the gathers with the flag down (it never
leaves its peers blocked in a collective) and, at that gather, every rank turns recording off.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import lightning as L
import numpy as np
import torch
from lightning.fabric.utilities.data import _auto_add_worker_init_fn
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.data import extract_batch_size
from torch.utils.data import DataLoader

from ocr.perf.clock import PHASES, PhaseClock, PhaseTotals, perf_phase, set_active_clock
from ocr.perf.memory import memory_snapshot, reset_peak_memory
from ocr.perf.ranks import rank_spread
from ocr.perf.rundir import PERF_DIRNAME, JsonlWriter, write_run_info
from ocr.perf.stats import StreamingStats
from ocr.perf.worker import InstrumentedLoader, WorkerTiming

__all__ = [
    "STAGE_NAMES",
    "EpochReport",
    "PerfCallbackWarning",
    "RecorderCallback",
    "StageRecorder",
    "hide_hooks",
    "log_to_loggers",
    "normalize_stages",
    "per_second",
    "show_hooks",
    "skip_unused_batch_hooks",
]

# Lightning's stage names (``RunningStage`` values, what users pass in ``stages``) -> the stage
# names used in metric keys.
STAGE_NAMES: dict[str, str] = {"train": "train", "validate": "val", "test": "test"}
_RUNNING_STAGE_TO_KEY = {"train": "train", "validate": "val", "sanity_check": "val", "test": "test"}

# Figures gathered across ranks at an epoch close, in this fixed order (plus a leading health
# flag). Durations first: their spread names a slowest rank.
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
# RecorderCallback hooks that only act for the callback driving the recorder (see
# RecorderCallback._silence_hooks). setup / teardown / on_exception are not among them.
_DRIVER_HOOKS: tuple[str, ...] = (
    "on_sanity_check_end",
    "on_train_epoch_start",
    "on_train_end",
    "on_train_batch_start",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_validation_start",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_end",
    "on_test_start",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_test_end",
)
# In-epoch memory samples (for the RSS peak) at most this often: a snapshot costs ~100 us, too
# much for every step of a fast model; RSS moves slowly. The CUDA peak is exact regardless.
_MEMORY_PERIOD_NS = 1_000_000_000
# Batch times wait in a plain list and are folded into the epoch's StreamingStats (vectorised) in
# chunks of this many, and at the close: a per-batch StreamingStats.add() costs several
# microseconds on the hot path once the training step has evicted it from the CPU caches.
_BATCH_TIMES_CHUNK = 1024
# Drain CUDA events with a blocking read past this many pending switches (a GPU running far
# behind the host); bounds the event memory of very long epochs.
_MAX_PENDING_EVENTS = 4096
#: Batch times kept per epoch for the run directory's epochs.jsonl (every k-th beyond this).
MAX_KEPT_BATCH_TIMES = 4096
EPOCH_SCHEMA = "receipt-ocr/perf-epoch"
INTERVAL_SCHEMA = "receipt-ocr/perf-interval"


class PerfCallbackWarning(UserWarning):
    """A performance callback hit an internal error and turned itself off."""


def normalize_stages(stages: Iterable[str], owner: str) -> frozenset[str]:
    """Map user stage names (``"train"``, ``"validate"`` or ``"val"``, ``"test"``) to metric
    stage names; anything else is a ``ValueError`` naming ``owner`` and the bad value."""
    if isinstance(stages, str):
        raise ValueError(
            f"{owner}: stages must be a list of stage names, got the string {stages!r}"
        )
    out = set()
    for name in stages:
        key = "val" if name == "val" else STAGE_NAMES.get(name)
        if key is None:
            raise ValueError(
                f"{owner}: unknown stage {name!r} in stages; expected some of "
                f"{', '.join(repr(s) for s in STAGE_NAMES)}"
            )
        out.add(key)
    return frozenset(out)


# Hooks Lightning dispatches at every batch (with a profiler context and a call each, ~0.7 µs per
# hook per callback even when the callback does not override it).
_PER_BATCH_HOOKS: tuple[str, ...] = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
)


def hide_hooks(callback: Callback, names: Iterable[str], base: type[Callback] = Callback) -> None:
    """Hide the hooks ``names`` of ``callback`` that its class inherits unchanged from ``base``
    from Lightning's dispatch: Lightning skips a hook attribute that is not callable, and each
    dispatched hook costs a profiler context and a call (~0.7 µs) even when it does nothing.
    Hooks a subclass overrides are never hidden. Undo with :func:`show_hooks`."""
    cls = type(callback)
    for name in names:
        if getattr(cls, name) is getattr(base, name):
            setattr(callback, name, None)


def show_hooks(callback: Callback, names: Iterable[str]) -> None:
    """Undo :func:`hide_hooks` for ``names`` (idempotent)."""
    attrs = vars(callback)
    for name in names:
        attrs.pop(name, None)


def skip_unused_batch_hooks(callback: Callback) -> None:
    """Hide the per-batch hooks ``callback``'s class does not override (no-ops that Lightning
    would otherwise dispatch at every batch), for the callback's lifetime."""
    hide_hooks(callback, _PER_BATCH_HOOKS)


def per_second(count: float, seconds: float) -> float:
    """``count / seconds``; nan for an empty (zero-length) window."""
    return count / seconds if seconds > 0 else math.nan


def log_to_loggers(
    trainer: L.Trainer, metrics: Mapping[str, float], step: int | None = None
) -> None:
    """Log ``metrics`` through every logger of ``trainer`` at ``step`` (default
    ``trainer.global_step``), from rank zero only; non-finite values (an empty stage's
    statistics) are left out. No logger: no-op."""
    loggers = trainer.loggers
    if not loggers or not trainer.is_global_zero:
        return
    clean = {k: float(v) for k, v in metrics.items() if math.isfinite(v)}
    if not clean:
        return
    if step is None:
        step = trainer.global_step
    for logger in loggers:
        logger.log_metrics(clean, step=step)


@dataclass(frozen=True)
class EpochReport:
    """What one stage epoch measured on this rank, plus the cross-rank spreads under DDP.

    Args:
        stage: ``"train"``, ``"val"`` or ``"test"``.
        epoch: ``trainer.current_epoch`` when the window opened.
        wall_s: the window's wall time in seconds (train: validation excluded).
        phases_s: seconds per phase, every name of ``PHASES``; they sum to ``wall_s``.
        gpu_phases_s: GPU stream seconds between phase switches, per phase (CUDA only, else
            empty).
        worker_s: DataLoader work timed where it ran, summed over the epoch, in seconds:
            ``fetch`` (dataset ``__getitem__``), ``collate`` and the finer parts user code
            reported (ours: ``decode``, ``transform``, ``targets``). Empty when the loader could
            not be instrumented.
        batch_stats: ``StreamingStats.summary()`` of the batch times (seconds between
            consecutive batch ends; the first from the window's start).
        num_batches: batches completed in the window.
        samples: samples in those batches.
        memory: ``ocr.perf.memory.memory_snapshot()`` at the close (empty when memory tracking is
            off).
        peak_rss_gb: largest process RSS sampled during the window (GiB); nan when off.
        peak_gpu_memory_gb: CUDA peak allocated memory during the window (GiB); nan without CUDA.
        world_size: number of ranks.
        spreads: DDP only: figure name (``epoch_time``, ``{phase}_time``, ``worker_fetch_time``,
            ``batch_mean``, ``samples_per_sec``, ...) -> ``rank_spread`` of its per-rank values.
        global_samples: samples over all ranks (== ``samples`` on one process).
        global_batches: batches over all ranks (== ``num_batches`` on one process).
        global_wall_s: the slowest rank's ``wall_s`` (== ``wall_s`` on one process).
        worker_counts: event counters reported in the DataLoader with
            ``ocr.perf.worker.report_count`` (ours: ``polygon_cache_hits``, ``_misses``,
            ``_evictions``, ``_corrupt``, ``_bytes_written``), summed over the epoch (this rank).
        batch_times_s: the batch times in order (seconds), every ``batch_times_stride``-th one
            when the epoch had more than :data:`MAX_KEPT_BATCH_TIMES`.
        batch_times_stride: see ``batch_times_s``.
        num_workers: ``num_workers`` of the stage's DataLoader (None when not a DataLoader).
        batch_size: samples in the epoch's first batch (0 when there was none).
        device: ``"cuda"`` when CUDA phases were measured, else ``"cpu"``.
        global_step: ``trainer.global_step`` at the close.
    """

    stage: str
    epoch: int
    wall_s: float
    phases_s: dict[str, float]
    gpu_phases_s: dict[str, float]
    worker_s: dict[str, float]
    batch_stats: dict[str, float]
    num_batches: int
    samples: int
    memory: dict[str, float]
    peak_rss_gb: float
    peak_gpu_memory_gb: float
    world_size: int = 1
    spreads: dict[str, dict[str, float]] = field(default_factory=dict)
    global_samples: int = 0
    global_batches: int = 0
    global_wall_s: float = 0.0
    worker_counts: dict[str, int] = field(default_factory=dict)
    batch_times_s: tuple[float, ...] = ()
    batch_times_stride: int = 1
    num_workers: int | None = None
    batch_size: int = 0
    device: str = "cpu"
    global_step: int = 0


# -- CUDA events ---------------------------------------------------------------------------------


class CudaPhaseEvents:
    """GPU time per phase from CUDA events recorded at phase switches, read without blocking.

    Events form a chain: the interval between two consecutive events belongs to the phase that
    was open on the host between the two records. :meth:`drain` folds finished intervals into
    :attr:`totals_ms` and recycles their events.

    Args:
        event_factory: makes one timing event; default ``torch.cuda.Event(enable_timing=True)``.
            Tests pass fakes with ``record()``, ``query()``, ``synchronize()`` and
            ``elapsed_time(other)`` (milliseconds).
    """

    def __init__(self, event_factory: Callable[[], Any] | None = None) -> None:
        self._factory = event_factory or (lambda: torch.cuda.Event(enable_timing=True))
        self._chain: deque[tuple[Any, str]] = deque()
        self._pool: list[Any] = []
        self.totals_ms: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def _record(self, label: str) -> None:
        event = self._pool.pop() if self._pool else self._factory()
        event.record()
        self._chain.append((event, label))
        if len(self._chain) > _MAX_PENDING_EVENTS:
            self.drain(block=True)

    def anchor(self) -> None:
        """Start a new chain (a window opened); earlier pending events are dropped."""
        self._pool.extend(event for event, _ in self._chain)
        self._chain.clear()
        self._record("")

    def mark(self, closed_phase: str) -> None:
        """Record the end of an interval that belonged to ``closed_phase``."""
        if self._chain:
            self._record(closed_phase)

    def drain(self, block: bool = False) -> None:
        """Fold finished intervals into :attr:`totals_ms`; ``block`` waits for all of them."""
        chain = self._chain
        while len(chain) >= 2:
            end, label = chain[1]
            if block:
                end.synchronize()
            elif not end.query():
                return
            start = chain.popleft()[0]
            self.totals_ms[label] += float(start.elapsed_time(end))
            self._pool.append(start)

    def take(self) -> dict[str, float]:
        """Block until every pending interval is read; return seconds per phase and reset."""
        self.drain(block=True)
        out = {name: ms / 1e3 for name, ms in self.totals_ms.items()}
        self.totals_ms = dict.fromkeys(PHASES, 0.0)
        return out


class _EventClock(PhaseClock):
    """PhaseClock that also records CUDA events at switches and/or synchronises before them."""

    def __init__(self, events: CudaPhaseEvents | None, sync: Callable[[], None] | None) -> None:
        super().__init__()
        self.events = events
        self.sync = sync

    def start(self, phase: str = "unattributed") -> None:
        if self.sync is not None:
            self.sync()
        super().start(phase)
        if self.events is not None:
            self.events.anchor()

    def switch(self, phase: str) -> str:
        if self.running and self.sync is not None:
            self.sync()  # the closing phase's GPU work completes inside that phase
        previous = super().switch(phase)
        if previous and self.events is not None:
            self.events.mark(previous)
        return previous

    def stop(self) -> PhaseTotals:
        if self.sync is not None:
            self.sync()
        closing = self.current
        totals = super().stop()
        if closing and self.events is not None:
            self.events.mark(closing)
        return totals


# -- per-stage state -----------------------------------------------------------------------------


@dataclass
class _Epoch:
    stage: str
    epoch: int
    segment_start_ns: int
    phases_ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    gpu_s: dict[str, float] = field(default_factory=dict)
    closed_ns: int = 0  # wall time of the closed segments (train around validation)
    paused: bool = False
    batch_times: StreamingStats = field(default_factory=StreamingStats)
    pending_ns: list[int] = field(default_factory=list)  # batch times not yet in batch_times
    last_batch_end_ns: int = 0  # window-time (pauses excluded) of the previous batch end
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
    """``on_batch`` of one instrumented DataLoader: routes its timings to a stage. Never raises
    into the DataLoader iterator (that would crash the training loop)."""

    __slots__ = ("recorder", "stage")

    def __init__(self, recorder: StageRecorder, stage: str) -> None:
        self.recorder = recorder
        self.stage = stage

    def __call__(self, timing: WorkerTiming) -> None:
        recorder = self.recorder
        if not recorder.measuring:
            return
        try:
            # Timings are delivered inside the consuming loop's next(), so the innermost open
            # window is the consumer, even for a loader object shared by two stages. Before any
            # window opens (Lightning's first iterator) the loader's own stage is used.
            stage = recorder._open[-1] if recorder._open else self.stage
            recorder._states[stage].add_timing(timing)
        except Exception as exc:
            recorder._fail(exc)


class RunFiles:
    """Writes the recorder's part of the run directory (``ocr.perf.rundir``): ``perf/run.json``
    at setup, one ``perf/epochs.jsonl`` line per stage epoch and ``perf/intervals.jsonl`` lines
    at the training log interval; rank zero only. The first write error is one warning and turns
    the writing off; measurement and logging go on.

    Args:
        run_dir: the run directory (``trainer.default_root_dir``).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        perf = self.run_dir / PERF_DIRNAME
        self.epochs = JsonlWriter(perf / "epochs.jsonl", EPOCH_SCHEMA)
        self.intervals = JsonlWriter(perf / "intervals.jsonl", INTERVAL_SCHEMA)
        # Interval records wait here until the epoch closes: a write + flush every few steps
        # would land on the training hot path.
        self._pending_intervals: list[dict[str, Any]] = []
        self.ok = True

    def _guard(self, write: Callable[[], object]) -> None:
        if not self.ok:
            return
        try:
            write()
        except (OSError, TypeError, ValueError) as exc:
            self.ok = False
            warnings.warn(
                f"performance callbacks: cannot write the run files under {self.run_dir} "
                f"({type(exc).__name__}: {exc}); metrics are still logged",
                PerfCallbackWarning,
                stacklevel=3,
            )

    def run_info(self, extra: Mapping[str, Any]) -> None:
        self._guard(lambda: write_run_info(self.run_dir, extra))

    def epoch(self, report: EpochReport) -> None:
        record = dataclasses.asdict(report)
        record["t"] = time.time()
        # nan is written as null.
        record["samples_per_sec"] = per_second(report.global_samples, report.global_wall_s)
        record["batches_per_sec"] = per_second(report.global_batches, report.global_wall_s)
        self.flush_intervals()
        self._guard(lambda: self.epochs.write(record))

    def interval(self, progress: IntervalProgress) -> None:
        if self.ok:
            self._pending_intervals.append({"t": time.time(), **progress._asdict()})

    def flush_intervals(self) -> None:
        pending, self._pending_intervals = self._pending_intervals, []
        for record in pending:
            self._guard(lambda r=record: self.intervals.write(r))  # type: ignore[misc]

    def close(self) -> None:
        self.flush_intervals()
        self.epochs.close()
        self.intervals.close()


# -- the recorder --------------------------------------------------------------------------------


class StageRecorder:
    """Per-trainer measurement shared by the performance callbacks (see the module docstring).

    Use :meth:`attach` / :meth:`detach`; the driving callback calls the hook methods. Every hook
    method turns an internal error into one :class:`PerfCallbackWarning` and stops measuring.

    Args:
        trainer: the Trainer measured.
    """

    _registry: ClassVar[weakref.WeakKeyDictionary[L.Trainer, StageRecorder]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, trainer: L.Trainer) -> None:
        self._trainer_ref = weakref.ref(trainer)
        self.subscribers: list[RecorderCallback] = []
        self.driver: RecorderCallback | None = None  # the callback whose hooks drive us
        self.stages: frozenset[str] = frozenset()
        self.measuring = True  # measurement on (off after a failure)
        self.finished = False  # fully off: no hooks, no gathers
        self.world_size = max(1, int(trainer.world_size))
        self._interval = 0
        self._memory_ns = 0  # when memory was last sampled
        self._track_memory = False
        self._sync_cuda = False
        self.clock: PhaseClock = PhaseClock()
        self._events: CudaPhaseEvents | None = None
        self._device: torch.device | None = None  # set when measuring a CUDA device
        self._states: dict[str, _StageState] = {s: _StageState() for s in STAGE_NAMES.values()}
        self._open: list[str] = []  # open windows, innermost last (train below val)
        self._loaders: dict[int, tuple[DataLoader, InstrumentedLoader, _Tap]] = {}
        self._patched_strategy: Any = None
        self._wrapped_backward: Callable[..., Any] | None = None
        self.files: RunFiles | None = None  # set at install when a subscriber wants run files

    # -- membership ------------------------------------------------------------------------

    @classmethod
    def attach(cls, trainer: L.Trainer, subscriber: RecorderCallback) -> StageRecorder:
        """The trainer's recorder (created and installed on first use) with ``subscriber``
        added; the first subscriber drives it."""
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
        recorder._assign_driver()
        return recorder

    def detach(self, subscriber: RecorderCallback) -> None:
        """Remove ``subscriber``; the last one out shuts the recorder down."""
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)
        subscriber._drive = None
        if subscriber is self.driver:
            self.driver = None
        if self.subscribers:
            self._configure()
            self._assign_driver()
        else:
            self.shutdown()

    def _assign_driver(self) -> None:
        if self.driver is None and self.subscribers and not self.finished:
            self.driver = self.subscribers[0]
            self.driver._drive = self
            self.driver._restore_hooks()
            hide_hooks(self.driver, self._redundant_hooks(), RecorderCallback)

    def _redundant_hooks(self) -> tuple[str, ...]:
        """Driver hooks whose work is done elsewhere: the backward hooks when the strategy's
        backward is wrapped; ``on_before_optimizer_step`` under automatic optimisation, where
        backward has always just opened the optimizer phase (manual optimisation keeps it: a
        step may follow a plain ``loss.backward()``)."""
        hooks: tuple[str, ...] = ()
        if self._wrapped_backward is not None:
            hooks += ("on_before_backward", "on_after_backward")
            trainer = self._trainer_ref()
            module = trainer.lightning_module if trainer is not None else None
            if module is not None and module.automatic_optimization:
                hooks += ("on_before_optimizer_step",)
        return hooks

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
        if isinstance(self.clock, _EventClock) and self._device is not None:
            device = self._device
            self.clock.sync = (lambda: torch.cuda.synchronize(device)) if self._sync_cuda else None

    def _install(self, trainer: L.Trainer) -> None:
        """Choose the clock and tap the strategy's DataLoader processing, so loaders are
        instrumented before Lightning creates their first iterator (it does so before any epoch
        hook runs)."""
        device = trainer.strategy.root_device
        if device.type == "cuda" and torch.cuda.is_available():
            self._device = device
            self._events = CudaPhaseEvents()
            self.clock = _EventClock(self._events, None)
            self._configure()  # sets the clock's sync
        if trainer.is_global_zero and any(s.write_run_files for s in self.subscribers):
            self.files = RunFiles(trainer.default_root_dir)
            self.files.run_info(
                {"world_size": self.world_size, "device": str(trainer.strategy.root_device)}
            )
        strategy = trainer.strategy
        original = strategy.process_dataloader

        def process_dataloader(dataloader: object) -> object:
            out = original(dataloader)
            if self.measuring:
                try:
                    self._instrument(out)
                except Exception as exc:
                    self._fail(exc)
            return out

        strategy.process_dataloader = process_dataloader  # type: ignore[method-assign]
        self._patched_strategy = strategy
        self._wrap_backward(strategy)

    def _wrap_backward(self, strategy: Any) -> None:
        """Time backward by wrapping ``strategy.backward`` (automatic optimisation and
        ``manual_backward`` both call it; the ``on_before/after_backward`` hooks run inside it).
        One plain call instead of two hook dispatches, which cost ~1.5 µs each per step; the
        driver's two hooks are hidden while the wrapper is in place."""
        original = strategy.backward

        def backward(*args: Any, **kwargs: Any) -> Any:
            if self.measuring:
                self.phase("backward")
            out = original(*args, **kwargs)
            if self.measuring:
                self.phase("optimizer")
            return out

        strategy.backward = backward
        self._wrapped_backward = backward

    def _instrument(self, loader: object) -> None:
        trainer = self._trainer_ref()
        if trainer is None or not isinstance(loader, DataLoader):
            return  # any other iterable: phases still work, worker parts are not reported
        running = trainer.state.stage
        stage = _RUNNING_STAGE_TO_KEY.get(running.value if running is not None else "")
        if stage is None or stage not in self.stages:
            return
        known = self._loaders.get(id(loader))
        if known is not None:
            known[2].stage = stage  # the same loader object reused for another stage
            return
        # Lightning adds its worker-seeding init function only to loaders that have none, right
        # after this hook; add it first so the instrumentation chains it instead of hiding it.
        _auto_add_worker_init_fn(loader, trainer.global_rank)
        tap = _Tap(self, stage)
        self._states[stage].num_workers = int(loader.num_workers)
        self._loaders[id(loader)] = (loader, InstrumentedLoader(loader, tap, self.clock), tap)

    def _restore_loaders(self) -> None:
        loaders, self._loaders = self._loaders, {}
        for _, handle, _ in loaders.values():
            handle.restore()
        strategy, self._patched_strategy = self._patched_strategy, None
        if strategy is not None and "process_dataloader" in vars(strategy):
            del strategy.process_dataloader
        wrapped, self._wrapped_backward = self._wrapped_backward, None
        if strategy is not None and vars(strategy).get("backward") is wrapped is not None:
            del strategy.backward

    def shutdown(self) -> None:
        """Stop everything and undo the instrumentation (idempotent)."""
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
        try:
            self._restore_loaders()
        except Exception as exc:  # never raise into Lightning's hooks
            warnings.warn(
                f"performance callbacks: could not undo the DataLoader instrumentation "
                f"({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=2,
            )
        finally:
            for sub in [*self.subscribers, *([self.driver] if self.driver else [])]:
                sub._drive = None
            self.driver = None
            trainer = self._trainer_ref()
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

    def fail_subscriber(self, subscriber: RecorderCallback) -> None:
        """A subscriber's own presentation failed (it already warned): it gets no more reports.
        The driver stays the same callback, even if it is the one that failed: handing over in
        the middle of a hook would have the next callback run the same hook again."""
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
            sub._enabled_run = False

    # -- windows ---------------------------------------------------------------------------

    @staticmethod
    def _now() -> int:
        return time.perf_counter_ns()  # PhaseClock's own time source

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
        if state.epoch is not None:  # a stale window (its end hook never came): drop it
            if self._open[-1] == stage and self.clock.running:
                self.clock.stop()
            self._open.remove(stage)
            state.epoch = None
        outer = self._states[self._open[-1]].epoch if self._open else None
        if outer is not None and self.measuring and not outer.paused:
            self._pause(outer)
        now = self._now()
        epoch = _Epoch(stage=stage, epoch=int(trainer.current_epoch), segment_start_ns=now)
        state.epoch = epoch
        self._open.append(stage)
        if not self.measuring:
            return  # DDP after a failure: windows are tracked only to join the gathers
        state.timing_samples.clear()
        if self._track_memory:
            reset_peak_memory()
            self._sample_memory(epoch)
        self.clock.start("unattributed")
        epoch.segment_start_ns = self._now()
        set_active_clock(self.clock)

    def _pause(self, epoch: _Epoch) -> None:
        totals = self.clock.stop()
        self._fold(epoch, totals)
        epoch.closed_ns += totals.wall_ns
        epoch.paused = True
        if self._track_memory:
            self._sample_memory(epoch)  # the CUDA peak restarts for the inner window

    def _resume(self, epoch: _Epoch) -> None:
        self.clock.start("callbacks")  # we are inside the callbacks of the inner stage's end
        epoch.segment_start_ns = self._now()
        epoch.paused = False
        if self._track_memory:
            reset_peak_memory()
        set_active_clock(self.clock)

    def _fold(self, epoch: _Epoch, totals: PhaseTotals) -> None:
        for name, ns in totals.phases_ns.items():
            epoch.phases_ns[name] += ns
        if self._events is not None:
            for name, s in self._events.take().items():
                epoch.gpu_s[name] = epoch.gpu_s.get(name, 0.0) + s

    def close_epoch(self, stage: str, reopen: bool = False) -> None:
        """Close ``stage``'s window (if open) and resume the window it paused; with ``reopen``
        open the stage's next window; then gather across ranks and hand the report to the
        subscribers."""
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
        try:
            # Our own reporting (and the wait for the other ranks) is charged to the window
            # that is open now, as "callbacks".
            with perf_phase("callbacks"):
                report = self._gather_report(vector, partial)
                if report is not None and self.files is not None:
                    self.files.epoch(report)
                if report is not None:
                    for sub in list(self.subscribers):
                        sub._receive_report(report)
        except Exception as exc:
            self._fail(exc)

    def _close(self, state: _StageState, epoch: _Epoch) -> tuple[list[float], dict[str, Any]]:
        self._open.remove(epoch.stage)
        state.epoch = None
        outer = self._states[self._open[-1]].epoch if self._open else None
        if not self.measuring:
            return [0.0] + [math.nan] * len(_FIGURES), {}
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
        return [1.0] + [float(figures[name]) for name in _FIGURES], partial

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
            vector = [0.0] + [math.nan] * len(_FIGURES)
        rows = self._all_gather(trainer, vector)
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
        per_rank = {name: [row[1 + i] for row in rows] for i, name in enumerate(_FIGURES)}
        spreads = {name: rank_spread(values) for name, values in per_rank.items()}
        for name in _OTHER_FIGURES:
            spreads[name].pop("slowest_rank")  # the largest rate or count is not the slowest
        return EpochReport(
            **partial,
            world_size=len(rows),
            spreads=spreads,
            global_samples=int(sum(per_rank["samples"])),
            global_batches=int(sum(per_rank["batches"])),
            global_wall_s=max(per_rank["epoch_time"]),
        )

    @staticmethod
    def _all_gather(trainer: L.Trainer, vector: list[float]) -> list[list[float]]:
        device = trainer.strategy.root_device
        dtype = torch.float32 if device.type == "mps" else torch.float64
        tensor = torch.tensor(vector, dtype=dtype, device=device)
        gathered = trainer.strategy.all_gather(tensor)
        return gathered.reshape(-1, len(vector)).cpu().tolist()

    def discard(self, stage: str) -> None:
        """Forget worker timings received outside a recorded window (the sanity check)."""
        state = self._states[stage]
        state.worker_ns = {}
        state.worker_counts = {}
        state.timing_samples.clear()

    def abort(self) -> None:
        """An exception ends the run: close everything without gathering (ranks may be out of
        step) and undo the instrumentation."""
        self.shutdown()

    # -- batches ---------------------------------------------------------------------------

    def batch_start(self, stage: str) -> None:
        epoch = self._states[stage].epoch
        if epoch is None:
            if stage != "train" or stage not in self.stages or self.finished:
                return
            # Resumed mid-epoch: Lightning skips on_train_epoch_start, open the window here.
            self.open_epoch(stage)
            if not self.measuring:
                return
        if self.measuring:
            try:
                self.clock.switch("forward")
            except Exception as exc:
                self._fail(exc)

    def phase(self, name: str) -> None:
        # Skipping a switch to the phase already open changes no total (on_after_backward and
        # on_before_optimizer_step both open "optimizer"); it saves a clock read per step.
        if self.measuring and self.clock.current != name:
            try:
                self.clock.switch(name)
            except Exception as exc:
                self._fail(exc)

    def batch_end(self, stage: str, batch: Any) -> None:
        if not self.measuring:
            return
        state = self._states[stage]
        epoch = state.epoch
        if epoch is None:
            return
        try:
            self.clock.switch("callbacks")
            now = self._now()
            elapsed = epoch.elapsed_ns(now)
            pending = epoch.pending_ns
            pending.append(elapsed - epoch.last_batch_end_ns)
            if len(pending) >= _BATCH_TIMES_CHUNK:
                epoch.flush_batch_times()
            epoch.last_batch_end_ns = elapsed
            epoch.num_batches += 1
            samples = state.timing_samples
            n = samples.popleft() if samples else _batch_size(batch)
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
        except Exception as exc:
            self._fail(exc)

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
        # One logger call for all subscribers: each log_metrics call costs more than building
        # the metrics (it formats and writes every logger's row).
        merged: dict[str, float] = {}
        for sub in tuple(self.subscribers):
            metrics = sub._receive_interval(progress)
            if metrics:
                merged.update(metrics)
        if merged:
            log_to_loggers(trainer, merged, progress.step)

    def _sample_memory(self, epoch: _Epoch) -> dict[str, float]:
        snap = memory_snapshot()
        self._memory_ns = self._now()
        epoch.peak_rss_gb = _nanmax(epoch.peak_rss_gb, snap.get("process_rss_gb"))
        epoch.peak_gpu_gb = _nanmax(epoch.peak_gpu_gb, snap.get("cuda_max_allocated_gb"))
        return snap


class IntervalProgress(NamedTuple):
    """Progress of an open training epoch, every ``gcd`` of the subscribers' ``log_interval``
    batches. (A NamedTuple rather than a frozen dataclass: it is built on the training hot path,
    and a frozen dataclass's ``__init__`` costs several times more.)

    Args:
        stage: ``"train"``, ``"val"`` or ``"test"``.
        epoch: the epoch of the open window.
        num_batches: batches finished in the epoch so far (this rank).
        samples: samples in them (this rank).
        elapsed_s: window time so far (seconds, pauses excluded).
        world_size: number of ranks.
        step: ``trainer.global_step`` when it was taken (the step to log at).
    """

    stage: str
    epoch: int
    num_batches: int
    samples: int
    elapsed_s: float
    world_size: int
    step: int


def _nanmax(current: float, value: float | None) -> float:
    if value is None or math.isnan(value):
        return current
    return value if math.isnan(current) else max(current, value)


def _batch_size(batch: Any) -> int:
    # Only for batches that did not come through an instrumented DataLoader (which reports the
    # exact number of samples it fetched).
    try:
        return int(extract_batch_size(batch))
    except Exception:
        return 0


# -- the callback base ---------------------------------------------------------------------------


class RecorderCallback(Callback):
    """Base of the performance callbacks: forwards Lightning hooks to the trainer's shared
    :class:`StageRecorder` when it drives it, and turns reports into logs in subclasses
    (:meth:`_on_report`, :meth:`_interval_metrics`).

    Hooks are thin on purpose: a non-driving or disabled callback returns after one attribute
    read; the driver makes one call into the recorder.
    """

    def __init__(
        self,
        *,
        enabled: bool,
        log_interval: int,
        stages: Iterable[str],
        sync_cuda: bool,
        track_memory: bool,
        write_run_files: bool = True,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if isinstance(log_interval, bool) or not isinstance(log_interval, int) or log_interval < 0:
            raise ValueError(f"{name}: log_interval must be an integer >= 0, got {log_interval!r}")
        self.enabled = bool(enabled)
        self.log_interval = log_interval
        self.stages = normalize_stages(stages, name)
        self.sync_cuda = bool(sync_cuda)
        self.track_memory = bool(track_memory)
        self.write_run_files = bool(write_run_files)
        # Set by the recorder: itself when this callback drives it, else None.
        self._drive: StageRecorder | None = None
        self._recorder: StageRecorder | None = None
        self._enabled_run = False  # enabled and not failed, for the current run
        self._warned = False

    # -- subclass API ----------------------------------------------------------------------

    def _on_report(self, trainer: L.Trainer, report: EpochReport) -> None:
        """Present a finished stage epoch (log, print)."""

    def _interval_metrics(self, progress: IntervalProgress) -> Mapping[str, float] | None:
        """In-epoch progress metrics (every ``log_interval`` batches), logged by the recorder at
        ``progress.step`` in one call together with the other subscribers'."""
        return None

    # -- plumbing --------------------------------------------------------------------------

    def _receive_report(self, report: EpochReport) -> None:
        if not self._enabled_run or report.stage not in self.stages:
            return
        try:
            self._on_report(self._trainer, report)
        except Exception as exc:
            self._fail(exc)

    def _receive_interval(self, progress: IntervalProgress) -> Mapping[str, float] | None:
        interval = self.log_interval
        if interval == 0 or progress.num_batches % interval or not self._enabled_run:
            return None
        if progress.stage not in self.stages:
            return None
        try:
            return self._interval_metrics(progress)
        except Exception as exc:
            self._fail(exc)
            return None

    @property
    def _trainer(self) -> L.Trainer:
        recorder = self._recorder
        trainer = recorder._trainer_ref() if recorder is not None else None
        if trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a trainer")
        return trainer

    def _fail(self, exc: BaseException) -> None:
        """This callback's own error: one warning, then it is off for the run."""
        self._enabled_run = False
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"{type(self).__name__} failed and is off for the rest of this run "
                f"({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=2,
            )
        recorder = self._recorder
        if recorder is not None:
            recorder.fail_subscriber(self)

    def _silence_hooks(self) -> None:
        """While this callback neither drives a recorder nor is enabled its hooks do nothing:
        hide them from Lightning, so a second monitor (or a disabled one) costs no per-step
        dispatch (~10 µs per step per callback)."""
        hide_hooks(self, _DRIVER_HOOKS, RecorderCallback)

    def _restore_hooks(self) -> None:
        show_hooks(self, _DRIVER_HOOKS)

    def _detach(self) -> None:
        recorder, self._recorder = self._recorder, None
        self._drive = None
        if recorder is not None:
            recorder.detach(self)

    # -- lifecycle hooks -------------------------------------------------------------------

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_hooks()
        if not self.enabled or not self.stages:
            self._silence_hooks()
            return
        self._warned = False  # one warning per run
        try:
            self._enabled_run = True
            self._recorder = recorder = StageRecorder.attach(trainer, self)
            if recorder.files is not None and self.write_run_files:
                recorder.files.run_info(
                    {
                        "lightning_module": type(pl_module).__qualname__,
                        "hparams": dict(getattr(pl_module, "hparams", {}) or {}),
                    }
                )
        except Exception as exc:
            self._fail(exc)
        if self._drive is None:  # another monitor drives the shared recorder (or we failed)
            self._silence_hooks()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._recorder is not None:
            try:
                self._detach()
            except Exception as exc:
                self._fail(exc)
        self._enabled_run = False
        self._restore_hooks()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        recorder = self._recorder
        self._recorder = None
        self._drive = None
        self._enabled_run = False
        self._restore_hooks()
        if recorder is not None:
            try:
                recorder.abort()
            except Exception as exc:
                self._fail(exc)

    def on_sanity_check_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._drive is not None:
            self._drive.discard("val")

    # -- training --------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rec = self._drive
        if rec is not None:
            rec.close_epoch("train", reopen=True)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rec = self._drive
        if rec is not None:
            rec.close_epoch("train")

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.batch_start("train")

    def on_before_zero_grad(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.phase("optimizer")

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.phase("backward")

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rec = self._drive
        if rec is not None:
            rec.phase("optimizer")

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.phase("optimizer")

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.batch_end("train", batch)

    # -- validation ------------------------------------------------------------------------

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rec = self._drive
        if rec is not None and not trainer.sanity_checking:
            rec.open_epoch("val")

    def on_validation_batch_start(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.batch_start("val")

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.batch_end("val", batch)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rec = self._drive
        if rec is not None and not trainer.sanity_checking:
            rec.close_epoch("val")

    # -- test ------------------------------------------------------------------------------

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rec = self._drive
        if rec is not None:
            rec.open_epoch("test")

    def on_test_batch_start(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.batch_start("test")

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        rec = self._drive
        if rec is not None:
            rec.batch_end("test", batch)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rec = self._drive
        if rec is not None:
            rec.close_epoch("test")
