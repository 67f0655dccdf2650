"""Epoch reports through Lightning's loggers.

Epoch reports through Lightning's loggers (the neutral parts of an epoch report live in
``trainperf.recording.subscribers``)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import lightning as L


def log_to_loggers(
    trainer: L.Trainer, metrics: Mapping[str, float | None], step: int | None = None
) -> None:
    """Log ``metrics`` through every logger of ``trainer`` at ``step`` (default
    ``trainer.global_step``), from rank zero only; non-finite and None values (an empty
    stage's statistics) are left out."""
    loggers = trainer.loggers
    if not loggers or not trainer.is_global_zero:
        return
    clean = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)}
    if not clean:
        return
    if step is None:
        step = trainer.global_step
    for logger in loggers:
        logger.log_metrics(clean, step=step)
