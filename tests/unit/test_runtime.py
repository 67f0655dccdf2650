"""Entry-point helpers: WandB online/offline choice, callbacks from config."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ocr.runtime import build_callbacks, wandb_offline_default


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_wandb_offline_without_credentials(clean_env: Path) -> None:
    assert wandb_offline_default() is True


def test_wandb_online_with_api_key(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_offline_default() is False
    monkeypatch.setenv("WANDB_MODE", "offline")  # an explicit mode wins over the key
    assert wandb_offline_default() is True


def test_wandb_online_with_netrc_entry(clean_env: Path) -> None:
    (clean_env / ".netrc").write_text("machine other.host\n  login a\n")
    assert wandb_offline_default() is True
    (clean_env / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    assert wandb_offline_default() is False


def test_progress_bars_dropped_when_disabled() -> None:
    cfg = OmegaConf.create(
        {
            "trainer": {"enable_progress_bar": False},
            "callbacks": {
                "bar": {"_target_": "lightning.pytorch.callbacks.RichProgressBar"},
                "lr": {"_target_": "lightning.pytorch.callbacks.LearningRateMonitor"},
                "off": None,
            },
        }
    )
    assert [type(c).__name__ for c in build_callbacks(cfg)] == ["LearningRateMonitor"]
