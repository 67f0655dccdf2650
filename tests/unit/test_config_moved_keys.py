"""``moved_to``: a key given where it no longer is names where it is now, and only then (a
misspelt node on the way or a name many settings share keep the spelling hint)."""

from __future__ import annotations

import pytest

from ocr.config_errors import flat_twin_conflict, moved_to

VALID = [
    "trainer",
    "trainer.max_epochs",
    "model",
    "model.optimizer",
    "model.optimizer.lr",
    "callbacks",
    "callbacks.profiler",
    "callbacks.profiler.enabled",
    "callbacks.profiler.profile_steps",
    "callbacks.profiler.schedule",
    "callbacks.profiler.schedule.active",
    "callbacks.profiler.schedule.warmup",
    "callbacks.profiler.trace",
    "callbacks.profiler.trace.profile_memory",
    "callbacks.performance_profiler",
    "callbacks.performance_profiler.profile_memory",
    "callbacks.resource_monitor",
    "callbacks.resource_monitor.rules",
    *(f"callbacks.resource_monitor.rules.{r}" for r in ("hang", "disk", "swap")),
    *(f"callbacks.resource_monitor.rules.{r}.enabled" for r in ("hang", "disk", "swap")),
]


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("callbacks.profiler.active", "; it moved to callbacks.profiler.schedule.active"),
        ("callbacks.profiler.trace.warmup", "; it moved to callbacks.profiler.schedule.warmup"),
        (
            "callbacks.profiler.schedule.profile_steps",
            "; it moved to callbacks.profiler.profile_steps (= callbacks.profiler.schedule.active)",
        ),
        (
            "callbacks.profiler.profile_memory",
            "; it moved to callbacks.profiler.trace.profile_memory",
        ),
        ("model.lr", "; it moved to model.optimizer.lr"),
        ("max_epochs", "; it moved to trainer.max_epochs"),
        ("callbacks.resource_monitor.rules.hangg.enabled", ""),  # a misspelt node, not a move
        ("callbacks.resource_monitor.rules.enabled", ""),  # three rules share the name
        ("callbacks.profiler.schedule.activ", ""),  # a typo: the spelling hint's case
    ],
)
def test_a_key_that_moved_names_where_it_is_now(key: str, hint: str) -> None:
    assert moved_to(key, VALID) == hint


def test_flat_and_grouped_twins_compare_as_the_callback_reads_them() -> None:
    assert flat_twin_conflict(["callbacks.profiler.profile_steps=5"]) is None
    same = ["callbacks.profiler.profile_epochs=[2,1]", "callbacks.profiler.schedule.epochs=[1, 2]"]
    assert flat_twin_conflict(same) is None
    error = flat_twin_conflict(
        ["+callbacks.profiler.schedule.warmup=1", "callbacks.profiler.warmup_steps=2"]
    )
    assert error is not None
    assert str(error) == (
        "callbacks.profiler.warmup_steps=2 and callbacks.profiler.schedule.warmup=1 "
        "(command line) disagree (warmup_steps is the flat name of schedule.warmup); "
        "give only one of them"
    )
