"""Figures from a run directory (samples/s, data-wait share, ms per batch by phase, MFU) and the
CUDA-event phase times against synchronized ones."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ocr.perf.clock import PHASES
from ocr.perf.mfu import stage_utilisation
from ocr.perf.records import EpochRecord, RunRecord
from ocr.perf.report.load import load_run
from ocr.perf.stage import Stage
from ocr.perf.trace.agreement import ABSOLUTE_FLOOR_PCT_OF_STEP, AGREEMENT_TOLERANCE_PCT


def kept_epochs(
    records: Sequence[EpochRecord], stage: Stage, skip: Iterable[int]
) -> list[EpochRecord]:
    """``stage``'s records minus epoch 0 (warm-up) and the ``skip`` epochs (profiled); all of the
    stage's records when that leaves none."""
    mine = [r for r in records if r.stage == stage]
    dropped = {0, *skip}
    kept = [r for r in mine if r.epoch not in dropped]
    return kept or mine


def stage_figures(
    records: Sequence[EpochRecord], info: RunRecord | None, stage: Stage
) -> dict[str, Any] | None:
    """samples/s, data-wait share, ms per batch by phase (host clock and CUDA events) and MFU of
    ``records`` (one stage's epochs), ``None`` when there are none."""
    if not records:
        return None
    wall = sum(r.all_wall_s for r in records)
    samples = sum(r.all_samples for r in records)
    batches = sum(r.num_batches for r in records)
    data_wait = sum(r.phases_s.get("data_wait", 0.0) for r in records)

    def per_batch(key: str) -> dict[str, float]:
        total: dict[str, float] = {}
        for r in records:
            for phase, s in getattr(r, key).items():
                if s is not None:
                    total[phase] = total.get(phase, 0.0) + s
        return {p: 1e3 * s / batches for p, s in total.items()} if batches else {}

    util = stage_utilisation(info, records, stage)
    return {
        "epochs": [r.epoch for r in records],
        "batches": batches,
        "samples_per_s": samples / wall if wall > 0 else None,
        "data_wait_share": data_wait / wall if wall > 0 else None,
        "host_ms": per_batch("phases_s"),
        "event_ms": per_batch("gpu_phases_s"),
        "flops_per_s": None if util is None else util.flops_per_sec,
        "mfu": None if util is None else util.mfu,
        "mfu_spec": None if util is None else util.spec_mfu,
    }


def run_figures(run_dir: Path, profiled: Iterable[int] = ()) -> dict[str, Any]:
    """Per stage (train, val) :func:`stage_figures` of ``run_dir``, plus the recorded device and
    peaks."""
    data = load_run(run_dir)
    info = data.run_info
    profiled = list(profiled)
    flops = info.flops if info is not None else None
    return {
        "device": info.device if info is not None else None,
        "cuda_devices": info.cuda_devices if info is not None else None,
        "peak_flops_per_s": flops.peak_flops_per_sec if flops is not None else None,
        "spec_peak_flops_per_s": flops.spec_peak_flops_per_sec if flops is not None else None,
        "train": stage_figures(kept_epochs(data.epochs, Stage.TRAIN, profiled), info, Stage.TRAIN),
        "val": stage_figures(kept_epochs(data.epochs, Stage.VAL, ()), info, Stage.VAL),
    }


def compare_phase_times(
    events_ms: Mapping[str, float],
    synced_ms: Mapping[str, float],
    tolerance_pct: float = AGREEMENT_TOLERANCE_PCT,
) -> list[dict[str, Any]]:
    """CUDA-event ms per batch against synchronized ms per batch, per clock phase: a phase agrees
    when the difference is at most ``tolerance_pct`` of the larger figure, or below
    :data:`~ocr.perf.trace.agreement.ABSOLUTE_FLOOR_PCT_OF_STEP` of the synchronized step (the
    rule the trace-vs-clock agreement uses)."""
    step = sum(synced_ms.values())
    floor = step * ABSOLUTE_FLOOR_PCT_OF_STEP / 100.0
    rows = []
    for phase in PHASES:
        e, s = float(events_ms.get(phase, 0.0)), float(synced_ms.get(phase, 0.0))
        big = max(abs(e), abs(s))
        pct = 100.0 * (e - s) / big if big > 0 else None
        agree = abs(e - s) <= floor or (pct is not None and abs(pct) <= tolerance_pct)
        rows.append(
            {"phase": phase, "events_ms": e, "synced_ms": s, "diff_pct": pct, "agree": agree}
        )
    return rows
