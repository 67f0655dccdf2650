"""Which errors are the user's to fix, and how every ``ocr-*`` command reports them.

An *expected* error is bad input the user can correct (a missing dataset folder, a malformed
annotation, a bad config value, a missing checkpoint, a file that is not a trace): the command
prints one line ``<prog>: error: <message>`` on stderr and exits with :data:`EXIT_BAD_INPUT`,
without a traceback. Anything else is a bug and keeps its traceback. ``HYDRA_FULL_ERROR=1``
(Hydra's convention, honoured by every command here) re-raises expected errors too.

Expected are, by type only (never by where they were raised):

* :class:`ocr.errors.InputError` and its subclasses: every bad-input error of the project
  (annotations, images, traces, run directories, baselines, reports, config values, a missing
  or unreadable checkpoint, a dataset folder the generator may not write into, a run folder
  that holds another run) derives from it;
* ``OSError`` subclasses about paths (``FileNotFoundError``, ``NotADirectoryError``,
  ``IsADirectoryError``, ``FileExistsError``, ``PermissionError``) that name the path: the OS
  refused it;
* OmegaConf's missing-value / interpolation errors (a ``???`` left unset, a bad ``${...}``);
* Hydra's ``InstantiationException`` when the error it wraps is expected (a constructor's
  validation).

A plain ``ValueError`` (or any other exception) is a bug wherever it was raised, ``ocr/``
included, and keeps its traceback and a non-2 exit status.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from ocr.errors import InputError

__all__ = [
    "EXIT_BAD_INPUT",
    "expected_errors",
    "full_error_requested",
    "is_expected",
    "message_of",
    "report_error",
]

EXIT_BAD_INPUT = 2

_PATH_ERRORS: tuple[type[OSError], ...] = (
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    FileExistsError,
    PermissionError,
)
# torch re-raises an error from a DataLoader worker with the worker's traceback in the message
_WORKER_TRACEBACK = "Original Traceback (most recent call last):"


def is_expected(exc: BaseException) -> bool:
    """Whether ``exc`` is bad input the user can fix (see the module docstring)."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    if isinstance(exc, InstantiationException):
        return exc.__cause__ is not None and is_expected(exc.__cause__)
    if isinstance(exc, (InputError, MissingMandatoryValue, InterpolationResolutionError)):
        return True
    # the OS refused a named path (mkdir, open, rename...): the message says which
    return isinstance(exc, _PATH_ERRORS) and exc.filename is not None


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


#: True while :mod:`ocr.config_errors` has set ``HYDRA_FULL_ERROR`` itself (so that Hydra raises
#: its composition errors): the user did not ask for tracebacks.
full_error_set_by_us = False


def full_error_requested() -> bool:
    """``HYDRA_FULL_ERROR=1`` (any value but empty / ``0``) set by the user: show tracebacks."""
    if full_error_set_by_us:
        return False
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
