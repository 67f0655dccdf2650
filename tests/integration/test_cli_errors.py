"""Expected errors through the console entry points, as a user meets them: one message on
stderr naming the file / field, a non-zero exit, no traceback (``HYDRA_FULL_ERROR=1``: the
traceback); and plain progress lines when stdout is not a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ocr.data.synth import generate_dataset

pytestmark = pytest.mark.slow

TINY = [
    "experiment=synthetic_debug",
    "data.synthetic=null",
    "data.canvas_size=64",
    "data.batch_size=2",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "logger=default",
    "callbacks.model_summary=null",
]


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python args`` with stdout a pipe (not a terminal), as in a batch job's log."""
    full_env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    full_env.pop("HYDRA_FULL_ERROR", None)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    generate_dataset(out, splits={"train": 4, "val": 2, "test": 2}, seed=5)
    return out


def test_missing_dataset_dir_is_one_message_naming_the_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-data"
    proc = _run(
        ["-m", "ocr.train", *TINY, f"data.dataset_dir={missing}", f"hydra.run.dir={tmp_path}/r"],
        tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert f"ocr-train: error: data.dataset_dir: no such folder: {missing}" in proc.stderr


def test_hydra_full_error_shows_the_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-data"
    proc = _run(
        ["-m", "ocr.train", *TINY, f"data.dataset_dir={missing}", f"hydra.run.dir={tmp_path}/r"],
        tmp_path,
        HYDRA_FULL_ERROR="1",
    )
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    # an InputError that is also a FileNotFoundError (ocr.errors): the type names it
    assert "errors.MissingPathError: data.dataset_dir: no such folder" in proc.stderr


def test_non_numeric_coordinate_names_file_and_word(tiny_dataset: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"  # a copy: the shared dataset stays intact
    data.mkdir()
    (data / "images").symlink_to(tiny_dataset / "images")
    (data / "jsons").mkdir()
    for split in ("val", "test"):
        (data / "jsons" / f"{split}.json").write_bytes(
            (tiny_dataset / "jsons" / f"{split}.json").read_bytes()
        )
    doc = json.loads((tiny_dataset / "jsons" / "train.json").read_text())
    image = next(iter(doc["images"]))
    word = next(iter(doc["images"][image]["words"]))
    doc["images"][image]["words"][word]["points"][0] = ["abc", 3]
    (data / "jsons" / "train.json").write_text(json.dumps(doc))
    proc = _run(
        ["-m", "ocr.train", *TINY, f"data.dataset_dir={data}", f"hydra.run.dir={tmp_path}/r"],
        tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("ocr-train: error:")]
    assert len(error) == 1
    assert "train.json" in error[0]
    assert image in error[0]


def test_bad_config_value_is_one_message(tiny_dataset: Path, tmp_path: Path) -> None:
    proc = _run(
        [
            "-m",
            "ocr.train",
            *TINY,
            f"data.dataset_dir={tiny_dataset}",
            "data.batch_size=-3",
            f"hydra.run.dir={tmp_path}/r",
        ],
        tmp_path,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "ocr-train: error: data.batch_size must be positive, got -3" in proc.stderr


def test_ocr_test_missing_checkpoint_has_no_traceback(tiny_dataset: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.ckpt"
    proc = _run(
        [
            "-m",
            "ocr.test",
            *TINY[:-1],
            f"data.dataset_dir={tiny_dataset}",
            f"checkpoint_path={missing}",
            f"hydra.run.dir={tmp_path}/r",
        ],
        tmp_path,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"ocr-test: error: checkpoint_path: no such file: {missing}" in proc.stderr
    assert not (tmp_path / "r").exists()  # refused before Hydra made the run folder


def test_ocr_train_missing_or_unreadable_ckpt_path_is_one_line_and_writes_nothing(
    tiny_dataset: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.ckpt"
    unreadable = tmp_path / "notes.ckpt"
    unreadable.write_text("not a checkpoint")
    for ckpt, message in (
        (missing, f"ckpt_path: no such file: {missing}"),
        (unreadable, f"ckpt_path: {unreadable} is not a checkpoint"),
    ):
        run = tmp_path / "run"
        proc = _run(
            [
                "-m",
                "ocr.train",
                *TINY,
                f"data.dataset_dir={tiny_dataset}",
                f"ckpt_path={ckpt}",
                f"hydra.run.dir={run}",
            ],
            tmp_path,
        )
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        (error,) = [line for line in proc.stderr.splitlines() if line.strip()]
        assert error.startswith(f"ocr-train: error: {message}")
        assert not run.exists()  # no .hydra/, csv/, tensorboard/, log: not even the folder


def test_ocr_synth_unusable_output_is_one_message(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    proc = _run(
        ["-m", "ocr.data.synth", "--out", str(a_file / "x"), "--train", "1", "--val", "0",
         "--test", "0"],
        tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"ocr-synth: error: {a_file / 'x'}" in proc.stderr
    assert a_file.read_text() == "mine"


def test_progress_lines_without_a_terminal(tiny_dataset: Path, tmp_path: Path) -> None:
    # stdout is a pipe: the Rich bar would print nothing until the end; the plain bar logs
    proc = _run(
        [
            "-m",
            "ocr.train",
            *TINY,
            f"data.dataset_dir={tiny_dataset}",
            "trainer.max_epochs=2",
            f"hydra.run.dir={tmp_path}/r",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [line for line in proc.stdout.splitlines() if " done in " in line]
    assert [line.split(" done in ")[0] for line in done] == ["Epoch 0/1", "Epoch 1/1"]
    assert "val/hmean=" in done[-1]
    assert "\x1b[" not in proc.stdout  # no terminal control sequences in a log file
