"""The pytest fixtures naming real inputs beside the checkout (``../shared``), for both test trees;
each conftest imports the ones it needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainperf_testing.paths import shared


@pytest.fixture
def traces_dir() -> Path:
    """``../shared/fixtures/traces`` (real GPU profiler traces)."""
    return shared("traces")


@pytest.fixture
def h200_train_run() -> Path:
    """``../shared/gpu/h200-2026-11-26/runs/train``: the run folder of the first real GPU run
    (``perf/*.jsonl``, ``.hydra/``; no trace file). Read-only: copy it before writing into it."""
    return shared("../gpu/h200-2026-11-26/runs/train")
