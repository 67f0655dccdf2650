"""Where every second of a train / validation / test epoch goes, as metrics and a table."""

from __future__ import annotations

import math
from collections.abc import Iterable

import lightning as L
from rich.table import Table

from trainperf.core.clock import PHASES
from trainperf.lightning.epoch_scan import EpochScanCallback
from trainperf.lightning.loggers import log_to_loggers
from trainperf.lightning.monitor_defaults import MonitorDefaults
from trainperf.present.console import print_renderable
from trainperf.recording.cross_rank import DURATION_FIGURES
from trainperf.recording.subscribers import IntervalProgress, per_second
from trainperf.records.epochs import EpochRecord
from trainperf.records.run_info import CORRUPT, EVICTIONS, HITS, MISSES, cache_names, hit_rate

_BATCH_STATS = ("mean", "median", "p95", "p99", "std")
_CACHE_COUNTS = (HITS, MISSES, EVICTIONS, CORRUPT, "_bytes_written")  # a cache's, 0 if absent
# Memory gauges: snapshot key -> metric name (GiB or percent).
_MEMORY_KEYS = {
    "cuda_allocated_gb": "gpu_memory_gb",
    "cuda_reserved_gb": "gpu_memory_reserved_gb",
    "system_memory_percent": "cpu_memory_percent",
    "process_rss_gb": "process_rss_gb",
}
#: Callbacks and hooks that spent less than this in an epoch are not named in metrics and tables.
MIN_NAMED_S = 1e-3
#: Named callbacks / hooks shown in the verbose table (the largest first).
_TABLE_NAMED_ROWS = 8


def performance_metrics(report: EpochRecord, memory: bool = True) -> dict[str, float | None]:
    """The ``performance/...`` metrics of one stage epoch (the README's table of metric keys);
    ``memory``: with the memory gauges at the epoch's end."""
    stage = report.stage
    head = f"performance/{stage}_"
    out: dict[str, float | None] = {
        "epoch": float(report.epoch or 0),
        f"{head}epoch_time": report.wall_s,
    }
    for phase, seconds in report.phases_s.items():
        out[f"{head}{phase}_time"] = seconds
    for part, seconds in report.worker_s.items():
        out[f"{head}worker_{part}_time"] = seconds
    for stat in _BATCH_STATS:
        out[f"{head}batch_{stat}"] = report.batch_stats[stat]
    out[f"{head}num_batches"] = float(report.num_batches)
    for phase, gpu_s in report.gpu_phases_s.items():
        out[f"{head}gpu_{phase}_time"] = gpu_s
    if memory:
        mem_head = "performance/" if stage == "val" else head
        for key, name in _MEMORY_KEYS.items():
            if key in report.memory:
                out[f"{mem_head}{name}"] = report.memory[key]
    for figure in DURATION_FIGURES:
        spread = report.spreads.get(figure)
        if spread is not None:
            for stat, value in spread.items():
                out[f"{head}{figure}_{stat}"] = value
    for name, seconds in report.callbacks_s.items():
        if seconds >= MIN_NAMED_S:
            out[f"performance/{stage}_callback/{name}_time"] = seconds
    if report.world_size > 1:
        straggler = report.straggler
        out[f"{head}straggler_rank"] = float(straggler.rank) if straggler else -1.0
        out[f"{head}straggler_excess_time"] = straggler.excess_s if straggler else 0.0
    out.update(cache_metrics(report))
    return out


def cache_metrics(report: EpochRecord) -> dict[str, float]:
    """The figures of each cache X of one stage epoch (this rank's workers: its ``X_...``
    counters and ``X_hit_rate``); none for a cache without a lookup."""
    counts = report.worker_counts
    head = f"performance/{report.stage}_"
    out: dict[str, float] = {}
    for cache in cache_names(counts):
        rate = hit_rate(counts, cache)
        if rate is None:
            continue
        mine = {n: float(v) for n, v in counts.items() if n.startswith(cache + "_")}
        out.update({f"{head}{name}": value for name, value in mine.items()})
        for suffix in _CACHE_COUNTS:
            out.setdefault(f"{head}{cache}{suffix}", 0.0)
        out[f"{head}{cache}_hit_rate"] = rate
        if report.stage == "val":
            out[f"performance/{cache}_hit_rate"] = rate
    return out


def render_table(report: EpochRecord) -> Table:
    """The end-of-epoch table: phases with their share of the epoch, worker parts, batch-time
    statistics and memory; with the max over ranks under DDP."""
    ddp = bool(report.spreads)
    ranks = f" ({report.global_samples} on {report.world_size} ranks)" if ddp else ""
    table = Table(
        title=(
            f"{report.stage} epoch {report.epoch}: {report.wall_s:.3f} s, "
            f"{report.num_batches} batches, {report.samples} samples{ranks}, "
            f"{per_second(report.global_samples, report.all_wall_s):.1f} samples/s"
        ),
        title_justify="left",
    )
    table.add_column("where the time went")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    if ddp:
        table.add_column("max over ranks (rank)", justify="right")
    blank = [""] if ddp else []  # the empty spread cell
    wall = report.wall_s

    def share(seconds: float) -> str:
        return f"{100 * seconds / wall:.1f} %" if wall > 0 else ""

    def spread_cell(figure: str) -> list[str]:
        if not ddp:
            return []
        spread = report.spreads.get(figure, {})
        top, rank = spread.get("max"), spread.get("slowest_rank")
        if top is None or rank is None or math.isnan(top):
            return [""]
        return [f"{top:.3f} ({int(rank)})"]

    for phase in PHASES:
        seconds = report.phases_s.get(phase, 0.0)
        table.add_row(phase, f"{seconds:.3f}", share(seconds), *spread_cell(f"{phase}_time"))
    table.add_row("epoch", f"{wall:.3f}", "100 %", *spread_cell("epoch_time"), end_section=True)
    named = {**report.callback_hooks_s, **report.module_hooks_s}
    top = sorted((kv for kv in named.items() if kv[1] >= MIN_NAMED_S), key=lambda kv: -kv[1])
    for label, seconds in top[:_TABLE_NAMED_ROWS]:
        table.add_row(f"  {label}", f"{seconds:.3f}", share(seconds), *blank)
    if top:
        table.rows[-1].end_section = True
    if report.straggler is not None:
        table.add_row(
            f"straggler: rank {report.straggler.rank}",
            f"+{report.straggler.excess_s:.3f}",
            report.straggler.cause,
            *blank,
            end_section=True,
        )
    for part, seconds in report.worker_s.items():
        # Worker time overlaps the step: shown, but not a share of the epoch.
        cells = spread_cell(f"worker_{part}_time")
        table.add_row(f"worker {part}", f"{seconds:.3f}", "overlaps", *cells)
    counted = False
    for cache in cache_names(report.worker_counts):
        rate = hit_rate(report.worker_counts, cache)
        if rate is not None:
            hits, misses = (int(report.worker_counts.get(cache + s, 0)) for s in (HITS, MISSES))
            label = f"{cache.replace('_', ' ')} hits"
            table.add_row(label, f"{hits}/{hits + misses}", f"{100 * rate:.1f} %", *blank)
            counted = True
    if report.worker_s or counted:
        table.rows[-1].end_section = True
    stats = report.batch_stats
    if report.num_batches:
        for stat in _BATCH_STATS:
            table.add_row(f"batch {stat}", f"{stats[stat]:.4f}", "", *blank)
        table.rows[-1].end_section = True
    for key, name in _MEMORY_KEYS.items():
        if key in report.memory:
            unit = "%" if key.endswith("percent") else "GiB"
            table.add_row(name, f"{report.memory[key]:.2f} {unit}", "", *blank)
    return table


class PerformanceProfilerCallback(MonitorDefaults):
    """Attribute every second of each train / validation / test epoch to a named phase and log
    per-batch and per-epoch timing, DataLoader worker time and memory.

    Each epoch's wall time is split into the phases of ``trainperf.core.clock.PHASES``, which sum to
    it, with the time of each callback and LightningModule hook by name; validation inside
    ``fit`` is its own ``val`` epoch. Work done in DataLoader workers is timed in the worker and
    reported beside the phases (it overlaps compute). Metric keys: the README's table. Logged
    from rank zero. Never synchronises CUDA unless asked. An internal error becomes one warning
    and turns the callback off; training continues.

    Example::

        trainer = Trainer(callbacks=[PerformanceProfilerCallback(verbose=True)])

    Args:
        enabled: ``False`` records nothing: every hook returns at once, but for running an
            ``epoch_scan`` passed explicitly.
        log_interval: every this many training batches, log ``performance/train_batch_time``
            (mean seconds per batch since the previous such log, data wait included) at the
            current step. ``0``: epoch ends only.
        profile_memory: log memory gauges at each epoch end (process RSS, host memory %, CUDA
            allocated / reserved when CUDA is in use); memory is also sampled at most once a
            second during an epoch (process RSS and the CUDA peak only, ~10 µs per sample) for
            the epoch's peak.
        verbose: print a table of the epoch (phases and their share, worker parts, batch-time
            statistics, memory) at each recorded epoch end, on rank zero.
        stages: stages to record, any of ``"train"``, ``"validate"`` (or ``"val"``),
            ``"test"``.
        sync_cuda: call ``torch.cuda.synchronize()`` at every phase switch so the host phases
            include their GPU work (exact, but slows training); without it the GPU time per
            phase comes from CUDA events read without blocking. No effect without CUDA.
        write_run_files: write the run directory's ``perf/epochs.jsonl``,
            ``perf/intervals.jsonl`` and ``perf/run.json`` (``trainer.default_root_dir``; format
            in ``trainperf.records``), read by ``trainperf report`` and ``trainperf
            baseline``.
        epoch_scan: the epoch scan (memory creep named by attribute, ``torch.compile``
            recompiles; :class:`EpochScanCallback`) run from this callback's hooks, at training
            epoch ends only: ``True`` (default) an ``EpochScanCallback()`` at its defaults while
            this callback is ``enabled``; an ``EpochScanCallback`` that one (it runs even with
            this callback disabled: ``callbacks=monitoring``); ``None`` no scan. Nested rather
            than a callback of its own because one more callback costs some 65,000 instructions
            per step even when all its hooks are inherited no-ops (Lightning dispatches each
            step's hooks to every callback). One scan per trainer: a standalone
            ``EpochScanCallback`` or another monitor's explicit scan takes precedence
            (:mod:`trainperf.lightning.monitor_defaults`).

    With Lightning's own ``RichProgressBar`` or ``TQDMProgressBar`` on the trainer, the bar also
    shows the live phase split (:func:`trainperf.lightning.interpose.show_phase_split`).
    """

    def __init__(
        self,
        enabled: bool = True,
        log_interval: int = 10,
        profile_memory: bool = True,
        verbose: bool = False,
        stages: Iterable[str] = ("train", "validate", "test"),
        sync_cuda: bool = False,
        write_run_files: bool = True,
        epoch_scan: EpochScanCallback | bool | None = True,
    ) -> None:
        super().__init__(
            enabled=enabled,
            log_interval=log_interval,
            stages=stages,
            sync_cuda=sync_cuda,
            track_memory=profile_memory,
            write_run_files=write_run_files,
            epoch_scan=epoch_scan,
        )
        self.profile_memory = bool(profile_memory)
        self.verbose = bool(verbose)
        self._anchor: tuple[int, int, float] = (-1, 0, 0.0)  # epoch, batches, elapsed_s

    def _on_report(self, trainer: L.Trainer, report: EpochRecord) -> None:
        log_to_loggers(trainer, performance_metrics(report, memory=self.profile_memory))
        if self.verbose and trainer.is_global_zero:
            print_renderable(render_table(report))  # above a live progress bar, not under it

    def _interval_metrics(self, progress: IntervalProgress) -> dict[str, float] | None:
        epoch, batches, elapsed = self._anchor
        if epoch != progress.epoch or batches > progress.num_batches:
            batches, elapsed = 0, 0.0
        self._anchor = (progress.epoch, progress.num_batches, progress.elapsed_s)
        n = progress.num_batches - batches
        if n <= 0:
            return None
        return {"performance/train_batch_time": (progress.elapsed_s - elapsed) / n}
