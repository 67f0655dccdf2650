"""Incremental reading of a Chrome trace document in bounded memory.

:class:`TraceStream` reads a trace file block by block and hands out its top-level keys (their
values as raw JSON, decoded by the caller) and the elements of its ``traceEvents`` array in
pieces of about ``chunk`` bytes, each piece a complete JSON array (``[e1, e2, ...]``) that
msgspec decodes in one call. Only the current block and the piece being decoded are held: a
4 GB trace is read in the memory of a few pieces.

Where a piece ends is found cheaply and checked exactly: the candidate cut is the last ``},``
of the window (the boundary between two objects as every trace writer spells it), and the piece
up to it is decoded. A cut inside a string, an escape or a nested ``args`` object leaves a
string or a bracket open, so that piece is never valid JSON: the decoder refuses it and an
earlier candidate is tried. Where no candidate works (the end of the array, an odd layout) an
exact scanner that skips strings by regular expression and counts brackets finds the boundary.

Anything this reader does not expect (malformed JSON, a ``traceEvents`` that is no array, a
repeated ``traceEvents``, an invalid UTF-8 byte, a corrupt gzip stream) raises
:class:`Fallback`: the caller then reads the whole file at once, which reports the problem in
the usual words (or, for a valid but unusual file, reads it).
"""

from __future__ import annotations

import codecs
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Generic, TypeVar

import msgspec

__all__ = ["Fallback", "TraceStream"]

T = TypeVar("T")

# a JSON string (escapes included; an unterminated one at the end of the buffer matches too, so
# that a bracket inside it is never taken for structure) or one bracket
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
_SCALAR = re.compile(rb"[^ \t\n\r,\]}]+")
_WS = b" \t\n\r"
_SPACED_CUT = re.compile(rb"\}[ \t\n\r]+,")
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_BOM = b"\xef\xbb\xbf"
#: candidate cuts tried per window before the exact scanner takes over
_TRIES = 4


class Fallback(Exception):
    """The file cannot be read piece by piece; read it whole (which names any problem)."""


class TraceStream(Generic[T]):
    """Block-wise reader of one trace document (see the module docstring).

    Args:
        fh: the open binary stream (a file, or a ``gzip.GzipFile`` for a compressed trace).
        chunk: bytes read per ``read`` call, and the size of a piece of the event list.
        decode: decodes a piece (a JSON array); raises :class:`msgspec.DecodeError` for invalid
            JSON (a cut in the wrong place).
    """

    def __init__(self, fh: BinaryIO, chunk: int, decode: Callable[[bytes], T]) -> None:
        self._fh = fh
        self._chunk = chunk
        self._decode = decode
        self._block = max(1, chunk)
        self._buf = bytearray()
        self._pos = 0
        self._eof = False
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    # -- buffer ---------------------------------------------------------------------------

    def _fill(self) -> bool:
        """Read one more block; ``False`` at the end of the file."""
        if self._eof:
            return False
        try:
            data = self._fh.read(self._block)
        except (OSError, EOFError, zlib.error) as exc:  # corrupt / truncated gzip
            raise Fallback(str(exc)) from exc
        if not data:
            self._eof = True
            try:
                self._utf8.decode(b"", final=True)
            except UnicodeDecodeError as exc:
                raise Fallback("not UTF-8") from exc
            return False
        if not data.isascii():
            try:
                self._utf8.decode(data)
            except UnicodeDecodeError as exc:
                raise Fallback("not UTF-8") from exc
        # drop what was consumed but the byte before the position (a piece is decoded in place
        # with its first byte turned into '['), keep the rest
        if self._pos > 1:
            del self._buf[: self._pos - 1]
            self._pos = 1
        self._buf += data
        return True

    def _peek(self) -> int | None:
        """The next non-whitespace byte (consuming the whitespace), ``None`` at the end."""
        while True:
            buf, pos = self._buf, self._pos
            while pos < len(buf) and buf[pos] in _WS:
                pos += 1
            self._pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self._fill():
                return None

    def _expect(self, allowed: bytes) -> int:
        c = self._peek()
        if c is None or c not in allowed:
            raise Fallback(f"expected one of {allowed!r}")
        self._pos += 1
        return c

    def _match(self, scan: Callable[[bytearray, int], int | None]) -> int:
        """``scan(buf, pos)`` on ever more data until it gives an answer."""
        while True:
            got = scan(self._buf, self._pos)
            if got is not None:
                return got
            if not self._fill():
                raise Fallback("unexpected end of data")

    # -- values ---------------------------------------------------------------------------

    def _string_end(self, buf: bytes | bytearray, pos: int) -> int | None:
        m = _STRING.match(buf, pos)
        if m is None or len(m.group()) < 2 or not m.group().endswith(b'"'):
            return None
        # an escaped quote at the very end of the buffer ("...\") matched as a closing quote
        return m.end() if m.end() < len(buf) or self._eof else None

    def _value_end(self, buf: bytes | bytearray, pos: int) -> int | None:
        """End of the JSON value at ``pos`` (``None``: the buffer ends first)."""
        c = buf[pos]
        if c == 0x22:  # '"'
            return self._string_end(buf, pos)
        if c in b"[{":
            depth = 0
            for m in _TOKEN.finditer(buf, pos):
                tok = m.group()
                if tok[0] == 0x22:
                    if len(tok) < 2 or not tok.endswith(b'"') or m.end() == len(buf):
                        return None
                elif tok in b"[{":
                    depth += 1
                else:
                    depth -= 1
                    if depth == 0:
                        return m.end()
            return None
        scalar = _SCALAR.match(buf, pos)
        if scalar is None:
            raise Fallback("not a JSON value")
        return scalar.end() if scalar.end() < len(buf) or self._eof else None

    def _value(self) -> bytearray:
        if self._peek() is None:
            raise Fallback("unexpected end of data")
        end = self._match(self._value_end)
        out = self._buf[self._pos : end]
        self._pos = end
        return out

    # -- the document -----------------------------------------------------------------------

    def document(self) -> Iterator[tuple[str, Any]]:
        """The document's parts in file order: ``("key", b'"name"')`` for each top-level key,
        followed by ``("value", raw JSON)``, or for ``traceEvents`` by ``("events",
        decode(piece))`` for each piece of the event list. A bare array document is read as
        ``{"traceEvents": [...]}``."""
        while len(self._buf) < len(_BOM) and self._fill():
            pass
        if self._buf.startswith(_BOM):
            self._pos = len(_BOM)
        c = self._peek()
        if c == 0x5B:  # '[': the document is the event list
            self._pos += 1
            yield "key", b'"traceEvents"'
            yield from self._elements()
        elif c == 0x7B:  # '{'
            self._pos += 1
            yield from self._members()
        else:
            raise Fallback("not a JSON object or array")
        if self._peek() is not None:
            raise Fallback("trailing data after the document")

    def _members(self) -> Iterator[tuple[str, Any]]:
        if self._peek() == 0x7D:  # '}'
            self._pos += 1
            return
        seen_events = False
        while True:
            if self._peek() != 0x22:
                raise Fallback("expected a key")
            end = self._match(self._string_end)
            key = self._buf[self._pos : end]
            self._pos = end
            self._expect(b":")
            if key == b'"traceEvents"':
                if seen_events or self._peek() != 0x5B:
                    raise Fallback("traceEvents repeated or not a list")
                seen_events = True
                self._pos += 1
                yield "key", key
                yield from self._elements()
            else:
                yield "key", key
                yield "value", self._value()
            if self._expect(b",}") == 0x7D:
                return

    def _elements(self) -> Iterator[tuple[str, Any]]:
        """The array's elements in pieces (the opening ``[`` consumed); consumes the ``]``."""
        if self._peek() == 0x5D:  # ']'
            self._pos += 1
            return
        while True:
            while len(self._buf) - self._pos < self._chunk and self._fill():
                pass
            piece, last = self._piece()
            if piece is not None:
                yield "events", piece
            if last:
                return

    def _piece(self) -> tuple[T | None, bool]:
        """The next piece decoded, and whether it ends the event list."""
        decode, size = self._decode, self._chunk
        while True:
            buf, pos = self._buf, self._pos
            hi = min(len(buf), pos + size)
            for _ in range(_TRIES):
                cut = buf.rfind(b"},", pos, hi)
                comma = cut + 1
                if cut < 0:  # a writer that puts space between '}' and ','
                    spaced = _last_spaced_cut(buf, pos, hi)
                    if spaced is None:
                        break
                    cut, comma = spaced
                try:
                    out = _decode_in_place(buf, pos, cut + 1, decode)
                except msgspec.DecodeError as exc:
                    data = b"[" + buf[pos : cut + 1] + b"]"
                    end = _array_end(data, exc)
                    if end is not None:  # the event list ended inside the window
                        self._pos = pos + end - 1
                        return decode(data[:end]), True
                    hi = cut
                    continue
                self._pos = comma + 1  # the elements up to the cut, and the comma
                return out, False
            found = _scan(buf, pos, size, self._eof)
            if found is None:  # not one whole element in the buffer yet
                if not self._fill():
                    raise Fallback("unexpected end of data in traceEvents")
                size = max(size, len(self._buf) - self._pos)
                continue
            cut, closes = found
            body = buf[pos:cut]
            try:
                tail = decode(b"[" + body + b"]") if body.strip(_WS) else None
            except msgspec.DecodeError as exc:
                raise Fallback("malformed traceEvents") from exc
            self._pos = cut
            if closes:
                self._pos = cut + 1
                return tail, True
            return tail, self._expect(b",]") == 0x5D


def _last_spaced_cut(buf: bytearray, lo: int, hi: int) -> tuple[int, int] | None:
    """The last ``}`` followed by whitespace and a ``,`` in ``buf[lo:hi]``, as (index of the
    brace, index of the comma)."""
    found = deque(_SPACED_CUT.finditer(buf, lo, hi), maxlen=1)
    return (found[0].start(), found[0].end() - 1) if found else None


def _decode_in_place(buf: bytearray, start: int, end: int, decode: Callable[[bytes], T]) -> T:
    """``decode(b"[" + buf[start:end] + b"]")`` without copying the piece: the byte before it
    (a ``[``, ``,`` or whitespace already read) and the one after it (the ``,`` of the cut)
    stand in for the brackets while it is decoded."""
    before, after = buf[start - 1], buf[end]
    buf[start - 1], buf[end] = 0x5B, 0x5D
    try:
        with memoryview(buf) as whole, whole[start - 1 : end + 1] as piece:
            return decode(piece)  # type: ignore[arg-type]  # any buffer decodes
    finally:
        buf[start - 1], buf[end] = before, after


def _array_end(data: bytes, exc: msgspec.DecodeError) -> int | None:
    """Where the JSON array at the start of ``data`` ends when the decoder found trailing
    characters after it (the event list closed inside the piece), else ``None``."""
    m = _TRAILING.search(str(exc))
    if m is None:
        return None
    end = data.rfind(b"]", 0, int(m.group(1)) + 1) + 1
    if end <= 0:
        return None
    try:
        msgspec.json.decode(data[:end], type=msgspec.Raw)
    except msgspec.DecodeError:
        return None
    return end


def _scan(buf: bytes | bytearray, pos: int, limit: int, eof: bool) -> tuple[int, bool] | None:
    """Exact boundary search: the end of the last element that starts within ``limit`` bytes
    of ``pos`` and ends in the buffer (``(end, False)``), or the position of the ``]`` that
    closes the array (``(index, True)``); ``None`` when the buffer ends before either."""
    depth = 0
    last = -1
    for m in _TOKEN.finditer(buf, pos):
        tok = m.group()
        if tok[0] == 0x22:
            if len(tok) < 2 or not tok.endswith(b'"') or (m.end() == len(buf) and not eof):
                return None
            continue
        if last >= 0 and m.start() > pos + limit:
            return last, False
        if tok in b"[{":
            depth += 1
        elif depth == 0:
            if tok != b"]":
                raise Fallback("unbalanced brackets in traceEvents")
            return m.start(), True
        else:
            depth -= 1
            if depth == 0:
                last = m.end()
    return (last, False) if last >= 0 else None
