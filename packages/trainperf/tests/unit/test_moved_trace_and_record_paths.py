"""The old import paths left by issue 40's trace, recorder and record renames keep working.

Each old name still imports (the new object, with a ``DeprecationWarning`` naming the new path),
an unknown name is an ``AttributeError`` (that nothing in the project imports an old path is
the app's ``tests/unit/test_moved_paths.py``, which reads every tree)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import trainperf
from trainperf.core.moved import SPLITS

KIT = Path(trainperf.__file__).resolve().parent

#: (old module, old name, new module, new name)
MOVED = [
    ("analysis.trace.result", "TraceAnalysis", "analysis.trace.trace_analysis", "TraceAnalysis"),
    ("analysis.trace.result", "StepRow", "analysis.trace.trace_analysis", "StepRow"),
    ("analysis.trace.partial", "TablePartial", "analysis.trace.window_sums", "WindowSums"),
    ("analysis.trace.partial", "partial_of", "analysis.trace.window_sums", "sums_of"),
    ("analysis.trace.partial", "Named", "analysis.trace.window_sums", "HookTimes"),
    ("analysis.trace.partial", "finish", "analysis.trace.window_sums", "finish"),
    ("analysis.trace.trace_rules", "TraceMetrics", "analysis.trace.trace_metrics", "TraceMetrics"),
    ("analysis.trace.trace_rules", "TRACE_RISKS", "analysis.trace.trace_metrics", "TRACE_RISKS"),
    (
        "analysis.trace.trace_rules",
        "COMM_ONE_RANK_HINT",
        "analysis.trace.trace_metrics",
        "COMM_ONE_RANK_HINT",
    ),
    ("analysis.trace.steps", "classify_phase", "analysis.trace.step_phases", "classify_phase"),
    ("analysis.trace.steps", "PHASES", "analysis.trace.step_phases", "PHASES"),
    ("recording.step_recorder", "StepRecorder", "recording.run_recorder", "RunRecorder"),
    ("recording.step_recorder", "batch_size_of", "recording.run_recorder", "batch_size_of"),
    ("records.kinds", "Record", "records.schema", "Record"),
    ("records.kinds", "RunDirError", "records.schema", "RunDirError"),
    ("records.kinds", "RunRecord", "records.run_record", "RunRecord"),
    ("records.kinds", "EpochRecord", "records.epochs", "EpochRecord"),
    ("records.kinds", "ProfilerWindow", "records.monitoring", "ProfilerWindow"),
    ("records.kinds", "TryRecord", "records.try_record", "TryRecord"),
    ("records.kinds", "merge_reasons", "records.epoch_scans", "merge_reasons"),
    ("records.kinds", "FrameworkInfo", "records.framework_info", "FrameworkInfo"),
]


@pytest.mark.parametrize(("old", "name", "new", "new_name"), MOVED)
def test_an_old_path_gives_the_new_object_with_a_warning(
    old: str, name: str, new: str, new_name: str
) -> None:
    module = importlib.import_module(f"trainperf.{old}")
    with pytest.warns(DeprecationWarning, match=rf"trainperf\.{new}\.{new_name}"):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(f"trainperf.{new}"), new_name)


@pytest.mark.parametrize(
    "old",
    [
        "analysis.trace.result",
        "analysis.trace.partial",
        "records.kinds",
        "analysis.trace.trace_rules",
        "analysis.trace.steps",
    ],
)
def test_an_unknown_name_is_an_attribute_error(old: str) -> None:
    module = importlib.import_module(f"trainperf.{old}")
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_every_name_of_the_split_record_modules_resolves_through_kinds() -> None:
    kinds = importlib.import_module("trainperf.records.kinds")
    for new in SPLITS["trainperf.records.kinds"]:
        target = importlib.import_module(new)
        for name in target.__all__:
            with pytest.warns(DeprecationWarning, match=rf"{re.escape(new)}\.{name}\b"):
                assert getattr(kinds, name) is getattr(target, name)


def test_a_lookup_through_a_split_warns_at_the_callers_line_and_registers_nothing() -> None:
    from trainperf.core.moved import SHIMS

    kinds = importlib.import_module("trainperf.records.kinds")
    with pytest.warns(DeprecationWarning, match=r"records\.epochs\.EpochRecord") as caught:
        kinds.EpochRecord  # noqa: B018 - the attribute lookup is the test
    assert caught[0].filename == __file__
    assert "trainperf.records.kinds" not in SHIMS
