"""Writing and reading the record files of :mod:`trainperf.records`.

:class:`RecordWriter` appends one line per record and flushes it; :func:`read_records` /
:func:`read_run_record` read them back (the rules in :mod:`trainperf.records.schema`' docstring:
other schemas skipped, unknown keys ignored, a higher version refused naming file and line, a cut
final line a warning)."""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec

from trainperf.records.epoch_scans import GrowthRecord, RecompilesRecord
from trainperf.records.run_record import RunRecord
from trainperf.records.schema import JsonValue, R, Record, RunDirError, current_schema

# -- writing -----------------------------------------------------------------------------------


def enc_hook(value: Any) -> Any:
    """numpy / torch scalars as Python numbers; paths and anything else as text."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError):
            pass
    return str(value)


_ENCODER = msgspec.json.Encoder(enc_hook=enc_hook)


class RecordWriter:
    """Appends one record per line to ``path`` (``SomeRecord.path(run_dir)``, created with its
    folder on first write) and flushes it; thread-safe. Records of several kinds may share a
    file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fh: IO[bytes] | None = None

    def write(self, record: Record) -> None:
        """Append ``record``. Raises ``OSError`` when the file cannot be written (callers in
        callbacks turn that into one warning), ``TypeError`` for an unencodable field."""
        if record.v != record.VERSION:
            record = msgspec.structs.replace(record, v=record.VERSION)
        line = _ENCODER.encode(record) + b"\n"
        with self._lock:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "ab")  # noqa: SIM115 - kept open
            self._fh.write(line)
            self._fh.flush()

    def close(self) -> None:
        """Close the file (idempotent); a later :meth:`write` reopens it in append mode."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


# -- reading -----------------------------------------------------------------------------------


def parse_record(kind: type[R], raw: Mapping[str, object], where: str) -> R:
    """``raw`` (one object of ``kind``'s schema) as ``kind``; :class:`RunDirError` naming
    ``where`` for a missing / newer version or a field of the wrong type."""
    version = raw.get("v")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RunDirError(f"{where} has no integer 'v' (format version)")
    if version > kind.VERSION:
        raise RunDirError(
            f"{where} is {kind.schema()} version {version}; this trainperf reads up to "
            f"version {kind.VERSION} (upgrade trainperf)"
        )
    if current_schema(raw.get("schema")) == kind.schema():
        raw = {**raw, "schema": kind.schema()}  # a legacy name read as today's
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise RunDirError(f"{where}: {kind.schema()} record: {exc}") from exc


def read_records(path: str | os.PathLike[str], kind: type[R]) -> list[R]:
    """The records of ``kind`` in the JSON-lines file ``path``, in file order; ``[]`` when the
    file does not exist. Errors and skipped lines: see the module doc."""
    p = Path(path)
    try:
        with open(p, encoding="utf-8") as fh:
            lines = fh.readlines()  # split at newlines only (a string may hold U+2028)
    except FileNotFoundError:
        return []
    out = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not line.endswith("\n"):
                warnings.warn(
                    f"{p}: line {number} is cut short (a run that stopped mid-write); ignored",
                    stacklevel=2,
                )
                continue
            raise RunDirError(f"{p}: line {number} is not valid JSON: {exc.msg}") from exc
        if not isinstance(raw, dict):
            raise RunDirError(f"{p}: line {number} is not a JSON object")
        if current_schema(raw.get("schema")) == kind.schema():
            out.append(parse_record(kind, raw, f"{p}: line {number}"))
    return out


def read_run_record(run_dir: str | os.PathLike[str]) -> RunRecord:
    """``<run_dir>/perf/run.json``; ``FileNotFoundError`` when absent, :class:`RunDirError`
    when malformed or newer than this reader."""
    path = RunRecord.path(run_dir)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    if not isinstance(raw, dict) or current_schema(raw.get("schema")) != RunRecord.schema():
        raise RunDirError(f"{path}: not a {RunRecord.schema()} file")
    return parse_record(RunRecord, raw, str(path))


def write_run_record(run_dir: str | os.PathLike[str], update: Mapping[str, JsonValue]) -> Path:
    """Merge ``update`` (fields of :class:`RunRecord`) into ``<run_dir>/perf/run.json``,
    written atomically (several callbacks each add their part; the first ``started_at`` stays),
    and return its path. Raises ``OSError`` when unwritable, :class:`RunDirError` for a field of
    the wrong type."""
    path = RunRecord.path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        current: dict[str, Any] = msgspec.to_builtins(read_run_record(run_dir))
    except (FileNotFoundError, RunDirError):
        current = {}
    fields = msgspec.to_builtins(update, enc_hook=enc_hook)
    merged = {**current, **{k: v for k, v in fields.items() if v is not None}}
    if current.get("started_at") is not None:
        merged["started_at"] = current["started_at"]
    merged.update({"schema": RunRecord.schema(), "v": RunRecord.VERSION})
    record = parse_record(RunRecord, merged, str(path))
    tmp = path.with_name(f".run.json.{os.getpid()}.tmp")
    # fields nobody set stay out of the file
    present = {k: v for k, v in msgspec.to_builtins(record).items() if v is not None}
    tmp.write_bytes(msgspec.json.format(_ENCODER.encode(present), indent=2))
    os.replace(tmp, path)
    return path


EpochScanned = TypeVar("EpochScanned", GrowthRecord, RecompilesRecord)


def epoch_runs(records: Iterable[EpochScanned]) -> list[list[EpochScanned]]:
    """Per-epoch records split into the runs that wrote them, in file order: a new run (a
    restart, a second fit into the same folder) starts again at an epoch not after the last."""
    runs: list[list[EpochScanned]] = []
    for record in records:
        if not runs or record.epoch <= runs[-1][-1].epoch:
            runs.append([])
        runs[-1].append(record)
    return runs
