"""Regenerate ``docs/performance/baseline.md`` from two ``synthetic_debug`` runs: before and after
issue 6.

* **before**: the numpy reference targets (``tests/reference_targets_numpy.py``) in the collate and
  no polygon cache — ``data._target_=benchmarks.cache_epoch.ReferenceTargetsDataModule``;
* **after**: the compiled targets and the PolygonCache (a fresh folder, so the run starts cold).

Both are real ``python -m ocr.train experiment=synthetic_debug callbacks=monitoring`` runs (short:
``--epochs`` epochs, ``--limit-train-batches`` training batches each), run one after the other
from the repository root; their ``perf/epochs.jsonl`` are summarised with
:func:`trainperf.analysis.baseline.load_source` (validation stage, first epoch skipped) and compared
with :func:`trainperf.analysis.gate.check_baseline`. The document says which command made it, when,
and on
what machine; it is never written by hand.

    python benchmarks/baseline_doc.py [--out docs/performance/baseline.md] [--epochs 4]
        [--limit-train-batches 3] [--work-dir DIR] [--baseline-json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from trainperf.analysis.baseline import (  # noqa: E402
    Baseline,
    Figure,
    load_source,
    make_baseline,
    write_baseline,
)
from trainperf.analysis.gate import check_baseline  # noqa: E402
from trainperf.core.clock import PHASES  # noqa: E402
from trainperf.core.significance import Outcome  # noqa: E402
from trainperf.records.epochs import EpochRecord  # noqa: E402
from trainperf.records.files import read_records  # noqa: E402

COMMAND = "python benchmarks/baseline_doc.py"


class TrainingFailed(RuntimeError):
    """A training subprocess exited non-zero; the message holds the end of its log."""


def subprocess_env() -> dict[str, str]:
    """This environment for a child that imports this checkout's ``ocr``: the repository first
    on ``PYTHONPATH``, what was there kept (carried packages on a device machine), wandb
    offline."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": path}


def train(
    run_dir: Path,
    overrides: list[str],
    log: Path,
    during: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> list[str]:
    """Run ``python -m ocr.train`` with ``overrides`` into ``run_dir``, its output into ``log``;
    returns the argv. ``during`` is called with the running process (it must return before the
    process is waited for). Raises :class:`TrainingFailed` on a non-zero exit."""
    argv = [sys.executable, "-m", "ocr.train", *overrides, f"hydra.run.dir={run_dir}"]
    print(f"$ {shlex.join(argv[1:])}", flush=True)
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=subprocess_env(), stdout=handle, stderr=subprocess.STDOUT
        )
        try:
            if during is not None:
                during(proc)
            returncode = proc.wait()
        finally:
            if proc.poll() is None:  # ``during`` raised: no orphan training left behind
                proc.kill()
                proc.wait()
    if returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
        raise TrainingFailed(
            f"training run failed (exit {returncode}); log {log}:\n" + "\n".join(tail)
        )
    return argv[1:]


def merge(baselines: list[Baseline]) -> Baseline:
    """One baseline from several runs of the same configuration: per-epoch values and batch
    times pooled, medians recomputed (machine and workload from the first)."""
    first = baselines[0]
    figures = {
        name: Figure(
            figure.unit,
            figure.better,
            tuple(v for b in baselines if name in b.figures for v in b.figures[name].values),
        )
        for name, figure in first.figures.items()
    }
    return msgspec.structs.replace(
        first,
        figures=figures,
        batch_times_s=[t for b in baselines for t in b.batch_times_s],
        epochs=[e for b in baselines for e in b.epochs],
    )


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{1e3 * value:.1f}"


def _count(counts: dict[str, int], name: str) -> str:
    """A cache counter; 0 when the cache reported something else but not this (a zero count is
    not carried), a dash without any cache counter."""
    if not any(key.startswith("polygon_cache_") for key in counts):
        return "–"
    return str(counts.get(name, 0))


def _num(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


def _ratio(before: float | None, after: float | None) -> str:
    if before is None or after is None or after == 0:
        return "–"
    return f"{before / after:.1f}×"


def _median(baseline: Baseline, name: str) -> float | None:
    figure = baseline.figures.get(name)
    return None if figure is None else figure.median


def _spread(baseline: Baseline, name: str) -> str:
    figure = baseline.figures.get(name)
    if not figure or len(figure.values) < 2 or not figure.median:
        return "–"
    values = figure.values
    return f"±{50 * (max(values) - min(values)) / figure.median:.0f} %"


def _batch_summary(times: list[float]) -> dict[str, float | None]:
    if not times:
        return dict.fromkeys(("count", "mean", "median", "p95", "max"), None)
    array = np.asarray(times)
    return {
        "count": float(array.size),
        "mean": float(array.mean()),
        "median": float(np.median(array)),
        "p95": float(np.quantile(array, 0.95)),
        "max": float(array.max()),
    }


def render(
    before: Baseline,
    after: Baseline,
    records: dict[str, list[EpochRecord]],
    commands: dict[str, list[str]],
    argv: list[str],
) -> str:
    machine = after.machine
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    check = check_baseline(before, after, allow_other_machine=True)
    lines = [
        "# Performance baseline: `synthetic_debug` validation, before and after issue 6",
        "",
        "<!-- Generated file: do not edit by hand. Regenerate with the command below. -->",
        "",
        f"Generated by `{shlex.join(['python', 'benchmarks/baseline_doc.py', *argv])}` on {now}, "
        f"on `{machine.get('hostname')}` ({machine.get('platform')}, {machine.get('cpu_count')} "
        f"CPUs, device {machine.get('device')}, torch {machine.get('torch_version')}, "
        f"Python {machine.get('python')}).",
        "",
        "* **before**: the numpy reference DB targets in the collate, no polygon cache "
        "(the pipeline before issue 6).",
        "* **after**: the compiled DB targets and the PolygonCache (fresh cache folder).",
        "",
        f"Runs ({len(records) // 2} of each, alternating before / after, from the repository "
        "root; the 'after' runs share one cache folder, so only the first starts cold; "
        "run directories are temporary):",
        "",
    ]
    for label, cmd in commands.items():
        lines += [f"* {label}: `{shlex.join(['python', *cmd])}`"]
    kept = sorted(set(after.epochs))
    workload = after.workload
    lines += [
        "",
        f"Validation: {workload['samples']} receipts in "
        f"{workload['num_batches']} batches of {workload['batch_size']}, "
        f"num_workers {workload['num_workers']}. Figures are medians over the "
        f"validation epochs {kept} of every run, pooled (the first epoch is skipped: worker "
        "start-up, numba cache load, cold polygon cache); ± is half the epoch-to-epoch range. "
        "Wall times on a shared machine are noisy: read ratios, not single milliseconds.",
        "",
        "## Per-phase validation time (s per epoch)",
        "",
        "| phase | before | after | before / after |",
        "|---|---:|---:|---:|",
    ]
    for phase in PHASES:
        name = f"phase_{phase}_s"
        b, a = _median(before, name), _median(after, name)
        lines.append(f"| {phase} | {_num(b, '.3f')} | {_num(a, '.3f')} | {_ratio(b, a)} |")
    b, a = _median(before, "epoch_wall_s"), _median(after, "epoch_wall_s")
    lines.append(
        f"| **epoch wall** | **{_num(b, '.3f')}** {_spread(before, 'epoch_wall_s')} | "
        f"**{_num(a, '.3f')}** {_spread(after, 'epoch_wall_s')} | **{_ratio(b, a)}** |"
    )
    lines += [
        "",
        "## Batches, throughput, DataLoader workers",
        "",
        "| figure | before | after | before / after |",
        "|---|---:|---:|---:|",
    ]
    bb, ab = _batch_summary(before.batch_times_s), _batch_summary(after.batch_times_s)
    lines.append(
        f"| batches measured | {_num(bb['count'], '.0f')} | {_num(ab['count'], '.0f')} | |"
    )
    for key in ("mean", "median", "p95", "max"):
        lines.append(
            f"| batch time {key} (ms) | {_ms(bb[key])} | {_ms(ab[key])} | "
            f"{_ratio(bb[key], ab[key])} |"
        )
    rows = [
        ("samples_per_sec", "throughput (samples/s)", ".2f", True),
        ("worker_fetch_ms_per_batch", "worker fetch (ms/batch)", ".1f", False),
        ("worker_collate_ms_per_batch", "worker collate (ms/batch)", ".1f", False),
        ("targets_ms_per_image", "target generation (ms/image)", ".2f", False),
    ]
    for name, label, spec, higher in rows:
        b, a = _median(before, name), _median(after, name)
        ratio = _ratio(a, b) if higher else _ratio(b, a)
        lines.append(f"| {label} | {_num(b, spec)} | {_num(a, spec)} | {ratio} |")
    rate = _median(after, "polygon_cache_hit_rate")
    lines.append(
        f"| polygon cache hit rate | no cache | {_num(None if rate is None else 100 * rate, '.1f')}"
        " % | |"
    )
    lines += [
        "",
        "## Validation epochs (all, none skipped)",
        "",
        "| run | epoch | wall (s) | data wait (s) | collate (ms/batch) | targets (ms/image) | "
        "cache hits | cache misses |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, recs in records.items():
        for rec in recs:
            if rec.stage != "val":
                continue
            worker, counts = rec.worker_s, rec.worker_counts
            batches, samples = rec.num_batches, rec.samples
            collate = 1e3 * worker["collate"] / batches if "collate" in worker and batches else None
            targets = 1e3 * worker["targets"] / samples if "targets" in worker and samples else None
            lines.append(
                f"| {label} | {rec.epoch} | {rec.wall_s:.3f} | "
                f"{rec.phases_s.get('data_wait', 0.0):.3f} | {_num(collate, '.1f')} | "
                f"{_num(targets, '.2f')} | {_count(counts, 'polygon_cache_hits')} | "
                f"{_count(counts, 'polygon_cache_misses')} |"
            )
    moved = [r for r in check.rows if r.status in (Outcome.IMPROVEMENT, Outcome.REGRESSION)]
    lines += [
        "",
        "## What the regression gate says (`trainperf check` before → after)",
        "",
        f"Verdict: **{check.verdict}**. Figures that moved beyond their noise-aware band:",
        "",
    ]
    for row in moved:
        if row.ratio is None or row.band is None:
            continue
        lines.append(
            f"* {row.figure}: {_num(row.baseline, '.4g')} → {_num(row.current, '.4g')} "
            f"{row.unit} ({row.status}; band {row.band.down:+.0f} / {row.band.up:+.0f} "
            f"{row.band.unit})"
        )
    if not moved:
        lines.append("* none")
    lines += [
        "",
        "Reproduce the numbers behind this page: "
        "`trainperf baseline RUN -o NAME.json` on either run directory, then "
        "`trainperf check NAME.json OTHER_RUN`.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "docs" / "performance" / "baseline.md"
    )
    parser.add_argument("--epochs", type=int, default=4, help="training epochs per run (>= 2)")
    parser.add_argument("--limit-train-batches", type=int, default=3, help="per epoch")
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs of each, alternating before/after (2)"
    )
    parser.add_argument("--work-dir", type=Path, help="keep the runs here (default: a temp dir)")
    parser.add_argument(
        "--baseline-json", type=Path, help="also write the 'after' run's baseline JSON here"
    )
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2 (the first validation epoch is skipped)")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")

    with tempfile.TemporaryDirectory(prefix="baseline-doc-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        common = [
            "experiment=synthetic_debug",
            "callbacks=monitoring",
            f"trainer.max_epochs={args.epochs}",
            f"trainer.limit_train_batches={args.limit_train_batches}",
        ]
        commands: dict[str, list[str]] = {}
        runs: dict[str, list[Baseline]] = {"before": [], "after": []}
        records: dict[str, list[EpochRecord]] = {}
        for repeat in range(1, args.repeats + 1):
            # Alternating, so a slow spell of the shared machine hits both sides.
            for label, extra_overrides in (
                (
                    "before",
                    [
                        "data._target_=benchmarks.cache_epoch.ReferenceTargetsDataModule",
                        "data.polygon_cache.enabled=false",
                    ],
                ),
                (
                    "after",
                    [
                        "data.polygon_cache.enabled=true",
                        f"data.polygon_cache.dir={work / 'polygon-cache'}",
                    ],
                ),
            ):
                run_dir = work / f"{label}-{repeat}"
                try:
                    cmd = train(
                        run_dir, [*common, *extra_overrides], work / f"{label}-{repeat}.log"
                    )
                except TrainingFailed as exc:
                    raise SystemExit(str(exc)) from None
                commands.setdefault(label, cmd)
                runs[label].append(load_source(run_dir))
                records[f"{label} #{repeat}"] = read_records(EpochRecord.path(run_dir), EpochRecord)
        before, after = merge(runs["before"]), merge(runs["after"])
        extra = sys.argv[1:]
        text = render(before, after, records, commands, extra)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
        if args.baseline_json:
            baseline = make_baseline(work / "after-1", name="synthetic_debug_val")
            print(f"wrote {write_baseline(baseline, args.baseline_json)}")
        b, a = before.figures, after.figures
        for name in ("epoch_wall_s", "worker_collate_ms_per_batch", "targets_ms_per_image"):
            if name in b and name in a:
                print(
                    f"{name}: before {statistics.median(b[name].values):.4g}, after "
                    f"{statistics.median(a[name].values):.4g}"
                )


if __name__ == "__main__":
    main()
