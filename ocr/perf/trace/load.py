"""Ingestion of torch.profiler / Kineto Chrome traces into one columnar event table.

Every supported schema (the 2021 Kineto format with capitalised categories and absolute µs
timestamps, up to torch 2.13 with float µs relative to ``baseTimeNanoseconds``) is read once, in
pieces, and decoded by a typed msgspec decoder that materialises only the fields the table uses
(of ``args`` only ``correlation``, the ``[memory]`` figures and thread names; every other key is
skipped), each piece turned into numpy columns before the next is read; all later analyses are
vectorised over those columns. Times are integer nanoseconds relative to
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

from ocr.perf.trace.decode import Parsed, code_table, parse_file
from ocr.perf.trace.table import (
    CATEGORY_KIND,
    EventTable,
    Kind,
    MemoryTable,
    TraceError,
    TraceSource,
)

__all__ = ["find_trace_files", "load_traces"]

# Lightning embeds the callback's state dict in span names: "ModelCheckpoint{'monitor': ...}.on_x".
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


# The decoder reads only the fields below; every other key of an event (``id``, ``s``, ``bp``,
# ``flow_in``, ...) and of its ``args`` (``Input Dims``, ``Call stack``, ``External id``, ...) is
# skipped without building a Python object. Values are typed ``Any`` (not ``float``/``str``) on
# purpose: real traces carry ``ts`` as int, float or string, tids as int or ``"stream 7"``, and
# the columns below must see exactly the values ``json.loads`` would give.


def _normalise_name(raw: Any) -> str:
    name = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
    if "{" in name and name.startswith("[pl]"):
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
    if isinstance(path, str | Path):
        roots = [Path(path)]
    else:
        roots = [Path(p) for p in path]
        if not roots:
            raise TraceError("<no paths>", "an empty list of trace paths")
    with _gc_paused():
        return _load_traces(roots)


def _load_traces(roots: list[Path]) -> EventTable:
    parsed: list[Parsed] = []
    warnings: list[str] = []
    root = roots[0]
    for r in roots:
        for f in find_trace_files(r):
            p = parse_file(f)
            if p is None:
                if r.is_dir():
                    warnings.append(f"{f}: skipped, JSON without 'traceEvents' (not a trace)")
                    continue
                raise TraceError(f, "JSON without a 'traceEvents' list: not a Chrome trace")
            parsed.append(p)
    if not parsed:
        raise TraceError(root, "no trace files (JSON with 'traceEvents') found")
    for p in parsed:
        warnings.extend(p.warnings)
    _warn_rank_clashes([p.source for p in parsed], warnings)

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
        for pid, tid in p.mem_threads:  # threads that only allocate are threads too
            raw_thread.setdefault((i, pid, tid), len(raw_thread))

    # Collapse raw thread keys whose string forms agree (2021: tid "25738" vs 25738).
    canon: dict[tuple[int, str, str], int] = {}
    raw_to_canon = np.empty(len(raw_thread), np.int64)
    for key, code in raw_thread.items():
        ck = (key[0], str(key[1]), str(key[2]))
        raw_to_canon[code] = canon.setdefault(ck, len(canon))
    thread_keys = list(canon)
    thread_names: dict[int, str] = {}
    for i, p in enumerate(parsed):
        for (pid, tid), label in p.thread_names.items():
            tcode = canon.get((i, pid, tid))
            if tcode is not None:
                thread_names[tcode] = label

    raw_names = list(name_table)
    names_norm = [_normalise_name(n) for n in raw_names]
    # Renormalised names may coincide (two ModelCheckpoint dicts): merge their codes.
    norm_table: dict[str, int] = {}
    name_map = np.fromiter(
        (norm_table.setdefault(n, len(norm_table)) for n in names_norm), np.int64, len(names_norm)
    )
    kind_of_cat = np.fromiter(
        (
            CATEGORY_KIND.get(c.lower(), Kind.OTHER) if isinstance(c, str) else Kind.OTHER
            for c in cat_table
        ),
        np.int64,
        len(cat_table),
    )

    starts = [int(a.min()) for p in parsed for a in (p.start, p.mem["ts"]) if a.size]
    if not starts:
        raise TraceError(root, "trace holds no timed events")
    origin = min(starts)

    # Each column is built on its own from the files' arrays, which are dropped as they are
    # used: a large trace never holds two copies of a column (a single file's arrays are
    # reused as they are).
    def column(get: Any) -> np.ndarray:
        parts = [get(i, p) for i, p in enumerate(parsed)]
        return _concat(parts)

    def rel(a: np.ndarray) -> np.ndarray:
        a -= origin
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
    src = column(lambda i, p: np.full(len(p.key), i, np.int64))
    kind = column(lambda i, p: kind_of_cat[key_codes[i][1]][p.key])
    name = column(lambda i, p: name_map[key_codes[i][0]][p.key])
    thread = column(lambda i, p: raw_to_canon[key_codes[i][2]][p.key])
    for p in parsed:
        p.key = p.key[:0]
    table = EventTable(
        sources=[p.source for p in parsed],
        names=list(norm_table),
        thread_keys=thread_keys,
        thread_names=thread_names,
        src=src,
        kind=kind,
        name=name,
        thread=thread,
        start=column(lambda i, p: rel(_take(p, "start"))),
        dur=column(lambda i, p: _take(p, "dur")),
        correlation=column(lambda i, p: _take(p, "corr")),
        memory=memory,
        origin_ns=origin,
        warnings=warnings,
    )
    parsed.clear()
    _nest(table)
    return table


def _take(p: Parsed, field: str) -> np.ndarray:
    """``p``'s column ``field``, leaving an empty one behind (its memory goes with the table)."""
    a: np.ndarray = getattr(p, field)
    setattr(p, field, a[:0])
    return a


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate`` that returns a single part as it is (no copy)."""
    if not parts:
        return np.zeros(0, np.int64)
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
    """Fill ``parent`` and ``self_ns``: the call tree of host events per thread.

    Vectorised form of the usual stack walk. Events are sorted per thread by (start, longest
    first); an event's depth is the number of earlier events still open at its start, and its
    parent is the last earlier event one level up. Self time is the duration minus the part of
    each direct child that lies inside the parent (kept >= 0 when rounding lets a child overhang).
    Zero-length events take no part (they cannot contain anything and have no self time).
    """
    n = len(table)
    parent = np.full(n, -1, np.int64)
    self_ns = np.zeros(n, np.int64)
    device = np.isin(table.kind, Kind.DEVICE)
    self_ns[device] = table.dur[device]  # device activities are leaves
    del device
    host = np.isin(table.kind, Kind.HOST)
    host &= table.dur > 0
    idx = np.flatnonzero(host)
    del host
    # Temporaries are dropped as soon as they are used (a trace of millions of host events
    # would otherwise hold a dozen of them at once).
    if idx.size:
        start = table.start[idx]
        end = start + table.dur[idx]
        thread = table.thread[idx]
        tmin = int(start.min())
        span = int(end.max()) - tmin + 1
        # Threads laid end to end on one axis: every event of thread k ends before thread k+1's
        # first start, so one sort and one searchsorted handle all threads at once.
        offset = thread * span - tmin
        s = start + offset
        e = end + offset
        del start, end, offset
        order = np.lexsort((idx, -e, s))
        s, e = s[order], e[order]
        m = order.size
        depth = np.searchsorted(np.sort(e), s, side="right")
        np.subtract(np.arange(m, dtype=np.int64), depth, out=depth)
        key = depth * m
        key += np.arange(m, dtype=np.int64)
        key.sort()  # sorted (depth, position) keys
        probe = (depth - 1) * m
        probe += np.arange(m, dtype=np.int64)
        k = np.searchsorted(key, probe, side="left")
        del probe
        k -= 1
        has = (depth > 0) & (k >= 0)
        np.maximum(k, 0, out=k)
        cand = np.where(has, key[k], 0)
        del key, k
        has &= cand // m == depth - 1
        del depth
        ppos = np.where(has, cand % m, -1)
        del cand
        # a parent must be on the same thread (guards against badly overlapping spans)
        thread = thread[order]
        same = np.zeros(m, bool)
        same[has] = thread[ppos[has]] == thread[has]
        del thread, has
        ppos = np.where(same, ppos, -1)
        del same
        linked = ppos >= 0
        safe = np.maximum(ppos, 0)
        overlap = np.minimum(e, np.where(linked, e[safe], e)) - s
        child_sum = np.bincount(ppos[linked], weights=overlap[linked], minlength=m)
        del overlap
        own = e - s
        del e, s
        own -= np.rint(child_sum).astype(np.int64)
        del child_sum
        np.maximum(own, 0, out=own)
        sorted_idx = idx[order]
        del idx, order
        parent[sorted_idx] = np.where(linked, sorted_idx[safe], -1)
        self_ns[sorted_idx] = own
    table.parent = parent
    table.self_ns = self_ns
