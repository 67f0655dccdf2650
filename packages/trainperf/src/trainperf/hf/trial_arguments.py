"""A ``trainperf try`` trial's window and knobs on a Hugging Face ``Trainer``.

A ``trainperf try`` trial on a Hugging Face ``Trainer``: the window of ``TRAINPERF_TRY_WINDOW``
(:mod:`trainperf.core.trial_window`) and its knobs (:mod:`trainperf.core.knobs`), applied by
:class:`~trainperf.hf.callback.PerfCallback`.

- ``dataloader.num_workers`` / ``pin_memory`` / ``persistent_workers`` / ``prefetch_factor``:
  set on the ``TrainingArguments`` in ``on_init_end``, before the Trainer builds its training
  DataLoader from them (``Trainer.train`` reads them then). A callback added later
  (``trainer.add_callback``) never sees ``on_init_end``: the knobs are refused with why.
- every other knob: refused with why (the Trainer fixes its batch size, precision, optimizer
  and compilation from the arguments when it is built, or builds the model itself); the trial
  then ends at once rather than measuring the unchanged run.

Each knob's fate goes to the trial's ``perf/knobs.jsonl`` (rank zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainperf.core.knobs import Knob
from trainperf.recording.knob_effects import KnobLog, KnobNotApplicable

__all__ = ["ARGUMENTS", "KnobNotApplicable", "apply_knobs", "refuse"]

#: ``dataloader.*`` knob -> the ``TrainingArguments`` field the Trainer builds its loader from.
ARGUMENTS = {
    "dataloader.num_workers": "dataloader_num_workers",
    "dataloader.pin_memory": "dataloader_pin_memory",
    "dataloader.persistent_workers": "dataloader_persistent_workers",
    "dataloader.prefetch_factor": "dataloader_prefetch_factor",
}

_WHY = {
    "dataloader.batch_size": "the Trainer fixes its batch size when it is built; change "
    "TrainingArguments(per_device_train_batch_size=...) in the script",
    "optimizer.fused": 'the Trainer builds its optimizer from TrainingArguments.optim; set optim="'
    'adamw_torch_fused" in the script',
}
_OTHER = (
    "on a Hugging Face Trainer trainperf.hf.PerfCallback applies only the dataloader.* knobs "
    "(num_workers, pin_memory, persistent_workers, prefetch_factor) through TrainingArguments; "
    "the Trainer fixes precision, compilation and the model when it is built: make this change "
    "in the script"
)


def _why(knob: Knob) -> str:
    return _WHY.get(knob.name, _OTHER)


def _log(perf_dir: Path, write: bool) -> KnobLog:
    return KnobLog(perf_dir, write, "this Hugging Face Trainer")


def refuse(
    perf_dir: Path, knobs: Sequence[Knob], reason: str | None, write: bool
) -> KnobNotApplicable:
    """Write each of ``knobs`` as not applicable (``reason``, else its own) and return the
    error that ends the trial."""
    log = _log(perf_dir, write)
    if reason is not None:
        return log.refuse(knobs, reason)
    return log.refuse(knobs, _why(knobs[0]) if knobs else "", _why)


def apply_knobs(perf_dir: Path, knobs: Sequence[Knob], args: Any, write: bool) -> None:
    """Set the ``dataloader.*`` ``knobs`` on ``args`` (``TrainingArguments``); raise
    :class:`KnobNotApplicable` (after writing why) for any other knob, before changing any."""
    refused = [k for k in knobs if k.name not in ARGUMENTS]
    if refused:
        raise refuse(perf_dir, refused, None, write)
    log = _log(perf_dir, write)
    for knob in knobs:
        field = ARGUMENTS[knob.name]
        before = getattr(args, field, None)
        setattr(args, field, knob.value)
        if field == "dataloader_num_workers" and not knob.value:
            args.dataloader_prefetch_factor = None  # these two need workers
            args.dataloader_persistent_workers = False
        log.write(knob, "applied", f"TrainingArguments.{field} {before} -> {knob.value}")
