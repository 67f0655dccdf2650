"""What one stage epoch measured, as handed from the recorder to the callbacks and the run
files: :class:`EpochReport`, :class:`IntervalProgress`, and the small helpers that present them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import lightning as L

from ocr.errors import ConfigError
from ocr.perf.ranks import Straggler
from ocr.perf.stage import Stage

__all__ = [
    "EpochReport",
    "IntervalProgress",
    "Subscriber",
    "log_to_loggers",
    "normalize_stages",
    "per_second",
]

#: Batch times kept per epoch for the run directory's epochs.jsonl (every k-th beyond this).
MAX_KEPT_BATCH_TIMES = 4096


def normalize_stages(stages: Iterable[str], owner: str) -> frozenset[Stage]:
    """The :class:`~ocr.perf.stage.Stage` of each user stage name (``"train"``, ``"validate"``
    or ``"val"``, ``"test"``); anything else is a ``ValueError`` naming ``owner`` and the bad
    value."""
    if isinstance(stages, str):
        raise ConfigError(
            f"{owner}: stages must be a list of stage names, got the string {stages!r}"
        )
    out = set()
    for name in stages:
        try:
            out.add(Stage.parse(name))
        except ValueError as exc:
            raise ConfigError(f"{owner}: {exc} in stages") from None
    return frozenset(out)


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
        callbacks_s: seconds per callback (class name; a second instance of a class gets
            ``#2``), its own hooks' time in any phase (a checkpoint save inside its hook is
            ``checkpoint``, not the callback's).
        callback_hooks_s: the same split by hook: ``ClassName.hook`` -> seconds.
        module_hooks_s: the LightningModule's and DataModule's own hooks: ``Class.hook`` ->
            seconds (whatever phase they ran in: a hook that wraps its metric work in
            ``perf_phase("metric")`` is named here and counted in ``metric``).
        straggler: under DDP, the rank the others waited for and its cause
            (``ocr.perf.ranks.find_straggler``); None on one process or when no rank straggles.
        sync_wait_measured: how ``sync_wait`` was measured: ``"ddp_comm_hook"`` (the gradient
            all-reduce wait, plus our epoch gather), ``"gather"`` (our epoch gather only: the
            model is not a ``DistributedDataParallel`` we could hook), or ``"none"`` (one process).
        callbacks_s_by_rank: under DDP, each rank's ``callbacks_s``, indexed by rank (ranks may
            have different callbacks: one built on one rank only is named there); empty on one
            process.
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
    callbacks_s: dict[str, float] = field(default_factory=dict)
    callback_hooks_s: dict[str, float] = field(default_factory=dict)
    module_hooks_s: dict[str, float] = field(default_factory=dict)
    straggler: Straggler | None = None
    sync_wait_measured: str = "none"
    callbacks_s_by_rank: tuple[dict[str, float], ...] = ()


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
