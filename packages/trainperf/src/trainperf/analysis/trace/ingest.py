"""Trace files into one columnar event table with its call tree.

Trace files (each read by :mod:`~trainperf.analysis.trace.decode`) into one columnar
:class:`EventTable` with its call tree. Times are integer nanoseconds relative to
:attr:`EventTable.origin_ns` so that parent/child comparisons never suffer float rounding.

Several files (a directory, Lightning's per-stage files, one file per DDP rank) go into the same
table; each event carries its ``src`` index and every thread key includes it, so two files of the
same rank are never merged or overwritten.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from trainperf.analysis.trace.decode import Parsed, code_table, parse_file, release_free_heap
from trainperf.analysis.trace.spill import Spilled, parse_or_spill
from trainperf.analysis.trace.table import (
    EventTable,
    Kind,
    MemoryTable,
    TraceError,
    TraceSource,
    category_kind,
)
from trainperf.core.actions import label_prefixes

__all__ = ["find_trace_files", "load_or_spill", "load_traces", "table_of"]

# A framework may embed a callback's state dict in its span names ("ModelCheckpoint{'monitor':
# ...}.on_x"): dropped from the names of a registered grammar's labels.
_EMBEDDED_DICT = re.compile(r"\{.*\}")


def find_trace_files(path: str | Path) -> list[Path]:
    """The trace files at ``path``: the file itself, or every ``*.json``/``*.json.gz`` under a
    directory (recursively, sorted). Raises :class:`TraceError` when there are none."""
    p = Path(path)
    if p.is_dir():
        files = sorted(
            f
            for f in p.rglob("*")
            if f.is_file() and (f.name.endswith(".json") or f.name.endswith(".json.gz"))
        )
        if not files:
            raise TraceError(p, "directory holds no *.json or *.json.gz trace files")
        return files
    if not p.exists():
        raise TraceError(p, "no such file or directory")
    return [p]


def _normalise_name(raw: Any) -> str:
    name = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
    if "{" in name and name.startswith(label_prefixes()):
        name = _EMBEDDED_DICT.sub("", name)
    return name


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector. Decoding a trace and building its columns allocates
    millions of objects, none in reference cycles; the collector's repeated scans of them made
    decoding a 35 MB trace 3-4x slower (0.5-0.65 s instead of 0.16 s on the dev machine)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_traces(path: str | Path | Sequence[str | Path]) -> EventTable:
    """Read a trace file, a directory of traces, or a list of either into one
    :class:`EventTable` (a list keeps its order: e.g. the cycles of one profiler window).

    Raises :class:`TraceError` (naming the file and the reason) for a missing path, unreadable,
    truncated or malformed file, a file without ``traceEvents``, or a directory without traces.
    Inside a directory, JSON files that are not traces are skipped with a warning.
    """
    table = _load_traces(path, spill=False)
    assert isinstance(table, EventTable)  # nothing spills unless asked
    return table


def load_or_spill(path: str | Path | Sequence[str | Path]) -> EventTable | Spilled:
    """:func:`load_traces`, except that a single file with more than
    :data:`~trainperf.analysis.trace.spill.SPILL_EVENTS` complete events comes back spilled to disk
    (for
    :func:`~trainperf.analysis.trace.windowed.analyze_spilled`), not as a table."""
    return _load_traces(path, spill=True)


@_gc_paused()
def _load_traces(path: str | Path | Sequence[str | Path], spill: bool) -> EventTable | Spilled:
    roots = [Path(path)] if isinstance(path, str | Path) else [Path(p) for p in path]
    if not roots:
        raise TraceError("<no paths>", "an empty list of trace paths")
    parsed: list[Parsed] = []
    warnings: list[str] = []
    root = roots[0]
    files = [(r, f) for r in roots for f in find_trace_files(r)]
    for r, f in files:
        p = parse_or_spill(f) if spill and len(files) == 1 else parse_file(f)
        if isinstance(p, Spilled):
            return p
        if p is None:
            if r.is_dir():
                warnings.append(f"{f}: skipped, JSON without 'traceEvents' (not a trace)")
                continue
            raise TraceError(f, "JSON without a 'traceEvents' list: not a Chrome trace")
        parsed.append(p)
        release_free_heap()
    if not parsed:
        raise TraceError(root, "no trace files (JSON with 'traceEvents') found")
    for p in parsed:
        warnings.extend(p.warnings)
    _warn_rank_clashes([p.source for p in parsed], warnings)
    return table_of(parsed, warnings, root)


def table_of(
    parsed: list[Parsed], warnings: list[str], root: Path, origin: int | None = None
) -> EventTable:
    """One :class:`EventTable` of the files' columns (emptied as they are used), nested; times
    relative to ``origin`` (absolute ns; default the earliest event)."""

    name_table = code_table()
    cat_table = code_table()
    raw_thread: dict[tuple[int, Any, Any], int] = {}
    # codes per distinct (cat, name, pid, tid) of each file; per event by indexing, below
    key_codes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for i, p in enumerate(parsed):
        name_of = np.fromiter((name_table[k[1]] for k in p.keys), np.int64, len(p.keys))
        cat_of = np.fromiter((cat_table[k[0]] for k in p.keys), np.int64, len(p.keys))
        thread_of = np.fromiter(
            (raw_thread.setdefault((i, k[2], k[3]), len(raw_thread)) for k in p.keys),
            np.int64,
            len(p.keys),
        )
        key_codes.append((name_of, cat_of, thread_of))

    # Collapse raw thread keys whose string forms agree (2021: tid "25738" vs 25738).
    canon: dict[tuple[int, str, str], int] = {}
    raw_to_canon = np.empty(len(raw_thread), np.int64)
    for key, code in raw_thread.items():
        ck = (key[0], str(key[1]), str(key[2]))
        raw_to_canon[code] = canon.setdefault(ck, len(canon))
    thread_keys = list(canon)

    names_norm = [_normalise_name(n) for n in name_table]
    # Renormalised names may coincide (two ModelCheckpoint dicts): merge their codes.
    norm_table: dict[str, int] = {}
    name_map = np.fromiter(
        (norm_table.setdefault(n, len(norm_table)) for n in names_norm), np.int64, len(names_norm)
    )
    kind_of_cat = np.fromiter(map(category_kind, cat_table), np.int64, len(cat_table))

    if origin is None:
        starts = [int(a.min()) for p in parsed for a in (p.start, p.mem["ts"]) if a.size]
        if not starts:
            raise TraceError(root, "trace holds no timed events")
        origin = min(starts)
    base: int = origin

    # Each column is built on its own from the files' arrays, which are dropped as they are
    # used: a large trace never holds two copies of a column (a single file's arrays are
    # reused as they are).
    def column(get: Any) -> np.ndarray:
        return _concat([get(i, p) for i, p in enumerate(parsed)])

    def rel(a: np.ndarray) -> np.ndarray:
        a -= base
        return a

    memory = MemoryTable(
        src=column(lambda i, p: np.full(len(p.mem["ts"]), i, np.int64)),
        ts=column(lambda i, p: rel(p.mem.pop("ts"))),
        nbytes=column(lambda i, p: p.mem.pop("nbytes")),
        total_allocated=column(lambda i, p: p.mem.pop("total_allocated")),
        total_reserved=column(lambda i, p: p.mem.pop("total_reserved")),
        device_type=column(lambda i, p: p.mem.pop("device_type")),
        device_id=column(lambda i, p: p.mem.pop("device_id")),
    )
    # Narrow code columns (the table's size per event is what bounds a large trace's memory):
    # codes of files, names and threads in int32, kinds in int8; the small lookup arrays are
    # cast first so each column is built at its final width.
    src = column(lambda i, p: np.full(len(p.key), i, _code_dtype(len(parsed))))
    kind_of_cat = kind_of_cat.astype(np.int8)
    name_map = name_map.astype(_code_dtype(len(norm_table)))
    raw_to_canon = raw_to_canon.astype(_code_dtype(len(canon)))
    kind = column(lambda i, p: kind_of_cat[key_codes[i][1]][p.key])
    name = column(lambda i, p: name_map[key_codes[i][0]][p.key])
    thread = column(lambda i, p: raw_to_canon[key_codes[i][2]][p.key])
    for p in parsed:
        p.key = p.key[:0]
    table = EventTable(
        sources=[p.source for p in parsed],
        names=list(norm_table),
        thread_keys=thread_keys,
        src=src,
        kind=kind,
        name=name,
        thread=thread,
        start=column(lambda i, p: rel(_take(p, "start"))),
        dur=column(lambda i, p: _take(p, "dur")),
        correlation=_narrow(column(lambda i, p: _take(p, "corr"))),
        memory=memory,
        origin_ns=base,
        warnings=warnings,
    )
    parsed.clear()
    _nest(table)
    return table


def _code_dtype(n: int) -> type:
    """The integer type of a column of codes ``0..n-1`` (and -1)."""
    return np.int32 if n < 2**31 else np.int64


def _narrow(a: np.ndarray) -> np.ndarray:
    """An int64 column as int32 when every value fits (correlation ids usually do)."""
    if a.size and (int(a.min()) < -(2**31) or int(a.max()) >= 2**31):
        return a
    return a.astype(np.int32)


def _take(p: Parsed, field: str) -> np.ndarray:
    """``p``'s column ``field``, leaving an empty one behind (its memory goes with the table)."""
    a: np.ndarray = getattr(p, field)
    setattr(p, field, a[:0])
    return a


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate`` that returns a single part as it is (no copy)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts)


def _warn_rank_clashes(sources: list[TraceSource], warnings: list[str]) -> None:
    seen: dict[int, Path] = {}
    for s in sources:
        if s.rank is None:
            continue
        if s.rank in seen:
            warnings.append(
                f"rank {s.rank} appears in both {seen[s.rank].name} and {s.path.name}: "
                "kept as separate sources"
            )
        else:
            seen[s.rank] = s.path


# --------------------------------------------------------------------------------------------
# nesting


def _nest(table: EventTable) -> None:
    """Fill ``parent`` and ``self_ns``: the call tree of host events (:func:`_nest_block`), one
    thread at a time so that the temporaries follow the largest thread, not the whole trace.
    Device events are leaves; zero-length events take no part (they cannot contain anything and
    have no self time)."""
    n = len(table)
    parent: np.ndarray = np.full(n, -1, _code_dtype(n))
    self_ns = np.zeros(n, np.int64)
    device = np.isin(table.kind, Kind.DEVICE)
    self_ns[device] = table.dur[device]  # device activities are leaves
    del device
    host = np.isin(table.kind, Kind.HOST)
    host &= table.dur > 0
    idx: np.ndarray = np.flatnonzero(host).astype(_code_dtype(n))
    del host
    # the host events grouped by thread (ascending within each), in the narrow index type
    thread = table.thread[idx]
    by_thread = np.argsort(thread, kind="stable")
    idx = idx[by_thread]
    cuts = np.flatnonzero(np.diff(thread[by_thread])) + 1
    del thread, by_thread
    for part in np.split(idx, cuts) if idx.size else ():
        _nest_thread(table, part, parent, self_ns)
    table.parent = parent
    table.self_ns = self_ns
    release_free_heap()


def _nest_thread(
    table: EventTable, idx: np.ndarray, parent: np.ndarray, self_ns: np.ndarray
) -> None:
    """:func:`_nest` for the host events ``idx`` (ascending) of one thread.

    Sorted once, then nested in blocks of about :data:`_NEST_BLOCK` events cut where nothing is
    open (an event that starts when every earlier one has ended): no event of a block has a
    parent in another, so a block's depths and parents are those of the whole thread, and the
    temporaries follow the block, not the thread."""
    s = table.start[idx]
    neg_end = table.dur[idx]
    neg_end += s
    np.negative(neg_end, out=neg_end)
    order = np.lexsort((idx, neg_end, s))
    del neg_end
    s = s[order]
    e = s + table.dur[idx[order]]
    sorted_idx = idx[order]
    del order
    m = sorted_idx.size
    free = np.empty(m, bool)  # nothing open when event i starts
    free[0] = True
    np.greater_equal(s[1:], np.maximum.accumulate(e[:-1]), out=free[1:])
    cuts = np.flatnonzero(free)
    del free
    at = 0
    while at < m:
        stop = int(cuts[min(int(np.searchsorted(cuts, at + _NEST_BLOCK)), cuts.size - 1)])
        if stop <= at:
            stop = m
        _nest_block(s[at:stop], e[at:stop], sorted_idx[at:stop], parent, self_ns)
        at = stop


#: Host events nested at once (temporaries about 80 B per event).
_NEST_BLOCK = 1 << 20


def _nest_block(
    s: np.ndarray, e: np.ndarray, sorted_idx: np.ndarray, parent: np.ndarray, self_ns: np.ndarray
) -> None:
    """Parent and self time of host events sorted by (start, longest first) where nothing
    before the first is open. An event's parent is the latest-started earlier event still open
    at its start (with properly nested spans, the one that contains it; with spans that overlap
    without nesting, as Lightning's and the profiler's step spans do, the innermost one open
    then): it depends only on the events open at that instant, so a time window of the trace
    that holds them finds the same parent. Self time is the duration minus the part of each
    direct child that lies inside the parent (kept >= 0 when rounding lets a child overhang)."""
    m = s.size
    ppos = _open_parents(s, e)
    linked = ppos >= 0
    safe = np.maximum(ppos, 0)
    del ppos
    overlap = np.maximum(np.minimum(e, np.where(linked, e[safe], e)) - s, 0)
    child_sum = np.bincount(safe[linked], weights=overlap[linked], minlength=m)
    del overlap
    own = e - s
    own -= np.rint(child_sum).astype(np.int64)
    del child_sum
    np.maximum(own, 0, out=own)
    parent[sorted_idx] = np.where(linked, sorted_idx[safe], -1)
    self_ns[sorted_idx] = own


def _open_parents(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Position of each event's parent in the sorted block (-1: none): the latest earlier event
    with ``e > s`` of the event, found by pointer jumping. ``up[j]`` is first ``j - 1`` and ends as
    the latest earlier event whose end exceeds ``e[j]`` (every event skipped on the way ends no
    later than ``e[j]``, so none of them can be open where ``j`` is not); the parent search then
    follows ``up`` from ``i - 1`` past the events that ended by ``s[i]``. Rounds grow with the
    nesting depth, not with the number of events."""
    up = _latest_ending_after(e, e, None)
    return _latest_ending_after(s, e, up)


def _latest_ending_after(limit: np.ndarray, e: np.ndarray, via: np.ndarray | None) -> np.ndarray:
    """For each event ``i``, the latest earlier event ending after ``limit[i]``: from ``i - 1``,
    jump along ``via`` (``None``: along the pointers being found) past events ending by then."""
    ptr = np.arange(-1, e.size - 1, dtype=np.int64)
    jumps = ptr if via is None else via
    active = np.flatnonzero(ptr >= 0)
    while active.size:
        c = ptr[active]
        ended = e[c] <= limit[active]
        active, c = active[ended], c[ended]
        ptr[active] = jumps[c]
        active = active[ptr[active] >= 0]
    return ptr
