"""Does the regression gate cry wolf? Identical reruns beside another CPU job, and a real slowdown.

A plain Lightning script (no app code): a module whose training step is ~20 ms (a sleep standing
in for device time, plus a tiny linear layer), 12 batches an epoch, with the documented
``trainperf.lightning`` callbacks writing the run folder. With ``--burners`` busy-loop processes
spinning beside every run (another job on the machine; ``--quiet-baseline``: not beside the
baseline), the script

1. records a baseline: ``--baseline-epochs`` + 1 epochs (the gate skips the first: start-up),
   ``trainperf baseline``;
2. runs ``--reruns`` identical short runs of ``--rerun-epochs`` + 1 epochs, each
   ``trainperf check``-ed against the baseline;
3. runs one more short run whose step sleeps ``--slowdown`` (20 %) of the baseline's median step
   longer, and checks it too.

It prints, per rerun, the verdict and the rows that moved (change, band, status), then the counts
``regressions among identical: k/N`` and ``+20 %: <verdict>``. The host's load average is printed
too: the machine is shared, so the other tenants are part of the "job beside". Prints figures
only; it never passes or fails on a time (exit 0 whatever the verdicts).

    python benchmarks/gate_noise.py [--reruns 10] [--burners 1] [--quiet-baseline] [--keep DIR]

With ``--quiet-baseline`` the reruns meet a load the baseline did not have: their epochs are
slower, and the gate says so (a regression of the machine, not of the code; ``check``'s notes
name the CPU contention). Wall time alone cannot tell the two apart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf.cli.main import main as trainperf
from trainperf.lightning import PerformanceProfilerCallback, ResourceMonitorCallback

STEP_S = 0.020
BATCHES = 12


class TwentyMs(L.LightningModule):
    """A ~20 ms step: ``sleep_s`` of sleep (the device's time, as the host sees it) and a tiny
    linear layer on the CPU."""

    def __init__(self, sleep_s: float) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.sleep_s = sleep_s

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def run(root: Path, epochs: int, sleep_s: float) -> Path:
    """One run of ``epochs`` epochs into ``root`` (its run folder)."""
    data = TensorDataset(torch.randn(BATCHES * 4, 8), torch.randn(BATCHES * 4, 1))
    L.Trainer(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        callbacks=[
            PerformanceProfilerCallback(),
            ResourceMonitorCallback(print_summary=False),
        ],
    ).fit(TwentyMs(sleep_s), DataLoader(data, batch_size=4))
    return root


@contextlib.contextmanager
def burners(count: int) -> Iterator[list[int]]:
    """``count`` processes spinning on a core each, killed on the way out."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def check(baseline: Path, current: Path, out: Path) -> dict[str, Any]:
    """``trainperf check baseline current --json out``, its table sent nowhere; the JSON."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        trainperf(["check", str(baseline), str(current), "--json", str(out)])
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def moved_rows(result: dict[str, Any]) -> list[str]:
    """The rows that left their band, as ``figure change/band status``."""
    out = []
    for row in result["rows"]:
        if row.get("moved") is None:
            continue
        band = row.get("band") or {}
        unit = band.get("unit", "")
        change = row.get("change")
        shown = f"{change:+.4g} {unit}" if change is not None else "-"
        out.append(
            f"{row['figure']} {shown} (band {band.get('down', 0):+.3g} / "
            f"{band.get('up', 0):+.3g} {unit}): {row['status']}"
            + (f" (judged by {row['held_by']})" if row.get("held_by") else "")
        )
    return out


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=10)
    parser.add_argument("--baseline-epochs", type=int, default=12)
    parser.add_argument("--rerun-epochs", type=int, default=4)
    parser.add_argument("--burners", type=int, default=1, help="busy-loop processes beside")
    parser.add_argument("--slowdown", type=float, default=0.2, help="extra share of the step")
    parser.add_argument(
        "--quiet-baseline", action="store_true", help="no busy loop beside the baseline"
    )
    parser.add_argument("--keep", type=Path, help="keep the run folders here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(1)

    root = args.keep or Path(tempfile.mkdtemp(prefix="gate_noise_"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"before: {load()}")
    verdicts: list[str] = []
    held = 0  # identical reruns where a part of the epoch moved alone
    with burners(0 if args.quiet_baseline else args.burners) as pids:
        print(f"{len(pids)} busy-loop process(es) beside the baseline: pids {pids}")
        base_run = run(root / "baseline", args.baseline_epochs + 1, STEP_S)
    baseline = root / "baseline.json"
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        trainperf(["baseline", str(base_run), "-o", str(baseline)])
    figures = json.loads(baseline.read_text(encoding="utf-8"))["figures"]
    walls = figures["epoch_wall_s"]["values"]
    print(
        f"baseline: {len(walls)} kept epochs, epoch wall median "
        f"{figures['epoch_wall_s']['median']:.4f} s (min {min(walls):.4f}, max "
        f"{max(walls):.4f}); {load()}"
    )
    with burners(args.burners) as pids:
        print(f"{len(pids)} busy-loop process(es) beside the reruns: pids {pids}")
        for i in range(args.reruns):
            current = run(root / f"rerun{i}", args.rerun_epochs + 1, STEP_S)
            result = check(baseline, current, root / f"rerun{i}.json")
            verdicts.append(result["verdict"])
            held += any(row.get("held_by") for row in result["rows"])
            print(f"rerun {i + 1:2d}: {result['verdict']}; {load()}")
            for line in moved_rows(result):
                print(f"    {line}")
        # +20 % of the step as measured in the baseline (sleep + Lightning's own work), not of
        # the sleep alone
        step_s = figures["batch_median_s"]["median"]
        slow_sleep = STEP_S + args.slowdown * step_s
        slow = run(root / "slow", args.rerun_epochs + 1, slow_sleep)
        slow_result = check(baseline, slow, root / "slow.json")
        print(
            f"+{100 * args.slowdown:.0f} % step ({1e3 * step_s:.1f} ms step, "
            f"{1e3 * slow_sleep:.1f} ms sleep): {slow_result['verdict']}; {load()}"
        )
        for line in moved_rows(slow_result):
            print(f"    {line}")

    regressions = sum(v == "regression" for v in verdicts)
    print(f"regressions among identical: {regressions}/{len(verdicts)}")
    print(f"identical reruns with a part of the epoch that moved alone: {held}/{len(verdicts)}")
    print(f"+{100 * args.slowdown:.0f} %: {slow_result['verdict']}")
    print(f"verdicts of the identical reruns: {verdicts}")
    print(f"run folders: {root}; {time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
