"""The plain-loop Monitor's overhead in CPU instructions per training step, beside the Lightning
monitors' (``callback_instructions.py``'s method and tiny model).

A plain loop over the tiny model of ``callback_overhead.py`` (width -> width -> 1, batch 16,
SGD) runs under ``valgrind --tool=callgrind`` with ``--lo`` and ``--hi`` training steps, with
and without ``trainperf.loop.Monitor``; the difference of the totals over the difference of the
steps is the instructions per step, start-up (imports, set-up, the run files) cancelled exactly.
The same is counted for Lightning's fit without callbacks and with ``both (ours)``
(PerformanceProfilerCallback + ThroughputMonitorCallback), so the two adapters' added
instructions per step stand side by side. ``PYTHONHASHSEED=0`` keeps the runs repeatable.

Prints figures only; never passes or fails on a count. Needs ``valgrind`` on PATH.

    python benchmarks/loop_instructions.py [--lo 50] [--hi 250] [--jobs 2] [--no-lightning]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOOP_CONFIGS = ("plain loop", "plain loop + Monitor")
LIGHTNING_CONFIGS = ("no callback", "both (ours)")
BATCH = 16


def worker_loop(monitored: bool, steps: int, width: int) -> None:
    """One epoch of ``steps`` plain-loop training steps (what callgrind counts)."""
    import warnings

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    n = steps * BATCH
    loader = DataLoader(TensorDataset(torch.randn(n, width), torch.randn(n)), batch_size=BATCH)

    def epoch(batches: object) -> None:
        for x, y in batches:  # type: ignore[attr-defined]
            loss = nn.functional.mse_loss(model(x).squeeze(-1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    if not monitored:
        epoch(loader)
        return
    from trainperf.loop import Monitor

    with tempfile.TemporaryDirectory() as run, Monitor(run, model, opt, live=False) as mon:
        epoch(mon.train(loader))


def count(args: list[str]) -> int:
    """Total instructions of ``python this_script.py ARGS`` under callgrind."""
    sys.path.insert(0, str(HERE))
    from callback_instructions import count as count_script

    return count_script(args, Path(__file__).resolve())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lo", type=int, default=50, help="training steps of the short run")
    parser.add_argument("--hi", type=int, default=250, help="training steps of the long run")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-lightning", action="store_true", help="count the plain loop only")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        config, steps = args.worker[0], int(args.worker[1])
        if config in LOOP_CONFIGS:
            worker_loop(config == "plain loop + Monitor", steps, args.width)
        else:
            sys.path.insert(0, str(HERE))
            from callback_instructions import worker_fit

            worker_fit(config, steps, args.width)
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not on PATH (apt-get install valgrind); nothing measured")
        return
    configs = [*LOOP_CONFIGS, *(() if args.no_lightning else LIGHTNING_CONFIGS)]
    jobs = {
        (config, steps): ["--worker", config, str(steps), "--width", str(args.width)]
        for config in configs
        for steps in (args.lo, args.hi)
    }
    print(f"{len(jobs)} callgrind runs, {args.jobs} at a time ...", flush=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        totals = dict(zip(jobs, pool.map(count, jobs.values()), strict=True))
    print(f"done in {time.perf_counter() - t0:.0f} s")
    per_step = {
        c: (totals[(c, args.hi)] - totals[(c, args.lo)]) / (args.hi - args.lo) for c in configs
    }
    print(
        f"\nTiny model (width {args.width}, batch {BATCH}), instructions per training step from "
        f"runs of {args.lo} and {args.hi} steps:"
    )
    print(f"{'configuration':30} {'instr/step':>12} {'added':>10}")
    bases = {"plain loop + Monitor": "plain loop", "both (ours)": "no callback"}
    for config, value in per_step.items():
        base = bases.get(config)
        added = f"{value - per_step[base]:10,.0f}" if base in per_step else f"{'':>10}"
        print(f"{config:30} {value:12,.0f} {added}")
    if "both (ours)" in per_step:
        loop = per_step["plain loop + Monitor"] - per_step["plain loop"]
        ours = per_step["both (ours)"] - per_step["no callback"]
        print(
            f"\nadded per step: plain-loop Monitor {loop:,.0f}, Lightning monitors {ours:,.0f} "
            f"(goal: the Monitor at most the Lightning monitors' and at most 150,000)"
        )


if __name__ == "__main__":
    main()
