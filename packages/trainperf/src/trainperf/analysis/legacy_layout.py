"""Run folders recorded before ``perf/run.json`` carried the framework and the app (compatibility).

Older folders kept the app's configuration only in Hydra's output folder (``.hydra/config.yaml``,
``overrides.yaml``, ``hydra.yaml``) and the framework only as ``run.json``'s ``lightning_version``
(every such folder was recorded by the Lightning callbacks: the only adapter there was). This
module alone reads that layout, into the same
:class:`~trainperf.records.framework_info.FrameworkInfo` records a new folder carries (without
spellings: advice for such a folder keeps its former wording; with the hints the report gave
then). Nothing else in the layers below the adapters names that
layout; a new folder never needs this module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainperf.records.framework_info import FrameworkInfo
from trainperf.records.run_record import RunRecord

__all__ = ["LEGACY_CONFIG", "legacy_app", "legacy_framework"]

_DIR = ".hydra"
#: The file that marks an older folder's app config (also a run-folder marker).
LEGACY_CONFIG = f"{_DIR}/config.yaml"
_SECTION = "hydra"
#: The switch of the profiler an app composed from its config (``callbacks.profiler.enabled``).
_PROFILER_SWITCH = ("callbacks", "profiler", "enabled")
#: What the report told an older folder's user (the Lightning callbacks were the only recorder).
_HINTS = {
    "record": "attach the performance callbacks (PerformanceProfilerCallback or "
    "ThroughputMonitorCallback)",
    "profile": "attach trainperf.lightning.ProfilerCallback",
    "resume": "trainer.fit(..., ckpt_path={checkpoint})",
}


def _switch(config: Any) -> str | None:
    node = config
    for part in _PROFILER_SWITCH:
        node = node.get(part) if isinstance(node, dict) else None
    return ".".join(_PROFILER_SWITCH) if isinstance(node, bool) else None


def legacy_app(root: Path, read_yaml: Callable[[Path], tuple[str, Any]]) -> FrameworkInfo | None:
    """The app of an older folder, from its ``.hydra/`` files (``read_yaml``: text and parsed
    YAML, raising the caller's error naming the file), or ``None`` without them. Raises
    ``ValueError`` naming the file when the config is not a mapping."""
    config_path = root / LEGACY_CONFIG
    if not config_path.is_file():
        return None
    text, loaded = read_yaml(config_path)
    if loaded is not None and not isinstance(loaded, dict):
        raise ValueError(f"{config_path}: expected a mapping at the top level")
    overrides: list[str] = []
    overrides_path = root / _DIR / "overrides.yaml"
    if overrides_path.is_file():
        listed = read_yaml(overrides_path)[1]
        if isinstance(listed, list):
            overrides = [str(o) for o in listed]
    job_name = None
    if (root / _DIR / "hydra.yaml").is_file():
        node = read_yaml(root / _DIR / "hydra.yaml")[1]
        for part in (_SECTION, "job", "name"):
            node = node.get(part) if isinstance(node, dict) else None
        job_name = node if isinstance(node, str) and node.strip() else None
    switch = _switch(loaded)
    return FrameworkInfo(
        name=job_name or "app",
        hints={"profile": f"rerun with {switch}=true"} if switch else {},
        literals="override",
        config=loaded or {},
        config_text=text,
        config_label=LEGACY_CONFIG,
        config_skip=[_SECTION],
        job_name=job_name,
        overrides=overrides,
    )


def legacy_framework(info: RunRecord | None) -> FrameworkInfo:
    """The framework of an older folder (one whose ``run.json`` names none): the Lightning
    callbacks', with the version its ``run.json`` recorded."""
    version = info.lightning_version if info is not None else None
    return FrameworkInfo(name="lightning", version=version, hints=dict(_HINTS))
