"""The figures every verdict rule uses: evidence rounding, a score from seconds, the world size."""

from __future__ import annotations

import math

from ocr.perf.report.load import RunData


def rounded(x: float | None, nd: int = 1) -> float | None:
    """``x`` rounded to ``nd`` places for evidence; ``None`` when missing or not finite."""
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def score(seconds: float, total_s: float) -> float:
    """``seconds`` as a share (%) of the run's recorded wall time ``total_s``, to 0.1."""
    return round(100.0 * seconds / total_s, 1) if total_s > 0 else 0.0


def world_size(run: RunData) -> int:
    """Processes of the run (DDP ranks), from its epoch records; 1 without them."""
    return max((e.world_size for e in run.epochs), default=1)
