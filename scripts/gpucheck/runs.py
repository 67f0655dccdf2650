"""The check's training runs (their Hydra overrides), a logged subprocess from the repository
root, and the logs archive."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.baseline_doc import subprocess_env
from scripts.gpucheck import REPO_ROOT

#: The A/B's arms on CUDA (issue 32), each named in full by its overrides, so that they measure
#: the same two configurations whatever the config's CUDA defaults are. The default one is what
#: the first H200 run trained (16-mixed with a GradScaler, NCHW, AdamW's foreach loop); the fast
#: one is bf16-mixed (no scaler), channels_last and fused AdamW. ``++`` sets a key whether or not
#: the config has it.
DEFAULT_ARM = (
    "trainer.precision=16-mixed",
    "model.channels_last=false",
    "++model.optimizer.fused=false",
    "++model.optimizer.foreach=true",
)
FAST_ARM = (
    "trainer.precision=bf16-mixed",
    "model.channels_last=true",
    "++model.optimizer.fused=true",
    "++model.optimizer.foreach=false",
)


def workers_for(cores: int) -> int:
    """DataLoader workers sized to the cores: all but two (the training process and the
    resource monitor's thread), at least one."""
    return max(1, cores - 2)


def train_overrides(
    cuda: bool,
    epochs: int,
    train_batches: int,
    cores: int,
    *,
    sync: bool,
    arm: tuple[str, ...] = DEFAULT_ARM,
) -> list[str]:
    """The Hydra overrides of the check's training runs. GPU: ``preset=example`` on synthetic
    receipts sized for ``train_batches`` batches of 16, in the A/B ``arm`` (:data:`DEFAULT_ARM`
    or :data:`FAST_ARM`); CPU: ``experiment=synthetic_debug``. Monitors on; a run profiles its
    last epoch, the ``sync`` run synchronizes CUDA at every phase switch instead."""
    workers = workers_for(cores)
    if cuda:
        out = [
            "preset=example",
            "data=synthetic",
            f"data.synthetic.splits.train={16 * train_batches}",
            f"data.synthetic.workers={cores}",
            *arm,
        ]
    else:
        out = ["experiment=synthetic_debug"]
    out += [
        f"data.num_workers={workers}",
        "callbacks=monitoring",
        f"trainer.max_epochs={epochs}",
        f"trainer.limit_train_batches={train_batches}",
        "callbacks.model_summary=null",
    ]
    if sync:
        return [*out, "callbacks.performance_profiler.sync_cuda=true"]
    return [
        *out,
        "callbacks.profiler.enabled=true",
        f"callbacks.profiler.schedule.epochs=[{epochs - 1}]",
        "callbacks.profiler.schedule.active=3",
        "callbacks.profiler.schedule.warmup=1",
        "callbacks.profiler.trace.gzip=true",
    ]


def run_logged(argv: Sequence[str], log: Path, timeout: float | None = None) -> int:
    """Run ``argv`` from the repository root (our environment), its output into ``log``; returns
    the exit code."""
    print(f"$ {shlex.join(argv)}", flush=True)
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.run(
            list(argv),
            cwd=REPO_ROOT,
            env=subprocess_env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    return proc.returncode


def perf(*args: str) -> list[str]:
    """``trainperf ARGS`` as this interpreter runs it (no console script needed)."""
    return [sys.executable, "-m", "trainperf.cli.main", *args]


def head(path: Path, lines: int) -> str:
    """The first ``lines`` lines of a text file."""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[:lines])


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file."""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def write_logs(archive: Path, work: Path) -> None:
    """The runs' logs, perf files and trainperf outputs (no checkpoints, no traces) as a .tar.gz."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    keep = (".log", ".json", ".jsonl", ".md", ".xml", ".yaml")
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file() and path.name.endswith(keep) and "profiler_traces" not in path.parts:
                tar.add(path, arcname=str(path.relative_to(work)))
