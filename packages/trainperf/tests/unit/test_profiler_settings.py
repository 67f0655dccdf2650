"""``ProfileSchedule`` and ``TraceOptions``: frozen, validated (one ``ConfigError`` naming the
field and the value), the old flat ``ProfilerCallback`` keywords rejected, and the schedule's own
logic (which epochs open a window, how many steps one records, what a run never profiles)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
from trainperf.errors import ConfigError
from trainperf.lightning import ProfilerCallback, ProfileSchedule, TraceOptions
from trainperf.recording.profiler_settings import FLAT_SETTINGS


def test_the_defaults_are_the_old_flat_defaults() -> None:
    schedule = ProfileSchedule()
    assert schedule.epochs == frozenset({1})
    assert schedule.stages == frozenset({"train"})
    assert (schedule.wait, schedule.warmup, schedule.active) == (0, 1, 5)
    assert (schedule.repeat, schedule.skip_first) == (1, 0)
    assert schedule.trigger_file is None
    assert schedule.on_request is False
    assert schedule.check_every_n_steps == 20
    trace = TraceOptions()
    assert trace.activities == ("cpu", "cuda")
    assert (trace.record_shapes, trace.profile_memory, trace.with_stack) == (True, True, False)
    assert trace.output_dir == Path("profiler_traces")
    assert (trace.export_chrome_trace, trace.gzip, trace.tensorboard) == (True, False, False)
    cb = ProfilerCallback()
    assert cb.schedule == schedule
    assert cb.trace == trace
    assert cb.log_top_k_ops == 10


def test_settings_are_frozen_and_normalised() -> None:
    schedule = ProfileSchedule(epochs=[2, 0, 2], stages=["validate", "test"], trigger_file="T")
    assert schedule.epochs == frozenset({0, 2})
    assert schedule.stages == frozenset({"val", "test"})
    assert schedule.trigger_file == Path("T")
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.active = 3  # type: ignore[misc]
    assert hash(schedule) == hash(
        ProfileSchedule(epochs=(0, 2), stages=("val", "test"), trigger_file=Path("T"))
    )
    assert TraceOptions(activities=["CPU"]).activities == ("cpu",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"active": 0}, "ProfileSchedule: active must be an integer >= 1, got 0"),
        ({"warmup": -1}, "ProfileSchedule: warmup must be an integer >= 0, got -1"),
        ({"wait": 1.5}, "ProfileSchedule: wait must be an integer >= 0, got 1.5"),
        ({"repeat": True}, "ProfileSchedule: repeat must be an integer >= 0, got True"),
        ({"skip_first": "2"}, "ProfileSchedule: skip_first must be an integer >= 0, got '2'"),
        ({"epochs": [-1]}, "ProfileSchedule: epochs entries must be an integer >= 0, got -1"),
        ({"epochs": 1}, "ProfileSchedule: epochs must be a list of epoch numbers, got 1"),
        ({"epochs": "1"}, "ProfileSchedule: epochs must be a list of epoch numbers, got '1'"),
        ({"stages": ["training"]}, "ProfileSchedule: unknown stage 'training'"),
        ({"stages": "train"}, "ProfileSchedule: stages must be a list of stage names"),
        (
            {"check_every_n_steps": 0},
            "ProfileSchedule: check_every_n_steps must be an integer >= 1, got 0",
        ),
        ({"trigger_file": " "}, "ProfileSchedule: trigger_file is an empty path"),
        ({"on_request": "yes"}, "ProfileSchedule: on_request must be true or false, got 'yes'"),
    ],
)
def test_a_bad_schedule_value_is_one_line_naming_field_and_value(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        ProfileSchedule(**kwargs)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"activities": ["cpu", "tpu"]}, "TraceOptions: unknown activity 'tpu' in activities"),
        ({"activities": "cpu"}, "TraceOptions: activities must be a list, got str 'cpu'"),
        ({"activities": []}, "TraceOptions: activities is empty"),
        ({"gzip": "no"}, "TraceOptions: gzip must be true or false, got 'no'"),
        ({"detect_syncs": 1}, "TraceOptions: detect_syncs must be true or false, got 1"),
        ({"output_dir": ""}, "TraceOptions: output_dir is an empty path"),
    ],
)
def test_a_bad_trace_option_is_one_line_naming_field_and_value(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        TraceOptions(**kwargs)
    assert str(info.value).startswith(message)


def test_every_flat_setting_is_a_keyword_and_a_grouped_field() -> None:
    """FLAT_SETTINGS, the callback's keywords and the settings' fields cannot drift apart."""
    keywords = inspect.signature(ProfilerCallback).parameters
    groups = {"schedule": ProfileSchedule, "trace": TraceOptions}
    for setting in FLAT_SETTINGS:
        assert keywords[setting.flat].kind is inspect.Parameter.KEYWORD_ONLY
        assert keywords[setting.flat].default is None
        assert setting.field in {f.name for f in dataclasses.fields(groups[setting.group])}


def test_the_callback_takes_the_objects_or_the_seeds_flat_keywords() -> None:
    flat = ProfilerCallback(profile_steps=3, warmup_steps=0, profile_epochs=[0], with_stack=True)
    assert (flat.schedule.active, flat.schedule.warmup, flat.schedule.epochs) == (3, 0, {0})
    assert flat.trace.with_stack is True
    assert flat.schedule.stages == ProfileSchedule().stages  # the rest stays at its defaults
    with pytest.raises(TypeError, match="profile_memory_steps"):
        ProfilerCallback(profile_memory_steps=3)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="schedule must be a ProfileSchedule, got dict"):
        ProfilerCallback(schedule={"active": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="trace must be a TraceOptions"):
        ProfilerCallback(trace=ProfileSchedule())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="log_top_k_ops must be an integer >= 1, got 0"):
        ProfilerCallback(log_top_k_ops=0)


def test_window_steps_follow_torch_profiler_schedule() -> None:
    assert ProfileSchedule().window_steps == 6  # warmup 1 + active 5, once
    assert ProfileSchedule(skip_first=2, wait=1, warmup=1, active=3, repeat=2).window_steps == 12
    assert ProfileSchedule(repeat=0).window_steps == 0  # until the stage's epoch ends


def test_which_stage_epochs_open_a_window() -> None:
    schedule = ProfileSchedule(epochs=[1, 3], stages=["train", "test"])
    assert [e for e in range(5) if schedule.profiles("train", e)] == [1, 3]
    assert not schedule.profiles("val", 1)  # not among the stages
    assert schedule.profiles("test", 0)  # any epoch
    assert schedule.profiles("test", 7)


def test_what_a_run_never_profiles_is_named() -> None:
    schedule = ProfileSchedule(epochs=[0, 3, 5])
    assert schedule.never_profiled("fit", 2) == (
        "epochs [3, 5] are never reached (max_epochs=2: epochs 0..1)"
    )
    assert schedule.never_profiled("fit", 6) is None
    assert schedule.never_profiled("fit", -1) is None  # no epoch limit
    assert schedule.never_profiled("fit", None) is None
    assert ProfileSchedule(stages=["test"]).never_profiled("fit", 3) == (
        "stages ['test'] never run in this fit run (it runs ['train', 'val'])"
    )
    assert ProfileSchedule(stages=["test"]).never_profiled("test", 1) is None
    assert ProfileSchedule().never_profiled("predict", 1) == (
        "stages ['train'] never run in this predict run (it runs none of them)"
    )


def test_the_on_demand_triggers() -> None:
    assert not ProfileSchedule().on_demand
    assert ProfileSchedule(trigger_file="PROFILE_NOW").on_demand
    assert ProfileSchedule(on_request=True).on_demand
