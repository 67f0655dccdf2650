"""Read a run directory (records: :mod:`trainperf.records.kinds`) into one typed structure.

Everything is optional: an absent file is "not recorded" (``None`` or an empty list plus a note),
never an error. A malformed or newer-format file is an error naming the file (and line where the
reader knows it): a report built from half-read data would mislead.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainperf.core.stage import STAGE_ORDER, Stage
from trainperf.errors import InputError
from trainperf.records.kinds import (
    PERF_DIRNAME,
    AlertEvent,
    EpochRecord,
    IntervalRecord,
    LifecycleRecord,
    ProfilerWindow,
    R,
    ResourceSample,
    ResourceSummary,
    RunDirError,
    RunRecord,
    read_records,
    read_run_record,
)

TRACE_DIRNAME = "profiler_traces"
_TRACE_SUFFIXES = (".json", ".json.gz")


class ReportInputError(InputError, ValueError):
    """The run directory or one of its files cannot be used; the message names the file."""


@dataclass
class RunData:
    """What a run directory holds, as read from its files (all optional).

    ``epochs`` are in reading order (the fit's epochs, training before validation, then test);
    ``resource_summary`` is the last summary of a fit (of any run when there is none);
    ``trace_files`` are relative to ``run_dir``, sorted; ``notes`` hold one sentence per thing
    that was not recorded (shown in the report).
    """

    run_dir: Path
    run_info: RunRecord | None = None
    config: dict[str, Any] | None = None
    config_text: str | None = None
    overrides: list[str] = field(default_factory=list)
    hydra_job_name: str | None = None
    epochs: list[EpochRecord] = field(default_factory=list)
    intervals: list[IntervalRecord] = field(default_factory=list)
    resources: list[ResourceSample] = field(default_factory=list)
    resource_summary: ResourceSummary | None = None
    alerts: list[AlertEvent] = field(default_factory=list)
    lifecycle: list[LifecycleRecord] = field(default_factory=list)
    profiler_windows: list[ProfilerWindow] = field(default_factory=list)
    trace_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        """``"cuda"`` when an epoch ran on CUDA (or run.json lists CUDA devices), else ``"cpu"``."""
        if any(e.device == "cuda" for e in self.epochs):
            return "cuda"
        if not self.epochs and self.run_info and self.run_info.cuda_devices:
            return "cuda"
        return "cpu"


def config_value(config: Mapping[str, object] | None, dotted: str) -> Any:
    """``config["a"]["b"]`` for ``"a.b"``; ``None`` when any level is missing."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _in_epoch_order(records: list[EpochRecord]) -> list[EpochRecord]:
    """The records in reading order: the fit's epochs by number, training before validation,
    then test (a run of its own). The file holds them in closing order, where a validation
    epoch closes inside its training epoch; records of one epoch and stage (a resumed run) keep
    their file order."""
    rank = {stage: i for i, stage in enumerate(STAGE_ORDER)}

    def key(r: EpochRecord) -> tuple[bool, float, int]:
        number = float(r.epoch) if r.epoch is not None else math.inf
        return r.stage == Stage.TEST, number, rank[r.stage]

    return sorted(records, key=key)


def _read(path: Path, kind: type[R]) -> list[R]:
    try:
        return read_records(path, kind)
    except RunDirError as exc:
        raise ReportInputError(str(exc)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportInputError(f"{path}: cannot read: {exc}") from exc


def _yaml(path: Path) -> tuple[str, Any]:
    """``path``'s text and its parsed YAML; a :class:`ReportInputError` naming it otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
        return text, yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ReportInputError(f"{path}: not readable YAML: {exc}") from exc


#: Files of which one marks a run directory (what the callbacks and Hydra write).
_KINDS = (RunRecord, EpochRecord, IntervalRecord, ResourceSample, AlertEvent, ProfilerWindow)
_RUN_MARKERS = (*(f"{PERF_DIRNAME}/{kind.FILE}" for kind in _KINDS), ".hydra/config.yaml")


def load_run(run_dir: str | os.PathLike[str]) -> RunData:
    """Read every performance file of ``run_dir`` (none at all: :class:`ReportInputError`)."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ReportInputError(f"{root}: not a run directory (no such directory)")
    if not any((root / marker).is_file() for marker in _RUN_MARKERS):
        # refused before anything is written: `trainperf report ocr` must not drop a report.html
        # into a source folder (which has a perf/ package, but none of the files below)
        raise ReportInputError(
            f"{root}: not a run directory (no perf/*.jsonl, perf/run.json or .hydra/config.yaml; "
            "give the folder of an ocr-train run, e.g. trainperf report outputs/train/<date>)"
        )
    data = RunData(run_dir=root)

    try:
        data.run_info = read_run_record(root)
    except FileNotFoundError:
        data.notes.append("perf/run.json: not recorded (machine and versions unknown)")
    except RunDirError as exc:
        raise ReportInputError(str(exc)) from exc

    hydra = root / ".hydra"
    config_path = hydra / "config.yaml"
    if config_path.is_file():
        data.config_text, loaded = _yaml(config_path)
        if loaded is not None and not isinstance(loaded, dict):
            raise ReportInputError(f"{config_path}: expected a mapping at the top level")
        data.config = loaded or {}
        overrides_path = hydra / "overrides.yaml"
        if overrides_path.is_file():
            overrides = _yaml(overrides_path)[1]
            if isinstance(overrides, list):
                data.overrides = [str(o) for o in overrides]
        if (hydra / "hydra.yaml").is_file():
            name = config_value(_yaml(hydra / "hydra.yaml")[1], "hydra.job.name")
            data.hydra_job_name = name if isinstance(name, str) and name.strip() else None
    else:
        data.notes.append(".hydra/config.yaml: not recorded (advice names generic settings)")

    data.epochs = _in_epoch_order(_read(EpochRecord.path(root), EpochRecord))
    if not data.epochs:
        data.notes.append(
            "perf/epochs.jsonl: not recorded (attach PerformanceProfilerCallback or "
            "ThroughputMonitorCallback, e.g. callbacks=monitoring)"
        )
    data.intervals = _read(IntervalRecord.path(root), IntervalRecord)
    data.resources = _read(ResourceSample.path(root), ResourceSample)
    summaries = _read(ResourceSummary.path(root), ResourceSummary)
    # a fit's summary over a later test's (train.py's test_after_fit shares the folder)
    fits = [s for s in summaries if s.run_kind == "fit"]
    data.resource_summary = (fits or summaries)[-1] if summaries else None
    if not data.resources:
        data.notes.append(
            "perf/resources.jsonl: not recorded (attach ResourceMonitorCallback for CPU / GPU / "
            "memory / I/O over time)"
        )
    data.alerts = _read(AlertEvent.path(root), AlertEvent)
    data.lifecycle = _read(LifecycleRecord.path(root), LifecycleRecord)
    data.profiler_windows = _read(ProfilerWindow.path(root), ProfilerWindow)

    traces = root / TRACE_DIRNAME
    if traces.is_dir():
        data.trace_files = sorted(
            p.relative_to(root).as_posix()
            for p in traces.rglob("*")
            if p.is_file() and p.name.endswith(_TRACE_SUFFIXES)
        )
    if not data.trace_files:
        data.notes.append("profiler_traces/: no trace (attach ProfilerCallback for top ops)")
    return data
