"""The alert engine: the alert rule's base, each rule's state machine, and the engine.

The engine runs the rules over samples.

Each :class:`Rule` turns one sample (flat ``resources/...`` values plus a :class:`RuleContext`)
into a :class:`Check`: is the condition breached, is it cleared (hysteresis: the clear threshold
lies on the safe side of the firing threshold), and the figures that explain it. A
:class:`RuleState` turns checks into events:

- ``fired`` once the condition has held for ``hold_s`` seconds, and not sooner than
  ``cooldown_s`` after the rule's previous firing (quiet during the cool-down);
- while firing, nothing more until the clear condition holds: then ``resolved``;
- a sample without the rule's inputs (``Check`` is ``None``: another phase, no GPU) changes
  nothing but restarts a pending hold.

An alert rule is also a rule of the one shape (:class:`trainperf.core.rules.Rule`): it
``emits`` ``alert:<name>``, ``reads`` the finding it ``corroborates``, and
``evaluate(window)`` returns its breach on one :class:`AlertWindow` as a finding, through the
same hold / clear / cool-down state the engine uses. The rules themselves are the catalogue,
:mod:`trainperf.alerts.catalogue`.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from trainperf.alerts.sinks import AlertSink, AlertWarning
from trainperf.core.finding_ids import alert_finding_id
from trainperf.core.findings import Finding, threshold
from trainperf.core.triggers import request_profile
from trainperf.errors import ConfigError
from trainperf.records.monitoring import AlertEvent

# -- the state machine of one rule --------------------------------------------------------------


class RuleState:
    """Hold time (``hold_s``, 0: fire at once), hysteresis and cool-down (``cooldown_s``, no
    second firing sooner) of one rule, in seconds."""

    def __init__(self, hold_s: float, cooldown_s: float) -> None:
        self.hold_s = float(hold_s)
        self.cooldown_s = float(cooldown_s)
        self.firing = False
        self.pending_since: float | None = None
        self.last_fired: float | None = None

    def update(self, t: float, breach: bool | None, clear: bool = False) -> str | None:
        """Feed one observation at time ``t`` (seconds, monotonic). ``breach``: the firing
        condition holds (``None``: no data); ``clear``: the clear condition holds. Returns
        ``"fired"``, ``"resolved"`` or ``None``."""
        if breach is None or not (self.firing or breach):
            self.pending_since = None
            return None
        if self.firing:
            if clear and not breach:
                self.firing = False
                self.pending_since = None
                return "resolved"
            return None
        if self.pending_since is None:
            self.pending_since = t
        if t - self.pending_since < self.hold_s:
            return None
        if self.last_fired is not None and t - self.last_fired < self.cooldown_s:
            return None  # cool-down: stay quiet, keep the hold so it fires when it ends
        self.firing = True
        self.last_fired = t
        return "fired"


# -- rules ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StragglerSignal:
    """The ``straggler_rank`` rule's input: the straggler of the last epoch gather (``rank``
    ``-1`` when no rank straggles, so an alert can resolve; ``share`` of the epoch's wall time,
    0-1; ``cause`` the phase it spends more in)."""

    rank: int
    share: float
    excess_s: float = 0.0
    cause: str = ""
    others_wait_s: float = 0.0
    epoch: int = 0


@dataclass(frozen=True)
class GrowthSignal:
    """The ``memory_creep`` rule's input: what the epoch scan of ``epoch`` found growing
    (``trainperf.probe.growth``; ``paths`` empty when nothing grows any more, so an alert can
    resolve),
    in one sentence and with its advice."""

    epoch: int
    paths: tuple[str, ...] = ()
    message: str = ""
    advice: str = ""


@dataclass(frozen=True)
class RuleContext:
    """What a rule knows besides the sampled values: ``phase`` (``train``, ``val``, ``test``
    or ``idle``), the estimated size of the next checkpoint, the last gather's straggler
    (``None`` before any), ``where`` the training thread is (``file:line in function``) and
    the last epoch scan's growth (``None`` before any)."""

    phase: str = "train"
    step: int = 0
    epoch: int = 0
    checkpoint_bytes: float = 0.0
    straggler: StragglerSignal | None = None
    where: str | None = None
    growth: GrowthSignal | None = None


@dataclass(frozen=True)
class Check:
    """One evaluation of a rule: whether the firing and the clear (hysteresis) conditions hold,
    one sentence with the figures for a firing (``message``) and for a resolve, the figures, a
    concrete change to make, and the thresholds used (``None``: :meth:`Rule.thresholds`)."""

    breach: bool
    clear: bool
    message: str
    resolve: str
    evidence: dict[str, float | str]
    suggestion: str
    threshold: dict[str, float] | None = None


@dataclass(frozen=True)
class AlertWindow:
    """The context an alert rule evaluates (:meth:`Rule.evaluate`): one sample taken at ``t``
    (monotonic seconds), its flat ``resources/...`` ``values`` and the engine's
    :class:`RuleContext`."""

    t: float
    values: Mapping[str, float]
    ctx: RuleContext = RuleContext()


#: A rule setting: a number (seconds, a threshold) or a switch.
Setting = float | bool


def _check_setting(rule: str, key: str, default: Setting, value: object) -> Setting:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"alert rule {rule!r}: {key} must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"alert rule {rule!r}: {key} must be a number, got {value!r}")
    if value < 0:
        raise ConfigError(f"alert rule {rule!r}: {key} must be >= 0, got {value!r}")
    return float(value)


class Rule:
    """Base of the alert rules. A rule owns its metadata (the class attributes below) and its
    settings (:attr:`COMMON`, its own :attr:`DEFAULTS` / :attr:`FROM_TABLE`) and implements
    :meth:`check`; a setting it does not have is a ``ValueError`` naming the rule and setting.

    Attributes:
        per_rank: evaluated on every rank (inputs that are the rank's own: its data wait, host
            memory, GPU); other rules run on rank zero only.
        risk: about a run that may die or produce garbage rather than about its speed; the
            verdict scores such a finding by the ``risk_*_score`` thresholds.
        corroborates: id of the step-time finding this alert confirms (``input_bound``): the
            verdict attaches the alert to that finding instead of listing it on its own.
        requests_profile: a firing asks for a profiler window
            (:func:`trainperf.core.triggers.request_profile`) when the engine is told to.
    """

    name: ClassVar[str] = "rule"
    severity: ClassVar[str] = "warning"
    per_rank: ClassVar[bool] = False
    risk: ClassVar[bool] = False
    corroborates: ClassVar[str | None] = None
    requests_profile: ClassVar[bool] = False
    #: Finding ids an alert of this rule replaces (the one rule shape's ``supersedes``).
    supersedes: ClassVar[frozenset[str]] = frozenset()
    #: Every rule's settings besides its own (``hold_s``, ``cooldown_s``: :class:`RuleState`).
    COMMON: ClassVar[dict[str, Setting]] = {"enabled": True, "hold_s": 0.0, "cooldown_s": 600.0}
    DEFAULTS: ClassVar[dict[str, Setting]] = {}
    #: Settings whose default is a number of the thresholds table (its live value):
    #: setting -> (entry of ``trainperf.core.findings.THRESHOLDS``, divisor: 100 turns % into 0-1).
    FROM_TABLE: ClassVar[dict[str, tuple[str, float]]] = {}

    @classmethod
    def defaults(cls) -> dict[str, Setting]:
        """Every setting with its default: :attr:`COMMON`, :attr:`DEFAULTS` and the thresholds
        read from the table now (so the table stays the one source of the numbers)."""
        table = {
            key: threshold(name, live=True) / div for key, (name, div) in cls.FROM_TABLE.items()
        }
        return {**cls.COMMON, **cls.DEFAULTS, **table}

    def __init__(self, **settings: object) -> None:
        defaults = self.defaults()
        unknown = sorted(set(settings) - set(defaults))
        if unknown:
            raise ConfigError(
                f"alert rule {self.name!r}: unknown setting(s) {', '.join(unknown)}; expected "
                f"some of {', '.join(sorted(defaults))}"
            )
        self.settings: dict[str, Setting] = {
            key: _check_setting(self.name, key, default, settings.get(key, default))
            for key, default in defaults.items()
        }
        self.state = RuleState(self.settings["hold_s"], self.settings["cooldown_s"])

    def thresholds(self) -> dict[str, float]:
        """The settings whose default comes from the thresholds table, with their values."""
        return {key: float(self.settings[key]) for key in self.FROM_TABLE}

    @property
    def enabled(self) -> bool:
        return bool(self.settings["enabled"])

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        """Evaluate one sample; ``None`` when the rule's inputs are absent."""
        raise NotImplementedError

    # -- the one rule shape (trainperf.core.rules.Rule) ------------------------------------------

    @classmethod
    def finding_id(cls) -> str:
        """The id of the finding this rule's alerts become: ``alert:<name>``."""
        return alert_finding_id(cls.name)

    @property
    def emits(self) -> frozenset[str]:
        return frozenset({self.finding_id()})

    @property
    def reads(self) -> frozenset[str]:
        """The finding it corroborates (the verdict attaches the alert to it when present)."""
        return frozenset({self.corroborates}) if self.corroborates else frozenset()

    def observe(self, window: AlertWindow) -> tuple[Check | None, str | None]:
        """:meth:`check` one sample and advance the hold / clear / cool-down state: the check
        and the event it makes (``"fired"``, ``"resolved"`` or ``None``)."""
        check = self.check(window.t, window.values, window.ctx)
        if check is None:
            self.state.update(window.t, None)
            return None, None
        return check, self.state.update(window.t, check.breach, check.clear)

    def evaluate(self, window: AlertWindow, /) -> list[Finding]:
        """The rule on one sample as findings: its ``alert:<name>`` finding while the alert is
        firing (its condition has held ``hold_s``, outside the cool-down, and not yet cleared),
        else none. Advances the same state the engine does, so a rule instance is fed either by
        an :class:`AlertEngine` or by ``evaluate``, not both."""
        check, _ = self.observe(window)
        if check is None or not self.state.firing:
            return []
        return [self.as_finding(check)]

    def as_finding(self, check: Check) -> Finding:
        """A breached ``check`` as this rule's finding (score 0: the verdict ranks alerts by
        risk, see :func:`trainperf.alerts.as_findings.alert_findings`)."""
        return Finding(
            id=self.finding_id(),
            severity=self.severity,
            score=0.0,
            title=f"alert {self.name}: {check.message}",
            evidence=dict(check.evidence),
            threshold=self.thresholds() if check.threshold is None else dict(check.threshold),
            suggestion=check.suggestion,
            source="alerts",
            confidence="likely",
        )


class AlertEngine:
    """Runs rules over samples and sends their events to sinks.

    Args:
        rank: global rank of this process (in every event).
        all_rules: evaluate every rule (rank zero, or one process); ``False``: only the
            rules marked ``per_rank``.
        request_profiles: a firing of a rule marked ``requests_profile`` (``throughput_drop``)
            calls ``trainperf.core.triggers.request_profile("<rule>: <message>")``.
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        sinks: Iterable[AlertSink] = (),
        *,
        rank: int = 0,
        all_rules: bool = True,
        request_profiles: bool = False,
    ) -> None:
        self.rules = [r for r in rules if r.enabled and (all_rules or r.per_rank)]
        self.sinks = list(sinks)
        self.rank = rank
        self.request_profiles = request_profiles
        self.fired: Counter[str] = Counter()

    def update(
        self, values: Mapping[str, float], ctx: RuleContext = RuleContext(), t: float | None = None
    ) -> list[AlertEvent]:
        """Evaluate every rule on one sample taken at ``t`` (monotonic seconds; default now)
        with the context the rules read; send and return the events."""
        t = time.monotonic() if t is None else t
        events = []
        window = AlertWindow(t, values, ctx)
        for rule in self.rules:
            check, kind = rule.observe(window)
            if check is None or kind is None:
                continue
            event = AlertEvent(
                t=time.time(),
                rule=rule.name,
                event=kind,
                severity=rule.severity,
                message=check.resolve if kind == "resolved" else check.message,
                evidence=check.evidence,
                threshold=rule.thresholds() if check.threshold is None else check.threshold,
                suggestion=check.suggestion,
                step=ctx.step,
                epoch=ctx.epoch,
                rank=self.rank,
            )
            events.append(event)
            if kind == "fired":
                self.fired[rule.name] += 1
                if rule.requests_profile and self.request_profiles:
                    request_profile(f"{rule.name}: {check.message}")
        for event in events:
            self._send(event)
        return events

    def _send(self, event: AlertEvent) -> None:
        for sink in list(self.sinks):
            try:
                sink.emit(event)
            except Exception as exc:
                self.sinks.remove(sink)
                warnings.warn(
                    f"alert sink {sink.name!r} failed and is off for this run "
                    f"({type(exc).__name__}: {exc})",
                    AlertWarning,
                    stacklevel=3,
                )

    def close(self) -> None:
        """Close every sink."""
        for sink in self.sinks:
            with contextlib.suppress(Exception):  # best effort: every event was flushed already
                sink.close()
