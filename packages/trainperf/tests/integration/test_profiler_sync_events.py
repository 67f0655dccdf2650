"""ProfilerCallback asks Kineto for CUDA sync events where CUDA is recorded and torch can
(``_ExperimentalConfig(enable_cuda_sync_events=True)``), and says once where torch cannot:
checked on CPU through the config the callback builds and hands to ``torch.profiler.profile``."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch.profiler import ProfilerActivity
from trainperf.errors import PerfCallbackWarning
from trainperf.lightning import ProfilerCallback
from trainperf.lightning.profiler_callback import cuda_sync_config
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions


class _RecordedConfig:
    """Stands for ``torch.profiler._ExperimentalConfig``: keeps the keywords it was made with."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def _old_torch_config(**kwargs: Any) -> Any:
    raise TypeError("__init__(): incompatible constructor arguments")


def test_the_installed_torch_takes_the_option() -> None:
    config, why = cuda_sync_config([ProfilerActivity.CPU, ProfilerActivity.CUDA])
    assert why is None
    assert isinstance(config, torch.profiler._ExperimentalConfig)


def test_cuda_sync_events_are_requested_with_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.profiler, "_ExperimentalConfig", _RecordedConfig)
    config, why = cuda_sync_config([ProfilerActivity.CPU, ProfilerActivity.CUDA])
    assert why is None
    assert config.kwargs == {"enable_cuda_sync_events": True}
    assert cuda_sync_config([ProfilerActivity.CPU]) == (None, None)


def test_a_torch_without_the_option_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.profiler, "_ExperimentalConfig", _old_torch_config)
    config, why = cuda_sync_config([ProfilerActivity.CUDA])
    assert config is None
    assert why is not None
    assert f"torch {torch.__version__}" in why


def _trainer(root: Path) -> Any:
    return SimpleNamespace(
        default_root_dir=str(root),
        world_size=1,
        is_global_zero=True,
        global_rank=0,
        max_epochs=3,
        current_epoch=1,
        state=SimpleNamespace(fn=TrainerFn.FITTING),  # what trial_fit reads
    )


@pytest.fixture
def cuda_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU machine that reads as one with CUDA to the callback's activity choice."""
    supported = {ProfilerActivity.CPU, ProfilerActivity.CUDA}
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: supported)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_the_callback_hands_the_config_to_the_profiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda_visible: None
) -> None:
    monkeypatch.setattr(torch.profiler, "_ExperimentalConfig", _RecordedConfig)
    seen: dict[str, Any] = {}

    def profile(**kwargs: Any) -> Any:
        seen.update(kwargs)
        raise RuntimeError("no profiler in this test")  # the callback then turns itself off

    monkeypatch.setattr(torch.profiler, "profile", profile)
    cb = ProfilerCallback(
        schedule=ProfileSchedule(stages=["train"]), trace=TraceOptions(activities=["cpu", "cuda"])
    )
    trainer = _trainer(tmp_path)
    cb.setup(trainer, None, "fit")  # type: ignore[arg-type]
    with pytest.warns(PerfCallbackWarning, match="no profiler in this test"):
        cb.on_train_epoch_start(trainer, None)  # type: ignore[arg-type]
    assert ProfilerActivity.CUDA in seen["activities"]
    assert seen["experimental_config"].kwargs == {"enable_cuda_sync_events": True}


def test_cpu_only_profiling_asks_for_nothing(tmp_path: Path) -> None:
    cb = ProfilerCallback(
        schedule=ProfileSchedule(stages=["train"]), trace=TraceOptions(activities=["cpu"])
    )
    cb.setup(_trainer(tmp_path), None, "fit")  # type: ignore[arg-type]
    assert cb._experimental is None


def test_a_torch_that_cannot_is_said_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cuda_visible: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(torch.profiler, "_ExperimentalConfig", _old_torch_config)
    cb = ProfilerCallback(
        schedule=ProfileSchedule(stages=["train"]), trace=TraceOptions(activities=["cpu", "cuda"])
    )
    with caplog.at_level(logging.WARNING):
        for _ in range(2):  # fit, then test: two setups of one callback
            cb.setup(_trainer(tmp_path), None, "fit")  # type: ignore[arg-type]
    said = [r for r in caplog.records if "CUDA sync events" in r.getMessage()]
    assert len(said) == 1
    assert f"torch {torch.__version__}" in said[0].getMessage()
    assert cb._experimental is None
