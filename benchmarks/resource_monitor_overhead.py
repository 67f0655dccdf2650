"""Cost of ResourceMonitorCallback: the sampler thread's CPU at 1 Hz and the per-step cost.

1. Sampler CPU, two ways (two forked idle children stand in for DataLoader workers, so the
   worker path is measured too):
   a. ``--calls`` back-to-back ``ResourceSampler.sample()`` calls timed with the calling
      thread's CPU clock (``time.thread_time``), with USS/PSS re-read every ``memory_detail_s``
      of *simulated* time as at 1 Hz; mean CPU per sample x 1 Hz = share of one core;
   b. the real monitor thread at 1 Hz (sampling + alert rules + records) for ``--seconds``,
      its CPU time read from the kernel's per-thread counters (``psutil.Process().threads()``).
2. Per-step cost: a tiny model on in-memory tensors (no DataLoader workers) with no callback,
   an empty callback (Lightning's own dispatch cost of any callback) and the monitor,
   interleaved in each repetition; steady-state microseconds per step (steps after a warm-up
   to the end of the epoch), min and median over repetitions of the paired differences. Also
   the callback's own hook code per step, called directly in a loop.

Prints figures only; never passes or fails on a time. Goals: <= 1 % of one core, <= 10 us/step.

    python benchmarks/resource_monitor_overhead.py [--seconds 30] [--reps 5] [--steps 2000]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import statistics
import tempfile
import threading
import time
import warnings

import psutil
import torch
from _tiny_loop import fit_tiny
from lightning.pytorch.callbacks import Callback
from trainperf.alerts import AlertEngine, build_rules
from trainperf.lightning import ResourceMonitorCallback
from trainperf.probe.resources import ResourceMonitor, ResourceSampler, StepSignals
from trainperf.probe.resources.monitor import THREAD_NAME

WARMUP_STEPS = 200


# -- 1. sampler CPU ------------------------------------------------------------------------------


def sampler_cpu_by_calls(calls: int) -> float:
    """CPU seconds per sample(), with the USS/PSS cadence of a 1 Hz sampler."""
    sampler = ResourceSampler(checkpoint_dir=tempfile.gettempdir(), worker_refresh_s=5.0)
    sampler.sample(now=0.0)
    start = time.thread_time()
    for i in range(1, calls + 1):
        sampler.sample(now=float(i))  # simulated 1 s apart: detail reads every 5th call
    cpu = time.thread_time() - start
    sampler.close()
    return cpu / calls


def sampler_cpu_by_thread(seconds: float) -> tuple[float, int]:
    """(CPU seconds per second of the real monitor thread at 1 Hz, samples taken)."""
    signals = StepSignals()
    signals.set_phase("train")
    monitor = ResourceMonitor(
        ResourceSampler(checkpoint_dir=tempfile.gettempdir()),
        signals,
        engine=AlertEngine(build_rules()),
        interval_s=1.0,
        log_interval_s=10.0,
    )
    monitor.start()
    thread = next(t for t in threading.enumerate() if t.name == THREAD_NAME)
    native = thread.native_id

    def thread_cpu() -> float:
        for t in psutil.Process().threads():
            if t.id == native:
                return t.user_time + t.system_time
        raise RuntimeError("monitor thread not found")

    time.sleep(0.2)
    cpu0, wall0, n0 = thread_cpu(), time.monotonic(), monitor.samples
    time.sleep(seconds)
    cpu1, wall1, n1 = thread_cpu(), time.monotonic(), monitor.samples
    monitor.close()
    return (cpu1 - cpu0) / (wall1 - wall0), n1 - n0


# -- 2. per-step cost ----------------------------------------------------------------------------


class Empty(Callback):
    """Lightning's own cost of dispatching every hook to one more callback."""


CONFIGS = ("none", "empty", "monitor")


def one_run(steps: int, config: str) -> float:
    """µs per steady-state step of a ``steps``-step epoch (the first WARMUP_STEPS untimed)."""
    torch.manual_seed(0)
    callbacks: list[Callback] = []
    if config == "empty":
        callbacks.append(Empty())
    elif config == "monitor":
        callbacks.append(ResourceMonitorCallback(print_summary=False))
    with tempfile.TemporaryDirectory() as root:
        clock = fit_tiny(
            callbacks,
            steps=steps - WARMUP_STEPS,
            warmup=WARMUP_STEPS,
            width=16,
            batch_size=1,
            root=root,
        )
    return clock.us_per_step()


def hooks_only_us(n: int) -> float:
    """The callback's own per-step hook code, called directly (no Lightning dispatch)."""
    callback = ResourceMonitorCallback()
    callback._signals = StepSignals()
    callback._signals.set_phase("train")
    outputs = {"loss": torch.tensor(1.0)}
    start_hook, end_hook = callback.on_train_batch_start, callback.on_train_batch_end
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for i in range(n):
            start_hook(None, None, None, i)  # type: ignore[arg-type]
            end_hook(None, None, outputs, None, i)  # type: ignore[arg-type]
        best = min(best, (time.perf_counter_ns() - t0) / n / 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="thread measurement, s")
    parser.add_argument("--calls", type=int, default=200, help="sample() calls to time")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each fit")
    parser.add_argument("--steps", type=int, default=2000, help="training steps per fit")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=time.sleep, args=(600,)) for _ in range(2)]
    for child in children:
        child.start()
    try:
        per_call = sampler_cpu_by_calls(args.calls)
        print(
            f"sampler CPU (a) {args.calls} sample() calls, thread CPU clock, 2 idle children: "
            f"{per_call * 1e3:.3f} ms per sample -> {per_call * 100:.3f} % of one core at 1 Hz"
        )
        share, samples = sampler_cpu_by_thread(args.seconds)
        print(
            f"sampler CPU (b) real monitor thread at 1 Hz for {args.seconds:.0f} s "
            f"({samples} samples, rules on), kernel per-thread CPU time: "
            f"{share * 100:.3f} % of one core"
        )
    finally:
        for child in children:
            child.terminate()
            child.join()

    hooks = hooks_only_us(100_000)
    print(f"callback hook code alone (start+end per step, best of 5): {hooks:.2f} us/step")
    for config in CONFIGS:  # discarded: first-use costs (imports, allocator, thread pools)
        one_run(WARMUP_STEPS + 100, config)
    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for rep in range(args.reps):
        order = CONFIGS if rep % 2 == 0 else CONFIGS[::-1]
        for config in order:
            times[config].append(one_run(args.steps, config))
    med = {c: statistics.median(v) for c, v in times.items()}
    print(
        f"tight Lightning loop, {args.steps - WARMUP_STEPS} steady steps x {args.reps} reps "
        f"(median us/step): no callback {med['none']:.1f}, empty callback {med['empty']:.1f}, "
        f"ResourceMonitorCallback {med['monitor']:.1f}"
    )
    for label, ref in (("no callback", "none"), ("an empty callback", "empty")):
        diffs = [m - b for m, b in zip(times["monitor"], times[ref], strict=True)]
        print(
            f"per-step cost of the callback vs {label} (paired by repetition): "
            f"min {min(diffs):.2f} us, median {statistics.median(diffs):.2f} us"
        )


if __name__ == "__main__":
    main()
