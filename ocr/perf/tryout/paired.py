"""The try's rule: when a candidate change is recommended.

A pair is two trials run back to back, the unchanged command (A) and the candidate (B), their
order alternating from pair to pair (A B, B A, A B, ...) so a steady drift of the machine cancels.
The ratio is ``speed(B) / speed(A)`` (above 1: the change is faster); the speed-up is the median
of the ratios with its bootstrap interval (:func:`ocr.perf.significance.paired_ratios`).
"""

from __future__ import annotations

from ocr.perf.significance import Outcome, PairedRatios, ratio_outcome

__all__ = ["MIN_PAIRS", "RECOMMEND_ABOVE", "status"]

#: Smallest speed-up that counts: the interval's low end must be above it to recommend.
RECOMMEND_ABOVE = 1.03
#: Fewer pairs than this are inconclusive whatever they show.
MIN_PAIRS = 3


def status(s: PairedRatios) -> str:
    """``recommended`` when :func:`~ocr.perf.significance.ratio_outcome` finds an improvement
    (the 95 % interval's low end above :data:`RECOMMEND_ABOVE`, with at least :data:`MIN_PAIRS`
    pairs), else that outcome's word (``inconclusive``, ...)."""
    found = ratio_outcome(s.low, s.high, RECOMMEND_ABOVE, enough=s.pairs >= MIN_PAIRS)
    return "recommended" if found is Outcome.IMPROVEMENT else str(found)
