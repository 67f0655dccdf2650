"""What a ``trainperf try`` trial's runtime knobs do, for every adapter.

What a ``trainperf try`` trial's runtime knobs (:mod:`trainperf.core.knobs`) do, whichever
adapter applies them: the knobs' log (``perf/knobs.jsonl``), the error that ends a trial whose
knob the run cannot take, the process-wide ``torch`` knobs and a fused optimizer step. The
adapters (``trainperf.lightning``, ``trainperf.loop``, ``trainperf.hf``) decide when and to what
they apply them; this module is the one copy of how."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from trainperf.core.knobs import Knob
from trainperf.errors import InputError
from trainperf.records.files import RecordWriter
from trainperf.records.try_record import KnobRecord

__all__ = ["KnobLog", "KnobNotApplicable", "KnobRefused", "apply_torch_knob", "fuse_optimizer"]


class KnobNotApplicable(InputError, ValueError):
    """A knob this run cannot take; the message names the knob and why (it ends the trial)."""


class KnobRefused(ValueError):
    """A knob cannot be applied here; the message is why (the adapter turns it into
    :class:`KnobNotApplicable` through :meth:`KnobLog.refuse`)."""


class KnobLog:
    """The knobs' fates in the trial's ``perf/knobs.jsonl``; ``enabled`` on rank zero only
    (every rank applies the same knobs). ``where`` names the run in a refusal ("this run",
    "this plain loop", ...)."""

    def __init__(self, perf_dir: Path, enabled: bool, where: str = "this run") -> None:
        self.path = KnobRecord.path(perf_dir)
        self.enabled = enabled
        self.where = where

    def write(self, knob: Knob, status: str, note: str) -> None:
        if not self.enabled:
            return
        writer = RecordWriter(self.path)
        try:
            writer.write(KnobRecord(knob=knob.setting, status=status, note=note))
        finally:
            writer.close()

    def refuse(
        self, knobs: Sequence[Knob], reason: str, why: Callable[[Knob], str] | None = None
    ) -> KnobNotApplicable:
        """Write each of ``knobs`` as not applicable (``why(knob)`` when given, else ``reason``)
        and return the error that ends the trial, which says ``reason``."""
        for knob in knobs:
            self.write(knob, "not applicable", why(knob) if why is not None else reason)
        names = ", ".join(k.setting for k in knobs)
        return KnobNotApplicable(f"knob {names}: not applicable to {self.where}: {reason}")


def apply_torch_knob(knob: Knob) -> str:
    """Apply a ``torch.threads``, ``torch.matmul_precision`` or ``cudnn.benchmark`` knob to this
    process; what changed."""
    if knob.name == "torch.threads":
        before = torch.get_num_threads()
        torch.set_num_threads(int(knob.value))
        return f"torch threads {before} -> {torch.get_num_threads()}"
    if knob.name == "torch.matmul_precision":
        before_p = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(str(knob.value))
        return f"float32 matmul precision {before_p} -> {knob.value}"
    before_b = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = bool(knob.value)
    return f"cudnn.benchmark {before_b} -> {knob.value}"


def fuse_optimizer(optimizer: torch.optim.Optimizer) -> str:
    """Make ``optimizer`` (Adam, AdamW or SGD, not stepped yet) step fused, as its constructor
    does for ``fused=True`` (set on the object itself, so schedulers built on it keep their
    reference); what changed, or :class:`KnobRefused` with why it cannot be."""
    try:  # torch's own list (private; CUDA and CPU have fused kernels since torch 2.4)
        from torch.optim.optimizer import _get_fused_kernels_supported_devices

        devices = set(_get_fused_kernels_supported_devices())
    except ImportError:
        devices = {"cuda", "cpu"}
    name = type(optimizer).__name__
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD):
        raise KnobRefused(f"the optimizer is {name}: only Adam, AdamW and SGD fuse")
    if optimizer.state:
        raise KnobRefused(f"{name} has stepped already; fused must be set before its first step")
    for group in optimizer.param_groups:
        if group.get("differentiable"):
            raise KnobRefused(f"{name} is differentiable=True, which fused does not support")
        for p in group["params"]:
            if p.device.type not in devices or not torch.is_floating_point(p):
                raise KnobRefused(
                    f"{name} has a {p.dtype} parameter on {p.device}; fused kernels take "
                    f"floating-point parameters on {', '.join(sorted(devices))}"
                )
    if all(group.get("fused") for group in optimizer.param_groups):
        return f"{name} (already fused)"
    for group in [*optimizer.param_groups, optimizer.defaults]:
        group["fused"] = True
        group["foreach"] = False  # fused and foreach exclude each other
    # what the constructor sets for fused=True: GradScaler hands it the scale and found_inf
    # instead of reading found_inf on the host; SGD checks devices at its first step
    optimizer._step_supports_amp_scaling = True  # type: ignore[attr-defined]
    if isinstance(optimizer, torch.optim.SGD):
        optimizer._need_device_dtype_check_for_fused = True
    return f"{name} fused ({len(optimizer.param_groups)} parameter groups)"
