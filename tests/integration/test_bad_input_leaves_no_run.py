"""A command stopped by bad input before training leaves no run folder, and ``trainperf report``
on a folder where no run happened says so plainly instead of advising the performance callbacks.

Issue 38, point 5: ``ocr-train preset=example`` with a missing dataset exited 2 but left a run
folder (``.hydra/``, ``train.log``, ``perf/run.json``, a header-only TensorBoard file), on which
``trainperf report`` said "attach the performance callbacks"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainperf.cli.main import main as perf_main
from trainperf.records.files import write_run_record

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_ocr_train_with_a_missing_dataset_leaves_no_folder(tmp_path: Path) -> None:
    run = tmp_path / "outputs" / "train" / "run"
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), str(REPO_ROOT / "packages" / "trainperf" / "src")]
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ocr.train",
            "preset=example",
            f"data.dataset_dir={tmp_path / 'no-such-dataset'}",
            f"hydra.run.dir={run}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "data.dataset_dir: no such folder" in proc.stderr
    assert "the run stopped before training" in proc.stderr
    assert not (tmp_path / "outputs").exists(), sorted(map(str, tmp_path.rglob("*")))


def _leftover(run: Path) -> Path:
    """What that command left before the fix (and a folder of an older version holds)."""
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 42\n")
    (run / "train.log").write_text("[INFO] Seed set to 42\n")
    write_run_record(run, {"argv": ["ocr-train", "preset=example"]})  # perf/run.json
    (run / "tensorboard").mkdir()
    header = (24).to_bytes(8, "little") + bytes(4) + bytes(24) + bytes(4)  # the version record
    (run / "tensorboard" / "events.out.tfevents.1.host.1.0").write_bytes(header)
    return run


def test_report_on_a_folder_where_no_run_happened_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _leftover(tmp_path / "run")
    assert perf_main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run}: no recorded run here" in err
    assert "stopped before training" in err
    assert "attach" not in err
    assert not (run / "perf" / "report.html").exists()


@pytest.mark.parametrize(
    "finished",
    ["checkpoints/epoch=1-step=40.ckpt", "csv/metrics.csv", "tensorboard/events.out.tfevents.2"],
)
def test_a_finished_run_without_the_callbacks_still_gets_the_advice(
    tmp_path: Path, finished: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _leftover(tmp_path / "run")
    path = run / finished
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.startswith("events."):  # the header record, then a logged scalar
        header = (run / "tensorboard" / "events.out.tfevents.1.host.1.0").read_bytes()
        path.write_bytes(header + (8).to_bytes(8, "little") + bytes(16))
    else:
        path.write_text("epoch,step,train/loss\n0,19,0.5\n")
    assert perf_main(["report", str(run), "--markdown", str(tmp_path / "r.md")]) == 0
    assert "attach the performance callbacks" in (tmp_path / "r.md").read_text()
