"""Issue 15 (points 5, 7, 10) through the console entry points, as users type them: the commands
from the project this grew from compose and run, typos and leftover entries fail by name, a
schedule.epochs past the run's end are named, and the console carries none of the known noise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainperf.records.epoch_scans import GrowthRecord, RecompilesRecord
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records

from ocr.data.synth import generate_dataset

pytestmark = pytest.mark.slow

# Short runs; no `callbacks.model_summary=null` (its "already configured" notice is under test).
TINY = [
    "data.synthetic=null",
    "data.canvas_size=128",
    "data.batch_size=4",
    "data.persistent_workers=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
]

# Lines every run used to print that tell users nothing they can act on.
NOISE = (
    "💡 Tip",
    "litlogger",
    "litmodels",
    "LeafSpec",
    "_pytree",
    "Trainer already configured with model summary callbacks",
    "The anonymous setting has no effect",
    "worker processes in total",  # PyTorch's "This DataLoader will create N worker processes"
    "][INFO] - ",  # Hydra's default (long) log format
)


def _run(module: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    env.pop("WANDB_SILENT", None)  # its warnings must be absent because they are not raised
    return subprocess.run(
        [sys.executable, "-m", module, *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out


def _assert_quiet(out: str) -> None:
    for line in NOISE:
        assert line not in out, f"{line!r} in the output:\n{out[-6000:]}"


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    generate_dataset(out, splits={"train": 8, "val": 4, "test": 4}, seed=3)
    return out


@pytest.fixture(scope="module")
def profiled_run(tiny_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The issue's profiler command, with the monitors too and the WandB logger tagged."""
    run = tmp_path_factory.mktemp("run")
    proc = _run(
        "ocr.train",
        "experiment=synthetic_debug",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        "data.num_workers=0",
        "callbacks=monitoring",
        "trainer.max_epochs=2",
        "callbacks.profiler.enabled=true",
        "callbacks.profiler.schedule.epochs=[1,2]",
        "callbacks.profiler.schedule.active=50",
        "wandb=true",
        "experiment_tag=baseline_profiling",
        f"hydra.run.dir={run}",
        cwd=run,
    )
    return run, _ok(proc)


def test_profiler_switches_on_with_any_callbacks_choice(profiled_run: tuple[Path, str]) -> None:
    run, _ = profiled_run
    assert (run / "profiler_traces" / "epoch_1.json").is_file()
    assert (run / "perf" / "profiler.jsonl").is_file()  # the profiler's record
    assert (run / "perf" / "resources.jsonl").is_file()  # and the monitors of callbacks=monitoring


def test_monitoring_runs_the_epoch_scan_nested_in_the_profiler(
    profiled_run: tuple[Path, str],
) -> None:
    """callbacks=monitoring's epoch scan rides on the performance profiler (no callback of its
    own) and still writes its two files, one line per training epoch, its time named after it."""
    run, _ = profiled_run
    assert [g.epoch for g in read_records(GrowthRecord.path(run), GrowthRecord)] == [0, 1]
    assert [r.epoch for r in read_records(RecompilesRecord.path(run), RecompilesRecord)] == [0, 1]
    train = [r for r in read_records(EpochRecord.path(run), EpochRecord) if r.stage == "train"]
    assert len(train) == 2
    for record in train:
        assert record.callback_hooks_s["EpochScanCallback.on_train_epoch_end"] > 0


def test_profile_epochs_past_the_end_are_named_once(profiled_run: tuple[Path, str]) -> None:
    _, out = profiled_run
    assert out.count("schedule.epochs [2] are never reached (max_epochs=2") == 1


def test_wandb_and_experiment_tag(profiled_run: tuple[Path, str]) -> None:
    run, _ = profiled_run
    info = json.loads((run / "perf" / "run.json").read_text())
    assert info["experiment_tag"] == "baseline_profiling"
    assert list((run / "wandb").glob("offline-run-*"))
    assert "experiment_tag: baseline_profiling" in (run / "csv" / "hparams.yaml").read_text()


def test_console_is_quiet_and_train_log_has_the_log_lines(profiled_run: tuple[Path, str]) -> None:
    run, out = profiled_run
    _assert_quiet(out)
    log = (run / "train.log").read_text()
    # Lightning's lines and ours, in the one short format.
    assert "] GPU available:" in log
    assert "] ProfilerCallback: train window epoch_1" in log
    assert "schedule.epochs [2] are never reached" in log
    assert out.count("GPU available:") == 1  # not once per handler


def test_ocr_test_with_preset_monitor_wandb_and_tag(
    profiled_run: tuple[Path, str], tiny_dataset: Path, tmp_path: Path
) -> None:
    run, _ = profiled_run
    proc = _run(
        "ocr.test",
        "preset=example",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        f"checkpoint_path={run}/checkpoints/last.ckpt",
        "callbacks=performance_profiler",
        "callbacks.performance_profiler.verbose=true",
        "wandb=true",
        "experiment_tag=baseline_profiling",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    out = _ok(proc)
    _assert_quiet(out)
    assert "test epoch 0" in out  # the verbose performance table
    info = json.loads((tmp_path / "perf" / "run.json").read_text())
    assert info["experiment_tag"] == "baseline_profiling"
    assert info["task_name"] == "test"
    # preset=example asks for 8 workers; capped at the usable cores and said once.
    cores = len(os.sched_getaffinity(0))
    if cores < 8:
        assert out.count("data.num_workers=8 exceeds") == 1
    assert (tmp_path / "test.log").read_text().strip()


def test_fast_dev_run(tiny_dataset: Path, tmp_path: Path) -> None:
    proc = _run(
        "ocr.train",
        "experiment=synthetic_debug",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        "data.num_workers=0",
        "trainer.fast_dev_run=true",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    out = _ok(proc)
    assert "Running in `fast_dev_run` mode" in out


def test_trainer_typo_fails_naming_the_key(tmp_path: Path) -> None:
    proc = _run("ocr.train", "trainer.max_epoch=3", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 2
    assert "trainer.max_epoch=3 (command line): no such key" in proc.stderr
    assert "did you mean trainer.max_epochs?" in proc.stderr


def test_callback_entry_without_target_fails_naming_it(tiny_dataset: Path, tmp_path: Path) -> None:
    proc = _run(
        "ocr.train",
        "experiment=synthetic_debug",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        "callbacks=none",
        "+callbacks.profiler.enabled=true",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert "callbacks.profiler has no _target_" in proc.stderr
    assert not (tmp_path / "checkpoints").exists()
