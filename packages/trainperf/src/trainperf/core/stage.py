"""The one stage vocabulary: :class:`Stage` (``train``, ``val``, ``test``).

The names used in metric keys, run-directory records and reports, and :meth:`Stage.parse` for every
other spelling (a framework's running-stage names, ``validation``, the trace analyzer's names)."""

from __future__ import annotations

from enum import StrEnum

# Every accepted spelling -> the stage's value.
_SPELLINGS = {s: s for s in ("train", "val", "test")} | {"validate": "val", "validation": "val"}


class Stage(StrEnum):
    """A stage of a run, as named in metric keys (``performance/val_epoch_time``) and records."""

    TRAIN = "train"
    VAL = "val"
    TEST = "test"

    @classmethod
    def parse(cls, name: str) -> Stage:
        """The stage of any spelling of it; ``ValueError`` naming the accepted names else."""
        value = _SPELLINGS.get(str(name))
        if value is None:
            raise ValueError(
                f"unknown stage {name!r}; expected one of 'train', 'validate' (or 'val'), 'test'"
            )
        return cls(value)

    @classmethod
    def of_running(cls, name: str | None) -> Stage | None:
        """The stage of a running-stage name as frameworks give it (``sanity_check``, the
        validation batches before a fit, is ``val``); ``None`` for ``predict``, ``None`` and
        anything else we do not measure."""
        value = "val" if name == "sanity_check" else _SPELLINGS.get(str(name))
        return cls(value) if value is not None else None

    @property
    def label(self) -> str:
        """The word for it in prose."""
        return {"train": "training", "val": "validation", "test": "test"}[self.value]

    @property
    def trace_name(self) -> str:
        """The trace analyzer's name for it (``trainperf.analysis.trace``)."""
        return "validation" if self is Stage.VAL else self.value


#: Stages in reading order (a fit's training before its validation, then test).
STAGE_ORDER: tuple[Stage, ...] = (Stage.TRAIN, Stage.VAL, Stage.TEST)
