"""The validation epoch of ``experiment=synthetic_debug`` with and without the PolygonCache.

Configurations, each over the same validation split with ``num_workers=2`` and
``persistent_workers`` false and true:

* ``reference``: the collate as it was before issue 6 — the numpy reference targets
  (``tests/reference_targets_numpy.py``) and no cache (:class:`ReferenceTargetsCollate`);
* ``fast``: the compiled targets (``ocr.data.targets``), no cache;
* ``fast+cache``: the compiled targets behind a fresh :class:`~ocr.data.cache.PolygonCache`
  (cold in the first epoch).

The real data module (from the composed Hydra config) and the real ``DBCollateFN`` are used; the
loaders are instrumented with :class:`trainperf.probe.worker.InstrumentedLoader`, so the collate and
target times are measured inside the DataLoader workers and the cache hit/miss counts are the
ones the cache reports with ``trainperf.probe.worker.report_count``. Epochs are interleaved across
the configurations (epoch 1 of each, then epoch 2 of each, ...) because the machine is shared and
noisy: only figures from one run are compared. Printed per configuration and epoch: cache hit
rate, worker-side collate ms per batch, target ms per image, epoch wall time; then the goals:
hit rate >= 99 % from the second epoch on, collate time >= 5x lower than the reference.

Prints figures only; never passes or fails on a time. ``--json OUT`` writes a bench JSON
(schema ``trainperf/bench`` v1) that ``trainperf baseline`` / ``trainperf check`` read.

    python benchmarks/cache_epoch.py [--epochs 3] [--json OUT]

:class:`ReferenceTargetsDataModule` is also usable from Hydra (``benchmarks/baseline_doc.py``
runs ``python -m ocr.train data._target_=benchmarks.cache_epoch.ReferenceTargetsDataModule``
from the repository root for its "before" run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # tests/ is not an installed package

from trainperf.analysis.baseline import BENCH_SCHEMA  # noqa: E402

from ocr.data.collate import DBCollateFN  # noqa: E402
from ocr.data.datamodule import ReceiptDataModule  # noqa: E402
from ocr.data.targets import DBTargets  # noqa: E402
from tests.reference_targets_numpy import reference_numpy_db_targets  # noqa: E402

MAPS = ("prob_map", "prob_mask", "thresh_map", "thresh_mask")


class _ReferenceTargets:
    """Stands in for the collate's cache: every lookup computes the maps with the numpy
    reference (the algorithm before issue 6) and reports nothing, i.e. no cache at all."""

    def __repr__(self) -> str:
        return "reference numpy targets, no cache"

    def get_or_make(
        self,
        polygons: Sequence[np.ndarray],
        height: int,
        width: int,
        *,
        shrink_ratio: float,
        thresh_min: float,
        thresh_max: float,
        out: DBTargets,
    ) -> bool:
        maps = reference_numpy_db_targets(
            polygons, height, width, shrink_ratio, thresh_min, thresh_max
        )
        for name in MAPS:
            np.copyto(getattr(out, name), maps[name])
        return False


class ReferenceTargetsCollate(DBCollateFN):
    """``DBCollateFN`` with the numpy reference targets and no cache (the collate before issue 6).

    ``DBCollateFN`` asks its ``cache`` for every item's maps (``get_or_make``), so handing it a
    stand-in that always computes with the reference swaps the algorithm without touching the
    production module.

    Args:
        **kwargs: ``DBCollateFN`` arguments (shrink_ratio, thresh_min, thresh_max,
            inference_mode); ``cache`` is not accepted.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("cache", None)
        super().__init__(**kwargs, cache=_ReferenceTargets())  # type: ignore[arg-type]


class ReferenceTargetsDataModule(ReceiptDataModule):
    """``ReceiptDataModule`` whose training and validation loaders collate with
    :class:`ReferenceTargetsCollate` (reference targets, no polygon cache): the pipeline before
    issue 6. Same arguments as ``ReceiptDataModule``; ``polygon_cache`` is ignored."""

    def _reference(self, loader: Any) -> Any:
        loader.collate_fn = ReferenceTargetsCollate(**self.collate_kwargs)
        return loader

    def train_dataloader(self) -> Any:
        return self._reference(super().train_dataloader())

    def val_dataloader(self) -> Any:
        return self._reference(super().val_dataloader())


def synthetic_debug_data(**overrides: Any) -> dict[str, Any]:
    """The ``data`` section of ``experiment=synthetic_debug`` as a plain dict, with overrides."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from ocr.runtime import register_resolvers

    register_resolvers()
    with initialize_config_module("ocr.configs", version_base="1.3"):
        cfg = compose("train", overrides=["experiment=synthetic_debug"])
    data = OmegaConf.to_container(cfg.data, resolve=True)
    assert isinstance(data, dict)
    data.pop("_target_", None)
    data.pop("_convert_", None)
    data.update(overrides)
    return data


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "cuda_devices": [],  # the workload runs on the CPU (DataLoader workers)
        "device": "cpu",
    }


class Config:
    """One benchmarked configuration: its data module, instrumented loader and per-epoch rows."""

    def __init__(self, label: str, targets: str, persistent: bool, cache_dir: Path | None) -> None:
        from trainperf.probe.worker import InstrumentedLoader

        self.label = label
        settings = synthetic_debug_data(
            persistent_workers=persistent,
            num_workers=2,
            polygon_cache=(
                {"enabled": True, "max_bytes": 1 << 30, "dir": str(cache_dir)}
                if cache_dir is not None
                else None
            ),
        )
        cls = ReferenceTargetsDataModule if targets == "reference" else ReceiptDataModule
        self.datamodule = cls(**settings)
        self.datamodule.prepare_data()
        self.datamodule.setup("validate")
        self.loader = self.datamodule.val_dataloader()
        self.timings: list[Any] = []
        self.handle = InstrumentedLoader(self.loader, self.timings.append)
        self.rows: list[dict[str, float | None]] = []

    def run_epoch(self) -> None:
        self.timings.clear()
        start = time.perf_counter()
        for _ in self.loader:
            pass
        wall = time.perf_counter() - start
        batches = len(self.timings)
        samples = sum(t.samples for t in self.timings)
        hits = sum(t.counts.get("polygon_cache_hits", 0) for t in self.timings)
        misses = sum(t.counts.get("polygon_cache_misses", 0) for t in self.timings)
        targets_ns = sum(t.parts_ns.get("targets", 0) for t in self.timings)
        self.rows.append(
            {
                "hit_rate": hits / (hits + misses) if hits + misses else None,
                "hits": float(hits),
                "misses": float(misses),
                "collate_ms_per_batch": sum(t.collate_ns for t in self.timings) / 1e6 / batches,
                "targets_ms_per_image": targets_ns / 1e6 / samples,
                "wall_s": wall,
            }
        )

    def close(self) -> None:
        self.handle.restore()
        del self.loader  # persistent workers exit with their iterator


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _steady(rows: list[dict[str, float | None]], key: str) -> list[float]:
    """Values of ``key`` from the second epoch on (the first one starts workers, fills caches)."""
    return [float(v) for r in rows[1:] if (v := r[key]) is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="validation epochs (>= 2)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write a bench JSON")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2 (the first epoch fills the cache)")

    with tempfile.TemporaryDirectory(prefix="cache-epoch-") as tmp:
        configs = []
        for persistent in (False, True):
            tag = "persistent" if persistent else "non-persistent"
            configs += [
                Config(f"reference/{tag}", "reference", persistent, None),
                Config(f"fast/{tag}", "fast", persistent, None),
                Config(f"fast+cache/{tag}", "fast", persistent, Path(tmp) / tag),
            ]
        samples = len(configs[0].datamodule.datasets["val"])
        print(
            f"synthetic_debug validation split: {samples} receipts, canvas "
            f"{configs[0].datamodule.canvas_size}, batch {configs[0].datamodule.eval_batch_size}, "
            f"num_workers 2; {args.epochs} epochs per configuration, interleaved"
        )
        for _ in range(args.epochs):
            for config in configs:
                config.run_epoch()
        for config in configs:
            config.close()

    print(
        f"\n{'configuration':28} {'epoch':>5} {'hit rate':>9} {'collate ms/batch':>17} "
        f"{'targets ms/image':>17} {'wall s':>7}"
    )
    for config in configs:
        for epoch, row in enumerate(config.rows, start=1):
            rate = row["hit_rate"]
            print(
                f"{config.label:28} {epoch:5d} {_fmt(None if rate is None else 100 * rate, '8.1f')}"
                f"{'' if rate is None else '%'} {row['collate_ms_per_batch']:17.2f} "
                f"{row['targets_ms_per_image']:17.2f} {row['wall_s']:7.2f}"
            )

    figures: dict[str, Any] = {}
    units: dict[str, str] = {}
    better: dict[str, str] = {}
    print("\nfrom the second epoch on (median over epochs):")
    for persistent in ("non-persistent", "persistent"):
        by = {c.label.split("/")[0]: c for c in configs if c.label.endswith("/" + persistent)}
        ref = statistics.median(_steady(by["reference"].rows, "collate_ms_per_batch"))
        fast = statistics.median(_steady(by["fast"].rows, "collate_ms_per_batch"))
        cached = statistics.median(_steady(by["fast+cache"].rows, "collate_ms_per_batch"))
        rates = _steady(by["fast+cache"].rows, "hit_rate")
        print(
            f"  persistent_workers={persistent == 'persistent'}: hit rate "
            f"{100 * min(rates):.1f} % (lowest epoch; goal >= 99 %), collate ms/batch reference "
            f"{ref:.2f} | fast {fast:.2f} ({ref / fast:.1f}x) | fast+cache {cached:.2f} "
            f"({ref / cached:.1f}x lower than the reference; goal >= 5x)"
        )
        for config in by.values():
            for key, unit in (
                ("collate_ms_per_batch", "ms/batch"),
                ("targets_ms_per_image", "ms/image"),
            ):
                name = f"{config.label}.{key}"
                figures[name], units[name], better[name] = _steady(config.rows, key), unit, "lower"
        name = f"fast+cache/{persistent}.hit_rate"
        figures[name], units[name], better[name] = rates, "fraction", "higher"
        name = f"{persistent}.collate_speedup_x"
        figures[name], units[name], better[name] = ref / cached, "x", "higher"

    if args.json:
        doc = {
            "schema": BENCH_SCHEMA,
            "v": 1,
            "name": "cache_epoch",
            "t": time.time(),
            "machine": machine_info(),
            "stage": "val",
            "skip_epochs": 1,
            "workload": {
                "samples": samples,
                "batch_size": configs[0].datamodule.eval_batch_size,
                "num_workers": 2,
                "canvas_size": configs[0].datamodule.canvas_size,
            },
            "figures": figures,
            "units": units,
            "better": better,
            "per_epoch": {c.label: c.rows for c in configs},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"\nbench JSON written to {args.json}")


if __name__ == "__main__":
    main()
