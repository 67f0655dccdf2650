"""The app's Hydra config of ProfilerCallback (``callbacks=profiler``): it composes with the
defaults kept, and overrides reach the nested schedule and trace options."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from trainperf.lightning import ProfilerCallback
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions


def test_hydra_config_composes(tmp_path: Path) -> None:
    with initialize_config_module(version_base="1.3", config_module="ocr.configs"):
        cfg = compose(config_name="train", overrides=["callbacks=profiler"])
    node = cfg.callbacks.profiler
    assert node.enabled is False
    assert "model_checkpoint" in cfg.callbacks  # the defaults are kept
    cb = instantiate(node)
    assert isinstance(cb, ProfilerCallback)
    assert cb.enabled is False
    # the nested schedule and trace options are built as their own objects, with the defaults
    assert isinstance(cb.schedule, ProfileSchedule)
    assert cb.schedule.epochs == frozenset({1})
    assert (cb.schedule.active, cb.schedule.warmup, cb.schedule.repeat) == (5, 1, 1)
    assert cb.schedule.stages == frozenset({"train"})
    assert cb.schedule.trigger_file == Path("PROFILE_NOW")
    assert cb.schedule.on_request is True
    assert isinstance(cb.trace, TraceOptions)
    assert cb.trace.activities == ("cpu", "cuda")
    assert cb.trace.output_dir == Path("profiler_traces")


def test_hydra_overrides_reach_the_nested_schedule() -> None:
    overrides = [
        "callbacks.profiler.enabled=true",
        "callbacks.profiler.schedule.epochs=[0,2]",
        "callbacks.profiler.schedule.active=7",
        "callbacks.profiler.schedule.stages=[validate]",
        "callbacks.profiler.trace.gzip=true",
    ]
    with initialize_config_module(version_base="1.3", config_module="ocr.configs"):
        cfg = compose(config_name="train", overrides=overrides)
    cb = instantiate(cfg.callbacks.profiler)
    assert cb.schedule == ProfileSchedule(
        epochs=[0, 2],
        active=7,
        stages=["val"],
        trigger_file="PROFILE_NOW",
        on_request=True,
    )
    assert cb.trace.gzip is True
