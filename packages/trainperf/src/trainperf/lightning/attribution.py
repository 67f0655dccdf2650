"""Which phase and owner the recorder's clock charges, from Lightning's actions.

Attribution: which phase and owner the recorder's clock charges, driven by Lightning's action
stream (the hot path of the performance callbacks).

:class:`ActionAttribution` is the ``ActionListener`` (``lightning/action_stream.py``) of a
``StageRecorder``: the innermost running action that is not transparent owns the time, with its
owner (a callback's display name and hook, a module's ``Class.hook``) as a finer split. Two
moments have no action of their own: the backward pass runs between the module's
``on_before_backward`` and the first ``on_after_backward`` (the precision plugin brackets it in
both optimization modes, also under ``manual_backward``); and the all-reduce wait at the end of a
DDP backward starts when DDP hands its last gradient bucket to our communication hook
(``cross_rank.CommTimer``), so that stretch is ``sync_wait``. Under DDP the gap between two
training batches is ``sync_wait`` too (``interpose.syncs_before_train_batch``).

The actions that open and close windows (``window_events``) are handed on to ``on_event_start``
/ ``on_event_stop``; the attribution itself knows nothing of windows, files or ranks.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from collections.abc import Callable, Mapping

import lightning as L

from trainperf.core.actions import CALLBACK, DATAMODULE, MODULE
from trainperf.core.clock import PhaseClock, set_active_clock
from trainperf.frameworks.lightning_grammar import classify_action
from trainperf.lightning.interpose import syncs_before_train_batch
from trainperf.lightning.untimed_hooks import lightning_own_hook, untimed_hook
from trainperf.lightning.window_events import (
    EV_AFTER_BACKWARD,
    EV_BEFORE_BACKWARD_DONE,
    window_event,
)
from trainperf.recording.cross_rank import CommTimer

# An action running now: (action, phase, owner, event); a transparent one has phase "" in
# ``_info`` and carries the enclosing action's phase and owner on the stack.
_Entry = tuple[str, str, str, int]


def _no_event(event: int) -> None:
    return None


def _raise(exc: BaseException) -> None:
    raise exc


class ActionAttribution:
    """Charges the clock to the running action (see the module docstring).

    Args:
        trainer: the trainer whose actions arrive (held weakly).
        clock: the clock to switch; the recorder's one clock.
        world_size: ranks of the run (the gap between training batches is ``sync_wait`` under
            DDP).
        on_event_start / on_event_stop: called with a ``window_events`` event when an action
            that opens or closes a window starts / stops (the backward bracket is handled
            here).
        on_error: called with any internal error of a listener entry point (which never
            raises into Lightning's loop); default: raise.

    ``measuring`` off (after a failure) stops the timing but still hands the window events on
    (under DDP a failed rank keeps joining the epoch-close exchanges); ``finished``: nothing at
    all.
    """

    def __init__(
        self,
        trainer: L.Trainer,
        clock: PhaseClock,
        *,
        world_size: int = 1,
        on_event_start: Callable[[int], None] = _no_event,
        on_event_stop: Callable[[int], None] = _no_event,
        on_error: Callable[[BaseException], None] = _raise,
    ) -> None:
        self._trainer_ref = weakref.ref(trainer)
        self.clock = clock
        self.measuring = True
        self.finished = False
        self._on_event_start = on_event_start
        self._on_event_stop = on_event_stop
        self._on_error = on_error
        self._stack: list[_Entry] = []  # actions running now, innermost last
        self._info: dict[str, _Entry] = {}  # action -> its stack entry
        self._owner_group: dict[str, tuple[str, str]] = {}  # owner -> (group, name)
        self._callback_names: dict[str, str] = {}  # callback state_key -> display name
        self._in_backward = False
        self._backward_start_ns = 0
        self.sync_between_batches = syncs_before_train_batch(world_size)
        self._between_batches = False
        #: The DDP communication hook's timer, once registered (``cross_rank.RankExchange``).
        self.comm: CommTimer | None = None

    @property
    def owner_groups(self) -> Mapping[str, tuple[str, str]]:
        """Each owner seen so far -> (``"callbacks"`` or ``"module_hooks"``, display name)."""
        return self._owner_group

    def name_callbacks(self, trainer: L.Trainer) -> None:
        """Display names of the trainer's callbacks by ``state_key`` (what action names carry):
        the class name, then ``#2``, ``#3``... (instances with equal state keys share one)."""
        names: dict[str, str] = {}
        count: Counter[str] = Counter()
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if callback.state_key not in names:
                base = type(callback).__name__
                count[base] += 1
                names[callback.state_key] = base if count[base] == 1 else f"{base}#{count[base]}"
        self._callback_names = names
        self._info.clear()

    # -- what the stream tells us ----------------------------------------------------------

    def wants(self, name: str) -> bool:
        """Whether the stream should tell us about ``name`` (asked once per name). Left out:
        transparent actions without a window event (their time stays with the enclosing action
        either way) and hooks that do nothing. The module's own ``on_after_backward`` closes the
        backward bracket, so the callbacks' no-op ones are not needed for it."""
        try:
            _, phase, _, event = self._info.get(name) or self._learn(name)
            action = classify_action(name)
            trainer = self._trainer_ref()
            idle = (
                phase != ""
                and trainer is not None
                and untimed_hook(trainer, action.kind, action.target, action.hook)
            )
            if event and not (action.kind == CALLBACK and action.hook == "on_after_backward"):
                if idle:
                    # Wanted for its event only (the module's inherited on_train_batch_end,
                    # on_before_backward...): transparent, so it switches no clock.
                    self._info[name] = (name, "", "", event)
                return True
            if (
                phase not in ("", "module_hooks")
                and not idle
                and action.kind in (MODULE, DATAMODULE)
                and trainer is not None
                and lightning_own_hook(trainer, action.kind, action.hook)
            ):
                # Lightning's own transfer / optimizer / checkpoint hook, not the user's: no
                # owner, so inside the strategy's batch_to_device or the module's
                # optimizer_step it continues the enclosing interval.
                self._info[name] = (name, phase, "", event)
            return phase != "" and not idle
        except Exception:
            return True  # when in doubt, listen

    def _learn(self, name: str) -> _Entry:
        action = classify_action(name)
        owner = action.owner
        if action.kind == CALLBACK:
            display = self._callback_names.get(action.target, action.owner)
            owner = f"{display}.{action.hook}"
            self._owner_group[owner] = ("callbacks", display)
        elif action.kind in (MODULE, DATAMODULE):
            self._owner_group[owner] = ("module_hooks", owner)
        event = window_event(action.kind, action.hook)
        info = (name, action.phase, owner if action.phase else "", event)
        self._info[name] = info
        return info

    # -- the hot path ----------------------------------------------------------------------

    def action_start(self, name: str) -> None:
        if self.finished:
            return
        try:
            entry = self._info.get(name) or self._learn(name)
            event = entry[3]
            if not self.measuring:
                # DDP after a failure: windows are still tracked (not timed), so this rank joins
                # the next epoch-close gather and every rank learns of the failure together.
                if event == EV_AFTER_BACKWARD:
                    self._after_backward()
                elif event:
                    self._on_event_start(event)
                return
            self._between_batches = False
            if event:
                if event == EV_AFTER_BACKWARD:
                    self._after_backward()
                else:
                    self._on_event_start(event)  # a window event: the recorder's
            stack = self._stack
            if entry[1]:
                stack.append(entry)
                clock = self.clock
                # Same label as the open interval (a hook inside a hook of one owner): the
                # interval simply goes on.
                if clock.running and (entry[1] != clock.current or entry[2] != clock.current_owner):
                    clock.switch(entry[1], entry[2])
            elif stack:
                top = stack[-1]
                stack.append((name, top[1], top[2], event))  # transparent: the enclosing label
            else:
                stack.append(entry)
        except Exception as exc:
            self._on_error(exc)

    def action_stop(self, name: str) -> None:
        if self.finished:
            return
        try:
            if not self.measuring:  # DDP after a failure: see action_start
                info = self._info.get(name)
                if info is not None and info[3]:
                    self._on_event_stop(info[3])
                return
            stack = self._stack
            if stack and stack[-1][0] == name:
                event = stack.pop()[3]
            else:
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i][0] == name:
                        event = stack[i][3]
                        del stack[i:]
                        break
                else:
                    return  # started before we listened
            clock = self.clock
            if clock.running:
                if event == EV_BEFORE_BACKWARD_DONE:
                    # The backward pass runs next (automatic and manual optimization alike).
                    clock.switch("backward")
                    self._in_backward = True
                    self._backward_start_ns = time.perf_counter_ns()
                elif stack and stack[-1][1]:
                    top = stack[-1]
                    if top[1] != clock.current or top[2] != clock.current_owner:
                        clock.switch(top[1], top[2])
                elif clock.current != "unattributed" or clock.current_owner:
                    clock.switch("unattributed")
            if event:
                self._on_event_stop(event)
        except Exception as exc:
            self._on_error(exc)

    def _after_backward(self) -> None:
        """Backward has returned: what followed DDP's last gradient bucket was the wait."""
        if self._in_backward:
            self._in_backward = False
            comm = self.comm
            if comm is not None:
                comm.charge_wait(self.clock, self._backward_start_ns)

    def batch_gap(self) -> None:
        """A training batch ended under DDP: until the next action starts, the rank waits for
        the others (``sync_between_batches``)."""
        self._between_batches = True
        if self.clock.running and self.current_label()[0] == "sync_wait":
            self.clock.switch("sync_wait")

    # -- the label -------------------------------------------------------------------------

    def current_label(self) -> tuple[str, str]:
        """The (phase, owner) the clock charges now."""
        stack = self._stack
        if self._in_backward:
            return "backward", ""
        if stack and stack[-1][1]:
            return stack[-1][1], stack[-1][2]
        return ("sync_wait" if self._between_batches else "unattributed"), ""

    def start_clock(self) -> None:
        """Start the clock at the current label and make it the active one (``perf_phase``)."""
        phase, owner = self.current_label()
        self.clock.start(phase)
        if owner:
            self.clock.switch(phase, owner)
        set_active_clock(self.clock)
