"""What ``trainperf try`` records: measured changes and trial knobs.

What ``trainperf try`` records: one :class:`TryRecord` per change it measured
(``perf/try.jsonl``) and a :class:`KnobRecord` per runtime knob of a trial."""

from __future__ import annotations

from typing import ClassVar

from trainperf.records.schema import Record

__all__ = ["KnobRecord", "TryRecord"]


class TryRecord(Record, tag="trainperf/try", kw_only=True, frozen=True):
    """One change ``trainperf try`` measured (or left untried): a ``perf/try.jsonl`` line.

    Args:
        session: when the ``try`` session started (ISO 8601, UTC): groups a session's lines.
        kind: ``candidate``, or ``combined`` (the recommended ones together).
        override: the change(s) as ``try`` applies them, space-separated: Hydra overrides and
            runtime knobs (``knob:NAME=VALUE``); ``None`` for a plain-language change.
        family: the candidate's family (``combined`` for the winners together).
        eval_time: checked on the checkpoint with the app's evaluation command
            (:class:`EvalCommand`: evaluation speed and its quality figure).
        status: ``recommended``, ``no significant change``, ``regression``, ``inconclusive``,
            ``<quality_name> drop`` (faster or not, it lowers the quality figure beyond the
            tolerance),
            ``not applicable``, ``failed`` or ``untried`` (the budget ran out).
        ratios: ``speed(changed) / speed(unchanged)`` per pair.
        median, low, high: the speed-up (the geometric mean of ``ratios``) and the t interval
            its decision used, 95 % over the looks that could decide it (None without pairs;
            :mod:`trainperf.analysis.trials`).
        quality_base, quality_changed: eval-time only: the quality figure on the checkpoint;
            quality_name: its name (e.g. ``H-mean``).
        note: why (not applicable, failed, untried, the quality drop), or "".
        apply: how to make the knobs of the change in one's own code
            (``DataLoader(..., num_workers=4)``; lines joined by ``; ``), or "".
    """

    FILE: ClassVar[str] = "try.jsonl"

    session: str
    kind: str
    override: str | None
    description: str
    family: str
    alters_computation: bool
    eval_time: bool
    status: str
    pairs: int = 0
    ratios: tuple[float, ...] = ()
    median: float | None = None
    low: float | None = None
    high: float | None = None
    base_samples_per_sec: float | None = None
    changed_samples_per_sec: float | None = None
    quality_base: float | None = None
    quality_changed: float | None = None
    quality_name: str | None = None
    note: str = ""
    apply: str = ""

    @property
    def recommended(self) -> bool:
        return self.status == "recommended"


class KnobRecord(Record, tag="trainperf/knob", kw_only=True, frozen=True):
    """What became of one runtime knob (``name=value``) in a ``trainperf try`` trial
    (:mod:`trainperf.core.knobs`): ``status`` ``applied`` or ``not applicable`` (the run cannot take
    it), ``note`` what was changed (``num_workers 0 -> 4``) or why it cannot be."""

    FILE: ClassVar[str] = "knobs.jsonl"

    knob: str
    status: str
    note: str = ""
