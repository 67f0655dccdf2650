"""Samples and batches per second for train / validation / test, from the first epoch."""

from __future__ import annotations

from collections.abc import Iterable

import lightning as L

from ocr.lightning_modules.callbacks.base import RecorderCallback
from ocr.lightning_modules.callbacks.epoch_report import (
    EpochReport,
    IntervalProgress,
    log_to_loggers,
    per_second,
)

__all__ = ["ThroughputMonitorCallback", "throughput_metrics"]


def throughput_metrics(report: EpochReport, peak_memory: bool = True) -> dict[str, float]:
    """The metrics of one stage epoch (``stage`` = ``train``, ``val`` or ``test``):

    - ``throughput/{stage}_samples_per_sec`` and ``throughput/{stage}_batches_per_sec``: over
      all ranks, divided by the epoch's wall time (the slowest rank's under DDP); the epoch is the
      stage's clock window, so training throughput excludes validation,
    - ``throughput/{stage}_data_wait_share``: fraction (0-1) of the epoch the main process was
      blocked on the DataLoader (rank zero's own under DDP),
    - with ``peak_memory``: ``performance/{stage}_peak_rss_gb`` (largest sampled process RSS)
      and, on CUDA, ``performance/{stage}_peak_gpu_memory_gb`` (peak allocated, reset each
      epoch), in GiB,
    - under DDP, each rank's own rates as ``..._samples_per_sec_{min,median,max}`` and
      ``..._batches_per_sec_{min,median,max}``, and the peaks' ``_{min,median,max}``.
    """
    stage = report.stage
    head = f"throughput/{stage}_"
    out: dict[str, float] = {
        "epoch": float(report.epoch),
        f"{head}samples_per_sec": per_second(report.global_samples, report.global_wall_s),
        f"{head}batches_per_sec": per_second(report.global_batches, report.global_wall_s),
        f"{head}data_wait_share": per_second(report.phases_s.get("data_wait", 0.0), report.wall_s),
    }
    for figure in ("samples_per_sec", "batches_per_sec"):
        for stat, value in report.spreads.get(figure, {}).items():
            out[f"{head}{figure}_{stat}"] = value
    if peak_memory:
        mem_head = f"performance/{stage}_"
        out[f"{mem_head}peak_rss_gb"] = report.peak_rss_gb
        out[f"{mem_head}peak_gpu_memory_gb"] = report.peak_gpu_memory_gb  # nan (dropped) on CPU
        for figure in ("peak_rss_gb", "peak_gpu_memory_gb"):
            for stat, value in report.spreads.get(figure, {}).items():
                out[f"{mem_head}{figure}_{stat}"] = value
    return out


class ThroughputMonitorCallback(RecorderCallback):
    """Samples/s and batches/s for training, validation and test from the first epoch on, with
    the per-epoch peak memory and the share of time spent waiting for data.

    Unlike Lightning's ``ThroughputMonitor`` it never synchronises CUDA, needs no warm-up window,
    reports validation and test too, and takes each batch's size from the batch itself: the
    number of dataset items the instrumented DataLoader put in it (else Lightning's
    ``extract_batch_size``), so variable and partial batches count exactly. Under DDP the rates
    cover all ranks (one gather per epoch). Shares its measurement with
    ``PerformanceProfilerCallback`` when both are used. Metric names: :func:`throughput_metrics`.
    An internal error becomes one warning and turns the callback off; training continues.

    Args:
        enabled: record anything at all; ``False`` makes every hook return at once.
            Default ``True``.
        log_interval: every this many training batches, also log the epoch-so-far
            ``throughput/train_samples_per_sec`` and ``throughput/train_batches_per_sec`` (rank
            zero's rate times the number of ranks, which run in step under DDP) at the current
            step. ``0``: epoch ends only. In batches. Default ``10``.
        peak_memory: log the per-epoch peaks of process RSS and CUDA allocated memory (RSS is
            sampled at epoch boundaries and at most once a second in between; the CUDA peak is
            exact). Default ``True``.
        stages: stages to report, any of ``"train"``, ``"validate"`` (or ``"val"``), ``"test"``.
            Default all three.
        write_run_files: write the run directory's ``perf/epochs.jsonl``,
            ``perf/intervals.jsonl`` and ``perf/run.json`` (see ``PerformanceProfilerCallback``).
            Default ``True``.
    """

    def __init__(
        self,
        enabled: bool = True,
        log_interval: int = 10,
        peak_memory: bool = True,
        stages: Iterable[str] = ("train", "validate", "test"),
        write_run_files: bool = True,
    ) -> None:
        super().__init__(
            enabled=enabled,
            log_interval=log_interval,
            stages=stages,
            sync_cuda=False,
            track_memory=peak_memory,
            write_run_files=write_run_files,
        )
        self.peak_memory = bool(peak_memory)

    def _on_report(self, trainer: L.Trainer, report: EpochReport) -> None:
        log_to_loggers(trainer, throughput_metrics(report, peak_memory=self.peak_memory))

    def _interval_metrics(self, progress: IntervalProgress) -> dict[str, float] | None:
        if progress.stage != "train":
            return None  # the step does not advance during evaluation
        scale = progress.world_size
        return {
            "throughput/train_samples_per_sec": per_second(
                progress.samples * scale, progress.elapsed_s
            ),
            "throughput/train_batches_per_sec": per_second(
                progress.num_batches * scale, progress.elapsed_s
            ),
        }
