"""A Hydra app, seen from the process it runs in, as data for ``perf/run.json``.

Hydra is read where the process has loaded it (``sys.modules``), never imported: the toolkit does
not depend on it. :func:`launch_facts` gives the ``hydra`` entry (``trainperf try`` re-runs the
app with overrides; :class:`~trainperf.records.run_record.HydraApp`); ``import trainperf``
registers it with :func:`trainperf.records.run_info.register_facts`, so every writer of
``run.json`` records it as before. :func:`app_info` gives the ``app`` entry
(:class:`~trainperf.records.framework_info.FrameworkInfo`): the app's name, its resolved config
and overrides, and how a change is written there (``key=value``), which the framework adapters
record at the start of a run so that the report and advice need not read ``.hydra/`` themselves.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from trainperf.records.framework_info import FrameworkInfo
from trainperf.records.run_record import HydraApp
from trainperf.records.schema import JsonValue

__all__ = ["CONFIG_SECTION", "app_info", "hydra_app", "launch_facts"]

#: Hydra's own section of a config (not a setting of the run).
CONFIG_SECTION = "hydra"

#: The switch of the profiler an app composes from its config (``callbacks.profiler.enabled``,
#: as the toolkit's own app does): the profile hint names it.
_PROFILER_SWITCH = ("callbacks", "profiler", "enabled")


def _hints(config: Any) -> dict[str, str]:
    node = config
    for part in _PROFILER_SWITCH:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, bool):
        return {}
    return {"profile": f"rerun with {'.'.join(_PROFILER_SWITCH)}=true"}


def _hydra_config() -> Any:
    """Hydra's runtime config of this process, or ``None`` (no Hydra, not initialised)."""
    module = sys.modules.get("hydra.core.hydra_config")
    if module is None:
        return None
    try:
        config = module.HydraConfig
        return config.get() if config.initialized() else None
    except Exception:  # an app half-initialising Hydra: nothing recorded, nothing worse
        return None


def hydra_app() -> HydraApp | None:
    """The Hydra app this process runs (``trainperf try`` re-runs it with overrides), if any."""
    cfg = _hydra_config()
    if cfg is None:
        return None
    try:
        subdir = cfg.output_subdir
        return HydraApp(
            output_dir=str(cfg.runtime.output_dir),
            # where the command was started: os.getcwd() is the output dir under job.chdir
            cwd=str(cfg.runtime.cwd),
            config_name=cfg.job.config_name,
            overrides_file=f"{subdir}/overrides.yaml" if subdir else None,
            overrides=list(cfg.overrides.task),
            # how a trial's command is made: its output folder, what it leaves out
            output_override="hydra.run.dir={dir}",
            drop_keys=["hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir"],
            multirun_flags=["-m", "--multirun"],
        )
    except Exception:  # a Hydra whose runtime config lacks a field: no re-run, nothing worse
        return None


def launch_facts() -> dict[str, JsonValue]:
    """``{"hydra": ...}`` for ``run.json`` when this process is a Hydra app, else ``{}``."""
    app = hydra_app()
    return {} if app is None else {"hydra": msgspec.to_builtins(app)}


def app_info() -> FrameworkInfo | None:
    """The Hydra app as ``run.json``'s ``app`` entry: its job name, the config Hydra saved for
    the job (``<output_dir>/<output_subdir>/config.yaml``, written before the task runs; keys
    as overrides, interpolations as written), its overrides; ``None`` outside a Hydra app or
    when the saved config cannot be read (then nothing is claimed)."""
    cfg = _hydra_config()
    if cfg is None:
        return None
    try:
        subdir = cfg.output_subdir
        name = str(cfg.job.name)
        overrides = [str(o) for o in cfg.overrides.task]
        if not subdir:
            return FrameworkInfo(name=name, literals="override", job_name=name, overrides=overrides)
        path = Path(str(cfg.runtime.output_dir)) / str(subdir) / "config.yaml"
        import yaml  # only when a Hydra app runs (it depends on PyYAML)

        text = path.read_text(encoding="utf-8")
        config = yaml.safe_load(text)
    except Exception:  # no saved config, an unreadable one: the app is not described
        return None
    return FrameworkInfo(
        name=name,
        literals="override",
        config=config if isinstance(config, dict) else None,
        config_text=text,
        config_label=f"Hydra's job config ({subdir}/config.yaml)",
        config_skip=[CONFIG_SECTION],
        job_name=name,
        overrides=overrides,
        hints=_hints(config),
    )
