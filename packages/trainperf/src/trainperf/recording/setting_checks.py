"""A monitor's settings checked where they are given: stage names and integer bounds.

Each bad value is a ``ConfigError`` naming the monitor and the setting (framework-neutral)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainperf.core.stage import Stage
from trainperf.errors import ConfigError


def normalize_stages(stages: Iterable[str], owner: str) -> frozenset[Stage]:
    """The :class:`~trainperf.core.stage.Stage` of each user stage name (``"train"``, ``"validate"``
    or ``"val"``, ``"test"``); anything else is a ``ConfigError`` naming ``owner`` and it."""
    if isinstance(stages, str):
        raise ConfigError(
            f"{owner}: stages must be a list of stage names, got the string {stages!r}"
        )
    out = set()
    for name in stages:
        try:
            out.add(Stage.parse(name))
        except ValueError as exc:
            raise ConfigError(f"{owner}: {exc} in stages") from None
    return frozenset(out)


def int_at_least(owner: str, name: str, value: Any, minimum: int = 0) -> int:
    """``value`` when it is an integer (not a bool) >= ``minimum``, else a ``ConfigError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    return value
