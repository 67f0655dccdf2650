"""One trial: the run's command (or its evaluation command) with a change, as a subprocess.

The evaluation command is the app's, on the run's checkpoint
(:class:`~trainperf.records.run_record.EvalCommand`); the trial runs in a fresh folder, and its
speed is read back from the perf files it wrote (``perf/epochs.jsonl``)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from trainperf.core.knobs import is_knob, knobs_of
from trainperf.core.stage import Stage
from trainperf.core.trial_window import ENV_VAR, TryWindow
from trainperf.records.command import RecordedCommand
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records
from trainperf.records.run_record import EvalCommand
from trainperf.records.schema import RunDirError
from trainperf.records.try_record import KnobRecord

__all__ = ["TrialResult", "run_eval_trial", "run_training_trial", "stage_speed", "trial_env"]

# What a failed trial shows of its output.
_TAIL_LINES = 6
# In an evaluation command's overrides: the checkpoint's path.
CHECKPOINT_FIELD = "{checkpoint}"
# Lightning's Trainer reads defaults of its arguments from PL_TRAINER_<ARG>: no default logger.
_NO_DEFAULT_LOGGER = ("PL_TRAINER_LOGGER", "False")
# ... and the trial's folder as the default root (a script that names none wrote into its
# working folder: the trial must not).
_DEFAULT_ROOT = "PL_TRAINER_DEFAULT_ROOT_DIR"


def trial_env(folder: Path, window: TryWindow | None = None) -> dict[str, str]:
    """The environment of a trial writing into ``folder``: this process's, with Lightning's
    default root folder set to ``folder`` (a ``Trainer`` given ``default_root_dir`` keeps it)
    and, for a training trial, its ``window`` (which tells our callbacks the folder too)."""
    env = {**os.environ, _DEFAULT_ROOT: str(folder)}
    if window is not None:
        env[ENV_VAR] = window.to_env()
    return env


@dataclass(frozen=True)
class TrialResult:
    """What one trial gave: its wall time (start-up included), its steady-state speed (samples
    per second; ``None`` when it failed), why it failed (exit status and the last lines of its
    output), the quality figure an eval trial printed, and why the run cannot take a knob of the
    change (the trial ended at setup)."""

    seconds: float
    speed: float | None
    error: str | None = None
    quality: float | None = None
    not_applicable: str | None = None


def stage_speed(
    run_dir: str | os.PathLike[str], stage: Stage, skip: int, batches: int | None
) -> float | None:
    """Samples per second of ``stage`` (``train``, ``val``, ``test``) over its batches in file
    order, the first ``skip`` left out, at most ``batches`` (``None``: all). A batch's samples
    are its epoch's mean (``samples / num_batches``: a short last batch counts fairly). ``None``
    when the files hold no measured batch of the stage."""
    timed: list[tuple[float, float]] = []  # (seconds, samples) per batch
    for record in read_records(EpochRecord.path(run_dir), EpochRecord):
        if record.stage != stage or record.batch_times_stride != 1 or record.num_batches <= 0:
            continue  # a thinned epoch's list does not say which batches it kept
        per_batch = record.samples / record.num_batches
        timed.extend((t, per_batch) for t in record.batch_times_s if t is not None)
    measured = timed[skip : None if batches is None else skip + batches]
    total = sum(t for t, _ in measured)
    if not measured or total <= 0:
        return None
    return sum(s for _, s in measured) / total


def _run(argv: list[str], cwd: Path, log: Path, env: dict[str, str], timeout: float) -> str | None:
    """Run ``argv``; its output goes to ``log``. The error text, or ``None`` on success."""
    with open(log, "w", encoding="utf-8") as out:
        try:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,  # a trial never waits for input
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return f"stopped after {timeout:.0f} s (time limit of a trial); output: {log}"
    if proc.returncode == 0:
        return None
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    tail = " | ".join(line.strip() for line in lines[-_TAIL_LINES:])
    return f"exit status {proc.returncode}: {tail}"


def _refused_knob(folder: Path) -> str | None:
    """Why the trial's run could not take one of its knobs (``perf/knobs.jsonl``), else None."""
    try:
        records = read_records(KnobRecord.path(folder), KnobRecord)
    except RunDirError as exc:
        return f"its knob results could not be read: {exc}"
    for record in records:
        if record.status != "applied":
            return f"{record.knob}: {record.note}"
    return None


def run_training_trial(
    command: RecordedCommand,
    folder: Path,
    changes: tuple[str, ...],
    *,
    warmup: int,
    batches: int,
    timeout: float,
    keep: frozenset[str] = frozenset(),
) -> TrialResult:
    """The run's own command with ``changes`` (Hydra overrides on its command line, runtime knobs
    ``knob:...`` in the window) in a short training window (``trainperf.core.trial_window``) writing
    into ``folder`` (must not exist yet; made here): our callbacks write there (the window
    names it), a plain script's argument naming the run folder names it instead
    (:meth:`~trainperf.records.command.RecordedCommand.argv`), and Lightning's default root
    folder is it (``PL_TRAINER_DEFAULT_ROOT_DIR``)."""
    folder.mkdir(parents=True)
    knobs = knobs_of(changes)
    overrides = tuple(c for c in changes if not is_knob(c))
    window = TryWindow(warmup, batches, folder, keep, owner=os.getpid(), knobs=knobs)
    env = trial_env(folder, window)
    if "loggers" not in keep:
        # Lightning creates its loggers' experiments (a TensorBoard event file in the script's
        # own folder) before any callback hook; a logger the script passes still wins.
        env.setdefault(*_NO_DEFAULT_LOGGER)
    started = time.perf_counter()
    argv = command.argv(folder, overrides)
    error = _run(argv, command.cwd, folder.with_suffix(".log"), env, timeout)
    seconds = time.perf_counter() - started
    refused = _refused_knob(folder) if knobs else None
    if refused is not None:
        return TrialResult(seconds, None, error, not_applicable=refused)
    if error is not None:
        return TrialResult(seconds, None, error)
    speed = stage_speed(folder, Stage.TRAIN, warmup, batches)
    if speed is None:
        error = (
            f"the trial wrote no measured training batch into {folder}/perf/epochs.jsonl: the "
            "app must record with ocr's performance callbacks (PerformanceProfilerCallback or "
            "ThroughputMonitorCallback, stage train) and train more than the warm-up batches"
        )
    return TrialResult(seconds, speed, error)


def quality_pattern(text: str, where: str) -> re.Pattern[str]:
    """``text`` compiled: a regular expression with a group (the quality figure);
    :class:`~trainperf.records.command.TryInputError` naming ``where`` otherwise."""
    from trainperf.records.command import TryInputError

    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise TryInputError(f"{where}: {text!r} is not a regular expression: {exc}") from None
    if pattern.groups < 1:
        raise TryInputError(f"{where}: {text!r} needs a group, (...), around the quality figure")
    return pattern


def run_eval_trial(
    command: RecordedCommand,
    folder: Path,
    changes: tuple[str, ...],
    checkpoint: Path,
    *,
    evaluation: EvalCommand,
    timeout: float,
) -> TrialResult:
    """The app's ``evaluation`` command on ``checkpoint`` with the run's overrides (those of
    ``evaluation.drop_keys`` left out), the evaluation's own and ``changes``, in ``folder``: its
    test-stage speed (first batch skipped) and its quality figure."""
    folder.mkdir(parents=True)
    own = tuple(o.replace(CHECKPOINT_FIELD, str(checkpoint)) for o in evaluation.overrides)
    argv = command.argv(
        folder,
        (*own, *changes),
        drop_keys=tuple(evaluation.drop_keys),
        launcher=tuple(evaluation.launcher),
    )
    log = folder.with_suffix(".log")
    started = time.perf_counter()
    error = _run(argv, command.cwd, log, trial_env(folder), timeout)
    seconds = time.perf_counter() - started
    if error is not None:
        return TrialResult(seconds, None, error)
    pattern = quality_pattern(evaluation.quality, "the evaluation's quality pattern")
    match = pattern.search(log.read_text(encoding="utf-8", errors="replace"))
    try:
        quality = float(match.group(1)) if match else None
    except ValueError:
        quality = None
    speed = stage_speed(folder, Stage.TEST, 1, None)
    if speed is None or quality is None:
        said = f"{evaluation.label} gave no test-stage speed or {evaluation.quality_name}"
        return TrialResult(seconds, speed, f"{said}; see {log}")
    return TrialResult(seconds, speed, None, quality)
