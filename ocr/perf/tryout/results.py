"""``<run>/perf/try.jsonl``: what ``ocr-perf try`` measured, one
:class:`~ocr.perf.records.TryRecord` per candidate (and one for the winners together) per
session. Sessions append; readers show the latest."""

from __future__ import annotations

import os
from pathlib import Path

from ocr.perf.records import RecordWriter, TryRecord, read_records

__all__ = ["latest_session", "write_records"]


def write_records(run_dir: str | os.PathLike[str], records: list[TryRecord]) -> Path:
    """Append ``records`` to the run's ``perf/try.jsonl``; returns its path."""
    writer = RecordWriter(TryRecord.path(run_dir))
    try:
        for record in records:
            writer.write(record)
    finally:
        writer.close()
    return writer.path


def latest_session(run_dir: str | os.PathLike[str]) -> list[TryRecord]:
    """The lines of the last session in the run's ``perf/try.jsonl`` (``[]`` without one)."""
    records = read_records(TryRecord.path(run_dir), TryRecord)
    if not records:
        return []
    last = records[-1].session
    return [r for r in records if r.session == last]
