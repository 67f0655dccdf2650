"""Every ``callbacks.*`` Hydra key the README and docs/ print is a key of some ``callbacks``
choice (``docs/performance/gpu.md`` printed dead ones); the one documented on purpose as a
key that moved is refused."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from tests.contract.seeds import REPO_ROOT

#: ``callbacks.x.y=`` not preceded by ``+`` / ``~`` (adding or deleting a key is another matter).
KEY = re.compile(r"(?<![+~\w.])(callbacks\.[A-Za-z_][\w.]*)=")
#: Printed as the example of a key given where it no longer is (docs/usage.md, traces.md).
MOVED_EXAMPLES = {"callbacks.profiler.active"}


def _documented() -> dict[str, list[str]]:
    """Key -> the files that print it."""
    found: dict[str, list[str]] = {}
    for path in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]:
        for key in KEY.findall(path.read_text(encoding="utf-8")):
            found.setdefault(key, []).append(str(path.relative_to(REPO_ROOT)))
    return found


@pytest.fixture(scope="module")
def configs() -> list[Any]:
    """The train config composed with each ``callbacks`` choice."""
    choices = sorted(p.stem for p in (REPO_ROOT / "ocr" / "configs" / "callbacks").glob("*.yaml"))
    with initialize_config_module("ocr.configs", version_base="1.3"):
        return [compose(config_name="train", overrides=[f"callbacks={c}"]) for c in choices]


def _exists(cfg: Any, key: str) -> bool:
    sentinel = object()
    return OmegaConf.select(cfg, key, default=sentinel) is not sentinel


def test_every_documented_callbacks_key_exists(configs: list[Any]) -> None:
    documented = _documented()
    assert "callbacks.profiler.profile_epochs" in documented  # the seeds' keys are shown
    dead = {
        key: files
        for key, files in documented.items()
        if key not in MOVED_EXAMPLES and not any(_exists(cfg, key) for cfg in configs)
    }
    assert not dead, dead
    for key in MOVED_EXAMPLES:
        assert key in documented
        assert not any(_exists(cfg, key) for cfg in configs), key
