"""An eval-time candidate through the real path: ``ocr-train`` records its evaluation command
(``ocr-test`` and its H-mean line) in ``perf/run.json``; ``trainperf try`` runs it on the run's
checkpoint (unchanged, then with the change), reads each run's evaluation speed from its perf files
and its H-mean, and does not recommend the change. (A tiny checkpoint scores H-mean 0, so the drop
rule itself is covered by packages/trainperf/tests/unit/perf_try/test_session.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainperf.analysis.trials import latest_session
from trainperf.cli.main import main as perf_main
from trainperf.records.files import read_run_record

from ocr.data.synth import generate_dataset
from ocr.test import EVAL_COMMAND

pytestmark = pytest.mark.slow

TINY = [
    "experiment=synthetic_debug",
    "callbacks=performance_profiler",
    "callbacks.model_summary=null",
    "data.synthetic=null",
    "data.canvas_size=128",
    "data.batch_size=4",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
    "trainer.num_sanity_val_steps=0",
    "trainer.max_epochs=1",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("synth")
    generate_dataset(data, splits={"train": 4, "val": 8, "test": 2}, seed=3)
    run = tmp_path_factory.mktemp("runs") / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ocr.train",
            *TINY,
            f"data.dataset_dir={data}",
            f"hydra.run.dir={run}",
        ],
        cwd=run.parent,
        env=dict(os.environ, WANDB_MODE="offline"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return run


def test_eval_time_candidate_is_checked_with_ocr_test(
    tiny_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = perf_main(
        [
            "try",
            str(tiny_run),
            "--no-findings",
            "--candidate",
            "model.postprocess.box_thresh=0.95",
            "--pairs",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert read_run_record(tiny_run).eval == EVAL_COMMAND  # recorded by ocr-train
    (record,) = latest_session(tiny_run)
    assert record.eval_time
    assert record.alters_computation
    assert record.pairs == 1, record.note
    assert record.quality_name == "H-mean"
    assert record.quality_base is not None
    assert record.quality_changed is not None
    assert record.base_samples_per_sec is not None
    assert record.base_samples_per_sec > 0
    assert not record.recommended
    assert "ocr-test" in record.note
    assert "Nothing recommended yet: 1 of 1 measured change(s) had fewer than 3 pairs" in out
