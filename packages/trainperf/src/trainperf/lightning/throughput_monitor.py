"""Samples and batches per second per stage, and MFU.

Samples and batches per second for train / validation / test, from the first epoch, and the
model's achieved FLOP/s against this machine's measured peak (MFU)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import lightning as L
from lightning.fabric.utilities.apply_func import move_data_to_device

from trainperf.errors import PerfCallbackWarning
from trainperf.lightning.epoch_scan import EpochScanCallback
from trainperf.lightning.loggers import log_to_loggers
from trainperf.lightning.monitor_defaults import MonitorDefaults
from trainperf.recording.subscribers import IntervalProgress, per_second
from trainperf.records.epochs import EpochRecord


@dataclass(frozen=True)
class Ceiling:
    """What a stage epoch's FLOP/s are measured against, taken once per run.

    Args:
        flops_per_sample: stage -> FLOPs per sample: forward + backward for ``train``, forward
            (eval mode) for the others.
        peak_flops_per_sec: this host's measured peak on the module's device and dtype, per rank.
        spec_peak_flops_per_sec: the GPU's data-sheet peak, or ``None`` (CPU, unknown GPU).
        run_info: the ``"flops"`` object written into ``perf/run.json``.
    """

    flops_per_sample: dict[str, float]
    peak_flops_per_sec: float | None
    spec_peak_flops_per_sec: float | None
    run_info: dict[str, Any]


def measure_ceiling(trainer: L.Trainer, pl_module: L.LightningModule) -> Ceiling | None:
    """FLOPs per sample of ``pl_module`` on its ``example_input_array`` (``None`` without one)
    and the measured peak of its device in the trainer's precision."""
    from dataclasses import asdict

    from trainperf.probe.flops import count_flops
    from trainperf.probe.peak_flops import dtype_for_precision, measured_peak, spec_peak

    example = pl_module.example_input_array
    if example is None:
        return None
    example = move_data_to_device(example, pl_module.device)
    was_training = pl_module.training
    try:
        pl_module.train()
        train = count_flops(pl_module, example, backward=True)
        pl_module.eval()  # an eval forward may compute less (a training-only head branch)
        evaluate = count_flops(pl_module, example, backward=False)
    finally:
        pl_module.train(was_training)
    per_sample: dict[str, float] = {
        "val": evaluate.forward_per_sample,
        "test": evaluate.forward_per_sample,
    }
    if train.train_per_sample is not None:
        per_sample["train"] = train.train_per_sample
    device = pl_module.device
    dtype = dtype_for_precision(getattr(trainer, "precision", None))
    peak = measured_peak(device, dtype)
    spec = spec_peak(peak.device_name, dtype) if device.type == "cuda" else None
    info = {
        "per_sample": per_sample,
        "example_input_shapes": [list(s) for s in train.input_shapes],
        "example_batch_size": train.batch_size,
        "forward_flops": evaluate.forward,
        "train_forward_backward_flops": train.forward_backward,
        "peak_flops_per_sec": peak.flops_per_sec,
        "spec_peak_flops_per_sec": spec,
        "peak": asdict(peak),
    }
    return Ceiling(per_sample, peak.flops_per_sec or None, spec, info)


def flops_metrics(report: EpochRecord, ceiling: Ceiling | None) -> dict[str, float]:
    """``throughput/{stage}_flops_per_sec`` (achieved, all ranks) and ``throughput/{stage}_mfu``
    (over the measured peak of all ranks, 0-1); empty without a ceiling or FLOPs for the stage.
    On CUDA with a known GPU also ``throughput/{stage}_mfu_spec`` (over the data-sheet peak)."""
    from trainperf.analysis.mfu import utilisation

    if ceiling is None:
        return {}
    use = utilisation(
        ceiling.flops_per_sample.get(report.stage),
        report.global_samples,
        report.all_wall_s,
        ceiling.peak_flops_per_sec,
        world_size=report.world_size,
        spec_peak_flops_per_sec=ceiling.spec_peak_flops_per_sec,
    )
    if use is None:
        return {}
    head = f"throughput/{report.stage}_"
    out = {f"{head}flops_per_sec": use.flops_per_sec}
    if use.mfu is not None:
        out[f"{head}mfu"] = use.mfu
    if use.spec_mfu is not None:
        out[f"{head}mfu_spec"] = use.spec_mfu
    return out


def throughput_metrics(report: EpochRecord, peak_memory: bool = True) -> dict[str, float | None]:
    """The ``throughput/...`` metrics of one stage epoch and, with ``peak_memory``, its peak
    memory (the README's table of metric keys)."""
    stage = report.stage
    head = f"throughput/{stage}_"
    out: dict[str, float | None] = {
        "epoch": float(report.epoch or 0),
        f"{head}samples_per_sec": per_second(report.global_samples, report.all_wall_s),
        f"{head}batches_per_sec": per_second(report.global_batches, report.all_wall_s),
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


class ThroughputMonitorCallback(MonitorDefaults):
    """Samples/s and batches/s for training, validation and test from the first epoch on, with
    the per-epoch peak memory and the share of time spent waiting for data.

    Unlike Lightning's ``ThroughputMonitor`` it never synchronises CUDA, needs no warm-up window,
    reports validation and test too, and counts each batch's samples exactly: the dataset items
    the instrumented DataLoader put in it (else Lightning's ``extract_batch_size``). Under DDP
    the rates cover all ranks. Metric keys: the README's table. An internal error becomes one
    warning and turns the callback off; training continues.

    Args:
        enabled: ``False`` makes every hook return at once.
        log_interval: every this many training batches, also log the epoch-so-far
            ``throughput/train_samples_per_sec`` and ``throughput/train_batches_per_sec`` (rank
            zero's rate times the number of ranks, which run in step under DDP) at the current
            step. ``0``: epoch ends only.
        peak_memory: log the per-epoch peaks of process RSS and CUDA allocated memory (RSS is
            sampled at epoch boundaries and at most once a second in between; the CUDA peak is
            exact).
        stages: stages to report, any of ``"train"``, ``"validate"`` (or ``"val"``), ``"test"``.
        write_run_files: as ``PerformanceProfilerCallback``'s.
        flops: when the LightningModule has an ``example_input_array``, count its FLOPs per
            sample once at the start, take this host's measured peak (cached per host and
            dtype) and log :func:`flops_metrics` each epoch; the figures also go to
            ``perf/run.json`` (``"flops"``).
        epoch_scan: as ``PerformanceProfilerCallback``'s (one scan per trainer: beside a
            performance profiler with its default scan, the profiler's runs, as the first).

    With Lightning's own ``RichProgressBar`` or ``TQDMProgressBar`` on the trainer, the bar also
    shows the live phase split (:func:`trainperf.lightning.interpose.show_phase_split`).
    """

    def __init__(
        self,
        enabled: bool = True,
        log_interval: int = 10,
        peak_memory: bool = True,
        stages: Iterable[str] = ("train", "validate", "test"),
        write_run_files: bool = True,
        flops: bool = True,
        epoch_scan: EpochScanCallback | bool | None = True,
    ) -> None:
        super().__init__(
            enabled=enabled,
            log_interval=log_interval,
            stages=stages,
            sync_cuda=False,
            track_memory=peak_memory,
            write_run_files=write_run_files,
            epoch_scan=epoch_scan,
        )
        self.peak_memory = bool(peak_memory)
        self.flops = bool(flops)
        self._ceiling: Ceiling | None = None
        self._ceiling_tried = False

    def _take_ceiling(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Once per run, before the first epoch: the count runs the model on the example
        input, which must not land inside a timed window."""
        if not self.flops or self._ceiling_tried or not self._enabled_run:
            return
        self._ceiling_tried = True
        try:
            self._ceiling = measure_ceiling(trainer, pl_module)
        except Exception as exc:  # a model FlopCounterMode cannot run: no FLOPs, no failure
            warnings.warn(
                f"{type(self).__name__}: no FLOPs metrics for this run, counting the FLOPs of "
                f"{type(pl_module).__name__}.example_input_array failed "
                f"({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=2,
            )
            return
        files = self._recorder.files if self._recorder is not None else None
        if self._ceiling is not None and files is not None and self.write_run_files:
            files.run_info({"flops": self._ceiling.run_info})

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._take_ceiling(trainer, pl_module)

    on_validation_start = on_test_start = on_fit_start  # a standalone validate / test

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().teardown(trainer, pl_module, stage)
        self._ceiling, self._ceiling_tried = None, False

    def _on_report(self, trainer: L.Trainer, report: EpochRecord) -> None:
        metrics = throughput_metrics(report, peak_memory=self.peak_memory)
        metrics.update(flops_metrics(report, self._ceiling))
        log_to_loggers(trainer, metrics)

    def _interval_metrics(self, progress: IntervalProgress) -> dict[str, float] | None:
        scale = progress.world_size
        return {
            "throughput/train_samples_per_sec": per_second(
                progress.samples * scale, progress.elapsed_s
            ),
            "throughput/train_batches_per_sec": per_second(
                progress.num_batches * scale, progress.elapsed_s
            ),
        }
