"""What a ``trainperf try`` session found, read back: the last session's records of the run's
``perf/try.jsonl``, whether a measured change is recommended (:func:`status`), and the change to
make (:func:`paste_line`: the Hydra overrides; :func:`code_lines`: runtime knobs as changes to
one's own code). The session that runs the trials is :mod:`trainperf.cli.tryout.session`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from trainperf.core.knobs import KNOB_PREFIX, apply_lines, knobs_of
from trainperf.core.significance import Outcome, PairedRatios, ratio_outcome
from trainperf.records.files import read_records
from trainperf.records.kinds import TryRecord

__all__ = [
    "MIN_PAIRS",
    "QUALITY_TOLERANCE",
    "RECOMMEND_ABOVE",
    "TrialEvent",
    "code_lines",
    "last_session",
    "latest_session",
    "paste_line",
    "quality_drop",
    "status",
]

#: An eval-time change that lowers the quality figure (0-1, e.g. a detector's H-mean) on the
#: run's checkpoint by more than this is never recommended, however fast.
QUALITY_TOLERANCE = 0.005
#: The status word of such a change ends so: ``"<quality_name> drop"``.
QUALITY_DROP_SUFFIX = " drop"
#: Smallest speed-up that counts: the interval's low end must be above it to recommend.
RECOMMEND_ABOVE = 1.03
#: Fewer pairs than this are inconclusive whatever they show.
MIN_PAIRS = 3


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
    """The Hydra overrides to paste (of :func:`_winners`), or ``None``."""
    overrides = [t for t in _tokens(_winners(records)) if not t.startswith(KNOB_PREFIX)]
    return " ".join(overrides) or None


def code_lines(records: Sequence[TryRecord]) -> list[str]:
    """The recommended runtime knobs (of :func:`_winners`) as changes to one's own code."""
    return apply_lines(knobs_of(_tokens(_winners(records))))


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


def status(s: PairedRatios) -> str:
    """``recommended`` when :func:`~trainperf.core.significance.ratio_outcome` finds an improvement
    (the 95 % interval's low end above :data:`RECOMMEND_ABOVE`, with at least :data:`MIN_PAIRS`
    pairs), else that outcome's word (``inconclusive``, ...)."""
    found = ratio_outcome(s.low, s.high, RECOMMEND_ABOVE, enough=s.pairs >= MIN_PAIRS)
    return "recommended" if found is Outcome.IMPROVEMENT else str(found)
