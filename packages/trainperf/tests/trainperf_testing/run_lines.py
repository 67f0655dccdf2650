"""Run-directory lines for tests: hand-made records written as raw JSON lines (so a test can
write partial, odd or old records the typed writers would not), and records read back through
the real typed reader as plain dicts (so assertions can name keys as the files do)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
from trainperf.records.files import read_records, read_run_record
from trainperf.records.run_info import to_jsonable
from trainperf.records.schema import Record


def write_lines(
    path: str | os.PathLike[str],
    kind: type[Record],
    records: Iterable[Mapping[str, Any]],
    version: int | None = None,
) -> Path:
    """Append ``records`` as lines of ``kind``'s schema (version ``kind.VERSION`` unless given)
    to ``path``, NaN as null, as the writers do; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    v = kind.VERSION if version is None else version
    with open(p, "a", encoding="utf-8") as fh:
        for record in records:
            fields = to_jsonable(dict(record))
            assert isinstance(fields, dict)
            line = {"schema": kind.schema(), "v": v, **fields}
            fh.write(json.dumps(line, allow_nan=False) + "\n")
    return p


def read_dicts(path: str | os.PathLike[str], kind: type[Record]) -> list[dict[str, Any]]:
    """The records of ``kind`` in ``path`` read with the typed reader, as JSON-like dicts."""
    return [msgspec.to_builtins(r) for r in read_records(path, kind)]


def read_run_dict(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """``perf/run.json`` read with the typed reader, as a dict of the fields that are set."""
    record = msgspec.to_builtins(read_run_record(run_dir))
    return {k: v for k, v in record.items() if v is not None}
