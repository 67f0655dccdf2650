"""ProfilerCallback's on-demand windows (trigger file, ``request_profile``), the per-window record
in ``<run>/perf/profiler.jsonl``, multi-cycle windows summarised together, and the DDP rank suffix
of on-demand traces."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import pytest
from lightning.pytorch.callbacks import Callback
from trainperf.analysis.trace import analyze_trace
from trainperf.core import triggers
from trainperf.lightning import PerfCallbackWarning, ProfilerCallback
from trainperf.recording.profiler_settings import ProfileSchedule
from trainperf.records.monitoring import ProfilerWindow

from trainperf_testing.paths import child_pythonpath
from trainperf_testing.profiled_fit import _fit, _profiler_off
from trainperf_testing.run_lines import read_dicts

pytestmark = pytest.mark.slow

# subprocesses import the trainperf under test, not an editable install of another checkout
_PYTHONPATH = child_pythonpath()


class AtStep(Callback):
    """Runs ``action(trainer)`` at the end of the training batches with the given global steps
    (placed before the profiler in the callback list, so the profiler's poll of that same batch
    end can already see the effect)."""

    def __init__(self, steps: dict[int, Any]) -> None:
        self.steps = steps

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        action = self.steps.get(trainer.global_step)
        if action is not None:
            action(trainer)


@pytest.fixture(autouse=True)
def _no_stale_request() -> None:
    triggers.take_profile_request()  # a request left by another test must not leak in


def test_trigger_file_gives_exactly_one_window(tmp_path: Path) -> None:
    trigger = tmp_path / "PROFILE_NOW"
    # Touched after global step 3; polls every 2 steps (batch ends 2, 4, ...) take it at step 4.
    toucher = AtStep({3: lambda trainer: trigger.touch()})
    cb = ProfilerCallback(
        schedule=ProfileSchedule(
            epochs=[], active=3, warmup=1, trigger_file="PROFILE_NOW", check_every_n_steps=2
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerfCallbackWarning)
        module = _fit(tmp_path, toucher, cb, epochs=2, validate=False)
    assert not trigger.exists()  # consumed: it fired once, not at every later poll
    out = tmp_path / "profiler_traces"
    assert sorted(p.name for p in out.iterdir()) == ["ondemand_e0_s4.json"]
    assert analyze_trace(out / "ondemand_e0_s4.json")["summary"]["n_steps"] == 3
    # Recording during exactly the 3 active steps (batches 5-7 of epoch 0), off at every other
    # step, including all those after the window: no profiler hook remains.
    flags = [enabled for _, enabled in module.profiled_steps]
    assert flags == [False] * 5 + [True] * 3 + [False] * 8
    assert _profiler_off()
    assert cb._window is None
    (record,) = read_dicts(tmp_path / "perf" / "profiler.jsonl", ProfilerWindow)
    assert record["trigger"] == "file"
    assert "PROFILE_NOW" in record["reason"]
    assert (record["stage"], record["epoch"], record["steps"]) == ("train", 0, 3)
    assert record["traces"] == ["profiler_traces/ondemand_e0_s4.json"]
    assert record["summary"]["top_cpu_ops"]
    assert isinstance(record["summary"]["findings"], list)


def test_requests_and_epochs_together(tmp_path: Path) -> None:
    # epoch 0: an alert's request; epoch 1: the periodic window; epoch 2: a user's request.
    actions = {
        2: lambda trainer: triggers.request_profile("throughput_drop: 41 % below baseline"),
        18: lambda trainer: triggers.request_profile("user asked"),
    }
    cb = ProfilerCallback(
        schedule=ProfileSchedule(
            epochs=[1], active=2, warmup=0, on_request=True, check_every_n_steps=1
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerfCallbackWarning)
        module = _fit(tmp_path, AtStep(actions), cb, epochs=3, validate=False)
    out = tmp_path / "profiler_traces"
    assert sorted(p.name for p in out.iterdir()) == [
        "epoch_1.json",
        "ondemand_e0_s2.json",
        "ondemand_e2_s18.json",
    ]
    records = read_dicts(tmp_path / "perf" / "profiler.jsonl", ProfilerWindow)
    assert [(r["trigger"], r["epoch"], r["steps"]) for r in records] == [
        ("alert", 0, 2),
        ("epoch", 1, 2),
        ("request", 2, 2),
    ]
    assert records[0]["reason"] == "throughput_drop: 41 % below baseline"
    assert records[2]["reason"] == "user asked"
    assert sum(enabled for _, enabled in module.profiled_steps) == 6
    assert triggers.take_profile_request() is None
    assert _profiler_off()


def test_window_cut_by_epoch_end_before_recording_opens_again(tmp_path: Path) -> None:
    # A request at the last batch of epoch 0: the window closes with the epoch before its active
    # step, and the request is served at the first batch end of epoch 1.
    actions = {8: lambda trainer: triggers.request_profile("late")}
    cb = ProfilerCallback(
        schedule=ProfileSchedule(
            epochs=[], active=2, warmup=1, on_request=True, check_every_n_steps=1
        )
    )
    module = _fit(tmp_path, AtStep(actions), cb, epochs=2, validate=False)
    assert sorted(p.name for p in (tmp_path / "profiler_traces").iterdir()) == [
        "ondemand_e1_s9.json"
    ]
    (record,) = read_dicts(tmp_path / "perf" / "profiler.jsonl", ProfilerWindow)
    assert (record["trigger"], record["steps"]) == ("request", 2)
    assert sum(enabled for _, enabled in module.profiled_steps) == 2


def test_repeat_cycles_are_summarised_together(tmp_path: Path) -> None:
    cb = ProfilerCallback(schedule=ProfileSchedule(epochs=[0], active=2, warmup=1, repeat=2))
    module = _fit(tmp_path, cb, epochs=1, validate=False)
    out = tmp_path / "profiler_traces"
    assert sorted(p.name for p in out.iterdir()) == ["epoch_0.json", "epoch_0_cycle1.json"]
    (record,) = read_dicts(tmp_path / "perf" / "profiler.jsonl", ProfilerWindow)
    # both cycles, not only the last one
    assert record["steps"] == 4
    assert record["traces"] == [
        "profiler_traces/epoch_0.json",
        "profiler_traces/epoch_0_cycle1.json",
    ]
    top = record["summary"]["top_cpu_ops"][0]
    calls = [
        next(r["calls"] for r in analyze_trace(tmp_path / name, top_k=None)["top_cpu_op_rows"]
             if r["name"] == top["name"])
        for name in record["traces"]
    ]  # fmt: skip
    assert all(calls)
    assert top["calls"] == sum(calls)
    assert sum(enabled for _, enabled in module.profiled_steps) == 4
    assert _profiler_off()


def test_unwritable_record_is_one_warning_and_traces_go_on(tmp_path: Path) -> None:
    (tmp_path / "perf").write_text("a file where the perf directory should be")
    cb = ProfilerCallback(schedule=ProfileSchedule(epochs=[0, 1], active=2, warmup=0))
    with pytest.warns(PerfCallbackWarning, match="profiler record") as record:
        _fit(tmp_path, cb, epochs=2, validate=False)
    assert len([w for w in record if issubclass(w.category, PerfCallbackWarning)]) == 1
    assert sorted(p.name for p in (tmp_path / "profiler_traces").iterdir()) == [
        "epoch_0.json",
        "epoch_1.json",
    ]
    assert len(cb.windows) == 2


DDP_SCRIPT = """
import os, sys
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainperf.lightning import ProfilerCallback, ProfileSchedule


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    cb = ProfilerCallback(schedule=ProfileSchedule(
        epochs=[], active=2, warmup=0, trigger_file="PROFILE_NOW", check_every_n_steps=2,
    ))
    trainer = L.Trainer(
        default_root_dir=sys.argv[1], accelerator="cpu", devices=2, strategy="ddp",
        max_epochs=2, limit_val_batches=0, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, callbacks=[cb],
    )
    trainer.fit(Module(), DataLoader(data, batch_size=4))
    print(f"rank {trainer.global_rank} windows {len(cb.windows)}")
    # Leave without the interpreter's finalization: tearing down the DDP / Gloo objects there
    # aborted 1 launch in ~10 after a finished run ('terminate called without an active
    # exception', exit -6), destroy_process_group() or not. Output is flushed first.
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
"""


def test_ddp_ondemand_traces_get_a_rank_suffix(tmp_path: Path) -> None:
    script = tmp_path / "ddp_ondemand.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    (tmp_path / "PROFILE_NOW").touch()  # present from the start: every rank sees it at step 2
    env = dict(os.environ, PYTHONPATH=_PYTHONPATH, WANDB_MODE="offline")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    # 32 samples / 2 ranks / batch 4 = 4 steps per epoch and rank; one window on each rank
    assert "rank 0 windows 1" in proc.stdout
    assert "rank 1 windows 1" in proc.stdout
    assert not (tmp_path / "PROFILE_NOW").exists()
    out = tmp_path / "profiler_traces"
    assert sorted(p.name for p in out.iterdir()) == [
        "ondemand_e0_s2_rank0.json",
        "ondemand_e0_s2_rank1.json",
    ]
    (record,) = read_dicts(tmp_path / "perf" / "profiler.jsonl", ProfilerWindow)  # rank zero only
    assert record["traces"] == ["profiler_traces/ondemand_e0_s2_rank0.json"]
    assert record["steps"] == 2
