"""The compute-bound rule: the model's own work dominates a stage, and how far it runs from the
machine's measured peak (MFU) when the run counted its FLOPs."""

from __future__ import annotations

from typing import Any

from ocr.perf.advice import candidates_for
from ocr.perf.candidates import Candidate
from ocr.perf.findings import Finding, threshold
from ocr.perf.report.load import RunData
from ocr.perf.report.stages import StageSummary
from ocr.perf.report.verdict.figures import rounded, score, world_size
from ocr.perf.report.verdict.settings import Settings


def compute_bound(s: StageSummary, run: RunData, adv: Settings, total_s: float) -> Finding | None:
    phases: tuple[str, ...] = (
        ("forward", "backward", "optimizer") if s.stage == "train" else ("forward",)
    )
    secs = sum(s.phases_s.get(p, 0.0) for p in phases)
    pct = 100.0 * secs / s.wall_s if s.wall_s > 0 else 0.0
    if pct < threshold("compute_pct"):
        return None
    ms_per_batch = 1000.0 * secs / max(s.num_batches, 1)
    rate = s.samples_per_sec
    canvas = adv.name(adv.key("canvas_size"), "the input size")
    batch = adv.name(adv.key("batch_size", stage=s.stage), "the batch size", s.batch_size)
    widths = adv.key("widths", parent="backbone")
    smaller_model = f"a narrower backbone ({adv.name(widths, '')})" if widths else "a smaller model"
    evidence: dict[str, Any] = {
        "compute_pct": rounded(pct),
        "compute_s": rounded(secs, 3),
        "compute_ms_per_batch": rounded(ms_per_batch, 2),
        "samples_per_sec": rounded(rate, 2),
        "device": run.device,
    }
    limits = {"compute_pct": threshold("compute_pct")}
    title = (
        f"compute-bound: {pct:.0f} % of {s.label} wall time is "
        f"{' / '.join(phases)} ({ms_per_batch:.0f} ms/batch, {rate:.1f} samples/s)"
    )
    suggestion: str | None = None
    # How far from the machine's limit: the compute phases' achieved FLOP/s over the measured
    # peak (samples x FLOPs per sample / compute seconds), when the run counted its FLOPs.
    limit = _compute_mfu(s, run, secs)
    if limit is not None:
        mfu_pct, stage_mfu_pct, achieved, peak = limit
        limits["compute_headroom_mfu_pct"] = threshold("compute_headroom_mfu_pct")
        evidence.update(
            compute_mfu_pct=rounded(mfu_pct, 1),
            stage_mfu_pct=rounded(stage_mfu_pct, 1),
            compute_gflops_per_sec=rounded(achieved / 1e9, 2),
            peak_gflops_per_sec=rounded(peak / 1e9, 2),
        )
        where = (
            f"how far from the machine's limit: while computing, the model runs at "
            f"{mfu_pct:.0f} % of this host's measured peak ({achieved / 1e9:.3g} of "
            f"{peak / 1e9:.3g} GFLOP/s; {stage_mfu_pct:.0f} % over the whole {s.label} epoch)"
        )
        if mfu_pct >= threshold("compute_headroom_mfu_pct"):
            title = (
                f"compute-bound near the machine's limit: {pct:.0f} % of {s.label} wall "
                f"time is {' / '.join(phases)} at {mfu_pct:.0f} % of the measured peak"
            )
            suggestion = (
                f"{where}: no headroom for faster kernels (compile, channels_last, threads "
                f"gain little here); only less work per sample (smaller {canvas}, "
                f"{smaller_model}) or faster hardware makes this stage faster."
            )
        headroom = f"{where}, up to {100.0 / max(mfu_pct, 1e-9):.1f}x headroom: "
        has_room: bool | None = True
    else:
        # Without FLOPs the distance to the limit is unknown: the kernel changes below are
        # guesses until `ocr-perf try` measures them.
        headroom = "headroom unknown (no FLOPs recorded, so no MFU): "
        has_room = None
    candidates: list[Candidate] = []
    if suggestion is None:  # room for faster kernels, or unknown
        if run.device == "cpu":
            threads = f"{adv.cpu_count} cores here" if adv.cpu_count else "the physical cores"
            suggestion = headroom + (
                f"the model's own compute dominates on CPU: make it cheaper (smaller {canvas}, "
                f"{smaller_model}), try torch.compile and channels_last, and give torch threads "
                f"{threads} (the DataLoader workers mostly wait while compute dominates)."
            )
        else:
            precision = adv.name(adv.key("precision", prefer=("trainer",)), "the precision")
            suggestion = headroom + (
                f"the GPU work dominates: mixed precision ({precision} -> 16-mixed or "
                f"bf16-mixed), a larger {batch} if memory allows, torch.compile and "
                "channels_last."
            )
        candidates = candidates_for("compute_bound", adv.facts(s, has_room))
    return Finding(
        id="compute_bound",
        severity="info",
        score=score(secs, total_s),
        title=title,
        evidence=evidence,
        threshold=limits,
        suggestion=suggestion,
        stage=s.stage,
        candidates=candidates,
    )


def _compute_mfu(
    s: StageSummary, run: RunData, compute_s: float
) -> tuple[float, float, float, float] | None:
    """(MFU % of the compute phases, MFU % of the whole stage, achieved FLOP/s while computing,
    measured peak FLOP/s of all ranks) of a stage, or ``None`` when no FLOPs were recorded."""
    from ocr.perf.mfu import stage_flops_per_sample, stage_utilisation

    per_sample = stage_flops_per_sample(run.run_info, s.stage)
    whole = stage_utilisation(run.run_info, run.epochs, s.stage)
    if per_sample is None or whole is None or whole.mfu is None or compute_s <= 0:
        return None
    peak = whole.flops_per_sec / whole.mfu  # the measured peak x world size
    # StageSummary sums this rank's samples and phases: this rank's compute rate.
    world = world_size(run)
    achieved = per_sample * s.samples / compute_s
    return 100.0 * achieved / (peak / world), 100.0 * whole.mfu, achieved, peak / world
