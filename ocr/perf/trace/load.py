"""Ingestion of torch.profiler / Kineto Chrome traces into one columnar event table.

Every supported schema (the 2021 Kineto format with capitalised categories and absolute µs
timestamps, up to torch 2.13 with float µs relative to ``baseTimeNanoseconds``) is read once and
decoded by a typed msgspec decoder that materialises only the fields the table uses (of ``args``
only ``correlation``, the ``[memory]`` figures and thread names; every other key is skipped),
gathered into column lists and turned into numpy columns straight away; all later analyses are
vectorised over those columns. Times are integer nanoseconds relative to
:attr:`EventTable.origin_ns` so that parent/child comparisons never suffer float rounding.

Several files (a directory, Lightning's per-stage files, one file per DDP rank) go into the same
table; each event carries its ``src`` index and every thread key includes it, so two files of the
same rank are never merged or overwritten.
"""

from __future__ import annotations

import codecs
import gc
import gzip
import mmap
import operator
import os
import re
import stat
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import msgspec
import numpy as np

from ocr.errors import InputError

__all__ = [
    "KIND_NAMES",
    "EventTable",
    "Kind",
    "MemoryTable",
    "TraceError",
    "TraceSource",
    "find_trace_files",
    "load_traces",
]


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

    #: Host-side kinds that nest on a thread (used for self time and phases).
    HOST = (CPU_OP, USER_ANNOTATION, PYTHON, RUNTIME, DRIVER)
    #: Device activity kinds (busy time on a GPU stream).
    DEVICE = (KERNEL, MEMCPY, MEMSET)


KIND_NAMES: dict[int, str] = {
    Kind.OTHER: "other",
    Kind.CPU_OP: "cpu_op",
    Kind.USER_ANNOTATION: "user_annotation",
    Kind.PYTHON: "python_function",
    Kind.RUNTIME: "cuda_runtime",
    Kind.DRIVER: "cuda_driver",
    Kind.KERNEL: "kernel",
    Kind.MEMCPY: "gpu_memcpy",
    Kind.MEMSET: "gpu_memset",
    Kind.GPU_ANNOTATION: "gpu_user_annotation",
    Kind.TRACE_SPAN: "trace",
}

# Lower-cased category -> kind. The 2021 schema spells them "Operator", "Runtime", "Kernel", ...
_CATEGORY_KIND: dict[str, int] = {
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
}

_RANK_IN_NAME = re.compile(r"rank[_\-]?(\d+)", re.IGNORECASE)
# Lightning embeds the callback's state dict in span names: "ModelCheckpoint{'monitor': ...}.on_x".
_EMBEDDED_DICT = re.compile(r"\{.*\}")


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

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary (no device properties beyond name and memory)."""
        return {
            "path": str(self.path),
            "rank": self.rank,
            "rank_from": self.rank_from,
            "world_size": self.world_size,
            "schema": self.schema,
            "framework": self.framework,
            "devices": [
                {"id": d.get("id"), "name": d.get("name"), "total_mem": d.get("totalGlobalMem")}
                for d in self.device_properties
            ],
            "n_events": self.n_events,
            "parse_s": round(self.parse_s, 4),
        }


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
        thread_names: thread code -> ``thread_name`` metadata where the trace has it.
        src, kind, name, thread, start, dur, correlation: per-event columns (correlation ``-1``
            where absent).
        memory: the ``[memory]`` events.
        origin_ns: absolute epoch ns that ``start == 0`` stands for.
        warnings: data-quality notes (dropped events, missing fields, skipped files).
    """

    sources: list[TraceSource]
    names: list[str]
    thread_keys: list[tuple[int, str, str]]
    thread_names: dict[int, str]
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

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @property
    def end(self) -> np.ndarray:
        """End times (ns), ``start + dur``."""
        return self.start + self.dur

    def name_ids(self, predicate: Any) -> np.ndarray:
        """Boolean lookup array over name codes: ``predicate(name)`` per interned name."""
        return np.fromiter((bool(predicate(n)) for n in self.names), bool, len(self.names))


# --------------------------------------------------------------------------------------------
# reading files


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
_Scalar = str | int | float | bool | None


class _Correlation(msgspec.Struct, gc=False):
    """The ``args`` key of a complete event that the table reads."""

    correlation: Any = -1


class _Args(_Correlation, gc=False):
    """The ``args`` keys the table reads, with the defaults used where a key is absent:
    ``correlation`` of complete events, the allocator figures of ``[memory]`` events and the
    label of ``thread_name`` metadata."""

    name: Any = None
    nbytes: Any = msgspec.field(name="Bytes", default=0)
    total_allocated: Any = msgspec.field(name="Total Allocated", default=-1)
    total_reserved: Any = msgspec.field(name="Total Reserved", default=-1)
    device_type: Any = msgspec.field(name="Device Type", default=0)
    device_id: Any = msgspec.field(name="Device Id", default=-1)


_NO_ARGS = _Args()


# Fast path: the event's phase ``ph`` picks its struct (a msgspec tagged union), so a complete
# event materialises only what the columns use and the many flow / counter / async events are
# skipped without building anything. About a third faster than decoding every entry generically.


class _Timed(msgspec.Struct, gc=False):
    """The keys of an event that the columns read besides ``args``; absent keys read ``None``."""

    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None


class _Complete(_Timed, gc=False, tag_field="ph", tag="X"):
    args: _Correlation | list[Any] | _Scalar = None


class _Instant(msgspec.Struct, gc=False, tag_field="ph", tag="i"):
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    args: _Args | list[Any] | _Scalar = None


class _InstantOld(_Instant, tag="I"):
    """The deprecated spelling of an instant event."""


class _Meta(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    name: Any = None
    pid: Any = None
    tid: Any = None
    args: _Args | list[Any] | _Scalar = None


# every other phase of the Chrome trace event format (the deprecated async S/T/p/F included):
# decoded to an empty struct
_SKIPPED_PHASES = "BEbensftSTpFCPONDRcvV()"
_Skipped = tuple(
    msgspec.defstruct(f"_Skipped{i}", [], gc=False, tag_field="ph", tag=ph)
    for i, ph in enumerate(_SKIPPED_PHASES)
)
if TYPE_CHECKING:  # a union built at run time is no static type
    _Tagged = Any
else:
    _Tagged = Union[(_Complete, _Instant, _InstantOld, _Meta, *_Skipped)]


class _Event(_Timed, gc=False):
    """Fallback path: one ``traceEvents`` entry that is a JSON object, whatever its ``ph`` (an
    unknown phase, a missing or non-string ``ph``). ``args`` that is not an object (``null``, a
    list: seen in hand-edited traces) stays as decoded."""

    ph: Any = None
    args: _Args | list[Any] | _Scalar = None


# a trace entry that is not an object is counted and skipped, so it must still decode
_Entry = _Event | list[Any] | _Scalar


class _Document(msgspec.Struct, gc=False):
    """The top-level keys of a trace object; ``UNSET`` where the key is absent."""

    traceEvents: list[_Entry] | dict[str, Any] | _Scalar | msgspec.UnsetType = msgspec.UNSET
    distributedInfo: Any = msgspec.UNSET
    deviceProperties: Any = msgspec.UNSET
    baseTimeNanoseconds: Any = msgspec.UNSET
    Framework: Any = msgspec.UNSET

    def metadata(self) -> dict[str, Any]:
        """The keys present in the file other than ``traceEvents`` (what :func:`_source_meta`
        reads); without the events, so that dropping the event list frees them."""
        return {
            f: v
            for f in self.__struct_fields__
            if f != "traceEvents" and (v := getattr(self, f)) is not msgspec.UNSET
        }


class _TaggedDocument(_Document, gc=False):
    traceEvents: list[_Tagged] | msgspec.UnsetType = msgspec.UNSET


# a bare array document is the event list itself; a scalar document is JSON but no trace
_DECODER = msgspec.json.Decoder(_Document | list[_Entry] | _Scalar)
_FAST_DECODER = msgspec.json.Decoder(_TaggedDocument | list[_Tagged])
_UTF8_CHUNK = 1 << 20
_BYTE_POS = re.compile(r"\s*\(byte (\d+)\)$")
_NOT_WS = re.compile(rb"[^ \t\n\r]")


def _read_bytes(path: Path) -> memoryview:
    """The file's bytes (gunzipped when it starts with the gzip magic, whatever its suffix),
    without a UTF-8 byte order mark. Checked to be UTF-8 as a whole, because the decoder only
    looks at the strings it keeps.

    A plain file is memory-mapped, not read: copying 35 MB into a fresh buffer took as long as a
    third of the decoding on the dev machine. (A file truncated by another process while it is
    being decoded would end this process with SIGBUS; trace writers only append.)
    """
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            buf: bytes | mmap.mmap
            if stat.S_ISREG(st.st_mode) and st.st_size > 0:
                buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            else:  # a pipe (``<(zcat ...)``), a device, an empty file: read what comes
                buf = fh.read()
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from exc
    if buf[:2] == b"\x1f\x8b":
        try:
            buf = gzip.decompress(buf)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(path, f"corrupt or truncated gzip data ({exc})") from exc
    data = memoryview(buf)
    if buf[:3] == b"\xef\xbb\xbf":
        data = data[3:]  # a view: no copy of a large file
    ascii_only = buf.isascii() if isinstance(buf, bytes) else _is_ascii(data)
    if not ascii_only:
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


def _is_ascii(data: memoryview) -> bool:
    """``bytes.isascii`` for a buffer, without copying it into a ``bytes``."""
    return bool(np.frombuffer(data, np.uint8).max(initial=0) < 0x80)


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


def _source_meta(path: Path, doc: dict[str, Any], n_events: int, parse_s: float) -> TraceSource:
    dist = doc.get("distributedInfo")
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
    props = doc.get("deviceProperties")
    devices = tuple(d for d in props if isinstance(d, dict)) if isinstance(props, list) else ()
    framework = doc.get("Framework")
    return TraceSource(
        path=path,
        rank=rank,
        rank_from=rank_from,
        world_size=world,
        schema="relative" if "baseTimeNanoseconds" in doc else "absolute",
        framework=framework if isinstance(framework, str) else None,
        device_properties=devices,
        n_events=n_events,
        parse_s=parse_s,
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
    """Float µs (absolute or relative to ``base_ns``) -> absolute int64 ns.

    The integer part is split off first: 1.7e15 µs times 1000 exceeds float64's exact range, the
    difference to an integer origin does not.
    """
    if ts_us.size == 0:
        return np.zeros(0, np.int64)
    origin_us = int(np.floor(np.nanmin(ts_us)))
    rel_ns = np.rint((ts_us - origin_us) * 1000.0).astype(np.int64)
    return rel_ns + np.int64(base_ns + origin_us * 1000)


@dataclass
class _Parsed:
    """Columns of one file before they are concatenated (absolute ns)."""

    source: TraceSource
    keys: list[tuple[Any, Any, Any, Any]]  # the distinct (cat, name, pid, tid) of the events
    key: np.ndarray  # each complete event's index into ``keys``
    start: np.ndarray
    dur: np.ndarray
    corr: np.ndarray
    mem: dict[str, np.ndarray]
    mem_pid: list[Any]
    mem_tid: list[Any]
    thread_names: dict[tuple[str, str], str]
    warnings: list[str]


_Split = tuple[dict[str, Any], int, int, list[Any], list[Any], list[Any]]


def _split_fast(data: memoryview) -> _Split | None:
    """Decode with the tagged-union decoder into (top-level keys, number of entries, entries
    that are no object, complete events, ``[memory]`` events, metadata events); ``None`` when
    the file needs the generic path (an entry that is no object, an unknown or missing ``ph``, a
    malformed file, no trace)."""
    try:
        doc = _FAST_DECODER.decode(data)
    except msgspec.MsgspecError:
        return None  # the generic path decodes again and names the problem
    if isinstance(doc, list):
        top: dict[str, Any] = {}
        entries: list[Any] = doc
    elif isinstance(doc, _TaggedDocument) and doc.traceEvents is not msgspec.UNSET:
        top = doc.metadata()
        entries = doc.traceEvents
    else:
        return None
    del doc
    complete = [e for e in entries if type(e) is _Complete]
    # filter() with the C-level type check: 2.5x faster than isinstance in a comprehension
    memory = [e for e in filter(_Instant.__instancecheck__, entries) if e.name == "[memory]"]
    meta = [e for e in entries if type(e) is _Meta]
    return top, len(entries), 0, complete, memory, meta


def _split_generic(path: Path, data: memoryview) -> _Split | None:
    """:func:`_split_fast` for any JSON: every object entry decodes to :class:`_Event`."""
    try:
        doc = _DECODER.decode(data)
    except msgspec.MsgspecError as exc:
        raise _decode_error(path, data, exc) from exc
    if isinstance(doc, list):
        top: dict[str, Any] = {}
        entries: list[Any] = doc
    elif isinstance(doc, _Document) and doc.traceEvents is not msgspec.UNSET:
        top = doc.metadata()
        if not isinstance(doc.traceEvents, list):
            got = type(doc.traceEvents).__name__
            raise TraceError(path, f"'traceEvents' must be a list, got {got}")
        entries = doc.traceEvents
    else:
        return None
    n_events = len(entries)
    events: list[_Event] = [e for e in entries if type(e) is _Event]
    del doc, entries
    complete = [e for e in events if e.ph == "X"]
    memory = [e for e in events if (e.ph == "i" or e.ph == "I") and e.name == "[memory]"]
    meta = [e for e in events if e.ph == "M"]
    return top, n_events, n_events - len(events), complete, memory, meta


def _parse_file(path: Path) -> _Parsed | None:
    """Read one file into columns; ``None`` when it is JSON but not a trace (directory scans).

    The whole document is decoded at once by a typed msgspec decoder into slotted structs holding
    only the fields the table uses (``args`` keys included), then the complete events' fields are
    gathered into column lists. The tagged decoder is tried first; a file it cannot take is
    decoded again generically (same columns, the only path that reports malformed JSON).
    """
    t0 = time.perf_counter()
    data = _read_bytes(path)
    split = _split_fast(data)
    if split is None:
        split = _split_generic(path, data)
    del data
    parse_s = time.perf_counter() - t0
    if split is None:
        return None
    top, n_events, n_bad, complete, memory, meta = split
    keys, key_code = _intern_keys(complete)
    ts = _numeric([e.ts for e in complete])
    dur = _numeric([e.dur for e in complete])
    corr = _numeric(
        [a.correlation if isinstance(a := e.args, _Correlation) else -1 for e in complete]
    )
    del complete

    warnings: list[str] = []
    source = _source_meta(path, top, n_events, parse_s)
    base_ns = _as_int(top.get("baseTimeNanoseconds")) or 0
    if n_bad:
        warnings.append(f"{path.name}: skipped {n_bad} trace entries that are not JSON objects")

    keep = np.isfinite(ts)
    if not keep.all():
        warnings.append(f"{path.name}: dropped {int((~keep).sum())} events without a numeric 'ts'")
        key_code, ts, dur, corr = key_code[keep], ts[keep], dur[keep], corr[keep]
    bad_dur = ~np.isfinite(dur) | (dur < 0)
    if bad_dur.any():
        warnings.append(
            f"{path.name}: {int(bad_dur.sum())} complete events without a valid 'dur' "
            "(counted as zero length)"
        )
        dur = np.where(bad_dur, 0.0, dur)
    start_ns = _to_ns(ts, base_ns)
    dur_ns = np.rint(dur * 1000.0).astype(np.int64)

    corr = np.where(np.isfinite(corr), corr, -1).astype(np.int64)

    mem_cols = _memory_columns(memory, base_ns)
    thread_names: dict[tuple[str, str], str] = {}
    for ev in meta:
        if ev.name == "thread_name" and type(ev.args) is _Args:
            label = ev.args.name
            if isinstance(label, str):
                # several thread_name entries may exist for one tid: keep the most specific one
                key = (str(ev.pid), str(ev.tid))
                if key not in thread_names or "autograd" in label:
                    thread_names[key] = label
    return _Parsed(
        source=source,
        keys=keys,
        key=key_code,
        start=start_ns,
        dur=dur_ns,
        corr=corr,
        mem=mem_cols,
        mem_pid=[e.pid for e in memory],
        mem_tid=[e.tid for e in memory],
        thread_names=thread_names,
        warnings=warnings,
    )


_EVENT_KEY = operator.attrgetter("cat", "name", "pid", "tid")


def _intern_keys(events: list[Any]) -> tuple[list[tuple[Any, Any, Any, Any]], np.ndarray]:
    """The distinct ``(cat, name, pid, tid)`` of ``events`` and each event's code among them.

    One pass over the events for all four string-ish fields (few distinct combinations): a
    third of the time of interning each field on its own. Unhashable values (a malformed name
    that is a list, say) are interned by their ``str``.
    """
    table = _code_table()
    try:
        codes = np.fromiter(map(table.__getitem__, map(_EVENT_KEY, events)), np.int64, len(events))
    except TypeError:
        table = _code_table()
        keys = [
            tuple(v if isinstance(v, str | int | float | None) else str(v) for v in k)
            for k in map(_EVENT_KEY, events)
        ]
        codes = np.fromiter(map(table.__getitem__, keys), np.int64, len(keys))
    return list(table), codes


def _memory_columns(memory: list[_Event], base_ns: int) -> dict[str, np.ndarray]:
    args = [a if type(a := e.args) is _Args else _NO_ARGS for e in memory]

    def col(values: list[Any], default: float) -> np.ndarray:
        arr = _numeric(values)
        return np.where(np.isfinite(arr), arr, default)

    ts = _numeric([e.ts for e in memory])
    ok = np.isfinite(ts)
    out = {
        "ts": _to_ns(ts[ok], base_ns),
        "nbytes": col([a.nbytes for a in args], 0).astype(np.int64)[ok],
        "total_allocated": col([a.total_allocated for a in args], -1).astype(np.int64)[ok],
        "total_reserved": col([a.total_reserved for a in args], -1).astype(np.int64)[ok],
        "device_type": col([a.device_type for a in args], 0).astype(np.int64)[ok],
        "device_id": col([a.device_id for a in args], -1).astype(np.int64)[ok],
    }
    return out


# --------------------------------------------------------------------------------------------
# building the table


def _code_table() -> defaultdict[Any, int]:
    """A value -> code table where a missing value gets the next code (``len``, called in C)."""
    table: defaultdict[Any, int] = defaultdict()
    table.default_factory = table.__len__
    return table


def _intern(values: list[Any], table: defaultdict[Any, int]) -> np.ndarray:
    """Codes of ``values`` in ``table`` (extended in place), in one C-speed pass. Unhashable
    values (a malformed name that is a list, say) are interned by their ``str``."""
    try:
        return np.fromiter(map(table.__getitem__, values), np.int64, len(values))
    except TypeError:
        values = [v if isinstance(v, str | int | float | None) else str(v) for v in values]
        return np.fromiter(map(table.__getitem__, values), np.int64, len(values))


def _intern_pairs(
    src: int, pids: list[Any], tids: list[Any], table: dict[tuple[int, Any, Any], int]
) -> np.ndarray:
    """Codes of the ``(src, pid, tid)`` triples in ``table`` without building a tuple per event:
    pids and tids are interned on their own (few distinct values) and combined numerically."""
    if not pids:
        return np.zeros(0, np.int64)
    pid_table = _code_table()
    tid_table = _code_table()
    pc = _intern(pids, pid_table)
    tc = _intern(tids, tid_table)
    combo, inverse = np.unique(pc * len(tid_table) + tc, return_inverse=True)
    pid_vals, tid_vals = list(pid_table), list(tid_table)
    codes = np.fromiter(
        (
            table.setdefault(
                (src, pid_vals[c // len(tid_vals)], tid_vals[c % len(tid_vals)]), len(table)
            )
            for c in combo.tolist()
        ),
        np.int64,
        combo.size,
    )
    return codes[inverse]


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
    parsed: list[_Parsed] = []
    warnings: list[str] = []
    root = roots[0]
    for r in roots:
        for f in find_trace_files(r):
            p = _parse_file(f)
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

    name_table = _code_table()
    cat_table = _code_table()
    raw_thread: dict[tuple[int, Any, Any], int] = {}
    src_cols, name_cols, cat_cols, thread_cols = [], [], [], []
    mem_thread_cols = []
    for i, p in enumerate(parsed):
        src_cols.append(np.full(len(p.key), i, np.int64))
        # codes per distinct key, then per event by indexing
        name_of = np.fromiter((name_table[k[1]] for k in p.keys), np.int64, len(p.keys))
        cat_of = np.fromiter((cat_table[k[0]] for k in p.keys), np.int64, len(p.keys))
        thread_of = np.fromiter(
            (raw_thread.setdefault((i, k[2], k[3]), len(raw_thread)) for k in p.keys),
            np.int64,
            len(p.keys),
        )
        name_cols.append(name_of[p.key])
        cat_cols.append(cat_of[p.key])
        thread_cols.append(thread_of[p.key])
        mem_thread_cols.append(_intern_pairs(i, p.mem_pid, p.mem_tid, raw_thread))

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
            _CATEGORY_KIND.get(c.lower(), Kind.OTHER) if isinstance(c, str) else Kind.OTHER
            for c in cat_table
        ),
        np.int64,
        len(cat_table),
    )

    start_abs = np.concatenate([p.start for p in parsed])
    mem_abs = np.concatenate([p.mem["ts"] for p in parsed])
    candidates = [int(a.min()) for a in (start_abs, mem_abs) if a.size]
    if not candidates:
        raise TraceError(root, "trace holds no timed events")
    origin = min(candidates)

    def cat(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

    memory = MemoryTable(
        src=cat([np.full(len(p.mem["ts"]), i, np.int64) for i, p in enumerate(parsed)]),
        ts=mem_abs - origin,
        nbytes=cat([p.mem["nbytes"] for p in parsed]),
        total_allocated=cat([p.mem["total_allocated"] for p in parsed]),
        total_reserved=cat([p.mem["total_reserved"] for p in parsed]),
        device_type=cat([p.mem["device_type"] for p in parsed]),
        device_id=cat([p.mem["device_id"] for p in parsed]),
    )
    table = EventTable(
        sources=[p.source for p in parsed],
        names=list(norm_table),
        thread_keys=thread_keys,
        thread_names=thread_names,
        src=cat(src_cols),
        kind=kind_of_cat[cat(cat_cols)] if cat_cols else np.zeros(0, np.int64),
        name=name_map[cat(name_cols)] if name_cols else np.zeros(0, np.int64),
        thread=raw_to_canon[cat(thread_cols)] if thread_cols else np.zeros(0, np.int64),
        start=start_abs - origin,
        dur=cat([p.dur for p in parsed]),
        correlation=cat([p.corr for p in parsed]),
        memory=memory,
        origin_ns=origin,
        warnings=warnings,
    )
    _nest(table)
    return table


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
    host = np.isin(table.kind, Kind.HOST) & (table.dur > 0)
    device = np.isin(table.kind, Kind.DEVICE)
    self_ns[device] = table.dur[device]  # device activities are leaves
    idx = np.flatnonzero(host)
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
        order = np.lexsort((idx, -e, s))
        s, e = s[order], e[order]
        m = order.size
        pos = np.arange(m, dtype=np.int64)
        depth = pos - np.searchsorted(np.sort(e), s, side="right")
        key = depth * m + pos
        sorted_key = np.sort(key)
        k = np.searchsorted(sorted_key, (depth - 1) * m + pos, side="left") - 1
        has = (depth > 0) & (k >= 0)
        cand = np.where(has, sorted_key[np.maximum(k, 0)], 0)
        has &= cand // m == depth - 1
        ppos = np.where(has, cand % m, -1)
        # a parent must be on the same thread (guards against badly overlapping spans)
        same = np.zeros(m, bool)
        same[has] = thread[order][ppos[has]] == thread[order][has]
        ppos = np.where(same, ppos, -1)
        overlap = np.minimum(e, np.where(ppos >= 0, e[np.maximum(ppos, 0)], e)) - s
        child_sum = np.bincount(ppos[ppos >= 0], weights=overlap[ppos >= 0], minlength=m)
        own = np.maximum((e - s) - np.rint(child_sum).astype(np.int64), 0)
        sorted_idx = idx[order]
        parent[sorted_idx] = np.where(ppos >= 0, sorted_idx[np.maximum(ppos, 0)], -1)
        self_ns[sorted_idx] = own
    table.parent = parent
    table.self_ns = self_ns
