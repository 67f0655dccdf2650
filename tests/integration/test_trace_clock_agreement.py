"""On the demo's configuration with the profiler on, the trace analyzer and the live phase clock
agree within 10 % per phase over the profiled steps; the report marks the profiled epoch and
keeps the trace export out of ``callbacks``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ocr.data.synth import generate_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("synth")
    generate_dataset(data, splits={"train": 24, "val": 4, "test": 4}, seed=3)
    run = tmp_path_factory.mktemp("run")
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ocr.train",
            "experiment=synthetic_debug",
            # the demo's callbacks (all monitors: the phase clock) plus the profiler
            "callbacks=[monitoring,profiler]",
            "callbacks.profiler.enabled=true",
            "callbacks.profiler.schedule.epochs=[0]",
            "callbacks.profiler.schedule.active=3",
            "callbacks.model_summary=null",
            "callbacks.progress_bar=null",
            "data.synthetic=null",
            f"data.dataset_dir={data}",
            "data.canvas_size=128",
            "data.batch_size=4",
            "data.num_workers=0",
            "data.persistent_workers=false",
            "trainer.accelerator=cpu",
            "trainer.devices=1",
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=5",
            "trainer.limit_val_batches=1",
            "trainer.num_sanity_val_steps=0",
            f"hydra.run.dir={run}",
        ],
        cwd=tmp_path_factory.mktemp("cwd"),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def test_trace_and_clock_agree_per_phase(profiled_run: Path) -> None:
    records = [
        json.loads(line)
        for line in (profiled_run / "perf" / "profiler.jsonl").read_text().splitlines()
    ]
    window = next(r for r in records if r["stage"] == "train")
    agreement = window["clock_agreement"]
    assert agreement is not None, "no phase clock figures over the profiled steps"
    assert agreement["steps"] == 3
    rows = {p["phase"]: p for p in agreement["phases"]}
    assert agreement["agree"], json.dumps(rows)
    for phase in ("forward", "backward", "optimizer"):
        assert abs(rows[phase]["diff_pct"]) <= 10.0, rows[phase]
    assert not [f for f in window["summary"]["findings"] if f["id"] == "measurement_disagreement"]
    assert window["batches"] == [0, 3]  # warm-up step + 3 recorded
    assert window["overhead_s"]["export"] > 0


def test_report_marks_the_profiled_epoch(profiled_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainperf.cli.main",
            "report",
            str(profiled_run),
            "--markdown",
            str(out),
            "-o",
            str(tmp_path / "report.html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "Profiled epochs" in text
    assert "training epoch 0" in text
    assert "| profiler |" in text  # the export's own line in the phase table
    assert "one figure per phase (the phase clock)" in text


def test_ocr_perf_analyze_shows_the_clock_beside_the_trace(profiled_run: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainperf.cli.main",
            "analyze",
            str(profiled_run / "profiler_traces"),
            "--json",
            str(profiled_run.parent / "analysis.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, COLUMNS="160"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "clock ms" in proc.stdout
    report = json.loads((profiled_run.parent / "analysis.json").read_text())
    assert report["clock_agreement"]["steps"] == 3
    assert report["clock_agreement"]["agree"]
