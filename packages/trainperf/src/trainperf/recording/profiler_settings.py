"""``ProfilerCallback``'s settings: :class:`ProfileSchedule`, :class:`TraceOptions`.

``ProfilerCallback``'s settings as two typed, validated objects: :class:`ProfileSchedule`
(when to profile) and :class:`TraceOptions` (what a window records and keeps). Each rejects a
bad value with one ``ConfigError`` naming the field and the value; Hydra builds them as nested
``_target_`` entries of the callback's config."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torch.profiler import ProfilerActivity

from trainperf.errors import ConfigError
from trainperf.recording.setting_checks import int_at_least, normalize_stages

#: Activity names (``"cpu"``, ``"cuda"``, ...) -> torch's ``ProfilerActivity``.
ACTIVITIES = {name.lower(): act for name, act in ProfilerActivity.__members__.items()}


@dataclass(frozen=True)
class ProfileSchedule:
    """When ``ProfilerCallback`` profiles: which stage epochs, the ``torch.profiler.schedule``
    cycle inside a window (the same names: ``wait``, ``warmup``, ``active``, ``repeat``,
    ``skip_first``) and the on-demand triggers.

    Args:
        epochs: 0-based epoch numbers (``trainer.current_epoch``); default ``(1,)``, the second
            epoch, past the first epoch's warm-up effects. Test runs are profiled whenever
            ``"test"`` is in ``stages``, whatever the epoch.
        stages: any of ``"train"``, ``"validate"`` (or ``"val"``), ``"test"``; default
            ``("train",)``. On-demand windows open only in these stages too.
        active: steps recorded per cycle; default 5.
        warmup: steps traced but discarded before each active phase; default 1.
        wait: idle steps before each cycle's warm-up; default 0.
        repeat: cycles per window; 0 = cycles until the stage's epoch ends; default 1. Each
            cycle is one trace file (the second and later ones suffixed ``_cycle{k}``).
        skip_first: steps ignored once at the start of a window; default 0.
        trigger_file: when this file exists, a window opens at the next polled step boundary
            and the file is removed (one touch, one window). A relative path is under
            ``trainer.default_root_dir``; default None: no polling (the Hydra config sets
            ``PROFILE_NOW``).
        on_request: also open a window when :func:`trainperf.core.triggers.take_profile_request`
            returns a reason (an alert asked for one); default False.
        check_every_n_steps: steps of a profiled stage between two polls outside windows (one
            ``os.stat`` per poll); default 20.
    """

    epochs: Collection[int] = (1,)
    stages: Collection[str] = ("train",)
    active: int = 5
    warmup: int = 1
    wait: int = 0
    repeat: int = 1
    skip_first: int = 0
    trigger_file: str | os.PathLike[str] | None = None
    on_request: bool = False
    check_every_n_steps: int = 20

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if isinstance(self.epochs, str | bytes) or not isinstance(self.epochs, Collection):
            raise ConfigError(
                f"{owner}: epochs must be a list of epoch numbers, got {self.epochs!r}"
            )
        epochs = frozenset(int_at_least(owner, "epochs entries", e) for e in self.epochs)
        object.__setattr__(self, "epochs", epochs)
        object.__setattr__(self, "stages", normalize_stages(self.stages, owner))
        int_at_least(owner, "active", self.active, 1)
        for name in ("warmup", "wait", "repeat", "skip_first"):
            int_at_least(owner, name, getattr(self, name))
        int_at_least(owner, "check_every_n_steps", self.check_every_n_steps, 1)
        trigger = self.trigger_file
        if trigger is not None:
            if not str(trigger).strip():
                raise ConfigError(f"{owner}: trigger_file is an empty path; use null to disable it")
            object.__setattr__(self, "trigger_file", Path(trigger))
        if not isinstance(self.on_request, bool):
            raise ConfigError(f"{owner}: on_request must be true or false, got {self.on_request!r}")

    @property
    def on_demand(self) -> bool:
        """Whether anything can open a window on demand (a trigger file or requests)."""
        return self.trigger_file is not None or self.on_request

    @property
    def window_steps(self) -> int:
        """Steps a window records before it closes itself; 0: until its stage's epoch ends."""
        if not self.repeat:
            return 0
        return self.skip_first + (self.wait + self.warmup + self.active) * self.repeat

    def profiles(self, stage: str, epoch: int) -> bool:
        """Whether ``stage``'s epoch ``epoch`` opens a window (a test run: whatever the epoch)."""
        return stage in self.stages and (stage == "test" or epoch in self.epochs)

    def never_profiled(self, run: str, max_epochs: int | None) -> str | None:
        """What this schedule can never profile in a Lightning ``run`` (``fit``, ``validate``,
        ``test``) of ``max_epochs`` (None or -1: no limit): stages the run never enters, epochs
        at or beyond ``max_epochs``; None when it can profile."""
        runs = {"fit": {"train", "val"}, "validate": {"val"}, "test": {"test"}}.get(run, set())
        stages = {str(s) for s in self.stages}
        late = sorted(e for e in self.epochs if max_epochs is not None and 0 <= max_epochs <= e)
        if not stages & runs:
            return (
                f"stages {sorted(stages)} never run in this {run} run "
                f"(it runs {sorted(runs) or 'none of them'})"
            )
        if run == "fit" and stages & {"train", "val"} and late and max_epochs is not None:
            return (
                f"epochs {late} are never reached "
                f"(max_epochs={max_epochs}: epochs 0..{max_epochs - 1})"
            )
        return None


@dataclass(frozen=True)
class TraceOptions:
    """What a ``ProfilerCallback`` window records and where its traces go.

    Args:
        activities: any of ``"cpu"``, ``"cuda"``, ``"xpu"``, ``"mtia"``, ``"hpu"``; one this
            build or machine cannot record is dropped with one info line; default
            ``("cpu", "cuda")``.
        record_shapes: record operator input shapes; default True.
        profile_memory: record allocations as ``[memory]`` events (CPU too); default True.
        with_stack: record Python stacks (large traces, slower); default False.
        detect_syncs: while a window records, also name the lines of code that synchronize
            CUDA (:mod:`trainperf.probe.sync_debug`) in a ``host_sync_lines`` finding (each sync
            then costs a warning and a stack walk, which the window's timings include). A
            CPU-only run says once that syncs do not apply. Default False.
        output_dir: trace directory; a relative path is under ``trainer.default_root_dir``
            (in a ``trainperf try`` trial, this one and an absolute one by its last name are
            under the trial's folder); default ``profiler_traces``.
        export_chrome_trace: keep the Chrome trace ``epoch_{N}.json[.gz]``; ``False`` still
            writes it for the analysis, then deletes it. Default True.
        gzip: write ``.json.gz`` traces; default False.
        tensorboard: also place a copy, named as ``tensorboard_trace_handler`` names its files
            (``{host}_{pid}.{time_ns}.pt.trace.json[.gz]``), in ``<output_dir>/tensorboard``;
            default False.
    """

    activities: Collection[str] = ("cpu", "cuda")
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = False
    detect_syncs: bool = False
    output_dir: str | os.PathLike[str] = "profiler_traces"
    export_chrome_trace: bool = True
    gzip: bool = False
    tensorboard: bool = False

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if isinstance(self.activities, str) or not isinstance(self.activities, Collection):
            raise ConfigError(
                f"{owner}: activities must be a list, got {type(self.activities).__name__} "
                f"{self.activities!r}"
            )
        names: tuple[str, ...] = ()
        for name in self.activities:
            key = str(name).lower()
            if key not in ACTIVITIES:
                raise ConfigError(
                    f"{owner}: unknown activity {name!r} in activities; expected some of "
                    f"{', '.join(sorted(ACTIVITIES))}"
                )
            names += (key,)
        if not names:
            raise ConfigError(f"{owner}: activities is empty")
        object.__setattr__(self, "activities", names)
        for flag in (
            "record_shapes",
            "profile_memory",
            "with_stack",
            "detect_syncs",
            "export_chrome_trace",
            "gzip",
            "tensorboard",
        ):
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise ConfigError(f"{owner}: {flag} must be true or false, got {value!r}")
        if not str(self.output_dir).strip():
            raise ConfigError(f"{owner}: output_dir is an empty path")
        object.__setattr__(self, "output_dir", Path(self.output_dir))


@dataclass(frozen=True)
class FlatSetting:
    """One flat ``ProfilerCallback`` argument of the original project (``flat``) and the grouped
    setting it is: field ``field`` of the ``group`` (``"schedule"`` or ``"trace"``) object."""

    flat: str
    group: str
    field: str

    @property
    def grouped(self) -> str:
        """The grouped key, e.g. ``schedule.active``."""
        return f"{self.group}.{self.field}"

    def applied(self, settings: ProfileSchedule | TraceOptions, value: object) -> Any:
        """``settings`` with this field set to ``value``, validated as the group validates it."""
        changes: dict[str, Any] = {self.field: value}
        return replace(settings, **changes)

    def read(self, value: object) -> object:
        """``value`` as the grouped setting holds it (``[2, 1]`` -> ``frozenset({1, 2})``)."""
        default = ProfileSchedule() if self.group == "schedule" else TraceOptions()
        return getattr(self.applied(default, value), self.field)


#: The original project's flat ``ProfilerCallback`` arguments (its ``ocr.callbacks.profiler``
#: and ``configs/callbacks/profiler.yaml``) and the grouped setting each one is, unit and meaning
#: unchanged: ``profile_epochs`` the 0-based epochs (``trainer.current_epoch``) to profile,
#: ``profile_steps`` the steps recorded per window, ``warmup_steps`` the steps traced and
#: discarded before them, the rest as named.
FLAT_SETTINGS: tuple[FlatSetting, ...] = (
    FlatSetting("profile_epochs", "schedule", "epochs"),
    FlatSetting("profile_steps", "schedule", "active"),
    FlatSetting("warmup_steps", "schedule", "warmup"),
    FlatSetting("activities", "trace", "activities"),
    FlatSetting("record_shapes", "trace", "record_shapes"),
    FlatSetting("with_stack", "trace", "with_stack"),
    FlatSetting("output_dir", "trace", "output_dir"),
    FlatSetting("export_chrome_trace", "trace", "export_chrome_trace"),
)


def apply_flat(
    owner: str, schedule: ProfileSchedule, trace: TraceOptions, flat: Mapping[str, object]
) -> tuple[ProfileSchedule, TraceOptions]:
    """``schedule`` and ``trace`` with the flat arguments ``flat`` (name -> value; ``None``: not
    given) applied (:data:`FLAT_SETTINGS`). A grouped field left at its default yields to its flat
    twin; one set to another value that the flat twin contradicts is a ``ConfigError`` naming
    both keys and values (whichever was meant, the other would be silently ignored)."""
    groups: dict[str, ProfileSchedule | TraceOptions] = {"schedule": schedule, "trace": trace}
    defaults: dict[str, ProfileSchedule | TraceOptions] = {
        "schedule": ProfileSchedule(),
        "trace": TraceOptions(),
    }
    for setting in FLAT_SETTINGS:
        value = flat.get(setting.flat)
        if value is None:
            continue
        current = groups[setting.group]
        try:
            updated = setting.applied(current, value)
        except ConfigError as exc:
            raise ConfigError(f"{owner}: {setting.flat}={value!r}: {exc}") from None
        given = getattr(current, setting.field)
        wanted = getattr(updated, setting.field)
        if given != wanted and given != getattr(defaults[setting.group], setting.field):
            raise ConfigError(
                f"{owner}: {setting.flat}={_shown(value)} and {setting.grouped}="
                f"{_shown(given)} disagree ({setting.flat} is the flat name of "
                f"{setting.grouped}); give only one of them"
            )
        groups[setting.group] = updated
    new_schedule, new_trace = groups["schedule"], groups["trace"]
    assert isinstance(new_schedule, ProfileSchedule)
    assert isinstance(new_trace, TraceOptions)
    return new_schedule, new_trace


def _shown(value: object) -> str:
    """A setting's value as a command line gives it (``[1, 2]``, ``50``, ``cpu``)."""
    if isinstance(value, frozenset | set):
        return str(sorted(value))
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return str(list(value))
    return repr(value) if isinstance(value, str) else str(value)
