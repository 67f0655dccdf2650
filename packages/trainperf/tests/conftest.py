"""The toolkit's test session: W&B offline, the shared-fixture fixtures, and a header line naming
the trainperf under test (the installed distribution in ``make toolkit-check``'s venv)."""

from __future__ import annotations

import os

import pytest

from trainperf_testing.fixtures import h200_train_run, traces_dir
from trainperf_testing.paths import REPO_ROOT, SHARED_FIXTURES, TRAINPERF_HOME

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

__all__ = ["h200_train_run", "traces_dir"]


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"trainperf under test: {TRAINPERF_HOME / 'trainperf'}",
        f"repository: {REPO_ROOT}; shared fixtures: {SHARED_FIXTURES}",
    ]
