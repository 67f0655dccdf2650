"""DataLoader workers' memory classified: stable, plateau, growing or copy-on-read.

Copy-on-read is the dataset's Python containers copied into every worker that reads them.
Lightning-free.

Why per worker and by USS: a forked worker shares the main process's pages until it writes them.
Reading a Python object writes it (its reference count), so a dataset that holds a big ``list`` /
``dict`` of Python objects is copied, page by page, into every worker that reads it: each
worker's unique memory (USS) grows with the number of *distinct* samples it has fetched, up to the
size of the container, and summed RSS does not show it (the long-standing PyTorch DataLoader
"memory leak" with many workers). Numpy / Arrow arrays hold their data in one buffer that reading
never writes, so they are not copied.

:func:`classify` judges one worker's series of :class:`WorkerMemoryPoint` (time, USS, distinct
samples fetched when known):

- ``stable``: grew less than ``worker_memory_growth_mb``;
- ``copy_on_read``: grew, the dataset holds Python containers of at least
  ``copy_on_read_container_mb`` (:func:`python_containers` names them), and the growth tracks the
  distinct samples fetched (Pearson r >= ``copy_on_read_min_r``) or, without those counts, stays
  within the containers' size;
- ``plateau``: grew, but less than ``worker_memory_tail_pct`` % of the growth (or less than
  ``worker_memory_tail_mb``) came in the last third of the series (a cache filling, allocator
  arenas reaching their high-water mark);
- ``growing``: the growth goes on (a per-worker cache without a bound, a leak).

:func:`worker_memory_finding` turns the classes of a run's workers into one finding with the
remedies. The thresholds live in :data:`trainperf.core.findings.THRESHOLDS`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding, risk_score, threshold
from trainperf.records.monitoring import ResourceSample
from trainperf.records.run_record import DatasetContainer

__all__ = [
    "KINDS",
    "WorkerMemoryClass",
    "WorkerMemoryPoint",
    "classify",
    "classify_samples",
    "python_containers",
    "worker_memory_finding",
]

#: The classes, mildest first.
KINDS = ("stable", "plateau", "growing", "copy_on_read")
_MB = 1024.0 * 1024.0
#: Items looked at per container to estimate the bytes of its Python objects.
_SAMPLE = 2000
_CONTAINERS = (list, tuple, dict, set, frozenset)


@dataclass(frozen=True)
class WorkerMemoryPoint:
    """One reading of one worker: ``t`` in seconds (any origin, increasing), its unique memory,
    and the distinct samples it had fetched by then (``None`` when unknown)."""

    t: float
    uss_bytes: float
    fetched: int | None = None


@dataclass(frozen=True)
class WorkerMemoryClass:
    """One worker's memory, classified (see the module doc): ``worker`` its label (pid or
    ``loader/index``), USS at the first and last reading (MiB), ``tail_pct`` the share of the
    growth in the last third of the series (%), ``r_fetched`` the Pearson r between USS and
    distinct samples fetched (``None``: unknown), ``container`` the dataset's largest Python
    container, for ``copy_on_read``."""

    worker: str
    kind: str
    start_mb: float
    end_mb: float
    growth_mb: float
    tail_pct: float
    rate_mb_per_min: float
    r_fetched: float | None = None
    container: DatasetContainer | None = None


def _object_bytes(value: object, depth: int) -> int:
    """Bytes of ``value``'s Python objects down to ``depth`` levels; an array counts its header
    only (its buffer is not written by reading)."""
    if isinstance(value, np.ndarray):
        return sys.getsizeof(value) - (value.nbytes if value.base is None else 0)
    size = sys.getsizeof(value)
    if depth <= 0:
        return size
    if isinstance(value, dict):
        return size + sum(
            _object_bytes(k, depth - 1) + _object_bytes(v, depth - 1) for k, v in value.items()
        )
    if isinstance(value, list | tuple | set | frozenset):
        return size + sum(_object_bytes(v, depth - 1) for v in value)
    slots = getattr(value, "__dict__", None)
    if isinstance(slots, dict):
        return size + _object_bytes(slots, depth - 1)
    return size


def _size(attribute: str, value: object) -> DatasetContainer:
    assert isinstance(value, _CONTAINERS)
    n = len(value)
    step = max(n / _SAMPLE, 1.0)  # at most _SAMPLE items, evenly spread
    at = [int(k * step) for k in range(min(n, _SAMPLE))]
    if isinstance(value, list | tuple):
        items = [value[i] for i in at]
    else:  # a dict's (key, value) pairs
        wanted = set(at)
        pairs = value.items() if isinstance(value, dict) else value
        items = [v for i, v in enumerate(pairs) if i in wanted]
    per = sum(_object_bytes(v, 3) for v in items) / max(len(items), 1)
    total = sys.getsizeof(value) + int(per * n)
    return DatasetContainer(
        attribute=attribute,
        kind=type(value).__name__,
        length=n,
        python_bytes=total,
        sampled=len(items) < n,
    )


def python_containers(dataset: object) -> list[DatasetContainer]:
    """The Python containers in ``dataset``'s attributes (and one level into plain objects and
    wrapped datasets such as ``Subset.dataset``) whose objects total at least
    ``copy_on_read_container_mb``, largest first. Reads attributes only; cost grows with
    :data:`_SAMPLE`, not with the container."""
    floor = threshold("copy_on_read_container_mb") * _MB
    found: list[DatasetContainer] = []
    seen: set[int] = set()

    def visit(obj: object, prefix: str, depth: int) -> None:
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict) or id(obj) in seen:
            return
        seen.add(id(obj))
        for name, value in attrs.items():
            label = f"{prefix}.{name}"
            if isinstance(value, _CONTAINERS):
                if len(value) == 0:
                    continue
                size = _size(label, value)
                if size.python_bytes >= floor:
                    found.append(size)
            elif depth > 0 and hasattr(value, "__dict__") and not isinstance(value, type):
                visit(value, label, depth - 1)

    visit(dataset, type(dataset).__name__, 1)
    return sorted(found, key=lambda c: -c.python_bytes)


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 3 or float(np.ptp(x)) == 0.0 or float(np.ptp(y)) == 0.0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def classify(
    worker: str,
    points: Sequence[WorkerMemoryPoint],
    containers: Sequence[DatasetContainer] = (),
) -> WorkerMemoryClass | None:
    """The class of one worker's readings (sorted by time here); ``None`` with fewer than three
    readings. ``containers``: the dataset's (:func:`python_containers`)."""
    pts = sorted(points, key=lambda p: p.t)
    if len(pts) < 3:
        return None
    t = np.array([p.t for p in pts], float)
    uss = np.array([p.uss_bytes for p in pts], float) / _MB
    growth = float(uss[-1] - uss[0])
    cut = t[0] + (t[-1] - t[0]) * 2.0 / 3.0
    tail_from = float(np.interp(cut, t, uss))
    tail_pct = 100.0 * max(float(uss[-1]) - tail_from, 0.0) / growth if growth > 0 else 0.0
    minutes = (t[-1] - t[0]) / 60.0
    rate = growth / float(minutes) if minutes > 0 else 0.0
    r = None
    fetched = [p.fetched for p in pts]
    if all(f is not None for f in fetched):
        r = _pearson(np.array(fetched, float), uss)
    big = [c for c in containers if c.python_bytes >= threshold("copy_on_read_container_mb") * _MB]
    if r is not None:
        tracks = r >= threshold("copy_on_read_min_r")
    else:  # without fetch counts: growth no bigger than what the containers can explain
        tracks = growth <= 1.5 * sum(c.mb for c in big)
    tail_mb = growth * tail_pct / 100.0
    if growth < threshold("worker_memory_growth_mb"):
        kind = "stable"
    elif big and tracks:
        kind = "copy_on_read"
    elif tail_pct >= threshold("worker_memory_tail_pct") and tail_mb >= threshold(
        "worker_memory_tail_mb"
    ):
        kind = "growing"
    else:
        kind = "plateau"
    return WorkerMemoryClass(
        worker=worker,
        kind=kind,
        start_mb=round(float(uss[0]), 1),
        end_mb=round(float(uss[-1]), 1),
        growth_mb=round(growth, 1),
        tail_pct=round(tail_pct, 1),
        rate_mb_per_min=round(rate, 2),
        r_fetched=None if r is None else round(r, 3),
        container=big[0] if kind == "copy_on_read" else None,
    )


def _remedy(kind: str, persistent: bool | None) -> str:
    if kind == "copy_on_read":
        keep = (
            ""
            if persistent
            else "; with persistent_workers=False every epoch's new workers copy it again"
        )
        return (
            "Hold the data as numpy / Arrow arrays (one buffer that reading never writes: e.g. "
            "variable-length items concatenated in one array plus an offsets array, strings in "
            "a numpy bytes array or a pyarrow array), or load it lazily per item from disk; fewer "
            "workers "
            f"each copy less in total{keep}."
        )
    if kind == "growing":
        return (
            "Something in the workers keeps growing: bound any per-worker cache (functools."
            "lru_cache(maxsize=...), an LRU dict), do not keep per-sample results on the dataset "
            "object, and check for native leaks (image decoders) by running the loader alone."
        )
    return (
        "Bounded (an allocator high-water mark or a cache that filled): nothing grows further. "
        "If the level itself is too high: build batches in shared memory (default_collate does), "
        "free large temporaries early, or try MALLOC_MMAP_THRESHOLD_ / MALLOC_ARENA_MAX (glibc)."
    )


def worker_memory_finding(
    classes: Iterable[WorkerMemoryClass],
    persistent_workers: bool | None = None,
) -> Finding | None:
    """One finding for a run's workers (the most serious class wins); ``None`` when every worker
    is stable or there are none."""
    found = [c for c in classes if c.kind != "stable"]
    if not found:
        return None
    kind = max((c.kind for c in found), key=KINDS.index)
    mine = [c for c in found if c.kind == kind]
    total = sum(c.growth_mb for c in mine)
    worst = max(mine, key=lambda c: c.growth_mb)
    if kind == "copy_on_read":
        cont = worst.container
        assert cont is not None
        title = (
            f"DataLoader workers copy {cont.attribute} ({cont.kind} of {cont.length:,} items, "
            f"~{cont.mb:.0f} MB of Python objects) as they read it: {len(mine)} worker(s) grew "
            f"{total:.0f} MB (copy-on-read)"
        )
    elif kind == "growing":
        title = (
            f"{len(mine)} DataLoader worker(s) keep growing: +{total:.0f} MB, "
            f"{worst.rate_mb_per_min:.1f} MB/min at most, no plateau"
        )
    else:
        title = (
            f"{len(mine)} DataLoader worker(s) grew {total:.0f} MB, then levelled off "
            f"(plateau at ~{worst.end_mb:.0f} MB)"
        )
    severity = "warning" if kind in ("copy_on_read", "growing") else "info"
    evidence: dict[str, object] = {
        "workers": [
            {f.name: getattr(c, f.name) for f in fields(c) if f.name != "container"} for c in found
        ],
    }
    if worst.container is not None:
        cont = worst.container
        evidence["attribute"] = cont.attribute
        evidence["container"] = {
            "kind": cont.kind,
            "length": cont.length,
            "python_mb": round(cont.mb, 1),
            "sampled": cont.sampled,
        }
    return Finding(
        id=FindingId.WORKER_MEMORY,
        severity=severity,
        score=risk_score(severity) if severity == "warning" else 0.0,
        title=title,
        evidence=evidence,
        threshold={
            "growth_mb": threshold("worker_memory_growth_mb"),
            "tail_pct": threshold("worker_memory_tail_pct"),
            "tail_mb": threshold("worker_memory_tail_mb"),
            "container_mb": threshold("copy_on_read_container_mb"),
            "min_r": threshold("copy_on_read_min_r"),
        },
        suggestion=_remedy(kind, persistent_workers),
        source="resources",
        confidence="measured" if worst.r_fetched is not None else "likely",
    )


def classify_samples(
    samples: Iterable[ResourceSample], containers: Sequence[DatasetContainer] = ()
) -> list[WorkerMemoryClass]:
    """Classify each worker (by pid) of rank 0's resource samples (their ``workers_uss``); the
    samples carry no fetch counts, so copy-on-read is judged by the containers' size."""
    series: dict[str, list[WorkerMemoryPoint]] = {}
    for s in samples:
        if s.rank != 0:
            continue
        for pid, uss in s.workers_uss.items():
            if math.isfinite(uss):
                series.setdefault(pid, []).append(WorkerMemoryPoint(s.t, uss))
    out = [classify(pid, pts, containers) for pid, pts in series.items()]
    return [c for c in out if c is not None]
