"""Shared test fixtures.

Real inputs no one here wrote live in ``../shared/fixtures`` beside the checkout. In a user's own
clone they may be absent: tests that need them skip with a reason. In CI (``CI=true``) their
absence is an error, so a broken checkout layout cannot turn into a silently green run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainperf_testing.fixtures import h200_train_run, traces_dir
from trainperf_testing.paths import shared

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

__all__ = ["h200_train_run", "traces_dir"]  # ../shared fixtures, shared with the toolkit's tests


@pytest.fixture
def receipts_dir() -> Path:
    """``../shared/fixtures/receipts`` (annotations.json + images/)."""
    return shared("receipts")
