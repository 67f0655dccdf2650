"""The columnar event table every trace analysis reads, and its error.

The columnar event table that every trace analysis reads (:class:`EventTable`, built by
:mod:`~trainperf.analysis.trace.ingest`), its parts, and :class:`TraceError` for bad input."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainperf.errors import InputError

__all__ = ["EventTable", "Kind", "MemoryTable", "TraceError", "TraceSource", "category_kind"]


class TraceError(InputError, ValueError):
    """A trace file or directory that cannot be analysed; the message names the path and why."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class Kind:
    """Integer codes of the normalised event categories (column :attr:`EventTable.kind`)."""

    OTHER = 0
    CPU_OP = 1
    USER_ANNOTATION = 2
    PYTHON = 3
    RUNTIME = 4
    DRIVER = 5
    KERNEL = 6
    MEMCPY = 7
    MEMSET = 8
    GPU_ANNOTATION = 9
    TRACE_SPAN = 10
    #: Kineto's ``cuda_sync`` events (``_ExperimentalConfig(enable_cuda_sync_events=True)``):
    #: a CUDA synchronization (stream, event, context sync; or a stream's wait on an event),
    #: drawn on the device's row and joined to its runtime call by ``correlation``.
    SYNC = 11

    #: Host-side kinds that nest on a thread (used for self time and phases).
    HOST = (CPU_OP, USER_ANNOTATION, PYTHON, RUNTIME, DRIVER)
    #: Device activity kinds (busy time on a GPU stream).
    DEVICE = (KERNEL, MEMCPY, MEMSET)


# Lower-cased category -> kind. The 2021 schema spells them "Operator", "Runtime", "Kernel", ...
CATEGORY_KIND: dict[str, int] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "python_function": Kind.PYTHON,
    "python_function_call": Kind.PYTHON,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "driver": Kind.DRIVER,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "trace": Kind.TRACE_SPAN,
    "cuda_sync": Kind.SYNC,
}


def category_kind(cat: Any) -> int:
    """The :class:`Kind` of an event's ``cat`` (:data:`CATEGORY_KIND`; ``OTHER`` for an unknown
    or non-string one)."""
    return CATEGORY_KIND.get(cat.lower(), Kind.OTHER) if isinstance(cat, str) else Kind.OTHER


@dataclass(frozen=True)
class TraceSource:
    """One trace file that went into an :class:`EventTable`.

    Args:
        path: the file.
        rank: DDP rank from ``distributedInfo.rank``, else from a ``rank<N>`` in the file name,
            else ``None``.
        rank_from: where ``rank`` came from: ``"distributedInfo"``, ``"filename"`` or ``None``.
        world_size: ``distributedInfo.world_size`` or ``None``.
        schema: ``"relative"`` (``ts`` relative to ``baseTimeNanoseconds``, torch >= 2.4-ish) or
            ``"absolute"`` (epoch µs, 2021-2024 traces).
        framework: the ``Framework`` metadata (``"pytorch-lightning"`` for Lightning's profiler).
        device_properties: ``deviceProperties`` as written (GPU name, ``totalGlobalMem``, ...).
        n_events: number of entries in ``traceEvents``.
        parse_s: seconds spent reading and decoding the JSON (wall clock).
        invalid_durations: complete events whose ``dur`` was negative, missing or not a number
            (read as zero length).
    """

    path: Path
    rank: int | None
    rank_from: str | None
    world_size: int | None
    schema: str
    framework: str | None
    device_properties: tuple[dict[str, Any], ...]
    n_events: int
    parse_s: float
    invalid_durations: int = 0


@dataclass
class MemoryTable:
    """``[memory]`` instant events as columns (one row per allocation or free).

    Args:
        src: source index per row.
        ts: time, ns relative to the table origin.
        nbytes: signed bytes of the event (negative = free).
        total_allocated: allocator's total after the event; ``-1`` where the trace lacks it (2021).
        total_reserved: allocator's reserved bytes after the event; ``-1`` where absent.
        device_type: c10 device type (0 = CPU, 1 = CUDA).
        device_id: device index (-1 = CPU).
    """

    src: np.ndarray
    ts: np.ndarray
    nbytes: np.ndarray
    total_allocated: np.ndarray
    total_reserved: np.ndarray
    device_type: np.ndarray
    device_id: np.ndarray

    def __len__(self) -> int:
        return int(self.ts.shape[0])


@dataclass
class EventTable:
    """All complete (``ph: "X"``) events of one or more traces as numpy columns.

    Times are int64 ns relative to :attr:`origin_ns` (absolute epoch ns of the earliest event).
    Derived nesting columns (``parent``, ``self_ns``) are filled by :func:`load_traces`.

    Args:
        sources: the files, indexed by :attr:`src`.
        names: interned event names (Lightning's embedded callback dicts removed); ``name``
            indexes into it.
        thread_keys: ``(src, pid, tid)`` per thread code (pid/tid as strings, so ``25738`` and
            ``"25738"`` are one thread).
        src, kind, name, thread, start, dur, correlation: per-event columns (correlation ``-1``
            where absent). Codes are narrow to bound a large trace's memory: ``src``, ``name``,
            ``thread`` (and ``parent``) int32, ``kind`` int8, ``correlation`` int32 where every
            id fits (else int64); ``start``, ``dur``, ``self_ns`` int64 ns. Cast a code column
            to int64 before arithmetic that can exceed int32 (``src * scale``).
        memory: the ``[memory]`` events.
        origin_ns: absolute epoch ns that ``start == 0`` stands for.
        warnings: data-quality notes (dropped events, missing fields, skipped files).
        member: see :meth:`members` (``None``: every event).
    """

    sources: list[TraceSource]
    names: list[str]
    thread_keys: list[tuple[int, str, str]]
    src: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    correlation: np.ndarray
    memory: MemoryTable
    origin_ns: int
    warnings: list[str] = field(default_factory=list)
    parent: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    self_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    member: np.ndarray | None = None

    def members(self) -> np.ndarray:
        """Whether each event is counted by this table's aggregates: all of them, except in a
        time window of a larger file (:mod:`~trainperf.analysis.trace.windowed`), whose table also
        holds the events around the window (context for nesting, phases and device busy time) that
        another window counts."""
        if self.member is None:
            return np.ones(len(self), bool)
        return self.member

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @property
    def end(self) -> np.ndarray:
        """End times (ns), ``start + dur``."""
        return self.start + self.dur

    def name_ids(self, predicate: Any) -> np.ndarray:
        """Boolean lookup array over name codes: ``predicate(name)`` per interned name."""
        return np.fromiter((bool(predicate(n)) for n in self.names), bool, len(self.names))
