"""The msgspec types one Chrome trace file decodes into.

Only the keys the event table reads, typed ``Any`` where real traces disagree (a ``ts`` as int,
float or string), a tagged union on the event phase ``ph`` for the fast path (:data:`Tagged`:
complete and instant events built, every other phase an empty struct) and a generic :class:`Event`
for the rest. Used by :mod:`~trainperf.analysis.trace.decode`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import msgspec

__all__ = [
    "NO_ARGS",
    "SKIPPED_PHASES",
    "Args",
    "Complete",
    "Correlation",
    "Document",
    "Entry",
    "Event",
    "Instant",
    "InstantOld",
    "Scalar",
    "Skipped",
    "Tagged",
    "Timed",
    "TopLevel",
]

Scalar = str | int | float | bool | None


class Correlation(msgspec.Struct, gc=False):
    """The ``args`` key of a complete event that the table reads."""

    correlation: Any = -1


class Args(Correlation, gc=False):
    """The ``args`` keys the table reads, with the defaults used where a key is absent:
    ``correlation`` of complete events and the allocator figures of ``[memory]`` events."""

    nbytes: Any = msgspec.field(name="Bytes", default=0)
    total_allocated: Any = msgspec.field(name="Total Allocated", default=-1)
    total_reserved: Any = msgspec.field(name="Total Reserved", default=-1)
    device_type: Any = msgspec.field(name="Device Type", default=0)
    device_id: Any = msgspec.field(name="Device Id", default=-1)


NO_ARGS = Args()


# Fast path: the event's phase ``ph`` picks its struct (a msgspec tagged union), so a complete
# event materialises only what the columns use and the many flow / counter / async events are
# skipped without building anything. About a third faster than decoding every entry generically.


class Timed(msgspec.Struct, gc=False):
    """The keys of an event that the columns read besides ``args``; absent keys read ``None``.
    Typed ``Any`` on purpose: real traces carry ``ts`` as int, float or string, tids as int or
    ``"stream 7"``, and the columns must see exactly the values ``json.loads`` would give."""

    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None


class Complete(Timed, gc=False, tag_field="ph", tag="X"):
    args: Correlation | list[Any] | Scalar = None


class Instant(msgspec.Struct, gc=False, tag_field="ph", tag="i"):
    name: Any = None
    ts: Any = None
    args: Args | list[Any] | Scalar = None


class InstantOld(Instant, tag="I"):
    """The deprecated spelling of an instant event."""


# every other phase of the Chrome trace event format (the deprecated async S/T/p/F and metadata
# included): decoded to an empty struct
SKIPPED_PHASES = "BEbensftSTpFCPONDRcvVM()"
Skipped = tuple(
    msgspec.defstruct(f"Skipped{i}", [], gc=False, tag_field="ph", tag=ph)
    for i, ph in enumerate(SKIPPED_PHASES)
)
if TYPE_CHECKING:  # a union built at run time is no static type
    Tagged = Any
else:
    Tagged = Union[(Complete, Instant, InstantOld, *Skipped)]


class Event(Timed, gc=False):
    """Fallback path: one ``traceEvents`` entry that is a JSON object, whatever its ``ph`` (an
    unknown phase, a missing or non-string ``ph``). ``args`` that is not an object (``null``, a
    list: seen in hand-edited traces) stays as decoded."""

    ph: Any = None
    args: Args | list[Any] | Scalar = None


# a trace entry that is not an object is counted and skipped, so it must still decode
Entry = Event | list[Any] | Scalar


class TopLevel(msgspec.Struct, gc=False):
    """The top-level keys of a trace object that :func:`_source_meta` reads; ``UNSET`` where
    the key is absent (and all of them for a file that is a bare list of events)."""

    distributedInfo: Any = msgspec.UNSET
    deviceProperties: Any = msgspec.UNSET
    baseTimeNanoseconds: Any = msgspec.UNSET
    Framework: Any = msgspec.UNSET


class Document(TopLevel, gc=False):
    """A trace object: its events and its other top-level keys."""

    traceEvents: list[Entry] | dict[str, Any] | Scalar | msgspec.UnsetType = msgspec.UNSET

    def metadata(self) -> TopLevel:
        """The keys other than ``traceEvents``, without the events, so that dropping the event
        list frees them."""
        return TopLevel(
            self.distributedInfo, self.deviceProperties, self.baseTimeNanoseconds, self.Framework
        )
