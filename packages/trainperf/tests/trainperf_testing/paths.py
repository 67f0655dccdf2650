"""Where the toolkit's tests find the checkout, its shared fixtures and the trainperf they test.

The repository root is found by walking up from this file (the first folder holding
``packages/trainperf/pyproject.toml``), never counted with ``parents[n]``, so moving a test or
this package does not silently change what it reads.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trainperf

#: packages/trainperf/tests: the toolkit's test tree (its ``fixtures/`` are in the repository).
TESTS_ROOT = Path(__file__).resolve().parents[1]


def _repo_root() -> Path:
    for folder in TESTS_ROOT.parents:
        if (folder / "packages" / "trainperf" / "pyproject.toml").is_file():
            return folder
    # the toolkit's folder copied without the app around it: its parent stands in
    return TESTS_ROOT.parents[1]


#: The checkout (the folder holding ``packages/``); ``../shared`` lies beside it.
REPO_ROOT = _repo_root()
#: Real inputs no one here wrote (``../shared/fixtures``; ``OCR_SHARED_FIXTURES`` overrides).
SHARED_FIXTURES = Path(
    os.environ.get("OCR_SHARED_FIXTURES", REPO_ROOT.parent / "shared" / "fixtures")
)
#: The folder trainperf was imported from: the installed distribution in the toolkit's venv,
#: ``packages/trainperf/src`` in the development venv (or on PYTHONPATH).
TRAINPERF_HOME = Path(trainperf.__file__).resolve().parents[1]


def shared(sub: str) -> Path:
    """``SHARED_FIXTURES / sub``; absent, the test skips saying where it looked (fails under
    ``CI=true``, so a broken checkout layout cannot turn into a silently green run)."""
    path = SHARED_FIXTURES / sub
    if not path.exists():
        msg = f"shared fixtures not found at {path} (expected ../shared/fixtures beside the repo)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg + "; CI=true requires them")
        pytest.skip(msg)
    return path


def child_pythonpath(*first: Path | str) -> str:
    """PYTHONPATH for a subprocess of a test: ``first``, then the folder the test's own trainperf
    came from and these helpers, then the inherited PYTHONPATH; a child imports the trainperf
    under test (the installed one in the toolkit's venv), not another checkout's."""
    inherited = os.environ.get("PYTHONPATH", "")
    parts = [*map(str, first), str(TRAINPERF_HOME), str(TESTS_ROOT), inherited]
    return os.pathsep.join(p for p in parts if p)
