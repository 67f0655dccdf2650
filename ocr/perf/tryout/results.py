"""``<run>/perf/try.jsonl``: what ``ocr-perf try`` measured, one line per candidate (and one for
the winners together) per session, schema ``receipt-ocr/try`` (versioned like the other run files,
see :mod:`ocr.perf.rundir`). Sessions append; readers show the latest."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocr.perf.rundir import PERF_DIRNAME, JsonlWriter, read_records

__all__ = ["TRY_SCHEMA", "TRY_VERSION", "TryRecord", "latest_session", "try_path", "write_records"]

TRY_SCHEMA = "receipt-ocr/try"
TRY_VERSION = 1


@dataclass(frozen=True)
class TryRecord:
    """One measured (or untried) change.

    Args:
        session: when the ``try`` session started (ISO 8601, UTC): groups a session's lines.
        kind: ``candidate``, or ``combined`` (the recommended ones together).
        override: the Hydra override(s), space-separated; ``None`` for a plain-language change.
        description: the change in words.
        family: the candidate's family (``combined`` for the winners together).
        alters_computation: the change alters what is computed (label it).
        eval_time: checked on the checkpoint with ``ocr-test`` (evaluation speed and H-mean).
        status: ``recommended``, ``no significant change``, ``regression``, ``inconclusive``,
            ``H-mean drop`` (faster or not, it lowers the H-mean beyond the tolerance),
            ``not applicable``, ``failed`` or ``untried`` (the budget ran out).
        pairs: pairs measured.
        ratios: ``speed(changed) / speed(unchanged)`` per pair.
        median, low, high: the median ratio and its 95 % bootstrap interval (None without pairs).
        base_samples_per_sec, changed_samples_per_sec: median speeds of the two sides.
        hmean_base, hmean_changed: eval-time only: H-mean on the checkpoint.
        note: why (not applicable, failed, untried, the H-mean drop), or "".
    """

    session: str
    kind: str
    override: str | None
    description: str
    family: str
    alters_computation: bool
    eval_time: bool
    status: str
    pairs: int = 0
    ratios: tuple[float, ...] = ()
    median: float | None = None
    low: float | None = None
    high: float | None = None
    base_samples_per_sec: float | None = None
    changed_samples_per_sec: float | None = None
    hmean_base: float | None = None
    hmean_changed: float | None = None
    note: str = ""

    @property
    def recommended(self) -> bool:
        return self.status == "recommended"

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TryRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in record.items() if k in names}
        values["ratios"] = tuple(float(r) for r in values.get("ratios") or ())
        return cls(**values)


def try_path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / PERF_DIRNAME / "try.jsonl"


def write_records(run_dir: str | os.PathLike[str], records: list[TryRecord]) -> Path:
    """Append ``records`` to the run's ``perf/try.jsonl``; returns its path."""
    writer = JsonlWriter(try_path(run_dir), TRY_SCHEMA, TRY_VERSION)
    try:
        for record in records:
            writer.write(dataclasses.asdict(record))
    finally:
        writer.close()
    return writer.path


def latest_session(run_dir: str | os.PathLike[str]) -> list[TryRecord]:
    """The lines of the last session in the run's ``perf/try.jsonl`` (``[]`` without one)."""
    records = [
        TryRecord.from_record(r) for r in read_records(try_path(run_dir), TRY_SCHEMA, TRY_VERSION)
    ]
    if not records:
        return []
    last = records[-1].session
    return [r for r in records if r.session == last]
