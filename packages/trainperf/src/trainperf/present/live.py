"""The one-line phase split shown while a run trains (progress bars, ``trainperf watch``).

``forward 52% backward 41% data_wait 3% · 17.0 samples/s``: the epoch's largest phases so far
(the clock's own names, as in the report and the loggers), then the throughput, then the live
verdict word once there is one. One function makes the line, so the progress bar and the watch
view never word the same figures two ways.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainperf.core.findings import input_bound_severity, threshold

#: Phases shown in the line (the largest first); the rest are left out.
TOP_PHASES = 3
#: A phase under this share of the wall time is not shown (it would read "0%").
MIN_SHARE = 0.005


def phase_split(phases_s: Mapping[str, float], *, top: int = TOP_PHASES) -> str:
    """``forward 52% backward 41% data_wait 3%``: the ``top`` largest phases of ``phases_s``
    (seconds) as shares of their sum; ``""`` when nothing was timed yet."""
    total = sum(v for v in phases_s.values() if v > 0)
    if total <= 0:
        return ""
    largest = sorted(
        ((name, s) for name, s in phases_s.items() if s / total >= MIN_SHARE),
        key=lambda item: -item[1],
    )[:top]
    return " ".join(f"{name} {100 * s / total:.0f}%" for name, s in largest)


def live_line(
    phases_s: Mapping[str, float],
    samples_per_sec: float | None,
    verdict: str | None = None,
    *,
    world_size: int = 1,
) -> str:
    """The line (module doc), each part only when known. ``samples_per_sec`` is all ranks' rate,
    the one the epoch records and the report state; a rate measured on one rank of
    ``world_size`` is scaled to all ranks (DDP ranks step together, one batch each) and says so:
    ``14.6 samples/s (2 ranks)``."""
    parts = [phase_split(phases_s)]
    if samples_per_sec is not None and samples_per_sec > 0:
        ranks = f" ({world_size} ranks)" if world_size > 1 else ""
        parts.append(f"{samples_per_sec * world_size:.1f} samples/s{ranks}")
    if verdict:
        parts.append(verdict)
    return " · ".join(p for p in parts if p)


def live_verdict(stage: str, phases_s: Mapping[str, float], straggler_rank: int | None) -> str:
    """The verdict word so far, by the report's thresholds: ``straggler rank N`` (the last
    gathered epoch's), ``input-bound`` (data wait at the input-bound share), ``compute-bound``
    (forward / backward / optimizer at the compute share), or ``""`` (not judged)."""
    if straggler_rank is not None:
        return f"straggler rank {straggler_rank}"
    total = sum(v for v in phases_s.values() if v > 0)
    if total <= 0:
        return ""
    if input_bound_severity(100 * phases_s.get("data_wait", 0.0) / total) is not None:
        return "input-bound"
    compute = ("forward", "backward", "optimizer") if stage == "train" else ("forward",)
    if 100 * sum(phases_s.get(p, 0.0) for p in compute) / total >= threshold("compute_pct"):
        return "compute-bound"
    return ""
