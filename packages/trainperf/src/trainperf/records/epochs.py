"""The timing records of a stage epoch and of an open epoch's progress.

The timing records of a stage epoch: :class:`EpochRecord` (``perf/epochs.jsonl``), the open
epoch's progress :class:`IntervalRecord` (``perf/intervals.jsonl``) and the DataLoader's
:class:`LoaderSettings`."""

# The records are msgspec Structs (through the imported Record base, which ruff cannot see):
# their mutable defaults are copied per instance.
# ruff: noqa: RUF012

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec

from trainperf.core.ranks import Straggler
from trainperf.core.stage import Stage
from trainperf.records.schema import Record

__all__ = ["EpochRecord", "IntervalRecord", "LoaderSettings"]


class LoaderSettings(msgspec.Struct, kw_only=True, frozen=True):
    """How the stage's DataLoader was built: its attributes of these names, read from the live
    loader (advice never proposes what is already set, config or not); ``prefetch_factor`` is
    ``None`` without workers."""

    persistent_workers: bool | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None

    @classmethod
    def of(cls, loader: Any) -> LoaderSettings:
        """The settings of a live ``torch.utils.data.DataLoader``."""
        return cls(
            persistent_workers=bool(loader.persistent_workers),
            pin_memory=bool(loader.pin_memory),
            prefetch_factor=loader.prefetch_factor,
        )


class EpochRecord(Record, tag="trainperf/perf-epoch", kw_only=True, frozen=True):
    """One ``perf/epochs.jsonl`` line: what one stage epoch measured on this rank, plus the
    cross-rank spreads under DDP. The recorder hands it to its subscribers, then writes it with
    ``t`` and the global rates set. Non-finite figures are NaN in memory, ``None`` once read.

    Args:
        epoch: ``trainer.current_epoch`` when the window opened.
        wall_s: the window's wall time in seconds (train: validation excluded).
        phases_s: seconds per phase, every name of ``PHASES``; they sum to ``wall_s``.
        gpu_phases_s: GPU stream seconds between phase switches, per phase (CUDA only).
        worker_s: DataLoader work timed where it ran, summed over the epoch, in seconds:
            ``fetch`` (dataset ``__getitem__``), ``collate`` and the finer parts user code
            reported (ours: ``decode``, ``transform``, ``targets``). Empty when the loader could
            not be instrumented.
        batch_stats: ``StreamingStats.summary()`` of the batch times (seconds between
            consecutive batch ends; the first from the window's start).
        memory: ``trainperf.probe.device_memory.memory_snapshot()`` at the close (empty when
        tracking is off).
        peak_rss_gb, peak_gpu_memory_gb: largest process RSS sampled, CUDA peak allocated memory
            during the window (GiB); nan when off / without CUDA.
        spreads: DDP only: figure name (``epoch_time``, ``{phase}_time``, ``worker_fetch_time``,
            ``batch_mean``, ``samples_per_sec``, ...) -> ``rank_spread`` of its per-rank values.
        global_samples, global_batches: over all ranks; global_wall_s: the slowest rank's.
        worker_counts: event counters reported in the DataLoader with
            ``trainperf.probe.worker.report_count``, summed over the epoch (this rank). A cache
            named X counts ``X_hits`` / ``X_misses`` (its hit rate), optionally ``X_corrupt`` /
            ``X_evictions`` (``trainperf.records.run_info.hit_rates``).
        batch_times_s: the batch times in order (seconds), every ``batch_times_stride``-th one
            when the epoch had more than 4096.
        loader: the stage's DataLoader's settings besides ``num_workers`` (None when not a
            DataLoader).
        batch_size: samples in the epoch's first batch (0 when there was none).
        device: ``"cuda"`` when CUDA phases were measured, else ``"cpu"``.
        callbacks_s: seconds per callback (class name; a second instance of a class gets
            ``#2``), its own hooks' time in any phase (a checkpoint save inside its hook is
            ``checkpoint``, not the callback's).
        callback_hooks_s: the same split by hook: ``ClassName.hook`` -> seconds.
        module_hooks_s: the LightningModule's and DataModule's own hooks: ``Class.hook`` ->
            seconds (whatever phase they ran in: a hook that wraps its metric work in
            ``perf_phase("metric")`` is named here and counted in ``metric``).
        straggler: under DDP, the rank the others waited for and its cause
            (``trainperf.core.ranks.find_straggler``); None on one process or when no rank
            straggles.
        sync_wait_measured: how ``sync_wait`` was measured: ``"ddp_comm_hook"`` (the gradient
            all-reduce wait, plus our epoch gather), ``"gather"`` (our epoch gather only: the
            model is not a ``DistributedDataParallel`` we could hook), or ``"none"`` (one process).
        callbacks_s_by_rank: under DDP, each rank's ``callbacks_s``, indexed by rank (ranks may
            have different callbacks: one built on one rank only is named there); empty on one
            process.
        t: unix time it was written; samples_per_sec, batches_per_sec: ``global_samples`` and
            ``global_batches`` over ``global_wall_s`` (None until written).
        data_wait_causes_s: the loop's wait inside the DataLoader's ``next()`` by cause, in
            seconds (this rank): ``worker`` (until a worker had finished the batch), ``receive``
            (after that: the worker's send, the main process's receive and ``pin_memory``),
            ``main_loading`` (``num_workers=0``: loading in the main process). Empty when the
            loader could not be instrumented (and in folders written before it existed).
        batch_bytes: mean bytes of the tensors of one batch (``nbytes``, counted where the batch
            was built); None when unknown.
        batch_tensors: tensors in one batch (the last one's); None when unknown.
    """

    FILE: ClassVar[str] = "epochs.jsonl"

    stage: Stage
    epoch: int | None = None
    wall_s: Annotated[float, msgspec.Meta(ge=0)]
    phases_s: dict[str, float] = {}
    gpu_phases_s: dict[str, float | None] = {}
    worker_s: dict[str, float] = {}
    batch_stats: dict[str, float | None] = {}
    num_batches: int = 0
    samples: int = 0
    memory: dict[str, float | None] = {}
    peak_rss_gb: float | None = None
    peak_gpu_memory_gb: float | None = None
    world_size: int = 1
    spreads: dict[str, dict[str, float | None]] = {}
    global_samples: int = 0
    global_batches: int = 0
    global_wall_s: float | None = 0.0
    worker_counts: dict[str, int] = {}
    batch_times_s: list[float | None] = []
    batch_times_stride: int = 1
    num_workers: int | None = None
    loader: LoaderSettings | None = None
    batch_size: int | None = 0
    device: str = "cpu"
    global_step: int = 0
    callbacks_s: dict[str, float] = {}
    callback_hooks_s: dict[str, float] = {}
    module_hooks_s: dict[str, float] = {}
    callbacks_s_by_rank: tuple[dict[str, float], ...] = ()
    straggler: Straggler | None = None
    sync_wait_measured: str = "none"
    t: float | None = None
    samples_per_sec: float | None = None
    batches_per_sec: float | None = None
    # -- the data wait by cause (issue 32): optional, absent in older folders
    data_wait_causes_s: dict[str, float] = {}
    batch_bytes: float | None = None
    batch_tensors: int | None = None

    @property
    def all_samples(self) -> int:
        """Samples over all ranks (``samples`` for records without ``global_samples``)."""
        return self.global_samples or self.samples

    @property
    def all_wall_s(self) -> float:
        """The slowest rank's wall time (``wall_s`` for records without ``global_wall_s``)."""
        return self.global_wall_s or self.wall_s


class IntervalRecord(Record, tag="trainperf/perf-interval", kw_only=True, frozen=True):
    """One ``perf/intervals.jsonl`` line: progress of an open training epoch (this rank) so
    far; ``elapsed_s`` excludes pauses, ``phases_s`` are the clock's seconds per phase so far and
    ``samples_per_sec`` is ``samples`` over ``elapsed_s``."""

    FILE: ClassVar[str] = "intervals.jsonl"

    t: float | None = None
    stage: Stage = Stage.TRAIN
    epoch: int = 0
    num_batches: int = 0
    samples: int = 0
    elapsed_s: float = 0.0
    world_size: int = 1
    step: int = 0
    phases_s: dict[str, float] = {}
    samples_per_sec: float | None = None
