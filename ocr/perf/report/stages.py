"""Per-stage totals over the epochs of a run (``perf/epochs.jsonl``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ocr.perf.clock import PHASES
from ocr.perf.ranks import Straggler
from ocr.perf.records import EpochRecord, LoaderSettings
from ocr.perf.stage import STAGE_ORDER, Stage

__all__ = ["StageSummary", "num", "summarize_stages"]


def num(value: object, default: float = 0.0) -> float:
    """``value`` as a float; ``default`` for ``None``, booleans, strings and other non-numbers
    (the writers store NaN as ``null``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)


@dataclass
class StageSummary:
    """One stage's figures summed over its recorded epochs.

    Args:
        stage: ``"train"``, ``"val"`` or ``"test"``.
        epochs: number of recorded epochs of the stage.
        wall_s: summed wall time (s).
        phases_s: summed seconds per phase (every name of ``ocr.perf.clock.PHASES``).
        worker_s: summed worker-side seconds per part (``fetch``, ``collate``, ...).
        worker_counts: summed worker counters (``polygon_cache_hits``, ...).
        num_batches: summed batches.
        samples: summed samples (this rank's: rank zero's under DDP).
        global_samples: summed samples over all ranks (``== samples`` on one process).
        global_wall_s: summed wall time of the slowest rank (``== wall_s`` on one process).
        num_workers: the DataLoader's ``num_workers`` of the last epoch that recorded it.
        loader: the DataLoader's other settings of the last epoch that recorded them.
        batch_size: the first batch's size of the last epoch that recorded it.
        device: ``"cpu"`` or ``"cuda"``.
        spreads: the last epoch's cross-rank spreads (DDP), figure -> {min, median, max,
            slowest_rank}.
        callbacks_s: summed seconds per callback (class name).
        callback_hooks_s: summed seconds per callback hook (``ClassName.hook``).
        module_hooks_s: summed seconds per LightningModule / DataModule hook (``Class.hook``).
        callbacks_s_by_rank: DDP: summed seconds per callback on each rank, indexed by rank
            (ranks may have different callbacks).
        stragglers: ``(epoch, straggler or None)`` for each epoch recorded under DDP, in
            record order (None: no rank straggled).
    """

    stage: Stage
    epochs: int = 0
    wall_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    worker_s: dict[str, float] = field(default_factory=dict)
    worker_counts: dict[str, int] = field(default_factory=dict)
    num_batches: int = 0
    samples: int = 0
    global_samples: int = 0
    global_wall_s: float = 0.0
    num_workers: int | None = None
    loader: LoaderSettings | None = None
    batch_size: int | None = None
    device: str = "cpu"
    spreads: dict[str, dict[str, float | None]] = field(default_factory=dict)
    callbacks_s: dict[str, float] = field(default_factory=dict)
    callback_hooks_s: dict[str, float] = field(default_factory=dict)
    module_hooks_s: dict[str, float] = field(default_factory=dict)
    callbacks_s_by_rank: list[dict[str, float]] = field(default_factory=list)
    stragglers: list[tuple[int, Straggler | None]] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``training``, ``validation`` or ``test``."""
        return self.stage.label

    @property
    def samples_per_sec(self) -> float:
        """Samples over all ranks per second of wall time (0 for an empty stage): the one
        samples/s of the report, the verdict and the gate."""
        return self.global_samples / self.global_wall_s if self.global_wall_s > 0 else 0.0

    def share(self, phase: str) -> float:
        """``phase`` in percent of the stage's wall time (0 for an empty stage)."""
        return 100.0 * self.phases_s.get(phase, 0.0) / self.wall_s if self.wall_s > 0 else 0.0


def summarize_stages(epochs: list[EpochRecord]) -> dict[Stage, StageSummary]:
    """Stage -> :class:`StageSummary`, in train / val / test order."""
    out: dict[Stage, StageSummary] = {}
    for record in epochs:
        s = out.setdefault(record.stage, StageSummary(stage=record.stage))
        s.epochs += 1
        s.wall_s += record.wall_s
        for phase, value in record.phases_s.items():
            s.phases_s[phase] = s.phases_s.get(phase, 0.0) + value
        for part, value in record.worker_s.items():
            s.worker_s[part] = s.worker_s.get(part, 0.0) + value
        for name, count in record.worker_counts.items():
            s.worker_counts[name] = s.worker_counts.get(name, 0) + count
        s.num_batches += record.num_batches
        s.samples += record.samples
        s.global_samples += record.all_samples
        s.global_wall_s += record.all_wall_s
        if record.num_workers is not None:
            s.num_workers = record.num_workers
        if record.loader is not None:
            s.loader = record.loader
        if record.batch_size is not None:
            s.batch_size = record.batch_size
        if record.device == "cuda":
            s.device = "cuda"
        if record.spreads:
            s.spreads = record.spreads
        for key in ("callbacks_s", "callback_hooks_s", "module_hooks_s"):
            acc = getattr(s, key)
            for name, value in getattr(record, key).items():
                acc[name] = acc.get(name, 0.0) + value
        by_rank = record.callbacks_s_by_rank
        while len(s.callbacks_s_by_rank) < len(by_rank):
            s.callbacks_s_by_rank.append({})
        for acc, spent in zip(s.callbacks_s_by_rank, by_rank, strict=False):
            for name, value in spent.items():
                acc[name] = acc.get(name, 0.0) + value
        if record.world_size > 1:
            s.stragglers.append((record.epoch or 0, record.straggler))
    return {stage: out[stage] for stage in STAGE_ORDER if stage in out}
