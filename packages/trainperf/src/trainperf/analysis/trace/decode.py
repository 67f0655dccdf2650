"""Reading and decoding one Chrome trace file into compact columns.

Reading one torch.profiler / Kineto Chrome trace file: streamed in pieces
(:mod:`~trainperf.analysis.trace.scan`, plain or gzip) or, for a malformed file, whole; a typed
msgspec decoder that materialises only the fields the table uses (the types in
:mod:`~trainperf.analysis.trace.event_structs`); each piece reduced to compact
columns before the next; errors that name the file and the byte where it went wrong.
:mod:`~trainperf.analysis.trace.ingest` turns the parsed files into one
:class:`~trainperf.analysis.trace.table.EventTable`.
"""

from __future__ import annotations

import codecs
import ctypes
import functools
import gzip
import io
import operator
import os
import re
import stat
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import msgspec
import numpy as np

from trainperf.analysis.trace.event_structs import (
    NO_ARGS,
    Args,
    Complete,
    Correlation,
    Document,
    Entry,
    Event,
    Instant,
    Scalar,
    Tagged,
    TopLevel,
)
from trainperf.analysis.trace.scan import Fallback, TraceStream
from trainperf.analysis.trace.table import TraceError, TraceSource

__all__ = ["CHUNK_BYTES", "Parsed", "code_table", "parse_file", "release_free_heap"]

#: Bytes of trace text read and decoded per piece: large enough that msgspec runs at full speed,
#: small enough that a piece's structs (about 3x its text) stay a few tens of MB.
CHUNK_BYTES = 8 << 20
#: Elements per block of the in-place time conversion.
_BLOCK = 1 << 20

_RANK_IN_NAME = re.compile(r"rank[_\-]?(\d+)", re.IGNORECASE)


# a bare array document is the event list itself; a scalar document is JSON but no trace
_DECODER = msgspec.json.Decoder(Document | list[Entry] | Scalar)
_UTF8_CHUNK = 1 << 20
# one piece of the event list (the stream hands out complete JSON arrays)
_FAST_PIECE = msgspec.json.Decoder(list[Tagged])
_GENERIC_PIECE = msgspec.json.Decoder(list[Entry])
_TOP_KEYS = frozenset(TopLevel.__struct_fields__)
# [memory] columns and the value that stands for an absent or non-numeric one
_MEM_FIELDS: dict[str, float] = {
    "ts": np.nan,
    "nbytes": 0,
    "total_allocated": -1,
    "total_reserved": -1,
    "device_type": 0,
    "device_id": -1,
}
_BYTE_POS = re.compile(r"\s*\(byte (\d+)\)$")
_NOT_WS = re.compile(rb"[^ \t\n\r]")


def _read_bytes(path: Path, content: bytes) -> memoryview:
    """The bytes read from ``path`` (gunzipped when they start with the gzip magic, whatever
    its suffix), without a UTF-8 byte order mark. Checked to be UTF-8 as a whole, because the
    decoder only looks at the strings it keeps."""
    if content[:2] == b"\x1f\x8b":
        try:
            content = gzip.decompress(content)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(path, f"corrupt or truncated gzip data ({exc})") from exc
    data = memoryview(content)
    if content[:3] == b"\xef\xbb\xbf":
        data = data[3:]  # a view: no copy of a large file
    if not content.isascii():
        # chunk by chunk: validating a large non-ASCII trace must not build its whole text
        utf8 = codecs.getincrementaldecoder("utf-8")()
        try:
            for i in range(0, len(data), _UTF8_CHUNK):
                utf8.decode(data[i : i + _UTF8_CHUNK])
            utf8.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise TraceError(path, f"not valid JSON: not UTF-8 text ({exc.reason})") from exc
    if _NOT_WS.search(data) is None:
        raise TraceError(path, "file is empty")
    return data


def _tail(data: memoryview) -> bytes:
    """The last non-whitespace byte of ``data`` (empty when there is none)."""
    tail = data[-4096:].tobytes().rstrip()
    return (tail or data.tobytes().rstrip())[-1:]


def _head(data: memoryview) -> bytes:
    """The first non-whitespace byte of ``data`` (empty when there is none)."""
    m = _NOT_WS.search(data)
    return bytes(data[m.start() : m.start() + 1]) if m else b""


def _decode_error(path: Path, data: memoryview, exc: msgspec.MsgspecError) -> TraceError:
    """``exc`` as a :class:`TraceError` in the style ``not valid JSON: <what> at line L column C``
    (msgspec gives a byte offset, or a JSON path for a value it cannot represent)."""
    msg = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        # "Number out of range - at `$.traceEvents[3].dur`": a value beyond float64 or int range
        what, _, where = msg.partition(" - at ")
        return TraceError(path, f"not a usable trace: {what.lower()} at {where.strip('`')}")
    head = _head(data)
    if head not in (b"{", b"["):
        # YAML, a log, a CSV, a binary: not JSON at all, so "truncated" would mislead
        start = bytes(data[:40]).split(b"\n", 1)[0].decode("utf-8", "replace")
        return TraceError(
            path,
            f"not a profiler trace: not JSON (starts with {start!r}); expected a torch.profiler "
            "/ Chrome trace, a JSON object with 'traceEvents' (.json or .json.gz)",
        )
    tail = _tail(data)
    hint = " (file looks truncated)" if tail not in (b"}", b"]") else ""
    what = msg.removeprefix("JSON is malformed: ")
    m = _BYTE_POS.search(what)
    if m:
        pos = int(m.group(1))
        what = what[: m.start()]
    elif not hint:
        # msgspec also says "Input data was truncated" for a complete file with an unpaired
        # surrogate escape ("\\ud800"); it gives no position then
        reason = "unexpected end of data inside a value (an unpaired \\uXXXX surrogate escape?)"
        return TraceError(path, f"not valid JSON: {reason}")
    else:  # "Input data was truncated": the data ended inside a value
        pos = len(data)
        what = "unexpected end of data"
    line = data[:pos].tobytes().count(b"\n") + 1
    col = pos - data[:pos].tobytes().rfind(b"\n")
    return TraceError(path, f"not valid JSON{hint}: {what} at line {line} column {col}")


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _source_meta(
    path: Path, doc: TopLevel, n_events: int, parse_s: float, invalid_durations: int
) -> TraceSource:
    dist = doc.distributedInfo
    rank: int | None = None
    rank_from: str | None = None
    world: int | None = None
    if isinstance(dist, dict):
        rank = _as_int(dist.get("rank"))
        world = _as_int(dist.get("world_size"))
        rank_from = "distributedInfo" if rank is not None else None
    if rank is None:
        m = _RANK_IN_NAME.search(path.name)
        if m:
            rank, rank_from = int(m.group(1)), "filename"
    props = doc.deviceProperties
    devices = tuple(d for d in props if isinstance(d, dict)) if isinstance(props, list) else ()
    framework = doc.Framework
    return TraceSource(
        path=path,
        rank=rank,
        rank_from=rank_from,
        world_size=world,
        schema="absolute" if doc.baseTimeNanoseconds is msgspec.UNSET else "relative",
        framework=framework if isinstance(framework, str) else None,
        device_properties=devices,
        n_events=n_events,
        parse_s=parse_s,
        invalid_durations=invalid_durations,
    )


def _numeric(values: list[Any]) -> np.ndarray:
    """``values`` as float64; non-numbers become NaN (the caller drops or defaults them)."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        out = np.full(len(values), np.nan)
        for i, v in enumerate(values):
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[i] = v
        return out


def _to_ns(ts_us: np.ndarray, base_ns: int) -> np.ndarray:
    """Float µs (absolute or relative to ``base_ns``) -> absolute int64 ns, converted in place
    (``ts_us`` is consumed: the result shares its memory) and in blocks, so that a column of
    millions of events needs no full-size temporaries.

    The integer part is split off first: 1.7e15 µs times 1000 exceeds float64's exact range, the
    difference to an integer origin does not.
    """
    if ts_us.size == 0:
        return np.zeros(0, np.int64)
    origin_us = int(np.floor(np.nanmin(ts_us)))
    offset = np.int64(base_ns + origin_us * 1000)
    out = ts_us.view(np.int64)
    for i in range(0, ts_us.size, _BLOCK):
        block = ts_us[i : i + _BLOCK]
        out[i : i + _BLOCK] = np.rint((block - origin_us) * 1000.0).astype(np.int64) + offset
    return out


@dataclass
class Parsed:
    """Columns of one file before they are concatenated (absolute ns)."""

    source: TraceSource
    keys: list[tuple[Any, Any, Any, Any]]  # the distinct (cat, name, pid, tid) of the events
    key: np.ndarray  # each complete event's index into ``keys``
    start: np.ndarray
    dur: np.ndarray
    corr: np.ndarray
    mem: dict[str, np.ndarray]
    warnings: list[str]


def _decode_whole(path: Path, data: memoryview) -> tuple[TopLevel, list[Any]] | None:
    """The top-level keys and the entries of a whole file, every object entry decoded to
    :class:`Event`; ``None`` for JSON that is no trace."""
    try:
        doc = _DECODER.decode(data)
    except msgspec.MsgspecError as exc:
        raise _decode_error(path, data, exc) from exc
    if isinstance(doc, list):
        return TopLevel(), doc
    if isinstance(doc, Document) and doc.traceEvents is not msgspec.UNSET:
        if not isinstance(doc.traceEvents, list):
            got = type(doc.traceEvents).__name__
            raise TraceError(path, f"'traceEvents' must be a list, got {got}")
        return doc.metadata(), doc.traceEvents
    return None


def _split(entries: list[Any], generic: bool) -> tuple[int, int, list[Any], list[Any]]:
    """Entries decoded by the fast or the generic decoder as (number of entries, entries that
    are no object, complete events, ``[memory]`` events)."""
    if generic:
        events: list[Any] = [e for e in entries if type(e) is Event]
        complete = [e for e in events if e.ph == "X"]
        memory = [e for e in events if (e.ph == "i" or e.ph == "I") and e.name == "[memory]"]
        return len(entries), len(entries) - len(events), complete, memory
    complete = [e for e in entries if type(e) is Complete]
    # filter() with the C-level type check: 2.5x faster than isinstance in a comprehension
    memory = [e for e in filter(Instant.__instancecheck__, entries) if e.name == "[memory]"]
    return len(entries), 0, complete, memory


def _decode_piece(data: bytes) -> tuple[list[Any], bool]:
    """One piece of the event list (a JSON array): the tagged decoder, else the generic one for
    a piece it cannot take; ``(entries, generic)``. Invalid JSON raises
    :class:`msgspec.DecodeError` (the stream then cuts elsewhere); a value no decoder can
    represent ends the streaming (the whole-file path names it)."""
    try:
        return _FAST_PIECE.decode(data), False
    except msgspec.ValidationError:
        return _decode_piece_generic(data)


def _decode_piece_generic(data: bytes) -> tuple[list[Any], bool]:
    try:
        return _GENERIC_PIECE.decode(data), True
    except msgspec.ValidationError as exc:
        raise Fallback(str(exc)) from exc


def parse_file(
    path: Path, chunk_bytes: int | None = None, columns: Callable[[], _Columns] | None = None
) -> Parsed | None:
    """Read one file (plain or gzip) into columns; ``None`` when it is JSON but not a trace
    (directory scans).

    Its ``traceEvents`` are decoded in pieces of about ``chunk_bytes`` (default
    :data:`CHUNK_BYTES`, read when called), each reduced to columns before the next is read, so
    memory follows the number of complete events, not the size of the file (a pipe is read
    into memory first: it cannot be read twice). A file the stream cannot take is decoded whole
    by the generic decoder, which names the problem of a malformed file. ``columns`` makes the
    sink of each attempt (:mod:`~trainperf.analysis.trace.spill` spills large files to disk).
    """
    make = columns or _Columns
    t0 = time.perf_counter()
    chunk = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    try:
        with open(path, "rb") as fh:
            regular = stat.S_ISREG(os.fstat(fh.fileno()).st_mode)
            src: BinaryIO = fh if regular else io.BytesIO(fh.read())  # a pipe: ``<(zcat ...)``
            gz = src.read(2) == b"\x1f\x8b"
            src.seek(0)
            stream = cast(BinaryIO, gzip.GzipFile(fileobj=src, mode="rb") if gz else src)
            try:
                return _parse_stream(path, stream, chunk, t0, make())
            except Fallback:
                src.seek(0)
                content = src.read()
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from exc
    return _parse_whole(path, t0, make(), content)


def _parse_stream(path: Path, fh: BinaryIO, chunk: int, t0: float, cols: _Columns) -> Parsed | None:
    top: dict[str, Any] = {}
    key = ""
    has_events = False
    for part, item in TraceStream(fh, chunk, _decode_piece).document():
        if part == "key":
            key = msgspec.json.decode(item)
            has_events |= key == "traceEvents"
        elif part == "value":
            try:
                value = msgspec.json.decode(item)
            except msgspec.DecodeError as exc:
                raise Fallback(str(exc)) from exc
            if key in _TOP_KEYS:
                top[key] = value
        else:
            entries, generic = item
            cols.add(entries, generic)
    if not has_events:
        raise Fallback("no traceEvents")  # the whole-file path decides: not a trace, or why
    return cols.finish(path, TopLevel(**top), time.perf_counter() - t0)


def _parse_whole(path: Path, t0: float, cols: _Columns, content: bytes) -> Parsed | None:
    """The whole file decoded at once by the generic decoder, the only path that reports
    malformed JSON."""
    data = _read_bytes(path, content)
    del content
    decoded = _decode_whole(path, data)
    del data
    if decoded is None:
        return None
    top, entries = decoded
    del decoded
    cols.add(entries, generic=True)
    del entries
    return cols.finish(path, top, time.perf_counter() - t0)


def release_free_heap() -> None:
    """Hand the heap that decoding freed back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). The many small structs of each piece leave freed but resident heap pages
    between the column arrays that stay: without this, about 175 MB on a 1 GB trace."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return None


class _Columns:
    """The columns of one file, gathered piece by piece: complete events reduced to a code of
    their distinct ``(cat, name, pid, tid)`` and three numeric arrays, ``[memory]`` events to
    numeric arrays. Values are read exactly as the decoder gives them (as :func:`json.loads`
    would); times stay float µs until :meth:`finish`, which converts them with the file's
    earliest time as the origin."""

    def __init__(self) -> None:
        self.keys = code_table()
        self.key: list[np.ndarray] = []
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.corr: list[np.ndarray] = []
        self.mem: dict[str, list[np.ndarray]] = {k: [] for k in _MEM_FIELDS}
        self.n_events = self.n_bad = self.n_no_ts = self.n_bad_dur = 0
        self.base_ns = 0

    def add(self, entries: list[Any], generic: bool) -> None:
        """Reduce one piece of the event list (decoded by the fast or the generic decoder)."""
        n_entries, n_bad, complete, memory = _split(entries, generic)
        del entries
        self.n_events += n_entries
        self.n_bad += n_bad
        self._complete(complete)
        del complete
        self._memory(memory)

    def _complete(self, complete: list[Any]) -> None:
        key_code = _intern(self.keys, complete)
        ts = _numeric([e.ts for e in complete])
        dur = _numeric([e.dur for e in complete])
        corr = _numeric(
            [a.correlation if isinstance(a := e.args, Correlation) else -1 for e in complete]
        )
        keep = np.isfinite(ts)
        if not keep.all():
            self.n_no_ts += int((~keep).sum())
            key_code, ts, dur, corr = key_code[keep], ts[keep], dur[keep], corr[keep]
        bad_dur = ~np.isfinite(dur) | (dur < 0) | (dur >= 2.0**62 / 1000.0)  # int64 ns overflow
        if bad_dur.any():
            self.n_bad_dur += int(bad_dur.sum())
            dur = np.where(bad_dur, 0.0, dur)
        self.key.append(key_code.astype(np.int32) if len(self.keys) < 2**31 else key_code)
        self.ts.append(ts)
        self.dur.append(np.rint(dur * 1000.0).astype(np.int64))
        self.corr.append(np.where(np.isfinite(corr), corr, -1).astype(np.int64))

    def _memory(self, memory: list[Any]) -> None:
        if not memory:
            return
        args = [a if type(a := e.args) is Args else NO_ARGS for e in memory]
        ts = _numeric([e.ts for e in memory])
        ok = np.isfinite(ts)
        self.mem["ts"].append(ts[ok])
        for name, default in _MEM_FIELDS.items():
            if name != "ts":
                arr = _numeric([getattr(a, name) for a in args])
                self.mem[name].append(np.where(np.isfinite(arr), arr, default).astype(np.int64)[ok])

    def finish(self, path: Path, top: TopLevel, parse_s: float) -> Parsed:
        """The file's :class:`Parsed` (the gathered arrays joined, times in absolute ns)."""
        warnings: list[str] = []
        if self.n_bad:
            warnings.append(
                f"{path.name}: skipped {self.n_bad} trace entries that are not JSON objects"
            )
        if self.n_no_ts:
            warnings.append(f"{path.name}: dropped {self.n_no_ts} events without a numeric 'ts'")
        if self.n_bad_dur:
            warnings.append(
                f"{path.name}: {self.n_bad_dur} complete events without a valid 'dur' "
                "(counted as zero length)"
            )
        base_ns = self.base_ns = _as_int(top.baseTimeNanoseconds) or 0
        mem = {k: _join(v, np.float64 if k == "ts" else np.int64) for k, v in self.mem.items()}
        mem["ts"] = _to_ns(mem["ts"], base_ns)
        return Parsed(
            source=_source_meta(path, top, self.n_events, parse_s, self.n_bad_dur),
            keys=list(self.keys),
            key=_join(self.key, np.int32),
            start=_to_ns(_join(self.ts, np.float64), base_ns),
            dur=_join(self.dur, np.int64),
            corr=_join(self.corr, np.int64),
            mem=mem,
            warnings=warnings,
        )


def _join(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """The pieces of a column as one array (emptied: each piece is freed once copied, and its
    memory handed back, so that joining does not hold a column twice)."""
    if len(parts) == 1:
        return parts.pop()
    out: np.ndarray = np.empty(sum(p.size for p in parts), dtype)
    at = 0
    for i, p in enumerate(parts):
        out[at : at + p.size] = p
        at += p.size
        parts[i] = out[:0]
        if i % 32 == 31:  # the copied pieces' heap back to the system as we go
            release_free_heap()
    parts.clear()
    release_free_heap()
    return out


def _safe_key(k: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(v if isinstance(v, str | int | float | None) else str(v) for v in k)


def _intern(table: defaultdict[Any, int], events: list[Any]) -> np.ndarray:
    """Codes of each event's ``(cat, name, pid, tid)`` in ``table`` (extended in place), in one
    C-speed pass. Unhashable values (a malformed name that is a list, say) are interned by their
    ``str``."""
    try:
        return np.fromiter(map(table.__getitem__, map(_EVENT_KEY, events)), np.int64, len(events))
    except TypeError:
        values = [_safe_key(_EVENT_KEY(e)) for e in events]
        return np.fromiter(map(table.__getitem__, values), np.int64, len(values))


def code_table() -> defaultdict[Any, int]:
    """A value -> code table where a missing value gets the next code (``len``, called in C)."""
    table: defaultdict[Any, int] = defaultdict()
    table.default_factory = table.__len__
    return table


_EVENT_KEY = operator.attrgetter("cat", "name", "pid", "tid")
