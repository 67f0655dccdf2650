"""Shared test fixtures.

Real inputs no one here wrote live in ``../shared/fixtures`` beside the checkout. In a user's own
clone they may be absent: tests that need them skip with a reason. In CI (``CI=true``) their
absence is an error, so a broken checkout layout cannot turn into a silently green run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = Path(
    os.environ.get("OCR_SHARED_FIXTURES", REPO_ROOT.parent / "shared" / "fixtures")
)


def _shared(sub: str) -> Path:
    path = SHARED_FIXTURES / sub
    if not path.exists():
        msg = f"shared fixtures not found at {path} (expected ../shared/fixtures beside the repo)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg + "; CI=true requires them")
        pytest.skip(msg)
    return path


@pytest.fixture
def receipts_dir() -> Path:
    """``../shared/fixtures/receipts`` (annotations.json + images/)."""
    return _shared("receipts")


@pytest.fixture
def traces_dir() -> Path:
    """``../shared/fixtures/traces`` (real GPU profiler traces)."""
    return _shared("traces")


@pytest.fixture
def h200_train_run() -> Path:
    """``../shared/gpu/h200-2026-11-26/runs/train``: the run folder of the first real GPU run
    (``perf/*.jsonl``, ``.hydra/``; no trace file). Read-only: copy it before writing into it."""
    return _shared("../gpu/h200-2026-11-26/runs/train")
