"""Through ``ocr-train`` as a user runs it (issue 15): the user's dataset is never modified by the
synthetic experiment, a resumed longer run trains (learning rate > 0), a second run never
appends to another run's files (refused; resuming continues them), and the resolved config
reaches every logger and ``perf/run.json``."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from PIL import Image

from ocr.data.synth import dataset_is_complete, generate_dataset

pytestmark = pytest.mark.slow

TINY = [
    "experiment=synthetic_debug",
    "data.canvas_size=128",
    "data.batch_size=2",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "callbacks.model_summary=null",
]
# The synthetic experiment, made small: generation on first use stays a few seconds.
SMALL_SYNTH = [
    "data.synthetic.splits.train=4",
    "data.synthetic.splits.val=2",
    "data.synthetic.splits.test=0",
    "data.synthetic.workers=1",
]


def _train(*overrides: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "ocr.train", *TINY, *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _csv_rows(run: Path) -> list[dict[str, str]]:
    with open(run / "csv" / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_dataset(
        tmp_path_factory.mktemp("synth") / "ds", splits={"train": 4, "val": 2}, seed=3
    )


# --------------------------------------------------------------------------------------------
# 1. a user's dataset is never modified


def test_synthetic_experiment_refuses_a_users_dataset_and_leaves_it_byte_identical(
    tmp_path: Path,
) -> None:
    user = tmp_path / "my-receipts"
    (user / "images" / "train").mkdir(parents=True)
    (user / "jsons").mkdir()
    Image.new("RGB", (64, 48), "white").save(user / "images" / "train" / "IMG_0001.jpg")
    (user / "jsons" / "train.json").write_text('{"images": {"IMG_0001.jpg": {"words": {}}}}')
    before = _hashes(user)
    proc = _train(
        *SMALL_SYNTH,
        f"data.dataset_dir={user}",
        "trainer.max_epochs=1",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert str(user) in proc.stderr
    assert "data.synthetic=null" in proc.stderr  # says what to do
    assert _hashes(user) == before


def test_synthetic_experiment_generates_into_an_empty_folder_then_reuses_it(
    tmp_path: Path,
) -> None:
    target = tmp_path / "synth-here"
    target.mkdir()
    common = [*SMALL_SYNTH, f"data.dataset_dir={target}", "trainer.max_epochs=1"]
    _ok(_train(*common, f"hydra.run.dir={tmp_path / 'run1'}", cwd=tmp_path))
    spec = {"splits": {"train": 4, "val": 2, "test": 0}, "seed": 0}
    assert dataset_is_complete(target, spec)
    made = _hashes(target)
    # A folder the generator made: used as it is (complete), nothing rewritten.
    _ok(_train(*common, f"hydra.run.dir={tmp_path / 'run2'}", cwd=tmp_path))
    assert _hashes(target) == made


# --------------------------------------------------------------------------------------------
# 2. resume with a longer run trains every added epoch


def test_resume_with_more_epochs_trains_at_a_positive_learning_rate(
    tiny_dataset: Path, tmp_path: Path
) -> None:
    data = ["data.synthetic=null", f"data.dataset_dir={tiny_dataset}"]
    first = tmp_path / "first"
    _ok(_train(*data, "trainer.max_epochs=1", f"hydra.run.dir={first}", cwd=tmp_path))
    resumed = tmp_path / "resumed"
    proc = _train(
        *data,
        "trainer.max_epochs=3",
        f"ckpt_path={first}/checkpoints/last.ckpt",
        f"hydra.run.dir={resumed}",
        cwd=tmp_path,
    )
    _ok(proc)
    lr_rows = [r for r in _csv_rows(resumed) if r.get("lr-AdamW")]
    steps = [int(r["step"]) for r in lr_rows]
    assert steps == [2, 3, 4, 5]  # epochs 1 and 2, two optimizer steps each
    lrs = [float(r["lr-AdamW"]) for r in lr_rows]
    assert all(lr > 0 for lr in lrs), lrs
    # The plan of a 6-step run at step 2: PolynomialLR(power 0.9) from lr 0.003.
    assert lrs[0] == pytest.approx(0.003 * (1 - 2 / 6) ** 0.9, rel=1e-6)


# --------------------------------------------------------------------------------------------
# 3. one run per run folder; resuming continues it


def test_second_run_in_a_run_folder_is_refused_and_resume_continues_it(
    tiny_dataset: Path, tmp_path: Path
) -> None:
    data = ["data.synthetic=null", f"data.dataset_dir={tiny_dataset}", "callbacks=monitoring"]
    run = tmp_path / "run"
    _ok(_train(*data, "trainer.max_epochs=1", f"hydra.run.dir={run}", cwd=tmp_path))
    # Hydra's own files too: its config and job log are written before the training code runs
    # (ocr.run_folder.RunFolderGuard keeps it from rewriting them for a refused run).
    watched = [
        "perf/epochs.jsonl",
        "csv/metrics.csv",
        "checkpoints/last.ckpt",
        ".hydra/config.yaml",
        ".hydra/overrides.yaml",
        "train.log",
    ]
    before = {name: (run / name).read_bytes() for name in watched}
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())

    proc = _train(*data, "trainer.max_epochs=1", f"hydra.run.dir={run}", cwd=tmp_path)
    assert proc.returncode != 0
    assert f"run folder {run} already holds a run" in proc.stderr
    assert f"ckpt_path={run}/checkpoints/last.ckpt" in proc.stderr  # what to do
    assert {name: (run / name).read_bytes() for name in watched} == before
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == checkpoints

    # Resuming from a checkpoint of another folder into this one would mix runs too.
    other = tmp_path / "other"
    _ok(_train(*data, "trainer.max_epochs=1", f"hydra.run.dir={other}", cwd=tmp_path))
    proc = _train(
        *data,
        "trainer.max_epochs=2",
        f"ckpt_path={other}/checkpoints/last.ckpt",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert "a checkpoint of another folder" in proc.stderr
    assert {name: (run / name).read_bytes() for name in watched} == before

    # Resuming this folder's own run continues its files.
    proc = _train(
        *data,
        "trainer.max_epochs=2",
        f"ckpt_path={run}/checkpoints/last.ckpt",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    _ok(proc)
    epochs = (run / "perf" / "epochs.jsonl").read_bytes()
    assert epochs.startswith(before["perf/epochs.jsonl"])
    train_epochs = [
        rec["epoch"]
        for rec in map(json.loads, epochs.decode().splitlines())
        if rec.get("stage") == "train"
    ]
    assert train_epochs == [0, 1]
    val_epochs = [int(r["epoch"]) for r in _csv_rows(run) if r.get("val/hmean")]
    assert val_epochs == [0, 1]  # the first run's rows are kept, the resumed epoch appended
    assert not any("-v1" in p.name for p in (run / "checkpoints").iterdir())


# --------------------------------------------------------------------------------------------
# 4. the resolved config reaches every logger and perf/run.json


def test_resolved_config_reaches_every_logger_and_run_json(
    tiny_dataset: Path, tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    run = tmp_path / "run"
    proc = _train(
        "data.synthetic=null",
        f"data.dataset_dir={tiny_dataset}",
        "data.batch_size=3",
        "callbacks=performance_profiler",
        "logger=wandb",
        "trainer.max_epochs=1",
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    _ok(proc)
    for hparams_file in (run / "tensorboard" / "hparams.yaml", run / "csv" / "hparams.yaml"):
        saved = yaml.safe_load(hparams_file.read_text())
        assert saved["data"]["batch_size"] == 3, hparams_file
        assert saved["model"]["optimizer"]["lr"] == 0.003
        assert saved["trainer"]["default_root_dir"] == str(run)  # resolved, not ${hydra:...}
    run_info = json.loads((run / "perf" / "run.json").read_text())
    assert run_info["hparams"]["data"]["batch_size"] == 3

    # TensorBoard's HPARAMS tab: a session with the config and the monitored metric column.
    (events,) = (run / "tensorboard").glob("events.out.tfevents.*")
    acc = EventAccumulator(str(events))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    assert start.session_start_info.hparams["data/batch_size"].number_value == 3
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    assert "val/hmean" in [m.name.tag for m in experiment.experiment.metric_infos]

    # W&B (offline): the run file holds the config as JSON (before: only `_wandb` keys).
    (wandb_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    assert b'"batch_size":3' in wandb_file.read_bytes()
