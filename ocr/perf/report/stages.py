"""Per-stage totals over the epochs of a run (``perf/epochs.jsonl``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ocr.perf.clock import PHASES

__all__ = ["STAGE_LABELS", "StageSummary", "num", "summarize_stages"]

STAGE_LABELS = {"train": "training", "val": "validation", "test": "test"}
STAGE_ORDER = ("train", "val", "test")


def num(value: Any, default: float = 0.0) -> float:
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
        batch_size: the first batch's size of the last epoch that recorded it.
        device: ``"cpu"`` or ``"cuda"``.
        spreads: the last epoch's cross-rank spreads (DDP), figure -> {min, median, max,
            slowest_rank}.
        callbacks_s: summed seconds per callback (class name).
        callback_hooks_s: summed seconds per callback hook (``ClassName.hook``).
        module_hooks_s: summed seconds per LightningModule / DataModule hook (``Class.hook``).
        callbacks_s_by_rank: DDP: summed seconds per callback on each rank, indexed by rank
            (ranks may have different callbacks).
        stragglers: ``(epoch, straggler record or None)`` for each epoch recorded under DDP, in
            record order (None: no rank straggled).
    """

    stage: str
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
    batch_size: int | None = None
    device: str = "cpu"
    spreads: dict[str, dict[str, Any]] = field(default_factory=dict)
    callbacks_s: dict[str, float] = field(default_factory=dict)
    callback_hooks_s: dict[str, float] = field(default_factory=dict)
    module_hooks_s: dict[str, float] = field(default_factory=dict)
    callbacks_s_by_rank: list[dict[str, float]] = field(default_factory=list)
    stragglers: list[tuple[int, dict[str, Any] | None]] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``training``, ``validation`` or ``test``."""
        return STAGE_LABELS.get(self.stage, self.stage)

    @property
    def samples_per_sec(self) -> float:
        """Samples over all ranks per second of wall time (0 for an empty stage): the one
        samples/s of the report, the verdict and the gate."""
        return self.global_samples / self.global_wall_s if self.global_wall_s > 0 else 0.0

    def share(self, phase: str) -> float:
        """``phase`` in percent of the stage's wall time (0 for an empty stage)."""
        return 100.0 * self.phases_s.get(phase, 0.0) / self.wall_s if self.wall_s > 0 else 0.0


def summarize_stages(epochs: list[dict[str, Any]]) -> dict[str, StageSummary]:
    """Stage name -> :class:`StageSummary`, in train / val / test order."""
    out: dict[str, StageSummary] = {}
    for record in epochs:
        stage = str(record["stage"])
        s = out.setdefault(stage, StageSummary(stage=stage))
        s.epochs += 1
        s.wall_s += num(record.get("wall_s"))
        for phase, value in (record.get("phases_s") or {}).items():
            s.phases_s[phase] = s.phases_s.get(phase, 0.0) + num(value)
        for part, value in (record.get("worker_s") or {}).items():
            s.worker_s[part] = s.worker_s.get(part, 0.0) + num(value)
        for name, value in (record.get("worker_counts") or {}).items():
            s.worker_counts[name] = s.worker_counts.get(name, 0) + int(num(value))
        s.num_batches += int(num(record.get("num_batches")))
        s.samples += int(num(record.get("samples")))
        s.global_samples += int(num(record.get("global_samples"), num(record.get("samples"))))
        s.global_wall_s += num(record.get("global_wall_s"), num(record.get("wall_s")))
        if isinstance(record.get("num_workers"), int):
            s.num_workers = int(record["num_workers"])
        if isinstance(record.get("batch_size"), int):
            s.batch_size = int(record["batch_size"])
        if record.get("device") == "cuda":
            s.device = "cuda"
        if isinstance(record.get("spreads"), dict) and record["spreads"]:
            s.spreads = record["spreads"]
        for key in ("callbacks_s", "callback_hooks_s", "module_hooks_s"):
            acc = getattr(s, key)
            for name, value in (record.get(key) or {}).items():
                acc[name] = acc.get(name, 0.0) + num(value)
        by_rank = record.get("callbacks_s_by_rank") or []
        while len(s.callbacks_s_by_rank) < len(by_rank):
            s.callbacks_s_by_rank.append({})
        for acc, spent in zip(s.callbacks_s_by_rank, by_rank, strict=False):
            for name, value in (spent if isinstance(spent, dict) else {}).items():
                acc[name] = acc.get(name, 0.0) + num(value)
        if int(num(record.get("world_size"), 1)) > 1:
            straggler = record.get("straggler")
            s.stragglers.append(
                (int(num(record.get("epoch"))), straggler if isinstance(straggler, dict) else None)
            )
    order = {name: i for i, name in enumerate(STAGE_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], 99), kv[0])))
