"""The run's name for the report's title, from what the run directory recorded.

Sources, first found wins (each is how one kind of run names itself):

1. ``task_name`` in the app's recorded configuration (``RunData.config``), followed by
   ``-<experiment_tag>`` when the config sets one: the name the app gives its logger's run, so
   the report and the dashboard agree.
2. ``task_name`` (and ``experiment_tag``) in ``perf/run.json``, which an app records when a tag
   is set: a run whose configuration was not kept.
3. The app's job name (``FrameworkInfo.job_name``: the script's name unless the app was told
   otherwise).
4. The run folder's name: a foreign run that recorded no configuration.

The folder's name is kept beside the name: an app's folders are often the start time
(``outputs/train/2026-01-31_12-00-00``), which tells two runs of one task apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainperf.analysis.run import RunData, config_value


@dataclass(frozen=True)
class RunName:
    """What the report calls the run; ``source`` says in words where ``name`` was read (shown
    under the title)."""

    name: str
    source: str
    folder: str

    @property
    def title(self) -> str:
        """``name (folder)``, or just the folder when the name is the folder's."""
        return self.name if self.name == self.folder else f"{self.name} ({self.folder})"


def _text(value: Any) -> str | None:
    """A usable name part: a non-empty scalar, as text (``None``, ``""``, lists, maps: no)."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        text = str(value).strip()
        # an interpolation the config kept unresolved (``${oc.env:USER}``) is not a name
        return text if text and "${" not in text else None
    return None


def _tagged(task: str, tag: Any) -> str:
    suffix = _text(tag)
    return f"{task}-{suffix}" if suffix else task


def run_name(run: RunData) -> RunName:
    """The run's name from ``run`` (never fails: the folder's name is the last resort)."""
    folder = run.folder or run.run_dir.name or str(run.run_dir)
    task = _text(config_value(run.config, "task_name"))
    if task is not None:
        tag = config_value(run.config, "experiment_tag")
        where = run.config_label or "the app's configuration"
        return RunName(_tagged(task, tag), f"task_name in {where}", folder)
    info = run.run_info
    task = _text(info.task_name) if info is not None else None
    if info is not None and task is not None:
        return RunName(_tagged(task, info.experiment_tag), "perf/run.json", folder)
    if run.job_name is not None:
        return RunName(run.job_name, "the app's job name", folder)
    return RunName(folder, "run folder name", folder)
