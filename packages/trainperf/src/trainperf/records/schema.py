"""The run folder's record base, schema prefixes and run-folder error.

The run folder's record base (:class:`Record`: schema name, format version, file), the schema
prefixes and the run-folder error; the record kinds are in :mod:`~trainperf.records.run_record`,
:mod:`~trainperf.records.epochs`, :mod:`~trainperf.records.monitoring`,
:mod:`~trainperf.records.try_record` and :mod:`~trainperf.records.epoch_scans`.

The run directory's records: one typed record per kind, each owning its schema name and
format version, written and read only through :mod:`trainperf.records.files` (possibly later,
on another machine).

Layout (``<run>`` is ``trainer.default_root_dir``; the Hydra output folder for ``ocr-train``)::

    <run>/perf/run.json          one RunRecord (host, versions, devices, world size, command
                                 line, the LightningModule's hparams, FLOPs)
    <run>/perf/epochs.jsonl      one EpochRecord per stage epoch
    <run>/perf/intervals.jsonl   IntervalRecord: in-epoch training progress
    <run>/perf/resources.jsonl   ResourceSample lines, then a ResourceSummary per run
    <run>/perf/alerts.jsonl      AlertEvent lines (every rank's, each naming its rank)
    <run>/perf/profiler.jsonl    ProfilerWindow: one per torch.profiler window
    <run>/perf/try.jsonl         TryRecord: what ``trainperf try`` measured
    <run>/perf/growth.jsonl      GrowthRecord: the attribute scan at each training epoch's end
    <run>/perf/recompiles.jsonl  RecompilesRecord: Dynamo compiles per training epoch
    <run>/perf/lifecycle.jsonl   LifecycleRecord: each rank's fit / validate / test start and end
    <run>/profiler_traces/       torch.profiler Chrome traces

Every line (and ``run.json``) carries ``"schema"`` (the record class's tag, e.g.
``trainperf/perf-epoch``) and ``"v"`` (an integer format version). Folders written before the
toolkit left the app that grew it carry the same schemas under :data:`LEGACY_SCHEMA_PREFIX`;
every reader takes them as today's (:func:`current_schema`). Readers skip lines of other
schemas, ignore keys they do not know (writers may add keys without a version bump) and refuse a
higher ``v`` than they understand with an error naming the file and line. A final line cut short
by a crash is ignored with a warning; a malformed line elsewhere, or a field of the wrong type, is
an error naming the file and line number. Writers append one line per record and flush it, so a
report can be made from a run that is still going or that died. Non-finite floats are written as
``null`` (strict JSON); fields that may hold one are typed ``float | None``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, TypeVar

import msgspec

from trainperf.errors import InputError

__all__ = [
    "LEGACY_SCHEMA_PREFIX",
    "PERF_DIRNAME",
    "SCHEMA_PREFIX",
    "JsonValue",
    "R",
    "Record",
    "RunDirError",
    "current_schema",
]

PERF_DIRNAME = "perf"

#: The prefix of every schema name written here (records, baselines, bench files).
SCHEMA_PREFIX = "trainperf/"
#: The prefix the same schemas had before the toolkit left the app that grew it: old run
#: folders, the baselines and bench files made then carry it, and every reader takes it as
#: :data:`SCHEMA_PREFIX` (:func:`current_schema`). The one place the old name is spelled.
LEGACY_SCHEMA_PREFIX = "receipt-ocr/"


def current_schema(name: object) -> str | None:
    """The schema ``name`` as this version writes it: a :data:`LEGACY_SCHEMA_PREFIX` name becomes
    its :data:`SCHEMA_PREFIX` one (``trainperf/run`` for the old run file's); any other string
    is returned as it is, a non-string (no schema) as ``None``."""
    if not isinstance(name, str):
        return None
    if name.startswith(LEGACY_SCHEMA_PREFIX):
        return SCHEMA_PREFIX + name[len(LEGACY_SCHEMA_PREFIX) :]
    return name


#: A JSON value as the records hold it (hparams, free-form summaries).
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


#: A record kind (the type a reader returns records of).
R = TypeVar("R", bound="Record")


class RunDirError(InputError, ValueError):
    """A run-directory file is malformed or of a newer format; the message names file and line."""


class Record(msgspec.Struct, kw_only=True, frozen=True, tag_field="schema"):
    """Base of every run-directory record: the subclass's ``tag`` is its schema name (written as
    ``"schema"``), :attr:`VERSION` its format version (written as ``"v"``)."""

    #: The format version this code writes and the highest it reads.
    VERSION: ClassVar[int] = 1
    #: The file under ``<run>/perf/`` that holds records of this kind.
    FILE: ClassVar[str] = ""

    v: int = 1

    @classmethod
    def schema(cls) -> str:
        """The schema name (``"trainperf/..."``), spelled once: the class's tag."""
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str), f"{cls.__name__} has no schema tag"
        return tag

    @classmethod
    def path(cls, run_dir: str | os.PathLike[str]) -> Path:
        """``<run_dir>/perf/<FILE>``."""
        return Path(run_dir) / PERF_DIRNAME / cls.FILE
