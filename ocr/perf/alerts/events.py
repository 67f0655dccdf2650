"""One alert event (``fired`` / ``resolved``) and its ``perf/alerts.jsonl`` line.

Every event names the global rank of the process whose rule saw it: under DDP every rank
appends to the same file, and readers (the verdict, the report) keep ranks apart by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["ALERT_SCHEMA", "AlertEvent"]

ALERT_SCHEMA = "receipt-ocr/alert"


@dataclass(frozen=True)
class AlertEvent:
    """One ``fired`` or ``resolved`` event; :meth:`record` is its ``alerts.jsonl`` line.

    Args:
        t: unix time of the event, seconds.
        rule: the rule name.
        event: ``"fired"`` or ``"resolved"``.
        severity: ``"warning"`` or ``"critical"``.
        message: one readable sentence with figures.
        evidence: figures behind it.
        threshold: thresholds used.
        suggestion: a concrete change to make.
        step: global step. epoch: epoch. rank: global rank of the process that saw it.
    """

    t: float
    rule: str
    event: str
    severity: str
    message: str
    evidence: dict[str, float | str]
    threshold: dict[str, float]
    suggestion: str
    step: int
    epoch: int
    rank: int

    @classmethod
    def from_record(cls, record: Mapping[str, object], where: str = "alert") -> AlertEvent:
        """Read one ``alerts.jsonl`` record back (:meth:`record`'s form); fields a writer left
        out get neutral values. ``ValueError`` naming ``where`` and the field when a field has
        the wrong type."""
        rule, event = record.get("rule", "unknown"), record.get("event")
        if not isinstance(rule, str) or event not in ("fired", "resolved"):
            raise ValueError(
                f"{where}: rule must be a string and event fired or resolved, got "
                f"{rule!r} / {event!r}"
            )
        evidence = record.get("evidence") or {}
        limits = record.get("threshold") or {}
        if not isinstance(evidence, Mapping) or not isinstance(limits, Mapping):
            raise ValueError(f"{where}: evidence and threshold must be objects")

        def number(key: str) -> float:
            value = record.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{where}: {key} must be a number, got {value!r}")
            return float(value)

        return cls(
            t=number("t"),
            rule=rule,
            event=event,
            severity="critical" if record.get("severity") == "critical" else "warning",
            message=str(record.get("message") or ""),
            evidence={
                str(k): v if isinstance(v, str) else float(v)
                for k, v in evidence.items()
                if isinstance(v, str | int | float) and not isinstance(v, bool)
            },
            threshold={
                str(k): float(v)
                for k, v in limits.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            },
            suggestion=str(record.get("suggestion") or ""),
            step=int(number("step")),
            epoch=int(number("epoch")),
            rank=int(number("rank")),
        )

    def record(self) -> dict[str, object]:
        """The ``alerts.jsonl`` line (without schema and version, which the writer adds)."""
        return asdict(self)
