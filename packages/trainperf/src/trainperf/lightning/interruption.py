"""SIGTERM and SIGINT as interruptions, not failures.

Lightning 2.6 turns SIGTERM (what SLURM, Kubernetes and spot instances send before they stop a
job) into ``trainer.received_sigterm``; its loops then raise ``SIGTERMException`` (a
``SystemExit`` without a code: exit 0) at the end of the current batch, and every callback's
``on_exception`` sees it. Ctrl+C raises ``KeyboardInterrupt`` wherever the main thread is, and
Lightning exits 1.

Here (all through public Lightning API):

- :func:`interruption_of` tells an interruption from a failure by what happened (the exception
  and ``trainer.received_sigterm``), with the epoch and batch it stopped at; the performance
  callbacks record it in ``perf/lifecycle.jsonl`` (``status: interrupted``).
- :func:`set_exit_code` gives the exiting ``SystemExit`` the shell's code, 128 + the signal
  (143 for SIGTERM, 130 for SIGINT), so a scheduler sees a stopped job, not a success.
- :class:`InterruptCheckpoint` (``callbacks.last_checkpoint`` of ``ocr-train``) makes the first
  SIGINT stop at the end of the current batch too (a second one stops at once), and on an
  interruption at such a safe point writes its checkpoint (``<run dir>/checkpoints/last.ckpt``):
  ``ckpt_path=<run dir>/checkpoints/last.ckpt`` resumes there.
  A crash writes no checkpoint and stays a failure with its traceback.
- :func:`announce` says what happened in one line of our own (``SIGTERM received at epoch 1,
  after batch 2: the run stops there (exit code 143)``; ``InterruptCheckpoint`` adds ``SIGTERM:
  saved checkpoint PATH``). Lightning's ``ModelCheckpoint`` logs ``An SIGTERMException was raised
  with message: , saved checkpoint to PATH`` (the exception has no message); while an
  interruption is handled that line is reworded (``SIGTERM: saved checkpoint PATH``), or left out
  where ours names the same save. Nothing relies on Lightning's wording: if it changes, its line
  passes as it is and ours still says what happened.

Under DDP the ranks must stop at the same batch: send SIGTERM to the launching process (rank 0),
which Lightning forwards to the other ranks and broadcasts; a terminal's Ctrl+C reaches every
rank of the foreground process group.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from trainperf.recording.run_files import Interruption

log = logging.getLogger(__name__)

__all__ = [
    "InterruptCheckpoint",
    "Interruption",
    "announce",
    "interruption_of",
    "interruption_words",
    "set_exit_code",
]

#: Trainers whose run a first SIGINT asked to stop at the next batch end (see InterruptCheckpoint).
_sigint_requested: weakref.WeakSet[L.Trainer] = weakref.WeakSet()


def _position(trainer: L.Trainer) -> tuple[int, int, bool]:
    """The current epoch, the training batches of it processed so far and whether it is
    between two epochs (then 0 batches: the batch counts still hold the closed epoch's)."""
    fit_loop = trainer.fit_loop
    epochs = fit_loop.epoch_progress.current  # typed as its base, a _ProcessedTracker
    started, completed = int(getattr(epochs, "started", 0)), int(epochs.completed)
    epoch = int(trainer.current_epoch)
    if started <= completed:  # no epoch open (closed, or none yet)
        return epoch, 0, completed > 0
    batches = fit_loop.epoch_loop.batch_progress.current
    return epoch, int(getattr(batches, "processed", batches.completed)), False


def interruption_of(trainer: L.Trainer, exception: BaseException) -> Interruption | None:
    """The interruption that ``exception`` (from ``on_exception``) is, or ``None`` for a
    failure. SIGTERM: Lightning's ``SIGTERMException`` or ``trainer.received_sigterm``; SIGINT:
    a ``KeyboardInterrupt`` or the stop a first SIGINT asked for."""
    if isinstance(exception, KeyboardInterrupt):
        name, safe = "SIGINT", False
    elif isinstance(exception, SIGTERMException) or trainer.received_sigterm:
        name = "SIGINT" if trainer in _sigint_requested else "SIGTERM"
        safe = isinstance(exception, SIGTERMException)
    else:
        return None
    epoch, batch, between = _position(trainer)
    return Interruption(name, epoch, batch, safe, between_epochs=between and trainer.training)


def set_exit_code(exception: BaseException, interruption: Interruption) -> None:
    """Give Lightning's ``SIGTERMException`` (a ``SystemExit`` with no code, i.e. exit 0) the
    code 128 + signal, so the process exits with it (idempotent; other exceptions untouched)."""
    if isinstance(exception, SystemExit) and exception.code in (None, 0):
        exception.code = interruption.exit_code


def interruption_words(interruption: Interruption) -> str:
    """``SIGTERM received at epoch 1, after batch 2: the run stops there (exit code 143)``."""
    if interruption.between_epochs:
        where = f"between epochs {interruption.epoch - 1} and {interruption.epoch}"
    elif interruption.safe:
        where = f"at epoch {interruption.epoch}, after batch {interruption.batch}"
    else:
        where = f"at epoch {interruption.epoch}, in batch {interruption.batch + 1}"
    return (
        f"{interruption.signal} received {where}: the run stops there "
        f"(exit code {interruption.exit_code})"
    )


#: Lightning's ModelCheckpoint.on_exception line: "An SIGTERMException was raised with message:
#: <the exception's text, empty for SIGTERM>, saved checkpoint to <path>".
_LIGHTNING_SAVE_LINE = re.compile(
    r"An? (?:SIGTERMException|KeyboardInterrupt) was raised with message:\s*(?P<text>.*?), "
    r"saved checkpoint to (?P<path>.+)",
    re.DOTALL,
)


class _SaveLineWords(logging.Filter):
    """Rewords Lightning's checkpoint-on-exception line while an interruption is handled
    (``signal`` set): ``SIGTERM: saved checkpoint PATH``; while ``muted`` (our own line names the
    save) it is left out. Other records pass untouched."""

    def __init__(self) -> None:
        super().__init__("trainperf.interruption")
        self.signal: str | None = None
        self.muted = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.signal is None:
            return True
        try:
            match = _LIGHTNING_SAVE_LINE.fullmatch(record.getMessage().strip())
        except Exception:
            return True
        if match is None:
            return True
        if self.muted:
            return False
        record.msg, record.args = f"{self.signal}: saved checkpoint {match['path'].strip()}", ()
        return True


_save_line = _SaveLineWords()


def _lightning_info_log() -> logging.Logger | None:
    """The logger Lightning's ``rank_zero_info`` writes to (it is set by Lightning at import)."""
    try:
        from lightning_utilities.core import rank_zero
    except ImportError:
        return None
    logger = getattr(rank_zero, "log", None)
    return logger if isinstance(logger, logging.Logger) else None


#: Trainers whose interruption was announced, with the exception's id (one line per run).
_announced: weakref.WeakKeyDictionary[L.Trainer, int] = weakref.WeakKeyDictionary()


def announce(trainer: L.Trainer, exception: BaseException, interruption: Interruption) -> None:
    """Say once per interruption (rank zero, a warning: it shows without logging set up) what
    happened, and reword Lightning's checkpoint line that follows (module doc)."""
    _save_line.signal = interruption.signal
    logger = _lightning_info_log()
    if logger is not None and _save_line not in logger.filters:
        logger.addFilter(_save_line)
    if _announced.get(trainer) == id(exception):
        return
    _announced[trainer] = id(exception)
    if trainer.is_global_zero:
        log.warning(interruption_words(interruption))


@contextmanager
def _own_save_line() -> Iterator[None]:
    """Leave Lightning's checkpoint line out inside: the caller says the save itself."""
    _save_line.muted = True
    try:
        yield
    finally:
        _save_line.muted = False


class InterruptCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` (same arguments) that also saves when the run is
    interrupted by SIGTERM or SIGINT at the end of a batch; a failure saves nothing.

    ``ocr-train`` uses it as ``callbacks.last_checkpoint`` (``filename: last``): the latest epoch
    and any interruption both land in ``<run dir>/checkpoints/last.ckpt``, which
    ``ckpt_path=...`` resumes. (It replaces that entry rather than adding a callback: Lightning
    calls every callback at every step.)

    A first SIGINT (Ctrl+C) in the main thread asks the run to stop at the end of the current
    batch, as Lightning does for SIGTERM; a second one raises ``KeyboardInterrupt`` at once (no
    checkpoint then: the step was cut in the middle). The interruption's ``SystemExit`` gets code
    128 + signal. Under DDP every rank takes part in the save (``trainer.save_checkpoint``)."""

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.pop("save_on_exception", True) is not True:
            raise ValueError("InterruptCheckpoint: save_on_exception is always on (interruptions)")
        super().__init__(save_on_exception=True, **kwargs)
        self._previous: Any = None
        self._installed = False

    # -- SIGINT: stop at the next batch end -----------------------------------------------------

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        _sigint_requested.discard(trainer)
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        trainer_ref = weakref.ref(trainer)

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            running = trainer_ref()
            if running is None or running in _sigint_requested:
                self._restore()
                raise KeyboardInterrupt
            _sigint_requested.add(running)
            log.warning("SIGINT: stopping after the current batch (Ctrl+C again: at once)")

        self._previous = signal.signal(signal.SIGINT, on_sigint)
        self._installed = True

    def _restore(self) -> None:
        if self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous)
        self._installed = False

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
        if trainer in _sigint_requested:
            raise SIGTERMException(128 + signal.SIGINT)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        if trainer in _sigint_requested:
            raise SIGTERMException(128 + signal.SIGINT)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore()
        super().teardown(trainer, pl_module, stage)

    # -- the interruption ---------------------------------------------------------------------

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._restore()
        interruption = interruption_of(trainer, exception)
        if interruption is None:
            return  # a failure: no checkpoint, its traceback goes on
        set_exit_code(exception, interruption)
        announce(trainer, exception, interruption)
        if interruption.safe and trainer.state.fn == "fit":
            before = self._latest_save()
            with _own_save_line():
                super().on_exception(trainer, pl_module, exception)  # saves (not in sanity check)
            saved = self._latest_save()
            if saved is not None and saved != before and trainer.is_global_zero:
                log.warning("%s: saved checkpoint %s", interruption.signal, saved[0])

    def _latest_save(self) -> tuple[str, int] | None:
        """The file of this callback's latest save and its modification time (a save to the
        same ``last.ckpt`` changes the time), or ``None``."""
        path = str(getattr(self, "_last_checkpoint_saved", "") or self.last_model_path or "")
        try:
            return (path, os.stat(path).st_mtime_ns) if path else None
        except OSError:
            return None
