"""End to end through the console entry points, as a user runs them: tiny synthetic data,
``ocr-train`` (checkpoint, metrics, resume), then ``ocr-test`` reproducing the validation H-mean
and writing predictions the annotation reader loads."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ocr.data.annotations import load_annotations
from ocr.data.synth import generate_dataset

pytestmark = pytest.mark.slow

TINY = [
    "experiment=synthetic_debug",
    "data.synthetic=null",
    "data.canvas_size=128",
    "data.batch_size=4",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
]


def _run(module: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if module == "ocr.train":
        overrides = ("callbacks.model_summary=null", *overrides)
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-m", module, *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    generate_dataset(out, splits={"train": 8, "val": 4, "test": 4}, seed=3)
    return out


@pytest.fixture(scope="module")
def trained_run(tiny_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    proc = _run(
        "ocr.train",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        "trainer.max_epochs=2",
        f"hydra.run.dir={run}",
        cwd=run,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "VAL H-mean" in proc.stdout
    return run


def _val_rows(run: Path) -> list[dict[str, str]]:
    with open(run / "csv" / "metrics.csv") as fh:
        return [row for row in csv.DictReader(fh) if row.get("val/hmean")]


def test_train_writes_checkpoint_metrics_and_config(trained_run: Path) -> None:
    # last.ckpt is the latest epoch even when that epoch is not the best one.
    ckpt = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["epoch"] == 1
    assert len(list((trained_run / "checkpoints").glob("best-epoch*.ckpt"))) == 1
    assert ckpt["ocr_config"]["net"]["_target_"] == "ocr.models.dbnet.DBNet"
    rows = _val_rows(trained_run)
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    for r in rows:
        assert 0.0 <= float(r["val/hmean"]) <= 1.0
    assert (trained_run / "tensorboard").is_dir()


def test_ocr_test_reproduces_val_hmean_and_writes_loadable_predictions(
    trained_run: Path, tiny_dataset: Path, tmp_path: Path
) -> None:
    proc = _run(
        "ocr.test",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        f"checkpoint_path={trained_run}/checkpoints/last.ckpt",
        "split=val",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    last_val = float(_val_rows(trained_run)[-1]["val/hmean"])
    # metrics named after the split evaluated, in the logs and on screen, printed once
    with open(tmp_path / "csv" / "metrics.csv") as fh:
        test_rows = [r for r in csv.DictReader(fh) if r.get("val/hmean")]
    assert len(test_rows) == 1
    assert float(test_rows[0]["val/hmean"]) == pytest.approx(last_val, abs=1e-6)
    assert "test/" not in proc.stdout
    assert proc.stdout.count("val/hmean") == 1
    assert f"H-mean on split 'val': {last_val:.4f}" in proc.stdout
    preds = load_annotations(tmp_path / "predictions.json")
    gt = load_annotations(tiny_dataset / "jsons" / "val.json")
    assert sorted(p.file_name for p in preds) == sorted(g.file_name for g in gt)


def test_resume_from_last_checkpoint_continues_epochs(
    trained_run: Path, tiny_dataset: Path, tmp_path: Path
) -> None:
    proc = _run(
        "ocr.train",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        "trainer.max_epochs=3",
        f"ckpt_path={trained_run}/checkpoints/last.ckpt",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert [int(r["epoch"]) for r in _val_rows(tmp_path)] == [2]
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["epoch"] == 2


def test_ocr_test_missing_split_names_the_split(
    trained_run: Path, tiny_dataset: Path, tmp_path: Path
) -> None:
    proc = _run(
        "ocr.test",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        f"checkpoint_path={trained_run}/checkpoints/last.ckpt",
        "split=holdout",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    missing = tiny_dataset / "jsons" / "holdout.json"
    assert (
        f"ocr-test: error: annotation file for split 'holdout' (used as the test split) not "
        f"found: {missing}"
    ) in proc.stderr


def test_ocr_test_missing_checkpoint_is_a_clear_error(tiny_dataset: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.ckpt"
    proc = _run(
        "ocr.test",
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        f"checkpoint_path={missing}",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert f"no such file: {missing}" in proc.stderr


def test_ddp_two_cpu_ranks_train_and_test_gather_predictions(
    tiny_dataset: Path, tmp_path: Path
) -> None:
    # Lightning re-executes the command line for rank 1 (so this goes through the CLI); rank-zero
    # code must not touch a collective, and ocr-test gathers predictions from every rank.
    ddp = [
        *TINY,
        f"data.dataset_dir={tiny_dataset}",
        "data.batch_size=1",
        "trainer.devices=2",
        "trainer.strategy=ddp",
    ]
    run = tmp_path / "run"
    proc = _run("ocr.train", *ddp, "trainer.max_epochs=1", f"hydra.run.dir={run}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    # Our module logs DDP-safe metrics: Lightning has nothing to warn about.
    assert "sync_dist" not in proc.stdout + proc.stderr
    assert (run / "checkpoints" / "last.ckpt").is_file()
    out = tmp_path / "test"
    proc = _run(
        "ocr.test",
        *ddp,
        f"checkpoint_path={run}/checkpoints/last.ckpt",
        "split=val",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "sync_dist" not in proc.stdout + proc.stderr
    preds = load_annotations(out / "predictions.json")
    gt = load_annotations(tiny_dataset / "jsons" / "val.json")
    # Each rank saw half of the images; the file holds all of them.
    assert sorted(p.file_name for p in preds) == sorted(g.file_name for g in gt)


def test_ocr_test_on_real_receipts_in_the_flat_layout(
    trained_run: Path, receipts_dir: Path, tmp_path: Path
) -> None:
    # A folder as people keep receipts (images/ + one annotations.json), used as it is.
    data = tmp_path / "receipts"
    shutil.copytree(receipts_dir, data)
    out = tmp_path / "test"
    proc = _run(
        "ocr.test",
        *TINY,
        f"data.dataset_dir={data}",
        f"checkpoint_path={trained_run}/checkpoints/last.ckpt",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert re.search(r"H-mean on split 'test': \d\.\d{4}", proc.stdout), proc.stdout[-2000:]
    preds = load_annotations(out / "predictions.json")
    assert sorted(p.file_name for p in preds) == ["1.jpeg", "2.jpeg"]


@pytest.mark.parametrize("module", ["ocr.train", "ocr.test"])
def test_help_starts_with_worked_examples(module: str, tmp_path: Path) -> None:
    proc = _run(module, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"ocr-{module.split('.')[1]}: ")
    examples = lines.index("Examples:")
    assert examples < 4
    assert "experiment=synthetic_debug" in lines[examples + 1]
    assert "data.dataset_dir=" in proc.stdout
    assert "annotations.json" in proc.stdout
    assert "Config groups" in proc.stdout
    assert len(lines) < 40
