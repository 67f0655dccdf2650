"""A proposed change in the words of the run's own framework or app.

Read from what the run recorded in ``perf/run.json``
(:class:`~trainperf.records.framework_info.FrameworkInfo`): ``what the change does: `its spelling`
(now X)``. The app's words win over the framework's (its config keys are what its user edits); a run
that recorded neither gets ``None`` (the caller keeps its plain words)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainperf.records.framework_info import FrameworkInfo

__all__ = ["in_framework_words", "spelled"]

#: What each candidate family's change does, before its spelling (``{value}``: the new value).
WHAT = {
    "workers": "run {value} DataLoader worker processes",
    "prefetch": "keep {value} batches per worker in flight",
    "persistent_workers": "keep workers alive between epochs",
    "pin_memory": "copy batches from pinned memory",
    "threads": "compute threads on every core",
    "channels_last": "convolutions in channels-last layout",
    "compile": "compile the model (the first steps are slower)",
    "batch_size": "a larger batch if memory allows (changes the optimisation: scale the learning "
    "rate)",
    "precision": "mixed precision {value} (numerics change: check the metric)",
    "cudnn_benchmark": "let cuDNN pick the fastest convolution algorithms (fixed input shapes)",
    "fused_optimizer": "a fused optimizer step (one kernel for all parameters, no "
    "per-parameter host loop)",
}


def spelled(infos: Sequence[FrameworkInfo | None], family: str, value: Any) -> str | None:
    """The change of ``family`` to ``value`` in the words of the first of ``infos`` (the app,
    then the framework) that recorded a spelling for it, else ``None``."""
    for info in infos:
        words = info.spell(family, value) if info is not None else None
        if words is not None:
            return words
    return None


def recorded_now(infos: Sequence[FrameworkInfo | None], family: str) -> Any:
    """The value of ``family``'s setting in the run, as the first of ``infos`` recorded it."""
    for info in infos:
        setting = info.setting(family) if info is not None else None
        if setting is not None and setting.value is not None:
            return setting.value
    return None


def in_framework_words(
    infos: Sequence[FrameworkInfo | None],
    family: str,
    value: Any,
    what: str | None = None,
    *,
    now: Any = None,
) -> str | None:
    """``what the change does: `its spelling` (now X)`` (``what``: the first part, else
    :data:`WHAT`'s; X as recorded, else ``now``), or ``None`` when none of ``infos`` recorded a
    spelling for ``family``."""
    change = spelled(infos, family, value)
    if change is None:
        return None
    head = (what or WHAT.get(family, family)).replace("{value}", str(value))
    recorded = recorded_now(infos, family)
    now = recorded if recorded is not None else now
    return f"{head}: `{change}`" + (f" (now {now})" if now is not None else "")
