"""Per-stage figures of a run from its epoch, profiler and interval records.

Per-stage figures of a run: totals over its steady epochs (``perf/epochs.jsonl``; warm-up epochs
are left out of the shares and named, :func:`split_warmup`), the profiler's own cost moved out of
the training's phases (``perf/profiler.jsonl``), outlier batches and the training rate between
interval records (``perf/intervals.jsonl``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainperf.core.clock import PHASES
from trainperf.core.ranks import Straggler
from trainperf.core.stage import STAGE_ORDER, Stage
from trainperf.records.epoch_scans import RecompilesRecord
from trainperf.records.epochs import EpochRecord, IntervalRecord, LoaderSettings
from trainperf.records.monitoring import ProfilerWindow

#: A training epoch in which Dynamo's compiles took at least this share of its wall time is a
#: warm-up epoch (it compiled more than it trained).
WARMUP_COMPILE_SHARE = 0.25


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
    under DDP. ``epoch_numbers`` are the epochs summed (in record order); ``warmup`` the
    stage's epochs left out of the sums as warm-up (:func:`split_warmup`), each with why.
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
    epoch_numbers: list[int | None] = field(default_factory=list)
    warmup: list[WarmUp] = field(default_factory=list)

    @property
    def warmup_s(self) -> float:
        """Wall seconds of the warm-up epochs left out of the sums."""
        return sum(w.wall_s for w in self.warmup)

    def epochs_words(self) -> str:
        """Which epochs the figures sum: ``epochs 1-4 (epoch 0 left out as warm-up: 12.30 s)``."""
        words = f"epoch{'s' if len(self.epoch_numbers) != 1 else ''} {_spans(self.epoch_numbers)}"
        if self.warmup:
            left = _spans([w.epoch for w in self.warmup])
            many = "s" if len(self.warmup) != 1 else ""
            words += f" (epoch{many} {left} left out as warm-up: {self.warmup_s:,.2f} s)"
        return words

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


@dataclass(frozen=True)
class WarmUp:
    """An epoch left out of its stage's sums: its number, wall time and why (words)."""

    epoch: int | None
    wall_s: float
    why: str


def _spans(numbers: Sequence[int | None]) -> str:
    """``0, 2-5, 7`` (``?`` for an epoch without a number)."""
    known = sorted({n for n in numbers if n is not None})
    parts: list[str] = []
    for n in known:
        if parts and n - 1 in known and parts[-1].split("-")[-1] == str(n - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{n}"
        else:
            parts.append(str(n))
    if any(n is None for n in numbers):
        parts.append("?")
    return ", ".join(parts) or "none"


def split_warmup(
    epochs: Sequence[EpochRecord], recompiles: Sequence[RecompilesRecord] = ()
) -> tuple[list[EpochRecord], dict[Stage, list[WarmUp]]]:
    """The steady epochs (record order) and, per stage, the warm-up epochs left out: the first
    epoch of a stage, the first after a restart (its number not above the one before) and a
    training epoch that compiled for at least :data:`WARMUP_COMPILE_SHARE` of its wall time
    (``perf/recompiles.jsonl``). Only where later epochs exist: a stage keeps at least its last
    epoch, and a stage of one epoch keeps it."""
    compile_s = {r.epoch: r.compile_s for r in recompiles if r.available}
    by_stage: dict[Stage, list[int]] = {}
    for i, r in enumerate(epochs):
        by_stage.setdefault(r.stage, []).append(i)
    why: dict[int, str] = {}
    for stage, idx in by_stage.items():
        if len(idx) < 2:
            continue
        flagged: dict[int, str] = {idx[0]: "the stage's first epoch"}
        for before, i in itertools.pairwise(idx):
            r, prev = epochs[i], epochs[before].epoch
            spent = compile_s.get(r.epoch) if r.epoch is not None else None
            if r.epoch is not None and prev is not None and r.epoch <= prev:
                flagged[i] = "the first epoch after a restart"
            elif stage == Stage.TRAIN and spent and spent >= WARMUP_COMPILE_SHARE * r.wall_s:
                flagged[i] = f"compiling: Dynamo took {spent:.1f} s of its {r.wall_s:.1f} s"
        if len(flagged) >= len(idx):
            flagged.pop(idx[-1])
        why.update(flagged)
    steady = [r for i, r in enumerate(epochs) if i not in why]
    warm: dict[Stage, list[WarmUp]] = {}
    for i, reason in sorted(why.items()):
        r = epochs[i]
        warm.setdefault(r.stage, []).append(WarmUp(r.epoch, r.wall_s, reason))
    return steady, warm


def summarize_stages(
    epochs: Sequence[EpochRecord],
    recompiles: Sequence[RecompilesRecord] = (),
    *,
    warmup: bool = True,
) -> dict[Stage, StageSummary]:
    """Stage -> :class:`StageSummary` of its steady epochs, in train / val / test order: the
    warm-up epochs (:func:`split_warmup`, ``recompiles`` the run's Dynamo records) are left
    out of the sums and named in ``StageSummary.warmup``; ``warmup=False`` sums every epoch."""
    steady, warm = split_warmup(epochs, recompiles) if warmup else (list(epochs), {})
    out: dict[Stage, StageSummary] = {}
    for record in steady:
        s = out.setdefault(record.stage, StageSummary(stage=record.stage))
        s.epochs += 1
        s.epoch_numbers.append(record.epoch)
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
    for stage, left in warm.items():
        out[stage].warmup = left
    return {stage: out[stage] for stage in STAGE_ORDER if stage in out}


#: The phase-table line that holds the profiler's own cost (not a phase of the live clock).
PROFILER_PHASE = "profiler"
#: The profiler callback's display name in windows recorded before ``ProfilerWindow.callback``.
DEFAULT_PROFILER_CALLBACK = "ProfilerCallback"


def profiled_batches(windows: Sequence[ProfilerWindow]) -> set[tuple[Stage, int, int]]:
    """``(stage, epoch, batch index)`` of every batch a profiler window recorded."""
    out: set[tuple[Stage, int, int]] = set()
    for w in windows:
        if w.epoch is not None:
            out.update((w.stage, w.epoch, b) for b in w.batch_indices())
    return out


def move_profiler_overhead(
    stages: dict[Stage, StageSummary], windows: Sequence[ProfilerWindow]
) -> None:
    """Move each stage's profiler cost (the trace export and analysis, which the phase clock books
    under ``callbacks``: they run in ``ProfilerCallback``'s hooks) from ``callbacks`` to its own
    :data:`PROFILER_PHASE` line, so the report does not blame the training for it (never more
    than ``callbacks`` holds: the clock may not have run during a window; a window in a warm-up
    epoch left out of the summary moves nothing)."""
    overhead: dict[Stage, float] = {}  # trace export and analysis, summed over the windows
    owners: dict[Stage, set[str]] = {}  # the callbacks whose hooks hold that cost
    for w in windows:
        summary = stages.get(w.stage)
        if summary is not None and w.epoch is not None and w.epoch not in summary.epoch_numbers:
            continue  # a warm-up epoch's window: its cost is not in the summary's callbacks
        overhead[w.stage] = overhead.get(w.stage, 0.0) + sum(w.overhead_s.values())
        owners.setdefault(w.stage, set()).add(w.callback or DEFAULT_PROFILER_CALLBACK)
    for stage, secs in overhead.items():
        summary = stages.get(stage)
        if summary is None or secs <= 0:
            continue
        take = min(secs, summary.phases_s.get("callbacks", 0.0))
        if take <= 0:
            continue
        summary.phases_s["callbacks"] = summary.phases_s.get("callbacks", 0.0) - take
        summary.phases_s[PROFILER_PHASE] = summary.phases_s.get(PROFILER_PHASE, 0.0) + take
        _take_from_owners(summary, owners.get(stage, set()), take)


def _take_from_owners(summary: StageSummary, owners: set[str], secs: float) -> None:
    """Take ``secs`` moved to the profiler line off the owning callbacks' per-callback and
    per-hook seconds too (largest hook first), so the callbacks finding never names a callback
    with more time than the callbacks phase still holds."""
    for table, prefix in ((summary.callbacks_s, False), (summary.callback_hooks_s, True)):
        left = secs
        keys = [
            k
            for k in table
            if (k.split(".", 1)[0] if prefix else k) in owners  # "Callback.hook" / "Callback"
        ]
        for k in sorted(keys, key=lambda k: -table[k]):
            if left <= 0:
                break
            cut = min(left, table[k])
            table[k] -= cut
            left -= cut


def batch_times(records: Sequence[EpochRecord]) -> list[tuple[int | None, int, float]]:
    """(epoch, batch index, seconds) of every stored batch time of ``records``."""
    out = []
    for r in records:
        stride = max(r.batch_times_stride, 1)
        for i, t in enumerate(r.batch_times_s):
            if t is not None and math.isfinite(t):
                out.append((r.epoch, i * stride, t))
    return out


@dataclass(frozen=True)
class Outlier:
    """One outlier batch: its epoch, index in the epoch, time (ms) and time over the median."""

    epoch: int | None
    batch: int
    ms: float
    x_median: float | None


def batch_outliers(epochs: Sequence[EpochRecord], stage: Stage, limit: int = 8) -> list[Outlier]:
    """The slowest batches of ``stage`` that are outliers by a robust rule (modified z-score over
    the median absolute deviation > 3.5, and at least 1.5x the median), slowest first."""
    times = batch_times([e for e in epochs if e.stage == stage])
    if len(times) < 5:
        return []
    values = sorted(t for _, _, t in times)
    median = values[len(values) // 2]
    mad = sorted(abs(v - median) for v in values)[len(values) // 2]
    rows = []
    for epoch, index, t in times:
        z = 0.6745 * (t - median) / mad if mad > 0 else (math.inf if t > median else 0.0)
        if z > 3.5 and t >= 1.5 * median:
            x_median = round(t / median, 2) if median > 0 else None
            rows.append(Outlier(epoch, index, round(1000.0 * t, 2), x_median))
    rows.sort(key=lambda r: (-r.ms, str(r.epoch), r.batch))
    return rows[:limit]


def training_rates(intervals: Sequence[IntervalRecord]) -> list[tuple[int, float]]:
    """(global step, samples per second) of training between consecutive interval records;
    the first record of an epoch measures from the epoch's start (where its counts start)."""
    rates: list[tuple[int, float]] = []
    epoch: int | None = None
    elapsed = samples = 0.0
    for cur in (r for r in intervals if r.stage == Stage.TRAIN):
        if cur.epoch != epoch:  # a new epoch: its counts start from zero
            epoch, elapsed, samples = cur.epoch, 0.0, 0.0
        dt = cur.elapsed_s - elapsed
        ds = cur.samples - samples
        if dt > 0 and ds >= 0:
            # The counts are one rank's; ranks run in step under DDP.
            rates.append((cur.step, ds * cur.world_size / dt))
        elapsed, samples = cur.elapsed_s, cur.samples
    return rates
