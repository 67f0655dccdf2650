"""Read a run directory (records: :mod:`trainperf.records`) into one typed structure.

:func:`load_run` is the one place that reads the run folder for a report: every record file, the
app's configuration (``run.json``'s ``app``; an older folder's through
:mod:`~trainperf.analysis.legacy_layout`), the epoch scans and recompiles, the latest ``trainperf
try`` session, how the run ended (with the command that resumes it), the profiler traces (analysed)
and the comparison with a baseline. What is built from the :class:`RunData` afterwards (the
verdict, the report, its writers) reads no file.

Everything is optional: an absent file is "not recorded" (``None`` or an empty list plus a note),
never an error. A malformed or newer-format file is an error naming the file (and line where the
reader knows it): a report built from half-read data would mislead. An unreadable trace, an
unreadable ``perf/try.jsonl`` or a baseline the run cannot be compared with only leaves a note.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainperf.analysis.legacy_layout import LEGACY_CONFIG, legacy_app, legacy_framework
from trainperf.analysis.lifecycle import interruption_sentence
from trainperf.analysis.trials import last_session
from trainperf.core.stage import STAGE_ORDER, Stage
from trainperf.errors import InputError
from trainperf.records.epoch_scans import GrowthRecord, RecompilesRecord
from trainperf.records.epochs import EpochRecord, IntervalRecord
from trainperf.records.files import read_records, read_run_record
from trainperf.records.framework_info import FrameworkInfo
from trainperf.records.monitoring import (
    AlertEvent,
    LifecycleRecord,
    ProfilerWindow,
    ResourceSample,
    ResourceSummary,
)
from trainperf.records.run_record import RunRecord
from trainperf.records.schema import PERF_DIRNAME, R, RunDirError
from trainperf.records.try_record import TryRecord

if TYPE_CHECKING:
    from trainperf.analysis.gate import GateOutcome
    from trainperf.analysis.trace.trace_analysis import TraceAnalysis

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
    that was not recorded (shown in the report). ``folder`` is the run folder's own name (of its
    resolved path). ``growth`` and ``recompiles`` are the epoch scans' records in file order;
    ``try_session`` the latest ``trainperf try`` session's records (``try_note``: why none could
    be read); ``interruption`` where an interrupted run stopped and how to resume it. ``trace``
    is the analysis of the profiler traces, cut to what the report shows, with paths relative to
    the run (``trace_note``: why there is none); ``baseline`` the gate's outcome against the
    baseline named ``baseline_name`` (``baseline_note``: why there is none).
    """

    run_dir: Path
    run_info: RunRecord | None = None
    config: dict[str, Any] | None = None
    config_text: str | None = None
    config_label: str | None = None
    overrides: list[str] = field(default_factory=list)
    job_name: str | None = None
    framework: FrameworkInfo | None = None
    app: FrameworkInfo | None = None
    epochs: list[EpochRecord] = field(default_factory=list)
    intervals: list[IntervalRecord] = field(default_factory=list)
    resources: list[ResourceSample] = field(default_factory=list)
    resource_summary: ResourceSummary | None = None
    alerts: list[AlertEvent] = field(default_factory=list)
    lifecycle: list[LifecycleRecord] = field(default_factory=list)
    profiler_windows: list[ProfilerWindow] = field(default_factory=list)
    trace_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    folder: str = ""
    growth: list[GrowthRecord] = field(default_factory=list)
    recompiles: list[RecompilesRecord] = field(default_factory=list)
    try_session: list[TryRecord] = field(default_factory=list)
    try_note: str | None = None
    interruption: str | None = None
    trace: TraceAnalysis | None = None
    trace_note: str | None = None
    baseline: GateOutcome | None = None
    baseline_name: str | None = None
    baseline_note: str | None = None

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


#: Files of which one marks a run directory (what the monitors write; an older folder's app
#: config).
_KINDS = (RunRecord, EpochRecord, IntervalRecord, ResourceSample, AlertEvent, ProfilerWindow)
_RUN_MARKERS = (*(f"{PERF_DIRNAME}/{kind.FILE}" for kind in _KINDS), LEGACY_CONFIG)


def _tfevents_logged(path: Path) -> bool:
    """A TensorBoard event file with more than its version header (TFRecord: uint64 length,
    uint32 crc, data, uint32 crc); a logger opened at setup writes only the header."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
        return len(head) == 8 and path.stat().st_size > 16 + int.from_bytes(head, "little")
    except OSError:
        return False


def check_ran_here(run_dir: str | os.PathLike[str]) -> None:
    """:class:`ReportInputError` for a run folder where no run happened: no record of the
    performance callbacks, no profiler trace, and nothing a finished run without them leaves (a
    checkpoint, a logged metric), e.g. ``ocr-train`` stopped by a missing dataset (Hydra's
    config and ``perf/run.json`` only), where advice to attach the callbacks would send the user
    after the wrong cause. A folder that is not a run folder at all is left to :func:`load_run`."""
    root = Path(run_dir)
    if not root.is_dir() or not any((root / marker).is_file() for marker in _RUN_MARKERS):
        return
    if not _ran_here(root):
        raise ReportInputError(
            f"{root}: no recorded run here (no perf/*.jsonl record, profiler trace, checkpoint or "
            "logged metric): the command that made this folder stopped before training; see its "
            "log, fix what it names and run it again"
        )


def _ran_here(root: Path) -> bool:
    """Whether a run happened in ``root``: a record of the performance callbacks, a profiler
    trace, or what a finished run without them leaves (a checkpoint, a logged metric)."""
    if any((root / PERF_DIRNAME).glob("*.jsonl")):
        return True
    if any(p.name.endswith(_TRACE_SUFFIXES) for p in (root / TRACE_DIRNAME).rglob("*")):
        return True
    for path in root.rglob("*"):
        name = path.name
        if name.endswith(".ckpt"):
            return True
        if name == "metrics.csv" and path.is_file() and path.stat().st_size > 0:
            return True
        if name.startswith("events.out.tfevents.") and _tfevents_logged(path):
            return True
    return False


def load_run(
    run_dir: str | os.PathLike[str], baseline: str | os.PathLike[str] | None = None
) -> RunData:
    """Read every performance file of ``run_dir`` (none at all: :class:`ReportInputError`),
    analyse its profiler traces and compare it with ``baseline`` (a baseline JSON, bench JSON or
    run dir; a missing or unusable baseline file is a :class:`ReportInputError`)."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ReportInputError(f"{root}: not a run directory (no such directory)")
    if not any((root / marker).is_file() for marker in _RUN_MARKERS):
        # refused before anything is written: `trainperf report ocr` must not drop a report.html
        # into a source folder (which has a perf/ package, but none of the files below)
        raise ReportInputError(
            f"{root}: not a run directory (no perf/*.jsonl or perf/run.json; give the folder "
            "a monitored run wrote its perf/ into)"
        )
    data = RunData(run_dir=root, folder=root.resolve().name or str(root))
    _read_files(data)
    data.trace, data.trace_note = _analyze_traces(data)
    if baseline is not None:
        data.baseline_name = Path(baseline).name
        data.baseline, data.baseline_note = _compare_baseline(root, baseline)
    else:
        data.baseline_note = "no baseline given (trainperf report RUN --baseline FILE)"
    return data


#: What to do, by topic, when the run's framework and app recorded no hint of their own.
_HINTS = {
    "record": "record the run with trainperf's performance monitor for its framework",
    "profile": "record a profiler window with trainperf's profiler for its framework",
}


def hint(run: RunData, topic: str) -> str:
    """How to do ``topic`` (``record``, ``profile``) in the run's own app or framework, in its
    words (``FrameworkInfo.hints``), else in general words."""
    for info in (run.app, run.framework):
        if info is not None and topic in info.hints:
            return info.hints[topic]
    return _HINTS[topic]


def _read_app(data: RunData) -> None:
    """The run's framework and app (``run.json``, else an older folder's layout) and the app's
    configuration, less the config library's own sections."""
    info = data.run_info
    data.framework = info.framework_info if info is not None else None
    data.app = info.app if info is not None else None
    if data.framework is None:
        data.framework = legacy_framework(info)
    if data.app is None:
        try:
            data.app = legacy_app(data.run_dir, _yaml)
        except ValueError as exc:
            raise ReportInputError(str(exc)) from exc
    app = data.app
    if app is None or app.config is None:
        data.notes.append("the app's configuration: not recorded (advice names generic settings)")
        return
    data.config = {k: v for k, v in app.config.items() if k not in app.config_skip}
    data.config_text = app.config_text
    data.config_label = app.config_label
    data.overrides = list(app.overrides)
    data.job_name = app.job_name


def _read_files(data: RunData) -> None:
    """Fill ``data`` from the files of its run directory."""
    root = data.run_dir
    try:
        data.run_info = read_run_record(root)
    except FileNotFoundError:
        data.notes.append("perf/run.json: not recorded (machine and versions unknown)")
    except RunDirError as exc:
        raise ReportInputError(str(exc)) from exc

    _read_app(data)
    data.epochs = _in_epoch_order(_read(EpochRecord.path(root), EpochRecord))
    if not data.epochs:
        data.notes.append(f"perf/epochs.jsonl: not recorded ({hint(data, 'record')})")
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
    data.growth = _read(GrowthRecord.path(root), GrowthRecord)
    data.recompiles = _read(RecompilesRecord.path(root), RecompilesRecord)
    try:  # the report stands without it: its section says why
        data.try_session = last_session(read_records(TryRecord.path(root), TryRecord))
    except (RunDirError, OSError, UnicodeDecodeError) as exc:
        data.try_note = f"perf/try.jsonl could not be read: {exc}"
    data.interruption = interruption_sentence(root, data.lifecycle)

    traces = root / TRACE_DIRNAME
    if traces.is_dir():
        data.trace_files = sorted(
            p.relative_to(root).as_posix()
            for p in traces.rglob("*")
            if p.is_file() and p.name.endswith(_TRACE_SUFFIXES)
        )
    if not data.trace_files:
        data.notes.append(f"{TRACE_DIRNAME}/: {_no_trace_note(data)}")


# Rows kept from the trace analysis for the report (the rest is in `trainperf analyze`).
_TRACE_TOP_K = 15


def _relative(text: str, root: Path) -> str:
    """Error messages and paths with the run directory replaced by ``<run>`` (a copied run must
    give the same report)."""
    for form in {str(root), str(root.resolve())}:
        text = text.replace(form, "<run>")
    return text


def _no_trace_note(run: RunData) -> str:
    """Why the run has no trace to analyse, in terms that agree with its profiler windows: the
    files a recorded window lists but the folder lacks (a copy without its traces), a window
    that wrote no file, or how to get a trace, naming the run's own switch when its config has
    one (the default callbacks carry a disabled ``profiler`` entry); else the callback."""
    listed = sorted({t for w in run.profiler_windows for t in w.traces})
    if listed:
        shown = ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")
        return (
            f"the profiler window(s) recorded {shown}, not in this folder (copied without its "
            "traces?): put the file(s) back for the top ops and the memory timeline"
        )
    if run.profiler_windows:
        return "the profiler window(s) below wrote no trace file (their export was off or failed)"
    return f"no profiler trace recorded ({hint(run, 'profile')})"


def _analyze_traces(run: RunData) -> tuple[TraceAnalysis | None, str | None]:
    """The analysis of the run's traces (DDP: the lowest rank's) and ``None``, or ``None`` and
    why there is none."""
    if not run.trace_files:
        return None, _no_trace_note(run)
    from trainperf.analysis.trace import TraceError, analyze_path, analyze_table, load_traces
    from trainperf.analysis.trace.ingest import find_trace_files
    from trainperf.analysis.trace.rankset import group_by_rank

    root = run.run_dir
    try:
        groups = group_by_rank(find_trace_files(root / TRACE_DIRNAME))
        if groups is None:
            analysis = analyze_path(root / TRACE_DIRNAME, top_k=_TRACE_TOP_K)
        else:  # DDP: the lowest rank's traces, never the ranks summed into one breakdown
            analysis = analyze_table(load_traces(groups[min(groups)]), top_k=_TRACE_TOP_K)
    except (TraceError, OSError) as exc:
        return None, _relative(f"profiler trace unreadable: {exc}", root)
    for source in analysis.sources:
        source.path = _relative(source.path, root)
    analysis.warnings = [_relative(w, root) for w in analysis.warnings]
    analysis.input = None  # the report names the files relative to the run
    return analysis, None


def _compare_baseline(
    run_dir: Path, baseline: str | os.PathLike[str]
) -> tuple[GateOutcome | None, str | None]:
    """The gate's outcome of the run against ``baseline`` and ``None``, or ``None`` and why the
    run cannot be compared (what the baseline compares is missing in the run)."""
    path = Path(baseline)
    if not path.exists():
        raise ReportInputError(f"{path}: baseline not found")
    from trainperf.analysis.baseline import load_source
    from trainperf.analysis.gate import check_baseline

    try:
        reference = load_source(path)
    except (OSError, InputError) as exc:
        raise ReportInputError(f"{path}: not a usable baseline: {exc}") from exc
    try:
        return check_baseline(reference, load_source(run_dir)), None
    except (OSError, InputError) as exc:
        # The run may lack what the baseline compares: keep the rest of the report.
        return None, _relative(f"cannot compare with {path.name}: {exc}", run_dir)
