"""Deterministic quantities of the validation data path (no wall clock): PolygonCache hit and
miss COUNTS per epoch with two DataLoader workers, persistent or not; how many times the target
function runs per epoch; cache hits that are bit-exact against the numpy reference; no targets at
test time.

The real data module and collate are used; counts come back from the workers with each batch
(``trainperf.probe.worker.report_count`` through ``InstrumentedLoader``). Target calls are counted
with a shared-memory counter patched into the modules before the workers fork.

OpenCV's thread pool does not survive ``fork``: a worker forked after this process ran a
multi-threaded OpenCV call hangs on its first OpenCV call (``worker_init``'s
``cv2.setNumThreads(1)``). Other tests in the same session use OpenCV, so the fixture below stops
the parent's pool (one thread) while these tests fork workers, and restores it afterwards.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from trainperf.probe.worker import InstrumentedLoader, WorkerTiming

import ocr.data.cache
import ocr.data.collate
import ocr.data.targets
from ocr.data.compact import expand_batch
from ocr.data.datamodule import ReceiptDataModule
from ocr.data.synth import generate_dataset
from tests.reference_targets_numpy import reference_numpy_db_targets

VAL_ITEMS = 6
MAPS = {
    "prob_maps": "prob_map",
    "prob_masks": "prob_mask",
    "thresh_maps": "thresh_map",
    "thresh_masks": "thresh_mask",
}

pytestmark = pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork",
    reason="target calls are counted through memory shared with forked DataLoader workers",
)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("receipts")
    generate_dataset(root, splits={"val": VAL_ITEMS, "test": 2}, seed=5)
    return root


@pytest.fixture(autouse=True)
def single_threaded_opencv() -> Iterator[None]:
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # joins the pool's threads, so forked workers do not inherit its locks
    yield
    cv2.setNumThreads(threads)


@pytest.fixture
def target_calls(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A counter of ``make_db_targets`` calls in any process (the collate's and the cache's)."""
    counter = multiprocessing.get_context("fork").Value("i", 0)
    real = ocr.data.targets.make_db_targets

    def counting(*args: Any, **kwargs: Any) -> Any:
        with counter.get_lock():
            counter.value += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(ocr.data.cache, "make_db_targets", counting)
    monkeypatch.setattr(ocr.data.collate, "make_db_targets", counting)
    return counter


def datamodule(dataset_dir: Path, cache_dir: Path | None, persistent: bool) -> ReceiptDataModule:
    cache = None if cache_dir is None else {"enabled": True, "dir": str(cache_dir)}
    dm = ReceiptDataModule(
        dataset_dir=dataset_dir,
        canvas_size=128,
        batch_size=2,
        num_workers=2,
        persistent_workers=persistent,
        polygon_cache=cache,
    )
    dm.setup("validate")
    return dm


def run_epochs(
    loader: Any,
    epochs: int,
    target_calls: Any,
    on_batch: Callable[[int, dict[str, Any]], None] | None = None,
) -> list[dict[str, int]]:
    """Per epoch: summed worker counters, ``batches``, ``samples`` and ``target_calls``."""
    timings: list[WorkerTiming] = []
    handle = InstrumentedLoader(loader, timings.append)
    results = []
    try:
        for epoch in range(epochs):
            timings.clear()
            before = target_calls.value
            for batch in loader:
                if on_batch is not None:
                    on_batch(epoch, batch)
            counts: dict[str, int] = {"batches": len(timings)}
            counts["samples"] = sum(t.samples for t in timings)
            for timing in timings:
                for name, n in timing.counts.items():
                    counts[name] = counts.get(name, 0) + n
            counts["target_calls"] = target_calls.value - before
            results.append(counts)
    finally:
        handle.restore()
    return results


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh-workers", "persistent"])
def test_second_epoch_is_all_hits(
    dataset_dir: Path, tmp_path: Path, target_calls: Any, persistent: bool
) -> None:
    dm = datamodule(dataset_dir, tmp_path / "cache", persistent)
    cached: list[dict[str, Any]] = []  # compared after the loop: no OpenCV between forks
    # Compact batches (the maps packed in the workers), expanded as the module does on the device.
    epochs = run_epochs(
        dm.val_dataloader(),
        3,
        target_calls,
        lambda e, b: cached.append(expand_batch(b)) if e else None,
    )
    assert [e["batches"] for e in epochs] == [3, 3, 3]
    first, *later = epochs
    assert first["polygon_cache_misses"] == VAL_ITEMS
    assert first.get("polygon_cache_hits", 0) == 0
    assert first["target_calls"] == VAL_ITEMS
    assert first["polygon_cache_bytes_written"] > 0
    for epoch in later:
        assert epoch["polygon_cache_hits"] == VAL_ITEMS
        assert epoch.get("polygon_cache_misses", 0) == 0
        assert epoch["target_calls"] == 0  # no unexpected recomputation
        assert epoch.get("polygon_cache_corrupt", 0) == 0
    # Maps read back from the cache in the workers equal the numpy reference, bit for bit.
    compared = 0
    for batch in cached:
        for b, polygons in enumerate(batch["polygons"]):
            want = reference_numpy_db_targets(polygons, 128, 128)
            for key, name in MAPS.items():
                differing = int(np.count_nonzero(batch[key][b].numpy() != want[name]))
                assert differing == 0, f"{batch['filenames'][b]} {key}: {differing} pixels"
            compared += 1
    assert compared == 2 * VAL_ITEMS

    # A new run (new data module, new workers) on the same folder starts warm.
    again = run_epochs(
        datamodule(dataset_dir, tmp_path / "cache", persistent).val_dataloader(), 1, target_calls
    )
    assert again[0]["polygon_cache_hits"] == VAL_ITEMS
    assert again[0]["target_calls"] == 0


def test_without_cache_targets_run_once_per_item_and_epoch(
    dataset_dir: Path, target_calls: Any
) -> None:
    epochs = run_epochs(datamodule(dataset_dir, None, True).val_dataloader(), 2, target_calls)
    assert [e["target_calls"] for e in epochs] == [VAL_ITEMS, VAL_ITEMS]
    assert [e["samples"] for e in epochs] == [VAL_ITEMS, VAL_ITEMS]
    assert not any(name.startswith("polygon_cache") for e in epochs for name in e)


def test_no_targets_at_test_time(dataset_dir: Path, tmp_path: Path, target_calls: Any) -> None:
    dm = datamodule(dataset_dir, tmp_path / "cache", False)
    dm.setup("test")
    keys: set[str] = set()
    epochs = run_epochs(dm.test_dataloader(), 1, target_calls, lambda _, b: keys.update(b))
    assert epochs[0]["target_calls"] == 0
    assert epochs[0]["samples"] == 2
    assert not keys & set(MAPS)
    assert not any(name.startswith("polygon_cache") for name in epochs[0])
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*/*"))
