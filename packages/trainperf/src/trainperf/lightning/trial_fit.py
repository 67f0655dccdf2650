"""The Lightning side of a ``trainperf try`` trial window.

The window's format is :mod:`trainperf.core.trial_window`. When ``TRAINPERF_TRY_WINDOW`` is set, the
first performance callback to set up in a fit opens the window on its trainer, only through
attributes Lightning documents on the Trainer and the fit loop's ``min_epochs`` / ``min_steps``
(which would hold ``should_stop`` off), so any Lightning app that records with our callbacks gets
the same short window, whatever its config keys are called. A window set outside ``trainperf try``
(a stray variable) still opens, with one warning. The trial's runtime knobs are applied here too
(:mod:`~trainperf.lightning.knobs_apply`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.loggers.logger import DummyLogger
from lightning.pytorch.trainer.states import TrainerFn

from trainperf.core.trial_window import TryWindow

_ATTR = "_ocr_perf_try_window"


class TrialWindow:
    """An open window on one trainer: counts training batches and stops the fit after
    ``window.total_batches``. ``owner`` is the callback that counts (several of ours may share a
    trainer; one count)."""

    def __init__(self, window: TryWindow, owner: object) -> None:
        self.window = window
        self.owner = owner
        self.seen = 0

    def batch_done(self, trainer: L.Trainer, caller: object) -> None:
        if caller is not self.owner:
            return
        self.seen += 1
        if self.seen >= self.window.total_batches:
            trainer.should_stop = True


def trial_window_of(trainer: L.Trainer) -> TrialWindow | None:
    """The window open on ``trainer``, if any."""
    window = getattr(trainer, _ATTR, None)
    return window if isinstance(window, TrialWindow) else None


def trial_root(trainer: L.Trainer) -> Path | None:
    """The folder of the ``trainperf try`` trial ``trainer`` runs in, ``None`` outside one.

    A trial is a fit under ``TRAINPERF_TRY_WINDOW``; the variable is read here too, not only
    through the window the first performance callback opens, so a callback that sets up before
    that one (or a script with no window-opening callback at all) still knows it is in a trial.
    A malformed variable raises :class:`~trainperf.core.trial_window.TryWindowError`."""
    window = trial_window_of(trainer)
    if window is not None:
        return window.window.perf_dir
    if trainer.state.fn != TrainerFn.FITTING:
        return None
    env = TryWindow.from_env()
    return env.perf_dir if env is not None else None


def perf_root(trainer: L.Trainer) -> Path:
    """Where every file our callbacks write goes (``perf/`` records, profiler traces, resource
    samples, alerts, knob results, the profiler's trigger file): the trial's own folder in a
    ``trainperf try`` trial (never the run it measures), else ``trainer.default_root_dir``."""
    root = trial_root(trainer)
    return root if root is not None else Path(trainer.default_root_dir)


def output_path(trainer: L.Trainer, path: Path) -> Path:
    """A folder of ours named by the user (a trace directory): relative, under
    :func:`perf_root`; absolute, as it is, except in a trial, where it goes under the trial's
    folder by its last name (an absolute path may lie in the measured run's folder)."""
    root = trial_root(trainer)
    if root is not None and path.is_absolute():
        return root / path.name
    return perf_root(trainer) / path


def open_trial_window(trainer: L.Trainer, owner: object) -> TrialWindow | None:
    """Open the window of ``TRAINPERF_TRY_WINDOW`` on ``trainer`` (a fit only; once per trainer)
    and return it; ``None`` without the variable or outside a fit. Call from ``setup``: Lightning
    reads the validation limits and callbacks after the setup hooks."""
    existing = trial_window_of(trainer)
    if existing is not None:
        return existing
    window = TryWindow.from_env()
    if window is None or trainer.state.fn != TrainerFn.FITTING:
        return None
    if trainer.is_global_zero and not window.opened_by_ocr_perf_try():
        warnings.warn(window.announcement(), UserWarning, stacklevel=2)
    if "val" not in window.keep:
        trainer.limit_val_batches = 0
        trainer.num_sanity_val_steps = 0
    if "checkpoint" not in window.keep:
        # a new list: Lightning is iterating the current one to call the setup hooks
        # (an instance attribute Lightning's callback connector sets: invisible to mypy)
        current = trainer.callbacks  # type: ignore[attr-defined]
        trainer.callbacks = [c for c in current if not isinstance(c, Checkpoint)]  # type: ignore[attr-defined]
    if "loggers" not in window.keep:
        # Lightning's own stand-in for "the user's loggers, disabled" (its tuner uses it): logs
        # nothing, yet callbacks that require a logger (LearningRateMonitor) still run. (The
        # loggers' experiments exist already: a CSV logger leaves an empty version folder.)
        trainer.loggers = [DummyLogger()]
    fit_loop = trainer.fit_loop
    fit_loop.min_epochs = None
    fit_loop.epoch_loop.min_steps = None
    state = TrialWindow(window, owner)
    setattr(trainer, _ATTR, state)
    if window.knobs:
        from trainperf.lightning.knobs_apply import apply_knobs

        apply_knobs(trainer, window.knobs, window.perf_dir)
    return state
