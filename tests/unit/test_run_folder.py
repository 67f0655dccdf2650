"""ocr.run_folder: one run per run folder (issue 15, point 3), without a Trainer."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from ocr.cli_errors import EXIT_BAD_INPUT
from ocr.run_folder import (
    RunFolderInUseError,
    claim_run_folder,
    discard_unused_run_folder,
    note_new_run_folder,
    remove_unused_run_folder,
)


@pytest.fixture(autouse=True)
def _rank_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def _previous_run(run: Path) -> Path:
    (run / "perf").mkdir(parents=True)
    (run / "perf" / "epochs.jsonl").write_text('{"epoch": 0}\n')
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
    return run


def test_fresh_folder_and_hydra_files_only(tmp_path: Path) -> None:
    assert claim_run_folder(tmp_path / "new", None).previous == ()
    run = tmp_path / "hydra-made"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run / "train.log").write_text("")
    (run / "csv").mkdir()  # an empty folder holds no run
    folder = claim_run_folder(run, None)
    assert folder.previous == ()
    assert not folder.resuming


def test_folder_with_a_run_is_refused_with_what_to_do(tmp_path: Path) -> None:
    run = _previous_run(tmp_path / "run")
    with pytest.raises(RunFolderInUseError) as exc:
        claim_run_folder(run, None)
    message = str(exc.value)
    assert f"run folder {run} already holds a run" in message
    assert "perf/epochs.jsonl" in message
    assert "checkpoints/last.ckpt" in message
    assert f"ckpt_path={run}/checkpoints/last.ckpt" in message
    with pytest.raises(RunFolderInUseError, match="a checkpoint of another folder"):
        claim_run_folder(run, tmp_path / "elsewhere" / "last.ckpt")


def test_resuming_the_folders_own_run_continues(tmp_path: Path) -> None:
    run = _previous_run(tmp_path / "run")
    folder = claim_run_folder(run, run / "checkpoints" / "last.ckpt")
    assert folder.resuming
    assert "perf/epochs.jsonl" in folder.previous
    assert claim_run_folder(run, "last").resuming  # Lightning's own "last checkpoint here"


def test_checkpoint_folder_outside_the_run_folder_is_checked(tmp_path: Path) -> None:
    ckpts = tmp_path / "shared-ckpts"
    ckpts.mkdir()
    (ckpts / "best.ckpt").write_bytes(b"x")
    callbacks = [ModelCheckpoint(dirpath=ckpts)]
    with pytest.raises(RunFolderInUseError, match=r"best\.ckpt"):
        claim_run_folder(tmp_path / "run", None, callbacks=callbacks)
    assert claim_run_folder(tmp_path / "run", ckpts / "best.ckpt", callbacks=callbacks).resuming


def test_other_ranks_do_not_judge_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _previous_run(tmp_path / "run")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert claim_run_folder(run, None).previous == ()


def test_resume_keeps_the_csv_rows_lightning_would_delete(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = CSVLogger(run, name="csv", version="")
    first.log_metrics({"train/loss": 1.0, "epoch": 0}, step=0)
    first.save()
    _previous_run(run)
    logger = CSVLogger(run, name="csv", version="")
    claim_run_folder(run, run / "checkpoints" / "last.ckpt", loggers=[logger])
    logger.log_metrics({"train/loss": 0.5, "epoch": 1}, step=1)
    logger.log_metrics({"val/hmean": 0.2, "epoch": 1}, step=1)  # a new column
    logger.save()
    with open(run / "csv" / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["epoch"], r["train/loss"], r["val/hmean"]) for r in rows] == [
        ("0", "1.0", ""),
        ("1", "0.5", ""),
        ("1", "", "0.2"),
    ]


def test_empty_files_left_by_a_run_that_failed_at_start_do_not_count(tmp_path: Path) -> None:
    """A run that failed while loading its data leaves the TensorBoard event file Lightning
    opened at setup (header only): the fixed command must be able to use the folder."""
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    SummaryWriter(str(run / "tensorboard")).close()
    (run / "csv").mkdir()
    (run / "csv" / "metrics.csv").write_text("")
    assert claim_run_folder(run, None).previous == ()
    writer = SummaryWriter(str(run / "tensorboard"))
    writer.add_scalar("train/loss", 1.0, 0)
    writer.close()
    with pytest.raises(RunFolderInUseError, match=r"tensorboard/events\.out\.tfevents"):
        claim_run_folder(run, None)


# -- a command stopped by bad input before training leaves nothing behind -----------------------


def _scaffold(run: Path) -> None:
    """What Hydra and the run's start write before a missing dataset stops ocr-train."""
    (run / ".hydra").mkdir(parents=True, exist_ok=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run / "train.log").write_text("[INFO] Seed set to 42\n")
    (run / "perf").mkdir(exist_ok=True)
    (run / "perf" / "run.json").write_text('{"argv": ["ocr-train"]}\n')
    (run / "tensorboard").mkdir(exist_ok=True)
    (run / "tensorboard" / "events.out.tfevents.1.host.1.0").write_bytes(b"")


def _command(run: Path, writes: Callable[[Path], None], stop: BaseException) -> None:
    """A command that writes into ``run`` and then stops with ``stop``."""
    with discard_unused_run_folder(run):
        writes(run)
        raise stop


def _stopped_by_bad_input(run: Path, writes: Callable[[Path], None] = _scaffold) -> None:
    note_new_run_folder(run)  # what RunFolderGuard does before Hydra makes the folder
    with pytest.raises(SystemExit):
        _command(run, writes, SystemExit(EXIT_BAD_INPUT))


def test_a_folder_made_for_a_run_stopped_by_bad_input_is_removed_with_its_new_parents(
    tmp_path: Path,
) -> None:
    run = tmp_path / "outputs" / "train" / "2026-11-28_02-21-15"
    _stopped_by_bad_input(run)
    assert not (tmp_path / "outputs").exists()
    assert list(tmp_path.iterdir()) == []


def test_in_an_existing_folder_only_what_the_command_wrote_is_removed(tmp_path: Path) -> None:
    run = tmp_path / "mine"
    run.mkdir()
    (run / "notes.txt").write_text("the user's own")
    (run / "perf").mkdir()
    _stopped_by_bad_input(run)
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == ["notes.txt", "perf"]
    # and the same command into it again is not refused (nothing of a run is left there)
    assert claim_run_folder(run, None).previous == ()


@pytest.mark.parametrize(
    "valuable", ["checkpoints/last.ckpt", "perf/epochs.jsonl", "csv/metrics.csv", "mine.txt"]
)
def test_a_folder_holding_something_of_value_is_kept(tmp_path: Path, valuable: str) -> None:
    def writes(run: Path) -> None:
        _scaffold(run)
        (run / valuable).parent.mkdir(parents=True, exist_ok=True)
        (run / valuable).write_text("x")

    run = tmp_path / "run"
    _stopped_by_bad_input(run, writes)
    assert (run / valuable).is_file()
    assert (run / "perf" / "run.json").is_file()


def test_other_failures_and_folders_not_seen_before_are_kept(tmp_path: Path) -> None:
    run = tmp_path / "crashed"
    note_new_run_folder(run)
    with pytest.raises(RuntimeError):
        _command(run, _scaffold, RuntimeError("a bug keeps its folder and log"))
    assert (run / "train.log").is_file()
    unseen = tmp_path / "unseen"  # made without the guard's note
    _scaffold(unseen)
    assert not remove_unused_run_folder(unseen)
    assert unseen.is_dir()
