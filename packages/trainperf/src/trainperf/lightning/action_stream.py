"""Listen to Lightning's profiler action stream while keeping the user's profiler.

Lightning calls ``trainer.profiler.start(name)`` / ``stop(name)`` (through ``profile(name)``)
around every callback, module and datamodule hook, strategy call, data fetch, manual optimizer
step and checkpoint save (``trainperf.core.actions`` lists the names): the public
``lightning.pytorch.profilers.Profiler`` interface names everything that runs.

:class:`ActionStream` wraps the trainer's own profiler (``PassThroughProfiler`` or the user's
``Trainer(profiler=...)``), which still gets every call, and hands each start/stop to the
listeners too. The first :func:`add_listener` (a callback's ``setup``, after Lightning has set up
the user's profiler) puts it in ``trainer.profiler``; the last :func:`remove_listener`
(``teardown``, before Lightning calls the user's profiler's ``describe()``) takes it out.

Cost: most actions of a step are a callback's inherited no-op. A listener may say which names it
wants (``wants(name)``, asked once per name); a name nobody wants costs one dict lookup, and
``profile()`` then hands Lightning a shared do-nothing context manager (cheaper than
``PassThroughProfiler``'s generator-based one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import lightning as L
from lightning.pytorch.profilers import PassThroughProfiler, Profiler


class ActionListener(Protocol):
    """Receives every action start and stop, in order, on the training loop's thread. Must not
    raise (it runs inside Lightning's hot loop) and should be cheap: it runs dozens of times per
    training step."""

    def action_start(self, name: str) -> None: ...

    def action_stop(self, name: str) -> None: ...


def _wants(listener: ActionListener, name: str) -> bool:
    """The listener's optional ``wants(name)``; without one, every name."""
    wants = getattr(listener, "wants", None)
    return True if wants is None else bool(wants(name))


# The span of an action no listener wants and no user profiler times (reusable, reentrant).
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


class _Span:
    """``profile(name)``'s context manager: a slotted class is cheaper per use than a
    ``contextlib.contextmanager`` generator. It holds no per-use state, so one instance per name
    serves every use, nested ones included."""

    __slots__ = ("_inner_start", "_inner_stop", "_name", "_starts", "_stops")

    def __init__(
        self,
        name: str,
        listeners: tuple[ActionListener, ...],
        inner_start: Callable[[str], None] | None,
        inner_stop: Callable[[str], None] | None,
    ) -> None:
        self._name = name
        self._starts = listeners
        self._stops = listeners[::-1]
        self._inner_start = inner_start
        self._inner_stop = inner_stop

    def __enter__(self) -> str:
        name = self._name
        if self._inner_start is not None:
            self._inner_start(name)
        for listener in self._starts:
            listener.action_start(name)
        return name

    def __exit__(self, *exc: object) -> None:
        name = self._name
        for listener in self._stops:
            listener.action_stop(name)
        if self._inner_stop is not None:
            self._inner_stop(name)


class ActionStream(Profiler):
    """A Lightning ``Profiler`` that forwards everything to ``inner`` (the trainer's profiler
    before this one) and tells listeners."""

    def __init__(self, inner: Profiler) -> None:
        super().__init__()
        self.inner = inner
        self._listeners: tuple[ActionListener, ...] = ()
        # name -> (listeners that want it, the same reversed); filled on first sight of a name.
        self._routes: dict[str, tuple[tuple[ActionListener, ...], tuple[ActionListener, ...]]] = {}
        # name -> the span profile() returns for it (one per name: spans hold no per-use state)
        self._spans: dict[str, _Span | contextlib.nullcontext[None]] = {}
        # The default PassThroughProfiler does nothing: skip the two calls per action.
        passthrough = type(inner) is PassThroughProfiler
        self._inner_start = None if passthrough else inner.start
        self._inner_stop = None if passthrough else inner.stop
        # A profiler that overrides profile() itself (not only start/stop) gets its own
        # context manager, so it sees exactly what it would have seen without us.
        self._inner_profile = type(inner).profile is not Profiler.profile

    def add(self, listener: ActionListener) -> None:
        if listener not in self._listeners:
            self._listeners = (*self._listeners, listener)
            self._routes, self._spans = {}, {}

    def remove(self, listener: ActionListener) -> None:
        self._listeners = tuple(item for item in self._listeners if item is not listener)
        self._routes, self._spans = {}, {}

    def _route(self, name: str) -> tuple[tuple[ActionListener, ...], tuple[ActionListener, ...]]:
        wanting = tuple(item for item in self._listeners if _wants(item, name))
        route = (wanting, wanting[::-1])
        self._routes[name] = route
        return route

    # -- the Profiler interface ------------------------------------------------------------

    def start(self, action_name: str) -> None:
        if self._inner_start is not None:
            self._inner_start(action_name)
        route = self._routes.get(action_name)
        for listener in (route or self._route(action_name))[0]:
            listener.action_start(action_name)

    def stop(self, action_name: str) -> None:
        route = self._routes.get(action_name)
        for listener in (route or self._route(action_name))[1]:
            listener.action_stop(action_name)
        if self._inner_stop is not None:
            self._inner_stop(action_name)

    def profile(self, action_name: str) -> Any:
        span = self._spans.get(action_name)
        return span if span is not None else self._span(action_name)

    def _span(self, name: str) -> Any:
        route = self._routes.get(name) or self._route(name)
        if self._inner_profile:
            return _WrappedSpan(self, name, route)  # holds its user's context: one per use
        span: _Span | contextlib.nullcontext[None]
        if not route[0] and self._inner_start is None:
            span = _NO_SPAN
        else:
            span = _Span(name, route[0], self._inner_start, self._inner_stop)
        self._spans[name] = span
        return span

    def summary(self) -> str:
        return self.inner.summary()

    def describe(self) -> None:
        self.inner.describe()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        self.inner.setup(stage=stage, local_rank=local_rank, log_dir=log_dir)

    def teardown(self, stage: str | None) -> None:
        self.inner.teardown(stage)

    def __del__(self) -> None:
        # Profiler.__del__ calls teardown(), which would close the user's profiler's output
        # file when this wrapper is collected: the user's profiler is not ours to close.
        pass

    def __getattr__(self, name: str) -> Any:
        # Attributes of the user's profiler (e.g. PyTorchProfiler's) stay reachable through
        # trainer.profiler. Only called for names this object does not have.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class _WrappedSpan:
    """The span for a user's profiler with its own ``profile()``: theirs runs as it would
    without us, the listeners the name's route holds are told inside it."""

    __slots__ = ("_cm", "_name", "_route", "_stream")

    def __init__(
        self,
        stream: ActionStream,
        name: str,
        route: tuple[tuple[ActionListener, ...], tuple[ActionListener, ...]],
    ) -> None:
        self._stream = stream
        self._name = name
        self._route = route
        self._cm: Any = None

    def __enter__(self) -> str:
        self._cm = self._stream.inner.profile(self._name)
        self._cm.__enter__()
        for listener in self._route[0]:
            listener.action_start(self._name)
        return self._name

    def __exit__(self, *exc: Any) -> Any:
        for listener in self._route[1]:
            listener.action_stop(self._name)
        return self._cm.__exit__(*exc)


def add_listener(trainer: L.Trainer, listener: ActionListener) -> ActionStream:
    """Make ``listener`` receive ``trainer``'s actions; the first one puts an
    :class:`ActionStream` in front of the trainer's profiler."""
    # Trainer.profiler is set in Trainer.__init__ (trainer/setup.py), not declared on the class.
    current: Profiler = trainer.profiler  # type: ignore[attr-defined]
    stream = current if isinstance(current, ActionStream) else ActionStream(current)
    trainer.profiler = stream  # type: ignore[attr-defined]
    stream.add(listener)
    return stream


def remove_listener(trainer: L.Trainer, listener: ActionListener) -> None:
    """Stop ``listener``; the last one out gives the trainer its own profiler back (only when
    nobody replaced ours in the meantime: their profiler is left alone)."""
    stream = trainer.profiler  # type: ignore[attr-defined]
    if not isinstance(stream, ActionStream):
        return
    stream.remove(listener)
    if not stream._listeners:
        trainer.profiler = stream.inner  # type: ignore[attr-defined]
