"""Host, worker, disk, network and GPU resources while training, with alerts that do not storm."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import rich
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from rich.table import Table

from trainperf.alerts import (
    AlertEngine,
    AlertSink,
    JsonlSink,
    LogSink,
    StragglerSignal,
    WandbSink,
    build_rules,
)
from trainperf.core.stage import Stage
from trainperf.errors import ConfigError, warn_off
from trainperf.lightning.batch_hooks import BatchEndHooks
from trainperf.lightning.loggers import log_to_loggers
from trainperf.lightning.recorder import StageRecorder
from trainperf.lightning.trial_fit import perf_root
from trainperf.probe.resources import (
    ResourceMonitor,
    ResourceMonitorWarning,
    ResourceSampler,
    StepSignals,
)
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import ResourceSample
from trainperf.records.schema import PERF_DIRNAME

# trainer.validate / trainer.test: sampled like a fit of their own
_STANDALONE = (TrainerFn.VALIDATING, TrainerFn.TESTING)
# Figures of the printed summary, in this order (when sampled), then every GPU's.
_SUMMARY_ROWS = (
    "process_cpu_percent",
    "process_rss_gb",
    "process_tree_memory_gb",
    "workers_count",
    "workers_cpu_percent",
    "workers_uss_gb",
    "system_cpu_percent",
    "iowait_percent",
    "system_memory_percent",
    "disk_read_mb_s",
    "disk_write_mb_s",
    "net_recv_mb_s",
    "net_sent_mb_s",
    "io_read_mb_s",
    "data_wait_share",
    "train_steps_per_s",
    "checkpoint_dir_free_gb",
    "cuda_max_reserved_gb",
)


def _device_selection(trainer: L.Trainer) -> tuple[list[str] | None, int | None]:
    """(UUIDs of the GPUs this rank uses, torch device index) for the sampler. A CUDA rank: its
    own device. Otherwise every device torch sees (``CUDA_VISIBLE_DEVICES`` applied), or
    ``None`` (all NVML devices) when this torch has no CUDA."""
    root = trainer.strategy.root_device
    if root.type == "cuda":
        index = root.index if root.index is not None else torch.cuda.current_device()
        return [str(torch.cuda.get_device_properties(index).uuid)], index
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        return [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)], None
    return None, None


def _checkpoint_bytes(trainer: L.Trainer, pl_module: L.LightningModule, folder: Path) -> float:
    """Estimated size of the next checkpoint: parameters, buffers and optimizer state, or the
    newest ``*.ckpt`` in ``folder`` when larger (it also holds callbacks' and loops' state)."""
    total = sum(t.numel() * t.element_size() for t in pl_module.parameters())
    total += sum(t.numel() * t.element_size() for t in pl_module.buffers())
    for optimizer in trainer.optimizers:
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    total += value.numel() * value.element_size()
    newest = 0
    if folder.is_dir():
        with os.scandir(folder) as entries:
            stats = [e.stat() for e in entries if e.name.endswith(".ckpt") and e.is_file()]
        if stats:
            newest = max(stats, key=lambda st: st.st_mtime).st_size
    return float(max(total, newest))


class ResourceMonitorCallback(BatchEndHooks):
    """Samples host, DataLoader-worker, disk, network and GPU resources on a background thread
    during ``fit``, logs them, and raises alerts that fire once with evidence and resolve (the
    README's section; metric names in ``trainperf.probe.resources.METRIC_DOCS``, rules and their
    defaults in ``trainperf.alerts.catalogue``).

    The sampler thread (daemon, ``trainperf-resource-monitor``) starts at ``on_fit_start`` and is
    joined at the end of fit, on an exception (also ``KeyboardInterrupt``) and at ``teardown``.
    The training hooks only stamp ``perf_counter_ns`` and counters; sampling, the rules and file
    writes run on the thread. Metrics reach ``trainer.loggers`` (rank zero) from the training
    thread at the next batch end after each logging interval: loggers are not thread-safe. An
    internal error is one warning and the monitor turns off; training goes on.

    Data wait (starvation rule) is measured here, so the rule works without the performance
    callbacks: the time between a training batch's end and the next one's start over the step
    period (an upper bound: other callbacks' batch hooks fall in the gap too). Under DDP every
    rank samples its own processes and device and writes its own alerts to ``alerts.jsonl``.

    Args:
        enabled: ``False`` makes every hook return at once.
        interval_s: seconds between samples.
        log_interval_s: seconds between logged / written records, independent of ``interval_s``.
        rate_window_s: window of ``data_wait_share`` and ``train_steps_per_s``, seconds of
            training.
        record_samples: write every sample to ``resources.jsonl`` (the report's resource plots
            show each; about 2 KB per sample on a CPU host, ~7 MB per hour at ``interval_s=1``);
            ``False``: one line per logging interval (the logged averages).
        checkpoint_dir: folder whose free space is watched; default the checkpoint callback's
            ``dirpath``, else ``trainer.default_root_dir``.
        worker_refresh_s: seconds between scans for DataLoader worker processes.
        memory_detail_s: seconds between USS/PSS reads (~3 ms per process); ``0``: RSS only.
        rules: per-rule settings, rule name -> {setting: value} (``enabled``, ``hold_s``,
            ``cooldown_s`` and each rule's thresholds; see ``trainperf.alerts.catalogue``); the
            rules' defaults where not given.
        wandb_alerts: also send events with ``wandb.alert`` when a wandb run is active.
        profile_on_throughput_drop: a firing of a rule that asks for one (``requests_profile``:
            ``throughput_drop``) requests a profiler window (``ProfilerCallback`` in on-demand
            mode takes it).
        print_summary: print the run's resource summary at fit end (rank zero).
    """

    def __init__(
        self,
        enabled: bool = True,
        interval_s: float = 1.0,
        log_interval_s: float = 10.0,
        rate_window_s: float = 10.0,
        record_samples: bool = True,
        checkpoint_dir: str | None = None,
        worker_refresh_s: float = 5.0,
        memory_detail_s: float = 5.0,
        alerts: bool = True,
        rules: Mapping[str, Mapping[str, object] | None] | None = None,
        wandb_alerts: bool = True,
        profile_on_throughput_drop: bool = False,
        print_summary: bool = True,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        for label, value in (
            ("interval_s", interval_s),
            ("log_interval_s", log_interval_s),
            ("rate_window_s", rate_window_s),
            ("worker_refresh_s", worker_refresh_s),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name}: {label} must be a number > 0 (seconds), got {value!r}")
        if isinstance(memory_detail_s, bool) or not memory_detail_s >= 0:
            raise ConfigError(
                f"{name}: memory_detail_s must be >= 0 seconds, got {memory_detail_s!r}"
            )
        self.enabled = bool(enabled)
        self.interval_s = float(interval_s)
        self.log_interval_s = float(log_interval_s)
        self.rate_window_s = float(rate_window_s)
        self.record_samples = bool(record_samples)
        self.checkpoint_dir = checkpoint_dir
        self.worker_refresh_s = float(worker_refresh_s)
        self.memory_detail_s = float(memory_detail_s)
        self.alerts = bool(alerts)
        # Plain dicts (Hydra passes DictConfig); validated now so a typo fails before training.
        self.rules = {str(k): dict(v or {}) for k, v in (rules or {}).items()}
        build_rules(self.rules)
        self.wandb_alerts = bool(wandb_alerts)
        self.profile_on_throughput_drop = bool(profile_on_throughput_drop)
        self.print_summary = bool(print_summary)
        self.monitor: ResourceMonitor | None = None
        self.summary: dict[str, float] = {}
        self._signals: StepSignals | None = None
        self._feed: _StragglerFeed | None = None
        self._ckpt_dir = Path(".")

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.enabled:
            return
        self.summary = {}
        try:
            self._start(trainer, pl_module)
        except Exception as exc:
            self._off(exc)

    def _end_standalone(self, trainer: L.Trainer) -> bool:
        """Finish a standalone validate / test run (True when this was one)."""
        if trainer.state.fn not in _STANDALONE:
            return False
        self._finish(trainer, normal=True)
        return True

    def _start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        perf_dir = perf_root(trainer) / PERF_DIRNAME  # a `trainperf try` trial: its own folder
        ckpt = getattr(trainer.checkpoint_callback, "dirpath", None)
        self._ckpt_dir = Path(self.checkpoint_dir or ckpt or trainer.default_root_dir)
        uuids, cuda_index = _device_selection(trainer)
        sampler = ResourceSampler(
            checkpoint_dir=self._ckpt_dir,
            device_uuids=uuids,
            cuda_device=cuda_index,
            worker_refresh_s=self.worker_refresh_s,
            memory_detail_s=self.memory_detail_s,
        )
        zero = trainer.is_global_zero
        engine = None
        if self.alerts:
            sinks: list[AlertSink] = [LogSink(), JsonlSink(perf_dir / "alerts.jsonl")]
            if self.wandb_alerts and zero:
                sinks.append(WandbSink())
            engine = AlertEngine(
                build_rules(self.rules),
                sinks,
                rank=trainer.global_rank,
                all_rules=zero,
                request_profiles=self.profile_on_throughput_drop,
            )
        signals = StepSignals()
        signals.checkpoint_bytes = _checkpoint_bytes(trainer, pl_module, self._ckpt_dir)
        monitor = ResourceMonitor(
            sampler,
            signals,
            engine=engine,
            writer=RecordWriter(ResourceSample.path(perf_dir.parent)) if zero else None,
            interval_s=self.interval_s,
            log_interval_s=self.log_interval_s,
            rate_window_s=self.rate_window_s,
            record_samples=self.record_samples,
            rank=trainer.global_rank,
            context=lambda: (trainer.global_step, trainer.current_epoch),
            main_thread_ident=threading.get_ident(),
        )
        self._signals, self.monitor = signals, monitor
        if trainer.world_size > 1 and self.alerts:
            # The straggler of each training epoch comes from the shared recorder's one gather
            # (with the performance callbacks, the same gather; without them, the only one).
            self._feed = feed = _StragglerFeed(self)
            feed.recorder = StageRecorder.attach(trainer, feed)
        if sampler.status.get("gpu", "").startswith("unavailable"):
            rank_zero_info(f"ResourceMonitorCallback: gpu: {sampler.status['gpu']}")
        monitor.start()

    def _off(self, exc: BaseException) -> None:
        """Own failure: one warning, then no more work for the run."""
        warn_off("ResourceMonitorCallback", exc, ResourceMonitorWarning)
        monitor = self._stop()
        if monitor is not None:
            monitor.close()

    def _stop(self) -> ResourceMonitor | None:
        """Stop and join the sampler thread (idempotent); returns the monitor it stopped."""
        monitor, self.monitor = self.monitor, None
        self._signals = None
        feed, self._feed = self._feed, None
        if feed is not None and feed.recorder is not None:
            feed.recorder.detach(feed)
        if monitor is not None:
            monitor.stop()
        return monitor

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finish(trainer, normal=True)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._finish(trainer, normal=False)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._finish(trainer, normal=False)

    def _finish(self, trainer: L.Trainer, normal: bool) -> None:
        monitor = self._stop()
        if monitor is None:
            return
        try:
            if normal and not monitor.failed:
                monitor.signals.set_phase("idle")
                monitor.tick()  # a run shorter than one interval is still sampled and judged
            monitor.flush_interval()
            if normal:
                self._log_pending(trainer, monitor)
            fn = trainer.state.fn
            self.summary = monitor.write_summary(run=None if fn is None else str(fn.value))
            if normal:
                log_to_loggers(trainer, self.summary)
                if self.print_summary and trainer.is_global_zero:
                    self._print(monitor)
        except Exception as exc:
            warnings.warn(
                f"ResourceMonitorCallback: the end-of-fit summary failed "
                f"({type(exc).__name__}: {exc})",
                ResourceMonitorWarning,
                stacklevel=2,
            )
        finally:
            monitor.close()

    @staticmethod
    def _log_pending(trainer: L.Trainer, monitor: ResourceMonitor) -> None:
        pending = monitor.take_pending()
        if pending:
            log_to_loggers(trainer, pending)

    def _print(self, monitor: ResourceMonitor) -> None:
        summary = self.summary
        names = [n for n in _SUMMARY_ROWS if f"resources/{n}_mean" in summary]
        names += sorted(
            k.removeprefix("resources/").removesuffix("_mean")
            for k in summary
            if k.startswith("resources/gpu") and k.endswith("_mean")
        )
        table = Table(title="Resources over the run", title_justify="left")
        table.add_column("figure")
        table.add_column("mean", justify="right")
        table.add_column("max", justify="right")
        for name in names:
            mean, peak = summary[f"resources/{name}_mean"], summary[f"resources/{name}_max"]
            table.add_row(name, f"{mean:.3g}", f"{peak:.3g}")
        console = rich.get_console()  # the progress bar's console: nothing is drawn over
        console.print(table)
        io = ", ".join(
            f"{phase} read {summary.get(f'resources/io_{phase}_read_mb', 0.0):.1f} MiB / "
            f"wrote {summary.get(f'resources/io_{phase}_write_mb', 0.0):.1f} MiB"
            for phase in ("train", "val", "test")
            if phase != "test" or summary.get("resources/io_test_read_mb")
        )
        console.print(f"I/O of main process + workers: {io}")
        for source, status in sorted(monitor.sampler.status.items()):
            console.print(f"{source}: {status.removeprefix('ok ')}")
        if monitor.engine is not None:
            fired = ", ".join(f"{rule} x{n}" for rule, n in sorted(monitor.engine.fired.items()))
            console.print(f"alerts fired: {fired or 'none'}")

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signals = self._signals
        if signals is not None:
            signals.epoch = trainer.current_epoch
            signals.set_phase("train")

    def _eval_start(self, trainer: L.Trainer, pl_module: L.LightningModule, phase: str) -> None:
        # trainer.validate / trainer.test are sampled as runs of their own; the fit's validation
        # belongs to the fit's monitor.
        if self.monitor is None and trainer.state.fn in _STANDALONE:
            self.on_fit_start(trainer, pl_module)
        self._set_phase(phase)

    def _set_phase(self, phase: str) -> None:
        if self._signals is not None:
            self._signals.set_phase(phase)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._eval_start(trainer, pl_module, "val")

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._eval_start(trainer, pl_module, "test")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._end_standalone(trainer):
            # Back to the training epoch (its end: checkpointing), except after the sanity check.
            self._set_phase("idle" if trainer.sanity_checking else "train")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end_standalone(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._set_phase("idle")

    # hot path: stamps only

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        signals = self._signals
        if signals is not None:
            signals.train_batch_start()

    def _batch_end(
        self, trainer: L.Trainer, stage: str, outputs: Any, batch: Any, batch_idx: int, loader: int
    ) -> None:
        signals = self._signals
        if signals is None:
            return
        if stage == "train":
            # The loss tensor is kept, not read: the sampler thread checks it is finite.
            signals.train_batch_end(outputs.get("loss") if isinstance(outputs, dict) else outputs)
        else:
            signals.eval_batch_end()
        monitor = self.monitor
        if monitor is not None and monitor.pending is not None:
            self._log_pending(trainer, monitor)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signals = self._signals
        if signals is None:
            return
        try:
            signals.checkpoint_bytes = _checkpoint_bytes(trainer, pl_module, self._ckpt_dir)
        except Exception as exc:
            self._off(exc)


class _StragglerFeed:
    """The resource monitor's subscription to the shared ``StageRecorder`` under DDP: each
    training epoch's straggler becomes the ``straggler_rank`` rule's signal. Asks for nothing
    else (no files, no memory, no logging)."""

    stages = frozenset({Stage.TRAIN})
    log_interval = 0
    track_memory = False
    sync_cuda = False
    write_run_files = False

    def __init__(self, callback: ResourceMonitorCallback) -> None:
        self.callback = callback
        self.recorder: StageRecorder | None = None

    def _receive_report(self, report: EpochRecord) -> None:
        signals = self.callback._signals
        if signals is None:
            return
        epoch, straggler = report.epoch or 0, report.straggler
        if straggler is None:  # rank -1 and share 0, so an earlier alert can resolve
            signals.straggler = StragglerSignal(rank=-1, share=0.0, epoch=epoch)
        else:
            signals.straggler = StragglerSignal(
                rank=straggler.rank,
                share=straggler.share,
                excess_s=straggler.excess_s,
                cause=straggler.cause,
                others_wait_s=straggler.others_wait_s,
                epoch=epoch,
            )

    def _receive_interval(self, progress: object) -> None:
        return None

    def _recorder_off(self) -> None:
        self.recorder = None
