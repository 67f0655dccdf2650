"""ProfilerCallback on tiny CPU Trainers: the right epochs traced, nothing left attached after a
window, failures reduced to one warning, gzip, disabled (the app's Hydra config of it:
tests/integration/test_profiler_callback_config.py)."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import pytest
import torch
from trainperf.analysis.trace import analyze_trace
from trainperf.lightning import PerfCallbackWarning, ProfilerCallback
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions

from trainperf_testing.memory_logger import MemoryLogger
from trainperf_testing.profiled_fit import _fit, _profiler_off

pytestmark = pytest.mark.slow


def test_profiles_exactly_the_chosen_epochs(tmp_path: Path) -> None:
    logger = MemoryLogger()
    cb = ProfilerCallback(
        schedule=ProfileSchedule(epochs=[1, 2], active=3, warmup=1), log_top_k_ops=5
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerfCallbackWarning)
        module = _fit(tmp_path, cb, logger=logger)
    out = tmp_path / "profiler_traces"
    assert sorted(p.name for p in out.iterdir()) == ["epoch_1.json", "epoch_2.json"]
    for name in ("epoch_1.json", "epoch_2.json"):
        report = analyze_trace(out / name)
        assert report["summary"]["n_steps"] == 3  # the active steps only
        assert report["top_cpu_ops"], name
    # The profiler recorded during the active steps of epochs 1 and 2 only (3 each; the warm-up
    # step only prepares it) and was off for every other step, those after each window included.
    on = [(epoch, enabled) for epoch, enabled in module.profiled_steps if enabled]
    assert on == [(1, True)] * 3 + [(2, True)] * 3
    assert _profiler_off()
    assert cb._window is None
    assert cb.trace_paths == [out / "epoch_1.json", out / "epoch_2.json"]
    logged = [m for m, _ in logger.calls if "profiler/train_step_time_ms" in m]
    assert len(logged) == 2
    for m in logged:
        assert m["profiler/train_step_time_ms"] > 0
        assert 0 <= m["profiler/train_dataloader_pct"] <= 100
        assert m["profiler/train_top_op_self_ms"] > 0


def test_gzip_validation_stage_and_cuda_request_on_cpu(tmp_path: Path) -> None:
    cb = ProfilerCallback(
        schedule=ProfileSchedule(epochs=[0], active=2, warmup=0, stages=["train", "validate"]),
        trace=TraceOptions(
            gzip=True,
            tensorboard=True,
            activities=["cpu", "cuda"],
            output_dir=tmp_path / "abs_traces",
        ),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerfCallbackWarning)
        _fit(tmp_path / "root", cb, epochs=1)
    out = tmp_path / "abs_traces"
    assert sorted(p.name for p in out.iterdir()) == [
        "epoch_0.json.gz",
        "tensorboard",
        "val_epoch_0.json.gz",
    ]
    tb = sorted(p.name for p in (out / "tensorboard").iterdir())
    assert len(tb) == 2
    assert all(name.endswith(".pt.trace.json.gz") for name in tb)
    with gzip.open(out / "epoch_0.json.gz", "rt") as f:
        assert "traceEvents" in json.load(f)
    assert analyze_trace(out / "val_epoch_0.json.gz")["summary"]["n_steps"] == 2
    assert _profiler_off()


def test_unwritable_output_dir_is_one_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    # A directory under a regular file cannot be created (also when running as root).
    cb = ProfilerCallback(
        schedule=ProfileSchedule(epochs=[0, 1, 2]),
        trace=TraceOptions(output_dir=blocker / "traces"),
    )
    with pytest.warns(PerfCallbackWarning) as record:
        module = _fit(tmp_path, cb, epochs=3)
    assert len([w for w in record if issubclass(w.category, PerfCallbackWarning)]) == 1
    assert not any(enabled for _, enabled in module.profiled_steps)
    assert cb._window is None
    assert _profiler_off()


def test_profiler_that_raises_on_start_is_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_start(self: torch.profiler.profile) -> None:
        raise RuntimeError("kineto unavailable")

    monkeypatch.setattr(torch.profiler.profile, "start", broken_start)
    cb = ProfilerCallback(schedule=ProfileSchedule(epochs=[0, 1]))
    with pytest.warns(PerfCallbackWarning, match="kineto unavailable") as record:
        _fit(tmp_path, cb, epochs=3)
    assert len([w for w in record if issubclass(w.category, PerfCallbackWarning)]) == 1
    assert not (tmp_path / "profiler_traces").exists() or not any(
        (tmp_path / "profiler_traces").iterdir()
    )
    assert cb._window is None
    assert _profiler_off()


def test_export_error_is_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_export(self: torch.profiler.profile, path: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", broken_export)
    cb = ProfilerCallback(schedule=ProfileSchedule(epochs=[0, 1], active=2))
    with pytest.warns(PerfCallbackWarning, match="No space left") as record:
        module = _fit(tmp_path, cb, epochs=3)
    assert len([w for w in record if issubclass(w.category, PerfCallbackWarning)]) == 1
    # Off after the failing window: epoch 1 was not profiled.
    assert all(epoch == 0 for epoch, enabled in module.profiled_steps if enabled)
    assert cb._window is None
    assert _profiler_off()


def test_disabled_does_nothing(tmp_path: Path) -> None:
    cb = ProfilerCallback(enabled=False, schedule=ProfileSchedule(epochs=[0, 1]))
    module = _fit(tmp_path, cb, epochs=2)
    assert not (tmp_path / "profiler_traces").exists()
    assert not any(enabled for _, enabled in module.profiled_steps)
    assert cb.trace_paths == []
