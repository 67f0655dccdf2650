"""The alert rule catalogue: the registry :data:`ALERT_RULES` of every default rule.

It maps each rule's name to its class; the engine's rules are built from it with their settings, and
the settings' defaults come from it too (the module was ``trainperf.alerts.rules``; that path works
until 0.3).

:data:`ALERT_RULES` is what the engine builds (:func:`build_rules`), what the Hydra config offers
(``callbacks.resource_monitor.rules``, from :func:`rule_defaults`), what the profiler labels an
alert-triggered window by and what the verdict reads a rule's risk and corroboration from: never a
copy. The built-in rules live in :mod:`~trainperf.alerts.resource_rules` and
:mod:`~trainperf.alerts.run_rules`; a rule of your own (a subclass of
:class:`~trainperf.alerts.engine.Rule`) joins with ``ALERT_RULES.register(MyRule)`` (then
``build_rules``, ``ResourceMonitorCallback(rules={...})`` and the verdict know it), or runs in one
engine only (``AlertEngine([*build_rules(), MyRule()])``). A rule's thresholds come from the one
table ``trainperf.core.findings.THRESHOLDS`` through its ``FROM_TABLE``; every setting can be
overridden per rule, and every rule switched off with ``enabled: false``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping

from trainperf.alerts.engine import Rule, Setting
from trainperf.alerts.resource_rules import (
    DiskSpace,
    GpuMemoryNearOom,
    GpuStarvation,
    HostMemoryLeak,
    ThermalThrottle,
)
from trainperf.alerts.run_rules import Hang, MemoryCreep, NanLoss, StragglerRank, ThroughputDrop
from trainperf.core.finding_ids import BUILT_IN_IDS, AlertName
from trainperf.errors import ConfigError

__all__ = [
    "ALERT_RULES",
    "RULES",
    "AlertRegistry",
    "DiskSpace",
    "GpuMemoryNearOom",
    "GpuStarvation",
    "Hang",
    "HostMemoryLeak",
    "MemoryCreep",
    "NanLoss",
    "StragglerRank",
    "ThermalThrottle",
    "ThroughputDrop",
    "build_rules",
    "rule_defaults",
]


class AlertRegistry(MutableMapping[str, type[Rule]]):
    """The alert rules by name (a mapping name -> rule class, in catalogue order): the built-in
    ones and those registered. A rule is a class (each run builds its own instance with its
    settings: the instance keeps the rule's state). Registering refuses a name already taken and
    a built-in rule's name or finding id."""

    def __init__(self) -> None:
        self._rules: dict[str, type[Rule]] = {}

    def add_builtin(self, *rules: type[Rule]) -> None:
        """The package's own rules, in their default order."""
        for cls in rules:
            self._rules[cls.name] = cls

    def register(self, cls: type[Rule]) -> type[Rule]:
        """Add the rule class ``cls`` for every later :func:`build_rules` (returns it, so it can
        decorate the class)."""
        if not (isinstance(cls, type) and issubclass(cls, Rule)):
            raise ConfigError(f"alert rules: {cls!r} is not a subclass of trainperf.alerts.Rule")
        if cls.name in set(AlertName) or cls.finding_id() in BUILT_IN_IDS:
            raise ConfigError(
                f"alert rule {cls.__name__} is named {cls.name!r}, a built-in rule's name "
                f"(its finding would be {cls.finding_id()!r}): give it a name of its own"
            )
        if cls.name in self._rules:
            raise ConfigError(f"an alert rule named {cls.name!r} is already registered")
        self._rules[cls.name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Take the rule named ``name`` out of the catalogue."""
        if name not in self._rules:
            raise ConfigError(f"no alert rule named {name!r}: {', '.join(self._rules)}")
        del self._rules[name]

    def default(self) -> list[type[Rule]]:
        """The rule classes, built-in first, then those registered."""
        return list(self._rules.values())

    def names(self) -> list[str]:
        return list(self._rules)

    def __getitem__(self, name: str) -> type[Rule]:
        return self._rules[name]

    def __setitem__(self, name: str, cls: type[Rule]) -> None:
        if cls.name != name:
            raise ConfigError(f"alert rule {cls.__name__} is named {cls.name!r}, not {name!r}")
        self.register(cls)

    def __delitem__(self, name: str) -> None:
        self.unregister(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)


#: Every alert rule, name -> class: the built-in catalogue and the rules registered.
ALERT_RULES = AlertRegistry()
ALERT_RULES.add_builtin(
    GpuStarvation,
    GpuMemoryNearOom,
    HostMemoryLeak,
    ThroughputDrop,
    NanLoss,
    DiskSpace,
    ThermalThrottle,
    StragglerRank,
    Hang,
    MemoryCreep,
)

#: The same registry under its earlier name (a mapping name -> rule class, as before).
RULES = ALERT_RULES


def build_rules(settings: Mapping[str, Mapping[str, object] | None] | None = None) -> list[Rule]:
    """The rules of :data:`ALERT_RULES` with ``settings`` (rule name -> its overrides) applied;
    rules with ``enabled: false`` are left out. An unknown rule or setting is a ``ConfigError``
    naming it."""
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(ALERT_RULES))
    if unknown:
        raise ConfigError(
            f"alert rules: unknown rule(s) {', '.join(unknown)}; expected some of "
            f"{', '.join(ALERT_RULES)}"
        )
    rules = []
    for name, cls in ALERT_RULES.items():
        overrides = settings.get(name) or {}
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"alert rule {name!r}: settings must be a mapping, got {overrides!r}")
        rule = cls(**{str(k): v for k, v in overrides.items()})
        if rule.enabled:
            rules.append(rule)
    return rules


def rule_defaults() -> dict[str, dict[str, Setting]]:
    """Every rule of the catalogue with every setting and its default (rule name -> settings):
    the Hydra config's ``rules`` node is made from it, so the YAML repeats none of them."""
    return {name: cls.defaults() for name, cls in ALERT_RULES.items()}
