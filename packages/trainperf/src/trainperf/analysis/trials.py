"""What a ``trainperf try`` session found, read back, and how a measured change is decided.

It reads the last session's records of the run's ``perf/try.jsonl``, decides each change
(:func:`measure`, :func:`status`) and says the change to make (:func:`paste_line`: the config
overrides; :func:`code_lines`: runtime knobs as changes to one's own code). The session that runs
the trials is :mod:`trainperf.cli.trial.session`.

How a change is decided: a pair (the unchanged command and the changed one, back to back) is
the unit of evidence; its ratio ``speed(changed) / speed(unchanged)`` is one value, however many
batches each trial timed. The speed-up is the geometric mean of the pairs' ratios with a
Student's t interval on their logarithms (valid for three pairs, where a bootstrap is just the
range of the three). A change is ``recommended`` when the interval lies above
:data:`RECOMMEND_ABOVE`, a ``regression`` when it lies below ``1 / RECOMMEND_ABOVE``, ``no
significant change`` when it lies between the two, else ``inconclusive``; never with fewer than
:data:`MIN_PAIRS` pairs. The session may decide a change at each of :func:`looks` (it stops
measuring a decided change and gives its pairs to the others), so each look's interval is at
``1 - ALPHA / len(looks)`` (Bonferroni): a change that changes nothing comes out ``recommended``
or ``regression`` in at most :data:`~trainperf.core.significance.ALPHA` of sessions whatever
look decides it (``benchmarks/try_calibration.py`` measures the rate under realistic noise).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from trainperf.core.knobs import KNOB_PREFIX, apply_lines, knobs_of
from trainperf.core.significance import ALPHA, Outcome, PairedRatios, paired_ratios, ratio_outcome
from trainperf.records.files import read_records
from trainperf.records.framework_info import FrameworkInfo
from trainperf.records.try_record import TryRecord

__all__ = [
    "LOOK_AT",
    "MIN_PAIRS",
    "QUALITY_TOLERANCE",
    "RECOMMEND_ABOVE",
    "TrialEvent",
    "code_lines",
    "last_session",
    "latest_session",
    "look_confidence",
    "looks",
    "measure",
    "paste_line",
    "quality_drop",
    "status",
]

#: An eval-time change that lowers the quality figure (0-1, e.g. a detector's H-mean) on the
#: run's checkpoint by more than this is never recommended, however fast.
QUALITY_TOLERANCE = 0.005
#: The status word of such a change ends so: ``"<quality_name> drop"``.
QUALITY_DROP_SUFFIX = " drop"
#: Smallest speed-up that counts: the interval's low end must be above it to recommend (and
#: its high end below ``1 / RECOMMEND_ABOVE`` to call a regression).
RECOMMEND_ABOVE = 1.03
#: Fewer pairs than this are inconclusive whatever they show.
MIN_PAIRS = 3
#: The pair counts at which a session may decide a change (below the most pairs asked for;
#: that one is a look too): few looks, spaced out, so each keeps a useful share of ``ALPHA``.
LOOK_AT = (MIN_PAIRS, 5, 8, 12, 20, 32, 50)


@dataclass(frozen=True)
class TrialEvent:
    """One finished trial, for progress output: ``label`` the change (``unchanged`` for A),
    ``pair`` the pair's number for it (1-based), ``samples_per_sec`` ``None`` when it failed
    (``error`` says why), ``done`` / ``planned`` the trials run so far and the plan's total."""

    label: str
    pair: int
    seconds: float
    samples_per_sec: float | None
    error: str | None
    done: int
    planned: int


def _winners(records: Sequence[TryRecord]) -> list[TryRecord]:
    """The recommended changes, all of them when their combination was verified (or there is
    one); the best single one when the combination was not recommended."""
    winners = [r for r in records if r.kind == "candidate" and r.recommended and r.override]
    combined = next((r for r in records if r.kind == "combined"), None)
    if not winners or combined is None or combined.recommended:
        return winners
    return [max(winners, key=lambda r: r.median or 0.0)]


def _tokens(records: Sequence[TryRecord]) -> list[str]:
    return [t for r in records for t in (r.override or "").split()]


def paste_line(records: Sequence[TryRecord]) -> str | None:
    """The config overrides to paste (of :func:`_winners`), or ``None``."""
    overrides = [t for t in _tokens(_winners(records)) if not t.startswith(KNOB_PREFIX)]
    return " ".join(overrides) or None


def code_lines(records: Sequence[TryRecord], framework: FrameworkInfo | None = None) -> list[str]:
    """The recommended runtime knobs (of :func:`_winners`) as changes to one's own code, in
    the words of the run's ``framework`` where it recorded them."""
    spell = framework.spell if framework is not None else None
    return apply_lines(knobs_of(_tokens(_winners(records))), spell)


def last_session(records: Sequence[TryRecord]) -> list[TryRecord]:
    """The lines of the last session among ``records`` (``perf/try.jsonl``'s, in file order;
    ``[]`` without one)."""
    if not records:
        return []
    last = records[-1].session
    return [r for r in records if r.session == last]


def latest_session(run_dir: str | os.PathLike[str]) -> list[TryRecord]:
    """:func:`last_session` of the run's ``perf/try.jsonl``."""
    return last_session(read_records(TryRecord.path(run_dir), TryRecord))


def quality_drop(status_word: str) -> bool:
    """Whether a measured change's status says it lowered the quality figure."""
    return status_word.endswith(QUALITY_DROP_SUFFIX)


def looks(most: int) -> tuple[int, ...]:
    """The pair counts at which a change measured with at most ``most`` pairs may be decided:
    :data:`LOOK_AT` below ``most``, then ``most`` (at least :data:`MIN_PAIRS`). A change that
    ends between two looks (the budget) is decided where it ends, in place of the next look, so
    no change is decided more than ``len(looks(most))`` times."""
    top = max(most, MIN_PAIRS)
    return (*(n for n in LOOK_AT if n < top), top)


def look_confidence(most: int) -> float:
    """The confidence of each look's interval when a change takes at most ``most`` pairs:
    ``1 - ALPHA / len(looks(most))`` (0.95 for 3 pairs, 0.975 for 5, 0.983 for 8)."""
    return 1.0 - ALPHA / len(looks(most))


def measure(ratios: Sequence[float], most: int) -> PairedRatios:
    """The speed-up of a change from its pairs' ratios, with the interval a look decides on
    (:func:`look_confidence` of ``most``, the most pairs it may take)."""
    return paired_ratios(ratios, look_confidence(most))


def status(s: PairedRatios) -> str:
    """``recommended`` when :func:`~trainperf.core.significance.ratio_outcome` finds an improvement
    (the interval's low end above :data:`RECOMMEND_ABOVE`, with at least :data:`MIN_PAIRS`
    pairs), else that outcome's word (``regression``, ``no significant change``,
    ``inconclusive``)."""
    found = ratio_outcome(s.low, s.high, RECOMMEND_ABOVE, enough=s.pairs >= MIN_PAIRS)
    return "recommended" if found is Outcome.IMPROVEMENT else str(found)
