"""A ``trainperf try`` trial on a plain loop: the window of ``TRAINPERF_TRY_WINDOW``
(:mod:`trainperf.core.trial_window`) and its runtime knobs (:mod:`trainperf.core.knobs`),
applied by :class:`~trainperf.loop.plain_monitor.Monitor` through public torch API only.

- ``dataloader.*`` knobs: ``mon.train(loader)`` rebuilds the training ``DataLoader`` with the
  changed arguments (same dataset, sampler or batch sampler, collate function and the other
  arguments read from the live loader). Only a ``torch.utils.data.DataLoader`` itself: a
  subclass's constructor may take other arguments, so it is refused with why.
- ``torch.*`` / ``cudnn.*`` knobs: process-wide settings, at the Monitor's start.
- ``optimizer.fused``: the optimizer handed to the Monitor, before its first step.
- other knobs (``model.*``, ``trainer.*``): not applicable to a plain loop (a Monitor does not
  own the model's construction or its precision), said plainly in the trial's
  ``perf/knobs.jsonl``; the trial then ends at once rather than measuring the unchanged loop.

The window: the training epochs stop after ``warmup + batches`` training batches (``mon.train``
yields no more), validation and test yield nothing unless the window keeps ``val``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader

from trainperf.core.knobs import Knob
from trainperf.errors import InputError
from trainperf.records.files import RecordWriter
from trainperf.records.kinds import KnobRecord

__all__ = ["KnobLog", "KnobNotApplicable", "apply_process_knobs", "rebuild_loader"]

#: The knob targets a plain loop's Monitor applies.
APPLICABLE_TARGETS = frozenset({"loader", "torch", "optimizer"})


class KnobNotApplicable(InputError, ValueError):
    """A knob a plain loop cannot take; the message names the knob and why."""


class KnobLog:
    """The knobs' fates in the trial's ``perf/knobs.jsonl`` (rank zero only)."""

    def __init__(self, perf_dir: Path, enabled: bool) -> None:
        self.path = KnobRecord.path(perf_dir)
        self.enabled = enabled

    def write(self, knob: Knob, status: str, note: str) -> None:
        if not self.enabled:
            return
        writer = RecordWriter(self.path)
        try:
            writer.write(KnobRecord(knob=knob.setting, status=status, note=note))
        finally:
            writer.close()

    def refuse(self, knobs: Sequence[Knob], reason: str) -> KnobNotApplicable:
        for knob in knobs:
            self.write(knob, "not applicable", reason)
        names = ", ".join(k.setting for k in knobs)
        return KnobNotApplicable(f"knob {names}: not applicable to this plain loop: {reason}")


def _torch_knob(knob: Knob) -> str:
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


def _fuse(optimizer: torch.optim.Optimizer | None) -> str:
    """``optimizer`` (Adam, AdamW or SGD, not stepped yet) set to step fused, as its constructor
    does for ``fused=True``; ``ValueError`` with why it cannot be."""
    if optimizer is None:
        raise ValueError("the Monitor was given no optimizer")
    name = type(optimizer).__name__
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD):
        raise ValueError(f"the optimizer is {name}: only Adam, AdamW and SGD fuse")
    if optimizer.state:
        raise ValueError(f"{name} has stepped already; fused must be set before its first step")
    for group in optimizer.param_groups:
        if group.get("differentiable"):
            raise ValueError(f"{name} is differentiable=True, which fused does not support")
        for p in group["params"]:
            if not torch.is_floating_point(p):
                raise ValueError(f"{name} has a {p.dtype} parameter; fused takes floating point")
    for group in [*optimizer.param_groups, optimizer.defaults]:
        group["fused"] = True
        group["foreach"] = False  # fused and foreach exclude each other
    optimizer._step_supports_amp_scaling = True  # type: ignore[attr-defined]
    if isinstance(optimizer, torch.optim.SGD):
        optimizer._need_device_dtype_check_for_fused = True
    return f"{name} fused ({len(optimizer.param_groups)} parameter groups)"


def apply_process_knobs(
    knobs: Sequence[Knob], optimizer: torch.optim.Optimizer | None, log: KnobLog
) -> None:
    """Apply the ``torch`` and ``optimizer`` knobs now; :class:`KnobNotApplicable` (after
    writing why) for a knob a plain loop cannot take. Loader knobs wait for ``mon.train``."""
    refused = [k for k in knobs if k.spec.target not in APPLICABLE_TARGETS]
    if refused:
        raise log.refuse(
            refused,
            "on a plain loop trainperf.loop.Monitor applies only dataloader.*, torch.*, "
            "cudnn.benchmark and optimizer.fused knobs (it does not build the model or choose "
            "its precision); make this change in the script itself",
        )
    for knob in knobs:
        try:
            if knob.spec.target == "torch":
                note = _torch_knob(knob)
            elif knob.spec.target == "optimizer":
                note = _fuse(optimizer) if knob.value else "optimizer left as it is"
            else:
                continue
        except ValueError as exc:
            raise log.refuse([knob], str(exc)) from exc
        log.write(knob, "applied", note)


#: DataLoader constructor arguments read back from a live loader (beyond dataset and batching).
_COPIED = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


def rebuild_loader(loader: object, knobs: Sequence[Knob]) -> tuple[DataLoader[Any], str]:
    """A new ``DataLoader`` like ``loader`` with the ``dataloader.*`` ``knobs``' values, and a
    note of what changed; ``ValueError`` with why it cannot be rebuilt."""
    if type(loader) is not DataLoader:
        what = type(loader).__name__
        raise ValueError(
            f"the training loader is a {what}, not a torch.utils.data.DataLoader: its "
            "constructor's arguments cannot be read back"
        )
    kwargs: dict[str, Any] = {
        name: getattr(loader, name) for name in _COPIED if hasattr(loader, name)
    }
    batch_sampler = loader.batch_sampler
    if batch_sampler is None:  # batch_size=None: the dataset makes the batches
        kwargs.update(batch_size=None, sampler=loader.sampler)
        custom = "the dataset (batch_size=None)"
    elif type(batch_sampler) is BatchSampler:
        kwargs.update(
            batch_size=batch_sampler.batch_size,
            sampler=batch_sampler.sampler,
            drop_last=batch_sampler.drop_last,
        )
        custom = ""
    else:
        kwargs["batch_sampler"] = batch_sampler  # the user's own object, not a copy
        custom = type(batch_sampler).__name__
    notes = []
    for knob in knobs:
        field = knob.name.split(".", 1)[1]
        if field == "batch_size" and (custom or batch_sampler is None):
            raise ValueError(f"the training loader's batches are made by {custom}, not batch_size")
        notes.append(f"{field} {kwargs.get(field)} -> {knob.value}")
        kwargs[field] = knob.value
    if not kwargs.get("num_workers"):  # these two need workers
        kwargs["prefetch_factor"] = None
        kwargs["persistent_workers"] = False
    elif kwargs.get("prefetch_factor") is None:
        kwargs["prefetch_factor"] = 2
    try:
        new = DataLoader(loader.dataset, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"DataLoader does not take {', '.join(notes)}: {exc}") from exc
    return new, "training DataLoader: " + ", ".join(notes)
