"""The try's rule: when a candidate change is recommended.

A pair is two trials run back to back, the unchanged command (A) and the candidate (B), their
order alternating from pair to pair (A B, B A, A B, ...) so a steady drift of the machine cancels.
The ratio is ``speed(B) / speed(A)`` (above 1: the change is faster); the speed-up is the median
of the ratios with its bootstrap interval (:func:`ocr.perf.significance.paired_ratios`).

The outcome is :func:`ocr.perf.significance.ratio_outcome` against the bar
:data:`RECOMMEND_ABOVE`, in the toolkit's words (:class:`~ocr.perf.significance.Outcome`), with
fewer than :data:`MIN_PAIRS` pairs ``inconclusive``. What the try does with it
(:func:`status`): an ``improvement`` (the interval's low end above 1.03: faster by more than 3 %,
with 95 % confidence) is ``recommended``; every other outcome is its own word.
"""

from __future__ import annotations

from ocr.perf.significance import Outcome, PairedRatios, ratio_outcome

__all__ = ["MIN_PAIRS", "RECOMMENDED", "RECOMMEND_ABOVE", "outcome", "status"]

#: Smallest speed-up that counts: the interval's low end must be above it to recommend.
RECOMMEND_ABOVE = 1.03
#: Fewer pairs than this are inconclusive whatever they show.
MIN_PAIRS = 3
#: The try's status of an improvement: the change is worth making.
RECOMMENDED = "recommended"


def outcome(s: PairedRatios) -> Outcome:
    """What the pairs ``s`` say about the candidate (module docstring)."""
    return ratio_outcome(s.low, s.high, RECOMMEND_ABOVE, enough=s.pairs >= MIN_PAIRS)


def status(s: PairedRatios) -> str:
    """The try's status of ``s``: ``recommended`` for an improvement, else the outcome's word."""
    found = outcome(s)
    return RECOMMENDED if found is Outcome.IMPROVEMENT else str(found)
