"""Time budget of a GPU check: each part's expected seconds on the device machine, from what the
first H200 run measured (``../shared/gpu/h200-2026-11-26/``: the part seconds of
``gpu_check.json`` and the timestamps of ``runs/train/train.log``), so that ``--plan`` shows
before the run whether it fits :data:`LIMIT_S` (the device lends 15 minutes in all, start-up and
transfers included; one command may run 10).

A training run costs :data:`START_S` (interpreter, imports, CUDA, the run folder) plus its
samples at :data:`FIT_SAMPLES_PER_S` (the whole fit's rate with validation, checkpoints and
monitors: slower than the training rate) plus, for the first run only, generating the synthetic
dataset at :data:`DATASET_SAMPLES_PER_S` (later runs of the same spec read it from the cache).
The arms: half the DataLoader workers at :data:`FEWER_WORKERS_RATE` of the rate (the first run's
input was near its limit), ``model.compile`` plus :data:`COMPILE_S` (an estimate: nothing was
compiled on a GPU yet). Each arm's run is stopped at :data:`ARM_TIMEOUT_FACTOR` times its budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: What ``--plan`` budgets must stay under: 9 of the device's 15 minutes.
LIMIT_S = 540.0
#: Process start to the first epoch without dataset generation: train.log 22:50:18 (the part
#: started) -> 22:50:33 (trainer built).
START_S = 15.0
#: Synthetic receipts generated per second with 16 workers: 1,680 (train 1,600, val 40, test 40)
#: in 29 s (train.log 22:50:33 -> 22:51:02).
DATASET_SAMPLES_PER_S = 58.0
#: Samples per second over a whole fit, validation and checkpoints included: train_sync, 6,400
#: training samples in 73.5 - 15 s (dataset cached). The training rate alone was 165.
FIT_SAMPLES_PER_S = 109.0
#: The rate with half the cores' workers, against all but two (a guess on the safe side: the
#: first run's workers were 2.7 cores busy of 14, ``resources.jsonl``).
FEWER_WORKERS_RATE = 0.6
#: torch.compile (inductor) of ResNet-18 DBNet forward and backward, first time on the machine.
COMPILE_S = 90.0
#: Measured on the H200 (gpu_check.json): seams 49.1 s, analyze 1.1, report 3.1, fixture 0.0.
SEAMS_S = 55.0
ANALYZE_S = 5.0
REPORT_S = 5.0
PREFLIGHT_S = 5.0
FIXTURE_S = 2.0
#: ``trainperf try`` runs for its budget, then reports.
TRY_OVERHEAD_S = 10.0
#: The device machine's usable cores (both kinds lent: 16), for the arms' worker counts.
DEVICE_CORES = 16
#: A run past this many times its budget is stopped (it could not fit the device time anyway).
ARM_TIMEOUT_FACTOR = 2.0


@dataclass(frozen=True)
class Item:
    """One budgeted part (or arm): its name, expected seconds, and how that was reckoned."""

    name: str
    seconds: float
    how: str
    skipped: str = ""  # why it does not run (then it does not count)


def training_s(samples: int, *, dataset: int = 0, rate: float = FIT_SAMPLES_PER_S) -> float:
    """Expected seconds of one training run of ``samples`` training samples in all (epochs
    included), generating ``dataset`` synthetic receipts first when not cached."""
    return START_S + samples / rate + dataset / DATASET_SAMPLES_PER_S


def total_s(items: Iterable[Item]) -> float:
    """The seconds of the items that run."""
    return sum(i.seconds for i in items if not i.skipped)


def budget_items(
    *,
    epochs: int,
    train_batches: int,
    try_budget_s: float,
    seams: str,
    skips: Iterable[str],
    cores: int,
) -> list[Item]:
    """Every part of a GPU check and every arm, with its expected seconds on the device machine;
    the ones in ``skips`` (or ``seams`` ``skip``) marked skipped."""
    from scripts.gpucheck.arms import ARM_EPOCHS, REFERENCE_BATCH, arms_for

    skipped = set(skips)
    per_epoch = REFERENCE_BATCH * train_batches
    main = epochs * per_epoch
    splits = per_epoch + 80  # val 40 + test 40 receipts, generated with the training split
    seams_s = {"run": SEAMS_S, "list": 10.0, "skip": 0.0}[seams]
    items = [
        Item("preflight", PREFLIGHT_S, "versions, GPU, wheel check"),
        Item("seams", seams_s, f"pytest ({seams}); 49.1 s on the H200"),
        Item(
            "train",
            training_s(main, dataset=splits),
            f"{epochs} x {per_epoch} samples, the dataset ({splits} receipts) generated",
        ),
        Item("nvml", 0.0, "read while train runs"),
        Item("train_fast", training_s(main), f"{epochs} x {per_epoch} samples"),
        Item("train_sync", training_s(main), f"{epochs} x {per_epoch} samples"),
    ]
    for arm in arms_for(cores):
        rate = FIT_SAMPLES_PER_S
        how = f"{ARM_EPOCHS} x {per_epoch} samples"
        if arm.name == "workers_half":
            rate *= FEWER_WORKERS_RATE
            how += f" at {FEWER_WORKERS_RATE:.0%} of the rate"
        seconds = training_s(ARM_EPOCHS * per_epoch, rate=rate)
        if arm.name == "compile":
            seconds += COMPILE_S
            how += f" + {COMPILE_S:.0f} s compiling (estimated)"
        items.append(Item(f"arms/{arm.name}", seconds, how))
    items += [
        Item("analyze", ANALYZE_S, "two traces; 1.1 s on the H200 (one)"),
        Item("report", REPORT_S, "3.1 s on the H200"),
        Item("try", try_budget_s + TRY_OVERHEAD_S, f"--try-budget {try_budget_s:.0f}s"),
        Item("fixture", FIXTURE_S, "two traces copied"),
    ]
    out = []
    for item in items:
        part = item.name.split("/", 1)[0]
        why = ""
        if part in skipped:
            why = "--skip"
        elif part == "seams" and seams == "skip":
            why = "--seams skip"
        out.append(Item(item.name, item.seconds, item.how, why))
    return out


def render_budget(items: Sequence[Item], skips: Sequence[str]) -> list[str]:
    """``--plan``'s budget lines: each item, its seconds and how they were reckoned, the total."""
    total = total_s(items)
    flags = " ".join(f"--skip {s}" for s in dict.fromkeys(skips))
    lines = [
        f"Budget on the device machine ({DEVICE_CORES} cores; the device command below, "
        f"{flags or 'nothing skipped'}), seconds from the first H200 run's timings "
        "(scripts/gpucheck/budget.py):",
    ]
    for i in items:
        seconds = f"skipped ({i.skipped})" if i.skipped else f"{i.seconds:5.0f} s"
        lines.append(f"  {i.name:<18} {seconds:>16}  {i.how}")
    verdict = "fits" if total <= LIMIT_S else "does NOT fit"
    lines.append(
        f"  total {total:.0f} s of {LIMIT_S:.0f} s (9 of the device's 15 minutes): {verdict}; "
        f"each arm is stopped at {ARM_TIMEOUT_FACTOR:.0f}x its budget"
    )
    return lines


def planned_arms(items: Sequence[Item], train_batches: int) -> dict[str, Any]:
    """What the document shows while no arm has run: the arms on the device machine, their
    budgets (``items`` of the device command) and the device run's total."""
    from scripts.gpucheck.arms import REFERENCE_BATCH, arms_for

    return {
        "cores": DEVICE_CORES,
        "samples_per_epoch": REFERENCE_BATCH * train_batches,
        "arms": {
            a.name: {"overrides": list(a.overrides), "what": a.what} for a in arms_for(DEVICE_CORES)
        },
        "budget": {i.name: i.seconds for i in items},
        "total_s": total_s(items),
        "limit_s": LIMIT_S,
    }
