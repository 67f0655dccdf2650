"""The short training window of a ``trainperf try`` trial, in one variable.

The short training window of a ``trainperf try`` trial, passed to the re-run command in one
environment variable (:data:`ENV_VAR`), so it works for any Lightning app that records with our
performance callbacks, whatever its configuration keys are called. The callbacks
(:mod:`trainperf.lightning.trial_fit`) read it at ``setup``, open the window through
Lightning's public Trainer attributes and apply the trial's runtime knobs
(:mod:`trainperf.core.knobs`);
the speed is then read from the trial's ``perf/epochs.jsonl``
(``trainperf.cli.trial.trial_process``), skipping the warm-up batches.

Format: ``warmup=5;batches=20;perf_dir=/tmp/x;keep=val,checkpoint;owner=1234;knobs=a.b=4,c=true``
(keys in any order; ``keep``, ``owner`` and ``knobs`` optional). A window whose ``owner`` is not an
ancestor of the training process (a variable exported in a shell, inherited by an unrelated job, or
copied from a trial's log) is *stray*: it still applies, and the callbacks warn once
(:meth:`TryWindow.announcement`), since it silently turns a fit into a short trial without
checkpoints or loggers. Pure Python: no Lightning here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainperf.core.knobs import Knob, KnobError
from trainperf.errors import InputError

__all__ = ["ENV_VAR", "KEEP_CHOICES", "TryWindow", "TryWindowError"]

ENV_VAR = "TRAINPERF_TRY_WINDOW"
#: What a window may leave on: validation (and the sanity check), checkpoint callbacks, loggers.
KEEP_CHOICES = frozenset({"val", "checkpoint", "loggers"})


class TryWindowError(InputError, ValueError):
    """``TRAINPERF_TRY_WINDOW`` is malformed; the message names the part."""


@dataclass(frozen=True)
class TryWindow:
    """One trial's training window.

    Args:
        warmup: training batches run first and not measured (worker start-up, first-call
            allocation, cold caches).
        batches: training batches measured after the warm-up; the fit stops after them.
        perf_dir: folder that receives the trial's ``perf/`` files instead of
            ``trainer.default_root_dir`` (a foreign app may hard-code that one).
        keep: parts left on because the change concerns them (subset of :data:`KEEP_CHOICES`).
        owner: process id of the ``trainperf try`` that opened the window (``None``: unknown).
        knobs: runtime changes the callbacks apply at setup (:mod:`trainperf.core.knobs`).
    """

    warmup: int
    batches: int
    perf_dir: Path
    keep: frozenset[str] = field(default_factory=frozenset)
    owner: int | None = None
    knobs: tuple[Knob, ...] = ()

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.batches < 1:
            raise TryWindowError(
                f"{ENV_VAR}: warmup must be >= 0 and batches >= 1, got warmup={self.warmup}, "
                f"batches={self.batches}"
            )
        unknown = set(self.keep) - KEEP_CHOICES
        if unknown:
            raise TryWindowError(
                f"{ENV_VAR}: keep has {sorted(unknown)}; expected some of {sorted(KEEP_CHOICES)}"
            )

    @property
    def total_batches(self) -> int:
        """Training batches after which the fit stops."""
        return self.warmup + self.batches

    def to_env(self) -> str:
        """The variable's value."""
        parts = [f"warmup={self.warmup}", f"batches={self.batches}", f"perf_dir={self.perf_dir}"]
        if self.keep:
            parts.append(f"keep={','.join(sorted(self.keep))}")
        if self.owner is not None:
            parts.append(f"owner={self.owner}")
        if self.knobs:
            parts.append(f"knobs={','.join(k.setting for k in self.knobs)}")
        return ";".join(parts)

    def opened_by_ocr_perf_try(self) -> bool:
        """Whether the ``trainperf try`` named by ``owner`` is an ancestor of this process (the
        trial's command, a launcher in between or a DDP rank it started); ``False`` for a stray
        variable."""
        if self.owner is None:
            return False
        import psutil

        try:
            return any(parent.pid == self.owner for parent in psutil.Process().parents())
        except psutil.Error:
            return False

    def announcement(self) -> str:
        """The warning for a stray window: the variable, its value and what it does."""
        off = [
            what
            for part, what in (
                ("val", "runs no validation"),
                ("checkpoint", "saves no checkpoint"),
                ("loggers", "logs to no logger"),
            )
            if part not in self.keep
        ]
        knobs = [f"applies {', '.join(k.setting for k in self.knobs)}"] if self.knobs else []
        does = ", ".join([f"stops after {self.total_batches} training batches", *off, *knobs])
        return (
            f"{ENV_VAR} is set ({self.to_env()!r}) outside `trainperf try`: this fit is a short "
            f"trial window. It {does}, and writes its perf/ files into {self.perf_dir}. Unset "
            f"{ENV_VAR} for a normal run."
        )

    @classmethod
    def parse(cls, text: str) -> TryWindow:
        """The window of a variable's value; :class:`TryWindowError` naming the bad part."""
        fields: dict[str, str] = {}
        for part in text.split(";"):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise TryWindowError(f"{ENV_VAR}: {part!r} is not key=value")
            fields[key.strip()] = value.strip()
        missing = {"warmup", "batches", "perf_dir"} - fields.keys()
        if missing:
            raise TryWindowError(f"{ENV_VAR}={text!r}: missing {', '.join(sorted(missing))}")
        try:
            warmup, batches = int(fields["warmup"]), int(fields["batches"])
        except ValueError as exc:
            raise TryWindowError(
                f"{ENV_VAR}={text!r}: warmup and batches must be integers"
            ) from exc
        keep = frozenset(k for k in fields.get("keep", "").split(",") if k)
        owner = fields.get("owner")
        if owner is not None and not owner.isdigit():
            raise TryWindowError(f"{ENV_VAR}={text!r}: owner must be a process id")
        try:
            knobs = tuple(Knob.parse_setting(k) for k in fields.get("knobs", "").split(",") if k)
        except KnobError as exc:
            raise TryWindowError(f"{ENV_VAR}={text!r}: {exc}") from exc
        return cls(
            warmup, batches, Path(fields["perf_dir"]), keep, int(owner) if owner else None, knobs
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TryWindow | None:
        """The window this process runs under, or ``None`` (a normal run)."""
        text = (os.environ if environ is None else environ).get(ENV_VAR)
        return cls.parse(text) if text else None
