"""Per-stage totals over the epochs of a run (``perf/epochs.jsonl``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainperf.core.clock import PHASES
from trainperf.core.ranks import Straggler
from trainperf.core.stage import STAGE_ORDER, Stage
from trainperf.records.kinds import EpochRecord, LoaderSettings


def num(value: object, default: float = 0.0) -> float:
    """``value`` as a float; ``default`` for ``None``, booleans, strings and other non-numbers
    (the writers store NaN as ``null``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)


@dataclass
class StageSummary:
    """One stage's figures summed over its recorded epochs (seconds, counts).

    ``samples`` are this rank's (rank zero's under DDP), ``global_samples`` all ranks' and
    ``global_wall_s`` the slowest rank's (equal to ``samples`` / ``wall_s`` on one process).
    ``num_workers``, ``loader`` (the DataLoader's other settings) and ``batch_size`` are the last
    epoch's that recorded them, ``spreads`` the last epoch's cross-rank spreads (DDP: figure ->
    min, median, max, slowest_rank). ``callbacks_s_by_rank`` is indexed by rank (ranks may have
    different callbacks); ``stragglers`` is ``(epoch, straggler or None)`` per epoch recorded
    under DDP.
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


def accumulate(acc: dict[str, Any], more: Mapping[str, Any], zero: float = 0.0) -> None:
    """Add ``more``'s values into ``acc``, key by key (a new key starts from ``zero``)."""
    for name, value in more.items():
        acc[name] = acc.get(name, zero) + value


def summarize_stages(epochs: list[EpochRecord]) -> dict[Stage, StageSummary]:
    """Stage -> :class:`StageSummary`, in train / val / test order."""
    out: dict[Stage, StageSummary] = {}
    for record in epochs:
        s = out.setdefault(record.stage, StageSummary(stage=record.stage))
        s.epochs += 1
        s.wall_s += record.wall_s
        accumulate(s.phases_s, record.phases_s)
        accumulate(s.worker_s, record.worker_s)
        accumulate(s.worker_counts, record.worker_counts, 0)
        s.num_batches += record.num_batches
        s.samples += record.samples
        s.global_samples += record.all_samples
        s.global_wall_s += record.all_wall_s
        for name in ("num_workers", "loader", "batch_size"):  # the last epoch's that has one
            if (value := getattr(record, name)) is not None:
                setattr(s, name, value)
        if record.device == "cuda":
            s.device = "cuda"
        if record.spreads:
            s.spreads = record.spreads
        accumulate(s.callbacks_s, record.callbacks_s)
        accumulate(s.callback_hooks_s, record.callback_hooks_s)
        accumulate(s.module_hooks_s, record.module_hooks_s)
        by_rank = record.callbacks_s_by_rank
        s.callbacks_s_by_rank += [{} for _ in range(len(by_rank) - len(s.callbacks_s_by_rank))]
        for acc, spent in zip(s.callbacks_s_by_rank, by_rank, strict=False):
            accumulate(acc, spent)
        if record.world_size > 1:
            s.stragglers.append((record.epoch or 0, record.straggler))
    return {stage: out[stage] for stage in STAGE_ORDER if stage in out}
