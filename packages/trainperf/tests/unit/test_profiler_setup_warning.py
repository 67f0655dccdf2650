"""ProfilerCallback names, once at setup, the epochs and stages a run can never profile."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lightning.pytorch.trainer.states import TrainerFn
from trainperf.lightning import PerfCallbackWarning, ProfilerCallback
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions


def _trainer(tmp_path: Path, max_epochs: int | None) -> Any:
    return SimpleNamespace(
        max_epochs=max_epochs,
        default_root_dir=str(tmp_path),
        world_size=1,
        global_rank=0,
        is_global_zero=True,
        state=SimpleNamespace(fn=TrainerFn.FITTING),  # what trial_fit reads
    )


def _setup(cb: ProfilerCallback, trainer: Any, stage: str) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cb.setup(trainer, None, stage)  # type: ignore[arg-type]
        cb.teardown(trainer, None, stage)  # type: ignore[arg-type]
    return [str(w.message) for w in seen if issubclass(w.category, PerfCallbackWarning)]


def test_epochs_beyond_max_epochs_are_named(tmp_path: Path) -> None:
    cb = ProfilerCallback(
        schedule=ProfileSchedule(epochs=[0, 3, 5]), trace=TraceOptions(activities=["cpu"])
    )
    (msg,) = _setup(cb, _trainer(tmp_path, 2), "fit")
    assert "schedule.epochs [3, 5] are never reached (max_epochs=2" in msg


@pytest.mark.parametrize("max_epochs", [4, -1, None])
def test_reachable_epochs_give_no_warning(tmp_path: Path, max_epochs: int | None) -> None:
    cb = ProfilerCallback(
        schedule=ProfileSchedule(epochs=[1, 3]), trace=TraceOptions(activities=["cpu"])
    )
    assert _setup(cb, _trainer(tmp_path, max_epochs), "fit") == []


def test_stages_the_run_never_enters_are_named(tmp_path: Path) -> None:
    cb = ProfilerCallback(
        schedule=ProfileSchedule(stages=["train"]), trace=TraceOptions(activities=["cpu"])
    )
    (msg,) = _setup(cb, _trainer(tmp_path, 1), "test")
    assert "stages ['train'] never run in this test run" in msg
    cb = ProfilerCallback(
        schedule=ProfileSchedule(stages=["test"]), trace=TraceOptions(activities=["cpu"])
    )
    assert _setup(cb, _trainer(tmp_path, 1), "test") == []


def test_disabled_profiler_warns_about_nothing(tmp_path: Path) -> None:
    cb = ProfilerCallback(enabled=False, schedule=ProfileSchedule(epochs=[9]))
    assert _setup(cb, _trainer(tmp_path, 1), "fit") == []
