"""Which errors are the user's to fix, and how every ``ocr-*`` command reports them.

An *expected* error is bad input the user can correct (a missing dataset folder, a malformed
annotation, a bad config value, a missing checkpoint, a file that is not a trace): the command
prints one line ``<prog>: error: <message>`` on stderr and exits with :data:`EXIT_BAD_INPUT`,
without a traceback. Anything else is a bug and keeps its traceback. ``HYDRA_FULL_ERROR=1``
(Hydra's convention, honoured by every command here) re-raises expected errors too.

Expected are:

* our own input error types (:func:`_own_error_types`: annotations, images, traces, run
  directories, baselines, reports, a dataset folder the generator may not write into, a run
  folder that holds another run) wherever they are raised;
* ``OSError`` subclasses about paths (``FileNotFoundError``, ``NotADirectoryError``,
  ``IsADirectoryError``, ``FileExistsError``, ``PermissionError``) that name the path (the OS
  refused it), or that our code raised;
* ``ValueError`` when *our* code raised it: a validation message written for the user, whereas
  a ``ValueError`` thrown inside a library is more likely a bug and keeps its traceback;
* OmegaConf's missing-value / interpolation errors (a ``???`` left unset, a bad ``${...}``);
* Hydra's ``InstantiationException`` when the error it wraps is expected (a constructor's
  validation).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

__all__ = [
    "EXIT_BAD_INPUT",
    "expected_errors",
    "is_expected",
    "message_of",
    "report_error",
]

EXIT_BAD_INPUT = 2

_PACKAGE_DIR = Path(__file__).resolve().parent
_PATH_ERRORS: tuple[type[OSError], ...] = (
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    FileExistsError,
    PermissionError,
)
# torch re-raises an error from a DataLoader worker with the worker's traceback in the message
_WORKER_TRACEBACK = "Original Traceback (most recent call last):"


def _own_error_types() -> tuple[type[BaseException], ...]:
    """Our input-error classes. Imported lazily: ``ocr-perf --help`` must not import torch."""
    from ocr.data.annotations import AnnotationError
    from ocr.data.synth import OutputFolderError
    from ocr.data.transforms import ImageLoadError
    from ocr.perf.baseline import BaselineError
    from ocr.perf.records import RunDirError
    from ocr.perf.report.load import ReportInputError
    from ocr.perf.trace.load import TraceError
    from ocr.perf.tryout.command import TryInputError
    from ocr.run_folder import RunFolderInUseError

    return (
        AnnotationError,
        OutputFolderError,
        RunFolderInUseError,
        ImageLoadError,
        TraceError,
        RunDirError,
        BaselineError,
        ReportInputError,
        TryInputError,
    )


def _raised_by_our_code(tb: TracebackType | None) -> bool:
    """True when the innermost frame of ``tb`` is in the ``ocr`` package (a deliberate raise)."""
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    try:
        return Path(last.tb_frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE_DIR)
    except (OSError, ValueError):
        return False


def is_expected(exc: BaseException) -> bool:
    """Whether ``exc`` is bad input the user can fix (see the module docstring)."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    if isinstance(exc, InstantiationException):
        return exc.__cause__ is not None and is_expected(exc.__cause__)
    if isinstance(exc, (*_own_error_types(), MissingMandatoryValue, InterpolationResolutionError)):
        return True
    if isinstance(exc, _PATH_ERRORS) and exc.filename is not None:
        return True  # the OS refused a named path (mkdir, open, rename...): the message says which
    if isinstance(exc, (ValueError, *_PATH_ERRORS)):
        return _raised_by_our_code(exc.__traceback__)
    return False


def message_of(exc: BaseException) -> str:
    """The one-line (or few-line) message for ``exc``: the wrapped error of an
    ``InstantiationException``, without a DataLoader worker's traceback text."""
    from hydra.errors import InstantiationException

    if isinstance(exc, InstantiationException) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc).strip()
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"  # not "[Errno 2] No such file...: 'x'"
    if _WORKER_TRACEBACK in text:
        # "Caught X in DataLoader worker process 0.\nOriginal Traceback ...\nX: message"
        text = text.rsplit("\n", 1)[-1].split(": ", 1)[-1]
    return text or type(exc).__name__


def full_error_requested() -> bool:
    """``HYDRA_FULL_ERROR=1`` (any value but empty / ``0``): show tracebacks."""
    return os.environ.get("HYDRA_FULL_ERROR", "") not in ("", "0")


def report_error(prog: str, exc: BaseException | str) -> None:
    """Print ``<prog>: error: <message>`` on stderr (flushing stdout first so the order holds)."""
    sys.stdout.flush()
    text = exc if isinstance(exc, str) else message_of(exc)
    print(f"{prog}: error: {text}", file=sys.stderr, flush=True)


@contextmanager
def expected_errors(prog: str) -> Iterator[None]:
    """Turn an expected error raised in the block into one message and ``SystemExit(2)``.

    ``SystemExit`` is a ``BaseException``: Hydra's ``run_and_report`` (which catches
    ``Exception`` and prints a stripped traceback) lets it through.
    """
    try:
        yield
    except Exception as exc:
        if full_error_requested() or not is_expected(exc):
            raise
        report_error(prog, exc)
        raise SystemExit(EXIT_BAD_INPUT) from None
