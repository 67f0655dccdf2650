"""The training DataLoader alone (no model): float32 batches against compact ones (issue 32).

Both loaders come from the real data module of ``preset=example data=synthetic`` (640 px canvas,
batch 16, the synthetic receipts of the demo's spec), the same workers, ``pin_memory`` as the
run would have it (only with CUDA); one has ``compact_batches=false`` (the float32 pipeline:
normalised float32 images, four float32 target maps, 6 tensors), the other the default compact
batches (uint8 images, one packed target tensor). Each is instrumented with
:class:`trainperf.probe.worker.InstrumentedLoader`, so every batch reports its bytes and tensors,
its worker-side time and how the consumer's wait split into waiting for a worker and the hand-over
(the worker's send, the main process's receive and pin).

Epochs are interleaved (epoch k of each configuration, then epoch k + 1 of each, ...) on a shared,
noisy machine; the first round (worker start-up, page cache) is a warm-up and not counted.
Printed per configuration: samples/s (training samples over the epochs' wall time), bytes and
tensors per batch, receive + pin ms per batch, waiting-for-a-worker ms per batch, worker-side ms
per sample (fetch, collate and their parts); then the ratios of the issue's acceptance: bytes
per batch >= 2.5x smaller, samples/s >= 1.3x with 2 workers. Prints figures only; never passes or
fails on a time.

    python benchmarks/loader_throughput.py [--workers 2] [--rounds 4] [--canvas 640]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from trainperf.probe.worker import InstrumentedLoader, WorkerTiming  # noqa: E402

from ocr.data.datamodule import ReceiptDataModule  # noqa: E402


def example_data(**overrides: Any) -> dict[str, Any]:
    """The ``data`` section of ``preset=example data=synthetic`` as a plain dict."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from ocr.runtime import register_resolvers

    register_resolvers()
    with initialize_config_module("ocr.configs", version_base="1.3"):
        cfg = compose("train", overrides=["preset=example", "data=synthetic"])
    data = OmegaConf.to_container(cfg.data, resolve=True)
    assert isinstance(data, dict)
    data.pop("_target_", None)
    data.pop("_convert_", None)
    data.update(overrides)
    return data


@dataclass
class Figures:
    """What one configuration measured over its counted epochs."""

    name: str
    samples: int = 0
    batches: int = 0
    wall_s: float = 0.0
    bytes: int = 0
    tensors: int = 0
    wait_ns: int = 0
    worker_wait_ns: int = 0
    worker_ns: dict[str, int] = field(default_factory=dict)
    epoch_rates: list[float] = field(default_factory=list)

    def add(self, timing: WorkerTiming) -> None:
        self.batches += 1
        self.samples += timing.samples
        self.bytes += timing.batch_bytes
        self.tensors = timing.batch_tensors
        self.wait_ns += timing.wait_ns
        self.worker_wait_ns += timing.worker_wait_ns
        acc = self.worker_ns
        for name, ns in {
            "fetch": timing.fetch_ns,
            "collate": timing.collate_ns,
            **timing.parts_ns,
        }.items():
            acc[name] = acc.get(name, 0) + ns

    @property
    def samples_per_sec(self) -> float:
        return self.samples / self.wall_s if self.wall_s else 0.0

    @property
    def bytes_per_batch(self) -> float:
        return self.bytes / max(self.batches, 1)

    def per_batch_ms(self, ns: int) -> float:
        return ns / 1e6 / max(self.batches, 1)


class Config:
    """One loader and its figures; timings before :meth:`count` are the warm-up."""

    def __init__(self, name: str, data: dict[str, Any]) -> None:
        self.datamodule = ReceiptDataModule(**data)
        self.datamodule.prepare_data()
        self.datamodule.setup("fit")
        self.loader = self.datamodule.train_dataloader()
        self.figures = Figures(name)
        self.counting = False
        self.handle = InstrumentedLoader(self.loader, self._on_batch)

    def _on_batch(self, timing: WorkerTiming) -> None:
        if self.counting:
            self.figures.add(timing)

    def epoch(self, counting: bool) -> None:
        self.counting = counting
        samples_before = self.figures.samples
        start = time.perf_counter()
        for _ in self.loader:
            pass
        wall = time.perf_counter() - start
        if counting:
            self.figures.wall_s += wall
            self.figures.epoch_rates.append((self.figures.samples - samples_before) / wall)


def _print(figures: Figures) -> None:
    f = figures
    receive_ms = f.per_batch_ms(f.wait_ns - f.worker_wait_ns)
    rates = ", ".join(f"{r:.1f}" for r in f.epoch_rates)
    print(f"{f.name}:")
    print(f"  samples/s           {f.samples_per_sec:8.1f}   (per epoch: {rates})")
    print(f"  bytes per batch     {f.bytes_per_batch / 1e6:8.2f} MB in {f.tensors} tensors")
    print(f"  receive + pin       {receive_ms:8.2f} ms per batch (after the worker was done)")
    print(f"  waiting for worker  {f.per_batch_ms(f.worker_wait_ns):8.2f} ms per batch")
    per_sample = {k: v / 1e6 / max(f.samples, 1) for k, v in sorted(f.worker_ns.items())}
    print("  worker ms/sample    " + ", ".join(f"{k} {v:.2f}" for k, v in per_sample.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--rounds", type=int, default=4, help="epochs per config (default 4)")
    parser.add_argument("--canvas", type=int, default=640, help="canvas side px (default 640)")
    parser.add_argument("--batch-size", type=int, default=16, help="batch size (default 16)")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (the first is a warm-up)")
    common = {
        "num_workers": args.workers,
        "canvas_size": args.canvas,
        "batch_size": args.batch_size,
    }
    configs = [
        Config(
            "float32 batches (compact_batches=false)", example_data(**common, compact_batches=False)
        ),
        Config(
            "compact batches (compact_batches=true)", example_data(**common, compact_batches=True)
        ),
    ]
    loader = configs[0].loader
    print(
        f"training DataLoader alone: {len(loader.dataset)} samples/epoch, batch "  # type: ignore[arg-type]
        f"{args.batch_size}, {args.canvas} px, {args.workers} workers, pin_memory="
        f"{loader.pin_memory}; {args.rounds} interleaved epochs each, the first a warm-up"
    )
    for round_index in range(args.rounds):
        for config in configs:
            config.epoch(counting=round_index > 0)
    old, new = (c.figures for c in configs)
    for figures in (old, new):
        _print(figures)
    bytes_ratio = old.bytes_per_batch / max(new.bytes_per_batch, 1.0)
    speed = new.samples_per_sec / old.samples_per_sec if old.samples_per_sec else float("nan")
    paired = [n / o for o, n in zip(old.epoch_rates, new.epoch_rates, strict=True) if o > 0]
    print(f"bytes per batch: {bytes_ratio:.2f}x smaller (goal >= 2.5x)")
    print(
        f"samples/s: {speed:.2f}x the float32 pipeline's (goal >= 1.3x with 2 workers); "
        f"per interleaved epoch pair: median {statistics.median(paired):.2f}x, "
        f"range {min(paired):.2f}-{max(paired):.2f}x"
    )
    for config in configs:
        config.handle.restore()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
