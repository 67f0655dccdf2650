"""ProfilerCallback(detect_syncs=True) on tiny CPU Trainers: a CPU-only run says once that syncs
do not apply; with the detector forced on (the warning torch issues in ``warn`` mode issued by
the module itself, as CUDA would), the window's record names the module's line per step."""

from __future__ import annotations

import inspect
import logging
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from trainperf.lightning import PerfCallbackWarning, ProfilerCallback
from trainperf.probe.sync_debug import SYNC_WARNING, SyncDetector
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions

from trainperf_testing.profiled_fit import TinyModule, _loader

pytestmark = pytest.mark.slow

SYNCS_PER_STEP = 6


class SyncingModule(TinyModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        for _ in range(SYNCS_PER_STEP):
            warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)  # "loss.item()" on CUDA
        return loss


def _fit(root: Path, cb: ProfilerCallback, module: TinyModule, epochs: int = 2) -> None:
    trainer = L.Trainer(
        default_root_dir=root,
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        callbacks=[cb],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, _loader())


_LINE = inspect.getsourcelines(SyncingModule.training_step)[1] + 3


def test_cpu_run_says_syncs_do_not_apply(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cb = ProfilerCallback(
        schedule=ProfileSchedule(epochs=[0, 1], active=2, warmup=0),
        trace=TraceOptions(detect_syncs=True),
    )
    with caplog.at_level(logging.INFO), warnings.catch_warnings():
        warnings.simplefilter("error", PerfCallbackWarning)
        _fit(tmp_path, cb, TinyModule())
    said = [r for r in caplog.records if "syncs do not apply" in r.getMessage()]
    assert len(said) == 1
    for w in cb.windows:
        assert all(f["id"] != "host_sync_lines" for f in w.summary["findings"])


def test_forced_detector_names_the_modules_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_start = SyncDetector.start
    monkeypatch.setattr(SyncDetector, "start", lambda self, force=False: real_start(self, True))
    module = SyncingModule()
    cb = ProfilerCallback(
        schedule=ProfileSchedule(epochs=[1], active=3, warmup=1),
        trace=TraceOptions(detect_syncs=True),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerfCallbackWarning)
        _fit(tmp_path, cb, module)
    (window,) = cb.windows
    found = [f for f in window.summary["findings"] if f["id"] == "host_sync_lines"]
    assert len(found) == 1
    line = found[0]["evidence"]["lines"][0]
    assert line["file"] == __file__
    assert line["line"] == _LINE
    assert line["function"] == "training_step"
    assert line["per_step"] == SYNCS_PER_STEP
