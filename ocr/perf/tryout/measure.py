"""A trial's speed, read from the perf files its own run wrote (``perf/epochs.jsonl``)."""

from __future__ import annotations

import os

from ocr.perf.records import EpochRecord, read_records
from ocr.perf.stage import Stage

__all__ = ["stage_speed"]


def stage_speed(
    run_dir: str | os.PathLike[str], stage: Stage, skip: int, batches: int | None
) -> float | None:
    """Samples per second of ``stage`` (``train``, ``val``, ``test``) over its batches in file
    order, the first ``skip`` left out, at most ``batches`` (``None``: all). A batch's samples
    are its epoch's mean (``samples / num_batches``: a short last batch counts fairly). ``None``
    when the files hold no measured batch of the stage."""
    records = read_records(EpochRecord.path(run_dir), EpochRecord)
    times: list[float] = []
    samples: list[float] = []
    for record in records:
        if record.stage != stage:
            continue
        kept = [t for t in record.batch_times_s if t is not None]
        n = record.num_batches
        if record.batch_times_stride != 1 or not kept or n <= 0:
            continue  # a thinned epoch's list does not say which batches it kept
        per_batch = record.samples / n
        times.extend(kept)
        samples.extend([per_batch] * len(kept))
    end = None if batches is None else skip + batches
    measured_t, measured_s = times[skip:end], samples[skip:end]
    total = sum(measured_t)
    if not measured_t or total <= 0:
        return None
    return sum(measured_s) / total
