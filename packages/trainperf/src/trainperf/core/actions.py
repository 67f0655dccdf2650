"""What a framework's named unit of work is: the phase its time belongs to and who spent it.

A training framework names the work it runs (hooks, callbacks, data fetches, strategy calls), live
through a profiler interface and in traces as labelled spans. This module holds the neutral
vocabulary for that meaning (:class:`Action`, its kinds, the phases a trace can tell apart) and a
registry of :class:`SpanGrammar` objects: the data with which a framework adapter teaches the
neutral layers its names. No framework's grammar lives here: each is supplied as data from above
(:mod:`trainperf.frameworks`), so the live phase clock and the trace analyzer read the same names
through the same classifier and can never disagree on what a name means.

Nested actions: the innermost one that is not transparent (``phase == ""``) owns the time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from trainperf.core.clock import PHASES

# The clock's phases (``trainperf.core.clock.PHASES``) are the only phase names, in traces too. A
# trace cannot
# tell three of them apart from the work around them (nothing in it marks ``perf_phase``
# blocks or a DDP wait); this mapping is the only place that says where their time goes.

#: Clock phase -> the trace phase whose time includes it: postprocess and metric run inside the
#: step function (forward); a wait for another rank is time no label in the trace claims.
POOLED_IN_TRACE: dict[str, str] = {
    "postprocess": "forward",
    "metric": "forward",
    "sync_wait": "unattributed",
}
#: The phases of a trace's step breakdown: the clock's, in its order, less those pooled above.
TRACE_PHASES: tuple[str, ...] = tuple(p for p in PHASES if p not in POOLED_IN_TRACE)


def trace_phase(phase: str) -> str:
    """The phase of :data:`TRACE_PHASES` that holds clock phase ``phase``'s time in a trace;
    a name the clock does not know is ``unattributed`` (never dropped)."""
    phase = POOLED_IN_TRACE.get(phase, phase)
    return phase if phase in TRACE_PHASES else "unattributed"


CALLBACK = "callback"
MODULE = "module"
DATAMODULE = "datamodule"
STRATEGY = "strategy"
LOOP = "loop"
OTHER = "other"
#: Kinds of action that are the user's code running inside a framework's hook (not the
#: framework's own bookkeeping): the per-callback and per-hook split names their owners.
HOOK_KINDS = (CALLBACK, MODULE, DATAMODULE, STRATEGY)


@dataclass(frozen=True, slots=True)
class Action:
    """The meaning of one action name (as its framework's grammar reads it).

    Args:
        phase: the phase (``trainperf.core.clock.PHASES``) its own time belongs to; ``""`` for a
            transparent action whose time stays with the enclosing one.
        kind: ``"callback"``, ``"module"``, ``"datamodule"``, ``"strategy"``, ``"loop"`` (data
            fetch) or ``"other"``.
        owner: who spent it, for the per-callback and per-hook split: the callback's class name
            for callbacks (:func:`callback_class_name`), ``Class.hook`` for the model's and the
            data module's hooks, ``""`` otherwise.
        target: the text between the prefix and the hook: a callback's full ``state_key``
            (two instances of one class differ here when their state keys do), the module's or
            strategy's class name; ``""`` for unprefixed names.
    """

    phase: str
    kind: str
    owner: str
    hook: str
    target: str = ""


def callback_class_name(state_key: str) -> str:
    """The class name inside a callback's ``state_key``: ``ModelCheckpoint{'monitor': ...}`` ->
    ``ModelCheckpoint``; a qualified name keeps its last part (``f.<locals>.Slow`` -> ``Slow``)."""
    brace = state_key.find("{")
    base = state_key if brace < 0 else state_key[:brace]
    return base.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class SpanGrammar:
    """How one framework names its work, as data for the neutral layers (registered with
    :func:`register_grammar` by whoever knows the framework; see :mod:`trainperf.frameworks`).

    Args:
        framework: its name (``lightning``, ...), for messages.
        classify: an action name, as the framework passes it to its profiler interface ->
            :class:`Action` (pure; the same name gives the same action).
        action_prefix: the prefix of a trace span that is one of its actions (the rest of the name
            is what :attr:`classify` reads).
        label_prefix: the prefix of every span the framework labels in a trace (its actions and
            its other labels): such a span is a label, not an operator; embedded ``{...}`` state
            in such names is dropped on reading.
        module_prefix: the prefix of a span wrapping the model's forward call (all of it
            ``forward``); ``""`` when it records none.
        loop_place: how a report names the place of work the framework's own loop does outside
            every hook (a sync point there); ``""``: a trace of it names no such place.
        sync_advice: the change that removes a per-step sync point, by where it is: an action
            kind (:data:`HOOK_KINDS`) or ``"loop"`` (:attr:`loop_place`); ``{hook}`` in the text
            is the hook's name.
        packages: its top-level Python packages (their frames are never the user's code).
    """

    framework: str
    classify: Callable[[str], Action]
    action_prefix: str
    label_prefix: str
    module_prefix: str = ""
    loop_place: str = ""
    sync_advice: Mapping[str, str] = field(default_factory=dict)
    packages: tuple[str, ...] = ()


_GRAMMARS: dict[str, SpanGrammar] = {}
_PACKAGES: set[str] = set()
_NO_ACTION = Action("", OTHER, "", "")


def register_grammar(grammar: SpanGrammar) -> None:
    """Teach the clock and the trace analysis a framework's names (a second registration of the
    same framework replaces the first)."""
    _GRAMMARS[grammar.framework] = grammar
    _PACKAGES.update(grammar.packages)
    span_action.cache_clear()


def register_packages(names: Iterable[str]) -> None:
    """Top-level packages (a config library an app runs under, ...) whose frames are not the
    user's code, beside those of the registered grammars."""
    _PACKAGES.update(names)


def grammars() -> tuple[SpanGrammar, ...]:
    """The registered grammars, in registration order."""
    return tuple(_GRAMMARS.values())


def library_packages() -> frozenset[str]:
    """The registered packages whose frames are never the user's code."""
    return frozenset(_PACKAGES)


def label_prefixes() -> tuple[str, ...]:
    """Every registered framework's label prefix (see :attr:`SpanGrammar.label_prefix`)."""
    return tuple(g.label_prefix for g in _GRAMMARS.values() if g.label_prefix)


@lru_cache(maxsize=4096)
def span_action(name: str) -> Action | None:
    """The action a trace span names (a registered framework's action prefix, then its action
    name), or ``None`` for a span no registered framework claims as an action. Cached: the
    same few hundred names recur at every step."""
    for g in _GRAMMARS.values():
        if g.action_prefix and name.startswith(g.action_prefix):
            return g.classify(name[len(g.action_prefix) :])
    return None


def is_module_span(name: str) -> bool:
    """The span wraps the model's forward call (a registered framework's module prefix)."""
    return any(g.module_prefix and name.startswith(g.module_prefix) for g in _GRAMMARS.values())


def hook_kind(hook: str) -> str:
    """The kind of a hook named without its trace prefix (as :func:`span_action` gives it in
    ``Action.target`` / the sync report): the first registered grammar that knows it, else
    :data:`OTHER`."""
    for g in _GRAMMARS.values():
        kind = g.classify(hook).kind
        if kind != OTHER:
            return kind
    return OTHER


def grammar_of(names: Iterable[str]) -> SpanGrammar | None:
    """The registered grammar whose actions appear among ``names`` (a trace's span names)."""
    found = [g for g in _GRAMMARS.values() if g.action_prefix]
    for n in names:
        for g in found:
            if n.startswith(g.action_prefix):
                return g
    return None
