"""A mistyped setting or config choice is one line naming it, where it was given and the closest
valid key / choice, exit 2, and no run folder (``ocr-train``, ``ocr-test``); the user's own
``HYDRA_FULL_ERROR=1`` keeps Hydra's full error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, WANDB_MODE="offline")
    full_env.pop("HYDRA_FULL_ERROR", None)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.pop("PP", "")]))
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("module", "typo", "expected"),
    [
        (
            "ocr.train",
            "trainer.max_epoch=3",
            "ocr-train: error: trainer.max_epoch=3 (command line): no such key; "
            "did you mean trainer.max_epochs?",
        ),
        (
            "ocr.train",
            "experiment=synthetic_debgu",
            "ocr-train: error: experiment=synthetic_debgu (command line): no experiment config "
            "named 'synthetic_debgu'; did you mean synthetic_debug? (choices: synthetic_debug)",
        ),
        (
            "ocr.test",
            "data.batch_sise=2",
            "ocr-test: error: data.batch_sise=2 (command line): no such key; "
            "did you mean data.batch_size?",
        ),
    ],
)
def test_a_mistyped_key_or_choice_is_one_line_exit_2_and_no_run_folder(
    tmp_path: Path, module: str, typo: str, expected: str
) -> None:
    run = tmp_path / "run"
    proc = _run(module, "experiment=synthetic_debug", typo, f"hydra.run.dir={run}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [expected]
    assert "+" not in proc.stderr
    assert not run.exists()


def test_hydra_full_error_keeps_hydras_traceback(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _run("ocr.train", "trainer.max_epoch=3", f"hydra.run.dir={run}", HYDRA_FULL_ERROR="1")
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr
    assert "ConfigCompositionException" in proc.stderr
    assert not run.exists()


def test_an_override_that_does_not_parse_keeps_hydras_message(tmp_path: Path) -> None:
    proc = _run("ocr.train", "trainer.max_epochs=[1", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "override_grammar" in proc.stderr  # Hydra's own pointer to its grammar
