"""The profiler window's own cost leaves the callbacks phase *and* the profiler callback's hooks
(issue 38: no sentence contradicts another): the callbacks finding must not say "25 % of wall
time is spent in callbacks, 72 % in ProfilerCallback.on_train_batch_end"."""

from __future__ import annotations

import pytest
from trainperf.analysis.stages import PROFILER_PHASE, StageSummary, move_profiler_overhead
from trainperf.core.stage import Stage
from trainperf.records.monitoring import ProfilerWindow


def _summary() -> StageSummary:
    s = StageSummary(stage=Stage.TRAIN, epochs=1, wall_s=10.0, epoch_numbers=[1])
    s.phases_s["callbacks"] = 4.0
    s.callbacks_s = {"MyProfiler": 3.2, "SleepyLogger": 0.8}
    s.callback_hooks_s = {
        "MyProfiler.on_train_batch_end": 3.0,
        "MyProfiler.on_train_epoch_end": 0.2,
        "SleepyLogger.on_train_batch_end": 0.8,
    }
    return s


@pytest.mark.parametrize("callback", ["MyProfiler", None])
def test_the_moved_cost_leaves_the_owning_callbacks_hooks(callback: str | None) -> None:
    s = _summary()
    if callback is None:  # a record written before the owner was recorded: the default name
        s.callbacks_s = {
            k.replace("MyProfiler", "ProfilerCallback"): v for k, v in s.callbacks_s.items()
        }
        s.callback_hooks_s = {
            k.replace("MyProfiler", "ProfilerCallback"): v for k, v in s.callback_hooks_s.items()
        }
    window = ProfilerWindow(
        stage=Stage.TRAIN, epoch=1, overhead_s={"export": 2.5, "analysis": 0.5}, callback=callback
    )
    move_profiler_overhead({Stage.TRAIN: s}, [window])
    owner = callback or "ProfilerCallback"
    assert s.phases_s["callbacks"] == pytest.approx(1.0)
    assert s.phases_s[PROFILER_PHASE] == pytest.approx(3.0)
    assert s.callbacks_s[owner] == pytest.approx(0.2)
    assert s.callbacks_s["SleepyLogger"] == pytest.approx(0.8)  # the user's callback untouched
    # the largest hook first: 3.0 s of on_train_batch_end, nothing from the epoch end
    assert s.callback_hooks_s[f"{owner}.on_train_batch_end"] == pytest.approx(0.0)
    assert s.callback_hooks_s[f"{owner}.on_train_epoch_end"] == pytest.approx(0.2)
    assert s.callback_hooks_s["SleepyLogger.on_train_batch_end"] == pytest.approx(0.8)
    # no callback holds more than the phase
    assert max(s.callback_hooks_s.values()) <= s.phases_s["callbacks"] + 1e-9


def test_a_window_in_a_warm_up_epoch_moves_nothing() -> None:
    s = _summary()
    window = ProfilerWindow(stage=Stage.TRAIN, epoch=0, overhead_s={"export": 2.5})
    move_profiler_overhead({Stage.TRAIN: s}, [window])
    assert s.phases_s["callbacks"] == pytest.approx(4.0)
    assert s.callback_hooks_s["MyProfiler.on_train_batch_end"] == pytest.approx(3.0)
