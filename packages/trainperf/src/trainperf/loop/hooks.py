"""Forward, backward and optimizer of a plain loop, seen through torch hooks.

Forward, backward and optimizer of a plain loop, seen without editing it: forward through the
root module's ``register_forward_pre_hook`` / ``register_forward_hook``, the optimizer step
through torch's global step hooks (``register_optimizer_step_pre_hook`` / ``_post_hook``,
filtered to the Monitor's optimizer), and backward as what lies between forward's end and the
optimizer's pre-hook in a training epoch (no ``register_full_backward_hook``: it wraps the
module's inputs and outputs and breaks some in-place operations). Under
``DistributedDataParallel`` the wrapper is hooked (its forward runs the module's once), and the
wait for the other ranks inside backward (after the last gradient bucket was handed to the
all-reduce) is ``sync_wait``.

Each hook is a few attribute reads and one clock switch; outside an open window (the clock not
running) a switch does nothing. An error inside a hook turns recording off (one warning) and
never reaches the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from trainperf.core.clock import PhaseClock
from trainperf.recording.cross_rank import CommTimer


def precision_of(module: torch.nn.Module) -> str:
    """The precision a forward of ``module`` runs in now, in Lightning's words: ``bf16-mixed``
    / ``16-mixed`` under autocast, else ``bf16-true`` / ``16-true`` / ``64-true`` by the first
    parameter's dtype, else ``32-true``."""
    for device_type in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device_type):
                dtype = torch.get_autocast_dtype(device_type)
                return "bf16-mixed" if dtype == torch.bfloat16 else "16-mixed"
        except (RuntimeError, TypeError):  # a build without that device type
            continue
    param = next(module.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    return {torch.bfloat16: "bf16-true", torch.float16: "16-true", torch.float64: "64-true"}.get(
        dtype, "32-true"
    )


class StepHooks:
    """The hooks on one model and one optimizer, charging ``clock``.

    Args:
        clock: the recorder's clock.
        training: whether the stage running now is a training one (forward's end opens
            ``backward`` then, else it returns to the phase forward interrupted).
        on_error: called with a hook's exception (the recorder turns off).
    """

    def __init__(
        self,
        clock: PhaseClock,
        training: Callable[[], bool],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.clock = clock
        self._training = training
        self._on_error = on_error
        self._handles: list[RemovableHandle] = []
        self._before_forward = ""  # the phase forward interrupted
        self._backward_start_ns = 0
        self.comm: CommTimer | None = None  # the DDP all-reduce timer, when hooked
        self._optimizer: torch.optim.Optimizer | None = None
        self.precision: str | None = None  # seen at the first forward
        self.active = True

    # -- the model -------------------------------------------------------------------------

    def hook_model(self, model: torch.nn.Module) -> None:
        """Ours first before forward and last after it: the user's own forward hooks are
        forward's work."""
        self._handles.append(model.register_forward_pre_hook(self._forward_pre, prepend=True))
        self._handles.append(model.register_forward_hook(self._forward_post))

    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        if not self.active:
            return
        try:
            if self.precision is None:
                self.precision = precision_of(module)
            self._before_forward = self.clock.switch("forward")
        except Exception as exc:
            self._error(exc)

    def _forward_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self.active:
            return
        try:
            clock = self.clock
            if not clock.running:
                return
            if self._training() and torch.is_grad_enabled():
                clock.switch("backward")
                self._backward_start_ns = time.perf_counter_ns()
            else:
                clock.switch(self._before_forward or "unattributed")
        except Exception as exc:
            self._error(exc)

    # -- the optimizer ---------------------------------------------------------------------

    def hook_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Through torch's global step hooks, filtered to ``optimizer``: they run before every
        optimizer's own pre-hooks and after its post-hooks, so the user's step hooks (a
        gradient clipper, a logger) are the optimizer's work."""
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._optimizer = optimizer
        self._handles.append(register_optimizer_step_pre_hook(self._step_pre))
        self._handles.append(register_optimizer_step_post_hook(self._step_post))

    def _step_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if optimizer is not self._optimizer or not self.active:
            return
        try:
            clock = self.clock
            if not clock.running:
                return
            comm = self.comm
            if comm is not None:  # backward has returned
                comm.charge_wait(clock, self._backward_start_ns)
            clock.switch("optimizer")
        except Exception as exc:
            self._error(exc)

    def _step_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if optimizer is not self._optimizer or not self.active:
            return
        try:
            self.clock.switch("unattributed")
        except Exception as exc:
            self._error(exc)

    # -- off -------------------------------------------------------------------------------

    def _error(self, exc: BaseException) -> None:
        self.active = False
        self._on_error(exc)

    def remove(self) -> None:
        """Take every hook off (idempotent)."""
        self.active = False
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()
