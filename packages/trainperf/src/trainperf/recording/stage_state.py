"""What a recorder's stage windows keep per stage and per open epoch window.

Per stage :class:`StageState`; per open epoch window :class:`EpochWindow`."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from trainperf.core.clock import PHASES, PhaseClock
from trainperf.core.stats import StreamingStats
from trainperf.probe.worker import WorkerTiming
from trainperf.records.epochs import LoaderSettings

#: Batch times kept per epoch for the run directory's epochs.jsonl (every k-th beyond this).
MAX_KEPT_BATCH_TIMES = 4096


@dataclass
class EpochWindow:
    """One open (or paused) window of a stage epoch."""

    stage: str
    epoch: int
    segment_start_ns: int
    phases_ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    owners_ns: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_s: dict[str, float] = field(default_factory=dict)
    closed_ns: int = 0  # wall time of the closed segments (train around validation)
    paused: bool = False
    batch_times: StreamingStats = field(default_factory=StreamingStats)
    pending_ns: list[int] = field(default_factory=list)  # batch times not yet in batch_times
    last_batch_end_ns: int = 0  # window time (pauses excluded) of the previous batch end
    num_batches: int = 0
    samples: int = 0
    peak_rss_gb: float = math.nan
    peak_gpu_gb: float = math.nan
    first_batch_samples: int = 0
    kept_chunks: list[np.ndarray] = field(default_factory=list)  # every batch time, in ns

    def elapsed_ns(self, now: int) -> int:
        return self.closed_ns if self.paused else self.closed_ns + now - self.segment_start_ns

    def fold_memory(self, snap: Mapping[str, float]) -> None:
        """Raise the window's memory peaks to a reading (``trainperf.probe.device_memory``'s
        names)."""
        self.peak_rss_gb = nanmax(self.peak_rss_gb, snap.get("process_rss_gb"))
        self.peak_gpu_gb = nanmax(self.peak_gpu_gb, snap.get("cuda_max_allocated_gb"))

    def phases_s(self, clock: PhaseClock) -> dict[str, float]:
        """Seconds per phase so far: the closed segments, plus ``clock`` (the innermost open
        window's) up to now when this window is not paused."""
        ns = dict(self.phases_ns)
        if not self.paused and clock.running:
            for name, value in clock.peek().phases_ns.items():
                ns[name] += value
        return {name: value / 1e9 for name, value in ns.items() if value}

    def samples_per_sec(self, now: int) -> float:
        """Samples so far over the window's time so far (``now``: ``perf_counter_ns``)."""
        elapsed = self.elapsed_ns(now) / 1e9
        return self.samples / elapsed if elapsed > 0 else 0.0

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
class StageState:
    """What a stage keeps between its windows, and the open window."""

    # Worker timings arrive with batches; they accumulate here and move into the epoch at its
    # close, so a batch prefetched before the window opened still counts for that epoch.
    worker_ns: dict[str, int] = field(default_factory=dict)
    worker_counts: dict[str, int] = field(default_factory=dict)
    num_workers: int | None = None
    loader: LoaderSettings | None = None
    # Sample counts of batches received but not yet finished (Lightning may prefetch one).
    timing_samples: deque[int] = field(default_factory=lambda: deque(maxlen=8))
    noted_samples: int | None = None  # size of the batch in flight, from a batch hook
    epoch: EpochWindow | None = None
    # The consumer's wait in next() by cause (ns; DataWaitCause names) and the batches' bytes.
    wait_causes_ns: dict[str, int] = field(default_factory=dict)
    batch_bytes: int = 0
    batches: int = 0
    batch_tensors: int | None = None

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
        self.batch_bytes += timing.batch_bytes
        self.batches += 1
        self.batch_tensors = timing.batch_tensors
        causes = self.wait_causes_ns
        if timing.worker_id < 0:
            causes["main_loading"] = causes.get("main_loading", 0) + timing.wait_ns
        else:
            causes["worker"] = causes.get("worker", 0) + timing.worker_wait_ns
            handover = timing.wait_ns - timing.worker_wait_ns
            causes["receive"] = causes.get("receive", 0) + handover

    def take_input_figures(self) -> tuple[dict[str, float], float | None, int | None]:
        """The data wait by cause (seconds), the mean bytes per batch and the tensors per batch
        since the last call (None without batches); resets them."""
        causes = {name: ns / 1e9 for name, ns in self.wait_causes_ns.items()}
        mean_bytes = self.batch_bytes / self.batches if self.batches else None
        tensors = self.batch_tensors
        self.wait_causes_ns, self.batch_bytes, self.batches = {}, 0, 0
        self.batch_tensors = None
        return causes, mean_bytes, tensors


def named_seconds(
    owners_ns: Mapping[tuple[str, str], int], groups: Mapping[str, tuple[str, str]]
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Seconds per callback, per callback hook and per module hook, from the clock's owners
    (``owners_ns``: (phase, owner) -> ns) and each owner's (group, display name)."""
    callbacks: dict[str, float] = {}
    callback_hooks: dict[str, float] = {}
    module_hooks: dict[str, float] = {}
    for (_, owner), ns in owners_ns.items():
        group = groups.get(owner)
        if group is None:
            continue
        seconds = ns / 1e9
        if group[0] == "callbacks":
            callbacks[group[1]] = callbacks.get(group[1], 0.0) + seconds
            callback_hooks[owner] = callback_hooks.get(owner, 0.0) + seconds
        else:
            module_hooks[owner] = module_hooks.get(owner, 0.0) + seconds
    return callbacks, callback_hooks, module_hooks


def nanmax(current: float, value: float | None) -> float:
    """The larger of ``current`` and ``value``, ignoring nan and None."""
    if value is None or math.isnan(value):
        return current
    return value if math.isnan(current) else max(current, value)
