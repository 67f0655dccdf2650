"""A ``trainperf try`` trial's window and knobs on a plain loop.

A ``trainperf try`` trial on a plain loop: the window of ``TRAINPERF_TRY_WINDOW``
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
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader

from trainperf.core.knobs import Knob
from trainperf.recording.knob_effects import (
    KnobLog,
    KnobNotApplicable,
    apply_torch_knob,
    fuse_optimizer,
)

__all__ = ["KnobLog", "KnobNotApplicable", "apply_process_knobs", "rebuild_loader"]

#: The knob targets a plain loop's Monitor applies.
APPLICABLE_TARGETS = frozenset({"loader", "torch", "optimizer"})


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
                note = apply_torch_knob(knob)
            elif knob.spec.target == "optimizer":
                if not knob.value:
                    note = "optimizer left as it is"
                elif optimizer is None:
                    raise ValueError("the Monitor was given no optimizer")
                else:
                    note = fuse_optimizer(optimizer)
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
