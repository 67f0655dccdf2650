"""The toolkit's test session: W&B offline, the shared-fixture fixtures, and the trainperf under
test named in the header (``make toolkit-check`` sets ``TRAINPERF_TESTS_INSTALLED=1``: there a
trainperf imported from a source tree instead of the installed distribution is an error)."""

from __future__ import annotations

import os

import pytest

from trainperf_testing.fixtures import h200_train_run, traces_dir
from trainperf_testing.paths import REPO_ROOT, SHARED_FIXTURES, TRAINPERF_HOME

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

__all__ = ["h200_train_run", "traces_dir"]


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("TRAINPERF_TESTS_INSTALLED") == "1" and not _installed():
        raise pytest.UsageError(
            f"TRAINPERF_TESTS_INSTALLED=1 but trainperf comes from {TRAINPERF_HOME / 'trainperf'}, "
            "not an installed distribution (is a source tree on PYTHONPATH?)"
        )


def _installed() -> bool:
    """Whether trainperf was imported from an installed distribution (site-packages)."""
    return TRAINPERF_HOME.name in ("site-packages", "dist-packages")


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"trainperf under test: {TRAINPERF_HOME / 'trainperf'}"
        f" ({'installed' if _installed() else 'source tree'})",
        f"repository: {REPO_ROOT}; shared fixtures: {SHARED_FIXTURES}",
    ]
