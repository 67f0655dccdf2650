"""How a run ended, in words, from ``perf/lifecycle.jsonl``.

Where an interrupted run stopped and the command that resumes it (``trainperf watch`` and
``trainperf report`` print these).

An interrupted rank's end record names the signal, the epoch and the training batches of it
processed (``LifecycleRecord``). The resume command is the run's recorded command
(``perf/run.json``, ``.hydra/overrides.yaml``) with ``ckpt_path=<its checkpoint>`` into the same
run folder; for a plain script, its command and where to pass the checkpoint. The checkpoint is
the run's ``last.ckpt`` when it has one, else its newest ``*.ckpt`` (any ``ModelCheckpoint``
naming).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from trainperf.analysis.legacy_layout import legacy_framework
from trainperf.records.command import TryInputError, recorded_command
from trainperf.records.files import RunDirError, read_run_record
from trainperf.records.monitoring import LifecycleRecord
from trainperf.records.run_record import RunRecord

__all__ = ["interrupted_at", "interruption_sentence", "last_checkpoint", "resume_command"]

_LAST_NAME = re.compile(r"last(-v\d+)?\.ckpt")
_NAME_NUMBER = re.compile(r"(epoch|step)=(\d+)")


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


def _is_last(path: Path) -> bool:
    """``last.ckpt`` or a versioned ``last-v1.ckpt`` (``ModelCheckpoint(save_last=True)``)."""
    return _LAST_NAME.fullmatch(path.name) is not None


def _age_key(path: Path) -> tuple[int, int, int, str]:
    """Newest last: modification time, then the ``epoch=`` and ``step=`` of the name (files
    written within one clock tick), then the name."""
    numbers = {key: int(value) for key, value in _NAME_NUMBER.findall(path.name)}
    return (path.stat().st_mtime_ns, numbers.get("epoch", -1), numbers.get("step", -1), path.name)


def last_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint a resume of the run in ``run_dir`` starts from, or ``None``:
    ``<run>/checkpoints/last.ckpt`` (an app's usual place), else the newest ``last.ckpt`` below the
    folder, else the newest ``*.ckpt`` below it, whatever a ``ModelCheckpoint`` named it
    (``lightning_logs/version_0/checkpoints/epoch=1-step=40.ckpt``)."""
    usual = run_dir / "checkpoints" / "last.ckpt"
    if usual.is_file():
        return usual
    found = [p for p in run_dir.rglob("*.ckpt") if p.is_file()]
    pool = [p for p in found if _is_last(p)] or found
    return max(pool, key=_age_key) if pool else None


def resume_command(run_dir: Path) -> str:
    """What resumes the run in ``run_dir`` from its latest checkpoint (one line)."""
    ckpt = last_checkpoint(run_dir)
    if ckpt is None:
        return (
            f"no checkpoint (*.ckpt) under {run_dir}: it cannot be resumed from this folder; "
            "pass ckpt_path=... if a checkpoint was saved elsewhere"
        )
    in_code = _resume_words(run_dir).replace("{checkpoint}", repr(str(ckpt)))
    try:
        command = recorded_command(run_dir)
    except TryInputError:
        return in_code
    if not command.takes_overrides:
        argv = shlex.join(command.argv(run_dir))
        return f"{argv}  (with {in_code})"
    return shlex.join(command.argv(run_dir, changes=(f"ckpt_path={ckpt}",)))


def _resume_words(run_dir: Path) -> str:
    """How the run's framework resumes from a checkpoint in one's code (its ``resume`` hint,
    ``{checkpoint}`` the path); an older folder's is the Lightning callbacks' (legacy)."""
    try:
        info: RunRecord | None = read_run_record(run_dir)
    except (OSError, RunDirError, UnicodeDecodeError):
        info = None
    framework = (info.framework_info if info is not None else None) or legacy_framework(info)
    return framework.hints.get("resume", "resume from the checkpoint {checkpoint}")


def interruption_sentence(run_dir: Path, records: Iterable[LifecycleRecord]) -> str | None:
    """``The run was interrupted at epoch 1, batch 2 (SIGTERM); resume: ...`` when each rank's
    latest lifecycle record (of ``records``, in file order) says so, else ``None``."""
    latest = {r.rank: r for r in records}
    stopped = interrupted_at(latest.values())
    if stopped is None:
        return None
    return f"The run was {stopped}; resume: {resume_command(run_dir)}"
