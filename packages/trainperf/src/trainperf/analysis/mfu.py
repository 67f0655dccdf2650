"""Model FLOPs utilisation (MFU) of a stage window against the measured peak.

Model FLOPs utilisation (MFU): achieved FLOP/s of a stage window (FLOPs per sample from
``trainperf.probe.flops`` x samples / wall time) against the measured peak
(``trainperf.probe.peak_flops``).

Plain arithmetic on recorded figures, importing neither torch nor Lightning, so the report and
the CLI read it cheaply. The figures come from ``perf/run.json``'s ``"flops"`` object
(:class:`~trainperf.records.run_record.FlopsInfo`), written by ``ThroughputMonitorCallback``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainperf.core.stage import Stage
from trainperf.records.epochs import EpochRecord
from trainperf.records.run_record import RunRecord


@dataclass(frozen=True)
class Utilisation:
    """Achieved FLOP/s of a stage window (FLOPs per sample x samples of all ranks / wall
    seconds), and as ``mfu`` a share (0-1) of the measured peak of all ranks (peak x world size;
    ``None`` without a peak), as ``spec_mfu`` of the data-sheet peak (GPU only)."""

    flops_per_sec: float
    mfu: float | None
    spec_mfu: float | None = None


def utilisation(
    flops_per_sample: float | None,
    samples: float,
    wall_s: float,
    peak_flops_per_sec: float | None,
    *,
    world_size: int = 1,
    spec_peak_flops_per_sec: float | None = None,
) -> Utilisation | None:
    """:class:`Utilisation` of a window of ``samples`` samples in ``wall_s`` seconds over
    ``world_size`` ranks; ``None`` when the FLOPs per sample are unknown or the window is
    empty."""
    if not flops_per_sample or wall_s <= 0 or samples <= 0:
        return None
    rate = flops_per_sample * samples / wall_s
    ranks = max(int(world_size), 1)

    def share(peak: float | None) -> float | None:
        return rate / (peak * ranks) if peak and peak > 0 else None

    return Utilisation(rate, share(peak_flops_per_sec), share(spec_peak_flops_per_sec))


def _positive(value: float | None) -> float | None:
    return float(value) if value is not None and value > 0 else None


def stage_flops_per_sample(info: RunRecord | None, stage: Stage) -> float | None:
    """FLOPs per sample of ``stage``, or ``None`` when not recorded."""
    if info is None or info.flops is None:
        return None
    return _positive(info.flops.per_sample.get(stage))


def epoch_utilisation(info: RunRecord | None, record: EpochRecord) -> Utilisation | None:
    """:class:`Utilisation` of one ``perf/epochs.jsonl`` record (``None`` when either record
    lacks what it needs)."""
    return stage_utilisation(info, [record], record.stage)


def stage_utilisation(
    info: RunRecord | None, records: Iterable[EpochRecord], stage: Stage
) -> Utilisation | None:
    """:class:`Utilisation` of all of ``stage``'s epochs together (total FLOPs over total wall
    time), ``None`` when not recorded."""
    chosen = [r for r in records if r.stage == stage]
    per_sample = stage_flops_per_sample(info, stage)
    if not chosen or per_sample is None or info is None or info.flops is None:
        return None
    return utilisation(
        per_sample,
        sum(r.all_samples for r in chosen),
        sum(r.all_wall_s for r in chosen),
        _positive(info.flops.peak_flops_per_sec),
        world_size=max(r.world_size for r in chosen),
        spec_peak_flops_per_sec=_positive(info.flops.spec_peak_flops_per_sec),
    )
