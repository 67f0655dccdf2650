"""A trace file too large for one table: its columns spilled to disk while it streams.

:func:`parse_or_spill` reads a file like :func:`~trainperf.analysis.trace.decode.parse_file`; once
the file holds more than :data:`SPILL_EVENTS` complete events, every decoded piece's columns go to
raw column files in a folder of our own (under the system's temporary folder, or ``tmp_dir``)
instead of memory, and the result is a :class:`Spilled`: the file's metadata and distinct
event keys in memory, the per-event columns on disk, read back block by block
(:meth:`Spilled.blocks`) by :mod:`~trainperf.analysis.trace.windowed`. Times are converted exactly
as the in-memory path converts them (float µs to int ns against the file's earliest time), so a
spilled file gives the same numbers.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainperf.analysis.trace.decode import _MEM_FIELDS, Parsed, _Columns, parse_file
from trainperf.analysis.trace.table import TraceError, TraceSource

__all__ = ["SPILL_EVENTS", "EventBlock", "Spilled", "parse_or_spill"]

#: Complete events of one file kept in memory; a file with more spills its columns to disk and
#: is analysed in time windows (read when called, so tests can lower it).
SPILL_EVENTS = 4_000_000
#: Events per block read back from disk.
BLOCK_EVENTS = 1 << 21

_EVENT_COLUMNS = ("key", "ts", "dur", "corr")
# each column file's type (times stay float µs on disk, like the in-memory columns)
_TYPES: dict[str, type] = {"key": np.int32, "ts": np.float64, "dur": np.int64, "corr": np.int64}
_TYPES |= {"mem_" + k: (np.float64 if k == "ts" else np.int64) for k in _MEM_FIELDS}


@dataclass
class EventBlock:
    """A block of a spilled file's complete events (rows ``offset .. offset + len``): key codes
    (into :attr:`Spilled.keys`), start (absolute ns), duration (ns) and correlation id."""

    offset: int
    key: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    corr: np.ndarray

    def __len__(self) -> int:
        return int(self.key.shape[0])


@dataclass
class Spilled:
    """One file's events on disk (see the module doc).

    Args:
        source: the file's metadata.
        keys: the distinct ``(cat, name, pid, tid)`` of its complete events.
        warnings: as in :class:`~trainperf.analysis.trace.decode.Parsed`.
        directory: the folder holding the column files (ours: removed by :meth:`close`).
        n_events, n_memory: complete and ``[memory]`` events on disk.
        base_ns: the file's ``baseTimeNanoseconds``.
        origin_us, mem_origin_us: the earliest complete / ``[memory]`` time (µs, floored), the
            origin the in-memory conversion would use.
    """

    source: TraceSource
    keys: list[tuple[Any, Any, Any, Any]]
    warnings: list[str]
    directory: Path
    n_events: int
    n_memory: int
    base_ns: int
    origin_us: int
    mem_origin_us: int

    def _read(self, column: str, start: int, count: int) -> np.ndarray:
        dtype = _TYPES[column]
        offset = start * np.dtype(dtype).itemsize
        return np.fromfile(self.directory / column, dtype, count, offset=offset)

    def blocks(self) -> Iterator[EventBlock]:
        """The complete events in file order, :data:`BLOCK_EVENTS` rows at a time."""
        offset_ns = np.int64(self.base_ns + self.origin_us * 1000)
        for at in range(0, self.n_events, BLOCK_EVENTS):
            count = min(BLOCK_EVENTS, self.n_events - at)
            yield EventBlock(
                offset=at,
                key=self._read("key", at, count),
                start=_block_ns(self._read("ts", at, count), self.origin_us, offset_ns),
                dur=self._read("dur", at, count),
                corr=self._read("corr", at, count),
            )

    def memory(self) -> Iterator[dict[str, np.ndarray]]:
        """The ``[memory]`` events in file order, :data:`BLOCK_EVENTS` rows at a time (``ts`` in
        absolute ns)."""
        offset_ns = np.int64(self.base_ns + self.mem_origin_us * 1000)
        for at in range(0, self.n_memory, BLOCK_EVENTS):
            count = min(BLOCK_EVENTS, self.n_memory - at)
            out = {k: self._read("mem_" + k, at, count) for k in _MEM_FIELDS}
            out["ts"] = _block_ns(out["ts"], self.mem_origin_us, offset_ns)
            yield out

    def close(self) -> None:
        """Remove the column files (the folder is ours)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _block_ns(ts_us: np.ndarray, origin_us: int, offset_ns: np.int64) -> np.ndarray:
    """:func:`~trainperf.analysis.trace.decode._to_ns` of one block with the file's origin."""
    return np.rint((ts_us - origin_us) * 1000.0).astype(np.int64) + offset_ns


class _SpillColumns(_Columns):
    """:class:`~trainperf.analysis.trace.decode._Columns` that moves its pieces to disk once the
    file has more than ``limit`` complete events (and every piece after)."""

    def __init__(self, path: Path, limit: int, tmp_dir: Path | None) -> None:
        super().__init__()
        self.path = path
        self.limit = limit
        self.tmp_dir = tmp_dir
        self.directory: Path | None = None
        self.n_spilled = self.n_mem_spilled = 0
        self.min_ts = self.min_mem_ts = math.inf

    def add(self, entries: list[Any], generic: bool) -> None:
        super().add(entries, generic)
        if self.directory is not None or sum(a.size for a in self.ts) > self.limit:
            self._flush()

    def _flush(self) -> None:
        try:
            self._write()
        except OSError as exc:  # a full or read-only disk: the user's to fix, said in one line
            raise TraceError(
                self.path,
                f"too large for memory, and its columns cannot be written to "
                f"{self.directory or self.tmp_dir or tempfile.gettempdir()} "
                f"({exc.strerror or exc}); set TMPDIR to a folder with room",
            ) from exc

    def _write(self) -> None:
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="trainperf-trace-", dir=self.tmp_dir))
        self.n_spilled += sum(p.size for p in self.key)
        self.n_mem_spilled += sum(p.size for p in self.mem["ts"])
        self.min_ts = min([self.min_ts, *(float(np.nanmin(p)) for p in self.ts if p.size)])
        mem_ts = (float(np.nanmin(p)) for p in self.mem["ts"] if p.size)
        self.min_mem_ts = min([self.min_mem_ts, *mem_ts])
        columns = {name: getattr(self, name) for name in _EVENT_COLUMNS}
        columns |= {"mem_" + name: parts for name, parts in self.mem.items()}
        for name, parts in columns.items():
            with open(self.directory / name, "ab") as fh:
                for part in parts:
                    part.astype(_TYPES[name], copy=False).tofile(fh)
            parts.clear()

    def finish(self, path: Path, top: Any, parse_s: float) -> Parsed:
        if self.directory is not None:
            self._flush()
        return super().finish(path, top, parse_s)

    def spilled(self, parsed: Parsed) -> Spilled:
        assert self.directory is not None
        return Spilled(
            source=parsed.source,
            keys=parsed.keys,
            warnings=parsed.warnings,
            directory=self.directory,
            n_events=self.n_spilled,
            n_memory=self.n_mem_spilled,
            base_ns=self.base_ns,
            origin_us=math.floor(self.min_ts) if self.n_spilled else 0,
            mem_origin_us=math.floor(self.min_mem_ts) if self.n_mem_spilled else 0,
        )


def parse_or_spill(
    path: Path, limit: int | None = None, tmp_dir: Path | None = None
) -> Parsed | Spilled | None:
    """:func:`~trainperf.analysis.trace.decode.parse_file`, spilling to disk past ``limit`` complete
    events (default :data:`SPILL_EVENTS`); ``None`` when the file is JSON but no trace."""
    made: list[_SpillColumns] = []

    def columns() -> _SpillColumns:
        made.append(_SpillColumns(path, SPILL_EVENTS if limit is None else limit, tmp_dir))
        return made[-1]

    try:
        parsed = parse_file(path, columns=columns)
    finally:  # a stream that fell back to the whole file leaves a first attempt behind
        for cols in made[:-1]:
            if cols.directory is not None:
                shutil.rmtree(cols.directory, ignore_errors=True)
    last = made[-1] if made else None
    if parsed is None or last is None or last.directory is None:
        if last is not None and last.directory is not None:
            shutil.rmtree(last.directory, ignore_errors=True)
        return parsed
    return last.spilled(parsed)
