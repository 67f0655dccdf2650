"""Model FLOPs utilisation (MFU): achieved FLOP/s of a stage window (FLOPs per sample from
``ocr.perf.flops`` x samples / wall time) against the measured peak (``ocr.perf.peak``).

Plain arithmetic on recorded figures, importing neither torch nor Lightning, so the report and
the CLI read it cheaply. The figures come from ``perf/run.json``'s ``"flops"`` object, written by
``ThroughputMonitorCallback``: ``per_sample`` (stage -> FLOPs per sample), ``peak_flops_per_sec``
(measured, per rank) and ``spec_peak_flops_per_sec`` (GPU data sheet, or null).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Utilisation",
    "epoch_utilisation",
    "stage_flops_per_sample",
    "stage_utilisation",
    "utilisation",
]


@dataclass(frozen=True)
class Utilisation:
    """Achieved FLOP/s of a stage window against the measured peak.

    Args:
        flops_per_sec: FLOPs per sample x samples (all ranks) / wall seconds.
        mfu: ``flops_per_sec`` over the measured peak of all ranks (peak x world size), 0-1;
            ``None`` without a peak.
        spec_mfu: the same over the data-sheet peak (GPU only), or ``None``.
    """

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


def stage_flops_per_sample(info: Mapping[str, Any] | None, stage: str) -> float | None:
    """FLOPs per sample of ``stage`` from ``perf/run.json``'s ``"flops"`` object (written by
    ``ThroughputMonitorCallback``), or ``None`` when not recorded."""
    flops = (info or {}).get("flops")
    if not isinstance(flops, Mapping):
        return None
    value = (flops.get("per_sample") or {}).get(stage)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _peaks(info: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    flops = (info or {}).get("flops")
    if not isinstance(flops, Mapping):
        return None, None

    def positive(value: Any) -> float | None:
        return float(value) if isinstance(value, int | float) and value > 0 else None

    return positive(flops.get("peak_flops_per_sec")), positive(flops.get("spec_peak_flops_per_sec"))


def epoch_utilisation(
    info: Mapping[str, Any] | None, record: Mapping[str, Any]
) -> Utilisation | None:
    """:class:`Utilisation` of one ``perf/epochs.jsonl`` record, from ``perf/run.json``'s
    ``"flops"`` object (``None`` when either lacks what it needs)."""
    per_sample = stage_flops_per_sample(info, str(record.get("stage")))
    peak, spec = _peaks(info)
    samples = record.get("global_samples") or record.get("samples") or 0
    wall = record.get("global_wall_s") or record.get("wall_s") or 0.0
    try:
        return utilisation(
            per_sample,
            float(samples),
            float(wall),
            peak,
            world_size=int(record.get("world_size") or 1),
            spec_peak_flops_per_sec=spec,
        )
    except (TypeError, ValueError):
        return None


def stage_utilisation(
    info: Mapping[str, Any] | None, records: Iterable[Mapping[str, Any]], stage: str
) -> Utilisation | None:
    """:class:`Utilisation` of all of ``stage``'s epochs together (total FLOPs over total wall
    time), ``None`` when not recorded."""
    chosen = [r for r in records if r.get("stage") == stage]
    per_sample = stage_flops_per_sample(info, stage)
    if not chosen or per_sample is None:
        return None
    peak, spec = _peaks(info)
    samples = sum(float(r.get("global_samples") or r.get("samples") or 0) for r in chosen)
    wall = sum(float(r.get("global_wall_s") or r.get("wall_s") or 0.0) for r in chosen)
    world = max(int(r.get("world_size") or 1) for r in chosen)
    return utilisation(
        per_sample, samples, wall, peak, world_size=world, spec_peak_flops_per_sec=spec
    )
