"""ocr.checkpoint_path: a missing or unreadable checkpoint is bad input, refused before Hydra
writes anything into the run folder."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoint_path import CheckpointGuard, check_checkpoint_path
from ocr.cli_errors import EXIT_BAD_INPUT, is_expected
from ocr.errors import CheckpointError, MissingPathError


def test_a_checkpoint_torch_wrote_passes(tmp_path: Path) -> None:
    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {}}, ckpt)
    assert check_checkpoint_path(ckpt, "ckpt_path") == ckpt
    legacy = tmp_path / "legacy.ckpt"
    legacy.write_bytes(pickle.dumps({"state_dict": {}}, protocol=2))
    assert check_checkpoint_path(str(legacy), "ckpt_path") == legacy
    assert check_checkpoint_path(tmp_path, "ckpt_path") == tmp_path  # a sharded checkpoint


@pytest.mark.parametrize("value", [None, "", "last", "hpc", "best", "s3://bucket/x.ckpt"])
def test_lightnings_words_and_urls_are_left_to_lightning(value: str | None) -> None:
    assert check_checkpoint_path(value, "ckpt_path") is None


def test_missing_and_unreadable_checkpoints_are_input_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.ckpt"
    with pytest.raises(
        MissingPathError, match=re.escape(f"ckpt_path: no such file: {missing}")
    ) as exc:
        check_checkpoint_path(missing, "ckpt_path")
    assert is_expected(exc.value)
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=r"is not a checkpoint \(neither a zip archive"):
        check_checkpoint_path(text, "ckpt_path")
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"is not a checkpoint \(an empty file\)"):
        check_checkpoint_path(empty, "checkpoint_path")


def _config(run_dir: Path, ckpt: object) -> DictConfig:
    return OmegaConf.create(
        {
            "ckpt_path": ckpt,
            "hydra": {
                "run": {"dir": str(run_dir)},
                "output_subdir": ".hydra",
                "job_logging": {
                    "handlers": {"console": {}, "file": {"filename": "x.log"}},
                    "root": {"handlers": ["console", "file"]},
                },
            },
        }
    )


def test_guard_stops_the_command_before_hydras_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    missing = tmp_path / "nope.ckpt"
    guard = CheckpointGuard(key="ckpt_path", prog="ocr-train")
    with pytest.raises(SystemExit) as stop:  # a BaseException: Hydra's callback runner lets it by
        guard.on_run_start(config=_config(tmp_path / "run", str(missing)))
    assert stop.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err == f"ocr-train: error: ckpt_path: no such file: {missing}\n"
    guard.on_run_start(config=_config(tmp_path / "run", None))  # nothing to check
    assert not (tmp_path / "run").exists()


def test_guard_with_hydra_full_error_only_keeps_hydra_from_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the task function raises the error with its traceback; Hydra writes no config and no log
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    config = _config(tmp_path / "run", str(tmp_path / "nope.ckpt"))
    CheckpointGuard(key="ckpt_path", prog="ocr-train").on_run_start(config=config)
    hydra_cfg = config.hydra
    assert hydra_cfg.output_subdir is None
    assert list(hydra_cfg.job_logging.handlers) == ["console"]
    assert list(hydra_cfg.job_logging.root.handlers) == ["console"]
