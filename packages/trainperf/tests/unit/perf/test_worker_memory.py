"""Workers' memory classified on real DataLoader workers: a dataset holding a ~200 MB Python list
read by 2 workers is copy-on-read naming the attribute; the same data as a numpy array is not.
Plus the plateau / growing / stable rules on plain series."""

from __future__ import annotations

import os
import time
from collections import defaultdict

import numpy as np
import psutil
import pytest
from torch.utils.data import DataLoader, Dataset
from trainperf.analysis.memory_growth.workers import (
    WorkerMemoryPoint,
    classify,
    classify_samples,
    python_containers,
    worker_memory_finding,
)
from trainperf.records.monitoring import ResourceSample
from trainperf.records.run_record import DatasetContainer

ITEMS = 40
ROWS = 1_800_000  # tuples of two floats: ~112 bytes each with the list's slot, ~200 MB


class ListDataset(Dataset[tuple[int, int, float]]):
    """Rows as a Python list of tuples: reading a slice touches every object's refcount."""

    def __init__(self) -> None:
        self.rows = [(float(i), float(i + 1)) for i in range(ROWS)]

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> tuple[int, int, float]:
        step = ROWS // ITEMS
        total = sum(a for a, _ in self.rows[index * step : (index + 1) * step])
        return index, os.getpid(), total


class ArrayDataset(ListDataset):
    """The same rows as one numpy array: reading copies nothing."""

    def __init__(self) -> None:
        self.rows = np.stack([np.arange(ROWS, dtype=float), np.arange(1, ROWS + 1, dtype=float)], 1)  # type: ignore[assignment]

    def __getitem__(self, index: int) -> tuple[int, int, float]:
        step = ROWS // ITEMS
        return index, os.getpid(), float(self.rows[index * step : (index + 1) * step, 0].sum())  # type: ignore[call-overload]


def _as_list(batch: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    return batch


def _read_workers(dataset: Dataset[tuple[int, int, float]]) -> dict[int, list[WorkerMemoryPoint]]:
    """Per worker pid: USS and distinct items fetched, read after every batch."""
    loader = DataLoader(
        dataset, batch_size=2, num_workers=2, collate_fn=_as_list, multiprocessing_context="fork"
    )
    seen: dict[int, set[int]] = defaultdict(set)
    points: dict[int, list[WorkerMemoryPoint]] = defaultdict(list)
    procs: dict[int, psutil.Process] = {}
    for batch in loader:
        for index, pid, _ in batch:
            seen[pid].add(index)
            procs.setdefault(pid, psutil.Process(pid))
        now = time.perf_counter()
        for pid, proc in procs.items():
            uss = float(proc.memory_full_info().uss)
            points[pid].append(WorkerMemoryPoint(now, uss, len(seen[pid])))
    return points


@pytest.mark.skipif(not hasattr(os, "fork"), reason="copy-on-read needs fork")
def test_python_list_read_by_two_workers_is_copy_on_read() -> None:
    dataset = ListDataset()
    containers = python_containers(dataset)
    assert [c.attribute for c in containers] == ["ListDataset.rows"]
    assert 150 < containers[0].mb < 260
    points = _read_workers(dataset)
    assert len(points) == 2
    classes = [classify(str(pid), pts, containers) for pid, pts in points.items()]
    assert all(c is not None and c.kind == "copy_on_read" for c in classes), classes
    for c in classes:
        assert c is not None
        assert c.growth_mb > 50  # each worker read half the list
        assert c.r_fetched is not None
        assert c.r_fetched >= 0.9
    finding = worker_memory_finding([c for c in classes if c is not None], persistent_workers=False)
    assert finding is not None
    assert finding.evidence["attribute"] == "ListDataset.rows"
    assert "ListDataset.rows" in finding.title
    assert "copy-on-read" in finding.title
    assert "numpy" in finding.suggestion


@pytest.mark.skipif(not hasattr(os, "fork"), reason="copy-on-read needs fork")
def test_same_data_as_numpy_is_no_finding() -> None:
    dataset = ArrayDataset()
    containers = python_containers(dataset)
    assert containers == []
    points = _read_workers(dataset)
    classes = [classify(str(pid), pts, containers) for pid, pts in points.items()]
    assert all(c is not None and c.kind == "stable" for c in classes), classes
    assert worker_memory_finding([c for c in classes if c is not None]) is None


def _series(mb: list[float], fetched: list[int] | None = None) -> list[WorkerMemoryPoint]:
    return [
        WorkerMemoryPoint(60.0 * k, v * 2**20, None if fetched is None else fetched[k])
        for k, v in enumerate(mb)
    ]


def test_plateau_growing_and_stable() -> None:
    plateau = classify("w0", _series([50, 200, 300, 320, 322, 322, 323, 323, 323]))
    growing = classify("w1", _series([50, 90, 130, 170, 210, 250, 290, 330, 370]))
    stable = classify("w2", _series([50, 60, 55, 62, 60, 61, 60, 61, 62]))
    assert plateau is not None
    assert plateau.kind == "plateau"
    assert growing is not None
    assert growing.kind == "growing"
    assert growing.rate_mb_per_min == pytest.approx(40.0)
    assert stable is not None
    assert stable.kind == "stable"
    assert classify("w3", _series([50, 60])) is None
    f = worker_memory_finding([plateau, growing, stable])
    assert f is not None
    assert f.id == "worker_memory"
    assert f.severity == "warning"
    assert "keep growing" in f.title
    only_plateau = worker_memory_finding([plateau, stable])
    assert only_plateau is not None
    assert only_plateau.severity == "info"


def test_growth_without_big_containers_is_not_copy_on_read() -> None:
    """Growth that tracks the samples fetched but no large Python container: not copy-on-read."""
    pts = _series([50, 100, 150, 200, 250, 300], fetched=[0, 10, 20, 30, 40, 50])
    got = classify("w0", pts, containers=())
    assert got is not None
    assert got.kind == "growing"


def test_classify_samples_per_pid_from_resource_records() -> None:
    big = DatasetContainer(
        attribute="MyDataset.rows", kind="list", length=10**6, python_bytes=300 * 2**20
    )
    samples = [
        ResourceSample(
            t=10.0 * k,
            phase="train",
            workers_uss={"101": (40 + 30 * k) * 2**20, "102": min(40 + 60 * k, 200) * 2**20},
        )
        for k in range(9)
    ]
    samples.append(ResourceSample(t=95.0, rank=1, workers_uss={"999": 1.0}))  # another rank
    got = {c.worker: c for c in classify_samples(samples)}
    assert set(got) == {"101", "102"}
    assert got["101"].kind == "growing"
    assert got["102"].kind == "plateau"
    with_list = {c.worker: c.kind for c in classify_samples(samples, [big])}
    assert with_list == {"101": "copy_on_read", "102": "copy_on_read"}


def test_short_warm_up_with_a_small_tail_is_a_plateau() -> None:
    """A short run's allocator warm-up (as on a 5-epoch synthetic_debug run): +69 MB, 24 % of it
    in the last third but only ~17 MB: a plateau, not a leak."""
    got = classify("w0", _series([49, 60, 80, 95, 100, 100, 104, 110, 118]))
    assert got is not None
    assert got.tail_pct > 15
    assert got.kind == "plateau"
