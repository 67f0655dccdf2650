"""``run.json``'s ``framework`` and ``app`` entries (:class:`FrameworkInfo`).

``run.json``'s ``framework`` and ``app`` entries: who ran a run, with which configuration, and
how a change is written there (:class:`FrameworkInfo`, its :class:`Setting` list). An adapter or
app writes them (:mod:`trainperf.frameworks.spellings`, :mod:`trainperf.frameworks.hydra_app`);
advice, ``try`` and the report read them as data. Part of :class:`~trainperf.records.run_record.
RunRecord`."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["FrameworkInfo", "Setting", "known_framework", "register_framework"]


class Setting(msgspec.Struct, kw_only=True, frozen=True):
    """One setting a run's framework (or app) lets advice name: its value in the run and how a
    change of it is written in that framework's own words (supplied by the adapter or the app).

    Args:
        family: the candidate family it makes (:class:`trainperf.core.candidates.Candidate`:
            ``workers``, ``prefetch``, ``persistent_workers``, ``pin_memory``, ``precision``,
            ``fused_optimizer``, ``cudnn_benchmark``, ``compile``, ``channels_last``,
            ``batch_size``, ``threads``).
        change: the change written for the user, ``{value}`` the new value as the framework
            writes it (``DataLoader(num_workers={value})``, ``data.num_workers={value}``).
        value: the value in the run, ``None`` unknown.
        values: for a setting whose change is not one argument with the value (mixed precision:
            ``bf16=True`` or ``fp16=True``): the new value (``bf16-mixed``, ``16-mixed``) -> the
            change.
        override: ``change`` is an override ``trainperf try`` applies to the recorded command.
    """

    family: str
    change: str
    value: Any = None  # a JSON value
    values: dict[str, str] = {}
    override: bool = False


class FrameworkInfo(msgspec.Struct, kw_only=True, frozen=True):
    """``run.json``'s ``"framework"`` (the adapter that recorded the run) and ``"app"`` (an app
    configuring the run above it): who ran it, with which configuration, and how a change is
    written there. Advice reads it as data; no lower layer knows a framework by name.

    Args:
        name: ``lightning``, ``loop``, ``hf`` or an app's name.
        version: its version, when it has one.
        literals: how ``{value}`` is written: ``python`` (``True``, ``"bf16-mixed"``) or
            ``override`` (``true``, ``bf16-mixed``: a config override's syntax).
        settings: the settings advice may name (:class:`Setting`).
        config: the resolved configuration the run was built from (an app's), as a mapping;
            advice finds settings in it by key and writes a change as ``key=value``.
        config_text: that configuration as its files show it (the report prints it).
        config_label: what the report calls it (``Hydra's resolved config``).
        config_skip: top-level sections of ``config`` that belong to the config library itself,
            not to the run's settings.
        job_name: the run's name as its app calls it, when set.
        overrides: the overrides the run was started with.
        cannot_try: candidate family -> why ``trainperf try`` cannot apply it to this framework.
        hints: how to do something in this framework, by topic: ``record`` (record a run with
            the performance monitors), ``profile`` (record a profiler trace).
    """

    name: str
    version: str | None = None
    literals: str = "python"
    settings: list[Setting] = []
    config: dict[str, Any] | None = None
    config_text: str | None = None
    config_label: str | None = None
    config_skip: list[str] = []
    job_name: str | None = None
    overrides: list[str] = []
    cannot_try: dict[str, str] = {}
    hints: dict[str, str] = {}

    def setting(self, family: str) -> Setting | None:
        """The setting of candidate family ``family``, if recorded."""
        return next((s for s in self.settings if s.family == family), None)

    def spell(self, family: str, value: Any) -> str | None:
        """The change of ``family`` to ``value`` in this framework's words, or ``None`` when it
        recorded no spelling for ``family``."""
        setting = self.setting(family)
        if setting is None:
            return None
        if str(value) in setting.values:
            return setting.values[str(value)]
        if self.literals == "override":  # a config override's syntax: true, null, bf16-mixed
            if isinstance(value, bool):
                shown = "true" if value else "false"
            else:
                shown = "null" if value is None else str(value)
        else:
            shown = f'"{value}"' if isinstance(value, str) else repr(value)
        return setting.change.replace("{value}", shown)


#: What an adapter's framework is known to be, by name (registered from above:
#: :func:`trainperf.frameworks.register_known`), for a run that recorded only the name.
_KNOWN: dict[str, FrameworkInfo] = {}


def register_framework(info: FrameworkInfo) -> None:
    """Make ``info`` (its spellings, what ``try`` cannot apply, its hints) what a run that
    recorded only the framework's name (``"framework": "loop"``) is read as."""
    _KNOWN[info.name] = info


def known_framework(name: str) -> FrameworkInfo:
    """The registered :class:`FrameworkInfo` named ``name``, else one with the name alone."""
    return _KNOWN.get(name) or FrameworkInfo(name=name)
