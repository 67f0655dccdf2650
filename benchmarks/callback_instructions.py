"""Callback overhead in CPU instructions: a deterministic companion to callback_overhead.py.

On this shared 2-core VM a steady 0.5-2 ms training step varies by tens of microseconds between
runs, as much as the overhead we want to see. Instruction counts do not: every configuration of
``callback_overhead.py``'s tiny model runs under ``valgrind --tool=callgrind`` twice, with
``--lo`` and ``--hi`` training steps, and the difference of the two totals divided by the
difference of the step counts is the instructions per training step, with the start-up
(imports, Trainer set-up, teardown) cancelled exactly. Per-step instructions added over "no
callback" are then turned into microseconds with a rate measured here too: Lightning's own
per-hook dispatch to two empty callbacks, run in a tight loop, timed natively (minimum of
repeats) and counted under callgrind; the interpreter-bound code of a callback runs at about
that rate when its caches are warm. A second column uses the more cautious rate of the whole
no-callback step in place (instructions per step over its native time), which folds in the
cache misses of a real loop. ``PYTHONHASHSEED=0`` keeps the runs repeatable.

Prints figures only; never passes or fails on a count or a time. Needs ``valgrind`` on PATH
(``apt-get install valgrind``); takes about 2-3 minutes per run, ``--jobs`` at a time.

    python benchmarks/callback_instructions.py [--lo 50] [--hi 450] [--jobs 2] [--configs ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_IREFS = re.compile(r"(?:Collected|I\s+refs)\s*:\s*([\d,]+)")
CALIBRATION_CALLS = (20_000, 120_000)
DEFAULT_CONFIGS = (
    "no callback",
    "two empty callbacks",
    "both (ours)",
    "PerformanceProfilerCallback",
    "ThroughputMonitorCallback",
    "Lightning ThroughputMonitor",
    "3 other callbacks",
    "3 others + both (ours)",
    "3 others + both (ours) + EpochScan",
    "3 others + both (ours) + EpochScan apart",
    "3 others + Lightning SimpleProfiler",
    "3 others + Lightning ThroughputMonitor",
)


def _quiet() -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


def worker_fit(config: str, steps: int, width: int) -> None:
    """One tiny-model fit of ``steps`` training steps (what callgrind counts)."""
    _quiet()
    import torch

    sys.path.insert(0, str(HERE))
    import callback_overhead as bench

    torch.set_num_threads(1)
    bench.WARMUP_STEPS = 10  # only sizes the data here: both step counts run the same warm-up
    with tempfile.TemporaryDirectory() as logdir:
        bench.tiny_run(bench.CONFIGS[config], steps, width, logdir)


def _dispatch_loop() -> Any:
    """A callable running Lightning's callback-hook dispatch to two empty callbacks once."""
    _quiet()
    import lightning as L
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.trainer import call

    trainer = L.Trainer(
        accelerator="cpu",
        callbacks=[Callback(), Callback()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )

    def once() -> None:
        call._call_callback_hooks(trainer, "on_train_batch_start", None, 0)

    return once


def worker_calibrate(calls: int) -> None:
    once = _dispatch_loop()
    for _ in range(calls):
        once()


def native_dispatch_us(repeats: int = 7, calls: int = 50_000) -> float:
    """µs per dispatch call, natively: minimum over ``repeats`` tight loops."""
    once = _dispatch_loop()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            once()
        best = min(best, time.perf_counter() - t0)
    return best / calls * 1e6


def native_step_us(steps: int, width: int, repeats: int) -> float:
    """µs per steady-state step of the tiny model without callbacks, natively (minimum)."""
    _quiet()
    import torch

    sys.path.insert(0, str(HERE))
    import callback_overhead as bench

    torch.set_num_threads(1)
    best = float("inf")
    with tempfile.TemporaryDirectory() as logdir:
        for _ in range(repeats):
            wall, _cpu = bench.tiny_run(bench.CONFIGS["no callback"], steps, width, logdir)
            best = min(best, wall)
    return best


def count(args: list[str], script: Path | None = None) -> int:
    """Total instructions of ``python SCRIPT ARGS`` under callgrind (``script``: this one)."""
    env = dict(os.environ, PYTHONHASHSEED="0", WANDB_MODE="offline")
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(script or Path(__file__).resolve()),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    found = _IREFS.findall(proc.stderr)
    if proc.returncode != 0 or not found:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"valgrind run {args} failed (exit {proc.returncode}): {tail}")
    return int(found[-1].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lo", type=int, default=50, help="training steps of the short run")
    parser.add_argument("--hi", type=int, default=450, help="training steps of the long run")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS))
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.worker[0] == "calibrate":
            worker_calibrate(int(args.worker[1]))
        else:
            worker_fit(args.worker[0], int(args.worker[1]), args.width)
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not on PATH (apt-get install valgrind); nothing measured")
        return
    if "no callback" not in args.configs:
        args.configs.insert(0, "no callback")

    jobs: dict[tuple[str, int], list[str]] = {}
    for config in args.configs:
        for steps in (args.lo, args.hi):
            jobs[(config, steps)] = ["--worker", config, str(steps), "--width", str(args.width)]
    for calls in CALIBRATION_CALLS:
        jobs[("calibrate", calls)] = ["--worker", "calibrate", str(calls)]
    print(f"{len(jobs)} callgrind runs, {args.jobs} at a time ...", flush=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        totals = dict(zip(jobs, pool.map(count, jobs.values()), strict=True))
    print(f"done in {time.perf_counter() - t0:.0f} s")

    lo_c, hi_c = CALIBRATION_CALLS
    instr_per_call = (totals[("calibrate", hi_c)] - totals[("calibrate", lo_c)]) / (hi_c - lo_c)
    us_per_call = native_dispatch_us()
    rate = instr_per_call / us_per_call  # instructions per µs of interpreter-bound code
    print(
        "\ncalibration: Lightning dispatching one hook to two empty callbacks = "
        f"{instr_per_call:,.0f} instructions, {us_per_call:.2f} us natively "
        f"-> {rate:,.0f} instructions/us"
    )

    per_step = {
        c: (totals[(c, args.hi)] - totals[(c, args.lo)]) / (args.hi - args.lo) for c in args.configs
    }
    base = per_step["no callback"]
    # A second, more cautious rate: the whole step's, in place (torch kernels and Lightning's
    # loop with its cache misses), from the native step time of the same model.
    step_us = native_step_us(1000, args.width, repeats=3)
    step_rate = base / step_us
    print(
        f"in-place rate: the no-callback step = {base:,.0f} instructions, {step_us:.1f} us "
        f"natively (min of 3) -> {step_rate:,.0f} instructions/us"
    )
    print(
        f"\nTiny model (width {args.width}), instructions per training step from runs of "
        f"{args.lo} and {args.hi} steps; added us at the dispatch rate / at the in-place rate:"
    )
    print(f"{'configuration':30} {'instr/step':>12} {'added':>10} {'~us':>7} {'~us':>7}")
    for config, value in per_step.items():
        added = value - base
        print(
            f"{config:30} {value:12,.0f} {added:10,.0f} {added / rate:7.1f} "
            f"{added / step_rate:7.1f}"
        )
    others = per_step.get("3 other callbacks")
    if others is not None:
        print(
            "\nWith three other callbacks attached (ModelCheckpoint, LearningRateMonitor, "
            "TQDMProgressBar): instructions per step added over those three alone"
        )
        for config, value in per_step.items():
            if config.startswith("3 others +"):
                print(f"{config:40} {value - others:12,.0f}")


if __name__ == "__main__":
    main()
