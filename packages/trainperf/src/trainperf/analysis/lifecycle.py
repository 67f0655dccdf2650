"""How a run ended, in words, from ``perf/lifecycle.jsonl``: where an interrupted run stopped
and the command that resumes it (``trainperf watch`` and ``trainperf report`` print these).

An interrupted rank's end record names the signal, the epoch and the training batches of it
processed (``LifecycleRecord``). The resume command is the run's recorded command
(``perf/run.json``, ``.hydra/overrides.yaml``) with ``ckpt_path=<its last.ckpt>`` into the same
run folder; for a plain script, its command and where to pass the checkpoint.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path

from trainperf.records.command import TryInputError, recorded_command
from trainperf.records.kinds import LifecycleRecord

__all__ = ["interrupted_at", "interruption_sentence", "last_checkpoint", "resume_command"]


def interrupted_at(ends: Iterable[LifecycleRecord]) -> str | None:
    """``interrupted at epoch 1, batch 2 (SIGTERM)`` from the ranks' last end records, or
    ``None`` when none of them is an interruption (ranks that disagree are listed by rank)."""
    stopped = sorted(
        (r for r in ends if r.event == "end" and r.status == "interrupted"), key=lambda r: r.rank
    )
    if not stopped:
        return None
    where = {(r.epoch, r.batch, r.signal) for r in stopped}

    def words(record: LifecycleRecord) -> str:
        place = f"epoch {record.epoch}, batch {record.batch}" if record.epoch is not None else ""
        signal = f"({record.signal})" if record.signal else ""
        return " ".join(p for p in (place, signal) if p)

    if len(where) == 1:
        said = words(stopped[0])
        return f"interrupted at {said}" if said else "interrupted"
    return "interrupted at " + "; ".join(f"rank {r.rank}: {words(r)}" for r in stopped)


def last_checkpoint(run_dir: Path) -> Path | None:
    """The run's ``last.ckpt``: ``<run>/checkpoints/last.ckpt`` (``ocr-train``) or the newest
    ``last.ckpt`` below the run folder (a plain script's ``ModelCheckpoint``)."""
    usual = run_dir / "checkpoints" / "last.ckpt"
    if usual.is_file():
        return usual
    found = [p for p in run_dir.rglob("last.ckpt") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def resume_command(run_dir: Path) -> str:
    """What resumes the run in ``run_dir`` from its ``last.ckpt`` (one line)."""
    ckpt = last_checkpoint(run_dir)
    if ckpt is None:
        return f"no last.ckpt under {run_dir}: resume from your latest checkpoint (ckpt_path=...)"
    try:
        command = recorded_command(run_dir)
    except TryInputError:
        return f"trainer.fit(..., ckpt_path={str(ckpt)!r})"
    if not command.hydra:
        argv = shlex.join(command.argv(run_dir))
        return f"{argv}  (with trainer.fit(..., ckpt_path={str(ckpt)!r}))"
    return shlex.join(command.argv(run_dir, changes=(f"ckpt_path={ckpt}",)))


def interruption_sentence(run_dir: Path, records: Iterable[LifecycleRecord]) -> str | None:
    """``The run was interrupted at epoch 1, batch 2 (SIGTERM); resume: ...`` when each rank's
    latest lifecycle record (of ``records``, in file order) says so, else ``None``."""
    latest = {r.rank: r for r in records}
    stopped = interrupted_at(latest.values())
    if stopped is None:
        return None
    return f"The run was {stopped}; resume: {resume_command(run_dir)}"
