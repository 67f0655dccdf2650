"""The app's run records its framework and configuration in ``perf/run.json`` as data (issue 39):
``framework`` (Lightning, its version, each change in Lightning's words) from the Lightning
adapter, ``app`` (the Hydra app's job name, saved config and overrides) read by the adapter where
the process runs Hydra, so the report and advice read the configuration without ``.hydra/``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from trainperf.analysis.run import load_run
from trainperf.present.report import build_report
from trainperf.records.files import read_run_record

from ocr.data.synth import generate_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def app_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("synth")
    generate_dataset(data, splits={"train": 8, "val": 4, "test": 4}, seed=3)
    run = tmp_path_factory.mktemp("run")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ocr.train",
            "experiment=synthetic_debug",
            "data.synthetic=null",
            f"data.dataset_dir={data}",
            "data.canvas_size=128",
            "data.batch_size=4",
            "data.num_workers=0",
            "data.persistent_workers=false",
            "trainer.accelerator=cpu",
            "trainer.devices=1",
            "trainer.enable_progress_bar=false",
            "trainer.num_sanity_val_steps=0",
            "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1",
            "trainer.max_epochs=1",
            "callbacks=monitoring",
            f"hydra.run.dir={run}",
        ],
        cwd=run,
        env=dict(os.environ, WANDB_MODE="offline"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return run


def test_run_json_holds_the_framework_and_the_app(app_run: Path) -> None:
    info = read_run_record(app_run)
    framework = info.framework_info
    assert framework is not None
    assert framework.name == "lightning"
    assert framework.version
    assert framework.spell("precision", "bf16-mixed") == 'Trainer(precision="bf16-mixed")'
    setting = framework.setting("precision")
    assert setting is not None
    assert info.precision
    assert setting.value == info.precision  # the Trainer's, as it ran
    app = info.app
    assert app is not None
    assert app.literals == "override"
    assert app.config is not None
    assert app.config["data"]["num_workers"] == 0
    assert "data.num_workers=0" in app.overrides
    assert app.hints["profile"] == "rerun with callbacks.profiler.enabled=true"


def test_the_report_reads_the_config_from_run_json_alone(app_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(app_run, copy)
    shutil.rmtree(copy / ".hydra")  # a folder without Hydra's files: run.json is enough
    run = load_run(copy)
    assert run.config is not None
    assert run.config["data"]["num_workers"] == 0
    assert run.framework is not None
    assert run.framework.name == "lightning"
    report = build_report(copy)
    assert report.run.trace_note == (
        "no profiler trace recorded (rerun with callbacks.profiler.enabled=true)"
    )
