"""ProfilerCallback on tiny CPU Trainers: the right epochs traced, nothing left attached after a
window, failures reduced to one warning, gzip, disabled, and the Hydra config."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader, TensorDataset
from trainperf.analysis.trace import analyze_trace
from trainperf.lightning import PerfCallbackWarning, ProfilerCallback
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions

from trainperf_testing.memory_logger import MemoryLogger

pytestmark = pytest.mark.slow


class TinyModule(L.LightningModule):
    """Linear regression; records whether a profiler was running at each training step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.profiled_steps: list[tuple[int, bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.profiled_steps.append(
            (self.current_epoch, torch.autograd.profiler._is_profiler_enabled)
        )
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(n: int = 32) -> DataLoader[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1)), batch_size=4
    )


def _fit(
    root: Path,
    *callbacks: Callback,
    epochs: int = 4,
    logger: Logger | None = None,
    validate: bool = True,
) -> TinyModule:
    """Train TinyModule for ``epochs`` (8 batches each; 2 validation batches when ``validate``)."""
    module = TinyModule()
    trainer = L.Trainer(
        default_root_dir=root,
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        callbacks=list(callbacks),
        logger=logger if logger is not None else False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=2 if validate else 0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, _loader(), _loader(8) if validate else None)
    assert trainer.current_epoch == epochs  # training completed
    return module


def _profiler_off() -> bool:
    return not torch.autograd.profiler._is_profiler_enabled and not (
        torch._C._autograd._profiler_enabled()
    )


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
