"""Overhead of the performance callbacks, side by side with Lightning's built-in monitors.

Two workloads, every configuration interleaved in each repetition (the machine is shared and
noisy, so only figures measured side by side in one run are compared):

1. a tiny model (step of about 1.5-2 ms, one thread) on in-memory tensors: steady-state
   microseconds per training step added over no callback, for our two callbacks (alone and
   together), Lightning's ``ThroughputMonitor`` and ``DeviceStatsMonitor``;
2. ``experiment=synthetic_debug`` (one short epoch each): percent of epoch time added by
   ``callbacks=monitoring`` (both callbacks).

Prints figures only; never passes or fails on a time.

    python benchmarks/callback_overhead.py [--reps 5] [--steps 1500] [--skip-synthetic]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import warnings
from collections.abc import Callable

import lightning as L
import torch
from _tiny_loop import StepClock, fit_tiny
from lightning.pytorch.callbacks import (
    Callback,
    DeviceStatsMonitor,
    LearningRateMonitor,
    ModelCheckpoint,
    ProgressBar,
    ThroughputMonitor,
    TQDMProgressBar,
)
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.profilers import Profiler, SimpleProfiler
from trainperf.lightning import (
    EpochScanCallback,
    PerformanceProfilerCallback,
    ThroughputMonitorCallback,
)

WARMUP_STEPS = 100


class Empty(Callback):
    """Lightning's own cost of dispatching every hook to a callback that does nothing."""


class _UnwrappedBar(TQDMProgressBar):
    """Lightning's tqdm bar as a class of its own: the monitors leave its get_metrics alone."""


def others() -> list[Callback | Profiler]:
    """Three callbacks a real run has anyway (checkpointing at the epoch's end only, learning
    rate logging, a progress bar that refreshes rarely): Lightning dispatches every hook to each,
    and every dispatch is an action our listener sees."""
    return [
        ModelCheckpoint(save_top_k=1, monitor=None),
        LearningRateMonitor(logging_interval="step"),
        TQDMProgressBar(refresh_rate=10_000),
    ]


CONFIGS: dict[str, Callable[[], list[Callback | Profiler]]] = {
    "no callback": lambda: [],
    "two empty callbacks": lambda: [Empty(), Empty()],
    "PerformanceProfilerCallback": lambda: [PerformanceProfilerCallback()],
    "ThroughputMonitorCallback": lambda: [ThroughputMonitorCallback()],
    "both (ours)": lambda: [PerformanceProfilerCallback(), ThroughputMonitorCallback()],
    "Lightning ThroughputMonitor": lambda: [ThroughputMonitor(batch_size_fn=lambda b: len(b[0]))],
    "Lightning DeviceStatsMonitor": lambda: [DeviceStatsMonitor(cpu_stats=True)],
    # The performance profiler without its default epoch scan (epoch_scan=None): the default
    # scan installs epoch-level hooks only, so the two must cost the same per step.
    "PerformanceProfilerCallback, no scan": lambda: [PerformanceProfilerCallback(epoch_scan=None)],
    # Lightning's tqdm bar refreshing every batch (its default), which reads get_metrics() at each
    # refresh: with our monitors the bar's get_metrics is wrapped to add the live phase split
    # (interpose.show_phase_split); a subclass of the bar is left unwrapped, so the difference of
    # these two is the split's per-step cost.
    "tqdm bar + both (ours)": lambda: [
        TQDMProgressBar(refresh_rate=1),
        PerformanceProfilerCallback(),
        ThroughputMonitorCallback(),
    ],
    "tqdm bar subclass + both (ours)": lambda: [
        _UnwrappedBar(refresh_rate=1),
        PerformanceProfilerCallback(),
        ThroughputMonitorCallback(),
    ],
    "3 other callbacks": others,
    "3 others + both (ours)": lambda: [
        *others(),
        PerformanceProfilerCallback(),
        ThroughputMonitorCallback(),
    ],
    # What callbacks=monitoring builds (less the resource monitor's thread): EpochScanCallback at
    # its defaults nested in the performance profiler, so no callback of its own to dispatch to.
    "3 others + both (ours) + EpochScan": lambda: [
        *others(),
        PerformanceProfilerCallback(epoch_scan=EpochScanCallback()),
        ThroughputMonitorCallback(),
    ],
    # The scan as a callback of its own (callbacks=epoch_scan beside the monitors): Lightning's
    # dispatch of every step's hooks to one more callback.
    "3 others + both (ours) + EpochScan apart": lambda: [
        *others(),
        PerformanceProfilerCallback(),
        ThroughputMonitorCallback(),
        EpochScanCallback(),
    ],
    "3 others + Lightning SimpleProfiler": lambda: [*others(), SimpleProfiler()],
    "3 others + Lightning ThroughputMonitor": lambda: [
        *others(),
        ThroughputMonitor(batch_size_fn=lambda b: len(b[0])),
    ],
}


def tiny_run(
    make: Callable[[], list[Callback | Profiler]], steps: int, width: int, logdir: str
) -> tuple[float, float]:
    """Microseconds per steady-state training step: wall, main-thread CPU. A ``Profiler`` in the
    list becomes the Trainer's ``profiler`` (Lightning's SimpleProfiler listens to the same action
    stream as our callbacks)."""
    items = make()
    callbacks = [c for c in items if isinstance(c, Callback)]
    profilers = [p for p in items if isinstance(p, Profiler)]
    extra: dict[str, object] = {}
    if profilers:
        extra["profiler"] = profilers[0]
    if any(isinstance(c, ModelCheckpoint) for c in callbacks):
        extra["enable_checkpointing"] = True
    if any(isinstance(c, ProgressBar) for c in callbacks):
        extra["enable_progress_bar"] = True
    clock = fit_tiny(
        callbacks,
        steps=steps,
        warmup=WARMUP_STEPS,
        width=width,
        hidden=width,
        batch_size=16,
        root=logdir,
        logger=CSVLogger(logdir),
        log_every_n_steps=50,
        **extra,
    )
    return clock.per_step_s() * 1e6, clock.cpu_per_step_s() * 1e6


def synthetic_epoch(monitoring: bool, batches: int) -> float:
    """Seconds per steady-state training step of synthetic_debug (after 3 warm-up steps)."""
    from hydra import compose, initialize_config_module
    from hydra.utils import instantiate

    from ocr.runtime import register_resolvers

    register_resolvers()
    with initialize_config_module("ocr.configs", version_base="1.3"):
        cfg = compose("train", overrides=["experiment=synthetic_debug"])
    clock = StepClock(warmup=3)
    callbacks: list[Callback] = [clock]
    if monitoring:
        callbacks += [PerformanceProfilerCallback(), ThroughputMonitorCallback()]
    with tempfile.TemporaryDirectory() as tmp:
        datamodule = instantiate(cfg.data)
        module = instantiate(cfg.model)
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=1,
            limit_train_batches=batches,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            logger=CSVLogger(tmp),
            default_root_dir=tmp,
            callbacks=callbacks,
        )
        trainer.fit(module, datamodule=datamodule)
        return clock.per_step_s()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument(
        "--width", type=int, default=1024, help="hidden size (1024: step ~1.5-2 ms)"
    )
    parser.add_argument("--synthetic-batches", type=int, default=30)
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(1)  # a 2 ms step on one thread: less scheduler noise

    wall: dict[str, list[float]] = {name: [] for name in CONFIGS}
    cpu: dict[str, list[float]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory() as logdir:
        for rep in range(args.reps):
            for name, make in CONFIGS.items():
                w, c = tiny_run(make, args.steps, args.width, logdir)
                wall[name].append(w)
                cpu[name].append(c)
            print(f"rep {rep + 1}/{args.reps} done", flush=True)
    print(f"\nTiny model, {args.steps} steady-state steps x {args.reps} reps:")
    for label, results in (("wall clock", wall), ("main-thread CPU time", cpu)):
        # Noise on a shared machine only ever adds time: the minimum over repetitions is the
        # steadiest estimate; the median is printed beside it.
        base_min = min(results["no callback"])
        base_med = statistics.median(results["no callback"])
        print(f"\n{label}:")
        print(f"{'configuration':30} {'min us/step':>12} {'added':>7} {'median':>8} {'added':>7}")
        for name, values in results.items():
            lo, med = min(values), statistics.median(values)
            print(f"{name:30} {lo:12.1f} {lo - base_min:7.1f} {med:8.1f} {med - base_med:7.1f}")

    if args.skip_synthetic:
        return
    torch.set_num_threads(os.cpu_count() or 1)
    times: dict[bool, list[float]] = {False: [], True: []}
    synthetic_epoch(False, 2)  # generate/cache the data and warm imports outside the timing
    for _ in range(args.reps):
        for monitoring in (False, True):
            times[monitoring].append(synthetic_epoch(monitoring, args.synthetic_batches))
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(
        f"\nsynthetic_debug, training steps 3..{args.synthetic_batches} x {args.reps} reps "
        "(median s/step):"
    )
    print(f"  no monitors          {off * 1e3:8.1f} ms/step")
    print(f"  callbacks=monitoring {on * 1e3:8.1f} ms/step")
    print(f"  overhead             {100 * (on - off) / off:+8.2f} %")


if __name__ == "__main__":
    main()
